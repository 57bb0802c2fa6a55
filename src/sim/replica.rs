//! One serving replica: a vLLM-style continuous-batching scheduler over a paged KV cache.
//!
//! Per iteration, as vLLM's scheduler does it: running decodes first (one token each; a
//! decode that needs a block it cannot get preempts the most recently admitted request, which
//! must recompute), then partial prefills, then waiting requests FCFS while the token budget,
//! the sequence cap and the KV blocks last. The iteration that finishes a prompt produces its
//! first token.

mod check;
mod content;
mod fast_forward;
mod handoff;
mod offload;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

pub use fast_forward::Horizon;
use fast_forward::Run;
pub use offload::OffloadConfig;

use super::request::{Phase, Req, Slab, NONE, NO_TIME};
use super::{SchedulerConfig, SloPolicy};
use crate::clock::BeyondClock;
use crate::metrics::{Metrics, Outcome, RequestRecord, TimeSeries};
use crate::step_time::{BatchShape, DecodeStep, StepTime};

/// A cached shared prefix: its blocks, and the requests using it.
#[derive(Debug, Clone, Copy)]
struct PrefixEntry {
    blocks: u32,
    refs: u32,
    /// Of `refs`: requests in the decode set.
    decode_refs: u32,
    last_used_ns: u64,
}

/// A prefill chunk scheduled in the current iteration.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    id: u32,
    tokens: u32,
}

/// One replica's scheduler state.
#[derive(Debug)]
pub struct Replica {
    cfg: SchedulerConfig,
    /// Index of the next iteration to run.
    iter: u64,
    /// Whether an iteration is in flight.
    busy: bool,
    cur_start_ns: u64,
    cur_end_ns: u64,
    /// Planning ahead (`SchedulerConfig::plans_ahead`): the iteration that just ended started
    /// at this time, and the next one was planned then, without the requests queued since;
    /// `u64::MAX` when the next plan sees the whole queue (the replica was idle).
    planned_at_ns: u64,
    cur_decodes: u32,
    cur_chunks: Vec<Chunk>,
    waiting: VecDeque<u32>,
    run_head: u32,
    run_tail: u32,
    running: u32,
    prefilling: Vec<u32>,
    n_decoding: u32,
    /// Sum of KV lengths of decoding requests before the next iteration.
    sum_kv: u64,
    /// Shared-prefix tokens summed over decoding requests that use a cached prefix.
    dec_prefix_tokens: u64,
    /// Distinct shared-prefix tokens over the prefixes some decoding request uses.
    dec_prefix_distinct_tokens: u64,
    /// Decoding requests by block phase: those with phase p need a new block in iterations
    /// i with i mod block_size == p.
    phase_counts: Vec<u32>,
    finish_heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    used_blocks: u64,
    /// Blocks promised to admitted requests but not yet used (output reservation policy).
    reserved_blocks: u64,
    evictable_blocks: u64,
    prefix_cache: HashMap<u32, PrefixEntry>,
    /// Blocks cached by content (requests with block identities).
    content: content::ContentCache,
    /// Requests with block identities: prompt tokens admitted, and of them served from cache.
    pub content_tokens: ContentTokens,
    /// KV offloading: the CPU tier (`None` without `kv_offloading_size_gib`).
    cpu: Option<offload::CpuTier>,
    /// KV blocks loaded from the CPU tier by the admissions of the iteration being planned.
    pending_load_blocks: u64,
    /// Prompt tokens still to compute over waiting and prefilling requests.
    pending_prefill_tokens: u64,
    /// Requests that left this replica since the cluster last asked.
    departed: u64,
    /// Largest number of blocks in use.
    pub peak_blocks: u64,
    /// Disaggregated serving: hand-offs (prefill side) and incoming transfers (decode side).
    transfers: handoff::Transfers,
    /// The fast-forwarded run in flight, if any (see `fast_forward`).
    run: Option<Run>,
    /// Iterations booked in bulk since the event loop last asked.
    virtual_iterations: u64,
    /// Decode-only iterations booked so far that speculated: each request decoding through
    /// one made a token in it (0 without speculation).
    spec_iters: u64,
    /// One past the last booked iteration that carried decodes and did not speculate (a mixed
    /// iteration, or a batch above the speculative limit; every one without speculation).
    plain_end: u64,
    /// Bookings of the run in flight (buffers kept between runs), and its step function; boxed
    /// with the cache below, so that the fields the router scans across replicas stay close.
    book: Box<fast_forward::Book>,
    /// Decode step-time functions of recent batches: (batch size, shared-prefix tallies,
    /// function), at the batch size modulo the cache's length (a batch grows and shrinks by
    /// one request at a time).
    decode_steps: Box<[Option<CachedDecodeStep>; DECODE_STEP_CACHE]>,
}

/// Prompt tokens of the admissions of requests with block identities (a recomputation after
/// preemption is admitted again), and of them served from the prefix cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentTokens {
    /// Prompt tokens admitted, tokens.
    pub prompt: u64,
    /// Of them, served from a cache (the GPU prefix cache or the CPU tier), tokens.
    pub hit: u64,
    /// Of `hit`: loaded from the CPU tier (KV offloading), tokens.
    pub cpu_hit: u64,
}

/// KV blocks of one block identity of `r` (its `block_id_tokens` over the block size).
fn unit_blocks(r: &Req, block_size: u32) -> u32 {
    (r.block_id_tokens / block_size.max(1)).max(1)
}

/// Entries of a replica's cache of decode step-time functions.
const DECODE_STEP_CACHE: usize = 8;

/// A cached decode step-time function: the batch size and shared-prefix tallies (repeat,
/// distinct tokens) it holds for, and the function.
type CachedDecodeStep = (u32, (u64, u64), DecodeStep);

#[inline]
fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

