//! `servesim calibrate`: run the kernel suite on a CUDA GPU and write the measurements, or
//! (`--check`) print what can be checked before timing.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::CalibrateArgs;
use servesim::calibrate::{self, fit, measurement, Part, SuiteConfig};
use servesim::model::load_model;

/// Runs `servesim calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    if args.check {
        return check(args.device);
    }
    let out_path = args
        .out
        .as_ref()
        .context("--out is required unless --check")?;
    super::check_out_file("--out", out_path)?;
    let models = args
        .models
        .iter()
        .map(|m| load_model(m))
        .collect::<servesim::Result<Vec<_>>>()?;
    let mut cfg = SuiteConfig::new(models);
    cfg.runs = args.runs;
    cfg.tp = args.tp.clone();
    if !args.only.is_empty() {
        cfg.parts = args
            .only
            .iter()
            .map(|p| match p.as_str() {
                "stream" => Ok(Part::Stream),
                "gemm" => Ok(Part::Gemm),
                "attention" => Ok(Part::Attention),
                "launch" => Ok(Part::Launch),
                other => Err(servesim::Error::config(
                    "--only",
                    "only",
                    format!("unknown part '{other}'; known: stream, gemm, attention, launch"),
                )),
            })
            .collect::<servesim::Result<Vec<_>>>()?;
    }
    // Opening the backend is the first thing that needs a GPU: fail before any other work.
    let mut backend = calibrate::open_backend(args.device)?;
    let out = calibrate::run_suite(backend.as_mut(), &cfg, &mut |line| eprintln!("{line}"))?;
    let dev = backend.device()?;
    let mut comment = vec![
        format!(
            "servesim calibrate {} on {}, {} runs per shape",
            env!("CARGO_PKG_VERSION"),
            calibrate::today_utc(),
            cfg.runs
        ),
        format!("device: {}; {}", dev.name, dev.software),
        // scripts/calibrate-gpu.sh reads the base profile for `servesim fit` from this line.
        format!(
            "profile: {}",
            fit::profile_for_device(&dev.name).unwrap_or("none")
        ),
        "format: docs/calibration.md".to_string(),
    ];
    comment.extend(out.skipped.iter().map(|s| format!("skipped: {s}")));
    let text = measurement::to_csv(&out.rows, &comment)?;
    calibrate::write_atomic(out_path, text.as_bytes())
        .with_context(|| format!("writing {}", out_path.display()))?;
    eprintln!(
        "wrote {} rows to {} ({} skipped)",
        out.rows.len(),
        out_path.display(),
        out.skipped.len()
    );
    Ok(())
}

/// `servesim calibrate --check`: the check table on stdout; an error when an item failed.
fn check(device: usize) -> Result<()> {
    let items = calibrate::check_device(device)?;
    write!(
        std::io::stdout().lock(),
        "{}",
        calibrate::check_table(&items)
    )?;
    calibrate::first_failure(&items)?;
    Ok(())
}
