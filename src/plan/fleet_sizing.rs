//! Fleet sizing and headroom: the smallest number of replicas whose whole fleet, router
//! included, sustains the target in steady state (shown by the fleet at R holding and at R - 1
//! failing), and the largest step-time slow-down at which that fleet still holds.
//!
//! Large fleets are sized on a shard: R identical replicas behind a load-balancing router are
//! exchangeable, so [`SHARD_REPLICAS`] of them carrying the share k / R of the target see
//! what each replica of the whole sees, except that they pool bursts over fewer replicas. A
//! shard that holds therefore bounds the fleet from above (the whole pools more), and sizing
//! on it is conservative; the chosen fleet is then measured whole ([`line_evidence`]): R
//! holding and R - 1 missing, each a run of the whole fleet that the plan's printed line
//! reproduces. docs/capacity-planning.md ("Large fleets") states the bound's measured error.

use serde::Serialize;

use super::measure::{measure, run_at, Load, LoadMeasurement, StopRule};
use crate::error::Result;
use crate::scenario::Scenario;

/// Fewest requests of a fleet measurement: long enough that its p99s rest on a few hundred
/// requests above them.
pub const FLEET_MIN_REQUESTS: u64 = 20_000;
/// Fleets whose first estimate has more replicas than this are sized on a shard.
pub const FULL_SIZING_MAX: u32 = 32;
/// Replicas of the shard that stands for a large fleet.
pub const SHARD_REPLICAS: u32 = 16;
/// Most replicas the whole-fleet evidence adds to the sizing's fleet before it reports the
/// fleet as missing instead.
const MAX_GROWTH: u32 = 4;

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
    pub holds: LoadMeasurement,
    /// One replica fewer at the target (`None` when one replica holds).
    pub one_fewer: Option<LoadMeasurement>,
    /// Every size tried, in order.
    pub probes: Vec<FleetProbe>,
    /// Simulations run.
    pub simulations: u64,
    /// Replicas of the shard the fleet was sized on (`None`: sized whole); `holds` and
    /// `one_fewer` are then the shard's measurements at the fleet's share of the target.
    pub shard: Option<u32>,
}

impl FleetSizing {
    /// Replicas each replica of `holds` stands for: the fleet over its shard (1 when sized
    /// whole).
    pub fn fleet_factor(&self) -> f64 {
        self.shard
            .map_or(1.0, |k| self.replicas as f64 / k.max(1) as f64)
    }
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
) -> Result<LoadMeasurement> {
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
/// `target` req/s from a first estimate of `start` replicas: whole ([`size_whole`]) up to
/// [`FULL_SIZING_MAX`] replicas, else on shards of [`SHARD_REPLICAS`] ([`size_on_shards`]);
/// at most `max_replicas`. `None` when even `max_replicas` do not hold.
pub fn size_fleet(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    start: u32,
    max_replicas: u32,
) -> Result<Option<FleetSizing>> {
    if start.clamp(1, max_replicas.max(1)) > FULL_SIZING_MAX {
        size_on_shards(
            sc,
            origin,
            target,
            capacity,
            start,
            max_replicas,
            SHARD_REPLICAS,
        )
    } else {
        size_whole(sc, origin, target, capacity, start, max_replicas)
    }
}

/// Sizes the fleet by simulating it whole: starting from `start` replicas, down while the
/// fleet still holds, up until it does; at most `max_replicas`.
pub fn size_whole(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    start: u32,
    max_replicas: u32,
) -> Result<Option<FleetSizing>> {
    let mut probes = Vec::new();
    let mut simulations = 0u64;
    let mut run = |r: u32, probes: &mut Vec<FleetProbe>| -> Result<LoadMeasurement> {
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
        shard: None,
    }))
}

/// Measures fleet size `r` at `target` for sizing: the whole fleet when it has at most `k`
/// replicas, else a shard of `k` carrying its share of the target.
fn shard_probe(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    r: u32,
    k: u32,
) -> Result<LoadMeasurement> {
    let k = k.clamp(1, r);
    let share = target * k as f64 / r as f64;
    fleet_run(sc, origin, k, share, capacity, StopRule::Decided)
}

