//! `servesim sweep`: a scenario over a grid of values, in parallel, with a progress bar.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Format, SweepArgs};
use servesim::plan::{parse_vary, sweep, SweepTable};
use servesim::report::sweep::write_sweep_text;
use servesim::report::{export_all, CsvExporter, Exporter, JsonExporter};
use servesim::scenario::{Scenario, DEFAULT_SCENARIO};

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
    let keys: Vec<String> = varies.iter().map(|v| v.key.clone()).collect();
    let table = SweepTable {
        keys: &keys,
        points: &results,
    };
    export_all(
        &args.out,
        results.as_slice(),
        &[&JsonExporter::new("sweep.json")],
    )
    .and_then(|_| export_all(&args.out, &table, &[&CsvExporter::new("sweep.csv")]))
    .with_context(|| format!("writing {}", args.out.display()))?;
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    eprintln!(
        "{} points ({} failed) -> {}",
        results.len(),
        failed,
        args.out.join("sweep.csv").display()
    );
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Csv
    });
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Csv => CsvExporter::new("sweep.csv").write(&table, &mut stdout)?,
        Format::Json => JsonExporter::new("sweep.json").write(results.as_slice(), &mut stdout)?,
        Format::Table => {
            let name = Scenario::parse(&text, &origin, &args.set)?.name;
            let title = if name.is_empty() {
                origin.as_str()
            } else {
                &name
            };
            write_sweep_text(&mut stdout, title, &keys, &results)?;
        }
    }
    Ok(())
}
