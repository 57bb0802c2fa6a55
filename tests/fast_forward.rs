//! Property test of the fast-forward of decode-only runs (issue #13; INV-7 of
//! docs/invariants.md): over random scenarios
//! (every arrival kind, prefix caching, preemption under a small KV cache, queue time-outs,
//! admission control, several replicas and routers, concurrency caps, replica failures
//! (scheduled and random), an autoscaler, static batching, reserved output KV, three engines,
//! several GPUs and step-time scales, and disaggregated prefill/decode pools (1-3 replicas
//! each, every decode router, KV links from 50 MB/s to unlimited, 0-5 ms latency, layer-wise
//! or not)), a run with `limits.fast_forward = true` and one timing every iteration on its own
//! (the oracle) report identical counts and token counts, and every other figure within 1e-9
//! relative (percentiles within one histogram bucket), summary, CDFs, time series and
//! per-period statistics alike; a key on one side only is a difference. The runner checks
//! that most cases ran and a quarter or more were disaggregated. `bench`, `run`, `sweep` and
//! `plan` give the same figures with and without `--no-fast-forward`.
//!
//! The default run has 200 cases; the long run (10,000 cases) is ignored by default:
//!
//!     cargo test --release --test fast_forward -- --ignored
//!
//! Cases, time and outcome of the long run are recorded in docs/performance.md.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::OnceLock;

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use servesim::scenario::Scenario;
use servesim::sim::{simulate, simulate_disaggregated};
use servesim::workload::RequestGenerator;

/// A trace file for the `trace` arrival kind.
fn trace_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("servesim-ff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.csv");
        let mut text =
            String::from("arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n");
        let mut t = 0.0;
        for i in 0..120u32 {
            t += 0.013 * ((i * 7919) % 97) as f64;
            let group = if i % 3 == 0 {
                String::new()
            } else {
                (i % 4).to_string()
            };
            let prefix = if group.is_empty() {
                String::new()
            } else {
                "64".into()
            };
            text += &format!(
                "{t:.4},{},{},{group},{prefix}\n",
                80 + (i * 37) % 900,
                1 + (i * 53) % 240
            );
        }
        std::fs::write(&path, text).unwrap();
        path
    })
}

/// One random scenario, as TOML.
#[derive(Debug, Clone)]
struct Case {
    toml: String,
}

fn arrival() -> impl Strategy<Value = String> {
    let rate = prop_oneof![0.05f64..2.0, 2.0f64..40.0, 40.0f64..400.0];
    prop_oneof![
        rate.clone()
            .prop_map(|r| format!("kind = \"poisson\"\nrate_per_s = {r}")),
        (rate.clone(), 0.2f64..4.0)
            .prop_map(|(r, b)| format!("kind = \"gamma\"\nrate_per_s = {r}\nburstiness = {b}")),
        rate.clone()
            .prop_map(|r| format!("kind = \"constant\"\nrate_per_s = {r}")),
        Just("kind = \"offline\"".to_string()),
        (0.5f64..30.0, 0.0f64..60.0, 1.0f64..20.0).prop_map(|(a, b, t)| format!(
            "kind = \"schedule\"\npoints = [[0.0, {a}], [{t}, {b}], [{}, {a}]]\nrepeat_s = {}",
            2.0 * t,
            2.0 * t
        )),
        (0.5f64..30.0, 1u32..3)
            .prop_map(|(m, d)| format!("kind = \"diurnal\"\nmean_rate_per_s = {m}\ndays = {d}")),
        (0.01f64..3.0).prop_map(|s| format!(
            "kind = \"trace\"\npath = \"{}\"\ntime_scale = {s}",
            trace_path().display()
        )),
    ]
}

fn length(max_mean: f64) -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..(max_mean as u32)).prop_map(|t| format!("kind = \"fixed\"\ntokens = {t}")),
        (2.0f64..max_mean, 0.0f64..0.95)
            .prop_map(|(m, r)| format!("kind = \"uniform\"\nmean = {m}\nrange_ratio = {r}")),
    ]
}