impl Replica {
    /// A replica with an empty queue and cache.
    pub fn new(cfg: SchedulerConfig) -> Self {
        let b = cfg.block_size.max(1) as usize;
        let cpu = cfg.offload.map(|o| offload::CpuTier::new(o.cpu_blocks));
        Replica {
            cfg,
            iter: 0,
            busy: false,
            cur_start_ns: 0,
            cur_end_ns: 0,
            planned_at_ns: u64::MAX,
            cur_decodes: 0,
            cur_chunks: Vec::new(),
            waiting: VecDeque::new(),
            run_head: NONE,
            run_tail: NONE,
            running: 0,
            prefilling: Vec::new(),
            n_decoding: 0,
            sum_kv: 0,
            dec_prefix_tokens: 0,
            dec_prefix_distinct_tokens: 0,
            phase_counts: vec![0; b],
            finish_heap: BinaryHeap::new(),
            used_blocks: 0,
            reserved_blocks: 0,
            evictable_blocks: 0,
            prefix_cache: HashMap::new(),
            content: content::ContentCache::default(),
            content_tokens: ContentTokens::default(),
            cpu,
            pending_load_blocks: 0,
            pending_prefill_tokens: 0,
            departed: 0,
            peak_blocks: 0,
            transfers: handoff::Transfers::default(),
            run: None,
            virtual_iterations: 0,
            spec_iters: 0,
            plain_end: 0,
            decode_steps: Box::new([None; DECODE_STEP_CACHE]),
            book: Box::default(),
        }
    }

    /// Whether an iteration is in flight.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// What is in flight, for a trace: start of the iteration, or of the fast-forwarded run,
    /// ns; decodes; prefill chunks and their tokens.
    pub fn in_flight_batch(&self) -> (u64, u32, u32, u64) {
        let start_ns = self.run_start_ns().unwrap_or(self.cur_start_ns);
        let tokens = self.cur_chunks.iter().map(|c| c.tokens as u64).sum();
        (
            start_ns,
            self.cur_decodes,
            self.cur_chunks.len() as u32,
            tokens,
        )
    }

    /// Queue and cache state, for a trace: waiting and running requests, KV blocks in use and
    /// the capacity (as of the last iteration boundary inside a fast-forwarded run).
    pub fn occupancy(&self) -> (u64, u64, u64, u64) {
        (
            self.waiting.len() as u64,
            self.running as u64,
            self.used_blocks,
            self.cfg.kv_blocks,
        )
    }

    /// Requests queued or running here.
    pub fn outstanding(&self) -> u64 {
        self.waiting.len() as u64 + self.running as u64 + self.transfers.incoming
    }

    /// Most requests this replica runs at once.
    pub fn max_num_seqs(&self) -> u32 {
        self.cfg.max_num_seqs
    }

    /// Requests waiting to be admitted here.
    pub fn waiting_len(&self) -> u64 {
        self.waiting.len() as u64
    }

    /// Every request queued or running here (for a failure, which loses them all).
    pub fn in_flight_ids(&self, slab: &Slab) -> Vec<u32> {
        let mut ids: Vec<u32> = self.waiting.iter().copied().collect();
        let mut id = self.run_head;
        while id != NONE {
            ids.push(id);
            id = slab.get(id).next;
        }
        ids
    }

    /// KV load: blocks in use plus blocks the queued prompts will need, as a share of capacity.
    pub fn kv_load(&self) -> f64 {
        let demand = self.used_blocks - self.evictable_blocks
            + div_ceil(self.pending_prefill_tokens, self.cfg.block_size as u64)
            + self.transfers.queued_blocks;
        demand as f64 / self.cfg.kv_blocks.max(1) as f64
    }

    /// Leading whole block identities of `r`'s prompt this replica's prefix cache holds
    /// now, blocks of `r.block_id_tokens` tokens; 0 for a request without identities.
    pub fn matched_prefix_blocks(&self, r: &Req) -> u64 {
        match &r.blocks {
            Some(ids) if self.cfg.prefix_caching && r.block_id_tokens > 0 => {
                let whole = (r.input / r.block_id_tokens) as usize;
                self.content.longest_prefix(ids, whole.min(ids.len())) as u64
            }
            _ => 0,
        }
    }

    /// KV cache usage as vLLM reports it (`vllm:kv_cache_usage_perc`, 0..1): blocks held
    /// by requests over capacity; cached blocks no request holds count as free, as in
    /// vLLM's free-block queue.
    pub fn kv_usage(&self) -> f64 {
        (self.used_blocks - self.evictable_blocks) as f64 / self.cfg.kv_blocks.max(1) as f64
    }

    /// Requests that left since the last call (completed or timed out).
    pub fn take_departed(&mut self) -> u64 {
        std::mem::take(&mut self.departed)
    }

    fn block(&self) -> u64 {
        self.cfg.block_size as u64
    }

    fn available_blocks(&self) -> u64 {
        (self.cfg.kv_blocks + self.evictable_blocks)
            .saturating_sub(self.used_blocks + self.reserved_blocks)
    }

    /// Gives `n` blocks to request `r`: from its reservation if it has one, else from the pool.
    fn take_blocks(&mut self, r: &mut Req, n: u64) {
        if r.reserve > 0 {
            let from_reserve = n.min((r.reserve - r.own_blocks.min(r.reserve)) as u64);
            self.reserved_blocks -= from_reserve;
            self.allocate_reserved(n);
        } else {
            self.allocate(n);
        }
        r.own_blocks += n as u32;
    }

    /// Moves `n` reserved blocks into use.
    fn allocate_reserved(&mut self, n: u64) {
        // Reserved blocks were counted against availability already, so the pool has them,
        // unless cached prefixes occupy them: evict those first.
        let free = self.cfg.kv_blocks - self.used_blocks;
        if free < n {
            self.allocate(n);
        } else {
            self.used_blocks += n;
            self.peak_blocks = self.peak_blocks.max(self.used_blocks);
        }
    }

