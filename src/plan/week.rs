//! Plans over a period (a day, a week) of time-varying traffic: the steady-state plan at the
//! peak hour picks the candidates and the static fleet; each candidate's fleets of 1..N
//! replicas are measured for the highest rate they sustain, which sizes the fleet hour by
//! hour; then the whole period is simulated, every request, with the scenario's autoscaler
//! (and its faults), and its cost and SLO attainment per hour are set against the static fleet.

use rayon::prelude::*;
use serde::Serialize;

use super::{candidate_scenario, search, CandidateResult, Status};
use crate::error::{Error, Result};
use crate::metrics::PeriodSummary;
use crate::scenario::{AutoscaleSection, Scenario};
use crate::summary::RunSummary;
use crate::workload::{ArrivalConfig, RequestGenerator};

/// Seconds in a period of the week plan (an hour).
pub const PERIOD_S: f64 = 3600.0;
/// [`PERIOD_S`] on the clock, ns.
const PERIOD_NS: u64 = 3600 * 1_000_000_000;
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

/// The arrival rate of each hour of the period, req/s, counted from the request stream itself
/// (so a trace, a schedule and the diurnal shape are treated alike).
pub fn hourly_rates(sc: &Scenario, origin: &str) -> Result<Vec<f64>> {
    let mut gen = RequestGenerator::new(&sc.workload, sc.seed, origin)?;
    let mut counts: Vec<u64> = Vec::new();
    let period_ns = PERIOD_NS;
    while let Some(r) = gen.next_request() {
        let h = (r.arrival_ns / period_ns) as usize;
        if h >= counts.len() {
            if h > 100_000 {
                return Err(Error::config(
                    origin,
                    "workload",
                    "a period plan covers at most 100,000 hours",
                ));
            }
            counts.resize(h + 1, 0);
        }
        counts[h] += 1;
    }
    Ok(counts.iter().map(|&c| c as f64 / PERIOD_S).collect())
}

/// The highest rate a fleet of each size sustains in steady state.
#[derive(Debug, Clone, Serialize)]
pub struct FleetCapacity {
    /// Replicas.
    pub replicas: u32,
    /// Highest arrival rate the fleet sustains within the SLOs, req/s.
    pub max_rate_per_s: f64,
}

/// One hour of the period.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HourRow {
    /// Hour since the start.
    pub hour: u32,
    /// Arrival rate in the hour, req/s.
    pub arrival_rate_per_s: f64,
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
    /// Replicas of the static fleet, sized for the peak hour.
    pub static_replicas: u32,
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
    /// The peak hour's rate, req/s (the static fleet's target).
    pub peak_rate_per_s: f64,
    /// Share of requests that must meet every SLO over the period.
    pub attainment_target: f64,
    /// The chosen candidate's static fleet over the period, $.
    pub static_cost_usd: f64,
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
}

impl WeekPlan {
    /// The chosen candidate's period.
    pub fn chosen_candidate(&self) -> Option<&WeekCandidate> {
        self.chosen.map(|i| &self.candidates[i])
    }
}

/// The highest rate fleets of 1..=`n` replicas of `one` sustain (each a steady-state search).
fn fleet_capacities(
    one: &Scenario,
    origin: &str,
    capacity: f64,
    n: u32,
) -> Result<Vec<FleetCapacity>> {
    (1..=n.max(1))
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
        .collect()
}

/// The smallest fleet in `caps` that sustains `rate` (the largest when none does).
fn replicas_for(caps: &[FleetCapacity], rate: f64) -> u32 {
    caps.iter()
        .find(|c| c.max_rate_per_s >= rate)
        .or(caps.last())
        .map_or(1, |c| c.replicas)
}

