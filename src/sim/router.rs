//! Routers: which replica a new request goes to.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fleet::Slot;

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
}

impl FromStr for RouterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(RouterKind::RoundRobin),
            "least-outstanding" | "least-outstanding-requests" => Ok(RouterKind::LeastOutstanding),
            "least-kv" | "least-kv-load" => Ok(RouterKind::LeastKv),
            "power-of-two" | "power-of-two-choices" => Ok(RouterKind::PowerOfTwo),
            _ => Err(format!(
                "unknown router '{s}' (round-robin, least-outstanding, least-kv, power-of-two)"
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
        })
    }
}

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

    /// Picks a replica for the next request among the slots in `active` (ascending, not
    /// empty); returns its slot index.
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
            RouterKind::LeastOutstanding => {
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
