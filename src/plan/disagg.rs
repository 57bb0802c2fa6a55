//! xPyD candidates: prefill/decode-disaggregated deployments weighed beside the colocated
//! ones (docs/disaggregation.md, "Planning").
//!
//! A candidate is a pair of pool shapes (GPU type and TP of the prefill pool, of the decode
//! pool). For each, the search sizes both pools' replica counts at the target load, every
//! judgement a steady-state measurement of the whole deployment ([`measure`]) as for
//! colocated fleets. It starts at 1P1D and grows the pool that binds: the decode pool when
//! TPOT misses or back-pressure holds finished prompts waiting for decode seats (p99 wait
//! over a tenth of the TTFT SLO), else the prefill pool. Once a deployment holds, it steps down: one prefill replica
//! fewer, then one decode replica fewer, keeping any that still holds, until neither does;
//! the result records that both one-fewer deployments miss.

use rayon::prelude::*;
use serde::Serialize;

use super::measure::{measure, run_at, Load, LoadMeasurement, StopRule};
use super::pricing::{cost, PriceCatalog, PriceColumn};
use super::Status;
use crate::error::{Error, Result};
use crate::metrics::steady_state::SloMetric;
use crate::scenario::{DeploymentMode, PoolSection, Scenario};

/// Most measurements one xPyD candidate's sizing may take.
const MAX_STEPS: u32 = 40;
/// Back-pressure counts as binding when its p99 wait exceeds this share of the TTFT SLO.
const BACKPRESSURE_SHARE: f64 = 0.1;

/// One pool shape of an xPyD candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolShape {
    /// GPU profile.
    pub gpu: String,
    /// TP degree of each replica.
    pub tp: u32,
    /// Replicas (sized; 0 until then).
    pub replicas: u32,
    /// $/GPU-hour.
    pub price_usd_per_gpu_hour: f64,
}

/// What the search found for one xPyD candidate.
#[derive(Debug, Clone, Serialize)]
pub struct XpydResult {
    /// The prefill pool.
    pub prefill: PoolShape,
    /// The decode pool.
    pub decode: PoolShape,
    /// Weight format of both pools.
    pub dtype: String,
    /// Where it ended (feasible or infeasible; xPyD candidates are not pruned).
    pub status: Status,
    /// Why it is infeasible.
    pub note: Option<String>,
    /// GPUs of both pools.
    pub gpus: u32,
    /// $/hour of both pools (0 unless feasible).
    pub usd_per_hour: f64,
    /// $ per million output tokens at the target (0 unless feasible).
    pub usd_per_million_output_tokens: f64,
    /// TTFT at the SLO's percentile (p99 without one) in steady state, ms.
    pub ttft_ms: f64,
    /// TPOT at the SLO's percentile (p99 without one) in steady state, ms.
    pub tpot_ms: f64,
    /// Share of requests meeting every SLO in steady state.
    pub goodput_share: f64,
    /// Mean back-pressure wait at the sized deployment, ms.
    pub backpressure_wait_ms: f64,
    /// Whether one prefill replica fewer still holds (`None`: a single replica, or not
    /// feasible). A sized candidate has `Some(false)`.
    pub one_fewer_prefill_holds: Option<bool>,
    /// Whether one decode replica fewer still holds.
    pub one_fewer_decode_holds: Option<bool>,
    /// Simulations spent on this candidate.
    pub simulations: u64,
}

impl XpydResult {
    /// `3P x h200-sxm TP2 + 1D x h200-sxm TP2`, for messages.
    pub fn label(&self) -> String {
        format!(
            "{}P x {} TP{} + {}D x {} TP{}",
            self.prefill.replicas,
            self.prefill.gpu,
            self.prefill.tp,
            self.decode.replicas,
            self.decode.gpu,
            self.decode.tp
        )
    }

    /// The `--set` overrides that make the base scenario this deployment.
    pub fn overrides(&self) -> Vec<String> {
        vec![
            "deployment.mode=disaggregated".into(),
            format!("deployment.dtype={}", self.dtype),
            format!("deployment.prefill.replicas={}", self.prefill.replicas),
            format!("deployment.prefill.gpu={}", self.prefill.gpu),
            format!("deployment.prefill.tp={}", self.prefill.tp),
            format!("deployment.decode.replicas={}", self.decode.replicas),
            format!("deployment.decode.gpu={}", self.decode.gpu),
            format!("deployment.decode.tp={}", self.decode.tp),
        ]
    }
}

