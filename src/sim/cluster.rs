//! The event loop: one loop of typed events ([`Event`]) for every cluster kind.
//!
//! A cluster is one or two pools of replicas behind routers: the colocated replicas, or the
//! prefill and decode pools of a disaggregated deployment (with the KV links between them,
//! src/sim/disaggregated.rs). The loop pops the next event in the order of src/sim/event.rs
//! and hands it to the one handler of its kind; a handler changes the cluster and queues what
//! follows (the next iteration's end, a transfer's landing, the next arrival, ...).
//!
//! Fast-forward: a replica that schedules a decode-only iteration may plan a run of them up to
//! a horizon, the next event the loop knows of that could touch it (a control event for a
//! colocated replica, a prefill iteration end or a transfer event for a decode replica). A
//! handler that must see a replica as it is at its event first brings it up to date: the run
//! is cut there, its iterations that (would have) ended before the event are booked, and the
//! one in flight becomes an ordinary iteration. Runs are exact: the same results, figure for
//! figure, as timing every iteration on its own (`limits.fast_forward = false`).

mod controls;
#[cfg(test)]
mod tests;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::disaggregated::KvTransfers;
use super::event::{Event, EventQueue, Popped, CONTROL_CLASS};
use super::fleet::{Fleet, SlotState};
use super::invariants;
use super::replica::Horizon;
use super::request::{Req, Slab};
use super::router::{Router, RouterKind};
use super::trace::{PoolRole, TraceOccupancy, TraceSink, TraceSpan};
use super::{DisaggConfig, SimConfig, SimOutput};
use crate::metrics::{Metrics, Outcome, PeriodStats, RequestLog, TimeSeries};
use crate::step_time::StepTime;
use crate::workload::{RequestGenerator, RequestSpec};

/// Pool 0: the colocated replicas, or the prefill pool of a disaggregated cluster.
pub(super) const FIRST_POOL: usize = 0;
/// Pool 1: the decode pool of a disaggregated cluster.
pub(super) const DECODE_POOL: usize = 1;

/// A pool of replicas with its router and step-time model.
pub(super) struct Pool<'a> {
    /// What its replicas do.
    pub role: PoolRole,
    /// Its replicas.
    pub fleet: Fleet,
    /// Its router.
    pub router: Router,
    /// The step-time model of its replicas.
    pub step: &'a dyn StepTime,
    /// Replicas that started a fast-forwarded run since the pool was last brought up to
    /// date, each once (`listed` says which).
    runs: Vec<usize>,
    listed: Vec<bool>,
}

impl<'a> Pool<'a> {
    fn new(role: PoolRole, fleet: Fleet, router: Router, step: &'a dyn StepTime) -> Self {
        Pool {
            role,
            fleet,
            router,
            step,
            runs: Vec::new(),
            listed: Vec::new(),
        }
    }

    /// Notes that replica `r` started a fast-forwarded run.
    fn note_run(&mut self, r: usize) {
        if r >= self.listed.len() {
            self.listed.resize(r + 1, false);
        }
        if !self.listed[r] {
            self.listed[r] = true;
            self.runs.push(r);
        }
    }

    /// Moves the replicas noted since the last call into `into` (its buffer is reused).
    fn take_runs(&mut self, into: &mut Vec<usize>) {
        into.clear();
        std::mem::swap(&mut self.runs, into);
        for &r in into.iter() {
            self.listed[r] = false;
        }
    }

    /// Largest number of KV blocks any replica of the pool held, replaced ones included.
    fn peak_blocks(&self) -> u64 {
        self.fleet
            .slots
            .iter()
            .map(|s| s.replica.peak_blocks)
            .max()
            .unwrap_or(0)
            .max(self.fleet.peak_blocks)
    }
}

/// The client side of a run: the request stream and the cap on requests outstanding.
pub(super) struct Client {
    /// The next request, drawn ahead (the horizon of a colocated run needs its time).
    pending: Option<RequestSpec>,
    /// Whether its arrival is queued.
    arrival_queued: bool,
    /// Requests admitted and not yet departed (completed, timed out or lost).
    pub outstanding: u64,
    /// Most requests outstanding before the next is held back.
    cap: u64,
    /// Latency counts from the client's send (a concurrency cap), not the arrival time.
    measure_from_send: bool,
    /// When the last request arrived, ns.
    last_arrival_ns: u64,
}

