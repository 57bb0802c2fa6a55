//! Whole runs of the one event loop with the invariants of docs/invariants.md checked after
//! every event (the library's tests build with the checks on, release included): colocated
//! runs under preemption, prefix caching, reserved output KV, time-outs, failures and an
//! autoscaler; disaggregated runs under every decode router and link; and the trace a run
//! shows a sink.

use super::simulate_traced;
use crate::scenario::Scenario;
use crate::sim::{SimOutput, TraceOccupancy, TraceSink, TraceSpan};
use crate::workload::RequestGenerator;

/// Runs `text` with `limits.fast_forward = fast_forward`, tracing into `trace`.
fn run(text: &str, fast_forward: bool, trace: Option<&mut dyn TraceSink>) -> SimOutput {
    let set = [format!("limits.fast_forward={fast_forward}")];
    let sc = Scenario::parse(text, "test", &set).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let r = sc.resolve("test").unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut gen = RequestGenerator::new(&sc.workload, sc.seed, "test").expect("a workload");
    match r.pool_step_models().expect("step models") {
        Some((prefill, decode)) => simulate_traced(&r.sim, &prefill, &decode, &mut gen, trace),
        None => {
            let step = r.step_model().expect("a step model");
            simulate_traced(&r.sim, &step, &step, &mut gen, trace)
        }
    }
}

/// A Llama-3.1-8B / H100 scenario with `deployment` and `rest` added.
fn scenario(deployment: &str, rest: &str) -> String {
    format!(
        "seed = 3\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n{deployment}\n\
         [workload]\nnum_requests = 300\n\
         [workload.input]\nkind = \"uniform\"\nmean = 900\nrange_ratio = 0.9\n\
         [workload.output]\nkind = \"uniform\"\nmean = 150\nrange_ratio = 0.9\n{rest}"
    )
}

/// Runs with and without fast-forward; every request is accounted for (INV-1) and every
/// block is back (INV-4); the in-loop checks did the rest.
fn check(text: &str) -> SimOutput {
    let mut last = None;
    for ff in [false, true] {
        let out = run(text, ff, None);
        let m = &out.metrics;
        assert!(out.truncated.is_none(), "{:?}\n{text}", out.truncated);
        assert_eq!(
            m.arrived,
            m.completed + m.rejected + m.timed_out + m.lost,
            "{text}"
        );
        assert_eq!(out.blocks_held_at_end, 0, "{text}");
        if let Some(prev) = &last {
            let prev: &SimOutput = prev;
            assert_eq!(prev.metrics.completed, m.completed, "{text}");
            assert_eq!(prev.metrics.iterations, m.iterations, "{text}");
            assert_eq!(prev.metrics.generated_tokens, m.generated_tokens, "{text}");
        }
        last = Some(out);
    }
    last.expect("two runs")
}

#[test]
fn colocated_runs_keep_the_invariants() {
    let poisson = "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 30\n";
    let prefix = "[workload.prefix]\ntokens = 200\ngroups = 3\n";
    let cases = [
        // A KV cache of a few thousand tokens: requests preempt each other.
        ("replicas = 2\nrouter = \"least-kv\"\n[scheduler]\ngpu_memory_utilization = 0.24\nenable_prefix_caching = true", format!("{prefix}{poisson}")),
        ("[scheduler]\ngpu_memory_utilization = 0.24\nreserve_output_kv = true\nenable_prefix_caching = true", format!("{prefix}{poisson}")),
        ("[scheduler]\nbatching = \"static\"\nmax_num_seqs = 16", poisson.to_string()),
        ("replicas = 3\nrouter = \"power-of-two\"", format!("{poisson}[slo]\nttft_ms = 300\nadmission_control = true\nqueue_timeout_s = 0.5\n")),
        ("[scheduler]\nenable_chunked_prefill = false\nmax_model_len = 2048", "[workload.arrival]\nkind = \"offline\"\n".to_string()),
    ];
    for (i, (deployment, rest)) in cases.iter().enumerate() {
        let out = check(&scenario(deployment, rest));
        assert!(out.metrics.completed > 0);
        if i == 0 {
            assert!(out.metrics.preemptions > 0, "the small cache preempts");
        }
    }
}

#[test]
fn failures_and_the_autoscaler_keep_the_invariants() {
    let poisson = "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 20\n";
    for on_failure in ["retry", "fail"] {
        let faults = format!(
            "{poisson}[faults]\nfailures = [{{ time_s = 3.0, replicas = 1, repair_s = 4.0 }}]\n\
             mtbf_hours = 0.002\nrepair_s = 2.0\non_failure = \"{on_failure}\"\n"
        );
        let out = check(&scenario("replicas = 3", &faults));
        assert!(out.metrics.retried + out.metrics.lost > 0, "{on_failure}");
    }
    let autoscale = format!(
        "{poisson}[autoscale]\npolicy = \"queue\"\ninterval_s = 1.0\nwindow_s = 1.0\n\
         scale_up_delay_s = 2.0\nscale_down_cooldown_s = 1.0\nmin_replicas = 1\nmax_replicas = 4\n"
    );
    check(&scenario("", &autoscale));
}

