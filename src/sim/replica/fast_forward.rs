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
use crate::metrics::{Metrics, TimeSeries};
use crate::roofline::{BatchShape, DecodeStep, StepTimeModel, DECODE_STEP_FRACTION_BITS};
use crate::sim::SloPolicy;

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
    /// The iteration time as a function of the total context.
    step: DecodeStep,
    /// Total context of the first iteration, tokens.
    ctx0: u64,
    /// Blocks in use while the first iteration runs.
    used0: u64,
}

/// The bookings of a run's iterations, gathered in one pass over them: what each iteration's
/// end would fold into the metrics and the time series, grouped by histogram bucket, KV
/// permille, time-series interval and blocks in use. Each group being filled is kept in plain
/// fields and pushed to its list when the next one starts.
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
    /// Blocks in use now (after the allocations of the iterations that follow).
    used: u64,
    /// Duration of the iterations booked since `used` last changed or an interval began.
    stretch_ns: u64,
    /// Iteration times by histogram bucket: (smallest, iterations, sum, largest), ns.
    itl: Vec<(u64, u64, u64, u64)>,
    /// The bucket being filled, as in `itl`, and its top, ns.
    itl_cur: (u64, u64, u64, u64),
    itl_top_ns: u64,
    /// Iterations by KV utilisation in permille: (permille, iterations).
    permille: Vec<(u64, u64)>,
    /// The permille being counted, as in `permille`.
    permille_cur: (u64, u64),
    /// The smallest block count whose permille exceeds the current one.
    next_permille_used: u64,
    /// By time-series interval: (first start, summed duration, iterations, block ns).
    series: Vec<(u64, u64, u64, u128)>,
    /// The interval being filled, as in `series`, and its end, ns.
    series_cur: (u64, u64, u64, u128),
    series_end_ns: u64,
    series_interval_ns: u64,
    /// KV capacity, blocks.
    kv_blocks: u64,
    /// A range of block counts [lo, hi) known to share one permille, and it (kept from run to
    /// run: the rounding is worked out again only when the blocks in use leave it).
    permille_range: (u64, u64, u64),
}

/// KV utilisation in permille as an iteration's end computes it.
#[inline]
fn permille(used: u64, kv_blocks: u64) -> u64 {
    ((used as f64 / kv_blocks.max(1) as f64) * 1000.0).round() as u64
}

impl Book {
    /// Starts booking with `used` blocks in use, KV capacity `kv_blocks`, time-series
    /// intervals of `series_interval_ns`.
    fn start(&mut self, used: u64, kv_blocks: u64, series_interval_ns: u64) {
        self.iterations = 0;
        self.busy_ns = 0;
        self.kv_block_ns = 0;
        self.last_used = used;
        self.used = used;
        self.stretch_ns = 0;
        self.itl.clear();
        self.itl_cur = (0, 0, 0, 0);
        self.itl_top_ns = 0;
        self.permille.clear();
        if kv_blocks != self.kv_blocks {
            self.permille_range = (0, 0, 0);
        }
        self.kv_blocks = kv_blocks;
        let (lo, hi, p) = self.permille_range;
        if (lo..hi).contains(&used) {
            self.permille_cur = (p, 0);
            self.next_permille_used = hi;
        } else {
            let p = permille(used, kv_blocks);
            self.permille_cur = (p, 0);
            self.next_permille_used = self.next_permille(used, p);
            self.permille_range = (used, self.next_permille_used, p);
        }
        self.series.clear();
        self.series_cur = (0, 0, 0, 0);
        self.series_end_ns = 0;
        self.series_interval_ns = series_interval_ns.max(1);
    }

    /// The smallest block count above `used` with a larger permille than `p`, its permille.
    fn next_permille(&self, used: u64, p: u64) -> u64 {
        // Near (p + 0.5) / 1000 of the capacity; the float rounding is settled by stepping.
        let mut u =
            (((p as f64 + 0.5) * self.kv_blocks as f64 / 1000.0).ceil() as u64).max(used + 1);
        while u > used + 1 && permille(u - 1, self.kv_blocks) > p {
            u -= 1;
        }
        while permille(u, self.kv_blocks) <= p {
            u += 1;
        }
        u
    }

    /// Folds the blocks-in-use stretch into the sums.
    #[inline(always)]
    fn close_stretch(&mut self) {
        let block_ns = self.used as u128 * self.stretch_ns as u128;
        self.kv_block_ns += block_ns;
        self.series_cur.3 += block_ns;
        self.stretch_ns = 0;
    }