/// The keys of a disaggregated deployment (P/D pools, their routers, the KV link).
fn disaggregation() -> impl Strategy<Value = String> {
    let router = prop_oneof![
        Just("round-robin"),
        Just("least-outstanding"),
        Just("least-kv"),
        Just("power-of-two")
    ];
    let bandwidth = prop_oneof![
        Just("inf".to_string()),
        (0.05f64..400.0).prop_map(|b| b.to_string())
    ];
    (
        1u32..4,
        1u32..4,
        router,
        bandwidth,
        prop_oneof![Just(0.0f64), 0.0f64..5000.0],
        any::<bool>(),
    )
        .prop_map(|(p, d, router, bw, latency_us, layerwise)| {
            format!(
                "mode = \"disaggregated\"\nkv_transfer_bandwidth_gb_s = {bw}\n\
                 kv_transfer_latency_us = {latency_us}\nkv_transfer_layerwise = {layerwise}\n\
                 [deployment.prefill]\nreplicas = {p}\n[deployment.decode]\nreplicas = {d}\n\
                 router = \"{router}\"\n"
            )
        })
}

prop_compose! {
    fn case()(
        seed in 0u64..1_000_000,
        model_gpu in prop_oneof![
            Just(("llama-3.1-8b", "h100-sxm", 1u32)),
            Just(("llama-3.1-8b", "a100-sxm-80gb", 1)),
            Just(("llama-3.1-8b", "b200", 1)),
            Just(("llama-3.1-70b", "h100-sxm", 4)),
            Just(("mixtral-8x7b", "h100-sxm", 2)),
        ],
        engine in prop_oneof![Just("vllm"), Just("trtllm"), Just("sglang")],
        replicas in prop_oneof![3 => Just(1u32), 2 => 2u32..5],
        router in prop_oneof![
            Just("round-robin"), Just("least-outstanding"), Just("least-kv"), Just("power-of-two")
        ],
        scale in prop_oneof![Just(1.0f64), 0.3f64..3.0],
        small_kv in prop::bool::weighted(0.5),
        mem in 0.0f64..1.0,
        max_num_seqs in prop_oneof![Just(None), (1u32..300).prop_map(Some)],
        block_size in prop_oneof![Just(None), Just(Some(1u32)), Just(Some(8)), Just(Some(16)), Just(Some(32))],
        chunked in prop::option::of(any::<bool>()),
        prefix_caching in prop::option::of(any::<bool>()),
        static_batching in prop::bool::weighted(0.1),
        reserve in prop::option::of(any::<bool>()),
        num_requests in 5u64..160,
        arrival in arrival(),
        dataset in prop::bool::weighted(0.3),
        input in length(2500.0),
        output in length(400.0),
        prefix in prop::option::of((1u32..400, 1u32..6)),
        concurrency in prop::option::of(1u32..64),
        ttft_ms in prop::option::of(5.0f64..3000.0),
        admission in any::<bool>(),
        timeout_s in prop::option::of(0.01f64..20.0),
        failure in prop::option::of((0.0f64..30.0, 0.1f64..60.0, any::<bool>())),
        mtbf_hours in prop::option::of(0.0005f64..0.01),
        autoscale in prop::option::of((any::<bool>(), 0.2f64..5.0, 0.1f64..10.0, 1u32..4)),
        pd in prop::option::weighted(0.4, disaggregation()),
    ) -> Case {
        let (model, gpu, tp) = model_gpu;
        let mut t = format!("seed = {seed}\n[deployment]\nmodel = \"{model}\"\ngpu = \"{gpu}\"\ntp = {tp}\nengine = \"{engine}\"\nreplicas = {replicas}\nrouter = \"{router}\"\nstep_time_scale = {scale}\n");
        // Faults and the autoscaler are not modelled with disaggregated pools.
        let (failure, mtbf_hours, autoscale) = match &pd {
            Some(pools) => {
                t += pools;
                (None, None, None)
            }
            None => (failure, mtbf_hours, autoscale),
        };
        t += "[scheduler]\n";
        if small_kv {
            // Just above the weights: a KV cache of a few thousand tokens, so that requests
            // preempt each other.
            let u = match (model, gpu) {
                ("llama-3.1-8b", "b200") => 0.108,
                ("llama-3.1-8b", _) => 0.232,
                ("llama-3.1-70b", _) => 0.48,
                _ => 0.61,
            };
            t += &format!("gpu_memory_utilization = {}\n", u + 0.01 * mem);
        }
        if let Some(n) = max_num_seqs { t += &format!("max_num_seqs = {n}\n"); }
        if let Some(b) = block_size { t += &format!("block_size = {b}\n"); }
        if let Some(c) = chunked {
            t += &format!("enable_chunked_prefill = {c}\n");
            if !c {
                // A whole prompt must fit one iteration's token budget.
                t += "max_model_len = 2048\n";
            }
        }
        if let Some(p) = prefix_caching { t += &format!("enable_prefix_caching = {p}\n"); }
        if static_batching { t += "batching = \"static\"\n"; }
        if let Some(r) = reserve { t += &format!("reserve_output_kv = {r}\n"); }
        let is_trace = arrival.contains("trace");
        t += "[workload]\n";
        if !is_trace {
            t += &format!("num_requests = {num_requests}\n");
        }
        if let Some(c) = concurrency { t += &format!("max_concurrency = {c}\n"); }
        if dataset && !is_trace {
            t += "dataset = \"sharegpt\"\n";
        } else if !is_trace {
            t += &format!("[workload.input]\n{input}\n[workload.output]\n{output}\n");
        }
        if let Some((tokens, groups)) = prefix {
            if !is_trace {
                t += &format!("[workload.prefix]\ntokens = {tokens}\ngroups = {groups}\n");
            }
        }
        t += &format!("[workload.arrival]\n{arrival}\n[slo]\n");
        if let Some(ms) = ttft_ms {
            t += &format!("ttft_ms = {ms}\nadmission_control = {admission}\n");
        }
        if let Some(s) = timeout_s { t += &format!("queue_timeout_s = {s}\n"); }
        if failure.is_some() || mtbf_hours.is_some() {
            t += "[faults]\n";
        }
        if let Some((at, repair, retry)) = failure {
            t += &format!(
                "failures = [{{ time_s = {at}, replicas = 1, repair_s = {repair} }}]\non_failure = \"{}\"\n",
                if retry { "retry" } else { "fail" }
            );
        }
        if let Some(h) = mtbf_hours {
            t += &format!("mtbf_hours = {h}\nrepair_s = 5.0\n");
        }
        if let Some((ttft_policy, interval, delay, max)) = autoscale {
            let policy = if ttft_policy && ttft_ms.is_some() { "ttft" } else { "queue" };
            t += &format!(
                "[autoscale]\npolicy = \"{policy}\"\ninterval_s = {interval}\nwindow_s = {interval}\nscale_up_delay_s = {delay}\nscale_down_cooldown_s = {interval}\nmin_replicas = 1\nmax_replicas = {}\n",
                max + 1
            );
        }
        t += "[limits]\nmax_events = 5000000\n";
        Case { toml: t }
    }
}