#[test]
fn disaggregated_runs_keep_the_invariants_under_every_decode_router() {
    for (router, link) in [
        ("round-robin", "kv_transfer_bandwidth_gb_s = 0.5"),
        ("least-outstanding", "kv_transfer_layerwise = true"),
        (
            "least-kv",
            "kv_transfer_latency_us = 0.0\nkv_transfer_bandwidth_gb_s = inf",
        ),
        ("power-of-two", "kv_transfer_latency_us = 3000.0"),
    ] {
        let deployment = format!(
            "mode = \"disaggregated\"\n{link}\n[deployment.prefill]\nreplicas = 2\n\
             [deployment.decode]\nreplicas = 3\nrouter = \"{router}\""
        );
        let rest = "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 25\n\
                    [slo]\nqueue_timeout_s = 1.0\n";
        let out = check(&scenario(&deployment, rest));
        let d = out.disaggregation.expect("P/D statistics");
        assert_eq!(d.blocks_held_at_end, 0, "{router}");
        assert_eq!(d.in_transfer, 0, "{router}");
    }
}

/// An iteration that would end beyond the clock (a step-time scale of 1e13, past the
/// scenario's bounds but open to a library user) stops the run at the next event, saying why
/// (`metrics.stop`), colocated and disaggregated, the in-loop checks holding to the end and
/// the trace showing no time past the clock.
#[test]
fn an_iteration_beyond_the_clock_stops_the_run_saying_why() {
    let poisson = "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 20\n";
    let pd = "mode = \"disaggregated\"\n[deployment.prefill]\nreplicas = 1\n\
              [deployment.decode]\nreplicas = 2";
    for deployment in ["replicas = 2", pd] {
        let text = scenario(deployment, poisson);
        let sc = Scenario::parse(&text, "test", &[]).unwrap();
        let mut r = sc.resolve("test").unwrap();
        r.scenario.deployment.step_time_scale = 1e13;
        let mut gen = RequestGenerator::new(&sc.workload, sc.seed, "test").expect("a workload");
        let mut rec = Recorder::default();
        let out = match r.pool_step_models().expect("step models") {
            Some((p, d)) => simulate_traced(&r.sim, &p, &d, &mut gen, Some(&mut rec)),
            None => {
                let step = r.step_model().expect("a step model");
                simulate_traced(&r.sim, &step, &step, &mut gen, Some(&mut rec))
            }
        };
        let why = out.truncated.unwrap_or_default();
        assert!(
            why.contains("iteration") && why.contains("clock"),
            "{deployment}: {why}"
        );
        assert_eq!(out.metrics.completed, 0, "{deployment}");
        assert!(
            rec.spans.iter().all(|s| s.end_ns <= crate::clock::MAX_NS),
            "{deployment}"
        );
    }
}

/// Keeps what a run shows a trace.
#[derive(Default)]
struct Recorder {
    spans: Vec<TraceSpan>,
    occupancies: u64,
}

impl TraceSink for Recorder {
    fn span(&mut self, span: &TraceSpan) {
        self.spans.push(*span);
    }

    fn occupancy(&mut self, _: &TraceOccupancy) {
        self.occupancies += 1;
    }
}

#[test]
fn the_trace_shows_every_iteration_once_and_each_replica_one_at_a_time() {
    let deployment = "mode = \"disaggregated\"\n[deployment.prefill]\nreplicas = 1\n\
                      [deployment.decode]\nreplicas = 2";
    let text = scenario(
        deployment,
        "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 2\n",
    );
    for ff in [false, true] {
        let mut rec = Recorder::default();
        let out = run(&text, ff, Some(&mut rec));
        let iterations: u64 = rec.spans.iter().map(|s| s.iterations).sum();
        assert_eq!(iterations, out.metrics.iterations, "fast-forward {ff}");
        let runs = rec.spans.iter().filter(|s| s.iterations > 1).count();
        assert_eq!(runs > 0, ff, "fast-forwarded spans: {runs}");
        // Per replica, spans follow each other without overlapping.
        let mut by_replica = std::collections::BTreeMap::new();
        for s in &rec.spans {
            assert!(s.end_ns > s.start_ns, "{s:?}");
            let end = by_replica.entry((s.pool.name(), s.replica)).or_insert(0);
            assert!(s.start_ns >= *end, "{s:?} starts before {end}");
            *end = s.end_ns;
        }
        assert!(rec.occupancies > 0);
    }
}

#[test]
fn content_addressed_prefix_caching_keeps_the_invariants() {
    // The Mooncake excerpt (block identities) on small caches: identities are evicted, long
    // prompts preempt, and the in-loop recount (INV-3) covers the identities' references.
    for (router, extra) in [
        ("prefix-aware", ""),
        ("round-robin", "reserve_output_kv = true\n"),
    ] {
        let text = format!(
            "seed = 3\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\nreplicas = 2\n\
             router = \"{router}\"\n[scheduler]\ngpu_memory_utilization = 0.3\nmax_model_len = 16384\n\
             enable_prefix_caching = true\n{extra}[workload.arrival]\nkind = \"trace\"\n\
             format = \"mooncake\"\ntime_scale = 0.2\n\
             path = \"tests/data/traces/mooncake-conversation-head300.jsonl\"\n"
        );
        let out = check(&text);
        assert!(out.metrics.completed > 100, "{router}");
        assert!(out.metrics.prefix_cache_hit_tokens > 0, "{router}");
        let (hit, prompt) = out
            .prefix_cache_tokens
            .iter()
            .fold((0, 0), |(h, p), t| (h + t.hit, p + t.prompt));
        assert!(hit > 0 && hit < prompt, "{router}: {hit} of {prompt}");
        if router == "prefix-aware" {
            assert!(out.metrics.preemptions > 0, "the small cache preempts");
        }
    }
}
