//! An opt-in per-request log: one compact record per request that left the system, for the
//! steady-state analysis ([`super::steady_state`]), which needs requests in arrival order.
//!
//! The streaming metrics stay the default; the log costs 40 bytes per request and is bounded
//! by [`RequestLog::capacity`]: past it, records are no longer kept and the log says so.

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

/// Records of the requests that left the system, in the order they left.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    records: Vec<RequestRecord>,
    capacity: usize,
    /// Records not kept because the log was full.
    dropped: u64,
}

impl RequestLog {
    /// A log that keeps at most `capacity` records (0: a disabled log that keeps none and
    /// reports nothing dropped).
    pub fn with_capacity(capacity: usize) -> Self {
        RequestLog {
            records: Vec::new(),
            capacity,
            dropped: 0,
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

    /// Adds a record (counted as dropped when full; nothing when disabled).
    #[inline]
    pub fn push(&mut self, r: RequestRecord) {
        if self.capacity == 0 {
            return;
        }
        if self.records.len() < self.capacity {
            self.records.push(r);
        } else {
            self.dropped += 1;
        }
    }

    /// The records kept, in the order requests left.
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Records not kept because the log was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Splits an unbounded log into every record and the log a log of `capacity` would have
    /// kept of the same requests.
    pub fn split_at_capacity(self, capacity: usize) -> (Vec<RequestRecord>, RequestLog) {
        let mut capped = RequestLog::with_capacity(capacity);
        for &r in &self.records {
            capped.push(r);
        }
        capped.dropped += self.dropped;
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
        assert_eq!(capped.dropped(), 2);
        let (all, off) = fill().split_at_capacity(0);
        assert_eq!(all.len(), 5);
        assert!(!off.enabled() && off.records().is_empty() && off.dropped() == 0);
    }
}
