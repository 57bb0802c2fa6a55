//! One replica's limits: its steady-state capacity (a closed loop far above max_num_seqs,
//! no SLOs) and its maximum sustainable rate under the SLOs (bracket, then bisect to 1%),
//! with the constraint that binds there.

use serde::Serialize;

use super::measure::{measure, Load, LoadMeasurement, StopRule};
use crate::error::Result;
use crate::scenario::{Scenario, SloConfig};

/// Relative precision of the rate bisection.
pub const RATE_PRECISION: f64 = 0.01;
/// Lowest rate tried, as a share of capacity, before a candidate is declared unable to meet
/// the SLOs at any load.
const LIGHT_LOAD_SHARE: f64 = 1.0 / 64.0;
/// Preemptions per request above which KV capacity is named as (part of) the binding
/// constraint.
const PREEMPTION_SHARE: f64 = 0.01;

/// What limits a deployment's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// The TTFT SLO.
    Ttft,
    /// The TPOT SLO.
    Tpot,
    /// The E2E SLO.
    E2e,
    /// The goodput share.
    Goodput,
    /// Raw throughput: the queue grows (or never settles) before an SLO fails.
    Throughput,
    /// KV capacity: requests are preempted (recomputed), and that makes a check fail.
    KvCapacity,
}

impl Constraint {
    /// Short name for tables.
    pub fn label(&self) -> &'static str {
        match self {
            Constraint::Ttft => "TTFT SLO",
            Constraint::Tpot => "TPOT SLO",
            Constraint::E2e => "E2E SLO",
            Constraint::Goodput => "goodput",
            Constraint::Throughput => "throughput",
            Constraint::KvCapacity => "KV capacity",
        }
    }
}

/// The constraint that fails first as the load rises, and the figures that show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Binding {
    /// The constraint.
    pub constraint: Constraint,
    /// What failed just above the sustainable rate, with the figures.
    pub detail: String,
}

impl Binding {
    /// The binding constraint of a run that failed, with one plain sentence on what failed
    /// at its load: a growing or unsettled queue first (the SLO misses follow from it), else
    /// the SLO furthest over its threshold, else goodput; KV capacity when preemptions are
    /// frequent.
    pub fn of(m: &LoadMeasurement) -> Option<Binding> {
        let s = m.steady();
        if m.sustainable() {
            return None;
        }
        let at = match m.load {
            Load::Rate(r) => format!("at {r:.2} {}", m.rate_unit),
            Load::ClosedLoop(c) => format!("with {c} requests outstanding"),
        };
        let find = |check: &str| s.misses.iter().find(|x| x.check == check);
        let worst_slo = s.slo.iter().filter(|c| !c.met).max_by(|a, b| {
            (a.value_ms.value / a.threshold_ms).total_cmp(&(b.value_ms.value / b.threshold_ms))
        });
        let (mut constraint, mut detail) = if s.sustainable {
            // Every check held, but the run could not be long enough for this load.
            (
                Constraint::Throughput,
                format!(
                    "{at} ({:.1}% of capacity) a steady state takes {} to show, more than the {} measure.max_requests allows",
                    100.0 * m.load_share.unwrap_or(0.0),
                    m.needed_requests_text(),
                    m.requests
                ),
            )
        } else if let Some(q) = find("queue") {
            (Constraint::Throughput, format!("{at} the {}", q.reason))
        } else if find("warmup").is_some() {
            (
                Constraint::Throughput,
                format!(
                    "{at} latencies still rise after half of a {}-request run: no steady state",
                    m.requests
                ),
            )
        } else if let Some(c) = worst_slo {
            let k = match c.metric {
                crate::metrics::steady_state::SloMetric::Ttft => Constraint::Ttft,
                crate::metrics::steady_state::SloMetric::Tpot => Constraint::Tpot,
                crate::metrics::steady_state::SloMetric::E2e => Constraint::E2e,
            };
            let miss = find(&c.metric.name().to_ascii_lowercase())
                .map_or(String::new(), |x| x.reason.clone());
            (k, format!("{at} {miss}"))
        } else {
            let g = find("goodput").map_or(String::new(), |g| g.reason.clone());
            (Constraint::Goodput, format!("{at} {g}"))
        };
        let pre = m.preemptions_per_request();
        if pre >= PREEMPTION_SHARE {
            detail = format!(
                "{detail}, with {:.1} preemptions per 100 requests (KV cache full)",
                100.0 * pre
            );
            constraint = Constraint::KvCapacity;
        }
        Some(Binding { constraint, detail })
    }
}

