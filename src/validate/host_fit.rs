//! Fitting an engine's host costs to serving measurements, and saying what the measurements
//! determine.
//!
//! The fit minimises the mean Huber loss of the log errors of the rows' throughputs and mean
//! latencies, plus each host cost's documented prior (`[host_prior]` of the engine profile: a
//! value with its public source and a spread). Where the rows determine a cost, the data term
//! dominates and the prior does not matter; where they do not (a per-iteration host time that
//! hides under every row's GPU step leaves no trace at all), the prior is what is left, so the
//! cost stays at the documented value instead of wherever the optimiser stopped. The profile
//! of the data loss over each cost ([`crate::calibrate::profile`]) says which case each cost
//! is in. A per-iteration host time may not exceed the fastest iteration the rows measured
//! (their smallest inter-token latency) nor the profile's documented bound.

use rayon::prelude::*;
use serde::Serialize;

use super::cv::Headline;
use super::{compare, simulate, Comparison, LoadKind, Metric, ReferenceRow};
use crate::calibrate::profile::{profile_intervals, Interval, ProfileOptions};
use crate::engine::{EngineProfile, HostCosts, HostPrior};
use crate::error::{Error, Result};
use crate::numeric::nelder_mead;

/// The host costs the fitter fits, in order.
pub const HOST_KEYS: [&str; 4] = [
    "host.per_iteration_s",
    "host.per_sequence_s",
    "host.per_request_s",
    "host.per_iteration_exposed_s",
];

/// Search bounds of the host costs of [`HOST_KEYS`], seconds.
pub const HOST_BOUNDS: [(f64, f64); 4] = [(1e-5, 2e-2), (1e-8, 1e-4), (1e-5, 5e-2), (1e-6, 2e-2)];

/// The smallest variance of a figure's log error the priors are weighed against. The prior of
/// a cost adds `(σ² / n) ((ln x - ln prior) / ln factor)²` to the mean loss of `n` figures,
/// i.e. it counts as one more figure whose error is the prior's distance in units of its
/// spread, with σ² the rows' own mean loss at a first fit (a Gaussian likelihood with the
/// variance estimated from the data), at least this (a 1% error) and at most
/// [`PRIOR_ERROR_SCALE`] squared. Files the model reproduces closely thus let their data
/// outweigh the priors; noisy ones lean on them.
pub const MIN_PRIOR_VARIANCE: f64 = 1e-4;

/// The largest typical log error of one figure the priors are weighed against (σ, 10%).
pub const PRIOR_ERROR_SCALE: f64 = 0.1;

/// Spread of the fallback prior (the start value) of a cost the profile gives no prior for.
const FALLBACK_FACTOR: f64 = 10.0;

/// The host cost number `k` of [`HOST_KEYS`] in `h`.
pub fn host_param(h: &HostCosts, k: usize) -> f64 {
    match k {
        0 => h.per_iteration_s,
        1 => h.per_sequence_s,
        2 => h.per_request_s,
        _ => h.per_iteration_exposed_s,
    }
}

/// Sets the host cost number `k` of [`HOST_KEYS`] in `h`.
pub fn set_host_param(h: &mut HostCosts, k: usize, v: f64) {
    match k {
        0 => h.per_iteration_s = v,
        1 => h.per_sequence_s = v,
        2 => h.per_request_s = v,
        _ => h.per_iteration_exposed_s = v,
    }
}

/// How much work the fit does, and which bounds hold.
#[derive(Debug, Clone, Copy)]
pub struct FitOptions {
    /// Profile the data loss over each cost to report what the rows determine (several times
    /// the cost of the fit itself).
    pub profile: bool,
    /// Hold the per-iteration costs under the profile's documented bound (the fastest public
    /// run of that engine release) as well as under the rows' own fastest iteration. On for
    /// the committed profiles; `fit-engine` on a user's own files turns it off, since their
    /// own host may be slower than any public run, and their rows then bound it.
    pub documented_bound: bool,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            profile: false,
            documented_bound: true,
        }
    }
}

/// One fitted host cost and what the rows say about it.
#[derive(Debug, Clone, Serialize)]
pub struct HostParamReport {
    /// Profile key, e.g. `host.per_iteration_s`.
    pub key: &'static str,
    /// The prior the fit kept it near where the rows do not determine it, seconds.
    pub prior_s: f64,
    /// The prior's public source (or a note that the profile had none).
    pub prior_source: String,
    /// The fitted value, seconds.
    pub fitted_s: f64,
    /// The profile interval of the data loss (with [`FitOptions::profile`]).
    pub interval: Option<Interval>,
}

