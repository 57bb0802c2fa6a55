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
//!    than 3 standard errors), is not stationary: demand exceeds capacity.
//!
//! docs/capacity-planning.md ("Method") shows the measurements that justify these choices.

use serde::{Deserialize, Serialize};

use super::request_log::{Outcome, RequestRecord};

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
    /// Requests in the log.
    pub requests: u64,
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
    /// Whether every verdict is certain: each interval lies on one side of its threshold.
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

/// Value at percentile `p` (0..100) of `v` by nearest rank (the sample of rank ceil(p n)),
/// as hdrhistogram reports it; reorders `v`; 0 when empty.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    let (_, x, _) = v.select_nth_unstable_by(rank - 1, |a, b| a.total_cmp(b));
    *x
}

fn latency(v: &mut [f64]) -> WindowLatency {
    if v.is_empty() {
        return WindowLatency::default();
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    WindowLatency {
        mean_ms: mean,
        median_ms: percentile(v, 50.0),
        p90_ms: percentile(v, 90.0),
        p99_ms: percentile(v, 99.0),
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

/// Analyses one run's request records (any order) against `targets`.
pub fn analyze(
    records: &[RequestRecord],
    targets: &Targets,
    cfg: &SteadyStateConfig,
) -> SteadyState {
    let mut recs: Vec<RequestRecord> = records.to_vec();
    recs.sort_by_key(|r| (r.arrival_ns, r.end_ns));
    let n = recs.len();
    let ms = |ns: u64| ns as f64 / 1e6;

    // 1. Warm-up: MSER-5 on TTFT and TPOT in arrival order (requests that got a first token).
    let ttft_idx: Vec<usize> = (0..n)
        .filter(|&i| recs[i].outcome != Outcome::Rejected)
        .collect();
    let ttft_series: Vec<f64> = ttft_idx.iter().map(|&i| ms(recs[i].ttft_ns())).collect();
    let tpot_idx: Vec<usize> = (0..n).filter(|&i| recs[i].tpot_ns().is_some()).collect();
    let tpot_series: Vec<f64> = tpot_idx
        .iter()
        .map(|&i| ms(recs[i].tpot_ns().unwrap_or(0)))
        .collect();
    let (d1, cap1) = mser_truncation(&ttft_series, 5);
    let (d2, cap2) = mser_truncation(&tpot_series, 5);
    let warmup_at_cap = cap1 || cap2;
    let cut = |idx: &[usize], d: usize| {
        if d == 0 {
            0
        } else {
            idx.get(d).copied().unwrap_or(n)
        }
    };
    let start = cut(&ttft_idx, d1).max(cut(&tpot_idx, d2)).min(n);
    let window = &recs[start..];
    let a_ns = window.first().map_or(0, |r| r.arrival_ns) as f64;
    let b_ns = recs.last().map_or(0, |r| r.arrival_ns) as f64;
    let span_s = ((b_ns - a_ns) / 1e9).max(0.0);
    let k = cfg.batches.max(2);
    let batch_ok = window.len() >= k * cfg.min_batch_requests.max(1) && span_s > 0.0;

    // 2. Window figures.
    let completed: Vec<&RequestRecord> = window.iter().filter(|r| r.completed()).collect();
    let mut ttft: Vec<f64> = completed.iter().map(|r| ms(r.ttft_ns())).collect();
    let mut tpot: Vec<f64> = completed
        .iter()
        .filter_map(|r| r.tpot_ns().map(ms))
        .collect();
    let mut e2e: Vec<f64> = completed.iter().map(|r| ms(r.e2e_ns())).collect();
    let good = window.iter().filter(|r| r.outcome == Outcome::Good).count();
    let per_s = |x: f64| if span_s > 0.0 { x / span_s } else { 0.0 };
    let tokens: f64 = recs.iter().map(|r| tokens_in(r, a_ns, b_ns)).sum();
    let done_in_window = recs
        .iter()
        .filter(|r| r.completed() && (r.end_ns as f64) >= a_ns && (r.end_ns as f64) <= b_ns)
        .count();

    // 3. Batches: equal counts in arrival order, equal time slices for throughput.
    let batches: Vec<&[RequestRecord]> = if batch_ok {
        let size = window.len() / k;
        (0..k)
            .map(|j| {
                let hi = if j + 1 == k {
                    window.len()
                } else {
                    (j + 1) * size
                };
                &window[j * size..hi]
            })
            .collect()
    } else {
        Vec::new()
    };
    let slice_ns = (b_ns - a_ns) / k as f64;
    let mut slice_tokens = vec![0.0; if batch_ok { k } else { 0 }];
    if batch_ok {
        for r in &recs {
            if !r.completed() || (r.end_ns as f64) < a_ns || (r.first_token_ns as f64) > b_ns {
                continue;
            }
            let lo = (((r.first_token_ns as f64 - a_ns) / slice_ns)
                .floor()
                .max(0.0)) as usize;
            let hi = (((r.end_ns as f64 - a_ns) / slice_ns).floor().max(0.0) as usize).min(k - 1);
            for (j, t) in slice_tokens
                .iter_mut()
                .enumerate()
                .take(hi + 1)
                .skip(lo.min(k - 1))
            {
                let s0 = a_ns + j as f64 * slice_ns;
                *t += tokens_in(r, s0, s0 + slice_ns);
            }
        }
    }
    let slice_rates: Vec<f64> = slice_tokens.iter().map(|t| t / (slice_ns / 1e9)).collect();
    let output_throughput = Interval {
        value: per_s(tokens),
        half_width: if batch_ok {
            half_width(&slice_rates, cfg.confidence)
        } else {
            None
        },
    };
    let goodput_share = Interval {
        value: if window.is_empty() {
            0.0
        } else {
            good as f64 / window.len() as f64
        },
        half_width: if batch_ok {
            let shares: Vec<f64> = batches
                .iter()
                .map(|b| {
                    b.iter().filter(|r| r.outcome == Outcome::Good).count() as f64 / b.len() as f64
                })
                .collect();
            half_width(&shares, cfg.confidence)
        } else {
            None
        },
    };

    // SLO checks, each at its percentile with a batch-means interval.
    let mut slo = Vec::new();
    for (metric, target) in [
        (SloMetric::Ttft, targets.ttft),
        (SloMetric::Tpot, targets.tpot),
        (SloMetric::E2e, targets.e2e),
    ] {
        let Some((threshold_ms, pct)) = target else {
            continue;
        };
        let values = |rs: &[RequestRecord]| -> Vec<f64> {
            rs.iter()
                .filter(|r| r.completed())
                .filter_map(|r| match metric {
                    SloMetric::Ttft => Some(ms(r.ttft_ns())),
                    SloMetric::Tpot => r.tpot_ns().map(ms),
                    SloMetric::E2e => Some(ms(r.e2e_ns())),
                })
                .collect()
        };
        let mut all = values(window);
        let has = !all.is_empty();
        let value = percentile(&mut all, pct);
        let hw = if batch_ok {
            let per: Vec<f64> = batches
                .iter()
                .map(|b| values(b))
                .filter(|v| !v.is_empty())
                .map(|mut v| percentile(&mut v, pct))
                .collect();
            if per.len() == k {
                half_width(&per, cfg.confidence)
            } else {
                None
            }
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
            met: has && value <= threshold_ms,
        });
    }

    // 4. Queue growth: time-averaged requests in the system per slice, regressed on time.
    let queue = queue_growth(&recs, a_ns, b_ns, k, window.len(), cfg.growth_threshold);

    let mut misses = Vec::new();
    for c in &slo {
        if !c.met {
            misses.push(Miss {
                check: match c.metric {
                    SloMetric::Ttft => "ttft",
                    SloMetric::Tpot => "tpot",
                    SloMetric::E2e => "e2e",
                }
                .into(),
                reason: if completed.is_empty() {
                    format!(
                        "no request completed, so p{} {} is unknown",
                        c.percentile,
                        c.metric.name()
                    )
                } else {
                    format!(
                        "p{} {} {:.1} ms > {} ms",
                        c.percentile,
                        c.metric.name(),
                        c.value_ms.value,
                        c.threshold_ms
                    )
                },
            });
        }
    }
    if goodput_share.value < targets.goodput_threshold {
        misses.push(Miss {
            check: "goodput".into(),
            reason: format!(
                "goodput {:.1}% < {:.0}%",
                100.0 * goodput_share.value,
                100.0 * targets.goodput_threshold
            ),
        });
    }
    if warmup_at_cap {
        misses.push(Miss {
            check: "warmup".into(),
            reason: "no steady state within the run: the warm-up cut reached half of it (at or past saturation, or the run is too short)".into(),
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
        && (goodput_share.excludes(targets.goodput_threshold) || goodput_share.tight(tol))
        && slo
            .iter()
            .all(|c| c.value_ms.excludes(c.threshold_ms) || c.value_ms.tight(tol));
    SteadyState {
        requests: n as u64,
        warmup_requests: start as u64,
        warmup_at_cap,
        window_start_s: a_ns / 1e9,
        window_end_s: b_ns / 1e9,
        window_requests: window.len() as u64,
        arrival_rate_per_s: per_s(window.len() as f64),
        request_throughput: per_s(done_in_window as f64),
        output_throughput,
        ttft: latency(&mut ttft),
        tpot: latency(&mut tpot),
        e2e: latency(&mut e2e),
        goodput_share,
        sustainable: misses.is_empty(),
        slo,
        queue,
        converged,
        decided,
        misses,
    }
}

/// The queue-growth test over `[a, b]` (ns) with `k` slices.
fn queue_growth(
    recs: &[RequestRecord],
    a: f64,
    b: f64,
    k: usize,
    window_arrivals: usize,
    threshold: f64,
) -> QueueGrowth {
    let none = QueueGrowth {
        growth_requests: 0.0,
        std_error_requests: 0.0,
        growth_share: 0.0,
        mean_in_system: 0.0,
        stationary: true,
    };
    if b <= a || recs.is_empty() || window_arrivals == 0 {
        return none;
    }
    // Events: +1 at each arrival, -1 at each departure; integrate N(t) over each slice.
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(2 * recs.len());
    for r in recs {
        events.push((r.arrival_ns, 1));
        events.push((r.end_ns.max(r.arrival_ns), -1));
    }
    events.sort_unstable();
    let slice = (b - a) / k as f64;
    let mut area = vec![0.0f64; k];
    let mut n_sys: i64 = 0;
    let mut t_prev = a;
    let mut i = 0;
    // Level at the window start.
    while i < events.len() && (events[i].0 as f64) <= a {
        n_sys += events[i].1;
        i += 1;
    }
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
    while i < events.len() && (events[i].0 as f64) <= b {
        let t = events[i].0 as f64;
        add(t_prev, t, n_sys, &mut area);
        n_sys += events[i].1;
        t_prev = t;
        i += 1;
    }
    add(t_prev, b, n_sys, &mut area);
    let means: Vec<f64> = area.iter().map(|x| x / slice).collect();
    // Least squares of the slice means on the slice index.
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
    let resid: f64 = means
        .iter()
        .enumerate()
        .map(|(j, y)| (y - ybar - slope * (j as f64 - xbar)).powi(2))
        .sum();
    let se_slope = if k > 2 {
        (resid / (kf - 2.0) / sxx).sqrt()
    } else {
        0.0
    };
    // Growth across the window: the fitted change from the first slice's centre to the last's.
    let growth = slope * (kf - 1.0);
    let se = se_slope * (kf - 1.0);
    let share = growth / window_arrivals as f64;
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
    fn percentiles_use_nearest_rank() {
        let mut v: Vec<f64> = (1..=1000).map(|x| x as f64).collect();
        assert_eq!(percentile(&mut v, 99.0), 990.0);
        assert_eq!(percentile(&mut v, 50.0), 500.0);
        assert_eq!(percentile(&mut v, 100.0), 1000.0);
        assert_eq!(percentile(&mut [], 99.0), 0.0);
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
    fn a_tiny_run_has_no_interval_and_is_not_decided() {
        let recs: Vec<RequestRecord> = (0..100).map(|i| rec(i as f64, 5.0, 50.0, 10)).collect();
        let s = analyze(&recs, &Targets::default(), &SteadyStateConfig::default());
        assert!(s.output_throughput.half_width.is_none());
        assert!(!s.converged && !s.decided);
        assert!(analyze(&[], &Targets::default(), &SteadyStateConfig::default()).requests == 0);
    }
}
