//! Generated sessions (`[workload.sessions]`): multi-turn conversations or agent loops for
//! when no trace exists. Sessions start by `[workload.arrival]` (its rate is sessions per
//! second); each turn resends the whole conversation so far (system prompt, every earlier
//! message and answer) plus its new tokens, and names its prompt's whole blocks by
//! identity, so that the prefix cache reuses what an earlier turn computed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::arrival::ArrivalProcess;
use super::lengths::LengthSampler;
use super::{at_least_one, BlockIds, LengthConfig};
use crate::error::{Error, Result};

/// Tokens per block identity of generated sessions unless set: 64, the block size of llm-d's
/// precise prefix-cache scorer in its guide (llm-d/llm-d
/// guides/precise-prefix-cache-aware, `tokenProcessorConfig.blockSize`), 4 of vLLM's
/// 16-token KV blocks.
pub const SESSION_HASH_BLOCK_TOKENS: u32 = 64;

/// A session's marker on requests that belong to none.
pub const NO_SESSION: u64 = u64::MAX;

/// `[workload.sessions]`: how generated sessions look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// Turns per session, a count (`[workload.input]`'s kinds; `tokens` reads as turns).
    pub turns: LengthConfig,
    /// Think or tool time before each later turn, ms (the same kinds; `tokens` reads as
    /// ms), counted from the previous turn's arrival: the generator does not see answers.
    pub think_time_ms: LengthConfig,
    /// New prompt tokens per turn (the user's message, or a tool's result), tokens.
    pub new_tokens: LengthConfig,
    /// Output tokens per turn, tokens; the next turn resends them.
    pub output_tokens: LengthConfig,
    /// Tokens of the system prompt every session starts with, tokens (0: none).
    #[serde(default)]
    pub system_prompt_tokens: u32,
    /// Distinct system prompts (of that length); each session draws one uniformly.
    #[serde(default = "one")]
    pub system_prompts: u32,
    /// Start no more sessions after this many (the stream ends when they have all ended).
    #[serde(default)]
    pub num_sessions: Option<u64>,
    /// Prompt tokens per block identity (default [`SESSION_HASH_BLOCK_TOKENS`]); a multiple
    /// of `scheduler.block_size`.
    #[serde(default)]
    pub hash_block_tokens: Option<u32>,
}

fn one() -> u32 {
    1
}

impl SessionsConfig {
    /// Tokens per block identity.
    pub fn block_tokens(&self) -> u32 {
        self.hash_block_tokens.unwrap_or(SESSION_HASH_BLOCK_TOKENS)
    }

    /// Checks every value; errors name `workload.sessions.KEY`.
    pub fn validate(&self, origin: &str) -> Result<()> {
        const K: &str = "workload.sessions";
        for (key, l) in [
            ("turns", &self.turns),
            ("think_time_ms", &self.think_time_ms),
            ("new_tokens", &self.new_tokens),
            ("output_tokens", &self.output_tokens),
        ] {
            l.validate(origin, &format!("{K}.{key}"))?;
            if matches!(
                l,
                LengthConfig::Empirical { .. } | LengthConfig::List { .. }
            ) {
                return Err(Error::config(
                    origin,
                    format!("{K}.{key}"),
                    "takes fixed, uniform, normal or lognormal",
                ));
            }
        }
        at_least_one(
            origin,
            &format!("{K}.system_prompts"),
            self.system_prompts as u64,
        )?;
        if let Some(n) = self.num_sessions {
            at_least_one(origin, &format!("{K}.num_sessions"), n)?;
        }
        if let Some(t) = self.hash_block_tokens {
            at_least_one(origin, &format!("{K}.hash_block_tokens"), t as u64)?;
        }
        Ok(())
    }
}

/// A session between turns.
#[derive(Debug, Clone)]
struct Live {
    /// Its system prompt.
    system: u32,
    /// Turns still to send, this one included.
    turns_left: u32,
    /// Tokens of the conversation before this turn's new tokens.
    context: u64,
}

