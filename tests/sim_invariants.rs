//! Invariants of the simulator that hold for every scenario (numbered in docs/invariants.md):
//! request conservation (INV-1), no requests left behind, token accounting (INV-2), KV-cache
//! capacity (INV-3), seats (INV-6), finite metrics, and bit-for-bit determinism for a seed
//! (INV-9), seen from the run's summary. Checked over hand-picked scenarios and a proptest of
//! random ones.

mod common;

use common::{fixed_offline_workload, run_toml};

use std::process::Command;

use proptest::prelude::*;
use servesim::scenario::Scenario;
use servesim::summary::RunSummary;

/// Keys whose value may legitimately be JSON null (optional fields). Any other null is a
/// non-finite float (serde_json writes NaN and infinities as null).
const OPTIONAL_KEYS: &[&str] = &[
    "slo.ttft",
    "slo.tpot",
    "slo.e2e",
    "truncated",
    "steady_state",
];

fn check_finite(prefix: &str, v: &serde_json::Value, bad: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                check_finite(&key, x, bad);
            }
        }
        serde_json::Value::Null if !OPTIONAL_KEYS.contains(&prefix) => bad.push(prefix.into()),
        serde_json::Value::Number(n) => {
            if !n.as_f64().is_some_and(f64::is_finite) {
                bad.push(prefix.into());
            }
            if n.as_f64().is_some_and(|x| x < 0.0) {
                bad.push(format!("{prefix} (negative)"));
            }
        }
        _ => {}
    }
}

/// The invariants every run must satisfy, as its summary shows them: INV-1 (conservation),
/// INV-2 (tokens), INV-3 (peak KV <= 1). `fixed_output` is the output length when every
/// request has the same one.
fn check_invariants(s: &RunSummary, fixed_output: Option<u64>, ctx: &str) {
    assert_eq!(
        s.arrived,
        s.completed + s.rejected + s.timed_out + s.in_flight,
        "conservation: {ctx}\n{s:#?}"
    );
    assert_eq!(s.failed, s.rejected + s.timed_out, "{ctx}");
    if s.truncated.is_none() {
        assert_eq!(s.in_flight, 0, "requests left behind: {ctx}\n{s:#?}");
        // Every generated token is counted once: with nothing in flight, the tokens generated
        // are exactly the completed requests' outputs (rejected and timed-out requests never
        // produce one; a preempted request keeps its tokens and recomputes only their KV).
        assert_eq!(
            s.generated_tokens, s.total_output_tokens,
            "tokens generated vs delivered: {ctx}"
        );
    } else {
        assert!(s.generated_tokens >= s.total_output_tokens, "{ctx}");
    }
    assert!(
        s.peak_kv_cache_utilization <= 1.0 + 1e-12,
        "peak KV {} > 1: {ctx}",
        s.peak_kv_cache_utilization
    );
    assert!(
        s.kv_cache_utilization <= s.peak_kv_cache_utilization + 1e-9,
        "mean KV {} > peak {}: {ctx}",
        s.kv_cache_utilization,
        s.peak_kv_cache_utilization
    );
    if let Some(out) = fixed_output {
        assert_eq!(
            s.total_output_tokens,
            s.completed * out,
            "output tokens: {ctx}"
        );
    }
    assert!(s.total_output_tokens >= s.completed, "{ctx}");
    assert!(
        s.gpu_busy_share <= 1.0 + 1e-9,
        "busy {}: {ctx}",
        s.gpu_busy_share
    );
    assert!(s.goodput_share <= 1.0 + 1e-12, "{ctx}");
    assert!(s.max_batch_size >= s.mean_batch_size - 1e-9, "{ctx}");
    if s.completed > 0 {
        assert!(s.mean_ttft_ms > 0.0, "{ctx}");
        assert!(s.mean_e2el_ms >= s.mean_ttft_ms - 1e-6, "{ctx}");
        assert!(s.p99_ttft_ms >= s.median_ttft_ms - 1e-6, "{ctx}");
        assert!(s.p99_e2el_ms >= s.median_e2el_ms - 1e-6, "{ctx}");
    }
    let v = serde_json::to_value(s).unwrap();
    let mut bad = Vec::new();
    check_finite("", &v, &mut bad);
    assert!(
        bad.is_empty(),
        "non-finite or negative {bad:?}: {ctx}\n{s:#?}"
    );
}

