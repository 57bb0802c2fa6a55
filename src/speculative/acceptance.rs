//! Tokens gained per verify step as a distribution, and the verify steps a request of `d`
//! decode tokens needs: the renewal count behind the measured `spec_decode_mean_acceptance_length`
//! (docs/speculative-decoding.md, "Outputs").
//!
//! A verify step gains G tokens, G in 1..=K+1 (the accepted drafts plus the bonus token). A
//! request with `d` decode tokens left needs N(d) = 1 + N(d - G) steps, N(<= 0) = 0: its last
//! step's gain is capped by what remains, so short outputs gain fewer tokens per step than the
//! acceptance's mean L. E[N(d)] follows the renewal recursion
//! `E[N(d)] = 1 + sum_j P(G = j) E[N(d - j)]`, and E[N(d)] - d / L tends to a constant (one
//! per residue of d modulo the span of G's support), which [`VerifySteps`] uses past its table.

/// Exact E[N(d)] is tabulated up to this many tokens; past it, the renewal asymptote. Its
/// error shrinks geometrically with the table's length (under 1e-9 steps past 2,048 tokens
/// for the acceptances the tests try) and is zero for a deterministic gain (the table's last
/// period repeats with slope 1 / L). Whatever the acceptance, E[N(d)] = (d + overshoot) / L
/// with the last step's expected overshoot in [0, K] (Wald's identity), so the asymptote is off
/// by less than K / L steps: under K / d (0.1% at K = 16) of a request past the table.
pub const EXACT_TOKENS: usize = 1 << 14;

/// The distribution of tokens a sequence gains per verify step, G in 1..=K+1 (the bonus token
/// included).
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptanceLengths {
    /// `probs[j - 1]` = P(G = j), j = 1..=K+1; sums to 1.
    probs: Vec<f64>,
}

impl AcceptanceLengths {
    /// From conditional acceptance rates p_1..p_K (draft token i accepted given 1..i-1 were):
    /// P(G = j) = p_1 ... p_{j-1} (1 - p_j) for j <= K, P(G = K+1) = p_1 ... p_K.
    pub fn from_rates(rates: &[f64]) -> AcceptanceLengths {
        let mut probs = Vec::with_capacity(rates.len() + 1);
        let mut reached = 1.0;
        for &p in rates {
            let p = p.clamp(0.0, 1.0);
            probs.push(reached * (1.0 - p));
            reached *= p;
        }
        probs.push(reached);
        AcceptanceLengths { probs }
    }

    /// The equivalent of a mean acceptance length `mean` at K drafted tokens: the chain with
    /// the same conditional rate p at every position whose expectation
    /// `1 + p + ... + p^K` is `mean` (p found by bisection; `mean` clamped to 1..=K+1).
    pub fn from_mean(k: u32, mean: f64) -> AcceptanceLengths {
        let k = k as usize;
        let target = mean.clamp(1.0, k as f64 + 1.0);
        let chain = |p: f64| super::expected_acceptance_length(&vec![p; k]);
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if chain(mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let p = if target >= k as f64 + 1.0 {
            1.0
        } else if target <= 1.0 {
            0.0
        } else {
            0.5 * (lo + hi)
        };
        AcceptanceLengths::from_rates(&vec![p; k])
    }

    /// P(G = j) for j = 1..=K+1, first j first.
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }

    /// The largest gain, K + 1 tokens.
    pub fn max_tokens(&self) -> usize {
        self.probs.len()
    }

    /// E[G], tokens per verify step (the chain expectation L).
    pub fn mean(&self) -> f64 {
        self.probs
            .iter()
            .enumerate()
            .map(|(i, p)| (i + 1) as f64 * p)
            .sum()
    }

    /// The span of G's support: the gcd of the gains with a non-zero probability (1 unless
    /// the first draft is always accepted and the support skips lengths, e.g. G = K+1 surely).
    pub fn span(&self) -> usize {
        let gcd = |mut a: usize, mut b: usize| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        (1..=self.probs.len())
            .filter(|&j| self.probs[j - 1] > 0.0)
            .fold(0, gcd)
            .max(1)
    }
}

