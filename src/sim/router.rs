//! Routers: which replica a new request goes to.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fleet::Slot;
use super::request::Req;
use crate::workload::NO_SESSION;

/// A routing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    /// Replicas in turn.
    RoundRobin,
    /// The replica with the fewest queued plus running requests (ties: lowest index).
    #[default]
    LeastOutstanding,
    /// The replica with the lowest KV load (blocks in use plus blocks its queue will need).
    LeastKv,
    /// Two replicas drawn at random; the one with fewer outstanding requests.
    PowerOfTwo,
    /// llm-d's precise prefix-cache scheduling profile (see [`LLMD_PREFIX_CACHE_WEIGHT`]):
    /// each replica scores 2 x its longest cached prefix of the request (whole block
    /// identities, min-max normalized over the replicas holding its first block; 0 for the
    /// others) + 1 x its free KV share (1 - blocks in use by requests over capacity) + 1 x
    /// its waiting queue, min-max normalized (shortest 1, longest 0, all equal 1); the
    /// highest total wins, ties drawn at random (seeded). Requests without identities score
    /// on KV and queue alone. Load balance wins over weak affinity, by SGLang's cache-aware
    /// rules: a request whose best cached prefix covers at most
    /// [`SGLANG_CACHE_THRESHOLD`] of its prompt scores on KV and queue alone, and while the
    /// replicas are imbalanced ([`SGLANG_BALANCE_ABS_THRESHOLD`]) every request goes to the
    /// fewest outstanding requests (ties: lowest index). Without them a prefix every
    /// request shares (one system-prompt block) outscores an idle replica forever, and a
    /// replica the autoscaler adds gets no traffic.
    PrefixAware,
    /// A session's turns go to the replica that took its first, unless that replica is
    /// overloaded against the least loaded one by SGLang's balance rule (see
    /// [`SGLANG_BALANCE_ABS_THRESHOLD`]); a first turn, a moved session and a request
    /// without a session go to the fewest outstanding requests (ties: lowest index).
    SessionAffinity,
}

impl FromStr for RouterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(RouterKind::RoundRobin),
            "least-outstanding" | "least-outstanding-requests" => Ok(RouterKind::LeastOutstanding),
            "least-kv" | "least-kv-load" => Ok(RouterKind::LeastKv),
            "power-of-two" | "power-of-two-choices" => Ok(RouterKind::PowerOfTwo),
            "prefix-aware" => Ok(RouterKind::PrefixAware),
            "session-affinity" => Ok(RouterKind::SessionAffinity),
            _ => Err(format!(
                "unknown router '{s}' (round-robin, least-outstanding, least-kv, power-of-two, prefix-aware, session-affinity)"
            )),
        }
    }
}

impl fmt::Display for RouterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::LeastOutstanding => "least-outstanding",
            RouterKind::LeastKv => "least-kv",
            RouterKind::PowerOfTwo => "power-of-two",
            RouterKind::PrefixAware => "prefix-aware",
            RouterKind::SessionAffinity => "session-affinity",
        })
    }
}

/// `prefix-aware`: weight of llm-d's `precise-prefix-cache-scorer` in the default scheduling
/// profile of its precise prefix-cache-aware routing guide (llm-d/llm-d
/// guides/precise-prefix-cache-aware/scheduler/precise-prefix-cache-aware.values.yaml at
/// 019a3f3f; the same in llm-d/llm-d-inference-scheduler
/// deploy/config/epp-precise-prefix-cache-config.yaml at 17d999e0).
pub const LLMD_PREFIX_CACHE_WEIGHT: f64 = 2.0;
/// `prefix-aware`: weight of the `kv-cache-utilization-scorer` (score: 1 - the engine's KV
/// cache usage) in the same profile.
pub const LLMD_KV_UTILIZATION_WEIGHT: f64 = 1.0;
/// `prefix-aware`: weight of the `queue-scorer` (score: waiting requests, min-max
/// normalized) in the same profile.
pub const LLMD_QUEUE_WEIGHT: f64 = 1.0;

/// `session-affinity`: a session leaves its replica only when that replica has more than
/// this many outstanding requests above the least loaded one (and
/// [`SGLANG_BALANCE_REL_THRESHOLD`] times as many): SGLang's router (sgl-model-gateway)
/// takes the least loaded worker when `max - min > balance_abs_threshold` and `max > min x
/// balance_rel_threshold`, with CLI defaults 64 and 1.5 (sgl-project/sglang
/// sgl-model-gateway/src/policies/cache_aware.rs and src/main.rs at 053b63ff).
/// `prefix-aware`: while the replicas' most and fewest outstanding requests differ so
/// (SGLang's "imbalanced" system), every request goes to the fewest.
pub const SGLANG_BALANCE_ABS_THRESHOLD: u64 = 64;
/// `session-affinity`: the relative balance threshold, dimensionless (see
/// [`SGLANG_BALANCE_ABS_THRESHOLD`]).
pub const SGLANG_BALANCE_REL_THRESHOLD: f64 = 1.5;
/// `prefix-aware`: the share of a request's prompt its best cached prefix must cover,
/// dimensionless, for the prefix to count: SGLang's cache-aware router follows the best
/// prefix match only when `matched / request length > cache_threshold`, and otherwise
/// balances load; CLI default 0.3 (sgl-project/sglang sgl-model-gateway/src/main.rs at
/// 01f6c92a, `cache_threshold`; the rule in src/policies/cache_aware.rs at 053b63ff).
pub const SGLANG_CACHE_THRESHOLD: f64 = 0.3;

