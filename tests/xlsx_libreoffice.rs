//! The cost workbook recalculated by LibreOffice: each cost equals its formula's result and an
//! edited $/GPU-hour changes it (scripts/check-xlsx.sh). Skipped, with a notice, without
//! `soffice` on PATH.

use std::process::Command;

use servesim::report::xlsx::{write_cost_workbook, CostInputs};

#[test]
fn libreoffice_recalculates_the_cost_workbook() {
    let has_soffice = Command::new("sh")
        .args(["-c", "command -v soffice"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_soffice {
        eprintln!("SKIPPED: soffice (LibreOffice) is not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cost.xlsx");
    let plan = |label: &str, gpus, price, out, util| CostInputs {
        label: label.into(),
        gpu_name: "H100 SXM".into(),
        gpus,
        price_usd_per_gpu_hour: price,
        output_tokens_per_s: out,
        input_tokens_per_s: out * 2.5,
        utilization: util,
    };
    let plans = [
        plan("70b tp4 x2", 8, 2.49, 5200.0, 0.65),
        plan("8b tp1 x4", 4, 3.10, 21000.0, 1.0),
        plan("no throughput", 1, 2.0, 0.0, 0.5),
    ];
    write_cost_workbook(&path, &plans, &[]).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/check-xlsx.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(&path)
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
}