    /// Takes `n` blocks, evicting unused cached prefixes (least recently used first) if needed.
    /// The caller has checked `available_blocks() >= n`.
    fn allocate(&mut self, n: u64) {
        while self.cfg.kv_blocks - self.used_blocks < n {
            if let Some(blocks) = self.content.evict_one() {
                self.used_blocks -= blocks as u64;
                self.evictable_blocks -= blocks as u64;
                continue;
            }
            let victim = self
                .prefix_cache
                .iter()
                .filter(|(_, e)| e.refs == 0)
                .min_by_key(|(g, e)| (e.last_used_ns, **g))
                .map(|(g, e)| (*g, e.blocks));
            match victim {
                Some((g, blocks)) => {
                    self.prefix_cache.remove(&g);
                    self.used_blocks -= blocks as u64;
                    self.evictable_blocks -= blocks as u64;
                }
                None => break,
            }
        }
        self.used_blocks += n;
        self.peak_blocks = self.peak_blocks.max(self.used_blocks);
    }

    /// Returns a request's own blocks and drops its reference to a shared prefix.
    fn release(&mut self, r: &mut Req, now: u64) {
        self.used_blocks -= r.own_blocks as u64;
        if r.reserve > 0 {
            self.reserved_blocks -= r.reserve.saturating_sub(r.own_blocks) as u64;
            r.reserve = 0;
        }
        r.own_blocks = 0;
        if let (Some(ids), true) = (&r.blocks, r.shared_blocks > 0) {
            let n = r.shared_blocks / unit_blocks(r, self.cfg.block_size);
            self.evictable_blocks += self.content.release(&ids[..n as usize], true);
            r.shared_blocks = 0;
        }
        if r.shared_blocks > 0 {
            if let Some(e) = self.prefix_cache.get_mut(&r.prefix_group) {
                e.refs -= 1;
                e.last_used_ns = now;
                if e.refs == 0 {
                    self.evictable_blocks += e.blocks as u64;
                }
            }
            r.shared_blocks = 0;
        }
    }

    fn run_push_back(&mut self, slab: &mut Slab, id: u32) {
        let tail = self.run_tail;
        {
            let r = slab.get_mut(id);
            r.prev = tail;
            r.next = NONE;
        }
        if tail == NONE {
            self.run_head = id;
        } else {
            slab.get_mut(tail).next = id;
        }
        self.run_tail = id;
        self.running += 1;
    }

    fn run_unlink(&mut self, slab: &mut Slab, id: u32) {
        let (prev, next) = {
            let r = slab.get(id);
            (r.prev, r.next)
        };
        if prev == NONE {
            self.run_head = next;
        } else {
            slab.get_mut(prev).next = next;
        }
        if next == NONE {
            self.run_tail = prev;
        } else {
            slab.get_mut(next).prev = prev;
        }
        self.running -= 1;
    }

    fn phase_of(&self, r: &Req) -> usize {
        let b = self.block();
        let slots = r.dec_kv0 as u64 + self.spec_slots();
        ((r.dec_iter0 % b + b - slots % b) % b) as usize
    }

    /// KV slots a decoding request holds beyond its tokens (speculative decoding's draft and
    /// lookahead slots, `SchedulerConfig::spec_kv_slots`): a request at KV length `kv` holds
    /// the blocks of `kv + spec_slots()` tokens, and its next token needs a new block when
    /// that is a multiple of the block size. Taken with the prompt's last chunk.
    fn spec_slots(&self) -> u64 {
        self.cfg.spec_kv_slots as u64
    }

    /// The speculative slots a prefill chunk that brings the prompt to `tokens` of
    /// `prefill_len` takes besides its tokens: all of them with the prompt's last chunk.
    fn last_chunk_slots(&self, tokens: u32, prefill_len: u32) -> u64 {
        if tokens >= prefill_len {
            self.spec_slots()
        } else {
            0
        }
    }

    /// Takes a decoding request out of the decode set before iteration `iter` runs; returns its
    /// KV length.
    fn leave_decode(&mut self, r: &mut Req, kv: u64) {
        r.spec_tokens += self.spec_iters.saturating_sub(r.dec_spec0) as u32;
        let p = self.phase_of(r);
        self.phase_counts[p] -= 1;
        self.n_decoding -= 1;
        self.sum_kv -= kv;
        r.epoch = r.epoch.wrapping_add(1);
        self.count_decode_prefix(r, false);
    }

    /// Counts a request entering (`enter`) or leaving the decode set in the shared-prefix
    /// tallies the attention model reads.
    fn count_decode_prefix(&mut self, r: &Req, enter: bool) {
        if r.shared_blocks == 0 {
            return;
        }
        let tokens = r.shared_blocks as u64 * self.cfg.block_size as u64;
        let Some(e) = self.prefix_cache.get_mut(&r.prefix_group) else {
            return;
        };
        if enter {
            e.decode_refs += 1;
            self.dec_prefix_tokens += tokens;
            if e.decode_refs == 1 {
                self.dec_prefix_distinct_tokens += tokens;
            }
        } else {
            e.decode_refs -= 1;
            self.dec_prefix_tokens -= tokens;
            if e.decode_refs == 0 {
                self.dec_prefix_distinct_tokens -= tokens;
            }
        }
    }

    /// The decode part of the next iteration's batch.
    fn decode_shape(&self, decodes: u32) -> BatchShape {
        BatchShape::decode_total(decodes, self.sum_kv + decodes as u64)
            .with_shared_prefixes(self.dec_prefix_tokens, self.dec_prefix_distinct_tokens)
    }

    /// The step-time function of a decode-only batch shaped like `shape`
    /// ([`StepTime::decode_step`]), from a small cache: it changes only when a request
    /// joins or leaves the decode set.
    fn decode_step(
        &mut self,
        shape: &BatchShape,
        step: &dyn StepTime,
    ) -> Result<DecodeStep, BeyondClock> {
        let key = (
            shape.decode_prefix_repeat_tokens,
            shape.decode_prefix_distinct_tokens,
        );
        let i = shape.decode_seqs as usize % DECODE_STEP_CACHE;
        match self.decode_steps[i] {
            Some((seqs, k, d)) if seqs == shape.decode_seqs && k == key => Ok(d),
            _ => {
                let d = step.decode_step(shape)?;
                self.decode_steps[i] = Some((shape.decode_seqs, key, d));
                Ok(d)
            }
        }
    }

