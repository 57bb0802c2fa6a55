//! Plans over a period (a day, a week) of time-varying traffic. SLOs are judged over minutes,
//! not hourly means, so the steady-state plan is made at the busiest window of
//! `plan.peak_window_s` (5 minutes by default): it picks the candidates and the static fleet.
//! The static fleet is then checked by simulating the whole period with it, every request, no
//! autoscaler: it must meet every SLO at its percentile and the goodput threshold over the
//! period, else it grows until it does. Each candidate's fleets of 1..N replicas are measured
//! for the highest rate they sustain, which sizes the fleet hour by hour (for each hour's
//! busiest window); and the whole period is simulated with the scenario's autoscaler (and its
//! faults), its cost and SLO attainment per hour set beside the static fleet's.

use std::collections::HashSet;

use rayon::prelude::*;
use serde::Serialize;

use super::fleet_sizing::FULL_SIZING_MAX;
use super::{candidate_scenario, search, CandidateResult, Status};
use crate::error::{Error, Result};
use crate::metrics::PeriodSummary;
use crate::scenario::{AutoscaleSection, Scenario};
use crate::summary::RunSummary;
use crate::workload::{ArrivalConfig, RequestGenerator, NO_SESSION};

/// Seconds in a period of the week plan (an hour).
pub const PERIOD_S: f64 = 3600.0;
/// [`PERIOD_S`] on the clock, ns.
const PERIOD_NS: u64 = 3600 * 1_000_000_000;
/// Seconds of one bin of the period's arrival counts (a minute).
const BIN_S: f64 = 60.0;
/// [`BIN_S`] on the clock, ns.
const BIN_NS: u64 = 60 * 1_000_000_000;
/// Default length of the busiest window the static fleet is sized for, s.
pub const PEAK_WINDOW_S: f64 = 300.0;
/// Candidates (the cheapest at the peak) whose whole period is simulated.
const CANDIDATES: usize = 2;
/// Default share of the period's requests that must meet every SLO.
const ATTAINMENT_TARGET: f64 = 0.99;

/// Whether `sc`'s arrivals vary over time (a schedule, the diurnal shape or a trace), so that
/// a plan must cover its whole period.
pub fn is_time_varying(sc: &Scenario) -> bool {
    matches!(
        sc.workload.arrival,
        ArrivalConfig::Schedule { .. }
            | ArrivalConfig::Diurnal { .. }
            | ArrivalConfig::Trace { .. }
    )
}

/// The load of a period, counted from its request stream (so a trace, a schedule and the
/// diurnal shape are treated alike): hourly means and the busiest windows. Rates are in the
/// unit the plan's search targets ([`super::measure::rate_unit`]): requests/s, or for a
/// session workload (`[workload.sessions]`) session starts/s, each session counted once, at
/// its first request.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodLoad {
    /// Arrival rate of each hour, in `rate_unit`.
    pub hourly: Vec<f64>,
    /// Length of the windows, s.
    pub window_s: f64,
    /// The busiest window's arrival rate, in `rate_unit`.
    pub peak_rate_per_s: f64,
    /// Where the busiest window starts, s.
    pub peak_start_s: f64,
    /// The busiest window starting in each hour, in `rate_unit`.
    pub hourly_peak: Vec<f64>,
    /// `sessions/s` for a session workload; `None`: req/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_unit: Option<String>,
    /// For a session workload, the request rate of each hour (every turn), req/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hourly_requests: Option<Vec<f64>>,
    /// Mean requests per unit of the rates: the mean turns per session of a session workload
    /// (as the steady-state plan converts), else 1.
    #[serde(skip)]
    pub requests_per_session: f64,
}

/// Per-minute counts of a period's arrivals: the requests, and for a session workload the
/// session starts (each session's first request).
struct MinuteBins {
    /// What the plan targets: requests, or session starts.
    counted: Vec<u32>,
    /// Every request (session workloads only).
    requests: Option<Vec<u32>>,
}

/// Adds one to `bins[b]`, growing it; an error past 100,000 hours.
fn bump(bins: &mut Vec<u32>, b: usize, origin: &str) -> Result<()> {
    if b >= bins.len() {
        if b / (PERIOD_S / BIN_S) as usize > 100_000 {
            return Err(Error::config(
                origin,
                "workload",
                "a period plan covers at most 100,000 hours",
            ));
        }
        bins.resize(b + 1, 0);
    }
    bins[b] = bins[b].saturating_add(1);
    Ok(())
}

