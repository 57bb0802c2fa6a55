//! The step-time contract: what the simulator asks of a step-time model, and what its
//! fast-forward of decode-only runs may assume.
//!
//! The simulator (src/sim) depends on the [`StepTime`] trait and on the two value types
//! it speaks in, [`BatchShape`] (what one engine iteration computes) and [`DecodeStep`] (the
//! time of a decode-only iteration as a function of its total context), not on how a model
//! computes them. `StepTimeModel` (src/roofline.rs) is the implementation servesim ships;
//! tests/step_time_contract.rs checks it against the contract below over random shapes.
//!
//! # The contract
//!
//! For every [`BatchShape`] `b` the simulator passes (`b.tokens() > 0`; decode context at
//! least the decoding sequences; shared-prefix tallies within the decode context):
//!
//! - **S1 (integer time).** [`StepTime::step_ns`] is the iteration's duration in whole
//!   nanoseconds, at least 1, or an error ([`BeyondClock`]) when that time is not finite or
//!   lies beyond the simulator's clock ([`crate::clock`]), never a saturated value; a pure
//!   function of `b` (same shape, same time or same error: runs are reproducible bit for bit).
//!   The simulator ends a run whose iteration errs, saying why.
//! - **S2 (one decode path).** For a decode-only `b` (`b.prefill_tokens == 0`),
//!   `step_ns(b) == decode_step(b)?.ns_at(b.decode_context_tokens)` (an error on one side is
//!   an error on the other): the simulator times such
//!   iterations with [`DecodeStep`] alone, and the fast-forward and the iteration-by-iteration
//!   oracle agree because both use it.
//! - **S3 (what the decode step depends on).** `decode_step(b)` depends on the batch's sequence
//!   count and shared-prefix tallies, not on `b.decode_context_tokens`; the simulator caches it
//!   per (sequences, prefix tallies) and evaluates it at each iteration's total context.
//! - **S4 (piecewise linear, never shrinking).** `ns_at(c) = max(1, floor(max_j(a_j + s_j c) /
//!   2^24))` (an error past the clock's edge) over at most four lines with integer intercepts and slopes `s_j >= 0` (2^-24 ns
//!   units): non-decreasing in the total context `c`. Over a run of a fixed batch of `B`
//!   decodes, iteration `k` has context `c0 + kB`, so its time is linear in `k` (before the
//!   floor) between breakpoints, the iterations at which a steeper line overtakes the active
//!   one (the roofline switching from the host to the GPU, or from compute to memory).
//!   [`DecodeStep::times`] walks a run line by line and finds each breakpoint by an integer
//!   division; it equals `ns_at` at every iteration where [`DecodeStep::exact_through`] holds
//!   for the run's last context.
//!
//! What the fast-forward (src/sim/replica/fast_forward.rs) assumes, and nothing more: S2
//! (decode-only iterations are timed by one integer function), S3 (the function is fixed
//! while the batch is), S4 (iteration times never shrink within a run, so a run whose second
//! iteration would end past a horizon is a run of one, and the time histogram's buckets are
//! crossed in order). A model that breaks one of these breaks the oracle test
//! (tests/fast_forward.rs), not just a figure.

use serde::Serialize;

use crate::clock::{self, BeyondClock};

/// A step-time model: how long one engine iteration takes (see the module's contract).
pub trait StepTime {
    /// Duration of one iteration of `batch`, ns (S1: at least 1 for a non-empty batch; 0 for
    /// an empty one); an error when it is beyond the clock.
    fn step_ns(&self, batch: &BatchShape) -> Result<u64, BeyondClock>;

    /// The time of decode-only iterations of batches like `batch` (its sequence count, padding
    /// and shared-prefix tallies; its context is ignored) as a function of the total context
    /// (S2-S4); an error when one of its lines is not a time the clock holds. Precondition:
    /// `batch.prefill_tokens == 0`.
    fn decode_step(&self, batch: &BatchShape) -> Result<DecodeStep, BeyondClock>;
}