/// A router's state.
#[derive(Debug)]
pub struct Router {
    kind: RouterKind,
    next: usize,
    rng: ChaCha8Rng,
    /// `session-affinity`: each live session's replica (slot index).
    sessions: HashMap<u64, usize>,
    /// `prefix-aware`: each candidate's matched prefix blocks, reused between arrivals.
    matched: Vec<u64>,
    /// `prefix-aware`: each candidate's total score, reused between arrivals.
    totals: Vec<f64>,
}

impl Router {
    /// A router of `kind`, its random choices seeded by `rng`.
    pub fn new(kind: RouterKind, rng: ChaCha8Rng) -> Self {
        Router {
            kind,
            next: 0,
            rng,
            sessions: HashMap::new(),
            matched: Vec::new(),
            totals: Vec::new(),
        }
    }

    /// The routing policy.
    pub fn kind(&self) -> RouterKind {
        self.kind
    }

    /// Picks a replica for request `req` among the slots in `active` (ascending, not
    /// empty); returns its slot index. Only `prefix-aware` reads the request.
    pub fn pick_for(&mut self, slots: &[Slot], active: &[usize], req: &Req) -> usize {
        match self.kind {
            RouterKind::PrefixAware if active.len() > 1 => self.pick_llmd(slots, active, Some(req)),
            RouterKind::SessionAffinity => self.pick_session(slots, active, req),
            _ => self.pick(slots, active),
        }
    }

    /// `session-affinity` (see [`RouterKind::SessionAffinity`]); forgets a session at its
    /// last turn.
    fn pick_session(&mut self, slots: &[Slot], active: &[usize], req: &Req) -> usize {
        let least = self.pick(slots, active);
        if req.session == NO_SESSION {
            return least;
        }
        let load = |slot: usize| slots[slot].replica.outstanding();
        let (min, home) = (load(least), self.sessions.get(&req.session).copied());
        let chosen = match home {
            Some(h) if active.binary_search(&h).is_ok() => {
                let overloaded = load(h).saturating_sub(min) > SGLANG_BALANCE_ABS_THRESHOLD
                    && load(h) as f64 > min as f64 * SGLANG_BALANCE_REL_THRESHOLD;
                if overloaded {
                    least
                } else {
                    h
                }
            }
            _ => least,
        };
        if req.last_turn {
            self.sessions.remove(&req.session);
        } else {
            self.sessions.insert(req.session, chosen);
        }
        chosen
    }