/// Counts `sc`'s arrivals per minute ([`MinuteBins`]). A session's first request is the first
/// one carrying its id (ids are never reused; a live session is forgotten at its last turn).
fn minute_bins(sc: &Scenario, origin: &str) -> Result<MinuteBins> {
    let mut gen = RequestGenerator::new(&sc.workload, sc.seed, origin)?;
    let sessions = sc.workload.sessions.is_some();
    let mut counted: Vec<u32> = Vec::new();
    let mut requests: Vec<u32> = Vec::new();
    let mut live: HashSet<u64> = HashSet::new();
    while let Some(r) = gen.next_request() {
        let b = (r.arrival_ns / BIN_NS) as usize;
        if !sessions {
            bump(&mut counted, b, origin)?;
            continue;
        }
        if r.session == NO_SESSION {
            return Err(Error::config(
                origin,
                "workload.sessions",
                "a period plan over sessions counts session starts, and a request came without a session id",
            ));
        }
        bump(&mut requests, b, origin)?;
        let first = !live.contains(&r.session);
        if first {
            bump(&mut counted, b, origin)?;
        }
        if r.last_turn {
            live.remove(&r.session);
        } else if first {
            live.insert(r.session);
        }
    }
    if sessions {
        // Both cover the same minutes (a start is also a request).
        counted.resize(requests.len(), 0);
    }
    Ok(MinuteBins {
        counted,
        requests: sessions.then_some(requests),
    })
}

/// The mean rate of each hour of per-minute counts `bins`, /s.
fn hourly_means(bins: &[u32]) -> Vec<f64> {
    let per_hour = (PERIOD_S / BIN_S) as usize;
    bins.chunks(per_hour)
        .map(|h| h.iter().map(|&x| x as u64).sum::<u64>() as f64 / PERIOD_S)
        .collect()
}

/// Counts the period's arrivals per minute and per hour: the hourly means and the busiest
/// windows of `window_s` (whole minutes, sliding by a minute). For a session workload the
/// counts are session starts ([`PeriodLoad`]).
pub fn period_load(sc: &Scenario, origin: &str, window_s: f64) -> Result<PeriodLoad> {
    let MinuteBins {
        counted: bins,
        requests,
    } = minute_bins(sc, origin)?;
    let per_hour = (PERIOD_S / BIN_S) as usize;
    let hours = bins.len().div_ceil(per_hour);
    let hourly = hourly_means(&bins);
    // Sliding sums of `w` minutes, each window starting at a minute.
    // A stream shorter than the window peaks over its own span (else its rate is diluted).
    let w = ((window_s / BIN_S).round() as usize)
        .max(1)
        .min(bins.len().max(1));
    let mut sum: u64 = bins.iter().take(w).map(|&x| x as u64).sum();
    let mut starts = vec![sum];
    for i in 1..bins.len() {
        sum += bins.get(i + w - 1).map_or(0, |&x| x as u64);
        sum -= bins[i - 1] as u64;
        starts.push(sum);
    }
    let span_s = w as f64 * BIN_S;
    let (peak_i, peak) =
        starts
            .iter()
            .enumerate()
            .fold((0, 0u64), |b, (i, &c)| if c > b.1 { (i, c) } else { b });
    let hourly_peak = (0..hours)
        .map(|h| {
            let end = ((h + 1) * per_hour).min(starts.len());
            starts[h * per_hour..end].iter().copied().max().unwrap_or(0) as f64 / span_s
        })
        .collect();
    Ok(PeriodLoad {
        hourly,
        window_s: span_s,
        peak_rate_per_s: peak as f64 / span_s,
        peak_start_s: peak_i as f64 * BIN_S,
        hourly_peak,
        rate_unit: requests
            .is_some()
            .then(|| super::measure::rate_unit(sc).to_string()),
        hourly_requests: requests.as_deref().map(hourly_means),
        requests_per_session: super::requests_per_session(sc, origin)?,
    })
}

/// The arrival rate of each hour of the period, counted from the request stream itself: req/s,
/// or session starts/s for a session workload ([`PeriodLoad`]).
pub fn hourly_rates(sc: &Scenario, origin: &str) -> Result<Vec<f64>> {
    Ok(period_load(sc, origin, PEAK_WINDOW_S)?.hourly)
}