/// The shape of one iteration's batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BatchShape {
    /// Requests decoding one token each.
    pub decode_seqs: u32,
    /// Sum over decoding requests of the context each attends to (tokens).
    pub decode_context_tokens: u64,
    /// Of `decode_context_tokens`: repeat reads of shared-prefix KV blocks, i.e. tokens of a
    /// cached prefix that more than one decoding request attends to, counted once per request
    /// after the first. Their KV is the same memory; the repeats hit L2 when the prefix fits.
    pub decode_prefix_repeat_tokens: u64,
    /// Distinct shared-prefix tokens read by the decoding requests (each cached prefix once).
    pub decode_prefix_distinct_tokens: u64,
    /// Prompt tokens prefilled in this iteration (all chunks).
    pub prefill_tokens: u32,
    /// Requests with a prefill chunk in this iteration.
    pub prefill_seqs: u32,
    /// Causal-attention work of the prefill chunks: sum of `chunk x prior + chunk^2 / 2`
    /// (token^2 units).
    pub prefill_attention_units: f64,
    /// Requests whose logits are computed (decodes plus prefills that finish their prompt).
    pub sampled_seqs: u32,
}

impl BatchShape {
    /// A pure decode batch of `batch` requests each attending to `context` tokens.
    pub fn decode(batch: u32, context: u64) -> Self {
        BatchShape {
            decode_seqs: batch,
            decode_context_tokens: batch as u64 * context,
            sampled_seqs: batch,
            ..Default::default()
        }
    }

    /// Records that the decoding requests share cached prefixes: `per_request` prefix tokens
    /// summed over the decoding requests that use one, `distinct` tokens over the prefixes.
    pub fn with_shared_prefixes(mut self, per_request: u64, distinct: u64) -> Self {
        debug_assert!(distinct <= per_request && per_request <= self.decode_context_tokens);
        self.decode_prefix_repeat_tokens = per_request.saturating_sub(distinct);
        self.decode_prefix_distinct_tokens = distinct;
        self
    }

    /// A pure decode batch of `batch` requests attending to `total_context` tokens in all.
    pub fn decode_total(batch: u32, total_context: u64) -> Self {
        BatchShape {
            decode_seqs: batch,
            decode_context_tokens: total_context,
            sampled_seqs: batch,
            ..Default::default()
        }
    }

    /// Adds one prefill chunk of `chunk` tokens after `prior` already-cached tokens.
    pub fn add_prefill(&mut self, chunk: u32, prior: u64, finishes_prompt: bool) {
        let c = chunk as f64;
        self.prefill_tokens += chunk;
        self.prefill_seqs += 1;
        self.prefill_attention_units += c * prior as f64 + c * c / 2.0;
        if finishes_prompt {
            self.sampled_seqs += 1;
        }
    }

    /// Tokens processed by the weight GEMMs.
    pub fn tokens(&self) -> u32 {
        self.decode_seqs + self.prefill_tokens
    }
}

/// Fraction bits of [`DecodeStep`]'s fixed-point lines (units of 2^-24 ns).
const FRACTION_BITS: u32 = 24;

/// The time of a decode-only iteration of a fixed batch as a function of its total context
/// `c` (tokens): `floor(max_j(a_j + s_j c) / 2^24)` ns with integer intercepts `a_j` (rounding
/// included) and slopes `s_j` in units of 2^-24 ns (the contract's S4). Being integer, a run of
/// iterations whose context grows by the batch size each time can be timed and summed exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeStep {
    /// (intercept, slope per context token), 2^-24 ns; slopes are >= 0.
    lines: [(i128, i128); 4],
}

impl DecodeStep {
    /// The envelope of `(intercept_s, slope_s_per_token)` lines, seconds and seconds per
    /// context token, each multiplied by `scale`; intercepts are rounded to the nearest ns
    /// (the half unit added), negative slopes count as 0. Every intercept must be a time the
    /// clock holds (its magnitude: a line may start below zero), and every slope at most 2^38
    /// ns (275 s) per context token, so that no time of the envelope at any context overflows
    /// the fixed-point arithmetic; otherwise the error says which time is beyond the clock.
    pub fn new(lines_s: &[(f64, f64); 4], scale: f64) -> Result<Self, BeyondClock> {
        let unit = scale * 1e9 * (1u64 << FRACTION_BITS) as f64;
        let fixed = |v: f64| -> Result<i128, BeyondClock> {
            // The clock's rule first: a finite time within its range.
            clock::secs_to_ns(v.abs() * scale)?;
            let x = v * unit;
            Ok(if x.abs() < 9e18 {
                // The common case, without the slow float-to-i128 conversion (truncated: a
                // 2^-24 ns unit is far below the 1 ns the step is rounded to).
                x as i64 as i128
            } else {
                x.round() as i128
            })
        };
        let half = 1i128 << (FRACTION_BITS - 1);
        let max_slope = (1i128 << 62) - 1;
        let mut lines = [(0, 0); 4];
        for (l, &(a, s)) in lines.iter_mut().zip(lines_s.iter()) {
            let slope = fixed(s)?.max(0);
            if slope > max_slope {
                return Err(BeyondClock { seconds: s * scale });
            }
            *l = (fixed(a)? + half, slope);
        }
        Ok(DecodeStep { lines })
    }