/// The xPyD side of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct DisaggPlan {
    /// Candidates: feasible cheapest first, then infeasible.
    pub candidates: Vec<XpydResult>,
    /// Index of the cheapest feasible one.
    pub best: Option<usize>,
    /// `colocated` or `disaggregated`: the cheaper kind's best (colocated on a tie: fewer
    /// moving parts), or `none` when neither is feasible.
    pub recommended: String,
    /// The `servesim run` line that re-runs the best xPyD deployment at the target as
    /// measured: pools, load, run length and seed (`None` where `--set` cannot express it:
    /// an autoscaler or fault injection in the scenario).
    pub run_command: Option<String>,
    /// The best deployment's evidence at the printed line's run length.
    pub evidence: Option<XpydEvidence>,
}

/// The best xPyD deployment measured until its figures converge (n requests), and one
/// replica fewer in each pool run at exactly n: the runs its printed line reproduces.
#[derive(Debug, Clone, Serialize)]
pub struct XpydEvidence {
    /// The deployment at n requests.
    pub holds: LoadMeasurement,
    /// One prefill replica fewer at n (`None` with a single prefill replica).
    pub fewer_prefill: Option<LoadMeasurement>,
    /// One decode replica fewer at n (`None` with a single decode replica).
    pub fewer_decode: Option<LoadMeasurement>,
    /// Simulations run.
    pub simulations: u64,
}

/// The pool shapes to weigh: prefill GPU x TP, decode GPU x TP.
fn shapes(base: &Scenario) -> Vec<(String, u32, String, u32)> {
    let p = &base.plan;
    let d = &base.deployment;
    let gpus = p.gpus.clone().unwrap_or_else(|| vec![d.gpu.clone()]);
    let tps = p.tp.clone().unwrap_or_else(|| vec![d.tp]);
    let pg = p.prefill_gpus.clone().unwrap_or_else(|| gpus.clone());
    let dg = p.decode_gpus.clone().unwrap_or_else(|| gpus.clone());
    let pt = p.prefill_tp.clone().unwrap_or_else(|| tps.clone());
    let dt = p.decode_tp.clone().unwrap_or_else(|| tps.clone());
    let mut out = Vec::new();
    for a in &pg {
        for &ta in &pt {
            for b in &dg {
                for &tb in &dt {
                    out.push((a.clone(), ta, b.clone(), tb));
                }
            }
        }
    }
    out
}

/// The base scenario as an xPyD deployment of `prefill` x `decode` replicas.
fn xpyd_scenario(base: &Scenario, r: &XpydResult, scale: f64) -> Scenario {
    let mut s = base.clone();
    let d = &mut s.deployment;
    d.mode = DeploymentMode::Disaggregated;
    d.dtype = r.dtype.clone();
    d.step_time_scale = base.deployment.step_time_scale * scale;
    let pool = |shape: &PoolShape, old: &Option<PoolSection>| PoolSection {
        replicas: shape.replicas,
        gpu: Some(shape.gpu.clone()),
        tp: Some(shape.tp),
        ..old.clone().unwrap_or_default()
    };
    d.prefill = Some(pool(&r.prefill, &d.prefill));
    d.decode = Some(pool(&r.decode, &d.decode));
    s.autoscale = None;
    s.faults = None;
    s
}

