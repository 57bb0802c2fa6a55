//! Arrival processes: Poisson, gamma (vLLM's burstiness), constant rate, offline, and a
//! piecewise-linear rate schedule sampled as a non-homogeneous Poisson process.
//!
//! Poisson, gamma and constant processes put their first request at t = 0 and draw the gap
//! to each next one, as vLLM's `benchmark_serving` does. A schedule uses time rescaling:
//! unit-rate exponential gaps are mapped through the inverse of the cumulative rate, so a run
//! is deterministic for a seed and costs O(1) amortised per request.

use rand::Rng;
use rand_distr::{Exp1, Gamma};

use crate::error::{Error, Result};

/// One linear piece of a rate schedule: rate goes from `r0` at `start_s` to `r1` at `end_s`
/// (requests per second), `end_s > start_s`.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start_s: f64,
    end_s: f64,
    r0: f64,
    r1: f64,
}

impl Segment {
    fn slope(&self) -> f64 {
        (self.r1 - self.r0) / (self.end_s - self.start_s)
    }
    fn rate_at(&self, t_s: f64) -> f64 {
        (self.r0 + self.slope() * (t_s - self.start_s)).max(0.0)
    }
    /// Expected arrivals in `[from_s, end_s]`.
    fn area_from(&self, from_s: f64) -> f64 {
        0.5 * (self.rate_at(from_s) + self.r1) * (self.end_s - from_s).max(0.0)
    }
    /// Expected arrivals in `[start_s, t_s]`, `t_s` within the segment.
    fn area_to(&self, t_s: f64) -> f64 {
        self.area_from(self.start_s) - self.area_from(t_s)
    }
}

/// A piecewise-linear arrival-rate schedule (rates in requests per second, times in seconds).
/// Points start at t = 0. Without `repeat_s`, the last rate holds forever; with it, the
/// pattern repeats with that period, ramping linearly from the last point back to the first.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    segments: Vec<Segment>,
    /// Length of the defined part, seconds (the period when repeating).
    span_s: f64,
    /// Expected arrivals over `[0, span_s]`.
    span_area: f64,
    /// Rate after the last point when not repeating, requests per second.
    tail_rate: f64,
    /// Rate at t = 0, requests per second.
    first_rate: f64,
    repeating: bool,
}

impl Schedule {
    /// Builds a schedule from validated `[time_s, rate_per_s]` points.
    pub(crate) fn new(points: &[[f64; 2]], repeat_s: Option<f64>) -> Self {
        let mut segments = Vec::with_capacity(points.len());
        for w in points.windows(2) {
            if w[1][0] > w[0][0] {
                segments.push(Segment {
                    start_s: w[0][0],
                    end_s: w[1][0],
                    r0: w[0][1],
                    r1: w[1][1],
                });
            }
        }
        let first = points.first().copied().unwrap_or([0.0, 0.0]);
        let last = points.last().copied().unwrap_or([0.0, 0.0]);
        if let Some(p) = repeat_s {
            if p > last[0] {
                segments.push(Segment {
                    start_s: last[0],
                    end_s: p,
                    r0: last[1],
                    r1: first[1],
                });
            }
        }
        let span_s = repeat_s.unwrap_or(last[0]);
        let span_area = segments.iter().map(|s| s.area_from(s.start_s)).sum();
        Schedule {
            segments,
            span_s,
            span_area,
            tail_rate: last[1],
            first_rate: first[1],
            repeating: repeat_s.is_some(),
        }
    }

    /// Expected arrivals in `[0, local_s]`, `local_s` within `[0, span_s]`.
    fn partial(&self, local_s: f64) -> f64 {
        let mut a = 0.0;
        for s in &self.segments {
            if local_s >= s.end_s {
                a += s.area_from(s.start_s);
            } else {
                if local_s > s.start_s {
                    a += s.area_to(local_s);
                }
                break;
            }
        }
        a
    }

    /// Expected arrivals in `[0, t_s]` (the cumulative rate), requests.
    pub(crate) fn integral(&self, t_s: f64) -> f64 {
        let t_s = t_s.max(0.0);
        if self.repeating {
            if self.span_s <= 0.0 {
                return 0.0;
            }
            let n = (t_s / self.span_s).floor();
            n * self.span_area + self.partial(t_s - n * self.span_s)
        } else if t_s <= self.span_s {
            self.partial(t_s)
        } else {
            self.span_area + (t_s - self.span_s) * self.tail_rate
        }
    }

    /// Mean rate, requests per second: over `[0, duration_s]` when given, else over one
    /// period, else over the points' span, else the single point's rate.
    pub(crate) fn mean_rate_per_s(&self, duration_s: Option<f64>) -> f64 {
        match duration_s {
            Some(d) if d > 0.0 => self.integral(d) / d,
            _ if self.span_s > 0.0 => self.span_area / self.span_s,
            _ => self.first_rate,
        }
    }

