//! Steady-state analysis of one run, from its [`RequestLog`](super::RequestLog):
//!
//! 1. **Warm-up** (the system starts empty): MSER-5 (White, 1997) on the TTFT and on the TPOT
//!    series in arrival order: batch means of 5, the truncation `d` that minimises the
//!    variance of the remaining batch means divided by their count, `d` capped at half the
//!    series; the warm-up is the later of the two cuts.
//! 2. **Window**: requests that arrive after the warm-up and no later than the last arrival
//!    (the drain after it is excluded). Latencies and the goodput share are those of the
//!    requests that arrive inside the window; throughput is the tokens produced inside the
//!    window divided by its length.
//! 3. **Confidence** by batch means: the window's requests are split into
//!    [`SteadyStateConfig::batches`] consecutive batches (equal counts, arrival order; equal
//!    time slices for throughput); each judged figure is computed per batch, and the
//!    half-width of its interval is t(k-1) x sd / sqrt(k). A batch needs
//!    [`SteadyStateConfig::min_batch_requests`] requests, else there is no interval.
//! 4. **Queue growth**: the time-averaged number of requests in the system per time slice of
//!    the window, regressed on time. A queue that grows by more than
//!    [`SteadyStateConfig::growth_threshold`] of the window's arrivals, significantly (more
//!    than 3 standard errors, the error widened for the slices' autocorrelation), is not
//!    stationary: demand exceeds capacity.
//!
//! docs/capacity-planning.md ("Method") shows the measurements that justify these choices.

use serde::{Deserialize, Serialize};

use super::request_log::{Outcome, RequestRecord};
use crate::numeric::{percentile_nearest_rank, sorted_percentile_nearest_rank};

/// Settings of the analysis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SteadyStateConfig {
    /// Batches for the batch-means intervals (and time slices for throughput and the queue).
    pub batches: usize,
    /// Fewest requests in one batch for an interval.
    pub min_batch_requests: usize,
    /// Two-sided confidence of the intervals, 0..1 (0.90, 0.95 or 0.99).
    pub confidence: f64,
    /// Relative half-width under which a figure counts as measured precisely enough.
    pub tolerance: f64,
    /// Queue growth over the window, as a share of its arrivals, above which a significant
    /// growth means the queue is not stationary.
    pub growth_threshold: f64,
}

impl Default for SteadyStateConfig {
    fn default() -> Self {
        SteadyStateConfig {
            batches: 10,
            min_batch_requests: 200,
            confidence: 0.95,
            tolerance: 0.02,
            growth_threshold: 0.01,
        }
    }
}

/// What the run is judged against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// TTFT SLO: (threshold ms, percentile).
    pub ttft: Option<(f64, f64)>,
    /// TPOT SLO: (threshold ms, percentile).
    pub tpot: Option<(f64, f64)>,
    /// E2E SLO: (threshold ms, percentile).
    pub e2e: Option<(f64, f64)>,
    /// Share of the window's requests that must complete within every SLO, 0..1.
    pub goodput_threshold: f64,
}

/// A measured figure and the half-width of its confidence interval (`None` when the window
/// has too few requests for one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Point estimate over the whole window.
    pub value: f64,
    /// Half-width of the interval, same unit.
    pub half_width: Option<f64>,
}

impl Interval {
    /// Whether the interval is within `tol` of the value, relatively.
    pub fn tight(&self, tol: f64) -> bool {
        self.half_width
            .is_some_and(|h| h <= tol * self.value.abs().max(1e-12))
    }

    /// Whether the interval lies wholly on one side of `threshold`.
    pub fn excludes(&self, threshold: f64) -> bool {
        self.half_width
            .is_some_and(|h| (self.value - threshold).abs() > h)
    }
}

/// Which SLO metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SloMetric {
    /// Time to first token.
    Ttft,
    /// Time per output token.
    Tpot,
    /// End-to-end latency.
    E2e,
}

impl SloMetric {
    /// Display name.
    pub fn name(&self) -> &'static str {
        match self {
            SloMetric::Ttft => "TTFT",
            SloMetric::Tpot => "TPOT",
            SloMetric::E2e => "E2E",
        }
    }
}

/// One SLO judged on the window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SloCheck {
    /// The metric.
    pub metric: SloMetric,
    /// Percentile, 0..100.
    pub percentile: f64,
    /// Threshold, ms.
    pub threshold_ms: f64,
    /// The window's value at the percentile, ms, with its interval.
    pub value_ms: Interval,
    /// Whether the point estimate is within the threshold.
    pub met: bool,
}

/// The queue-growth test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueGrowth {
    /// Fitted change of the number of requests in the system across the window, requests.
    pub growth_requests: f64,
    /// Standard error of that change, requests.
    pub std_error_requests: f64,
    /// The growth as a share of the window's arrivals.
    pub growth_share: f64,
    /// Mean number of requests in the system over the window.
    pub mean_in_system: f64,
    /// Whether the queue is stationary (no material, significant growth).
    pub stationary: bool,
}

/// Mean, median, p90 and p99 of one latency over the window, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowLatency {
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub median_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

