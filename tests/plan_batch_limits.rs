//! A plan keeps the scenario's token budget as written: a candidate whose `max_num_seqs` the
//! scenario's `scheduler.max_num_batched_tokens` cannot hold (every running sequence decodes
//! one token per iteration) is not searched, with the reason in its note, instead of being
//! measured with a larger budget than the scenario and the printed re-run line state.

mod common;

use common::{servesim, shell_words};
use serde_json::Value;

/// `servesim plan scenarios/batch-offline.toml` (vLLM, Llama-3.1-8B) on one H100 in BF16 at
/// 5 req/s, with `sets` as further `--set`s: (exit code, plan.json or Null, table, stderr).
fn plan(sets: &[&str]) -> (i32, Value, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let mut args = vec![
        "plan",
        "scenarios/batch-offline.toml",
        "--out",
        report.to_str().unwrap(),
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.dtypes=[\"bf16\"]",
        "--set",
        "plan.target_rate_per_s=5",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (code, text, err) = servesim(&args);
    let json = std::fs::read_to_string(report.join("plan.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Value::Null);
    (code, json, text, err)
}

/// The candidate of `max_num_seqs` `seqs` in plan.json.
fn candidate(p: &Value, seqs: u64) -> &Value {
    p["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["candidate"]["max_num_seqs"] == seqs)
        .unwrap_or_else(|| panic!("no candidate of {seqs} seqs: {p}"))
}

#[test]
fn a_candidate_above_the_scenarios_token_budget_is_not_searched_and_says_why() {
    // The scenario's budget of 384 tokens holds 256 sequences, not 512.
    let (code, p, text, err) = plan(&[
        "scheduler.max_num_seqs=256",
        "scheduler.max_num_batched_tokens=384",
    ]);
    assert_eq!(code, 0, "{err}");
    let over = candidate(&p, 512);
    assert_eq!(over["status"], "infeasible", "{over}");
    let note = over["note"].as_str().unwrap();
    for want in [
        "plan.max_num_seqs",
        "not searched: max_num_seqs 512 exceeds the scenario's scheduler.max_num_batched_tokens (384)",
        "vLLM refuses max_num_batched_tokens below max_num_seqs",
    ] {
        assert!(note.contains(want), "{want:?} not in the note: {note}");
    }
    assert!(
        text.contains("max_num_seqs 512 exceeds"),
        "the table prints the reason:\n{text}"
    );
    assert!(
        over["capacity_rate_per_replica"].as_f64().unwrap_or(0.0) == 0.0,
        "{over}"
    );
    // The candidate that fits is planned with the scenario's own budget, and the printed line
    // re-runs it with that budget: the user's setting, and no override of it.
    let fits = candidate(&p, 256);
    assert_eq!(fits["status"], "feasible", "{fits}");
    let line = p["recommendation"]["run_command"].as_str().unwrap();
    assert!(line.contains("scheduler.max_num_seqs=256"), "{line}");
    assert_eq!(
        line.matches("max_num_batched_tokens=").count(),
        1,
        "only the user's budget: {line}"
    );
    assert!(
        line.contains("scheduler.max_num_batched_tokens=384"),
        "{line}"
    );
    // The printed line runs as printed (a short run: the budget it resolves is the scenario's).
    let words = shell_words(line);
    let mut args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    args.extend(["--set", "workload.num_requests=64", "--format", "json"]);
    let (code, out, err) = servesim(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let run: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["completed"], 64, "{out}");
}

#[test]
fn when_no_candidate_fits_the_budget_the_plan_exits_2_with_each_engines_reason() {
    for (engine, want) in [
        ("vllm", "vLLM refuses max_num_batched_tokens below max_num_seqs"),
        (
            "trtllm",
            "TensorRT-LLM decodes at most 384 sequences per step (max_num_tokens), as max_num_seqs 384 does",
        ),
    ] {
        let engine_set = format!("deployment.engine={engine}");
        let (code, _, _, err) = plan(&[
            &engine_set,
            "scheduler.max_num_seqs=256",
            "scheduler.max_num_batched_tokens=384",
            "plan.max_num_seqs=[512, 1024]",
        ]);
        assert_eq!(code, 2, "{engine}: {err}");
        assert!(
            err.contains("none of the 2 candidates of the search space can run")
                && err.contains("max_num_seqs 1024 exceeds the scenario's scheduler.max_num_batched_tokens (384)")
                && err.contains(want),
            "{engine}: {err}"
        );
    }
}
