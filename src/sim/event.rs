//! The events of a run and the queue that orders them.
//!
//! Every event is an [`Event`]; the loop (src/sim/cluster.rs) pops the earliest and hands it
//! to the one handler of its kind. The order is total and deterministic (INV-5 in
//! docs/invariants.md): by time, then by class, then by index, then by the order the events
//! were queued in, where the classes are
//!
//! 0. iteration ends of pool 0 (the colocated replicas, or the prefill pool), by replica;
//! 1. iteration ends of pool 1 (the decode pool), by replica;
//! 2. KV transfers finishing on a link, by decode replica;
//! 3. KV transfers landing on a decode replica, by decode replica;
//! 4. control events (arrivals, autoscaler decisions, cold starts, failures, repairs), in the
//!    order they were queued in.
//!
//! Iteration ends thus come before control events at the same nanosecond, and the order does
//! not depend on how many iterations a fast-forwarded run held: a handler that must see a
//! replica as it is at its event cuts the replica's run there, booking exactly the iterations
//! whose (virtual) end events would have come first ([`EventQueue::ends_before`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Something that happens at an instant of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// The next request of the workload reaches the engine's queue.
    Arrival,
    /// An iteration, or the last iteration of a fast-forwarded run, of replica `replica` of
    /// pool `pool` (0: colocated or prefill, 1: decode) ends.
    IterationEnd {
        /// The pool.
        pool: u8,
        /// The replica's slot in its pool.
        replica: u32,
    },
    /// The link into decode replica `link` has finished moving a transfer's bytes.
    TransferDone {
        /// The decode replica whose link it is.
        link: u32,
    },
    /// A transfer's KV has landed on decode replica `replica` (the link latency after its
    /// bytes arrived).
    TransferLanded {
        /// The decode replica.
        replica: u32,
    },
    /// The autoscaler decides.
    Autoscale,
    /// The scheduled failure number `index` of the scenario strikes.
    ScheduledFailure {
        /// Its index in the scenario's list.
        index: u32,
    },
    /// A replica started by the autoscaler has finished its cold start.
    Ready {
        /// Its slot.
        replica: u32,
    },
    /// A replica fails (a random failure, drawn from the mean time between failures).
    Fail {
        /// Its slot.
        replica: u32,
    },
    /// A failed replica is repaired.
    Repair {
        /// Its slot.
        replica: u32,
    },
}

/// Class of control events (see the module's order).
pub(super) const CONTROL_CLASS: u8 = 4;

impl Event {
    /// (class, index) of the order (the module's list); controls all share one.
    pub(super) fn class_index(&self) -> (u8, u32) {
        match *self {
            Event::IterationEnd { pool, replica } => (pool, replica),
            Event::TransferDone { link } => (2, link),
            Event::TransferLanded { replica } => (3, replica),
            _ => (CONTROL_CLASS, 0),
        }
    }
}

/// A popped event: when, its sequence number, what.
#[derive(Debug, Clone, Copy)]
pub(super) struct Popped {
    /// Its time, ns.
    pub at_ns: u64,
    /// Its sequence number (unique; stale events are told by it).
    pub seq: u64,
    /// The event.
    pub event: Event,
}

/// The event queue, earliest first in the module's order. Engine events (classes 0-3) and
/// control events are kept apart, so that a replica planning a fast-forwarded run can see how
/// far it may go ([`EventQueue::next_control_ns`], [`EventQueue::next_engine_ns`]).
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    /// Iteration ends of pools 0 and 1: (time, replica, sequence number).
    iterations: [BinaryHeap<Reverse<(u64, u32, u64)>>; 2],
    /// Transfer events: (time, class 2 or 3, decode replica, sequence number).
    transfers: BinaryHeap<Reverse<(u64, u8, u32, u64)>>,
    /// Control events: (time, sequence number, event).
    controls: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    /// Time of the last event popped, ns (INV-5).
    last_ns: u64,
}

