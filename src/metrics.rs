//! Streaming metrics: latency histograms, counters, time series. Memory does not grow with the
//! number of requests: each request is folded in at completion and forgotten.
//!
//! Definitions follow vLLM's `bench serve`: TTFT = arrival to first token; TPOT =
//! (E2E - TTFT) / (output tokens - 1) per request; ITL = every gap between consecutive tokens,
//! pooled; E2E = arrival to last token.

mod periods;
mod request_log;
mod speculated;
pub mod steady_state;
mod timeseries;

pub use periods::{PeriodBucket, PeriodStats, PeriodSummary};
pub use request_log::{Outcome, RequestLog, RequestRecord, STEADY_STATE_RECORDS};
pub use speculated::SpeculatedLengths;
pub use timeseries::{TimeSeries, TimeSeriesPoint};

use hdrhistogram::Histogram;
use serde::Serialize;

/// A century in ns: latencies are clamped to it (auto-resizing histograms fail above
/// i64::MAX / 2).
const CENTURY_NS: u64 = 3_155_760_000_000_000_000;

/// A streaming distribution of durations in nanoseconds (3 significant digits) with an exact mean.
///
/// Samples folded in with [`LatencyHistogram::record_repeating`] are counted in a pending
/// bucket first (and those of [`LatencyHistogram::record_bucket`] that fall in it): a series whose
/// consecutive samples mostly share a bucket (per-iteration figures: the batch size, the KV
/// permille, the inter-token latency) then costs two compares a sample instead of a histogram
/// update. Bucket counts add up in any order, so the histogram is the same; readers see the
/// pending count too ([`LatencyHistogram::flush`] folds it in for good).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    sum_ns: u128,
    count: u64,
    /// Exact extremes, so percentiles never leave the range of the samples.
    min_ns: u64,
    max_ns: u64,
    /// The pending bucket: its lowest value, ns ...
    pending_low_ns: u64,
    /// ... its width less one, ns (a value v is in it when v - low <= span, wrapping) ...
    pending_span_ns: u64,
    /// ... and the samples counted in it, not yet in `hist` (0: no pending bucket).
    pending_n: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Mean, median, p90 and p99 of one latency metric, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Samples folded in.
    pub count: u64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub median_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        // 3 significant digits, auto-resizing: `new` cannot fail for sigfig in 0..=5.
        let hist = Histogram::new(3).expect("3 significant digits is a valid precision");
        LatencyHistogram {
            hist,
            sum_ns: 0,
            count: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            pending_low_ns: 0,
            pending_span_ns: 0,
            pending_n: 0,
        }
    }

    /// Whether `v` falls in the pending bucket.
    #[inline]
    fn in_pending(&self, v: u64) -> bool {
        v.wrapping_sub(self.pending_low_ns) <= self.pending_span_ns && self.pending_n > 0
    }

    /// Counts `n` samples of `v` (at most [`CENTURY_NS`]) in the pending bucket, which moves
    /// to `v`'s bucket when `v` is outside it.
    #[inline]
    fn count_pending(&mut self, v: u64, n: u64) {
        if self.in_pending(v) {
            self.pending_n += n;
            return;
        }
        self.flush();
        let low = self.hist.lowest_equivalent(v);
        self.pending_low_ns = low;
        self.pending_span_ns = self.hist.highest_equivalent(v) - low;
        self.pending_n = n;
    }

    /// Folds the pending bucket's count into the histogram.
    pub fn flush(&mut self) {
        if self.pending_n > 0 {
            let _ = self.hist.record_n(self.pending_low_ns, self.pending_n);
            self.pending_n = 0;
        }
    }

    /// The histogram with the pending count in it (a copy only while one is pending).
    fn merged(&self) -> std::borrow::Cow<'_, Histogram<u64>> {
        if self.pending_n == 0 {
            return std::borrow::Cow::Borrowed(&self.hist);
        }
        let mut hist = self.hist.clone();
        let _ = hist.record_n(self.pending_low_ns, self.pending_n);
        std::borrow::Cow::Owned(hist)
    }

    /// Folds in `n` samples of `value_ns`, from a series whose consecutive samples mostly
    /// fall in the same bucket (see the type's documentation); the same histogram as
    /// [`LatencyHistogram::record_n`].
    #[inline]
    pub fn record_repeating(&mut self, value_ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let v = value_ns.min(CENTURY_NS);
        self.count_pending(v, n);
        self.sum_ns += v as u128 * n as u128;
        self.count += n;
        self.min_ns = self.min_ns.min(v);
        self.max_ns = self.max_ns.max(v);
    }

    /// Folds in `n` samples of `value_ns`.
    #[inline]
    pub fn record_n(&mut self, value_ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        // Auto-resizing histograms only fail above i64::MAX/2; clamp to a century of ns.
        let v = value_ns.min(CENTURY_NS);
        let _ = self.hist.record_n(v, n);
        self.sum_ns += v as u128 * n as u128;
        self.count += n;
        self.min_ns = self.min_ns.min(v);
        self.max_ns = self.max_ns.max(v);
    }

    /// The largest value counted in the same histogram bucket as `value_ns`, ns.
    #[inline]
    pub fn bucket_top_ns(&self, value_ns: u64) -> u64 {
        self.hist.highest_equivalent(value_ns.min(CENTURY_NS))
    }

    /// Folds in `n` samples that all fall in the bucket of `min_ns` (up to
    /// [`LatencyHistogram::bucket_top_ns`]), summing to `sum_ns`, the largest `max_ns`: the
    /// same histogram as recording them one by one, with the exact mean and extremes.
    pub fn record_bucket(&mut self, min_ns: u64, n: u64, sum_ns: u128, max_ns: u64) {
        if n == 0 {
            return;
        }
        debug_assert!(min_ns <= max_ns && max_ns <= self.bucket_top_ns(min_ns));
        let v = min_ns.min(CENTURY_NS);
        // The groups of a fast-forwarded run fill consecutive buckets: each goes to the
        // histogram, unless it falls in the pending bucket.
        if self.in_pending(v) {
            self.pending_n += n;
        } else {
            let _ = self.hist.record_n(v, n);
        }
        self.sum_ns += sum_ns;
        self.count += n;
        self.min_ns = self.min_ns.min(v);
        self.max_ns = self.max_ns.max(max_ns.min(CENTURY_NS));
    }

    /// Folds in one sample.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.record_n(value_ns, 1);
    }

    /// Samples folded in.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The samples folded in since `earlier`, a copy of this histogram taken before (its
    /// percentiles only; the mean and extremes are approximate).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut hist = self.merged().into_owned();
        if hist.subtract(&*earlier.merged()).is_err() {
            return self.clone();
        }
        let count = self.count.saturating_sub(earlier.count);
        LatencyHistogram {
            hist,
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            count,
            min_ns: if count > 0 { 0 } else { u64::MAX },
            max_ns: if count > 0 { self.max_ns } else { 0 },
            pending_low_ns: 0,
            pending_span_ns: 0,
            pending_n: 0,
        }
    }

    /// Exact mean, ns (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// Value at percentile `p` in [0, 100], ns (0 when empty).
    pub fn percentile_ns(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let v = (self.merged()).value_at_quantile((p / 100.0).clamp(0.0, 1.0));
        v.clamp(self.min_ns, self.max_ns) as f64
    }

    /// Mean, median, p90, p99 and max in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        let ms = |ns: f64| ns / 1e6;
        LatencySummary {
            count: self.count,
            mean_ms: ms(self.mean_ns()),
            median_ms: ms(self.percentile_ns(50.0)),
            p90_ms: ms(self.percentile_ns(90.0)),
            p99_ms: ms(self.percentile_ns(99.0)),
            max_ms: if self.count == 0 {
                0.0
            } else {
                ms(self.max_ns as f64)
            },
        }
    }

    /// (quantile, value ms) pairs for a CDF plot, `points` + 1 evenly spaced quantiles, in one
    /// pass over the recorded buckets.
    pub fn cdf_ms(&self, points: usize) -> Vec<(f64, f64)> {
        if self.count == 0 || points == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(points + 1);
        let mut i = 0usize;
        let mut cumulative = 0u64;
        let clamp = |v: u64| v.clamp(self.min_ns, self.max_ns) as f64 / 1e6;
        let hist = self.merged();
        for v in hist.iter_recorded() {
            cumulative += v.count_at_value();
            let value = clamp(v.value_iterated_to());
            // The sample of rank ceil(q n) (at least 1) is the q-quantile.
            while i <= points {
                let q = i as f64 / points as f64;
                let rank = ((q * self.count as f64).ceil() as u64).max(1);
                if rank > cumulative {
                    break;
                }
                out.push((q, value));
                i += 1;
            }
        }
        while i <= points {
            out.push((i as f64 / points as f64, self.max_ns as f64 / 1e6));
            i += 1;
        }
        out
    }
}

