//! The cost workbook as a user would check it: LibreOffice recalculates every formula of the
//! default plan's cost.xlsx and gets servesim's own values (relative 1e-9), and doubling the
//! target load moves the chosen fleet's replicas and $/hour by 1.5-2.5x
//! (scripts/check-xlsx.sh). Skipped, with a notice, without `soffice` on PATH; in CI
//! (`SERVESIM_CI`, set by `.ci/run`, which installs LibreOffice) a missing `soffice` fails.

mod common;

use std::process::Command;

use common::servesim;

/// Whether LibreOffice is on PATH; when not, the calling test skips (and fails in CI:
/// [`common::skip_or_fail`]).
fn has_soffice() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v soffice"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        common::skip_or_fail("soffice (LibreOffice) is not on PATH");
    }
    found
}

fn check(workbook: &std::path::Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/check-xlsx.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(workbook)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "check-xlsx failed:\n{text}");
    assert!(text.contains("check-xlsx: OK"), "{text}");
    text
}

#[test]
fn libreoffice_recalculates_the_default_plans_workbook() {
    if !has_soffice() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, _, err) = servesim(&["plan", "--out", report.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = check(&report.join("cost.xlsx"));
    assert!(text.contains(", 0 mismatches"), "{text}");
    assert!(text.contains("Replicas"), "{text}");
    // The batch tier, recalculated, is priced at its floor (the cost at capacity) by the
    // plan's own discount: the script fails when it is below (checks it, not just prints).
    let line = text
        .lines()
        .find(|l| l.starts_with("batch tier $/M output: "))
        .unwrap_or_else(|| panic!("no batch tier checked:\n{text}"));
    let figures: Vec<f64> = line
        .split(": ")
        .skip(1)
        .map(|x| x.split(';').next().unwrap().trim().parse().unwrap())
        .collect();
    assert_eq!(figures.len(), 2, "{line}");
    assert!(
        (figures[0] - figures[1]).abs() <= 1e-9 * figures[1],
        "{line}"
    );
}

#[test]
fn libreoffice_recalculates_the_sample_workbook() {
    if !has_soffice() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cost.xlsx");
    servesim::report::xlsx::write_cost_workbook(
        &path,
        &servesim::report::xlsx::sample_model(),
        &[],
    )
    .unwrap();
    check(&path);
}

#[test]
fn libreoffice_chooses_the_plans_xpyd_recommendation_in_its_workbook() {
    if !has_soffice() {
        return;
    }
    // Long-context RAG under a 30 ms TPOT SLO: the plan recommends a disaggregated
    // deployment; the workbook's live model must choose the same one.
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, out, err) = servesim(&[
        "plan",
        "scenarios/long-context-rag.toml",
        "--set",
        "slo.tpot_ms=30",
        "--format",
        "json",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    let x = &p["disaggregated"];
    assert_eq!(x["recommended"], "disaggregated", "{x}");
    let best = &x["candidates"][x["best"].as_u64().unwrap() as usize];
    let label = format!(
        "{}P x {} TP{} + {}D x {} TP{}",
        best["prefill"]["replicas"],
        best["prefill"]["gpu"].as_str().unwrap(),
        best["prefill"]["tp"],
        best["decode"]["replicas"],
        best["decode"]["gpu"].as_str().unwrap(),
        best["decode"]["tp"]
    );
    let text = check(&report.join("cost.xlsx"));
    assert!(text.contains(", 0 mismatches"), "{text}");
    assert!(
        text.contains(&format!("chosen candidate (LibreOffice): {label}")),
        "{label}: {text}"
    );
}

#[test]
fn without_soffice_the_workbook_test_fails_in_ci() {
    let (passed, out) = common::rerun_in_ci_without_tools(
        "libreoffice_recalculates_the_default_plans_workbook",
        &[],
    );
    assert!(!passed && out.contains(common::CI_VAR), "{out}");
}

#[test]
fn a_price_change_switches_the_winner_to_a_pruned_candidate_as_a_new_plan_does() {
    if !has_soffice() {
        return;
    }
    // The default plan chooses one GPU type; raising its price in the sheet must let a
    // candidate the search pruned (its rate a capacity bound) win, and `servesim plan` with
    // that price must choose the same candidate.
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, out, err) = servesim(&[
        "plan",
        "--format",
        "json",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    let candidates = p["candidates"].as_array().unwrap();
    let g = candidates[p["chosen"].as_u64().unwrap() as usize]["candidate"]["gpu"]
        .as_str()
        .unwrap()
        .to_string();
    let price = |c: &serde_json::Value| c["price_usd_per_gpu_hour"].as_f64().unwrap();
    let cost = |c: &serde_json::Value| c["cost_at_target"]["usd_per_hour"].as_f64();
    let label = |c: &serde_json::Value| {
        let k = &c["candidate"];
        format!(
            "{} {} TP{} seqs{}",
            k["gpu"].as_str().unwrap(),
            k["dtype"].as_str().unwrap(),
            k["tp"],
            k["max_num_seqs"]
        )
    };
    let rows: Vec<&serde_json::Value> = candidates
        .iter()
        .filter(|c| c["status"] != "infeasible" && cost(c).is_some())
        .collect();
    let (mine, others): (Vec<_>, Vec<_>) = rows.iter().partition(|c| c["candidate"]["gpu"] == g);
    let cheapest = |v: &[&&serde_json::Value]| {
        v.iter()
            .map(|c| cost(c).unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    // Every row of the chosen GPU type 25% dearer than the cheapest other row.
    let factor = 1.25 * cheapest(&others) / cheapest(&mine);
    assert!(factor > 1.0, "another GPU type is already cheaper");
    let new_price = (price(mine[0]) * factor * 100.0).ceil() / 100.0;
    // The sheet's winner: the first other row at the lowest cost (rows keep the plan's order).
    let low = cheapest(&others);
    let winner = others
        .iter()
        .find(|c| cost(c).unwrap() <= low * (1.0 + 1e-12))
        .unwrap();
    assert_eq!(
        winner["status"], "pruned",
        "the switch goes to a pruned candidate"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/check-xlsx.sh");
    let out = Command::new("bash")
        .args([
            script,
            report.join("cost.xlsx").to_str().unwrap(),
            "--price",
            &g,
        ])
        .arg(format!("{new_price}"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success() && text.contains("check-xlsx: OK"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "chosen candidate (LibreOffice): {}",
            label(winner)
        )),
        "{}: {text}",
        label(winner)
    );
    assert!(
        text.contains("chosen status (LibreOffice): pruned"),
        "{text}"
    );
    // The plan, re-run with that price, searches the candidate and chooses it.
    let set = format!("pricing.gpus.{g}={new_price}");
    let (code, out, err) = servesim(&[
        "plan",
        "--set",
        &set,
        "--format",
        "json",
        "--out",
        dir.path().join("again").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let q: serde_json::Value = serde_json::from_str(&out).unwrap();
    let chosen = &q["candidates"][q["chosen"].as_u64().expect("a plan") as usize];
    assert_eq!(label(chosen), label(winner), "{set}");
    assert_eq!(chosen["status"], "feasible");
}