/// The run's figures as JSON: summary, CDFs, time series, per-period statistics.
fn figures(text: &str, fast_forward: bool) -> Option<Value> {
    let set = [format!("limits.fast_forward={fast_forward}")];
    let sc = Scenario::parse(text, "case", &set).ok()?;
    // A random combination may not fit the GPU or may be rejected; the property is about the
    // runs that do happen.
    let resolved = sc.resolve("case").ok()?.with_periods(1_000_000_000);
    let r = resolved.run().unwrap_or_else(|e| panic!("{e}\n{text}"));
    Some(serde_json::json!({
        "summary": r.summary,
        "ttft_cdf": r.ttft_cdf,
        "tpot_cdf": r.tpot_cdf,
        "e2e_cdf": r.e2e_cdf,
        "timeseries": r.timeseries,
        "periods": r.periods,
    }))
}

/// Differences beyond the tolerance between two runs' figures.
fn compare(path: &str, a: &Value, b: &Value, bad: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => compare(&format!("{path}.{k}"), va, vb, bad),
                    None => bad.push(format!("{path}.{k} missing from the second")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                bad.push(format!("{path}.{k} missing from the first"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                bad.push(format!("{path}: {} vs {} entries", x.len(), y.len()));
                return;
            }
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                compare(&format!("{path}[{i}]"), va, vb, bad);
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                let (p, q) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                // A percentile read from a histogram bucket: within one bucket (3 significant
                // digits); every other figure within 1e-9 relative.
                let percentile = ["median", "p50", "p90", "p99", "_cdf"]
                    .iter()
                    .any(|s| path.contains(s));
                let tol = if percentile { 1e-3 } else { 1e-9 };
                if (p - q).abs() > tol * p.abs().max(q.abs()) + 1e-12 {
                    bad.push(format!("{path}: {p} vs {q}"));
                }
            } else if x != y {
                bad.push(format!("{path}: {x} vs {y}"));
            }
        }
        _ => {
            if a != b {
                bad.push(format!("{path}: {a} vs {b}"));
            }
        }
    }
}

