//! `servesim run`: simulate one scenario and report it.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{Format, RunArgs};
use servesim::scenario::{Resolved, Scenario};
use servesim::summary::{RunResult, RunSummary};

/// Runs `servesim run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let mut sc = Scenario::load(args.scenario.as_deref(), &args.set)?;
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    let origin = args
        .scenario
        .as_ref()
        .map_or("<embedded default>".to_string(), |p| {
            p.display().to_string()
        });
    let resolved = sc.resolve(&origin)?;
    let result = resolved.run()?;
    emit(&resolved, &result, args.format, args.out.as_deref())
}

/// Prints a run's result and writes its output folder.
pub fn emit(
    resolved: &Resolved,
    result: &RunResult,
    format: Format,
    out: Option<&Path>,
) -> Result<()> {
    let s = &result.summary;
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(s)?)?,
        Format::Csv => {
            let (header, values) = csv_row(s)?;
            writeln!(stdout, "{header}\n{values}")?;
        }
        Format::Table => print_table(&mut stdout, resolved, s)?,
    }
    if let Some(dir) = out {
        write_out_dir(dir, result).with_context(|| format!("writing {}", dir.display()))?;
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

/// The summary's scalar fields as one CSV header and one row (nested keys joined by dots).
pub fn csv_row(s: &RunSummary) -> Result<(String, String)> {
    let v = serde_json::to_value(s)?;
    let mut keys = Vec::new();
    let mut vals = Vec::new();
    flatten("", &v, &mut keys, &mut vals);
    Ok((keys.join(","), vals.join(",")))
}

fn flatten(prefix: &str, v: &serde_json::Value, keys: &mut Vec<String>, vals: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, keys, vals);
            }
        }
        serde_json::Value::Null => {
            keys.push(prefix.to_string());
            vals.push(String::new());
        }
        serde_json::Value::String(s) => {
            keys.push(prefix.to_string());
            vals.push(format!("\"{}\"", s.replace('"', "\"\"")));
        }
        other => {
            keys.push(prefix.to_string());
            vals.push(other.to_string());
        }
    }
}

fn write_out_dir(dir: &Path, result: &RunResult) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(&result.summary)?;
    servesim::report::atomic::write_atomic(&dir.join("summary.json"), json.as_bytes())?;
    let mut csv = String::from(
        "time_s,arrivals_per_s,completions_per_s,output_tokens_per_s,running,waiting,kv_utilization\n",
    );
    for p in &result.timeseries {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            p.time_s,
            p.arrivals_per_s,
            p.completions_per_s,
            p.output_tokens_per_s,
            p.running,
            p.waiting,
            p.kv_utilization
        ));
    }
    servesim::report::atomic::write_atomic(&dir.join("timeseries.csv"), csv.as_bytes())?;
    Ok(())
}

fn print_table(w: &mut impl Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    let d = &r.deployment;
    writeln!(
        w,
        "============ servesim run: {} ============",
        if r.scenario.name.is_empty() {
            &r.origin
        } else {
            &r.scenario.name
        }
    )?;
    writeln!(
        w,
        "{} on {} replica(s) x {} {} (TP {}), {} weights, {} KV, {} engine; KV capacity {} tokens/replica",
        d.model.name, s.replicas, d.tp, d.gpu.name, d.tp, d.weight_dtype, d.kv_dtype, d.engine.name, s.kv_capacity_tokens
    )?;
    let row = |w: &mut dyn Write, k: &str, v: String| writeln!(w, "{k:<42}{v:>14}");
    row(w, "Successful requests:", s.completed.to_string())?;
    row(
        w,
        "Failed (rejected + timed out):",
        format!("{} + {}", s.rejected, s.timed_out),
    )?;
    row(w, "Benchmark duration (s):", format!("{:.2}", s.duration))?;
    row(w, "Total input tokens:", s.total_input_tokens.to_string())?;
    row(
        w,
        "Total generated tokens:",
        s.total_output_tokens.to_string(),
    )?;
    row(
        w,
        "Request throughput (req/s):",
        format!("{:.2}", s.request_throughput),
    )?;
    row(
        w,
        "Output token throughput (tok/s):",
        format!("{:.1}", s.output_throughput),
    )?;
    row(
        w,
        "Output token throughput per GPU (tok/s):",
        format!("{:.1}", s.output_throughput_per_gpu),
    )?;
    row(
        w,
        "Total token throughput (tok/s):",
        format!("{:.1}", s.total_token_throughput),
    )?;
    row(
        w,
        "Goodput (req/s):",
        format!(
            "{:.2} ({:.1}% of arrivals)",
            s.goodput,
            100.0 * s.goodput_share
        ),
    )?;
    writeln!(
        w,
        "{:<18}{:>12}{:>12}{:>12}{:>12}",
        "latency (ms)", "mean", "median", "p90", "p99"
    )?;
    for (name, v) in [
        (
            "TTFT",
            [
                s.mean_ttft_ms,
                s.median_ttft_ms,
                s.p90_ttft_ms,
                s.p99_ttft_ms,
            ],
        ),
        (
            "TPOT",
            [
                s.mean_tpot_ms,
                s.median_tpot_ms,
                s.p90_tpot_ms,
                s.p99_tpot_ms,
            ],
        ),
        (
            "ITL",
            [s.mean_itl_ms, s.median_itl_ms, s.p90_itl_ms, s.p99_itl_ms],
        ),
        (
            "E2E",
            [
                s.mean_e2el_ms,
                s.median_e2el_ms,
                s.p90_e2el_ms,
                s.p99_e2el_ms,
            ],
        ),
    ] {
        writeln!(
            w,
            "{name:<18}{:>12.2}{:>12.2}{:>12.2}{:>12.2}",
            v[0], v[1], v[2], v[3]
        )?;
    }
    row(
        w,
        "Queueing delay mean / p99 (ms):",
        format!("{:.1} / {:.1}", s.mean_queue_ms, s.p99_queue_ms),
    )?;
    row(
        w,
        "Mean batch size (seqs/iteration):",
        format!("{:.1}", s.mean_batch_size),
    )?;
    row(
        w,
        "KV cache utilisation mean / peak:",
        format!(
            "{:.1}% / {:.1}%",
            100.0 * s.kv_cache_utilization,
            100.0 * s.peak_kv_cache_utilization
        ),
    )?;
    row(w, "Preemptions:", s.preemptions.to_string())?;
    for (name, o) in [
        ("TTFT", s.slo.ttft),
        ("TPOT", s.slo.tpot),
        ("E2E", s.slo.e2e),
    ] {
        if let Some(o) = o {
            row(
                w,
                &format!("SLO p{} {name} <= {} ms:", o.percentile, o.threshold_ms),
                format!(
                    "{} ({:.1} ms)",
                    if o.met { "met" } else { "MISSED" },
                    o.value_ms
                ),
            )?;
        }
    }
    if let Some(t) = &s.truncated {
        writeln!(
            w,
            "WARNING: run stopped early: {t}; {} requests still in flight",
            s.in_flight
        )?;
    }
    Ok(())
}
