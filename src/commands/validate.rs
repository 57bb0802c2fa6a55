//! `servesim validate`: predicted against measured on reference measurements.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::{Format, ValidateArgs};
use servesim::catalog::{self, Entry, Kind};
use servesim::engine::EngineProfile;
use servesim::report::atomic::write_atomic;
use servesim::report::plot::{render, Chart, ImageFormat, Rule, Series, SeriesStyle};
use servesim::validate::bound::pair::{pair_checks, PairCheck};
use servesim::validate::bound::{datasheet_bounds, DatasheetBound};
use servesim::validate::cv::{self, embedded_rows, CrossValidation, Headline};
use servesim::validate::markdown::{
    markdown, other_files_markdown, residuals_csv, OTHER_REFERENCE_FILES,
};
use servesim::validate::{
    compare, fit_engine_host, prediction_intervals, read_reference, step_time_headroom, summarize,
    Comparison, ErrorSummary, FitOptions, Metric, PredictionInterval, ReferenceRow,
};

/// Runs `servesim validate`.
pub fn run(args: &ValidateArgs) -> Result<()> {
    let report = args
        .out
        .as_deref()
        .map(|o| super::begin_out_dir("--out", o))
        .transpose()?;
    if args.other_releases {
        let mut files = Vec::new();
        for f in OTHER_REFERENCE_FILES {
            let rows = read_reference(std::path::Path::new(f))?;
            let comps = compare(&rows, None)?;
            files.push((*f, rows, comps));
        }
        return super::to_stdout(other_files_markdown(&files)?.as_bytes());
    }
    if !(args.coverage > 0.0 && args.coverage < 1.0) {
        anyhow::bail!(servesim::Error::config(
            "--coverage",
            "coverage",
            format!("must be in (0, 1), got {}", args.coverage)
        ));
    }
    let mut rows = if args.reference.is_empty() {
        // A fit uses the fit set only; validation covers the held-out files too.
        if args.fit_engine.is_some() {
            cv::fit_rows()?
        } else {
            embedded_rows()?
        }
    } else {
        let mut rows = Vec::new();
        for p in &args.reference {
            rows.extend(read_reference(p)?);
        }
        rows
    };
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
    if !args.group.is_empty() {
        let known = cv::groups(&rows);
        if let Some(g) = args.group.iter().find(|g| !known.contains(g)) {
            anyhow::bail!(servesim::Error::config(
                "--group",
                "group",
                format!(
                    "no rows of '{g}'; the configurations are: {}",
                    known.join("; ")
                )
            ));
        }
        rows.retain(|r| args.group.contains(&r.group()));
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
    let fit_set = cv::fit_rows()?;
    let result = if let Some(name) = &args.fit_engine {
        let profile = EngineProfile::load(name)?;
        let fit = fit_engine_host(
            &rows,
            &profile,
            FitOptions {
                profile: true,
                ..FitOptions::default()
            },
        )?;
        report_fit(name, &fit);
        let comps = compare(&rows, Some(&fit.host))?;
        CrossValidation {
            in_sample: comps.clone(),
            out_of_sample: comps,
            folds: Vec::new(),
        }
    } else if args.no_cv {
        let comps = compare(&rows, None)?;
        CrossValidation {
            in_sample: comps.clone(),
            out_of_sample: comps,
            folds: Vec::new(),
        }
    } else {
        cv::cross_validate(&rows, &fit_set, None)?
    };
    let cross_validated = args.fit_engine.is_none() && !args.no_cv;
    let mut out: Vec<u8> = Vec::new();
    if args.markdown {
        out.extend_from_slice(markdown(&rows, &fit_set, &result, args.coverage)?.as_bytes());
    } else {
        print_report(&mut out, args, &rows, &result, cross_validated)?;
    }
    if let Some(report) = report {
        write_out(report.path(), args, &result)?;
        let dir = report
            .commit()
            .context("putting the report folder in place")?;
        note!("wrote {}", dir.display());
    }
    super::to_stdout(&out)
}

/// Prints what `--fit-engine` fitted and what the rows determine (standard error).
fn report_fit(name: &str, fit: &servesim::validate::HostFit) {
    if !fit.left_out.is_empty() {
        note!(
            "left out of the fit (the model falls behind their arrivals even with no host cost): {}",
            fit.left_out.join(", ")
        );
    }
    note!(
        "fitted {name} host costs on {} rows ({} figures, mean Huber loss {:.4}); per-iteration cost held under {:.3e} s: {}; exposed per-iteration time under {:.3e} s: {}",
        fit.fitted_rows, fit.figures, fit.score, fit.iteration_bound.0, fit.iteration_bound.1,
        fit.exposed_bound.0, fit.exposed_bound.1
    );
    for p in &fit.params {
        note!("  {}", p.describe());
    }
}

/// The tables: per row, per figure family (out of sample with the in-sample median beside),
/// per configuration, the rows predicted saturated, per metric, and the intervals.
fn print_report(
    out: &mut impl Write,
    args: &ValidateArgs,
    rows: &[ReferenceRow],
    cv: &CrossValidation,
    cross_validated: bool,
) -> Result<()> {
    let (inn, oos) = (&cv.in_sample, &cv.out_of_sample);
    let bounds = datasheet_bounds(rows)?;
    let pairs = pair_checks(rows)?;
    let summary = summarize(oos);
    let intervals = prediction_intervals(oos, args.coverage);
    let headroom = step_time_headroom(oos, args.coverage);
    match args.format {
        Format::Json => {
            let (sat_inn, sat_oos) = (
                cv::saturation(rows, inn, &bounds, &pairs),
                cv::saturation(rows, oos, &bounds, &pairs),
            );
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "cross_validated": cross_validated,
                    "rows": inn,
                    "out_of_sample_rows": oos,
                    "summary": summary,
                    "in_sample_summary": summarize(inn),
                    "folds": cv.folds,
                    "intervals": intervals,
                    "step_time_headroom": headroom,
                    "predicted_saturated": sat_oos.counted,
                    "predicted_saturated_in_sample": sat_inn.counted,
                    "set_aside_by_datasheet_bound":
                        sat_oos.set_aside.iter().map(|b| &b.id).collect::<Vec<_>>(),
                    "set_aside_by_datasheet_bound_in_sample":
                        sat_inn.set_aside.iter().map(|b| &b.id).collect::<Vec<_>>(),
                    "datasheet_bounds": bounds,
                    "counted_with_inconsistent_pair":
                        sat_oos.counted_with_inconsistent_pair.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                    "counted_with_inconsistent_pair_in_sample":
                        sat_inn.counted_with_inconsistent_pair.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                    "pair_checks": pairs,
                }))?
            )?;
            return Ok(());
        }
        Format::Csv => {
            write!(out, "{}", comparisons_csv(cv))?;
            return Ok(());
        }
        Format::Table => {}
    }
    let which = if cross_validated {
        "out of sample: each configuration predicted with host costs refitted without it"
    } else {
        "in sample (no cross-validation)"
    };
    write_rows_table(out, inn, oos)?;
    write_headlines(out, inn, oos, which)?;
    write_per_configuration(out, rows, cv, which)?;
    write_saturated(out, rows, inn, oos, &bounds, &pairs)?;
    write_pairs(out, &pairs)?;
    write_per_metric(out, &summary)?;
    write_intervals(out, &intervals, headroom, args.coverage, which)
}

