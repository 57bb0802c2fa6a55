//! Adaptive steady-state measurement of one deployment under one load: run, analyse the
//! steady state ([`crate::metrics::steady_state`]), and double the run's length until every
//! judged figure is precise enough (or, when only a verdict is needed, until the verdict is
//! certain), or the cap of `[measure] max_requests` is reached.
//!
//! A longer run re-simulates from the start with the same seed: the first N requests of the
//! 2N-request run are the same requests at the same times, so a run is extended, not redrawn,
//! and every rate of a search sees the same random numbers (common random numbers: arrivals
//! are unit-rate gaps scaled by the rate, lengths come from their own stream).

use serde::Serialize;

use crate::error::Result;
use crate::metrics::steady_state::SteadyState;
use crate::metrics::STEADY_STATE_RECORDS;
use crate::scenario::Scenario;
use crate::summary::{RunResult, RunSummary};
use crate::workload::ArrivalConfig;

/// The load a measurement applies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Open-loop arrivals at this mean rate (the scenario's arrival process, rescaled), in
    /// [`rate_unit`]: req/s, or sessions/s for a `[workload.sessions]` workload (its arrival
    /// process starts sessions); a trace is replayed with its time scaled to the rate.
    Rate(f64),
    /// A closed loop: this many requests outstanding at all times (a saturated system).
    ClosedLoop(u32),
}

/// When an adaptive measurement may stop before its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRule {
    /// When every verdict is certain (each interval on one side of its threshold) or every
    /// figure is precise: enough to decide sustainable or not.
    Decided,
    /// When every judged figure is within the tolerance: for figures that are reported.
    Converged,
}

/// Time scale of a trace replayed as a closed loop: a trace spanning a day arrives within
/// 0.1 ms, so the gate on outstanding requests, not the timestamps, sets the load.
const CLOSED_LOOP_TRACE_TIME_SCALE: f64 = 1e-9;

/// Relaxation times a run must span to show a steady state.
const RELAXATION_TIMES: f64 = 10.0;

/// Requests a run at `load_share` of capacity (arrival rate / capacity, 0..1) needs to show a
/// steady state: [`RELAXATION_TIMES`] relaxation times of an M/M/1 queue at that load,
/// rho / (1 - sqrt rho)^2 arrivals each (Morse, 1955). A batching server with many slots
/// relaxes faster, so the bound is conservative; near saturation it grows without bound,
/// which is what keeps a finite run from calling a load sustainable when its queue has not
/// had time to build. Infinite at or above capacity.
pub fn relaxation_requests(load_share: f64) -> f64 {
    if load_share.is_nan() || load_share <= 0.0 {
        return 0.0;
    }
    if load_share >= 1.0 {
        return f64::INFINITY;
    }
    let gap = 1.0 - load_share.sqrt();
    RELAXATION_TIMES * load_share / (gap * gap)
}

/// `needed` requests (from [`relaxation_requests`]) for people: `about N requests`, or, when
/// infinite (the load at or above capacity), what that means in words.
pub fn requests_text(needed: f64) -> String {
    if needed.is_finite() {
        format!("about {needed:.0} requests")
    } else {
        "more requests than any run holds: the load is at or above the measured capacity, so the queue never settles".to_string()
    }
}

/// One adaptive measurement: its load, its final run and that run's steady state.
#[derive(Debug, Clone, Serialize)]
pub struct LoadMeasurement {
    /// The load.
    pub load: Load,
    /// Replicas of the deployment measured.
    pub replicas: u32,
    /// Requests of the final run.
    pub requests: u64,
    /// Simulations it took (the run length doubles each time).
    pub simulations: u32,
    /// The load as a share of the deployment's capacity (`None` when the capacity is not
    /// known); a run shorter than its [`relaxation_requests`] is not sustainable.
    pub load_share: Option<f64>,
    /// The final run's whole-run summary; its `steady_state` holds the judged figures.
    pub summary: RunSummary,
    /// The final run's distributions and time series (not serialised).
    #[serde(skip)]
    pub result: Option<RunResult>,
    /// The unit of a [`Load::Rate`]: [`rate_unit`] of the scenario measured (not serialised).
    #[serde(skip)]
    pub rate_unit: &'static str,
}

/// The unit an arrival rate of `sc`'s workload counts in: `sessions/s` for a
/// `[workload.sessions]` workload (its arrival process starts sessions, each sending several
/// requests), else `req/s`.
pub fn rate_unit(sc: &Scenario) -> &'static str {
    if sc.workload.sessions.is_some() {
        "sessions/s"
    } else {
        "req/s"
    }
}

