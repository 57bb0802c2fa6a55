//! Capacity planning: for a target load and SLOs, search GPU type x precision x TP x
//! max_num_seqs x replicas for the deployment that meets every SLO at the lowest $/hour.
//!
//! For each candidate replica the search measures its saturation throughput (offline run) and
//! its maximum sustainable rate under the SLOs (bisection on the arrival rate: a rate is
//! sustainable when every SLO holds at its percentile, the goodput share reaches the
//! threshold, and completions keep up with arrivals). Replicas = ceil(target / sustainable
//! rate). Candidates run in parallel (rayon); every simulation is deterministic.

mod export;
pub mod pricing;
mod sweep;

pub use export::CostWorkbookExporter;

pub use sweep::{parse_vary, sweep, SweepPoint, SweepTable, Vary};

use rayon::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::scenario::{Resolved, Scenario};
use crate::summary::{RunResult, RunSummary};
use crate::workload::ArrivalConfig;
use pricing::{cost, Cost, PriceCatalog, PriceColumn};

/// One point of the search space.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// GPU profile.
    pub gpu: String,
    /// Weight format.
    pub dtype: String,
    /// KV format.
    pub kv_cache_dtype: String,
    /// TP degree.
    pub tp: u32,
    /// max_num_seqs.
    pub max_num_seqs: u32,
}

/// What the search found for one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateResult {
    /// The candidate.
    pub candidate: Candidate,
    /// Why it cannot serve the target, if it cannot.
    pub infeasible: Option<String>,
    /// Saturation: completed requests/s of one replica with everything queued.
    pub saturation_rate_per_replica: f64,
    /// Output tokens/s of one replica at saturation.
    pub saturation_output_tokens_per_s: f64,
    /// Highest arrival rate one replica sustains within the SLOs, req/s.
    pub max_rate_per_replica: f64,
    /// The run at that rate (one replica).
    pub at_max_rate: Option<RunSummary>,
    /// Replicas needed for the target.
    pub replicas: u32,
    /// GPUs needed.
    pub gpus: u32,
    /// Cost of the deployment serving the target load.
    pub cost_at_target: Option<Cost>,
    /// Cost per token at saturation (offline batch work, no latency SLO).
    pub cost_at_saturation: Option<Cost>,
}

/// The outcome of `servesim plan`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanResult {
    /// Target load, req/s.
    pub target_rate_per_s: f64,
    /// Goodput share a sustainable rate needs.
    pub goodput_threshold: f64,
    /// Price column used.
    pub price_column: PriceColumn,
    /// Candidates, cheapest feasible first, infeasible last.
    pub candidates: Vec<CandidateResult>,
    /// Index of the chosen plan in `candidates`.
    pub chosen: Option<usize>,
    /// The chosen deployment re-simulated at the target load with all its replicas.
    pub verification: Option<RunSummary>,
    /// Discount batch work could get: 1 - (cost per token at saturation / at the SLO point).
    pub batch_discount: Option<f64>,
    /// Simulations run.
    pub simulations: u64,
}

/// The plan with the verification run's distributions, for reports.
pub struct PlanOutput {
    /// The plan.
    pub plan: PlanResult,
    /// The verification run (CDFs, time series).
    pub verification_run: Option<RunResult>,
    /// The chosen candidate's scenario (one replica), for the curves of the report.
    pub chosen_scenario: Option<Scenario>,
}

fn search_space(base: &Scenario) -> Vec<Candidate> {
    let p = &base.plan;
    let d = &base.deployment;
    let gpus = p.gpus.clone().unwrap_or_else(|| vec![d.gpu.clone()]);
    let dtypes = p.dtypes.clone().unwrap_or_else(|| vec![d.dtype.clone()]);
    let tps = p.tp.clone().unwrap_or_else(|| vec![d.tp]);
    let seqs = p
        .max_num_seqs
        .clone()
        .unwrap_or_else(|| vec![base.scheduler.max_num_seqs.unwrap_or(256)]);
    let mut out = Vec::new();
    for g in &gpus {
        for dt in &dtypes {
            for &tp in &tps {
                for &s in &seqs {
                    out.push(Candidate {
                        gpu: g.clone(),
                        dtype: dt.clone(),
                        // FP8 weights come with an FP8 KV cache, as FP8 deployments run.
                        kv_cache_dtype: if dt == "fp8" {
                            "fp8".into()
                        } else {
                            d.kv_cache_dtype.clone()
                        },
                        tp,
                        max_num_seqs: s,
                    });
                }
            }
        }
    }
    out
}