thread_local! {
    /// Cases that ran on this thread, and of them disaggregated ones (the runner checks both
    /// are many).
    static RAN: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn check(case: &Case) -> bool {
    let Some(fast) = figures(&case.toml, true) else {
        return false;
    };
    let pd = case.toml.contains("disaggregated") as u64;
    RAN.with(|r| r.set((r.get().0 + 1, r.get().1 + pd)));
    let oracle = figures(&case.toml, false).expect("the oracle resolves what the fast run did");
    let mut bad = Vec::new();
    compare("", &fast, &oracle, &mut bad);
    assert!(
        bad.is_empty(),
        "fast-forward differs from the oracle:\n{}\n--- scenario ---\n{}",
        bad.join("\n"),
        case.toml
    );
    true
}

/// Runs `cases` random scenarios through [`check`], on a thread with a large stack (the
/// scenario strategy is deep enough to overflow the default one in a debug build).
fn run_cases(cases: u32) {
    let (ran, pd) = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let mut runner = TestRunner::new(Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            });
            if let Err(e) = runner.run(&case(), |c| {
                check(&c);
                Ok(())
            }) {
                panic!("{e}");
            }
            RAN.with(Cell::get)
        })
        .expect("a test thread")
        .join()
        .expect("every case matches the oracle");
    // Most random combinations resolve and run; a quarter or more of them disaggregated.
    assert!(
        ran * 4 >= cases as u64 * 3,
        "only {ran} of {cases} cases ran"
    );
    assert!(pd * 4 >= ran, "only {pd} of {ran} cases were disaggregated");
}

#[test]
fn fast_forward_matches_the_oracle() {
    run_cases(200);
}

#[test]
#[ignore = "long run: 10,000 scenarios (cargo test --release --test fast_forward -- --ignored)"]
fn fast_forward_matches_the_oracle_10k() {
    run_cases(10_000);
}

