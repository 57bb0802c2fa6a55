//! The scheduler's decisions, one at a time, on a replica driven by hand: the token budget,
//! the chunked-prefill split, the preemption victim, the prefix cache's eviction, admission
//! under the output-reservation policy. Each test also checks the KV accounting (INV-3).

use super::*;
use crate::clock::BeyondClock;
use crate::sim::request::Req;
use crate::step_time::{BatchShape, DecodeStep, StepTime};
use crate::workload::{RequestSpec, NO_PREFIX_GROUP};

/// A step-time model for tests: 1 ms per iteration plus 1 us per token processed, whatever
/// the context (the contract's S2 holds: decode-only batches are timed by `decode_step`).
pub(crate) struct LinearStep;

impl StepTime for LinearStep {
    fn step_ns(&self, b: &BatchShape) -> Result<u64, BeyondClock> {
        Ok(1_000_000 + 1_000 * b.tokens() as u64)
    }

    fn decode_step(&self, b: &BatchShape) -> Result<DecodeStep, BeyondClock> {
        let s = 1e-3 + 1e-6 * b.tokens() as f64;
        DecodeStep::new(&[(s, 0.0), (0.0, 0.0), (0.0, 0.0), (1e-9, 0.0)], 1.0)
    }
}

fn config(kv_blocks: u64, budget: u32) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: 64,
        max_num_batched_tokens: budget,
        chunked_prefill: true,
        prefix_caching: false,
        block_size: 16,
        kv_blocks,
        max_model_len: 1 << 20,
        static_batching: false,
        reserve_output_kv: false,
        spec_kv_slots: 0,
        offload: None,
        spec_max_batch_seqs: 0,
        plans_ahead: false,
    }
}

/// A replica with its requests and metrics.
struct Bench {
    replica: Replica,
    slab: Slab,
    metrics: Metrics,
    ts: TimeSeries,
    now: u64,
}

impl Bench {
    fn new(cfg: SchedulerConfig) -> Self {
        Bench {
            replica: Replica::new(cfg),
            slab: Slab::default(),
            metrics: Metrics::default(),
            ts: TimeSeries::new(1),
            now: 0,
        }
    }

    /// Queues a request of `input` prompt and `output` output tokens (a shared prefix of
    /// `prefix` tokens in group `group` when `prefix > 0`); returns its id.
    fn add(&mut self, input: u32, output: u32, prefix: (u32, u32)) -> u32 {
        let spec = RequestSpec {
            arrival_ns: self.now,
            input_tokens: input,
            output_tokens: output,
            prefix_group: if prefix.0 > 0 {
                prefix.1
            } else {
                NO_PREFIX_GROUP
            },
            prefix_tokens: prefix.0,
            blocks: None,
            block_id_tokens: 0,
            session: crate::workload::NO_SESSION,
            last_turn: false,
        };
        let id = self.slab.insert(Req::waiting(&spec, self.now));
        self.replica.enqueue(&mut self.slab, id, self.now);
        id
    }

    /// Schedules and ends one iteration; returns its chunks (request, tokens) and decodes.
    fn step(&mut self) -> (Vec<(u32, u32)>, u32) {
        let slo = SloPolicy::default();
        let dur = self
            .replica
            .schedule(
                self.now,
                &mut self.slab,
                &mut self.metrics,
                &slo,
                &LinearStep,
                &Horizon::OFF,
            )
            .expect("work to do");
        let chunks = self
            .replica
            .cur_chunks
            .iter()
            .map(|c| (c.id, c.tokens))
            .collect();
        let decodes = self.replica.cur_decodes;
        self.replica
            .check_kv(&self.slab)
            .expect("INV-3 mid-iteration");
        self.now += dur;
        self.replica.end_iteration(
            self.now,
            &mut self.slab,
            &mut self.metrics,
            &mut self.ts,
            &slo,
        );
        self.replica
            .check_kv(&self.slab)
            .expect("INV-3 between iterations");
        (chunks, decodes)
    }
}