/// Which pools a failed measurement says to grow: (prefill, decode).
fn binding_pools(m: &LoadMeasurement) -> (bool, bool) {
    let s = m.steady();
    let failed = |metric: SloMetric| s.slo.iter().any(|c| c.metric == metric && !c.met);
    // Back-pressure binds when the wait for decode seats and blocks is a sizeable share of
    // the TTFT budget (of the mean TTFT without a TTFT SLO). The prefill queue behind held
    // blocks can dwarf the wait itself, so the budget, not the measured TTFT, is the scale.
    let budget_ms = s
        .slo
        .iter()
        .find(|c| c.metric == SloMetric::Ttft)
        .map_or(m.summary.mean_ttft_ms, |c| c.threshold_ms);
    let backpressure = m
        .summary
        .disaggregation
        .as_ref()
        .is_some_and(|d| d.p99_backpressure_wait_ms > BACKPRESSURE_SHARE * budget_ms.max(1e-9));
    let decode = failed(SloMetric::Tpot) || backpressure;
    let prefill = (failed(SloMetric::Ttft) || failed(SloMetric::E2e)) && !backpressure;
    // A queue that grows or goodput short of the threshold with no latency named: the pool
    // that holds work back.
    if !decode && !prefill {
        return (!backpressure, backpressure);
    }
    (prefill, decode)
}

/// Settings shared by every xPyD candidate's search.
pub struct XpydCtx<'a> {
    /// The base scenario (its search space checked).
    pub base: &'a Scenario,
    /// Where it came from, for messages.
    pub origin: &'a str,
    /// Target load, req/s.
    pub target: f64,
    /// Input token price relative to output.
    pub ratio: f64,
    /// Most replicas per pool.
    pub max_replicas: u32,
    /// Step-time multiplier the candidates are sized with.
    pub scale: f64,
    /// Prices.
    pub prices: &'a PriceCatalog,
    /// Price column.
    pub column: PriceColumn,
}

