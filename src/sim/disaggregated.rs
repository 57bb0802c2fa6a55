//! The disaggregated cluster kind: a prefill pool and a decode pool, a router for each, and a
//! link into each decode replica that carries KV caches (docs/disaggregation.md). These are
//! the handlers of its events in the one event loop (src/sim/cluster.rs).
//!
//! A request is routed to a prefill replica, which computes its prompt and hands it off (its
//! KV blocks held). The decode router picks a decode replica at once; the transfer queues
//! there until that replica has a seat and the blocks for the whole prompt (back-pressure:
//! meanwhile the prefill replica keeps the blocks, so a full decode pool slows prefill
//! admissions rather than losing work). The transfer then shares the decode replica's link
//! with the others on it (processor sharing) and lands after the link's per-transfer latency.
//! Landing releases the prefill blocks; the first token reaches the client then (TTFT), and
//! the request decodes on the decode replica, fast-forwarded like a colocated one: each
//! handler that touches a decode replica brings it up to its event first.

mod link;

use std::collections::VecDeque;

use super::cluster::{choose, reads_kv, simulate_traced, Cluster, DECODE_POOL, FIRST_POOL};
use super::event::Event;
use super::request::NO_TIME;
use super::{DisaggConfig, DisaggStats, SimConfig, SimOutput};
use crate::metrics::Outcome;
use crate::step_time::StepTime;
use crate::workload::RequestGenerator;
use link::Link;

/// Runs one disaggregated simulation (`cfg.disaggregation` set) to completion or to a limit.
/// Without `cfg.disaggregation` it is the colocated [`super::simulate`] with `prefill_step`.
pub fn simulate_disaggregated(
    cfg: &SimConfig,
    prefill_step: &dyn StepTime,
    decode_step: &dyn StepTime,
    gen: &mut RequestGenerator,
) -> SimOutput {
    simulate_traced(cfg, prefill_step, decode_step, gen, None)
}

/// Where a handed-off request came from and when its transfer steps happened.
#[derive(Debug, Clone, Copy, Default)]
struct Transit {
    /// Prefill replica holding its KV blocks.
    prefill: u32,
    /// Decode replica it goes to.
    decode: u32,
    /// When its prefill finished, ns.
    handoff_ns: u64,
    /// Duration of the prefill iteration that finished it, ns (layer-wise overlap).
    last_iteration_ns: u64,
    /// When its transfer started, ns.
    start_ns: u64,
}

/// The KV transfers of a disaggregated cluster (empty for a colocated one).
#[derive(Debug, Default)]
pub(super) struct KvTransfers {
    /// Bandwidth of each link, bytes/s (infinite: unlimited).
    bandwidth_bytes_per_s: f64,
    /// Fixed time of each transfer, ns.
    latency_ns: u64,
    /// KV bytes of one token, whole model.
    kv_bytes_per_token: u64,
    /// Layers of the model.
    layers: u32,
    /// Whether each layer's KV is sent while the prefill computes the next.
    layerwise: bool,
    /// The link into each decode replica.
    links: Vec<Link>,
    /// Sequence number of each link's pending finish event.
    link_seq: Vec<u64>,
    /// Transfers whose bytes have arrived, landing after the latency, FIFO per decode replica.
    landing: Vec<VecDeque<(u64, u32)>>,
    /// By slab id: the transit of a request between the pools.
    transit: Vec<Transit>,
    /// What the transfers did.
    pub stats: DisaggStats,
    /// The prefill replica handing off its finished prompts now (`usize::MAX`: none); it
    /// schedules its next iteration once all are handed off.
    handing_off: usize,
    scratch: Vec<u32>,
    scratch2: Vec<u32>,
}

impl KvTransfers {
    /// No transfers (a colocated cluster).
    pub(super) fn none() -> Self {
        KvTransfers {
            handing_off: usize::MAX,
            ..KvTransfers::default()
        }
    }

