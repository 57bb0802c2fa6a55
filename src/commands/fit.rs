//! `servesim fit`: fit a GPU profile's curves and fixed costs to a measurement file.

use anyhow::Result;

use crate::cli::FitArgs;
use servesim::calibrate::{self, fit, measurement};
use servesim::gpu::GpuProfile;

/// Runs `servesim fit`.
pub fn run(args: &FitArgs) -> Result<()> {
    let rows = measurement::read_measurements(&args.measurements)?;
    let base = GpuProfile::load(&args.base)?;
    let result = fit::fit_profile(&base, &rows)?;
    let toml = result.to_toml(
        &args.measurements.display().to_string(),
        &args.base,
        &calibrate::today_utc(),
    )?;
    calibrate::write_atomic(&args.out, toml.as_bytes())?;
    print!("{}", result.table());
    for (name, n, e) in &result.stages {
        println!("stage {name}: {n} rows, rms log error {e:.3}");
    }
    println!("wrote {}", args.out.display());
    Ok(())
}
