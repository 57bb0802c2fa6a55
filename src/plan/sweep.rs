//! Parameter sweeps: run a scenario over a grid of `--vary KEY=values` overrides, in parallel.

use std::borrow::Cow;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::measure::{measure, stationary_load, StopRule};
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::summary::RunSummary;
use crate::table::{CellValue, TableSheet, ToTable};

/// One swept key and its values (as TOML literals).
#[derive(Debug, Clone, PartialEq)]
pub struct Vary {
    /// Dotted scenario key.
    pub key: String,
    /// Values to try.
    pub values: Vec<String>,
}

/// Parses `KEY=v1,v2,...` or `KEY=start..end:steps` (steps >= 2, inclusive, linear).
pub fn parse_vary(spec: &str) -> Result<Vary> {
    let bad = |why: &str| Error::config("--vary", spec, why.to_string());
    let (key, vals) = spec
        .split_once('=')
        .ok_or_else(|| bad("expected KEY=v1,v2,... or KEY=start..end:steps"))?;
    let key = key.trim().to_string();
    if key.is_empty() {
        return Err(bad("empty key"));
    }
    if let Some((range, steps)) = vals.split_once(':') {
        if let Some((a, b)) = range.split_once("..") {
            let a: f64 = a
                .trim()
                .parse()
                .map_err(|_| bad("range start is not a number"))?;
            let b: f64 = b
                .trim()
                .parse()
                .map_err(|_| bad("range end is not a number"))?;
            let n: usize = steps
                .trim()
                .parse()
                .map_err(|_| bad("steps is not an integer"))?;
            if !(2..=100_000).contains(&n) || !a.is_finite() || !b.is_finite() {
                return Err(bad("need 2..=100000 steps and finite bounds"));
            }
            let ints =
                a.fract() == 0.0 && b.fract() == 0.0 && ((b - a) / (n - 1) as f64).fract() == 0.0;
            let values = (0..n)
                .map(|i| {
                    let v = a + (b - a) * i as f64 / (n - 1) as f64;
                    if ints {
                        format!("{}", v as i64)
                    } else {
                        format!("{v}")
                    }
                })
                .collect();
            return Ok(Vary { key, values });
        }
    }
    let values: Vec<String> = vals
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err(bad("no values"));
    }
    Ok(Vary { key, values })
}

/// One grid point's overrides and result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Its position in the grid (row-major over the `--vary` keys, the last fastest).
    pub index: usize,
    /// The `key=value` overrides of this point.
    pub overrides: Vec<(String, String)>,
    /// The run's summary, or why the point could not run.
    pub summary: Option<RunSummary>,
    /// The error, for points that could not run.
    pub error: Option<String>,
}

/// A slice of a sweep's grid: the points whose index is `index` modulo `count`, so that `count`
/// machines (a Slurm job array, a Kubernetes Indexed Job) each run one (`--shard K/N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This shard, 0-based.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl Shard {
    /// Parses `K/N` (0 <= K < N).
    pub fn parse(spec: &str) -> Result<Shard> {
        let bad = |why: &str| Error::config("--shard", spec, why.to_string());
        let (k, n) = spec
            .split_once('/')
            .ok_or_else(|| bad("expected K/N, e.g. 0/4"))?;
        let index: usize = k.trim().parse().map_err(|_| bad("K is not an integer"))?;
        let count: usize = n.trim().parse().map_err(|_| bad("N is not an integer"))?;
        if count == 0 || index >= count {
            return Err(bad("needs 0 <= K < N"));
        }
        Ok(Shard { index, count })
    }

    /// Whether grid point `i` belongs to this shard.
    pub fn holds(&self, i: usize) -> bool {
        i % self.count == self.index
    }
}

/// What a shard writes beside its points (shard.json), so that `--merge` can check that the
/// shards belong to one sweep and cover it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardManifest {
    /// The shard.
    pub shard: Shard,
    /// Points in the whole grid.
    pub grid_points: usize,
    /// The varied keys.
    pub keys: Vec<String>,
    /// A hash of the scenario text, the `--set` overrides and the `--vary` values: shards of
    /// one sweep share it.
    pub fingerprint: String,
}

