//! Fast-forward of decode-only runs (issue #13).
//!
//! Between two events that change a replica's batch (an arrival or other control event, a
//! completion, an admission or prefill chunk, a KV block the batch cannot take from free
//! blocks, a queue time-out), every iteration decodes the same requests, each one token longer
//! than the last time. The step time is then an exact integer function of the total context
//! ([`DecodeStep`]), the blocks each iteration takes repeat with the block phase, and nothing
//! else happens: the replica plans the whole run when it schedules its first iteration, the
//! event loop sees one event at the end of the run, and the run's iterations are booked in bulk
//! (histogram buckets crossed, time-weighted sums) in one tight integer loop. A control event
//! that falls inside a run (one pushed after the run was planned) cuts it: the iterations that
//! ended by then are booked and the one in flight becomes an ordinary iteration. The result is
//! the same, figure for figure, as timing each iteration on its own (`limits.fast_forward =
//! false`, the oracle of tests/fast_forward.rs).

use std::cmp::Reverse;

use super::Replica;
use crate::metrics::{LatencyHistogram, Metrics, TimeSeries};
use crate::sim::SloPolicy;
use crate::step_time::{BatchShape, DecodeStep, DecodeTimes, StepTime};

use super::super::request::{Slab, NO_TIME};

/// How far the event loop lets a replica fast-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// No fast-forwarded iteration may end after this time (the next control event the loop
    /// knows of, or the simulated-time limit), ns; 0 turns the fast-forward off.
    pub until_ns: u64,
    /// Most iterations one run may hold (what is left of the event limit).
    pub max_iterations: u64,
    /// The time series' interval length now, ns (it only grows, by doubling).
    pub series_interval_ns: u64,
}

impl Horizon {
    /// No fast-forward: every iteration is its own event.
    pub const OFF: Horizon = Horizon {
        until_ns: 0,
        max_iterations: 1,
        series_interval_ns: 1,
    };
}

/// A planned run of decode-only iterations of one batch.
#[derive(Debug, Clone)]
pub(super) struct Run {
    /// Index of the run's first iteration.
    first_iter: u64,
    /// Iterations in the run (at least 2); the run's event is the end of the last one.
    len: u64,
    /// Start of the first iteration, ns.
    start_ns: u64,
    /// End of the last iteration, ns.
    end_ns: u64,
    /// Total context of the first iteration, tokens.
    ctx0: u64,
    /// Blocks in use while the first iteration runs.
    used0: u64,
    /// The deadline it stops at (a client giving up), ns.
    deadline_ns: u64,
}

/// The bookings of a run's iterations, gathered in one pass over them: what each iteration's
/// end would fold into the metrics and the time series, grouped by histogram bucket, KV
/// permille, time-series interval and blocks in use. The iterations of a run follow each other
/// without a gap, so a group of consecutive iterations is known from where it starts and
/// where the next begins (its count from the indices, its summed time from the start times):
/// the walk does no work for an iteration that starts no new group.
#[derive(Debug, Clone, Default)]
pub(super) struct Book {
    /// Iterations booked.
    iterations: u64,
    /// Their summed duration, ns.
    busy_ns: u64,
    /// Sum of blocks in use x duration, block ns.
    kv_block_ns: u128,
    /// Blocks in use during the last iteration booked.
    last_used: u64,
    /// Blocks in use after the walk (the allocation of the iteration it stopped at included).
    used: u64,
    /// Iteration times by histogram bucket.
    itl: ItlRows,
    /// Iterations by KV utilisation in permille: (permille, iterations).
    permille: Vec<(u64, u64)>,
    /// By time-series interval: (first start, summed duration, iterations, block ns).
    series: Vec<(u64, u64, u64, u128)>,
    /// KV capacity, blocks.
    kv_blocks: u64,
    /// The iteration time of the run in flight as a function of the total context.
    step: Option<DecodeStep>,
    /// Where the KV permille steps up: entry p is the fewest blocks in use whose permille is
    /// at least p, for p = 0..=1001 (worked out once per KV capacity; empty until needed).
    permille_from: Vec<u64>,
}

/// `x as f64` (the same rounding), through the cheaper 64-bit conversion where `x` fits.
#[inline]
fn f64_of(x: u128) -> f64 {
    match u64::try_from(x) {
        Ok(x) => x as f64,
        Err(_) => x as f64,
    }
}

/// Iteration times by histogram bucket: (smallest, iterations, sum, largest), ns.
type ItlRows = Vec<(u64, u64, u64, u64)>;

