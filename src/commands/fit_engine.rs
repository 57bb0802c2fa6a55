//! `servesim fit-engine`: fit an engine profile's host costs to a user's own
//! `vllm bench serve --save-result` files and write the fitted profile.

use std::io::Write;

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::cli::FitEngineArgs;
use servesim::engine::{EngineProfile, HostCosts};
use servesim::report::atomic::write_atomic;
use servesim::validate::{
    compare, contradictions, fit_engine_host, read_result_file, summarize, Comparison, FitOptions,
    HostFit, LoadKind, ResultDeployment, HOST_KEYS,
};

/// Runs `servesim fit-engine`.
pub fn run(args: &FitEngineArgs) -> Result<()> {
    super::check_out_file("--out", &args.out)?;
    let base = EngineProfile::load(&args.base)?;
    let dep = ResultDeployment {
        engine: args.base.clone(),
        model: args.model.clone(),
        gpu: args.gpu.clone(),
        tp: args.tp,
        dtype: args.dtype.clone(),
        kv_cache_dtype: args.kv_cache_dtype.clone(),
    };
    let mut rows = Vec::new();
    for p in &args.results {
        let mut row = read_result_file(p, &dep)?;
        // Two files with one stem stay apart in the report.
        if rows
            .iter()
            .any(|r: &servesim::validate::ReferenceRow| r.id == row.id)
        {
            row.id = p.display().to_string();
        }
        rows.push(row);
    }
    for w in contradictions(&rows) {
        note!("warning: {w}");
    }
    let before = compare(&rows, Some(&base.host))?;
    let fit = fit_engine_host(
        &rows,
        &base,
        FitOptions {
            profile: true,
            documented_bound: false,
        },
    )?;
    let after = compare(&rows, Some(&fit.host))?;

    let mut fitted = base.clone();
    fitted.host = fit.host.clone();
    fitted.display_name = format!(
        "{} (host costs fitted to {} result file(s))",
        base.display_name,
        rows.len()
    );
    let toml = profile_toml(&fitted, &base.host, &fit, args)?;
    // The written profile must load as any engine profile does.
    let parsed: EngineProfile = toml::from_str(&toml).context("re-reading the fitted profile")?;
    parsed.validate(&args.out.display().to_string())?;
    write_atomic(&args.out, toml.as_bytes())
        .with_context(|| format!("writing {}", args.out.display()))?;

    let mut out = std::io::stdout().lock();
    write!(out, "{}", report(&fit, &base.host, &before, &after))?;
    writeln!(out, "wrote {}", args.out.display())?;
    Ok(())
}

fn host_value(h: &HostCosts, k: usize) -> f64 {
    servesim::validate::host_param(h, k)
}

/// The fitted profile as TOML, headed by where it came from and what was fitted.
fn profile_toml(
    fitted: &EngineProfile,
    start: &HostCosts,
    fit: &HostFit,
    args: &FitEngineArgs,
) -> Result<String> {
    let body = toml::to_string_pretty(fitted).context("serialising the fitted profile")?;
    let files: Vec<String> = args
        .results
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut s = String::new();
    writeln!(
        s,
        "# Engine profile fitted by `servesim fit-engine` on {} (UTC) from {} result file(s):",
        servesim::calibrate::today_utc(),
        files.len()
    )?;
    for f in &files {
        writeln!(s, "#   {f}")?;
    }
    writeln!(
        s,
        "# measured with {} on {} x{} ({} weights, {} KV); base profile {}.",
        args.model, args.gpu, args.tp, args.dtype, args.kv_cache_dtype, args.base
    )?;
    writeln!(s, "# Fitted host costs (base -> fitted):")?;
    for (k, key) in HOST_KEYS.iter().enumerate() {
        writeln!(
            s,
            "#   {key} = {:.4e} -> {:.4e}",
            host_value(start, k),
            host_value(&fit.host, k)
        )?;
    }
    writeln!(
        s,
        "# What the files determine (profile of the loss over each cost):"
    )?;
    for p in &fit.params {
        writeln!(s, "#   {}", p.describe())?;
    }
    writeln!(
        s,
        "# Per-iteration cost held under {:.3e} s: {}.",
        fit.iteration_bound.0, fit.iteration_bound.1
    )?;
    writeln!(
        s,
        "# Exposed per-iteration time held under {:.3e} s: {}.",
        fit.exposed_bound.0, fit.exposed_bound.1
    )?;
    writeln!(
        s,
        "# Mean Huber loss of the log errors at the fit: {:.4} over {} file(s).",
        fit.score, fit.fitted_rows
    )?;
    if !fit.left_out.is_empty() {
        writeln!(
            s,
            "# Left out (the model falls behind their arrivals even with no host cost): {}",
            fit.left_out.join(", ")
        )?;
    }
    writeln!(s, "# Everything else is the base profile's.\n")?;
    s.push_str(&body);
    Ok(s)
}

/// The fitted costs and the errors before and after, per file and metric.
fn report(fit: &HostFit, start: &HostCosts, before: &[Comparison], after: &[Comparison]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<28}{:>14}{:>14}", "host cost", "base", "fitted");
    for (k, key) in HOST_KEYS.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:<28}{:>14.4e}{:>14.4e}",
            key,
            host_value(start, k),
            host_value(&fit.host, k)
        );
    }
    let _ = writeln!(
        s,
        "\nwhat the files determine (profile of the loss over each cost):"
    );
    for p in &fit.params {
        let _ = writeln!(s, "  {}", p.describe());
    }
    let _ = writeln!(
        s,
        "per-iteration cost held under {:.3e} s: {}",
        fit.iteration_bound.0, fit.iteration_bound.1
    );
    let _ = writeln!(
        s,
        "exposed per-iteration time held under {:.3e} s: {}",
        fit.exposed_bound.0, fit.exposed_bound.1
    );
    if !fit.left_out.is_empty() {
        let _ = writeln!(
            s,
            "left out (the model falls behind their arrivals even with no host cost): {}",
            fit.left_out.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "\n{:<24}{:<20}{:>12}{:>12}{:>10}{:>10}",
        "file", "metric", "measured", "fitted", "before", "after"
    );
    for (b, a) in before.iter().zip(after) {
        let _ = writeln!(
            s,
            "{:<24}{:<20}{:>12.1}{:>12.1}{:>+9.1}%{:>+9.1}%",
            a.id,
            a.metric.name(),
            a.measured,
            a.predicted,
            100.0 * b.signed_error,
            100.0 * a.signed_error
        );
    }
    for (label, comps) in [("before", before), ("after", after)] {
        let _ = write!(s, "median |error| {label}:");
        for e in summarize(comps) {
            if e.kind == LoadKind::Online
                && e.metric == servesim::validate::Metric::OutputTokensPerS
            {
                continue;
            }
            let _ = write!(s, " {} {:.1}%", e.metric.name(), 100.0 * e.median_abs_error);
        }
        let _ = writeln!(s);
    }
    s
}
