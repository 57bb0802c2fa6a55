//! Built-in datasets: length distributions fitted to published statistics of real workloads.
//!
//! Each dataset is a pair of [`LengthConfig`]s (input, output). Where a mean and a median are
//! both known, a lognormal is fitted to them (sigma^2 = 2 ln(mean/median), mu = ln(median)).
//! docs/workloads.md lists the figures, their sources and the fits.

use rand::Rng;

use super::lengths::LengthSampler;
use super::LengthConfig;

/// Names of the built-in datasets, in the order docs/workloads.md lists them.
pub const DATASET_NAMES: [&str; 5] = [
    "sharegpt",
    "azure-conv-2023",
    "azure-code-2023",
    "arxiv-summarization",
    "random",
];

/// A built-in dataset: where its lengths come from and how they are distributed.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Name used in `workload.dataset`.
    pub name: &'static str,
    /// Prompt-length distribution, tokens; `None` for `random` (the config's `input` is used).
    pub input: Option<LengthConfig>,
    /// Output-length distribution, tokens; `None` for `random` (the config's `output` is used).
    pub output: Option<LengthConfig>,
    /// Whether vLLM's ShareGPT filter applies to each (input, output) pair (see
    /// [`SHAREGPT_FILTER`]).
    pub sharegpt_filter: bool,
    /// Where the figures come from.
    pub source: &'static str,
}

/// vLLM `benchmark_serving`'s ShareGPT filter, token counts: a pair is kept when
/// prompt >= `min_input`, output >= `min_output`, prompt <= `max_input` and
/// prompt + output <= `max_total` (vLLM `benchmarks/benchmark_dataset.py`,
/// `is_valid_sequence` with its defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGptFilter {
    /// Smallest prompt kept, tokens.
    pub min_input: u32,
    /// Smallest output kept, tokens.
    pub min_output: u32,
    /// Largest prompt kept, tokens.
    pub max_input: u32,
    /// Largest prompt + output kept, tokens.
    pub max_total: u32,
}

/// The filter vLLM applies to ShareGPT.
pub const SHAREGPT_FILTER: ShareGptFilter = ShareGptFilter {
    min_input: 4,
    min_output: 4,
    max_input: 1024,
    max_total: 2048,
};

impl ShareGptFilter {
    /// Whether the filter keeps a request of `input` prompt and `output` output tokens.
    pub fn accepts(&self, input: u32, output: u32) -> bool {
        input >= self.min_input
            && output >= self.min_output
            && input <= self.max_input
            && input as u64 + output as u64 <= self.max_total as u64
    }

    /// Draws pairs until the filter keeps one (vLLM skips rejected conversations). After
    /// `MAX_TRIES` rejections (only when the acceptance probability is tiny, which
    /// [`Self::expected`] lets the caller refuse up front) the last pair is clamped in.
    pub(crate) fn sample<R: Rng + ?Sized>(
        &self,
        input: &LengthSampler,
        output: &LengthSampler,
        rng: &mut R,
    ) -> (u32, u32) {
        const MAX_TRIES: u32 = 10_000;
        let (mut i, mut o) = (0, 0);
        for _ in 0..MAX_TRIES {
            i = input.sample(rng);
            o = output.sample(rng);
            if self.accepts(i, o) {
                return (i, o);
            }
        }
        // Saturating bounds, so that even an inconsistent filter cannot make clamp panic.
        let i = i.clamp(self.min_input, self.max_input.max(self.min_input));
        let top = self.max_total.saturating_sub(i).max(self.min_output);
        (i, o.clamp(self.min_output, top))
    }

    /// (acceptance probability, mean input, mean output) of filtered pairs of independent
    /// draws, exact for the discrete distributions (a sum over every kept prompt length).
    pub(crate) fn expected(
        &self,
        input: &LengthSampler,
        output: &LengthSampler,
    ) -> (f64, f64, f64) {
        let max_out = self.max_total.saturating_sub(self.min_input);
        // Prefix sums over output lengths k in [min_output, max_out] of P(k) and k P(k).
        let mut cum_p = vec![0.0; max_out as usize + 1];
        let mut cum_kp = vec![0.0; max_out as usize + 1];
        // Lengths are >= 1, so starting at 1 loses nothing and keeps `k - 1` in range.
        let min_out = self.min_output.max(1);
        let mut prev_cdf = output.cdf(min_out - 1);
        for k in min_out..=max_out {
            let c = output.cdf(k);
            let p = (c - prev_cdf).max(0.0);
            prev_cdf = c;
            cum_p[k as usize] = cum_p[k as usize - 1] + p;
            cum_kp[k as usize] = cum_kp[k as usize - 1] + k as f64 * p;
        }
        let (mut z, mut sum_in, mut sum_out) = (0.0, 0.0, 0.0);
        let min_in = self.min_input.max(1);
        let mut prev_cdf = input.cdf(min_in - 1);
        // i <= max_total, so `top` <= max_out indexes the prefix sums.
        for i in min_in..=self.max_input.min(self.max_total) {
            let c = input.cdf(i);
            let p = (c - prev_cdf).max(0.0);
            prev_cdf = c;
            let top = (self.max_total - i).min(max_out) as usize;
            z += p * cum_p[top];
            sum_in += i as f64 * p * cum_p[top];
            sum_out += p * cum_kp[top];
        }
        if z > 0.0 {
            (z, sum_in / z, sum_out / z)
        } else {
            (0.0, 0.0, 0.0)
        }
    }
}