/// Sizes a large fleet on shards of `k` replicas at the share k / R of the target: the
/// smallest R whose shard holds, by bisection between a size whose replicas would each carry
/// their whole capacity or more (it cannot hold) and one whose shard holds (from `start` up).
pub fn size_on_shards(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    start: u32,
    max_replicas: u32,
    k: u32,
) -> Result<Option<FleetSizing>> {
    let mut probes = Vec::new();
    let mut simulations = 0u64;
    let mut run = |r: u32| -> Result<LoadMeasurement> {
        let m = shard_probe(sc, origin, target, capacity, r, k)?;
        simulations += m.simulations as u64;
        probes.push(FleetProbe {
            replicas: r,
            sustainable: m.sustainable(),
        });
        Ok(m)
    };
    // Below this each replica would carry its capacity or more: it cannot hold.
    let mut lo =
        ((target / capacity.max(1e-12)).floor().min(u32::MAX as f64) as u32).min(start - 1);
    let mut lo_m: Option<LoadMeasurement> = None;
    let mut hi = start;
    let mut hi_m = run(hi)?;
    while !hi_m.sustainable() {
        if hi >= max_replicas {
            return Ok(None);
        }
        lo = hi;
        lo_m = Some(hi_m);
        hi = hi.saturating_add((hi / 8).max(1)).min(max_replicas);
        hi_m = run(hi)?;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let m = run(mid)?;
        if m.sustainable() {
            hi = mid;
            hi_m = m;
        } else {
            lo = mid;
            lo_m = Some(m);
        }
    }
    Ok(Some(FleetSizing {
        replicas: hi,
        holds: hi_m,
        one_fewer: lo_m.filter(|_| lo + 1 == hi),
        probes,
        simulations,
        shard: (hi > k).then_some(k),
    }))
}

/// The evidence of the chosen fleet that its printed line reproduces: the whole fleet at R,
/// measured until its figures converge (n requests), and R - 1 run at exactly n.
#[derive(Debug, Clone, Serialize)]
pub struct FleetEvidence {
    /// Replicas of the smallest fleet shown to hold.
    pub replicas: u32,
    /// The fleet at R, n requests (its figures within the tolerance, or the longest run).
    pub verification: LoadMeasurement,
    /// R - 1 replicas at exactly the same n requests (`None` when R = 1).
    pub one_fewer: Option<LoadMeasurement>,
    /// What the evidence could not resolve, when it could not: R - 1 passed every check of
    /// the analysis at n but n is too short to show a steady state at its load; or R still
    /// misses after growing by a few replicas (then `verification` is that miss).
    pub unresolved: Option<String>,
    /// Simulations run.
    pub simulations: u64,
}

/// Measures the whole fleet from `start` replicas at `target`: R until its verdict is sure
/// (n requests; up to [`FULL_SIZING_MAX`] replicas until its figures converge, as its
/// figures are reported), then R - 1 at exactly n. Where R - 1 holds at n (long enough for
/// its load), the smallest size that holds at n is found by galloping down, then bisection
/// ([`Whole::smallest`]), and becomes R; where R misses (a longer run than the sizing's), R
/// grows, a few replicas at most; where R - 1 passes the analysis but n is too short to show a
/// steady state at its load, n grows to what that takes when the cap allows, else the
/// evidence says why it is unresolved. Every step keeps n or lengthens it, so it ends.
pub fn line_evidence(
    sc: &Scenario,
    origin: &str,
    target: f64,
    capacity: f64,
    start: u32,
    max_replicas: u32,
) -> Result<FleetEvidence> {
    let start = start.clamp(1, max_replicas.max(1));
    let mut w = Whole {
        sc,
        origin,
        target,
        capacity,
        simulations: 0,
    };
    let mut r = start;
    let mut n_min = FLEET_MIN_REQUESTS;
    // A run of R at n whose verdict is sure already, and one of R - 1 at the same n.
    let mut ready: Option<LoadMeasurement> = None;
    let mut fewer_known: Option<LoadMeasurement> = None;
    for _ in 0..256 {
        let v = match ready.take() {
            Some(m) => m,
            None => w.measure(r, n_min)?,
        };
        if !v.sustainable() {
            // A longer run than the sizing's misses: one replica more, a few times at most
            // (the sizing's own runs said R held); past that the evidence says so.
            if r >= max_replicas || r >= start.saturating_add(MAX_GROWTH) {
                let why = format!(
                    "{r} replicas miss at {} requests though the sizing found {start} to hold: the load sits at the edge the sizing's shorter runs could not see",
                    v.requests
                );
                return Ok(evidence(r, v, None, Some(why), w.simulations));
            }
            n_min = n_min.max(v.requests);
            r += 1;
            fewer_known = None;
            continue;
        }
        let n = v.requests;
        if r == 1 {
            return Ok(evidence(r, v, None, None, w.simulations));
        }
        let f = match fewer_known.take().filter(|f| f.requests == n) {
            Some(f) => f,
            None => w.at(r - 1, n)?,
        };
        if !f.steady().sustainable {
            return Ok(evidence(r, v, Some(f), None, w.simulations));
        }
        if f.sustainable() {
            // R - 1 holds as printed: R was not the smallest.
            let ((g, gm), below) = w.smallest((r - 1, f), n)?;
            r = g;
            n_min = n;
            fewer_known = below;
            let st = gm.steady();
            if st.converged || (r > FULL_SIZING_MAX && st.decided) {
                ready = Some(gm);
            }
            continue;
        }
        let cap = sc.measure.max_requests.saturating_mul(r as u64);
        let needed = f.needed_requests();
        if needed <= cap as f64 {
            n_min = (needed.ceil() as u64).max(n + 1);
            continue;
        }
        let why = format!(
            "{} replicas pass every check at {n} requests, but at {:.1}% of their capacity showing a steady state takes {}, more than measure.max_requests allows",
            r - 1,
            100.0 * f.load_share.unwrap_or(0.0),
            f.needed_requests_text(),
        );
        return Ok(evidence(r, v, Some(f), Some(why), w.simulations));
    }
    Err(crate::error::Error::Infeasible(
        "the fleet's evidence did not settle within 256 steps".into(),
    ))
}

