//! The B200 profile's decode-attention curve for MLA (DeepSeek-V3/R1, 128 query heads on one
//! GPU) against TensorRT-LLM 1.2.0rc5's own MLA generation op timed on a B200
//! (calibration/reference/b200-mla-generation-trtllm-1.2.csv, from ai-dynamo/aiconfigurator;
//! calibration/reference/b200-decode-attention.md, "FP8 MLA decode"). The profile's
//! `attention.decode_fp8_kv_rate_vs_bf16` was fitted on the rows marked `fit`.

mod common;

use common::upper_median as median;
use servesim::gpu::GpuProfile;
use servesim::roofline::kernels::{decode_attention_at_rate_s, decode_attention_flops_per_s};

/// KV latent and rope width of one cached MLA token (DeepSeek-V3/R1: 512 + 64).
const LATENT: f64 = 512.0;
const ROPE: f64 = 64.0;

/// One row of the reference file: (batch, context, KV format, microseconds, part).
fn rows() -> Vec<(f64, f64, String, f64, String)> {
    common::reference_fields(
        "calibration/reference/b200-mla-generation-trtllm-1.2.csv",
        7,
    )
    .into_iter()
    .map(|f| {
        assert_eq!(f[2], "128", "{f:?}");
        let num = |i: usize| f[i].parse::<f64>().unwrap();
        (num(0), num(1), f[3].clone(), num(4), f[5].clone())
    })
    .collect()
}

/// Signed errors (predicted / measured - 1) on the `kv`-cache rows of one part, priced as the
/// step model prices one MLA decode layer: the KV latent read and the absorbed attention's
/// math (`decode_width` = heads x (2 x latent + rope) / 2) at the decode rate of that format.
fn errors(gpu: &GpuProfile, part: &str, kv: &str) -> Vec<f64> {
    let bytes = if kv == "fp8" { 1.0 } else { 2.0 };
    let rate = decode_attention_flops_per_s(gpu, kv == "fp8");
    rows()
        .into_iter()
        .filter(|r| r.2 == kv && r.4 == part)
        .map(|(batch, ctx, _, us, _)| {
            let tokens = batch * ctx;
            let width = 128.0 * (2.0 * LATENT + ROPE) / 2.0;
            let t = decode_attention_at_rate_s(
                gpu,
                tokens,
                tokens,
                (LATENT + ROPE) * bytes,
                width,
                rate,
            );
            t / (us * 1e-6) - 1.0
        })
        .collect()
}

#[test]
fn fp8_mla_decode_runs_at_the_fitted_fp8_rate() {
    let gpu = GpuProfile::load("b200").unwrap();
    let fit = errors(&gpu, "fit", "fp8");
    assert_eq!(fit.len(), 30);
    let abs = median(fit.iter().map(|e| e.abs()).collect());
    assert!(abs < 0.10, "median |error| {abs}");
    // At the BF16 rate (the term absent) the FP8 rows run twice as fast as the model.
    let mut bf16_math = gpu.clone();
    bf16_math.attention.decode_fp8_kv_rate_vs_bf16 = None;
    let slow = median(errors(&bf16_math, "fit", "fp8"));
    assert!(slow > 0.8, "median signed error at the BF16 rate {slow}");
}

#[test]
fn bf16_mla_decode_keeps_the_bf16_rate() {
    let gpu = GpuProfile::load("b200").unwrap();
    let fit = errors(&gpu, "fit", "bf16");
    let abs = median(fit.iter().map(|e| e.abs()).collect());
    assert!(abs < 0.10, "median |error| {abs}");
}
