//! The fleet: which replicas exist and serve, and the controllers that change that during a
//! run. An autoscaler adds replicas (ready after a cold start) and drains them away; faults
//! take replicas down (their in-flight requests retried or lost, their KV cache gone) until
//! repaired. Both are driven by the event loop ([`super::cluster`]); without them the fleet
//! is the scenario's fixed set of replicas.

use std::collections::VecDeque;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Exp1;
use serde::Serialize;

use super::replica::Replica;
use super::SchedulerConfig;
use crate::metrics::{LatencyHistogram, Metrics};

/// What the autoscaler watches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum AutoscalePolicy {
    /// Keep the arrival rate over the window at `target` of the ready replicas' capacity:
    /// desired = ceil(rate / (capacity x target)).
    Utilization {
        /// Target share of capacity, (0, 1].
        target: f64,
        /// Requests/s one replica sustains within the SLOs.
        capacity_rate_per_replica: f64,
    },
    /// Waiting requests per ready replica: one step up above `high`, one step down below
    /// `low`.
    Queue {
        /// Scale up above this many waiting requests per ready replica.
        high: f64,
        /// Scale down below this many.
        low: f64,
    },
    /// p90 TTFT of the requests that completed since the last decision: up above `high_ns`,
    /// down below `low_ns`.
    Ttft {
        /// Scale up above this p90 TTFT, ns.
        high_ns: u64,
        /// Scale down below it, ns.
        low_ns: u64,
    },
}

/// An autoscaler (validated).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscaleConfig {
    /// The signal and its thresholds.
    pub policy: AutoscalePolicy,
    /// Fewest replicas provisioned.
    pub min_replicas: u32,
    /// Most replicas provisioned.
    pub max_replicas: u32,
    /// Replicas at the start of the run (ready at once).
    pub initial_replicas: u32,
    /// Cold start: from the decision to add a replica to its joining the router, ns.
    pub scale_up_delay_ns: u64,
    /// Least time between a scaling action and a scale-down, ns.
    pub scale_down_cooldown_ns: u64,
    /// Most replicas added or removed by one decision.
    pub step: u32,
    /// Time between decisions, ns.
    pub interval_ns: u64,
    /// Window the arrival rate is measured over, ns.
    pub window_ns: u64,
}

/// What happens to a failed replica's in-flight requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The client retries at once: the request starts over on another replica, its latency
    /// still counted from its first arrival.
    Retry,
    /// The request fails.
    Fail,
}

/// Replicas failing at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FailureAt {
    /// When, ns.
    pub time_ns: u64,
    /// How many ready replicas fail (the first ready ones).
    pub replicas: u32,
    /// How long until they serve again, ns.
    pub repair_ns: u64,
}

/// Replica failures (validated).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultConfig {
    /// Failures at given times.
    pub failures: Vec<FailureAt>,
    /// Mean time between failures of one replica, ns (random failures when set).
    pub mtbf_ns: Option<u64>,
    /// Repair time of a random failure, ns.
    pub repair_ns: u64,
    /// What happens to the in-flight requests.
    pub on_failure: OnFailure,
}

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    /// Starting (cold start): paid for, not serving.
    Provisioning,
    /// Serving: in the router.
    Ready,
    /// Out of the router, finishing its requests.
    Draining,
    /// Failed, waiting for repair: paid for, not serving.
    Down,
    /// Gone: not paid for.
    Released,
}

/// One replica slot.
#[derive(Debug)]
pub(super) struct Slot {
    pub replica: Replica,
    pub state: SlotState,
    /// Sequence number of its pending iteration event (stale events carry another).
    pub pending_seq: u64,
}

/// The fleet's replicas and controllers.
#[derive(Debug)]
pub(super) struct Fleet {
    pub slots: Vec<Slot>,
    /// Ready slots, ascending: the router's choices.
    pub active: Vec<usize>,
    /// Most KV blocks any replica held, replicas since replaced included.
    pub peak_blocks: u64,
    cfg: SchedulerConfig,
    billed: u32,
    ready: u32,
    last_ns: u64,
    last_scale_ns: u64,
    /// Arrivals per decision interval, newest last.
    arrivals: VecDeque<u64>,
    arrivals_now: u64,
    /// The run's TTFT histogram at the last decision (the TTFT policy looks at what came
    /// after).
    ttft_snapshot: LatencyHistogram,
    rng: ChaCha8Rng,
}

