//! The CPU tier of KV offloading (vLLM's `--kv-offloading-size`, served by its
//! `OffloadingConnector`): a content-addressed, least-recently-used store of block identities
//! in host memory, one per replica, modelled on vLLM as of
//! vllm-project/vllm@7368908123b14495cca88daf580cbc07c384d5b3
//! (vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py) and
//! vllm-project/vllm@002f10e0cfa1373a19a0d2756598a34b700d20e5 (vllm/config/cache.py):
//!
//! - **Stored on compute (write-through), not on eviction**: after every step the connector's
//!   `_get_reqs_to_store` stores each request's newly full blocks, from block 0 on for a
//!   request whose prefix came from the GPU cache; `prepare_store` skips those already stored
//!   and evicts the least recently used to make room. A GPU eviction then costs nothing.
//! - **Looked up after the GPU prefix cache**: `get_num_new_matched_tokens` continues the
//!   GPU hit with the consecutive stored blocks and `touch`es every block of the prompt.
//! - **Loaded before the request computes**: the hit is loaded into GPU blocks allocated for
//!   it; the tokens are then computed (no prefill work). servesim charges the transfer time
//!   (`latency + bytes / bandwidth`) to the iteration that admits the request (see
//!   `Replica::offload_load_ns`); vLLM loads asynchronously between steps, so under load
//!   servesim overstates what a load costs the requests batched with it.
//! - **Size**: GiB of host memory per engine, summed over its TP ranks (cache.py); each
//!   attention data-parallel rank is its own engine with its own buffer.
//!
//! O(1) per operation, amortized: the LRU order is a queue of (stamp, id) with lazy
//! deletion, as in `content.rs`.

use std::collections::VecDeque;

use super::content::IdMap;

/// KV offloading to host memory of one replica: capacity and link.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OffloadConfig {
    /// Capacity of the CPU tier, KV blocks of the GPU cache's size.
    pub cpu_blocks: u64,
    /// Bytes one KV block moves over one GPU's host link (its share of the block), bytes.
    pub block_bytes_per_gpu: f64,
    /// Host-link bandwidth of one GPU, one direction, bytes/s (every GPU of the replica moves
    /// its share over its own link, in parallel).
    pub bandwidth_bytes_per_s: f64,
    /// Fixed time of one load, ns.
    pub latency_ns: u64,
}

impl OffloadConfig {
    /// Time to load `blocks` KV blocks from host memory into the GPU cache, ns.
    pub fn load_ns(&self, blocks: u64) -> u64 {
        if blocks == 0 {
            return 0;
        }
        let s = blocks as f64 * self.block_bytes_per_gpu / self.bandwidth_bytes_per_s;
        self.latency_ns
            .saturating_add((s * 1e9).ceil().min(u64::MAX as f64 / 2.0) as u64)
    }
}

/// The CPU tier of one replica.
#[derive(Debug, Default)]
pub(super) struct CpuTier {
    capacity_blocks: u64,
    /// Blocks held: (stamp of the latest use, blocks) per identity.
    units: IdMap<(u64, u32)>,
    /// (stamp, id) in use order; an entry whose stamp is not its unit's is stale.
    lru: VecDeque<(u64, u64)>,
    next_stamp: u64,
    /// Blocks held now.
    pub(super) blocks: u64,
    /// Blocks stored since the start, and evicted (INV-10: stored - evicted = held).
    pub(super) stored_blocks: u64,
    pub(super) evicted_blocks: u64,
}

impl CpuTier {
    /// An empty tier of `capacity_blocks` KV blocks.
    pub(super) fn new(capacity_blocks: u64) -> Self {
        CpuTier {
            capacity_blocks,
            ..Default::default()
        }
    }

    fn stamp(&mut self, id: u64) {
        if let Some(u) = self.units.get_mut(&id) {
            self.next_stamp += 1;
            u.0 = self.next_stamp;
            self.lru.push_back((self.next_stamp, id));
        }
    }