fn lognormal(mean: f64, median: f64) -> LengthConfig {
    LengthConfig::Lognormal {
        mean,
        median,
        min: None,
        max: None,
    }
}

/// The built-in dataset of that name, if any.
pub fn dataset(name: &str) -> Option<Dataset> {
    Some(match name {
        // ShareGPT V3 (ShareGPT_V3_unfiltered_cleaned_split.json) as vLLM benchmark_serving
        // samples it: after the filter, input mean ~230 and output mean ~200 tokens (project
        // issue's figures). Medians are not published with them; we assume a long tail with
        // the lognormals' medians at 170 (input) and 140 (output) tokens and solved the means
        // (297, 204) so that the *filtered* means land at 229.9 and 200.3 tokens; 95% of
        // draws pass the filter.
        "sharegpt" => Dataset {
            name: "sharegpt",
            input: Some(lognormal(297.0, 170.0)),
            output: Some(lognormal(204.0, 140.0)),
            sharegpt_filter: true,
            source: "ShareGPT V3 with vLLM's benchmark_serving filter: input mean ~230, output mean ~200 tokens; medians assumed (170/140 before the filter)",
        },
        // Azure LLM inference trace 2023, conversation service (AzurePublicDataset,
        // AzureLLMInferenceTrace_conv), statistics as reported by Patel et al., "Splitwise",
        // ISCA 2024: input mean 1155 / median 1020, output mean 211 / median 129 tokens.
        "azure-conv-2023" => Dataset {
            name: "azure-conv-2023",
            input: Some(lognormal(1155.0, 1020.0)),
            output: Some(lognormal(211.0, 129.0)),
            sharegpt_filter: false,
            source: "Azure LLM inference trace 2023, conversation (Splitwise, ISCA 2024): input mean 1155 / median 1020, output mean 211 / median 129",
        },
        // Azure LLM inference trace 2023, coding service (AzureLLMInferenceTrace_code), same
        // source: input mean 2048 / median 1469, output mean 28 / median 13 tokens.
        "azure-code-2023" => Dataset {
            name: "azure-code-2023",
            input: Some(lognormal(2048.0, 1469.0)),
            output: Some(lognormal(28.0, 13.0)),
            sharegpt_filter: false,
            source: "Azure LLM inference trace 2023, coding (Splitwise, ISCA 2024): input mean 2048 / median 1469, output mean 28 / median 13",
        },
        // arXiv summarization (Cohan et al., NAACL 2018) as used for serving benchmarks; the
        // figures (input mean 2588 / median 2730, output mean 291 / median 167 tokens) are the
        // project issue's. The input mean is below its median, which no lognormal can do: we
        // use a normal with median 2730 clamped to [256, 4096] (documents truncated at a 4k
        // context pile up at the cap), with std 1660 solved so the clamped mean is 2588.
        "arxiv-summarization" => Dataset {
            name: "arxiv-summarization",
            input: Some(LengthConfig::Normal {
                mean: 2730.0,
                std: 1660.0,
                min: Some(256),
                max: Some(4096),
            }),
            output: Some(lognormal(291.0, 167.0)),
            sharegpt_filter: false,
            source: "arXiv summarization: input mean 2588 / median 2730 (clamped normal), output mean 291 / median 167",
        },
        // vLLM's random dataset: lengths come from the config's input and output.
        "random" => Dataset {
            name: "random",
            input: None,
            output: None,
            sharegpt_filter: false,
            source: "vLLM random dataset: the config's input and output distributions",
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{ArrivalConfig, RequestGenerator, WorkloadConfig};

    /// Samples 100,000 requests of a dataset; returns (mean in, median in, mean out,
    /// median out) and the generator's expected means.
    fn stats(name: &str) -> ([f64; 4], (f64, f64)) {
        let cfg = WorkloadConfig {
            arrival: ArrivalConfig::Offline,
            dataset: Some(name.into()),
            input: None,
            output: None,
            num_requests: Some(100_000),
            duration_s: None,
            prefix: None,
            max_concurrency: None,
            sessions: None,
        };
        let mut g = RequestGenerator::new(&cfg, 42, "test").unwrap();
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        while let Some(r) = g.next_request() {
            ins.push(r.input_tokens);
            outs.push(r.output_tokens);
        }
        assert_eq!(ins.len(), 100_000);
        let mean = |v: &[u32]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let median = |v: &mut Vec<u32>| {
            v.sort_unstable();
            v[v.len() / 2] as f64
        };
        let (mi, mo) = (mean(&ins), mean(&outs));
        let s = [mi, median(&mut ins), mo, median(&mut outs)];
        // The generator's analytic means agree with what it samples.
        assert!(
            (g.mean_input_tokens() / mi - 1.0).abs() < 0.01,
            "{name}: {}",
            g.mean_input_tokens()
        );
        assert!(
            (g.mean_output_tokens() / mo - 1.0).abs() < 0.02,
            "{name}: {}",
            g.mean_output_tokens()
        );
        (s, (g.mean_input_tokens(), g.mean_output_tokens()))
    }

    fn near(got: f64, want: f64, tol: f64, what: &str) {
        assert!(
            (got / want - 1.0).abs() <= tol,
            "{what}: got {got}, want {want} ±{}%",
            tol * 100.0
        );
    }

    #[test]
    fn sharegpt_filtered_means() {
        let (s, _) = stats("sharegpt");
        near(s[0], 230.0, 0.05, "sharegpt input mean");
        near(s[2], 200.0, 0.05, "sharegpt output mean");
    }

    #[test]
    fn sharegpt_respects_the_filter() {
        let cfg = WorkloadConfig {
            arrival: ArrivalConfig::Offline,
            dataset: Some("sharegpt".into()),
            input: None,
            output: None,
            num_requests: Some(20_000),
            duration_s: None,
            prefix: None,
            max_concurrency: None,
            sessions: None,
        };
        let mut g = RequestGenerator::new(&cfg, 1, "test").unwrap();
        while let Some(r) = g.next_request() {
            assert!(
                SHAREGPT_FILTER.accepts(r.input_tokens, r.output_tokens),
                "{r:?}"
            );
        }
    }

    #[test]
    fn azure_conv_2023() {
        let (s, _) = stats("azure-conv-2023");
        near(s[0], 1155.0, 0.05, "input mean");
        near(s[1], 1020.0, 0.05, "input median");
        near(s[2], 211.0, 0.05, "output mean");
        near(s[3], 129.0, 0.05, "output median");
    }

    #[test]
    fn azure_code_2023() {
        let (s, _) = stats("azure-code-2023");
        near(s[0], 2048.0, 0.05, "input mean");
        near(s[1], 1469.0, 0.05, "input median");
        near(s[2], 28.0, 0.05, "output mean");
        near(s[3], 13.0, 0.05, "output median");
    }

    #[test]
    fn arxiv_summarization() {
        let (s, _) = stats("arxiv-summarization");
        // The clamped normal fits both input figures within 5% (no 10% allowance needed).
        near(s[0], 2588.0, 0.05, "input mean");
        near(s[1], 2730.0, 0.05, "input median");
        near(s[2], 291.0, 0.05, "output mean");
        near(s[3], 167.0, 0.05, "output median");
    }

    #[test]
    fn random_uses_the_config_lengths() {
        let cfg = WorkloadConfig {
            arrival: ArrivalConfig::Offline,
            dataset: Some("random".into()),
            input: Some(LengthConfig::Uniform {
                mean: 1024.0,
                range_ratio: 0.25,
            }),
            output: Some(LengthConfig::Fixed { tokens: 128 }),
            num_requests: Some(100_000),
            duration_s: None,
            prefix: None,
            max_concurrency: None,
            sessions: None,
        };
        let mut g = RequestGenerator::new(&cfg, 9, "test").unwrap();
        let mut sum = 0.0;
        while let Some(r) = g.next_request() {
            assert!((768..=1280).contains(&r.input_tokens));
            assert_eq!(r.output_tokens, 128);
            sum += r.input_tokens as f64;
        }
        near(sum / 100_000.0, 1024.0, 0.05, "random input mean");
        assert_eq!(g.mean_input_tokens(), 1024.0);
        assert!(dataset("nope").is_none());
        for n in DATASET_NAMES {
            assert_eq!(dataset(n).map(|d| d.name), Some(n));
        }
    }
}
