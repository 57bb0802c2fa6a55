//! Grouped cross-validation: every figure in-sample and out-of-sample.
//!
//! What is fitted on serving rows is each engine's host costs (the GPU curves are fitted on
//! kernel rows only). The committed costs were fitted on the fit set ([`FIT_FILES`]). A row
//! whose configuration ([`ReferenceRow::group`]) is in the fit set is predicted out of sample
//! by refitting its engine's host costs on the fit set without that whole configuration (the
//! same fitter, [`fit_engine_host`], from the same start and priors) and simulating it with
//! them; a row whose configuration is in no fit is predicted by the committed costs, which
//! never saw it. The in-sample figure is the committed costs' prediction of every row.

use serde::Serialize;

use super::{
    compare, fit_engine_host, parse_reference, Comparison, FitOptions, LoadKind, Metric,
    ReferenceRow, REFERENCE_CSV,
};
use crate::catalog::{self, Kind};
use crate::engine::{EngineProfile, HostCosts};
use crate::error::Result;

/// The reference files the committed engine host costs are fitted on (embedded): (path, text).
pub const FIT_FILES: &[(&str, &str)] = &[
    (
        "calibration/reference/serving-measurements.csv",
        REFERENCE_CSV,
    ),
    (
        "calibration/reference/vllm-blog-2026-fp8-kv-h100.csv",
        include_str!("../../calibration/reference/vllm-blog-2026-fp8-kv-h100.csv"),
    ),
];

/// Reference files of the profiles' engine releases that no fit uses (embedded): (path, text).
pub const HELD_OUT_FILES: &[(&str, &str)] = &[
    (
        "calibration/reference/trtllm-1.0-offline-70b-405b.csv",
        include_str!("../../calibration/reference/trtllm-1.0-offline-70b-405b.csv"),
    ),
    (
        "calibration/reference/inference-sim-vllm-0.15.1-codellama-34b-tp2-h100.csv",
        include_str!(
            "../../calibration/reference/inference-sim-vllm-0.15.1-codellama-34b-tp2-h100.csv"
        ),
    ),
    (
        "calibration/reference/inference-sim-vllm-0.15.1-mixtral-8x7b-tp2-h100.csv",
        include_str!(
            "../../calibration/reference/inference-sim-vllm-0.15.1-mixtral-8x7b-tp2-h100.csv"
        ),
    ),
];

/// Rows of embedded files.
fn rows_of(files: &[(&str, &str)]) -> Result<Vec<ReferenceRow>> {
    let mut rows = Vec::new();
    for (path, text) in files {
        rows.extend(parse_reference(text, path)?);
    }
    Ok(rows)
}

/// The rows the committed host costs are fitted on ([`FIT_FILES`]).
pub fn fit_rows() -> Result<Vec<ReferenceRow>> {
    rows_of(FIT_FILES)
}

/// Every embedded reference row: the fit set, then the held-out files.
pub fn embedded_rows() -> Result<Vec<ReferenceRow>> {
    let mut rows = rows_of(FIT_FILES)?;
    rows.extend(rows_of(HELD_OUT_FILES)?);
    Ok(rows)
}

/// The engine profile a row names, by its canonical catalog name (or its path).
fn engine_key(row: &ReferenceRow) -> String {
    catalog::canonical(Kind::Engine, &row.engine)
        .unwrap_or(&row.engine)
        .to_string()
}

/// How one configuration was predicted out of sample.
#[derive(Debug, Clone, Serialize)]
pub struct Fold {
    /// The configuration ([`ReferenceRow::group`]).
    pub group: String,
    /// Its engine profile.
    pub engine: String,
    /// Its rows among those validated.
    pub rows: usize,
    /// Fit-set rows the refit used (0: the configuration is in no fit and the committed costs
    /// predicted it; or its engine has no other rows, so the refit is its priors).
    pub fitted_rows: usize,
    /// Whether the configuration is in the fit set (refitted without it) or held out.
    pub refitted: bool,
    /// The host costs that predicted it out of sample.
    pub host: HostCosts,
}