impl HostParamReport {
    /// One line: the fitted value and what the rows determine.
    pub fn describe(&self) -> String {
        let fmt = |v: f64| format!("{v:.3e} s");
        match &self.interval {
            Some(iv) if iv.determined() => {
                format!(
                    "{} = {}: {}",
                    self.key,
                    fmt(self.fitted_s),
                    iv.describe(&fmt)
                )
            }
            Some(iv) => format!(
                "{} = {}: {}; held there by its prior {} ({})",
                self.key,
                fmt(self.fitted_s),
                iv.describe(&fmt),
                fmt(self.prior_s),
                self.prior_source
            ),
            None => format!("{} = {}", self.key, fmt(self.fitted_s)),
        }
    }
}

/// The result of [`fit_engine_host`].
#[derive(Debug, Clone)]
pub struct HostFit {
    /// The fitted host costs (`runtime_reserved_bytes` as in the start profile).
    pub host: HostCosts,
    /// Mean Huber loss of the log errors at the fit, without the priors (dimensionless).
    pub score: f64,
    /// Rows the fit used.
    pub fitted_rows: usize,
    /// Figures (throughputs and mean latencies) the fit used.
    pub figures: usize,
    /// Online rows left out: the model does not keep up with their arrival rate even with no
    /// host cost at all, so no host cost can fit them and they would only bias the others.
    pub left_out: Vec<String>,
    /// Per fitted cost: prior, fitted value and (when profiled) what the rows determine.
    pub params: Vec<HostParamReport>,
    /// The upper bound the per-iteration cost was held under, seconds, and why.
    pub iteration_bound: (f64, String),
    /// The upper bound the exposed per-iteration time was held under, seconds, and why: the
    /// per-iteration bound, or the exposed prior's documented `max` where that is smaller.
    pub exposed_bound: (f64, String),
}

/// The figures a fit uses from the comparisons, as log errors: each row's headline figures
/// ([`Headline`]): offline throughput; online TTFT and E2E (a per-token time only where the row
/// has no E2E, which would contain it), and the throughput of a closed-loop online row (no
/// arrival rate: its throughput is the engine's). Percentiles are checked, not fitted; the
/// throughput of an open-loop online row is the offered load and says nothing.
fn fitted_figures(comps: &[Comparison]) -> Vec<f64> {
    let mut idx: Vec<usize> = Vec::new();
    for h in [Headline::OfflineThroughput, Headline::Ttft, Headline::E2e] {
        idx.extend(h.pick(comps));
    }
    let with_e2e: Vec<&str> = Headline::E2e
        .pick(comps)
        .into_iter()
        .map(|i| comps[i].id.as_str())
        .collect();
    idx.extend(
        Headline::PerToken
            .pick(comps)
            .into_iter()
            .filter(|&i| !with_e2e.contains(&comps[i].id.as_str())),
    );
    idx.extend(comps.iter().enumerate().filter_map(|(i, c)| {
        (c.kind == LoadKind::Online && c.metric == Metric::OutputTokensPerS && c.keeps_up.is_none())
            .then_some(i)
    }));
    idx.sort_unstable();
    idx.into_iter()
        .map(|i| &comps[i])
        .filter(|c| c.measured > 0.0 && c.predicted > 0.0)
        .map(|c| (c.predicted / c.measured).ln())
        .collect()
}

/// Huber loss of a log error: quadratic to 25%, linear beyond, so one row the model cannot
/// reach (e.g. predicted overloaded) does not drag every other row.
fn huber(e: f64) -> f64 {
    let (e, d) = (e.abs(), 0.25);
    if e <= d {
        e * e
    } else {
        d * (2.0 * e - d)
    }
}

/// Mean loss of the rows with `host`, and the number of figures.
fn data_loss(rows: &[ReferenceRow], host: &HostCosts) -> Result<(f64, usize)> {
    let errs = fitted_figures(&compare(rows, Some(host))?);
    if errs.is_empty() {
        return Err(Error::Config {
            source_name: "reference".into(),
            key: "engine".into(),
            reason: "no rows with throughput, mean TTFT or mean E2E for this engine".into(),
        });
    }
    Ok((
        errs.iter().map(|&e| huber(e)).sum::<f64>() / errs.len() as f64,
        errs.len(),
    ))
}

