//! Capacity planning: for a target load and SLOs, search GPU type x precision x TP x
//! max_num_seqs for the smallest fleet of each that meets every SLO in steady state, and pick
//! the cheapest.
//!
//! The method (docs/capacity-planning.md, "Method"):
//! 1. Every candidate's steady-state **capacity** per replica (a closed loop far above
//!    max_num_seqs; [`search::capacity`]) bounds its cost from below: no fleet of it can
//!    cost less than ceil(target / capacity) replicas.
//! 2. In order of that bound, each candidate's **maximum sustainable rate** per replica is
//!    bracketed and bisected to 1% ([`search::max_sustainable_rate`]), and its **fleet** is
//!    sized: the smallest R whose whole fleet, router included, sustains the target, shown by
//!    R holding and R - 1 failing ([`fleet_sizing::size_fleet`]). A candidate whose bound already
//!    costs more than the best fleet found is not searched further (`plan.exhaustive`
//!    searches them all).
//! 3. Every judgement is a steady-state measurement ([`measure`]): warm-up and drain removed,
//!    run length extended until the verdict or the figure is certain.
//! 4. For the chosen plan: a longer verification run of its fleet, the step-time slow-down it
//!    survives ([`fleet_sizing::model_headroom`]), the batch point and its discount as the TPOT SLO
//!    tightens, and the latency-throughput curve of one replica past saturation.

mod curve;
mod disagg;
mod fleet_sizing;
mod floor;
pub mod measure;
pub mod pricing;
mod progress;
mod rerun;
mod search;
mod sweep;
pub mod week;

pub use curve::{rate_curve, CurvePoint};
pub use disagg::{DisaggPlan, PoolShape, XpydResult};
pub use fleet_sizing::{
    size_on_shards, size_whole, FleetEvidence, FleetProbe, FleetSizing, ModelHeadroom,
    FLEET_MIN_REQUESTS, FULL_SIZING_MAX, SHARD_REPLICAS,
};
pub use measure::{Load, LoadMeasurement, StopRule};
pub use progress::{NoProgress, Progress};
pub use rerun::shell_word;
use rerun::{colocated_run_overrides, length_overrides, load_overrides, run_line};
pub use search::{Binding, Constraint, Probe, RateSearch, RATE_PRECISION};
pub use sweep::{
    fingerprint, grid_points, merge_shards, parse_vary, sweep, Shard, ShardManifest, SweepPoint,
    SweepTable, Vary,
};

use rayon::prelude::*;
use serde::Serialize;

use crate::catalog::{self, Entry, Kind};
use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::metrics::steady_state::{SteadyState, SteadyStateConfig};
use crate::precision::{KvDtype, WeightDtype};
use crate::scenario::Scenario;
use crate::summary::RunResult;
use pricing::{cost, Cost, PriceCatalog, PriceColumn};

/// One point of the search space.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// GPU profile.
    pub gpu: String,
    /// Weight format.
    pub dtype: String,
    /// The formats `auto` resolves to for this model, as reports name them (`fp8`, `mxfp4
    /// experts + bf16`); `None` when `dtype` names a format itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formats: Option<String>,
    /// KV format the candidate runs with: the scenario's `kv_cache_dtype` under the one rule
    /// ([`KvDtype::resolve`]: `auto` follows the weights), as `run` resolves it.
    pub kv_cache_dtype: String,
    /// TP degree.
    pub tp: u32,
    /// Attention data-parallel size (GPUs per replica: `tp x dp`).
    #[serde(skip_serializing_if = "is_one")]
    pub dp: u32,
    /// Expert-parallel size.
    #[serde(skip_serializing_if = "is_one")]
    pub ep: u32,
    /// Pipeline-parallel stages: the scenario's `deployment.pp`, not searched (GPUs per
    /// replica: `tp x dp x pp`).
    #[serde(skip_serializing_if = "is_one")]
    pub pp: u32,
    /// max_num_seqs (per data-parallel rank).
    pub max_num_seqs: u32,
    /// Speculative decoding's K (0: off); `None` when the scenario has no `[speculative]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_speculative_tokens: Option<u32>,
    /// The router its fleet runs behind; `None` when the plan searches no routers (the
    /// scenario's own, as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
    /// CPU KV offload per replica, GiB (0: none); `None` when the plan searches no sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_offloading_size_gib: Option<f64>,
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// Where a candidate ended in the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Searched fully: its fleet was sized and verified.
    Feasible,
    /// It cannot serve the target within the SLOs (`note` says why).
    Infeasible,
    /// Not searched fully: even at its steady-state capacity it costs more than the plan.
    Pruned,
}

/// The best latencies a candidate reaches, at the lightest load the search tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LightLoad {
    /// Arrival rate per replica, in the plan's `rate_unit` (req/s or sessions/s).
    pub rate_per_s: f64,
    /// TTFT at the SLO's percentile (p99 without a TTFT SLO) in steady state, ms.
    pub ttft_ms: f64,
    /// TPOT at the SLO's percentile (p99 without a TPOT SLO) in steady state, ms.
    pub tpot_ms: f64,
    /// E2E latency at the SLO's percentile (p99 without an E2E SLO) in steady state, ms.
    pub e2e_ms: f64,
}

/// What the search found for one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateResult {
    /// The candidate.
    pub candidate: Candidate,
    /// Where it ended.
    pub status: Status,
    /// Why it is infeasible or was not searched fully (`None` when feasible).
    pub note: Option<String>,
    /// $/GPU-hour (0 when unknown).
    pub price_usd_per_gpu_hour: f64,
    /// KV capacity of one replica, tokens, as `estimate` and `run` report it for this
    /// deployment (0 when it does not resolve).
    pub kv_capacity_tokens: u64,
    /// Steady-state capacity of one replica, in the plan's `rate_unit`: completed requests/s
    /// of a saturated closed loop (SLOs off), for a session workload divided by the mean
    /// requests per session (sessions/s); an upper bound on `max_rate_per_replica`.
    pub capacity_rate_per_replica: f64,
    /// Output tokens/s of one replica at capacity.
    pub capacity_output_tokens_per_s: f64,
    /// Highest arrival rate one replica sustains within the SLOs, in the plan's `rate_unit`
    /// (0 if not searched).
    pub max_rate_per_replica: f64,
    /// The constraint that binds just above that rate.
    pub binding: Option<Binding>,
    /// The steady state at the maximum sustainable rate (one replica).
    pub at_max_rate: Option<SteadyState>,
    /// The best latencies it reaches, when no load meets the SLOs.
    pub light_load: Option<LightLoad>,
    /// Sustained rate per replica inside its sized fleet, in the plan's `rate_unit`: one
    /// replica's maximum rate,
    /// adjusted so that the fleet servesim verified is what a linear model gives: at least
    /// target / R (R replicas hold at the target) and below target / (R - 1) (R - 1 do not).
    /// 0 unless feasible.
    pub rate_in_fleet_per_replica: f64,
    /// One replica's steady state across load (the cheapest feasible candidates only).
    pub curve: Vec<CurvePoint>,
    /// Replicas: sized and verified when feasible; the capacity bound when pruned.
    pub replicas: u32,
    /// GPUs of those replicas.
    pub gpus: u32,
    /// Output tokens/s the sized fleet produces at the target (steady window; 0 unless
    /// feasible).
    pub fleet_output_tokens_per_s: f64,
    /// Prompt tokens/s the sized fleet takes in at the target (0 unless feasible).
    pub fleet_input_tokens_per_s: f64,
    /// Cost of the fleet serving the target (feasible), or of the capacity bound (pruned).
    pub cost_at_target: Option<Cost>,
    /// Cost per token of one replica at capacity (offline batch work, no latency SLO).
    pub cost_at_capacity: Option<Cost>,
    /// Every rate the search tried for one replica, in order.
    pub probes: Vec<Probe>,
    /// Simulations spent on this candidate.
    pub simulations: u64,
    /// Token-level prefix-cache hit rate of the sized fleet's run at the target (share of
    /// prompt tokens served from cache, 0..1); `None` without block identities or unless
    /// feasible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Of that rate, the share loaded from the CPU offload tier, 0..1 (with offload only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate_cpu: Option<f64>,
}

/// The batch point: what a million output tokens costs at capacity (no latency SLO) against
/// at the SLO-bound maximum rate of the same deployment.
#[derive(Debug, Clone, Serialize)]
pub struct BatchPoint {
    /// $/M output tokens of one replica at steady-state capacity.
    pub usd_per_million_at_capacity: f64,
    /// $/M output tokens of one replica at its SLO-bound maximum rate.
    pub usd_per_million_at_slo: f64,
    /// Discount a batch tier can fund: 1 - at capacity / at the SLO, 0..1.
    pub discount: f64,
    /// The same as the TPOT SLO tightens or loosens (other SLOs unchanged).
    pub by_tpot: Vec<TpotRow>,
}

/// One row of the batch-discount table.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TpotRow {
    /// TPOT SLO, ms (at the scenario's TPOT percentile).
    pub tpot_ms: f64,
    /// Maximum sustainable rate of one replica under it, in the plan's `rate_unit` (0: not
    /// reachable).
    pub max_rate_per_replica: f64,
    /// $/M output tokens at that rate (0 when not reachable).
    pub usd_per_million: f64,
    /// Discount a batch tier can fund against it, 0..1 (0 when not reachable).
    pub discount: f64,
}

/// Everything measured about the chosen plan beyond the search.
#[derive(Debug, Clone, Serialize)]
pub struct ChosenDetail {
    /// The fleet sizing: R holding; `one_fewer` is R - 1 run at the verification's length,
    /// the run the printed line reproduces with one replica fewer.
    pub fleet: FleetSizing,
    /// Requests of the verification run, and of the printed line.
    pub run_requests: u64,
    /// A longer run of the whole fleet at R, until every judged figure is within the
    /// tolerance.
    pub verification: LoadMeasurement,
    /// What the whole-fleet evidence could not resolve, and why (`None`: R holds and R - 1
    /// misses, or R = 1): R - 1 too close to capacity to show a steady state at the line's
    /// length, or R still missing after growing by a few replicas.
    pub unresolved: Option<String>,
    /// The step-time slow-down the fleet survives.
    pub headroom: ModelHeadroom,
    /// The batch point and the discount table.
    pub batch: BatchPoint,
    /// The `servesim run` line that re-runs the chosen fleet at the target as the plan
    /// measured it: deployment, load, run length and seed (with its replica settings one
    /// lower it re-runs the one-fewer check, request for request); `None` where `--set`
    /// cannot express it (a base scenario with disaggregated pools or fault injection).
    pub run_command: Option<String>,
}