/// KV utilisation in permille as an iteration's end computes it.
#[inline]
fn permille(used: u64, kv_blocks: u64) -> u64 {
    crate::numeric::round((used as f64 / kv_blocks.max(1) as f64) * 1000.0) as u64
}

/// The table of [`Book::permille_step`] for a KV cache of `kv_blocks` blocks: entry p is the
/// fewest blocks whose [`permille`] is at least p, p = 0..=1001 (the rounding is monotone in
/// the blocks, so permille(u) is the largest p whose entry is at most u).
fn permille_steps(kv_blocks: u64) -> Vec<u64> {
    let kv = kv_blocks.max(1);
    let mut from = Vec::with_capacity(1002);
    from.push(0);
    for p in 1..=1001u64 {
        // Near (p - 0.5) / 1000 of the capacity; the float rounding is settled by stepping.
        let mut u = ((p as f64 - 0.5) * kv as f64 / 1000.0).ceil() as u64;
        u = u.max(from[from.len() - 1]);
        while u > from[from.len() - 1] && permille(u - 1, kv) >= p {
            u -= 1;
        }
        while permille(u, kv) < p {
            u += 1;
        }
        from.push(u);
    }
    from
}

impl Book {
    /// The permille of `used` blocks and the smallest block count above with a larger one.
    #[inline]
    fn permille_step(&mut self, used: u64) -> (u64, u64) {
        if self.permille_from.is_empty() {
            self.permille_from = permille_steps(self.kv_blocks);
        }
        let from = &self.permille_from;
        if used >= from[from.len() - 1] {
            // Beyond the table (more blocks in use than the capacity): the rounding itself.
            let p = permille(used, self.kv_blocks);
            let next = (used + 1..)
                .find(|&u| permille(u, self.kv_blocks) > p)
                .unwrap_or(u64::MAX);
            return (p, next);
        }
        // A guess within one of the permille, settled on the table.
        let kv = self.kv_blocks.max(1) as u128;
        let mut p = ((used as u128 * 1000 / kv) as usize).min(from.len() - 2);
        while from[p] > used {
            p -= 1;
        }
        while from[p + 1] <= used {
            p += 1;
        }
        (p as u64, from[p + 1])
    }

    /// Empties the book for a walk on a KV cache of `kv_blocks` blocks.
    fn clear(&mut self, kv_blocks: u64) {
        if kv_blocks != self.kv_blocks {
            self.permille_from.clear();
            self.kv_blocks = kv_blocks;
        }
        self.itl.clear();
        self.permille.clear();
        self.series.clear();
    }

    /// Folds the booked iterations of a batch of `batch` decodes, with `running` and
    /// `waiting` requests, into the metrics and the time series.
    fn apply(
        &self,
        batch: u64,
        running: u64,
        waiting: u64,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
    ) {
        let j = self.iterations;
        if j == 0 {
            return;
        }
        let kv = self.kv_blocks.max(1) as f64;
        for &(min, n, sum, max) in &self.itl {
            metrics
                .itl
                .record_bucket(min, n * batch, sum as u128 * batch as u128, max);
        }
        for &(p, n) in &self.permille {
            metrics.kv_permille_hist.record_repeating(p, n);
        }
        for &(start, dur, n, block_ns) in &self.series {
            ts.iterations(
                start,
                dur,
                n * batch,
                running,
                waiting,
                f64_of(block_ns) / kv,
            );
        }
        metrics.iterations += j;
        metrics.busy_ns += self.busy_ns as u128;
        metrics.batch_size.record(batch as f64, j as f64);
        metrics.batch_size_hist.record_repeating(batch, j);
        metrics.kv_utilization.record_sums(
            self.busy_ns as f64,
            f64_of(self.kv_block_ns) / kv,
            self.last_used as f64 / kv,
        );
        metrics.generated_tokens += batch * j;
    }
}

/// Where a walk over a run starts: iteration 0 at `start_ns`, lasting `dur_ns`.
struct WalkStart<'a> {
    first_iter: u64,
    start_ns: u64,
    dur_ns: u64,
    step: &'a DecodeStep,
    ctx0: u64,
    /// Blocks in use during iteration 0.
    used: u64,
    /// Most iterations the run may hold.
    max_len: u64,
    series_interval_ns: u64,
}

/// Where a walk stopped: the run's length, and the start and duration of its last iteration.
struct WalkEnd {
    len: u64,
    last_start_ns: u64,
    last_dur_ns: u64,
}