    /// Idle links into `links` decode replicas.
    pub(super) fn new(d: &DisaggConfig, links: usize) -> Self {
        KvTransfers {
            bandwidth_bytes_per_s: d.bandwidth_bytes_per_s,
            latency_ns: d.latency_ns,
            kv_bytes_per_token: d.kv_bytes_per_token,
            layers: d.layers,
            layerwise: d.layerwise,
            links: (0..links)
                .map(|_| Link::new(d.bandwidth_bytes_per_s))
                .collect(),
            link_seq: vec![u64::MAX; links],
            landing: vec![VecDeque::new(); links],
            stats: DisaggStats {
                links: links as u32,
                ..DisaggStats::default()
            },
            ..KvTransfers::none()
        }
    }

    /// Time any transfer was moving bytes, summed over the links, ns.
    pub(super) fn link_busy_ns(&self) -> u128 {
        self.links.iter().map(|l| l.busy_ns).sum()
    }

    /// The bytes a transfer of `full` bytes still has to move when it starts at `now`: with
    /// layer-wise transfer, each layer's KV went out while the last prefill iteration ran, so
    /// what is left at its end is at least the last layer's share.
    fn bytes_left(&self, full: f64, t: &Transit, now: u64) -> f64 {
        let bw = self.bandwidth_bytes_per_s;
        if self.layerwise && now == t.handoff_ns && bw.is_finite() {
            let sent = bw * t.last_iteration_ns as f64 * 1e-9;
            (full - sent).max(full / self.layers.max(1) as f64)
        } else {
            full
        }
    }
}

impl Cluster<'_, '_> {
    /// Starts an iteration on prefill replica `i` if it is idle and has work.
    pub(super) fn start_prefill(&mut self, i: usize) {
        if self.start(FIRST_POOL, i) {
            self.client.outstanding -= self.take_departed_of(FIRST_POOL, i);
        }
    }

    /// Starts an iteration on decode replica `j` if it is idle and has work.
    pub(super) fn start_decode(&mut self, j: usize) {
        if self.start(DECODE_POOL, j) {
            self.client.outstanding -= self.take_departed_of(DECODE_POOL, j);
            // The iteration's blocks are taken: incoming transfers may have what is left.
            self.admit(j);
        }
    }

    /// Prefill replica `i` finished an iteration of `iteration_ns`: its finished prompts go
    /// to the decode pool, each to the replica the decode router picks.
    pub(super) fn hand_off(&mut self, i: usize, iteration_ns: u64) {
        let mut handed = std::mem::take(&mut self.kv.scratch);
        self.pools[FIRST_POOL].fleet.slots[i]
            .replica
            .take_handoffs(&mut handed);
        self.kv.handing_off = i;
        for &id in &handed {
            if reads_kv(self.pools[DECODE_POOL].router.kind()) {
                self.bring_up_to_date(DECODE_POOL);
            }
            let decode = &mut self.pools[DECODE_POOL];
            let j = choose(&decode.fleet, &mut decode.router, self.slab.get(id));
            let k = id as usize;
            if self.kv.transit.len() <= k {
                self.kv.transit.resize(k + 1, Transit::default());
            }
            self.kv.transit[k] = Transit {
                prefill: i as u32,
                decode: j as u32,
                handoff_ns: self.now,
                last_iteration_ns: iteration_ns,
                start_ns: NO_TIME,
            };
            decode.fleet.slots[j].replica.offer(id, &self.slab);
            self.admit(j);
        }
        handed.clear();
        self.kv.scratch = handed;
        self.kv.handing_off = usize::MAX;
    }

    /// Starts the transfers decode replica `j` has room for; drops those whose clients gave
    /// up while they waited.
    fn admit(&mut self, j: usize) {
        let now = self.now;
        let replica = &self.pools[DECODE_POOL].fleet.slots[j].replica;
        let slo = &self.cfg.slo;
        if replica.in_run()
            && (replica.transfer_ready(&self.slab, now, slo)
                || replica.run_misses_a_deadline(&self.slab, slo))
        {
            // A transfer starting takes blocks the replica's run counted on; a transfer
            // queued since the run was planned may give up inside it.
            self.cut(DECODE_POOL, j);
        }
        let mut started = std::mem::take(&mut self.kv.scratch2);
        let mut gave_up = Vec::new();
        self.pools[DECODE_POOL].fleet.slots[j]
            .replica
            .admit_transfers(&self.slab, now, &self.cfg.slo, &mut started, &mut gave_up);
        for id in gave_up {
            self.give_up(id);
        }
        let mut land_now = false;
        for &id in &started {
            let kv = &mut self.kv;
            let t = &mut kv.transit[id as usize];
            t.start_ns = now;
            kv.stats.wait.record(now - t.handoff_ns);
            let full = self.slab.get(id).prefill_len as f64 * kv.kv_bytes_per_token as f64;
            kv.stats.bytes += full as u128;
            let bytes = kv.bytes_left(full, &kv.transit[id as usize], now);
            if kv.bandwidth_bytes_per_s.is_infinite() || bytes <= 0.0 {
                land_now |= kv.latency_ns == 0;
                self.arrived(j, id);
            } else {
                kv.links[j].start(now, id, bytes);
            }
        }
        started.clear();
        self.kv.scratch2 = started;
        self.reschedule_link(j);
        if land_now {
            self.start_decode(j);
        }
    }

