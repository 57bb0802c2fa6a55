//! One replica's latency-throughput curve across load, run past saturation so the knee shows:
//! each point a steady-state measurement.

use rayon::prelude::*;
use serde::Serialize;

use super::measure::{measure, Load, StopRule};
use super::pricing::cost;
use crate::error::Result;
use crate::scenario::Scenario;

/// Loads of the curve, as shares of the replica's steady-state capacity.
pub const CURVE_SHARES: [f64; 14] = [
    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.1, 1.2,
];

/// One point of the curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CurvePoint {
    /// Arrival rate per replica, req/s.
    pub rate_per_s: f64,
    /// Output tokens/s per GPU in the steady window.
    pub output_tokens_per_s_per_gpu: f64,
    /// p50 TTFT, ms.
    pub p50_ttft_ms: f64,
    /// p99 TTFT, ms.
    pub p99_ttft_ms: f64,
    /// p50 TPOT, ms.
    pub p50_tpot_ms: f64,
    /// p99 TPOT, ms.
    pub p99_tpot_ms: f64,
    /// $ per million output tokens at this load.
    pub usd_per_million_output_tokens: f64,
    /// Whether the load is sustainable (every SLO, goodput, stationary queue).
    pub sustainable: bool,
    /// Whether the queue is stationary (false past saturation: the latencies then grow with
    /// the run's length).
    pub stationary: bool,
}

/// The curve of `one` (a one-replica scenario) at [`CURVE_SHARES`] of `capacity_rate`
/// (req/s), priced at `price` $/GPU-hour; returns the points and the simulations run. Each
/// point is a steady-state measurement (warm-up cut, drain excluded) of at most twice
/// `[measure] min_requests` requests.
pub fn rate_curve(
    one: &Scenario,
    origin: &str,
    capacity_rate: f64,
    price: f64,
) -> Result<(Vec<CurvePoint>, u64)> {
    let tp = one
        .deployment
        .tp
        .saturating_mul(one.deployment.dp)
        .saturating_mul(one.deployment.pp)
        .max(1);
    // The curve is drawn, not judged: each point's run grows at most to twice the first
    // run's length (past saturation it would otherwise always run to the cap).
    let mut one = one.clone();
    one.measure.max_requests = one.measure.max_requests.min(2 * one.measure.min_requests);
    let one = &one;
    let points: Vec<Result<(CurvePoint, u64)>> = CURVE_SHARES
        .par_iter()
        .map(|&share| {
            let rate = share * capacity_rate;
            let m = measure(one, origin, Load::Rate(rate), StopRule::Converged, 0, None)?;
            let s = m.steady();
            let out = s.output_throughput.value;
            Ok((
                CurvePoint {
                    rate_per_s: rate,
                    output_tokens_per_s_per_gpu: out / tp as f64,
                    p50_ttft_ms: s.ttft.median_ms,
                    p99_ttft_ms: s.ttft.p99_ms,
                    p50_tpot_ms: s.tpot.median_ms,
                    p99_tpot_ms: s.tpot.p99_ms,
                    usd_per_million_output_tokens: cost(tp, price, out, 0.0, 0.0)
                        .usd_per_million_output_tokens,
                    sustainable: s.sustainable,
                    stationary: s.queue.stationary,
                },
                m.simulations as u64,
            ))
        })
        .collect();
    let mut out = Vec::with_capacity(points.len());
    let mut sims = 0;
    for p in points {
        let (pt, n) = p?;
        out.push(pt);
        sims += n;
    }
    Ok((out, sims))
}