    /// llm-d's precise prefix-cache profile (see [`RouterKind::PrefixAware`]): the scorers
    /// as llm-d-inference-scheduler and the gateway-api-inference-extension ship them
    /// (precise-prefix-cache-scorer: the kv-cache manager's longest consecutive block match
    /// from block 0, pods without block 0 absent and scored 0, the rest min-max normalized,
    /// all equal 1; kv-cache-utilization-scorer: 1 - usage; queue-scorer: min-max of the
    /// waiting queue, all equal 1), summed with their weights, and the max-score picker's
    /// random tie break. servesim reads each replica's state at the instant of routing
    /// (llm-d reads scraped metrics and KV events, a few milliseconds old).
    /// Before scoring, SGLang's two guards (see [`RouterKind::PrefixAware`]): an imbalanced
    /// fleet routes to the fewest outstanding requests, and a best match of at most
    /// [`SGLANG_CACHE_THRESHOLD`] of the prompt drops the prefix scorer.
    fn pick_llmd(&mut self, slots: &[Slot], active: &[usize], req: Option<&Req>) -> usize {
        let n = active.len();
        let r = |i: usize| &slots[active[i]].replica;
        let (mut least, mut min, mut max) = (0, u64::MAX, 0);
        for i in 0..n {
            let o = r(i).outstanding();
            if o < min {
                (least, min) = (i, o);
            }
            max = max.max(o);
        }
        if max.saturating_sub(min) > SGLANG_BALANCE_ABS_THRESHOLD
            && max as f64 > min as f64 * SGLANG_BALANCE_REL_THRESHOLD
        {
            return active[least];
        }
        // One pass gathers each replica's match and the ranges, into buffers the router
        // keeps (no allocation per arrival: this runs once per request).
        let matched = &mut self.matched;
        matched.clear();
        let (mut m_lo, mut m_hi) = (u64::MAX, 0);
        let (mut q_lo, mut q_hi) = (u64::MAX, 0);
        for i in 0..n {
            let m = req.map_or(0, |q| r(i).matched_prefix_blocks(q));
            if m > 0 {
                (m_lo, m_hi) = (m_lo.min(m), m_hi.max(m));
            }
            let w = r(i).waiting_len();
            (q_lo, q_hi) = (q_lo.min(w), q_hi.max(w));
            matched.push(m);
        }
        // The best match as a share of the prompt: at most the threshold, the prefix scorer
        // is off (every replica 0), as SGLang's router then balances load.
        let prompt = req.map_or(0, |q| q.input);
        let block = req.map_or(0, |q| q.block_id_tokens);
        let weak = prompt == 0
            || (m_hi * u64::from(block)) as f64 <= SGLANG_CACHE_THRESHOLD * f64::from(prompt);
        let totals = &mut self.totals;
        totals.clear();
        let mut best = f64::NEG_INFINITY;
        for (i, &m) in matched.iter().enumerate() {
            let prefix = match m {
                _ if weak || m == 0 => 0.0,
                _ if m_hi > m_lo => (m - m_lo) as f64 / (m_hi - m_lo) as f64,
                _ => 1.0,
            };
            let queue = match r(i).waiting_len() {
                w if q_hi > q_lo => (q_hi - w) as f64 / (q_hi - q_lo) as f64,
                _ => 1.0,
            };
            let total = LLMD_PREFIX_CACHE_WEIGHT * prefix
                + LLMD_KV_UTILIZATION_WEIGHT * (1.0 - r(i).kv_usage())
                + LLMD_QUEUE_WEIGHT * queue;
            best = best.max(total);
            totals.push(total);
        }
        // The max-score picker's random tie break: the j-th of the tied, j drawn only when
        // several tie.
        let tied = totals.iter().filter(|&&t| t == best).count();
        let j = match tied {
            0 | 1 => 0,
            t => self.rng.gen_range(0..t),
        };
        let k = (0..n).filter(|&i| totals[i] == best).nth(j).unwrap_or(0);
        active[k]
    }