#[test]
fn the_token_budget_covers_decodes_first_then_prefill_chunks_in_order() {
    let mut b = Bench::new(config(10_000, 100));
    let a = b.add(60, 5, (0, 0));
    let c = b.add(60, 5, (0, 0));
    let d = b.add(60, 5, (0, 0));
    // 100 tokens: all of a's 60, 40 of c's; d waits.
    assert_eq!(b.step(), (vec![(a, 60), (c, 40)], 0));
    // a decodes (1 token), c's partial prefill takes its last 20, d gets the 79 left (60).
    assert_eq!(b.step(), (vec![(c, 20), (d, 60)], 1));
    assert_eq!(b.step(), (vec![], 3));
    assert_eq!(b.metrics.prefill_tokens_computed, 180);
}

#[test]
fn a_long_prompt_is_split_into_budget_sized_chunks_and_its_first_token_ends_the_last() {
    let mut b = Bench::new(config(10_000, 100));
    let a = b.add(250, 3, (0, 0));
    assert_eq!(b.step().0, vec![(a, 100)]);
    assert_eq!(b.step().0, vec![(a, 100)]);
    assert_eq!(b.slab.get(a).first_token_ns, NO_TIME);
    assert_eq!(b.step().0, vec![(a, 50)]);
    assert_eq!(b.slab.get(a).first_token_ns, b.now);
    assert_eq!(b.metrics.generated_tokens, 1);
}

#[test]
fn without_chunked_prefill_a_prompt_waits_for_a_budget_it_fits_whole() {
    let mut cfg = config(10_000, 100);
    cfg.chunked_prefill = false;
    let mut b = Bench::new(cfg);
    let a = b.add(70, 4, (0, 0));
    let c = b.add(50, 4, (0, 0));
    // a fits; c (50 > the 30 left) waits for the next iteration, not a chunk of 30.
    assert_eq!(b.step().0, vec![(a, 70)]);
    assert_eq!(b.step(), (vec![(c, 50)], 1));
}

#[test]
fn a_decode_short_of_a_block_preempts_the_most_recently_admitted_request() {
    // 3 blocks of 16 tokens: two 16-token prompts take one block each; the first decode step
    // needs a new block for each, only one is free.
    let mut b = Bench::new(config(3, 1_000));
    let first = b.add(16, 10, (0, 0));
    let last = b.add(16, 10, (0, 0));
    b.step();
    assert_eq!(b.replica.used_blocks, 2);
    b.step();
    assert_eq!(b.metrics.preemptions, 1);
    // The victim is the later admission; it is back at the head of the queue to recompute
    // its prompt and its one generated token.
    assert_eq!(b.replica.waiting.front(), Some(&last));
    let victim = b.slab.get(last);
    assert_eq!(
        (victim.phase, victim.prefill_len, victim.own_blocks),
        (Phase::Waiting, 17, 0)
    );
    assert_eq!(b.slab.get(first).phase, Phase::Decoding);
    assert_eq!(b.replica.used_blocks, 2);
}

/// Speculative decoding's slots (`spec_kv_slots`): a decoding request holds the blocks of its
/// tokens plus its draft and lookahead slots, taken with its prompt's last chunk, and a new
/// block when the two together cross a block boundary; preemption frees them all (INV-3 is
/// checked at every step by `Bench::step`).
#[test]
fn speculative_slots_are_held_beside_the_tokens_and_freed_with_them() {
    let mut cfg = config(4, 1_000);
    cfg.spec_kv_slots = 10;
    let mut b = Bench::new(cfg);
    // 12-token prompts: 1 block of tokens each, 2 with their 10 slots (22 slots).
    let first = b.add(12, 20, (0, 0));
    let second = b.add(12, 20, (0, 0));
    b.step();
    assert_eq!(b.replica.used_blocks, 4);
    // Decoding from KV 12, the token at KV 22 (slot 32) needs a third block: ten decode steps
    // fit in two blocks each, the eleventh is short of one and preempts the later request.
    for _ in 0..10 {
        b.step();
    }
    assert_eq!((b.replica.used_blocks, b.metrics.preemptions), (4, 0));
    b.step();
    assert_eq!((b.replica.used_blocks, b.metrics.preemptions), (3, 1));
    assert_eq!(b.slab.get(first).phase, Phase::Decoding);
    assert_eq!(b.slab.get(second).phase, Phase::Waiting);
    while b.replica.running > 0 || !b.replica.waiting.is_empty() {
        b.step();
    }
    assert_eq!(b.replica.used_blocks, 0);
    assert_eq!(b.metrics.preemptions, 1);
}

