//! Extreme but valid inputs complete quickly with finite reports: one request, output length
//! 1, prompts of 1 token, rates of 1e-6 and 1e6 req/s, 128k-token prompts, 1000 replicas,
//! runs stopped by their limits, runs where nothing completes (empty histograms). Every JSON
//! report is checked for NaN / infinity (serde_json writes them as `null`) and every table for
//! "NaN" / "inf". The 10-million-request run is `#[ignore]`d:
//!
//!     cargo test --release --test extreme_inputs -- --ignored
//!
//! Measured figures are in docs/reliability.md.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Wall-time bound of one run in release builds (debug builds are allowed 20x).
fn bound() -> Duration {
    if cfg!(debug_assertions) {
        Duration::from_secs(100)
    } else {
        Duration::from_secs(5)
    }
}

/// `servesim run` on the embedded default with `--set` overrides; returns the JSON summary
/// after checking exit 0, the wall time and that no number is missing or non-finite.
fn run_json(sets: &[&str]) -> Value {
    run_json_within(sets, bound())
}

fn run_json_within(sets: &[&str], limit: Duration) -> Value {
    let mut args = vec!["run", "--format", "json"];
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(&args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("the servesim binary runs");
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{sets:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(took < limit, "{sets:?} took {took:?} (limit {limit:?})");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for bad in ["NaN", "inf"] {
        assert!(!stdout.contains(bad), "{sets:?}: {bad} in {stdout}");
    }
    let v: Value = serde_json::from_str(&stdout).expect("run --format json prints JSON");
    assert_all_finite(&v, "");
    v
}

/// Keys that are legitimately null: absent SLOs, a run that was not truncated, and the steady
/// state of a run whose arrivals have none (offline).
const NULLABLE: [&str; 5] = [
    ".slo.ttft",
    ".slo.tpot",
    ".slo.e2e",
    ".truncated",
    ".steady_state",
];
/// Key endings that are legitimately null: a steady-state figure without an interval (too few
/// requests for the batch means).
const NULLABLE_SUFFIX: &str = ".half_width";

/// Every number finite, and no null anywhere except [`NULLABLE`] (serde_json writes NaN and
/// infinity as null, so a null number is a NaN that slipped through).
fn assert_all_finite(v: &Value, path: &str) {
    match v {
        Value::Null => assert!(
            NULLABLE.contains(&path) || path.ends_with(NULLABLE_SUFFIX),
            "null at {path}"
        ),
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            assert!(x.is_finite(), "{path} = {x}");
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                assert_all_finite(x, &format!("{path}[{i}]"));
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                assert_all_finite(x, &format!("{path}.{k}"));
            }
        }
        Value::Bool(_) | Value::String(_) => {}
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} is not an integer: {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} is not a number: {v}"))
}

/// Completed everything, not truncated, no failures.
fn assert_complete(v: &Value, n: u64) {
    assert_eq!(u(v, "completed"), n, "{v}");
    assert_eq!(u(v, "failed"), 0, "{v}");
    assert_eq!(u(v, "in_flight"), 0, "{v}");
    assert!(v["truncated"].is_null(), "{v}");
}

const FIXED: [&str; 1] = ["workload.dataset=random"];

fn fixed_lengths(input: u32, output: u32) -> [String; 3] {
    [
        FIXED[0].to_string(),
        format!("workload.input={{kind=\"fixed\",tokens={input}}}"),
        format!("workload.output={{kind=\"fixed\",tokens={output}}}"),
    ]
}

