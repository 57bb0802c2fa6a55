//! The B200 profile's decode-attention curve for MLA (DeepSeek-V3/R1, 128 query heads on one
//! GPU) against TensorRT-LLM 1.2.0rc5's own MLA generation op timed on a B200
//! (calibration/reference/b200-mla-generation-trtllm-1.2.csv, from ai-dynamo/aiconfigurator;
//! calibration/reference/b200-decode-attention.md, "FP8 MLA decode"). The profile's
//! `attention.decode_fp8_kv_rate_vs_bf16` was fitted on the rows marked `fit`.

use servesim::gpu::GpuProfile;
use servesim::roofline::kernels::{decode_attention_at_rate_s, decode_attention_bf16_flops_per_s};

/// KV latent and rope width of one cached MLA token (DeepSeek-V3/R1: 512 + 64).
const LATENT: f64 = 512.0;
const ROPE: f64 = 64.0;

/// One row of the reference file: (batch, context, KV format, microseconds, part).
fn rows() -> Vec<(f64, f64, String, f64, String)> {
    let text = std::fs::read_to_string("calibration/reference/b200-mla-generation-trtllm-1.2.csv")
        .expect("reference file");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.splitn(7, ',').collect();
        assert_eq!(f.len(), 7, "{line}");
        assert_eq!(f[2], "128", "{line}");
        let num = |i: usize| f[i].parse::<f64>().unwrap();
        out.push((num(0), num(1), f[3].to_string(), num(4), f[5].to_string()));
    }
    out
}

/// Median of a list (upper median for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Signed errors (predicted / measured - 1) on the `kv`-cache rows of one part, priced as the
/// step model prices one MLA decode layer: the KV latent read and the absorbed attention's
/// math (`decode_width` = heads x (2 x latent + rope) / 2) at the decode rate of that format.
fn errors(gpu: &GpuProfile, part: &str, kv: &str) -> Vec<f64> {
    let (bytes, ratio) = match kv {
        "fp8" => (1.0, gpu.attention.decode_fp8_kv_rate_vs_bf16.unwrap_or(1.0)),
        _ => (2.0, 1.0),
    };
    let rate = decode_attention_bf16_flops_per_s(gpu) * ratio;
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
