//! The event loop: arrivals, routing, admission, each replica's iterations, and the fleet's
//! controllers (autoscaler decisions, cold starts, failures and repairs).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::fleet::{Fleet, OnFailure, SlotState};
use super::replica::Horizon;
use super::request::{Phase, Req, Slab, NONE, NO_TIME};
use super::router::Router;
use super::{SimConfig, SimOutput};
use crate::metrics::{Metrics, Outcome, PeriodStats, RequestLog, RequestRecord, TimeSeries};
use crate::roofline::StepTimeModel;
use crate::workload::{RequestGenerator, RequestSpec};

/// Event kinds: an iteration of replica slot `i` is `i` itself (below `FIRST_CONTROL`); the
/// others carry their slot in the low bits.
const ARRIVAL: u32 = u32::MAX;
const AUTOSCALE: u32 = u32::MAX - 1;
const SCHEDULED_FAILURE: u32 = u32::MAX - 2;
const FIRST_CONTROL: u32 = 0x4000_0000;
const READY: u32 = 0x4000_0000;
const FAIL: u32 = 0x5000_0000;
const REPAIR: u32 = 0x6000_0000;
const SLOT_MASK: u32 = 0x0fff_ffff;

/// The event queue, earliest first. Iteration ends (and the ends of fast-forwarded runs) come
/// before control events (arrivals, autoscaler, failures) at the same time, and among
/// themselves by replica slot; control events keep the order they were queued in. The order
/// is total and deterministic, and the same whether or not iterations are fast-forwarded.
#[derive(Default)]
pub(super) struct Events {
    /// Iteration ends: (time, slot, sequence number).
    iterations: BinaryHeap<Reverse<(u64, u32, u64)>>,
    /// Control events: (time, sequence number, kind).
    controls: BinaryHeap<Reverse<(u64, u64, u32)>>,
    seq: u64,
    /// Slots that started a fast-forwarded run since the last control event (each once), and
    /// which slots are listed: the runs a control event may have to cut.
    runs: Vec<usize>,
    listed: Vec<bool>,
}

impl Events {
    /// Queues an event; returns its sequence number.
    pub(super) fn push(&mut self, at: u64, kind: u32) -> u64 {
        if kind < FIRST_CONTROL {
            self.iterations.push(Reverse((at, kind, self.seq)));
        } else {
            self.controls.push(Reverse((at, self.seq, kind)));
        }
        self.seq += 1;
        self.seq - 1
    }

    /// The next event: (time, sequence number, kind).
    pub(super) fn pop(&mut self) -> Option<(u64, u64, u32)> {
        let it = self.iterations.peek().map(|Reverse(e)| e.0);
        let ct = self.controls.peek().map(|Reverse(e)| e.0);
        match (it, ct) {
            (Some(i), Some(c)) if i <= c => self.pop_iteration(),
            (Some(_), None) => self.pop_iteration(),
            _ => self.controls.pop().map(|Reverse(e)| e),
        }
    }

    fn pop_iteration(&mut self) -> Option<(u64, u64, u32)> {
        self.iterations
            .pop()
            .map(|Reverse((t, slot, seq))| (t, seq, slot))
    }

    /// Notes that slot `r` started a fast-forwarded run.
    fn note_run(&mut self, r: usize) {
        if r >= self.listed.len() {
            self.listed.resize(r + 1, false);
        }
        if !self.listed[r] {
            self.listed[r] = true;
            self.runs.push(r);
        }
    }

    /// Moves the slots noted since the last call into `into` (its buffer is reused).
    fn take_runs(&mut self, into: &mut Vec<usize>) {
        into.clear();
        std::mem::swap(&mut self.runs, into);
        for &r in into.iter() {
            self.listed[r] = false;
        }
    }

    /// Time of the next control event, ns (`u64::MAX` when none is queued).
    fn next_control_ns(&self) -> u64 {
        self.controls.peek().map_or(u64::MAX, |Reverse(e)| e.0)
    }
}

/// How far a replica scheduling now may fast-forward: to the next control event the loop
/// knows of (queued, or the next arrival, which cannot come before its send time plus the
/// frontend delay; `pending` is `None` when the concurrency cap holds it back until some
/// request leaves), within the simulated-time and event limits. A control event queued later
/// that falls inside a run cuts it (`Replica::cut_run`).
fn horizon(
    cfg: &SimConfig,
    events: &Events,
    pending: Option<&RequestSpec>,
    n_events: u64,
    ts: &TimeSeries,
) -> Horizon {
    if !cfg.limits.fast_forward {
        return Horizon::OFF;
    }
    let next_arrival = pending.map_or(u64::MAX, |p| {
        p.arrival_ns.saturating_add(cfg.frontend_delay_ns)
    });
    Horizon {
        until_ns: events
            .next_control_ns()
            .min(next_arrival)
            .min(cfg.limits.max_sim_time_ns),
        max_iterations: cfg.limits.max_events.saturating_sub(n_events).max(1),
        series_interval_ns: ts.interval_ns(),
    }
}

