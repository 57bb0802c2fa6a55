//! `servesim validate`: predicted against measured on reference measurements.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::{Format, ValidateArgs};
use servesim::catalog::{self, Entry, Kind};
use servesim::engine::EngineProfile;
use servesim::report::atomic::write_atomic;
use servesim::report::plot::{render, Chart, ImageFormat, Rule, Series, SeriesStyle};
use servesim::validate::{
    compare, fit_engine_host, parse_reference, prediction_intervals, read_reference,
    step_time_headroom, summarize, Comparison, Metric, REFERENCE_CSV,
};

/// Runs `servesim validate`.
pub fn run(args: &ValidateArgs) -> Result<()> {
    let report = args
        .out
        .as_deref()
        .map(|o| super::begin_out_dir("--out", o))
        .transpose()?;
    if !(args.coverage > 0.0 && args.coverage < 1.0) {
        anyhow::bail!(servesim::Error::config(
            "--coverage",
            "coverage",
            format!("must be in (0, 1), got {}", args.coverage)
        ));
    }
    let mut rows = Vec::new();
    if args.reference.is_empty() {
        rows.extend(parse_reference(
            REFERENCE_CSV,
            "calibration/reference/serving-measurements.csv",
        )?);
    }
    for p in &args.reference {
        rows.extend(read_reference(p)?);
    }
    let only = args.engine.as_ref().or(args.fit_engine.as_ref());
    if let Some(e) = only {
        // The same names and aliases as everywhere (`tensorrt-llm` is `trtllm`).
        let flag = if args.engine.is_some() {
            "--engine"
        } else {
            "--fit-engine"
        };
        let name = match catalog::resolve(Kind::Engine, e)
            .map_err(|err| servesim::Error::config(flag, "engine", err.to_string()))?
        {
            Entry::Catalog(n) => n.to_string(),
            Entry::Path(_) => e.clone(),
        };
        rows.retain(|r| catalog::canonical(Kind::Engine, &r.engine).unwrap_or(&r.engine) == name);
    }
    if rows.is_empty() {
        anyhow::bail!(servesim::Error::config(
            "--reference",
            "rows",
            "no reference rows to validate (check --engine)"
        ));
    }
    for w in servesim::validate::contradictions(&rows) {
        note!("warning: {w}");
    }
    let mut host = None;
    if let Some(name) = &args.fit_engine {
        let profile = EngineProfile::load(name)?;
        let fit = fit_engine_host(&rows, &profile.host)?;
        if !fit.left_out.is_empty() {
            note!(
                "left out of the fit (the model falls behind their arrivals even with no host cost): {}",
                fit.left_out.join(", ")
            );
        }
        note!(
            "fitted {name} host costs on {} rows: per_iteration_s = {:.4e}, per_sequence_s = {:.4e}, \
             per_request_s = {:.4e} (mean Huber loss {:.4})",
            fit.fitted_rows,
            fit.host.per_iteration_s,
            fit.host.per_sequence_s,
            fit.host.per_request_s,
            fit.score
        );
        host = Some(fit.host);
    }
    let comps = compare(&rows, host.as_ref())?;
    let summary = summarize(&comps);
    let intervals = prediction_intervals(&comps, args.coverage);
    let headroom = step_time_headroom(&comps, args.coverage);
    let mut out: Vec<u8> = Vec::new();
    match args.format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rows": comps,
                "summary": summary,
                "intervals": intervals,
                "step_time_headroom": headroom,
            }))?
        )?,
        Format::Csv => write!(out, "{}", comparisons_csv(&comps))?,
        Format::Table => {
            // The row column fits the longest id (the 0.14 files' ids run to 30 characters).
            let id_w = comps.iter().map(|c| c.id.len() + 2).fold(18, usize::max);
            writeln!(
                out,
                "{:<id_w$}{:<20}{:>14}{:>14}{:>10}",
                "row", "metric", "measured", "predicted", "error"
            )?;
            for c in &comps {
                writeln!(
                    out,
                    "{:<id_w$}{:<20}{:>14.1}{:>14.1}{:>+9.1}%",
                    c.id,
                    c.metric.name(),
                    c.measured,
                    c.predicted,
                    100.0 * c.signed_error
                )?;
            }
            writeln!(out)?;
            writeln!(
                out,
                "{:<10}{:<20}{:>6}{:>14}{:>12}{:>12}  worst row",
                "load", "metric", "rows", "median |err|", "bias", "worst"
            )?;
            for s in &summary {
                writeln!(
                    out,
                    "{:<10}{:<20}{:>6}{:>13.1}%{:>+11.1}%{:>11.1}%  {}",
                    format!("{:?}", s.kind).to_lowercase(),
                    s.metric.name(),
                    s.rows,
                    100.0 * s.median_abs_error,
                    100.0 * s.mean_signed_error,
                    100.0 * s.worst_abs_error,
                    s.worst_id
                )?;
            }
            writeln!(
                out,
                "\nprediction intervals: measured / predicted - 1 on {:.0}% of the rows",
                100.0 * args.coverage
            )?;
            writeln!(
                out,
                "{:<10}{:<20}{:>6}{:>10}{:>10}",
                "load", "metric", "rows", "low", "high"
            )?;
            for p in &intervals {
                writeln!(
                    out,
                    "{:<10}{:<20}{:>6}{:>+9.1}%{:>+9.1}%",
                    format!("{:?}", p.kind).to_lowercase(),
                    p.metric.name(),
                    p.rows,
                    100.0 * p.low,
                    100.0 * p.high
                )?;
            }
            if let Some(h) = headroom {
                writeln!(
                    out,
                    "step-time headroom ({:.0}% of the rows' iterations within it): {:+.1}%",
                    100.0 * args.coverage,
                    100.0 * h
                )?;
            }
        }
    }
    if let Some(report) = report {
        let dir = report.path();
        write_atomic(
            &dir.join("comparisons.csv"),
            comparisons_csv(&comps).as_bytes(),
        )?;
        write_atomic(
            &dir.join("summary.json"),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )?;
        write_atomic(
            &dir.join("intervals.json"),
            serde_json::to_string_pretty(&serde_json::json!({
                "coverage": args.coverage,
                "intervals": intervals,
                "step_time_headroom": headroom,
            }))?
            .as_bytes(),
        )?;
        render(
            &scatter(&comps),
            &dir.join("predicted-vs-measured.png"),
            ImageFormat::Png,
        )?;
        let dir = report
            .commit()
            .context("putting the report folder in place")?;
        note!("wrote {}", dir.display());
    }
    super::to_stdout(&out)
}