#[test]
fn the_prefix_cache_evicts_the_least_recently_used_unreferenced_prefix() {
    let mut cfg = config(8, 1_000);
    cfg.prefix_caching = true;
    let mut b = Bench::new(cfg);
    // Two groups, each a 32-token (2-block) prefix; one request each, then done.
    let g1 = b.add(40, 1, (32, 1));
    b.step();
    b.now += 1_000;
    let g2 = b.add(40, 1, (32, 2));
    b.step();
    assert_eq!(b.slab.len(), 0, "{g1} {g2} completed");
    let cached = |b: &Bench| {
        let mut g: Vec<u32> = b.replica.prefix_cache.keys().copied().collect();
        g.sort();
        g
    };
    assert_eq!(cached(&b), vec![1, 2]);
    assert_eq!((b.replica.used_blocks, b.replica.evictable_blocks), (4, 4));
    // A 96-token prompt needs 6 of the 8 blocks: one prefix must go, group 1's (used first).
    b.add(96, 1, (0, 0));
    b.step();
    assert_eq!(cached(&b), vec![2]);
    assert_eq!(b.replica.held_blocks(), 0);
}

#[test]
fn a_prefix_hit_skips_the_cached_tokens() {
    let mut cfg = config(100, 1_000);
    cfg.prefix_caching = true;
    let mut b = Bench::new(cfg);
    b.add(50, 2, (32, 7));
    b.step();
    let again = b.add(50, 2, (32, 7));
    let (chunks, _) = b.step();
    // The 32 prefix tokens (2 whole blocks) come from the cache: 18 computed.
    assert!(chunks.contains(&(again, 18)), "{chunks:?}");
    assert_eq!(b.metrics.prefix_cache_hit_tokens, 32);
}

#[test]
fn reserving_output_kv_admits_only_what_its_whole_life_fits() {
    let mut cfg = config(10, 1_000);
    cfg.reserve_output_kv = true;
    let mut b = Bench::new(cfg);
    // Each needs 1 block for its prompt, 6 for its life (16 + 80 tokens): only one fits.
    let a = b.add(16, 80, (0, 0));
    let c = b.add(16, 80, (0, 0));
    assert_eq!(b.step().0, vec![(a, 16)]);
    assert_eq!((b.replica.used_blocks, b.replica.reserved_blocks), (1, 5));
    assert_eq!(b.replica.waiting.front(), Some(&c));
    // Without the policy both are admitted at once.
    let mut b = Bench::new(config(10, 1_000));
    let a = b.add(16, 80, (0, 0));
    let c = b.add(16, 80, (0, 0));
    assert_eq!(b.step().0, vec![(a, 16), (c, 16)]);
}

#[test]
fn a_request_that_gave_up_in_the_queue_is_dropped_at_the_next_schedule() {
    let mut b = Bench::new(config(10_000, 100));
    let slo = SloPolicy {
        queue_timeout_ns: Some(5_000_000),
        ..SloPolicy::default()
    };
    b.add(400, 2, (0, 0));
    let late = b.add(10, 2, (0, 0));
    b.step(); // the 400-token prompt holds the budget for 4 iterations (about 1.1 ms each)
    b.now = 6_000_000;
    b.replica
        .schedule(
            b.now,
            &mut b.slab,
            &mut b.metrics,
            &slo,
            &LinearStep,
            &Horizon::OFF,
        )
        .expect("the long prompt goes on");
    assert_eq!(b.metrics.timed_out, 1);
    assert!(!b.replica.waiting.contains(&late));
    assert_eq!(b.replica.take_departed(), 1);
}