impl LoadMeasurement {
    /// The final run's steady state.
    pub fn steady(&self) -> &SteadyState {
        self.summary
            .steady_state
            .as_ref()
            .expect("a measurement always keeps a request log") // measure() enables the log
    }

    /// Whether the deployment sustains the load: every SLO, goodput, a stationary queue, and
    /// a run long enough to show it at this load.
    pub fn sustainable(&self) -> bool {
        self.steady().sustainable && self.long_enough()
    }

    /// Requests a run at this load needs to show a steady state (0 when the capacity is not
    /// known; infinite at or above capacity).
    pub fn needed_requests(&self) -> f64 {
        self.load_share.map_or(0.0, relaxation_requests)
    }

    /// What showing a steady state at this load takes, for people: `about N requests`, or,
    /// at or above the measured capacity (where no run length suffices: the queue never
    /// settles), that in words; never `inf`.
    pub fn needed_requests_text(&self) -> String {
        requests_text(self.needed_requests())
    }

    /// Whether the run spans enough relaxation times for its load.
    pub fn long_enough(&self) -> bool {
        self.requests as f64 >= self.needed_requests()
    }

    /// What failed, for people: the steady state's misses, and a run too short for its load.
    pub fn misses(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .steady()
            .misses
            .iter()
            .map(|m| m.reason.clone())
            .collect();
        if !self.long_enough() {
            let needed = self.needed_requests();
            v.push(if needed.is_finite() {
                format!(
                    "too close to capacity ({:.1}% of it): showing a steady state takes about {needed:.0} requests, more than measure.max_requests allows",
                    100.0 * self.load_share.unwrap_or(0.0)
                )
            } else {
                "at or above the measured capacity".to_string()
            });
        }
        v
    }

    /// Preemptions per arrived request over the whole run.
    pub fn preemptions_per_request(&self) -> f64 {
        self.summary.preemptions as f64 / self.summary.arrived.max(1) as f64
    }
}

/// The stationary load `sc`'s own workload applies, if it has one: its mean rate for
/// Poisson, gamma and constant arrivals; its concurrency for a closed loop (offline arrivals
/// under `workload.max_concurrency`). `None` for offline bursts, schedules and traces.
pub fn stationary_load(sc: &Scenario) -> Option<Load> {
    match &sc.workload.arrival {
        ArrivalConfig::Poisson { rate_per_s }
        | ArrivalConfig::Gamma { rate_per_s, .. }
        | ArrivalConfig::Constant { rate_per_s } => Some(Load::Rate(*rate_per_s)),
        ArrivalConfig::Offline => sc.workload.max_concurrency.map(Load::ClosedLoop),
        ArrivalConfig::Schedule { .. }
        | ArrivalConfig::Diurnal { .. }
        | ArrivalConfig::Trace { .. } => None,
    }
}

/// Replicas of `sc`'s deployment: both pools' when disaggregated (runs scale with them).
pub fn deployment_replicas(sc: &Scenario) -> u32 {
    let d = &sc.deployment;
    match d.mode {
        crate::scenario::DeploymentMode::Colocated => d.replicas,
        crate::scenario::DeploymentMode::Disaggregated => {
            let n = |p: &Option<crate::scenario::PoolSection>| p.as_ref().map_or(1, |p| p.replicas);
            n(&d.prefill).saturating_add(n(&d.decode))
        }
    }
}

/// `sc` with its arrivals set to `load` and its run length to `requests`.
pub fn with_load(sc: &Scenario, load: Load, requests: u64) -> Scenario {
    let mut s = sc.clone();
    match load {
        Load::Rate(r) => {
            if matches!(
                s.workload.arrival,
                ArrivalConfig::Offline
                    | ArrivalConfig::Schedule { .. }
                    | ArrivalConfig::Diurnal { .. }
            ) {
                // A plan sizes for a stationary load at the target rate.
                s.workload.arrival = ArrivalConfig::Poisson { rate_per_s: r };
            } else {
                s.workload.set_rate(r);
            }
            s.workload.max_concurrency = None;
        }
        Load::ClosedLoop(c) => {
            if let ArrivalConfig::Trace {
                time_scale,
                rate_per_s,
                ..
            } = &mut s.workload.arrival
            {
                // A closed loop over the trace's own requests (their lengths and block
                // identities): its time squeezed to nanoseconds so every request is waiting
                // to be sent, the client gate below keeping `c` outstanding.
                *time_scale = CLOSED_LOOP_TRACE_TIME_SCALE;
                *rate_per_s = None;
            } else {
                s.workload.arrival = ArrivalConfig::Offline;
            }
            s.workload.max_concurrency = Some(c.max(1));
        }
    }
    s.workload.num_requests = Some(requests);
    s.workload.duration_s = None;
    // Sessions stop at num_requests: each sends at least one request, so a session cap as
    // large never binds first (`rerun::length_overrides` prints the same).
    if let Some(ss) = s
        .workload
        .sessions
        .as_mut()
        .filter(|x| x.num_sessions.is_some())
    {
        ss.num_sessions = Some(requests);
    }
    s
}

