//! `servesim fit`: fit a GPU profile's curves and fixed costs to a measurement file.

use std::io::Write;

use anyhow::Result;

use crate::cli::FitArgs;
use servesim::calibrate::{self, fit, measurement};
use servesim::gpu::GpuProfile;

/// Runs `servesim fit`.
pub fn run(args: &FitArgs) -> Result<()> {
    super::check_out_file("--out", &args.out)?;
    let mut rows = Vec::new();
    for p in &args.measurements {
        rows.extend(measurement::read_measurements(p)?);
    }
    let base = GpuProfile::load(&args.base)?;
    let result = fit::fit_profile(&base, &rows)?;
    let names: Vec<String> = args
        .measurements
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let toml = result.to_toml(&names.join(" + "), &args.base, &calibrate::today_utc())?;
    calibrate::write_atomic(&args.out, toml.as_bytes())?;
    let mut out = std::io::stdout().lock();
    write!(out, "{}", result.table())?;
    for (name, n, e) in &result.stages {
        writeln!(out, "stage {name}: {n} rows, rms log error {e:.3}")?;
    }
    writeln!(out, "wrote {}", args.out.display())?;
    Ok(())
}