/// A check the run failed, and by how much.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// What failed: `ttft`, `tpot`, `e2e`, `goodput`, `warmup` (no steady state reached) or
    /// `queue`.
    pub check: String,
    /// One line for people, with the figures.
    pub reason: String,
}

/// The steady state of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Requests the analysis stands for (every request that left the system).
    pub requests: u64,
    /// Requests each analysed record stands for: 1 when every request was kept, else the
    /// log kept a systematic sample of about 1 in this many ([`super::RequestLog`]) and the
    /// counts and rates are scaled by it.
    pub requests_per_record: f64,
    /// Requests cut as warm-up (arrival order).
    pub warmup_requests: u64,
    /// Whether the warm-up cut reached its cap (half the run): the run is too short, or the
    /// system never settles.
    pub warmup_at_cap: bool,
    /// Start of the window (end of the warm-up), s.
    pub window_start_s: f64,
    /// End of the window (the last arrival), s.
    pub window_end_s: f64,
    /// Requests that arrived inside the window.
    pub window_requests: u64,
    /// Arrival rate inside the window, req/s.
    pub arrival_rate_per_s: f64,
    /// Completions inside the window, per second.
    pub request_throughput: f64,
    /// Output tokens produced inside the window, per second.
    pub output_throughput: Interval,
    /// TTFT of the window's completed requests.
    pub ttft: WindowLatency,
    /// TPOT of the window's completed requests with more than one output token.
    pub tpot: WindowLatency,
    /// E2E latency of the window's completed requests.
    pub e2e: WindowLatency,
    /// Share of the window's requests that completed within every SLO.
    pub goodput_share: Interval,
    /// Each SLO at its percentile.
    pub slo: Vec<SloCheck>,
    /// The queue-growth test.
    pub queue: QueueGrowth,
    /// Whether every judged figure's interval is within the tolerance.
    pub converged: bool,
    /// Whether every verdict is certain: each interval lies on one side of its threshold, and
    /// the queue test's time slices span two mean stays (see `queue_slices_span_stays`).
    pub decided: bool,
    /// Every SLO met, goodput share at or above its threshold, a steady state reached within
    /// the run, and a stationary queue.
    pub sustainable: bool,
    /// What failed, if anything.
    pub misses: Vec<Miss>,
}

/// Two-sided Student t quantile for `dof` degrees of freedom at `confidence` (0.90, 0.95 or
/// 0.99; others round to the nearest of those). Tables: Abramowitz & Stegun, table 26.10.
fn t_quantile(dof: usize, confidence: f64) -> f64 {
    const T90: [f64; 30] = [
        6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
        1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
        1.703, 1.701, 1.699, 1.697,
    ];
    const T95: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    const T99: [f64; 30] = [
        63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
        2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
        2.771, 2.763, 2.756, 2.750,
    ];
    let (table, z) = if confidence < 0.925 {
        (&T90, 1.645)
    } else if confidence < 0.97 {
        (&T95, 1.960)
    } else {
        (&T99, 2.576)
    };
    match dof {
        0 => f64::INFINITY,
        d if d <= 30 => table[d - 1],
        _ => z,
    }
}

/// MSER truncation point of `series` with batches of `batch` observations: the number of
/// leading observations to discard (a multiple of `batch`, at most half the series), and
/// whether it reached that cap.
pub fn mser_truncation(series: &[f64], batch: usize) -> (usize, bool) {
    let batch = batch.max(1);
    let m = series.len() / batch;
    if m < 4 {
        return (0, false);
    }
    let means: Vec<f64> = series
        .chunks_exact(batch)
        .map(|c| c.iter().sum::<f64>() / batch as f64)
        .collect();
    // Suffix sums give every candidate's statistic in O(m).
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    let mut suffix = vec![(0.0, 0.0); m + 1];
    for j in (0..m).rev() {
        s1 += means[j];
        s2 += means[j] * means[j];
        suffix[j] = (s1, s2);
    }
    let d_max = m / 2;
    let mut best = (f64::INFINITY, 0usize);
    for (d, &(s1, s2)) in suffix.iter().enumerate().take(d_max + 1) {
        let n = (m - d) as f64;
        let ssd = (s2 - s1 * s1 / n).max(0.0);
        let stat = ssd / (n * n);
        if stat < best.0 {
            best = (stat, d);
        }
    }
    (best.1 * batch, best.1 >= d_max)
}

/// Sorts `v` in `f64::total_cmp` order, as integers: the key below orders like `total_cmp`
/// and maps back to the same bits, and equal keys are equal bits, so the result is the same
/// as `sort_unstable_by(total_cmp)` at a fraction of the cost of its comparisons.
fn sort_total(v: &mut [f64]) {
    // Negative values (sign bit set) have their other bits flipped: an involution.
    let key = |bits: u64| bits ^ (((bits as i64 >> 63) as u64) >> 1);
    let mut keys: Vec<i64> = v.iter().map(|x| key(x.to_bits()) as i64).collect();
    keys.sort_unstable();
    for (x, k) in v.iter_mut().zip(keys) {
        *x = f64::from_bits(key(k as u64));
    }
}