/// Per row and metric: measured, predicted in and out of sample, and both errors.
fn write_rows_table(out: &mut impl Write, inn: &[Comparison], oos: &[Comparison]) -> Result<()> {
    // The row column fits the longest id (the 0.14 files' ids run to 30 characters).
    let id_w = inn.iter().map(|c| c.id.len() + 2).fold(18, usize::max);
    writeln!(
        out,
        "{:<id_w$}{:<20}{:>12}{:>12}{:>12}{:>10}{:>10}",
        "row", "metric", "measured", "in-sample", "out-of-smp", "err in", "err out"
    )?;
    for (a, b) in inn.iter().zip(oos) {
        writeln!(
            out,
            // A space before each error: a saturated row's errors run to six digits.
            "{:<id_w$}{:<20}{:>12.1}{:>12.1}{:>12.1} {:>+8.1}% {:>+8.1}%",
            a.id,
            a.metric.name(),
            a.measured,
            a.predicted,
            b.predicted,
            100.0 * a.signed_error,
            100.0 * b.signed_error
        )?;
    }
    Ok(())
}

/// Per figure family: rows, median |error|, bias and worst out of sample, and the in-sample
/// median beside (`which` says which sample).
fn write_headlines(
    out: &mut impl Write,
    inn: &[Comparison],
    oos: &[Comparison],
    which: &str,
) -> Result<()> {
    writeln!(out, "\nheadline figures, {which}")?;
    writeln!(
        out,
        "{:<32}{:>6}{:>14}{:>10}{:>10}{:>12}",
        "figure", "rows", "median |err|", "bias", "worst", "in-sample"
    )?;
    for h in Headline::ALL {
        let (Some(o), Some(i)) = (cv::stats(oos, &h.pick(oos)), cv::stats(inn, &h.pick(inn)))
        else {
            continue;
        };
        writeln!(
            out,
            "{:<32}{:>6}{:>13.1}%{:>+9.1}%{:>9.1}%{:>11.1}%",
            h.label(),
            o.n,
            100.0 * o.median_abs,
            100.0 * o.bias,
            100.0 * o.worst_abs,
            100.0 * i.median_abs
        )?;
    }
    Ok(())
}

