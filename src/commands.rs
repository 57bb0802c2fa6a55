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

use std::path::Path;

use anyhow::Result;

use crate::cli::{Cli, Command, DeploymentArgs};
use servesim::scenario::{DeploymentConfig, SchedulerOverrides};

/// Checks before any work that `--out` (or `flag`) can be a folder: it is one already, or it
/// does not exist and its nearest existing ancestor is a folder. A run that would fail only
/// when it writes its results fails here instead (exit 2).
pub fn check_out_dir(flag: &str, dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(servesim::Error::config(
            flag,
            dir.display().to_string(),
            "exists and is not a folder",
        ));
    }
    check_ancestor(flag, dir)
}

/// As [`check_out_dir`], for an output file: not an existing folder, and its nearest
/// existing ancestor is a folder.
pub fn check_out_file(flag: &str, file: &Path) -> Result<()> {
    if file.is_dir() {
        anyhow::bail!(servesim::Error::config(
            flag,
            file.display().to_string(),
            "is a folder; give a file name",
        ));
    }
    check_ancestor(flag, file)
}

fn check_ancestor(flag: &str, path: &Path) -> Result<()> {
    match path.ancestors().skip(1).find(|a| a.exists()) {
        Some(a) if !a.is_dir() => anyhow::bail!(servesim::Error::config(
            flag,
            path.display().to_string(),
            format!("{} is not a folder", a.display()),
        )),
        _ => Ok(()),
    }
}

/// The `--set` overrides plus `limits.fast_forward=false` under `--no-fast-forward`.
pub fn overrides(set: &[String], no_fast_forward: bool) -> Vec<String> {
    let mut all = set.to_vec();
    if no_fast_forward {
        all.push("limits.fast_forward=false".into());
    }
    all
}

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

/// The deployment and scheduler settings the flags name, as a scenario would write them, so
/// that flags and scenario files share one resolver ([`servesim::scenario::resolve_deployment`]).
pub fn deployment_config(
    a: &DeploymentArgs,
    max_num_seqs: Option<u32>,
    max_num_batched_tokens: Option<u32>,
) -> (DeploymentConfig, SchedulerOverrides) {
    (
        DeploymentConfig {
            model: a.model.clone(),
            gpu: a.gpu.clone(),
            tp: a.tp,
            dp: a.dp,
            ep: if a.enable_expert_parallel {
                a.tp.saturating_mul(a.dp)
            } else {
                a.ep
            },
            redundant_experts: a.redundant_experts,
            dtype: a.dtype.clone(),
            kv_cache_dtype: a.kv_cache_dtype.clone(),
            engine: a.engine.clone(),
            replicas: 1,
            router: Default::default(),
            step_time_scale: 1.0,
            mode: Default::default(),
            prefill: None,
            decode: None,
            kv_transfer_bandwidth_gb_s: None,
            kv_transfer_latency_us: None,
            kv_transfer_layerwise: None,
        },
        SchedulerOverrides {
            max_num_seqs,
            max_num_batched_tokens,
            gpu_memory_utilization: a.gpu_memory_utilization,
            ..Default::default()
        },
    )
}
