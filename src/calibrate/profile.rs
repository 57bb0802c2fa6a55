//! What the data determine: profile-likelihood intervals of fitted parameters.
//!
//! A fit minimises a mean loss `L(x)` over `n` figures (mean squared or Huber log errors). To
//! learn what the data say about parameter `k`, hold it at a value and refit the others: the
//! profile `L_k(v) = min over the rest of L`. Read as a Gaussian likelihood with the error
//! variance estimated from the data, the profile's likelihood ratio is
//! `n ln(L_k(v) / L_min)`, which is below 3.84 (the 95% point of chi-square with one degree of
//! freedom) on the 95% interval. Where the profile stays below that up to a search bound, the
//! data do not determine the parameter on that side: every value out to the bound fits
//! equally well. The figures are taken as independent, which errors shared by the rows of one
//! configuration are not, so the intervals are the data's own statement, not a coverage
//! guarantee; grouped cross-validation (`servesim validate`) is what measures the model's
//! error on data it was not fitted on.
//!
//! Every parameter is searched in its logarithm (positive, scale-free steps).

use serde::Serialize;

use super::fit::nelder_mead;

/// The 95% point of the chi-square distribution with one degree of freedom.
pub const CHI2_1_95: f64 = 3.841_458_820_694_124;

/// What the data say about one parameter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower end, in the parameter's unit (the search bound when `open_low`).
    pub low: f64,
    /// Upper end, in the parameter's unit (the search bound when `open_high`).
    pub high: f64,
    /// The profile stays within the threshold down to the lower search bound: the data set no
    /// lower limit.
    pub open_low: bool,
    /// The profile stays within the threshold up to the upper search bound: the data set no
    /// upper limit.
    pub open_high: bool,
}

impl Interval {
    /// Whether the data bound the parameter on both sides.
    pub fn determined(&self) -> bool {
        !self.open_low && !self.open_high
    }

    /// `v` moved into the interval (the nearest end when outside).
    pub fn clamp(&self, v: f64) -> f64 {
        v.clamp(self.low, self.high)
    }

    /// A short statement: `95% interval [a, b]`, or that the files do not determine it and
    /// the range that fits equally well.
    pub fn describe(&self, fmt: &dyn Fn(f64) -> String) -> String {
        let range = format!("[{}, {}]", fmt(self.low), fmt(self.high));
        match (self.open_low, self.open_high) {
            (false, false) => format!("95% interval {range}"),
            (true, false) => format!(
                "not determined by these files: at most {} (fits equally well in {range})",
                fmt(self.high)
            ),
            (false, true) => format!(
                "not determined by these files: at least {} (fits equally well in {range})",
                fmt(self.low)
            ),
            (true, true) => format!("not determined by these files (fits equally well in {range})"),
        }
    }
}

/// How to profile: the step of the outward march (in the logarithm), the bisections that
/// refine a crossing, and the inner refit's effort.
#[derive(Debug, Clone, Copy)]
pub struct ProfileOptions {
    /// Step of the outward march from the optimum, natural log units.
    pub step_ln: f64,
    /// Most steps of the march per side (it also stops at the bound).
    pub max_steps: usize,
    /// Bisections of a bracketed crossing.
    pub bisections: usize,
    /// Nelder-Mead iterations of each inner refit.
    pub inner_iterations: usize,
    /// Relative tolerance of each inner refit.
    pub inner_tol: f64,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            step_ln: 0.7,
            max_steps: 24,
            bisections: 7,
            inner_iterations: 60,
            inner_tol: 1e-6,
        }
    }
}

/// Profile-likelihood intervals of the coordinates `coords` of `x_opt` (logarithms of the
/// parameters) for the mean loss `loss` over `n` figures, with `bounds_ln` the search bounds
/// of each logarithm. `x_opt` is the data's optimum: where holding one parameter finds a lower
/// loss than at `x_opt`, the minimum found is used as the reference instead. Returns one
/// [`Interval`] per coordinate of `coords`, in the parameters' units.
pub fn profile_intervals(
    loss: &dyn Fn(&[f64]) -> f64,
    n: usize,
    x_opt: &[f64],
    bounds_ln: &[(f64, f64)],
    coords: &[usize],
    opts: ProfileOptions,
) -> Vec<Interval> {
    // An optimiser may return a point a rounding step outside a bound (the losses clamp it
    // before use): the profile starts from the point they actually evaluate, so that no end
    // of an interval falls outside its search bound.
    let x_opt: Vec<f64> = x_opt
        .iter()
        .zip(bounds_ln)
        .map(|(&v, &(lo, hi))| v.clamp(lo, hi))
        .collect();
    let x_opt = x_opt.as_slice();
    let base = loss(x_opt);
    // First pass: the profile at each probed point, per coordinate and side.
    let mut sides: Vec<[Vec<(f64, f64)>; 2]> = Vec::with_capacity(coords.len());
    let mut best = base;
    for &k in coords {
        let mut per_side: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for (s, dir) in [(0usize, -1.0f64), (1, 1.0)] {
            let (lo, hi) = bounds_ln[k];
            // The far bound first: where the data leave it within the threshold, that side
            // is open and needs no march (the profile rises away from the optimum).
            let bound = if s == 0 { lo } else { hi };
            if bound != x_opt[k] {
                let (_, l) = refit_at(loss, x_opt, k, bound, opts);
                best = best.min(l);
                if ratio(n, l, best) <= CHI2_1_95 {
                    per_side[s].push((bound, l));
                    continue;
                }
            }
            let mut rest = x_opt.to_vec();
            let mut v = x_opt[k];
            for _ in 0..opts.max_steps {
                let next = (v + dir * opts.step_ln).clamp(lo, hi);
                if next == v {
                    break;
                }
                v = next;
                let (r, l) = refit_at(loss, &rest, k, v, opts);
                rest = r;
                best = best.min(l);
                per_side[s].push((v, l));
                if ratio(n, l, best) > 2.0 * CHI2_1_95 {
                    break;
                }
            }
        }
        sides.push(per_side);
    }
    // Second pass: find each side's crossing against the best loss seen.
    coords
        .iter()
        .zip(&sides)
        .map(|(&k, sides_k)| {
            let (lo, hi) = bounds_ln[k];
            let mut ends = [lo, hi];
            let mut open = [true, true];
            for s in 0..2 {
                let mut inside = (x_opt[k], base);
                for &(v, l) in &sides_k[s] {
                    if ratio(n, l, best) > CHI2_1_95 {
                        ends[s] = crossing(loss, n, best, x_opt, k, inside.0, v, opts);
                        open[s] = false;
                        break;
                    }
                    inside = (v, l);
                }
                if open[s] {
                    // No crossing up to the bound: the far point fits equally well.
                    ends[s] = inside.0;
                }
            }
            Interval {
                low: ends[0].exp(),
                high: ends[1].exp(),
                open_low: open[0],
                open_high: open[1],
            }
        })
        .collect()
}

