//! Parameter sweeps: run a scenario over a grid of `--vary KEY=values` overrides, in parallel.

use std::borrow::Cow;

use rayon::prelude::*;
use serde::Serialize;

use super::measure::{measure, stationary_load, StopRule};
use crate::error::{Error, Result};
use crate::report::{CellValue, TableSheet, ToTable};
use crate::scenario::Scenario;
use crate::summary::RunSummary;

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
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// The `key=value` overrides of this point.
    pub overrides: Vec<(String, String)>,
    /// The run's summary, or why the point could not run.
    pub summary: Option<RunSummary>,
    /// The error, for points that could not run.
    pub error: Option<String>,
}

/// Runs the grid (cartesian product of `varies`) over a scenario text, in parallel, each point
/// measured in steady state where it has one; `tick` is called once per finished point (for a
/// progress bar).
pub fn sweep(
    text: &str,
    origin: &str,
    base_overrides: &[String],
    varies: &[Vary],
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<SweepPoint>> {
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
    if grid.len() > 1_000_000 {
        return Err(Error::config(
            "--vary",
            "grid",
            format!("{} points is too many", grid.len()),
        ));
    }
    // Check the base once so a typo is one clear error, not one per point.
    Scenario::parse(text, origin, base_overrides)?.resolve(origin)?;
    Ok(grid
        .into_par_iter()
        .map(|point| {
            let mut ov = base_overrides.to_vec();
            ov.extend(point.iter().map(|(k, v)| format!("{k}={v}")));
            let r = Scenario::parse(text, origin, &ov).and_then(|s| run_point(&s, origin));
            tick();
            match r {
                Ok(summary) => SweepPoint {
                    overrides: point,
                    summary: Some(summary),
                    error: None,
                },
                Err(e) => SweepPoint {
                    overrides: point,
                    summary: None,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect())
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