/// In-sample and out-of-sample predictions of the same rows.
#[derive(Debug, Clone, Serialize)]
pub struct CrossValidation {
    /// The committed costs' predictions, row by row and metric by metric.
    pub in_sample: Vec<Comparison>,
    /// The same comparisons, each predicted without its configuration in any fit.
    pub out_of_sample: Vec<Comparison>,
    /// One per configuration, in order of first appearance.
    pub folds: Vec<Fold>,
}

/// The configurations of `rows`, in order of first appearance.
pub fn groups(rows: &[ReferenceRow]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        let g = r.group();
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

/// Cross-validates `rows` against the fit set `fit`, leaving one configuration out at a time
/// (module docs). With `only`, just those configurations of `rows` are predicted (both ways);
/// the others are dropped. Deterministic.
pub fn cross_validate(
    rows: &[ReferenceRow],
    fit: &[ReferenceRow],
    only: Option<&[String]>,
) -> Result<CrossValidation> {
    let rows: Vec<ReferenceRow> = rows
        .iter()
        .filter(|r| only.is_none_or(|o| o.contains(&r.group())))
        .cloned()
        .collect();
    let in_sample = compare(&rows, None)?;
    let fit_groups = groups(fit);
    let mut folds = Vec::new();
    let mut by_group: Vec<(String, Vec<Comparison>)> = Vec::new();
    for g in groups(&rows) {
        let members: Vec<ReferenceRow> = rows.iter().filter(|r| r.group() == g).cloned().collect();
        let engine_name = engine_key(&members[0]);
        let engine = EngineProfile::load(&members[0].engine)?;
        let refitted = fit_groups.contains(&g);
        let (host, fitted_rows) = if refitted {
            let train: Vec<ReferenceRow> = fit
                .iter()
                .filter(|r| engine_key(r) == engine_name && r.group() != g)
                .cloned()
                .collect();
            if train.is_empty() {
                (prior_costs(&engine), 0)
            } else {
                let f = fit_engine_host(&train, &engine, FitOptions::default())?;
                (f.host, f.fitted_rows)
            }
        } else {
            (engine.host.clone(), 0)
        };
        let comps = compare(&members, Some(&host))?;
        folds.push(Fold {
            group: g.clone(),
            engine: engine_name,
            rows: members.len(),
            fitted_rows,
            refitted,
            host,
        });
        by_group.push((g, comps));
    }
    // Back into the rows' order, which `compare` keeps within each group.
    let mut cursors = vec![0usize; by_group.len()];
    let mut out_of_sample = Vec::with_capacity(in_sample.len());
    for c in &in_sample {
        let gi = by_group
            .iter()
            .position(|(g, _)| *g == c.group)
            .unwrap_or(0);
        out_of_sample.push(by_group[gi].1[cursors[gi]].clone());
        cursors[gi] += 1;
    }
    Ok(CrossValidation {
        in_sample,
        out_of_sample,
        folds,
    })
}

/// The host costs a fit on no rows gives: the priors where the profile has them, its own
/// values elsewhere.
fn prior_costs(engine: &EngineProfile) -> HostCosts {
    let mut h = engine.host.clone();
    for k in 0..super::HOST_KEYS.len() {
        if let Some(p) = engine.host_prior.get(k) {
            super::set_host_param(&mut h, k, p.value);
        }
    }
    h
}

/// The figures the headline reports, one per row and family, each row's first available
/// metric in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Headline {
    /// Offline output tokens/s.
    OfflineThroughput,
    /// Online time to first token (mean, else median).
    Ttft,
    /// Online end-to-end latency (mean, else median).
    E2e,
    /// Online time per output token: the derived mean ITL, else the mean TPOT, mean ITL,
    /// median TPOT, median ITL.
    PerToken,
}

impl Headline {
    /// Every family, in report order.
    pub const ALL: [Headline; 4] = [
        Headline::OfflineThroughput,
        Headline::Ttft,
        Headline::E2e,
        Headline::PerToken,
    ];