fn comparisons_csv(comps: &[Comparison]) -> String {
    let mut s = String::from("id,kind,metric,measured,predicted,signed_error\n");
    for c in comps {
        s.push_str(&format!(
            "{},{:?},{},{},{},{}\n",
            c.id,
            c.kind,
            c.metric.name(),
            c.measured,
            c.predicted,
            c.signed_error
        ));
    }
    s
}

/// Predicted against measured, one series per metric group, log-log with y = x.
fn scatter(comps: &[Comparison]) -> Chart {
    let groups: [(&str, &[Metric]); 3] = [
        ("offline output tokens/s", &[Metric::OutputTokensPerS]),
        (
            "TTFT (mean, p90, p99) ms",
            &[Metric::TtftMeanMs, Metric::TtftP90Ms, Metric::TtftP99Ms],
        ),
        (
            "E2E (mean, p90, p99) ms and ITL ms",
            &[
                Metric::E2eMeanMs,
                Metric::E2eP90Ms,
                Metric::E2eP99Ms,
                Metric::ItlDerivedMs,
            ],
        ),
    ];
    let mut series: Vec<Series> = groups
        .iter()
        .map(|(name, ms)| Series {
            name: name.to_string(),
            points: comps
                .iter()
                .filter(|c| ms.contains(&c.metric))
                .filter(|c| {
                    !(c.metric == Metric::OutputTokensPerS && format!("{:?}", c.kind) == "Online")
                })
                .map(|c| (c.measured, c.predicted))
                .collect(),
            style: SeriesStyle::Points,
        })
        .collect();
    let (lo, hi) = comps
        .iter()
        .flat_map(|c| [c.measured, c.predicted])
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if hi > 0.0 {
        series.push(Series {
            name: "y = x".into(),
            points: vec![(lo, lo), (hi, hi)],
            style: SeriesStyle::Line,
        });
    }
    Chart {
        title: "servesim: predicted against measured (reference serving measurements)".into(),
        x_label: "measured".into(),
        y_label: "predicted".into(),
        series,
        x_rules: Vec::<Rule>::new(),
        y_rules: Vec::new(),
        markers: Vec::new(),
        log_x: true,
        log_y: true,
    }
}