fn with<'a>(a: &'a [String], b: &[&'a str]) -> Vec<&'a str> {
    a.iter()
        .map(String::as_str)
        .chain(b.iter().copied())
        .collect()
}

#[test]
fn one_request() {
    let v = run_json(&["workload.num_requests=1"]);
    assert_complete(&v, 1);
    assert!(f(&v, "duration") > 0.0);
    assert!(f(&v, "mean_ttft_ms") > 0.0);
    // One sample: every percentile is that sample, up to the histogram's 3-digit precision.
    let (mean, p99) = (f(&v, "mean_ttft_ms"), f(&v, "p99_ttft_ms"));
    assert!((mean - p99).abs() <= 1e-3 * mean, "mean {mean}, p99 {p99}");
}

#[test]
fn output_length_one_has_no_tpot_and_no_nan() {
    let l = fixed_lengths(100, 1);
    let v = run_json(&with(&l, &["workload.num_requests=200"]));
    assert_complete(&v, 200);
    assert_eq!(u(&v, "total_output_tokens"), 200);
    // One output token: no inter-token gaps, so TPOT / ITL are 0, not NaN.
    assert_eq!(f(&v, "mean_tpot_ms"), 0.0);
    assert_eq!(f(&v, "mean_itl_ms"), 0.0);
}

#[test]
fn one_token_prompts_and_one_token_outputs() {
    let l = fixed_lengths(1, 1);
    let v = run_json(&with(&l, &["workload.num_requests=500"]));
    assert_complete(&v, 500);
    assert_eq!(u(&v, "total_input_tokens"), 500);
}

#[test]
fn rate_of_one_in_a_million_seconds() {
    let v = run_json(&[
        "workload.arrival.rate_per_s=1e-6",
        "workload.num_requests=3",
    ]);
    assert_complete(&v, 3);
    // Three arrivals about 1e6 s apart: a long but finite run, throughputs tiny but finite.
    let d = f(&v, "duration");
    assert!(d > 1e3 && d < 2_592_000.0, "duration {d}");
    assert!(f(&v, "request_throughput") > 0.0);
}

#[test]
fn an_arrival_past_the_clock_ends_the_run_as_truncated_and_says_so() {
    // The second arrival comes ~1e300 s after the first: past u64 nanoseconds.
    let v = run_json(&["workload.arrival.rate_per_s=1e-300"]);
    let t = v["truncated"]
        .as_str()
        .expect("a run that loses requests says so");
    assert!(
        t.contains("past the simulator's clock") && t.contains("999 requests never sent"),
        "{t}"
    );
    assert_eq!(u(&v, "completed"), 1);
}

#[test]
fn rate_so_low_that_the_time_limit_stops_the_run() {
    // 1000 requests at 1e-6 req/s would take ~1e9 s, beyond the 30-day default limit.
    let v = run_json(&["workload.arrival.rate_per_s=1e-6"]);
    let t = v["truncated"]
        .as_str()
        .expect("truncated by the time limit");
    assert!(t.contains("time limit"), "{t}");
    assert!(u(&v, "arrived") < 1000);
}

#[test]
fn rate_of_a_million_per_second_with_20000_requests() {
    let v = run_json(&[
        "workload.arrival.rate_per_s=1e6",
        "workload.num_requests=20000",
    ]);
    assert_complete(&v, 20000);
    // Everything arrives within ~20 ms; the queue drains over minutes.
    assert!(f(&v, "p99_queue_ms") > 1000.0, "{v}");
}

#[test]
fn prompts_of_128k_tokens_on_one_h200() {
    let l = fixed_lengths(128_000, 64);
    let v = run_json(&with(
        &l,
        &[
            "deployment.gpu=h200-sxm",
            "scheduler.max_model_len=131072",
            "workload.num_requests=5",
        ],
    ));
    assert_complete(&v, 5);
    assert_eq!(u(&v, "total_input_tokens"), 5 * 128_000);
    assert!(
        f(&v, "mean_ttft_ms") > 1000.0,
        "128k-token prefill takes seconds"
    );
}

#[test]
fn prompts_of_128k_tokens_at_tp_2_on_h100() {
    let l = fixed_lengths(128_000, 16);
    let v = run_json(&with(
        &l,
        &[
            "deployment.tp=2",
            "scheduler.max_model_len=131072",
            "workload.num_requests=3",
        ],
    ));
    assert_complete(&v, 3);
}

#[test]
fn a_thousand_replicas_with_5000_requests() {
    let v = run_json(&[
        "deployment.replicas=1000",
        "workload.num_requests=5000",
        "workload.arrival.rate_per_s=1000",
    ]);
    assert_complete(&v, 5000);
    assert_eq!(u(&v, "num_gpus"), 1000);
    let busy = f(&v, "gpu_busy_share");
    assert!((0.0..=1.0).contains(&busy), "{busy}");
}

#[test]
fn event_limit_truncates_and_reports_requests_in_flight() {
    let v = run_json(&["limits.max_events=1000"]);
    let t = v["truncated"].as_str().expect("truncated is set");
    assert!(t.contains("event limit"), "{t}");
    assert!(u(&v, "in_flight") > 0, "{v}");
    assert!(u(&v, "completed") < 1000);
}

#[test]
fn simulated_time_limit_truncates_and_reports_requests_in_flight() {
    let v = run_json(&["limits.max_sim_time_s=5"]);
    let t = v["truncated"].as_str().expect("truncated is set");
    assert!(t.contains("time limit"), "{t}");
    assert!(u(&v, "in_flight") > 0, "{v}");
    assert!(f(&v, "duration") <= 5.0 + 1e-9, "{v}");
}

#[test]
fn a_run_where_nothing_completes_has_empty_histograms_but_no_nan() {
    // Admission control against an impossible 1 µs TTFT rejects every request.
    let v = run_json(&[
        "slo.ttft_ms=0.001",
        "slo.admission_control=true",
        "workload.num_requests=50",
    ]);
    assert_eq!(u(&v, "completed"), 0, "{v}");
    assert_eq!(u(&v, "rejected"), 50, "{v}");
    assert_eq!(f(&v, "goodput"), 0.0);
    assert!(!v["slo"]["all_met"].as_bool().unwrap());
}

#[test]
fn a_queue_timeout_shorter_than_any_prefill_times_everything_out() {
    let v = run_json(&[
        "slo.queue_timeout_s=1e-9",
        "workload.num_requests=50",
        "workload.arrival.kind=\"offline\"",
    ]);
    assert_eq!(u(&v, "completed") + u(&v, "failed"), 50, "{v}");
}

#[test]
fn table_and_csv_reports_of_extreme_runs_have_no_nan() {
    for format in ["table", "csv"] {
        for sets in [
            &["workload.num_requests=1"][..],
            &[
                "slo.ttft_ms=0.001",
                "slo.admission_control=true",
                "workload.num_requests=20",
            ][..],
            &["limits.max_events=50"][..],
        ] {
            let mut args = vec!["run", "--format", format];
            for s in sets {
                args.push("--set");
                args.push(s);
            }
            let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
                .args(&args)
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0));
            let s = String::from_utf8_lossy(&out.stdout);
            for bad in ["NaN", "nan", "inf"] {
                assert!(!s.contains(bad), "{format} {sets:?}: {bad} in\n{s}");
            }
        }
    }
}

/// 10 million ShareGPT requests at 30 req/s on one H100 (about 3.9 simulated days). Measured
/// ~4 s wall and ~7 MB peak RSS (docs/reliability.md); allowed 120 s here.
#[test]
#[ignore = "10M requests: cargo test --release --test extreme_inputs -- --ignored"]
fn ten_million_requests() {
    let v = run_json_within(
        &[
            "workload.num_requests=10000000",
            "workload.arrival.rate_per_s=30",
        ],
        Duration::from_secs(if cfg!(debug_assertions) { 1200 } else { 120 }),
    );
    assert_complete(&v, 10_000_000);
}

/// A burst (every request at one instant) has no steady state to judge: the table says so
/// instead of "0 output tok/s, queue stationary", and the verdict still names the misses.
#[test]
fn a_burst_run_says_its_steady_state_cannot_be_judged() {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "run",
            "--set",
            "workload.arrival.rate_per_s=1e12",
            "--set",
            "workload.num_requests=1000",
        ])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("the servesim binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let steady = text
        .split("Steady state")
        .nth(1)
        .expect("a steady-state section");
    assert!(steady.contains("all arrived at one instant"), "{steady}");
    assert!(!steady.contains("queue stationary\n"), "{steady}");
}