/// Per configuration: each figure family's median |error| and bias, and how its fold was
/// fitted.
fn write_per_configuration(
    out: &mut impl Write,
    rows: &[ReferenceRow],
    cv: &CrossValidation,
    which: &str,
) -> Result<()> {
    let oos = &cv.out_of_sample;
    writeln!(out, "\nper configuration ({which}): median |err| (bias)")?;
    for g in cv::groups(rows) {
        let mut line = format!("  {g}:");
        for h in Headline::ALL {
            let idx: Vec<usize> = h
                .pick(oos)
                .into_iter()
                .filter(|&i| oos[i].group == g)
                .collect();
            if let Some(st) = cv::stats(oos, &idx) {
                line.push_str(&format!(
                    " {} {:.1}% ({:+.1}%);",
                    h.label(),
                    100.0 * st.median_abs,
                    100.0 * st.bias
                ));
            }
        }
        if let Some(f) = cv.folds.iter().find(|f| f.group == g) {
            line.push_str(&if f.refitted {
                format!(" refit on {} other rows", f.fitted_rows)
            } else {
                " held out (in no fit)".to_string()
            });
        }
        writeln!(out, "{}", line.trim_end_matches(';'))?;
    }
    Ok(())
}

/// The online rows the engine kept up with that the model predicts saturated, in and out of
/// sample (those whose datasheet bound exceeds 1 set aside, with the bound; those of a pair
/// inconsistent at datasheet rates counted and noted with the pair), and each online row's
/// datasheet bound.
fn write_saturated(
    out: &mut impl Write,
    rows: &[ReferenceRow],
    inn: &[Comparison],
    oos: &[Comparison],
    bounds: &[DatasheetBound],
    pairs: &[PairCheck],
) -> Result<()> {
    for (label, comps) in [("in sample", inn), ("out of sample", oos)] {
        writeln!(
            out,
            "online rows the engine kept up with, predicted saturated {label}: {}",
            cv::saturation(rows, comps, bounds, pairs).describe()
        )?;
    }
    if bounds.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nlower bound on GPU time per second of the described load, at datasheet peak \
         (compute: tensor-core FLOP; memory: HBM bytes; above 1: cannot be served as described)"
    )?;
    let id_w = bounds.iter().map(|b| b.id.len() + 2).fold(18, usize::max);
    writeln!(
        out,
        "{:<id_w$}{:>10}{:>6}{:>10}{:>10}{:>10}",
        "row", "req/s", "GPUs", "compute", "memory", "bound"
    )?;
    for b in bounds {
        writeln!(
            out,
            "{:<id_w$}{:>10}{:>6}{:>10.3}{:>10.3}{:>10.3}{}",
            b.id,
            b.inputs.requests_per_s,
            b.inputs.gpus(),
            b.compute_share,
            b.memory_share,
            b.gpu_time_per_s,
            if b.infeasible() {
                "  cannot be served"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// The two-row consistency check of each pair of online rows of one configuration and
/// workload (servesim::validate::bound::pair): what the pair allows a prompt to add, what its
/// GEMMs need at datasheet rates, and the weight-stream fraction that reconciles them.
fn write_pairs(out: &mut impl Write, pairs: &[PairCheck]) -> Result<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\ntwo-row consistency check, pairs of one configuration and workload at two rates \
         (a check under a stated model of the iteration, not a physical bound: \
         src/validate/bound/pair.rs): what a prompt may add to an iteration (measured) against \
         what its GEMMs need at datasheet rates, ms; and the weight stream, as a fraction of \
         the datasheet HBM bandwidth, at or below which the pair is consistent"
    )?;
    let id_w = pairs
        .iter()
        .map(|p| p.inputs.low.id.len() + p.inputs.high.id.len() + 6)
        .fold(18, usize::max);
    writeln!(
        out,
        "{:<id_w$}{:>10}{:>8}{:>12}{:>17}{:>10}{:>10}{:>10}",
        "rows", "req/s", "prompt", "decoding", "prompts/step", "allowed", "needed", "stream"
    )?;
    for p in pairs {
        let x = &p.inputs;
        let eta = match p.consistent_below_hbm_fraction {
            Some(f) => format!("{:.0}%", 100.0 * f),
            None if p.allowed_s < 0.0 => "none".to_string(),
            None => "any".to_string(),
        };
        writeln!(
            out,
            "{:<id_w$}{:>10}{:>8.0}{:>12}{:>17}{:>10.1}{:>10.1}{:>10}{}",
            format!("{} -> {}", x.low.id, x.high.id),
            format!("{} -> {}", x.low.requests_per_s, x.high.requests_per_s),
            x.prompt_tokens,
            format!(
                "{:.0} -> {:.0}",
                x.low.decoding_requests, x.high.decoding_requests
            ),
            format!(
                "{:.3} -> {:.3}",
                x.low.prompts_per_step, x.high.prompts_per_step
            ),
            1e3 * p.allowed_s,
            1e3 * p.required_s,
            eta,
            if p.inconsistent() {
                "  inconsistent at datasheet rates"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// Per load kind and metric: rows, median |error|, bias, worst and the worst row.
fn write_per_metric(out: &mut impl Write, summary: &[ErrorSummary]) -> Result<()> {
    writeln!(
        out,
        "\n{:<10}{:<20}{:>6}{:>14}{:>12}{:>12}  worst row",
        "load", "metric", "rows", "median |err|", "bias", "worst"
    )?;
    for s in summary {
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
    Ok(())
}

/// The prediction intervals at `coverage` per load kind and metric, and the step-time
/// headroom.
fn write_intervals(
    out: &mut impl Write,
    intervals: &[PredictionInterval],
    headroom: Option<f64>,
    coverage: f64,
    which: &str,
) -> Result<()> {
    writeln!(
        out,
        "\nprediction intervals ({which}): measured / predicted - 1 on {:.0}% of the rows",
        100.0 * coverage
    )?;
    writeln!(
        out,
        "{:<10}{:<20}{:>6}{:>10}{:>10}",
        "load", "metric", "rows", "low", "high"
    )?;
    for p in intervals {
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
            100.0 * coverage,
            100.0 * h
        )?;
    }
    Ok(())
}

/// `--out`: the comparisons, the residual file, the summaries, intervals, folds and the plot.
fn write_out(dir: &std::path::Path, args: &ValidateArgs, cv: &CrossValidation) -> Result<()> {
    let oos = &cv.out_of_sample;
    let intervals = prediction_intervals(oos, args.coverage);
    let headroom = step_time_headroom(oos, args.coverage);
    write_atomic(&dir.join("comparisons.csv"), comparisons_csv(cv).as_bytes())?;
    write_atomic(&dir.join("out-of-sample.csv"), residuals_csv(cv).as_bytes())?;
    write_atomic(
        &dir.join("summary.json"),
        serde_json::to_string_pretty(&summarize(oos))?.as_bytes(),
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
    write_atomic(
        &dir.join("folds.json"),
        serde_json::to_string_pretty(&cv.folds)?.as_bytes(),
    )?;
    render(
        &scatter(oos),
        &dir.join("predicted-vs-measured.png"),
        ImageFormat::Png,
    )?;
    Ok(())
}

fn comparisons_csv(cv: &CrossValidation) -> String {
    let mut s = String::from(
        "id,group,kind,metric,measured,predicted,signed_error,predicted_out_of_sample,signed_error_out_of_sample\n",
    );
    for (c, o) in cv.in_sample.iter().zip(&cv.out_of_sample) {
        s.push_str(&format!(
            "{},{},{:?},{},{},{},{},{},{}\n",
            c.id,
            c.group,
            c.kind,
            c.metric.name(),
            c.measured,
            c.predicted,
            c.signed_error,
            o.predicted,
            o.signed_error
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