fn candidate_scenario(base: &Scenario, c: &Candidate, requests: u64) -> Scenario {
    let mut s = base.clone();
    s.deployment.gpu = c.gpu.clone();
    s.deployment.dtype = c.dtype.clone();
    s.deployment.kv_cache_dtype = c.kv_cache_dtype.clone();
    s.deployment.tp = c.tp;
    s.deployment.replicas = 1;
    s.scheduler.max_num_seqs = Some(c.max_num_seqs);
    if let Some(b) = s.scheduler.max_num_batched_tokens {
        s.scheduler.max_num_batched_tokens = Some(b.max(c.max_num_seqs));
    }
    s.workload.num_requests = Some(requests);
    s.workload.duration_s = None;
    s
}

/// Whether a run at `rate` meets the plan's bar: every SLO, the goodput share, and
/// completions keeping up with arrivals ([`RunSummary::keeps_up`]).
fn sustainable(s: &RunSummary, rate: f64, threshold: f64) -> bool {
    s.slo.all_met && s.goodput_share >= threshold && s.keeps_up(rate)
}

struct Searcher<'a> {
    base: &'a Scenario,
    origin: &'a str,
    requests: u64,
    threshold: f64,
}

impl Searcher<'_> {
    fn run_at(&self, c: &Candidate, rate: Option<f64>) -> Result<(Resolved, RunResult)> {
        let mut s = candidate_scenario(self.base, c, self.requests);
        match rate {
            Some(r) => {
                if matches!(s.workload.arrival, ArrivalConfig::Offline) {
                    s.workload.arrival = ArrivalConfig::Poisson { rate_per_s: r };
                } else {
                    s.workload.set_rate(r);
                }
            }
            None => {
                s.workload.arrival = ArrivalConfig::Offline;
                s.workload.max_concurrency = None;
            }
        }
        let resolved = s.resolve(self.origin)?;
        let run = resolved.run()?;
        Ok((resolved, run))
    }

    fn evaluate(
        &self,
        c: &Candidate,
        target: f64,
        prices: &PriceCatalog,
        column: PriceColumn,
        ratio: f64,
        max_replicas: u32,
    ) -> (CandidateResult, u64) {
        let mut sims = 0u64;
        let mut result = CandidateResult {
            candidate: c.clone(),
            infeasible: None,
            saturation_rate_per_replica: 0.0,
            saturation_output_tokens_per_s: 0.0,
            max_rate_per_replica: 0.0,
            at_max_rate: None,
            replicas: 0,
            gpus: 0,
            cost_at_target: None,
            cost_at_saturation: None,
        };
        let price = match self.base.pricing.price_usd_per_gpu_hour {
            Some(p) => p,
            None => match prices.price(&c.gpu, column) {
                Ok(p) => p,
                Err(e) => {
                    result.infeasible = Some(e.to_string());
                    return (result, sims);
                }
            },
        };
        let sat = match self.run_at(c, None) {
            Ok((_, r)) => r.summary,
            Err(e) => {
                result.infeasible = Some(e.to_string());
                return (result, sims);
            }
        };
        sims += 1;
        result.saturation_rate_per_replica = sat.request_throughput;
        result.saturation_output_tokens_per_s = sat.output_throughput;
        result.cost_at_saturation = Some(cost(
            c.tp,
            price,
            sat.output_throughput,
            sat.request_throughput * mean_input(&sat),
            ratio,
        ));
        // Bisection on the rate in (0, saturation].
        let (mut lo, mut hi) = (0.0f64, sat.request_throughput.max(1e-9));
        let mut best: Option<RunSummary> = None;
        if let Ok((_, r)) = self.run_at(c, Some(hi)) {
            sims += 1;
            if sustainable(&r.summary, hi, self.threshold) {
                lo = hi;
                best = Some(r.summary);
            }
        }
        if best.is_none() {
            for _ in 0..9 {
                let mid = 0.5 * (lo + hi);
                match self.run_at(c, Some(mid)) {
                    Ok((_, r)) => {
                        sims += 1;
                        if sustainable(&r.summary, mid, self.threshold) {
                            lo = mid;
                            best = Some(r.summary);
                        } else {
                            hi = mid;
                        }
                    }
                    Err(e) => {
                        result.infeasible = Some(e.to_string());
                        return (result, sims);
                    }
                }
            }
        }
        let Some(at) = best else {
            result.infeasible = Some(format!(
                "misses the SLOs even at {:.3} req/s per replica",
                hi
            ));
            return (result, sims);
        };
        result.max_rate_per_replica = lo;
        let replicas = (target / lo).ceil().max(1.0);
        if replicas > max_replicas as f64 {
            result.infeasible = Some(format!(
                "needs {replicas} replicas (more than plan.max_replicas = {max_replicas})"
            ));
        }
        let replicas = replicas.min(u32::MAX as f64) as u32;
        result.replicas = replicas;
        result.gpus = replicas.saturating_mul(c.tp);
        let out_tps = target * at.total_output_tokens as f64 / at.completed.max(1) as f64;
        let in_tps = target * mean_input(&at);
        result.cost_at_target = Some(cost(result.gpus, price, out_tps, in_tps, ratio));
        result.at_max_rate = Some(at);
        (result, sims)
    }
}

