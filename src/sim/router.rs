//! Routers: which replica a new request goes to.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fleet::Slot;
use super::request::Req;

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
    /// The replica's longest cached prefix of the request (from the block identities its
    /// cache holds, as llm-d's precise prefix-cache scorer reads them) weighed against its
    /// load in one unit: the fewest prompt tokens to prefill before the request's first
    /// token (its queue's plus its own uncached ones); ties go to fewer outstanding requests.
    /// Requests without identities go by queued prompt tokens alone.
    PrefixAware,
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
            _ => Err(format!(
                "unknown router '{s}' (round-robin, least-outstanding, least-kv, power-of-two, prefix-aware)"
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
        })
    }
}

/// `prefix-aware`: weight of a request's uncached prompt tokens against queued ones. A miss
/// costs its prefill now and, in a conversation, leaves its next turns on a replica without
/// the history, so it counts more than a token already queued (servesim's choice, set so
/// that four replicas keep a multi-turn trace's hit rate within 2 pp of one replica's:
/// tests/kv_reuse.rs).
pub const MISS_WEIGHT: u64 = 4;

/// A router's state.
#[derive(Debug)]
pub struct Router {
    kind: RouterKind,
    next: usize,
    rng: ChaCha8Rng,
}

impl Router {
    /// A router of `kind`, its random choices seeded by `rng`.
    pub fn new(kind: RouterKind, rng: ChaCha8Rng) -> Self {
        Router { kind, next: 0, rng }
    }

    /// The routing policy.
    pub fn kind(&self) -> RouterKind {
        self.kind
    }

    /// Picks a replica for request `req` among the slots in `active` (ascending, not
    /// empty); returns its slot index. Only `prefix-aware` reads the request.
    pub fn pick_for(&mut self, slots: &[Slot], active: &[usize], req: &Req) -> usize {
        if self.kind != RouterKind::PrefixAware || active.len() <= 1 {
            return self.pick(slots, active);
        }
        let r = |i: usize| &slots[active[i]].replica;
        // Prompt tokens the replica must prefill before this request's first token: its
        // queue's and this request's uncached part (ties: fewer outstanding, lower index).
        let cost = |i: usize| {
            let own = (req.input as u64).saturating_sub(r(i).cached_prefix_tokens(req));
            (
                r(i).pending_prefill_tokens() + MISS_WEIGHT * own,
                r(i).outstanding(),
                i,
            )
        };
        let best = (0..active.len()).min_by_key(|&i| cost(i)).unwrap_or(0);
        active[best]
    }

    /// Picks a replica for the next request among the slots in `active` (ascending, not
    /// empty); returns its slot index (`prefix-aware` without a request: least outstanding).
    pub fn pick(&mut self, slots: &[Slot], active: &[usize]) -> usize {
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
            RouterKind::LeastOutstanding | RouterKind::PrefixAware => {
                (0..n).min_by_key(|&i| (r(i).outstanding(), i)).unwrap_or(0)
            }
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
                    };
                    let id = slab.insert(Req::waiting(&spec, 0));
                    replica.enqueue(&mut slab, id);
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
    fn one_ready_replica_is_every_routers_choice() {
        let slots = replicas(&[&[9; 5], &[]]);
        for kind in [
            RouterKind::RoundRobin,
            RouterKind::LeastOutstanding,
            RouterKind::LeastKv,
            RouterKind::PowerOfTwo,
        ] {
            assert_eq!(router(kind).pick(&slots, &[0]), 0, "{kind}");
        }
    }
}