/// Runs one simulation to completion (or to a limit) and returns its metrics.
pub fn simulate(cfg: &SimConfig, step: &StepTimeModel, gen: &mut RequestGenerator) -> SimOutput {
    let initial = cfg
        .autoscale
        .as_ref()
        .map_or(cfg.replicas, |a| a.initial_replicas)
        .max(1);
    let mut fleet = Fleet::new(
        &cfg.scheduler,
        initial,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xfa11_0000_5eed),
    );
    let mut router = Router::new(
        cfg.router,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f5e_7e00),
    );
    let mut slab = Slab::default();
    let mut metrics = Metrics {
        log: RequestLog::with_capacity(cfg.request_log_capacity),
        periods: PeriodStats::new(cfg.period_ns),
        ..Metrics::default()
    };
    let mut ts = TimeSeries::new(initial);
    let mut events = Events::default();
    let mut n_events: u64 = 0;
    let mut truncated = None;
    let mut last_arrival_ns = 0;

    // Client-side gate on outstanding requests: the user's --max-concurrency (latency counted
    // from the send), or, for offline runs, enough queued work to keep every replica's
    // scheduler supplied (latency counted from t = 0) without holding every request in memory.
    let measure_from_send = cfg.max_concurrency.is_some();
    let cap: u64 = match cfg.max_concurrency {
        Some(c) => c.max(1) as u64,
        None if gen.is_offline() => initial as u64 * (2 * cfg.scheduler.max_num_seqs as u64 + 16),
        None => u64::MAX,
    };
    let mut outstanding: u64 = 0;
    let mut pending: Option<RequestSpec> = gen.next_request();
    let mut arrival_queued = false;
    if let Some(p) = pending {
        events.push(p.arrival_ns + cfg.frontend_delay_ns, ARRIVAL);
        arrival_queued = true;
    }
    if let Some(a) = &cfg.autoscale {
        events.push(a.interval_ns, AUTOSCALE);
    }
    if let Some(f) = &cfg.faults {
        for (k, failure) in f.failures.iter().enumerate() {
            events.push(failure.time_ns, SCHEDULED_FAILURE - k as u32);
        }
        if let Some(mtbf) = f.mtbf_ns {
            for i in 0..fleet.slots.len() {
                let at = fleet.time_to_failure(mtbf);
                events.push(at, FAIL | i as u32);
            }
        }
    }

    // Run events replaced when a control event cut their run (not events of the oracle).
    let mut cancelled: Vec<u64> = Vec::new();
    let mut fast_forwarded: u64 = 0;
    let mut runs: Vec<usize> = Vec::new();
    // How far a replica scheduling now may fast-forward (the next arrival counts only while
    // the concurrency cap lets it in).
    macro_rules! horizon_now {
        () => {
            horizon(
                cfg,
                &events,
                pending.as_ref().filter(|_| outstanding < cap),
                n_events,
                &ts,
            )
        };
    }
    while let Some((now, ev_seq, kind)) = events.pop() {
        if kind < FIRST_CONTROL && !cancelled.is_empty() {
            if let Some(p) = cancelled.iter().position(|&s| s == ev_seq) {
                cancelled.swap_remove(p);
                continue;
            }
        }
        n_events += 1;
        // A replica whose iteration would end beyond the clock stops the run (metrics.stop).
        if let Some(why) = metrics
            .stop
            .take()
            .or_else(|| cfg.limits.reached(now, n_events))
        {
            truncated = Some(why);
            break;
        }
        fleet.account(now, &mut metrics);
        if kind >= FIRST_CONTROL {
            // A control event sees every replica as it is at `now`: runs that reach past it
            // are cut there.
            events.take_runs(&mut runs);
            for &r in &runs {
                let slot = &mut fleet.slots[r];
                if !slot.replica.in_run() {
                    continue;
                }
                if let Some(end) = slot.replica.cut_run(now, &mut metrics, &mut ts) {
                    cancelled.push(slot.pending_seq);
                    slot.pending_seq = events.push(end, r as u32);
                }
                let v = slot.replica.take_virtual_iterations();
                n_events += v;
                fast_forwarded += v;
                if slot.replica.in_run() {
                    // Not reached: a run in flight at a control event ends after it.
                    events.note_run(r);
                }
            }
        }
        match kind {
            ARRIVAL => {
                arrival_queued = false;
                let Some(spec) = pending.take() else { continue };
                // The request stream does not depend on the simulation: drawing the next one
                // now tells the replicas how far they may fast-forward.
                pending = gen.next_request();
                last_arrival_ns = now;
                // Latency counts from the client's send; the engine sees the request after
                // the API frontend's delay.
                let start_ns = if measure_from_send {
                    now - cfg.frontend_delay_ns
                } else {
                    spec.arrival_ns
                };
                fleet.note_arrival();
                let admitted = arrive(
                    cfg,
                    step,
                    &spec,
                    start_ns,
                    now,
                    &mut fleet,
                    &mut router,
                    &mut slab,
                    &mut metrics,
                    &mut ts,
                );
                if let Some((id, r)) = admitted {
                    outstanding += 1;
                    let h = horizon_now!();
                    enqueue(
                        cfg,
                        step,
                        id,
                        r,
                        now,
                        &h,
                        &mut fleet,
                        &mut slab,
                        &mut metrics,
                        &mut events,
                    );
                    outstanding -= take_departed(&mut fleet);
                }
            }
            AUTOSCALE => {
                let Some(a) = &cfg.autoscale else { continue };
                for i in fleet.autoscale(a, now, &metrics) {
                    events.push(now + a.scale_up_delay_ns, READY | i as u32);
                }
                // Keep deciding while there is load to come or work in flight.
                if pending.is_some() || outstanding > 0 {
                    events.push(now + a.interval_ns, AUTOSCALE);
                }
            }
            k if k < FIRST_CONTROL => {
                let r = k as usize;
                if fleet.slots[r].pending_seq != ev_seq {
                    continue; // the replica failed since this iteration started
                }
                let slot = &mut fleet.slots[r];
                slot.pending_seq = u64::MAX;
                slot.replica
                    .end_iteration(now, &mut slab, &mut metrics, &mut ts, &cfg.slo);
                let v = slot.replica.take_virtual_iterations();
                n_events += v;
                fast_forwarded += v;
                outstanding -= slot.replica.take_departed();
                let h = horizon_now!();
                let slot = &mut fleet.slots[r];
                if let Some(dur) =
                    slot.replica
                        .schedule(now, &mut slab, &mut metrics, &cfg.slo, step, &h)
                {
                    slot.pending_seq = events.push(now + dur, r as u32);
                    if slot.replica.in_run() {
                        events.note_run(r);
                    }
                }
                outstanding -= fleet.slots[r].replica.take_departed();
                fleet.release_if_drained(r);
            }
            k if k > (REPAIR | SLOT_MASK) => {
                let Some(f) = &cfg.faults else { continue };
                let Some(failure) = f.failures.get((SCHEDULED_FAILURE - k) as usize) else {
                    continue;
                };
                for i in fleet.first_ready(failure.replicas) {
                    let h = horizon_now!();
                    outstanding -= fail(
                        cfg,
                        step,
                        i,
                        now,
                        &h,
                        &mut fleet,
                        &mut router,
                        &mut slab,
                        &mut metrics,
                        &mut events,
                    );
                    events.push(now + failure.repair_ns, REPAIR | i as u32);
                }
                outstanding -= take_departed(&mut fleet);
            }
            k => {
                let i = (k & SLOT_MASK) as usize;
                match k & !SLOT_MASK {
                    READY | REPAIR => {
                        let from = if k & !SLOT_MASK == READY {
                            SlotState::Provisioning
                        } else {
                            SlotState::Down
                        };
                        if fleet.slots[i].state != from {
                            continue;
                        }
                        fleet.make_ready(i);
                        if let Some(mtbf) = cfg.faults.as_ref().and_then(|f| f.mtbf_ns) {
                            let at = now + fleet.time_to_failure(mtbf);
                            events.push(at, FAIL | i as u32);
                        }
                        // Requests may have queued here while it was not ready.
                        let h = horizon_now!();
                        start(
                            cfg,
                            step,
                            i,
                            now,
                            &h,
                            &mut fleet,
                            &mut slab,
                            &mut metrics,
                            &mut events,
                        );
                        outstanding -= take_departed(&mut fleet);
                    }
                    FAIL => {
                        if fleet.slots[i].state != SlotState::Ready {
                            continue; // released or down since this failure was drawn
                        }
                        let h = horizon_now!();
                        outstanding -= fail(
                            cfg,
                            step,
                            i,
                            now,
                            &h,
                            &mut fleet,
                            &mut router,
                            &mut slab,
                            &mut metrics,
                            &mut events,
                        );
                        outstanding -= take_departed(&mut fleet);
                        let repair = cfg.faults.as_ref().map_or(0, |f| f.repair_ns);
                        events.push(now + repair, REPAIR | i as u32);
                    }
                    _ => {}
                }
            }
        }
        if !arrival_queued && outstanding < cap {
            if let Some(p) = pending {
                // The client sends at its arrival time, or now if the concurrency cap held it
                // back; the engine sees it after the frontend delay.
                let at = p.arrival_ns.max(now.saturating_sub(cfg.frontend_delay_ns))
                    + cfg.frontend_delay_ns;
                events.push(at, ARRIVAL);
                arrival_queued = true;
            }
        }
        // Once the load is over and the last request is done, no controller keeps the run
        // alive: the fleet's time stops with the last request.
        if pending.is_none() && outstanding == 0 && !arrival_queued {
            break;
        }
    }
    let end = metrics.last_event_ns.max(last_arrival_ns);
    fleet.account(end, &mut metrics);

    if truncated.is_none() {
        if let Some((t_s, unsent)) = gen.overflowed() {
            truncated = Some(format!(
                "the next arrival, at {t_s:.3e} s, lies past the simulator's clock (about {:.0} years): the run stopped there{}",
                crate::clock::MAX_YEARS,
                unsent.map_or(String::new(), |n| format!(", {n} requests never sent"))
            ));
        }
    }
    let in_flight: u64 = fleet.slots.iter().map(|s| s.replica.outstanding()).sum();
    if truncated.is_none() && in_flight > 0 {
        truncated = Some(format!(
            "stalled: {in_flight} requests could not be scheduled (a request needs more KV \
             blocks than the replica can ever free)"
        ));
    }
    SimOutput {
        peak_kv_blocks: fleet
            .slots
            .iter()
            .map(|s| s.replica.peak_blocks)
            .max()
            .unwrap_or(0)
            .max(fleet.peak_blocks),
        last_arrival_ns,
        metrics,
        timeseries: ts,
        in_flight,
        truncated,
        events: n_events,
        disaggregation: None,
        fast_forwarded_iterations: fast_forwarded,
    }
}