/// Online rows whose arrivals the model cannot keep up with even at zero host cost.
pub fn overloaded_without_host(rows: &[ReferenceRow], start: &HostCosts) -> Result<Vec<String>> {
    let zero = HostCosts {
        per_iteration_s: 0.0,
        per_sequence_s: 0.0,
        per_request_s: 0.0,
        per_iteration_exposed_s: 0.0,
        ..start.clone()
    };
    let flags: Vec<Result<Option<String>>> = rows
        .par_iter()
        .map(|row| match (row.kind, row.rate_rps) {
            (LoadKind::Online, Some(rate)) => {
                let s = simulate(row, Some(&zero))?;
                Ok((!s.keeps_up(rate)).then(|| row.id.clone()))
            }
            _ => Ok(None),
        })
        .collect();
    let mut out = Vec::new();
    for f in flags {
        out.extend(f?);
    }
    Ok(out)
}

/// The fastest iteration the rows measured: their smallest measured inter-token latency,
/// seconds, and the row it comes from. Every iteration of a decoding request lies between two
/// of its tokens, so no host floor per iteration can exceed it.
pub fn fastest_measured_iteration(rows: &[ReferenceRow]) -> Option<(f64, String)> {
    rows.iter()
        .flat_map(|r| {
            r.measured
                .iter()
                .filter(|(m, v)| m.is_per_token() && *v > 0.0)
                .map(move |&(_, v)| (v * 1e-3, r.id.clone()))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// The prior of cost `k`: the profile's, or the start value with a wide spread.
fn prior_of(engine: &EngineProfile, k: usize) -> HostPrior {
    engine
        .host_prior
        .get(k)
        .cloned()
        .unwrap_or_else(|| HostPrior {
            value: host_param(&engine.host, k),
            factor: FALLBACK_FACTOR,
            max: None,
            max_source: None,
            source: "no prior in the profile: its own value, a factor of 10 either way".into(),
        })
}

/// Fits the host costs ([`HOST_KEYS`]; the per-request frontend time only with online rows)
/// of `engine` to its rows, starting from `engine.host` and held near `engine.host_prior`
/// where the rows do not determine them (module docs). The search runs in the logarithms of
/// the costs inside [`HOST_BOUNDS`] (the per-iteration cost also under the fastest measured
/// iteration and the prior's `max`): Nelder-Mead from the start, the prior and the best point
/// of a coarse grid over (per iteration, per sequence), since the loss has kinks where host
/// work starts or stops hiding under the GPU. Online rows the model cannot keep up with even
/// at zero host cost are left out. Deterministic.
pub fn fit_engine_host(
    rows: &[ReferenceRow],
    engine: &EngineProfile,
    opts: FitOptions,
) -> Result<HostFit> {
    let start = &engine.host;
    let left_out = overloaded_without_host(rows, start)?;
    let kept: Vec<ReferenceRow> = rows
        .iter()
        .filter(|r| !left_out.contains(&r.id))
        .cloned()
        .collect();
    let rows = &kept[..];
    // The frontend's per-request time only shows in latencies: offline rows cannot fit it.
    let keys: Vec<usize> = if rows.iter().any(|r| r.kind == LoadKind::Online) {
        vec![0, 1, 2, 3]
    } else {
        vec![0, 1, 3]
    };
    let priors: Vec<HostPrior> = keys.iter().map(|&k| prior_of(engine, k)).collect();
    let iteration_bound = iteration_bound(rows, &priors[0], opts.documented_bound);
    let exposed_bound = exposed_bound(
        &iteration_bound,
        &prior_of(engine, 3),
        opts.documented_bound,
    );
    let obj = HostObjective::new(rows, start, keys, iteration_bound.0, exposed_bound.0);
    let best = fit_with_priors(&obj, &priors)?;
    let mut host = obj.at(&best);
    let intervals: Vec<Option<Interval>> = if opts.profile {
        obj.intervals(&best)?.into_iter().map(Some).collect()
    } else {
        vec![None; obj.keys.len()]
    };
    // A cost the rows do not determine goes back to its documented prior, moved into the
    // range that fits equally well (as `servesim fit` does with a GPU parameter), so it never
    // sits wherever the search stopped in a flat direction.
    for ((&k, p), iv) in obj.keys.iter().zip(&priors).zip(&intervals) {
        if let Some(iv) = iv.filter(|iv| !iv.determined()) {
            set_host_param(&mut host, k, iv.clamp(p.value));
        }
    }
    let (score, figures) = data_loss(rows, &host)?;
    let params = obj
        .keys
        .iter()
        .zip(&priors)
        .zip(intervals)
        .map(|((&k, p), interval)| HostParamReport {
            key: HOST_KEYS[k],
            prior_s: p.value,
            prior_source: p.source.clone(),
            fitted_s: host_param(&host, k),
            interval,
        })
        .collect();
    Ok(HostFit {
        score,
        host,
        fitted_rows: rows.len(),
        figures,
        left_out,
        params,
        iteration_bound,
        exposed_bound,
    })
}

/// The data term of the host-cost fit: the rows' loss at a point of the fitted costs
/// (logarithms of [`HOST_KEYS`]`[keys]`, the other costs at `start`'s), with a penalty that
/// leads the simplex back inside the bounds. The first simulation error is kept (the loss is
/// then infinite) and returned by [`HostObjective::error`].
struct HostObjective<'a> {
    rows: &'a [ReferenceRow],
    start: &'a HostCosts,
    /// The fitted costs, indices into [`HOST_KEYS`].
    keys: Vec<usize>,
    /// Bounds of each fitted cost, logarithms.
    bounds: Vec<(f64, f64)>,
    first_error: std::sync::Mutex<Option<Error>>,
    /// Figures the last evaluation compared.
    n_figures: std::sync::atomic::AtomicUsize,
}

impl<'a> HostObjective<'a> {
    /// `iteration_bound_s`: no hidden host time per iteration above it; `exposed_bound_s` (at
    /// most `iteration_bound_s`, from `exposed_bound`): no exposed time per iteration above it.
    fn new(
        rows: &'a [ReferenceRow],
        start: &'a HostCosts,
        keys: Vec<usize>,
        iteration_bound_s: f64,
        exposed_bound_s: f64,
    ) -> Self {
        let bounds: Vec<(f64, f64)> = keys
            .iter()
            .map(|&k| {
                let (lo, hi) = HOST_BOUNDS[k];
                let hi = match k {
                    0 => hi.min(iteration_bound_s),
                    3 => hi.min(exposed_bound_s),
                    _ => hi,
                };
                (lo.ln(), hi.max(lo).ln())
            })
            .collect();
        HostObjective {
            rows,
            start,
            keys,
            bounds,
            first_error: std::sync::Mutex::new(None),
            n_figures: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The host costs at `x` (clamped into the bounds).
    fn at(&self, x: &[f64]) -> HostCosts {
        let mut h = self.start.clone();
        for ((&k, xk), &(lo, hi)) in self.keys.iter().zip(x).zip(&self.bounds) {
            set_host_param(&mut h, k, xk.clamp(lo, hi).exp());
        }
        h
    }

    /// The data loss at `x` plus the distance outside the bounds.
    fn data(&self, x: &[f64]) -> f64 {
        let outside: f64 = x
            .iter()
            .zip(&self.bounds)
            .map(|(xk, &(lo, hi))| (lo - xk).max(0.0) + (xk - hi).max(0.0))
            .sum();
        match data_loss(self.rows, &self.at(x)) {
            Ok((v, n)) => {
                self.n_figures
                    .store(n, std::sync::atomic::Ordering::Relaxed);
                v + outside
            }
            Err(e) => {
                if let Ok(mut slot) = self.first_error.lock() {
                    slot.get_or_insert(e);
                }
                f64::INFINITY
            }
        }
    }

    /// The first simulation error an evaluation met, if any (taken).
    fn error(&self) -> Result<()> {
        match self.first_error.lock().ok().and_then(|mut s| s.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Profile intervals of the data term from its own optimum, searched near `best`.
    fn intervals(&self, best: &[f64]) -> Result<Vec<Interval>> {
        let data = |x: &[f64]| self.data(x);
        let (x_data, _) = nelder_mead(&data, best, 0.2, 1e-7, 80);
        let x_data = if data(&x_data) < data(best) {
            x_data
        } else {
            best.to_vec()
        };
        let n = self
            .n_figures
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1);
        let coords: Vec<usize> = (0..self.keys.len()).collect();
        let iv = profile_intervals(
            &data,
            n,
            &x_data,
            &self.bounds,
            &coords,
            ProfileOptions::default(),
        );
        self.error()?;
        Ok(iv)
    }
}

/// The fitted point: first the data with the priors at their weakest (they only settle flat
/// directions), then with the priors weighed against the variance the rows show there.
fn fit_with_priors(obj: &HostObjective<'_>, priors: &[HostPrior]) -> Result<Vec<f64>> {
    let data = |x: &[f64]| obj.data(x);
    let n0 = data_loss(obj.rows, obj.start)?.1 as f64;
    let prior_x: Vec<f64> = priors
        .iter()
        .zip(&obj.bounds)
        .map(|(p, &(lo, hi))| p.value.max(1e-300).ln().clamp(lo, hi))
        .collect();
    let prior_term = |x: &[f64], variance: f64| -> f64 {
        let s2 = variance / n0;
        x.iter()
            .zip(&prior_x)
            .zip(priors)
            .map(|((xk, pk), p)| s2 * ((xk - pk) / p.factor.max(1.0 + 1e-9).ln()).powi(2))
            .sum()
    };
    let first = |x: &[f64]| data(x) + prior_term(x, MIN_PRIOR_VARIANCE);
    let x1 = minimise(&first, obj.start, &obj.keys, &obj.bounds, &prior_x);
    let variance = data(&x1).clamp(MIN_PRIOR_VARIANCE, PRIOR_ERROR_SCALE * PRIOR_ERROR_SCALE);
    let posterior = |x: &[f64]| data(x) + prior_term(x, variance);
    let mut best = x1;
    for step in [0.3, 0.1] {
        let (nx, _) = nelder_mead(&posterior, &best, step, 1e-6, 120);
        if posterior(&nx) <= posterior(&best) {
            best = nx;
        }
    }
    obj.error()?;
    Ok(best)
}

/// The exposed per-iteration time's upper bound: the per-iteration bound `iteration`, or the
/// exposed prior's `max` (when `documented`) where that is smaller: an iteration the GPU waits
/// for its exposed host time also streams the weights, so the fastest published iteration less
/// its weights' datasheet stream time bounds the exposed part.
fn exposed_bound(iteration: &(f64, String), prior: &HostPrior, documented: bool) -> (f64, String) {
    match prior.max.filter(|&m| documented && m < iteration.0) {
        Some(m) => (m, documented_bound(prior)),
        None => iteration.clone(),
    }
}

/// Why a fit holds a cost under its prior's `max`: the bound's source (the prior's own source
/// where the profile gives none).
fn documented_bound(prior: &HostPrior) -> String {
    format!(
        "the profile's documented bound ({})",
        prior.max_source.as_deref().unwrap_or(&prior.source)
    )
}

/// The per-iteration cost's upper bound: the smaller of the prior's `max` (when `documented`)
/// and the fastest iteration the rows measured.
fn iteration_bound(rows: &[ReferenceRow], prior: &HostPrior, documented: bool) -> (f64, String) {
    let mut bound = (HOST_BOUNDS[0].1, "the search bound".to_string());
    if let Some(m) = prior.max.filter(|_| documented) {
        if m < bound.0 {
            bound = (m, documented_bound(prior));
        }
    }
    if let Some((t, id)) = fastest_measured_iteration(rows) {
        if t < bound.0 {
            bound = (
                t,
                format!("the fastest inter-token latency measured (row {id})"),
            );
        }
    }
    bound
}

/// The search: Nelder-Mead in the logarithms from the start, from the prior and from the
/// best point of a 5 x 5 grid over the first two costs (with the exposed time at its prior and
/// at its lower bound), each restarted once with a smaller simplex; the best end wins.
fn minimise(
    f: &dyn Fn(&[f64]) -> f64,
    start: &HostCosts,
    keys: &[usize],
    bounds: &[(f64, f64)],
    prior_x: &[f64],
) -> Vec<f64> {
    let x0: Vec<f64> = keys
        .iter()
        .zip(bounds)
        .map(|(&k, &(lo, hi))| host_param(start, k).max(1e-300).ln().clamp(lo, hi))
        .collect();
    const GRID: usize = 4;
    // The exposed per-iteration time at its prior and at its lower bound: a host-bound engine
    // shows its host time either as a hidden floor or as exposed time, two basins.
    let exposed = keys.iter().position(|&k| k == 3);
    let mut bases = vec![prior_x.to_vec()];
    if let Some(e) = exposed {
        let mut b = prior_x.to_vec();
        b[e] = bounds[e].0;
        bases.push(b);
    }
    let mut grid_best: Option<(f64, Vec<f64>)> = None;
    for base in &bases {
        for i in 0..=GRID {
            for j in 0..=GRID {
                let mut x = base.clone();
                for (k, t) in [(0, i), (1, j)] {
                    let (lo, hi) = bounds[k];
                    x[k] = lo + (hi - lo) * t as f64 / GRID as f64;
                }
                let v = f(&x);
                if grid_best.as_ref().is_none_or(|(b, _)| v < *b) {
                    grid_best = Some((v, x));
                }
            }
        }
    }
    let mut starts = vec![x0, prior_x.to_vec()];
    starts.extend(grid_best.map(|(_, x)| x));
    let mut best: Option<(Vec<f64>, f64)> = None;
    for s0 in starts {
        let mut x = s0;
        for step in [0.6, 0.15] {
            let (nx, v) = nelder_mead(f, &x, step, 1e-6, 120);
            x = nx;
            if best.as_ref().is_none_or(|(_, b)| v < *b) {
                best = Some((x.clone(), v));
            }
        }
    }
    best.map(|(x, _)| x).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::parse_reference;

    const HEADER: &str = "id,kind,engine,model,dtype,gpu,tp,input_len,output_len,output_len_counted,prefix_len,num_requests,rate_rps,max_num_seqs,max_num_batched_tokens,max_model_len,output_tokens_per_s,e2e_mean_ms,ttft_mean_ms,itl_derived_ms";

    #[test]
    fn rows_the_model_cannot_keep_up_with_are_left_out_of_the_host_fit() {
        // A row at a sustainable rate, and one far above what one H100 can serve.
        let text = format!(
            "{HEADER}\n\
             OK,online,vllm,llama-2-7b,fp16,h100-sxm,1,300,32,,0,60,2,128,2048,4096,64,600,30,10\n\
             OVER,online,vllm,llama-2-7b,fp16,h100-sxm,1,2000,32,,0,300,1000,128,2048,4096,64,600,30,10\n"
        );
        let rows = parse_reference(&text, "fit.csv").unwrap();
        let engine = EngineProfile::load("vllm").unwrap();
        let with = fit_engine_host(&rows, &engine, FitOptions::default()).unwrap();
        assert_eq!(with.left_out, vec!["OVER".to_string()]);
        assert_eq!(with.fitted_rows, 1);
        // The same fit as on the sustainable row alone.
        let alone = fit_engine_host(&rows[..1], &engine, FitOptions::default()).unwrap();
        assert!(alone.left_out.is_empty());
        assert_eq!(with.host.per_iteration_s, alone.host.per_iteration_s);
        assert_eq!(with.host.per_request_s, alone.host.per_request_s);
        // No per-iteration host floor above the fastest iteration measured (10 ms).
        assert!(
            with.iteration_bound.0 <= 10e-3,
            "{:?}",
            with.iteration_bound
        );
        assert!(with.host.per_iteration_s <= 10e-3);
    }

    /// The exposed per-iteration time stays under its prior's documented `max`, which the fit
    /// reports as its bound; without one it shares the per-iteration bound.
    #[test]
    fn the_exposed_time_stays_under_its_documented_bound() {
        // A 7B row whose 30 ms per token asks for far more host time than a 7B step has.
        let text = format!(
            "{HEADER}\n\
             SLOW,online,vllm,llama-2-7b,fp16,h100-sxm,1,300,32,,0,60,2,128,2048,4096,64,1000,40,30\n"
        );
        let rows = parse_reference(&text, "fit.csv").unwrap();
        let mut engine = EngineProfile::load("vllm").unwrap();
        let loose = fit_engine_host(&rows, &engine, FitOptions::default()).unwrap();
        assert_eq!(loose.exposed_bound.0, 1.96e-3, "{:?}", loose.exposed_bound);
        let prior = engine.host_prior.per_iteration_exposed_s.as_mut().unwrap();
        prior.max = Some(0.2e-3);
        prior.max_source = Some("a test bound".into());
        let tight = fit_engine_host(&rows, &engine, FitOptions::default()).unwrap();
        assert_eq!(tight.exposed_bound.0, 0.2e-3);
        assert!(tight.exposed_bound.1.contains("a test bound"));
        assert!(tight.host.per_iteration_exposed_s <= 0.2e-3 * (1.0 + 1e-9));
        assert!(
            loose.host.per_iteration_exposed_s > 0.2e-3,
            "{:?}",
            loose.host
        );
        engine
            .host_prior
            .per_iteration_exposed_s
            .as_mut()
            .unwrap()
            .max = None;
        let none = fit_engine_host(&rows, &engine, FitOptions::default()).unwrap();
        assert_eq!(none.exposed_bound, none.iteration_bound);
    }
}