impl Fleet {
    /// A fleet of `n` ready replicas at time 0.
    pub fn new(cfg: &SchedulerConfig, n: u32, rng: ChaCha8Rng) -> Self {
        let slots = (0..n.max(1))
            .map(|_| Slot {
                replica: Replica::new(cfg.clone()),
                state: SlotState::Ready,
                pending_seq: u64::MAX,
            })
            .collect::<Vec<_>>();
        Fleet {
            active: (0..slots.len()).collect(),
            peak_blocks: 0,
            billed: slots.len() as u32,
            ready: slots.len() as u32,
            slots,
            cfg: cfg.clone(),
            last_ns: 0,
            last_scale_ns: 0,
            arrivals: VecDeque::new(),
            arrivals_now: 0,
            ttft_snapshot: LatencyHistogram::new(),
            rng,
        }
    }

    /// Books replica time up to `now` (call before any state change).
    pub fn account(&mut self, now: u64, metrics: &mut Metrics) {
        if now > self.last_ns {
            let dt = (now - self.last_ns) as u128;
            metrics.billed_replica_ns += self.billed as u128 * dt;
            metrics
                .periods
                .replicas(self.last_ns, now, self.billed, self.ready);
            self.last_ns = now;
        }
    }

    fn set_state(&mut self, i: usize, to: SlotState) {
        let from = self.slots[i].state;
        let billed = |s: SlotState| s != SlotState::Released;
        if billed(from) && !billed(to) {
            self.billed -= 1;
        }
        if !billed(from) && billed(to) {
            self.billed += 1;
        }
        if from == SlotState::Ready && to != SlotState::Ready {
            self.ready -= 1;
            self.active.retain(|&x| x != i);
        }
        if from != SlotState::Ready && to == SlotState::Ready {
            self.ready += 1;
            let pos = self.active.partition_point(|&x| x < i);
            self.active.insert(pos, i);
        }
        self.slots[i].state = to;
    }

    /// Replicas paid for that will serve: provisioning or ready.
    fn provisioned(&self) -> u32 {
        self.slots
            .iter()
            .filter(|s| matches!(s.state, SlotState::Provisioning | SlotState::Ready))
            .count() as u32
    }

    /// Starts a new replica (reusing a released slot); returns its index.
    fn provision(&mut self) -> usize {
        let i = match self
            .slots
            .iter()
            .position(|s| s.state == SlotState::Released)
        {
            Some(i) => {
                self.peak_blocks = self.peak_blocks.max(self.slots[i].replica.peak_blocks);
                // The slot's prefix-cache tallies outlive the replica it held.
                let tallies = self.slots[i].replica.content_tokens;
                self.slots[i].replica = Replica::new(self.cfg.clone());
                self.slots[i].replica.content_tokens = tallies;
                self.slots[i].pending_seq = u64::MAX;
                i
            }
            None => {
                self.slots.push(Slot {
                    replica: Replica::new(self.cfg.clone()),
                    state: SlotState::Released,
                    pending_seq: u64::MAX,
                });
                self.slots.len() - 1
            }
        };
        self.set_state(i, SlotState::Provisioning);
        i
    }

    /// Marks slot `i` ready (a cold start or a repair finished).
    pub fn make_ready(&mut self, i: usize) {
        if matches!(
            self.slots[i].state,
            SlotState::Provisioning | SlotState::Down
        ) {
            self.set_state(i, SlotState::Ready);
        }
    }

    /// Releases a draining slot whose requests are all done.
    pub fn release_if_drained(&mut self, i: usize) {
        let s = &self.slots[i];
        if s.state == SlotState::Draining && s.replica.outstanding() == 0 && !s.replica.is_busy() {
            self.set_state(i, SlotState::Released);
        }
    }

    /// Counts an arrival for the utilisation signal.
    #[inline]
    pub fn note_arrival(&mut self) {
        self.arrivals_now += 1;
    }