/// The highest rate a fleet of each size sustains in steady state.
#[derive(Debug, Clone, Serialize)]
pub struct FleetCapacity {
    /// Replicas.
    pub replicas: u32,
    /// Highest arrival rate the fleet sustains within the SLOs, in the plan's rate unit
    /// (req/s, or sessions/s for a session workload).
    pub max_rate_per_s: f64,
}

/// One hour of the period.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HourRow {
    /// Hour since the start.
    pub hour: u32,
    /// Arrival rate in the hour, in the plan's rate unit (req/s, or session starts/s for a
    /// session workload).
    pub arrival_rate_per_s: f64,
    /// For a session workload, the hour's request rate (every turn), req/s; `None` otherwise
    /// (`arrival_rate_per_s` is then the request rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_rate_per_s: Option<f64>,
    /// Replicas the hour-by-hour sizing needs (the smallest fleet that sustains the hour's
    /// rate).
    pub planned_replicas: u32,
    /// Replicas the autoscaled fleet paid for, mean over the hour.
    pub replicas: f64,
    /// Replicas ready to serve, mean over the hour.
    pub ready_replicas: f64,
    /// GPUs paid for, mean over the hour.
    pub gpus: f64,
    /// Share of the hour's requests that met every SLO.
    pub slo_attainment: f64,
    /// The same under the static fleet.
    pub static_slo_attainment: f64,
    /// p99 TTFT of the hour's requests, ms.
    pub p99_ttft_ms: f64,
    /// What the autoscaled fleet cost in the hour, $.
    pub cost_usd: f64,
}

/// One candidate's whole period.
#[derive(Debug, Clone, Serialize)]
pub struct WeekCandidate {
    /// The candidate (its steady-state plan at the peak).
    pub candidate: super::Candidate,
    /// $/GPU-hour.
    pub price_usd_per_gpu_hour: f64,
    /// Replicas of the static fleet: sized in steady state for the busiest window, grown
    /// until the whole period simulated with it meets the SLOs.
    pub static_replicas: u32,
    /// The static fleet over the whole period, no autoscaler: every static size tried, the
    /// last one's figures.
    pub static_period: StaticPeriod,
    /// The `servesim run` line of the static fleet over the period as the scenario writes it
    /// (its autoscaler pinned to the fleet); `None` where `--set` cannot express it (faults).
    pub static_run_command: Option<String>,
    /// The highest rate each fleet size sustains.
    pub fleet_capacity: Vec<FleetCapacity>,
    /// The static fleet over the period, $.
    pub static_cost_usd: f64,
    /// The hour-by-hour sized fleet over the period (paid by the hour, no cold start), $.
    pub planned_cost_usd: f64,
    /// The autoscaled fleet over the period, as simulated, $.
    pub autoscaled_cost_usd: f64,
    /// Share of the period's requests that met every SLO under the autoscaler.
    pub slo_attainment: f64,
    /// Requests that failed (rejected, timed out, lost to a failure).
    pub lost_requests: u64,
    /// Cold start of one replica, s.
    pub cold_start_s: f64,
    /// The whole-run summary of the autoscaled simulation.
    pub summary: RunSummary,
    /// Hour by hour.
    pub hours: Vec<HourRow>,
}

/// A static fleet over the whole period, simulated with every request and no autoscaler.
#[derive(Debug, Clone, Serialize)]
pub struct StaticPeriod {
    /// Replicas.
    pub replicas: u32,
    /// Whether it meets every SLO at its percentile over the period's requests and the
    /// goodput threshold (what `servesim run` of the period reports).
    pub meets_slos: bool,
    /// Share of the period's requests within every SLO.
    pub slo_attainment: f64,
    /// p99 TTFT over the period, ms.
    pub p99_ttft_ms: f64,
    /// p99 TPOT over the period, ms.
    pub p99_tpot_ms: f64,
    /// Every size simulated: (replicas, meets the SLOs).
    pub tried: Vec<(u32, bool)>,
    /// Share of each hour's requests within every SLO.
    #[serde(skip)]
    pub hourly_attainment: Vec<f64>,
}

