//! In-flight requests: a slab with a free list, so memory is bounded by the requests in flight.

use crate::workload::RequestSpec;

/// Sentinel for "no request" in links and "no time" in timestamps.
pub const NONE: u32 = u32::MAX;
/// Sentinel for an unset timestamp.
pub const NO_TIME: u64 = u64::MAX;

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// In a replica's waiting queue.
    Waiting,
    /// Admitted, prompt being computed (possibly in chunks).
    Prefilling,
    /// Generating one token per iteration.
    Decoding,
    /// Disaggregated: prompt computed on a prefill replica, its KV waiting for or on the link
    /// to a decode replica.
    Transferring,
}

/// One in-flight request (about 100 bytes).
#[derive(Debug, Clone)]
pub struct Req {
    /// When latency starts counting (arrival, or send time under a client concurrency cap), ns.
    pub arrival_ns: u64,
    /// Time of the first output token, ns.
    pub first_token_ns: u64,
    /// Time of the latest output token, ns (kept only across preemption).
    pub last_token_ns: u64,
    /// First time the request was scheduled, ns.
    pub first_scheduled_ns: u64,
    /// When it last joined a replica's waiting queue (arrival or retry), ns; a preempted
    /// request keeps its time.
    pub queued_ns: u64,
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens to generate.
    pub output: u32,
    /// Output tokens generated so far (as of the last state change).
    pub generated: u32,
    /// Tokens of the current prefill (prompt plus already-generated tokens on recompute).
    pub prefill_len: u32,
    /// Prefill tokens already in the KV cache (computed or served from the prefix cache).
    pub computed: u32,
    /// KV blocks this request holds exclusively.
    pub own_blocks: u32,
    /// KV blocks it shares through the prefix cache.
    pub shared_blocks: u32,
    /// KV blocks reserved for its whole life at admission (0 when the policy is off).
    pub reserve: u32,
    /// Prefix group (`NONE` when none).
    pub prefix_group: u32,
    /// Tokens of the shared prefix.
    pub prefix_tokens: u32,
    /// Block identities of the prompt (content-addressed prefix caching), if any.
    pub blocks: Option<crate::workload::BlockIds>,
    /// Prompt tokens per identity of `blocks`.
    pub block_id_tokens: u32,
    /// Its session ([`crate::workload::NO_SESSION`] for none).
    pub session: u64,
    /// Whether it is its session's last turn.
    pub last_turn: bool,
    /// First decode iteration of the current decode run.
    pub dec_iter0: u64,
    /// KV length before `dec_iter0`.
    pub dec_kv0: u32,
    /// Tokens generated before `dec_iter0`.
    pub dec_gen0: u32,
    /// The replica's count of speculating iterations before `dec_iter0`.
    pub dec_spec0: u64,
    /// Tokens made in speculating iterations before the current decode run (across
    /// preemptions; reset when a failed replica's request is retried).
    pub spec_tokens: u32,
    /// Iteration in which the last token is produced.
    pub finish_iter: u64,
    /// Incremented when the request leaves the decode set, to invalidate heap entries.
    pub epoch: u32,
    /// Lifecycle phase.
    pub phase: Phase,
    /// Running-list links (admission order).
    pub prev: u32,
    /// Running-list links (admission order).
    pub next: u32,
}

impl Req {
    /// A new request, waiting, its latency counted from `start_ns` (lengths of at least one
    /// token; a shared prefix shorter than the prompt).
    pub fn waiting(spec: &RequestSpec, start_ns: u64) -> Req {
        let input = spec.input_tokens.max(1);
        let output = spec.output_tokens.max(1);
        Req {
            arrival_ns: start_ns,
            first_token_ns: NO_TIME,
            last_token_ns: NO_TIME,
            first_scheduled_ns: NO_TIME,
            queued_ns: start_ns,
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
            blocks: spec.blocks.clone(),
            block_id_tokens: spec.block_id_tokens,
            session: spec.session,
            last_turn: spec.last_turn,
            dec_iter0: 0,
            dec_kv0: 0,
            dec_gen0: 0,
            dec_spec0: 0,
            spec_tokens: 0,
            finish_iter: 0,
            epoch: 0,
            phase: Phase::Waiting,
            prev: NONE,
            next: NONE,
        }
    }
}

/// A slab of requests addressed by `u32` ids.
#[derive(Debug, Default)]
pub struct Slab {
    items: Vec<Req>,
    free: Vec<u32>,
}

impl Slab {
    /// Stores a request and returns its id.
    pub fn insert(&mut self, mut r: Req) -> u32 {
        if let Some(id) = self.free.pop() {
            // Keep the slot's epoch moving so stale heap entries never match a new request.
            r.epoch = self.items[id as usize].epoch;
            self.items[id as usize] = r;
            id
        } else {
            self.items.push(r);
            (self.items.len() - 1) as u32
        }
    }

    /// Requests stored (in flight).
    pub(crate) fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Frees an id for reuse.
    pub fn remove(&mut self, id: u32) {
        self.items[id as usize].epoch = self.items[id as usize].epoch.wrapping_add(1);
        self.free.push(id);
    }

    /// Shared access.
    #[inline]
    pub fn get(&self, id: u32) -> &Req {
        &self.items[id as usize]
    }

    /// Mutable access.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Req {
        &mut self.items[id as usize]
    }
}
