//! Whole runs of the one event loop with the invariants of docs/invariants.md checked after
//! every event (the library's tests build with the checks on, release included): colocated
//! runs under preemption, prefix caching, reserved output KV, time-outs, failures and an
//! autoscaler; disaggregated runs under every decode router and link; and the trace a run
//! shows a sink.

use super::simulate_traced;
use crate::engine::EngineProfile;
use crate::gpu::GpuProfile;
use crate::model::load_model;
use crate::precision::{KvDtype, WeightDtype};
use crate::roofline::{plan_memory, Deployment, DraftMemory, StepTimeModel};
use crate::sim::{
    AutoscaleConfig, AutoscalePolicy, DisaggConfig, FailureAt, FaultConfig, Limits, OnFailure,
    PoolConfig, RouterKind, SchedulerConfig, SimConfig, SimOutput, SloPolicy, TraceOccupancy,
    TraceSink, TraceSpan,
};
use crate::workload::{RequestGenerator, WorkloadConfig};

/// The simulator's own inputs for Llama-3.1-8B in BF16 on H100 SXM replicas (TP 1) under
/// vLLM's defaults, built from the catalog, the engine profile and the memory plan without a
/// scenario; each test changes the fields it is about.
struct Setup {
    deployment: Deployment,
    sim: SimConfig,
    workload: WorkloadConfig,
    seed: u64,
    /// Multiplies every step time (a library user's knob, beyond a scenario's bounds).
    step_time_scale: f64,
}

impl Setup {
    /// One replica (least-outstanding router) at vLLM's memory fraction; `workload` is the
    /// body of a scenario's `[workload]` table (its sub-tables as `[input]`, `[arrival]`, ...).
    fn new(workload: &str) -> Setup {
        let model = load_model("llama-3.1-8b").expect("catalog model");
        let gpu = GpuProfile::load("h100-sxm").expect("catalog GPU");
        let mut engine = EngineProfile::load("vllm").expect("engine profile");
        engine.scheduler.for_gpu(&gpu);
        let deployment =
            Deployment::tensor_parallel(model, gpu, engine, 1, WeightDtype::Bf16, KvDtype::Bf16);
        let fraction = deployment.engine.scheduler.gpu_memory_utilization;
        let host_ns = crate::clock::secs_to_ns(deployment.engine.host.per_request_s);
        let sim = SimConfig {
            replicas: 1,
            pipeline_stages: 1,
            gpus_per_replica: 1,
            router: RouterKind::default(),
            scheduler: scheduler(&deployment, fraction),
            slo: SloPolicy::default(),
            limits: Limits::default(),
            max_concurrency: None,
            seed: 3,
            frontend_delay_ns: host_ns.expect("a host time on the clock"),
            request_log_capacity: 0,
            autoscale: None,
            faults: None,
            period_ns: 0,
            disaggregation: None,
        };
        let workload = toml::from_str(workload).unwrap_or_else(|e| panic!("{e}\n{workload}"));
        Setup {
            deployment,
            sim,
            workload,
            seed: 3,
            step_time_scale: 1.0,
        }
    }

    /// 300 requests of 90 to 1,710 prompt and 15 to 285 output tokens (uniform), arriving as
    /// `arrival` (the body of `[workload.arrival]`) says.
    fn uniform(arrival: &str) -> Setup {
        Setup::new(&format!(
            "num_requests = 300\n[input]\nkind = \"uniform\"\nmean = 900\nrange_ratio = 0.9\n\
             [output]\nkind = \"uniform\"\nmean = 150\nrange_ratio = 0.9\n[arrival]\n{arrival}"
        ))
    }

    /// `replicas` replicas behind `router`.
    fn replicas(mut self, replicas: u32, router: RouterKind) -> Setup {
        self.sim.replicas = replicas;
        self.sim.router = router;
        self
    }

