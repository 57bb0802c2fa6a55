//! A replica's part in disaggregated serving (docs/disaggregation.md).
//!
//! Prefill side: a prefill-only replica hands each finished prompt off instead of decoding it.
//! The request leaves the running list (its seat is free) but its KV blocks stay held until
//! the decode side has read them, as vLLM's NIXL connector does.
//!
//! Decode side: transfers routed here queue FIFO until the replica has a free seat and the KV
//! blocks for the whole prompt (the pull model: the decode side allocates, then reads); the
//! blocks are taken when the transfer starts. When the KV has landed the request emits its
//! first token and joins the decode set at the next iteration boundary.

use std::collections::VecDeque;

use super::{div_ceil, Replica};
use crate::metrics::{Metrics, TimeSeries};
use crate::sim::request::{Phase, Slab, NONE, NO_TIME};
use crate::sim::SloPolicy;

/// A replica's disaggregation state (all zero and off for a colocated replica).
#[derive(Debug, Default)]
pub struct Transfers {
    /// Prefill-only: finished prompts are handed off rather than decoded.
    pub prefill_only: bool,
    /// Decode side: requests routed here whose KV has not landed (queued or on the link).
    pub incoming: u64,
    /// Decode side: requests waiting for a seat and KV blocks, FIFO.
    queued: VecDeque<u32>,
    /// Decode side: KV blocks the queued requests will need, blocks.
    pub queued_blocks: u64,
    /// Decode side: seats held by transfers on the link.
    seats: u32,
    /// Prefill side: prompts finished since the cluster last asked.
    outbox: Vec<u32>,
    /// Prefill side: requests handed off whose KV blocks are still held here.
    pub held: u64,
}

impl Transfers {
    /// Decode side: the transfer at the head of the queue, if any.
    pub(super) fn queued_front(&self) -> Option<&u32> {
        self.queued.front()
    }
}

/// The KV blocks a request's prompt needs on the decode side, and its reservation there
/// (the whole life's blocks under the output-reservation policy, else 0); `slots`: the
/// speculative slots a decoding request holds beyond its tokens.
fn decode_blocks(
    prefill_len: u32,
    output: u32,
    block: u64,
    reserve_output: bool,
    slots: u64,
) -> (u64, u64) {
    let blocks = div_ceil(prefill_len as u64 + slots, block);
    let reserve = if reserve_output {
        div_ceil(prefill_len as u64 + output as u64 + slots, block).max(blocks)
    } else {
        0
    };
    (blocks, reserve)
}

impl Replica {
    /// Makes this replica prefill-only (the prefill pool of a disaggregated deployment).
    pub fn set_prefill_only(&mut self) {
        self.transfers.prefill_only = true;
    }

    /// Prefill side: hands a finished prompt off. It leaves the running list; its blocks stay.
    pub(super) fn hand_off(&mut self, id: u32, mut r: crate::sim::request::Req, slab: &mut Slab) {
        self.run_unlink(slab, id);
        r.phase = Phase::Transferring;
        r.prev = NONE;
        r.next = NONE;
        *slab.get_mut(id) = r;
        self.transfers.outbox.push(id);
        self.transfers.held += 1;
    }

    /// Prefill side: moves the prompts handed off since the last call into `into`.
    pub fn take_handoffs(&mut self, into: &mut Vec<u32>) {
        into.append(&mut self.transfers.outbox);
    }

    /// Prefill side: when the iteration that finished the latest hand-offs started, ns.
    pub fn iteration_start_ns(&self) -> u64 {
        self.cur_start_ns
    }

    /// Prefill side: frees the KV blocks of a handed-off request (its transfer is done, or
    /// its client gave up).
    pub fn release_handed_off(&mut self, id: u32, slab: &mut Slab, now: u64) {
        let mut r = slab.get(id).clone();
        self.release(&mut r, now);
        *slab.get_mut(id) = r;
        self.transfers.held -= 1;
    }

    /// Decode side: queues the transfer of request `id` here.
    pub fn offer(&mut self, id: u32, slab: &Slab) {
        let r = slab.get(id);
        let (blocks, reserve) = decode_blocks(
            r.prefill_len,
            r.output,
            self.block(),
            self.cfg.reserve_output_kv,
            self.spec_slots(),
        );
        self.transfers.queued.push_back(id);
        self.transfers.queued_blocks += blocks.max(reserve);
        self.transfers.incoming += 1;
    }