    /// Whether the schedule can produce any arrival at all.
    pub(crate) fn has_arrivals(&self) -> bool {
        self.span_area > 0.0 || (!self.repeating && self.tail_rate > 0.0)
    }
}

/// Where a schedule sampler stands.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleSampler {
    schedule: Schedule,
    /// Index of the current segment (== segments.len(): past the defined part).
    seg: usize,
    /// Time within the current period (or since 0 when not repeating), seconds.
    local_s: f64,
    /// Start of the current period, seconds.
    base_s: f64,
}

impl ScheduleSampler {
    fn next_s<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<f64> {
        let mut e: f64 = rng.sample(Exp1);
        let sch = &self.schedule;
        loop {
            let Some(s) = sch.segments.get(self.seg) else {
                if !sch.repeating {
                    if sch.tail_rate <= 0.0 {
                        return None;
                    }
                    self.local_s = self.local_s.max(sch.span_s) + e / sch.tail_rate;
                    return Some(self.base_s + self.local_s);
                }
                if sch.span_area <= 0.0 {
                    return None;
                }
                // Start the next period, skipping whole periods the gap jumps over.
                self.base_s += sch.span_s;
                let skip = (e / sch.span_area).floor();
                if skip >= 1.0 {
                    e = (e - skip * sch.span_area).max(0.0);
                    self.base_s += skip * sch.span_s;
                }
                self.seg = 0;
                self.local_s = 0.0;
                continue;
            };
            let left = s.area_from(self.local_s);
            if e <= left {
                let r = s.rate_at(self.local_s);
                let k = s.slope();
                // Solve r x + k x^2 / 2 = e for the smallest x >= 0 (stable form).
                let denom = r + (r * r + 2.0 * k * e).max(0.0).sqrt();
                let dx = if denom > 0.0 { 2.0 * e / denom } else { 0.0 };
                self.local_s = (self.local_s + dx).min(s.end_s);
                return Some(self.base_s + self.local_s);
            }
            e -= left;
            self.local_s = s.end_s;
            self.seg += 1;
        }
    }
}

/// A running arrival process; yields absolute arrival times in seconds.
#[derive(Debug, Clone)]
pub(crate) enum ArrivalProcess {
    /// Exponential gaps with this rate (requests per second); `t_s` is the last arrival.
    Poisson { rate_per_s: f64, t_s: Option<f64> },
    /// Gamma-distributed gaps (shape = burstiness, mean 1/rate).
    Gamma { gap: Gamma<f64>, t_s: Option<f64> },
    /// Arrival i at exactly i / rate seconds.
    Constant { rate_per_s: f64, index: u64 },
    /// Every request at t = 0.
    Offline,
    /// Non-homogeneous Poisson following a schedule.
    Schedule(ScheduleSampler),
}

impl ArrivalProcess {
    /// A Poisson process, `rate_per_s` > 0 requests per second.
    pub(crate) fn poisson(rate_per_s: f64) -> Self {
        ArrivalProcess::Poisson {
            rate_per_s,
            t_s: None,
        }
    }

    /// A gamma renewal process: `burstiness` is the gamma shape, the mean gap 1/`rate_per_s`.
    pub(crate) fn gamma(rate_per_s: f64, burstiness: f64, origin: &str) -> Result<Self> {
        let gap = Gamma::new(burstiness, 1.0 / (rate_per_s * burstiness)).map_err(|e| {
            Error::config(
                origin,
                "workload.arrival",
                format!("gamma(shape {burstiness}, rate {rate_per_s}): {e}"),
            )
        })?;
        Ok(ArrivalProcess::Gamma { gap, t_s: None })
    }

    /// A constant-rate process, `rate_per_s` > 0 requests per second.
    pub(crate) fn constant(rate_per_s: f64) -> Self {
        ArrivalProcess::Constant {
            rate_per_s,
            index: 0,
        }
    }

    /// A schedule-driven non-homogeneous Poisson process.
    pub(crate) fn schedule(points: &[[f64; 2]], repeat_s: Option<f64>) -> Self {
        ArrivalProcess::Schedule(ScheduleSampler {
            schedule: Schedule::new(points, repeat_s),
            seg: 0,
            local_s: 0.0,
            base_s: 0.0,
        })
    }