    /// Preempts the most recently admitted running request (recompute); returns whether it was
    /// a decode that needed a block in the coming iteration.
    fn preempt_tail(&mut self, slab: &mut Slab, metrics: &mut Metrics, now: u64) -> bool {
        let id = self.run_tail;
        self.preempt(id, slab, metrics, now)
    }

    /// Preempts running request `id`: frees its blocks and puts it back at the head of the
    /// waiting queue to recompute prompt and generated tokens. Returns whether it was a decode
    /// that needed a block in the coming iteration.
    fn preempt(&mut self, id: u32, slab: &mut Slab, metrics: &mut Metrics, now: u64) -> bool {
        let iter = self.iter;
        let b = self.block();
        self.run_unlink(slab, id);
        let mut r = slab.get(id).clone();
        let mut needed_block = false;
        match r.phase {
            Phase::Decoding => {
                let steps = iter - r.dec_iter0;
                let kv = r.dec_kv0 as u64 + steps;
                let slots = kv + self.spec_slots();
                needed_block = slots % b == 0;
                self.leave_decode(&mut r, kv);
                r.generated = r.dec_gen0 + steps as u32;
                r.own_blocks = (div_ceil(slots, b) - r.shared_blocks as u64) as u32;
                r.last_token_ns = now;
                self.pending_prefill_tokens += (r.input + r.generated) as u64;
            }
            Phase::Prefilling => {
                self.prefilling.retain(|&x| x != id);
                self.pending_prefill_tokens += r.computed as u64;
            }
            Phase::Waiting | Phase::Transferring => {}
        }
        self.release(&mut r, now);
        r.phase = Phase::Waiting;
        r.prefill_len = r.input + r.generated;
        r.computed = 0;
        *slab.get_mut(id) = r;
        self.waiting.push_front(id);
        metrics.preemptions += 1;
        needed_block
    }

    /// Queues a newly arrived (or retried) request at `now_ns`.
    pub fn enqueue(&mut self, slab: &mut Slab, id: u32, now_ns: u64) {
        let r = slab.get_mut(id);
        r.queued_ns = now_ns;
        self.pending_prefill_tokens += r.prefill_len as u64;
        self.waiting.push_back(id);
    }

    /// Predicted time from `now` to the first token of a new request with `prompt` tokens:
    /// the rest of the current iteration, the one already planned after it when the engine
    /// plans ahead, plus the iterations needed to prefill everything queued ahead of it at
    /// the current decode load. A prediction beyond the clock is `u64::MAX` (it only meets a
    /// TTFT threshold, which it misses).
    pub fn predict_ttft_ns(&self, now: u64, prompt: u32, step: &dyn StepTime) -> u64 {
        let rest = if self.busy {
            self.cur_end_ns.saturating_sub(now)
        } else {
            0
        };
        let per_iter = (self
            .cfg
            .max_num_batched_tokens
            .saturating_sub(self.n_decoding))
        .max(1);
        let pending = self.pending_prefill_tokens + prompt as u64;
        let planned = u64::from(self.busy && self.cfg.plans_ahead);
        let iters = div_ceil(pending, per_iter as u64) + planned;
        let mut shape = self.decode_shape(self.n_decoding);
        let chunk = (pending.min(per_iter as u64)) as u32;
        shape.add_prefill(chunk, 0, true);
        step.step_ns(&shape)
            .map_or(u64::MAX, |ns| rest.saturating_add(iters.saturating_mul(ns)))
    }

    fn timed_out(r: &Req, now: u64, slo: &SloPolicy) -> bool {
        match slo.queue_timeout_ns {
            Some(t) => r.first_token_ns == NO_TIME && now >= r.arrival_ns.saturating_add(t),
            None => false,
        }
    }

    /// Drops waiting requests at the head of the queue whose clients gave up.
    fn purge_timeouts(
        &mut self,
        slab: &mut Slab,
        metrics: &mut Metrics,
        now: u64,
        slo: &SloPolicy,
    ) {
        while let Some(&id) = self.waiting.front() {
            if !Self::timed_out(slab.get(id), now, slo) {
                break;
            }
            self.waiting.pop_front();
            let r = slab.get(id);
            self.pending_prefill_tokens -= (r.prefill_len - r.computed) as u64;
            metrics.record_unserved(Outcome::TimedOut, r.arrival_ns, r.input, now);
            slab.remove(id);
            self.departed += 1;
        }
    }

    /// Looks up the prefix cache for a request about to be admitted: (cached tokens, shared
    /// blocks, of the cached tokens those the CPU tier holds), and takes a reference on a GPU
    /// hit.
    fn prefix_hit(&mut self, r: &Req) -> (u32, u32, u32) {
        if let Some(ids) = &r.blocks {
            if !self.cfg.prefix_caching || r.block_id_tokens == 0 {
                return (0, 0, 0);
            }
            // Whole identities only, and at least one prompt token left to compute.
            let most = ((r.input - 1) / r.block_id_tokens) as usize;
            let most = most.min(ids.len());
            let (n, revived) = self.content.acquire_prefix(ids, most);
            self.evictable_blocks -= revived;
            let m = self.cpu_prefix(&ids[..most], n) as u32;
            let n = n as u32;
            return (
                (n + m) * r.block_id_tokens,
                n * unit_blocks(r, self.cfg.block_size),
                m * r.block_id_tokens,
            );
        }
        if !self.cfg.prefix_caching || r.prefix_group == NONE {
            return (0, 0, 0);
        }
        let full = r.prefix_tokens / self.cfg.block_size;
        if full == 0 {
            return (0, 0, 0);
        }
        match self.prefix_cache.get_mut(&r.prefix_group) {
            Some(e) if e.blocks == full => {
                if e.refs == 0 {
                    self.evictable_blocks -= e.blocks as u64;
                }
                e.refs += 1;
                (full * self.cfg.block_size, full, 0)
            }
            _ => (0, 0, 0),
        }
    }