/// The fast-forward does fast-forward: a low-rate run books most iterations in bulk, counts
/// them as events all the same, and reports the oracle's figures.
#[test]
fn a_low_rate_run_is_fast_forwarded_and_exact() {
    let text = r#"seed = 5
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
[workload]
dataset = "sharegpt"
num_requests = 300
[workload.arrival]
kind = "poisson"
rate_per_s = 0.5
"#;
    assert!(check(&Case {
        toml: text.to_string()
    }));
    let run = |ff: bool| {
        let set = [format!("limits.fast_forward={ff}")];
        let r = Scenario::parse(text, "t", &set)
            .unwrap()
            .resolve("t")
            .unwrap();
        let step = r.step_model().unwrap();
        let mut gen = RequestGenerator::new(&r.scenario.workload, r.sim.seed, "t").unwrap();
        simulate(&r.sim, &step, &mut gen)
    };
    let (fast, oracle) = (run(true), run(false));
    assert_eq!(fast.metrics.completed, 300);
    assert_eq!(fast.events, oracle.events);
    assert_eq!(oracle.fast_forwarded_iterations, 0);
    // Batches of one or two: nearly every decode iteration is inside a run.
    assert!(
        fast.fast_forwarded_iterations * 10 > fast.metrics.iterations * 9,
        "{} of {} iterations fast-forwarded",
        fast.fast_forwarded_iterations,
        fast.metrics.iterations
    );
    assert_eq!(fast.metrics.iterations, oracle.metrics.iterations);
}

/// Disaggregated runs fast-forward too: at 1 req/s the decode replica's iterations are
/// nearly all booked in bulk, every transfer and hand-off cutting the runs it must, with the
/// oracle's figures.
#[test]
fn a_low_rate_disaggregated_run_is_fast_forwarded_and_exact() {
    let text = r#"seed = 9
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
mode = "disaggregated"
[deployment.prefill]
replicas = 1
[deployment.decode]
replicas = 2
[workload]
num_requests = 400
[workload.input]
kind = "uniform"
mean = 1200
range_ratio = 0.8
[workload.output]
kind = "uniform"
mean = 200
range_ratio = 0.9
[workload.arrival]
kind = "poisson"
rate_per_s = 1.0
"#;
    assert!(check(&Case {
        toml: text.to_string()
    }));
    let run = |ff: bool| {
        let set = [format!("limits.fast_forward={ff}")];
        let r = Scenario::parse(text, "t", &set)
            .unwrap()
            .resolve("t")
            .unwrap();
        let (prefill, decode) = r.pool_step_models().unwrap().expect("two pools");
        let mut gen = RequestGenerator::new(&r.scenario.workload, r.sim.seed, "t").unwrap();
        simulate_disaggregated(&r.sim, &prefill, &decode, &mut gen)
    };
    let (fast, oracle) = (run(true), run(false));
    assert_eq!(fast.metrics.completed, 400);
    assert_eq!(fast.events, oracle.events);
    assert_eq!(fast.metrics.iterations, oracle.metrics.iterations);
    assert_eq!(oracle.fast_forwarded_iterations, 0);
    assert!(
        fast.fast_forwarded_iterations * 10 > fast.metrics.iterations * 8,
        "{} of {} iterations fast-forwarded",
        fast.fast_forwarded_iterations,
        fast.metrics.iterations
    );
    let (a, b) = (fast.disaggregation.unwrap(), oracle.disaggregation.unwrap());
    assert_eq!((a.transfers, a.bytes), (b.transfers, b.bytes));
    assert_eq!(a.blocks_held_at_end, 0);
}