/// The stream of requests of generated sessions, in arrival order.
#[derive(Debug, Clone)]
pub(crate) struct SessionSource {
    starts: ArrivalProcess,
    turns: LengthSampler,
    think_ms: LengthSampler,
    new_tokens: LengthSampler,
    output: LengthSampler,
    system_tokens: u32,
    systems: u32,
    block_tokens: u32,
    num_sessions: Option<u64>,
    started: u64,
    /// The next session's start, s (drawn ahead), once drawn.
    next_start_s: Option<f64>,
    /// Whether the start process has ended.
    starts_done: bool,
    /// Later turns by (arrival ns, session).
    pending: BinaryHeap<Reverse<(u64, u64)>>,
    live: HashMap<u64, Live>,
}

/// One turn: arrival ns, input and output tokens, block identities, session, last turn.
pub(crate) struct Turn {
    pub arrival_ns: u64,
    pub input: u32,
    pub output: u32,
    pub blocks: BlockIds,
    pub session: u64,
    pub last: bool,
}

impl SessionSource {
    /// The source of `cfg` (validated), sessions starting by `starts`.
    pub(crate) fn new(cfg: &SessionsConfig, starts: ArrivalProcess, origin: &str) -> Result<Self> {
        let s = |l: &LengthConfig, key: &str| {
            LengthSampler::from_config(l, origin, &format!("workload.sessions.{key}"))
        };
        Ok(SessionSource {
            starts,
            turns: s(&cfg.turns, "turns")?,
            think_ms: s(&cfg.think_time_ms, "think_time_ms")?,
            new_tokens: s(&cfg.new_tokens, "new_tokens")?,
            output: s(&cfg.output_tokens, "output_tokens")?,
            system_tokens: cfg.system_prompt_tokens,
            systems: cfg.system_prompts.max(1),
            block_tokens: cfg.block_tokens().max(1),
            num_sessions: cfg.num_sessions,
            started: 0,
            next_start_s: None,
            starts_done: false,
            pending: BinaryHeap::new(),
            live: HashMap::new(),
        })
    }

    /// Tokens per block identity.
    pub(crate) fn block_tokens(&self) -> u32 {
        self.block_tokens
    }

    /// Mean prompt and output tokens per request, and mean turns per session.
    pub(crate) fn means(&self) -> (f64, f64, f64) {
        let turns = self.turns.mean();
        let (new, out) = (self.new_tokens.mean(), self.output.mean());
        // Turn k resends k new messages and k - 1 answers: averaged over k = 1..T, (T + 1) / 2
        // new ones and (T - 1) / 2 answers (T at its mean).
        let input =
            self.system_tokens as f64 + new * (turns + 1.0) / 2.0 + out * (turns - 1.0) / 2.0;
        (input, out, turns)
    }

    /// The next turn in arrival order, its lengths drawn from `rng`, session starts from
    /// `arrival_rng`; `None` when no session is left. A start past the clock's range ends
    /// the starts (`overflow_s` then holds its time, s).
    pub(crate) fn next(
        &mut self,
        arrival_rng: &mut ChaCha8Rng,
        rng: &mut ChaCha8Rng,
        overflow_s: &mut Option<f64>,
    ) -> Option<Turn> {
        if self.next_start_s.is_none() && !self.starts_done {
            let more = self.num_sessions.is_none_or(|n| self.started < n);
            self.next_start_s = more.then(|| self.starts.next_s(arrival_rng)).flatten();
            self.starts_done = self.next_start_s.is_none();
        }
        let start_ns = match self.next_start_s.map(crate::clock::secs_to_ns) {
            Some(Ok(ns)) => Some(ns),
            Some(Err(_)) => {
                *overflow_s = self.next_start_s;
                self.next_start_s = None;
                self.starts_done = true;
                None
            }
            None => None,
        };
        let later = self.pending.peek().map(|Reverse((t, _))| *t);
        match (start_ns, later) {
            (Some(s), l) if l.is_none_or(|l| s < l) => {
                self.next_start_s = None;
                let id = self.started;
                self.started += 1;
                let live = Live {
                    system: rng.gen_range(0..self.systems),
                    turns_left: self.turns.sample(rng),
                    context: self.system_tokens as u64,
                };
                self.live.insert(id, live);
                Some(self.turn(id, s, rng))
            }
            (_, Some(_)) => {
                let Reverse((t, id)) = self.pending.pop()?;
                Some(self.turn(id, t, rng))
            }
            _ => None,
        }
    }