/// One GPU type's prices, $/GPU-hour.
#[derive(Debug, Clone, Serialize)]
pub struct GpuPriceRow {
    /// GPU profile name.
    pub gpu: String,
    /// On-demand.
    pub on_demand: f64,
    /// Reserved (on-demand when the catalog has none).
    pub reserved: f64,
    /// Spot (on-demand when the catalog has none).
    pub spot: f64,
}

/// How the plan measured (for the report).
#[derive(Debug, Clone, Serialize)]
pub struct Method {
    /// The steady-state analysis settings.
    pub analysis: SteadyStateConfig,
    /// Requests of a single replica's first run.
    pub min_requests_per_replica: u64,
    /// Most requests of a run, per replica.
    pub max_requests_per_replica: u64,
    /// Fewest requests of a fleet run.
    pub fleet_min_requests: u64,
    /// Relative precision of the rate bisection.
    pub rate_precision: f64,
    /// Step-time multiplier every candidate was sized with (1 + `plan.headroom`, or the
    /// validated headroom when larger).
    pub step_time_scale: f64,
    /// The step-time headroom measured on the reference rows at `plan.headroom_coverage`,
    /// when asked for (a share: 0.078 = 7.8% slower).
    pub validated_headroom: Option<f64>,
}

/// The outcome of `servesim plan`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanResult {
    /// Target load, in `rate_unit` (req/s, or sessions/s for a session workload).
    pub target_rate_per_s: f64,
    /// Goodput share a sustainable rate needs.
    pub goodput_threshold: f64,
    /// Price column used.
    pub price_column: PriceColumn,
    /// Candidates: feasible cheapest first, then pruned, then infeasible.
    pub candidates: Vec<CandidateResult>,
    /// Index of the chosen plan in `candidates`.
    pub chosen: Option<usize>,
    /// What was measured about the chosen plan.
    pub detail: Option<ChosenDetail>,
    /// When the top two cost the same and their margins are within the search's noise: how
    /// close they are.
    pub near_tie: Option<String>,
    /// When nothing is feasible: the nearest SLOs some candidate meets at light load.
    pub nearest_slo: Option<String>,
    /// When nothing is feasible and an SLO asks for less than one forward pass takes on the
    /// fastest candidate: that SLO, the floor in ms and what it is (a line per SLO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_below_floor: Option<String>,
    /// $/GPU-hour of every GPU type in the search space, by price column (the workbook's
    /// price table; every column holds the override when `pricing.price_usd_per_gpu_hour` or
    /// `pricing.gpus.<gpu>` is
    /// set).
    pub gpu_prices: Vec<GpuPriceRow>,
    /// Mean prompt tokens per unit of the target rate (per request; per session with
    /// `rate_unit` sessions/s), the chosen fleet's steady window: target x this = prompt
    /// tokens/s.
    pub input_tokens_per_request: f64,
    /// Mean output tokens per unit of the target rate (per request, or per session), as
    /// `input_tokens_per_request`.
    pub output_tokens_per_request: f64,
    /// Price of an input token relative to an output token.
    pub input_output_price_ratio: f64,
    /// How it was measured.
    pub method: Method,
    /// For time-varying traffic: the plan over the whole period (the rest of the plan is the
    /// steady-state plan at its peak hour).
    pub week: Option<week::WeekPlan>,
    /// Simulations run.
    pub simulations: u64,
    /// The prefill/decode-disaggregated (xPyD) candidates, when the scenario asks for them
    /// (`plan.disaggregated`), with the best of each kind side by side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disaggregated: Option<DisaggPlan>,
    /// The plan's answer whichever kind wins (`chosen` is the best colocated candidate;
    /// `disaggregated.recommended` says when an xPyD deployment is cheaper); `None` when
    /// nothing is feasible.
    pub recommendation: Option<Recommendation>,
    /// Speculative decoding, when the scenario has a `[speculative]` table: whether it pays at
    /// the target, and from which batch it stops paying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationVerdict>,
    /// The unit of every arrival rate of the plan when it is not requests/s: `sessions/s` for
    /// a `[workload.sessions]` workload (its arrival rate counts sessions): the target, each
    /// candidate's capacity, maximum, in-fleet and light-load rates, its probes and curve
    /// points, and the batch table's rates; tokens per request are then per session.
    /// `None`: requests/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_unit: Option<String>,
}

/// Does speculation pay at the target load? The best feasible fleet with and without it, and
/// where it stops paying on the chosen deployment.
#[derive(Debug, Clone, Serialize)]
pub struct SpeculationVerdict {
    /// The cheapest feasible candidate without speculation (K = 0) and its $ per million
    /// output tokens at the target.
    pub without: Option<(String, f64)>,
    /// The cheapest feasible candidate with speculation (K >= 1) and its $/M output tokens.
    pub with: Option<(String, f64)>,
    /// What became of the candidates without speculation when `without` is `None`.
    pub without_outcome: SearchOutcome,
    /// What became of the candidates with speculation when `with` is `None`.
    pub with_outcome: SearchOutcome,
    /// The answer, as the text report words it.
    pub verdict: SpeculationAnswer,
    /// Whether speculation pays at the target: `verdict == "pays"` (false when with and
    /// without cost the same within the search's resolution, or were not both searched).
    pub pays_at_target: bool,
    /// The deployment the break-even is measured on (the chosen one, at the largest K
    /// searched when it does not speculate).
    pub deployment: String,
    /// Decode speedup of speculation (plain step x acceptance length / verify step) by batch
    /// size, at the workload's mean context: (batch, speedup).
    pub speedup_by_batch: Vec<(u32, f64)>,
    /// The smallest batch at which the speedup falls below 1 (`None`: it pays at every batch
    /// up to max_num_seqs).
    pub stops_paying_at_batch: Option<u32>,
}

/// What the search found for one side (with or without speculation) of the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchOutcome {
    /// At least one candidate was sized and is feasible.
    Feasible,
    /// `plan.speculative` lists no K on this side (no 0, or only 0).
    NotSearched,
    /// Every candidate on this side costs more than the plan even at its capacity.
    Pruned,
    /// No candidate on this side serves the target within the SLOs.
    Infeasible,
}

/// Whether speculation pays at the target load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeculationAnswer {
    /// The cheapest fleet with speculation costs less than without by more than the search's
    /// resolution (3%), or only speculation has a feasible fleet and the side without was
    /// searched.
    Pays,
    /// The cheapest fleet without speculation costs less by more than 3%, or only it is
    /// feasible and the side with was searched.
    DoesNotPay,
    /// Both cost the same within the search's resolution (3%).
    EqualWithinResolution,
    /// One side was not searched, or neither has a feasible fleet.
    NotCompared,
}

/// The search's resolution on cost: a fleet is sized in whole replicas at a rate bisected to
/// about this fraction, so cheaper or dearer by less than it is a tie.
pub const COST_RESOLUTION: f64 = 0.03;

/// The outcome of one side of the verdict: `feasible` when `best` found one, else what the
/// side's candidates say.
fn side_outcome(candidates: &[CandidateResult], on: bool, found: bool) -> SearchOutcome {
    let side: Vec<&CandidateResult> = candidates
        .iter()
        .filter(|c| {
            c.candidate
                .num_speculative_tokens
                .is_some_and(|k| (k > 0) == on)
        })
        .collect();
    if found {
        SearchOutcome::Feasible
    } else if side.is_empty() {
        SearchOutcome::NotSearched
    } else if side.iter().any(|c| c.status == Status::Pruned) {
        SearchOutcome::Pruned
    } else {
        SearchOutcome::Infeasible
    }
}

/// The answer from the cheapest with and without and what became of each side.
fn speculation_answer(
    with: Option<f64>,
    without: Option<f64>,
    outcomes: (SearchOutcome, SearchOutcome),
) -> SpeculationAnswer {
    use SearchOutcome as O;
    match (with, without, outcomes) {
        (Some(w), Some(o), _) if (w / o - 1.0).abs() < COST_RESOLUTION => {
            SpeculationAnswer::EqualWithinResolution
        }
        (Some(w), Some(o), _) if w < o => SpeculationAnswer::Pays,
        (Some(_), Some(_), _) => SpeculationAnswer::DoesNotPay,
        (Some(_), None, (_, O::Pruned | O::Infeasible)) => SpeculationAnswer::Pays,
        (None, Some(_), (O::Pruned | O::Infeasible, _)) => SpeculationAnswer::DoesNotPay,
        _ => SpeculationAnswer::NotCompared,
    }
}