/// The likelihood ratio statistic of a mean loss `l` against the best `best`, over `n` figures.
fn ratio(n: usize, l: f64, best: f64) -> f64 {
    if !(l.is_finite()) {
        return f64::INFINITY;
    }
    n as f64 * (l.max(best) / best.max(1e-300)).ln()
}

/// The other coordinates refitted with coordinate `k` held at `v`, from `start`: (point, loss).
fn refit_at(
    loss: &dyn Fn(&[f64]) -> f64,
    start: &[f64],
    k: usize,
    v: f64,
    opts: ProfileOptions,
) -> (Vec<f64>, f64) {
    let others: Vec<f64> = start
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != k)
        .map(|(_, &x)| x)
        .collect();
    let full = |y: &[f64]| -> Vec<f64> {
        let mut x = Vec::with_capacity(y.len() + 1);
        x.extend_from_slice(&y[..k]);
        x.push(v);
        x.extend_from_slice(&y[k..]);
        x
    };
    if others.is_empty() {
        let x = full(&[]);
        let l = loss(&x);
        return (x, l);
    }
    let f = |y: &[f64]| loss(&full(y));
    let (y, l) = nelder_mead(&f, &others, 0.3, opts.inner_tol, opts.inner_iterations);
    let start_l = f(&others);
    if start_l <= l {
        (full(&others), start_l)
    } else {
        (full(&y), l)
    }
}

/// Bisects the crossing of the threshold between `inside` (within) and `outside` (beyond).
#[allow(clippy::too_many_arguments)]
fn crossing(
    loss: &dyn Fn(&[f64]) -> f64,
    n: usize,
    best: f64,
    x_opt: &[f64],
    k: usize,
    mut inside: f64,
    mut outside: f64,
    opts: ProfileOptions,
) -> f64 {
    for _ in 0..opts.bisections {
        let mid = 0.5 * (inside + outside);
        let (_, l) = refit_at(loss, x_opt, k, mid, opts);
        if ratio(n, l, best) > CHI2_1_95 {
            outside = mid;
        } else {
            inside = mid;
        }
    }
    0.5 * (inside + outside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_the_loss_ignores_is_not_determined_and_one_it_sees_is() {
        // x0 sets the loss (a parabola around ln 2 plus a noise floor), x1 only below ln 0.1:
        // like a host cost that hides under the GPU above some value.
        let loss = |x: &[f64]| {
            let a = (x[0] - 2f64.ln()).powi(2);
            let b = (0.1f64.ln() - x[1]).max(0.0).powi(2);
            0.01 + a + b
        };
        let x_opt = [2f64.ln(), 1f64.ln()];
        let bounds = [(1e-3f64.ln(), 1e3f64.ln()), (1e-3f64.ln(), 1e3f64.ln())];
        let iv = profile_intervals(
            &loss,
            100,
            &x_opt,
            &bounds,
            &[0, 1],
            ProfileOptions::default(),
        );
        // x0: 100 ln(1 + a / 0.01) = 3.84 at a = 3.92e-4, |ln x - ln 2| = 0.0198.
        assert!(iv[0].determined(), "{:?}", iv[0]);
        assert!(
            (iv[0].low / 2.0 - (-0.0198f64).exp()).abs() < 0.01,
            "{:?}",
            iv[0]
        );
        assert!(
            (iv[0].high / 2.0 - 0.0198f64.exp()).abs() < 0.01,
            "{:?}",
            iv[0]
        );
        // x1: no upper limit, a lower one just under 0.1.
        assert!(!iv[1].determined() && iv[1].open_high && !iv[1].open_low);
        assert!((iv[1].high - 1e3).abs() < 1e-6, "{:?}", iv[1]);
        assert!(iv[1].low > 0.09 && iv[1].low < 0.1, "{:?}", iv[1]);
        let text = iv[1].describe(&|v| format!("{v:.3}"));
        assert!(
            text.starts_with("not determined by these files: at least 0.09"),
            "{text}"
        );
        assert_eq!(iv[1].clamp(0.01), iv[1].low);
    }
}