    /// Session `id`'s turn arriving at `at_ns`; schedules its next one.
    fn turn(&mut self, id: u64, at_ns: u64, rng: &mut ChaCha8Rng) -> Turn {
        let new = self.new_tokens.sample(rng) as u64;
        let output = self.output.sample(rng);
        let live = self.live.get_mut(&id).expect("a live session");
        let input = (live.context + new).min(u32::MAX as u64) as u32;
        let blocks = identities(
            id,
            live.system,
            self.system_tokens,
            input,
            self.block_tokens,
        );
        live.context += new + output as u64;
        live.turns_left = live.turns_left.saturating_sub(1);
        let last = live.turns_left == 0;
        if last {
            self.live.remove(&id);
        } else {
            let think_ns = self.think_ms.sample(rng) as u64 * 1_000_000;
            self.pending
                .push(Reverse((at_ns.saturating_add(think_ns), id)));
        }
        Turn {
            arrival_ns: at_ns,
            input,
            output,
            blocks,
            session: id,
            last,
        }
    }
}

/// Identity bit of a system prompt's blocks (a session's blocks leave it clear).
const SYSTEM_BIT: u64 = 1 << 63;
/// Bits of a block's index within its prompt (2^24 blocks: over 10^9 tokens at 64 a block).
const INDEX_BITS: u32 = 24;

/// The identities of the whole blocks of a prompt of `input` tokens of session `id`: a block
/// inside its system prompt `system` (of `system_tokens`) is that prompt's, shared by every
/// session using it; a later block is the session's own, the same in every turn that resends
/// it (turn k + 1's prompt begins with turn k's prompt and answer).
fn identities(id: u64, system: u32, system_tokens: u32, input: u32, block_tokens: u32) -> BlockIds {
    let whole = input / block_tokens;
    let in_system = system_tokens / block_tokens;
    (0..whole as u64)
        .map(|j| {
            if j < in_system as u64 {
                SYSTEM_BIT | ((system as u64) << INDEX_BITS) | j
            } else {
                ((id + 1) << INDEX_BITS) | j
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn fixed(tokens: u32) -> LengthConfig {
        LengthConfig::Fixed { tokens }
    }

    fn config() -> SessionsConfig {
        SessionsConfig {
            turns: fixed(3),
            think_time_ms: fixed(1000),
            new_tokens: fixed(100),
            output_tokens: fixed(50),
            system_prompt_tokens: 128,
            system_prompts: 1,
            num_sessions: Some(2),
            hash_block_tokens: Some(64),
        }
    }

    #[test]
    fn each_turn_resends_the_conversation_with_consistent_identities() {
        let cfg = config();
        let mut src = SessionSource::new(&cfg, ArrivalProcess::constant(10.0), "t").unwrap();
        let (mut a, mut r) = (ChaCha8Rng::seed_from_u64(1), ChaCha8Rng::seed_from_u64(2));
        let mut o = None;
        let turns: Vec<Turn> = std::iter::from_fn(|| src.next(&mut a, &mut r, &mut o)).collect();
        // Two sessions of three turns, 100 ms apart, turns 1 s apart.
        let seen: Vec<(u64, u64, u32, bool)> = turns
            .iter()
            .map(|t| (t.arrival_ns / 1_000_000, t.session, t.input, t.last))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, 0, 228, false),
                (100, 1, 228, false),
                (1000, 0, 378, false),
                (1100, 1, 378, false),
                (2000, 0, 528, true),
                (2100, 1, 528, true),
            ]
        );
        // The system prompt's two blocks are shared; a turn's whole blocks begin the next's.
        assert_eq!(turns[0].blocks[..2], turns[1].blocks[..2]);
        assert_ne!(turns[0].blocks[2], turns[1].blocks[2]);
        assert_eq!(turns[2].blocks[..3], turns[0].blocks[..]);
        assert_eq!(turns[4].blocks[..5], turns[2].blocks[..]);
        assert_eq!(turns[4].blocks.len(), 528 / 64);
    }
}
