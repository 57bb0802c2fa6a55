//! `servesim validate-kernels`: a profile's kernel predictions against measurements, per
//! kernel class, as a table and a PNG scatter plot.

use std::io::Write;

use anyhow::Result;

use crate::cli::ValidateKernelsArgs;
use servesim::calibrate::{measurement, validate};
use servesim::gpu::GpuProfile;

/// Runs `servesim validate-kernels`.
pub fn run(args: &ValidateKernelsArgs) -> Result<()> {
    super::check_out_file("--plot", &args.plot)?;
    let mut rows = Vec::new();
    for p in &args.measurements {
        rows.extend(measurement::read_measurements(p)?);
    }
    let gpu = GpuProfile::load(&args.gpu)?;
    let v = validate::validate(&gpu, &rows);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", v.table())?;
    let title = format!(
        "{} ({}) vs {}",
        gpu.name,
        args.gpu.rsplit('/').next().unwrap_or(&args.gpu),
        args.measurements
            .iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" + ")
    );
    v.plot_png(&args.plot, &title)?;
    writeln!(out, "wrote {}", args.plot.display())?;
    Ok(())
}