/// Mean, median, p90 and p99 of `v`; sorts it.
fn latency(v: &mut [f64]) -> WindowLatency {
    if v.is_empty() {
        return WindowLatency::default();
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    sort_total(v);
    WindowLatency {
        mean_ms: mean,
        median_ms: sorted_percentile_nearest_rank(v, 50.0),
        p90_ms: sorted_percentile_nearest_rank(v, 90.0),
        p99_ms: sorted_percentile_nearest_rank(v, 99.0),
    }
}

/// Mean and batch-means half-width of per-batch estimates, `None` with fewer than 2.
fn half_width(batch_values: &[f64], confidence: f64) -> Option<f64> {
    let k = batch_values.len();
    if k < 2 {
        return None;
    }
    let mean = batch_values.iter().sum::<f64>() / k as f64;
    let var = batch_values
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum::<f64>()
        / (k - 1) as f64;
    Some(t_quantile(k - 1, confidence) * (var / k as f64).sqrt())
}

/// Output tokens a request produced inside `[a, b]` (ns): its first token at `first`, the
/// rest spread evenly up to `end`.
fn tokens_in(r: &RequestRecord, a: f64, b: f64) -> f64 {
    if !r.completed() || r.output_tokens == 0 {
        return 0.0;
    }
    let (f, e) = (r.first_token_ns as f64, r.end_ns as f64);
    let first = if f >= a && f <= b { 1.0 } else { 0.0 };
    let rest = (r.output_tokens - 1) as f64;
    if rest == 0.0 {
        return first;
    }
    if e <= f {
        return first + if e >= a && e <= b { rest } else { 0.0 };
    }
    let overlap = (e.min(b) - f.max(a)).max(0.0);
    first + rest * overlap / (e - f)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The warm-up cut of records sorted in arrival order: MSER-5 on the TTFT series (requests
/// that got a first token) and on the TPOT series, the later of the two, as an index into
/// `recs`; and whether either cut reached its cap.
fn warmup_cut(recs: &[RequestRecord]) -> (usize, bool) {
    let n = recs.len();
    let ttft_of = |r: &RequestRecord| (r.outcome != Outcome::Rejected).then(|| ms(r.ttft_ns()));
    let tpot_of = |r: &RequestRecord| r.tpot_ns().map(ms);
    // The index in `recs` of the `d`-th member of a series (0 when nothing is cut).
    let cut = |d: usize, of: &dyn Fn(&RequestRecord) -> Option<f64>| {
        if d == 0 {
            return 0;
        }
        recs.iter()
            .enumerate()
            .filter(|(_, r)| of(r).is_some())
            .nth(d)
            .map_or(n, |(i, _)| i)
    };
    let ttft: Vec<f64> = recs.iter().filter_map(ttft_of).collect();
    let (d1, cap1) = mser_truncation(&ttft, 5);
    drop(ttft);
    let tpot: Vec<f64> = recs.iter().filter_map(tpot_of).collect();
    let (d2, cap2) = mser_truncation(&tpot, 5);
    drop(tpot);
    let start = cut(d1, &ttft_of).max(cut(d2, &tpot_of)).min(n);
    (start, cap1 || cap2)
}

/// The window: sorted records from the warm-up cut on, its time span and how it is batched.
struct Window<'a> {
    /// Every record, arrival order.
    all: &'a [RequestRecord],
    /// The records that arrived inside the window.
    recs: &'a [RequestRecord],
    /// Window start and end (the last arrival), ns.
    a_ns: f64,
    b_ns: f64,
    /// Batches (and time slices) of the batch-means intervals.
    k: usize,
    /// Whether the window has enough records for intervals.
    batch_ok: bool,
    /// Requests each record stands for (1 when every request was kept).
    scale: f64,
}

impl Window<'_> {
    fn span_s(&self) -> f64 {
        ((self.b_ns - self.a_ns) / 1e9).max(0.0)
    }

    fn per_s(&self, x: f64) -> f64 {
        let span = self.span_s();
        if span > 0.0 {
            x / span
        } else {
            0.0
        }
    }

    /// Equal-count batches in arrival order (none without enough records).
    fn batches(&self) -> Vec<&[RequestRecord]> {
        if !self.batch_ok {
            return Vec::new();
        }
        let (k, w) = (self.k, self.recs);
        let size = w.len() / k;
        (0..k)
            .map(|j| &w[j * size..if j + 1 == k { w.len() } else { (j + 1) * size }])
            .collect()
    }

    /// Output tokens/s produced inside the window, with its interval over equal time slices.
    fn output_throughput(&self, confidence: f64) -> Interval {
        let (a, b, k) = (self.a_ns, self.b_ns, self.k);
        let tokens: f64 = self.all.iter().map(|r| tokens_in(r, a, b)).sum::<f64>() * self.scale;
        if !self.batch_ok {
            return Interval {
                value: self.per_s(tokens),
                half_width: None,
            };
        }
        let slice_ns = (b - a) / k as f64;
        let mut slice_tokens = vec![0.0; k];
        for r in self.all {
            if !r.completed() || (r.end_ns as f64) < a || (r.first_token_ns as f64) > b {
                continue;
            }
            let lo = (((r.first_token_ns as f64 - a) / slice_ns).floor().max(0.0)) as usize;
            let hi = (((r.end_ns as f64 - a) / slice_ns).floor().max(0.0) as usize).min(k - 1);
            for (j, t) in slice_tokens
                .iter_mut()
                .enumerate()
                .take(hi + 1)
                .skip(lo.min(k - 1))
            {
                let s0 = a + j as f64 * slice_ns;
                *t += tokens_in(r, s0, s0 + slice_ns);
            }
        }
        let rates: Vec<f64> = slice_tokens
            .iter()
            .map(|t| t * self.scale / (slice_ns / 1e9))
            .collect();
        Interval {
            value: self.per_s(tokens),
            half_width: half_width(&rates, confidence),
        }
    }

    /// The share of the window's requests that completed within every SLO, with its interval.
    fn goodput_share(&self, batches: &[&[RequestRecord]], confidence: f64) -> Interval {
        let good = |b: &[RequestRecord]| b.iter().filter(|r| r.outcome == Outcome::Good).count();
        let w = self.recs;
        Interval {
            value: if w.is_empty() {
                0.0
            } else {
                good(w) as f64 / w.len() as f64
            },
            half_width: if self.batch_ok {
                let shares: Vec<f64> = batches
                    .iter()
                    .map(|b| good(b) as f64 / b.len() as f64)
                    .collect();
                half_width(&shares, confidence)
            } else {
                None
            },
        }
    }
}

/// One SLO metric of a completed record, ms (`None`: TPOT of a one-token request).
fn metric_ms(metric: SloMetric, r: &RequestRecord) -> Option<f64> {
    match metric {
        SloMetric::Ttft => Some(ms(r.ttft_ns())),
        SloMetric::Tpot => r.tpot_ns().map(ms),
        SloMetric::E2e => Some(ms(r.e2e_ns())),
    }
}

/// Each SLO at its percentile over the window (`sorted`: the window's completed values per
/// metric, ascending), with batch-means intervals of the batch quantiles.
fn slo_checks(
    targets: &Targets,
    sorted: [&[f64]; 3],
    batches: &[&[RequestRecord]],
    confidence: f64,
) -> Vec<SloCheck> {
    let mut slo = Vec::new();
    for (i, (metric, target)) in [
        (SloMetric::Ttft, targets.ttft),
        (SloMetric::Tpot, targets.tpot),
        (SloMetric::E2e, targets.e2e),
    ]
    .into_iter()
    .enumerate()
    {
        let Some((threshold_ms, pct)) = target else {
            continue;
        };
        let all = sorted[i];
        let value = sorted_percentile_nearest_rank(all, pct);
        let per: Vec<f64> = batches
            .iter()
            .map(|b| {
                b.iter()
                    .filter(|r| r.completed())
                    .filter_map(|r| metric_ms(metric, r))
                    .collect::<Vec<f64>>()
            })
            .filter(|v| !v.is_empty())
            .map(|mut v| percentile_nearest_rank(&mut v, pct))
            .collect();
        let hw = if !batches.is_empty() && per.len() == batches.len() {
            half_width(&per, confidence)
        } else {
            None
        };
        slo.push(SloCheck {
            metric,
            percentile: pct,
            threshold_ms,
            value_ms: Interval {
                value,
                half_width: hw,
            },
            met: !all.is_empty() && value <= threshold_ms,
        });
    }
    slo
}

/// `value` and `threshold` printed with as few decimals (1 to 4) as tell them apart.
fn distinct(value: f64, threshold: f64) -> (String, String) {
    for d in 1..4 {
        let (v, t) = (format!("{value:.d$}"), format!("{threshold:.d$}"));
        if v != t {
            return (v, format!("{threshold}"));
        }
    }
    (format!("{value:.4}"), format!("{threshold}"))
}

/// What failed, one plain sentence each.
fn misses_of(
    slo: &[SloCheck],
    any_completed: bool,
    goodput: &Interval,
    targets: &Targets,
    warmup_at_cap: bool,
    queue: &QueueGrowth,
) -> Vec<Miss> {
    let mut misses = Vec::new();
    for c in slo.iter().filter(|c| !c.met) {
        misses.push(Miss {
            check: c.metric.name().to_ascii_lowercase(),
            reason: if any_completed {
                let (v, t) = distinct(c.value_ms.value, c.threshold_ms);
                format!("p{} {} {v} ms > {t} ms", c.percentile, c.metric.name())
            } else {
                format!(
                    "no request completed, so p{} {} is unknown",
                    c.percentile,
                    c.metric.name()
                )
            },
        });
    }
    if goodput.value < targets.goodput_threshold {
        misses.push(Miss {
            check: "goodput".into(),
            reason: format!(
                "goodput {:.1}% < {:.0}%",
                100.0 * goodput.value,
                100.0 * targets.goodput_threshold
            ),
        });
    }
    if warmup_at_cap {
        misses.push(Miss {
            check: "warmup".into(),
            reason: "latencies still trend after half the run: no steady state".into(),
        });
    }
    if !queue.stationary {
        misses.push(Miss {
            check: "queue".into(),
            reason: format!(
                "queue grows by {:.0} requests ({:.1}% of arrivals) over the window: demand exceeds capacity",
                queue.growth_requests,
                100.0 * queue.growth_share
            ),
        });
    }
    misses
}

/// Analyses one run's request records (any order) against `targets`: every request that
/// left the system.
pub fn analyze(
    records: &[RequestRecord],
    targets: &Targets,
    cfg: &SteadyStateConfig,
) -> SteadyState {
    analyze_sample(records, records.len() as u64, targets, cfg)
}

/// Analyses a systematic sample of a run's requests (any order; [`super::RequestLog`]) that
/// stands for `seen` requests: shares and percentiles are the sample's, counts, rates and
/// the queue are scaled by `seen` / records, and every interval is the sample's own (so it
/// includes the sampling error). With every request kept this is [`analyze`].
pub fn analyze_sample(
    records: &[RequestRecord],
    seen: u64,
    targets: &Targets,
    cfg: &SteadyStateConfig,
) -> SteadyState {
    let mut recs: Vec<RequestRecord> = records.to_vec();
    recs.sort_by_key(|r| (r.arrival_ns, r.end_ns));
    let n = recs.len();
    let scale = if n > 0 && seen > n as u64 {
        seen as f64 / n as f64
    } else {
        1.0
    };
    // 1. Warm-up.
    let (start, warmup_at_cap) = warmup_cut(&recs);
    let window = &recs[start..];
    let a_ns = window.first().map_or(0, |r| r.arrival_ns) as f64;
    let b_ns = recs.last().map_or(0, |r| r.arrival_ns) as f64;
    let k = cfg.batches.max(2);
    let batch_ok = window.len() >= k * cfg.min_batch_requests.max(1) && ((b_ns - a_ns) / 1e9) > 0.0;
    let w = Window {
        all: &recs,
        recs: window,
        a_ns,
        b_ns,
        k,
        batch_ok,
        scale,
    };

    // 2. Window figures; 3. batches (equal counts, arrival order; time slices for tokens).
    let completed = || window.iter().filter(|r| r.completed());
    let mut ttft: Vec<f64> = completed().map(|r| ms(r.ttft_ns())).collect();
    let mut tpot: Vec<f64> = completed().filter_map(|r| r.tpot_ns().map(ms)).collect();
    let mut e2e: Vec<f64> = completed().map(|r| ms(r.e2e_ns())).collect();
    let any_completed = completed().next().is_some();
    let (ttft_l, tpot_l, e2e_l) = (latency(&mut ttft), latency(&mut tpot), latency(&mut e2e));
    let done_in_window = recs
        .iter()
        .filter(|r| r.completed() && (r.end_ns as f64) >= a_ns && (r.end_ns as f64) <= b_ns)
        .count();
    let batches = w.batches();
    let output_throughput = w.output_throughput(cfg.confidence);
    let goodput_share = w.goodput_share(&batches, cfg.confidence);
    let slo = slo_checks(targets, [&ttft, &tpot, &e2e], &batches, cfg.confidence);
    drop((ttft, tpot, e2e));

    // 4. Queue growth: time-averaged requests in the system per slice, regressed on time.
    let queue = queue_growth(&w, cfg.growth_threshold);
    let misses = misses_of(
        &slo,
        any_completed,
        &goodput_share,
        targets,
        warmup_at_cap,
        &queue,
    );
    let tol = cfg.tolerance;
    let converged = !warmup_at_cap
        && output_throughput.tight(tol)
        && goodput_share.tight(tol)
        && slo.iter().all(|c| c.value_ms.tight(tol));
    let growth_clear =
        (queue.growth_share - cfg.growth_threshold).abs() > 0.5 * cfg.growth_threshold;
    let decided = batch_ok
        && !warmup_at_cap
        && growth_clear
        && queue_slices_span_stays(&w, e2e_l.mean_ms)
        && (goodput_share.excludes(targets.goodput_threshold) || goodput_share.tight(tol))
        && slo
            .iter()
            .all(|c| c.value_ms.excludes(c.threshold_ms) || c.value_ms.tight(tol));
    let count = |x: usize| (x as f64 * scale).round() as u64;
    SteadyState {
        requests: seen.max(n as u64),
        requests_per_record: scale,
        warmup_requests: count(start),
        warmup_at_cap,
        window_start_s: a_ns / 1e9,
        window_end_s: b_ns / 1e9,
        window_requests: count(window.len()),
        arrival_rate_per_s: w.per_s(window.len() as f64 * scale),
        request_throughput: w.per_s(done_in_window as f64 * scale),
        output_throughput,
        ttft: ttft_l,
        tpot: tpot_l,
        e2e: e2e_l,
        goodput_share,
        sustainable: misses.is_empty(),
        slo,
        queue,
        converged,
        decided,
        misses,
    }
}

/// Mean stays ([`E2E`](WindowLatency) means) one time slice of the queue test must span for
/// its verdict to decide a search: with shorter slices the number in system's excursions
/// (as long as a stay) read as trends, and a longer run is needed.
const QUEUE_SLICE_STAYS: f64 = 2.0;

/// Whether each of the window's time slices spans [`QUEUE_SLICE_STAYS`] mean stays
/// (`e2e_mean_ms`) of its requests. The MLPerf H100 replica at 22.2 req/s (83% of its capacity,
/// 15 s stays): 4,000 requests give 16 s slices and "queue grows by 193 requests"; 8,000
/// requests (36 s slices) and more hold, up to 24.5 req/s.
fn queue_slices_span_stays(w: &Window<'_>, e2e_mean_ms: f64) -> bool {
    let slice_s = (w.b_ns - w.a_ns) / 1e9 / w.k as f64;
    slice_s >= QUEUE_SLICE_STAYS * e2e_mean_ms / 1e3
}

/// The queue-growth test over the window with its `k` time slices: the number of requests
/// in the system (every record, arrivals +1 and departures -1, scaled by the sample's
/// stride), integrated over each slice and regressed on the slice index.
fn queue_growth(w: &Window<'_>, threshold: f64) -> QueueGrowth {
    let (a, b, k) = (w.a_ns, w.b_ns, w.k);
    let none = QueueGrowth {
        growth_requests: 0.0,
        std_error_requests: 0.0,
        growth_share: 0.0,
        mean_in_system: 0.0,
        stationary: true,
    };
    if b <= a || w.all.is_empty() || w.recs.is_empty() {
        return none;
    }
    // Events in time order: the arrivals are sorted already, the departures are sorted here
    // (a departure before an arrival at the same time; zero-length steps add no area).
    let arrivals = w.all.iter().map(|r| r.arrival_ns);
    let mut ends: Vec<u64> = w.all.iter().map(|r| r.end_ns.max(r.arrival_ns)).collect();
    ends.sort_unstable();
    let mut arrivals = arrivals.peekable();
    let mut ends = ends.into_iter().peekable();
    let mut next = || -> Option<(u64, i64)> {
        match (arrivals.peek(), ends.peek()) {
            (Some(&t), Some(&e)) if e <= t => ends.next().map(|e| (e, -1)),
            (Some(_), _) => arrivals.next().map(|t| (t, 1)),
            (None, Some(_)) => ends.next().map(|e| (e, -1)),
            (None, None) => None,
        }
    };
    let slice = (b - a) / k as f64;
    let mut area = vec![0.0f64; k];
    let mut n_sys: i64 = 0;
    let mut t_prev = a;
    let add = |from: f64, to: f64, level: i64, area: &mut [f64]| {
        let mut t = from;
        while t < to {
            let j = (((t - a) / slice).floor() as usize).min(k - 1);
            let end = (a + (j + 1) as f64 * slice).min(to);
            area[j] += level as f64 * (end - t);
            if end <= t {
                break;
            }
            t = end;
        }
    };
    // The level at the window start, then every event inside the window.
    let mut ev = next();
    while let Some((_, d)) = ev.filter(|&(t, _)| (t as f64) <= a) {
        n_sys += d;
        ev = next();
    }
    while let Some((t, d)) = ev.filter(|&(t, _)| (t as f64) <= b) {
        let t = t as f64;
        add(t_prev, t, n_sys, &mut area);
        n_sys += d;
        t_prev = t;
        ev = next();
    }
    add(t_prev, b, n_sys, &mut area);
    let means: Vec<f64> = area.iter().map(|x| x / slice * w.scale).collect();
    regress_growth(&means, w.recs.len() as f64 * w.scale, threshold)
}

/// Largest lag-1 autocorrelation [`autocorrelation_inflation`] credits: beyond it ten slices
/// cannot tell a slow excursion from a trend anyway.
const MAX_LAG1_AUTOCORRELATION: f64 = 0.9;

/// Factor by which positively autocorrelated residuals widen a regression slope's standard
/// error: sqrt((1 + rho) / (1 - rho)) with rho the residuals' lag-1 autocorrelation, in
/// [0, [`MAX_LAG1_AUTOCORRELATION`]] (the AR(1) variance inflation of a least-squares slope;
/// 1 for uncorrelated residuals). The number of requests in a batching server wanders in
/// excursions as long as a request's stay (tens of seconds at thousands of concurrent
/// sequences), so slices shorter than that are not independent, and without the factor a
/// stationary run's excursion near its end reads as significant growth.
fn autocorrelation_inflation(residuals: &[f64]) -> f64 {
    let var: f64 = residuals.iter().map(|e| e * e).sum();
    if residuals.len() < 3 || var <= 0.0 {
        return 1.0;
    }
    let lag1: f64 = residuals.windows(2).map(|w| w[0] * w[1]).sum();
    let rho = (lag1 / var).clamp(0.0, MAX_LAG1_AUTOCORRELATION);
    ((1.0 + rho) / (1.0 - rho)).sqrt()
}

/// Least squares of slice means on the slice index: the fitted change from the first
/// slice's centre to the last's, its standard error, and the verdict.
fn regress_growth(means: &[f64], window_arrivals: f64, threshold: f64) -> QueueGrowth {
    let k = means.len();
    let kf = k as f64;
    let xbar = (kf - 1.0) / 2.0;
    let ybar = means.iter().sum::<f64>() / kf;
    let sxx: f64 = (0..k).map(|j| (j as f64 - xbar).powi(2)).sum();
    let sxy: f64 = means
        .iter()
        .enumerate()
        .map(|(j, y)| (j as f64 - xbar) * (y - ybar))
        .sum();
    let slope = sxy / sxx;
    let residuals: Vec<f64> = means
        .iter()
        .enumerate()
        .map(|(j, y)| y - ybar - slope * (j as f64 - xbar))
        .collect();
    let resid: f64 = residuals.iter().map(|e| e * e).sum();
    let se_slope = if k > 2 {
        (resid / (kf - 2.0) / sxx).sqrt() * autocorrelation_inflation(&residuals)
    } else {
        0.0
    };
    let growth = slope * (kf - 1.0);
    let se = se_slope * (kf - 1.0);
    let share = growth / window_arrivals;
    QueueGrowth {
        growth_requests: growth,
        std_error_requests: se,
        growth_share: share,
        mean_in_system: ybar,
        stationary: !(growth > 3.0 * se && share > threshold),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_total_orders_bits_like_total_cmp() {
        let mut v = vec![
            3.5,
            -0.0,
            f64::NAN,
            0.0,
            -2.25,
            f64::INFINITY,
            1e-300,
            -f64::NAN,
            f64::NEG_INFINITY,
            3.5,
            -1e-300,
            42.0,
        ];
        let mut want = v.clone();
        want.sort_unstable_by(|a, b| a.total_cmp(b));
        sort_total(&mut v);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&v), bits(&want));
        assert_eq!(v[0].to_bits(), (-f64::NAN).to_bits());
    }

    fn rec(arrival_ms: f64, ttft_ms: f64, e2e_ms: f64, out: u32) -> RequestRecord {
        let a = (arrival_ms * 1e6) as u64;
        RequestRecord {
            arrival_ns: a,
            first_token_ns: a + (ttft_ms * 1e6) as u64,
            end_ns: a + (e2e_ms * 1e6) as u64,
            input_tokens: 100,
            output_tokens: out,
            outcome: Outcome::Good,
        }
    }

    #[test]
    fn mser_finds_a_warm_up_ramp() {
        // 500 observations rising linearly, then 4500 flat around 10.
        let mut s: Vec<f64> = (0..500).map(|i| i as f64 / 50.0).collect();
        s.extend((0..4500).map(|i| 10.0 + ((i * 7919) % 13) as f64 / 13.0 - 0.5));
        let (d, at_cap) = mser_truncation(&s, 5);
        assert!((400..=600).contains(&d), "d = {d}");
        assert!(!at_cap);
        // A steadily growing series never settles: the cut reaches its cap.
        let grow: Vec<f64> = (0..5000).map(|i| i as f64).collect();
        assert!(mser_truncation(&grow, 5).1);
        // A stationary series keeps almost everything.
        let flat: Vec<f64> = (0..5000).map(|i| ((i * 7919) % 13) as f64).collect();
        assert!(mser_truncation(&flat, 5).0 < 500);
    }

    #[test]
    fn tokens_are_booked_to_the_window_they_fall_in() {
        let r = rec(0.0, 10.0, 110.0, 11); // first token at 10 ms, 10 more over 100 ms
        let full = tokens_in(&r, 0.0, 1e9);
        assert!((full - 11.0).abs() < 1e-9);
        let half = tokens_in(&r, 0.0, 60e6);
        assert!((half - 6.0).abs() < 1e-9, "{half}");
    }

    #[test]
    fn a_stationary_run_is_sustainable_and_a_growing_queue_is_not() {
        let targets = Targets {
            ttft: Some((500.0, 99.0)),
            tpot: Some((50.0, 99.0)),
            e2e: None,
            goodput_threshold: 0.9,
        };
        let cfg = SteadyStateConfig::default();
        // 10 req/s for 600 s, each served in 1 s: about 10 in the system, no growth.
        let stable: Vec<RequestRecord> = (0..6000)
            .map(|i| rec(i as f64 * 100.0, 100.0 + (i % 7) as f64, 1000.0, 21))
            .collect();
        let s = analyze(&stable, &targets, &cfg);
        assert!(s.sustainable, "{:?}", s.misses);
        assert!(s.queue.stationary, "{:?}", s.queue);
        assert!(
            (s.output_throughput.value - 210.0).abs() / 210.0 < 0.01,
            "{:?}",
            s.output_throughput
        );
        assert!(s.output_throughput.tight(0.02), "{:?}", s.output_throughput);
        assert!(s.converged && s.decided);
        // Arrivals at 10 req/s served at 9 req/s: the wait grows by 11 ms per request.
        let growing: Vec<RequestRecord> = (0..6000)
            .map(|i| {
                let a = i as f64 * 100.0;
                let wait = i as f64 * (1000.0 / 9.0 - 100.0);
                rec(a, wait + 100.0, wait + 1000.0, 21)
            })
            .collect();
        let g = analyze(&growing, &targets, &cfg);
        assert!(!g.queue.stationary, "{:?}", g.queue);
        assert!(!g.sustainable);
        assert!(g.misses.iter().any(|m| m.check == "queue"));
        assert!(g.misses.iter().any(|m| m.check == "ttft"));
    }

    #[test]
    fn a_systematic_sample_estimates_what_every_record_gives_within_its_intervals() {
        // 400,000 requests of a stationary system (10 req/s; TTFT, TPOT and lengths from a
        // fixed pseudo-random sequence, departures out of arrival order), analysed whole and
        // through a log of 2^15 records (a sample of 1 in 16).
        let mut x: u64 = 12345;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut recs: Vec<RequestRecord> = (0..400_000)
            .map(|i| {
                let ttft = 50.0 + 400.0 * next().powi(8);
                let out = 2 + (300.0 * next()) as u32;
                let e2e = ttft + out as f64 * (20.0 + 10.0 * next());
                rec(i as f64 * 100.0, ttft, e2e, out)
            })
            .collect();
        recs.sort_by_key(|r| r.end_ns);
        let targets = Targets {
            ttft: Some((400.0, 99.0)),
            tpot: Some((28.0, 99.0)),
            e2e: None,
            goodput_threshold: 0.9,
        };
        let cfg = SteadyStateConfig::default();
        let all = analyze(&recs, &targets, &cfg);
        let mut log = crate::metrics::RequestLog::with_capacity(1 << 15);
        recs.iter().for_each(|&r| log.push(r));
        assert_eq!(log.stride(), 16);
        let s = analyze_sample(log.records(), log.seen(), &targets, &cfg);
        assert_eq!(s.requests, 400_000);
        assert!(
            (s.requests_per_record - 16.0).abs() < 0.01,
            "{}",
            s.requests_per_record
        );
        let within = |name: &str, a: f64, b: &Interval| {
            let h = b.half_width.expect("an interval");
            assert!(
                (a - b.value).abs() <= 3.0 * h,
                "{name}: every record {a}, sample {b:?}"
            );
        };
        for (c, d) in all.slo.iter().zip(&s.slo) {
            within(c.metric.name(), c.value_ms.value, &d.value_ms);
        }
        within(
            "output tok/s",
            all.output_throughput.value,
            &s.output_throughput,
        );
        within("goodput", all.goodput_share.value, &s.goodput_share);
        let rel = |a: f64, b: f64| (a - b).abs() / a.abs().max(1e-12);
        assert!(rel(all.request_throughput, s.request_throughput) < 0.01);
        assert!(rel(all.window_requests as f64, s.window_requests as f64) < 0.01);
        assert!(rel(all.queue.mean_in_system, s.queue.mean_in_system) < 0.02);
        assert_eq!(all.sustainable, s.sustainable);
        assert_eq!(all.requests_per_record, 1.0);
    }

    #[test]
    fn a_tiny_run_has_no_interval_and_is_not_decided() {
        let recs: Vec<RequestRecord> = (0..100).map(|i| rec(i as f64, 5.0, 50.0, 10)).collect();
        let s = analyze(&recs, &Targets::default(), &SteadyStateConfig::default());
        assert!(s.output_throughput.half_width.is_none());
        assert!(!s.converged && !s.decided);
        assert!(analyze(&[], &Targets::default(), &SteadyStateConfig::default()).requests == 0);
    }

    #[test]
    fn an_excursion_at_the_end_of_a_stationary_run_is_not_growth_but_a_trend_is() {
        // Ten slice means of the number in system of a batching server that wanders in slow
        // excursions (like the MLPerf H100 replica at 21.39 req/s, 4,000 requests: about 340
        // in the system, a hump of +100 late in the window that is on its way back down).
        // Uncorrected, the slope's standard error reads the hump as growth (106 requests,
        // 3.5 standard errors); the residuals' lag-1 autocorrelation (0.48) widens it to 2.1.
        let wander = [
            300.0, 300.0, 310.0, 305.0, 350.0, 400.0, 410.0, 405.0, 380.0, 360.0,
        ];
        let residual_rho_inflates = autocorrelation_inflation(&[-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]);
        assert!(residual_rho_inflates > 1.5, "{residual_rho_inflates}");
        let alternating = autocorrelation_inflation(&[1.0, -1.0, 1.0, -1.0, 1.0, -1.0]);
        assert_eq!(
            alternating, 1.0,
            "negative correlation never narrows the error"
        );
        let q = regress_growth(&wander, 3550.0, 0.01);
        assert!(q.stationary, "{q:?}");
        // A queue that grows by 40 requests per slice with the same noise is growth.
        let trend: Vec<f64> = wander
            .iter()
            .enumerate()
            .map(|(j, y)| y + 40.0 * j as f64)
            .collect();
        let q = regress_growth(&trend, 3550.0, 0.01);
        assert!(!q.stationary && q.growth_requests > 300.0, "{q:?}");
    }
}
