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
