//! Content-addressed prefix cache: KV blocks named by the identities a trace gives them
//! (Mooncake's `hash_ids`: one id per `hash_block_tokens` tokens, each id covering its block
//! and every block before it), so that a hit is a hit on the same content. One cache unit
//! holds one identity's tokens (`unit_blocks` KV blocks). Units no request uses are
//! evictable, least recently used first; a request frees its units last to first, so a
//! conversation's tail goes before its head (as vLLM's free-block queue does).

use std::collections::{BTreeSet, HashMap};

/// One cached identity.
#[derive(Debug, Clone, Copy)]
struct Unit {
    /// Requests holding it.
    refs: u32,
    /// Its place in the LRU order while unused (larger: more recent).
    stamp: u64,
    /// KV blocks it occupies.
    blocks: u32,
}

/// The cache of one replica.
#[derive(Debug, Default)]
pub(super) struct ContentCache {
    units: HashMap<u64, Unit>,
    /// Unused units by (stamp, id): the first is evicted first.
    lru: BTreeSet<(u64, u64)>,
    next_stamp: u64,
}

impl ContentCache {
    /// KV blocks of the cached units (used or not).
    pub(super) fn blocks(&self) -> u64 {
        self.units.values().map(|u| u.blocks as u64).sum()
    }

    /// KV blocks of the cached units no request uses.
    pub(super) fn evictable_blocks(&self) -> u64 {
        self.lru
            .iter()
            .map(|(_, id)| self.units[id].blocks as u64)
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
        let n = self.longest_prefix(ids, max);
        let mut revived = 0;
        for id in &ids[..n] {
            if self.take(*id) {
                revived += self.units[id].blocks as u64;
            }
        }
        (n, revived)
    }

    /// Takes a reference on `id` if cached; returns `None` if not cached, else whether it
    /// was unused.
    pub(super) fn take_if_cached(&mut self, id: u64) -> Option<bool> {
        self.units.contains_key(&id).then(|| self.take(id))
    }

    fn take(&mut self, id: u64) -> bool {
        let u = self.units.get_mut(&id).expect("a cached unit");
        let was_unused = u.refs == 0;
        if was_unused {
            self.lru.remove(&(u.stamp, id));
        }
        u.refs += 1;
        was_unused
    }

    /// Caches `id` (`blocks` KV blocks), computed by a request that holds it (one reference).
    pub(super) fn insert(&mut self, id: u64, blocks: u32) {
        self.units.insert(
            id,
            Unit {
                refs: 1,
                stamp: 0,
                blocks,
            },
        );
    }

    /// Drops a reference on each of `ids`, last to first (the tail becomes least recent);
    /// returns the blocks of those that became unused. `refresh`: an undone lookup keeps the units' old
    /// places in the LRU order.
    pub(super) fn release(&mut self, ids: &[u64], refresh: bool) -> u64 {
        let mut freed = 0;
        for &id in ids.iter().rev() {
            let u = self.units.get_mut(&id).expect("a held unit is cached");
            u.refs -= 1;
            if u.refs == 0 {
                if refresh {
                    self.next_stamp += 1;
                    u.stamp = self.next_stamp;
                }
                self.lru.insert((u.stamp, id));
                freed += u.blocks as u64;
            }
        }
        freed
    }

    /// Evicts the least recently used unused unit; returns its blocks.
    pub(super) fn evict_one(&mut self) -> Option<u32> {
        let (_, id) = self.lru.pop_first()?;
        self.units.remove(&id).map(|u| u.blocks)
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
        assert_eq!(c.release(&[1, 2], false), 4);
        assert_eq!(c.blocks(), 4);
    }
}
