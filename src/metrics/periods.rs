//! Per-period statistics of a long run (an hour by default): what arrived in each period and
//! how it fared, and the replicas the fleet paid for and had ready. Requests are booked to the
//! period they arrived in; replica time to the period it passed in.

use serde::Serialize;

use super::LatencyHistogram;

/// One period's counters.
#[derive(Debug, Clone, Default)]
pub struct PeriodBucket {
    /// Requests that arrived in the period.
    pub arrived: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Of those, completed within every SLO.
    pub good: u64,
    /// Of those, rejected at arrival.
    pub rejected: u64,
    /// Of those, whose client gave up.
    pub timed_out: u64,
    /// Of those, lost to a replica failure (not retried).
    pub lost: u64,
    /// TTFT of those that completed.
    pub ttft: LatencyHistogram,
    /// Replica time paid for in the period (provisioning, ready, draining or down), ns.
    pub billed_replica_ns: u128,
    /// Replica time ready to serve in the period, ns.
    pub ready_replica_ns: u128,
}

/// One period, summarised for reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeriodSummary {
    /// Start of the period, s.
    pub start_s: f64,
    /// Arrival rate in the period, req/s.
    pub arrival_rate_per_s: f64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Share of them that completed within every SLO, 0..1 (1 when none arrived).
    pub slo_attainment: f64,
    /// p99 TTFT of those that completed, ms.
    pub p99_ttft_ms: f64,
    /// Requests rejected, timed out or lost.
    pub failed: u64,
    /// Mean replicas paid for over the period.
    pub billed_replicas: f64,
    /// Mean replicas ready over the period.
    pub ready_replicas: f64,
}

/// Statistics per period of `period_ns` (disabled when 0).
#[derive(Debug, Clone, Default)]
pub struct PeriodStats {
    period_ns: u64,
    buckets: Vec<PeriodBucket>,
}

/// Most periods kept (a year of hours); later times share the last one.
const MAX_PERIODS: usize = 8784;

impl PeriodStats {
    /// Statistics per `period_ns` (0: disabled).
    pub fn new(period_ns: u64) -> Self {
        PeriodStats {
            period_ns,
            buckets: Vec::new(),
        }
    }

    /// Whether periods are kept.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.period_ns > 0
    }

    /// The period length, ns (0 when disabled).
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The bucket of time `t_ns` (None when disabled).
    #[inline]
    pub fn at(&mut self, t_ns: u64) -> Option<&mut PeriodBucket> {
        if self.period_ns == 0 {
            return None;
        }
        let i = ((t_ns / self.period_ns) as usize).min(MAX_PERIODS - 1);
        if i >= self.buckets.len() {
            self.buckets.resize_with(i + 1, PeriodBucket::default);
        }
        Some(&mut self.buckets[i])
    }

    /// Books `billed` and `ready` replicas over `[from_ns, to_ns)` to the periods it spans.
    pub fn replicas(&mut self, from_ns: u64, to_ns: u64, billed: u32, ready: u32) {
        if self.period_ns == 0 || to_ns <= from_ns || (billed == 0 && ready == 0) {
            return;
        }
        let mut t = from_ns;
        while t < to_ns {
            let end = ((t / self.period_ns + 1) * self.period_ns).min(to_ns);
            if let Some(b) = self.at(t) {
                b.billed_replica_ns += billed as u128 * (end - t) as u128;
                b.ready_replica_ns += ready as u128 * (end - t) as u128;
            }
            t = end;
        }
    }

    /// The buckets, one per period from time 0.
    pub fn buckets(&self) -> &[PeriodBucket] {
        &self.buckets
    }

    /// Summaries of the first `periods` periods (empty ones included).
    pub fn summaries(&self, periods: usize) -> Vec<PeriodSummary> {
        let secs = self.period_ns as f64 / 1e9;
        let empty = PeriodBucket::default();
        (0..periods)
            .map(|i| {
                let b = self.buckets.get(i).unwrap_or(&empty);
                PeriodSummary {
                    start_s: i as f64 * secs,
                    arrival_rate_per_s: if secs > 0.0 {
                        b.arrived as f64 / secs
                    } else {
                        0.0
                    },
                    arrived: b.arrived,
                    slo_attainment: if b.arrived > 0 {
                        b.good as f64 / b.arrived as f64
                    } else {
                        1.0
                    },
                    p99_ttft_ms: b.ttft.percentile_ns(99.0) / 1e6,
                    failed: b.rejected + b.timed_out + b.lost,
                    billed_replicas: if self.period_ns > 0 {
                        b.billed_replica_ns as f64 / self.period_ns as f64
                    } else {
                        0.0
                    },
                    ready_replicas: if self.period_ns > 0 {
                        b.ready_replica_ns as f64 / self.period_ns as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_time_is_split_across_periods() {
        let mut p = PeriodStats::new(3_600_000_000_000);
        // 2 replicas from 0.5 h to 2.25 h.
        p.replicas(1_800_000_000_000, 8_100_000_000_000, 2, 1);
        let s = p.summaries(3);
        assert!((s[0].billed_replicas - 1.0).abs() < 1e-12);
        assert!((s[1].billed_replicas - 2.0).abs() < 1e-12);
        assert!((s[2].billed_replicas - 0.5).abs() < 1e-12);
        assert!((s[1].ready_replicas - 1.0).abs() < 1e-12);
        assert_eq!(s[2].slo_attainment, 1.0);
        assert!(PeriodStats::new(0).summaries(0).is_empty());
    }
}
