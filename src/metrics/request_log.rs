//! An opt-in per-request log: one compact record per request that left the system, for the
//! steady-state analysis ([`super::steady_state`]), which needs requests in arrival order.
//!
//! The streaming metrics stay the default; the log costs 40 bytes per record and never holds
//! more than [`RequestLog::capacity`] records: when it fills, it keeps every other record and
//! from then on every second request that leaves (then every fourth, ...). What it holds is a
//! systematic sample of the requests in the order they left, 1 in [`RequestLog::stride`], at
//! least half its capacity once it has thinned; the analysis scales counts by
//! [`RequestLog::seen`] over the records kept and computes its intervals on the sample, so
//! they include the sampling error. Memory stays flat whatever the run's length.

use serde::Serialize;

/// How a request left the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Completed within every SLO.
    Good,
    /// Completed, missing at least one SLO.
    Completed,
    /// Rejected at arrival (admission control, or longer than max_model_len).
    Rejected,
    /// The client gave up before its first token.
    TimedOut,
    /// Lost with its replica when the replica failed (not retried).
    Lost,
}

/// One request's life, in nanoseconds since the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRecord {
    /// When its latency starts counting (arrival, or the client's send under a concurrency
    /// cap), ns.
    pub arrival_ns: u64,
    /// Time of its first output token, ns (equal to `end_ns` when it never got one).
    pub first_token_ns: u64,
    /// Time it left: last token, rejection or give-up, ns.
    pub end_ns: u64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens generated for it (0 unless completed).
    pub output_tokens: u32,
    /// How it left.
    pub outcome: Outcome,
}

impl RequestRecord {
    /// Whether it completed (within its SLOs or not).
    pub fn completed(&self) -> bool {
        matches!(self.outcome, Outcome::Good | Outcome::Completed)
    }

    /// Time to first token, ns (completed requests).
    pub fn ttft_ns(&self) -> u64 {
        self.first_token_ns.saturating_sub(self.arrival_ns)
    }

    /// End-to-end latency, ns.
    pub fn e2e_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.arrival_ns)
    }

    /// Time per output token after the first, ns (`None` with fewer than two tokens).
    pub fn tpot_ns(&self) -> Option<u64> {
        (self.completed() && self.output_tokens > 1).then(|| {
            self.end_ns.saturating_sub(self.first_token_ns) / (self.output_tokens as u64 - 1)
        })
    }
}

/// Most records a steady-state analysis keeps (40 bytes each, about 10 MB): `run` and every
/// measurement of `plan` use this one bound, so a plan's re-run line analyses the same sample.
pub const STEADY_STATE_RECORDS: usize = 1 << 18;

/// Records of the requests that left the system, in the order they left: all of them, or a
/// systematic sample of 1 in [`RequestLog::stride`] once more than [`RequestLog::capacity`]
/// have left.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    records: Vec<RequestRecord>,
    capacity: usize,
    /// Requests that left (every push, kept or not).
    seen: u64,
    /// Every `stride`-th push is kept (a power of two; 1 until the log first fills).
    stride: u64,
}

impl RequestLog {
    /// A log that keeps at most `capacity` records (0: a disabled log that keeps and counts
    /// nothing).
    pub fn with_capacity(capacity: usize) -> Self {
        RequestLog {
            records: Vec::new(),
            capacity,
            seen: 0,
            stride: 1,
        }
    }

    /// Whether this log keeps records at all.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Most records kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds a request that left: kept when its place in the order of departures is a
    /// multiple of the stride; a full log first thins to every other record and doubles the
    /// stride (nothing when disabled).
    #[inline]
    pub fn push(&mut self, r: RequestRecord) {
        if self.capacity == 0 {
            return;
        }
        if self.seen % self.stride == 0 {
            if self.records.len() >= self.capacity {
                self.thin();
            }
            if self.seen % self.stride == 0 {
                self.records.push(r);
            }
        }
        self.seen += 1;
    }

    /// Keeps every other record (those whose departure index is a multiple of twice the
    /// stride) and doubles the stride.
    #[cold]
    fn thin(&mut self) {
        let mut i = 0usize;
        self.records.retain(|_| {
            i += 1;
            i % 2 == 1
        });
        self.stride = self.stride.saturating_mul(2);
    }

    /// The records kept, in the order requests left.
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Requests that left the system, kept or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The log keeps 1 record in `stride` (1: every request).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Splits an unbounded log into every record and the log a log of `capacity` would have
    /// kept of the same requests.
    pub fn split_at_capacity(self, capacity: usize) -> (Vec<RequestRecord>, RequestLog) {
        let mut capped = RequestLog::with_capacity(capacity);
        for &r in &self.records {
            capped.push(r);
        }
        (self.records, capped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbounded_log_splits_into_every_record_and_what_a_capped_log_keeps() {
        let rec = |i: u64| RequestRecord {
            arrival_ns: i,
            first_token_ns: i + 1,
            end_ns: i + 2,
            input_tokens: 10,
            output_tokens: 5,
            outcome: Outcome::Good,
        };
        let fill = || {
            let mut log = RequestLog::with_capacity(usize::MAX);
            (0..5).for_each(|i| log.push(rec(i)));
            log
        };
        let (all, capped) = fill().split_at_capacity(3);
        assert_eq!(all.len(), 5);
        let mut direct = RequestLog::with_capacity(3);
        all.iter().for_each(|&r| direct.push(r));
        assert_eq!(capped.records(), direct.records());
        assert_eq!((capped.seen(), capped.stride()), (5, 2));
        let (all, off) = fill().split_at_capacity(0);
        assert_eq!(all.len(), 5);
        assert!(!off.enabled() && off.records().is_empty() && off.seen() == 0);
    }

    #[test]
    fn a_full_log_keeps_a_systematic_sample_of_bounded_size() {
        let rec = |i: u64| RequestRecord {
            arrival_ns: i,
            first_token_ns: i,
            end_ns: i,
            input_tokens: 1,
            output_tokens: 1,
            outcome: Outcome::Good,
        };
        for (cap, n) in [
            (8usize, 7u64),
            (8, 8),
            (8, 9),
            (8, 1000),
            (1000, 1_000_000),
            (1, 5),
        ] {
            let mut log = RequestLog::with_capacity(cap);
            (0..n).for_each(|i| log.push(rec(i)));
            let s = log.stride();
            assert!(s.is_power_of_two());
            // Exactly the departures whose index is a multiple of the stride, in order.
            let kept: Vec<u64> = log.records().iter().map(|r| r.arrival_ns).collect();
            let want: Vec<u64> = (0..n).filter(|i| i % s == 0).collect();
            assert_eq!(kept, want, "capacity {cap}, {n} requests");
            assert!(kept.len() <= cap, "{} > {cap}", kept.len());
            if s > 1 {
                assert!(
                    2 * kept.len() >= cap,
                    "{} kept of capacity {cap}",
                    kept.len()
                );
            }
            assert_eq!(log.seen(), n);
        }
    }
}