    /// The KV cache that `fraction` of GPU memory leaves (vLLM's `gpu_memory_utilization`).
    fn memory_fraction(mut self, fraction: f64) -> Setup {
        let s = scheduler(&self.deployment, fraction);
        self.sim.scheduler.kv_blocks = s.kv_blocks;
        self.sim.scheduler.max_model_len = s.max_model_len;
        self
    }

    /// A prefill pool and a decode pool (decode behind `router`) of this replica, with the
    /// default link (50 GB/s, 20 us) that `link` may change.
    fn disaggregated(
        mut self,
        prefill: u32,
        decode: u32,
        router: RouterKind,
        link: impl FnOnce(&mut DisaggConfig),
    ) -> Setup {
        let pool = |replicas, router| PoolConfig {
            replicas,
            gpus_per_replica: 1,
            router,
            scheduler: self.sim.scheduler.clone(),
        };
        let m = &self.deployment.model;
        let mut d = DisaggConfig {
            prefill: pool(prefill, RouterKind::default()),
            decode: pool(decode, router),
            bandwidth_bytes_per_s: 50e9,
            latency_ns: 20_000,
            kv_bytes_per_token: m.kv_bytes_per_token(KvDtype::Bf16.bytes()).round() as u64,
            layers: m.num_layers as u32,
            layerwise: false,
        };
        link(&mut d);
        self.sim.replicas = prefill + decode;
        self.sim.router = router;
        self.sim.disaggregation = Some(d);
        self
    }

    /// This setup with `change` made to the simulator's configuration.
    fn with(mut self, change: impl FnOnce(&mut SimConfig)) -> Setup {
        change(&mut self.sim);
        self
    }

    /// Runs with `fast_forward`, tracing into `trace`.
    fn run(&self, fast_forward: bool, trace: Option<&mut dyn TraceSink>) -> SimOutput {
        let mut cfg = self.sim.clone();
        cfg.limits.fast_forward = fast_forward;
        let s = &cfg.scheduler;
        let tokens = s.max_num_batched_tokens + s.max_num_seqs;
        let step = StepTimeModel::new(self.deployment.clone(), tokens)
            .expect("a step-time model")
            .with_time_scale(self.step_time_scale);
        let mut gen = RequestGenerator::new(&self.workload, self.seed, "test").expect("a workload");
        simulate_traced(&cfg, &step, &step, &mut gen, trace)
    }
}

/// vLLM's scheduler limits for `dep`, with the KV cache that `fraction` of GPU memory leaves
/// and the model's context capped by it.
fn scheduler(dep: &Deployment, fraction: f64) -> SchedulerConfig {
    let e = &dep.engine.scheduler;
    let memory = plan_memory(
        dep,
        fraction,
        e.max_num_batched_tokens,
        e.max_num_seqs,
        e.block_size,
        e.block_size as u64,
        &DraftMemory::default(),
    )
    .expect("the model fits");
    let context = dep.model.max_position_embeddings.min(memory.kv_tokens);
    SchedulerConfig {
        max_num_seqs: e.max_num_seqs,
        max_num_batched_tokens: e.max_num_batched_tokens,
        chunked_prefill: e.enable_chunked_prefill,
        prefix_caching: e.enable_prefix_caching,
        block_size: e.block_size,
        kv_blocks: memory.kv_blocks,
        max_model_len: context as u32,
        static_batching: false,
        reserve_output_kv: e.reserve_output_kv,
        spec_kv_slots: 0,
        spec_max_batch_seqs: 0,
        plans_ahead: false,
        offload: None,
    }
}

/// Runs with and without fast-forward; every request is accounted for (INV-1) and every
/// block is back (INV-4); the in-loop checks did the rest.
fn check(setup: &Setup, what: &str) -> SimOutput {
    let mut last = None;
    for ff in [false, true] {
        let out = setup.run(ff, None);
        let m = &out.metrics;
        assert!(out.truncated.is_none(), "{:?}\n{what}", out.truncated);
        assert_eq!(
            m.arrived,
            m.completed + m.rejected + m.timed_out + m.lost,
            "{what}"
        );
        assert_eq!(out.blocks_held_at_end, 0, "{what}");
        if let Some(prev) = &last {
            let prev: &SimOutput = prev;
            assert_eq!(prev.metrics.completed, m.completed, "{what}");
            assert_eq!(prev.metrics.iterations, m.iterations, "{what}");
            assert_eq!(prev.metrics.generated_tokens, m.generated_tokens, "{what}");
        }
        last = Some(out);
    }
    last.expect("two runs")
}