/// What ends a walk: the first iteration that starts at or after `start_before` (ns), ends
/// after `end_by` (ns), or would take the blocks in use past `cap` more than at the start.
/// Each is monotone over a run (start and end times grow, blocks taken only add up).
struct Limits {
    start_before: u64,
    end_by: u64,
    cap: u64,
}

/// The block phases (at most 64) at which an iteration of the batch takes a block, as bits;
/// 0 where the block cycle is longer (the walk then has no quiet stretches).
fn need_mask(phase_counts: &[u32]) -> u64 {
    if phase_counts.len() > 64 {
        return 0;
    }
    (phase_counts.iter().enumerate())
        .filter(|&(_, &c)| c > 0)
        .fold(0u64, |mask, (p, _)| mask | 1 << p)
}

/// How many consecutive iterations from block phase `p` on (of a cycle of `b` phases) take
/// no block, given the [`need_mask`] `mask` (non-zero; `b` <= 64).
#[inline]
fn quiet_from(mask: u64, p: usize, b: usize) -> u64 {
    // The cycle rotated to start at p: its first set bit is within b places.
    let rotated = if p == 0 {
        mask
    } else {
        (mask >> p) | (mask << (b - p))
    };
    rotated.trailing_zeros() as u64
}

/// Where a walk is: iteration `m` is the latest accepted, starting at `start` and lasting
/// `dur` (the one before lasted `prev_dur`), the block phase of the next is `phase`, and
/// iteration `m` took `last_need` blocks.
struct Cursor {
    m: u64,
    phase: usize,
    start: u64,
    dur: u64,
    prev_dur: u64,
    last_need: u64,
}

impl Cursor {
    /// Steps through the quiet stretch that follows: the iterations before the first one that
    /// takes a block (by the [`need_mask`] `mask` of a `b`-phase cycle), leaves the line of
    /// the step time, is the run's `max_len`-th, starts at or after `stop`, lasts more than
    /// `itl_top` or ends after `end_by` (ns); those go through the walk's full step.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn quiet(
        &mut self,
        steps: &mut DecodeTimes,
        (mask, b): (u64, usize),
        max_len: u64,
        stop: u64,
        itl_top: u64,
        end_by: u64,
    ) {
        let (mut x, d, on_line) = steps.line();
        // Times only grow on a line: from 1 ns on, the clamp to 1 ns is moot.
        if x < DecodeTimes::ONE_NS {
            return;
        }
        let k = quiet_from(mask, self.phase, b)
            .min(on_line)
            .min(max_len - self.m);
        // An iteration of at most `itl_top` starting before this ends by `end_by` (one that
        // starts later and still does is left to the full step).
        let stop = stop.min(end_by.saturating_sub(itl_top).saturating_add(1));
        let (mut s, mut t, mut p) = (self.start, self.dur, self.prev_dur);
        // Times only grow on a line: when the stretch's last iteration is within `itl_top`
        // and even `k` iterations of `itl_top` each start before `stop`, no check can stop
        // it, and the loop only sums (the common case: the checked loop below gives the same).
        let mut i = 0;
        if k > 0
            && DecodeTimes::ns_of_at_least_one(x + (k - 1) * d) <= itl_top
            && s.saturating_add(t)
                .saturating_add(k.saturating_mul(itl_top))
                < stop
        {
            for _ in 0..k {
                p = t;
                s += t;
                t = DecodeTimes::ns_of_at_least_one(x);
                x += d;
            }
            i = k;
        }
        while i < k {
            let next_start = s + t;
            let next_dur = DecodeTimes::ns_of_at_least_one(x);
            if next_start >= stop || next_dur > itl_top {
                break;
            }
            x += d;
            p = t;
            (s, t) = (next_start, next_dur);
            i += 1;
        }
        if i > 0 {
            steps.skip(i, x);
            (self.start, self.dur, self.prev_dur) = (s, t, p);
            self.last_need = 0;
            self.m += i;
            self.phase += i as usize;
            if self.phase >= b {
                self.phase -= b;
            }
        }
    }
}

/// The blocks a walk holds: in use, taken since the run's start, and held unchanged since
/// `since_ns` (the start of the iteration that last took one).
struct Held {
    used: u64,
    taken: u64,
    since_ns: u64,
}

/// What bounds a span ([`Cursor::span`]): the iteration count and the limits of the walk.
struct SpanBounds {
    /// Most iterations the run may hold.
    max_len: u64,
    /// No iteration of the span may start at or after this (the time-series interval's end,
    /// the deadline), ns.
    stop: u64,
    /// No iteration of the span may end after this, ns.
    end_by: u64,
    /// Most blocks the walk may take.
    cap: u64,
    /// Blocks in use from which the KV permille is larger than the open group's.
    next_pm: u64,
}