/// A cluster while it runs: its pools, the requests in flight, the metrics and the queue.
pub(super) struct Cluster<'a, 't> {
    pub cfg: &'a SimConfig,
    /// Pool 0, and pool 1 when disaggregated.
    pub pools: Vec<Pool<'a>>,
    pub slab: Slab,
    pub metrics: Metrics,
    pub ts: TimeSeries,
    pub queue: EventQueue,
    pub client: Client,
    /// KV transfers between the pools (empty when colocated).
    pub kv: KvTransfers,
    /// Time of the event being handled, ns.
    pub now: u64,
    /// The event being handled.
    event: Event,
    /// Events handled, every engine iteration counted (fast-forwarded ones too).
    n_events: u64,
    /// Of those, the iterations booked in bulk.
    fast_forwarded: u64,
    /// Iteration events replaced when their run was cut (not events of the oracle).
    cancelled: Vec<u64>,
    /// Longest prompt plus output a request may have, tokens.
    max_model_len: u32,
    trace: Option<&'t mut dyn TraceSink>,
    scratch_runs: Vec<usize>,
}

/// Runs one simulation to completion (or to a limit) and returns its metrics.
pub fn simulate(cfg: &SimConfig, step: &dyn StepTime, gen: &mut RequestGenerator) -> SimOutput {
    Cluster::colocated(cfg, step, gen.is_offline(), None).run(gen)
}

/// Runs one simulation, disaggregated when `cfg.disaggregation` is set (with the two pools'
/// step-time models), colocated with `prefill_step` otherwise; every iteration and replica
/// state goes to `trace` when there is one.
pub fn simulate_traced(
    cfg: &SimConfig,
    prefill_step: &dyn StepTime,
    decode_step: &dyn StepTime,
    gen: &mut RequestGenerator,
    trace: Option<&mut dyn TraceSink>,
) -> SimOutput {
    let offline = gen.is_offline();
    let cluster = match &cfg.disaggregation {
        Some(d) => Cluster::disaggregated(cfg, d, prefill_step, decode_step, offline, trace),
        None => Cluster::colocated(cfg, prefill_step, offline, trace),
    };
    cluster.run(gen)
}