/// A streaming distribution of small integers (batch sizes, utilisation percent), weighted.
#[derive(Debug, Clone, Default)]
pub struct WeightedStat {
    sum_w: f64,
    sum_wx: f64,
    max: f64,
}

impl WeightedStat {
    /// Folds in value `x` with weight `w`.
    #[inline]
    pub fn record(&mut self, x: f64, w: f64) {
        self.sum_w += w;
        self.sum_wx += w * x;
        if x > self.max {
            self.max = x;
        }
    }

    /// Folds in many values at once: their total weight, their weighted sum and their largest.
    pub fn record_sums(&mut self, sum_w: f64, sum_wx: f64, max: f64) {
        self.sum_w += sum_w;
        self.sum_wx += sum_wx;
        if max > self.max {
            self.max = max;
        }
    }

    /// Weighted mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.sum_w > 0.0 {
            self.sum_wx / self.sum_w
        } else {
            0.0
        }
    }

    /// Largest value seen.
    pub fn max(&self) -> f64 {
        self.max
    }
}

/// Everything measured during one simulation, folded in as it happens.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Time to first token of completed requests.
    pub ttft: LatencyHistogram,
    /// Time per output token of completed requests with more than one output token.
    pub tpot: LatencyHistogram,
    /// Inter-token latency, every gap pooled.
    pub itl: LatencyHistogram,
    /// End-to-end latency of completed requests.
    pub e2e: LatencyHistogram,
    /// Arrival to first scheduling (queueing delay) of completed requests.
    pub queue: LatencyHistogram,
    /// Requests that arrived (were sent to the cluster).
    pub arrived: u64,
    /// Requests that completed.
    pub completed: u64,
    /// Requests rejected at arrival (admission control, too long for the model).
    pub rejected: u64,
    /// Of `rejected`, those whose prompt + output exceed the deployment's max_model_len.
    pub rejected_too_long: u64,
    /// Requests whose client gave up waiting for the first token.
    pub timed_out: u64,
    /// Preemptions (recompute).
    pub preemptions: u64,
    /// Completed requests that met every SLO.
    pub good: u64,
    /// Prompt tokens of completed requests.
    pub input_tokens: u64,
    /// Output tokens of completed requests.
    pub output_tokens: u64,
    /// Output tokens generated, including by requests not (yet) completed.
    pub generated_tokens: u64,
    /// Of `generated_tokens`, those of decode-only iterations (the iterations speculative
    /// decoding may speculate in).
    pub decode_only_tokens: u64,
    /// Of `decode_only_tokens`, those of iterations that speculated (batch within the
    /// speculative batch limit); 0 without speculation.
    pub speculated_tokens: u64,
    /// Decode-only iterations (one token per decoding sequence each).
    pub decode_only_iterations: u64,
    /// Of `decode_only_iterations`, those that speculated.
    pub speculated_iterations: u64,
    /// Completed requests by the decode tokens each made in iterations that speculated (the
    /// measured acceptance length's input); empty without speculation.
    pub speculated_lengths: SpeculatedLengths,
    /// Prompt tokens computed by prefills (recomputation and cache hits accounted).
    pub prefill_tokens_computed: u64,
    /// Prompt tokens served from the prefix cache.
    pub prefix_cache_hit_tokens: u64,
    /// Engine iterations run.
    pub iterations: u64,
    /// Sequences per iteration, weighted by iterations.
    pub batch_size: WeightedStat,
    /// Distribution of sequences per iteration (one sample per iteration).
    pub batch_size_hist: LatencyHistogram,
    /// Distribution of KV-cache utilisation per iteration, in units of 0.1%.
    pub kv_permille_hist: LatencyHistogram,
    /// KV-cache utilisation (0..1), weighted by time.
    pub kv_utilization: WeightedStat,
    /// GPU busy time summed over replicas, ns.
    pub busy_ns: u128,
    /// Time of the first arrival, ns.
    pub first_arrival_ns: Option<u64>,
    /// Time of the last completion, rejection or time-out, ns.
    pub last_event_ns: u64,
    /// Per-request records for the steady-state analysis (disabled unless asked for).
    pub log: RequestLog,
    /// Requests lost to a replica failure (not retried).
    pub lost: u64,
    /// Requests a client retried after their replica failed.
    pub retried: u64,
    /// Replica time paid for, all replicas, ns (provisioning, ready, draining or down).
    pub billed_replica_ns: u128,
    /// Per-period statistics (disabled unless asked for).
    pub periods: PeriodStats,
    /// Why the run must stop at once, set by a replica whose next iteration lasts beyond the
    /// simulator's clock ([`crate::clock`]); the event loop ends the run as truncated with it.
    pub stop: Option<String>,
}

