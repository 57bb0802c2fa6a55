//! The disaggregated cluster kind: a prefill pool and a decode pool, a router for each, and a
//! link into each decode replica that carries KV caches (docs/disaggregation.md).
//!
//! A request is routed to a prefill replica, which computes its prompt and hands it off (its
//! KV blocks held). The decode router picks a decode replica at once; the transfer queues
//! there until that replica has a seat and the blocks for the whole prompt (back-pressure:
//! meanwhile the prefill replica keeps the blocks, so a full decode pool slows prefill
//! admissions rather than losing work). The transfer then shares the decode replica's link
//! with the others on it (processor sharing) and lands after the link's per-transfer latency.
//! Landing releases the prefill blocks; the first token reaches the client then (TTFT), and
//! the request decodes on the decode replica.

mod link;

use std::collections::VecDeque;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::cluster::{new_request, note_arrival, Events};
use super::fleet::Fleet;
use super::replica::Horizon;
use super::request::{Slab, NO_TIME};
use super::router::Router;
use super::{DisaggConfig, DisaggStats, SimConfig, SimOutput};
use crate::metrics::{Metrics, Outcome, PeriodStats, RequestLog, TimeSeries};
use crate::roofline::StepTimeModel;
use crate::workload::{RequestGenerator, RequestSpec};
use link::Link;

/// Event kinds: a prefill iteration of replica `i` is `i`; the others carry the decode
/// replica in the low bits.
const ARRIVAL: u32 = u32::MAX;
const DECODE: u32 = 0x1000_0000;
const LINK: u32 = 0x2000_0000;
const LAND: u32 = 0x3000_0000;
const KIND_MASK: u32 = 0xf000_0000;
const INDEX_MASK: u32 = 0x0fff_ffff;

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

/// The cluster's state while it runs.
struct Cluster<'a> {
    cfg: &'a SimConfig,
    d: &'a DisaggConfig,
    prefill_step: &'a StepTimeModel,
    decode_step: &'a StepTimeModel,
    prefill: Fleet,
    decode: Fleet,
    decode_router: Router,
    links: Vec<Link>,
    /// Sequence number of each link's pending finish event.
    link_seq: Vec<u64>,
    /// Transfers whose bytes have arrived, landing after the latency, FIFO per decode replica.
    landing: Vec<VecDeque<(u64, u32)>>,
    /// By slab id: the transit of a request between the pools.
    transit: Vec<Transit>,
    slab: Slab,
    metrics: Metrics,
    ts: TimeSeries,
    events: Events,
    stats: DisaggStats,
    /// Requests admitted and not yet departed.
    outstanding: u64,
    scratch: Vec<u32>,
    scratch2: Vec<u32>,
    /// The prefill replica handing off its finished prompts now (`usize::MAX`: none); it
    /// schedules its next iteration once all are handed off.
    handing_off: usize,
}