/// Measures `sc` (its deployment, replicas included) under `load`, adaptively; the run length
/// starts at `min_requests` (at least `[measure] min_requests` per replica, and at least the
/// [`relaxation_requests`] of the load when the deployment's `capacity_rate` (req/s, whole
/// fleet) is known) and doubles up to `[measure] max_requests` per replica.
pub fn measure(
    sc: &Scenario,
    origin: &str,
    load: Load,
    rule: StopRule,
    min_requests: u64,
    capacity_rate: Option<f64>,
) -> Result<LoadMeasurement> {
    let m = &sc.measure;
    let replicas = deployment_replicas(sc).max(1) as u64;
    let cap = (m.max_requests * replicas).max(min_requests);
    let load_share = match (load, capacity_rate) {
        (Load::Rate(r), Some(c)) if c > 0.0 => Some(r / c),
        _ => None,
    };
    let needed = load_share.map_or(0.0, relaxation_requests);
    let mut n = (m.min_requests * replicas)
        .max(min_requests)
        .max(needed.min(cap as f64).ceil() as u64)
        .min(cap);
    let mut simulations = 0;
    loop {
        let run = simulate(sc, origin, load, n)?;
        simulations += 1;
        let steady = run
            .summary
            .steady_state
            .as_ref()
            .expect("the request log is enabled");
        let done = match rule {
            StopRule::Decided => steady.decided || steady.converged,
            StopRule::Converged => steady.converged,
        };
        // A trace ends at its last row: a longer run would be the same run.
        let exhausted = trace_exhausted(sc, &run, n);
        if done || n >= cap || exhausted {
            return Ok(LoadMeasurement {
                load,
                replicas: replicas as u32,
                requests: if exhausted { run.summary.arrived } else { n },
                simulations,
                load_share,
                summary: run.summary.clone(),
                result: Some(run),
                rate_unit: rate_unit(sc),
            });
        }
        n = (n * 2).min(cap);
    }
}

/// Whether a run of `sc` asked for `requests` requests but its trace ran out first (every
/// row sent): its length is the trace's, whatever was asked.
fn trace_exhausted(sc: &Scenario, run: &RunResult, requests: u64) -> bool {
    matches!(sc.workload.arrival, ArrivalConfig::Trace { .. }) && run.summary.arrived < requests
}

/// One run of `sc` under `load` with `requests` requests, its steady state analysed on the
/// log every measurement and `servesim run` keep.
fn simulate(sc: &Scenario, origin: &str, load: Load, requests: u64) -> Result<RunResult> {
    with_load(sc, load, requests)
        .resolve(origin)?
        .with_request_log(STEADY_STATE_RECORDS)
        .run()
}

/// Measures `sc` under `load` with exactly `requests` requests (not adaptively): the run a
/// plan's printed re-run line reproduces, request for request. `capacity_rate` (req/s, whole
/// deployment) sets the load share, as in [`measure`].
pub fn run_at(
    sc: &Scenario,
    origin: &str,
    load: Load,
    requests: u64,
    capacity_rate: Option<f64>,
) -> Result<LoadMeasurement> {
    let run = simulate(sc, origin, load, requests)?;
    Ok(LoadMeasurement {
        load,
        replicas: deployment_replicas(sc).max(1),
        requests: if trace_exhausted(sc, &run, requests) {
            run.summary.arrived
        } else {
            requests
        },
        simulations: 1,
        load_share: match (load, capacity_rate) {
            (Load::Rate(r), Some(c)) if c > 0.0 => Some(r / c),
            _ => None,
        },
        summary: run.summary.clone(),
        result: Some(run),
        rate_unit: rate_unit(sc),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requests_a_steady_state_needs_read_as_a_number_or_in_words_never_inf() {
        assert_eq!(
            requests_text(relaxation_requests(0.5)),
            format!("about {:.0} requests", relaxation_requests(0.5))
        );
        for share in [1.0, 1.413] {
            let t = requests_text(relaxation_requests(share));
            assert!(!t.contains("inf"), "{t}");
            assert!(t.contains("at or above the measured capacity"), "{t}");
        }
    }
}
