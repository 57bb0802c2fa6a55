//! The handlers of the fleet's control events: autoscaler decisions, cold starts, failures
//! and repairs (src/sim/fleet.rs holds the decisions; these apply them to the running
//! cluster). Controllers act on pool 0, the colocated replicas.

use super::{choose, Cluster, FIRST_POOL};
use crate::metrics::{Outcome, RequestRecord};
use crate::sim::event::Event;
use crate::sim::fleet::{OnFailure, SlotState};
use crate::sim::request::{Phase, NONE, NO_TIME};

impl Cluster<'_, '_> {
    /// The autoscaler decides: replicas it starts are ready after the cold start; it decides
    /// again after its interval while there is load to come or work in flight.
    pub(super) fn on_autoscale(&mut self) {
        let Some(a) = &self.cfg.autoscale else {
            return;
        };
        let fleet = &mut self.pools[FIRST_POOL].fleet;
        for i in fleet.autoscale(a, self.now, &self.metrics) {
            let replica = i as u32;
            self.queue
                .push(self.now + a.scale_up_delay_ns, Event::Ready { replica });
        }
        if self.client.pending.is_some() || self.client.outstanding > 0 {
            self.queue.push(self.now + a.interval_ns, Event::Autoscale);
        }
    }

    /// Scheduled failure number `index`: the first ready replicas it names fail, each
    /// repaired after its repair time.
    pub(super) fn on_scheduled_failure(&mut self, index: usize) {
        let Some(f) = &self.cfg.faults else {
            return;
        };
        let Some(failure) = f.failures.get(index) else {
            return;
        };
        for i in self.pools[FIRST_POOL].fleet.first_ready(failure.replicas) {
            self.client.outstanding -= self.fail_replica(i);
            let replica = i as u32;
            self.queue
                .push(self.now + failure.repair_ns, Event::Repair { replica });
        }
        self.client.outstanding -= self.take_departed(FIRST_POOL);
    }

    /// Replica `i` becomes ready, if it is still `from` (starting, or down for repair): it
    /// draws its next random failure and serves what queued for it meanwhile.
    pub(super) fn on_ready(&mut self, i: usize, from: SlotState) {
        let fleet = &mut self.pools[FIRST_POOL].fleet;
        if fleet.slots[i].state != from {
            return;
        }
        fleet.make_ready(i);
        if let Some(mtbf) = self.cfg.faults.as_ref().and_then(|f| f.mtbf_ns) {
            let at = self.now + fleet.time_to_failure(mtbf);
            self.queue.push(at, Event::Fail { replica: i as u32 });
        }
        // Requests may have queued here while it was not ready.
        self.start(FIRST_POOL, i);
        self.client.outstanding -= self.take_departed(FIRST_POOL);
    }

    /// Replica `i` fails at random, if it is still serving (not released or down since its
    /// failure was drawn); it is repaired after the scenario's repair time.
    pub(super) fn on_fail(&mut self, i: usize) {
        if self.pools[FIRST_POOL].fleet.slots[i].state != SlotState::Ready {
            return;
        }
        self.client.outstanding -= self.fail_replica(i);
        self.client.outstanding -= self.take_departed(FIRST_POOL);
        let repair = self.cfg.faults.as_ref().map_or(0, |f| f.repair_ns);
        let replica = i as u32;
        self.queue
            .push(self.now + repair, Event::Repair { replica });
    }

    /// Takes replica `i` down: its in-flight requests are retried elsewhere or lost. Returns
    /// the number lost (they leave the outstanding count).
    fn fail_replica(&mut self, i: usize) -> u64 {
        let now = self.now;
        let pool = &mut self.pools[FIRST_POOL];
        let ids = pool.fleet.slots[i].replica.in_flight_ids(&self.slab);
        pool.fleet.fail(i);
        let on_failure = self
            .cfg
            .faults
            .as_ref()
            .map_or(OnFailure::Fail, |f| f.on_failure);
        let mut lost = 0;
        for id in ids {
            match on_failure {
                OnFailure::Retry => {
                    self.metrics.retried += 1;
                    let r = self.slab.get_mut(id);
                    r.phase = Phase::Waiting;
                    r.first_token_ns = NO_TIME;
                    r.last_token_ns = NO_TIME;
                    r.generated = 0;
                    r.spec_tokens = 0;
                    r.prefill_len = r.input;
                    r.computed = 0;
                    r.own_blocks = 0;
                    r.shared_blocks = 0;
                    r.reserve = 0;
                    r.prev = NONE;
                    r.next = NONE;
                    let pool = &mut self.pools[FIRST_POOL];
                    let to = choose(&pool.fleet, &mut pool.router, self.slab.get(id));
                    pool.fleet.slots[to]
                        .replica
                        .enqueue(&mut self.slab, id, now);
                    self.start(FIRST_POOL, to);
                }
                OnFailure::Fail => {
                    let r = self.slab.get(id);
                    self.metrics.log.push(RequestRecord {
                        arrival_ns: r.arrival_ns,
                        first_token_ns: now,
                        end_ns: now,
                        input_tokens: r.input,
                        output_tokens: 0,
                        outcome: Outcome::Lost,
                    });
                    if let Some(b) = self.metrics.periods.at(r.arrival_ns) {
                        b.lost += 1;
                    }
                    self.metrics.lost += 1;
                    self.metrics.last_event_ns = self.metrics.last_event_ns.max(now);
                    self.slab.remove(id);
                    lost += 1;
                }
            }
        }
        lost
    }
}