/// Attainment with and without spare replicas when replicas fail.
#[derive(Debug, Clone, Serialize)]
pub struct SpareCheck {
    /// Spare replicas added to the static fleet.
    pub spares: u32,
    /// Share of requests within every SLO: the static fleet, with the scenario's faults.
    pub attainment_without_spares: f64,
    /// The same with the spares.
    pub attainment_with_spares: f64,
    /// Requests that failed without and with the spares.
    pub lost_without_spares: u64,
    /// Requests that failed with the spares.
    pub lost_with_spares: u64,
}

/// The plan over the period.
#[derive(Debug, Clone, Serialize)]
pub struct WeekPlan {
    /// Hours in the period.
    pub hours: u32,
    /// The busiest window's rate, in `rate_unit` (the steady-state plan's target).
    pub peak_rate_per_s: f64,
    /// Length of that window, s.
    pub peak_window_s: f64,
    /// Where it starts, s since the start of the period.
    pub peak_start_s: f64,
    /// The busiest hour's mean rate, in `rate_unit`.
    pub peak_hour_rate_per_s: f64,
    /// Share of requests that must meet every SLO over the period.
    pub attainment_target: f64,
    /// The chosen candidate's static fleet over the period, $.
    pub static_cost_usd: f64,
    /// Its share of requests within every SLO over the period.
    pub static_slo_attainment: f64,
    /// The chosen candidate's autoscaled fleet over the period, $.
    pub autoscaled_cost_usd: f64,
    /// Its share of requests within every SLO.
    pub slo_attainment: f64,
    /// Its failed requests.
    pub lost_requests: u64,
    /// Index of the chosen one in `candidates`.
    pub chosen: Option<usize>,
    /// The candidates simulated over the whole period, cheapest at the peak first.
    pub candidates: Vec<WeekCandidate>,
    /// With faults: attainment with and without spares.
    pub spares: Option<SpareCheck>,
    /// Findings for people (hours that miss, a cold start that hurts).
    pub notes: Vec<String>,
    /// The unit of the period's arrival rates when it is not requests/s: `sessions/s` for a
    /// session workload, whose rates count session starts (each session's first request):
    /// the peak, the hourly rates and each fleet size's capacity. `None`: req/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_unit: Option<String>,
}

impl WeekPlan {
    /// The chosen candidate's period.
    pub fn chosen_candidate(&self) -> Option<&WeekCandidate> {
        self.chosen.map(|i| &self.candidates[i])
    }
}