#[test]
fn colocated_runs_keep_the_invariants() {
    let poisson = "kind = \"poisson\"\nrate_per_s = 30\n";
    let prefix = "[prefix]\ntokens = 200\ngroups = 3\n";
    let small_cache_with_prefixes = |s: &mut SimConfig| {
        s.scheduler.prefix_caching = true;
    };
    let cases = [
        // A KV cache of a few thousand tokens: requests preempt each other.
        (
            "two least-KV replicas, small caches, prefix caching",
            Setup::uniform(&format!("{poisson}{prefix}"))
                .replicas(2, RouterKind::LeastKv)
                .memory_fraction(0.24)
                .with(small_cache_with_prefixes),
        ),
        (
            "output KV reserved, small cache, prefix caching",
            Setup::uniform(&format!("{poisson}{prefix}"))
                .memory_fraction(0.24)
                .with(|s| {
                    small_cache_with_prefixes(s);
                    s.scheduler.reserve_output_kv = true;
                }),
        ),
        (
            "static batches of 16",
            Setup::uniform(poisson).with(|s| {
                s.scheduler.static_batching = true;
                s.scheduler.max_num_seqs = 16;
            }),
        ),
        (
            "three power-of-two replicas, admission control, queue time-out",
            Setup::uniform(poisson)
                .replicas(3, RouterKind::PowerOfTwo)
                .with(|s| {
                    s.slo.ttft_ns = Some(300_000_000);
                    s.slo.admission_control = true;
                    s.slo.queue_timeout_ns = Some(500_000_000);
                }),
        ),
        (
            "offline, whole prompts, 2,048-token context",
            Setup::uniform("kind = \"offline\"\n").with(|s| {
                s.scheduler.chunked_prefill = false;
                s.scheduler.max_model_len = 2048;
            }),
        ),
    ];
    for (i, (what, setup)) in cases.iter().enumerate() {
        let out = check(setup, what);
        assert!(out.metrics.completed > 0, "{what}");
        if i == 0 {
            assert!(out.metrics.preemptions > 0, "the small cache preempts");
        }
    }
}

#[test]
fn failures_and_the_autoscaler_keep_the_invariants() {
    let poisson = "kind = \"poisson\"\nrate_per_s = 20\n";
    for on_failure in [OnFailure::Retry, OnFailure::Fail] {
        let setup = Setup::uniform(poisson)
            .replicas(3, RouterKind::default())
            .with(|s| {
                s.faults = Some(FaultConfig {
                    failures: vec![FailureAt {
                        time_ns: 3_000_000_000,
                        replicas: 1,
                        repair_ns: 4_000_000_000,
                    }],
                    // 0.002 hours
                    mtbf_ns: Some(7_200_000_000),
                    repair_ns: 2_000_000_000,
                    on_failure,
                })
            });
        let out = check(&setup, &format!("{on_failure:?}"));
        assert!(out.metrics.retried + out.metrics.lost > 0, "{on_failure:?}");
    }
    let setup = Setup::uniform(poisson).with(|s| {
        s.autoscale = Some(AutoscaleConfig {
            policy: AutoscalePolicy::Queue {
                high: 4.0,
                low: 0.5,
            },
            min_replicas: 1,
            max_replicas: 4,
            initial_replicas: 1,
            scale_up_delay_ns: 2_000_000_000,
            scale_down_cooldown_ns: 1_000_000_000,
            step: 1,
            interval_ns: 1_000_000_000,
            window_ns: 1_000_000_000,
        })
    });
    check(&setup, "queue autoscaler");
}

