//! `servesim bench --format json`: the keys vLLM's `bench serve` reports (and servesim's own),
//! all present, numeric and consistent with each other.

use std::process::Command;

use serde_json::Value;

fn bench(extra: &[&str]) -> Value {
    let mut args = vec![
        "bench",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--dataset-name",
        "sharegpt",
        "--num-prompts",
        "1000",
        "--request-rate",
        "10",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(&args)
        .output()
        .expect("the servesim binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

const SCALAR_KEYS: &[&str] = &[
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "output_throughput_per_gpu",
    "goodput",
    "mean_batch_size",
    "kv_cache_utilization",
    "preemptions",
    "rejected",
    "timed_out",
];

const LATENCIES: &[&str] = &["ttft", "tpot", "itl", "e2el"];
const STATS: &[&str] = &["mean", "median", "p90", "p99"];

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .unwrap_or_else(|| panic!("key {key} missing from {v:#}"))
        .as_f64()
        .unwrap_or_else(|| panic!("key {key} is not a number: {}", v[key]))
}

#[test]
fn bench_json_has_every_key() {
    let v = bench(&[]);
    assert!(v.is_object(), "{v}");
    for key in SCALAR_KEYS {
        let x = num(&v, key);
        assert!(x.is_finite() && x >= 0.0, "{key} = {x}");
    }
    for lat in LATENCIES {
        for stat in STATS {
            let key = format!("{stat}_{lat}_ms");
            let x = num(&v, &key);
            assert!(x.is_finite() && x > 0.0, "{key} = {x}");
        }
    }
    // Counters are integers.
    for key in ["completed", "preemptions", "rejected", "timed_out"] {
        assert!(v[key].is_u64(), "{key} = {}", v[key]);
    }
}

#[test]
fn bench_json_values_are_consistent() {
    let v = bench(&[]);
    assert_eq!(v["completed"].as_u64(), Some(1000));
    assert_eq!(v["rejected"].as_u64(), Some(0));
    assert_eq!(v["timed_out"].as_u64(), Some(0));
    let duration = num(&v, "duration");
    // 1000 Poisson arrivals at 10 req/s: about 100 s (plus the last request's service).
    assert!((85.0..=125.0).contains(&duration), "duration {duration}");
    let req_tput = num(&v, "request_throughput");
    assert!((req_tput * duration - 1000.0).abs() < 1e-6, "{req_tput}");
    let out_tput = num(&v, "output_throughput");
    let out_tokens = num(&v, "total_output_tokens");
    assert!((out_tput * duration - out_tokens).abs() < 1e-3 * out_tokens);
    // ShareGPT outputs average about 200 tokens.
    assert!(
        (150.0..=250.0).contains(&(out_tokens / 1000.0)),
        "{out_tokens}"
    );
    let total = num(&v, "total_token_throughput");
    let in_tokens = num(&v, "total_input_tokens");
    assert!(((total - out_tput) * duration - in_tokens).abs() < 1e-3 * in_tokens);
    // One GPU: per-GPU throughput is the throughput.
    assert!((num(&v, "output_throughput_per_gpu") - out_tput).abs() < 1e-9 * out_tput);
    // No SLOs: every completed request is good.
    assert!((num(&v, "goodput") - req_tput).abs() < 1e-9);
    for lat in LATENCIES {
        let median = num(&v, &format!("median_{lat}_ms"));
        let p90 = num(&v, &format!("p90_{lat}_ms"));
        let p99 = num(&v, &format!("p99_{lat}_ms"));
        assert!(median <= p90 && p90 <= p99, "{lat}: {median} {p90} {p99}");
    }
    // Light load: TTFT well under a second, E2E longer than TTFT.
    assert!(num(&v, "p99_ttft_ms") < 1000.0);
    assert!(num(&v, "mean_e2el_ms") > num(&v, "mean_ttft_ms"));
    let kv = num(&v, "kv_cache_utilization");
    assert!(kv > 0.0 && kv <= 1.0, "{kv}");
    let batch = num(&v, "mean_batch_size");
    assert!((1.0..=256.0).contains(&batch), "{batch}");
}

#[test]
fn bench_json_goodput_reflects_slos() {
    // A 1 ms TTFT SLO no request can meet: goodput 0; a generous one: goodput = throughput.
    let strict = bench(&["--goodput", "ttft:1"]);
    assert_eq!(num(&strict, "goodput"), 0.0);
    let loose = bench(&["--goodput", "ttft:60000", "tpot:1000"]);
    assert!(
        (num(&loose, "goodput") - num(&loose, "request_throughput")).abs() < 1e-9,
        "{loose:#}"
    );
}

#[test]
fn bench_json_is_a_vllm_result_file() {
    // The load keys `vllm bench serve --save-result` writes, as it writes them.
    let v = bench(&["--burstiness", "0.5", "--max-concurrency", "64"]);
    assert_eq!(v["num_prompts"].as_u64(), Some(1000));
    assert_eq!(v["request_rate"].as_f64(), Some(10.0));
    assert_eq!(v["burstiness"].as_f64(), Some(0.5));
    assert_eq!(v["max_concurrency"].as_u64(), Some(64));
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["bench", "--num-prompts", "50", "--format", "json"])
        .output()
        .expect("the servesim binary runs");
    assert!(out.status.success());
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(offline["request_rate"].as_str(), Some("inf"));
    assert!(offline["max_concurrency"].is_null());
    // And `fit-engine`'s reader takes it as one.
    let dep = servesim::validate::ResultDeployment {
        engine: "vllm".into(),
        model: "llama-3.1-8b".into(),
        gpu: "h100-sxm".into(),
        tp: 1,
        dtype: "bf16".into(),
        kv_cache_dtype: "auto".into(),
    };
    let row =
        servesim::validate::parse_result_file(&v.to_string(), "bench.json", "b", &dep).unwrap();
    assert_eq!(row.num_requests, 1000);
    assert_eq!(row.burstiness, Some(0.5));
    assert_eq!(row.max_concurrency, Some(64));
    assert_eq!(row.measured.len(), 7);
}

#[test]
fn bench_table_says_its_figures_are_whole_run_not_that_the_run_was_too_long() {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["bench", "--num-prompts", "200", "--request-rate", "10"])
        .output()
        .expect("the servesim binary runs");
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("Steady state: not analysed (whole-run figures"),
        "{table}"
    );
    assert!(!table.contains("more than"), "{table}");
}