/// Runs of the whole fleet at the target, for its evidence.
struct Whole<'a> {
    sc: &'a Scenario,
    origin: &'a str,
    target: f64,
    capacity: f64,
    simulations: u64,
}

impl Whole<'_> {
    /// `r` replicas measured until the verdict is sure (fleets up to [`FULL_SIZING_MAX`]:
    /// until the figures converge), from at least `n_min` requests.
    fn measure(&mut self, r: u32, n_min: u64) -> Result<LoadMeasurement> {
        let rule = if r > FULL_SIZING_MAX {
            StopRule::Decided
        } else {
            StopRule::Converged
        };
        let m = measure(
            &with_replicas(self.sc, r),
            self.origin,
            Load::Rate(self.target),
            rule,
            n_min,
            Some(self.capacity * r as f64),
        )?;
        self.simulations += m.simulations as u64;
        Ok(m)
    }

    /// `r` replicas with exactly `n` requests.
    fn at(&mut self, r: u32, n: u64) -> Result<LoadMeasurement> {
        self.simulations += 1;
        run_at(
            &with_replicas(self.sc, r),
            self.origin,
            Load::Rate(self.target),
            n,
            Some(self.capacity * r as f64),
        )
    }

    /// From `good` (a size and its run that holds at `n` requests), the smallest size that
    /// holds at `n`: galloping down (1, 2, 4, ... below) until a size does not, then
    /// bisection. Gives that size with its run, and the run of one fewer when it was made
    /// (it does not hold at `n`).
    fn smallest(
        &mut self,
        mut good: (u32, LoadMeasurement),
        n: u64,
    ) -> Result<((u32, LoadMeasurement), Option<LoadMeasurement>)> {
        let mut bad: Option<(u32, LoadMeasurement)> = None;
        let mut step = 1u32;
        loop {
            let lo = bad.as_ref().map_or(0, |b| b.0);
            if good.0 - lo <= 1 {
                break;
            }
            let c = if bad.is_some() {
                lo + (good.0 - lo) / 2
            } else {
                good.0.saturating_sub(step).max(1)
            };
            step = step.saturating_mul(2);
            let m = self.at(c, n)?;
            if m.sustainable() {
                good = (c, m);
            } else {
                bad = Some((c, m));
            }
        }
        let g = good.0;
        Ok((good, bad.filter(|b| b.0 + 1 == g).map(|b| b.1)))
    }
}

fn evidence(
    replicas: u32,
    verification: LoadMeasurement,
    one_fewer: Option<LoadMeasurement>,
    unresolved: Option<String>,
    simulations: u64,
) -> FleetEvidence {
    FleetEvidence {
        replicas,
        verification,
        one_fewer,
        unresolved,
        simulations,
    }
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
    /// Replicas of the shard it was measured on, at the fleet's share of the target (`None`:
    /// the whole fleet). A shard pools less than the fleet, so its headroom is a lower bound.
    pub shard: Option<u32>,
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
        shard: None,
    })
}
