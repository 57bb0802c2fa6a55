//! The plan's promise holds: re-running `servesim run` at the chosen deployment meets the SLOs
//! the plan was asked for (issue: "Re-running `servesim run` at the chosen deployment meets
//! the SLOs the plan promised").

mod common;

use common::servesim;

#[test]
fn running_the_chosen_deployment_meets_the_promised_slos() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, out, err) = servesim(&[
        "plan",
        "scenarios/chat-slo.toml",
        "--format",
        "json",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    let i = plan["chosen"].as_u64().expect("a plan was chosen") as usize;
    let c = &plan["candidates"][i];
    let cand = &c["candidate"];
    for f in [
        "plan.json",
        "candidates.csv",
        "cost.xlsx",
        "index.html",
        "latency-cdf.png",
    ] {
        assert!(report.join(f).exists(), "{f} missing");
    }
    let sets = [
        format!("deployment.gpu={}", cand["gpu"].as_str().unwrap()),
        format!("deployment.dtype={}", cand["dtype"].as_str().unwrap()),
        format!(
            "deployment.kv_cache_dtype={}",
            cand["kv_cache_dtype"].as_str().unwrap()
        ),
        format!("deployment.tp={}", cand["tp"]),
        format!("scheduler.max_num_seqs={}", cand["max_num_seqs"]),
        format!("deployment.replicas={}", c["replicas"]),
        format!("workload.arrival.rate_per_s={}", plan["target_rate_per_s"]),
    ];
    let mut args = vec!["run", "scenarios/chat-slo.toml", "--format", "json"];
    for s in &sets {
        args.push("--set");
        args.push(s);
    }
    let (code, out, err) = servesim(&args);
    assert_eq!(code, 0, "{err}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["slo"]["all_met"], true, "{out}");
    assert!(run["slo"]["ttft"]["met"].as_bool().unwrap());
    assert!(run["slo"]["tpot"]["met"].as_bool().unwrap());
    // And the deployment is not oversized by more than one replica's worth.
    let per_replica = c["max_rate_per_replica"].as_f64().unwrap();
    let replicas = c["replicas"].as_f64().unwrap();
    let target = plan["target_rate_per_s"].as_f64().unwrap();
    assert!(per_replica * (replicas - 1.0) < target, "{c}");
}
