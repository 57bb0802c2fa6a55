//! The edge between flags and the library: each command turns its flags into validated
//! configuration, runs the library, and writes the result. Errors here use anyhow.

mod bench;
mod calibrate;
mod estimate;
mod fit;
mod fit_engine;
mod plan;
mod run;
mod sweep;
mod validate;
mod validate_kernels;

use anyhow::Result;

use crate::cli::{Cli, Command, DeploymentArgs};
use servesim::engine::EngineProfile;
use servesim::gpu::GpuProfile;
use servesim::model::load_model;
use servesim::roofline::Deployment;

/// Runs the command the flags name.
pub fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Estimate(args) => estimate::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Sweep(args) => sweep::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Fit(args) => fit::run(&args),
        Command::ValidateKernels(args) => validate_kernels::run(&args),
        Command::FitEngine(args) => fit_engine::run(&args),
    }
}

/// Builds a validated deployment from flags.
pub fn deployment_from_args(a: &DeploymentArgs) -> servesim::Result<Deployment> {
    let dtype = a
        .dtype
        .parse()
        .map_err(|e: String| servesim::Error::config("--dtype", "dtype", e))?;
    let kv = a
        .kv_cache_dtype
        .parse()
        .map_err(|e: String| servesim::Error::config("--kv-cache-dtype", "kv_cache_dtype", e))?;
    let mut engine = EngineProfile::load(&a.engine)?;
    if let Some(u) = a.gpu_memory_utilization {
        if !(u > 0.0 && u <= 1.0) {
            return Err(servesim::Error::config(
                "--gpu-memory-utilization",
                "gpu_memory_utilization",
                format!("must be in (0, 1], got {u}"),
            ));
        }
        engine.scheduler.gpu_memory_utilization = u;
    }
    let dep = Deployment {
        model: load_model(&a.model)?,
        gpu: GpuProfile::load(&a.gpu)?,
        engine,
        tp: a.tp,
        weight_dtype: dtype,
        kv_dtype: kv,
    };
    dep.validate()?;
    Ok(dep)
}