    /// Marks `ids` as recently used, last to first (so a prompt's head is the most recent and
    /// its tail is evicted first, as vLLM's LRU manager `touch` orders them).
    pub(super) fn touch(&mut self, ids: &[u64]) {
        for &id in ids.iter().rev() {
            self.stamp(id);
        }
        self.compact();
    }

    /// Consecutive identities of `ids` held here, from the first.
    pub(super) fn matched(&self, ids: &[u64]) -> usize {
        ids.iter()
            .take_while(|id| self.units.contains_key(id))
            .count()
    }

    /// Stores `id` (`blocks` KV blocks) unless it is held; evicts the least recently used
    /// to make room. A unit larger than the tier is not stored.
    pub(super) fn store(&mut self, id: u64, blocks: u32) {
        if self.units.contains_key(&id) || blocks as u64 > self.capacity_blocks {
            return;
        }
        while self.blocks + blocks as u64 > self.capacity_blocks {
            let Some((stamp, victim)) = self.lru.pop_front() else {
                break;
            };
            if self.units.get(&victim).is_some_and(|u| u.0 == stamp) {
                let (_, b) = self.units.remove(&victim).expect("a held unit");
                self.blocks -= b as u64;
                self.evicted_blocks += b as u64;
            }
        }
        self.units.insert(id, (0, blocks));
        self.blocks += blocks as u64;
        self.stored_blocks += blocks as u64;
        self.stamp(id);
    }

    /// Drops stale queue entries once they outnumber the units.
    fn compact(&mut self) {
        if self.lru.len() > 2 * self.units.len() + 1024 {
            let units = &self.units;
            self.lru
                .retain(|(s, id)| units.get(id).is_some_and(|u| u.0 == *s));
        }
    }

    /// INV-10's recount: the blocks held add up, fit, and equal stored minus evicted.
    pub(super) fn check(&self) -> Result<(), String> {
        let held: u64 = self.units.values().map(|u| u.1 as u64).sum();
        if held != self.blocks || self.blocks > self.capacity_blocks {
            return Err(format!(
                "INV-10: the CPU tier counts {} blocks, its units hold {held}, capacity {}",
                self.blocks, self.capacity_blocks
            ));
        }
        if self.stored_blocks - self.evicted_blocks != self.blocks {
            return Err(format!(
                "INV-10: CPU tier stored {} blocks and evicted {}, holds {}",
                self.stored_blocks, self.evicted_blocks, self.blocks
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_tail_first() {
        let mut t = CpuTier::new(6);
        for id in [1, 2, 3] {
            t.store(id, 2);
        }
        t.touch(&[1, 2, 3]);
        // Touched last to first: 3 is the least recent.
        t.store(4, 2);
        assert_eq!(t.matched(&[1, 2, 3]), 2);
        assert_eq!(t.matched(&[4]), 1);
        // Room for 4 blocks: 2, then 1 go (touched before 4 was stored).
        t.store(5, 4);
        assert_eq!(t.matched(&[1]), 0);
        assert_eq!(t.matched(&[2]), 0);
        assert_eq!(t.matched(&[4, 5]), 2);
        assert_eq!(t.blocks, 6);
        t.check().unwrap();
        // Too big for the tier: not stored, nothing evicted.
        t.store(9, 7);
        assert_eq!(t.blocks, 6);
        assert_eq!(t.evicted_blocks, 6);
    }

    #[test]
    fn load_time_is_latency_plus_bytes_over_bandwidth() {
        let c = OffloadConfig {
            cpu_blocks: 10,
            block_bytes_per_gpu: 1e6,
            bandwidth_bytes_per_s: 50e9,
            latency_ns: 20_000,
        };
        assert_eq!(c.load_ns(0), 0);
        assert_eq!(c.load_ns(100), 20_000 + 2_000_000);
    }
}