const DEPLOY_8B: &str = r#"
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
"#;

/// (name, scenario TOML, fixed output length)
fn scenarios() -> Vec<(String, String, Option<u64>)> {
    let mut v: Vec<(String, String, Option<u64>)> = vec![
        (
            "poisson chat".into(),
            format!(
                r#"seed = 3
{DEPLOY_8B}
[workload]
dataset = "sharegpt"
num_requests = 400
[workload.arrival]
kind = "poisson"
rate_per_s = 12.0
"#
            ),
            None,
        ),
        (
            "offline fixed".into(),
            format!(
                r#"{DEPLOY_8B}
[workload]
num_requests = 500
[workload.arrival]
kind = "offline"
[workload.input]
kind = "uniform"
mean = 512.0
range_ratio = 0.5
[workload.output]
kind = "fixed"
tokens = 100
"#
            ),
            Some(100),
        ),
        (
            "overload with queue timeout".into(),
            format!(
                r#"{DEPLOY_8B}
[workload]
num_requests = 2000
[workload.arrival]
kind = "poisson"
rate_per_s = 300.0
[workload.input]
kind = "fixed"
tokens = 1000
[workload.output]
kind = "fixed"
tokens = 300
[slo]
queue_timeout_s = 2.0
"#
            ),
            Some(300),
        ),
        (
            "admission control".into(),
            format!(
                r#"{DEPLOY_8B}
[workload]
dataset = "sharegpt"
num_requests = 1500
[workload.arrival]
kind = "poisson"
rate_per_s = 200.0
[slo]
ttft_ms = 500.0
admission_control = true
"#
            ),
            None,
        ),
        (
            "static batching".into(),
            format!(
                r#"{DEPLOY_8B}
[scheduler]
batching = "static"
max_num_seqs = 32
[workload]
num_requests = 300
[workload.arrival]
kind = "poisson"
rate_per_s = 20.0
[workload.input]
kind = "fixed"
tokens = 200
[workload.output]
kind = "fixed"
tokens = 64
"#
            ),
            Some(64),
        ),
        (
            "prefix caching".into(),
            format!(
                r#"{DEPLOY_8B}
[scheduler]
enable_prefix_caching = true
[workload]
num_requests = 400
[workload.arrival]
kind = "poisson"
rate_per_s = 15.0
[workload.input]
kind = "fixed"
tokens = 100
[workload.output]
kind = "fixed"
tokens = 50
[workload.prefix]
tokens = 1000
groups = 4
"#
            ),
            Some(50),
        ),
        (
            "chunked prefill off".into(),
            format!(
                r#"{DEPLOY_8B}
[scheduler]
enable_chunked_prefill = false
max_num_batched_tokens = 8192
max_model_len = 8192
[workload]
dataset = "azure-conv-2023"
num_requests = 300
[workload.arrival]
kind = "poisson"
rate_per_s = 5.0
"#
            ),
            None,
        ),
        (
            "reserve output kv, small cache".into(),
            format!(
                r#"{DEPLOY_8B}
[scheduler]
reserve_output_kv = true
gpu_memory_utilization = 0.25
{workload}"#,
                workload = fixed_offline_workload("num_requests = 400", 512, 512)
            ),
            Some(512),
        ),
        (
            "preemption, tiny cache".into(),
            format!(
                r#"{DEPLOY_8B}
[scheduler]
gpu_memory_utilization = 0.21
max_num_seqs = 256
max_num_batched_tokens = 2048
[workload]
num_requests = 300
[workload.arrival]
kind = "offline"
[workload.input]
kind = "fixed"
tokens = 300
[workload.output]
kind = "fixed"
tokens = 700
"#
            ),
            Some(700),
        ),
    ];
    for router in [
        "round-robin",
        "least-outstanding",
        "least-kv",
        "power-of-two",
    ] {
        v.push((
            format!("4 replicas, {router}"),
            format!(
                r#"seed = 11
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
replicas = 4
router = "{router}"
[workload]
dataset = "sharegpt"
num_requests = 1200
[workload.arrival]
kind = "gamma"
rate_per_s = 40.0
burstiness = 0.5
"#
            ),
            None,
        ));
    }
    v
}