/// The speculation verdict of a plan over `candidates` (`None` without a `[speculative]`
/// table): the cheapest with and without, and the chosen deployment's speedup by batch.
fn speculation_verdict(
    base: &Scenario,
    origin: &str,
    candidates: &[CandidateResult],
    chosen: Option<usize>,
    mean_context: f64,
) -> Option<SpeculationVerdict> {
    base.speculative.as_ref()?;
    let best = |on: bool| {
        candidates
            .iter()
            .filter(|c| c.status == Status::Feasible)
            .filter(|c| {
                c.candidate
                    .num_speculative_tokens
                    .is_some_and(|k| (k > 0) == on)
            })
            .filter_map(|c| {
                c.cost_at_target
                    .map(|x| (c.candidate.label(), x.usd_per_million_output_tokens))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let (with, without) = (best(true), best(false));
    let with_outcome = side_outcome(candidates, true, with.is_some());
    let without_outcome = side_outcome(candidates, false, without.is_some());
    let verdict = speculation_answer(
        with.as_ref().map(|x| x.1),
        without.as_ref().map(|x| x.1),
        (with_outcome, without_outcome),
    );
    let mut c = candidates.get(chosen?)?.candidate.clone();
    if c.num_speculative_tokens == Some(0) {
        let k_max = speculative_space(base)
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0);
        c.num_speculative_tokens = Some(k_max);
    }
    let model = candidate_scenario(base, &c, 1.0)
        .resolve(origin)
        .and_then(|r| r.step_model())
        .ok()?;
    let mut speedup_by_batch = Vec::new();
    let mut stops = None;
    let mut b = 1u32;
    while b <= c.max_num_seqs {
        let shape = crate::step_time::BatchShape::decode(b, mean_context.round() as u64);
        if let Some(x) = model.speculative_step(&shape) {
            let s = x.plain_s * x.mean_acceptance_length / (x.draft_s + x.verify_s);
            if s < 1.0 && stops.is_none() {
                stops = Some(b);
            }
            speedup_by_batch.push((b, s));
        }
        b = if b == c.max_num_seqs {
            break;
        } else {
            (b * 2).min(c.max_num_seqs)
        };
    }
    if let (Some(hi), true) = (stops, stops.is_some_and(|s| s > 1)) {
        // Bisect between the last batch that paid and the first that did not.
        let speedup = |b: u32| {
            let shape = crate::step_time::BatchShape::decode(b, mean_context.round() as u64);
            model
                .speculative_step(&shape)
                .map(|x| x.plain_s * x.mean_acceptance_length / (x.draft_s + x.verify_s))
        };
        let (mut lo, mut hi) = (hi / 2, hi);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if speedup(mid).is_some_and(|s| s < 1.0) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        stops = Some(hi);
    }
    Some(SpeculationVerdict {
        without,
        with,
        without_outcome,
        with_outcome,
        verdict,
        pays_at_target: verdict == SpeculationAnswer::Pays,
        deployment: c.label(),
        speedup_by_batch,
        stops_paying_at_batch: stops,
    })
}

/// What to deploy, what it costs at the target, and the line that re-runs it.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// `colocated` or `disaggregated`.
    pub kind: String,
    /// The deployment, e.g. `2 x h100-sxm fp8 TP2 seqs256` or
    /// `3P x h200-sxm TP2 + 1D x h200-sxm TP2`.
    pub deployment: String,
    /// GPUs of the whole fleet.
    pub gpus: u32,
    /// Fleet $/hour.
    pub usd_per_hour: f64,
    /// $ per million output tokens at the target.
    pub usd_per_million_output_tokens: f64,
    /// The `servesim run` line that re-runs it as the plan measured it.
    pub run_command: Option<String>,
}

impl PlanResult {
    /// The recommendation of this plan as it stands (what [`PlanResult::recommendation`]
    /// holds once the plan is complete).
    pub fn recommend(&self) -> Option<Recommendation> {
        let xpyd = self.disaggregated.as_ref().and_then(|x| {
            (x.recommended == "disaggregated")
                .then(|| x.best.map(|i| (&x.candidates[i], x.run_command.clone())))
                .flatten()
        });
        if let Some((c, run_command)) = xpyd {
            return Some(Recommendation {
                kind: "disaggregated".into(),
                deployment: c.label(),
                gpus: c.gpus,
                usd_per_hour: c.usd_per_hour,
                usd_per_million_output_tokens: c.usd_per_million_output_tokens,
                run_command,
            });
        }
        let c = &self.candidates[self.chosen?];
        let cost = c.cost_at_target?;
        let k = &c.candidate;
        Some(Recommendation {
            kind: "colocated".into(),
            // Parallelism as `TP8 DP2 EP16` where DP/EP apply; speculation where searched.
            deployment: format!(
                "{} x {} {} {} seqs{}{}",
                c.replicas,
                k.gpu,
                k.weights_label(),
                k.parallelism(),
                k.max_num_seqs,
                match k.num_speculative_tokens {
                    None => String::new(),
                    Some(0) => " no-spec".into(),
                    Some(n) => format!(" spec K{n}"),
                }
            ),
            gpus: cost.gpus,
            usd_per_hour: cost.usd_per_hour,
            usd_per_million_output_tokens: cost.usd_per_million_output_tokens,
            run_command: self.detail.as_ref().and_then(|d| d.run_command.clone()),
        })
    }
}

/// The plan with the verification run's distributions, for reports.
pub struct PlanOutput {
    /// The plan.
    pub plan: PlanResult,
    /// The verification run (CDFs, time series).
    pub verification_run: Option<RunResult>,
}

impl PlanResult {
    /// The chosen candidate.
    pub fn chosen_candidate(&self) -> Option<&CandidateResult> {
        self.chosen.map(|i| &self.candidates[i])
    }
}

fn search_space(base: &Scenario) -> Vec<Candidate> {
    let p = &base.plan;
    let d = &base.deployment;
    let gpus = p.gpus.clone().unwrap_or_else(|| vec![d.gpu.clone()]);
    let dtypes = p.dtypes.clone().unwrap_or_else(|| vec![d.dtype.clone()]);
    let tps = p.tp.clone().unwrap_or_else(|| vec![d.tp]);
    let seqs_given = p
        .max_num_seqs
        .clone()
        .or(base.scheduler.max_num_seqs.map(|s| vec![s]));
    let model = crate::model::load_model(&d.model).ok();
    let moe = model.as_ref().is_some_and(|m| m.moe.is_some());
    let ks = speculative_space(base);
    let routers = router_space(base);
    let offloads = offload_space(base);
    let mut out = Vec::new();
    for g in &gpus {
        // Without a batch cap in the scenario, each GPU's engine default, as `run` uses.
        let seqs = seqs_given
            .clone()
            .unwrap_or_else(|| vec![engine_default_seqs(&d.engine, g)]);
        for dt in &dtypes {
            // The checkpoint the scenario names (`deployment.checkpoint`), where this format can
            // run it: its formats and KV declaration label the candidate, as `run` resolves it.
            let model = with_named_checkpoint(model.clone(), d.checkpoint.as_deref(), dt);
            for &tp in &tps {
                for (dp, ep) in parallel_space(base, moe, tp) {
                    for &s in &seqs {
                        for &k in &ks {
                            for &o in &offloads {
                                for r in &routers {
                                    out.push(Candidate {
                                        gpu: g.clone(),
                                        dtype: dt.clone(),
                                        formats: auto_formats(model.as_ref(), dt),
                                        kv_cache_dtype: kv_format(
                                            model.as_ref(),
                                            &d.kv_cache_dtype,
                                            dt,
                                        ),
                                        tp,
                                        dp,
                                        ep,
                                        pp: d.pp,
                                        max_num_seqs: s,
                                        num_speculative_tokens: k,
                                        router: r.clone(),
                                        kv_offloading_size_gib: o,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The routers to size fleets behind: `plan.routers`; by default, when the workload carries
/// block identities, the scenario's router and `prefix-aware`; `[None]` otherwise (the
/// scenario's router, as before).
fn router_space(base: &Scenario) -> Vec<Option<String>> {
    if let Some(list) = &base.plan.routers {
        return list.iter().cloned().map(Some).collect();
    }
    if base.workload.block_id_tokens().is_none() {
        return vec![None];
    }
    let own = base.deployment.router.to_string();
    let mut out = vec![Some(own.clone())];
    if own != "prefix-aware" {
        out.push(Some("prefix-aware".into()));
    }
    out
}

/// The CPU offload sizes to try: `plan.kv_offloading_size_gib`, else `[None]` (the
/// scenario's setting).
fn offload_space(base: &Scenario) -> Vec<Option<f64>> {
    match &base.plan.kv_offloading_size_gib {
        Some(list) => list.iter().copied().map(Some).collect(),
        None => vec![None],
    }
}

/// The speculative K values to try: `plan.speculative`, else 0 and the table's K; `[None]`
/// without a `[speculative]` table.
fn speculative_space(base: &Scenario) -> Vec<Option<u32>> {
    let Some(spec) = &base.speculative else {
        return vec![None];
    };
    let mut ks = base
        .plan
        .speculative
        .clone()
        .unwrap_or_else(|| vec![0, spec.num_speculative_tokens]);
    ks.dedup();
    let mut out: Vec<Option<u32>> = Vec::new();
    for k in ks {
        if !out.contains(&Some(k)) {
            out.push(Some(k));
        }
    }
    out
}

/// The (data-parallel, expert-parallel) sizes to try at tensor-parallel size `tp`: the
/// scenario's `plan.dp` x `plan.expert_parallel`, by default for a MoE model no data
/// parallelism and the data parallelism that fills an eight-GPU node, each with experts split
/// tensor-parallel and spread expert-parallel; for a dense model the deployment's own.
fn parallel_space(base: &Scenario, moe: bool, tp: u32) -> Vec<(u32, u32)> {
    let p = &base.plan;
    let d = &base.deployment;
    let dps = p.dp.clone().unwrap_or_else(|| {
        if moe {
            vec![d.dp, 1, (8 / tp.max(1)).max(1)]
        } else {
            vec![d.dp]
        }
    });
    let eps =
        p.expert_parallel
            .clone()
            .unwrap_or_else(|| if moe { vec![false, true] } else { vec![] });
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &dp in &dps {
        let gpus = tp.saturating_mul(dp);
        let choices: Vec<u32> = if eps.is_empty() {
            vec![d.ep]
        } else {
            eps.iter().map(|&on| if on { gpus } else { 1 }).collect()
        };
        for ep in choices {
            if !out.contains(&(dp, ep)) {
                out.push((dp, ep));
            }
        }
    }
    out
}

/// The engine's default max_num_seqs on `gpu` (256, vLLM's base default, when either does
/// not load; resolving the candidate then says why).
fn engine_default_seqs(engine: &str, gpu: &str) -> u32 {
    match (
        crate::engine::EngineProfile::load(engine),
        crate::gpu::GpuProfile::load(gpu),
    ) {
        (Ok(mut e), Ok(g)) => {
            e.scheduler.for_gpu(&g);
            e.scheduler.max_num_seqs
        }
        _ => 256,
    }
}

/// The KV format a deployment of `model` with weights `dtype` runs with under the scenario's
/// `kv_cache_dtype` setting: the rule every command applies
/// ([`crate::scenario::resolve_formats`]: `auto` follows the weights, or the checkpoint's own
/// declaration when `dtype` names the checkpoint's format). An unparsable value, or a model
/// that does not load, stays as written (resolving the candidate then names it).
fn kv_format(model: Option<&crate::model::ModelSpec>, setting: &str, dtype: &str) -> String {
    let auto = dtype.eq_ignore_ascii_case("auto");
    match (
        setting.parse::<KvDtype>(),
        dtype.parse::<WeightDtype>(),
        model,
    ) {
        (Ok(k), _, Some(m)) if auto => crate::scenario::resolve_formats(m, None, k).2.to_string(),
        (Ok(k), Ok(w), Some(m)) => crate::scenario::resolve_formats(m, Some(w), k)
            .2
            .to_string(),
        (Ok(k), Ok(w), None) => k.resolve(w).to_string(),
        _ => setting.to_string(),
    }
}

/// `model` with the published checkpoint `checkpoint` as its own, when format `dtype` can run
/// it ([`crate::scenario::with_checkpoint`]); the model as it is otherwise (a format the
/// checkpoint does not store is reported by the candidate's own resolution).
fn with_named_checkpoint(
    model: Option<crate::model::ModelSpec>,
    checkpoint: Option<&str>,
    dtype: &str,
) -> Option<crate::model::ModelSpec> {
    let m = model?;
    let explicit = WeightDtype::parse_setting(dtype).ok().flatten();
    match crate::scenario::with_checkpoint(m.clone(), checkpoint, explicit, "") {
        Ok(with) => Some(with),
        Err(_) => Some(m),
    }
}

/// What `auto` weights resolve to for `model` (its checkpoint's own formats, as `run` reports
/// them); `None` for a named format or a model that does not load.
fn auto_formats(model: Option<&crate::model::ModelSpec>, dtype: &str) -> Option<String> {
    let m = model.filter(|_| dtype.eq_ignore_ascii_case("auto"))?;
    Some(
        crate::scenario::resolve_formats(m, None, KvDtype::Auto)
            .1
            .label(),
    )
}

/// The base scenario with one replica of candidate `c`, every step `scale` times the model's.
fn candidate_scenario(base: &Scenario, c: &Candidate, scale: f64) -> Scenario {
    let mut s = base.clone();
    s.deployment.gpu = c.gpu.clone();
    s.deployment.dtype = c.dtype.clone();
    s.deployment.kv_cache_dtype = c.kv_cache_dtype.clone();
    s.deployment.tp = c.tp;
    s.deployment.dp = c.dp;
    s.deployment.ep = c.ep;
    s.deployment.pp = c.pp;
    s.deployment.replicas = 1;
    s.deployment.step_time_scale = base.deployment.step_time_scale * scale;
    // A colocated candidate, whatever mode the base scenario runs in.
    s.deployment.mode = crate::scenario::DeploymentMode::Colocated;
    s.deployment.prefill = None;
    s.deployment.decode = None;
    s.deployment.kv_transfer_bandwidth_gb_s = None;
    s.deployment.kv_transfer_latency_us = None;
    s.deployment.kv_transfer_layerwise = None;
    // The steady-state search measures fixed fleets: no autoscaler, no faults.
    s.autoscale = None;
    s.faults = None;
    s.scheduler.max_num_seqs = Some(c.max_num_seqs);
    if let Some(r) = c.router.as_deref().and_then(|r| r.parse().ok()) {
        s.deployment.router = r;
    }
    if let Some(g) = c.kv_offloading_size_gib {
        s.deployment.kv_offloading_size_gib = (g > 0.0).then_some(g);
    }
    if let (Some(k), Some(spec)) = (c.num_speculative_tokens, &mut s.speculative) {
        spec.num_speculative_tokens = k;
        // A per-position list measured at a larger K holds for its first K positions (the
        // acceptance of position i depends only on positions 1..i); K = 0 ignores it.
        if let Some(crate::speculative::AcceptanceRate::PerPosition(v)) = &mut spec.acceptance_rate
        {
            v.truncate(k as usize);
        }
    }
    // The scenario's token budget stays as written: a candidate it cannot hold is not searched
    // ([`token_budget_check`]), never given a larger budget in silence.
    s
}

/// Why candidate `c` is not searched when the scenario's own `scheduler.max_num_batched_tokens`
/// is below the candidate's `max_num_seqs` (`None` when it holds them, or the scenario leaves
/// the budget to the engine: resolving the candidate then checks the engine's default).
/// Every running sequence decodes one token per iteration in servesim's scheduler, so the
/// budget must hold `max_num_seqs`, and the plan keeps the user's budget as written. What
/// each engine does with such a setting is named: vLLM refuses it (vllm-project/vllm
/// vllm/config/scheduler.py at 01230b40128e, `verify_max_model_len`: "max_num_batched_tokens
/// must be greater than or equal to max_num_seqs"); TensorRT-LLM accepts it but schedules at
/// most `max_num_tokens` decoding requests per step (NVIDIA/TensorRT-LLM
/// cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp at 0a949d3128bf: a generation
/// request's tokens count against `maxNumTokensRuntime`), which a candidate of that many
/// sequences models.
fn token_budget_check(base: &Scenario, c: &Candidate) -> Option<String> {
    let budget = base.scheduler.max_num_batched_tokens?;
    if budget >= c.max_num_seqs {
        return None;
    }
    let seqs = c.max_num_seqs;
    let engine = crate::engine::EngineProfile::load(&base.deployment.engine)
        .map(|e| e.name)
        .unwrap_or_default();
    let what = match engine.as_str() {
        "vllm" => "vLLM refuses max_num_batched_tokens below max_num_seqs".to_string(),
        "trtllm" => format!(
            "TensorRT-LLM decodes at most {budget} sequences per step (max_num_tokens), \
             as max_num_seqs {budget} does"
        ),
        _ => "every running sequence decodes one token per iteration".to_string(),
    };
    Some(format!(
        "not searched: max_num_seqs {seqs} exceeds the scenario's \
         scheduler.max_num_batched_tokens ({budget}) and {what}; raise the budget to plan it"
    ))
}

/// Resolves every GPU name of the list `key` to its catalog name (a profile path must load),
/// then drops repeats; an error names `key[i]` and the valid names.
fn resolve_gpu_list(list: &mut Vec<String>, key: &str, origin: &str) -> Result<()> {
    for (i, g) in list.iter_mut().enumerate() {
        let key = || format!("{key}[{i}]");
        match catalog::resolve(Kind::Gpu, g)
            .map_err(|e| Error::config(origin, key(), e.to_string()))?
        {
            Entry::Catalog(name) => *g = name.to_string(),
            Entry::Path(_) => {
                GpuProfile::load(g).map_err(|e| Error::config(origin, key(), e.to_string()))?;
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    list.retain(|g| seen.insert(g.clone()));
    Ok(())
}

/// The base scenario with every name of its search space checked and made canonical:
/// `plan.gpus` through the catalog's resolver (aliases become catalog names, a path must load),
/// `plan.dtypes` as weight formats; TP degrees and batch caps at least 1. Errors name the key,
/// e.g. `plan.gpus[1]`, and the valid names.
fn checked_search_space(base: &Scenario, origin: &str) -> Result<Scenario> {
    let mut s = base.clone();
    let p = &mut s.plan;
    if let Some(gpus) = &mut p.gpus {
        resolve_gpu_list(gpus, "plan.gpus", origin)?;
    }
    if let Some(dtypes) = &mut p.dtypes {
        for (i, d) in dtypes.iter_mut().enumerate() {
            // `auto` stays `auto` (the checkpoint's own formats), as `deployment.dtype` does.
            if d.trim().eq_ignore_ascii_case("auto") {
                *d = "auto".into();
                continue;
            }
            let w: WeightDtype = d
                .parse()
                .map_err(|e: String| Error::config(origin, format!("plan.dtypes[{i}]"), e))?;
            *d = w.to_string();
        }
        let mut seen = std::collections::HashSet::new();
        dtypes.retain(|d| seen.insert(d.clone()));
    }
    for (key, list) in [&mut p.prefill_gpus, &mut p.decode_gpus]
        .into_iter()
        .zip(["plan.prefill_gpus", "plan.decode_gpus"])
        .filter_map(|(l, k)| l.as_mut().map(|l| (k, l)))
    {
        if list.is_empty() {
            return Err(Error::config(
                origin,
                key,
                "is empty: list at least one value",
            ));
        }
        resolve_gpu_list(list, key, origin)?;
    }
    for (key, list) in [
        ("plan.tp", &p.tp),
        ("plan.dp", &p.dp),
        ("plan.max_num_seqs", &p.max_num_seqs),
        ("plan.prefill_tp", &p.prefill_tp),
        ("plan.decode_tp", &p.decode_tp),
    ] {
        if let Some(i) = list.iter().flatten().position(|&v| v == 0) {
            return Err(Error::config(
                origin,
                format!("{key}[{i}]"),
                "must be >= 1, got 0",
            ));
        }
        if list.as_ref().is_some_and(|l| l.is_empty()) {
            return Err(Error::config(
                origin,
                key,
                "is empty: list at least one value",
            ));
        }
    }
    for (key, list) in [("plan.gpus", &p.gpus), ("plan.dtypes", &p.dtypes)] {
        if list.as_ref().is_some_and(|l| l.is_empty()) {
            return Err(Error::config(
                origin,
                key,
                "is empty: list at least one value",
            ));
        }
    }
    check_speculative_space(&s, origin)?;
    check_reuse_space(&mut s, origin)?;
    Ok(s)
}

/// `plan.routers` must name routers (canonical names kept, repeats dropped) and
/// `plan.kv_offloading_size_gib` sizes in GiB within the offload tier's range, which need
/// prefix caching; neither list may be empty.
fn check_reuse_space(s: &mut Scenario, origin: &str) -> Result<()> {
    let empty = |key: &str| Error::config(origin, key, "is empty: list at least one value");
    if let Some(list) = &mut s.plan.routers {
        if list.is_empty() {
            return Err(empty("plan.routers"));
        }
        for (i, r) in list.iter_mut().enumerate() {
            let kind: crate::sim::RouterKind = r
                .parse()
                .map_err(|e: String| Error::config(origin, format!("plan.routers[{i}]"), e))?;
            *r = kind.to_string();
        }
        let mut seen = std::collections::HashSet::new();
        list.retain(|r| seen.insert(r.clone()));
    }
    // Prefix caching off in so many words (engines default it on).
    let prefix = s.scheduler.enable_prefix_caching != Some(false);
    if let Some(list) = &mut s.plan.kv_offloading_size_gib {
        if list.is_empty() {
            return Err(empty("plan.kv_offloading_size_gib"));
        }
        let max = crate::scenario::offload::MAX_SIZE_GIB;
        for (i, &g) in list.iter().enumerate() {
            let key = format!("plan.kv_offloading_size_gib[{i}]");
            if !(0.0..=max).contains(&g) {
                return Err(Error::config(
                    origin,
                    key,
                    format!("must be a size in GiB in [0, {max}], got {g}"),
                ));
            }
            if g > 0.0 && !prefix {
                return Err(Error::config(
                    origin,
                    key,
                    "KV offloading needs prefix caching (scheduler.enable_prefix_caching = true)",
                ));
            }
        }
        let mut seen = Vec::<f64>::new();
        list.retain(|g| {
            let new = !seen.contains(g);
            seen.push(*g);
            new
        });
    }
    Ok(())
}

/// `plan.speculative` needs a `[speculative]` table whose acceptance holds at every K listed:
/// one conditional rate (or the method's default), since a per-position list or a measured
/// mean length is for its own K only.
fn check_speculative_space(s: &Scenario, origin: &str) -> Result<()> {
    let key = "plan.speculative";
    let Some(ks) = &s.plan.speculative else {
        return Ok(());
    };
    let Some(spec) = &s.speculative else {
        return Err(Error::config(
            origin,
            key,
            "needs a [speculative] table (the method and its acceptance)",
        ));
    };
    if ks.is_empty() {
        return Err(Error::config(
            origin,
            key,
            "is empty: list at least one value",
        ));
    }
    // A per-position list holds for every K up to its length (its first K rates); a mean
    // length only for the table's K; K = 0 ignores both.
    let k_limit = match (&spec.acceptance_rate, spec.mean_acceptance_length) {
        (Some(crate::speculative::AcceptanceRate::PerPosition(v)), _) => Some(v.len() as u32),
        (_, Some(_)) => Some(spec.num_speculative_tokens),
        _ => None,
    };
    for (i, &k) in ks.iter().enumerate() {
        if k > 16 {
            return Err(Error::config(
                origin,
                format!("{key}[{i}]"),
                format!("must be in 0..=16, got {k}"),
            ));
        }
        let list = spec.mean_acceptance_length.is_none();
        match k_limit {
            Some(limit) if k != 0 && list && k > limit => {
                return Err(Error::config(
                    origin,
                    format!("{key}[{i}]"),
                    format!(
                        "K = {k} exceeds the {limit} rates of speculative.acceptance_rate (a \
                         candidate takes the list's first K rates): give one number to search \
                         larger K"
                    ),
                ))
            }
            Some(limit) if k != 0 && !list && k != limit => {
                return Err(Error::config(
                    origin,
                    format!("{key}[{i}]"),
                    format!(
                        "K = {k} differs from speculative.num_speculative_tokens = {limit} while \
                         the acceptance is a mean length for that K: give \
                         speculative.acceptance_rate as one number to search K"
                    ),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether candidate `c` can run at all: its deployment resolves (as `run` would resolve it)
/// and its GPU has a price. Gives its $/GPU-hour and one replica's KV capacity, tokens.
fn entry_check(
    base: &Scenario,
    origin: &str,
    c: &Candidate,
    prices: &PriceCatalog,
    column: PriceColumn,
) -> Result<(f64, u64)> {
    if let Some(why) = token_budget_check(base, c) {
        return Err(Error::config(origin, "plan.max_num_seqs", why));
    }
    let resolved = candidate_scenario(base, c, 1.0).resolve(origin)?;
    // A profile given as a path is priced by the GPU type it names.
    let price = prices.price_with(&base.pricing, &resolved.deployment.gpu.name, column)?;
    Ok((price, resolved.memory.kv_tokens))
}

impl Candidate {
    /// `gpu dtype TPn seqs m` (with `DPd EPe` when set), for messages.
    pub fn label(&self) -> String {
        let spec = match self.num_speculative_tokens {
            None => String::new(),
            Some(0) => " no-spec".into(),
            Some(k) => format!(" spec K{k}"),
        };
        let router = self
            .router
            .as_ref()
            .map_or(String::new(), |r| format!(" {r}"));
        let cpu = self
            .kv_offloading_size_gib
            .map_or(String::new(), |g| format!(" cpu {g} GiB"));
        format!(
            "{} {} {} seqs {}{spec}{router}{cpu}",
            self.gpu,
            self.weights_label(),
            self.parallelism(),
            self.max_num_seqs
        )
    }

    /// The weight format as reports name it: the resolved formats of `auto`, else `dtype`.
    pub fn weights_label(&self) -> &str {
        self.formats.as_deref().unwrap_or(&self.dtype)
    }

    /// `TP8`, `TP1 PP2` with pipeline stages, or `TP8 DP2 EP16` with data or expert
    /// parallelism.
    pub fn parallelism(&self) -> String {
        if self.pp > 1 {
            format!("TP{} PP{}", self.tp, self.pp)
        } else if self.dp == 1 && self.ep == 1 {
            format!("TP{}", self.tp)
        } else {
            format!("TP{} DP{} EP{}", self.tp, self.dp, self.ep)
        }
    }

    /// GPUs of one replica: `tp x dp x pp`.
    pub fn gpus(&self) -> u32 {
        self.tp.saturating_mul(self.dp).saturating_mul(self.pp)
    }

    /// The candidate without its router, as a key: one replica measures the same whatever
    /// the router.
    fn one_replica_key(&self) -> String {
        let mut c = self.clone();
        c.router = None;
        format!("{c:?}")
    }
}

/// Settings shared by every candidate's search.
struct Ctx<'a> {
    base: &'a Scenario,
    origin: &'a str,
    progress: &'a dyn Progress,
    target: f64,
    ratio: f64,
    max_replicas: u32,
    scale: f64,
    /// One-replica measurements shared by candidates that differ only in the router (one
    /// replica sees every request whatever the router): capacity and rate search, by
    /// [`Candidate::one_replica_key`].
    memo: Memo,
    /// Requests one unit of the target rate sends: the mean requests per session for a
    /// session workload, else 1 (converts a closed loop's completed requests/s to the plan's
    /// rate unit).
    requests_per_unit: f64,
}

/// A one-replica measurement per key, computed once: later askers wait for the first.
type MemoCell<T> = std::sync::Arc<std::sync::Mutex<Option<T>>>;

/// [`Ctx::memo`]'s two tables.
#[derive(Default)]
struct Memo {
    capacity: std::sync::Mutex<std::collections::HashMap<String, MemoCell<LoadMeasurement>>>,
    rate: std::sync::Mutex<std::collections::HashMap<String, MemoCell<search::RateSearch>>>,
}

/// The value of `key` in `table`, computed by `f` when absent (errors are not kept); the
/// bool says whether it was computed here (its simulations are this caller's).
fn memoized<T: Clone>(
    table: &std::sync::Mutex<std::collections::HashMap<String, MemoCell<T>>>,
    key: String,
    f: impl FnOnce() -> Result<T>,
) -> Result<(T, bool)> {
    let cell = table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default()
        .clone();
    let mut slot = cell.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = slot.as_ref() {
        return Ok((v.clone(), false));
    }
    let v = f()?;
    *slot = Some(v.clone());
    Ok((v, true))
}

/// Where a candidate stands after the first phase.
enum Phase1 {
    /// It fits, has a price and a capacity: search it.
    Ready(Box<Prelim>),
    /// It cannot be searched (no price, does not fit, no capacity): its result as it is.
    Done(Box<CandidateResult>),
}

/// A candidate after the first phase: it fits, it has a price and a capacity.
struct Prelim {
    result: CandidateResult,
    scenario: Scenario,
    /// Lower bound on its fleet's $/hour.
    bound_usd_per_hour: f64,
}

fn empty_result(c: &Candidate) -> CandidateResult {
    CandidateResult {
        candidate: c.clone(),
        status: Status::Infeasible,
        note: None,
        price_usd_per_gpu_hour: 0.0,
        kv_capacity_tokens: 0,
        capacity_rate_per_replica: 0.0,
        capacity_output_tokens_per_s: 0.0,
        max_rate_per_replica: 0.0,
        binding: None,
        at_max_rate: None,
        light_load: None,
        rate_in_fleet_per_replica: 0.0,
        curve: Vec::new(),
        replicas: 0,
        gpus: 0,
        fleet_output_tokens_per_s: 0.0,
        fleet_input_tokens_per_s: 0.0,
        cost_at_target: None,
        cost_at_capacity: None,
        probes: Vec::new(),
        simulations: 0,
        prefix_cache_hit_rate: None,
        prefix_cache_hit_rate_cpu: None,
    }
}

/// Mean prompt tokens per completed request of a measurement.
fn mean_input(m: &LoadMeasurement) -> f64 {
    m.summary.total_input_tokens as f64 / m.summary.completed.max(1) as f64
}

/// Output and prompt tokens/s of measurement `m`'s steady window.
fn window_tokens_per_s(m: &LoadMeasurement) -> (f64, f64) {
    let s = m.steady();
    (
        s.output_throughput.value,
        s.request_throughput * mean_input(m),
    )
}

/// Cost of `gpus` GPUs producing what measurement `m` produced in its steady window.
fn cost_of(gpus: u32, price: f64, m: &LoadMeasurement, ratio: f64) -> Cost {
    let (out, input) = window_tokens_per_s(m);
    cost(gpus, price, out, input, ratio)
}

/// Books the fleet of `replicas` measured at `target` onto `r`: GPUs, throughput, cost, and
/// the per-replica rate that reproduces the fleet linearly. `m` is the fleet's measurement,
/// or a shard's, each of its replicas standing for `factor` of the fleet's.
fn set_fleet(
    r: &mut CandidateResult,
    replicas: u32,
    target: f64,
    m: &LoadMeasurement,
    ratio: f64,
    factor: f64,
    block_ids: bool,
) {
    // In [target / R, target / (R - 1)), a hair inside so that ROUNDUP(target / rate) = R.
    let lo = target / replicas as f64 * (1.0 + 1e-9);
    let mut rate = r.max_rate_per_replica.max(lo);
    if replicas > 1 {
        rate = rate.min(target / (replicas - 1) as f64 * (1.0 - 1e-9));
    }
    r.rate_in_fleet_per_replica = rate;
    r.replicas = replicas;
    r.gpus = replicas.saturating_mul(r.candidate.gpus());
    let (out, input) = window_tokens_per_s(m);
    (r.fleet_output_tokens_per_s, r.fleet_input_tokens_per_s) = (out * factor, input * factor);
    r.cost_at_target = Some(cost(
        r.gpus,
        r.price_usd_per_gpu_hour,
        out * factor,
        input * factor,
        ratio,
    ));
    let run = &m.summary;
    if let Some(h) = run.prefix_cache_hit_rate.filter(|_| block_ids) {
        r.prefix_cache_hit_rate = Some(h);
        r.prefix_cache_hit_rate_cpu = run.prefix_cache_hit_rate_cpu;
    }
}

impl Ctx<'_> {
    /// Phase 1: price, feasibility and capacity of one candidate; `entry` is what
    /// [`entry_check`] found (its price and KV capacity, or why it cannot run).
    fn prelim(&self, c: &Candidate, entry: Result<(f64, u64)>) -> Phase1 {
        let mut r = empty_result(c);
        let (price, kv_tokens) = match entry {
            Ok(x) => x,
            Err(e) => {
                r.note = Some(e.to_string());
                return Phase1::Done(Box::new(r));
            }
        };
        r.price_usd_per_gpu_hour = price;
        r.kv_capacity_tokens = kv_tokens;
        let sc = candidate_scenario(self.base, c, self.scale);
        let cap = match memoized(&self.memo.capacity, c.one_replica_key(), || {
            search::capacity(&sc, self.origin)
        }) {
            Ok((m, fresh)) => {
                if fresh {
                    r.simulations += m.simulations as u64;
                }
                m
            }
            Err(e) => {
                r.note = Some(e.to_string());
                return Phase1::Done(Box::new(r));
            }
        };
        let s = cap.steady();
        r.capacity_rate_per_replica = s.request_throughput / self.requests_per_unit;
        r.capacity_output_tokens_per_s = s.output_throughput.value;
        r.cost_at_capacity = Some(cost_of(c.gpus(), price, &cap, self.ratio));
        if r.capacity_rate_per_replica <= 0.0 {
            r.note = Some("completes no request in steady state".into());
            return Phase1::Done(Box::new(r));
        }
        let bound = (self.target / r.capacity_rate_per_replica).ceil().max(1.0);
        r.replicas = bound.min(u32::MAX as f64) as u32;
        r.gpus = r.replicas.saturating_mul(c.gpus());
        Phase1::Ready(Box::new(Prelim {
            bound_usd_per_hour: r.gpus as f64 * price,
            result: r,
            scenario: sc,
        }))
    }

    /// Phase 2: the rate search and the fleet sizing of one candidate.
    fn search(&self, p: Prelim) -> Result<(CandidateResult, Option<FleetSizing>)> {
        let Prelim {
            mut result,
            scenario,
            ..
        } = p;
        let (rs, fresh) = memoized(&self.memo.rate, result.candidate.one_replica_key(), || {
            search::max_sustainable_rate(&scenario, self.origin, result.capacity_rate_per_replica)
        })?;
        if fresh {
            result.simulations += rs.simulations;
        }
        result.binding = rs.binding.clone();
        result.probes = rs.probes.clone();
        if rs.max_rate_per_s <= 0.0 {
            result.status = Status::Infeasible;
            if let Some(m) = &rs.above {
                let s = m.steady();
                let p99 = |metric: &str| {
                    s.slo
                        .iter()
                        .find(|x| x.metric.name() == metric)
                        .map(|x| x.value_ms.value)
                };
                let rate = match m.load {
                    Load::Rate(r) => r,
                    Load::ClosedLoop(_) => 0.0,
                };
                result.light_load = Some(LightLoad {
                    rate_per_s: rate,
                    ttft_ms: p99("TTFT").unwrap_or(s.ttft.p99_ms),
                    tpot_ms: p99("TPOT").unwrap_or(s.tpot.p99_ms),
                    e2e_ms: p99("E2E").unwrap_or(s.e2e.p99_ms),
                });
                result.note = Some(format!(
                    "misses the SLOs even at light load ({rate:.3} {} per replica): {}",
                    m.rate_unit,
                    s.misses
                        .iter()
                        .map(|x| x.reason.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            return Ok((result, None));
        }
        result.max_rate_per_replica = rs.max_rate_per_s;
        result.at_max_rate = rs.at_max.as_ref().map(|m| m.steady().clone());
        let start = (self.target / rs.max_rate_per_s).ceil().max(1.0);
        if start > self.max_replicas as f64 {
            result.status = Status::Infeasible;
            result.note = Some(format!(
                "needs about {start} replicas (more than plan.max_replicas = {})",
                self.max_replicas
            ));
            return Ok((result, None));
        }
        let sizing = fleet_sizing::size_fleet(
            &scenario,
            self.origin,
            self.target,
            result.capacity_rate_per_replica,
            start as u32,
            self.max_replicas,
        )?;
        let Some(sizing) = sizing else {
            result.status = Status::Infeasible;
            result.note = Some(format!(
                "{} replicas do not sustain the target (plan.max_replicas)",
                self.max_replicas
            ));
            return Ok((result, None));
        };
        result.simulations += sizing.simulations;
        result.status = Status::Feasible;
        set_fleet(
            &mut result,
            sizing.replicas,
            self.target,
            &sizing.holds,
            self.ratio,
            sizing.fleet_factor(),
            self.base.workload.block_id_tokens().is_some(),
        );
        Ok((result, Some(sizing)))
    }
}

/// The order candidates are ranked in: feasible by $/hour, then more spare capacity first
/// (the rate its replicas sustain together: it carries load spikes better); then pruned by
/// their bound, more capacity first (the same tie-break on what is known of them, so the
/// workbook, which ranks rows in this order, picks among equal bounds as a search would);
/// then infeasible. Every feasible fleet serves the same target, so its $/M output tokens
/// follows its $/hour; the measured figure differs only by noise.
fn rank_key(r: &CandidateResult) -> (u8, f64, f64) {
    let (status, rate) = match r.status {
        Status::Feasible => (0, r.max_rate_per_replica),
        Status::Pruned => (1, r.capacity_rate_per_replica),
        Status::Infeasible => (2, r.max_rate_per_replica),
    };
    (
        status,
        r.cost_at_target.map_or(f64::INFINITY, |c| c.usd_per_hour),
        -(r.replicas as f64 * rate),
    )
}

/// Runs the capacity plan for a base scenario: in steady state at its target load, or, for
/// time-varying traffic (a schedule, the diurnal shape, a trace), at its busiest window
/// (`plan.peak_window_s`) and then over its whole period, static and autoscaled ([`week`]).
pub fn plan(base: &Scenario, origin: &str) -> Result<PlanOutput> {
    plan_with_progress(base, origin, &NoProgress)
}

/// [`plan`], reporting its stages and steps to `progress` as it goes.
pub fn plan_with_progress(
    base: &Scenario,
    origin: &str,
    progress: &dyn Progress,
) -> Result<PlanOutput> {
    if !week::is_time_varying(base) {
        let mut out = plan_steady(base, origin, progress)?;
        out.plan.recommendation = out.plan.recommend();
        return Ok(out);
    }
    // Check the scenario as written; the autoscaler's capacity is the plan's to measure.
    let mut check = base.clone();
    if let Some(a) = &mut check.autoscale {
        a.capacity_rate_per_replica.get_or_insert(1.0);
    }
    check.resolve(origin)?;
    let window_s = base.plan.peak_window_s.unwrap_or(week::PEAK_WINDOW_S);
    let load = week::period_load(base, origin, window_s)?;
    let peak = load.peak_rate_per_s;
    if peak <= 0.0 {
        return Err(Error::config(
            origin,
            "workload.arrival",
            "the period has no arrivals to plan for",
        ));
    }
    let mut at_peak = base.clone();
    at_peak.plan.target_rate_per_s = Some(peak);
    at_peak.autoscale = None;
    at_peak.faults = None;
    let mut out = plan_steady(&at_peak, origin, progress)?;
    // The re-run lines start from the file as written: Poisson arrivals at the peak, its
    // autoscaler pinned, no faults.
    let scale = out.plan.method.step_time_scale;
    if let (Some(i), Some(d)) = (out.plan.chosen, out.plan.detail.as_mut()) {
        d.run_command = colocated_run_overrides(
            base,
            &out.plan.candidates[i].candidate,
            d.fleet.replicas,
            peak,
            scale,
        )
        .map(|mut sets| {
            sets.extend(length_overrides(base, &d.verification));
            run_line(origin, &sets, base.seed)
        });
    }
    if let Some(x) = out.plan.disaggregated.as_mut() {
        x.run_command = x.best.and_then(|i| {
            let mut sets = x.candidates[i].overrides();
            sets.extend(load_overrides(base, peak, None)?);
            sets.extend(
                x.evidence
                    .as_ref()
                    .map(|e| length_overrides(base, &e.holds))?,
            );
            Some(run_line(origin, &sets, base.seed))
        });
    }
    progress.stage("the whole period, static and autoscaled");
    progress.add(1);
    let mut w = week::plan_week(base, origin, &out.plan.candidates, &load, scale)?;
    progress.done(1);
    // The static fleet over the period as written (its arrivals, its autoscaler pinned).
    for c in &mut w.candidates {
        c.static_run_command =
            rerun::static_overrides(base, &c.candidate, c.static_replicas, scale)
                .map(|sets| run_line(origin, &sets, base.seed));
    }
    out.plan.week = Some(w);
    out.plan.recommendation = out.plan.recommend();
    Ok(out)
}

/// The steady-state plan at the scenario's target load.
/// The plan's target load, req/s: `plan.target_rate_per_s`, else the workload's mean rate.
fn plan_target(base: &Scenario, origin: &str) -> Result<f64> {
    match base
        .plan
        .target_rate_per_s
        .or(base.workload.mean_rate_per_s())
    {
        Some(r) if r.is_finite() && r > 0.0 => Ok(r),
        Some(r) => Err(Error::config(
            origin,
            "plan.target_rate_per_s",
            format!("must be finite and > 0 req/s, got {r}"),
        )),
        None => Err(Error::config(
            origin,
            "plan.target_rate_per_s",
            "needs a target load: set plan.target_rate_per_s or a workload arrival rate",
        )),
    }
}

/// When no candidate of the search space can run, the input itself is wrong: the base's
/// error if it has one, else every candidate's reason.
fn check_some_candidate_runs(
    base: &Scenario,
    origin: &str,
    space: &[Candidate],
    entries: &[Result<(f64, u64)>],
) -> Result<()> {
    if !entries.iter().all(|e| e.is_err()) {
        return Ok(());
    }
    base.resolve(origin)?;
    let reasons: Vec<String> = space
        .iter()
        .zip(entries)
        .filter_map(|(c, e)| e.as_ref().err().map(|e| format!("{}: {e}", c.label())))
        .collect();
    let shown = reasons.len().min(20);
    let more = match reasons.len() - shown {
        0 => String::new(),
        n => format!("\n  ... and {n} more"),
    };
    Err(Error::config(
        origin,
        "plan",
        format!(
            "none of the {} candidates of the search space can run:\n  {}{more}",
            space.len(),
            reasons[..shown].join("\n  ")
        ),
    ))
}

fn plan_steady(base: &Scenario, origin: &str, progress: &dyn Progress) -> Result<PlanOutput> {
    let target = plan_target(base, origin)?;
    // Every name of the search space goes through the catalog's resolver: an unknown one is
    // an error naming its key; aliases become catalog names.
    let base = &checked_search_space(base, origin)?;
    base.measure.validate(origin)?;
    let threshold = base.plan.goodput_threshold.unwrap_or(0.9);
    let column = price_column(base, origin)?;
    let prices = PriceCatalog::embedded()?;
    let space = search_space(base);
    // The scenario's own deployment is only a default: the search space decides. A candidate
    // that cannot run (no price, does not resolve) is reported with its reason; when none
    // can, the input itself is wrong: the base's error if it has one, else every reason.
    let entries: Vec<Result<(f64, u64)>> = space
        .par_iter()
        .map(|c| entry_check(base, origin, c, &prices, column))
        .collect();
    check_some_candidate_runs(base, origin, &space, &entries)?;
    let validated = validated_headroom(base)?;
    let ctx = Ctx {
        base,
        origin,
        progress,
        target,
        ratio: base.pricing.input_output_price_ratio.unwrap_or(0.25),
        max_replicas: base
            .plan
            .max_replicas
            .unwrap_or(DEFAULT_MAX_REPLICAS)
            .max(1),
        scale: 1.0
            + base
                .plan
                .headroom
                .unwrap_or(0.0)
                .max(validated.unwrap_or(0.0)),
        memo: Memo::default(),
        requests_per_unit: requests_per_session(base, origin)?,
    };

    let prelim = capacities(&ctx, &space, entries);
    let (done, sizings) = search_in_bound_order(&ctx, prelim)?;
    let mut simulations: u64 = done.iter().map(|r| r.simulations).sum();

    let (mut candidates, chosen_sizing) = rank_candidates(done, sizings);
    let chosen = chosen_sizing.as_ref().map(|_| 0);
    let near_tie = near_tie(&candidates, measure::rate_unit(base));
    let (nearest_slo, slo_below_floor) = infeasible_notes(base, origin, &candidates, chosen);

    // Phase 3: what the chosen plan is measured on beyond the search, and the curves of the
    // cheapest feasible candidates.
    progress.stage("the chosen fleet: whole-fleet evidence, headroom, batch point, curves");
    progress.add(2);
    let mut detail = None;
    let mut verification_run = None;
    let curves = cheapest_curves(&ctx, &candidates);
    progress.done(1);
    if let (Some(i), Some(sizing)) = (chosen, chosen_sizing) {
        let (d, sims) = chosen_detail(&ctx, &mut candidates[i], sizing)?;
        simulations += sims;
        verification_run = d.verification.result.clone();
        detail = Some(d);
    }
    progress.done(1);
    for c in curves {
        let (i, curve, sims) = c?;
        candidates[i].curve = curve;
        simulations += sims;
    }
    // Tokens per request as the chosen fleet's cost figures count them: its window's
    // tokens/s over the target.
    let (input_tokens_per_request, output_tokens_per_request) = chosen.map_or((0.0, 0.0), |i| {
        (
            candidates[i].fleet_input_tokens_per_s / target,
            candidates[i].fleet_output_tokens_per_s / target,
        )
    });
    let gpu_prices = price_table(base, &space, &prices);
    let chosen_usd_per_hour =
        chosen.and_then(|i| candidates[i].cost_at_target.map(|c| c.usd_per_hour));
    let disaggregated = xpyd_plan(&ctx, &prices, column, chosen_usd_per_hour);
    if let Some(x) = &disaggregated {
        simulations += x.candidates.iter().map(|c| c.simulations).sum::<u64>();
    }
    let speculation = speculation_verdict(
        base,
        ctx.origin,
        &candidates,
        chosen,
        input_tokens_per_request + output_tokens_per_request / 2.0,
    );
    Ok(PlanOutput {
        plan: PlanResult {
            target_rate_per_s: target,
            goodput_threshold: threshold,
            price_column: column,
            candidates,
            chosen,
            detail,
            near_tie,
            nearest_slo,
            slo_below_floor,
            gpu_prices,
            input_tokens_per_request,
            output_tokens_per_request,
            input_output_price_ratio: ctx.ratio,
            method: method(base, ctx.scale, validated),
            week: None,
            simulations,
            disaggregated,
            recommendation: None,
            speculation,
            rate_unit: (base.workload.sessions.is_some()).then(|| measure::rate_unit(base).into()),
        },
        verification_run,
    })
}

/// Mean requests one session sends (the mean of `workload.sessions.turns`, as the request
/// generator counts it) for a session workload; 1 otherwise (one arrival, one request).
fn requests_per_session(base: &Scenario, origin: &str) -> Result<f64> {
    if base.workload.sessions.is_none() {
        return Ok(1.0);
    }
    // At one session per second the generator's request rate is the mean turns.
    let mut w = base.workload.clone();
    w.arrival = crate::workload::ArrivalConfig::Poisson { rate_per_s: 1.0 };
    let turns = crate::workload::RequestGenerator::new(&w, base.seed, origin)?
        .mean_rate_per_s()
        .unwrap_or(1.0);
    Ok(if turns.is_finite() && turns >= 1.0 {
        turns
    } else {
        1.0
    })
}

/// The price column `pricing.column` names (on-demand by default).
fn price_column(base: &Scenario, origin: &str) -> Result<PriceColumn> {
    match &base.pricing.column {
        Some(c) => c
            .parse()
            .map_err(|e: String| Error::config(origin, "pricing.column", e)),
        None => Ok(PriceColumn::OnDemand),
    }
}

/// How the plan measured: the steady-state analysis, run lengths, rate precision and the
/// step-time scale (`validated`: the headroom the validation set, if any).
fn method(base: &Scenario, step_time_scale: f64, validated: Option<f64>) -> Method {
    Method {
        analysis: base.measure.analysis(),
        min_requests_per_replica: base.measure.min_requests,
        max_requests_per_replica: base.measure.max_requests,
        fleet_min_requests: FLEET_MIN_REQUESTS,
        rate_precision: RATE_PRECISION,
        step_time_scale,
        validated_headroom: validated,
    }
}

/// Phase 1 of the search: every candidate's capacity, in parallel (`entries`: each one's
/// entry check, [`entry_check`]).
fn capacities(ctx: &Ctx<'_>, space: &[Candidate], entries: Vec<Result<(f64, u64)>>) -> Vec<Phase1> {
    let progress = ctx.progress;
    progress.stage("capacity of each candidate");
    progress.add(space.len() as u64);
    space
        .par_iter()
        .zip(entries.into_par_iter())
        .map(|(c, e)| {
            let p = ctx.prelim(c, e);
            progress.done(1);
            p
        })
        .collect()
}

/// The prefill/decode-disaggregated candidates beside the colocated plan, when
/// `plan.disaggregated` asks for them (by default when the scenario's deployment is
/// disaggregated); `chosen_usd_per_hour`: the colocated plan's cost, to compare with.
fn xpyd_plan(
    ctx: &Ctx<'_>,
    prices: &PriceCatalog,
    column: PriceColumn,
    chosen_usd_per_hour: Option<f64>,
) -> Option<DisaggPlan> {
    let base = ctx.base;
    let wants_xpyd = base
        .plan
        .disaggregated
        .unwrap_or(base.deployment.mode == crate::scenario::DeploymentMode::Disaggregated);
    wants_xpyd.then(|| {
        ctx.progress
            .stage("prefill/decode-disaggregated candidates");
        disagg::plan_xpyd(
            &disagg::XpydCtx {
                base,
                origin: ctx.origin,
                target: ctx.target,
                ratio: ctx.ratio,
                max_replicas: ctx.max_replicas,
                scale: ctx.scale,
                prices,
                column,
            },
            chosen_usd_per_hour,
        )
    })
}

/// Phase 2 of the search: the candidates ready after phase 1 in order of their capacity
/// bound, in waves as wide as the thread pool, stopping (unless `plan.exhaustive`) when the
/// next bound costs more than the best fleet found; the rest are marked pruned. Returns every
/// candidate's result, with its fleet sizing beside it where it was sized.
#[allow(clippy::type_complexity)]
fn search_in_bound_order(
    ctx: &Ctx<'_>,
    prelim: Vec<Phase1>,
) -> Result<(Vec<CandidateResult>, Vec<Option<FleetSizing>>)> {
    let progress = ctx.progress;
    progress.stage("rate search and fleet sizing");
    let mut done: Vec<CandidateResult> = Vec::new();
    let mut sizings: Vec<Option<FleetSizing>> = Vec::new();
    let mut queue: Vec<Prelim> = Vec::new();
    for p in prelim {
        match p {
            Phase1::Ready(p) => queue.push(*p),
            Phase1::Done(r) => {
                done.push(*r);
                sizings.push(None);
            }
        }
    }
    // Phase 2: in order of the capacity bound, in waves as wide as the thread pool; stop when
    // the next bound costs more than the best fleet found.
    queue.sort_by(|a, b| a.bound_usd_per_hour.total_cmp(&b.bound_usd_per_hour));
    let exhaustive = ctx.base.plan.exhaustive.unwrap_or(false);
    let wave = rayon::current_num_threads().max(2);
    let mut best = f64::INFINITY;
    let mut rest = queue.into_iter().peekable();
    while rest.peek().is_some() {
        let mut batch = Vec::new();
        while batch.len() < wave {
            match rest.peek() {
                Some(p) if exhaustive || p.bound_usd_per_hour <= best * (1.0 + 1e-9) => {
                    batch.extend(rest.next());
                }
                _ => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        progress.add(batch.len() as u64);
        let searched: Vec<Result<(CandidateResult, Option<FleetSizing>)>> = batch
            .into_par_iter()
            .map(|p| {
                let r = ctx.search(p);
                progress.done(1);
                r
            })
            .collect();
        for s in searched {
            let (r, sz) = s?;
            if let Some(c) = r.cost_at_target.filter(|_| r.status == Status::Feasible) {
                best = best.min(c.usd_per_hour);
            }
            done.push(r);
            sizings.push(sz);
        }
    }
    for p in rest {
        let mut r = p.result;
        r.status = Status::Pruned;
        r.cost_at_target = Some(cost(r.gpus, r.price_usd_per_gpu_hour, 0.0, 0.0, ctx.ratio));
        r.note = Some(format!(
            "not searched: at capacity {} replica(s), ${:.2}/hour, already cost more than the plan",
            r.replicas, p.bound_usd_per_hour
        ));
        done.push(r);
        sizings.push(None);
    }
    Ok((done, sizings))
}

/// The candidates ranked ([`rank_key`], ties by search order), and the first one's fleet
/// sizing when it is feasible.
fn rank_candidates(
    done: Vec<CandidateResult>,
    sizings: Vec<Option<FleetSizing>>,
) -> (Vec<CandidateResult>, Option<FleetSizing>) {
    // Rank; keep each candidate's sizing beside it.
    let mut order: Vec<usize> = (0..done.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (rank_key(&done[a]), rank_key(&done[b]));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(a.cmp(&b))
    });
    let mut slots: Vec<Option<(CandidateResult, Option<FleetSizing>)>> =
        done.into_iter().zip(sizings).map(Some).collect();
    let mut candidates = Vec::with_capacity(order.len());
    let mut chosen_sizing = None;
    for (rank, i) in order.into_iter().enumerate() {
        let (r, sz) = slots[i].take().expect("each index once");
        if rank == 0 && r.status == Status::Feasible {
            chosen_sizing = sz;
        }
        candidates.push(r);
    }
    (candidates, chosen_sizing)
}

/// The rate curves of the [`CURVES`] cheapest feasible candidates, in parallel: (index in
/// `candidates`, curve, simulations).
fn cheapest_curves(
    ctx: &Ctx<'_>,
    candidates: &[CandidateResult],
) -> Vec<Result<(usize, Vec<CurvePoint>, u64)>> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.status == Status::Feasible)
        .take(CURVES)
        .map(|(i, c)| {
            (
                i,
                c.candidate.clone(),
                c.capacity_rate_per_replica,
                c.price_usd_per_gpu_hour,
            )
        })
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(i, c, capacity, price)| {
            let one = candidate_scenario(ctx.base, &c, ctx.scale);
            let (curve, sims) = curve::rate_curve(&one, ctx.origin, capacity, price)?;
            Ok((i, curve, sims))
        })
        .collect()
}

/// The chosen plan's evidence, headroom and batch point: the whole fleet at R measured until
/// its figures converge and R - 1 at the same run length ([`fleet_sizing::line_evidence`], which
/// moves R where that evidence says so), then the headroom (on a shard for a large fleet) and
/// the batch point in parallel.
fn chosen_detail(
    ctx: &Ctx<'_>,
    chosen: &mut CandidateResult,
    mut sizing: FleetSizing,
) -> Result<(ChosenDetail, u64)> {
    let one = candidate_scenario(ctx.base, &chosen.candidate, ctx.scale);
    let capacity = chosen.capacity_rate_per_replica;
    ctx.progress.stage(&format!(
        "the whole fleet of {} replicas at {:.0} {}, and one fewer",
        sizing.replicas,
        ctx.target,
        measure::rate_unit(ctx.base)
    ));
    let ev = fleet_sizing::line_evidence(
        &one,
        ctx.origin,
        ctx.target,
        capacity,
        sizing.replicas,
        ctx.max_replicas,
    )?;
    let mut sims = ev.simulations;
    if ev.replicas != sizing.replicas {
        sizing.probes.push(FleetProbe {
            replicas: ev.replicas,
            sustainable: ev.verification.sustainable(),
        });
    }
    sizing.replicas = ev.replicas;
    sizing.one_fewer = ev.one_fewer.clone();
    let verification = ev.verification;
    set_fleet(
        chosen,
        sizing.replicas,
        ctx.target,
        &verification,
        ctx.ratio,
        1.0,
        ctx.base.workload.block_id_tokens().is_some(),
    );
    // A large fleet's headroom is measured on a shard at its share of the target.
    let r = sizing.replicas;
    let (headroom_sc, headroom_target, shard) = if r > fleet_sizing::FULL_SIZING_MAX {
        let k = fleet_sizing::SHARD_REPLICAS;
        (
            fleet_sizing::with_replicas(&one, k),
            ctx.target * k as f64 / r as f64,
            Some(k),
        )
    } else {
        (fleet_sizing::with_replicas(&one, r), ctx.target, None)
    };
    let (headroom, batch) = rayon::join(
        || fleet_sizing::model_headroom(&headroom_sc, ctx.origin, headroom_target, capacity),
        || batch_point(ctx, chosen, &one),
    );
    let mut headroom = headroom?;
    headroom.shard = shard;
    let (batch, batch_sims) = batch?;
    sims += headroom.simulations + batch_sims;
    let run_command = colocated_run_overrides(
        ctx.base,
        &chosen.candidate,
        sizing.replicas,
        ctx.target,
        ctx.scale,
    )
    .map(|mut sets| {
        sets.extend(length_overrides(ctx.base, &verification));
        run_line(ctx.origin, &sets, ctx.base.seed)
    });
    Ok((
        ChosenDetail {
            fleet: sizing,
            run_requests: verification.requests,
            verification,
            unresolved: ev.unresolved,
            headroom,
            batch,
            run_command,
        },
        sims,
    ))
}

/// The batch point of the chosen deployment and the discount as the TPOT SLO moves.
fn batch_point(ctx: &Ctx<'_>, c: &CandidateResult, one: &Scenario) -> Result<(BatchPoint, u64)> {
    let price = c.price_usd_per_gpu_hour;
    let tp = c.candidate.gpus();
    let at_capacity = c
        .cost_at_capacity
        .map_or(0.0, |x| x.usd_per_million_output_tokens);
    let per_m = |s: &SteadyState| {
        cost(tp, price, s.output_throughput.value, 0.0, ctx.ratio).usd_per_million_output_tokens
    };
    let at_slo = c.at_max_rate.as_ref().map_or(0.0, per_m);
    let discount = |x: f64| if x > 0.0 { 1.0 - at_capacity / x } else { 0.0 };
    let base_tpot = one.slo.tpot_ms;
    let tpots: Vec<f64> = match base_tpot {
        Some(t) => vec![0.25 * t, 0.5 * t, t, 2.0 * t],
        None => vec![20.0, 40.0, 80.0, 160.0],
    };
    let rows: Vec<Result<(TpotRow, u64)>> = tpots
        .par_iter()
        .map(|&t| {
            if base_tpot == Some(t) {
                return Ok((
                    TpotRow {
                        tpot_ms: t,
                        max_rate_per_replica: c.max_rate_per_replica,
                        usd_per_million: at_slo,
                        discount: discount(at_slo),
                    },
                    0,
                ));
            }
            let mut s = one.clone();
            s.slo.tpot_ms = Some(t);
            let rs = search::max_sustainable_rate(&s, ctx.origin, c.capacity_rate_per_replica)?;
            let usd = rs.at_max.as_ref().map_or(0.0, |m| per_m(m.steady()));
            Ok((
                TpotRow {
                    tpot_ms: t,
                    max_rate_per_replica: rs.max_rate_per_s,
                    usd_per_million: usd,
                    discount: discount(usd),
                },
                rs.simulations,
            ))
        })
        .collect();
    let mut by_tpot = Vec::new();
    let mut sims = 0;
    for r in rows {
        let (row, n) = r?;
        by_tpot.push(row);
        sims += n;
    }
    Ok((
        BatchPoint {
            usd_per_million_at_capacity: at_capacity,
            usd_per_million_at_slo: at_slo,
            discount: discount(at_slo),
            by_tpot,
        },
        sims,
    ))
}

/// The step-time headroom the model's out-of-sample error on the embedded reference rows
/// calls for at `plan.headroom_coverage` (`None` when not asked for): the upper end of the
/// prediction interval of step time that `servesim validate` prints, from the committed
/// cross-validation (calibration/validation/out-of-sample.csv).
fn validated_headroom(base: &Scenario) -> Result<Option<f64>> {
    let Some(coverage) = base.plan.headroom_coverage else {
        return Ok(None);
    };
    crate::validate::cv::committed_step_time_headroom(coverage)
}

/// Most replicas a plan may use unless `plan.max_replicas` says otherwise: as many as a
/// simulation takes.
pub const DEFAULT_MAX_REPLICAS: u32 = 100_000;

/// Feasible candidates whose one-replica curve is measured (the cheapest first).
const CURVES: usize = 10;

/// Prices of every GPU type of the search space that has one.
fn price_table(base: &Scenario, space: &[Candidate], prices: &PriceCatalog) -> Vec<GpuPriceRow> {
    let mut gpus: Vec<&str> = space.iter().map(|c| c.gpu.as_str()).collect();
    gpus.dedup();
    gpus.sort_unstable();
    gpus.dedup();
    gpus.into_iter()
        .filter_map(|g| {
            let at = |col| prices.price_with(&base.pricing, g, col).ok();
            Some(GpuPriceRow {
                gpu: g.to_string(),
                on_demand: at(PriceColumn::OnDemand)?,
                reserved: at(PriceColumn::Reserved)?,
                spot: at(PriceColumn::Spot)?,
            })
        })
        .collect()
}

/// Spare-capacity margin below which two equally priced plans are within the search's noise.
const NOISE_SHARE: f64 = 0.03;

fn near_tie(c: &[CandidateResult], unit: &str) -> Option<String> {
    let (a, b) = (c.first()?, c.get(1)?);
    if a.status != Status::Feasible || b.status != Status::Feasible {
        return None;
    }
    let (ca, cb) = (a.cost_at_target?, b.cost_at_target?);
    if (ca.usd_per_hour - cb.usd_per_hour).abs() > 1e-9 * ca.usd_per_hour.max(1.0) {
        return None;
    }
    let sa = a.replicas as f64 * a.max_rate_per_replica;
    let sb = b.replicas as f64 * b.max_rate_per_replica;
    let gap = (sa - sb).abs() / sa.max(sb).max(1e-12);
    (gap < NOISE_SHARE).then(|| {
        let name = |r: &CandidateResult| r.candidate.label();
        format!(
            "the top two are within noise: {} and {} both cost ${:.2}/hour, and their fleets sustain {:.2} and {:.2} {unit} ({:.1}% apart; the search resolves about {:.0}%)",
            name(a),
            name(b),
            ca.usd_per_hour,
            sa,
            sb,
            100.0 * gap,
            100.0 * NOISE_SHARE
        )
    })
}

/// When no candidate is feasible: the loosest-needed SLOs, scaled from the scenario's, that
/// the candidate closest to meeting them reaches at light load.
/// What a plan with no feasible candidate (`chosen` is `None`) says about its SLOs: the
/// nearest SLOs some candidate meets at light load, and any SLO below one forward pass.
fn infeasible_notes(
    base: &Scenario,
    origin: &str,
    candidates: &[CandidateResult],
    chosen: Option<usize>,
) -> (Option<String>, Option<String>) {
    if chosen.is_some() {
        return (None, None);
    }
    (
        nearest_slo(base, candidates),
        floor::slo_below_floor(base, origin, candidates),
    )
}

fn nearest_slo(base: &Scenario, c: &[CandidateResult]) -> Option<String> {
    let s = &base.slo;
    let best = c
        .iter()
        .filter_map(|r| r.light_load.map(|l| (r, l)))
        .map(|(r, l)| {
            let ratios = [
                s.ttft_ms.map(|t| l.ttft_ms / t),
                s.tpot_ms.map(|t| l.tpot_ms / t),
                s.e2e_ms.map(|t| l.e2e_ms / t),
            ];
            let worst = ratios.into_iter().flatten().fold(0.0f64, f64::max);
            (worst, r, l)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    let (_, r, l) = best;
    let mut parts = Vec::new();
    if s.ttft_ms.is_some() {
        parts.push(format!(
            "p{} TTFT <= {:.0} ms",
            s.ttft_percentile,
            l.ttft_ms.ceil()
        ));
    }
    if s.tpot_ms.is_some() {
        parts.push(format!(
            "p{} TPOT <= {:.1} ms",
            s.tpot_percentile, l.tpot_ms
        ));
    }
    if s.e2e_ms.is_some() {
        parts.push(format!(
            "p{} E2E <= {:.0} ms",
            s.e2e_percentile,
            l.e2e_ms.ceil()
        ));
    }
    Some(format!(
        "the nearest SLOs any candidate meets: {} ({} at light load, {:.3} {} per replica)",
        parts.join(", "),
        r.candidate.label(),
        l.rate_per_s,
        measure::rate_unit(base)
    ))
}