impl Metrics {
    /// Folds every histogram's pending count in ([`LatencyHistogram::flush`]): readers see
    /// those counts either way; this only spares each read a copy of the histogram.
    pub fn flush(&mut self) {
        for h in [
            &mut self.ttft,
            &mut self.tpot,
            &mut self.itl,
            &mut self.e2e,
            &mut self.queue,
            &mut self.batch_size_hist,
            &mut self.kv_permille_hist,
        ] {
            h.flush();
        }
    }

    /// Books a request that arrived at `arrival_ns` with `input_tokens` prompt tokens and got
    /// no token: rejected at arrival or timed out at `now_ns` (`outcome`, one of those two):
    /// its record, its period's count and the run's.
    pub fn record_unserved(
        &mut self,
        outcome: Outcome,
        arrival_ns: u64,
        input_tokens: u32,
        now_ns: u64,
    ) {
        debug_assert!(matches!(outcome, Outcome::Rejected | Outcome::TimedOut));
        self.log.push(RequestRecord {
            arrival_ns,
            first_token_ns: now_ns,
            end_ns: now_ns,
            input_tokens,
            output_tokens: 0,
            outcome,
        });
        let period = self.periods.at(arrival_ns);
        if outcome == Outcome::Rejected {
            self.rejected += 1;
            if let Some(b) = period {
                b.rejected += 1;
            }
        } else {
            self.timed_out += 1;
            if let Some(b) = period {
                b.timed_out += 1;
            }
        }
        self.last_event_ns = self.last_event_ns.max(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_stay_within_the_samples() {
        let mut h = LatencyHistogram::new();
        h.record(31_009_447);
        let s = h.summary();
        assert_eq!(s.p99_ms, s.mean_ms);
        assert_eq!(s.median_ms, 31.009447);
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1_000_000);
        }
        let s = h.summary();
        assert!((s.median_ms - 500.0).abs() / 500.0 < 0.002, "{s:?}");
        assert!((s.p99_ms - 990.0).abs() / 990.0 < 0.002, "{s:?}");
        assert_eq!(s.max_ms, 1000.0);
        assert!((s.mean_ms - 500.5).abs() < 1e-9);
    }