/// Requests that left any replica since the last call.
fn take_departed(fleet: &mut Fleet) -> u64 {
    fleet
        .slots
        .iter_mut()
        .map(|s| s.replica.take_departed())
        .sum()
}

/// Handles one arrival: picks its replica, checks and books it; returns its slab id and
/// replica, or `None` when it is rejected.
#[allow(clippy::too_many_arguments)]
fn arrive(
    cfg: &SimConfig,
    step: &StepTimeModel,
    spec: &RequestSpec,
    start_ns: u64,
    now: u64,
    fleet: &mut Fleet,
    router: &mut Router,
    slab: &mut Slab,
    metrics: &mut Metrics,
    ts: &mut TimeSeries,
) -> Option<(u32, usize)> {
    note_arrival(start_ns, now, metrics, ts);
    let input = spec.input_tokens.max(1);
    let output = spec.output_tokens.max(1);
    let too_long = input as u64 + output as u64 > cfg.scheduler.max_model_len as u64;
    let r = choose(fleet, router);
    let reject = too_long
        || (cfg.slo.admission_control
            && cfg
                .slo
                .ttft_ns
                .is_some_and(|t| fleet.slots[r].replica.predict_ttft_ns(now, input, step) > t));
    if reject {
        metrics.record_unserved(Outcome::Rejected, start_ns, input, now);
        return None;
    }
    let id = slab.insert(new_request(spec, start_ns));
    Some((id, r))
}