/// E[N(d)], the expected verify steps a request of `d` decode tokens takes: exact up to
/// [`EXACT_TOKENS`] (or the longest `d` asked for at construction, if shorter), by the
/// renewal asymptote beyond.
#[derive(Debug, Clone)]
pub struct VerifySteps {
    /// `table[d]` = E[N(d)], steps, d = 0..=len-1.
    table: Vec<f64>,
    /// The span of G's support.
    span: usize,
    /// 1 / E[G], steps per token.
    steps_per_token: f64,
}

impl VerifySteps {
    /// The table for `dist`, exact through `max_tokens` decode tokens (at most
    /// [`EXACT_TOKENS`]): O(max_tokens x K).
    pub fn new(dist: &AcceptanceLengths, max_tokens: usize) -> VerifySteps {
        let n = max_tokens.clamp(1, EXACT_TOKENS);
        let probs = dist.probs();
        let mut table = vec![0.0; n + 1];
        for d in 1..=n {
            // Gains of d or more end the request in this step: E[N(<= 0)] = 0.
            let rest: f64 = probs
                .iter()
                .take(d - 1)
                .enumerate()
                .map(|(i, p)| p * table[d - 1 - i])
                .sum();
            table[d] = 1.0 + rest;
        }
        VerifySteps {
            table,
            span: dist.span(),
            steps_per_token: 1.0 / dist.mean(),
        }
    }

    /// E[N(d)], verify steps. Past the table: E[N(d')] + (d - d') / L with d' the table's last
    /// length congruent to `d` modulo the span.
    pub fn expected(&self, d: u64) -> f64 {
        let last = (self.table.len() - 1) as u64;
        if d <= last {
            return self.table[d as usize];
        }
        let span = self.span as u64;
        let back = (d - last).div_ceil(span) * span;
        let d0 = d - back;
        self.table[d0 as usize] + back as f64 * self.steps_per_token
    }
}