#[test]
fn disaggregated_runs_keep_the_invariants_under_every_decode_router() {
    type Link = fn(&mut DisaggConfig);
    let links: [(RouterKind, Link); 4] = [
        (RouterKind::RoundRobin, |d| d.bandwidth_bytes_per_s = 0.5e9),
        (RouterKind::LeastOutstanding, |d| d.layerwise = true),
        (RouterKind::LeastKv, |d| {
            d.latency_ns = 0;
            d.bandwidth_bytes_per_s = f64::INFINITY;
        }),
        (RouterKind::PowerOfTwo, |d| d.latency_ns = 3_000_000),
    ];
    for (router, link) in links {
        let setup = Setup::uniform("kind = \"poisson\"\nrate_per_s = 25\n")
            .disaggregated(2, 3, router, link)
            .with(|s| s.slo.queue_timeout_ns = Some(1_000_000_000));
        let out = check(&setup, &format!("{router:?}"));
        let d = out.disaggregation.expect("P/D statistics");
        assert_eq!(d.blocks_held_at_end, 0, "{router:?}");
        assert_eq!(d.in_transfer, 0, "{router:?}");
    }
}

/// An iteration that would end beyond the clock (a step-time scale of 1e13, past the
/// scenario's bounds but open to a library user) stops the run at the next event, saying why
/// (`metrics.stop`), colocated and disaggregated, the in-loop checks holding to the end and
/// the trace showing no time past the clock.
#[test]
fn an_iteration_beyond_the_clock_stops_the_run_saying_why() {
    let poisson = "kind = \"poisson\"\nrate_per_s = 20\n";
    let colocated = Setup::uniform(poisson).replicas(2, RouterKind::default());
    let pd = Setup::uniform(poisson).disaggregated(1, 2, RouterKind::default(), |_| {});
    for (what, mut setup) in [("colocated", colocated), ("P/D", pd)] {
        setup.step_time_scale = 1e13;
        let mut rec = Recorder::default();
        let out = setup.run(true, Some(&mut rec));
        let why = out.truncated.unwrap_or_default();
        assert!(
            why.contains("iteration") && why.contains("clock"),
            "{what}: {why}"
        );
        assert_eq!(out.metrics.completed, 0, "{what}");
        assert!(
            rec.spans.iter().all(|s| s.end_ns <= crate::clock::MAX_NS),
            "{what}"
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
    let setup = Setup::uniform("kind = \"poisson\"\nrate_per_s = 2\n").disaggregated(
        1,
        2,
        RouterKind::default(),
        |_| {},
    );
    for ff in [false, true] {
        let mut rec = Recorder::default();
        let out = setup.run(ff, Some(&mut rec));
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
    for (router, reserve_output_kv) in [
        (RouterKind::PrefixAware, false),
        (RouterKind::RoundRobin, true),
    ] {
        let setup = Setup::new(
            "[arrival]\nkind = \"trace\"\nformat = \"mooncake\"\ntime_scale = 0.2\n\
             path = \"tests/data/traces/mooncake-conversation-head300.jsonl\"\n",
        )
        .replicas(2, router)
        .memory_fraction(0.3)
        .with(|s| {
            s.scheduler.max_model_len = 16384;
            s.scheduler.prefix_caching = true;
            s.scheduler.reserve_output_kv = reserve_output_kv;
        });
        let out = check(&setup, &format!("{router:?}"));
        assert!(out.metrics.completed > 100, "{router:?}");
        assert!(out.metrics.prefix_cache_hit_tokens > 0, "{router:?}");
        let (hit, prompt) = out
            .prefix_cache_tokens
            .iter()
            .fold((0, 0), |(h, p), t| (h + t.hit, p + t.prompt));
        assert!(hit > 0 && hit < prompt, "{router:?}: {hit} of {prompt}");
        if router == RouterKind::PrefixAware {
            assert!(out.metrics.preemptions > 0, "the small cache preempts");
        }
    }
}