    /// KV offloading, at a lookup: touches every identity of the prompt's lookup range `ids`
    /// in the CPU tier and returns how many continue the GPU hit of `gpu_units` there (0
    /// without a tier). vLLM's `get_num_new_matched_tokens` (see `offload.rs`).
    fn cpu_prefix(&mut self, ids: &[u64], gpu_units: usize) -> usize {
        let Some(cpu) = &mut self.cpu else {
            return 0;
        };
        cpu.touch(ids);
        cpu.matched(&ids[gpu_units..])
    }

    /// KV offloading, at an admission: the CPU tier stores (or keeps) the units the request
    /// holds from the GPU cache (`_get_reqs_to_store` from block 0 on), and the loaded ones
    /// are booked on the host link of the iteration being planned.
    fn offload_admitted(&mut self, r: &Req, shared: u32, cpu_tokens: u32) {
        let (Some(cpu), Some(ids)) = (&mut self.cpu, &r.blocks) else {
            return;
        };
        let ub = unit_blocks(r, self.cfg.block_size);
        for &id in &ids[..(shared / ub) as usize] {
            cpu.store(id, ub);
        }
        self.pending_load_blocks += (cpu_tokens / r.block_id_tokens * ub) as u64;
    }

    /// Time the host link takes to load the blocks booked by this iteration's admissions
    /// (one transfer: latency plus bytes over bandwidth), ns; clears the booking.
    fn offload_load_ns(&mut self) -> u64 {
        let blocks = std::mem::take(&mut self.pending_load_blocks);
        self.cfg.offload.map_or(0, |o| o.load_ns(blocks))
    }

    /// After a chunk, a request that computed a whole shared prefix publishes its blocks.
    fn maybe_publish_prefix(&mut self, r: &mut Req) {
        if r.blocks.is_some() {
            self.publish_content(r);
            return;
        }
        if !self.cfg.prefix_caching || r.prefix_group == NONE || r.shared_blocks > 0 {
            return;
        }
        let full = r.prefix_tokens / self.cfg.block_size;
        if full == 0 || r.computed < full * self.cfg.block_size {
            return;
        }
        if self.prefix_cache.contains_key(&r.prefix_group) {
            return;
        }
        self.prefix_cache.insert(
            r.prefix_group,
            PrefixEntry {
                blocks: full,
                refs: 1,
                decode_refs: 0,
                last_used_ns: 0,
            },
        );
        r.own_blocks -= full;
        // The prefix blocks now belong to the cache, not to this request's reservation.
        r.reserve = r.reserve.saturating_sub(full);
        r.shared_blocks = full;
    }

    /// After a chunk, a request with block identities hands each whole identity it has
    /// computed (of its prompt, in order) to the cache; one another request computed
    /// meanwhile is shared and this request's copy freed.
    fn publish_content(&mut self, r: &mut Req) {
        let Some(ids) = &r.blocks else {
            return;
        };
        if !self.cfg.prefix_caching || r.block_id_tokens == 0 {
            return;
        }
        let ub = unit_blocks(r, self.cfg.block_size);
        let limit = r.computed.min(r.input) / r.block_id_tokens;
        let mut held = r.shared_blocks / ub;
        while (held as usize) < ids.len() && held < limit {
            let id = ids[held as usize];
            match self.content.take_if_cached(id) {
                Some(was_unused) => {
                    if was_unused {
                        self.evictable_blocks -= ub as u64;
                    }
                    self.used_blocks -= ub as u64;
                }
                None => self.content.insert(id, ub),
            }
            if let Some(cpu) = &mut self.cpu {
                cpu.store(id, ub);
            }
            r.own_blocks -= ub;
            r.reserve = r.reserve.saturating_sub(ub);
            r.shared_blocks += ub;
            held += 1;
        }
    }

    /// Plans and starts the next iteration at `now`; returns the time until its event in ns
    /// (the end of the iteration, or of the run of decode-only iterations it starts, up to
    /// `horizon`), or `None` when there is nothing to run (the replica goes idle).
    pub fn schedule(
        &mut self,
        now: u64,
        slab: &mut Slab,
        metrics: &mut Metrics,
        slo: &SloPolicy,
        step: &dyn StepTime,
        horizon: &Horizon,
    ) -> Option<u64> {
        debug_assert!(!self.busy);
        self.purge_timeouts(slab, metrics, now, slo);
        self.cur_chunks.clear();
        let decodes = self.schedule_decodes(slab, metrics, now);
        let budget = self.cfg.max_num_batched_tokens.saturating_sub(decodes);
        let budget = self.schedule_partial_prefills(budget, slab, metrics, now);
        // Planning ahead, this iteration was planned when the last one started: it has only
        // the requests queued by then, unless it would otherwise be empty (the engine idled).
        let planned_at = std::mem::replace(&mut self.planned_at_ns, u64::MAX);
        let visible_until = if decodes == 0 && self.cur_chunks.is_empty() {
            u64::MAX
        } else {
            planned_at
        };
        let held_back = self.admit_waiting(budget, visible_until, slab, metrics, now, slo);
        if decodes == 0 && self.cur_chunks.is_empty() {
            self.pending_load_blocks = 0;
            return None;
        }
        // A request held back joins the next iteration: no run past this one.
        let one = Horizon {
            max_iterations: 1,
            ..*horizon
        };
        let horizon = if held_back { &one } else { horizon };
        self.start_iteration(now, decodes, slab, metrics, slo, step, horizon)
    }