/// Counts an arrival the engine sees at `now` (latency counted from `start_ns`).
pub(super) fn note_arrival(start_ns: u64, now: u64, metrics: &mut Metrics, ts: &mut TimeSeries) {
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

/// A new request, waiting, its latency counted from `start_ns`.
pub(super) fn new_request(spec: &RequestSpec, start_ns: u64) -> Req {
    let input = spec.input_tokens.max(1);
    let output = spec.output_tokens.max(1);
    Req {
        arrival_ns: start_ns,
        first_token_ns: NO_TIME,
        last_token_ns: NO_TIME,
        first_scheduled_ns: NO_TIME,
        input,
        output,
        generated: 0,
        prefill_len: input,
        computed: 0,
        own_blocks: 0,
        shared_blocks: 0,
        reserve: 0,
        prefix_group: if spec.prefix_tokens > 0 {
            spec.prefix_group
        } else {
            NONE
        },
        prefix_tokens: spec.prefix_tokens.min(input.saturating_sub(1)),
        dec_iter0: 0,
        dec_kv0: 0,
        dec_gen0: 0,
        finish_iter: 0,
        epoch: 0,
        phase: Phase::Waiting,
        prev: NONE,
        next: NONE,
    }
}

/// The slot a new request goes to: the router's pick among the ready replicas, or, when none
/// is ready, the first replica that will be (starting, or down for repair), where it waits.
fn choose(fleet: &Fleet, router: &mut Router) -> usize {
    if fleet.active.is_empty() {
        fleet
            .slots
            .iter()
            .position(|s| matches!(s.state, SlotState::Provisioning | SlotState::Down))
            .unwrap_or(0)
    } else {
        router.pick(&fleet.slots, &fleet.active)
    }
}

/// Queues request `id` at slot `r` and starts an iteration there if it was idle.
#[allow(clippy::too_many_arguments)]
fn enqueue(
    cfg: &SimConfig,
    step: &StepTimeModel,
    id: u32,
    r: usize,
    now: u64,
    horizon: &Horizon,
    fleet: &mut Fleet,
    slab: &mut Slab,
    metrics: &mut Metrics,
    events: &mut Events,
) {
    fleet.slots[r].replica.enqueue(slab, id);
    start(cfg, step, r, now, horizon, fleet, slab, metrics, events);
}

/// Starts an iteration on slot `r` if it is ready, idle and has work.
#[allow(clippy::too_many_arguments)]
fn start(
    cfg: &SimConfig,
    step: &StepTimeModel,
    r: usize,
    now: u64,
    horizon: &Horizon,
    fleet: &mut Fleet,
    slab: &mut Slab,
    metrics: &mut Metrics,
    events: &mut Events,
) {
    let slot = &mut fleet.slots[r];
    if slot.state == SlotState::Ready && !slot.replica.is_busy() {
        if let Some(dur) = slot
            .replica
            .schedule(now, slab, metrics, &cfg.slo, step, horizon)
        {
            slot.pending_seq = events.push(now + dur, r as u32);
            if slot.replica.in_run() {
                events.note_run(r);
            }
        }
    }
}

/// Fails slot `i` at `now`: its in-flight requests are retried elsewhere or lost. Returns the
/// number lost (they leave the outstanding count).
#[allow(clippy::too_many_arguments)]
fn fail(
    cfg: &SimConfig,
    step: &StepTimeModel,
    i: usize,
    now: u64,
    horizon: &Horizon,
    fleet: &mut Fleet,
    router: &mut Router,
    slab: &mut Slab,
    metrics: &mut Metrics,
    events: &mut Events,
) -> u64 {
    let ids = fleet.slots[i].replica.in_flight_ids(slab);
    fleet.fail(i);
    let on_failure = cfg
        .faults
        .as_ref()
        .map_or(OnFailure::Fail, |f| f.on_failure);
    let mut lost = 0;
    for id in ids {
        match on_failure {
            OnFailure::Retry => {
                metrics.retried += 1;
                let r = slab.get_mut(id);
                r.phase = Phase::Waiting;
                r.first_token_ns = NO_TIME;
                r.last_token_ns = NO_TIME;
                r.generated = 0;
                r.prefill_len = r.input;
                r.computed = 0;
                r.own_blocks = 0;
                r.shared_blocks = 0;
                r.reserve = 0;
                r.prev = NONE;
                r.next = NONE;
                let to = choose(fleet, router);
                enqueue(
                    cfg, step, id, to, now, horizon, fleet, slab, metrics, events,
                );
            }
            OnFailure::Fail => {
                let r = slab.get(id);
                metrics.log.push(RequestRecord {
                    arrival_ns: r.arrival_ns,
                    first_token_ns: now,
                    end_ns: now,
                    input_tokens: r.input,
                    output_tokens: 0,
                    outcome: Outcome::Lost,
                });
                if let Some(b) = metrics.periods.at(r.arrival_ns) {
                    b.lost += 1;
                }
                metrics.lost += 1;
                metrics.last_event_ns = metrics.last_event_ns.max(now);
                slab.remove(id);
                lost += 1;
            }
        }
    }
    lost
}
