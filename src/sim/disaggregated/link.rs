//! The link that carries KV caches into one decode replica, shared by processor sharing: the
//! transfers on it at one time each get an equal share of its bandwidth (RDMA reads posted at
//! the same time interleave on the NIC, so a short transfer never waits behind a long one).
//!
//! Progress is kept as "virtual bytes": the bytes each active transfer has received since the
//! link was last idle. It grows at `bandwidth / n` while `n` transfers are active; a transfer
//! of `b` bytes that starts at virtual bytes `v` finishes when they reach `v + b`. Adding or
//! finishing a transfer costs O(log n).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A transfer finishing on a link: (virtual bytes at its end as ordered bits, start order, id).
type Entry = Reverse<(u64, u64, u32)>;

/// One processor-sharing link.
#[derive(Debug, Clone)]
pub struct Link {
    bandwidth_bytes_per_s: f64,
    /// Bytes each active transfer has received since the link was last idle.
    served_bytes: f64,
    /// When `served_bytes` was last brought up to date, ns.
    last_ns: u64,
    active: BinaryHeap<Entry>,
    started: u64,
    /// Time with at least one transfer active, ns.
    pub busy_ns: u128,
}

impl Link {
    /// An idle link of `bandwidth_bytes_per_s` (finite, > 0).
    pub fn new(bandwidth_bytes_per_s: f64) -> Self {
        Link {
            bandwidth_bytes_per_s,
            served_bytes: 0.0,
            last_ns: 0,
            active: BinaryHeap::new(),
            started: 0,
            busy_ns: 0,
        }
    }

    /// Transfers in progress.
    #[cfg(test)]
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// Brings the virtual bytes up to `now`.
    fn advance(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns);
        let n = self.active.len();
        if n > 0 && dt > 0 {
            self.served_bytes += dt as f64 * 1e-9 * self.bandwidth_bytes_per_s / n as f64;
            self.busy_ns += dt as u128;
        }
        self.last_ns = self.last_ns.max(now);
    }

    /// Starts a transfer of `bytes` for request `id` at `now`.
    pub fn start(&mut self, now: u64, id: u32, bytes: f64) {
        self.advance(now);
        if self.active.is_empty() {
            self.served_bytes = 0.0;
        }
        let end = self.served_bytes + bytes.max(0.0);
        self.active.push(Reverse((end.to_bits(), self.started, id)));
        self.started += 1;
    }

    /// When the next transfer finishes if nothing starts before, ns (`None`: idle).
    pub fn next_finish_ns(&self) -> Option<u64> {
        let &Reverse((end, _, _)) = self.active.peek()?;
        let left = (f64::from_bits(end) - self.served_bytes).max(0.0);
        let n = self.active.len() as f64;
        let dt = (left * n / self.bandwidth_bytes_per_s * 1e9).ceil();
        // Within the validated bandwidths a transfer takes far less than the clock holds; past
        // it, the transfer ends at the clock's edge, beyond every run's time limit, so the
        // run stops there as truncated rather than on a wrapped-around time.
        let dt = crate::clock::ns_f64_to_ns(dt).unwrap_or(crate::clock::MAX_NS);
        Some(self.last_ns.saturating_add(dt))
    }

    /// Takes the transfers finished by `now`, earliest first, into `done`.
    pub fn finish(&mut self, now: u64, done: &mut Vec<u32>) {
        self.advance(now);
        // Rounding the finish time up to a whole ns overshoots by up to one ns of bandwidth;
        // half a byte absorbs the floating-point error of the running sum.
        while let Some(&Reverse((end, _, id))) = self.active.peek() {
            if f64::from_bits(end) > self.served_bytes + 0.5 {
                break;
            }
            self.active.pop();
            done.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: f64 = 1e9;

    #[test]
    fn one_transfer_takes_bytes_over_bandwidth() {
        let mut l = Link::new(10.0 * GB);
        l.start(1_000, 7, 1e6);
        // 1 MB at 10 GB/s: 100 us.
        assert_eq!(l.next_finish_ns(), Some(1_000 + 100_000));
        let mut done = Vec::new();
        l.finish(100_999, &mut done);
        assert!(done.is_empty());
        l.finish(101_000, &mut done);
        assert_eq!(done, vec![7]);
        assert_eq!(l.active(), 0);
        assert_eq!(l.busy_ns, 100_000);
    }

    #[test]
    fn two_equal_transfers_share_the_bandwidth() {
        let mut l = Link::new(10.0 * GB);
        l.start(0, 1, 1e6);
        l.start(0, 2, 1e6);
        // Each at 5 GB/s: both end at 200 us.
        assert_eq!(l.next_finish_ns(), Some(200_000));
        let mut done = Vec::new();
        l.finish(200_000, &mut done);
        assert_eq!(done, vec![1, 2]);
    }

    #[test]
    fn a_short_transfer_does_not_wait_behind_a_long_one() {
        let mut l = Link::new(10.0 * GB);
        l.start(0, 1, 10e6); // 1 ms alone
        l.start(0, 2, 1e6);
        // Shared: the short one ends when each has 1 MB, at 200 us.
        assert_eq!(l.next_finish_ns(), Some(200_000));
        let mut done = Vec::new();
        l.finish(200_000, &mut done);
        assert_eq!(done, vec![2]);
        // The long one has 9 MB left, alone: 900 us more.
        assert_eq!(l.next_finish_ns(), Some(1_100_000));
        l.finish(1_100_000, &mut done);
        assert_eq!(done, vec![2, 1]);
        // Work conserving: 11 MB at 10 GB/s is 1.1 ms of busy link.
        assert_eq!(l.busy_ns, 1_100_000);
    }

    #[test]
    fn a_late_arrival_gets_its_share_from_then() {
        let mut l = Link::new(1.0 * GB);
        l.start(0, 1, 2e6); // 2 ms alone
        l.start(1_000_000, 2, 0.5e6); // at 1 ms, 1 MB left of the first
                                      // Shared from 1 ms: the second's 0.5 MB at 0.5 GB/s takes 1 ms.
        assert_eq!(l.next_finish_ns(), Some(2_000_000));
        let mut done = Vec::new();
        l.finish(2_000_000, &mut done);
        assert_eq!(done, vec![2]);
        // The first had 0.5 MB left at 2 ms, alone: 0.5 ms.
        assert_eq!(l.next_finish_ns(), Some(2_500_000));
    }
}