    /// Step 1 of an iteration: every running decode gains one token; those at a block
    /// boundary need a new block, and a decode short of one preempts the most recently
    /// admitted request. Returns the decodes.
    fn schedule_decodes(&mut self, slab: &mut Slab, metrics: &mut Metrics, now: u64) -> u32 {
        let phase = (self.iter % self.block()) as usize;
        let mut need = self.phase_counts[phase] as u64;
        if self.cfg.reserve_output_kv {
            // Every decoding request holds a reservation that covers its growth.
            self.reserved_blocks -= need;
            self.allocate_reserved(need);
        } else {
            while self.available_blocks() < need && self.running > 0 {
                if self.preempt_tail(slab, metrics, now) {
                    need -= 1;
                }
                need = need.min(self.phase_counts[phase] as u64);
            }
            self.allocate(need);
        }
        self.n_decoding
    }

    /// Step 2: the partial prefills continue, in admission order, within `budget` tokens;
    /// returns the budget left.
    fn schedule_partial_prefills(
        &mut self,
        mut budget: u32,
        slab: &mut Slab,
        metrics: &mut Metrics,
        now: u64,
    ) -> u32 {
        let b = self.block();
        let mut i = 0;
        while i < self.prefilling.len() && budget > 0 {
            let id = self.prefilling[i];
            let (remaining, computed, held) = {
                let r = slab.get(id);
                (
                    r.prefill_len - r.computed,
                    r.computed,
                    (r.own_blocks + r.shared_blocks) as u64,
                )
            };
            let chunk = remaining.min(budget);
            let slots = (computed + chunk) as u64
                + self.last_chunk_slots(computed + chunk, remaining + computed);
            let blocks = div_ceil(slots, b).saturating_sub(held);
            // Short of blocks: preempt the most recently admitted partial prefills behind this
            // one (decodes of this iteration are already counted and keep their blocks; they
            // make progress and free blocks as they finish).
            let reserved = slab.get(id).reserve > 0;
            while !reserved && self.available_blocks() < blocks && self.prefilling.len() > i + 1 {
                let victim = self.prefilling[self.prefilling.len() - 1];
                self.preempt(victim, slab, metrics, now);
            }
            if !reserved && self.available_blocks() < blocks {
                break;
            }
            let r = slab.get_mut(id);
            self.take_blocks(r, blocks);
            r.computed += chunk;
            self.maybe_publish_prefix(r);
            self.pending_prefill_tokens -= chunk as u64;
            metrics.prefill_tokens_computed += chunk as u64;
            self.cur_chunks.push(Chunk { id, tokens: chunk });
            budget -= chunk;
            i += 1;
        }
        budget
    }

    /// Step 3: waiting requests queued by `visible_until_ns` are admitted first come, first
    /// served while the seats, the `budget` and the KV blocks last (static batching: only
    /// into an empty replica). Returns whether the head of the queue was held back only
    /// because it was queued later.
    fn admit_waiting(
        &mut self,
        mut budget: u32,
        visible_until_ns: u64,
        slab: &mut Slab,
        metrics: &mut Metrics,
        now: u64,
        slo: &SloPolicy,
    ) -> bool {
        let may_admit = !self.cfg.static_batching || self.running == 0;
        let seat_cap = self.cfg.max_num_seqs;
        while may_admit && self.running < seat_cap && (budget > 0 || self.cfg.static_batching) {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            if Self::timed_out(slab.get(id), now, slo) {
                self.purge_timeouts(slab, metrics, now, slo);
                continue;
            }
            if slab.get(id).queued_ns > visible_until_ns {
                return true;
            }
            match self.admit_head(id, budget, slab, metrics, now) {
                Some(chunk) => budget -= chunk,
                None => break,
            }
        }
        false
    }

    /// Admits request `id`, the head of the queue, with its first chunk within `budget`
    /// tokens: its cached prefix, its blocks (and reservation); returns the chunk, or `None`
    /// when it does not fit now (it stays at the head).
    fn admit_head(
        &mut self,
        id: u32,
        budget: u32,
        slab: &mut Slab,
        metrics: &mut Metrics,
        now: u64,
    ) -> Option<u32> {
        let b = self.block();
        // Read and changed in its slot: a request is about 150 bytes, and this runs once per
        // admission.
        let r = slab.get(id);
        let (cached, shared, cpu_tokens) = self.prefix_hit(r);
        let to_compute = r.prefill_len - cached;
        let chunk = if self.cfg.chunked_prefill || self.cfg.static_batching {
            to_compute.min(budget)
        } else if to_compute <= budget {
            to_compute
        } else {
            0
        };
        let now_tokens = if self.cfg.static_batching {
            r.prefill_len
        } else {
            cached + chunk
        };
        let slots = now_tokens as u64 + self.last_chunk_slots(now_tokens, r.prefill_len);
        let blocks = div_ceil(slots, b).saturating_sub(shared as u64);
        let reserve = if self.cfg.reserve_output_kv {
            let life = r.prefill_len as u64 + (r.output - r.generated) as u64 + self.spec_slots();
            div_ceil(life, b).saturating_sub(shared as u64).max(blocks)
        } else {
            0
        };
        if (chunk == 0 && !self.cfg.static_batching)
            || self.available_blocks() < blocks.max(reserve)
        {
            // Undo the prefix reference taken by the lookup.
            if let (Some(ids), true) = (&r.blocks, shared > 0) {
                let n = shared / unit_blocks(r, self.cfg.block_size);
                self.evictable_blocks += self.content.release(&ids[..n as usize], false);
            } else if shared > 0 {
                if let Some(e) = self.prefix_cache.get_mut(&r.prefix_group) {
                    e.refs -= 1;
                    if e.refs == 0 {
                        self.evictable_blocks += e.blocks as u64;
                    }
                }
            }
            return None;
        }
        self.waiting.pop_front();
        let r = slab.get_mut(id);
        r.own_blocks = 0;
        r.reserve = reserve as u32;
        self.reserved_blocks += reserve;
        self.take_blocks(r, blocks);
        r.shared_blocks = shared;
        r.computed = cached + chunk;
        r.phase = Phase::Prefilling;
        if r.first_scheduled_ns == NO_TIME {
            r.first_scheduled_ns = now;
        }
        self.offload_admitted(r, shared, cpu_tokens);
        self.maybe_publish_prefix(r);
        let done = r.computed == r.prefill_len;
        self.pending_prefill_tokens -= (cached + chunk) as u64;
        if r.blocks.is_some() {
            self.content_tokens.prompt += r.prefill_len as u64;
            self.content_tokens.hit += cached as u64;
            self.content_tokens.cpu_hit += cpu_tokens as u64;
        }
        metrics.prefix_cache_hit_tokens += cached as u64;
        metrics.prefill_tokens_computed += chunk as u64;
        self.run_push_back(slab, id);
        if !done {
            self.prefilling.push(id);
        }
        if chunk > 0 {
            self.cur_chunks.push(Chunk { id, tokens: chunk });
        }
        Some(chunk)
    }

