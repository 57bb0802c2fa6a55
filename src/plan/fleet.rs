//! Fleet sizing and headroom: the smallest number of replicas whose whole fleet, router
//! included, sustains the target in steady state (shown by the fleet at R holding and at R - 1
//! failing), and the largest step-time slow-down at which that fleet still holds.

use serde::Serialize;

use super::measure::{measure, Load, Measurement, StopRule};
use crate::error::Result;
use crate::scenario::Scenario;

/// Fewest requests of a fleet measurement: long enough that its p99s rest on a few hundred
/// requests above them.
pub const FLEET_MIN_REQUESTS: u64 = 20_000;

/// One fleet size tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FleetProbe {
    /// Replicas.
    pub replicas: u32,
    /// Whether the fleet sustained the target.
    pub sustainable: bool,
}

/// The smallest fleet that holds, and the evidence.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSizing {
    /// Replicas of the smallest fleet that sustains the target.
    pub replicas: u32,
    /// That fleet at the target.
    pub holds: Measurement,
    /// One replica fewer at the target (`None` when one replica holds).
    pub one_fewer: Option<Measurement>,
    /// Every size tried, in order.
    pub probes: Vec<FleetProbe>,
    /// Simulations run.
    pub simulations: u64,
}

/// `sc` with `replicas` replicas.
pub fn with_replicas(sc: &Scenario, replicas: u32) -> Scenario {
    let mut s = sc.clone();
    s.deployment.replicas = replicas;
    s
}

/// Measures a fleet of `replicas` of `sc` at `target` req/s: a verdict (`rule` Decided) or
/// figures to report (Converged); `capacity` is one replica's, req/s.
pub fn fleet_run(
    sc: &Scenario,
    origin: &str,
    replicas: u32,
    target: f64,
    capacity: f64,
    rule: StopRule,
) -> Result<Measurement> {
    measure(
        &with_replicas(sc, replicas),
        origin,
        Load::Rate(target),
        rule,
        FLEET_MIN_REQUESTS,
        Some(capacity * replicas as f64),
    )
}

/// Sizes the fleet of `sc`'s deployment (one replica's capacity `capacity` req/s) for
/// `target` req/s: starting from `start` replicas, down while the fleet still holds, up until
/// it does; at most `max_replicas`. `None` when even `max_replicas` do not hold.
pub fn size_fleet(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    start: u32,
    max_replicas: u32,
) -> Result<Option<FleetSizing>> {
    let mut probes = Vec::new();
    let mut simulations = 0u64;
    let mut run = |r: u32, probes: &mut Vec<FleetProbe>| -> Result<Measurement> {
        let m = fleet_run(sc, origin, r, target, capacity, StopRule::Decided)?;
        simulations += m.simulations as u64;
        probes.push(FleetProbe {
            replicas: r,
            sustainable: m.sustainable(),
        });
        Ok(m)
    };
    let mut r = start.clamp(1, max_replicas.max(1));
    let first = run(r, &mut probes)?;
    let (holds_r, holds, one_fewer) = if first.sustainable() {
        let mut holds = first;
        let mut fewer = None;
        while r > 1 {
            let m = run(r - 1, &mut probes)?;
            if m.sustainable() {
                r -= 1;
                holds = m;
            } else {
                fewer = Some(m);
                break;
            }
        }
        (r, holds, fewer)
    } else {
        let mut fewer = first;
        loop {
            if r >= max_replicas {
                return Ok(None);
            }
            r += 1;
            let m = run(r, &mut probes)?;
            if m.sustainable() {
                break (r, m, Some(fewer));
            }
            fewer = m;
        }
    };
    Ok(Some(FleetSizing {
        replicas: holds_r,
        holds,
        one_fewer,
        probes,
        simulations,
    }))
}

/// How much slower than modelled the GPUs may run before the fleet misses.
#[derive(Debug, Clone, Serialize)]
pub struct ModelHeadroom {
    /// Largest multiplier on every step time at which the fleet still sustains the target
    /// (to within 1%), dimensionless.
    pub max_step_time_scale: f64,
    /// The same as a slow-down, percent: (scale - 1) x 100.
    pub slower_pct: f64,
    /// Every multiplier tried: (scale, sustainable).
    pub probes: Vec<(f64, bool)>,
    /// Simulations run.
    pub simulations: u64,
}

/// The largest step-time multiplier (relative to the model, `plan.headroom` included) at which
/// `fleet` (its replicas set; one replica's capacity `capacity` req/s) still sustains `target`:
/// bracket 1.05, 1.1, 1.2, 1.4, ... then bisect to 1%. A slower step lowers the capacity in
/// proportion, which sets how long each run must be.
pub fn model_headroom(
    fleet: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
) -> Result<ModelHeadroom> {
    let base = fleet.deployment.step_time_scale;
    let mut probes = Vec::new();
    let mut simulations = 0u64;
    let mut holds = |scale: f64, probes: &mut Vec<(f64, bool)>| -> Result<bool> {
        let mut s = fleet.clone();
        s.deployment.step_time_scale = scale;
        let fleet_capacity = capacity * fleet.deployment.replicas.max(1) as f64 * base / scale;
        let m = measure(
            &s,
            origin,
            Load::Rate(target),
            StopRule::Decided,
            FLEET_MIN_REQUESTS,
            Some(fleet_capacity),
        )?;
        simulations += m.simulations as u64;
        let ok = m.sustainable();
        probes.push((scale, ok));
        Ok(ok)
    };
    let (mut lo, mut hi) = (base, None);
    for k in 0..8 {
        let scale = base * (1.0 + 0.05 * f64::powi(2.0, k));
        if holds(scale, &mut probes)? {
            lo = scale;
        } else {
            hi = Some(scale);
            break;
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > 0.01 * lo {
            let mid = 0.5 * (lo + hi);
            if holds(mid, &mut probes)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(ModelHeadroom {
        max_step_time_scale: lo,
        slower_pct: 100.0 * (lo - 1.0),
        probes,
        simulations,
    })
}