/// Tokens gained per verify step over the requests that speculated, `sum(d) / sum(steps)`:
/// each request's final run of speculated tokens (`final_runs`: (t, requests) pairs, t >= 1,
/// the runs that ended with the request's last token) takes E[N(t)] verify steps, its last step
/// capped by the tokens left; its other speculated tokens (`uncapped_tokens` over all
/// requests: runs that a plain or mixed step followed) take 1 / L steps each. `None` when no
/// speculated token was counted.
pub fn measured_acceptance_length(
    dist: &AcceptanceLengths,
    uncapped_tokens: u64,
    final_runs: impl Iterator<Item = (u64, u64)> + Clone,
) -> Option<f64> {
    let longest = final_runs.clone().map(|(t, _)| t).max().unwrap_or(0);
    let steps = VerifySteps::new(dist, usize::try_from(longest).unwrap_or(usize::MAX));
    let mut tokens = uncapped_tokens as f64;
    let mut verify = tokens * steps.steps_per_token;
    for (t, n) in final_runs.filter(|&(t, n)| t > 0 && n > 0) {
        tokens += t as f64 * n as f64;
        verify += steps.expected(t) * n as f64;
    }
    (verify > 0.0).then(|| tokens / verify)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Verify steps of one request of `d` tokens, sampled: G drawn per step from the chain
    /// (each draft accepted with its rate until the first rejection, plus the bonus), the last
    /// step capped by what remains.
    fn sampled_steps(rates: &[f64], d: u64, rng: &mut impl Rng) -> u64 {
        let (mut left, mut steps) = (d as i64, 0);
        while left > 0 {
            let mut gain = 1;
            for &p in rates {
                if rng.gen::<f64>() < p {
                    gain += 1;
                } else {
                    break;
                }
            }
            left -= gain;
            steps += 1;
        }
        steps
    }

    /// The exact renewal E[N(d)] against a seeded Monte Carlo of the capped process, within
    /// 4 standard errors, for several acceptances and lengths (tables of exactly d and of
    /// fewer tokens than d, so the asymptote is exercised too).
    #[test]
    fn the_renewal_count_matches_a_sampled_process() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        let n = 20_000;
        for rates in [
            vec![0.72; 3],
            vec![0.9, 0.7, 0.5],
            vec![0.85; 7],
            vec![1.0, 0.5, 1.0],
            vec![0.0; 2],
        ] {
            let dist = AcceptanceLengths::from_rates(&rates);
            for d in [1u64, 2, 3, 5, 16, 37, 128, 512] {
                let (mut sum, mut sq) = (0.0, 0.0);
                for _ in 0..n {
                    let s = sampled_steps(&rates, d, &mut rng) as f64;
                    sum += s;
                    sq += s * s;
                }
                let mean = sum / n as f64;
                let se = ((sq / n as f64 - mean * mean).max(0.0) / n as f64).sqrt();
                for exact in [
                    VerifySteps::new(&dist, d as usize).expected(d),
                    VerifySteps::new(&dist, 64).expected(d),
                ] {
                    assert!(
                        (exact - mean).abs() <= 4.0 * se + 1e-9,
                        "{rates:?} d = {d}: exact {exact}, sampled {mean} +- {se}"
                    );
                }
            }
        }
    }

    /// Past the exact table the asymptote agrees with the exact recursion (to 1e-9 steps),
    /// periodic supports included.
    #[test]
    fn the_asymptote_continues_the_exact_table() {
        for rates in [
            vec![0.72; 3],
            vec![0.99; 16],
            vec![1.0; 3],
            vec![1.0, 0.5, 1.0],
            vec![0.3],
        ] {
            let dist = AcceptanceLengths::from_rates(&rates);
            let short = VerifySteps::new(&dist, 2048);
            let long = VerifySteps::new(&dist, 6000);
            for d in [2049u64, 2050, 2051, 4000, 5999, 6000] {
                let (a, b) = (short.expected(d), long.expected(d));
                assert!((a - b).abs() < 1e-9, "{rates:?} d = {d}: {a} vs {b}");
            }
        }
        // Every draft accepted: G = K + 1 surely, N(d) = ceil(d / (K + 1)).
        let sure = VerifySteps::new(&AcceptanceLengths::from_rates(&[1.0; 3]), 8);
        for d in 0..40u64 {
            assert_eq!(sure.expected(d), d.div_ceil(4) as f64, "d = {d}");
        }
    }

    #[test]
    fn the_distribution_has_the_chain_mean_and_the_mean_length_its_equivalent() {
        for rates in [
            vec![0.72; 3],
            vec![0.9, 0.7, 0.5],
            vec![0.0; 4],
            vec![1.0; 2],
        ] {
            let dist = AcceptanceLengths::from_rates(&rates);
            assert!((dist.probs().iter().sum::<f64>() - 1.0).abs() < 1e-12);
            let l = super::super::expected_acceptance_length(&rates);
            assert!((dist.mean() - l).abs() < 1e-12, "{rates:?}");
        }
        for (k, l) in [(3, 2.4), (1, 1.5), (7, 3.27), (2, 1.0), (2, 3.0)] {
            let eq = AcceptanceLengths::from_mean(k, l);
            assert_eq!(eq.max_tokens(), k as usize + 1);
            assert!(
                (eq.mean() - l).abs() < 1e-9,
                "K = {k}, L = {l}: {}",
                eq.mean()
            );
        }
        assert_eq!(AcceptanceLengths::from_rates(&[1.0, 0.5, 1.0]).span(), 2);
        assert_eq!(AcceptanceLengths::from_rates(&[0.7; 3]).span(), 1);
    }

    /// Two-token outputs (one decode token) gain 1 per step; long ones approach L; none
    /// exceeds K + 1.
    #[test]
    fn the_measured_length_is_capped_by_the_outputs() {
        let dist = AcceptanceLengths::from_rates(&[0.8; 3]);
        let measured = |dist: &AcceptanceLengths, uncapped: u64, runs: &[(u64, u64)]| {
            measured_acceptance_length(dist, uncapped, runs.iter().copied())
        };
        assert_eq!(measured(&dist, 0, &[(1, 100)]), Some(1.0));
        let l = measured(&dist, 0, &[(100_000, 10)]).unwrap();
        assert!((l / dist.mean() - 1.0).abs() < 1e-4, "{l}");
        // Tokens outside final runs gain the full mean.
        let l = measured(&dist, 1000, &[]).unwrap();
        assert!((l / dist.mean() - 1.0).abs() < 1e-12, "{l}");
        let sure = AcceptanceLengths::from_rates(&[1.0; 3]);
        for d in 1..50u64 {
            let l = measured(&sure, 0, &[(d, 1)]).unwrap();
            assert!(l <= 4.0 + 1e-12, "d = {d}: {l}");
            assert_eq!(l, d as f64 / d.div_ceil(4) as f64);
        }
        assert_eq!(measured(&dist, 0, &[]), None);
    }
}