    #[test]
    fn cdf_is_monotone_and_spans_the_samples() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1_000_000);
        }
        let cdf = h.cdf_ms(100);
        assert_eq!(cdf.len(), 101);
        assert_eq!(cdf[0].0, 0.0);
        assert!((cdf[0].1 - 1.0).abs() < 0.002, "{:?}", cdf[0]);
        assert_eq!(cdf[100], (1.0, 1000.0));
        assert!(cdf.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0));
        assert!((cdf[50].1 - 500.0).abs() / 500.0 < 0.002, "{:?}", cdf[50]);
    }

    /// Samples counted through the pending bucket (`record_repeating`, `record_bucket`) give
    /// the same summary, CDF and `since` as recording each directly, before and after a flush:
    /// runs of nearby values (hits), jumps (misses) and values that make the histogram resize.
    #[test]
    fn the_pending_bucket_changes_no_figure() {
        let (mut direct, mut pending) = (LatencyHistogram::new(), LatencyHistogram::new());
        let (mut x, mut snapshot) = (1u64, None);
        for i in 0..20_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v = if i % 7 == 0 {
                x >> 20
            } else {
                5_000_000 + (i / 50) * 3_000 + (x >> 60)
            };
            let n = 1 + (x >> 62);
            direct.record_n(v, n);
            if i % 3 == 0 {
                pending.record_bucket(v, n, v as u128 * n as u128, v);
            } else {
                pending.record_repeating(v, n);
            }
            if i == 10_000 {
                snapshot = Some((direct.clone(), pending.clone()));
            }
        }
        assert!(pending.pending_n > 0, "the test ends with a pending count");
        let (d0, p0) = snapshot.expect("taken");
        let same = |a: &LatencyHistogram, b: &LatencyHistogram| {
            assert_eq!(a.summary(), b.summary());
            assert_eq!(a.cdf_ms(100), b.cdf_ms(100));
            assert_eq!(a.percentile_ns(0.0), b.percentile_ns(0.0));
        };
        same(&direct, &pending);
        same(&direct.since(&d0), &pending.since(&p0));
        pending.flush();
        assert_eq!(pending.pending_n, 0);
        same(&direct, &pending);
    }

    #[test]
    fn empty_histograms_report_zeros_not_nan() {
        let s = LatencyHistogram::new().summary();
        assert_eq!(
            (s.mean_ms, s.median_ms, s.p99_ms, s.max_ms),
            (0.0, 0.0, 0.0, 0.0)
        );
    }
}