impl XpydCtx<'_> {
    fn price(&self, gpu: &str) -> Result<f64> {
        let name = crate::gpu::GpuProfile::load(gpu)?.name;
        self.prices
            .price_with(&self.base.pricing, &name, self.column)
    }

    fn measure(&self, r: &XpydResult) -> Result<LoadMeasurement> {
        let sc = xpyd_scenario(self.base, r, self.scale);
        let min = sc.measure.min_requests;
        measure(
            &sc,
            self.origin,
            Load::Rate(self.target),
            StopRule::Decided,
            min,
            None,
        )
    }

    /// Sizes one xPyD candidate.
    fn search(&self, shape: &(String, u32, String, u32)) -> XpydResult {
        let (pg, pt, dg, dt) = shape;
        let mut r = XpydResult {
            prefill: PoolShape {
                gpu: pg.clone(),
                tp: *pt,
                replicas: 1,
                price_usd_per_gpu_hour: 0.0,
            },
            decode: PoolShape {
                gpu: dg.clone(),
                tp: *dt,
                replicas: 1,
                price_usd_per_gpu_hour: 0.0,
            },
            dtype: self.base.deployment.dtype.clone(),
            status: Status::Infeasible,
            note: None,
            gpus: 0,
            usd_per_hour: 0.0,
            usd_per_million_output_tokens: 0.0,
            ttft_ms: 0.0,
            tpot_ms: 0.0,
            goodput_share: 0.0,
            backpressure_wait_ms: 0.0,
            one_fewer_prefill_holds: None,
            one_fewer_decode_holds: None,
            simulations: 0,
        };
        if let Err(e) = self.size(&mut r) {
            r.status = Status::Infeasible;
            r.note = Some(e.to_string());
        }
        r
    }

    fn size(&self, r: &mut XpydResult) -> Result<()> {
        r.prefill.price_usd_per_gpu_hour = self.price(&r.prefill.gpu)?;
        r.decode.price_usd_per_gpu_hour = self.price(&r.decode.gpu)?;
        xpyd_scenario(self.base, r, 1.0).resolve(self.origin)?;
        let steps = std::cell::Cell::new(0u32);
        let run = |r: &mut XpydResult| -> Result<LoadMeasurement> {
            steps.set(steps.get() + 1);
            let m = self.measure(r)?;
            r.simulations += m.simulations as u64;
            Ok(m)
        };
        // Grow the binding pool until the deployment holds.
        let mut holds = loop {
            let m = run(r)?;
            if m.sustainable() {
                break m;
            }
            let (p, d) = binding_pools(&m);
            if p {
                r.prefill.replicas += 1;
            }
            if d {
                r.decode.replicas += 1;
            }
            if r.prefill.replicas > self.max_replicas || r.decode.replicas > self.max_replicas {
                return Err(Error::Infeasible(format!(
                    "more than plan.max_replicas = {} replicas in a pool do not sustain the target; last miss: {}",
                    self.max_replicas,
                    m.misses().join("; ")
                )));
            }
            if steps.get() >= MAX_STEPS {
                return Err(Error::Infeasible(format!(
                    "not sized within {MAX_STEPS} measurements; last miss: {}",
                    m.misses().join("; ")
                )));
            }
        };
        // Step down while one replica fewer in a pool still holds.
        loop {
            let mut moved = false;
            for prefill in [true, false] {
                let n = if prefill {
                    r.prefill.replicas
                } else {
                    r.decode.replicas
                };
                if n <= 1 {
                    continue;
                }
                let mut fewer = r.clone();
                if prefill {
                    fewer.prefill.replicas -= 1;
                } else {
                    fewer.decode.replicas -= 1;
                }
                let m = run(&mut fewer)?;
                r.simulations = fewer.simulations;
                if m.sustainable() {
                    fewer.one_fewer_prefill_holds = None;
                    fewer.one_fewer_decode_holds = None;
                    *r = fewer;
                    holds = m;
                    moved = true;
                    break;
                }
                if prefill {
                    r.one_fewer_prefill_holds = Some(false);
                } else {
                    r.one_fewer_decode_holds = Some(false);
                }
            }
            if !moved || steps.get() >= MAX_STEPS {
                break;
            }
        }
        self.book(r, &holds);
        Ok(())
    }

    /// Books a deployment that holds: status, GPUs, cost and the latencies of `holds`.
    fn book(&self, r: &mut XpydResult, holds: &LoadMeasurement) {
        r.status = Status::Feasible;
        r.gpus = r.prefill.replicas * r.prefill.tp + r.decode.replicas * r.decode.tp;
        let usd_per_hour = (r.prefill.replicas * r.prefill.tp) as f64
            * r.prefill.price_usd_per_gpu_hour
            + (r.decode.replicas * r.decode.tp) as f64 * r.decode.price_usd_per_gpu_hour;
        // One blended $/GPU-hour for the cost formulas.
        let price = usd_per_hour / r.gpus.max(1) as f64;
        let s = holds.steady();
        let input = holds.summary.total_input_tokens as f64 / holds.summary.completed.max(1) as f64;
        let c = cost(
            r.gpus,
            price,
            s.output_throughput.value,
            s.request_throughput * input,
            self.ratio,
        );
        r.usd_per_hour = c.usd_per_hour;
        r.usd_per_million_output_tokens = c.usd_per_million_output_tokens;
        let at = |metric: SloMetric, fallback: f64| {
            s.slo
                .iter()
                .find(|x| x.metric == metric)
                .map_or(fallback, |x| x.value_ms.value)
        };
        r.ttft_ms = at(SloMetric::Ttft, s.ttft.p99_ms);
        r.tpot_ms = at(SloMetric::Tpot, s.tpot.p99_ms);
        r.goodput_share = s.goodput_share.value;
        r.backpressure_wait_ms = holds
            .summary
            .disaggregation
            .as_ref()
            .map_or(0.0, |d| d.mean_backpressure_wait_ms);
    }

    /// Measures the sized deployment `r` until its figures converge (n requests) and each
    /// pool one replica fewer at exactly n; steps down where one fewer still holds at n, grows
    /// the binding pool where the longer run misses, and books the result.
    fn evidence(&self, r: &mut XpydResult) -> Result<XpydEvidence> {
        let mut n_min = 0u64;
        let mut simulations = 0u64;
        for _ in 0..MAX_STEPS {
            let sc = xpyd_scenario(self.base, r, self.scale);
            let min = sc.measure.min_requests.max(n_min);
            let v = measure(
                &sc,
                self.origin,
                Load::Rate(self.target),
                StopRule::Converged,
                min,
                None,
            )?;
            simulations += v.simulations as u64;
            if !v.sustainable() {
                let (p, d) = binding_pools(&v);
                r.prefill.replicas += p as u32;
                r.decode.replicas += d as u32;
                n_min = v.requests;
                continue;
            }
            let n = v.requests;
            let mut fewer: [Option<LoadMeasurement>; 2] = [None, None];
            let mut moved = false;
            for (i, prefill) in [true, false].into_iter().enumerate() {
                let mut less = r.clone();
                let pool = if prefill {
                    &mut less.prefill
                } else {
                    &mut less.decode
                };
                if pool.replicas <= 1 {
                    continue;
                }
                pool.replicas -= 1;
                let sc = xpyd_scenario(self.base, &less, self.scale);
                let f = run_at(&sc, self.origin, Load::Rate(self.target), n, None)?;
                simulations += 1;
                if f.sustainable() {
                    *r = less;
                    n_min = n;
                    moved = true;
                    break;
                }
                fewer[i] = Some(f);
            }
            if moved {
                continue;
            }
            r.one_fewer_prefill_holds = fewer[0].as_ref().map(|_| false);
            r.one_fewer_decode_holds = fewer[1].as_ref().map(|_| false);
            r.simulations += simulations;
            self.book(r, &v);
            let [fewer_prefill, fewer_decode] = fewer;
            return Ok(XpydEvidence {
                holds: v,
                fewer_prefill,
                fewer_decode,
                simulations,
            });
        }
        Err(Error::Infeasible(format!(
            "the deployment's evidence did not settle within {MAX_STEPS} measurements"
        )))
    }
}

