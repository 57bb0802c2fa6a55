//! INV-3 (and INV-10) of docs/invariants.md, the KV-block accounting of one replica, recomputed from the
//! requests it holds (src/sim/invariants.rs calls it every few thousand events in debug builds
//! and the library's tests).

use std::collections::HashMap;

use super::{div_ceil, Replica};
use crate::sim::request::{Phase, Slab, NONE};

impl Replica {
    /// Recomputes the blocks in use, reserved and evictable, the decode set's tallies and the
    /// prefix cache's reference counts from the running requests, and compares them with the
    /// replica's running totals. Skipped (`Ok`) inside a fast-forwarded run (its totals are
    /// those of the run's start until it is booked) and while KV transfers hold blocks the
    /// running list does not show (hand-offs held, transfers on the link).
    pub(crate) fn check_kv(&self, slab: &Slab) -> Result<(), String> {
        self.check_tiers()?;
        if self.in_run() || self.handed_off() > 0 || self.transfer_seats() > 0 {
            return Ok(());
        }
        let b = self.block();
        let (mut own, mut reserved, mut running, mut decoding, mut sum_kv) = (0, 0, 0, 0, 0);
        // By prefix group: (requests using it, of them decoding).
        let mut refs: HashMap<u32, (u32, u32)> = HashMap::new();
        // By block identity: requests holding it.
        let mut unit_refs: HashMap<u64, u32> = HashMap::new();
        let mut id = self.run_head;
        while id != NONE {
            let r = slab.get(id);
            let blocks = match r.phase {
                Phase::Decoding => {
                    decoding += 1;
                    // Tokens in the cache before the next iteration (or, while one runs, the
                    // slots it took at its start).
                    let steps = self.iter.saturating_sub(r.dec_iter0);
                    sum_kv += r.dec_kv0 as u64 + steps;
                    let in_flight = (self.busy && r.dec_iter0 <= self.iter) as u64;
                    div_ceil(r.dec_kv0 as u64 + steps + in_flight + self.spec_slots(), b)
                }
                Phase::Prefilling => (r.own_blocks + r.shared_blocks) as u64,
                phase => return Err(format!("INV-3: request {id} runs in phase {phase:?}")),
            };
            let own_r = blocks.saturating_sub(r.shared_blocks as u64);
            own += own_r;
            reserved += (r.reserve as u64).saturating_sub(own_r);
            if let (Some(ids), true) = (&r.blocks, r.shared_blocks > 0) {
                let n = r.shared_blocks / super::unit_blocks(r, self.cfg.block_size);
                for id in &ids[..n as usize] {
                    *unit_refs.entry(*id).or_default() += 1;
                }
            } else if r.shared_blocks > 0 {
                let e = refs.entry(r.prefix_group).or_default();
                e.0 += 1;
                e.1 += (r.phase == Phase::Decoding) as u32;
            }
            running += 1;
            id = r.next;
        }
        let cached: u64 = self.prefix_cache.values().map(|e| e.blocks as u64).sum();
        let evictable: u64 = self
            .prefix_cache
            .values()
            .filter(|e| e.refs == 0)
            .map(|e| e.blocks as u64)
            .sum::<u64>()
            + self.content.evictable_blocks();
        let cached = cached + self.content.blocks();
        let totals = [
            ("blocks in use", self.used_blocks, own + cached),
            ("blocks reserved", self.reserved_blocks, reserved),
            ("evictable blocks", self.evictable_blocks, evictable),
            ("running requests", self.running as u64, running),
            ("decoding requests", self.n_decoding as u64, decoding),
            ("decode context", self.sum_kv, sum_kv),
        ];
        for (what, kept, recomputed) in totals {
            if kept != recomputed {
                return Err(format!(
                    "INV-3: {what}: the replica counts {kept}, its requests hold {recomputed}"
                ));
            }
        }
        for (group, e) in &self.prefix_cache {
            let (n, dec) = refs.get(group).copied().unwrap_or_default();
            if (e.refs, e.decode_refs) != (n, dec) {
                return Err(format!(
                    "INV-3: prefix {group}: {} references ({} decoding) kept, {n} ({dec}) held",
                    e.refs, e.decode_refs
                ));
            }
        }
        for (id, kept) in self.content.refs() {
            let held = unit_refs.get(&id).copied().unwrap_or_default();
            if kept != held {
                return Err(format!(
                    "INV-3: block identity {id}: {kept} references kept, {held} held"
                ));
            }
        }
        Ok(())
    }

    /// INV-10 of docs/invariants.md: the CPU tier's blocks add up (held = stored - evicted,
    /// within its capacity) and the prompt tokens served by tier nest (CPU hits within hits
    /// within prompt tokens admitted).
    fn check_tiers(&self) -> Result<(), String> {
        if let Some(cpu) = &self.cpu {
            cpu.check()?;
        }
        let t = self.content_tokens;
        if t.cpu_hit > t.hit || t.hit > t.prompt {
            return Err(format!(
                "INV-10: prompt tokens {}, of them served from cache {}, from the CPU tier {}",
                t.prompt, t.hit, t.cpu_hit
            ));
        }
        Ok(())
    }
}
