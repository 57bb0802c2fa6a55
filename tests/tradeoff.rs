//! The throughput-latency trade-off of continuous batching, end to end through the simulator:
//! throughput rises with load and saturates while tail latency explodes past the knee; a
//! larger batch buys throughput with per-token latency; FP8 weights make an offline run faster
//! than BF16; overload with client timeouts stays accounted for. (The published TensorRT-LLM
//! figure this file used to compare with is a row the fitted per-sequence host cost was set
//! on: it is an in-sample regression guard of tests/validate_reference.rs now.)

mod common;

use common::{fixed_offline_workload, run_toml};

use servesim::summary::RunSummary;

/// Llama-3.1-8B on one H100 with vLLM, ShareGPT lengths; `arrival` is the arrival table body.
fn sharegpt_8b(arrival: &str, scheduler: &str, requests: u64) -> String {
    format!(
        r#"seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
engine = "vllm"
[scheduler]
{scheduler}
[workload]
dataset = "sharegpt"
num_requests = {requests}
[workload.arrival]
{arrival}
"#
    )
}

fn at_rate(rate: f64) -> RunSummary {
    run_toml(&sharegpt_8b(
        &format!("kind = \"poisson\"\nrate_per_s = {rate}"),
        "",
        2000,
    ))
}

fn offline(scheduler: &str) -> RunSummary {
    run_toml(&sharegpt_8b("kind = \"offline\"", scheduler, 2000))
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

#[test]
fn rate_sweep_throughput_saturates_while_tail_ttft_explodes() {
    let rates = [2.0, 8.0, 20.0, 40.0, 80.0, 160.0];
    let runs: Vec<RunSummary> = rates.iter().map(|&r| at_rate(r)).collect();
    let off = offline("");
    for (r, s) in rates.iter().zip(&runs) {
        assert_eq!(s.completed, 2000, "rate {r}");
        assert!(s.truncated.is_none(), "rate {r}");
    }
    let tput: Vec<f64> = runs.iter().map(|s| s.output_throughput).collect();
    let p99: Vec<f64> = runs.iter().map(|s| s.p99_ttft_ms).collect();
    let summary =
        format!("rates {rates:?}\nthroughput {tput:?}\np99 TTFT {p99:?}\noffline {off:#?}");

    // Below the knee, throughput follows the offered load (about 200 output tokens/request).
    for (i, &r) in rates[..3].iter().enumerate() {
        let per_req = tput[i] / r;
        assert!(
            (150.0..=250.0).contains(&per_req),
            "rate {r}: {per_req} tokens/request\n{summary}"
        );
    }
    // Throughput never falls as load rises (allowing 2% noise) ...
    for w in tput.windows(2) {
        assert!(w[1] >= 0.98 * w[0], "{summary}");
    }
    // ... rises several-fold from the lightest load ...
    assert!(tput[3] > 10.0 * tput[0], "{summary}");
    // ... and plateaus: the last two within 10% of each other and of offline.
    let n = tput.len();
    assert!(rel(tput[n - 1], tput[n - 2]) <= 0.10, "{summary}");
    assert!(rel(tput[n - 1], off.output_throughput) <= 0.10, "{summary}");
    assert!(rel(tput[n - 2], off.output_throughput) <= 0.10, "{summary}");
    // The plateau is offline's throughput: the light-load run is far below it.
    assert!(tput[0] < 0.2 * off.output_throughput, "{summary}");

    // Tail TTFT: flat and small at light load, orders of magnitude larger past the knee.
    assert!(p99[0] < 200.0, "{summary}");
    assert!(p99[n - 1] > 100.0 * p99[0], "{summary}");
    assert!(p99[n - 1] > 1000.0, "{summary}");
    for w in p99.windows(2) {
        assert!(
            w[1] >= 0.9 * w[0],
            "p99 TTFT not rising with load\n{summary}"
        );
    }
    // Queueing, not compute, is what grows: per-token latency rises far less than TTFT.
    let tpot_growth = runs[n - 1].mean_tpot_ms / runs[0].mean_tpot_ms;
    let ttft_growth = p99[n - 1] / p99[0];
    assert!(
        tpot_growth < 10.0 && ttft_growth > 10.0 * tpot_growth,
        "{summary}"
    );
}

#[test]
fn larger_batches_buy_throughput_with_per_token_latency() {
    let seqs = [8u32, 32, 128, 512];
    let runs: Vec<RunSummary> = seqs
        .iter()
        .map(|&m| {
            offline(&format!(
                "max_num_seqs = {m}\nmax_num_batched_tokens = 2048"
            ))
        })
        .collect();
    let tput: Vec<f64> = runs.iter().map(|s| s.output_throughput).collect();
    let tpot: Vec<f64> = runs.iter().map(|s| s.mean_tpot_ms).collect();
    let batch: Vec<f64> = runs.iter().map(|s| s.max_batch_size).collect();
    let summary = format!(
        "max_num_seqs {seqs:?}\nthroughput {tput:?}\nmean TPOT {tpot:?}\nmax batch {batch:?}"
    );
    for (i, s) in runs.iter().enumerate() {
        assert_eq!(s.completed, 2000, "{summary}");
        assert!(s.max_batch_size <= seqs[i] as f64, "{summary}");
    }
    for i in 1..seqs.len() {
        assert!(
            tput[i] > 1.05 * tput[i - 1],
            "throughput not rising\n{summary}"
        );
        assert!(tpot[i] > tpot[i - 1], "TPOT not rising\n{summary}");
    }
    // The batch is the lever: 64x the seats gives several times the throughput.
    assert!(tput[3] > 5.0 * tput[0], "{summary}");
    assert!(tpot[3] > 2.0 * tpot[0], "{summary}");
}

/// The offline 128/128 run of Llama-3.1-8B on one H100 with TensorRT-LLM in `dtype`.
fn trtllm_8b_offline(dtype: &str) -> RunSummary {
    run_toml(&format!(
        r#"
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
dtype = "{dtype}"
engine = "trtllm"
{workload}"#,
        workload = fixed_offline_workload("num_requests = 30000", 128, 128)
    ))
}

#[test]
fn fp8_weights_make_the_offline_run_faster_than_bf16() {
    let fp8 = trtllm_8b_offline("fp8");
    assert_eq!(fp8.completed, 30000);
    assert_eq!(fp8.total_output_tokens, 30000 * 128);
    let bf16 = trtllm_8b_offline("bf16");
    assert!(
        bf16.output_throughput < 0.95 * fp8.output_throughput,
        "bf16 {} vs fp8 {}",
        bf16.output_throughput,
        fp8.output_throughput
    );
}

#[test]
fn ten_times_overload_with_queue_timeout_is_accounted_for() {
    // ~40 req/s is the knee above; 400 req/s is ten times the capacity.
    let s = run_toml(&format!(
        "{}\n[slo]\nqueue_timeout_s = 5.0\n",
        sharegpt_8b("kind = \"poisson\"\nrate_per_s = 400.0", "", 20000)
    ));
    let ctx = format!("{s:#?}");
    assert!(s.truncated.is_none(), "{ctx}");
    assert_eq!(s.arrived, 20000, "{ctx}");
    assert!(s.completed > 0, "{ctx}");
    assert!(s.timed_out > 0, "{ctx}");
    // Most of the offered load cannot be served.
    assert!(s.timed_out > s.completed, "{ctx}");
    assert_eq!(s.rejected, 0, "{ctx}");
    assert_eq!(s.in_flight, 0, "{ctx}");
    assert_eq!(s.arrived, s.completed + s.rejected + s.timed_out, "{ctx}");
    assert_eq!(s.failed, s.timed_out, "{ctx}");
    // Clients give up after 5 s without a first token, so served requests got theirs by then
    // (plus the iteration that produced it).
    assert!(s.p99_ttft_ms <= 5500.0, "{ctx}");
}

#[test]
fn overload_keeps_the_replica_saturated() {
    // Ten times the capacity: the engine always has work, so it runs flat out and its output
    // throughput is at least near offline's.
    let s = run_toml(&format!(
        "{}\n[slo]\nqueue_timeout_s = 5.0\n",
        sharegpt_8b("kind = \"poisson\"\nrate_per_s = 400.0", "", 20000)
    ));
    let off = offline("");
    assert!(s.gpu_busy_share > 0.95, "{s:#?}");
    assert!(
        s.output_throughput > 0.8 * off.output_throughput,
        "overload {} vs offline {}",
        s.output_throughput,
        off.output_throughput
    );
    // Arrivals end after 20000 / 400 = 50 s; with 5 s timeouts the run ends soon after.
    assert!(s.duration < 80.0, "{s:#?}");
}

#[test]
fn eight_replicas_keep_up_with_eight_times_the_load() {
    // 30 req/s per replica is below one replica's knee (~40 req/s, see the rate sweep).
    let s = run_toml(
        r#"seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
replicas = 8
[workload]
dataset = "sharegpt"
num_requests = 20000
[workload.arrival]
kind = "poisson"
rate_per_s = 240.0
"#,
    );
    assert_eq!(s.completed, 20000);
    assert!(s.request_throughput > 200.0, "{s:#?}");
    assert!(s.p99_ttft_ms < 1000.0, "{s:#?}");
}
