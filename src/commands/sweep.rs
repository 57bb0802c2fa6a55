//! `servesim sweep`: a scenario over a grid of values, in parallel, with a progress bar; a
//! slice of the grid (`--shard K/N`) for a job array, and the merge of the slices (`--merge`).

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Format, SweepArgs};
use servesim::plan::{
    fingerprint, grid_points, merge_shards, parse_vary, sweep, Shard, ShardManifest, SweepPoint,
    SweepTable,
};
use servesim::report::atomic::ReportDir;
use servesim::report::sweep::write_sweep_text;
use servesim::report::{export_all, CsvExporter, Exporter, JsonExporter};
use servesim::scenario::{Scenario, DEFAULT_SCENARIO};

/// Runs `servesim sweep`.
pub fn run(args: &SweepArgs) -> Result<()> {
    let out = super::begin_out_dir("--out", &args.out)?;
    if !args.merge.is_empty() {
        let (keys, points) = merge_shards(&args.merge)?;
        let text = render(args, "merged sweep", &keys, &points)?;
        write_outputs(out, &keys, &points, None)?;
        return super::to_stdout(&text);
    }
    let (text, origin) = match &args.scenario {
        Some(p) => servesim::scenario::read_scenario_text(p)?,
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
    every_point_failed(&results)?;
    let manifest = shard.map(|s| ShardManifest {
        shard: s,
        grid_points: total,
        keys: keys.clone(),
        fingerprint: fingerprint(&text, &args.set, &varies),
    });
    let name = Scenario::parse(&text, &origin, &args.set)?.name;
    let title = if name.is_empty() {
        origin.as_str()
    } else {
        &name
    };
    let printed = render(args, title, &keys, &results)?;
    write_outputs(out, &keys, &results, manifest.as_ref())?;
    super::to_stdout(&printed)
}

/// An error (exit 2) when no point of the sweep ran: every one was an invalid scenario, so
/// the sweep measured nothing. The first point's error says why.
fn every_point_failed(points: &[SweepPoint]) -> Result<()> {
    let failed = points.iter().filter(|r| r.error.is_some()).count();
    match points.first().and_then(|p| p.error.as_ref()) {
        Some(first) if failed == points.len() => anyhow::bail!(servesim::Error::config(
            "--vary",
            "grid",
            format!(
                "every one of the {} points failed; the first: {first}",
                points.len()
            )
        )),
        _ => Ok(()),
    }
}

/// sweep.json and sweep.csv (and a shard's shard.json) in the report folder `out`, swapped in
/// whole: the same bytes for the same points, however they ran.
fn write_outputs(
    out: ReportDir,
    keys: &[String],
    points: &[SweepPoint],
    shard: Option<&ShardManifest>,
) -> Result<()> {
    let table = SweepTable { keys, points };
    let dir = out.path();
    export_all(dir, points, &[&JsonExporter::new("sweep.json")])
        .and_then(|_| export_all(dir, &table, &[&CsvExporter::new("sweep.csv")]))
        .and_then(|_| match shard {
            Some(m) => export_all(dir, m, &[&JsonExporter::new("shard.json")]).map(|_| ()),
            None => Ok(()),
        })
        .with_context(|| format!("writing {}", out.target().display()))?;
    let target = out.commit().context("putting the report folder in place")?;
    let failed = points.iter().filter(|r| r.error.is_some()).count();
    note!(
        "{} points ({} failed) -> {}",
        points.len(),
        failed,
        target.join("sweep.csv").display()
    );
    Ok(())
}

/// What `sweep` prints: a table on a terminal, CSV when piped (or `--format`).
fn render(
    args: &SweepArgs,
    title: &str,
    keys: &[String],
    points: &[SweepPoint],
) -> Result<Vec<u8>> {
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Csv
    });
    let table = SweepTable { keys, points };
    let mut text = Vec::new();
    match format {
        Format::Csv => CsvExporter::new("sweep.csv").write(&table, &mut text)?,
        Format::Json => JsonExporter::new("sweep.json").write(points, &mut text)?,
        Format::Table => write_sweep_text(&mut text, title, keys, points)?,
    }
    Ok(text)
}