/// Runs one disaggregated simulation (`cfg.disaggregation` set) to completion or to a limit.
/// Without `cfg.disaggregation` it is the colocated [`super::simulate`] with `prefill_step`.
pub fn simulate_disaggregated(
    cfg: &SimConfig,
    prefill_step: &StepTimeModel,
    decode_step: &StepTimeModel,
    gen: &mut RequestGenerator,
) -> SimOutput {
    let Some(d) = &cfg.disaggregation else {
        return super::simulate(cfg, prefill_step, gen);
    };
    let mut prefill = Fleet::new(
        &d.prefill.scheduler,
        d.prefill.replicas,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa11_0000_5eed),
    );
    for s in &mut prefill.slots {
        s.replica.set_prefill_only();
    }
    let decode = Fleet::new(
        &d.decode.scheduler,
        d.decode.replicas,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa11_0000_dec0),
    );
    let n_links = decode.slots.len();
    let mut c = Cluster {
        cfg,
        d,
        prefill_step,
        decode_step,
        prefill,
        decode,
        decode_router: Router::new(
            d.decode.router,
            ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f5e_dec0),
        ),
        links: (0..n_links)
            .map(|_| Link::new(d.bandwidth_bytes_per_s))
            .collect(),
        link_seq: vec![u64::MAX; n_links],
        landing: vec![VecDeque::new(); n_links],
        transit: Vec::new(),
        slab: Slab::default(),
        metrics: Metrics {
            log: RequestLog::with_capacity(cfg.request_log_capacity),
            periods: PeriodStats::new(cfg.period_ns),
            ..Metrics::default()
        },
        ts: TimeSeries::new(d.prefill.replicas + d.decode.replicas),
        events: Events::default(),
        stats: DisaggStats {
            links: n_links as u32,
            ..DisaggStats::default()
        },
        outstanding: 0,
        scratch: Vec::new(),
        scratch2: Vec::new(),
        handing_off: usize::MAX,
    };
    let mut prefill_router = Router::new(
        d.prefill.router,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f5e_7e00),
    );
    let max_model_len = d
        .prefill
        .scheduler
        .max_model_len
        .min(d.decode.scheduler.max_model_len);

    let measure_from_send = cfg.max_concurrency.is_some();
    let pool_cap =
        |p: &super::PoolConfig| p.replicas as u64 * (2 * p.scheduler.max_num_seqs as u64 + 16);
    let cap: u64 = match cfg.max_concurrency {
        Some(x) => x.max(1) as u64,
        None if gen.is_offline() => pool_cap(&d.prefill) + pool_cap(&d.decode),
        None => u64::MAX,
    };
    let mut n_events: u64 = 0;
    let mut truncated = None;
    let mut last_arrival_ns = 0;
    let mut pending: Option<RequestSpec> = gen.next_request();
    let mut arrival_queued = false;
    if let Some(p) = pending {
        c.events.push(p.arrival_ns + cfg.frontend_delay_ns, ARRIVAL);
        arrival_queued = true;
    }

    while let Some((now, ev_seq, kind)) = c.events.pop() {
        n_events += 1;
        // A replica whose iteration would end beyond the clock stops the run (metrics.stop).
        if let Some(why) = c
            .metrics
            .stop
            .take()
            .or_else(|| cfg.limits.reached(now, n_events))
        {
            truncated = Some(why);
            break;
        }
        c.prefill.account(now, &mut c.metrics);
        c.decode.account(now, &mut c.metrics);
        if kind == ARRIVAL {
            arrival_queued = false;
            let Some(spec) = pending.take() else { continue };
            last_arrival_ns = now;
            let start_ns = if measure_from_send {
                now - cfg.frontend_delay_ns
            } else {
                spec.arrival_ns
            };
            note_arrival(start_ns, now, &mut c.metrics, &mut c.ts);
            let input = spec.input_tokens.max(1);
            let output = spec.output_tokens.max(1);
            let r = prefill_router.pick(&c.prefill.slots, &c.prefill.active);
            let reject = input as u64 + output as u64 > max_model_len as u64
                || (cfg.slo.admission_control
                    && cfg.slo.ttft_ns.is_some_and(|t| {
                        c.prefill.slots[r]
                            .replica
                            .predict_ttft_ns(now, input, prefill_step)
                            > t
                    }));
            if reject {
                c.metrics
                    .record_unserved(Outcome::Rejected, start_ns, input, now);
            } else {
                let id = c.slab.insert(new_request(&spec, start_ns));
                c.outstanding += 1;
                c.prefill.slots[r].replica.enqueue(&mut c.slab, id);
                c.start_prefill(r, now);
            }
            pending = gen.next_request();
        } else {
            let i = (kind & INDEX_MASK) as usize;
            match kind & KIND_MASK {
                0 => c.prefill_done(i, ev_seq, now),
                DECODE => c.decode_done(i, ev_seq, now),
                LINK => c.link_done(i, ev_seq, now),
                LAND => {
                    if let Some((at, id)) = c.landing[i].front().copied() {
                        debug_assert_eq!(at, now);
                        c.landing[i].pop_front();
                        c.land(i, id, now);
                        c.start_decode(i, now);
                    }
                }
                _ => {}
            }
        }
        if !arrival_queued && c.outstanding < cap {
            if let Some(p) = pending {
                let at = p.arrival_ns.max(now.saturating_sub(cfg.frontend_delay_ns))
                    + cfg.frontend_delay_ns;
                c.events.push(at, ARRIVAL);
                arrival_queued = true;
            }
        }
        if pending.is_none() && c.outstanding == 0 && !arrival_queued {
            break;
        }
    }
    let end = c.metrics.last_event_ns.max(last_arrival_ns);
    c.prefill.account(end, &mut c.metrics);
    c.decode.account(end, &mut c.metrics);

    if truncated.is_none() {
        if let Some((t_s, unsent)) = gen.overflowed() {
            truncated = Some(format!(
                "the next arrival, at {t_s:.3e} s, lies past the simulator's clock (about {:.0} years): the run stopped there{}",
                crate::clock::MAX_YEARS,
                unsent.map_or(String::new(), |n| format!(", {n} requests never sent"))
            ));
        }
    }
    let in_flight: u64 = c
        .prefill
        .slots
        .iter()
        .chain(c.decode.slots.iter())
        .map(|s| s.replica.outstanding())
        .sum();
    if truncated.is_none() && in_flight > 0 {
        truncated = Some(format!(
            "stalled: {in_flight} requests could not be scheduled (a request needs more KV \
             blocks than a replica can ever free)"
        ));
    }
    let peak = |f: &Fleet| {
        f.slots
            .iter()
            .map(|s| s.replica.peak_blocks)
            .max()
            .unwrap_or(0)
            .max(f.peak_blocks)
    };
    c.stats.peak_prefill_blocks = peak(&c.prefill);
    c.stats.peak_decode_blocks = peak(&c.decode);
    c.stats.link_busy_ns = c.links.iter().map(|l| l.busy_ns).sum();
    c.stats.in_transfer = c.decode.slots.iter().map(|s| s.replica.incoming()).sum();
    c.stats.blocks_held_at_end = c
        .prefill
        .slots
        .iter()
        .chain(c.decode.slots.iter())
        .map(|s| s.replica.held_blocks())
        .sum();
    SimOutput {
        peak_kv_blocks: c.stats.peak_decode_blocks,
        last_arrival_ns,
        metrics: c.metrics,
        timeseries: c.ts,
        in_flight,
        truncated,
        events: n_events,
        disaggregation: Some(c.stats),
        fast_forwarded_iterations: 0,
    }
}