/// A CPU tier serves only requests with block identities: on a dataset without them the run
/// says the setting had no effect (it was silent, and byte-identical to a run without it).
#[test]
fn kv_offloading_without_block_identities_says_it_had_no_effect() {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "bench",
            "--num-prompts",
            "50",
            "--enable-prefix-caching",
            "--kv-offloading-size",
            "16",
        ])
        .output()
        .expect("the servesim binary runs");
    assert!(out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("KV offloading had no effect"),
        "no warning:\n{text}"
    );
}

/// A run with block identities (here generated sessions) prints its prefix-cache hit rate in
/// the table (it was printed only with KV offloading on), and a run without an `[slo]` says
/// that no SLO was set instead of "every SLO" of none.
#[test]
fn the_run_table_shows_the_hit_rate_and_says_when_no_slo_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.toml");
    std::fs::write(
        &path,
        r#"name = "sessions"
seed = 7
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
engine = "vllm"
[scheduler]
enable_prefix_caching = true
[workload]
[workload.arrival]
kind = "poisson"
rate_per_s = 2
[workload.sessions]
num_sessions = 20
system_prompt_tokens = 1000
turns = { kind = "fixed", tokens = 3 }
think_time_ms = { kind = "fixed", tokens = 2000 }
new_tokens = { kind = "fixed", tokens = 300 }
output_tokens = { kind = "fixed", tokens = 50 }
hash_block_tokens = 64
"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["run", path.to_str().unwrap()])
        .output()
        .expect("the servesim binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("Prefix cache hit rate:"))
        .unwrap_or_else(|| panic!("no hit-rate row:\n{text}"));
    let pct: f64 = row
        .trim_start_matches("Prefix cache hit rate:")
        .trim()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(pct > 0.0 && pct < 100.0, "{row}");
    assert!(!text.contains("every SLO"), "{text}");
    assert!(text.contains("verdict: HOLDS: no SLO set"), "{text}");
}

/// vLLM's `--async-scheduling` / `--no-async-scheduling`: the profile's default is on (the
/// same bytes as no flag); off, the host time adds to the GPU's (longer per-token times) and a
/// request arriving mid-iteration joins the next one (shorter waits for the first token).
#[test]
fn async_scheduling_flags_select_the_scheduler() {
    let default = bench(&[]);
    assert_eq!(bench(&["--async-scheduling"]), default);
    let off = bench(&["--no-async-scheduling"]);
    assert_eq!(bench(&["--async-scheduling", "false"]), off);
    assert!(num(&off, "mean_tpot_ms") > num(&default, "mean_tpot_ms"));
    assert!(num(&off, "mean_ttft_ms") < num(&default, "mean_ttft_ms"));
}
