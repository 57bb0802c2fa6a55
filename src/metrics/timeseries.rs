//! A per-interval time series of a run (arrivals, completions, running, waiting, KV use,
//! tokens/s). The interval starts at one second and doubles whenever the series would exceed
//! its bucket cap, so memory stays bounded however long the simulated time.

use serde::Serialize;

const MAX_BUCKETS: usize = 4096;

#[derive(Debug, Clone, Default)]
struct Bucket {
    arrivals: u64,
    completions: u64,
    output_tokens: u64,
    /// Time-integrals over the bucket (value x ns), summed over replicas.
    running_ns: f64,
    waiting_ns: f64,
    kv_ns: f64,
}

/// One row of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimeSeriesPoint {
    /// Start of the interval, seconds.
    pub time_s: f64,
    /// Requests that arrived in the interval, per second.
    pub arrivals_per_s: f64,
    /// Requests that completed in the interval, per second.
    pub completions_per_s: f64,
    /// Output tokens generated in the interval, per second.
    pub output_tokens_per_s: f64,
    /// Mean requests running (all replicas).
    pub running: f64,
    /// Mean requests waiting (all replicas).
    pub waiting: f64,
    /// Mean KV-cache utilisation, 0..1 (mean over replicas).
    pub kv_utilization: f64,
}

/// A bounded time series with a doubling interval.
#[derive(Debug, Clone)]
pub struct TimeSeries {
    interval_ns: u64,
    buckets: Vec<Bucket>,
    replicas: u32,
}

impl TimeSeries {
    /// An empty series for a cluster of `replicas` replicas.
    pub fn new(replicas: u32) -> Self {
        TimeSeries {
            interval_ns: 1_000_000_000,
            buckets: Vec::new(),
            replicas: replicas.max(1),
        }
    }

    fn bucket(&mut self, t_ns: u64) -> &mut Bucket {
        let mut idx = (t_ns / self.interval_ns) as usize;
        while idx >= MAX_BUCKETS {
            self.coarsen();
            idx = (t_ns / self.interval_ns) as usize;
        }
        if idx >= self.buckets.len() {
            self.buckets.resize(idx + 1, Bucket::default());
        }
        &mut self.buckets[idx]
    }

    fn coarsen(&mut self) {
        let merged: Vec<Bucket> = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut b = pair[0].clone();
                if let Some(o) = pair.get(1) {
                    b.arrivals += o.arrivals;
                    b.completions += o.completions;
                    b.output_tokens += o.output_tokens;
                    b.running_ns += o.running_ns;
                    b.waiting_ns += o.waiting_ns;
                    b.kv_ns += o.kv_ns;
                }
                b
            })
            .collect();
        self.buckets = merged;
        self.interval_ns *= 2;
    }

    /// Counts one arrival at `t_ns`.
    #[inline]
    pub fn arrival(&mut self, t_ns: u64) {
        self.bucket(t_ns).arrivals += 1;
    }

    /// Counts one completion at `t_ns`.
    #[inline]
    pub fn completion(&mut self, t_ns: u64) {
        self.bucket(t_ns).completions += 1;
    }

    /// Folds in one replica's iteration from `start_ns` lasting `dur_ns`: tokens it produced
    /// and the state it ran with. An iteration is booked to the interval it starts in.
    #[inline]
    pub fn iteration(
        &mut self,
        start_ns: u64,
        dur_ns: u64,
        tokens: u64,
        running: u64,
        waiting: u64,
        kv: f64,
    ) {
        self.iterations(
            start_ns,
            dur_ns,
            tokens,
            running,
            waiting,
            kv * dur_ns as f64,
        );
    }

    /// Length of an interval now, ns (it only grows, by doubling).
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// End of the interval that holds `t_ns` at the current interval length, ns (an interval
    /// only grows later, so iterations that start before it are booked to one interval).
    #[inline]
    pub fn interval_end_ns(&self, t_ns: u64) -> u64 {
        (t_ns / self.interval_ns + 1).saturating_mul(self.interval_ns)
    }

    /// Folds in iterations of one replica that all start in the interval of `start_ns`: their
    /// summed duration, tokens, the running and waiting counts they all ran with, and the
    /// integral of their KV utilisation over time (utilisation x ns).
    pub fn iterations(
        &mut self,
        start_ns: u64,
        dur_ns: u64,
        tokens: u64,
        running: u64,
        waiting: u64,
        kv_ns: f64,
    ) {
        let d = dur_ns as f64;
        let b = self.bucket(start_ns);
        b.output_tokens += tokens;
        b.running_ns += running as f64 * d;
        b.waiting_ns += waiting as f64 * d;
        b.kv_ns += kv_ns;
    }

    /// The series as rows.
    pub fn points(&self) -> Vec<TimeSeriesPoint> {
        let secs = self.interval_ns as f64 / 1e9;
        let ns = self.interval_ns as f64;
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| TimeSeriesPoint {
                time_s: i as f64 * secs,
                arrivals_per_s: b.arrivals as f64 / secs,
                completions_per_s: b.completions as f64 / secs,
                output_tokens_per_s: b.output_tokens as f64 / secs,
                running: b.running_ns / ns,
                waiting: b.waiting_ns / ns,
                kv_utilization: b.kv_ns / ns / self.replicas as f64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarsens_and_keeps_totals() {
        let mut ts = TimeSeries::new(1);
        for s in 0..10_000u64 {
            ts.arrival(s * 1_000_000_000);
        }
        let pts = ts.points();
        assert!(pts.len() <= MAX_BUCKETS);
        let secs = pts[1].time_s - pts[0].time_s;
        let total: f64 = pts.iter().map(|p| p.arrivals_per_s * secs).sum();
        assert!((total - 10_000.0).abs() < 1e-6);
    }
}