/// Simulates the whole period for candidate `c`.
#[allow(clippy::too_many_arguments)]
fn simulate_period(
    base: &Scenario,
    origin: &str,
    c: &CandidateResult,
    scale: f64,
    rates: &[f64],
    caps: Vec<FleetCapacity>,
    static_replicas: u32,
) -> Result<WeekCandidate> {
    let mut sc = candidate_scenario(base, &c.candidate, scale);
    sc.plan = Default::default();
    sc.faults = base.faults.clone();
    let mut a: AutoscaleSection = base.autoscale.clone().unwrap_or_else(default_autoscale);
    // The capacity the utilisation policy divides by is this candidate's, as measured.
    a.capacity_rate_per_replica = Some(c.rate_in_fleet_per_replica.max(1e-9));
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
    let hours_n = rates.len();
    let period_hours = hours_n as f64 * PERIOD_S / 3600.0;
    let per: Vec<PeriodSummary> = run.periods.clone();
    let mut hours = Vec::with_capacity(hours_n);
    let mut planned_cost = 0.0;
    for (h, &rate) in rates.iter().enumerate() {
        let p = per.get(h);
        let planned = replicas_for(&caps, rate);
        planned_cost += planned as f64 * tp * price * PERIOD_S / 3600.0;
        let billed = p.map_or(0.0, |p| p.billed_replicas);
        hours.push(HourRow {
            hour: h as u32,
            arrival_rate_per_s: rate,
            planned_replicas: planned,
            replicas: billed,
            ready_replicas: p.map_or(0.0, |p| p.ready_replicas),
            gpus: billed * tp,
            slo_attainment: p.map_or(1.0, |p| p.slo_attainment),
            p99_ttft_ms: p.map_or(0.0, |p| p.p99_ttft_ms),
            cost_usd: billed * tp * price * PERIOD_S / 3600.0,
        });
    }
    let s = &run.summary;
    Ok(WeekCandidate {
        candidate: c.candidate.clone(),
        price_usd_per_gpu_hour: price,
        static_replicas,
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

/// Plans the period of a time-varying scenario from its steady-state plan at the peak hour
/// (`peak`: candidates ranked as the plan ranked them).
pub fn plan_week(
    base: &Scenario,
    origin: &str,
    peak: &[CandidateResult],
    rates: &[f64],
    scale: f64,
) -> Result<WeekPlan> {
    let peak_rate = rates.iter().copied().fold(0.0, f64::max);
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
            let one = candidate_scenario(base, &c.candidate, scale);
            let mut one = one;
            one.autoscale = None;
            one.faults = None;
            let caps = fleet_capacities(&one, origin, c.capacity_rate_per_replica, c.replicas)?;
            simulate_period(base, origin, c, scale, rates, caps, c.replicas)
        })
        .collect::<Result<Vec<_>>>()?;
    // The cheapest autoscaled fleet that meets the attainment target, else the best one.
    let chosen = candidates
        .iter()
        .enumerate()
        .filter(|(_, w)| w.slo_attainment >= attainment_target)
        .min_by(|a, b| a.1.autoscaled_cost_usd.total_cmp(&b.1.autoscaled_cost_usd))
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
        notes.push(format!(
            "autoscale.capacity_rate_per_replica ({given} req/s) is replaced by each candidate's measured rate per replica"
        ));
    }
    let spares = match (chosen, &base.faults) {
        (Some(i), Some(f)) => {
            let w = &candidates[i];
            let c = chosen_at_peak[i];
            let (without, with) = rayon::join(
                || static_with_faults(base, origin, c, scale, w.static_replicas),
                || static_with_faults(base, origin, c, scale, w.static_replicas + f.spares),
            );
            let (without, with) = (without?, with?);
            Some(SpareCheck {
                spares: f.spares,
                attainment_without_spares: without.goodput_share,
                attainment_with_spares: with.goodput_share,
                lost_without_spares: without.failed,
                lost_with_spares: with.failed,
            })
        }
        _ => None,
    };
    if let Some(w) = chosen.map(|i| &candidates[i]) {
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
    let pick = |f: fn(&WeekCandidate) -> f64| chosen.map_or(0.0, |i| f(&candidates[i]));
    Ok(WeekPlan {
        hours: rates.len() as u32,
        peak_rate_per_s: peak_rate,
        attainment_target,
        static_cost_usd: pick(|w| w.static_cost_usd),
        autoscaled_cost_usd: pick(|w| w.autoscaled_cost_usd),
        slo_attainment: pick(|w| w.slo_attainment),
        lost_requests: chosen.map_or(0, |i| candidates[i].lost_requests),
        chosen,
        candidates,
        spares,
        notes,
    })
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
