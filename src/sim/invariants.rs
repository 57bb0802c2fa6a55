//! The simulator's invariants, numbered as in docs/invariants.md, checked inside the event
//! loop in debug builds and in the unit tests of src/sim (release included), after every
//! event: the O(1) ones each time, the ones that scan every replica every
//! [`SCAN_EVERY`] events, the ones that scan every request every [`DEEP_EVERY`] events, so
//! that debug runs stay fast. A broken invariant panics with its number.

use super::cluster::Cluster;

/// Whether the loop checks the invariants: debug builds, and the library's own tests.
pub(super) const CHECKS: bool = cfg!(any(debug_assertions, test));

/// Events between two scans of every replica.
const SCAN_EVERY: u64 = 256;
/// Events between two scans of every request (the per-replica KV-block accounting).
const DEEP_EVERY: u64 = 4096;

/// Checks the invariants after event number `n` was handled.
pub(super) fn check_event(c: &Cluster<'_, '_>, n: u64) {
    let m = &c.metrics;
    // INV-1: every request that arrived is completed, rejected, timed out, lost, or in flight;
    // the client's count of requests in flight is the slab's.
    let left = m.completed + m.rejected + m.timed_out + m.lost;
    assert_eq!(
        m.arrived,
        left + c.client.outstanding,
        "INV-1: {} arrived, {left} left, {} in flight (event {n} at {} ns)",
        m.arrived,
        c.client.outstanding,
        c.now
    );
    assert_eq!(
        c.slab.len() as u64,
        c.client.outstanding,
        "INV-1: the slab holds {} requests, the client counts {} in flight",
        c.slab.len(),
        c.client.outstanding
    );
    // INV-2: tokens are delivered only once generated.
    assert!(
        m.generated_tokens >= m.output_tokens,
        "INV-2: {} tokens delivered, {} generated",
        m.output_tokens,
        m.generated_tokens
    );
    if n % SCAN_EVERY == 0 {
        scan_replicas(c);
    }
    if n % DEEP_EVERY == 0 {
        for pool in &c.pools {
            for (r, s) in pool.fleet.slots.iter().enumerate() {
                if let Err(e) = s.replica.check_kv(&c.slab) {
                    panic!(
                        "{e} ({} replica {r}, event {n} at {} ns)",
                        pool.role.name(),
                        c.now
                    );
                }
            }
        }
    }
}

/// INV-1 (every request in flight is held by exactly one replica), INV-3 (blocks within the
/// capacity), INV-4 (a handed-off request's blocks stay held until its transfer is over) and
/// INV-6 (seats) over every replica.
fn scan_replicas(c: &Cluster<'_, '_>) {
    let (mut held, mut handed_off, mut incoming) = (0, 0, 0);
    for pool in &c.pools {
        for (r, s) in pool.fleet.slots.iter().enumerate() {
            held += s.replica.outstanding();
            handed_off += s.replica.handed_off();
            incoming += s.replica.incoming();
            let (_, running, used, capacity) = s.replica.occupancy();
            assert!(
                used <= capacity,
                "INV-3: {} replica {r} uses {used} of {capacity} KV blocks",
                pool.role.name()
            );
            assert!(
                running <= s.replica.max_num_seqs() as u64,
                "INV-6: {} replica {r} runs {running} requests",
                pool.role.name()
            );
        }
    }
    assert_eq!(
        held, c.client.outstanding,
        "INV-1: replicas hold {held} requests, the client counts {}",
        c.client.outstanding
    );
    assert_eq!(
        handed_off, incoming,
        "INV-4: prefill replicas hold the blocks of {handed_off} handed-off requests, decode \
         replicas expect {incoming}"
    );
}

/// Checks the invariants when the loop has stopped: `in_flight` requests left, and
/// `blocks_held` KV blocks held by requests on any replica.
pub(super) fn check_end(c: &Cluster<'_, '_>, in_flight: u64, blocks_held: u64, truncated: bool) {
    scan_replicas(c);
    if truncated || in_flight > 0 {
        return;
    }
    // INV-4: when every request has left, every block a request held is back.
    assert_eq!(blocks_held, 0, "INV-4: {blocks_held} KV blocks still held");
    let m = &c.metrics;
    // INV-2: with nothing in flight and nothing lost or retried, every generated token was
    // delivered once.
    if m.lost == 0 && m.retried == 0 {
        assert_eq!(
            m.generated_tokens, m.output_tokens,
            "INV-2: {} tokens generated, {} delivered",
            m.generated_tokens, m.output_tokens
        );
    }
}