/// A replica's steady-state capacity: the saturated throughput of a closed loop with
/// 2 x max_num_seqs x dp x pp + 16 requests outstanding per replica (each attention
/// data-parallel rank and each pipeline micro-batch schedules its own max_num_seqs), SLO
/// enforcement off.
pub fn capacity(sc: &Scenario, origin: &str) -> Result<LoadMeasurement> {
    let mut s = sc.clone();
    s.slo = SloConfig::default();
    let seqs = s.scheduler.max_num_seqs.unwrap_or(256);
    let slots = seqs
        .saturating_mul(s.deployment.dp.max(1))
        .saturating_mul(s.deployment.pp.max(1));
    let per_replica = slots.saturating_mul(2).saturating_add(16);
    let c = per_replica.saturating_mul(s.deployment.replicas.max(1));
    measure(
        &s,
        origin,
        Load::ClosedLoop(c),
        StopRule::Converged,
        0,
        None,
    )
}

/// One evaluated rate of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// Arrival rate per replica, req/s.
    pub rate_per_s: f64,
    /// Whether it was sustainable.
    pub sustainable: bool,
    /// Requests of the run that decided it.
    pub requests: u64,
    /// What failed, when it was not sustainable.
    pub misses: Vec<String>,
}

/// The outcome of a rate search on one replica.
#[derive(Debug, Clone, Serialize)]
pub struct RateSearch {
    /// Highest sustainable arrival rate found, req/s (0 when none).
    pub max_rate_per_s: f64,
    /// The measurement at that rate.
    pub at_max: Option<LoadMeasurement>,
    /// The lowest rate verified unsustainable, and its measurement.
    pub above: Option<LoadMeasurement>,
    /// The binding constraint (from `above`).
    pub binding: Option<Binding>,
    /// Every rate tried, in order.
    pub probes: Vec<Probe>,
    /// Simulations run.
    pub simulations: u64,
}

/// Searches the highest rate one deployment (`sc`, one replica or a fleet) sustains under
/// its SLOs, given its steady-state `capacity_rate` (req/s): bracket upwards from 60% of
/// capacity until a rate is verified unsustainable (downwards by halves when even 60% fails,
/// to 1/64 of capacity), then bisect to [`RATE_PRECISION`]. Every rate sees the same random
/// numbers, so the verdict is monotone in the rate up to measurement noise.
pub fn max_sustainable_rate(sc: &Scenario, origin: &str, capacity_rate: f64) -> Result<RateSearch> {
    let cap = capacity_rate.max(1e-9);
    let mut out = RateSearch {
        max_rate_per_s: 0.0,
        at_max: None,
        above: None,
        binding: None,
        probes: Vec::new(),
        simulations: 0,
    };
    let probe = |rate: f64, out: &mut RateSearch| -> Result<LoadMeasurement> {
        let m = measure(
            sc,
            origin,
            Load::Rate(rate),
            StopRule::Decided,
            0,
            Some(capacity_rate),
        )?;
        out.simulations += m.simulations as u64;
        out.probes.push(Probe {
            rate_per_s: rate,
            sustainable: m.sustainable(),
            requests: m.requests,
            misses: m.misses(),
        });
        Ok(m)
    };
    // Bracket.
    let mut lo: Option<(f64, LoadMeasurement)> = None;
    let mut hi: Option<(f64, LoadMeasurement)> = None;
    let mut r = 0.6 * cap;
    let first = probe(r, &mut out)?;
    if first.sustainable() {
        lo = Some((r, first));
        for k in [0.85, 1.0, 1.1, 1.25, 1.5, 2.0] {
            r = k * cap;
            let m = probe(r, &mut out)?;
            if m.sustainable() {
                lo = Some((r, m));
            } else {
                hi = Some((r, m));
                break;
            }
        }
    } else {
        hi = Some((r, first));
        while r > LIGHT_LOAD_SHARE * cap * 1.0001 {
            r *= 0.5;
            let m = probe(r, &mut out)?;
            if m.sustainable() {
                lo = Some((r, m));
                break;
            }
            hi = Some((r, m));
        }
    }
    let (mut lo, mut hi) = match (lo, hi) {
        (Some(lo), Some(hi)) => (lo, hi),
        (None, hi) => {
            // Nothing sustainable, even at light load: `above` holds the lightest load tried.
            out.binding = hi.as_ref().and_then(|(_, m)| Binding::of(m));
            out.above = hi.map(|(_, m)| m);
            return Ok(out);
        }
        (Some(lo), None) => {
            // Sustainable at twice the measured capacity: nothing binds within the bracket.
            out.max_rate_per_s = lo.0;
            out.at_max = Some(lo.1);
            return Ok(out);
        }
    };
    // Bisect.
    while (hi.0 - lo.0) > RATE_PRECISION * lo.0 {
        let mid = 0.5 * (lo.0 + hi.0);
        let m = probe(mid, &mut out)?;
        if m.sustainable() {
            lo = (mid, m);
        } else {
            hi = (mid, m);
        }
    }
    out.max_rate_per_s = lo.0;
    out.binding = Binding::of(&hi.1);
    out.at_max = Some(lo.1);
    out.above = Some(hi.1);
    Ok(out)
}