fn mean_input(s: &RunSummary) -> f64 {
    s.total_input_tokens as f64 / s.completed.max(1) as f64
}

/// Runs the capacity plan for a base scenario.
pub fn plan(base: &Scenario, origin: &str) -> Result<PlanOutput> {
    // Validate the base first, so a typo is reported once, with its path.
    base.resolve(origin)?;
    let target = match base
        .plan
        .target_rate_per_s
        .or(base.workload.mean_rate_per_s())
    {
        Some(r) if r.is_finite() && r > 0.0 => r,
        _ => {
            return Err(Error::config(
                origin,
                "plan.target_rate_per_s",
                "needs a target load: set plan.target_rate_per_s or a workload arrival rate",
            ))
        }
    };
    let threshold = base.plan.goodput_threshold.unwrap_or(0.9);
    let column: PriceColumn = match &base.pricing.column {
        Some(c) => c
            .parse()
            .map_err(|e: String| Error::config(origin, "pricing.column", e))?,
        None => PriceColumn::OnDemand,
    };
    let ratio = base.pricing.input_output_price_ratio.unwrap_or(0.25);
    let prices = PriceCatalog::embedded()?;
    let requests = base.plan.requests_per_point.unwrap_or(1000).max(50);
    let max_replicas = base.plan.max_replicas.unwrap_or(1024);
    let searcher = Searcher {
        base,
        origin,
        requests,
        threshold,
    };
    let space = search_space(base);
    let evaluated: Vec<(CandidateResult, u64)> = space
        .par_iter()
        .map(|c| searcher.evaluate(c, target, &prices, column, ratio, max_replicas))
        .collect();
    let mut sims: u64 = evaluated.iter().map(|(_, n)| n).sum();
    let mut candidates: Vec<CandidateResult> = evaluated.into_iter().map(|(r, _)| r).collect();
    // Cheapest first; at equal cost, the one with more spare capacity (the rate its replicas
    // sustain together) carries load spikes better.
    candidates.sort_by(|a, b| {
        let key = |r: &CandidateResult| {
            (
                r.infeasible.is_some(),
                r.cost_at_target.map_or(f64::INFINITY, |c| c.usd_per_hour),
                r.cost_at_target
                    .map_or(f64::INFINITY, |c| c.usd_per_million_output_tokens),
                r.replicas as f64 * r.max_rate_per_replica,
            )
        };
        let (ia, ca, ta, ra) = key(a);
        let (ib, cb, tb, rb) = key(b);
        ia.cmp(&ib)
            .then(ca.total_cmp(&cb))
            .then(ta.total_cmp(&tb))
            .then(rb.total_cmp(&ra))
    });
    let chosen = candidates
        .first()
        .filter(|c| c.infeasible.is_none())
        .map(|_| 0);
    let mut verification = None;
    let mut verification_run = None;
    let mut chosen_scenario = None;
    let mut batch_discount = None;
    if let Some(i) = chosen {
        let c = &candidates[i];
        let mut s = candidate_scenario(base, &c.candidate, requests.max(c.replicas as u64 * 200));
        s.deployment.replicas = c.replicas;
        if matches!(s.workload.arrival, ArrivalConfig::Offline) {
            s.workload.arrival = ArrivalConfig::Poisson { rate_per_s: target };
        } else {
            s.workload.set_rate(target);
        }
        let run = s.resolve(origin)?.run()?;
        sims += 1;
        verification = Some(run.summary.clone());
        verification_run = Some(run);
        let mut one = s.clone();
        one.deployment.replicas = 1;
        chosen_scenario = Some(one);
        if let (Some(t), Some(sat)) = (c.cost_at_target, c.cost_at_saturation) {
            if t.usd_per_million_output_tokens > 0.0 {
                batch_discount =
                    Some(1.0 - sat.usd_per_million_output_tokens / t.usd_per_million_output_tokens);
            }
        }
    }
    Ok(PlanOutput {
        plan: PlanResult {
            target_rate_per_s: target,
            goodput_threshold: threshold,
            price_column: column,
            candidates,
            chosen,
            verification,
            batch_discount,
            simulations: sims,
        },
        verification_run,
        chosen_scenario,
    })
}

/// Runs one replica of `scenario` at each of `rates` (in parallel): the latency-throughput
/// curve of a deployment.
pub fn rate_curve(
    scenario: &Scenario,
    origin: &str,
    rates: &[f64],
) -> Result<Vec<(f64, RunSummary)>> {
    rates
        .par_iter()
        .map(|&r| {
            let mut s = scenario.clone();
            if matches!(s.workload.arrival, ArrivalConfig::Offline) {
                s.workload.arrival = ArrivalConfig::Poisson { rate_per_s: r };
            } else {
                s.workload.set_rate(r);
            }
            Ok((r, s.resolve(origin)?.run()?.summary))
        })
        .collect()
}