impl<'a, 't> Cluster<'a, 't> {
    /// A colocated cluster: the scenario's replicas (the autoscaler's initial ones).
    fn colocated(
        cfg: &'a SimConfig,
        step: &'a dyn StepTime,
        offline: bool,
        trace: Option<&'t mut dyn TraceSink>,
    ) -> Self {
        // Each pipeline stage's micro-batch runs as a sub-replica of its own.
        let initial = cfg
            .autoscale
            .as_ref()
            .map_or(cfg.replicas, |a| a.initial_replicas)
            .max(1)
            .saturating_mul(cfg.pipeline_stages.max(1));
        let fleet = Fleet::new(
            &cfg.scheduler,
            initial,
            ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa11_0000_5eed),
        );
        let router = Router::new(
            cfg.router,
            ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f5e_7e00),
        );
        // Offline runs keep enough queued work to supply every replica's scheduler without
        // holding every request in memory.
        let offline_cap = initial as u64 * (2 * cfg.scheduler.max_num_seqs as u64 + 16);
        let pools = vec![Pool::new(PoolRole::Colocated, fleet, router, step)];
        let ts = TimeSeries::new(initial);
        let kv = KvTransfers::none();
        let mut c = Cluster::new(cfg, pools, ts, kv, trace);
        c.client.cap = c.client_cap(offline, offline_cap);
        c.max_model_len = cfg.scheduler.max_model_len;
        c
    }

    /// A disaggregated cluster: a prefill pool, a decode pool, a link into each decode replica.
    fn disaggregated(
        cfg: &'a SimConfig,
        d: &'a DisaggConfig,
        prefill_step: &'a dyn StepTime,
        decode_step: &'a dyn StepTime,
        offline: bool,
        trace: Option<&'t mut dyn TraceSink>,
    ) -> Self {
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
        let kv = KvTransfers::new(d, decode.slots.len());
        let seeded = |x: u64| ChaCha8Rng::seed_from_u64(cfg.seed ^ x);
        let pools = vec![
            Pool::new(
                PoolRole::Prefill,
                prefill,
                Router::new(d.prefill.router, seeded(0x5eed_0f5e_7e00)),
                prefill_step,
            ),
            Pool::new(
                PoolRole::Decode,
                decode,
                Router::new(d.decode.router, seeded(0x5eed_0f5e_dec0)),
                decode_step,
            ),
        ];
        let ts = TimeSeries::new(d.prefill.replicas + d.decode.replicas);
        let pool_cap =
            |p: &super::PoolConfig| p.replicas as u64 * (2 * p.scheduler.max_num_seqs as u64 + 16);
        let mut c = Cluster::new(cfg, pools, ts, kv, trace);
        c.client.cap = c.client_cap(offline, pool_cap(&d.prefill) + pool_cap(&d.decode));
        c.max_model_len = d
            .prefill
            .scheduler
            .max_model_len
            .min(d.decode.scheduler.max_model_len);
        c
    }

    fn new(
        cfg: &'a SimConfig,
        pools: Vec<Pool<'a>>,
        ts: TimeSeries,
        kv: KvTransfers,
        trace: Option<&'t mut dyn TraceSink>,
    ) -> Self {
        Cluster {
            cfg,
            pools,
            slab: Slab::default(),
            metrics: Metrics {
                log: RequestLog::with_capacity(cfg.request_log_capacity),
                periods: PeriodStats::new(cfg.period_ns),
                ..Metrics::default()
            },
            ts,
            queue: EventQueue::default(),
            client: Client {
                pending: None,
                arrival_queued: false,
                outstanding: 0,
                cap: u64::MAX,
                measure_from_send: cfg.max_concurrency.is_some(),
                last_arrival_ns: 0,
            },
            kv,
            now: 0,
            event: Event::Arrival,
            n_events: 0,
            fast_forwarded: 0,
            cancelled: Vec::new(),
            max_model_len: u32::MAX,
            trace,
            scratch_runs: Vec::new(),
        }
    }

    /// The client-side gate on outstanding requests: the user's --max-concurrency (latency
    /// counted from the send), or for offline runs `offline_cap` (latency counted from t = 0).
    fn client_cap(&self, offline: bool, offline_cap: u64) -> u64 {
        match self.cfg.max_concurrency {
            Some(c) => c.max(1) as u64,
            None if offline => offline_cap,
            None => u64::MAX,
        }
    }

    /// Runs the loop to the end of the load (or a limit) and returns what the run produced.
    fn run(mut self, gen: &mut RequestGenerator) -> SimOutput {
        self.queue_first_events(gen);
        let mut truncated = None;
        while let Some(p) = self.queue.pop() {
            if self.was_cancelled(&p) {
                continue;
            }
            self.n_events += 1;
            // A replica whose iteration would end beyond the clock stops the run (metrics.stop).
            if let Some(why) = self
                .metrics
                .stop
                .take()
                .or_else(|| self.cfg.limits.reached(p.at_ns, self.n_events))
            {
                truncated = Some(why);
                break;
            }
            self.now = p.at_ns;
            self.event = p.event;
            for pool in &mut self.pools {
                pool.fleet.account(self.now, &mut self.metrics);
            }
            if p.event.class_index().0 == CONTROL_CLASS {
                // A control event sees the colocated replicas as they are now.
                self.bring_up_to_date(FIRST_POOL);
            }
            self.handle(p, gen);
            self.queue_next_arrival();
            if invariants::CHECKS {
                invariants::check_event(&self, self.n_events);
            }
            // Once the load is over and the last request is done, no controller keeps the
            // run alive: the fleet's time stops with the last request.
            let c = &self.client;
            if c.pending.is_none() && c.outstanding == 0 && !c.arrival_queued {
                break;
            }
        }
        self.finish(gen, truncated)
    }

    /// The first arrival, the autoscaler's first decision, the scheduled failures and each
    /// replica's first random failure.
    fn queue_first_events(&mut self, gen: &mut RequestGenerator) {
        let cfg = self.cfg;
        self.client.pending = gen.next_request();
        if let Some(p) = &self.client.pending {
            self.queue
                .push(p.arrival_ns + cfg.frontend_delay_ns, Event::Arrival);
            self.client.arrival_queued = true;
        }
        if let Some(a) = &cfg.autoscale {
            self.queue.push(a.interval_ns, Event::Autoscale);
        }
        if let Some(f) = &cfg.faults {
            for (index, failure) in f.failures.iter().enumerate() {
                let index = index as u32;
                self.queue
                    .push(failure.time_ns, Event::ScheduledFailure { index });
            }
            if let Some(mtbf) = f.mtbf_ns {
                let fleet = &mut self.pools[FIRST_POOL].fleet;
                for i in 0..fleet.slots.len() {
                    let at = fleet.time_to_failure(mtbf);
                    self.queue.push(at, Event::Fail { replica: i as u32 });
                }
            }
        }
    }

    /// Whether `p` is an iteration end replaced when its run was cut (dropped uncounted).
    fn was_cancelled(&mut self, p: &Popped) -> bool {
        if self.cancelled.is_empty() || !matches!(p.event, Event::IterationEnd { .. }) {
            return false;
        }
        match self.cancelled.iter().position(|&s| s == p.seq) {
            Some(i) => {
                self.cancelled.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Hands event `p` to the handler of its kind.
    fn handle(&mut self, p: Popped, gen: &mut RequestGenerator) {
        match p.event {
            Event::Arrival => self.on_arrival(gen),
            Event::IterationEnd { pool, replica } => {
                self.on_iteration_end(pool as usize, replica as usize, p.seq)
            }
            Event::TransferDone { link } => self.on_transfer_done(link as usize, p.seq),
            Event::TransferLanded { replica } => self.on_transfer_landed(replica as usize),
            Event::Autoscale => self.on_autoscale(),
            Event::ScheduledFailure { index } => self.on_scheduled_failure(index as usize),
            Event::Ready { replica } => self.on_ready(replica as usize, SlotState::Provisioning),
            Event::Fail { replica } => self.on_fail(replica as usize),
            Event::Repair { replica } => self.on_ready(replica as usize, SlotState::Down),
        }
    }

    /// Queues the next arrival if the client may send it.
    fn queue_next_arrival(&mut self) {
        let c = &mut self.client;
        if c.arrival_queued || c.outstanding >= c.cap {
            return;
        }
        if let Some(p) = &c.pending {
            // The client sends at its arrival time, or now if the concurrency cap held it
            // back; the engine sees it after the frontend delay.
            let delay = self.cfg.frontend_delay_ns;
            let at = p.arrival_ns.max(self.now.saturating_sub(delay)) + delay;
            self.queue.push(at, Event::Arrival);
            c.arrival_queued = true;
        }
    }

    /// The next request reaches the engine: route it to pool 0, admit or reject it.
    fn on_arrival(&mut self, gen: &mut RequestGenerator) {
        self.client.arrival_queued = false;
        let Some(spec) = self.client.pending.take() else {
            return;
        };
        // The request stream does not depend on the simulation: drawing the next one now
        // tells the replicas how far they may fast-forward.
        self.client.pending = gen.next_request();
        let now = self.now;
        self.client.last_arrival_ns = now;
        // Latency counts from the client's send; the engine sees the request after the API
        // frontend's delay.
        let start_ns = if self.client.measure_from_send {
            now - self.cfg.frontend_delay_ns
        } else {
            spec.arrival_ns
        };
        let pool = &mut self.pools[FIRST_POOL];
        pool.fleet.note_arrival();
        note_arrival(start_ns, now, &mut self.metrics, &mut self.ts);
        let input = spec.input_tokens.max(1);
        let output = spec.output_tokens.max(1);
        let too_long = input as u64 + output as u64 > self.max_model_len as u64;
        let req = Req::waiting(&spec, start_ns);
        let r = choose(&pool.fleet, &mut pool.router, &req);
        let slo = &self.cfg.slo;
        let reject = too_long
            || (slo.admission_control
                && slo.ttft_ns.is_some_and(|t| {
                    pool.fleet.slots[r]
                        .replica
                        .predict_ttft_ns(now, input, pool.step)
                        > t
                }));
        if reject {
            self.metrics.rejected_too_long += u64::from(too_long);
            self.metrics
                .record_unserved(Outcome::Rejected, start_ns, input, now);
            return;
        }
        let id = self.slab.insert(req);
        self.client.outstanding += 1;
        pool.fleet.slots[r].replica.enqueue(&mut self.slab, id, now);
        self.start(FIRST_POOL, r);
        self.client.outstanding -= self.take_departed(FIRST_POOL);
    }

    /// An iteration (or a fast-forwarded run) of replica `r` of `pool` ended, if event `seq`
    /// is still its pending one (a failure since voids it).
    fn on_iteration_end(&mut self, pool: usize, r: usize, seq: u64) {
        let p = &mut self.pools[pool];
        let slot = &mut p.fleet.slots[r];
        if slot.pending_seq != seq {
            return;
        }
        slot.pending_seq = u64::MAX;
        let traced = self.trace.is_some();
        let batch = if traced {
            slot.replica.in_flight_batch()
        } else {
            (0, 0, 0, 0)
        };
        let iteration_ns = self.now - slot.replica.iteration_start_ns();
        slot.replica.end_iteration(
            self.now,
            &mut self.slab,
            &mut self.metrics,
            &mut self.ts,
            &self.cfg.slo,
        );
        let v = slot.replica.take_virtual_iterations();
        self.n_events += v;
        self.fast_forwarded += v;
        self.client.outstanding -= slot.replica.take_departed();
        if traced {
            self.trace_iterations(pool, r, batch, v + 1, self.now);
            self.trace_occupancy(pool, r);
        }
        match self.pools[pool].role {
            PoolRole::Colocated => {
                self.schedule(pool, r);
                self.client.outstanding -= self.take_departed_of(pool, r);
                self.pools[pool].fleet.release_if_drained(r);
            }
            PoolRole::Prefill => {
                self.hand_off(r, iteration_ns);
                self.start_prefill(r);
            }
            PoolRole::Decode => self.start_decode(r),
        }
    }

    /// How far replicas of `pool` scheduling now may fast-forward: to the next event the loop
    /// knows of that could touch them (for a colocated replica the next control event, or
    /// the next arrival, which cannot come before its send time plus the frontend delay and
    /// counts only while the concurrency cap lets it in; for a decode replica the next
    /// prefill iteration end, transfer event or arrival), within the simulated-time and event
    /// limits.
    /// An event queued later that must see a replica inside its run cuts the run.
    fn horizon(&self, pool: usize) -> Horizon {
        let limits = &self.cfg.limits;
        let c = &self.client;
        let next_arrival = c
            .pending
            .as_ref()
            .filter(|_| c.outstanding < c.cap)
            .map_or(u64::MAX, |p| {
                p.arrival_ns.saturating_add(self.cfg.frontend_delay_ns)
            });
        let next_ns = match self.pools[pool].role {
            _ if !limits.fast_forward => return Horizon::OFF,
            PoolRole::Prefill => return Horizon::OFF,
            PoolRole::Colocated => self.queue.next_control_ns().min(next_arrival),
            // A request arriving starts a prefill whose end may hand it to this replica: the
            // arrival bounds the next hand-off (a run past it would be cut, walked twice).
            PoolRole::Decode => self.queue.next_engine_ns().min(next_arrival),
        };
        Horizon {
            until_ns: next_ns.min(limits.max_sim_time_ns),
            max_iterations: limits.max_events.saturating_sub(self.n_events).max(1),
            series_interval_ns: self.ts.interval_ns(),
        }
    }

    /// Plans and starts the next iteration (or run) of replica `r` of `pool` and queues its
    /// end; nothing when it has nothing to run.
    pub(super) fn schedule(&mut self, pool: usize, r: usize) {
        let h = self.horizon(pool);
        let p = &mut self.pools[pool];
        let slot = &mut p.fleet.slots[r];
        if let Some(dur) = slot.replica.schedule(
            self.now,
            &mut self.slab,
            &mut self.metrics,
            &self.cfg.slo,
            p.step,
            &h,
        ) {
            let event = Event::IterationEnd {
                pool: pool as u8,
                replica: r as u32,
            };
            slot.pending_seq = self.queue.push(self.now + dur, event);
            if slot.replica.in_run() {
                p.note_run(r);
            }
        }
    }

    /// Starts an iteration on replica `r` of `pool` if it serves and is idle (and has work);
    /// returns whether it served and was idle.
    pub(super) fn start(&mut self, pool: usize, r: usize) -> bool {
        let slot = &self.pools[pool].fleet.slots[r];
        if slot.state != SlotState::Ready || slot.replica.is_busy() {
            return false;
        }
        self.schedule(pool, r);
        true
    }

    /// Requests that left replica `r` of `pool` since the last call.
    pub(super) fn take_departed_of(&mut self, pool: usize, r: usize) -> u64 {
        self.pools[pool].fleet.slots[r].replica.take_departed()
    }

    /// Requests that left any replica of `pool` since the last call.
    pub(super) fn take_departed(&mut self, pool: usize) -> u64 {
        self.pools[pool]
            .fleet
            .slots
            .iter_mut()
            .map(|s| s.replica.take_departed())
            .sum()
    }

    /// Brings every replica of `pool` that may be in a fast-forwarded run up to the event
    /// being handled.
    pub(super) fn bring_up_to_date(&mut self, pool: usize) {
        let mut runs = std::mem::take(&mut self.scratch_runs);
        self.pools[pool].take_runs(&mut runs);
        for &r in &runs {
            self.cut(pool, r);
        }
        self.scratch_runs = runs;
    }

    /// Brings replica `r` of `pool` up to the event being handled: if it is inside a
    /// fast-forwarded run, the iterations that end before the event (in the order of
    /// src/sim/event.rs) are booked and the one in flight becomes an ordinary iteration.
    pub(super) fn cut(&mut self, pool: usize, r: usize) {
        let p = &mut self.pools[pool];
        let slot = &mut p.fleet.slots[r];
        if !slot.replica.in_run() {
            return;
        }
        let inclusive = EventQueue::ends_before(pool as u8, r as u32, &self.event);
        let batch = slot.replica.in_flight_batch();
        if let Some(end) =
            slot.replica
                .cut_run(self.now, inclusive, &mut self.metrics, &mut self.ts)
        {
            self.cancelled.push(slot.pending_seq);
            let event = Event::IterationEnd {
                pool: pool as u8,
                replica: r as u32,
            };
            slot.pending_seq = self.queue.push(end, event);
        }
        let v = slot.replica.take_virtual_iterations();
        self.n_events += v;
        self.fast_forwarded += v;
        let booked_end_ns = slot.replica.iteration_start_ns();
        if slot.replica.in_run() {
            // Not reached: a run in flight at an event that cut it ends after it.
            p.note_run(r);
        }
        if v > 0 && self.trace.is_some() {
            self.trace_iterations(pool, r, batch, v, booked_end_ns);
        }
    }

    /// Tells the trace that replica `r` of `pool` ran `iterations` iterations of `batch`
    /// ((start, decodes, prefill chunks, prefill tokens)) until `end_ns`.
    fn trace_iterations(
        &mut self,
        pool: usize,
        r: usize,
        batch: (u64, u32, u32, u64),
        iterations: u64,
        end_ns: u64,
    ) {
        let role = self.pools[pool].role;
        if let Some(t) = self.trace.as_deref_mut() {
            let (start_ns, decodes, prefill_seqs, prefill_tokens) = batch;
            t.span(&TraceSpan {
                pool: role,
                replica: r as u32,
                start_ns,
                end_ns,
                iterations,
                decodes,
                prefill_seqs,
                prefill_tokens,
            });
        }
    }

    /// Tells the trace replica `r`'s queue and cache now.
    fn trace_occupancy(&mut self, pool: usize, r: usize) {
        let p = &self.pools[pool];
        let (waiting, running, kv_used_blocks, kv_blocks) = p.fleet.slots[r].replica.occupancy();
        if let Some(t) = self.trace.as_deref_mut() {
            t.occupancy(&TraceOccupancy {
                pool: p.role,
                replica: r as u32,
                at_ns: self.now,
                waiting,
                running,
                kv_used_blocks,
                kv_blocks,
            });
        }
    }

    /// What the run produced, once the loop has stopped (`truncated`: why it stopped early).
    fn finish(mut self, gen: &RequestGenerator, mut truncated: Option<String>) -> SimOutput {
        self.metrics.flush();
        let end = self.metrics.last_event_ns.max(self.client.last_arrival_ns);
        for pool in &mut self.pools {
            pool.fleet.account(end, &mut self.metrics);
        }
        if truncated.is_none() {
            if let Some((t_s, unsent)) = gen.overflowed() {
                truncated = Some(format!(
                    "the next arrival, at {t_s:.3e} s, lies past the simulator's clock (about {:.0} years): the run stopped there{}",
                    crate::clock::MAX_YEARS,
                    unsent.map_or(String::new(), |n| format!(", {n} requests never sent"))
                ));
            }
        }
        let replicas = || self.pools.iter().flat_map(|p| p.fleet.slots.iter());
        let in_flight: u64 = replicas().map(|s| s.replica.outstanding()).sum();
        let blocks_held_at_end = replicas().map(|s| s.replica.held_blocks()).sum();
        let disaggregated = self.pools.len() > 1;
        if truncated.is_none() && in_flight > 0 {
            let which = if disaggregated { "a" } else { "the" };
            truncated = Some(format!(
                "stalled: {in_flight} requests could not be scheduled (a request needs more KV \
                 blocks than {which} replica can ever free)"
            ));
        }
        if invariants::CHECKS {
            invariants::check_end(&self, in_flight, blocks_held_at_end, truncated.is_some());
        }
        let peak_kv_blocks = self.pools.last().map_or(0, Pool::peak_blocks);
        let disaggregation = disaggregated.then(|| {
            let mut stats = std::mem::take(&mut self.kv.stats);
            stats.peak_prefill_blocks = self.pools[FIRST_POOL].peak_blocks();
            stats.peak_decode_blocks = self.pools[DECODE_POOL].peak_blocks();
            stats.link_busy_ns = self.kv.link_busy_ns();
            stats.in_transfer = self.pools[DECODE_POOL]
                .fleet
                .slots
                .iter()
                .map(|s| s.replica.incoming())
                .sum();
            stats.blocks_held_at_end = blocks_held_at_end;
            stats
        });
        let prefix_cache_tokens = self.pools[FIRST_POOL]
            .fleet
            .slots
            .iter()
            .map(|s| s.replica.content_tokens)
            .collect();
        SimOutput {
            prefix_cache_tokens,
            peak_kv_blocks,
            last_arrival_ns: self.client.last_arrival_ns,
            metrics: self.metrics,
            timeseries: self.ts,
            in_flight,
            truncated,
            events: self.n_events,
            disaggregation,
            fast_forwarded_iterations: self.fast_forwarded,
            blocks_held_at_end,
        }
    }
}

/// Counts an arrival the engine sees at `now` (latency counted from `start_ns`).
fn note_arrival(start_ns: u64, now: u64, metrics: &mut Metrics, ts: &mut TimeSeries) {
    metrics.arrived += 1;
    metrics.first_arrival_ns = Some(
        metrics
            .first_arrival_ns
            .map_or(start_ns, |t| t.min(start_ns)),
    );
    if let Some(b) = metrics.periods.at(start_ns) {
        b.arrived += 1;
    }
    ts.arrival(now);
}

/// The slot request `req` goes to, the one routing entry point of both pools (arrivals,
/// retries after a failure, hand-offs to the decode pool): the router's pick for it among the
/// ready replicas, or, when none is ready, the first replica that will be (starting, or down
/// for repair), where it waits.
pub(super) fn choose(fleet: &Fleet, router: &mut Router, req: &Req) -> usize {
    if fleet.active.is_empty() {
        fleet
            .slots
            .iter()
            .position(|s| matches!(s.state, SlotState::Provisioning | SlotState::Down))
            .unwrap_or(0)
    } else {
        router.pick_for(&fleet.slots, &fleet.active, req)
    }
}

/// Whether a router reads state a fast-forwarded run leaves stale (the KV blocks in use), so
/// that its pool must be brought up to date before it picks.
pub(super) fn reads_kv(kind: RouterKind) -> bool {
    matches!(kind, RouterKind::LeastKv | RouterKind::PrefixAware)
}