    /// Books one iteration starting at `start_ns` and lasting `dur_ns`.
    #[inline(always)]
    fn iteration(&mut self, start_ns: u64, dur_ns: u64, itl: &crate::metrics::LatencyHistogram) {
        if start_ns >= self.series_end_ns {
            self.new_interval(start_ns);
        }
        if dur_ns > self.itl_top_ns {
            self.new_bucket(dur_ns, itl);
        }
        self.series_cur.1 += dur_ns;
        self.series_cur.2 += 1;
        self.itl_cur.1 += 1;
        self.itl_cur.2 += dur_ns;
        self.itl_cur.3 = dur_ns;
        self.permille_cur.1 += 1;
        self.iterations += 1;
        self.busy_ns += dur_ns;
        self.stretch_ns += dur_ns;
        self.last_used = self.used;
    }

    #[cold]
    fn new_interval(&mut self, start_ns: u64) {
        self.close_stretch();
        if self.series_cur.2 > 0 {
            self.series.push(self.series_cur);
        }
        self.series_cur = (start_ns, 0, 0, 0);
        self.series_end_ns =
            (start_ns / self.series_interval_ns + 1).saturating_mul(self.series_interval_ns);
    }

    #[cold]
    fn new_bucket(&mut self, dur_ns: u64, itl: &crate::metrics::LatencyHistogram) {
        if self.itl_cur.1 > 0 {
            self.itl.push(self.itl_cur);
        }
        self.itl_cur = (dur_ns, 0, 0, 0);
        self.itl_top_ns = itl.bucket_top_ns(dur_ns);
    }

    /// The next iteration takes `need` blocks when it is scheduled.
    #[inline(always)]
    fn take(&mut self, need: u64) {
        if need > 0 {
            self.close_stretch();
            self.used += need;
            if self.used >= self.next_permille_used {
                self.new_permille();
            }
        }
    }

    #[cold]
    fn new_permille(&mut self) {
        let p = permille(self.used, self.kv_blocks);
        if p != self.permille_cur.0 {
            if self.permille_cur.1 > 0 {
                self.permille.push(self.permille_cur);
            }
            self.permille_cur = (p, 0);
        }
        self.next_permille_used = self.next_permille(self.used, p);
        self.permille_range = (self.used, self.next_permille_used, p);
    }

    /// Folds the booked iterations of a batch of `batch` decodes, with `running` and
    /// `waiting` requests, into the metrics and the time series.
    fn apply(
        &mut self,
        batch: u64,
        running: u64,
        waiting: u64,
        metrics: &mut Metrics,
        ts: &mut TimeSeries,
    ) {
        self.close_stretch();
        let j = self.iterations;
        if j == 0 {
            return;
        }
        let kv = self.kv_blocks.max(1) as f64;
        self.itl.push(self.itl_cur);
        for &(min, n, sum, max) in &self.itl {
            metrics
                .itl
                .record_bucket(min, n * batch, sum as u128 * batch as u128, max);
        }
        self.permille.push(self.permille_cur);
        for &(p, n) in &self.permille {
            metrics.kv_permille_hist.record_n(p, n);
        }
        self.series.push(self.series_cur);
        for &(start, dur, n, block_ns) in &self.series {
            if n > 0 {
                ts.iterations(
                    start,
                    dur,
                    n * batch,
                    running,
                    waiting,
                    block_ns as f64 / kv,
                );
            }
        }
        metrics.iterations += j;
        metrics.busy_ns += self.busy_ns as u128;
        metrics.batch_size.record(batch as f64, j as f64);
        metrics.batch_size_hist.record_n(batch, j);
        metrics.kv_utilization.record_sums(
            self.busy_ns as f64,
            self.kv_block_ns as f64 / kv,
            self.last_used as f64 / kv,
        );
        metrics.generated_tokens += batch * j;
    }
}

/// The iteration times of a run, one after the other, in integers: the active line of the
/// envelope is stepped by the batch size each iteration and recomputed where another line
/// overtakes it (the step function's regime changes).
struct Steps<'a> {
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

impl<'a> Steps<'a> {
    fn new(step: &'a DecodeStep, ctx0: u64, batch: u64, m: u64) -> Self {
        let mut s = Steps {
            step,
            ctx0,
            batch,
            m,
            x: 0,
            d: 0,
            switch_at: m,
        };
        s.segment();
        s
    }

    /// Finds the line that is the maximum at iteration `m` and the first iteration at which a
    /// steeper line exceeds it.
    fn segment(&mut self) {
        let c = (self.ctx0 + self.batch * self.m) as i128;
        let lines = self.step.lines();
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
        // The caller checked that the run's times fit (see `fits`).
        self.x = best_v as u64;
        self.d = (slope * self.batch as i128) as u64;
        self.switch_at = until;
    }

    /// The time of the next iteration, ns.
    #[inline]
    fn next_ns(&mut self) -> u64 {
        if self.m == self.switch_at {
            self.segment();
        }
        let ns = self.x >> DECODE_STEP_FRACTION_BITS;
        self.x += self.d;
        self.m += 1;
        ns
    }
}