/// The open ITL bucket of a walk: from iteration `m`, starting at `t_ns`, the first lasting
/// `min_ns`; the bucket's top, ns.
struct ItlGroup {
    m: u64,
    t_ns: u64,
    min_ns: u64,
    top_ns: u64,
}

/// Where a span is: the cursor's fields as local variables, and the fixed-point time of
/// the next iteration on the line of the step time.
struct SpanState {
    m: u64,
    phase: usize,
    start: u64,
    dur: u64,
    prev_dur: u64,
    last_need: u64,
    x: u64,
}

impl SpanState {
    /// How many iterations from here none of the checks of the walk's full step can stop but
    /// the blocks taken and the bucket's top (`on_line` iterations left on the line): times
    /// only grow on a line, so the span ends before the first iteration that might last more
    /// than the bucket's top, or start too late even if every iteration lasted the top.
    #[inline(always)]
    fn reach(&self, on_line: u64, top: u64, bounds: &SpanBounds) -> u64 {
        let first_start = self.start + self.dur;
        // An iteration of at most `top` starting before this ends by `end_by`.
        let Some(latest_start) = bounds.end_by.checked_sub(top) else {
            return 0;
        };
        let stop = bounds.stop.min(latest_start.saturating_add(1));
        if first_start >= stop {
            return 0;
        }
        // Iteration j of the span starts by first_start + j top: before `stop` for these.
        let by_time = (stop - 1 - first_start) / top + 1;
        on_line.min(bounds.max_len - self.m).min(by_time)
    }

    /// Iterations from here whose time is within `top`: x + j d < (top + 1) 2^24.
    #[inline(always)]
    fn within_top(&self, d: u64, top: u64) -> u64 {
        match (top + 1).checked_mul(DecodeTimes::ONE_NS) {
            Some(lim) if self.x >= lim => 0,
            Some(lim) if d > 0 => (lim - 1 - self.x) / d + 1,
            _ => u64::MAX,
        }
    }

    /// Moves to the next iteration, `need` blocks taken by it; `d`, `b`: the line's growth
    /// and the block cycle's length.
    #[inline(always)]
    fn advance(&mut self, need: u64, d: u64, b: usize) {
        let next_start = self.start + self.dur;
        (self.prev_dur, self.start) = (self.dur, next_start);
        self.dur = DecodeTimes::ns_of_at_least_one(self.x);
        self.x += d;
        self.last_need = need;
        self.m += 1;
        self.phase += 1;
        if self.phase == b {
            self.phase = 0;
        }
    }

    /// Runs `n` iterations that take no block and close no group: only their times add up.
    #[inline(always)]
    fn quiet(&mut self, n: u64, d: u64, b: usize) {
        let (mut s, mut t, mut p, mut x) = (self.start, self.dur, self.prev_dur, self.x);
        for _ in 0..n {
            p = t;
            s += t;
            t = DecodeTimes::ns_of_at_least_one(x);
            x += d;
        }
        (self.start, self.dur, self.prev_dur, self.x) = (s, t, p, x);
        self.last_need = 0;
        self.m += n;
        self.phase += n as usize;
        if self.phase >= b {
            self.phase -= b;
        }
    }

    /// Takes the blocks of the next iteration (`need` > 0) if that keeps the walk within its
    /// cap and the open KV permille group; returns the block ns held until it starts.
    #[inline(always)]
    fn take(&self, need: u64, bounds: &SpanBounds, held: &mut Held) -> Option<u128> {
        if held.taken + need > bounds.cap || held.used + need >= bounds.next_pm {
            return None;
        }
        let start = self.start + self.dur;
        let block_ns = held.used as u128 * (start - held.since_ns) as u128;
        held.since_ns = start;
        held.used += need;
        held.taken += need;
        Some(block_ns)
    }
}