/// The highest rate fleets of 1..=`n` replicas of `one` sustain: a steady-state search of each
/// up to [`FULL_SIZING_MAX`] replicas; a larger fleet is credited with the per-replica rate of
/// the largest one searched (a lower bound: pooling only grows with the fleet).
fn fleet_capacities(
    one: &Scenario,
    origin: &str,
    capacity: f64,
    n: u32,
) -> Result<Vec<FleetCapacity>> {
    let searched = n.clamp(1, FULL_SIZING_MAX);
    let mut caps = (1..=searched)
        .into_par_iter()
        .map(|r| {
            let mut s = one.clone();
            s.deployment.replicas = r;
            let rs = search::max_sustainable_rate(&s, origin, capacity * r as f64)?;
            Ok(FleetCapacity {
                replicas: r,
                max_rate_per_s: rs.max_rate_per_s,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let per_replica = caps
        .last()
        .map_or(0.0, |c| c.max_rate_per_s / searched as f64);
    caps.extend((searched + 1..=n).map(|r| FleetCapacity {
        replicas: r,
        max_rate_per_s: per_replica * r as f64,
    }));
    Ok(caps)
}

/// The smallest fleet in `caps` that sustains `rate` (the largest when none does).
fn replicas_for(caps: &[FleetCapacity], rate: f64) -> u32 {
    caps.iter()
        .find(|c| c.max_rate_per_s >= rate)
        .or(caps.last())
        .map_or(1, |c| c.replicas)
}

/// The static fleet of candidate `c` over the whole period, no autoscaler, no faults: from
/// `start` replicas, one more while the period misses an SLO at its percentile or the goodput
/// `threshold` (at most `max_replicas`).
fn static_period(
    base: &Scenario,
    origin: &str,
    c: &CandidateResult,
    scale: f64,
    start: u32,
    max_replicas: u32,
    threshold: f64,
) -> Result<StaticPeriod> {
    let mut tried = Vec::new();
    let mut r = start.max(1);
    loop {
        let mut sc = candidate_scenario(base, &c.candidate, scale);
        sc.plan = Default::default();
        sc.deployment.replicas = r;
        let run = sc.resolve(origin)?.with_periods(PERIOD_NS).run()?;
        let s = &run.summary;
        let meets = s.slo.all_met && s.goodput_share >= threshold;
        tried.push((r, meets));
        if meets || r >= max_replicas {
            return Ok(StaticPeriod {
                replicas: r,
                meets_slos: meets,
                slo_attainment: s.goodput_share,
                p99_ttft_ms: s.p99_ttft_ms,
                p99_tpot_ms: s.p99_tpot_ms,
                tried,
                hourly_attainment: run.periods.iter().map(|p| p.slo_attainment).collect(),
            });
        }
        r += 1;
    }
}

/// Simulates the whole period for candidate `c` with the autoscaler; `sp` is its static
/// fleet over the same period.
fn simulate_period(
    base: &Scenario,
    origin: &str,
    c: &CandidateResult,
    scale: f64,
    load: &PeriodLoad,
    caps: Vec<FleetCapacity>,
    sp: StaticPeriod,
) -> Result<WeekCandidate> {
    let static_replicas = sp.replicas;
    let rates = &load.hourly;
    let mut sc = candidate_scenario(base, &c.candidate, scale);
    sc.plan = Default::default();
    sc.faults = base.faults.clone();
    let mut a: AutoscaleSection = base.autoscale.clone().unwrap_or_else(default_autoscale);
    // The capacity the utilisation policy divides by is this candidate's, as measured, in
    // what the autoscaler counts: requests (a session's every turn), so a rate in sessions/s
    // times the mean requests per session.
    a.capacity_rate_per_replica =
        Some((c.rate_in_fleet_per_replica * load.requests_per_session).max(1e-9));
    if base
        .autoscale
        .as_ref()
        .is_none_or(|x| x.max_replicas == default_autoscale().max_replicas)
    {
        a.max_replicas = a.max_replicas.max(static_replicas + 2);
    }
    // The period starts in operation, not from an empty fleet: with as many replicas as the
    // first hour needs, and under the utilisation policy as many as that policy holds at the
    // first hour's load (else a slow cold start at t = 0 would show as a miss the policy
    // never causes in steady operation).
    let rate0 = rates.first().copied().unwrap_or(0.0);
    let mut first = replicas_for(&caps, rate0);
    if a.policy == "utilization" {
        let per_replica = a.target_utilization * c.rate_in_fleet_per_replica;
        if per_replica > 0.0 {
            first = first.max((rate0 / per_replica).ceil().min(u32::MAX as f64) as u32);
        }
    }
    a.initial_replicas = Some(
        a.initial_replicas
            .unwrap_or(first)
            .clamp(a.min_replicas, a.max_replicas.max(a.min_replicas)),
    );
    sc.deployment.replicas = a.initial_replicas.unwrap_or(1);
    sc.autoscale = Some(a);
    let resolved = sc.resolve(origin)?.with_periods(PERIOD_NS);
    let cold_start_s = sc
        .autoscale
        .as_ref()
        .map_or(0.0, |a| a.cold_start_s(&resolved.deployment));
    let run = resolved.run()?;
    let price = c.price_usd_per_gpu_hour;
    let tp = c.candidate.gpus() as f64;
    let period_hours = rates.len() as f64 * PERIOD_S / 3600.0;
    let per: &[PeriodSummary] = &run.periods;
    let mut hours = Vec::with_capacity(rates.len());
    let mut planned_cost = 0.0;
    for (h, &rate) in rates.iter().enumerate() {
        let p = per.get(h);
        // Each hour sized for its busiest window, as the static fleet is for the period's.
        let planned = replicas_for(&caps, load.hourly_peak.get(h).copied().unwrap_or(rate));
        planned_cost += planned as f64 * tp * price * PERIOD_S / 3600.0;
        let billed = p.map_or(0.0, |p| p.billed_replicas);
        hours.push(HourRow {
            hour: h as u32,
            arrival_rate_per_s: rate,
            request_rate_per_s: load
                .hourly_requests
                .as_ref()
                .map(|r| r.get(h).copied().unwrap_or(0.0)),
            planned_replicas: planned,
            replicas: billed,
            ready_replicas: p.map_or(0.0, |p| p.ready_replicas),
            gpus: billed * tp,
            slo_attainment: p.map_or(1.0, |p| p.slo_attainment),
            static_slo_attainment: sp.hourly_attainment.get(h).copied().unwrap_or(1.0),
            p99_ttft_ms: p.map_or(0.0, |p| p.p99_ttft_ms),
            cost_usd: billed * tp * price * PERIOD_S / 3600.0,
        });
    }
    let s = &run.summary;
    Ok(WeekCandidate {
        candidate: c.candidate.clone(),
        price_usd_per_gpu_hour: price,
        static_replicas,
        static_period: sp,
        static_run_command: None,
        fleet_capacity: caps,
        static_cost_usd: static_replicas as f64 * tp * price * period_hours,
        planned_cost_usd: planned_cost,
        autoscaled_cost_usd: s.billed_replica_hours * tp * price,
        slo_attainment: s.goodput_share,
        lost_requests: s.failed,
        cold_start_s,
        summary: s.clone(),
        hours,
    })
}

/// The autoscaler a period plan simulates when the scenario has none: utilisation at 80% of
/// the capacity the plan measured.
fn default_autoscale() -> AutoscaleSection {
    toml::from_str("").expect("every [autoscale] key has a default or is optional")
}

/// Plans the period of a time-varying scenario from its steady-state plan at the busiest
/// window (`peak`: candidates ranked as the plan ranked them).
pub fn plan_week(
    base: &Scenario,
    origin: &str,
    peak: &[CandidateResult],
    load: &PeriodLoad,
    scale: f64,
) -> Result<WeekPlan> {
    let rates = &load.hourly;
    let threshold = base.plan.goodput_threshold.unwrap_or(0.9);
    let max_replicas = base
        .plan
        .max_replicas
        .unwrap_or(super::DEFAULT_MAX_REPLICAS)
        .max(1);
    let attainment_target = base
        .plan
        .goodput_threshold
        .map_or(ATTAINMENT_TARGET, |g| g.max(ATTAINMENT_TARGET));
    let chosen_at_peak: Vec<&CandidateResult> = peak
        .iter()
        .filter(|c| c.status == Status::Feasible)
        .take(CANDIDATES)
        .collect();
    let candidates: Vec<WeekCandidate> = chosen_at_peak
        .par_iter()
        .map(|c| {
            let mut one = candidate_scenario(base, &c.candidate, scale);
            one.autoscale = None;
            one.faults = None;
            let (sp, caps) = rayon::join(
                || static_period(base, origin, c, scale, c.replicas, max_replicas, threshold),
                || fleet_capacities(&one, origin, c.capacity_rate_per_replica, c.replicas),
            );
            simulate_period(base, origin, c, scale, load, caps?, sp?)
        })
        .collect::<Result<Vec<_>>>()?;
    // The cheapest autoscaled fleet that meets the attainment target, else the best one. Costs
    // compare to the cent, so that a tie keeps the plan's ranking (its headline's candidate
    // first) instead of a difference of float rounding in the replica-hours.
    let cents = |w: &WeekCandidate| (w.autoscaled_cost_usd * 100.0).round();
    let chosen = candidates
        .iter()
        .enumerate()
        .filter(|(_, w)| w.slo_attainment >= attainment_target)
        .min_by(|a, b| cents(a.1).total_cmp(&cents(b.1)))
        .or_else(|| {
            candidates
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.slo_attainment.total_cmp(&b.1.slo_attainment))
        })
        .map(|(i, _)| i);
    let mut notes = Vec::new();
    if let Some(given) = base
        .autoscale
        .as_ref()
        .and_then(|a| a.capacity_rate_per_replica)
    {
        notes.push(if load.rate_unit.is_some() {
            format!(
                "autoscale.capacity_rate_per_replica ({given} req/s) is replaced by each candidate's measured rate per replica (its sessions/s times the mean requests per session, {:.2}: the autoscaler counts requests)",
                load.requests_per_session
            )
        } else {
            format!(
                "autoscale.capacity_rate_per_replica ({given} req/s) is replaced by each candidate's measured rate per replica"
            )
        });
    }
    let spares = match (chosen, &base.faults) {
        (Some(i), Some(f)) => Some(spare_check(
            base,
            origin,
            chosen_at_peak[i],
            scale,
            &candidates[i],
            f.spares,
        )?),
        _ => None,
    };
    if let Some(w) = chosen.map(|i| &candidates[i]) {
        chosen_notes(w, attainment_target, &mut notes);
    }
    let pick = |f: fn(&WeekCandidate) -> f64| chosen.map_or(0.0, |i| f(&candidates[i]));
    Ok(WeekPlan {
        hours: rates.len() as u32,
        peak_rate_per_s: load.peak_rate_per_s,
        peak_window_s: load.window_s,
        peak_start_s: load.peak_start_s,
        peak_hour_rate_per_s: rates.iter().copied().fold(0.0, f64::max),
        attainment_target,
        static_cost_usd: pick(|w| w.static_cost_usd),
        static_slo_attainment: pick(|w| w.static_period.slo_attainment),
        autoscaled_cost_usd: pick(|w| w.autoscaled_cost_usd),
        slo_attainment: pick(|w| w.slo_attainment),
        lost_requests: chosen.map_or(0, |i| candidates[i].lost_requests),
        chosen,
        candidates,
        spares,
        notes,
        rate_unit: load.rate_unit.clone(),
    })
}

/// The chosen static fleet over the period with the scenario's faults, without and with
/// `spares` spare replicas.
fn spare_check(
    base: &Scenario,
    origin: &str,
    c: &CandidateResult,
    scale: f64,
    w: &WeekCandidate,
    spares: u32,
) -> Result<SpareCheck> {
    let (without, with) = rayon::join(
        || static_with_faults(base, origin, c, scale, w.static_replicas),
        || static_with_faults(base, origin, c, scale, w.static_replicas + spares),
    );
    let (without, with) = (without?, with?);
    Ok(SpareCheck {
        spares,
        attainment_without_spares: without.goodput_share,
        attainment_with_spares: with.goodput_share,
        lost_without_spares: without.failed,
        lost_with_spares: with.failed,
    })
}

/// What the reader of the chosen week candidate must know: a static fleet that misses or
/// needs more than the busiest window, hours below the attainment target, an autoscaler that
/// misses it or saves nothing.
fn chosen_notes(w: &WeekCandidate, attainment_target: f64, notes: &mut Vec<String>) {
    let sp = &w.static_period;
    let at_peak = sp.tried.first().map_or(sp.replicas, |t| t.0);
    if !sp.meets_slos {
        notes.push(format!(
            "the static fleet misses the SLOs over the period even at {} replicas (plan.max_replicas)",
            sp.replicas
        ));
    } else if sp.replicas > at_peak {
        notes.push(format!(
            "the static fleet needs {} replicas over the period, {} more than the steady state at the busiest window: the load changes faster than the queue settles",
            sp.replicas,
            sp.replicas - at_peak
        ));
    }
    let missing: Vec<String> = w
        .hours
        .iter()
        .filter(|h| h.slo_attainment < attainment_target)
        .take(8)
        .map(|h| format!("hour {} ({:.1}%)", h.hour, 100.0 * h.slo_attainment))
        .collect();
    if !missing.is_empty() {
        let n = w
            .hours
            .iter()
            .filter(|h| h.slo_attainment < attainment_target)
            .count();
        notes.push(format!(
            "{n} hour(s) below {:.0}% attainment under the autoscaler: {}{}",
            100.0 * attainment_target,
            missing.join(", "),
            if n > missing.len() { ", ..." } else { "" }
        ));
    }
    if w.slo_attainment < attainment_target {
        notes.push(format!(
            "the autoscaler misses the {:.0}% attainment target ({:.2}%) with a {:.0} s cold start: scale ahead of the load (a lower autoscale.target_utilization, a higher min_replicas) or shorten the cold start",
            100.0 * attainment_target,
            100.0 * w.slo_attainment,
            w.cold_start_s
        ));
    }
    if w.autoscaled_cost_usd >= w.static_cost_usd {
        notes.push(
            "autoscaling saves nothing here: the static peak fleet costs no more".to_string(),
        );
    }
}

/// The static fleet of `replicas` over the period with the scenario's faults, no autoscaler.
fn static_with_faults(
    base: &Scenario,
    origin: &str,
    c: &CandidateResult,
    scale: f64,
    replicas: u32,
) -> Result<RunSummary> {
    let mut sc = candidate_scenario(base, &c.candidate, scale);
    sc.plan = Default::default();
    sc.autoscale = None;
    sc.faults = base.faults.clone();
    sc.deployment.replicas = replicas.max(1);
    Ok(sc.resolve(origin)?.run()?.summary)
}