/// Whether the fixed-point times of a run up to total context `ctx_max` fit the 64-bit loop.
fn fits(step: &DecodeStep, ctx_max: u64) -> bool {
    step.fixed_at(ctx_max) < (1i128 << 62)
}

impl Replica {
    /// Whether a planned run is in flight.
    pub fn in_run(&self) -> bool {
        self.run.is_some()
    }

    /// Iterations of the run in flight, if any.
    pub(super) fn run_len(&self) -> Option<u64> {
        self.run.as_ref().map(|r| r.len)
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
        step: &StepTimeModel,
        itl: &crate::metrics::LatencyHistogram,
        horizon: &Horizon,
    ) -> u64 {
        let end0 = now + dur0_ns;
        if end0 >= horizon.until_ns || horizon.max_iterations < 2 {
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
        // The request at the head of the queue gives up at its deadline.
        let deadline = match (self.waiting.front(), slo.queue_timeout_ns) {
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
        let batch = self.n_decoding as u64;
        let ctx0 = shape.decode_context_tokens;
        let dstep = self.decode_step(shape, step);
        let Some(ctx_max) = batch
            .checked_mul(max_len - 1)
            .and_then(|g| g.checked_add(ctx0))
        else {
            return end0;
        };
        if !fits(&dstep, ctx_max) {
            return end0;
        }
        let b = self.block() as usize;
        let book = &mut self.book;
        book.start(
            self.used_blocks,
            self.cfg.kv_blocks,
            horizon.series_interval_ns,
        );
        let mut steps = Steps::new(&dstep, ctx0, batch, 1);
        let (mut start, mut dur) = (now, dur0_ns);
        let mut taken = 0u64;
        let mut phase = ((i0 + 1) % b as u64) as usize;
        let mut len = 1;
        while len < max_len {
            // Iteration `len` starts when the previous one ends.
            let next_start = start + dur;
            let need = self.phase_counts[phase] as u64;
            if taken + need > cap || next_start >= deadline {
                break;
            }
            let next_dur = steps.next_ns();
            if next_start + next_dur > horizon.until_ns {
                break;
            }
            book.iteration(start, dur, itl);
            book.take(need);
            taken += need;
            (start, dur) = (next_start, next_dur);
            len += 1;
            phase += 1;
            if phase == b {
                phase = 0;
            }
        }
        let end = start + dur;
        if len >= 2 {
            self.run = Some(Run {
                first_iter: i0,
                len,
                start_ns: now,
                end_ns: end,
                step: dstep,
                ctx0,
                used0: self.used_blocks,
            });
            self.cur_end_ns = end;
        }
        end
    }

    /// Cuts the run in flight at `t` (a control event): books the iterations that ended by
    /// then and leaves the one in flight as an ordinary iteration. Returns its end when the
    /// run's event must move there.
    pub fn cut_run(&mut self, t: u64, metrics: &mut Metrics, ts: &mut TimeSeries) -> Option<u64> {
        let run = self.run.as_ref()?;
        if t >= run.end_ns {
            return None;
        }
        // Book again, up to the iteration in flight at t: the last one starting by t.
        let batch = self.n_decoding as u64;
        let b = self.block() as usize;
        let book = &mut self.book;
        book.start(run.used0, self.cfg.kv_blocks, ts.interval_ns());
        let mut steps = Steps::new(&run.step, run.ctx0, batch, 0);
        let mut start = run.start_ns;
        let mut phase = ((run.first_iter + 1) % b as u64) as usize;
        let mut j = 0;
        let mut dur = steps.next_ns();
        while start + dur <= t && j + 1 < run.len {
            book.iteration(start, dur, &metrics.itl);
            book.take(self.phase_counts[phase] as u64);
            phase += 1;
            if phase == b {
                phase = 0;
            }
            start += dur;
            dur = steps.next_ns();
            j += 1;
        }
        let last = j + 1 == run.len;
        if let Some(r) = self.run.as_mut() {
            r.len = j + 1;
        }
        self.advance_run(metrics, ts);
        debug_assert_eq!(self.cur_start_ns, start);
        self.cur_end_ns = start + dur;
        (!last).then_some(self.cur_end_ns)
    }

    /// Applies the booked iterations of the run (all but its last) and makes the last the
    /// one in flight, with the state it was scheduled with (the blocks it took, its start).
    pub(super) fn advance_run(&mut self, metrics: &mut Metrics, ts: &mut TimeSeries) {
        let Some(run) = self.run.take() else {
            return;
        };
        let batch = self.n_decoding as u64;
        let (running, waiting) = (self.running as u64, self.waiting.len() as u64);
        let book = &mut self.book;
        debug_assert_eq!(book.iterations, run.len - 1);
        book.apply(batch, running, waiting, metrics, ts);
        let (j, used, busy_ns) = (book.iterations, book.used, book.busy_ns);
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
