//! Content-addressed prefix cache: KV blocks named by the identities a trace gives them
//! (Mooncake's `hash_ids`: one id per `hash_block_tokens` tokens, each id covering its block
//! and every block before it), so that a hit is a hit on the same content. One cache unit
//! holds one identity's tokens (`unit_blocks` KV blocks). Units no request uses are
//! evictable, least recently used first; a request frees its units last to first, so a
//! conversation's tail goes before its head (as vLLM's free-block queue does).
//!
//! O(1) per operation: the LRU order is a queue of (stamp, id) in release order, stamps
//! increasing; taking a unit leaves its entry in place (stale once the unit is released
//! again with a newer stamp, or evicted), eviction skips stale entries, and the queue is
//! compacted when stale entries outnumber the units.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a block identity with SplitMix64's finalizer: identities are not adversarial, and
/// the default SipHash showed as a tenth of a multi-turn run's profile.
#[derive(Debug, Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }

    fn write_u64(&mut self, x: u64) {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

/// A map keyed by block identity.
pub(super) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// One cached identity.
#[derive(Debug, Clone, Copy)]
struct Unit {
    /// Requests holding it.
    refs: u32,
    /// Its place in the LRU order (larger: more recent), from its latest release.
    stamp: u64,
    /// Whether the queue holds an entry with its stamp.
    queued: bool,
    /// KV blocks it occupies.
    blocks: u32,
}

/// The cache of one replica.
#[derive(Debug, Default)]
pub(super) struct ContentCache {
    units: IdMap<Unit>,
    /// (stamp, id) in release order: the first live one (its unit unused, with that stamp)
    /// is evicted first.
    lru: VecDeque<(u64, u64)>,
    next_stamp: u64,
}

impl ContentCache {
    /// KV blocks of the cached units (used or not).
    pub(super) fn blocks(&self) -> u64 {
        self.units.values().map(|u| u.blocks as u64).sum()
    }

    /// KV blocks of the cached units no request uses.
    pub(super) fn evictable_blocks(&self) -> u64 {
        self.units
            .values()
            .filter(|u| u.refs == 0)
            .map(|u| u.blocks as u64)
            .sum()
    }

    /// Leading ids of `ids` (at most `max`) cached here, without taking them.
    pub(super) fn longest_prefix(&self, ids: &[u64], max: usize) -> usize {
        ids.iter()
            .take(max)
            .take_while(|id| self.units.contains_key(id))
            .count()
    }

    /// Takes a reference on the leading cached ids of `ids` (at most `max`); returns how
    /// many, and the blocks of those that were unused (no longer evictable).
    pub(super) fn acquire_prefix(&mut self, ids: &[u64], max: usize) -> (usize, u64) {
        let mut revived = 0;
        let mut n = 0;
        for id in ids.iter().take(max) {
            match self.units.get_mut(id) {
                Some(u) => {
                    if u.refs == 0 {
                        revived += u.blocks as u64;
                    }
                    u.refs += 1;
                    n += 1;
                }
                None => break,
            }
        }
        (n, revived)
    }

    /// Takes a reference on `id` if cached; returns `None` if not cached, else whether it
    /// was unused.
    pub(super) fn take_if_cached(&mut self, id: u64) -> Option<bool> {
        let u = self.units.get_mut(&id)?;
        u.refs += 1;
        Some(u.refs == 1)
    }

    /// Caches `id` (`blocks` KV blocks), computed by a request that holds it (one reference).
    pub(super) fn insert(&mut self, id: u64, blocks: u32) {
        self.units.insert(
            id,
            Unit {
                refs: 1,
                stamp: 0,
                queued: false,
                blocks,
            },
        );
    }

    /// Drops a reference on each of `ids`, last to first (the tail becomes least recent);
    /// returns the blocks of those that became unused. `refresh`: an undone lookup keeps the
    /// units' old places in the LRU order (when their entries are still queued).
    pub(super) fn release(&mut self, ids: &[u64], refresh: bool) -> u64 {
        let mut freed = 0;
        for &id in ids.iter().rev() {
            let u = self.units.get_mut(&id).expect("a held unit is cached");
            u.refs -= 1;
            if u.refs == 0 {
                if refresh || !u.queued {
                    self.next_stamp += 1;
                    u.stamp = self.next_stamp;
                    u.queued = true;
                    self.lru.push_back((u.stamp, id));
                }
                freed += u.blocks as u64;
            }
        }
        if refresh && self.lru.len() > 2 * self.units.len() + 1024 {
            let units = &self.units;
            self.lru
                .retain(|(s, id)| units.get(id).is_some_and(|u| u.stamp == *s));
        }
        freed
    }

    /// Evicts the least recently used unused unit; returns its blocks.
    pub(super) fn evict_one(&mut self) -> Option<u32> {
        while let Some((stamp, id)) = self.lru.pop_front() {
            let Some(u) = self.units.get_mut(&id) else {
                continue;
            };
            if u.stamp != stamp {
                continue;
            }
            if u.refs > 0 {
                u.queued = false;
                continue;
            }
            return self.units.remove(&id).map(|u| u.blocks);
        }
        None
    }

    /// References per cached id (for the invariant check).
    pub(super) fn refs(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.units.iter().map(|(id, u)| (*id, u.refs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_tail_of_the_oldest_release_first() {
        let mut c = ContentCache::default();
        for id in [1, 2, 3] {
            c.insert(id, 2);
        }
        assert_eq!(c.release(&[1, 2, 3], true), 6);
        c.insert(9, 5);
        assert_eq!(c.release(&[9], true), 5);
        // The tail (3) was freed first: least recent. 1 and 2 are taken again.
        assert_eq!(c.acquire_prefix(&[1, 2, 7], 3), (2, 4));
        assert_eq!(c.evictable_blocks(), 7);
        assert_eq!(c.evict_one(), Some(2));
        assert_eq!(c.evict_one(), Some(5));
        assert_eq!(c.evict_one(), None);
        assert_eq!(c.longest_prefix(&[1, 2, 3], 3), 2);
        // Released without refresh after their entries left the queue: queued again.
        assert_eq!(c.release(&[1, 2], false), 4);
        assert_eq!(c.blocks(), 4);
        assert_eq!(c.evict_one(), Some(2));
        assert_eq!(c.evict_one(), Some(2));
        assert_eq!(c.blocks(), 0);
    }

    #[test]
    fn an_undone_lookup_keeps_the_units_places() {
        let mut c = ContentCache::default();
        // Unit i holds i blocks, so the evictions' sizes show their order.
        for id in [1, 2, 3] {
            c.insert(id, id as u32);
        }
        c.release(&[3], true);
        c.release(&[1, 2], true);
        // Order: 3, 2, 1. A lookup takes 1 and 2, then is undone: the order stands.
        assert_eq!(c.acquire_prefix(&[1, 2], 2), (2, 3));
        assert_eq!(c.release(&[1, 2], false), 3);
        let order: Vec<u32> = std::iter::from_fn(|| c.evict_one()).collect();
        assert_eq!(order, vec![3, 2, 1]);
    }

    #[test]
    fn the_queue_stays_bounded_under_repeated_reuse() {
        let mut c = ContentCache::default();
        c.insert(7, 1);
        c.release(&[7], true);
        for _ in 0..100_000 {
            c.acquire_prefix(&[7], 1);
            c.release(&[7], true);
        }
        assert!(c.lru.len() <= 2 * c.units.len() + 1025, "{}", c.lru.len());
        assert_eq!(c.evict_one(), Some(1));
        assert_eq!(c.evict_one(), None);
    }
}