    /// The envelope at total context `ctx`, 2^-24 ns.
    #[inline]
    fn fixed_at(&self, ctx: u64) -> i128 {
        let c = ctx as i128;
        self.lines
            .iter()
            .map(|&(a, s)| a + s * c)
            .max()
            .unwrap_or(0)
    }

    /// The iteration time at total context `ctx`, ns (at least 1); an error when it lies
    /// beyond the clock.
    #[inline]
    pub fn ns_at(&self, ctx: u64) -> Result<u64, BeyondClock> {
        let x = self.fixed_at(ctx) >> FRACTION_BITS;
        if x > clock::MAX_NS as i128 {
            return Err(BeyondClock {
                seconds: x as f64 * 1e-9,
            });
        }
        Ok(x.max(1) as u64)
    }

    /// Whether [`DecodeStep::times`] is exact for every total context up to `ctx_max` (its
    /// 64-bit fixed-point sums cannot overflow there): true for any step time below 2^38 ns
    /// (about 275 s).
    pub fn exact_through(&self, ctx_max: u64) -> bool {
        self.fixed_at(ctx_max) < (1i128 << 62)
    }

    /// The times of the iterations of a run of `batch` decodes whose iteration `k` has total
    /// context `ctx0 + k x batch`, from iteration `first` on: `next_ns` gives
    /// `ns_at(ctx0 + k x batch)` for k = first, first + 1, ... (S4), in amortised O(1) each.
    /// Precondition: `exact_through` the run's last context.
    pub fn times(&self, ctx0: u64, batch: u64, first: u64) -> DecodeTimes<'_> {
        let mut t = DecodeTimes {
            step: self,
            ctx0,
            batch,
            m: first,
            x: 0,
            d: 0,
            switch_at: first,
        };
        t.segment();
        t
    }
}

/// The iteration times of a run, one after the other, in integers ([`DecodeStep::times`]):
/// the active line of the envelope is stepped by the batch size each iteration and found
/// again where another line overtakes it (the step function's breakpoints).
#[derive(Debug, Clone)]
pub struct DecodeTimes<'a> {
    step: &'a DecodeStep,
    ctx0: u64,
    batch: u64,
    /// Index of the next iteration.
    m: u64,
    /// Its time on the active line, 2^-24 ns.
    x: u64,
    /// Growth of the active line per iteration, 2^-24 ns.
    d: u64,
    /// Iteration at which the active line must be found again.
    switch_at: u64,
}