impl Cursor {
    /// Steps through the iterations that follow as long as the walk's full step would only
    /// take blocks or move to the next ITL bucket there: each iteration that takes a block
    /// moves the blocks held, one that starts a bucket books the open one into `itl_out`, and
    /// the quiet ones between only sum their times ([`SpanState`] has the bounds). The
    /// iteration it stops before goes through the full step. Returns the block ns of the
    /// blocks held up to the last block taken (from `held.since_ns` as it was).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn span(
        &mut self,
        steps: &mut DecodeTimes,
        counts: &[u32],
        (mask, b): (u64, usize),
        bounds: &SpanBounds,
        held: &mut Held,
        (itl, itl_out, itl_hist): (&mut ItlGroup, &mut ItlRows, &LatencyHistogram),
    ) -> u128 {
        let (x, d, on_line) = steps.line();
        // From 1 ns on the clamp to 1 ns is moot.
        if x < DecodeTimes::ONE_NS {
            return 0;
        }
        let mut st = SpanState {
            m: self.m,
            phase: self.phase,
            start: self.start,
            dur: self.dur,
            prev_dur: self.prev_dur,
            last_need: self.last_need,
            x,
        };
        let mut block_ns = 0u128;
        'legs: loop {
            let top = itl.top_ns.max(1);
            let reach = st.reach(on_line - (st.m - self.m), top, bounds);
            let within = st.within_top(d, top);
            let mut left = reach.min(within);
            while left > 0 {
                let q = quiet_from(mask, st.phase, b).min(left);
                if q > 0 {
                    st.quiet(q, d, b);
                    left -= q;
                    if left == 0 {
                        break;
                    }
                }
                // An iteration that takes blocks.
                let need = counts[st.phase] as u64;
                let Some(kv) = st.take(need, bounds, held) else {
                    break 'legs;
                };
                block_ns += kv;
                st.advance(need, d, b);
                left -= 1;
            }
            // The leg ended where the next iteration leaves the bucket (and nothing else is
            // in the way): it opens the next bucket, as the full step would, and a leg
            // follows; anything else is left to the full step.
            if within >= reach {
                break;
            }
            let start = st.start + st.dur;
            let dur = DecodeTimes::ns_of_at_least_one(st.x);
            if start >= bounds.stop || start + dur > bounds.end_by {
                break;
            }
            let need = counts[st.phase] as u64;
            if need > 0 {
                let Some(kv) = st.take(need, bounds, held) else {
                    break;
                };
                block_ns += kv;
            }
            itl_out.push((itl.min_ns, st.m - itl.m, start - itl.t_ns, st.dur));
            *itl = ItlGroup {
                m: st.m,
                t_ns: start,
                min_ns: dur,
                top_ns: itl_hist.bucket_top_ns(dur),
            };
            st.advance(need, d, b);
        }
        let k = st.m - self.m;
        if k > 0 {
            steps.skip(k, st.x);
            (self.start, self.dur, self.prev_dur) = (st.start, st.dur, st.prev_dur);
            (self.m, self.phase, self.last_need) = (st.m, st.phase, st.last_need);
        }
        block_ns
    }
}

/// The groups a walk is filling (time-series interval, ITL bucket, KV permille), each from
/// the iteration index and start time it began at, and the block ns summed so far.
struct Groups {
    /// The time series' interval, ns.
    interval_ns: u64,
    /// Block ns of the iterations walked, the run's and the open interval's.
    kv_block_ns: u128,
    series_kv: u128,
    series_m: u64,
    series_t: u64,
    /// End of the open interval, ns.
    series_to: u64,
    itl: ItlGroup,
    pm: u64,
    pm_m: u64,
    /// Blocks in use from which the permille is larger than `pm`.
    next_pm: u64,
}

impl Groups {
    /// The groups of a walk from `w`'s iteration 0.
    fn open(w: &WalkStart, book: &mut Book, itl_hist: &LatencyHistogram) -> Groups {
        let (pm, next_pm) = book.permille_step(w.used);
        let interval_ns = w.series_interval_ns.max(1);
        Groups {
            interval_ns,
            kv_block_ns: 0,
            series_kv: 0,
            series_m: 0,
            series_t: w.start_ns,
            series_to: (w.start_ns / interval_ns + 1).saturating_mul(interval_ns),
            itl: ItlGroup {
                m: 0,
                t_ns: w.start_ns,
                min_ns: w.dur_ns,
                top_ns: itl_hist.bucket_top_ns(w.dur_ns),
            },
            pm,
            pm_m: 0,
            next_pm,
        }
    }

    /// The end of the time-series interval holding `t_ns`, ns.
    fn series_end(&self, t_ns: u64) -> u64 {
        (t_ns / self.interval_ns + 1).saturating_mul(self.interval_ns)
    }

    /// Adds the block ns of the blocks held from `held.since_ns` to `t_ns`, and moves
    /// `since_ns` there.
    #[inline]
    fn hold_until(&mut self, held: &mut Held, t_ns: u64) {
        let block_ns = held.used as u128 * (t_ns - held.since_ns) as u128;
        self.kv_block_ns += block_ns;
        self.series_kv += block_ns;
        held.since_ns = t_ns;
    }

