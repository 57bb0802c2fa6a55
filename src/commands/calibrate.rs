//! `servesim calibrate`: run the kernel suite on a CUDA GPU and write the measurements.

use anyhow::{Context, Result};

use crate::cli::CalibrateArgs;
use servesim::calibrate::{self, measurement, Part, SuiteConfig};
use servesim::model::load_model;

/// Runs `servesim calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<()> {
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
    let rows = calibrate::run_suite(backend.as_mut(), &cfg, &mut |line| eprintln!("{line}"))?;
    let comment = vec![
        format!(
            "servesim calibrate {} on {}, {} runs per shape",
            env!("CARGO_PKG_VERSION"),
            calibrate::today_utc(),
            cfg.runs
        ),
        "format: docs/calibration.md".to_string(),
    ];
    let text = measurement::to_csv(&rows, &comment)?;
    calibrate::write_atomic(&args.out, text.as_bytes())
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {} rows to {}", rows.len(), args.out.display());
    Ok(())
}