    /// One autoscaler decision at `now`: returns the slots it started (ready after the cold
    /// start) and drains replicas it no longer wants.
    pub fn autoscale(&mut self, a: &AutoscaleConfig, now: u64, metrics: &Metrics) -> Vec<usize> {
        let slots_kept = (a.window_ns / a.interval_ns.max(1)).max(1) as usize;
        self.arrivals
            .push_back(std::mem::take(&mut self.arrivals_now));
        while self.arrivals.len() > slots_kept {
            self.arrivals.pop_front();
        }
        let ready = self.ready;
        let desired = match a.policy {
            AutoscalePolicy::Utilization {
                target,
                capacity_rate_per_replica,
            } => {
                let span_s = self.arrivals.len() as f64 * a.interval_ns as f64 / 1e9;
                let rate = self.arrivals.iter().sum::<u64>() as f64 / span_s.max(1e-9);
                (rate / (capacity_rate_per_replica * target))
                    .ceil()
                    .max(0.0) as u32
            }
            AutoscalePolicy::Queue { high, low } => {
                let waiting: u64 = self
                    .active
                    .iter()
                    .map(|&i| self.slots[i].replica.waiting_len())
                    .sum();
                let per = waiting as f64 / ready.max(1) as f64;
                if per > high {
                    self.provisioned() + a.step
                } else if per < low {
                    ready.saturating_sub(a.step)
                } else {
                    self.provisioned()
                }
            }
            AutoscalePolicy::Ttft { high_ns, low_ns } => {
                let recent = metrics.ttft.since(&self.ttft_snapshot);
                self.ttft_snapshot = metrics.ttft.clone();
                let n = recent.count();
                let p90 = recent.percentile_ns(90.0);
                if n > 0 && p90 > high_ns as f64 {
                    self.provisioned() + a.step
                } else if n == 0 || p90 < low_ns as f64 {
                    ready.saturating_sub(a.step)
                } else {
                    self.provisioned()
                }
            }
        }
        .clamp(a.min_replicas, a.max_replicas);
        let mut started = Vec::new();
        let provisioned = self.provisioned();
        if desired > provisioned {
            for _ in 0..(desired - provisioned).min(a.step) {
                started.push(self.provision());
            }
            self.last_scale_ns = now;
        } else if desired < ready
            && now.saturating_sub(self.last_scale_ns) >= a.scale_down_cooldown_ns
        {
            for _ in 0..(ready - desired).min(a.step) {
                // Drain the ready replica with the least work (ties: the highest index).
                let Some(&i) = self
                    .active
                    .iter()
                    .rev()
                    .min_by_key(|&&i| self.slots[i].replica.outstanding())
                else {
                    break;
                };
                self.set_state(i, SlotState::Draining);
                self.release_if_drained(i);
            }
            self.last_scale_ns = now;
        }
        started
    }

    /// Takes ready slot `i` down (a failure).
    pub fn fail(&mut self, i: usize) {
        if self.slots[i].state == SlotState::Ready || self.slots[i].state == SlotState::Draining {
            self.set_state(i, SlotState::Down);
            self.peak_blocks = self.peak_blocks.max(self.slots[i].replica.peak_blocks);
            // The slot's prefix-cache tallies outlive the replica it held.
            let tallies = self.slots[i].replica.content_tokens;
            self.slots[i].replica = Replica::new(self.cfg.clone());
            self.slots[i].replica.content_tokens = tallies;
            self.slots[i].pending_seq = u64::MAX;
        }
    }

    /// The first `n` ready slots (a scheduled failure's victims).
    pub fn first_ready(&self, n: u32) -> Vec<usize> {
        self.active.iter().copied().take(n as usize).collect()
    }

    /// A random time to the next failure of one replica, ns, given its mean.
    pub fn time_to_failure(&mut self, mtbf_ns: u64) -> u64 {
        let x: f64 = self.rng.sample(Exp1);
        // Beyond the clock is never within a run: the clock's edge.
        crate::clock::ns_f64_to_ns((x * mtbf_ns as f64).floor()).unwrap_or(crate::clock::MAX_NS)
    }
}