#[test]
fn invariants_hold_over_hand_picked_scenarios() {
    for (name, text, fixed) in scenarios() {
        let s = run_toml(&text);
        check_invariants(&s, fixed, &name);
        assert!(s.truncated.is_none(), "{name}: {:?}", s.truncated);
        assert!(s.completed > 0, "{name}: nothing completed");
    }
}

#[test]
fn scenarios_exercise_what_they_claim() {
    let by_name = |n: &str| {
        let (_, text, _) = scenarios().into_iter().find(|(x, _, _)| x == n).unwrap();
        run_toml(&text)
    };
    let s = by_name("overload with queue timeout");
    assert!(s.timed_out > 0, "{s:#?}");
    let s = by_name("admission control");
    assert!(s.rejected > 0, "{s:#?}");
    let s = by_name("prefix caching");
    assert!(s.prefix_cache_hit_tokens > 0, "{s:#?}");
    let s = by_name("preemption, tiny cache");
    assert!(s.preemptions > 0, "{s:#?}");
    assert!(s.peak_kv_cache_utilization > 0.9, "{s:#?}");
    let s = by_name("reserve output kv, small cache");
    assert_eq!(s.preemptions, 0, "{s:#?}");
    let s = by_name("static batching");
    assert!(s.max_batch_size <= 32.0, "{s:#?}");
    for router in [
        "round-robin",
        "least-outstanding",
        "least-kv",
        "power-of-two",
    ] {
        let s = by_name(&format!("4 replicas, {router}"));
        assert_eq!(s.replicas, 4);
        assert_eq!(s.num_gpus, 4);
        assert_eq!(s.completed, 1200, "{router}");
    }
}

/// INV-9: a seed gives the same bytes.
#[test]
fn same_seed_gives_identical_summaries() {
    for (name, text, _) in scenarios() {
        let sc = Scenario::parse(&text, "test", &[]).unwrap();
        let r = sc.resolve("test").unwrap();
        let a = serde_json::to_string(&r.run_with_seed(7).unwrap().summary).unwrap();
        let b = serde_json::to_string(&r.run_with_seed(7).unwrap().summary).unwrap();
        assert_eq!(a, b, "{name}: not deterministic");
        // Re-resolving from the text does not change anything either.
        let r2 = Scenario::parse(&text, "test", &[])
            .unwrap()
            .resolve("test")
            .unwrap();
        let c = serde_json::to_string(&r2.run_with_seed(7).unwrap().summary).unwrap();
        assert_eq!(a, c, "{name}: differs after re-resolving");
    }
}

#[test]
fn different_seed_gives_a_different_run() {
    for (name, text, _) in scenarios() {
        // Offline runs with fixed lengths have no randomness to vary.
        if name.starts_with("offline")
            || name.starts_with("reserve")
            || name.starts_with("preemption")
        {
            continue;
        }
        let r = Scenario::parse(&text, "test", &[])
            .unwrap()
            .resolve("test")
            .unwrap();
        let a = serde_json::to_string(&r.run_with_seed(1).unwrap().summary).unwrap();
        let b = serde_json::to_string(&r.run_with_seed(2).unwrap().summary).unwrap();
        assert_ne!(a, b, "{name}: seed has no effect");
    }
}