/// Weighs every xPyD candidate of the scenario's search space (in parallel) and ranks them;
/// `colocated_usd_per_hour` is the best colocated fleet's, for the recommendation. The best
/// one's evidence is measured at its printed line's run length; where that moves its pools,
/// the ranking is redone (a candidate measured so is not measured again).
pub fn plan_xpyd(ctx: &XpydCtx<'_>, colocated_usd_per_hour: Option<f64>) -> DisaggPlan {
    let mut candidates: Vec<XpydResult> =
        shapes(ctx.base).par_iter().map(|s| ctx.search(s)).collect();
    let mut evidence: Vec<Option<XpydEvidence>> = vec![None; candidates.len()];
    loop {
        rank(&mut candidates, &mut evidence);
        let Some(first) = candidates.first().filter(|c| c.status == Status::Feasible) else {
            break;
        };
        if evidence[0].is_some() {
            break;
        }
        let mut c = first.clone();
        match ctx.evidence(&mut c) {
            Ok(e) => evidence[0] = Some(e),
            Err(e) => {
                c.status = Status::Infeasible;
                c.note = Some(e.to_string());
            }
        }
        candidates[0] = c;
    }
    let best = candidates
        .first()
        .filter(|c| c.status == Status::Feasible)
        .map(|_| 0);
    let xpyd = best.map(|i| candidates[i].usd_per_hour);
    let recommended = match (colocated_usd_per_hour, xpyd) {
        (Some(c), Some(x)) if x < c * (1.0 - 1e-9) => "disaggregated",
        (Some(_), _) => "colocated",
        (None, Some(_)) => "disaggregated",
        (None, None) => "none",
    }
    .to_string();
    let evidence = best.and_then(|i| evidence[i].take());
    DisaggPlan {
        run_command: best.and_then(|i| {
            let mut sets = candidates[i].overrides();
            sets.extend(super::load_overrides(ctx.base, ctx.target, None)?);
            sets.extend(super::length_overrides(ctx.base, &evidence.as_ref()?.holds));
            Some(super::run_line(ctx.origin, &sets, ctx.base.seed))
        }),
        candidates,
        best,
        recommended,
        evidence,
    }
}

/// Feasible candidates cheapest first (ties keep their order), then infeasible; each
/// candidate's evidence moves with it.
fn rank(candidates: &mut Vec<XpydResult>, evidence: &mut Vec<Option<XpydEvidence>>) {
    let key = |r: &XpydResult| {
        (
            r.status != Status::Feasible,
            if r.status == Status::Feasible {
                r.usd_per_hour
            } else {
                f64::INFINITY
            },
        )
    };
    let mut pairs: Vec<(XpydResult, Option<XpydEvidence>)> =
        candidates.drain(..).zip(evidence.drain(..)).collect();
    pairs.sort_by(|(a, _), (b, _)| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    for (c, e) in pairs {
        candidates.push(c);
        evidence.push(e);
    }
}