/// FNV-1a 64 of the sweep's inputs (stable across machines and builds).
pub fn fingerprint(text: &str, base_overrides: &[String], varies: &[Vary]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |s: &str| {
        for b in s.bytes().chain([0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(text);
    for o in base_overrides {
        eat(o);
    }
    for v in varies {
        eat(&v.key);
        for x in &v.values {
            eat(x);
        }
    }
    format!("{h:016x}")
}

/// Most points a sweep's grid may have.
pub const MAX_GRID_POINTS: usize = 1_000_000;

/// The grid's size, checked against [`MAX_GRID_POINTS`] before anything is built (two axes of
/// 100,000 steps each are an error at once, not gigabytes later).
fn grid_size(varies: &[Vary]) -> Result<usize> {
    let mut n: usize = 1;
    for v in varies {
        n = n
            .checked_mul(v.values.len())
            .filter(|&n| n <= MAX_GRID_POINTS)
            .ok_or_else(|| {
                let sizes: Vec<String> = varies
                    .iter()
                    .map(|v| format!("{} ({})", v.key, v.values.len()))
                    .collect();
                Error::config(
                    "--vary",
                    "grid",
                    format!(
                        "the product of the axes' values, {}, is more than {MAX_GRID_POINTS} points",
                        sizes.join(" x ")
                    ),
                )
            })?;
    }
    Ok(n)
}

/// The grid: the cartesian product of `varies`, row-major (the last key fastest).
fn grid(varies: &[Vary]) -> Result<Vec<Vec<(String, String)>>> {
    grid_size(varies)?;
    let mut grid: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for v in varies {
        grid = grid
            .into_iter()
            .flat_map(|p| {
                v.values.iter().map(move |val| {
                    let mut q = p.clone();
                    q.push((v.key.clone(), val.clone()));
                    q
                })
            })
            .collect();
    }
    Ok(grid)
}

/// Points in the grid of `varies` (an error beyond [`MAX_GRID_POINTS`]).
pub fn grid_points(varies: &[Vary]) -> Result<usize> {
    grid_size(varies)
}

/// Runs the grid (cartesian product of `varies`) over a scenario text, in parallel, each point
/// measured in steady state where it has one; only `shard`'s points when given. `tick` is
/// called once per finished point (for a progress bar).
pub fn sweep(
    text: &str,
    origin: &str,
    base_overrides: &[String],
    varies: &[Vary],
    shard: Option<Shard>,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<SweepPoint>> {
    let grid = grid(varies)?;
    // Check the base once so a typo is one clear error, not one per point.
    Scenario::parse(text, origin, base_overrides)?.resolve(origin)?;
    check_varied_keys(text, origin, base_overrides, varies)?;
    let mine: Vec<(usize, Vec<(String, String)>)> = grid
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.holds(*i)))
        .collect();
    Ok(mine
        .into_par_iter()
        .map(|(index, point)| {
            let mut ov = base_overrides.to_vec();
            ov.extend(point.iter().map(|(k, v)| format!("{k}={v}")));
            let r = Scenario::parse(text, origin, &ov).and_then(|s| run_point(&s, origin));
            tick();
            match r {
                Ok(summary) => SweepPoint {
                    index,
                    overrides: point,
                    summary: Some(summary),
                    error: None,
                },
                Err(e) => SweepPoint {
                    index,
                    overrides: point,
                    summary: None,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect())
}

/// Fails when a varied key is not a scenario key (a misspelt `--vary` would otherwise fail
/// every point alike). A value a point cannot run with stays that point's row error.
fn check_varied_keys(
    text: &str,
    origin: &str,
    base_overrides: &[String],
    varies: &[Vary],
) -> Result<()> {
    for v in varies {
        let Some(first) = v.values.first() else {
            continue;
        };
        let mut ov = base_overrides.to_vec();
        ov.push(format!("{}={first}", v.key));
        match Scenario::parse(text, origin, &ov) {
            Err(e @ Error::Config { .. }) if e.to_string().contains("unknown field `") => {
                return Err(e)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Merges shard outputs (each a folder with shard.json and sweep.json) into the points of the
/// whole sweep, in grid order, after checking that they are the shards of one sweep, each
/// once, covering every point. Returns the varied keys and the points.
pub fn merge_shards(dirs: &[std::path::PathBuf]) -> Result<(Vec<String>, Vec<SweepPoint>)> {
    let read = |p: std::path::PathBuf| -> Result<String> {
        crate::input::read_to_string(&p, crate::input::InputKind::Table)
    };
    let mut first: Option<ShardManifest> = None;
    let mut seen = std::collections::BTreeSet::new();
    let mut points: Vec<SweepPoint> = Vec::new();
    for d in dirs {
        let mpath = d.join("shard.json");
        let m: ShardManifest = serde_json::from_str(&read(mpath.clone())?).map_err(|e| {
            Error::config(mpath.display().to_string(), "(top level)", e.to_string())
        })?;
        if let Some(f) = &first {
            if f.fingerprint != m.fingerprint || f.shard.count != m.shard.count {
                return Err(Error::config(
                    mpath.display().to_string(),
                    "fingerprint",
                    format!(
                        "shard {}/{} of another sweep (fingerprint {}, {} shards) than the first ({}, {} shards)",
                        m.shard.index, m.shard.count, m.fingerprint, m.shard.count, f.fingerprint, f.shard.count
                    ),
                ));
            }
        }
        if !seen.insert(m.shard.index) {
            return Err(Error::config(
                mpath.display().to_string(),
                "shard",
                format!("shard {}/{} given twice", m.shard.index, m.shard.count),
            ));
        }
        let ppath = d.join("sweep.json");
        let mut ps: Vec<SweepPoint> = serde_json::from_str(&read(ppath.clone())?).map_err(|e| {
            Error::config(ppath.display().to_string(), "(top level)", e.to_string())
        })?;
        if let Some(bad) = ps
            .iter()
            .find(|p| !m.shard.holds(p.index) || p.index >= m.grid_points)
        {
            return Err(Error::config(
                ppath.display().to_string(),
                format!("[{}].index", bad.index),
                format!(
                    "point {} is not shard {}/{}'s",
                    bad.index, m.shard.index, m.shard.count
                ),
            ));
        }
        points.append(&mut ps);
        first.get_or_insert(m);
    }
    let Some(m) = first else {
        return Err(Error::config(
            "--merge",
            "folders",
            "no shard folders given",
        ));
    };
    if seen.len() != m.shard.count {
        let missing: Vec<String> = (0..m.shard.count)
            .filter(|k| !seen.contains(k))
            .map(|k| format!("{k}/{}", m.shard.count))
            .collect();
        return Err(Error::config(
            "--merge",
            "folders",
            format!("missing shard(s) {}", missing.join(", ")),
        ));
    }
    points.sort_by_key(|p| p.index);
    if points.len() != m.grid_points || points.iter().enumerate().any(|(i, p)| p.index != i) {
        return Err(Error::config(
            "--merge",
            "folders",
            format!(
                "the shards hold {} points of a {}-point grid",
                points.len(),
                m.grid_points
            ),
        ));
    }
    Ok((m.keys, points))
}

/// Runs one grid point: a steady-state measurement when its arrivals are stationary (the run
/// starts at `workload.num_requests` or `[measure] min_requests` per replica, whichever is
/// larger, and grows until every judged figure is within `[measure] tolerance`), else one
/// plain run.
fn run_point(sc: &Scenario, origin: &str) -> Result<RunSummary> {
    let resolved = sc.resolve(origin)?;
    match stationary_load(sc) {
        Some(load) => {
            let min = sc.workload.num_requests.unwrap_or(0);
            Ok(measure(sc, origin, load, StopRule::Converged, min, None)?.summary)
        }
        None => Ok(resolved.run()?.summary),
    }
}

/// A sweep's points as one table: the varied keys, every summary column, and an error column.
#[derive(Debug, Clone, Copy)]
pub struct SweepTable<'a> {
    /// The varied keys, in grid order.
    pub keys: &'a [String],
    /// The points.
    pub points: &'a [SweepPoint],
}

impl ToTable for SweepTable<'_> {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        let summary_columns: Vec<String> = self
            .points
            .iter()
            .find_map(|p| p.summary.as_ref())
            .map(|s| s.to_table().into_owned().columns)
            .unwrap_or_default();
        let mut columns: Vec<String> = self.keys.to_vec();
        columns.extend(summary_columns.iter().cloned());
        columns.push("error".into());
        let rows = self
            .points
            .iter()
            .map(|p| {
                let mut row: Vec<CellValue> = p
                    .overrides
                    .iter()
                    .map(|(_, v)| match v.parse::<f64>() {
                        Ok(x) => CellValue::Number(x),
                        Err(_) => CellValue::Text(v.clone()),
                    })
                    .collect();
                match &p.summary {
                    Some(s) => {
                        let t = s.to_table().into_owned();
                        let cells = t.rows.into_iter().next().unwrap_or_default();
                        // Align by column name (an absent SLO has no columns).
                        for c in &summary_columns {
                            let cell = t
                                .columns
                                .iter()
                                .position(|x| x == c)
                                .and_then(|i| cells.get(i).cloned())
                                .unwrap_or(CellValue::Text(String::new()));
                            row.push(cell);
                        }
                        row.push(CellValue::Text(String::new()));
                    }
                    None => {
                        row.extend(
                            summary_columns
                                .iter()
                                .map(|_| CellValue::Text(String::new())),
                        );
                        row.push(CellValue::Text(p.error.clone().unwrap_or_default()));
                    }
                }
                row
            })
            .collect();
        Cow::Owned(TableSheet {
            name: "Sweep".into(),
            columns,
            rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_varied_key_is_one_error_and_a_bad_value_is_a_row() {
        let text = crate::scenario::DEFAULT_SCENARIO;
        let misspelt = [parse_vary("scheduler.max_num_seqz=64,128").unwrap()];
        let e = sweep(text, "t.toml", &[], &misspelt, None, &|| {}).unwrap_err();
        assert!(e.to_string().contains("scheduler.max_num_seqz"), "{e}");
        assert!(e.is_input_error());
        let tp3 = [parse_vary("deployment.tp=1,3").unwrap()];
        let base = ["workload.num_requests=200".to_string()];
        let points = sweep(text, "t.toml", &base, &tp3, None, &|| {}).unwrap();
        assert!(points[0].error.is_none(), "{:?}", points[0].error);
        assert!(points[1].error.is_some());
    }

    #[test]
    fn parses_lists_and_ranges() {
        let v = parse_vary("workload.arrival.rate_per_s=1,2,4").unwrap();
        assert_eq!(v.values, ["1", "2", "4"]);
        let v = parse_vary("scheduler.max_num_seqs=64..256:4").unwrap();
        assert_eq!(v.values, ["64", "128", "192", "256"]);
        let v = parse_vary("x=0..1:3").unwrap();
        assert_eq!(v.values, ["0", "0.5", "1"]);
        assert!(parse_vary("x").is_err());
        assert!(parse_vary("x=1..2:1").is_err());
        assert!(parse_vary("x=").is_err());
    }
}
