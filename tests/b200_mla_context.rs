//! The B200 profile's prefill-attention curve for MLA (DeepSeek-V3/R1, 128 query heads on one
//! GPU, q/k head dim 192, v head dim 128) against TensorRT-LLM 1.2.0rc5's own MLA context op
//! timed on a B200 (calibration/reference/b200-mla-context-trtllm-1.2.csv, from
//! ai-dynamo/aiconfigurator). The profile's `attention.mla_prefill_half_rate_tokens` was fitted
//! on the rows marked `fit`; the `held-out` rows score it here.

use servesim::gpu::GpuProfile;
use servesim::roofline::kernels::prefill_attention_at_rate_s;

/// Query width of MLA prefill as the step model counts it: 128 heads x (192 + 128) / 2.
const Q_WIDTH: f64 = 128.0 * (192.0 + 128.0) / 2.0;

/// Signed errors (predicted / measured - 1) on the rows of one part, both KV formats, priced
/// as the step model prices one MLA prefill layer over batch x isl^2 / 2 attended pairs at the
/// profile's BF16 attention rate (`prefill_fp8_kv_rate_vs_bf16` = 1 on the B200).
fn errors(gpu: &GpuProfile, part: &str) -> Vec<f64> {
    let text = std::fs::read_to_string("calibration/reference/b200-mla-context-trtllm-1.2.csv")
        .expect("reference file");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.splitn(7, ',').collect();
        assert_eq!(f.len(), 7, "{line}");
        assert_eq!(f[2], "128", "{line}");
        if f[5] != part {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap();
        let (batch, isl, us) = (num(0), num(1), num(4));
        let t = prefill_attention_at_rate_s(
            gpu,
            batch * isl * isl / 2.0,
            batch * isl,
            Q_WIDTH,
            gpu.gemm.bf16_flops_per_s,
        );
        out.push(t / (us * 1e-6) - 1.0);
    }
    out
}

/// Median of a list (upper median for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The profile with the MLA half-rate in place, as the step model builds it for an MLA model.
fn mla(gpu: &GpuProfile) -> GpuProfile {
    let mut g = gpu.clone();
    if let Some(h) = g.attention.mla_prefill_half_rate_tokens {
        g.attention.prefill_half_rate_tokens = h;
    }
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