    /// Iteration `m` starts at `start`, lasts `dur` (the one before lasted `prev_dur`) and
    /// takes `need` blocks: books the groups it does not belong to and opens its own.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn enter(
        &mut self,
        book: &mut Book,
        held: &mut Held,
        itl_hist: &LatencyHistogram,
        m: u64,
        (start, dur, prev_dur): (u64, u64, u64),
        need: u64,
    ) {
        held.taken += need;
        if start >= self.series_to {
            self.hold_until(held, start);
            book.series.push((
                self.series_t,
                start - self.series_t,
                m - self.series_m,
                self.series_kv,
            ));
            (self.series_m, self.series_t, self.series_kv) = (m, start, 0);
            self.series_to = self.series_end(start);
        }
        if dur > self.itl.top_ns {
            let itl = &self.itl;
            book.itl
                .push((itl.min_ns, m - itl.m, start - itl.t_ns, prev_dur));
            self.itl = ItlGroup {
                m,
                t_ns: start,
                min_ns: dur,
                top_ns: itl_hist.bucket_top_ns(dur),
            };
        }
        if need > 0 {
            self.hold_until(held, start);
            held.used += need;
            if held.used >= self.next_pm {
                let (p, next) = book.permille_step(held.used);
                if p != self.pm {
                    book.permille.push((self.pm, m - self.pm_m));
                    (self.pm, self.pm_m) = (p, m);
                }
                self.next_pm = next;
            }
        }
    }

    /// The walk stopped with iteration `c.m - 1` (unbooked) in flight: books the groups up to
    /// it and the run's sums into `book`; `run_start` is the run's start, ns.
    fn close(mut self, book: &mut Book, mut held: Held, c: &Cursor, run_start: u64) {
        let (last, start) = (c.m - 1, c.start);
        // The blocks the last iteration took are not held by the booked ones.
        held.used -= c.last_need;
        self.hold_until(&mut held, start);
        if last > self.series_m {
            book.series.push((
                self.series_t,
                start - self.series_t,
                last - self.series_m,
                self.series_kv,
            ));
        }
        if last > self.itl.m {
            // The largest of the bucket is the iteration before the last.
            let itl = &self.itl;
            book.itl
                .push((itl.min_ns, last - itl.m, start - itl.t_ns, c.prev_dur));
        }
        if last > self.pm_m {
            book.permille.push((self.pm, last - self.pm_m));
        }
        book.iterations = last;
        book.busy_ns = start - run_start;
        book.kv_block_ns = self.kv_block_ns;
        book.last_used = held.used;
        book.used = held.used + c.last_need;
    }
}

impl Replica {
    /// Walks the iterations of a run from iteration 1, extending it while the next iteration
    /// is within `lim`, and books every iteration but the last into `self.book`.
    ///
    /// Between two iterations that start a group (of the time series, an ITL bucket, a KV
    /// permille) or change the line of the step time, the walk runs a span in a tight loop
    /// of its own ([`Cursor::span`]), and between two that take a block a quiet stretch
    /// ([`Cursor::quiet`]): nothing to book there but the blocks taken.
    fn walk(&mut self, w: &WalkStart, itl_hist: &LatencyHistogram, lim: &Limits) -> WalkEnd {
        let b = self.phase_counts.len();
        let mask = need_mask(&self.phase_counts);
        let batch = self.n_decoding as u64;
        let book = &mut self.book;
        book.clear(self.cfg.kv_blocks);
        let mut g = Groups::open(w, book, itl_hist);
        let mut held = Held {
            used: w.used,
            taken: 0,
            since_ns: w.start_ns,
        };
        let mut steps = w.step.times(w.ctx0, batch, 1);
        let mut c = Cursor {
            m: 1,
            phase: ((w.first_iter + 1) % b as u64) as usize,
            start: w.start_ns,
            dur: w.dur_ns,
            prev_dur: 0,
            last_need: 0,
        };
        while c.m < w.max_len {
            let stop = g.series_to.min(lim.start_before);
            if mask != 0 {
                let bounds = SpanBounds {
                    max_len: w.max_len,
                    stop,
                    end_by: lim.end_by,
                    cap: lim.cap,
                    next_pm: g.next_pm,
                };
                let kv = c.span(
                    &mut steps,
                    &self.phase_counts,
                    (mask, b),
                    &bounds,
                    &mut held,
                    (&mut g.itl, &mut book.itl, itl_hist),
                );
                g.kv_block_ns += kv;
                g.series_kv += kv;
                // (Not before an iteration that takes a block: large batches take one nearly
                // every iteration, and a stretch there would be empty.)
                if c.m < w.max_len && mask >> c.phase & 1 == 0 {
                    let top = g.itl.top_ns;
                    c.quiet(&mut steps, (mask, b), w.max_len, stop, top, lim.end_by);
                }
                if c.m == w.max_len {
                    break;
                }
            }
            let next_start = c.start + c.dur;
            let need = self.phase_counts[c.phase] as u64;
            let next_dur = steps.next_ns();
            let ok = held.taken + need <= lim.cap
                && next_start < lim.start_before
                && next_start + next_dur <= lim.end_by;
            if !ok {
                break;
            }
            g.enter(
                book,
                &mut held,
                itl_hist,
                c.m,
                (next_start, next_dur, c.dur),
                need,
            );
            c.last_need = need;
            c.prev_dur = c.dur;
            (c.start, c.dur) = (next_start, next_dur);
            c.m += 1;
            c.phase += 1;
            if c.phase == b {
                c.phase = 0;
            }
        }
        g.close(book, held, &c, w.start_ns);
        WalkEnd {
            len: c.m,
            last_start_ns: c.start,
            last_dur_ns: c.dur,
        }
    }
}