    /// Picks a replica for the next request among the slots in `active` (ascending, not
    /// empty); returns its slot index (`prefix-aware` without a request: its KV and queue
    /// scores alone).
    fn pick(&mut self, slots: &[Slot], active: &[usize]) -> usize {
        let n = active.len();
        if n <= 1 {
            return active.first().copied().unwrap_or(0);
        }
        let r = |i: usize| &slots[active[i]].replica;
        let k = match self.kind {
            RouterKind::RoundRobin => {
                let k = self.next % n;
                self.next = (k + 1) % n;
                k
            }
            RouterKind::LeastOutstanding | RouterKind::SessionAffinity => {
                (0..n).min_by_key(|&i| (r(i).outstanding(), i)).unwrap_or(0)
            }
            RouterKind::PrefixAware => return self.pick_llmd(slots, active, None),
            RouterKind::LeastKv => (0..n)
                .min_by(|&a, &b| {
                    r(a).kv_load()
                        .total_cmp(&r(b).kv_load())
                        .then(r(a).outstanding().cmp(&r(b).outstanding()))
                        .then(a.cmp(&b))
                })
                .unwrap_or(0),
            RouterKind::PowerOfTwo => {
                let a = self.rng.gen_range(0..n);
                let mut b = self.rng.gen_range(0..n - 1);
                if b >= a {
                    b += 1;
                }
                if (r(b).outstanding(), b) < (r(a).outstanding(), a) {
                    b
                } else {
                    a
                }
            }
        };
        active[k]
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::sim::fleet::SlotState;
    use crate::sim::replica::Replica;
    use crate::sim::request::{Req, Slab};
    use crate::sim::SchedulerConfig;
    use crate::workload::{RequestSpec, NO_PREFIX_GROUP};

    /// Ready replicas, replica `i` holding `prompts[i]` queued requests of the given prompt
    /// lengths.
    fn replicas(prompts: &[&[u32]]) -> Vec<Slot> {
        let cfg = SchedulerConfig {
            max_num_seqs: 64,
            max_num_batched_tokens: 2048,
            chunked_prefill: true,
            prefix_caching: false,
            block_size: 16,
            kv_blocks: 1_000,
            max_model_len: 1 << 20,
            static_batching: false,
            reserve_output_kv: false,
            spec_kv_slots: 0,
            offload: None,
            spec_max_batch_seqs: 0,
            plans_ahead: false,
        };
        let mut slab = Slab::default();
        prompts
            .iter()
            .map(|lens| {
                let mut replica = Replica::new(cfg.clone());
                for &input_tokens in lens.iter() {
                    let spec = RequestSpec {
                        arrival_ns: 0,
                        input_tokens,
                        output_tokens: 1,
                        prefix_group: NO_PREFIX_GROUP,
                        prefix_tokens: 0,
                        blocks: None,
                        block_id_tokens: 0,
                        session: crate::workload::NO_SESSION,
                        last_turn: false,
                    };
                    let id = slab.insert(Req::waiting(&spec, 0));
                    replica.enqueue(&mut slab, id, 0);
                }
                Slot {
                    replica,
                    state: SlotState::Ready,
                    pending_seq: u64::MAX,
                }
            })
            .collect()
    }

    fn router(kind: RouterKind) -> Router {
        Router::new(kind, ChaCha8Rng::seed_from_u64(7))
    }

    #[test]
    fn round_robin_takes_the_ready_replicas_in_turn() {
        let slots = replicas(&[&[], &[], &[], &[]]);
        let mut r = router(RouterKind::RoundRobin);
        let picks: Vec<usize> = (0..5).map(|_| r.pick(&slots, &[0, 2, 3])).collect();
        assert_eq!(picks, vec![0, 2, 3, 0, 2]);
    }

    #[test]
    fn least_outstanding_takes_the_fewest_requests_and_the_lowest_index_on_a_tie() {
        let slots = replicas(&[&[9, 9, 9], &[9], &[9], &[9, 9]]);
        let mut r = router(RouterKind::LeastOutstanding);
        assert_eq!(r.pick(&slots, &[0, 1, 2, 3]), 1);
        assert_eq!(r.pick(&slots, &[0, 2, 3]), 2);
        assert_eq!(r.pick(&slots, &[0, 3]), 3);
    }

    #[test]
    fn least_kv_takes_the_lowest_kv_load_then_the_fewest_requests() {
        // Replica 0: one 800-token prompt (50 blocks); 1: two 16-token ones (2 blocks);
        // 2: one 32-token one (2 blocks, fewer requests); 3: one 1600-token one.
        let slots = replicas(&[&[800], &[16, 16], &[32], &[1600]]);
        let mut r = router(RouterKind::LeastKv);
        assert_eq!(r.pick(&slots, &[0, 1, 2, 3]), 2);
        assert_eq!(r.pick(&slots, &[0, 1, 3]), 1);
        assert_eq!(r.pick(&slots, &[0, 3]), 0);
    }

    #[test]
    fn power_of_two_takes_the_less_loaded_of_two_random_replicas() {
        let slots = replicas(&[&[], &[9; 3], &[9; 3], &[9; 3]]);
        let mut r = router(RouterKind::PowerOfTwo);
        let mut counts = [0u32; 4];
        for _ in 0..6_000 {
            counts[r.pick(&slots, &[0, 1, 2, 3])] += 1;
        }
        // Of the 6 pairs, 3 hold the idle replica 0; among equals the lower index wins, so
        // replica 1 wins {1, 2} and {1, 3}, replica 2 wins {2, 3}, replica 3 never.
        assert_eq!(counts[3], 0, "{counts:?}");
        for (got, share) in counts.iter().zip([0.5, 2.0 / 6.0, 1.0 / 6.0, 0.0]) {
            assert!((*got as f64 / 6_000.0 - share).abs() < 0.03, "{counts:?}");
        }
    }

    #[test]
    fn prefix_aware_without_cached_prefixes_scores_queue_and_kv() {
        // No identities: the prefix scores 0 everywhere; queued requests hold no KV yet, so
        // KV scores tie; the shortest waiting queues (replicas 1 and 3) score 1, and the
        // seeded draw splits the tie between them.
        let slots = replicas(&[&[16, 16], &[16], &[16, 16, 16], &[800]]);
        let mut r = router(RouterKind::PrefixAware);
        let mut seen = [0; 4];
        for _ in 0..400 {
            seen[r.pick(&slots, &[0, 1, 2, 3])] += 1;
        }
        assert_eq!((seen[0], seen[2]), (0, 0), "{seen:?}");
        assert!(seen[1] > 150 && seen[3] > 150, "{seen:?}");
        assert_eq!(r.pick(&slots, &[0, 2]), 0);
    }

    #[test]
    fn one_ready_replica_is_every_routers_choice() {
        let slots = replicas(&[&[9; 5], &[]]);
        for kind in [
            RouterKind::RoundRobin,
            RouterKind::LeastOutstanding,
            RouterKind::LeastKv,
            RouterKind::PowerOfTwo,
            RouterKind::PrefixAware,
        ] {
            assert_eq!(router(kind).pick(&slots, &[0]), 0, "{kind}");
        }
    }
}