impl Bench {
    /// Queues a request of `input` prompt tokens and `output` output tokens whose prompt's
    /// 16-token blocks are named `ids`; returns its id.
    fn add_ids(&mut self, input: u32, output: u32, ids: &[u64]) -> u32 {
        let spec = RequestSpec {
            arrival_ns: self.now,
            input_tokens: input,
            output_tokens: output,
            prefix_group: NO_PREFIX_GROUP,
            prefix_tokens: 0,
            blocks: Some(ids.to_vec().into()),
            block_id_tokens: 16,
            session: crate::workload::NO_SESSION,
            last_turn: false,
        };
        let id = self.slab.insert(Req::waiting(&spec, self.now));
        self.replica.enqueue(&mut self.slab, id, self.now);
        id
    }

    /// Steps until no request is left.
    fn drain(&mut self) {
        while self.replica.outstanding() > 0 {
            self.step();
        }
    }
}

#[test]
fn a_cpu_tier_hit_is_loaded_for_its_transfer_time_instead_of_computed() {
    // A GPU cache of 8 blocks of 16 tokens; a CPU tier of 100 blocks behind a link that
    // moves one block per ms.
    let mut cfg = config(8, 256);
    cfg.prefix_caching = true;
    cfg.offload = Some(OffloadConfig {
        cpu_blocks: 100,
        block_bytes_per_gpu: 1e6,
        bandwidth_bytes_per_s: 1e9,
        latency_ns: 0,
    });
    let mut b = Bench::new(cfg);
    b.add_ids(64, 2, &[1, 2, 3, 4]);
    b.drain();
    // Another prompt fills the GPU cache: the first one's blocks leave it (tail first), the
    // CPU tier keeps them (stored when computed).
    b.add_ids(96, 1, &[10, 11, 12, 13, 14, 15]);
    b.drain();
    let before = b.replica.content_tokens;
    b.add_ids(80, 2, &[1, 2, 3, 4, 5]);
    let start = b.now;
    let (chunks, _) = b.step();
    let dur = b.now - start;
    let t = b.replica.content_tokens;
    let (hit, cpu) = (t.hit - before.hit, t.cpu_hit - before.cpu_hit);
    // Four whole blocks may be served (one token is always computed): all of them, by one
    // tier or the other, and some from the CPU tier.
    assert_eq!(hit, 64);
    assert!(cpu > 0, "{t:?}");
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].1, 16);
    // The iteration: 1 ms + 1 us per computed token, plus 1 ms per block loaded.
    assert_eq!(dur, 1_000_000 + 1_000 * 16 + cpu / 16 * 1_000_000);
    b.drain();
    b.replica.check_kv(&b.slab).expect("INV-3 and INV-10");
}

/// Planning ahead (`SchedulerConfig::plans_ahead`, vLLM's asynchronous scheduling): the
/// iteration after k is planned when k starts, so a request queued while k runs waits for
/// the iteration after that one; into an idle replica, or one that would otherwise idle, it
/// goes at once.
#[test]
fn planning_ahead_a_request_queued_during_an_iteration_skips_the_one_already_planned() {
    let mut cfg = config(10_000, 1_000);
    cfg.plans_ahead = true;
    let mut b = Bench::new(cfg);
    let a = b.add(10, 50, (0, 0));
    assert_eq!(b.step().0, vec![(a, 10)], "an idle replica admits at once");
    let late = b.add(10, 5, (0, 0));
    assert_eq!(b.step(), (vec![], 1), "planned before `late` was queued");
    assert_eq!(b.step(), (vec![(late, 10)], 1));
    // Without planning ahead it joins the next iteration.
    let mut b = Bench::new(config(10_000, 1_000));
    b.add(10, 50, (0, 0));
    b.step();
    let late = b.add(10, 5, (0, 0));
    assert_eq!(b.step(), (vec![(late, 10)], 1));
    // Planning ahead, an iteration with nothing else to run takes what arrived.
    let mut cfg = config(10_000, 1_000);
    cfg.plans_ahead = true;
    let mut b = Bench::new(cfg);
    b.add(10, 1, (0, 0));
    b.step();
    let late = b.add(10, 5, (0, 0));
    assert_eq!(b.step(), (vec![(late, 10)], 0));
}
