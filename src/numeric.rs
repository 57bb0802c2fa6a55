//! Numeric helpers shared by the metrics, the fits and the validation: quantiles of samples
//! (two rules, each named for what it computes) and Nelder-Mead minimisation.
//!
//! - [`percentile_nearest_rank`] / [`sorted_percentile_nearest_rank`]: the sample of rank
//!   ceil(p n), as hdrhistogram and `vllm bench serve` report latencies (the simulator's
//!   steady-state windows use it so their percentiles match the whole-run histograms').
//! - [`quantile_interpolated`] / [`median`]: linear interpolation between order statistics,
//!   for intervals of error ratios and the median of kernel errors.

/// `x.round()` (half away from zero), bit for bit for every `f64` (NaN, infinities and
/// signed zeros included), without the libm call `f64::round` is on baseline x86-64: the hot
/// paths round a time or a utilisation once per iteration or request.
#[inline]
pub fn round(x: f64) -> f64 {
    let a = x.abs();
    // From 2^52 on every f64 is an integer: nothing to round. NaN comes back quiet, as from
    // libm (`x + x`).
    if a.is_nan() {
        return x + x;
    }
    if a >= 4_503_599_627_370_496.0 {
        return x;
    }
    // Truncation, exact below 2^52; `a - t` is exact too (t <= a < t + 1 < 2^52 + 1).
    let t = a as u64 as f64;
    let r = if a - t >= 0.5 { t + 1.0 } else { t };
    r.copysign(x)
}

/// The nearest rank of percentile `p` (0..100) among `n` >= 1 values, 1-based.
pub fn nearest_rank(n: usize, p: f64) -> usize {
    ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n)
}

/// Value at percentile `p` (0..100) of `v` by nearest rank (the sample of rank ceil(p n)),
/// as hdrhistogram reports it; reorders `v`; 0 when empty.
pub fn percentile_nearest_rank(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let (_, x, _) = v.select_nth_unstable_by(nearest_rank(v.len(), p) - 1, |a, b| a.total_cmp(b));
    *x
}

/// Value at percentile `p` (0..100) by nearest rank of values already sorted ascending (0 when
/// empty).
pub fn sorted_percentile_nearest_rank(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v[nearest_rank(v.len(), p) - 1]
    }
}

/// The `q` quantile (0..=1) of values sorted ascending, by linear interpolation between order
/// statistics; `sorted` must not be empty.
pub fn quantile_interpolated(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 1 {
        return sorted[0];
    }
    let x = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let i = (x.floor() as usize).min(n - 2);
    let f = x - i as f64;
    sorted[i] * (1.0 - f) + sorted[i + 1] * f
}

/// The median of `v` (the mean of the two middle values when their number is even); sorts
/// `v`; NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    quantile_interpolated(v, 0.5)
}

/// Minimises `f` over `x0.len()` dimensions with Nelder-Mead (standard coefficients), initial
/// simplex steps `step`, until the simplex's values agree to `tol` or `max_iter` iterations.
pub fn nelder_mead(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    tol: f64,
    max_iter: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    if n == 0 {
        return (Vec::new(), f(x0));
    }
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    simplex.push((x0.to_vec(), f(x0)));
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step;
        let v = f(&x);
        simplex.push((x, v));
    }
    for _ in 0..max_iter {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if (simplex[n].1 - simplex[0].1).abs() <= tol * (1.0 + simplex[0].1.abs()) {
            break;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|j| simplex[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64)
            .collect();
        let along = |t: f64| -> Vec<f64> {
            (0..n)
                .map(|j| centroid[j] + t * (simplex[n].0[j] - centroid[j]))
                .collect()
        };
        let xr = along(-1.0);
        let fr = f(&xr);
        if fr < simplex[0].1 {
            let xe = along(-2.0);
            let fe = f(&xe);
            simplex[n] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < simplex[n - 1].1 {
            simplex[n] = (xr, fr);
        } else {
            let (xc, fc) = if fr < simplex[n].1 {
                let x = along(-0.5);
                let v = f(&x);
                (x, v)
            } else {
                let x = along(0.5);
                let v = f(&x);
                (x, v)
            };
            if fc < fr.min(simplex[n].1) {
                simplex[n] = (xc, fc);
            } else {
                let best = simplex[0].0.clone();
                for p in simplex.iter_mut().skip(1) {
                    for (xj, bj) in p.0.iter_mut().zip(&best) {
                        *xj = bj + 0.5 * (*xj - bj);
                    }
                    p.1 = f(&p.0);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (x, v) = simplex.swap_remove(0);
    (x, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `round` equals `f64::round` bit for bit: halves, their neighbours, signed zeros, huge
    /// values, non-finite values and a spread of random ones.
    #[test]
    fn round_equals_std_round_bit_for_bit() {
        let mut xs = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            0.499_999_999_999_999_94,
            -0.499_999_999_999_999_94,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            1e300,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
        ];
        for k in 0..2000u64 {
            let base = k as f64 * 0.5;
            for x in [
                base,
                f64::from_bits(base.to_bits() + 1),
                f64::from_bits(base.to_bits().saturating_sub(1)),
            ] {
                xs.push(x);
                xs.push(-x);
            }
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            xs.push(f64::from_bits(state));
            xs.push((state >> 11) as f64 / (1u64 << 20) as f64);
        }
        for x in xs {
            assert_eq!(round(x).to_bits(), x.round().to_bits(), "{x:e}");
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&mut v, 99.0), 990.0);
        assert_eq!(percentile_nearest_rank(&mut v, 50.0), 500.0);
        assert_eq!(percentile_nearest_rank(&mut v, 100.0), 1000.0);
        assert_eq!(percentile_nearest_rank(&mut [], 99.0), 0.0);
        v.sort_by(f64::total_cmp);
        assert_eq!(sorted_percentile_nearest_rank(&v, 90.0), 900.0);
        assert_eq!(sorted_percentile_nearest_rank(&[], 90.0), 0.0);
    }

    #[test]
    fn interpolated_quantiles_and_median() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(quantile_interpolated(&v, 0.0), 1.0);
        assert_eq!(quantile_interpolated(&v, 1.0), 8.0);
        assert_eq!(quantile_interpolated(&v, 0.5), 3.0);
        assert_eq!(quantile_interpolated(&[5.0], 0.3), 5.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