impl Replica {
    /// Whether a planned run is in flight.
    pub fn in_run(&self) -> bool {
        self.run.is_some()
    }

    /// When the first client waiting here gives up, ns (`u64::MAX`: none will): the head of
    /// the queue, or of the incoming transfers (the cluster looks at those after each
    /// iteration starts).
    fn deadline_ns(&self, slab: &Slab, slo: &SloPolicy) -> u64 {
        let gives_up = |id: Option<&u32>| match (id, slo.queue_timeout_ns) {
            (Some(&id), Some(t)) => {
                let r = slab.get(id);
                if r.first_token_ns == NO_TIME {
                    r.arrival_ns.saturating_add(t)
                } else {
                    u64::MAX
                }
            }
            _ => u64::MAX,
        };
        gives_up(self.waiting.front()).min(gives_up(self.transfers.queued_front()))
    }

    /// Whether the run in flight was planned without a deadline that now applies (a transfer
    /// queued since, whose client gives up before the deadline the run stops at).
    pub fn run_misses_a_deadline(&self, slab: &Slab, slo: &SloPolicy) -> bool {
        self.run
            .as_ref()
            .is_some_and(|run| self.deadline_ns(slab, slo) < run.deadline_ns)
    }

    /// Iterations of the run in flight, if any.
    pub(super) fn run_len(&self) -> Option<u64> {
        self.run.as_ref().map(|r| r.len)
    }

    /// Start of the run in flight, if any, ns.
    pub(super) fn run_start_ns(&self) -> Option<u64> {
        self.run.as_ref().map(|r| r.start_ns)
    }

    /// Iterations booked in bulk since the last call (the event loop counts them as events).
    pub fn take_virtual_iterations(&mut self) -> u64 {
        std::mem::take(&mut self.virtual_iterations)
    }