    /// Times the iteration planned (its `decodes` and chunks) and starts it at `now`; a
    /// decode-only one may extend into a fast-forwarded run up to `horizon`. Returns the time
    /// until its event, ns.
    #[allow(clippy::too_many_arguments)]
    fn start_iteration(
        &mut self,
        now: u64,
        decodes: u32,
        slab: &Slab,
        metrics: &mut Metrics,
        slo: &SloPolicy,
        step: &dyn StepTime,
        horizon: &Horizon,
    ) -> Option<u64> {
        let mut shape = self.decode_shape(decodes);
        for c in &self.cur_chunks {
            let r = slab.get(c.id);
            shape.add_prefill(
                c.tokens,
                (r.computed - c.tokens) as u64,
                r.computed == r.prefill_len,
            );
        }
        let dur = if self.cur_chunks.is_empty() {
            self.decode_step(&shape, step)
                .and_then(|d| d.ns_at(shape.decode_context_tokens))
        } else {
            let load_ns = self.offload_load_ns();
            step.step_ns(&shape)
                .map(|ns| ns.max(1).saturating_add(load_ns))
        };
        let dur = match dur {
            Ok(ns) => ns,
            Err(e) => {
                // The iteration would end beyond the clock: it never ends here, and the event
                // loop stops the run at its next event, saying why.
                metrics.stop = Some(format!(
                    "an iteration of {} sequences ({} prompt tokens, {} tokens of context) takes {e}",
                    shape.decode_seqs + shape.prefill_seqs,
                    shape.prefill_tokens,
                    shape.decode_context_tokens
                ));
                self.busy = true;
                self.cur_start_ns = now;
                self.cur_end_ns = u64::MAX;
                return Some(u64::MAX - now);
            }
        };
        self.busy = true;
        self.cur_start_ns = now;
        self.cur_end_ns = now + dur;
        self.cur_decodes = decodes;
        if self.cur_chunks.is_empty() {
            let end = self.plan_run(now, dur, &shape, slab, slo, step, &metrics.itl, horizon);
            return Some(end - now);
        }
        Some(dur)
    }

    /// Counts `iterations` decode-only iterations of `batch` decodes each, and whether they
    /// speculated (`SchedulerConfig::spec_max_batch_seqs`).
    pub(super) fn book_decode_only(&mut self, batch: u64, iterations: u64, metrics: &mut Metrics) {
        let tokens = batch * iterations;
        metrics.decode_only_tokens += tokens;
        metrics.decode_only_iterations += iterations;
        if self.speculates(batch) {
            metrics.speculated_tokens += tokens;
            metrics.speculated_iterations += iterations;
            self.spec_iters += iterations;
        } else if batch > 0 {
            self.plain_end = self.iter + iterations;
        }
    }

    /// Tokens of `r`'s final run of consecutive speculating iterations, when its last token
    /// came from one (it finished decoding in the iteration ending now, which speculated);
    /// else 0. Only this run's last verify step is capped by the tokens left.
    fn final_spec_run(&self, r: &Req) -> u64 {
        let now_speculated = r.phase == Phase::Decoding
            && self.cur_chunks.is_empty()
            && self.speculates(u64::from(self.cur_decodes));
        if !now_speculated {
            return 0;
        }
        (self.iter + 1).saturating_sub(self.plain_end.max(r.dec_iter0))
    }

    /// Whether a decode-only iteration of `batch` decodes speculates (none without
    /// speculation: the limit is then 0).
    fn speculates(&self, batch: u64) -> bool {
        batch > 0 && batch <= u64::from(self.cfg.spec_max_batch_seqs)
    }

    /// Speculating iterations before the next one a request entering the decode set now runs
    /// in: those booked, and the one in flight if it speculates (an ordinary iteration: a
    /// fast-forwarded run is cut before a request lands).
    fn spec_iters_before_next(&self) -> u64 {
        debug_assert!(self.run.is_none());
        let in_flight =
            self.busy && self.cur_chunks.is_empty() && self.speculates(u64::from(self.cur_decodes));
        self.spec_iters + u64::from(in_flight)
    }