    /// Decode side: whether [`Replica::admit_transfers`] would start or drop a queued
    /// transfer now. Inside a fast-forwarded run the blocks in use are those of the run's
    /// start, never more than the iteration in flight holds, so a `false` then holds for the
    /// replica as it is now too (seats and time-outs do not depend on the run).
    pub fn transfer_ready(&self, slab: &Slab, now: u64, slo: &SloPolicy) -> bool {
        let Some(&id) = self.transfers.queued.front() else {
            return false;
        };
        let r = slab.get(id);
        let (blocks, reserve) = decode_blocks(
            r.prefill_len,
            r.output,
            self.block(),
            self.cfg.reserve_output_kv,
            self.spec_slots(),
        );
        Self::timed_out(r, now, slo)
            || (self.running + self.transfers.seats < self.cfg.max_num_seqs
                && self.available_blocks() >= blocks.max(reserve))
    }

    /// Decode side: starts the queued transfers that have a seat and their blocks, in order
    /// (their ids into `started`); drops those whose clients gave up (into `timed_out`).
    pub fn admit_transfers(
        &mut self,
        slab: &Slab,
        now: u64,
        slo: &SloPolicy,
        started: &mut Vec<u32>,
        timed_out: &mut Vec<u32>,
    ) {
        let b = self.block();
        while let Some(&id) = self.transfers.queued.front() {
            let r = slab.get(id);
            let (blocks, reserve) = decode_blocks(
                r.prefill_len,
                r.output,
                b,
                self.cfg.reserve_output_kv,
                self.spec_slots(),
            );
            if Self::timed_out(r, now, slo) {
                self.transfers.queued.pop_front();
                self.transfers.queued_blocks -= blocks.max(reserve);
                self.transfers.incoming -= 1;
                timed_out.push(id);
                continue;
            }
            if self.running + self.transfers.seats >= self.cfg.max_num_seqs
                || self.available_blocks() < blocks.max(reserve)
            {
                break;
            }
            self.transfers.queued.pop_front();
            self.transfers.queued_blocks -= blocks.max(reserve);
            if reserve > 0 {
                self.reserved_blocks += reserve - blocks;
                self.allocate_reserved(blocks);
            } else {
                self.allocate(blocks);
            }
            self.transfers.seats += 1;
            started.push(id);
        }
    }

    /// Decode side: request `id`'s KV has landed at `now`: it emits its first token and joins
    /// the decode set at the next iteration boundary (or completes, if that was its only one).
    pub fn land(
        &mut self,
        id: u32,
        now: u64,
        slab: &mut Slab,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
        slo: &SloPolicy,
    ) {
        self.transfers.seats -= 1;
        self.transfers.incoming -= 1;
        let b = self.block();
        let mut r = slab.get(id).clone();
        let (blocks, reserve) = decode_blocks(
            r.prefill_len,
            r.output,
            b,
            self.cfg.reserve_output_kv,
            self.spec_slots(),
        );
        r.own_blocks = blocks as u32;
        r.reserve = reserve as u32;
        r.shared_blocks = 0;
        r.computed = r.prefill_len;
        if r.first_token_ns == NO_TIME {
            r.first_token_ns = now;
        }
        r.last_token_ns = now;
        r.generated += 1;
        metrics.generated_tokens += 1;
        *slab.get_mut(id) = r;
        self.run_push_back(slab, id);
        let r = slab.get(id).clone();
        if r.generated >= r.output {
            self.complete(id, now, slab, metrics, ts, slo);
            return;
        }
        // Joins at the next iteration boundary. No shared blocks on this side: decode-side
        // prefix reuse is not modelled, so the prefix tallies are untouched.
        let dec_iter0 = if self.busy { self.iter + 1 } else { self.iter };
        self.enter_decode(id, r, dec_iter0, slab);
    }

    /// Prefill side: requests handed off whose KV blocks are still held here.
    pub fn handed_off(&self) -> u64 {
        self.transfers.held
    }

    /// Decode side: seats held by transfers on the link or landing.
    pub(super) fn transfer_seats(&self) -> u32 {
        self.transfers.seats
    }

    /// Decode side: requests routed here whose KV has not landed.
    pub fn incoming(&self) -> u64 {
        self.transfers.incoming
    }

    /// KV blocks held by requests: in use (cached prefixes no request uses left out) plus
    /// reserved; 0 once every request has left.
    pub fn held_blocks(&self) -> u64 {
        self.used_blocks - self.evictable_blocks + self.reserved_blocks
    }
}
