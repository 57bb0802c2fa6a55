//! The physics of prefill/decode disaggregation (docs/disaggregation.md): the transfer adds
//! exactly its bytes over the bandwidth to TTFT, nothing else moves when the link is free,
//! decodes stop stalling behind prefills, and no request or KV block is lost (INV-1, INV-4 of
//! docs/invariants.md).

mod common;

use servesim::scenario::Scenario;
use servesim::sim::{simulate_disaggregated, SimOutput};
use servesim::summary::RunSummary;
use servesim::workload::RequestGenerator;

use common::run_toml;

/// A 1P1D (or colocated) Llama-3.1-8B deployment on H100s with `extra` deployment keys, a
/// random workload and `tail` appended.
fn scenario(deployment: &str, workload: &str, tail: &str) -> String {
    format!(
        r#"
seed = 11
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
{deployment}
[workload]
{workload}
{tail}
"#
    )
}

const DISAGG_UNLIMITED: &str = r#"mode = "disaggregated"
kv_transfer_bandwidth_gb_s = inf
kv_transfer_latency_us = 0.0
[deployment.prefill]
replicas = 1
[deployment.decode]
replicas = 1"#;

/// Runs a scenario through the simulator directly, keeping every request's record.
fn simulate_logged(text: &str) -> SimOutput {
    let sc = Scenario::parse(text, "test", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let r = sc
        .resolve("test")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .with_request_log(1 << 20);
    let (prefill, decode) = r
        .pool_step_models()
        .expect("step models")
        .expect("a disaggregated scenario");
    let mut gen = RequestGenerator::new(&sc.workload, sc.seed, "test").expect("workload");
    simulate_disaggregated(&r.sim, &prefill, &decode, &mut gen)
}

#[test]
fn with_a_free_link_ttft_is_a_prefill_only_replicas() {
    // Same arrivals and prompts; the prefill-only replica is a colocated one whose requests
    // stop at their first token.
    let workload = |output: &str| {
        format!(
            r#"num_requests = 2000
input = {{ kind = "uniform", mean = 1500.0, range_ratio = 0.9 }}
output = {output}
arrival = {{ kind = "poisson", rate_per_s = 12.0 }}"#
        )
    };
    let prefill_only = run_toml(&scenario(
        "",
        &workload(r#"{ kind = "fixed", tokens = 1 }"#),
        "",
    ));
    let pd = run_toml(&scenario(
        DISAGG_UNLIMITED,
        &workload(r#"{ kind = "fixed", tokens = 200 }"#),
        "",
    ));
    assert_eq!(pd.completed, 2000);
    assert_eq!(prefill_only.completed, 2000);
    let d = pd
        .disaggregation
        .as_ref()
        .expect("a disaggregation section");
    assert_eq!(d.transfers, 2000);
    assert_eq!(d.mean_backpressure_wait_ms, 0.0);
    for (a, b, what) in [
        (pd.mean_ttft_ms, prefill_only.mean_ttft_ms, "mean"),
        (pd.median_ttft_ms, prefill_only.median_ttft_ms, "median"),
        (pd.p90_ttft_ms, prefill_only.p90_ttft_ms, "p90"),
        (pd.p99_ttft_ms, prefill_only.p99_ttft_ms, "p99"),
    ] {
        assert_eq!(a, b, "{what} TTFT: 1P1D {a} ms, prefill-only {b} ms");
    }
    // The prompts queue: the equality is not that of an empty system.
    assert!(
        pd.p99_ttft_ms > 1.5 * pd.median_ttft_ms,
        "{}",
        pd.p99_ttft_ms
    );
}

#[test]
fn halving_the_bandwidth_adds_the_kv_bytes_over_the_bandwidth() {
    let text = |gb_s: f64| {
        scenario(
            &format!(
                r#"mode = "disaggregated"
kv_transfer_bandwidth_gb_s = {gb_s:.1}
kv_transfer_latency_us = 20.0"#
            ),
            r#"num_requests = 300
input = { kind = "uniform", mean = 2000.0, range_ratio = 0.9 }
output = { kind = "fixed", tokens = 50 }
arrival = { kind = "constant", rate_per_s = 2.0 }"#,
            "",
        )
    };
    let fast = simulate_logged(&text(10.0));
    let slow = simulate_logged(&text(5.0));
    // Llama-3.1-8B, bf16 KV: 2 x 32 layers x 8 KV heads x 128 x 2 bytes per token.
    let kv_bytes_per_token = 131_072.0;
    let by_arrival = |o: &SimOutput| {
        let mut v: Vec<_> = o
            .metrics
            .log
            .records()
            .iter()
            .map(|r| {
                (
                    r.arrival_ns,
                    r.first_token_ns - r.arrival_ns,
                    r.input_tokens,
                )
            })
            .collect();
        v.sort();
        v
    };
    let (f, s) = (by_arrival(&fast), by_arrival(&slow));
    assert_eq!(f.len(), 300);
    assert_eq!(s.len(), 300);
    for ((a, ttft_fast, input), (a2, ttft_slow, input2)) in f.iter().zip(&s) {
        assert_eq!((a, input), (a2, input2));
        let bytes = *input as f64 * kv_bytes_per_token;
        // Each transfer alone on its link; its time rounds up to a whole ns.
        let expected = (bytes / 5e9 * 1e9).ceil() - (bytes / 10e9 * 1e9).ceil();
        let added = *ttft_slow as f64 - *ttft_fast as f64;
        assert!(
            (added - expected).abs() <= 1.0,
            "prompt of {input} tokens: TTFT grew {added} ns, KV bytes / 10 GB/s is {expected} ns"
        );
    }
}

#[test]
fn decodes_do_not_stall_behind_prefills() {
    // Prefill-heavy: 3,000-token prompts, 100-token answers, 8 req/s on two H100s.
    let workload = r#"num_requests = 1000
input = { kind = "uniform", mean = 3000.0, range_ratio = 0.5 }
output = { kind = "uniform", mean = 100.0, range_ratio = 0.5 }
arrival = { kind = "poisson", rate_per_s = 8.0 }"#;
    let colocated = run_toml(&scenario("replicas = 2", workload, ""));
    let pd = run_toml(&scenario(
        r#"mode = "disaggregated"
[deployment.prefill]
replicas = 1
[deployment.decode]
replicas = 1"#,
        workload,
        "",
    ));
    assert_eq!(pd.completed, 1000);
    assert_eq!(pd.num_gpus, colocated.num_gpus);
    assert!(
        pd.p99_tpot_ms < 0.8 * colocated.p99_tpot_ms,
        "p99 TPOT: 1P1D {} ms, two colocated replicas {} ms",
        pd.p99_tpot_ms,
        colocated.p99_tpot_ms
    );
}

/// Every arrival is accounted for exactly once and no KV block stays held.
fn assert_conserved(o: &SimOutput) {
    let m = &o.metrics;
    assert!(o.truncated.is_none(), "{:?}", o.truncated);
    assert_eq!(o.in_flight, 0);
    assert_eq!(m.completed + m.rejected + m.timed_out + m.lost, m.arrived);
    let d = o.disaggregation.as_ref().expect("disaggregated");
    assert_eq!(d.in_transfer, 0);
    assert_eq!(d.blocks_held_at_end, 0, "INV-4: KV blocks leaked");
    // Every completed request crossed the link once.
    assert_eq!(d.transfers, m.completed);
}

#[test]
fn requests_and_kv_blocks_are_conserved_under_back_pressure() {
    // A decode pool short of seats and KV (back-pressure, preemptions), time-outs, layer-wise
    // transfers, prefix caching, two prefill replicas feeding one decode replica.
    let text = |layerwise: bool, reserve_output: bool| {
        scenario(
            &format!(
                r#"mode = "disaggregated"
kv_transfer_bandwidth_gb_s = 20.0
kv_transfer_layerwise = {layerwise}
[deployment.prefill]
replicas = 2
[deployment.decode]
replicas = 1
max_num_seqs = 24"#
            ),
            r#"num_requests = 1500
input = { kind = "uniform", mean = 2500.0, range_ratio = 0.9 }
output = { kind = "uniform", mean = 600.0, range_ratio = 0.9 }
arrival = { kind = "poisson", rate_per_s = 30.0 }
prefix = { tokens = 512, groups = 4 }"#,
            &format!(
                r#"[scheduler]
gpu_memory_utilization = 0.3
enable_prefix_caching = true
reserve_output_kv = {reserve_output}
[slo]
queue_timeout_s = 20.0"#
            ),
        )
    };
    // Reserving the output's KV at admission admits fewer and never preempts.
    for (layerwise, reserve_output) in [(false, false), (true, false), (false, true)] {
        let o = simulate_logged(&text(layerwise, reserve_output));
        assert_conserved(&o);
        let m = &o.metrics;
        let d = o.disaggregation.as_ref().unwrap();
        assert!(m.timed_out > 0, "no time-outs: the case does not test them");
        assert_eq!(
            m.preemptions > 0,
            !reserve_output,
            "preemptions: {} (reserve_output_kv {reserve_output})",
            m.preemptions
        );
        assert!(d.wait.percentile_ns(99.0) > 0.0, "no back-pressure");
        assert!(m.prefix_cache_hit_tokens > 0, "no prefix hits");
    }
}

#[test]
fn a_disaggregated_run_is_deterministic() {
    let text = scenario(
        r#"mode = "disaggregated"
[deployment.prefill]
replicas = 2
router = "power-of-two"
[deployment.decode]
replicas = 2
router = "round-robin""#,
        r#"num_requests = 800
input = { kind = "uniform", mean = 1000.0, range_ratio = 0.9 }
output = { kind = "uniform", mean = 200.0, range_ratio = 0.9 }
arrival = { kind = "poisson", rate_per_s = 20.0 }"#,
        "",
    );
    let a: RunSummary = run_toml(&text);
    let b: RunSummary = run_toml(&text);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(a.completed, 800);
    assert_eq!(a.num_gpus, 4);
}