impl EventQueue {
    /// Queues `event` at `at_ns`; returns its sequence number.
    #[inline]
    pub(super) fn push(&mut self, at_ns: u64, event: Event) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        match event {
            Event::IterationEnd { pool, replica } => {
                self.iterations[pool as usize].push(Reverse((at_ns, replica, seq)))
            }
            Event::TransferDone { .. } | Event::TransferLanded { .. } => {
                let (class, index) = event.class_index();
                self.transfers.push(Reverse((at_ns, class, index, seq)))
            }
            _ => self.controls.push(Reverse((at_ns, seq, event))),
        }
        seq
    }

    /// Takes the next event off the queue.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Popped> {
        // The heads of the four heaps by (time, class): a heap's head has the smallest key of
        // its heap, and no two heaps share a class, so the smallest head is the next event.
        let mut which = usize::MAX;
        let mut best = (u64::MAX, u8::MAX);
        for (pool, heap) in self.iterations.iter().enumerate() {
            if let Some(Reverse((t, _, _))) = heap.peek() {
                if (*t, pool as u8) < best {
                    (which, best) = (pool, (*t, pool as u8));
                }
            }
        }
        if let Some(Reverse((t, class, _, _))) = self.transfers.peek() {
            if (*t, *class) < best {
                (which, best) = (2, (*t, *class));
            }
        }
        if let Some(Reverse((t, _, _))) = self.controls.peek() {
            if (*t, CONTROL_CLASS) < best {
                which = 3;
            }
        }
        let popped = match which {
            0 | 1 => {
                let Reverse((at_ns, replica, seq)) = self.iterations[which].pop()?;
                let pool = which as u8;
                Popped {
                    at_ns,
                    seq,
                    event: Event::IterationEnd { pool, replica },
                }
            }
            2 => {
                let Reverse((at_ns, class, index, seq)) = self.transfers.pop()?;
                let event = if class == 2 {
                    Event::TransferDone { link: index }
                } else {
                    Event::TransferLanded { replica: index }
                };
                Popped { at_ns, seq, event }
            }
            3 => {
                let Reverse((at_ns, seq, event)) = self.controls.pop()?;
                Popped { at_ns, seq, event }
            }
            _ => return None,
        };
        debug_assert!(
            popped.at_ns >= self.last_ns,
            "INV-5: event time went back from {} to {} ns",
            self.last_ns,
            popped.at_ns
        );
        self.last_ns = popped.at_ns;
        Some(popped)
    }

    /// Time of the next control event queued, ns (`u64::MAX` when none is).
    pub(super) fn next_control_ns(&self) -> u64 {
        self.controls.peek().map_or(u64::MAX, |Reverse(e)| e.0)
    }

    /// Time of the next iteration end of pool 0 or transfer event queued, ns (`u64::MAX`
    /// when none is): the events that may touch a decode replica.
    pub(super) fn next_engine_ns(&self) -> u64 {
        let it = self.iterations[0].peek().map_or(u64::MAX, |Reverse(e)| e.0);
        let tr = self.transfers.peek().map_or(u64::MAX, |Reverse(e)| e.0);
        it.min(tr)
    }

    /// Whether an iteration of pool `pool`'s replica `replica` ending at the time of event
    /// `event` comes before that event in the order: then a handler of `event` sees it ended.
    pub(super) fn ends_before(pool: u8, replica: u32, event: &Event) -> bool {
        (pool, replica) < event.class_index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INV-5: the order is time, class, index, then queueing order, whatever the pushes.
    #[test]
    fn events_pop_in_time_then_class_then_index_then_queue_order() {
        let mut q = EventQueue::default();
        let at = 1_000;
        q.push(at, Event::Arrival);
        q.push(at, Event::TransferLanded { replica: 0 });
        q.push(
            at,
            Event::IterationEnd {
                pool: 1,
                replica: 3,
            },
        );
        q.push(at, Event::Autoscale);
        q.push(at, Event::TransferDone { link: 1 });
        q.push(
            at,
            Event::IterationEnd {
                pool: 0,
                replica: 2,
            },
        );
        q.push(
            at,
            Event::IterationEnd {
                pool: 1,
                replica: 0,
            },
        );
        q.push(
            at,
            Event::IterationEnd {
                pool: 0,
                replica: 1,
            },
        );
        q.push(at - 1, Event::Repair { replica: 9 });
        q.push(at, Event::TransferDone { link: 0 });
        let order: Vec<Event> = std::iter::from_fn(|| q.pop().map(|p| p.event)).collect();
        assert_eq!(
            order,
            vec![
                Event::Repair { replica: 9 },
                Event::IterationEnd {
                    pool: 0,
                    replica: 1
                },
                Event::IterationEnd {
                    pool: 0,
                    replica: 2
                },
                Event::IterationEnd {
                    pool: 1,
                    replica: 0
                },
                Event::IterationEnd {
                    pool: 1,
                    replica: 3
                },
                Event::TransferDone { link: 0 },
                Event::TransferDone { link: 1 },
                Event::TransferLanded { replica: 0 },
                Event::Arrival,
                Event::Autoscale,
            ]
        );
    }

    #[test]
    fn same_key_events_keep_their_queueing_order_and_sequence_numbers() {
        let mut q = EventQueue::default();
        let a = q.push(
            5,
            Event::IterationEnd {
                pool: 0,
                replica: 0,
            },
        );
        let b = q.push(
            5,
            Event::IterationEnd {
                pool: 0,
                replica: 0,
            },
        );
        assert!(a < b);
        assert_eq!(q.pop().map(|p| p.seq), Some(a));
        assert_eq!(q.pop().map(|p| p.seq), Some(b));
        assert!(q.pop().is_none());
    }

    #[test]
    fn a_handler_sees_the_iterations_that_end_before_its_event() {
        let prefill_end = Event::IterationEnd {
            pool: 0,
            replica: 5,
        };
        let landed = Event::TransferLanded { replica: 0 };
        // A decode iteration ending with a prefill iteration's end comes after it ...
        assert!(!EventQueue::ends_before(1, 0, &prefill_end));
        // ... and before a transfer event or a control event at the same time.
        assert!(EventQueue::ends_before(1, 7, &landed));
        assert!(EventQueue::ends_before(0, 99, &Event::Arrival));
        assert!(EventQueue::ends_before(1, 0, &Event::Autoscale));
    }
}