    /// The client of queued transfer `id` gave up before its first token.
    fn give_up(&mut self, id: u32) {
        let t = self.kv.transit[id as usize];
        let p = t.prefill as usize;
        self.pools[FIRST_POOL].fleet.slots[p]
            .replica
            .release_handed_off(id, &mut self.slab, self.now);
        let r = self.slab.get(id);
        self.metrics
            .record_unserved(Outcome::TimedOut, r.arrival_ns, r.input, self.now);
        self.slab.remove(id);
        self.client.outstanding -= 1;
        if p != self.kv.handing_off {
            self.start_prefill(p);
        }
    }

    /// Queues the next finish event of link `j`.
    fn reschedule_link(&mut self, j: usize) {
        self.kv.link_seq[j] = match self.kv.links[j].next_finish_ns() {
            Some(at) => self.queue.push(at, Event::TransferDone { link: j as u32 }),
            None => u64::MAX,
        };
    }

    /// Link `j`'s next transfer should have finished, if event `seq` is still its pending one.
    pub(super) fn on_transfer_done(&mut self, j: usize, seq: u64) {
        if self.kv.link_seq[j] != seq {
            return;
        }
        let mut done = std::mem::take(&mut self.kv.scratch2);
        self.kv.links[j].finish(self.now, &mut done);
        let mut land_now = false;
        for &id in &done {
            self.arrived(j, id);
            land_now |= self.kv.latency_ns == 0;
        }
        done.clear();
        self.kv.scratch2 = done;
        self.reschedule_link(j);
        if land_now {
            self.start_decode(j);
        }
    }

    /// Transfer `id`'s bytes are on decode replica `j` now: it lands after the latency.
    fn arrived(&mut self, j: usize, id: u32) {
        if self.kv.latency_ns == 0 {
            self.land(j, id);
        } else {
            let at = self.now + self.kv.latency_ns;
            self.kv.landing[j].push_back((at, id));
            let replica = j as u32;
            self.queue.push(at, Event::TransferLanded { replica });
        }
    }

    /// The transfer at the head of decode replica `j`'s landing queue lands.
    pub(super) fn on_transfer_landed(&mut self, j: usize) {
        if let Some((at, id)) = self.kv.landing[j].front().copied() {
            debug_assert_eq!(at, self.now);
            self.kv.landing[j].pop_front();
            self.land(j, id);
            self.start_decode(j);
        }
    }

    /// Transfer `id` has landed on decode replica `j`: the prefill side frees its blocks, the
    /// decode side emits the first token.
    fn land(&mut self, j: usize, id: u32) {
        self.cut(DECODE_POOL, j);
        let now = self.now;
        let t = self.kv.transit[id as usize];
        debug_assert_eq!(t.decode as usize, j);
        self.kv.stats.transfers += 1;
        self.kv.stats.transfer_time.record(now - t.start_ns);
        let p = t.prefill as usize;
        self.pools[FIRST_POOL].fleet.slots[p]
            .replica
            .release_handed_off(id, &mut self.slab, now);
        self.pools[DECODE_POOL].fleet.slots[j].replica.land(
            id,
            now,
            &mut self.slab,
            &mut self.metrics,
            &mut self.ts,
            &self.cfg.slo,
        );
        self.client.outstanding -= self.take_departed_of(DECODE_POOL, j);
        // Freed blocks may let the prefill replica admit more.
        if p != self.kv.handing_off {
            self.start_prefill(p);
        }
    }
}