    /// Extends the decode-only iteration just scheduled at `now` (lasting `dur0_ns`) into a run
    /// of as many iterations as nothing can change, booking all but the last as it goes;
    /// returns the end of the run (or of the one iteration), ns.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_run(
        &mut self,
        now: u64,
        dur0_ns: u64,
        shape: &BatchShape,
        slab: &Slab,
        slo: &SloPolicy,
        step: &dyn StepTime,
        itl: &LatencyHistogram,
        horizon: &Horizon,
    ) -> u64 {
        let end0 = now + dur0_ns;
        // Iteration times never shrink in a run (the lines' slopes are >= 0): a second
        // iteration that would end past the horizon leaves a run of one.
        if end0.saturating_add(dur0_ns) > horizon.until_ns || horizon.max_iterations < 2 {
            return end0;
        }
        let i0 = self.iter;
        // The first completion ends the run (its iteration is the run's last).
        let Some(&Reverse((finish, _, _))) = self.finish_heap.peek() else {
            return end0;
        };
        let max_len = (finish.saturating_sub(i0) + 1).min(horizon.max_iterations);
        if max_len < 2 {
            return end0;
        }
        // Blocks the following iterations may take without preempting or evicting.
        let free = self.cfg.kv_blocks - self.used_blocks.min(self.cfg.kv_blocks);
        let cap = if self.cfg.reserve_output_kv {
            free
        } else {
            free.min(self.available_blocks())
        };
        // The request at the head of the queue, and the transfer at the head of the incoming
        // ones (which the cluster looks at after each iteration starts), give up at their
        // deadlines.
        let deadline = self.deadline_ns(slab, slo);
        let batch = self.n_decoding as u64;
        let ctx0 = shape.decode_context_tokens;
        // The first iteration was timed with this function: it is on the clock.
        let Ok(dstep) = self.decode_step(shape, step) else {
            return end0;
        };
        let Some(ctx_max) = batch
            .checked_mul(max_len - 1)
            .and_then(|g| g.checked_add(ctx0))
        else {
            return end0;
        };
        if !dstep.exact_through(ctx_max) {
            return end0;
        }
        let start = WalkStart {
            first_iter: i0,
            start_ns: now,
            dur_ns: dur0_ns,
            step: &dstep,
            ctx0,
            used: self.used_blocks,
            max_len,
            series_interval_ns: horizon.series_interval_ns,
        };
        let lim = Limits {
            start_before: deadline,
            end_by: horizon.until_ns,
            cap,
        };
        let end = self.walk(&start, itl, &lim);
        let end_ns = end.last_start_ns + end.last_dur_ns;
        if end.len >= 2 {
            self.book.step = Some(dstep);
            self.run = Some(Run {
                first_iter: i0,
                len: end.len,
                start_ns: now,
                end_ns,
                ctx0,
                used0: self.used_blocks,
                deadline_ns: deadline,
            });
            self.cur_end_ns = end_ns;
        }
        end_ns
    }

    /// Cuts the run in flight at `t` (an event that must see this replica as it is then):
    /// books the iterations that ended by then (with `inclusive`, those ending at `t` too;
    /// without, only those ending before) and leaves the one in flight as an ordinary
    /// iteration. Returns its end when the run's event must move there.
    pub fn cut_run(
        &mut self,
        t: u64,
        inclusive: bool,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
    ) -> Option<u64> {
        let run = self.run.clone()?;
        // The run's own end comes before an inclusive cut at that time: nothing to cut. An
        // exclusive cut there leaves its last iteration in flight, which the walk below does.
        if t > run.end_ns || (inclusive && t == run.end_ns) {
            return None;
        }
        let step = self.book.step?;
        // Book again, up to the iteration in flight at t: the last one starting by t.
        // A run exists only where its times fit (`exact_through`), so this one is on the clock.
        let dur0 = step.ns_at(run.ctx0).ok()?;
        let start = WalkStart {
            first_iter: run.first_iter,
            start_ns: run.start_ns,
            dur_ns: dur0,
            step: &step,
            ctx0: run.ctx0,
            used: run.used0,
            max_len: run.len,
            series_interval_ns: ts.interval_ns(),
        };
        let lim = Limits {
            start_before: if inclusive { t.saturating_add(1) } else { t },
            end_by: u64::MAX,
            cap: u64::MAX,
        };
        let end = self.walk(&start, &metrics.itl, &lim);
        let last = end.len == run.len;
        if let Some(r) = self.run.as_mut() {
            r.len = end.len;
        }
        self.advance_run(metrics, ts);
        debug_assert_eq!(self.cur_start_ns, end.last_start_ns);
        self.cur_end_ns = end.last_start_ns + end.last_dur_ns;
        (!last).then_some(self.cur_end_ns)
    }

    /// Applies the booked iterations of the run (all but its last) and makes the last the
    /// one in flight, with the state it was scheduled with (the blocks it took, its start).
    pub(super) fn advance_run(&mut self, metrics: &mut Metrics, ts: &mut TimeSeries) {
        let Some(run) = self.run.take() else {
            return;
        };
        let batch = self.n_decoding as u64;
        let book = &self.book;
        debug_assert_eq!(book.iterations, run.len - 1);
        book.apply(
            batch,
            self.running as u64,
            self.waiting.len() as u64,
            metrics,
            ts,
        );
        let (j, used, busy_ns) = (book.iterations, book.used, book.busy_ns);
        self.book_decode_only(batch, j, metrics);
        let taken = used - run.used0;
        if self.cfg.reserve_output_kv {
            self.reserved_blocks -= taken;
        }
        self.used_blocks = used;
        self.peak_blocks = self.peak_blocks.max(used);
        self.sum_kv += batch * j;
        self.iter = run.first_iter + j;
        self.cur_start_ns = run.start_ns + busy_ns;
        self.virtual_iterations += j;
    }
}
