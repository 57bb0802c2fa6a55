//! `servesim sweep`: a scenario over a grid of values, in parallel, with a progress bar.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::SweepArgs;
use servesim::plan::{parse_vary, sweep, SweepPoint};
use servesim::report::atomic::write_atomic;
use servesim::scenario::DEFAULT_SCENARIO;

/// Runs `servesim sweep`.
pub fn run(args: &SweepArgs) -> Result<()> {
    let (text, origin) = match &args.scenario {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| servesim::Error::io(p, e))?,
            p.display().to_string(),
        ),
        None => (
            DEFAULT_SCENARIO.to_string(),
            "<embedded default>".to_string(),
        ),
    };
    let varies = args
        .vary
        .iter()
        .map(|v| parse_vary(v))
        .collect::<servesim::Result<Vec<_>>>()?;
    let points: usize = varies.iter().map(|v| v.values.len()).product();
    let bar = ProgressBar::new(points as u64);
    if std::io::stderr().is_terminal() {
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} points ({eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let tick = || bar.inc(1);
    let results = sweep(&text, &origin, &args.set, &varies, &tick)?;
    bar.finish_and_clear();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    write_atomic(
        &args.out.join("sweep.json"),
        serde_json::to_string_pretty(&results)?.as_bytes(),
    )?;
    let csv = to_csv(
        &varies.iter().map(|v| v.key.clone()).collect::<Vec<_>>(),
        &results,
    )?;
    write_atomic(&args.out.join("sweep.csv"), csv.as_bytes())?;
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    eprintln!(
        "{} points ({} failed) -> {}",
        results.len(),
        failed,
        args.out.join("sweep.csv").display()
    );
    print!("{csv}");
    Ok(())
}

fn to_csv(keys: &[String], points: &[SweepPoint]) -> Result<String> {
    let mut header: Option<String> = None;
    let mut rows = Vec::new();
    for p in points {
        let vals: Vec<String> = p.overrides.iter().map(|(_, v)| v.clone()).collect();
        match &p.summary {
            Some(s) => {
                let (h, r) = super::run::csv_row(s)?;
                header.get_or_insert(h);
                rows.push(format!("{},{r},", vals.join(",")));
            }
            None => rows.push(format!(
                "{},ERROR,\"{}\"",
                vals.join(","),
                p.error.clone().unwrap_or_default().replace('"', "'")
            )),
        }
    }
    let mut out = format!(
        "{},{},error\n",
        keys.join(","),
        header.unwrap_or_else(|| "summary".into())
    );
    for r in rows {
        out.push_str(&r);
        out.push('\n');
    }
    Ok(out)
}