    /// The next arrival time, seconds since the start, nondecreasing; `None` when the process
    /// has no more arrivals (a schedule whose rate stays at zero).
    pub(crate) fn next_s<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<f64> {
        match self {
            ArrivalProcess::Poisson { rate_per_s, t_s } => {
                let t = match *t_s {
                    None => 0.0,
                    Some(prev) => {
                        let gap: f64 = rng.sample(Exp1);
                        prev + gap / *rate_per_s
                    }
                };
                *t_s = Some(t);
                Some(t)
            }
            ArrivalProcess::Gamma { gap, t_s } => {
                let t = match *t_s {
                    None => 0.0,
                    Some(prev) => prev + rng.sample(*gap),
                };
                *t_s = Some(t);
                Some(t)
            }
            ArrivalProcess::Constant { rate_per_s, index } => {
                let t = *index as f64 / *rate_per_s;
                *index = index.saturating_add(1);
                Some(t)
            }
            ArrivalProcess::Offline => Some(0.0),
            ArrivalProcess::Schedule(s) => s.next_s(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Mean rate and coefficient of variation of the gaps of `n` arrivals.
    fn gap_stats(p: &mut ArrivalProcess, n: usize) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut prev = p.next_s(&mut rng).unwrap();
        let (mut sum, mut sum2) = (0.0, 0.0);
        for _ in 0..n {
            let t = p.next_s(&mut rng).unwrap();
            let g = t - prev;
            assert!(g >= 0.0);
            sum += g;
            sum2 += g * g;
            prev = t;
        }
        let mean = sum / n as f64;
        let var = sum2 / n as f64 - mean * mean;
        (1.0 / mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_rate_and_cv() {
        let (rate, cv) = gap_stats(&mut ArrivalProcess::poisson(40.0), 200_000);
        assert!((rate / 40.0 - 1.0).abs() < 0.01, "{rate}");
        assert!((cv - 1.0).abs() < 0.02, "{cv}");
    }

    #[test]
    fn gamma_rate_and_cv_follow_the_shape() {
        for shape in [0.25, 0.5, 1.0, 4.0] {
            let mut p = ArrivalProcess::gamma(10.0, shape, "t").unwrap();
            let (rate, cv) = gap_stats(&mut p, 200_000);
            let want_cv = 1.0 / f64::sqrt(shape);
            assert!(
                (rate / 10.0 - 1.0).abs() < 0.02,
                "shape {shape}: rate {rate}"
            );
            assert!((cv / want_cv - 1.0).abs() < 0.04, "shape {shape}: cv {cv}");
        }
    }

    #[test]
    fn constant_is_exactly_spaced() {
        let mut p = ArrivalProcess::constant(4.0);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let ts: Vec<f64> = (0..5).map(|_| p.next_s(&mut rng).unwrap()).collect();
        assert_eq!(ts, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    }

    #[test]
    fn schedule_integral_and_mean() {
        let s = Schedule::new(&[[0.0, 0.0], [10.0, 10.0], [20.0, 10.0]], None);
        assert!((s.integral(10.0) - 50.0).abs() < 1e-9);
        assert!((s.integral(30.0) - 250.0).abs() < 1e-9);
        assert!((s.mean_rate_per_s(None) - 7.5).abs() < 1e-12);
        let r = Schedule::new(&[[0.0, 0.0], [10.0, 10.0]], Some(20.0));
        // Up from 0 to 10 over 10 s, back down to 0 over the next 10 s.
        assert!((r.integral(20.0) - 100.0).abs() < 1e-9);
        assert!((r.integral(45.0) - 212.5).abs() < 1e-9);
        assert!((r.mean_rate_per_s(None) - 5.0).abs() < 1e-12);
    }

    #[test]
    fn schedule_arrivals_follow_the_rate() {
        // A triangle wave: 0 → 100 req/s over 50 s, back to 0 over the next 50 s, repeating.
        let mut p = ArrivalProcess::schedule(&[[0.0, 0.0], [50.0, 100.0]], Some(100.0));
        let s = Schedule::new(&[[0.0, 0.0], [50.0, 100.0]], Some(100.0));
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut bins = [0u64; 10];
        let mut prev = 0.0;
        loop {
            let t = p.next_s(&mut rng).unwrap();
            assert!(t >= prev);
            prev = t;
            if t >= 1000.0 {
                break;
            }
            bins[((t % 100.0) / 10.0) as usize] += 1;
        }
        for (i, &count) in bins.iter().enumerate() {
            let lo = i as f64 * 10.0;
            let want = 10.0 * (s.integral(lo + 10.0) - s.integral(lo));
            let tol = 4.0 * want.sqrt() + 1.0;
            assert!(
                (count as f64 - want).abs() < tol,
                "bin {i}: {count} vs {want}"
            );
        }
    }

    #[test]
    fn schedule_with_step_and_zero_tail_ends() {
        let mut p = ArrivalProcess::schedule(&[[0.0, 5.0], [2.0, 5.0], [2.0, 0.0]], None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut n = 0;
        while let Some(t) = p.next_s(&mut rng) {
            assert!(t <= 2.0);
            n += 1;
            assert!(n < 1000);
        }
        assert!(n > 0);
    }

    #[test]
    fn sparse_repeating_schedule_skips_periods() {
        // One expected arrival per 1e6 periods: must not loop period by period.
        let mut p = ArrivalProcess::schedule(&[[0.0, 1e-6], [1.0, 1e-6]], Some(1.0));
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let t = p.next_s(&mut rng).unwrap();
        assert!(t > 1.0 && t.is_finite());
    }
}