impl DecodeTimes<'_> {
    /// Finds the line that is the maximum at iteration `m` and the first iteration at which a
    /// steeper line exceeds it.
    fn segment(&mut self) {
        let c = (self.ctx0 + self.batch * self.m) as i128;
        let lines = &self.step.lines;
        let (mut best, mut best_v) = (0, lines[0].0 + lines[0].1 * c);
        for (j, &(a, s)) in lines.iter().enumerate().skip(1) {
            let v = a + s * c;
            if v > best_v || (v == best_v && s > lines[best].1) {
                best = j;
                best_v = v;
            }
        }
        let slope = lines[best].1;
        let mut until = u64::MAX;
        for &(a, s) in lines {
            if s > slope {
                let gap = best_v - (a + s * c);
                let per = (s - slope) * self.batch as i128;
                let q = if gap <= u64::MAX as i128 && per <= u64::MAX as i128 {
                    // Both non-negative: the cheap 64-bit division.
                    ((gap as u64) / (per as u64)) as i128
                } else {
                    gap / per
                };
                let t = (q + 1).min(u64::MAX as i128) as u64;
                until = until.min(self.m.saturating_add(t));
            }
        }
        // The caller checked that the run's times fit (`exact_through`).
        self.x = best_v as u64;
        self.d = (slope * self.batch as i128) as u64;
        self.switch_at = until;
    }

    /// The active line from the next iteration on, for a caller that steps it itself: the
    /// next iteration's time on it and its growth per iteration (both 2^-24 ns; the time in ns
    /// is [`DecodeTimes::ns_of`]), and how many iterations (at least 1) stay on it. Hand the
    /// result back with [`DecodeTimes::skip`].
    #[inline]
    pub fn line(&mut self) -> (u64, u64, u64) {
        if self.m == self.switch_at {
            self.segment();
        }
        (self.x, self.d, self.switch_at - self.m)
    }

    /// The iteration time, ns (at least 1), of a fixed-point time from [`DecodeTimes::line`].
    #[inline]
    pub fn ns_of(x: u64) -> u64 {
        (x >> FRACTION_BITS).max(1)
    }

    /// [`DecodeTimes::ns_of`] for a fixed-point time of at least [`DecodeTimes::ONE_NS`].
    #[inline]
    pub fn ns_of_at_least_one(x: u64) -> u64 {
        debug_assert!(x >= Self::ONE_NS);
        x >> FRACTION_BITS
    }

    /// One nanosecond in the fixed point of [`DecodeTimes::line`].
    pub const ONE_NS: u64 = 1 << FRACTION_BITS;

    /// Moves past `k` iterations of the active line, the next one's time now being `x`
    /// (= the `x` of [`DecodeTimes::line`] plus `k` times its growth). Precondition: `k` is at
    /// most the count `line` just returned.
    #[inline]
    pub fn skip(&mut self, k: u64, x: u64) {
        debug_assert_eq!(x, self.x + k * self.d);
        debug_assert!(self.m + k <= self.switch_at);
        self.x = x;
        self.m += k;
    }

    /// The time of the next iteration, ns (at least 1).
    #[inline]
    pub fn next_ns(&mut self) -> u64 {
        if self.m == self.switch_at {
            self.segment();
        }
        let ns = self.x >> FRACTION_BITS;
        self.x += self.d;
        self.m += 1;
        ns.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S4 on hand-made envelopes: the run walk equals the envelope at every iteration, across
    /// breakpoints (a flat host line overtaken by two GPU lines of different slopes).
    #[test]
    fn the_run_walk_equals_the_envelope_across_breakpoints() {
        let step = DecodeStep::new(
            &[
                (2e-3, 3e-8), // memory-bound line
                (1e-3, 9e-8), // a steeper one that overtakes it
                (8e-3, 0.0),  // the host floor
                (1e-9, 0.0),  // at least 1 ns
            ],
            1.0,
        )
        .unwrap();
        for (ctx0, batch) in [(0, 1), (100, 7), (5_000, 64), (0, 4096)] {
            let mut times = step.times(ctx0, batch, 0);
            let mut prev = 0;
            for k in 0..20_000u64 {
                let ns = times.next_ns();
                assert_eq!(
                    ns,
                    step.ns_at(ctx0 + k * batch).unwrap(),
                    "k {k} ctx0 {ctx0} batch {batch}"
                );
                assert!(ns >= prev, "times never shrink");
                prev = ns;
            }
        }
        // The three regimes are all visited: the floor, then each GPU line.
        assert_eq!(step.ns_at(0), Ok(8_000_000));
        assert!(step.ns_at(200_000).unwrap() > 8_000_000);
        assert_eq!(step.ns_at(1_000_000), Ok(91_000_000));
    }

    #[test]
    fn a_walk_may_start_inside_a_run() {
        let step =
            DecodeStep::new(&[(1e-3, 1e-8), (0.0, 5e-8), (2e-3, 0.0), (1e-9, 0.0)], 1.3).unwrap();
        let mut from_0 = step.times(10, 3, 0);
        let all: Vec<u64> = (0..500).map(|_| from_0.next_ns()).collect();
        let mut from_200 = step.times(10, 3, 200);
        for &ns in &all[200..] {
            assert_eq!(from_200.next_ns(), ns);
        }
    }

    /// S1 and S4 under the clock's rule: a line that is not a time the clock holds, or an
    /// envelope evaluated past the clock's edge, is an error, never a saturated time.
    #[test]
    fn times_beyond_the_clock_are_errors() {
        let floor = (1e-9, 0.0);
        for bad in [f64::NAN, f64::INFINITY, 1e300, 5e9] {
            assert!(DecodeStep::new(&[(bad, 0.0), floor, floor, floor], 1.0).is_err());
            assert!(DecodeStep::new(&[(1e-3, bad), floor, floor, floor], 1.0).is_err());
        }
        // A slope over 2^38 ns per context token could overflow the fixed point.
        assert!(DecodeStep::new(&[(1e-3, 300.0), floor, floor, floor], 1.0).is_err());
        // A fine envelope whose time at a huge context lies past the clock.
        let step = DecodeStep::new(&[(1e-3, 1.0), floor, floor, floor], 1.0).unwrap();
        assert_eq!(step.ns_at(1), Ok(1_001_000_000));
        let e = step.ns_at(u64::MAX / 2).unwrap_err();
        assert!(e.to_string().contains("years"), "{e}");
    }
}
