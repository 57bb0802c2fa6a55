//! `servesim sweep`: a scenario over a grid of values, in parallel, with a progress bar; a
//! slice of the grid (`--shard K/N`) for a job array, and the merge of the slices (`--merge`).

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Format, SweepArgs};
use servesim::plan::{
    fingerprint, grid_points, merge_shards, parse_vary, sweep, Shard, ShardManifest, SweepPoint,
    SweepTable,
};
use servesim::report::sweep::write_sweep_text;
use servesim::report::{export_all, CsvExporter, Exporter, JsonExporter};
use servesim::scenario::{Scenario, DEFAULT_SCENARIO};

/// Runs `servesim sweep`.
pub fn run(args: &SweepArgs) -> Result<()> {
    super::check_out_dir("--out", &args.out)?;
    if !args.merge.is_empty() {
        let (keys, points) = merge_shards(&args.merge)?;
        write_outputs(&args.out, &keys, &points)?;
        return print(args, "merged sweep", &keys, &points);
    }
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
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let total = grid_points(&varies)?;
    let points = match shard {
        Some(s) => (0..total).filter(|&i| s.holds(i)).count(),
        None => total,
    };
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
    // The fast-forward does not change results: shards run with and without it merge.
    let set = super::overrides(&args.set, args.no_fast_forward);
    let results = sweep(&text, &origin, &set, &varies, shard, &tick)?;
    bar.finish_and_clear();
    let keys: Vec<String> = varies.iter().map(|v| v.key.clone()).collect();
    write_outputs(&args.out, &keys, &results)?;
    if let Some(s) = shard {
        let manifest = ShardManifest {
            shard: s,
            grid_points: total,
            keys: keys.clone(),
            fingerprint: fingerprint(&text, &args.set, &varies),
        };
        export_all(&args.out, &manifest, &[&JsonExporter::new("shard.json")])
            .with_context(|| format!("writing {}", args.out.display()))?;
    }
    let name = Scenario::parse(&text, &origin, &args.set)?.name;
    let title = if name.is_empty() {
        origin.as_str()
    } else {
        &name
    };
    print(args, title, &keys, &results)
}

/// sweep.json and sweep.csv in `out`: the same bytes for the same points, however they ran.
fn write_outputs(out: &Path, keys: &[String], points: &[SweepPoint]) -> Result<()> {
    let table = SweepTable { keys, points };
    export_all(out, points, &[&JsonExporter::new("sweep.json")])
        .and_then(|_| export_all(out, &table, &[&CsvExporter::new("sweep.csv")]))
        .with_context(|| format!("writing {}", out.display()))?;
    let failed = points.iter().filter(|r| r.error.is_some()).count();
    eprintln!(
        "{} points ({} failed) -> {}",
        points.len(),
        failed,
        out.join("sweep.csv").display()
    );
    Ok(())
}

fn print(args: &SweepArgs, title: &str, keys: &[String], points: &[SweepPoint]) -> Result<()> {
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Csv
    });
    let table = SweepTable { keys, points };
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Csv => CsvExporter::new("sweep.csv").write(&table, &mut stdout)?,
        Format::Json => JsonExporter::new("sweep.json").write(points, &mut stdout)?,
        Format::Table => write_sweep_text(&mut stdout, title, keys, points)?,
    }
    Ok(())
}