impl Cluster<'_> {
    /// Starts an iteration on replica `i` of the decode pool (`decode`) or of the prefill pool
    /// if it is idle and has work; returns false when it was busy. The pools step iteration by
    /// iteration (no fast-forward): their link and hand-off events would have to cut runs,
    /// which this loop does not do.
    fn start(&mut self, decode: bool, i: usize, now: u64) -> bool {
        let (fleet, step, kind) = if decode {
            (&mut self.decode, self.decode_step, DECODE | i as u32)
        } else {
            (&mut self.prefill, self.prefill_step, i as u32)
        };
        let slot = &mut fleet.slots[i];
        if slot.replica.is_busy() {
            return false;
        }
        if let Some(dur) = slot.replica.schedule(
            now,
            &mut self.slab,
            &mut self.metrics,
            &self.cfg.slo,
            step,
            &Horizon::OFF,
        ) {
            slot.pending_seq = self.events.push(now + dur, kind);
        }
        self.outstanding -= slot.replica.take_departed();
        true
    }

    /// Starts an iteration on prefill replica `i` if it is idle and has work.
    fn start_prefill(&mut self, i: usize, now: u64) {
        self.start(false, i, now);
    }

    /// Starts an iteration on decode replica `j` if it is idle and has work.
    fn start_decode(&mut self, j: usize, now: u64) {
        if self.start(true, j, now) {
            // The iteration's blocks are taken: incoming transfers may have what is left.
            self.admit(j, now);
        }
    }

    /// A prefill iteration of replica `i` ended: its finished prompts go to the decode pool.
    fn prefill_done(&mut self, i: usize, seq: u64, now: u64) {
        let Some(iteration_ns) = self.end_iteration(false, i, seq, now) else {
            return;
        };
        let mut handed = std::mem::take(&mut self.scratch);
        self.prefill.slots[i].replica.take_handoffs(&mut handed);
        self.handing_off = i;
        for &id in &handed {
            let j = self
                .decode_router
                .pick(&self.decode.slots, &self.decode.active);
            let k = id as usize;
            if self.transit.len() <= k {
                self.transit.resize(k + 1, Transit::default());
            }
            self.transit[k] = Transit {
                prefill: i as u32,
                decode: j as u32,
                handoff_ns: now,
                last_iteration_ns: iteration_ns,
                start_ns: NO_TIME,
            };
            self.decode.slots[j].replica.offer(id, &self.slab);
            self.admit(j, now);
        }
        handed.clear();
        self.scratch = handed;
        self.handing_off = usize::MAX;
        self.start_prefill(i, now);
    }

    /// A decode iteration of replica `j` ended.
    fn decode_done(&mut self, j: usize, seq: u64, now: u64) {
        if self.end_iteration(true, j, seq, now).is_some() {
            self.start_decode(j, now);
        }
    }

    /// Ends the iteration of replica `i` of the decode (`decode`) or prefill pool that event
    /// `seq` stands for; returns how long it ran, ns, or `None` for a stale event.
    fn end_iteration(&mut self, decode: bool, i: usize, seq: u64, now: u64) -> Option<u64> {
        let fleet = if decode {
            &mut self.decode
        } else {
            &mut self.prefill
        };
        let slot = &mut fleet.slots[i];
        if slot.pending_seq != seq {
            return None;
        }
        slot.pending_seq = u64::MAX;
        let iteration_ns = now - slot.replica.iteration_start_ns();
        slot.replica.end_iteration(
            now,
            &mut self.slab,
            &mut self.metrics,
            &mut self.ts,
            &self.cfg.slo,
        );
        self.outstanding -= slot.replica.take_departed();
        Some(iteration_ns)
    }

    /// Starts the transfers decode replica `j` has room for; drops those whose clients gave
    /// up while they waited.
    fn admit(&mut self, j: usize, now: u64) {
        let mut started = std::mem::take(&mut self.scratch2);
        let mut gave_up = Vec::new();
        self.decode.slots[j].replica.admit_transfers(
            &self.slab,
            now,
            &self.cfg.slo,
            &mut started,
            &mut gave_up,
        );
        for id in gave_up {
            self.give_up(id, now);
        }
        let bw = self.d.bandwidth_bytes_per_s;
        let mut land_now = false;
        for &id in &started {
            let t = &mut self.transit[id as usize];
            t.start_ns = now;
            self.stats.wait.record(now - t.handoff_ns);
            let full = self.slab.get(id).prefill_len as f64 * self.d.kv_bytes_per_token as f64;
            self.stats.bytes += full as u128;
            // Layer-wise: while the last prefill iteration ran, each finished layer's KV
            // went out; what is left at its end is at least the last layer's share.
            let bytes = if self.d.layerwise && now == t.handoff_ns && bw.is_finite() {
                let sent = bw * t.last_iteration_ns as f64 * 1e-9;
                (full - sent).max(full / self.d.layers.max(1) as f64)
            } else {
                full
            };
            if bw.is_infinite() || bytes <= 0.0 {
                self.arrived(j, id, now);
                land_now |= self.d.latency_ns == 0;
            } else {
                self.links[j].start(now, id, bytes);
            }
        }
        started.clear();
        self.scratch2 = started;
        self.reschedule_link(j);
        if land_now {
            self.start_decode(j, now);
        }
    }

    /// The client of queued transfer `id` gave up before its first token.
    fn give_up(&mut self, id: u32, now: u64) {
        let t = self.transit[id as usize];
        let p = t.prefill as usize;
        self.prefill.slots[p]
            .replica
            .release_handed_off(id, &mut self.slab, now);
        let r = self.slab.get(id);
        self.metrics
            .record_unserved(Outcome::TimedOut, r.arrival_ns, r.input, now);
        self.slab.remove(id);
        self.outstanding -= 1;
        if p != self.handing_off {
            self.start_prefill(p, now);
        }
    }

    /// Queues the next finish event of link `j`.
    fn reschedule_link(&mut self, j: usize) {
        if let Some(at) = self.links[j].next_finish_ns() {
            self.link_seq[j] = self.events.push(at, LINK | j as u32);
        } else {
            self.link_seq[j] = u64::MAX;
        }
    }

    /// Link `j`'s next transfer should have finished.
    fn link_done(&mut self, j: usize, seq: u64, now: u64) {
        if self.link_seq[j] != seq {
            return;
        }
        let mut done = std::mem::take(&mut self.scratch2);
        self.links[j].finish(now, &mut done);
        let mut land_now = false;
        for &id in &done {
            self.arrived(j, id, now);
            land_now |= self.d.latency_ns == 0;
        }
        done.clear();
        self.scratch2 = done;
        self.reschedule_link(j);
        if land_now {
            self.start_decode(j, now);
        }
    }

    /// Transfer `id`'s bytes are on decode replica `j` at `now`: it lands after the latency.
    fn arrived(&mut self, j: usize, id: u32, now: u64) {
        if self.d.latency_ns == 0 {
            self.land(j, id, now);
        } else {
            let at = now + self.d.latency_ns;
            self.landing[j].push_back((at, id));
            self.events.push(at, LAND | j as u32);
        }
    }

    /// Transfer `id` has landed on decode replica `j`: the prefill side frees its blocks, the
    /// decode side emits the first token.
    fn land(&mut self, j: usize, id: u32, now: u64) {
        let t = self.transit[id as usize];
        debug_assert_eq!(t.decode as usize, j);
        self.stats.transfers += 1;
        self.stats.transfer_time.record(now - t.start_ns);
        let p = t.prefill as usize;
        self.prefill.slots[p]
            .replica
            .release_handed_off(id, &mut self.slab, now);
        self.decode.slots[j].replica.land(
            id,
            now,
            &mut self.slab,
            &mut self.metrics,
            &mut self.ts,
            &self.cfg.slo,
        );
        self.outstanding -= self.decode.slots[j].replica.take_departed();
        // Freed blocks may let the prefill replica admit more.
        if p != self.handing_off {
            self.start_prefill(p, now);
        }
    }
}
