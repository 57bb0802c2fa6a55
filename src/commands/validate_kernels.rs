//! `servesim validate-kernels`: a profile's kernel predictions against measurements, per
//! kernel class, as a table and a PNG scatter plot.

use anyhow::Result;

use crate::cli::ValidateKernelsArgs;
use servesim::calibrate::{measurement, validate};
use servesim::gpu::GpuProfile;

/// Runs `servesim validate-kernels`.
pub fn run(args: &ValidateKernelsArgs) -> Result<()> {
    let rows = measurement::read_measurements(&args.measurements)?;
    let gpu = GpuProfile::load(&args.gpu)?;
    let v = validate::validate(&gpu, &rows);
    print!("{}", v.table());
    let title = format!(
        "{} ({}) vs {}",
        gpu.name,
        args.gpu.rsplit('/').next().unwrap_or(&args.gpu),
        args.measurements
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    v.plot_png(&args.plot, &title)?;
    println!("wrote {}", args.plot.display());
    Ok(())
}