fn bench_json(seed: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "bench",
            "--dataset-name",
            "sharegpt",
            "--num-prompts",
            "500",
            "--request-rate",
            "20",
            "--replicas",
            "2",
            "--router",
            "power-of-two",
            "--seed",
            seed,
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cli_bench_is_deterministic() {
    let a = bench_json("5");
    let b = bench_json("5");
    assert!(a.contains("\"completed\": 500"), "{a}");
    assert_eq!(a, b);
    let c = bench_json("6");
    assert_ne!(a, c);
}

/// A random small scenario; `None` fields are left to the engine's defaults.
#[derive(Debug, Clone)]
struct Params {
    rate: Option<f64>, // None: offline
    input: u32,
    input_uniform: bool,
    output: u32,
    fixed_output: bool,
    max_num_seqs: u32,
    replicas: u32,
    router: &'static str,
    chunked: bool,
    block_size: u32,
    num_requests: u64,
    gpu_mem: Option<f64>,
    prefix: Option<(u32, u32)>,
    reserve_output: bool,
    static_batching: bool,
    queue_timeout: Option<f64>,
    seed: u64,
}

impl Params {
    fn toml(&self) -> String {
        let mut s = format!(
            "seed = {}\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\nreplicas = {}\nrouter = \"{}\"\n",
            self.seed, self.replicas, self.router
        );
        s += &format!(
            "[scheduler]\nmax_num_seqs = {}\nmax_num_batched_tokens = {}\nenable_chunked_prefill = {}\nblock_size = {}\nreserve_output_kv = {}\nbatching = \"{}\"\n",
            self.max_num_seqs,
            if self.chunked { 512.max(self.max_num_seqs) } else { 4096 },
            self.chunked,
            self.block_size,
            self.reserve_output,
            if self.static_batching { "static" } else { "continuous" },
        );
        if self.prefix.is_some() {
            s += "enable_prefix_caching = true\n";
        }
        if !self.chunked {
            s += "max_model_len = 4096\n";
        }
        if let Some(u) = self.gpu_mem {
            s += &format!("gpu_memory_utilization = {u}\n");
        }
        s += &format!(
            "[limits]\nmax_events = 50000000\n[workload]\nnum_requests = {}\n",
            self.num_requests
        );
        s += &match self.rate {
            Some(r) => format!("[workload.arrival]\nkind = \"poisson\"\nrate_per_s = {r}\n"),
            None => "[workload.arrival]\nkind = \"offline\"\n".into(),
        };
        s += &if self.input_uniform {
            format!(
                "[workload.input]\nkind = \"uniform\"\nmean = {}\nrange_ratio = 0.5\n",
                self.input
            )
        } else {
            format!(
                "[workload.input]\nkind = \"fixed\"\ntokens = {}\n",
                self.input
            )
        };
        s += &if self.fixed_output {
            format!(
                "[workload.output]\nkind = \"fixed\"\ntokens = {}\n",
                self.output
            )
        } else {
            format!(
                "[workload.output]\nkind = \"lognormal\"\nmean = {}\nmedian = {}\nmax = 2000\n",
                self.output as f64 * 1.3,
                self.output
            )
        };
        if let Some((tokens, groups)) = self.prefix {
            s += &format!("[workload.prefix]\ntokens = {tokens}\ngroups = {groups}\n");
        }
        if let Some(t) = self.queue_timeout {
            s += &format!("[slo]\nqueue_timeout_s = {t}\n");
        }
        s
    }
}

fn params() -> impl Strategy<Value = Params> {
    (
        (
            prop_oneof![1 => Just(None), 4 => (0.5f64..200.0).prop_map(Some)],
            1u32..2000,
            any::<bool>(),
            1u32..2000,
            any::<bool>(),
            1u32..256,
            1u32..=4,
            prop::sample::select(vec![
                "round-robin",
                "least-outstanding",
                "least-kv",
                "power-of-two",
            ]),
            any::<bool>(),
        ),
        (
            prop::sample::select(vec![8u32, 16, 32]),
            1u64..300,
            // Often a KV cache that barely fits a few requests: the 8B model's weights need
            // just over 0.2 of an H100.
            prop_oneof![2 => Just(None), 3 => (0.2f64..0.23).prop_map(Some)],
            prop::option::weighted(0.3, (1u32..1500, 1u32..4)),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.15),
            prop::option::weighted(0.3, 0.05f64..5.0),
            0u64..(i64::MAX as u64),
        ),
    )
        .prop_map(
            |(
                (
                    rate,
                    input,
                    input_uniform,
                    output,
                    fixed_output,
                    max_num_seqs,
                    replicas,
                    router,
                    chunked,
                ),
                (
                    block_size,
                    num_requests,
                    gpu_mem,
                    prefix,
                    reserve_output,
                    static_batching,
                    queue_timeout,
                    seed,
                ),
            )| Params {
                rate,
                input,
                input_uniform,
                output,
                fixed_output,
                max_num_seqs,
                replicas,
                router,
                chunked,
                block_size,
                num_requests,
                gpu_mem,
                prefix,
                reserve_output,
                static_batching,
                queue_timeout,
                seed,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn invariants_hold_for_random_scenarios(p in params()) {
        let text = p.toml();
        let sc = Scenario::parse(&text, "test", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
        // A configuration the deployment cannot hold (the model does not fit, the cache is
        // smaller than a block, ...) is an acceptable outcome, as long as it is an error.
        let resolved = match sc.resolve("test") {
            Ok(r) => r,
            Err(_) => return Ok(()),
        };
        let s = resolved.run().unwrap().summary;
        let ctx = format!("{p:?}\n{text}");
        prop_assert!(s.truncated.is_none(), "hit a limit: {:?}\n{}", s.truncated, ctx);
        prop_assert_eq!(s.arrived, p.num_requests, "{}", ctx);
        check_invariants(&s, p.fixed_output.then_some(p.output as u64), &ctx);
        if p.queue_timeout.is_none() && s.rejected == 0 {
            prop_assert_eq!(s.completed, p.num_requests, "{}", ctx);
        }
        if p.reserve_output {
            prop_assert_eq!(s.preemptions, 0, "{}", ctx);
        }
        prop_assert!(s.max_batch_size <= p.max_num_seqs as f64, "{}", ctx);
        // Same seed, same bytes.
        let again = resolved.run().unwrap().summary;
        prop_assert_eq!(
            serde_json::to_string(&s).unwrap(),
            serde_json::to_string(&again).unwrap()
        );
    }
}

/// Minimal reproduction found by the proptest: with `reserve_output_kv = true` and prefix
/// caching, publishing a prefix into the cache moves blocks from the request's own blocks to
/// shared ones without shrinking its reservation, and KV use exceeds the cache (peak > 1).
const RESERVE_WITH_PREFIX_OFFLINE: &str = r#"
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
[scheduler]
max_num_seqs = 38
max_num_batched_tokens = 512
block_size = 16
reserve_output_kv = true
enable_prefix_caching = true
gpu_memory_utilization = 0.2
[workload]
num_requests = 39
[workload.arrival]
kind = "offline"
[workload.input]
kind = "fixed"
tokens = 1
[workload.output]
kind = "fixed"
tokens = 49
[workload.prefix]
tokens = 321
groups = 1
"#;

/// Second reproduction: the same combination leaves requests stuck; the run ends with
/// `in_flight` > 0 although no limit was hit (`truncated` is None).
const RESERVE_WITH_PREFIX_STUCK: &str = r#"
seed = 8308920165724757513
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
replicas = 4
router = "least-kv"
[scheduler]
max_num_seqs = 65
max_num_batched_tokens = 512
block_size = 16
reserve_output_kv = true
enable_prefix_caching = true
gpu_memory_utilization = 0.20481687578598054
[workload]
num_requests = 178
[workload.arrival]
kind = "poisson"
rate_per_s = 0.5
[workload.input]
kind = "uniform"
mean = 1207
range_ratio = 0.5
[workload.output]
kind = "fixed"
tokens = 225
[workload.prefix]
tokens = 1154
groups = 3
"#;

#[test]
fn reserve_output_kv_without_prefix_caching_is_sound() {
    // The controls for the two reproductions: either feature alone keeps the invariants too.
    for text in [RESERVE_WITH_PREFIX_OFFLINE, RESERVE_WITH_PREFIX_STUCK] {
        for off in [
            "scheduler.enable_prefix_caching=false",
            "scheduler.reserve_output_kv=false",
        ] {
            let sc = Scenario::parse(text, "test", &[off.to_string()]).unwrap();
            let s = sc.resolve("test").unwrap().run().unwrap().summary;
            check_invariants(&s, None, off);
            assert_eq!(s.completed, s.arrived, "{off}");
        }
    }
}

#[test]

fn reserve_output_kv_with_prefix_caching_keeps_kv_within_capacity() {
    let s = run_toml(RESERVE_WITH_PREFIX_OFFLINE);
    check_invariants(&s, Some(49), "reserve_output_kv + prefix caching, offline");
}

#[test]

fn reserve_output_kv_with_prefix_caching_completes_every_request() {
    let s = run_toml(RESERVE_WITH_PREFIX_STUCK);
    check_invariants(
        &s,
        Some(225),
        "reserve_output_kv + prefix caching, 4 replicas",
    );
    assert_eq!(s.completed, 178);
}