/// `--no-fast-forward` selects the oracle on `bench`, `run`, `sweep` and `plan`, and the
/// figures are the same with and without it.
#[test]
fn the_flag_selects_the_oracle_on_every_command() {
    let json = |args: &[&str]| -> Value {
        let (code, out, err) = common::servesim(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"))
    };
    let bench = [
        "bench",
        "--dataset-name",
        "sharegpt",
        "--num-prompts",
        "300",
        "--request-rate",
        "2",
        "--format",
        "json",
    ];
    let run = [
        "run",
        "--set",
        "workload.num_requests=300",
        "--set",
        "workload.arrival.rate_per_s=1",
        "--format",
        "json",
    ];
    for args in [&bench[..], &run[..]] {
        let fast = json(args);
        let oracle = json(&[args, &["--no-fast-forward"][..]].concat());
        let mut bad = Vec::new();
        compare("", &fast, &oracle, &mut bad);
        assert!(bad.is_empty(), "{args:?}: {bad:?}");
    }
    // Sweep and plan write their figures into a folder: sweep.json and plan.json compared.
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let folder_json = |args: &[&str], name: &str, file: &str| -> Value {
        let folder = out(name);
        let (code, _, err) = common::servesim(&[args, &["--out", &folder][..]].concat());
        assert_eq!(code, 0, "{args:?}: {err}");
        let text = std::fs::read_to_string(dir.path().join(name).join(file)).unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}/{file}: {e}"))
    };
    let sweep = [
        "sweep",
        "--vary",
        "workload.arrival.rate_per_s=1,3",
        "--set",
        "measure.min_requests=500",
        "--set",
        "measure.max_requests=1000",
    ];
    let plan = ["plan"];
    for (args, file) in [(&sweep[..], "sweep.json"), (&plan[..], "plan.json")] {
        let fast = folder_json(args, &format!("{}-ff", args[0]), file);
        let oracle_args = [args, &["--no-fast-forward"][..]].concat();
        let mut oracle = folder_json(&oracle_args, &format!("{}-oracle", args[0]), file);
        // The plan's re-run lines carry the run's overrides as given, the flag's among them:
        // that word aside, every string is the same too.
        let flag = " --set limits.fast_forward=false";
        let lines = without(&mut oracle, flag);
        assert_eq!(
            lines > 0,
            args[0] == "plan",
            "{args:?}: {lines} lines carry {flag}"
        );
        let mut bad = Vec::new();
        compare("", &fast, &oracle, &mut bad);
        assert!(bad.is_empty(), "{args:?}: {bad:?}");
    }
}

/// Removes `word` from every string in `v`; how many strings held it.
fn without(v: &mut Value, word: &str) -> usize {
    match v {
        Value::String(s) if s.contains(word) => {
            *s = s.replace(word, "");
            1
        }
        Value::Array(a) => a.iter_mut().map(|x| without(x, word)).sum(),
        Value::Object(o) => o.values_mut().map(|x| without(x, word)).sum(),
        _ => 0,
    }
}

/// The comparison itself fails on what it must catch: a figure that moved, a key on one
/// side only (either side), an array of another length.
#[test]
fn the_comparison_catches_moved_figures_and_keys_on_one_side() {
    let base = serde_json::json!({"a": 1, "b": {"c": 2.0, "d": [1, 2]}, "median_x": 10.0});
    let cases = [
        serde_json::json!({"a": 2, "b": {"c": 2.0, "d": [1, 2]}, "median_x": 10.0}),
        serde_json::json!({"a": 1, "b": {"c": 2.000001, "d": [1, 2]}, "median_x": 10.0}),
        serde_json::json!({"a": 1, "b": {"c": 2.0, "d": [1]}, "median_x": 10.0}),
        serde_json::json!({"a": 1, "b": {"c": 2.0, "d": [1, 2]}}),
        serde_json::json!({"a": 1, "b": {"c": 2.0, "d": [1, 2], "e": 0}, "median_x": 10.0}),
        serde_json::json!({"a": 1, "b": {"c": 2.0, "d": [1, 2]}, "median_x": 10.1}),
    ];
    for other in &cases {
        for (x, y) in [(&base, other), (other, &base)] {
            let mut bad = Vec::new();
            compare("", x, y, &mut bad);
            assert!(!bad.is_empty(), "{x} vs {y}");
        }
    }
    // Within tolerance: a float 1e-12 off, a percentile within its bucket.
    let close =
        serde_json::json!({"a": 1, "b": {"c": 2.000000000002, "d": [1, 2]}, "median_x": 10.005});
    let mut bad = Vec::new();
    compare("", &base, &close, &mut bad);
    assert!(bad.is_empty(), "{bad:?}");
}
