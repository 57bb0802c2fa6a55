//! Issue #17, "one answer everywhere": the commands agree with each other, nothing leaves a
//! plan in silence, and an SLO no candidate meets comes with guidance. One test (or a few) per
//! point of the issue, each through the command line as a user would meet it.

mod common;

use std::path::Path;

use common::{servesim, servesim_in};
use serde_json::Value;

const CODE: &str = "scenarios/code-completion.toml";

/// Exit code 2, an `error:` message, no panic.
fn assert_input_error(code: i32, stderr: &str) {
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.starts_with("error:"), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `servesim plan` with `args` into a temporary report folder: (exit code, stdout, stderr,
/// plan.json when written).
fn plan(args: &[&str]) -> (i32, String, String, Option<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let mut all = vec!["plan"];
    all.extend(args);
    all.extend(["--out", report.to_str().unwrap()]);
    let (code, out, err) = servesim(&all);
    let file = std::fs::read_to_string(report.join("plan.json"))
        .ok()
        .map(|t| json(&t));
    (code, out, err, file)
}

/// The `servesim run --format json` summary of `scenario` with `sets`.
fn run_json(scenario: &str, sets: &[&str]) -> Value {
    let mut args = vec!["run", scenario, "--format", "json"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (code, out, err) = servesim(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    json(&out)
}

/// The `servesim estimate --format json` of the deployment `flags`.
fn estimate_json(flags: &[&str]) -> Value {
    let mut args = vec!["estimate", "--format", "json"];
    args.extend(flags);
    let (code, out, err) = servesim(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    json(&out)
}

// --- 1. One resolver for every catalog name ----------------------------------------------

#[test]
fn a_gpu_alias_names_the_same_gpu_in_estimate_run_and_plan() {
    let e = estimate_json(&["--model", "llama-3.1-8b", "--gpu", "h200", "--tp", "2"]);
    assert_eq!(e["gpu"], "h200-sxm");
    let r = run_json(
        CODE,
        &["deployment.gpu=\"h200\"", "workload.num_requests=20"],
    );
    assert_eq!(r["kv_capacity_tokens"], e["memory"]["kv_tokens"]);
    // The issue's plan: H200 given by its short name is evaluated, priced, and can win.
    let (code, _, err, p) = plan(&[
        CODE,
        "--format",
        "json",
        "--set",
        "plan.gpus=[\"h100-sxm\", \"h200\"]",
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[1]",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = p.unwrap();
    let h200: Vec<&Value> = p["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["candidate"]["gpu"] == "h200-sxm")
        .collect();
    assert_eq!(h200.len(), 1, "{p}");
    assert!(h200[0]["capacity_rate_per_replica"].as_f64().unwrap() > 0.0);
    assert_eq!(h200[0]["price_usd_per_gpu_hour"], 4.0, "priced as h200-sxm");
}

#[test]
fn an_engine_alias_selects_the_same_rows_in_validate_as_its_name() {
    let rows = |engine: &str| {
        let (code, out, err) = servesim(&[
            "validate", "--engine", engine, "--no-cv", "--format", "json",
        ]);
        assert_eq!(code, 0, "{engine}: {err}");
        json(&out)
    };
    assert_eq!(rows("tensorrt-llm"), rows("trtllm"));
    let (code, _, err) = servesim(&["validate", "--engine", "vlm"]);
    assert_input_error(code, &err);
    assert!(
        err.contains("--engine") && err.contains("unknown engine 'vlm'") && err.contains("vllm"),
        "{err}"
    );
}

#[test]
fn an_unknown_name_exits_2_naming_the_file_the_key_and_the_valid_names() {
    let (code, _, err, _) = plan(&[CODE, "--set", "plan.gpus=[\"h100-sxm\", \"h20\"]"]);
    assert_input_error(code, &err);
    assert!(
        err.contains("scenarios/code-completion.toml: plan.gpus[1]: unknown gpu 'h20'"),
        "{err}"
    );
    assert!(
        err.contains("h200-sxm") && err.contains("h200 = h200-sxm"),
        "{err}"
    );

    let (code, _, err) = servesim(&["run", CODE, "--set", "deployment.gpu=\"h20\""]);
    assert_input_error(code, &err);
    assert!(
        err.contains("scenarios/code-completion.toml: deployment.gpu: unknown gpu 'h20'"),
        "{err}"
    );
    assert!(err.contains("h200-sxm"), "{err}");

    let (code, _, err) = servesim(&["estimate", "--gpu", "h20"]);
    assert_input_error(code, &err);
    assert!(
        err.contains("unknown gpu 'h20'") && err.contains("b200"),
        "{err}"
    );

    let (code, _, err, _) = plan(&[CODE, "--set", "plan.dtypes=[\"fp2\"]"]);
    assert_input_error(code, &err);
    assert!(err.contains("plan.dtypes[0]: unknown dtype 'fp2'"), "{err}");

    let (code, _, err) = servesim(&["run", CODE, "--set", "deployment.engine=\"vlm\""]);
    assert_input_error(code, &err);
    assert!(
        err.contains("deployment.engine: unknown engine 'vlm'") && err.contains("trtllm"),
        "{err}"
    );
}

/// A GPU profile of its own (a copy of the H100's under another name): it has no price.
fn unpriced_profile(dir: &Path) -> String {
    let text = std::fs::read_to_string("calibration/gpus/h100-sxm.toml").unwrap();
    let text = text.replace("name = \"h100-sxm\"", "name = \"my-gpu\"");
    assert!(text.contains("name = \"my-gpu\""));
    let path = dir.join("my-gpu.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_plan_whose_every_candidate_cannot_run_exits_2_with_each_reason() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = unpriced_profile(dir.path());
    let (code, _, err, p) = plan(&[CODE, "--set", &format!("plan.gpus=[\"{gpu}\"]")]);
    assert_input_error(code, &err);
    assert!(p.is_none(), "no report for bad input");
    assert!(
        err.contains("none of the 4 candidates of the search space can run"),
        "{err}"
    );
    assert_eq!(
        err.matches("unknown price for gpu 'my-gpu'").count(),
        4,
        "{err}"
    );
    // With a price it plans.
    let (code, _, err, _) = plan(&[
        CODE,
        "--price",
        "2",
        "--set",
        &format!("plan.gpus=[\"{gpu}\"]"),
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[1]",
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn no_candidate_leaves_the_plan_without_a_line_saying_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = unpriced_profile(dir.path());
    // 18 candidates: 6 with an unpriced GPU, 4 more whose TP 3 does not divide the heads, so
    // some fall below the table's 15 rows.
    let (code, out, err, p) = plan(&[
        CODE,
        "--set",
        &format!("plan.gpus=[\"h100\", \"h200\", \"{gpu}\"]"),
        "--set",
        "plan.tp=[1, 2, 3]",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = p.unwrap();
    let candidates = p["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 18);
    let not_run: Vec<&Value> = candidates
        .iter()
        .filter(|c| c["simulations"] == 0 && c["status"] == "infeasible")
        .collect();
    assert_eq!(not_run.len(), 10, "{p}");
    for c in not_run {
        let k = &c["candidate"];
        let (gpu, dtype) = (k["gpu"].as_str().unwrap(), k["dtype"].as_str().unwrap());
        let note = c["note"].as_str().unwrap();
        let tp = k["tp"].as_u64().unwrap();
        let said = out.lines().any(|l| {
            l.contains(gpu)
                && l.contains(dtype)
                && l.contains(note)
                && (l.contains(&format!("TP{tp} ")) || l.contains(&format!(" {tp}  256")))
        });
        assert!(said, "no line for {k} ({note}) in:\n{out}");
    }
    assert!(out.contains("Infeasible, below the table ("), "{out}");
}

// --- 2. One KV-format rule, printed in every summary ------------------------------------

#[test]
fn fp8_weights_with_auto_kv_run_an_fp8_kv_cache_in_every_command() {
    let e = estimate_json(&["--model", "llama-3.1-70b", "--tp", "2", "--dtype", "fp8"]);
    assert_eq!(e["kv_cache_dtype"], "fp8");
    assert_eq!(e["kv_bytes_per_token"], 163_840.0, "1 byte per element");
    let sets = [
        "deployment.model=\"llama-3.1-70b\"",
        "deployment.tp=2",
        "deployment.dtype=\"fp8\"",
        "workload.num_requests=20",
    ];
    let r = run_json(CODE, &sets);
    assert_eq!(r["kv_cache_dtype"], "fp8");
    assert_eq!(r["weight_dtype"], "fp8");
    assert_eq!(r["kv_capacity_tokens"], e["memory"]["kv_tokens"]);
    // An explicit format is kept, and halves the capacity back.
    let mut bf16 = sets.to_vec();
    bf16.push("deployment.kv_cache_dtype=\"bf16\"");
    let r16 = run_json(CODE, &bf16);
    assert_eq!(r16["kv_cache_dtype"], "bf16");
    let (fp8_tokens, bf16_tokens) = (
        r["kv_capacity_tokens"].as_f64().unwrap(),
        r16["kv_capacity_tokens"].as_f64().unwrap(),
    );
    assert!(
        (fp8_tokens / bf16_tokens - 2.0).abs() < 0.01,
        "{fp8_tokens} {bf16_tokens}"
    );

    // The tables say it in words.
    let (_, out, _) = servesim(&["estimate", "--model", "llama-3.1-8b", "--dtype", "fp8"]);
    assert!(out.contains("fp8 weights, fp8 KV"), "{out}");
    let mut args = vec!["run", CODE];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let (_, out, _) = servesim(&args);
    assert!(out.contains("fp8 weights, fp8 KV"), "{out}");
    let (_, out, _) = servesim(&["estimate", "--model", "llama-3.1-8b"]);
    assert!(out.contains("bf16 weights, bf16 KV"), "{out}");
}

#[test]
fn the_plans_candidate_and_its_rerun_have_the_same_kv_format_and_capacity() {
    let (code, _, err, p) = plan(&[
        CODE,
        "--format",
        "json",
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[1]",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = p.unwrap();
    let c = &p["candidates"][0];
    assert_eq!(c["candidate"]["kv_cache_dtype"], "fp8");
    // Re-created with `run` as a user would: weights and batch cap, the KV format left auto.
    let r = run_json(
        CODE,
        &[
            "deployment.dtype=\"fp8\"",
            "deployment.tp=1",
            "scheduler.max_num_seqs=256",
            "workload.num_requests=20",
        ],
    );
    assert_eq!(r["kv_cache_dtype"], "fp8");
    assert_eq!(r["kv_capacity_tokens"], c["kv_capacity_tokens"]);
}

/// `plan.dtypes = ["auto"]` plans the checkpoint's own formats, as `estimate --dtype auto` and
/// `run` resolve them (it used to plan gpt-oss as a BF16 model of 3.3x the size); the table
/// names the formats, plan.json keeps `auto` for the re-run with the formats beside it.
#[test]
fn a_plans_auto_dtype_is_the_checkpoints_own_formats() {
    let (code, out, err, p) = plan(&[
        CODE,
        "--set",
        "deployment.model=\"gpt-oss-20b\"",
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.dtypes=[\"auto\"]",
        "--set",
        "plan.tp=[1]",
        "--set",
        "plan.max_num_seqs=[64]",
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let c = &p.unwrap()["candidates"][0];
    // Re-created with `run` as a user would write it: the deployment's dtype left `auto`.
    let r = run_json(
        CODE,
        &[
            "deployment.model=\"gpt-oss-20b\"",
            "deployment.gpu=\"h100-sxm\"",
            "deployment.dtype=\"auto\"",
            "deployment.tp=1",
            "scheduler.max_num_seqs=64",
            "workload.num_requests=20",
        ],
    );
    assert_eq!(c["candidate"]["dtype"], "auto");
    assert_eq!(c["candidate"]["formats"], r["weight_dtype"]);
    assert_eq!(r["weight_dtype"], "mxfp4 experts + bf16");
    assert_eq!(c["candidate"]["kv_cache_dtype"], r["kv_cache_dtype"]);
    assert_eq!(c["kv_capacity_tokens"], r["kv_capacity_tokens"]);
    assert!(out.contains("mxfp4 experts + bf16"), "{out}");
}

/// A scenario that names a published checkpoint (`deployment.checkpoint`) plans it: `auto`
/// candidates carry its formats and KV capacity as `run` and `estimate --checkpoint` resolve
/// them, not the model's own checkpoint's (the plan once labelled and sized them as DeepSeek-R1's
/// own block-FP8 checkpoint).
#[test]
fn a_plan_runs_the_checkpoint_its_scenario_names() {
    const R1_V2: &str = "nvidia/DeepSeek-R1-0528-NVFP4-v2";
    let checkpoint = format!("deployment.checkpoint=\"{R1_V2}\"");
    let (code, out, err, p) = plan(&[
        "scenarios/deepseek-v3-chat.toml",
        "--set",
        "deployment.model=\"deepseek-r1\"",
        "--set",
        &checkpoint,
        "--set",
        "plan.gpus=[\"b200\"]",
        "--set",
        "plan.dtypes=[\"auto\"]",
        "--set",
        "plan.tp=[8]",
        "--set",
        "plan.dp=[1]",
        "--set",
        "plan.expert_parallel=[true]",
        "--set",
        "plan.max_num_seqs=[128]",
        "--set",
        "workload.arrival.rate_per_s=2.0",
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let c = &p.unwrap()["candidates"][0];
    let r = run_json(
        "scenarios/deepseek-v3-chat.toml",
        &[
            "deployment.model=\"deepseek-r1\"",
            &checkpoint,
            "deployment.gpu=\"b200\"",
            "deployment.dtype=\"auto\"",
            "deployment.tp=8",
            "deployment.ep=8",
            "scheduler.max_num_seqs=128",
            "workload.num_requests=20",
        ],
    );
    assert_eq!(r["weight_dtype"], "fp4 + bf16 attention, fp4 O projection");
    assert_eq!(c["candidate"]["formats"], r["weight_dtype"]);
    assert_eq!(c["candidate"]["kv_cache_dtype"], r["kv_cache_dtype"]);
    assert_eq!(c["kv_capacity_tokens"], r["kv_capacity_tokens"]);
    assert!(
        out.contains("fp4 + bf16 attention, fp4 O projection"),
        "{out}"
    );
    let e = estimate_json(&[
        "--model",
        "deepseek-r1",
        "--gpu",
        "b200",
        "--tp",
        "8",
        "--enable-expert-parallel",
        "--checkpoint",
        R1_V2,
        "--max-num-seqs",
        "128",
    ]);
    assert_eq!(e["dtype"], r["weight_dtype"]);
    // An undeclared checkpoint is an input error naming the key.
    let (code, _, err) = servesim(&[
        "estimate",
        "--model",
        "deepseek-r1",
        "--gpu",
        "b200",
        "--tp",
        "8",
        "--checkpoint",
        "nvidia/not-published",
    ]);
    assert_input_error(code, &err);
    assert!(err.contains("deployment.checkpoint"), "{err}");
}

// --- 3. estimate and run (and bench) agree on the KV capacity ---------------------------

#[test]
fn estimate_run_and_bench_report_the_same_kv_capacity_per_replica() {
    // The issue's figures: Llama-3.1-8B on an H100 (estimate 457,056 against run 449,056),
    // Llama-2-7B (estimate 7,463 blocks against bench 7,379).
    let e = estimate_json(&["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]);
    let r = run_json("scenarios/default.toml", &["workload.num_requests=20"]);
    assert_eq!(e["memory"]["kv_tokens"], r["kv_capacity_tokens"]);

    let e = estimate_json(&["--model", "llama-2-7b"]);
    let (code, out, err) = servesim(&[
        "bench",
        "--model",
        "llama-2-7b",
        "--num-prompts",
        "10",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let b = json(&out);
    assert_eq!(e["memory"]["kv_tokens"], b["kv_capacity_tokens"]);
    // And with the same scheduler flags.
    let e = estimate_json(&[
        "--model",
        "llama-2-7b",
        "--max-num-seqs",
        "128",
        "--max-num-batched-tokens",
        "2048",
    ]);
    let (code, out, err) = servesim(&[
        "bench",
        "--model",
        "llama-2-7b",
        "--num-prompts",
        "10",
        "--max-num-seqs",
        "128",
        "--max-num-batched-tokens",
        "2048",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(e["memory"]["kv_tokens"], json(&out)["kv_capacity_tokens"]);

    // A replica's capacity is labelled as such (each GPU of a TP group holds a share of it).
    let (_, out, _) = servesim(&["estimate", "--model", "llama-3.1-70b", "--tp", "4"]);
    assert!(out.contains("KV capacity per replica"), "{out}");
    assert!(!out.contains("KV capacity per GPU"), "{out}");
}

// --- 4. plan starts from its search space ----------------------------------------------

#[test]
fn plan_starts_from_its_search_space_when_the_scenarios_deployment_does_not_fit() {
    // The chat scenario with Llama-3.1-405B bf16 at TP 4 on H100, which does not fit: `run`
    // says so...
    let chat = "scenarios/chat-slo.toml";
    let base = [
        "--set",
        "deployment.model=\"llama-3.1-405b\"",
        "--set",
        "workload.arrival.rate_per_s=2",
    ];
    let mut args = vec!["run", chat];
    args.extend(base);
    let (code, _, err) = servesim(&args);
    assert_input_error(code, &err);
    assert!(err.contains("does not fit on h100-sxm at TP 4"), "{err}");
    // ... but the plan's space (fp8, TP 8) holds feasible candidates, and the plan uses them.
    let mut args = vec![chat, "--format", "json"];
    args.extend(base);
    args.extend([
        "--set",
        "plan.gpus=[\"h200-sxm\"]",
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[8]",
        "--set",
        "plan.max_num_seqs=[128]",
    ]);
    let (code, _, err, p) = plan(&args);
    assert_eq!(code, 0, "{err}");
    let p = p.unwrap();
    let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
    let c = &p["candidates"][i]["candidate"];
    assert_eq!(
        (c["dtype"].as_str(), c["tp"].as_u64()),
        (Some("fp8"), Some(8))
    );
}

// --- 5. An SLO no candidate meets gets guidance -----------------------------------------

#[test]
fn an_impossible_slo_prints_each_candidates_best_latencies_and_the_nearest_slo() {
    let (code, out, err, p) = plan(&[CODE, "--set", "slo.ttft_ms=1", "--set", "slo.tpot_ms=1"]);
    // Nothing to recommend: exit 1, the table and the report written all the same.
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no candidate meets the SLOs"), "{err}");
    let p = p.unwrap();
    assert!(p["chosen"].is_null());
    assert!(
        out.contains("Best latencies at light load"),
        "no guidance in the table:\n{out}"
    );
    let candidates = p["candidates"].as_array().unwrap();
    for c in candidates {
        let l = &c["light_load"];
        let line = format!(
            "at {:.3} req/s per replica: p99 TTFT {:.1} ms, p99 TPOT {:.2} ms",
            l["rate_per_s"].as_f64().unwrap(),
            l["ttft_ms"].as_f64().unwrap(),
            l["tpot_ms"].as_f64().unwrap()
        );
        let label = format!(
            "{} {} TP{} seqs {}",
            c["candidate"]["gpu"].as_str().unwrap(),
            c["candidate"]["dtype"].as_str().unwrap(),
            c["candidate"]["tp"],
            c["candidate"]["max_num_seqs"]
        );
        assert!(
            out.lines().any(|x| x.contains(&label) && x.contains(&line)),
            "no line '{label} ... {line}' in:\n{out}"
        );
    }
    let nearest = p["nearest_slo"].as_str().unwrap();
    assert!(out.contains(nearest), "{out}");
}

#[test]
fn an_slo_below_one_forward_pass_is_called_below_the_physical_floor() {
    // p99 TTFT 2 ms: below one forward pass of one token on either H100 deployment of the
    // 8B model searched (at TP 2 each GPU streams 4 GB of FP8 weights, ~1.4 ms, plus the
    // kernels' fixed costs and the engine's host time: 2.87 ms).
    let space = [
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[1, 2]",
        "--set",
        "plan.max_num_seqs=[128]",
    ];
    let floor_of = |text: &str, what: &str| -> f64 {
        let at = text
            .find(&format!("the p99 {what} SLO of "))
            .unwrap_or_else(|| panic!("no {what} floor in:\n{text}"));
        let rest = &text[at..];
        let from = rest.find("physical floor of ").unwrap() + "physical floor of ".len();
        rest[from..].split(' ').next().unwrap().parse().unwrap()
    };
    let mut args = vec![CODE, "--set", "slo.ttft_ms=2.0"];
    args.extend(space);
    let (code, out, err, p) = plan(&args);
    assert_eq!(code, 1, "{err}");
    let p = p.unwrap();
    let floor = floor_of(&out, "TTFT");
    assert!(err.contains("below the physical floor"), "{err}");
    assert!(p["slo_below_floor"]
        .as_str()
        .unwrap()
        .contains("one forward pass"));
    // Second method: the best p99 TTFT any candidate reached at light load is above it.
    let best = best_light_load(&p, "ttft_ms");
    assert!(
        2.0 < floor && floor <= best,
        "floor {floor} ms, best light-load TTFT {best} ms"
    );
    // TPOT: one decode step at batch 1, under the best light-load p99 TPOT.
    let mut args = vec![CODE, "--set", "slo.tpot_ms=1.0"];
    args.extend(space);
    let (code, out, _, p) = plan(&args);
    assert_eq!(code, 1);
    let floor = floor_of(&out, "TPOT");
    let best = best_light_load(&p.unwrap(), "tpot_ms");
    assert!(
        1.0 < floor && floor <= best,
        "floor {floor} ms, best light-load TPOT {best} ms"
    );
    // An SLO no candidate meets but above the floor says nothing of a floor.
    let mut args = vec![CODE, "--set", "slo.ttft_ms=5.0"];
    args.extend(space);
    let (code, out, _, p) = plan(&args);
    assert_eq!(code, 1);
    assert!(!out.contains("physical floor"), "{out}");
    assert!(p.unwrap().get("slo_below_floor").is_none());
}

/// The lowest light-load latency (`key`: `ttft_ms`, `tpot_ms`) any candidate of plan.json `p`
/// reached, ms.
fn best_light_load(p: &Value, key: &str) -> f64 {
    p["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["light_load"][key].as_f64())
        .fold(f64::INFINITY, f64::min)
}

// --- plan --seed ------------------------------------------------------------------------

#[test]
fn plan_seed_overrides_the_scenarios_seed() {
    let space = [
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.dtypes=[\"fp8\"]",
        "--set",
        "plan.tp=[1]",
    ];
    let with = |extra: &[&str]| {
        let mut args = vec![CODE, "--format", "json"];
        args.extend(space);
        args.extend(extra);
        let (code, out, err, _) = plan(&args);
        assert_eq!(code, 0, "{err}");
        json(&out)
    };
    let mut by_flag = with(&["--seed", "11"]);
    let mut by_key = with(&["--set", "seed=11"]);
    // The re-run line repeats the invocation (`--seed 11` or `--set seed=11`); both reproduce it.
    let flag_line = by_flag["detail"]["run_command"].take();
    let key_line = by_key["detail"]["run_command"].take();
    assert_eq!(by_flag["recommendation"]["run_command"].take(), flag_line);
    assert_eq!(by_key["recommendation"]["run_command"].take(), key_line);
    // The seed is a word pair of the line wherever it stands (the plan appends its run length
    // and seed to the scenario's own overrides).
    let has_pair = |line: &serde_json::Value, a: &str, b: &str| {
        let words: Vec<&str> = line.as_str().unwrap().split_whitespace().collect();
        words.windows(2).any(|w| w[0] == a && w[1] == b)
    };
    assert!(has_pair(&flag_line, "--seed", "11"), "{flag_line}");
    assert!(has_pair(&key_line, "--set", "seed=11"), "{key_line}");
    assert_eq!(by_flag, by_key, "--seed 11 plans as seed = 11 does");
    let default = with(&[]);
    assert_ne!(
        by_flag["candidates"][0]["capacity_rate_per_replica"],
        default["candidates"][0]["capacity_rate_per_replica"],
        "another seed draws other requests"
    );
}

// --- 6. Smaller friction ---------------------------------------------------------------

#[test]
fn sweep_prints_a_table_json_or_csv_and_csv_when_piped() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sweep");
    let sweep = |format: Option<&str>| {
        let mut args = vec![
            "sweep",
            "scenarios/chat-slo.toml",
            "--vary",
            "workload.arrival.rate_per_s=10,20",
            "--vary",
            "deployment.tp=3,4",
            "--out",
            out_dir.to_str().unwrap(),
        ];
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        let (code, out, err) = servesim(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    let table = sweep(Some("table"));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("servesim sweep: chat-slo (4 points, 2 failed)"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("workload.arrival.rate_per_s  deployment.tp  req/s")
            && lines[1].contains("p99 TTFT ms")
            && lines[1].contains("verdict"),
        "{table}"
    );
    // One row per point, in grid order (first key outermost), values first.
    for (i, (rate, tp)) in [("10", "3"), ("10", "4"), ("20", "3"), ("20", "4")]
        .iter()
        .enumerate()
    {
        let cells: Vec<&str> = lines[2 + i].split_whitespace().collect();
        assert_eq!((cells[0], cells[1]), (*rate, *tp), "{table}");
        if *tp == "3" {
            assert!(lines[2 + i].contains("error:") && lines[2 + i].contains("does not divide"));
        } else {
            assert!(lines[2 + i].contains("sustainable"), "{table}");
        }
    }
    let csv = sweep(Some("csv"));
    assert_eq!(
        csv,
        std::fs::read_to_string(out_dir.join("sweep.csv")).unwrap()
    );
    assert_eq!(sweep(None), csv, "stdout is a pipe here: csv by default");
    let json_out = json(&sweep(Some("json")));
    let file = json(&std::fs::read_to_string(out_dir.join("sweep.json")).unwrap());
    assert_eq!(json_out, file);
    assert_eq!(json_out.as_array().unwrap().len(), 4);
}

#[test]
fn the_sweep_docs_page_exists_and_its_commands_run() {
    let page = std::fs::read_to_string("docs/sweep.md").expect("docs/sweep.md");
    let readme = std::fs::read_to_string("README.md").unwrap();
    assert!(readme.contains("docs/sweep.md"), "README links the page");
    // Every `$ servesim sweep` command of the page runs (continuation lines joined).
    let mut commands = Vec::new();
    let mut lines = page.lines();
    while let Some(l) = lines.next() {
        if let Some(c) = l.strip_prefix("$ servesim sweep ") {
            let mut c = c.to_string();
            while c.ends_with('\\') {
                c.pop();
                c.push_str(lines.next().unwrap().trim());
            }
            commands.push(c);
        }
    }
    assert!(commands.len() >= 4, "{commands:?}");
    let dir = tempfile::tempdir().unwrap();
    for c in &commands {
        // The page's shell quoting: single quotes around words without spaces.
        let mut args = vec!["sweep".to_string()];
        args.extend(
            c.split_whitespace()
                .map(|w| w.trim_matches('\'').to_string()),
        );
        args.extend(["--out".into(), dir.path().display().to_string()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = servesim(&refs);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
}

#[test]
fn every_path_in_a_scenario_resolves_from_the_scenario_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let folder = root.join("scenarios");
    // A config.json in a folder named `my` (the issue's case), a GPU profile and an engine
    // profile of one's own, all beside the scenario.
    std::fs::create_dir_all(folder.join("my")).unwrap();
    std::fs::create_dir_all(folder.join("profiles")).unwrap();
    std::fs::write(
        folder.join("my/config.json"),
        r#"{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 131072}"#,
    )
    .unwrap();
    let gpu = std::fs::read_to_string("calibration/gpus/h100-sxm.toml").unwrap();
    std::fs::write(folder.join("profiles/gpu.toml"), gpu).unwrap();
    let engine = std::fs::read_to_string("calibration/engines/vllm.toml").unwrap();
    std::fs::write(folder.join("profiles/engine.toml"), engine).unwrap();
    std::fs::write(folder.join("lengths.txt"), "100\n200\n300\n").unwrap();
    std::fs::write(
        folder.join("s.toml"),
        r#"name = "paths"
[deployment]
model = "my/config.json"
gpu = "profiles/gpu.toml"
engine = "profiles/engine.toml"
[workload]
num_requests = 50
input = { kind = "empirical", path = "lengths.txt" }
output = { kind = "fixed", tokens = 20 }
[workload.arrival]
kind = "poisson"
rate_per_s = 5.0
[slo]
ttft_ms = 2000.0
[plan]
gpus = ["profiles/gpu.toml", "h200"]
dtypes = ["fp8"]
tp = [1]
max_num_seqs = [64]
"#,
    )
    .unwrap();
    // Run from another directory: the working directory must not matter.
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let (code, out, err) = servesim_in(&elsewhere, &["run", "../scenarios/s.toml"]);
    assert_eq!(code, 0, "{err}");
    // Named by type and size, not by its folder `my`.
    assert!(out.contains("llama-8.0B on 1 replica(s)"), "{out}");
    let report = root.join("report");
    let (code, _, err) = servesim_in(
        &elsewhere,
        &[
            "plan",
            "../scenarios/s.toml",
            "--price",
            "2",
            "--format",
            "json",
            "--out",
            report.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let p = json(&std::fs::read_to_string(report.join("plan.json")).unwrap());
    for c in p["candidates"].as_array().unwrap() {
        assert!(
            c["capacity_rate_per_replica"].as_f64().unwrap() > 0.0,
            "{c}"
        );
    }
}

/// A servesim trace of `rows` arrivals `gap` apart on average (exponential), written as is.
fn write_trace(path: &Path, rows: usize, mean_gap: f64) {
    let mut text = String::from("arrival_s,input_tokens,output_tokens\n");
    let mut t = 0.0;
    let mut x: u64 = 12345;
    for _ in 0..rows {
        // A small LCG: the test needs spread-out gaps, not good randomness.
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        t += -mean_gap * u.ln();
        text.push_str(&format!("{t:.3},200,50\n"));
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_trace_that_looks_like_milliseconds_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    // 1,500 arrivals 0.5 s apart on average, written in milliseconds.
    write_trace(&dir.path().join("ms.csv"), 1500, 500.0);
    write_trace(&dir.path().join("s.csv"), 1500, 0.5);
    write_trace(&dir.path().join("short.csv"), 900, 500.0);
    let scenario = |trace: &str| {
        let path = dir.path().join(format!("{trace}.toml"));
        std::fs::write(
            &path,
            format!(
                "[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n\
                 [workload.arrival]\nkind = \"trace\"\npath = \"{trace}\"\n"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let warnings = |trace: &str, extra: &[&str]| {
        let sc = scenario(trace);
        let mut args = vec!["run", sc.as_str(), "--format", "json"];
        for e in extra {
            args.extend(["--set", e]);
        }
        let (code, out, err) = servesim(&args);
        assert_eq!(code, 0, "{err}");
        let w: Vec<String> = json(&out)["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        for x in &w {
            assert!(err.contains(x.as_str()), "on stderr too: {err}");
        }
        w
    };
    let w = warnings("ms.csv", &[]);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("ms.csv") && w[0].contains("milliseconds") && w[0].contains("time_scale"),
        "{w:?}"
    );
    assert!(warnings("ms.csv", &["workload.arrival.time_scale=0.001"]).is_empty());
    assert!(warnings("s.csv", &[]).is_empty());
    assert!(
        warnings("short.csv", &[]).is_empty(),
        "1,000 rows or fewer: no judgement"
    );
    // The table says it too.
    let sc = scenario("ms.csv");
    let (_, out, _) = servesim(&["run", &sc]);
    assert!(
        out.contains("WARNING:") && out.contains("milliseconds"),
        "{out}"
    );
}

#[test]
fn the_annotated_example_is_the_shipped_file() {
    let doc = std::fs::read_to_string("docs/scenarios.md").unwrap();
    let section = &doc[doc.find("## An annotated example").expect("the section")..];
    let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + section[start..].find("```").unwrap();
    let shipped = std::fs::read_to_string("scenarios/chat-slo.toml").unwrap();
    assert_eq!(
        &section[start..end],
        shipped,
        "docs/scenarios.md's annotated example differs from scenarios/chat-slo.toml"
    );
}

// --- The catalog-wide check --------------------------------------------------------------

/// KV capacity per replica and KV format one command reports for a deployment, or `None`
/// when the command rejects it (exit 2).
type Kv = Option<(u64, String)>;

fn kv_of(args: &[&str], capacity: &dyn Fn(&Value) -> (u64, String)) -> Kv {
    let (code, out, err) = servesim(args);
    match code {
        0 => Some(capacity(&json(&out))),
        2 => {
            assert!(err.starts_with("error:"), "{args:?}: {err}");
            None
        }
        _ => panic!("{args:?}: exit {code}: {err}"),
    }
}

/// Every model x GPU x dtype x TP of the catalog, at max_num_seqs 256: `estimate`, `run`,
/// `bench` and the candidate of a `plan` agree on whether it fits, and where it fits on the
/// KV capacity per replica and the KV format (`auto` resolved by the one rule).
#[test]
fn every_catalog_deployment_has_one_kv_capacity_and_format_in_every_command() {
    use servesim::gpu::gpu_names;
    use servesim::model::catalog_names;
    let dir = tempfile::tempdir().unwrap();
    let dtypes = ["bf16", "fp16", "fp8"];
    let tps = [1u32, 2, 4, 8, 16];
    let pairs: Vec<(&str, &str)> = catalog_names()
        .into_iter()
        .flat_map(|m| gpu_names().into_iter().map(move |g| (m, g)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let fitting = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(model, gpu)) = pairs.get(i) else {
                    break;
                };
                let n = check_pair(dir.path(), model, gpu, &dtypes, &tps);
                fitting.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            });
        }
    });
    let fitting = fitting.into_inner();
    // Every catalog model x GPU x dtype x TP; most fit (every model of the 2024 catalog fits
    // on some TP of every GPU; the 2026 MoE models need more than 16 GPUs on some).
    let total = pairs.len() * dtypes.len() * tps.len();
    eprintln!("{fitting} of {total} deployments fit");
    assert!(fitting > 400, "only {fitting} deployments fit");
}

/// Checks one model on one GPU over `dtypes` x `tps`; returns how many fit.
fn check_pair(dir: &Path, model: &str, gpu: &str, dtypes: &[&str], tps: &[u32]) -> usize {
    let scenario = dir.join(format!("{model}-{gpu}.toml"));
    std::fs::write(
        &scenario,
        format!(
            r#"name = "kv"
[deployment]
model = "{model}"
gpu = "{gpu}"
[scheduler]
max_num_seqs = 256
[workload]
num_requests = 1
input = {{ kind = "fixed", tokens = 1 }}
output = {{ kind = "fixed", tokens = 1 }}
[workload.arrival]
kind = "poisson"
rate_per_s = 1.0
[plan]
target_rate_per_s = 1000000.0
max_replicas = 1
dtypes = {dtypes:?}
tp = {tps:?}
dp = [1]
expert_parallel = [false]
max_num_seqs = [256]
[measure]
min_requests = 100
max_requests = 100
"#
        ),
    )
    .unwrap();
    let sc = scenario.to_str().unwrap();
    // The plan's candidates, by (dtype, tp).
    let report = dir.join(format!("{model}-{gpu}-report"));
    let (code, _, err) = servesim(&["plan", sc, "--out", report.to_str().unwrap()]);
    let plan: Option<Value> = match code {
        // 1: no candidate meets the (impossible) target, the report written whole.
        0 | 1 => Some(json(
            &std::fs::read_to_string(report.join("plan.json")).unwrap(),
        )),
        2 => None, // no candidate can run: checked against the others below
        _ => panic!("plan {model} {gpu}: exit {code}: {err}"),
    };
    let mut fits = 0;
    for dtype in dtypes {
        for &tp in tps {
            let tp_s = tp.to_string();
            let what = format!("{model} on {gpu}, {dtype}, TP {tp}");
            let estimate = kv_of(
                &[
                    "estimate",
                    "--model",
                    model,
                    "--gpu",
                    gpu,
                    "--dtype",
                    dtype,
                    "--tp",
                    &tp_s,
                    "--max-num-seqs",
                    "256",
                    "--format",
                    "json",
                ],
                &|v| {
                    (
                        v["memory"]["kv_tokens"].as_u64().unwrap(),
                        v["kv_cache_dtype"].as_str().unwrap().to_string(),
                    )
                },
            );
            let summary = |v: &Value| {
                (
                    v["kv_capacity_tokens"].as_u64().unwrap(),
                    v["kv_cache_dtype"].as_str().unwrap().to_string(),
                )
            };
            let set_dtype = format!("deployment.dtype=\"{dtype}\"");
            let set_tp = format!("deployment.tp={tp}");
            let run = kv_of(
                &[
                    "run", sc, "--set", &set_dtype, "--set", &set_tp, "--format", "json",
                ],
                &summary,
            );
            let bench = kv_of(
                &[
                    "bench",
                    "--model",
                    model,
                    "--gpu",
                    gpu,
                    "--dtype",
                    dtype,
                    "--tp",
                    &tp_s,
                    "--max-num-seqs",
                    "256",
                    "--num-prompts",
                    "1",
                    "--input-len",
                    "1",
                    "--output-len",
                    "1",
                    "--format",
                    "json",
                ],
                &summary,
            );
            let candidate: Kv = plan.as_ref().and_then(|p| {
                let c = p["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["candidate"]["dtype"] == *dtype && c["candidate"]["tp"] == tp)
                    .unwrap_or_else(|| panic!("{what}: not among the plan's candidates"));
                let kv = c["kv_capacity_tokens"].as_u64().unwrap();
                (kv > 0).then(|| {
                    (
                        kv,
                        c["candidate"]["kv_cache_dtype"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                    )
                })
            });
            assert_eq!(estimate, run, "{what}: estimate against run");
            assert_eq!(estimate, bench, "{what}: estimate against bench");
            assert_eq!(estimate, candidate, "{what}: estimate against plan");
            if let Some((tokens, format)) = estimate {
                // auto follows the weights (fp8 -> fp8, bf16 -> bf16, fp16 -> fp16), except
                // where `dtype` names the model's own quantized checkpoint, whose declaration
                // decides: DeepSeek-V3/R1's block FP8 declares none, so a 16-bit KV cache.
                let declared = servesim::model::load_model(model)
                    .unwrap()
                    .checkpoint
                    .filter(|c| c.experts.to_string() == *dtype)
                    .map(|c| c.kv_cache.map_or("bf16".to_string(), |k| k.to_string()));
                let expected = declared.unwrap_or_else(|| dtype.to_string());
                assert_eq!(format, expected, "{what}");
                assert!(tokens > 0, "{what}");
                fits += 1;
            }
        }
    }
    fits
}