    /// The family's name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Headline::OfflineThroughput => "offline output tokens/s",
            Headline::Ttft => "online TTFT",
            Headline::E2e => "online E2E",
            Headline::PerToken => "online ITL (per output token)",
        }
    }

    /// Load kind and metrics of the family, preferred first.
    fn metrics(self) -> (LoadKind, &'static [Metric]) {
        match self {
            Headline::OfflineThroughput => (LoadKind::Offline, &[Metric::OutputTokensPerS]),
            Headline::Ttft => (
                LoadKind::Online,
                &[Metric::TtftMeanMs, Metric::TtftMedianMs],
            ),
            Headline::E2e => (LoadKind::Online, &[Metric::E2eMeanMs, Metric::E2eMedianMs]),
            Headline::PerToken => (
                LoadKind::Online,
                &[
                    Metric::ItlDerivedMs,
                    Metric::TpotMeanMs,
                    Metric::ItlMeanMs,
                    Metric::TpotMedianMs,
                    Metric::ItlMedianMs,
                ],
            ),
        }
    }

    /// Of `comps`, the comparisons of this family: for each row, that of its first available
    /// metric in order of preference (indices into `comps`).
    pub fn pick(self, comps: &[Comparison]) -> Vec<usize> {
        let (kind, prefs) = self.metrics();
        let mut out = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for c in comps {
            if c.kind != kind || seen.contains(&c.id.as_str()) {
                continue;
            }
            seen.push(&c.id);
            let first = prefs
                .iter()
                .find_map(|&m| comps.iter().position(|d| d.id == c.id && d.metric == m));
            out.extend(first);
        }
        out
    }
}

/// Median, bias and worst of |error| over some comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// Figures.
    pub n: usize,
    /// Median |error| (fraction).
    pub median_abs: f64,
    /// Mean signed error (fraction).
    pub bias: f64,
    /// Largest |error| (fraction).
    pub worst_abs: f64,
}

/// [`Stats`] of the comparisons at `idx`; `None` when empty.
pub fn stats(comps: &[Comparison], idx: &[usize]) -> Option<Stats> {
    if idx.is_empty() {
        return None;
    }
    let mut abs: Vec<f64> = idx.iter().map(|&i| comps[i].signed_error.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let n = abs.len();
    let median_abs = if n % 2 == 1 {
        abs[n / 2]
    } else {
        0.5 * (abs[n / 2 - 1] + abs[n / 2])
    };
    Some(Stats {
        n,
        median_abs,
        bias: idx.iter().map(|&i| comps[i].signed_error).sum::<f64>() / n as f64,
        worst_abs: abs[n - 1],
    })
}

/// Whether the measured engine kept up with an online row's arrivals: its measured output
/// throughput reached 90% of the offered tokens, or (without a throughput) its measured mean
/// TTFT stayed under a tenth of the arrival span (the criterion the simulation's
/// [`crate::summary::RunSummary::keeps_up`] applies to the median). `None` for offline rows
/// and rows without either figure.
pub fn measured_kept_up(row: &ReferenceRow) -> Option<bool> {
    let rate = match (row.kind, row.rate_rps) {
        (LoadKind::Online, Some(r)) if r > 0.0 => r,
        _ => return None,
    };
    let get = |m: Metric| row.measured.iter().find(|(x, _)| *x == m).map(|&(_, v)| v);
    let counted = row.output_len_counted.unwrap_or(row.output_len as f64);
    if let Some(t) = get(Metric::OutputTokensPerS) {
        return Some(t >= 0.9 * rate * counted);
    }
    let span_s = row.num_requests as f64 / rate;
    get(Metric::TtftMeanMs).map(|ttft| ttft / 1e3 <= 0.1 * span_s)
}

/// The online rows the measured engine kept up with that some comparisons predict saturated.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Saturation {
    /// Rows counted as predicted saturated (ids).
    pub counted: Vec<String>,
    /// Rows predicted saturated but set aside: their datasheet bound
    /// ([`super::bound::datasheet_bound`]) exceeds 1, so the load as published cannot be served
    /// even at datasheet peak; each with its bound.
    pub set_aside: Vec<super::bound::DatasheetBound>,
    /// Counted rows (a subset of `counted`) that belong to a pair inconsistent at datasheet
    /// rates ([`super::bound::pair`]), each id with the pair's check. They stay counted: the
    /// check rests on a model of how prompts mix into iterations and on datasheet rates, so it
    /// is not a physical bound (a GPU streaming weights below its datasheet reconciles the
    /// pair), and the rule sets a row aside only with one.
    pub counted_with_inconsistent_pair: Vec<(String, super::bound::pair::PairCheck)>,
}

