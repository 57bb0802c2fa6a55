//! Token-length distributions: fixed, uniform (vLLM's random dataset), clamped normal, clamped
//! lognormal and empirical (sampled from a file or an inline list). Every sampled length is an
//! integer >= 1.

use std::path::Path;

use rand::Rng;
use rand_distr::StandardNormal;

use super::LengthConfig;
use crate::error::{Error, Result};

/// A ready-to-sample length distribution (tokens). Built once; sampling never allocates.
#[derive(Debug, Clone)]
pub(crate) enum LengthSampler {
    /// Always this many tokens.
    Fixed(u32),
    /// Uniform integer in `[lo, hi]` tokens.
    Uniform { lo: u32, hi: u32 },
    /// `clamp(round(N(mean, std)), lo, hi)` tokens.
    Normal {
        mean: f64,
        std: f64,
        lo: u32,
        hi: u32,
    },
    /// `clamp(round(exp(N(mu, sigma))), lo, hi)` tokens.
    Lognormal {
        mu: f64,
        sigma: f64,
        lo: u32,
        hi: u32,
    },
    /// A value drawn uniformly from `values` (sorted ascending, non-empty), tokens; or, for
    /// an inline list, request `i` gets `in_order[i mod n]` (the list as given).
    Empirical {
        values: Vec<u32>,
        mean: f64,
        in_order: Option<Vec<u32>>,
    },
}

/// Rounds `x` tokens to an integer and clamps it into `[lo, hi]` (NaN gives `lo`).
pub(crate) fn to_tokens(x: f64, lo: u32, hi: u32) -> u32 {
    let r = crate::numeric::round(x);
    if r.is_nan() || r <= lo as f64 {
        lo
    } else if r >= hi as f64 {
        hi
    } else {
        // In (lo, hi) ⊂ u32 range, so the cast is exact.
        r as u32
    }
}

