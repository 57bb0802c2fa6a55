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
}

impl Horizon {
    /// No fast-forward: every iteration is its own event.
    pub const OFF: Horizon = Horizon {
        until_ns: 0,
        max_iterations: 1,
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
                let t = (gap / per + 1).min(u64::MAX as i128) as u64;
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
    /// of as many iterations as nothing can change; returns the end of the run (or of the one
    /// iteration), ns.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_run(
        &mut self,
        now: u64,
        dur0_ns: u64,
        shape: &BatchShape,
        slab: &Slab,
        slo: &SloPolicy,
        step: &StepTimeModel,
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
        let mut steps = Steps::new(&dstep, ctx0, batch, 1);
        let mut end = end0;
        let mut taken = 0u64;
        let mut phase = ((i0 + 1) % b as u64) as usize;
        let mut len = 1;
        while len < max_len {
            let need = self.phase_counts[phase] as u64;
            if taken + need > cap || end >= deadline {
                break;
            }
            let dur = steps.next_ns();
            if end + dur > horizon.until_ns {
                break;
            }
            taken += need;
            end += dur;
            len += 1;
            phase += 1;
            if phase == b {
                phase = 0;
            }
        }
        if len >= 2 {
            self.run = Some(Run {
                first_iter: i0,
                len,
                start_ns: now,
                end_ns: end,
                step: dstep,
                ctx0,
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
        // The iteration in flight at t: the last one starting at or before t.
        let mut steps = Steps::new(&run.step, run.ctx0, self.n_decoding as u64, 0);
        let mut start = run.start_ns;
        let mut j = 0;
        loop {
            let end = start + steps.next_ns();
            if end > t || j + 1 == run.len {
                break;
            }
            start = end;
            j += 1;
        }
        let last = j + 1 == run.len;
        self.advance_run(j, metrics, ts);
        self.run = None;
        (!last).then_some(self.cur_end_ns)
    }

    /// Books the run's iterations before iteration `j` of the run and makes iteration `j` the
    /// one in flight, with the state it was scheduled with (the blocks it took, its start and
    /// end).
    pub(super) fn advance_run(&mut self, j: u64, metrics: &mut Metrics, ts: &mut TimeSeries) {
        let Some(run) = self.run.take() else {
            return;
        };
        let batch = self.n_decoding as u64;
        let kv = self.cfg.kv_blocks.max(1) as f64;
        let permille = |used: u64| ((used as f64 / kv) * 1000.0).round() as u64;
        let b = self.block() as usize;
        let mut steps = Steps::new(&run.step, run.ctx0, batch, 0);
        let used0 = self.used_blocks;
        let mut used = used0;
        let mut start = run.start_ns;
        let mut phase = ((run.first_iter + 1) % b as u64) as usize;
        let mut busy = 0u64;
        let mut kv_sum = 0u128;
        // The ITL bucket being filled.
        let (mut itl_min, mut itl_top, mut itl_n, mut itl_sum, mut itl_max) = (0, 0, 0u64, 0, 0);
        // The KV permille being counted.
        let (mut pm, mut pm_n) = (permille(used), 0u64);
        // The time-series interval being filled.
        let mut ts_start = start;
        let mut ts_end = ts.interval_end_ns(start);
        let (mut ts_dur, mut ts_kv, mut ts_n) = (0u64, 0u128, 0u64);
        let running = self.running as u64;
        let waiting = self.waiting.len() as u64;
        let mut max_used = used;
        for _ in 0..j {
            let dur = steps.next_ns();
            if start >= ts_end {
                ts.iterations(
                    ts_start,
                    ts_dur,
                    ts_n * batch,
                    running,
                    waiting,
                    ts_kv as f64 / kv,
                );
                ts_start = start;
                ts_end = ts.interval_end_ns(start);
                (ts_dur, ts_kv, ts_n) = (0, 0, 0);
            }
            if dur > itl_top {
                metrics.itl.record_bucket(
                    itl_min,
                    itl_n * batch,
                    itl_sum as u128 * batch as u128,
                    itl_max,
                );
                itl_min = dur;
                itl_top = metrics.itl.bucket_top_ns(dur);
                (itl_n, itl_sum) = (0, 0);
            }
            itl_n += 1;
            itl_sum += dur;
            itl_max = dur;
            let ud = used as u128 * dur as u128;
            kv_sum += ud;
            ts_kv += ud;
            ts_dur += dur;
            ts_n += 1;
            busy += dur;
            pm_n += 1;
            max_used = used;
            start += dur;
            // The next iteration's blocks, taken when it is scheduled.
            let need = self.phase_counts[phase] as u64;
            phase += 1;
            if phase == b {
                phase = 0;
            }
            if need > 0 {
                used += need;
                let p = permille(used);
                if p != pm {
                    metrics.kv_permille_hist.record_n(pm, pm_n);
                    (pm, pm_n) = (p, 0);
                }
            }
        }
        if j > 0 {
            metrics.itl.record_bucket(
                itl_min,
                itl_n * batch,
                itl_sum as u128 * batch as u128,
                itl_max,
            );
            metrics.kv_permille_hist.record_n(pm, pm_n);
            ts.iterations(
                ts_start,
                ts_dur,
                ts_n * batch,
                running,
                waiting,
                ts_kv as f64 / kv,
            );
            metrics.iterations += j;
            metrics.busy_ns += busy as u128;
            metrics.batch_size.record(batch as f64, j as f64);
            metrics.batch_size_hist.record_n(batch, j);
            metrics.kv_utilization.record_sums(
                busy as f64,
                kv_sum as f64 / kv,
                max_used as f64 / kv,
            );
            metrics.generated_tokens += batch * j;
        }
        let taken = used - used0;
        if self.cfg.reserve_output_kv {
            self.reserved_blocks -= taken;
        }
        self.used_blocks = used;
        self.peak_blocks = self.peak_blocks.max(used);
        self.sum_kv += batch * j;
        self.iter = run.first_iter + j;
        self.cur_start_ns = start;
        self.cur_end_ns = start + steps.next_ns();
        self.virtual_iterations += j;
    }
}
