//! The B200 profile's prefill-attention curve for MLA (DeepSeek-V3/R1, 128 query heads on one
//! GPU, q/k head dim 192, v head dim 128) against TensorRT-LLM 1.2.0rc5's own MLA context op
//! timed on a B200 (calibration/reference/b200-mla-context-trtllm-1.2.csv, from
//! ai-dynamo/aiconfigurator). The profile's `attention.mla_prefill_half_rate_tokens` was fitted
//! on the rows marked `fit`; the `held-out` rows score it here.

mod common;

use common::upper_median as median;
use servesim::gpu::GpuProfile;
use servesim::roofline::kernels::{prefill_attention_at_rate_s, prefill_attention_flops_per_s};

/// Query width of MLA prefill as the step model counts it: 128 heads x (192 + 128) / 2.
const Q_WIDTH: f64 = 128.0 * (192.0 + 128.0) / 2.0;

/// Signed errors (predicted / measured - 1) on the rows of one part, both KV formats, priced
/// as the step model prices one MLA prefill layer over batch x isl^2 / 2 attended pairs at its
/// prefill attention rate for the row's KV format (`kernels::prefill_attention_flops_per_s`;
/// on the B200 the FP8-KV rate is the BF16 rate, `prefill_fp8_kv_rate_vs_bf16` = 1).
fn errors(gpu: &GpuProfile, part: &str) -> Vec<f64> {
    common::reference_fields("calibration/reference/b200-mla-context-trtllm-1.2.csv", 7)
        .into_iter()
        .filter(|f| f[5] == part)
        .map(|f| {
            assert_eq!(f[2], "128", "{f:?}");
            let num = |i: usize| f[i].parse::<f64>().unwrap();
            let (batch, isl, us) = (num(0), num(1), num(4));
            let rate = prefill_attention_flops_per_s(gpu, f[3] == "fp8");
            let t = prefill_attention_at_rate_s(
                gpu,
                batch * isl * isl / 2.0,
                batch * isl,
                Q_WIDTH,
                rate,
            );
            t / (us * 1e-6) - 1.0
        })
        .collect()
}

/// The profile with the MLA half-rate in place, as the step model builds it for an MLA model
/// (`AttentionCurve::prefill_half_rate_tokens_for`).
fn mla(gpu: &GpuProfile) -> GpuProfile {
    let mut g = gpu.clone();
    g.attention.prefill_half_rate_tokens = g.attention.prefill_half_rate_tokens_for(true);
    g
}

#[test]
fn mla_prefill_half_rate_fits_the_held_out_lengths() {
    let gpu = GpuProfile::load("b200").unwrap();
    let held = errors(&mla(&gpu), "held-out");
    assert!(held.len() >= 30, "{}", held.len());
    let abs = median(held.iter().map(|e| e.abs()).collect());
    assert!(abs < 0.12, "held-out median |error| {abs}");
    // The head-dim-128 value charges MLA prefill half as much again.
    let carried = median(errors(&gpu, "held-out"));
    assert!(
        carried > 0.4,
        "held-out median signed error at the GQA value {carried}"
    );
}