/// Complementary error function, fractional error below 1.2e-7 everywhere (Numerical Recipes'
/// Chebyshev fit `erfcc`). Enough for expected values that are compared at the 1e-3 level.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Standard normal cumulative distribution function.
pub(crate) fn phi_cdf(x: f64) -> f64 {
    if x == f64::INFINITY {
        return 1.0;
    }
    if x == f64::NEG_INFINITY {
        return 0.0;
    }
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Standard normal density.
fn phi_pdf(x: f64) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Bounds `[lo, hi]` of a clamped distribution: at least 1 token, `hi >= lo`.
fn bounds(min: Option<u32>, max: Option<u32>) -> (u32, u32) {
    let lo = min.unwrap_or(1).max(1);
    let hi = max.unwrap_or(u32::MAX).max(lo);
    (lo, hi)
}

impl LengthSampler {
    /// The shortest length this sampler draws, tokens.
    pub(crate) fn min(&self) -> u32 {
        match self {
            LengthSampler::Fixed(t) => *t,
            LengthSampler::Uniform { lo, .. }
            | LengthSampler::Normal { lo, .. }
            | LengthSampler::Lognormal { lo, .. } => *lo,
            LengthSampler::Empirical { values, .. } => values.first().copied().unwrap_or(1),
        }
    }

    /// An empirical sampler over `values` (sorted ascending, non-empty), tokens.
    fn empirical(values: Vec<u32>, in_order: Option<Vec<u32>>) -> Self {
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
        LengthSampler::Empirical {
            values,
            mean,
            in_order,
        }
    }

    /// Builds a sampler from a validated config, loading an empirical file if needed.
    /// `origin` and `key` name the config value in errors.
    pub(crate) fn from_config(cfg: &LengthConfig, origin: &str, key: &str) -> Result<Self> {
        cfg.validate(origin, key)?;
        Ok(match cfg {
            LengthConfig::Fixed { tokens } => LengthSampler::Fixed(*tokens),
            LengthConfig::Uniform { mean, range_ratio } => {
                let lo =
                    ((mean * (1.0 - range_ratio)).floor().max(1.0)).min(u32::MAX as f64) as u32;
                let hi =
                    ((mean * (1.0 + range_ratio)).floor().max(1.0)).min(u32::MAX as f64) as u32;
                LengthSampler::Uniform { lo, hi: hi.max(lo) }
            }
            LengthConfig::Normal {
                mean,
                std,
                min,
                max,
            } => {
                let (lo, hi) = bounds(*min, *max);
                LengthSampler::Normal {
                    mean: *mean,
                    std: *std,
                    lo,
                    hi,
                }
            }
            LengthConfig::Lognormal {
                mean,
                median,
                min,
                max,
            } => {
                let (lo, hi) = bounds(*min, *max);
                // sigma^2 = 2 ln(mean/median) since mean = exp(mu + sigma^2/2), median = exp(mu).
                let sigma = (2.0 * (mean / median).ln()).max(0.0).sqrt();
                LengthSampler::Lognormal {
                    mu: median.ln(),
                    sigma,
                    lo,
                    hi,
                }
            }
            LengthConfig::Empirical { path } => {
                LengthSampler::empirical(load_empirical(Path::new(path))?, None)
            }
            LengthConfig::List { tokens } => {
                let mut values = tokens.clone();
                values.sort_unstable();
                LengthSampler::empirical(values, Some(tokens.clone()))
            }
        })
    }

    /// The length of the request with index `index` (0 for the first): an inline list's
    /// entry in turn, otherwise a draw as [`LengthSampler::sample`].
    pub(crate) fn sample_at<R: Rng + ?Sized>(&self, index: u64, rng: &mut R) -> u32 {
        match self {
            LengthSampler::Empirical {
                in_order: Some(seq),
                ..
            } => seq[(index % seq.len() as u64) as usize],
            _ => self.sample(rng),
        }
    }

    /// Draws one length, tokens (>= 1).
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        match self {
            LengthSampler::Fixed(t) => *t,
            // from_config makes hi >= lo, so the range is never empty.
            LengthSampler::Uniform { lo, hi } => rng.gen_range(*lo..=(*hi).max(*lo)),
            LengthSampler::Normal { mean, std, lo, hi } => {
                let z: f64 = rng.sample(StandardNormal);
                to_tokens(mean + std * z, *lo, *hi)
            }
            LengthSampler::Lognormal { mu, sigma, lo, hi } => {
                let z: f64 = rng.sample(StandardNormal);
                to_tokens((mu + sigma * z).exp(), *lo, *hi)
            }
            // `values` is non-empty (load_empirical refuses an empty file), so the range is too.
            LengthSampler::Empirical { values, .. } => values[rng.gen_range(0..values.len())],
        }
    }

    /// Probability that a sampled length is <= `k` tokens.
    pub(crate) fn cdf(&self, k: u32) -> f64 {
        let step = |v: u32| if k >= v { 1.0 } else { 0.0 };
        match self {
            LengthSampler::Fixed(t) => step(*t),
            LengthSampler::Uniform { lo, hi } => {
                if k < *lo {
                    0.0
                } else if k >= *hi {
                    1.0
                } else {
                    (k - lo + 1) as f64 / (*hi as f64 - *lo as f64 + 1.0)
                }
            }
            LengthSampler::Normal { mean, std, lo, hi } => {
                if k < *lo {
                    0.0
                } else if k >= *hi {
                    1.0
                } else if *std <= 0.0 {
                    step(to_tokens(*mean, *lo, *hi))
                } else {
                    phi_cdf((k as f64 + 0.5 - mean) / std)
                }
            }
            LengthSampler::Lognormal { mu, sigma, lo, hi } => {
                if k < *lo {
                    0.0
                } else if k >= *hi {
                    1.0
                } else if *sigma <= 0.0 {
                    step(to_tokens(mu.exp(), *lo, *hi))
                } else {
                    phi_cdf(((k as f64 + 0.5).ln() - mu) / sigma)
                }
            }
            LengthSampler::Empirical { values, .. } => {
                values.partition_point(|&v| v <= k) as f64 / values.len() as f64
            }
        }
    }

    /// Expected length, tokens. Exact for fixed, uniform and empirical; for the clamped normal
    /// and lognormal it is the mean of the clamped continuous variable (rounding to integers
    /// moves it by well under one token).
    pub(crate) fn mean(&self) -> f64 {
        match self {
            LengthSampler::Fixed(t) => *t as f64,
            LengthSampler::Uniform { lo, hi } => (*lo as f64 + *hi as f64) / 2.0,
            LengthSampler::Normal { mean, std, lo, hi } => {
                if *std <= 0.0 {
                    return to_tokens(*mean, *lo, *hi) as f64;
                }
                let (a, b) = (*lo as f64, *hi as f64);
                let (al, be) = ((a - mean) / std, (b - mean) / std);
                a * phi_cdf(al)
                    + b * (1.0 - phi_cdf(be))
                    + mean * (phi_cdf(be) - phi_cdf(al))
                    + std * (phi_pdf(al) - phi_pdf(be))
            }
            LengthSampler::Lognormal { mu, sigma, lo, hi } => {
                if *sigma <= 0.0 {
                    return to_tokens(mu.exp(), *lo, *hi) as f64;
                }
                let (a, b) = (*lo as f64, *hi as f64);
                let s2 = sigma * sigma;
                let (la, lb) = (a.ln(), b.ln());
                a * phi_cdf((la - mu) / sigma)
                    + b * (1.0 - phi_cdf((lb - mu) / sigma))
                    + (mu + s2 / 2.0).exp()
                        * (phi_cdf((lb - mu - s2) / sigma) - phi_cdf((la - mu - s2) / sigma))
            }
            LengthSampler::Empirical { mean, .. } => *mean,
        }
    }
}

