//! The edge between flags and the library: each command turns its flags into validated
//! configuration, runs the library, and writes the result. Errors here use anyhow.

/// A line on standard error that never fails or panics the command: a closed standard error
/// (`2>&-`, a reader gone) is ignored, as `eprintln!` would not.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod bench;
mod calibrate;
mod estimate;
mod fit;
mod fit_engine;
mod plan;
mod run;
mod sweep;
mod trace_events;
mod validate;
mod validate_kernels;

use std::path::Path;

use anyhow::Result;

use crate::cli::{Cli, Command, DeploymentArgs};
use servesim::report::atomic::{probe_writable, ReportDir};
use servesim::scenario::{DeploymentConfig, SchedulerOverrides};

/// Starts the report folder `--out` (or `flag`) before any work: a staging folder that proves
/// the location writable and is swapped in whole at the end ([`ReportDir`]). A run that
/// would fail only when it writes its results fails here instead (exit 2, naming the path).
pub fn begin_out_dir(flag: &str, dir: &Path) -> Result<ReportDir> {
    Ok(ReportDir::begin(flag, dir)?)
}

/// Checks before any work that the output file `file` (of `flag`) can be written: not a
/// folder, below a folder, and a file can be created there (a read-only file system fails
/// here, not after the work).
pub fn check_out_file(flag: &str, file: &Path) -> Result<()> {
    let bad = |why: String| servesim::Error::config(flag, file.display().to_string(), why);
    if file.is_dir() {
        anyhow::bail!(bad("is a folder; give a file name".into()));
    }
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let why = if dir.exists() {
            format!("{} is not a folder", dir.display())
        } else {
            format!("the folder {} does not exist", dir.display())
        };
        anyhow::bail!(bad(why));
    }
    probe_writable(dir).map_err(|e| {
        let why = match &e {
            servesim::Error::Io { err, .. } => err.to_string(),
            other => other.to_string(),
        };
        bad(format!("cannot write here: {why}"))
    })?;
    Ok(())
}

/// Writes a command's main output to standard output. A failure names standard output (a full
/// disk, a closed pipe: `main` stops quietly on the latter), never a report file.
pub fn to_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| servesim::Error::io("<standard output>", e))?;
    Ok(())
}

/// The `--set` overrides plus `limits.fast_forward=false` under `--no-fast-forward`.
pub fn overrides(set: &[String], no_fast_forward: bool) -> Vec<String> {
    let mut all = set.to_vec();
    if no_fast_forward {
        all.push("limits.fast_forward=false".into());
    }
    all
}

/// Says on standard error that `scenario` reads the embedded copy of a shipped scenario, when
/// it names one and no such file exists ([`servesim::scenario::embedded_scenario`]).
fn note_embedded(scenario: Option<&Path>) {
    if let Some(p) = scenario {
        if let Some((shipped, _)) = servesim::scenario::embedded_scenario(p) {
            note!(
                "note: no file {}; using the embedded {shipped}",
                p.display()
            );
        }
    }
}

/// Runs the command the flags name.
pub fn dispatch(cli: Cli) -> Result<()> {
    match &cli.command {
        Command::Run(a) => note_embedded(a.scenario.as_deref()),
        Command::Plan(a) => note_embedded(a.scenario.as_deref()),
        Command::Sweep(a) => note_embedded(a.scenario.as_deref()),
        _ => {}
    }
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
            pp: 1,
            ep: if a.enable_expert_parallel {
                a.tp.saturating_mul(a.dp)
            } else {
                a.ep
            },
            redundant_experts: a.redundant_experts,
            dtype: a.dtype.clone(),
            checkpoint: a.checkpoint.clone(),
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
            kv_offloading_size_gib: None,
            kv_offloading_bandwidth_gb_s: None,
            kv_offloading_latency_us: None,
        },
        SchedulerOverrides {
            max_num_seqs,
            max_num_batched_tokens,
            gpu_memory_utilization: a.gpu_memory_utilization,
            ..Default::default()
        },
    )
}
