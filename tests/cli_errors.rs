//! The command line: `estimate`'s physics in JSON, and bad input exiting 2 with a clear,
//! panic-free message that names what is wrong.

mod common;

use common::servesim;

use servesim::model::load_model;

/// Exit code 2, a message starting with "error:", no panic.
fn assert_input_error(code: i32, stderr: &str) {
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.starts_with("error:"), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "stderr: {stderr}");
}

/// As [`assert_input_error`], and the message is one line.
fn assert_one_line_input_error(code: i32, stderr: &str) {
    assert_input_error(code, stderr);
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "expected a one-line error, got: {stderr}"
    );
}

#[test]
fn estimate_csv_is_one_header_and_one_row_agreeing_with_the_json() {
    let args = [
        "estimate",
        "--decode-batch",
        "64",
        "--prefill-tokens",
        "300",
    ];
    let (code, csv, err) = servesim(&[&args[..], &["--format", "csv"]].concat());
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(header.len(), row.len());
    let (code, json, err) = servesim(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for (column, pointer) in [
        ("memory.kv_tokens", "/memory/kv_tokens"),
        ("step.total_s", "/step/total_s"),
        ("batch.prefill_tokens", "/batch/prefill_tokens"),
    ] {
        let i = header.iter().position(|h| *h == column).expect(column);
        let cell: f64 = row[i].parse().unwrap();
        assert_eq!(
            cell,
            v.pointer(pointer).unwrap().as_f64().unwrap(),
            "{column}"
        );
    }
}

#[test]
fn an_output_path_that_cannot_be_written_fails_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.to_str().unwrap();
    let under = file.join("sub");
    let under = under.to_str().unwrap();
    let folder = dir.path().to_str().unwrap();
    for args in [
        vec!["run", "--out", f],
        vec!["run", "--out", under],
        vec!["plan", "--out", f],
        vec![
            "sweep",
            "--vary",
            "workload.arrival.rate_per_s=1,2",
            "--out",
            f,
        ],
        vec!["validate", "--out", f],
        vec![
            "fit-engine",
            "x.json",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            folder,
        ],
    ] {
        let (code, out, err) = servesim(&args);
        assert_one_line_input_error(code, &err);
        assert!(err.contains("--out"), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} printed before failing: {out}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn save_detailed_needs_the_json_result() {
    let (code, out, err) = servesim(&["bench", "--num-prompts", "10", "--save-detailed"]);
    assert_one_line_input_error(code, &err);
    assert!(
        err.contains("--save-detailed") && err.contains("--format json"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}

#[test]
fn a_closed_standard_output_stops_quietly_without_a_panic() {
    use std::process::{Command, Stdio};
    for args in [
        &["estimate"][..],
        &["estimate", "--format", "json"],
        &["validate", "--no-cv"],
        &["run", "--format", "json"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the reading end before servesim has computed anything to print.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

#[test]
fn estimate_json_streams_weights_at_the_measured_bandwidth() {
    let (code, out, err) = servesim(&[
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "1",
        "--decode-batch",
        "1",
        "--context",
        "1024",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("estimate prints JSON");
    let implied = v["implied_weight_bandwidth_bytes_per_s"].as_f64().unwrap();
    // The 3.0 TB/s stream rate less each GEMM's fixed time (4.35 us, graph-replayed since
    // session 11: no launch taken off it; 2.70 TB/s there, 2.75 before).
    assert!(
        (2.6e12..=3.1e12).contains(&implied),
        "implied weight bandwidth {implied:e}"
    );
    let weights = v["weights_bytes_per_gpu"].as_f64().unwrap();
    // 8.03e9 parameters in BF16.
    assert!((weights - 2.0 * 8_030_261_248.0).abs() < 1e6, "{weights}");
    assert_eq!(v["kv_bytes_per_token"].as_f64().unwrap(), 131_072.0);

    // `weight_stream_s` is the part of the layer GEMMs that streams the linear layers'
    // weights (QKV, O, gate/up, down; not the embedding nor the LM head, which is
    // `lm_head_s`). Those bytes over that time must be the measured ~3.0 TB/s of the H100
    // profile, not the 3.35 TB/s datasheet figure.
    let stream_s = v["step"]["weight_stream_s"].as_f64().unwrap();
    assert!(stream_s > 0.0);
    let m = load_model("llama-3.1-8b").unwrap();
    let lp = m.layer_params();
    let linear_bytes = m.num_layers as f64 * (lp.qkv + lp.o + lp.gate_up + lp.down) * 2.0;
    let bw = linear_bytes / stream_s;
    assert!(
        (2.9e12..=3.0e12 + 1.0).contains(&bw),
        "weight streaming at {bw:e} B/s (linear bytes {linear_bytes:e} / {stream_s} s)"
    );
    // The parts add up to the step.
    let step = &v["step"];
    let parts: f64 = [
        "gemm_s",
        "lm_head_s",
        "attention_s",
        "allreduce_s",
        "small_ops_s",
        "launch_s",
        "host_s",
    ]
    .iter()
    .map(|k| step[*k].as_f64().unwrap())
    .sum::<f64>()
        - step["host_overlap_s"].as_f64().unwrap();
    let total = step["total_s"].as_f64().unwrap();
    assert!(
        (parts - total).abs() <= 1e-9 * total.max(1.0) + 1e-12,
        "{parts} vs {total}"
    );
    assert!(stream_s <= step["gemm_s"].as_f64().unwrap());
    // Batch 1: one token per step.
    let tps = v["output_tokens_per_s"].as_f64().unwrap();
    assert!((tps * total - 1.0).abs() < 1e-9, "{tps} tok/s at {total} s");
}

#[test]
fn bench_burstiness_of_zero_exits_2_with_or_without_a_rate() {
    // As vLLM: the burstiness is a gamma shape and must be > 0 whatever the rate.
    for rate in [None, Some("5")] {
        let mut args = vec!["bench", "--burstiness", "0", "--num-prompts", "10"];
        if let Some(r) = rate {
            args.extend(["--request-rate", r]);
        }
        let (code, _, err) = servesim(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--burstiness"), "{err}");
    }
}

#[test]
fn estimate_unknown_model_exits_2() {
    let (code, out, err) = servesim(&["estimate", "--model", "gpt-17b", "--gpu", "h100-sxm"]);
    assert_one_line_input_error(code, &err);
    assert!(err.contains("gpt-17b"), "{err}");
    assert!(out.is_empty(), "{out}");
}

#[test]
fn estimate_tp_not_dividing_heads_exits_2() {
    let (code, _, err) = servesim(&[
        "estimate",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "3",
    ]);
    assert_one_line_input_error(code, &err);
    assert!(err.contains('3'), "{err}");
}

#[test]
fn estimate_model_too_large_for_the_gpu_exits_2() {
    let (code, _, err) = servesim(&["estimate", "--model", "llama-3.1-405b", "--gpu", "h100-sxm"]);
    assert_one_line_input_error(code, &err);
    assert!(err.contains("llama-3.1-405b"), "{err}");
}

#[test]
fn unknown_gpu_exits_2() {
    let (code, _, err) = servesim(&["estimate", "--gpu", "h900-imaginary"]);
    assert_one_line_input_error(code, &err);
    assert!(err.contains("h900-imaginary"), "{err}");
}

const GOOD_SCENARIO: &str = r#"
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"

[workload]
dataset = "sharegpt"
num_requests = 20
[workload.arrival]
kind = "poisson"
rate_per_s = 1.0
"#;

#[test]
fn run_scenario_with_unknown_key_names_the_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, format!("{GOOD_SCENARIO}\n[scheduler]\nfoo = 1\n")).unwrap();
    let (code, out, err) = servesim(&["run", path.to_str().unwrap()]);
    assert_input_error(code, &err);
    assert!(err.contains("scheduler.foo"), "{err}");
    assert!(out.is_empty(), "{out}");

    // The same file without the unknown key runs (so the key is what failed).
    std::fs::write(&path, GOOD_SCENARIO).unwrap();
    let (code, _, err) = servesim(&["run", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn run_scenario_with_toml_syntax_error_reports_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    // Line 3 has an unterminated string.
    std::fs::write(
        &path,
        "[deployment]\ngpu = \"h100-sxm\"\nmodel = \"llama-3.1-8b\n",
    )
    .unwrap();
    let (code, _, err) = servesim(&["run", path.to_str().unwrap()]);
    assert_input_error(code, &err);
    assert!(err.contains("broken.toml"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("column"), "{err}");
}

#[test]
fn run_set_negative_rate_names_the_key() {
    let (code, _, err) = servesim(&["run", "--set", "workload.arrival.rate_per_s=-3"]);
    assert_input_error(code, &err);
    assert!(err.contains("workload.arrival.rate_per_s"), "{err}");
    assert!(err.contains("-3"), "{err}");
}

#[test]
fn run_missing_scenario_file_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let (code, _, err) = servesim(&["run", path.to_str().unwrap()]);
    assert_input_error(code, &err);
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn bench_bad_flags_exit_2() {
    let (code, _, err) = servesim(&[
        "bench",
        "--dataset-name",
        "no-such-dataset",
        "--num-prompts",
        "5",
    ]);
    assert_input_error(code, &err);
    assert!(err.contains("no-such-dataset"), "{err}");

    let (code, _, err) = servesim(&["bench", "--router", "random-walk", "--num-prompts", "5"]);
    assert_input_error(code, &err);
    assert!(err.contains("random-walk"), "{err}");

    let (code, _, err) = servesim(&["bench", "--goodput", "ttft", "--num-prompts", "5"]);
    assert_input_error(code, &err);
}

#[test]
fn bench_negative_numbers_are_input_errors_naming_the_flag() {
    // A negative number after a flag is its value (clap read `-3` as an unknown flag), and
    // the error names the flag the user typed, not the scenario key it sets.
    for (flag, value) in [
        ("--kv-offloading-size", "-3"),
        ("--gpu-memory-utilization", "-0.5"),
        ("--kv-transfer-latency-us", "-1"),
    ] {
        let mut args = vec!["bench", flag, value, "--num-prompts", "5"];
        if flag == "--kv-transfer-latency-us" {
            args.extend(["--prefill-replicas", "1", "--decode-replicas", "1"]);
        }
        let (code, _, err) = servesim(&args);
        assert_one_line_input_error(code, &err);
        assert!(err.contains(&format!("{flag}: ")), "{flag}: {err}");
        assert!(err.contains(value), "{flag}: {err}");
        assert!(!err.contains("unexpected argument"), "{flag}: {err}");
    }
}

#[test]
fn plan_price_of_zero_negative_or_nan_exits_2_naming_the_flag_and_writes_no_report() {
    // A $0 GPU-hour would make every deployment cost $0 per million tokens: the plan could
    // not rank them by cost. The error names the flag, says why, and comes before any work.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    for value in ["0", "-1.5", "NaN", "inf"] {
        let (code, stdout, err) =
            servesim(&["plan", "--price", value, "--out", out.to_str().unwrap()]);
        assert_one_line_input_error(code, &err);
        assert!(stdout.is_empty(), "{value}: {stdout}");
        assert!(err.contains("--price: "), "{value}: {err}");
        assert!(
            err.contains("must be a $/GPU-hour price > 0"),
            "{value}: {err}"
        );
        assert!(!err.contains("unexpected argument"), "{value}: {err}");
        assert!(!out.exists(), "{value}: a report folder was started");
    }
    let (_, _, err) = servesim(&["plan", "--price", "0", "--out", out.to_str().unwrap()]);
    assert!(err.contains("$0 per million tokens"), "{err}");
}

#[test]
fn estimate_moe_weight_bandwidth_counts_only_the_experts_the_step_reads() {
    // Mixtral 8x7B in BF16 on two H100s at batch 1: one token activates its top-2 of 8
    // experts, so the step reads the parameters one token multiplies (`params_active`: the
    // top-k experts, attention, router and LM head; not the embedding table), split over TP 2,
    // at 2 bytes each. Second method: the report's own `params_active`.
    let json = |batch: &str| -> serde_json::Value {
        let (code, out, err) = servesim(&[
            "estimate",
            "--model",
            "mixtral-8x7b",
            "--gpu",
            "h100-sxm",
            "--tp",
            "2",
            "--decode-batch",
            batch,
            "--context",
            "1024",
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let v = json("1");
    let read = v["weight_bytes_read_per_gpu"].as_f64().unwrap();
    let held = v["weights_bytes_per_gpu"].as_f64().unwrap();
    let active = v["params_active"].as_f64().unwrap() * 2.0 / 2.0;
    assert!(
        (read / active - 1.0).abs() < 0.01,
        "read {read:e}, active {active:e}"
    );
    assert!(read < 0.3 * held, "read {read:e} of {held:e} held");
    // The implied bandwidth is those bytes over the GEMM time: physical (below the H100's
    // 3.35 TB/s datasheet), not the 10 TB/s all the experts over the same time would imply.
    let bw = v["implied_weight_bandwidth_bytes_per_s"].as_f64().unwrap();
    assert!((1.5e12..3.35e12).contains(&bw), "{bw:e}");
    // 512 tokens activate every expert (1 - (6/8)^512 = 1): the step reads all it holds but
    // the embedding table.
    let v = json("512");
    let read = v["weight_bytes_read_per_gpu"].as_f64().unwrap();
    let held = v["weights_bytes_per_gpu"].as_f64().unwrap();
    let embedding = 32_000.0 * 4_096.0 * 2.0 / 2.0;
    assert!(
        (read - (held - embedding)).abs() < 1e3,
        "{read:e} vs {held:e}"
    );
}