/// Parses a token count (an integer >= 1 that fits in u32; `12.0` is accepted).
/// The error is a message without location, for the caller to prefix.
pub(crate) fn parse_token_count(what: &str, text: &str) -> std::result::Result<u32, String> {
    let t = text.trim();
    let value: f64 = match t.parse::<i64>() {
        Ok(v) => v as f64,
        Err(_) => match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v.fract() == 0.0 => v,
            _ => return Err(format!("{what} '{t}' is not an integer")),
        },
    };
    if value < 1.0 {
        return Err(format!("{what} must be >= 1, got {t}"));
    }
    if value > u32::MAX as f64 {
        return Err(format!("{what} must be <= {}, got {t}", u32::MAX));
    }
    // In [1, u32::MAX] and integral, so the cast is exact.
    Ok(value as u32)
}

/// Loads an empirical length file: one token count per line (blank lines and `#` comments
/// skipped), or a CSV with a header that has a `tokens` column. Returns the counts sorted.
pub(crate) fn load_empirical(path: &Path) -> Result<Vec<u32>> {
    let shown = path.display().to_string();
    let text = crate::input::read_to_string(path, crate::input::InputKind::Table)?;
    let parse_err = |message: String| Error::Parse {
        path: shown.clone(),
        message,
    };
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let Some(first) = first else {
        return Err(parse_err("no token counts in the file".into()));
    };
    let mut values = Vec::new();
    if first.parse::<f64>().is_ok() || first.starts_with('-') {
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let v = parse_token_count("token count", l)
                .map_err(|m| parse_err(format!("line {}: {m}", i + 1)))?;
            values.push(v);
        }
    } else {
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let headers = rdr.headers().map_err(|e| parse_err(e.to_string()))?.clone();
        let col = headers
            .iter()
            .position(|h| h.eq_ignore_ascii_case("tokens"))
            .ok_or_else(|| {
                parse_err(format!(
                    "missing column 'tokens' (have: {})",
                    headers.iter().collect::<Vec<_>>().join(", ")
                ))
            })?;
        for rec in rdr.records() {
            let rec = rec.map_err(|e| parse_err(e.to_string()))?;
            let line = rec.position().map_or(0, |p| p.line());
            let field = rec.get(col).unwrap_or("");
            let v = parse_token_count("tokens", field)
                .map_err(|m| parse_err(format!("line {line}: {m}")))?;
            values.push(v);
        }
    }
    if values.is_empty() {
        return Err(parse_err("no token counts in the file".into()));
    }
    values.sort_unstable();
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn an_inline_list_is_replayed_in_order_and_bad_lists_name_the_key() {
        let cfg = LengthConfig::List {
            tokens: vec![900, 100, 100, 100],
        };
        let s = LengthSampler::from_config(&cfg, "t", "workload.output").unwrap();
        assert_eq!(s.mean(), 300.0);
        assert_eq!(s.min(), 100);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        // Request i gets the i-th entry, cycling; a plain draw is uniform over the list.
        let replay: Vec<u32> = (0..6).map(|i| s.sample_at(i, &mut rng)).collect();
        assert_eq!(replay, [900, 100, 100, 100, 900, 100]);
        let draws: Vec<u32> = (0..4000).map(|_| s.sample(&mut rng)).collect();
        let long = draws.iter().filter(|&&d| d == 900).count() as f64 / 4000.0;
        assert!((long - 0.25).abs() < 0.03, "{long}");
        let empty = LengthConfig::List { tokens: vec![] };
        let e = LengthSampler::from_config(&empty, "t", "workload.output").unwrap_err();
        assert!(e.to_string().contains("workload.output.tokens"), "{e}");
        let zero = LengthConfig::List { tokens: vec![3, 0] };
        let e = LengthSampler::from_config(&zero, "t", "workload.output").unwrap_err();
        assert!(e.to_string().contains("index 1"), "{e}");
    }

    fn sample_mean(s: &LengthSampler, n: usize) -> (f64, u32, u32) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (mut sum, mut lo, mut hi) = (0.0, u32::MAX, 0);
        for _ in 0..n {
            let v = s.sample(&mut rng);
            sum += v as f64;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        (sum / n as f64, lo, hi)
    }

    #[test]
    fn phi_matches_known_values() {
        assert!((phi_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((phi_cdf(1.959_963_985) - 0.975).abs() < 1e-6);
        assert!((phi_cdf(-1.0) - 0.158_655_254).abs() < 1e-6);
    }

    #[test]
    fn uniform_follows_vllm_random_bounds() {
        let cfg = LengthConfig::Uniform {
            mean: 1000.0,
            range_ratio: 0.5,
        };
        let s = LengthSampler::from_config(&cfg, "t", "workload.input").unwrap();
        let (m, lo, hi) = sample_mean(&s, 100_000);
        assert_eq!((lo, hi), (500, 1500));
        assert!((m - 1000.0).abs() < 5.0, "{m}");
        assert_eq!(s.mean(), 1000.0);
        assert!((s.cdf(999) - 0.5).abs() < 0.01);
    }

    #[test]
    fn clamped_normal_and_lognormal_means_match_samples() {
        let cfgs = [
            LengthConfig::Normal {
                mean: 100.0,
                std: 80.0,
                min: Some(20),
                max: Some(150),
            },
            LengthConfig::Lognormal {
                mean: 300.0,
                median: 150.0,
                min: None,
                max: Some(1000),
            },
            LengthConfig::Lognormal {
                mean: 28.0,
                median: 13.0,
                min: None,
                max: None,
            },
        ];
        for cfg in &cfgs {
            let s = LengthSampler::from_config(cfg, "t", "k").unwrap();
            let (m, lo, _) = sample_mean(&s, 200_000);
            assert!(lo >= 1);
            assert!(
                (m - s.mean()).abs() / s.mean() < 0.01,
                "{cfg:?}: {m} vs {}",
                s.mean()
            );
        }
    }

    #[test]
    fn extreme_parameters_never_panic() {
        let s = LengthSampler::from_config(
            &LengthConfig::Lognormal {
                mean: 1e300,
                median: 1.0,
                min: None,
                max: None,
            },
            "t",
            "k",
        )
        .unwrap();
        let (_, lo, _) = sample_mean(&s, 1000);
        assert!(lo >= 1);
        assert!(!s.mean().is_nan());
    }

    #[test]
    fn empirical_file_plain_and_csv() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lens.txt");
        std::fs::write(&p, "# counts\n10\n20\n\n30\n").unwrap();
        assert_eq!(load_empirical(&p).unwrap(), vec![10, 20, 30]);
        let c = dir.path().join("lens.csv");
        std::fs::write(&c, "id,tokens\na,5\nb,7\n").unwrap();
        assert_eq!(load_empirical(&c).unwrap(), vec![5, 7]);
        std::fs::write(&c, "id,toks\na,5\n").unwrap();
        let e = load_empirical(&c).unwrap_err().to_string();
        assert!(
            e.contains("missing column 'tokens' (have: id, toks)"),
            "{e}"
        );
        std::fs::write(&p, "10\n0\n").unwrap();
        let e = load_empirical(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains(">= 1"), "{e}");
        std::fs::write(&p, "10\nx\n").unwrap();
        let e = load_empirical(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("not an integer"), "{e}");
        let s = LengthSampler::from_config(
            &LengthConfig::Empirical {
                path: c.display().to_string().replace("lens.csv", "missing.csv"),
            },
            "t",
            "k",
        );
        assert!(s.is_err());
    }
}