impl Saturation {
    /// One line's worth: the counted ids, or "none", then the set-aside rows with their bounds
    /// and the counted rows' inconsistent pairs.
    pub fn describe(&self) -> String {
        let mut s = if self.counted.is_empty() {
            "none".to_string()
        } else {
            let with_pair = |id: &String| match self
                .counted_with_inconsistent_pair
                .iter()
                .find(|(x, _)| x == id)
            {
                Some((_, p)) => format!(
                    "{id} (counted, though its pair is inconsistent at datasheet rates: a check \
                     under the stated model, not a physical bound: {})",
                    p.describe()
                ),
                None => id.clone(),
            };
            self.counted
                .iter()
                .map(with_pair)
                .collect::<Vec<_>>()
                .join(", ")
        };
        for b in &self.set_aside {
            s.push_str(&format!(
                "; set aside: {} (its description needs at least {:.2} s of GPU time per second at \
                 datasheet peak)",
                b.id, b.gpu_time_per_s
            ));
        }
        s
    }

    /// Appends another file's rows.
    pub fn extend(&mut self, other: Saturation) {
        self.counted.extend(other.counted);
        self.set_aside.extend(other.set_aside);
        self.counted_with_inconsistent_pair
            .extend(other.counted_with_inconsistent_pair);
    }
}

/// Online rows the measured engine kept up with that `comps` predict it does not; a row whose
/// datasheet bound (in `bounds`) exceeds 1 is set aside rather than counted; a counted row of a
/// pair that `pairs` finds inconsistent at datasheet rates is noted with the pair (not set
/// aside: the check is not a physical bound).
pub fn saturation(
    rows: &[ReferenceRow],
    comps: &[Comparison],
    bounds: &[super::bound::DatasheetBound],
    pairs: &[super::bound::pair::PairCheck],
) -> Saturation {
    let mut out = Saturation::default();
    for r in rows.iter().filter(|r| measured_kept_up(r) == Some(true)) {
        if !comps
            .iter()
            .any(|c| c.id == r.id && c.keeps_up == Some(false))
        {
            continue;
        }
        if let Some(b) = bounds.iter().find(|b| b.id == r.id && b.infeasible()) {
            out.set_aside.push(b.clone());
        } else {
            out.counted.push(r.id.clone());
            if let Some(p) = super::bound::pair::inconsistent_pair(pairs, &r.id) {
                out.counted_with_inconsistent_pair
                    .push((r.id.clone(), p.clone()));
            }
        }
    }
    out
}

/// The residual file of the embedded reference rows (`servesim validate --out DIR` writes it
/// as `out-of-sample.csv`; committed as calibration/validation/out-of-sample.csv): every
/// comparison with its in-sample and out-of-sample prediction.
pub const COMMITTED_RESIDUALS: &str =
    include_str!("../../calibration/validation/out-of-sample.csv");

/// The committed cross-validation of the embedded rows ([`COMMITTED_RESIDUALS`]).
pub fn committed() -> Result<CrossValidation> {
    super::markdown::parse_residuals(
        COMMITTED_RESIDUALS,
        "calibration/validation/out-of-sample.csv",
    )
}

/// The step-time headroom the model's out-of-sample error on the embedded rows calls for at
/// `coverage` ([`super::step_time_headroom`] of the committed residuals), never below 0.
pub fn committed_step_time_headroom(coverage: f64) -> Result<Option<f64>> {
    Ok(super::step_time_headroom(&committed()?.out_of_sample, coverage).map(|h| h.max(0.0)))
}