    /// Finishes the in-flight iteration at `now`: emits its tokens, completes requests, moves
    /// finished prefills into the decode set.
    pub fn end_iteration(
        &mut self,
        now: u64,
        slab: &mut Slab,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
        slo: &SloPolicy,
    ) {
        debug_assert!(self.busy);
        if self.run_len().is_some() {
            // A fast-forwarded run: book all but its last iteration, which ends now.
            self.advance_run(metrics, ts);
        }
        debug_assert_eq!(self.cur_end_ns, now);
        self.busy = false;
        if self.cfg.plans_ahead {
            self.planned_at_ns = self.cur_start_ns;
        }
        let iter = self.iter;
        let b = self.block();
        let dur = now - self.cur_start_ns;
        let decodes = self.cur_decodes as u64;

        metrics.iterations += 1;
        metrics.busy_ns += dur as u128;
        metrics
            .batch_size
            .record((decodes + self.cur_chunks.len() as u64) as f64, 1.0);
        let util = self.used_blocks as f64 / self.cfg.kv_blocks.max(1) as f64;
        metrics.kv_utilization.record(util, dur as f64);
        metrics
            .batch_size_hist
            .record_repeating(decodes + self.cur_chunks.len() as u64, 1);
        metrics
            .kv_permille_hist
            .record_repeating(crate::numeric::round(util * 1000.0) as u64, 1);
        let mut tokens = decodes;

        // Decode tokens: every decoding request gained one token.
        metrics.generated_tokens += decodes;
        if self.cur_chunks.is_empty() {
            self.book_decode_only(decodes, 1, metrics);
        } else if decodes > 0 {
            self.plain_end = iter + 1;
        }
        metrics.itl.record_repeating(dur, decodes);
        self.sum_kv += decodes;
        while let Some(&Reverse((finish, id, epoch))) = self.finish_heap.peek() {
            if finish > iter {
                break;
            }
            self.finish_heap.pop();
            if slab.get(id).epoch != epoch || slab.get(id).phase != Phase::Decoding {
                continue;
            }
            // In place: a request is about 150 bytes, and this runs once per request.
            let r = slab.get_mut(id);
            let kv = r.dec_kv0 as u64 + (iter - r.dec_iter0) + 1;
            self.leave_decode(r, kv);
            r.generated = r.output;
            r.own_blocks = (div_ceil(kv + self.spec_slots(), b) - r.shared_blocks as u64) as u32;
            self.complete(id, now, slab, metrics, ts, slo);
        }

        // Prefill chunks: those that finished their prompt produce a token.
        let chunks = std::mem::take(&mut self.cur_chunks);
        for c in &chunks {
            let mut r = slab.get(c.id).clone();
            if r.computed < r.prefill_len {
                continue;
            }
            if self.transfers.prefill_only {
                self.hand_off(c.id, r, slab);
                continue;
            }
            tokens += 1;
            metrics.generated_tokens += 1;
            if r.first_token_ns == NO_TIME {
                r.first_token_ns = now;
            } else {
                metrics.itl.record(now.saturating_sub(r.last_token_ns));
            }
            r.generated += 1;
            if r.generated >= r.output {
                *slab.get_mut(c.id) = r;
                self.complete(c.id, now, slab, metrics, ts, slo);
                continue;
            }
            self.enter_decode(c.id, r, iter + 1, slab);
        }
        if !self.prefilling.is_empty() {
            self.prefilling.retain(|&id| {
                let r = slab.get(id);
                r.phase == Phase::Prefilling && r.computed < r.prefill_len
            });
        }
        self.cur_chunks = chunks;
        self.cur_chunks.clear();
        ts.iteration(
            self.cur_start_ns,
            dur,
            tokens,
            self.running as u64,
            self.waiting.len() as u64,
            util,
        );
        self.iter += 1;
    }

    /// Moves request `id` (`r`: its prompt computed, its latest token out) into the decode set
    /// from iteration `dec_iter0` on; its finishing iteration is known from here.
    fn enter_decode(&mut self, id: u32, mut r: Req, dec_iter0: u64, slab: &mut Slab) {
        r.phase = Phase::Decoding;
        r.dec_iter0 = dec_iter0;
        r.dec_kv0 = r.prefill_len;
        r.dec_gen0 = r.generated;
        r.dec_spec0 = self.spec_iters_before_next();
        r.finish_iter = r.dec_iter0 + (r.output - r.generated) as u64 - 1;
        let p = self.phase_of(&r);
        self.phase_counts[p] += 1;
        self.n_decoding += 1;
        self.sum_kv += r.dec_kv0 as u64;
        self.count_decode_prefix(&r, true);
        self.finish_heap.push(Reverse((r.finish_iter, id, r.epoch)));
        *slab.get_mut(id) = r;
    }

    /// Records a finished request and frees it.
    fn complete(
        &mut self,
        id: u32,
        now: u64,
        slab: &mut Slab,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
        slo: &SloPolicy,
    ) {
        self.run_unlink(slab, id);
        // In place (the slot is freed below; what `release` changes in it is never read).
        let r = slab.get_mut(id);
        self.release(r, now);
        let ttft = r.first_token_ns - r.arrival_ns;
        let e2e = now - r.arrival_ns;
        metrics.ttft.record(ttft);
        metrics.e2e.record(e2e);
        metrics
            .queue
            .record(r.first_scheduled_ns.saturating_sub(r.arrival_ns));
        let final_run = self.final_spec_run(r);
        metrics
            .speculated_lengths
            .record(u64::from(r.spec_tokens), final_run);
        let mut good = slo.ttft_ns.is_none_or(|t| ttft <= t) && slo.e2e_ns.is_none_or(|t| e2e <= t);
        if r.output > 1 {
            let tpot = (e2e - ttft) / (r.output as u64 - 1);
            metrics.tpot.record(tpot);
            good &= slo.tpot_ns.is_none_or(|t| tpot <= t);
        }
        if good {
            metrics.good += 1;
        }
        if let Some(b) = metrics.periods.at(r.arrival_ns) {
            b.completed += 1;
            b.good += good as u64;
            b.ttft.record(ttft);
        }
        metrics.log.push(RequestRecord {
            arrival_ns: r.arrival_ns,
            first_token_ns: r.first_token_ns,
            end_ns: now,
            input_tokens: r.input,
            output_tokens: r.output,
            outcome: if good {
                Outcome::Good
            } else {
                Outcome::Completed
            },
        });
        metrics.completed += 1;
        metrics.input_tokens += r.input as u64;
        metrics.output_tokens += r.output as u64;
        metrics.last_event_ns = metrics.last_event_ns.max(now);
        ts.completion(now);
        slab.remove(id);
        self.departed += 1;
    }
}
