//! `servesim plan`: the cheapest deployment that meets the SLOs, and its report folder.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{Format, PlanArgs};
use servesim::plan::{plan, rate_curve, CostWorkbookExporter, PlanOutput, PlanResult};
use servesim::report::atomic::write_atomic;
use servesim::report::plot::{
    cdf_series, render, Chart, ImageFormat, Marker, Rule, Series, SeriesStyle,
};
use servesim::report::{export_all, CsvExporter, Exporter, JsonExporter};
use servesim::scenario::Scenario;

const DEFAULT_PLAN: &str = include_str!("../../scenarios/chat-slo.toml");

/// Runs `servesim plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    let (mut sc, origin) = match &args.scenario {
        Some(p) => (Scenario::load(Some(p), &args.set)?, p.display().to_string()),
        None => (
            Scenario::parse(
                DEFAULT_PLAN,
                "<embedded scenarios/chat-slo.toml>",
                &args.set,
            )?,
            "<embedded scenarios/chat-slo.toml>".to_string(),
        ),
    };
    if let Some(p) = args.price {
        if !(p.is_finite() && p >= 0.0) {
            anyhow::bail!(servesim::Error::config(
                "--price",
                "price_usd_per_gpu_hour",
                format!("must be >= 0, got {p}")
            ));
        }
        sc.pricing.price_usd_per_gpu_hour = Some(p);
    }
    if std::io::stderr().is_terminal() {
        eprintln!(
            "planning {} ...",
            if sc.name.is_empty() {
                &origin
            } else {
                &sc.name
            }
        );
    }
    let out = plan(&sc, &origin)?;
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Json => JsonExporter::new("plan.json").write(&out.plan, &mut stdout)?,
        Format::Csv => CsvExporter::new("candidates.csv").write(&out.plan, &mut stdout)?,
        Format::Table => print_plan(&mut stdout, &sc, &out.plan)?,
    }
    write_report(&args.out, &sc, &origin, &out)
        .with_context(|| format!("writing the report folder {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.join("index.html").display());
    Ok(())
}

fn print_plan(w: &mut impl Write, sc: &Scenario, p: &PlanResult) -> Result<()> {
    let slo = &sc.slo;
    let fmt_slo =
        |v: Option<f64>, pct: f64, name: &str| v.map(|ms| format!("p{pct} {name} <= {ms} ms"));
    let slos: Vec<String> = [
        fmt_slo(slo.ttft_ms, slo.ttft_percentile, "TTFT"),
        fmt_slo(slo.tpot_ms, slo.tpot_percentile, "TPOT"),
        fmt_slo(slo.e2e_ms, slo.e2e_percentile, "E2E"),
    ]
    .into_iter()
    .flatten()
    .collect();
    writeln!(
        w,
        "============ servesim plan: {} ============\n{} at {:.2} req/s; SLOs: {}; goodput >= {:.0}%",
        sc.name,
        sc.deployment.model,
        p.target_rate_per_s,
        if slos.is_empty() { "none".into() } else { slos.join(", ") },
        100.0 * p.goodput_threshold
    )?;
    writeln!(
        w,
        "{:>4} {:<14}{:<6}{:>4}{:>6} {:>10}{:>10}{:>6}{:>6}{:>11}{:>10}  note",
        "rank",
        "gpu",
        "dtype",
        "tp",
        "seqs",
        "req/s/rep",
        "sat req/s",
        "reps",
        "GPUs",
        "$/hour",
        "$/M out"
    )?;
    for (i, c) in p.candidates.iter().enumerate().take(15) {
        let (usd, per_m) = c
            .cost_at_target
            .map_or((String::from("-"), String::from("-")), |x| {
                (
                    format!("{:.2}", x.usd_per_hour),
                    format!("{:.3}", x.usd_per_million_output_tokens),
                )
            });
        writeln!(
            w,
            "{:>4} {:<14}{:<6}{:>4}{:>6} {:>10.2}{:>10.2}{:>6}{:>6}{:>11}{:>10}  {}",
            i + 1,
            c.candidate.gpu,
            c.candidate.dtype,
            c.candidate.tp,
            c.candidate.max_num_seqs,
            c.max_rate_per_replica,
            c.saturation_rate_per_replica,
            c.replicas,
            c.gpus,
            usd,
            per_m,
            c.infeasible.as_deref().unwrap_or("")
        )?;
    }
    if p.candidates.len() > 15 {
        writeln!(
            w,
            "     ... {} more in candidates.csv",
            p.candidates.len() - 15
        )?;
    }
    match p.chosen.map(|i| &p.candidates[i]) {
        None => writeln!(
            w,
            "\nNo candidate meets the SLOs at this load within the search space."
        )?,
        Some(c) => {
            let cost = c.cost_at_target.expect("a chosen candidate has a cost"); // chosen ⇒ feasible ⇒ costed
            writeln!(
                w,
                "\nPlan: {} x {} ({} GPUs: {} replicas of TP {}), {} weights, max_num_seqs {}",
                c.gpus,
                c.candidate.gpu,
                c.gpus,
                c.replicas,
                c.candidate.tp,
                c.candidate.dtype,
                c.candidate.max_num_seqs
            )?;
            writeln!(
                w,
                "  cost: ${:.2}/hour, ${:.0}/month at ${:.2}/GPU-hour; ${:.3} per M output tokens, ${:.3} per M total tokens",
                cost.usd_per_hour, cost.usd_per_month, cost.price_usd_per_gpu_hour, cost.usd_per_million_output_tokens, cost.usd_per_million_total_tokens
            )?;
            writeln!(
                w,
                "  blended prices (input at {}x output): ${:.3} per M output, ${:.3} per M input",
                sc.pricing.input_output_price_ratio.unwrap_or(0.25),
                cost.usd_per_million_output_blended,
                cost.usd_per_million_input_blended
            )?;
            if let (Some(sat), Some(d)) = (c.cost_at_saturation, p.batch_discount) {
                writeln!(
                    w,
                    "  batch (max-throughput) point: ${:.3} per M output tokens; the difference funds a {:.0}% batch discount",
                    sat.usd_per_million_output_tokens,
                    100.0 * d
                )?;
            }
            if let Some(v) = &p.verification {
                writeln!(
                    w,
                    "  verified at {:.2} req/s on the whole deployment: {:.0} output tok/s ({:.0}/GPU), TTFT p50/p99 {:.0}/{:.0} ms, TPOT p50/p99 {:.1}/{:.1} ms, E2E p99 {:.0} ms, goodput {:.1}% -> SLOs {}",
                    p.target_rate_per_s,
                    v.output_throughput,
                    v.output_throughput_per_gpu,
                    v.median_ttft_ms,
                    v.p99_ttft_ms,
                    v.median_tpot_ms,
                    v.p99_tpot_ms,
                    v.p99_e2el_ms,
                    100.0 * v.goodput_share,
                    if v.slo.all_met { "met" } else { "MISSED" }
                )?;
            }
        }
    }
    writeln!(w, "({} simulations)", p.simulations)?;
    Ok(())
}

fn write_report(dir: &Path, sc: &Scenario, origin: &str, out: &PlanOutput) -> Result<()> {
    let p = &out.plan;
    export_all(
        dir,
        p,
        &[
            &JsonExporter::new("plan.json"),
            &CsvExporter::new("candidates.csv"),
            &CostWorkbookExporter,
        ],
    )?;
    let mut images: Vec<(String, String)> = Vec::new();
    if let (Some(i), Some(one)) = (p.chosen, &out.chosen_scenario) {
        let c = &p.candidates[i];
        let sat = c.saturation_rate_per_replica.max(1e-6);
        let rates: Vec<f64> = (1..=12).map(|k| sat * k as f64 / 12.0 * 1.05).collect();
        let curve = rate_curve(one, origin, &rates)?;
        let pts = |f: &dyn Fn(&servesim::summary::RunSummary) -> f64| -> Vec<(f64, f64)> {
            curve
                .iter()
                .map(|(_, s)| (f(s), s.output_throughput_per_gpu))
                .collect()
        };
        let at = c.at_max_rate.as_ref();
        let mut x_rules = Vec::new();
        if let Some(t) = sc.slo.ttft_ms {
            x_rules.push(Rule {
                value: t,
                label: format!("SLO p{} TTFT {} ms", sc.slo.ttft_percentile, t),
            });
        }
        let chart = Chart {
            title: format!(
                "{} {} TP{}: throughput vs p99 TTFT (1 replica)",
                c.candidate.gpu, c.candidate.dtype, c.candidate.tp
            ),
            x_label: "p99 TTFT (ms)".into(),
            y_label: "output tokens/s per GPU".into(),
            series: vec![Series {
                name: "rate sweep".into(),
                points: pts(&|s| s.p99_ttft_ms),
                style: SeriesStyle::LineWithPoints,
            }],
            x_rules,
            y_rules: vec![],
            markers: at
                .map(|s| {
                    vec![Marker {
                        x: s.p99_ttft_ms,
                        y: s.output_throughput_per_gpu,
                        label: format!("plan: {:.2} req/s per replica", c.max_rate_per_replica),
                    }]
                })
                .unwrap_or_default(),
            log_x: true,
            log_y: false,
        };
        images.push(save(dir, "throughput-vs-p99-ttft", &chart)?);
        let mut tpot_rules = Vec::new();
        if let Some(t) = sc.slo.tpot_ms {
            tpot_rules.push(Rule {
                value: t,
                label: format!("SLO p{} TPOT {} ms", sc.slo.tpot_percentile, t),
            });
        }
        let chart = Chart {
            title: "throughput vs p99 TPOT (1 replica)".into(),
            x_label: "p99 TPOT (ms)".into(),
            y_label: "output tokens/s per GPU".into(),
            series: vec![Series {
                name: "rate sweep".into(),
                points: pts(&|s| s.p99_tpot_ms),
                style: SeriesStyle::LineWithPoints,
            }],
            x_rules: tpot_rules,
            y_rules: vec![],
            markers: at
                .map(|s| {
                    vec![Marker {
                        x: s.p99_tpot_ms,
                        y: s.output_throughput_per_gpu,
                        label: "plan".into(),
                    }]
                })
                .unwrap_or_default(),
            log_x: false,
            log_y: false,
        };
        images.push(save(dir, "throughput-vs-p99-tpot", &chart)?);
        let price = c.cost_at_target.map_or(0.0, |x| x.price_usd_per_gpu_hour);
        let cost_pts: Vec<(f64, f64)> = curve
            .iter()
            .filter(|(_, s)| s.output_throughput > 0.0)
            .map(|(r, s)| {
                (
                    *r,
                    price * c.candidate.tp as f64 / (s.output_throughput * 3600.0) * 1e6,
                )
            })
            .collect();
        let chart = Chart {
            title: "$ per 1M output tokens vs load (1 replica)".into(),
            x_label: "arrival rate per replica (req/s)".into(),
            y_label: "$ per 1M output tokens".into(),
            series: vec![Series {
                name: format!("{} at ${price:.2}/GPU-hour", c.candidate.gpu),
                points: cost_pts,
                style: SeriesStyle::LineWithPoints,
            }],
            x_rules: vec![Rule {
                value: c.max_rate_per_replica,
                label: "max rate within SLOs".into(),
            }],
            y_rules: vec![],
            markers: vec![],
            log_x: false,
            log_y: true,
        };
        images.push(save(dir, "cost-vs-load", &chart)?);
    }
    if let Some(run) = &out.verification_run {
        let chart = Chart {
            title: "verification run: TTFT and TPOT CDFs".into(),
            x_label: "latency (ms)".into(),
            y_label: "fraction of requests".into(),
            series: vec![
                cdf_series("TTFT", &run.ttft_cdf),
                cdf_series("TPOT", &run.tpot_cdf),
            ],
            x_rules: [sc.slo.ttft_ms, sc.slo.tpot_ms]
                .iter()
                .flatten()
                .map(|&v| Rule {
                    value: v,
                    label: format!("SLO {v} ms"),
                })
                .collect(),
            y_rules: vec![],
            markers: vec![],
            log_x: true,
            log_y: false,
        };
        images.push(save(dir, "latency-cdf", &chart)?);
        let ts = &run.timeseries;
        let chart = Chart {
            title: "verification run: time series".into(),
            x_label: "simulated time (s)".into(),
            y_label: "requests; KV use (% of capacity)".into(),
            series: vec![
                Series {
                    name: "running".into(),
                    points: ts.iter().map(|p| (p.time_s, p.running)).collect(),
                    style: SeriesStyle::Line,
                },
                Series {
                    name: "waiting".into(),
                    points: ts.iter().map(|p| (p.time_s, p.waiting)).collect(),
                    style: SeriesStyle::Line,
                },
                Series {
                    name: "KV use %".into(),
                    points: ts
                        .iter()
                        .map(|p| (p.time_s, 100.0 * p.kv_utilization))
                        .collect(),
                    style: SeriesStyle::Line,
                },
            ],
            x_rules: vec![],
            y_rules: vec![],
            markers: vec![],
            log_x: false,
            log_y: false,
        };
        images.push(save(dir, "timeseries", &chart)?);
    }
    let mut html = String::from("<!doctype html><meta charset=\"utf-8\"><title>servesim plan</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}img{max-width:100%;border:1px solid #ddd}</style>\n");
    let mut text = Vec::new();
    print_plan(&mut text, sc, p)?;
    html.push_str(&format!(
        "<h1>servesim plan: {}</h1>\n<pre>{}</pre>\n",
        escape(&sc.name),
        escape(&String::from_utf8_lossy(&text))
    ));
    html.push_str("<p>Files: <a href=\"plan.json\">plan.json</a> · <a href=\"candidates.csv\">candidates.csv</a> · <a href=\"cost.xlsx\">cost.xlsx</a> (editable $/GPU-hour, GPUs, tokens/s and utilisation cells; the cost formulas recompute)</p>\n");
    for (png, svg) in &images {
        html.push_str(&format!(
            "<h2>{}</h2><p><a href=\"{svg}\"><img src=\"{png}\"></a></p>\n",
            escape(png.trim_end_matches(".png"))
        ));
    }
    write_atomic(&dir.join("index.html"), html.as_bytes())?;
    Ok(())
}

fn save(dir: &Path, stem: &str, chart: &Chart) -> Result<(String, String)> {
    let png = format!("{stem}.png");
    let svg = format!("{stem}.svg");
    render(chart, &dir.join(&png), ImageFormat::Png)?;
    render(chart, &dir.join(&svg), ImageFormat::Svg)?;
    Ok((png, svg))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
