//! MXFP4 experts on Hopper run their own fused-MoE kernel class (docs/validation.md, "MXFP4
//! experts on Hopper: TensorRT-LLM's W4A16 MoE kernel (session 11)"): OpenAI's triton_kernels
//! `matmul_ogs` with the 4-bit weights dequantized to BF16 in the main loop, the backend
//! TensorRT-LLM serves gpt-oss with on Hopper. Its `[moe.mxfp4_w4a16]` curve is a property of
//! format x kernel x GPU fitted on the H100's kernel rows; the H200's rows are held out.
//! Nothing else moves: dense models, FP8 MoE, and MXFP4 on Blackwell keep their paths.

mod common;

use servesim::gpu::{GpuProfile, MoeKernel};
use servesim::precision::{GemmMath, WeightDtype};
use servesim::roofline::kernels::{self, ExpertWork};

const ROWS: &str = "calibration/reference/trtllm-1.2-mxfp4-w4a16-moe-aiconfigurator.csv";

/// The H200 rows within one node (MoE TP x EP <= 8): ([tokens, experts, tp, ep], seconds).
fn h200_rows() -> Vec<([f64; 4], f64)> {
    let text = std::fs::read_to_string(ROWS).unwrap();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let n = |i: usize| f[i].parse::<f64>().unwrap();
        // gpu, tokens, hidden, inter, topk, experts, tp, ep, latency_ms
        assert_eq!((n(2), n(3), n(4)), (2880.0, 2880.0, 4.0), "{line}");
        if f[0] == "h200-sxm" && n(6) * n(7) <= 8.0 {
            out.push(([n(1), n(5), n(6), n(7)], n(8) * 1e-3));
        }
    }
    out
}

/// The step model's MoE chain for one row, run by `kernel`.
fn predict_s(gpu: &GpuProfile, x: [f64; 4], kernel: MoeKernel) -> f64 {
    let [tokens, experts, tp, ep] = x;
    let work = ExpertWork {
        active: (kernels::expected_active_experts(tokens, experts, 4.0) / ep).max(1.0),
        top_k: 4.0,
        pairs: tokens * 4.0 / ep,
        hidden: 2880.0,
        inter: 2880.0 / tp,
        weight_bytes: WeightDtype::Mxfp4.bytes(),
        math: GemmMath::Bf16,
        kernel,
    };
    let (gemm, _, routing) = kernels::fused_moe_work_s(gpu, tokens, experts, &work);
    gemm + routing
}

fn rms_log(e: &[f64]) -> f64 {
    (e.iter().map(|x| (1.0 + x).ln().powi(2)).sum::<f64>() / e.len() as f64).sqrt()
}

/// Held out: the H200 profile carries the H100's figures (same die, SM-side limits), and its
/// own 600 kernel rows are predicted with rms log error 0.215 (the engine's CUTLASS class at
/// 4.25 bits: 0.304). The 65k-token TP1 rows (compute-bound, 410 TFLOP/s measured) come out
/// 15% slow: one math rate for every split, pulled down by the expert-parallel rows.
#[test]
fn held_out_h200_kernel_rows_follow_the_class() {
    let g = GpuProfile::load("h200-sxm").unwrap();
    let h100 = GpuProfile::load("h100-sxm").unwrap();
    assert_eq!(g.moe.mxfp4_w4a16, h100.moe.mxfp4_w4a16);
    let rows = h200_rows();
    assert_eq!(rows.len(), 600);
    let err = |kernel, gpu: &GpuProfile| -> Vec<f64> {
        rows.iter()
            .map(|(x, t)| predict_s(gpu, *x, kernel) / t - 1.0)
            .collect()
    };
    let after = rms_log(&err(MoeKernel::Mxfp4W4a16, &g));
    let mut old = g.clone();
    old.moe.mxfp4_w4a16 = None;
    let before = rms_log(&err(MoeKernel::Cutlass, &old));
    assert!(after < 0.23, "{after}");
    assert!(before > after + 0.07, "{before} {after}");
    for (x, t) in rows
        .iter()
        .filter(|(x, _)| x[0] == 65536.0 && x[2] == 1.0 && x[3] == 1.0)
    {
        let e = predict_s(&g, *x, MoeKernel::Mxfp4W4a16) / t - 1.0;
        assert!(e > 0.0 && e < 0.20, "{x:?}: {e}");
    }
}

/// Only MXFP4 experts dequantized to BF16 take the class, and only on a profile that has it.
#[test]
fn only_mxfp4_experts_without_fp4_tensor_cores_take_the_class() {
    use GemmMath::{Bf16, Fp8};
    use WeightDtype::{Fp4, Mxfp4};
    let h100 = GpuProfile::load("h100-sxm").unwrap();
    for engine in [MoeKernel::Cutlass, MoeKernel::Triton] {
        assert_eq!(
            h100.moe.class_for(engine, Mxfp4, Bf16),
            MoeKernel::Mxfp4W4a16
        );
        assert_eq!(h100.moe.class_for(engine, WeightDtype::Fp8, Fp8), engine);
        assert_eq!(h100.moe.class_for(engine, WeightDtype::Bf16, Bf16), engine);
        assert_eq!(h100.moe.class_for(engine, Fp4, Bf16), engine);
    }
    // Blackwell runs MXFP4 experts with MXFP8 activations; the A100 profile has no curve.
    let b200 = GpuProfile::load("b200").unwrap();
    assert!(b200.moe.mxfp4_w4a16.is_none());
    assert_eq!(
        b200.moe.class_for(MoeKernel::Cutlass, Mxfp4, Fp8),
        MoeKernel::Cutlass
    );
    let a100 = GpuProfile::load("a100-sxm-80gb").unwrap();
    assert_eq!(
        a100.moe.class_for(MoeKernel::Cutlass, Mxfp4, Bf16),
        MoeKernel::Cutlass
    );
}

/// `servesim estimate --format json` step time for a model on `gpu` (name or path).
fn step_s(model: &str, gpu: &str, dtype: &str) -> f64 {
    let args = [
        "estimate",
        "--model",
        model,
        "--gpu",
        gpu,
        "--engine",
        "trtllm",
        "--dtype",
        dtype,
        "--decode-batch",
        "256",
        "--format",
        "json",
    ];
    let (code, out, err) = common::servesim(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["step"]["total_s"].as_f64().unwrap()
}

/// The section moves gpt-oss's MXFP4 step on the H100 and nothing else: a dense model and an
/// FP8 MoE take the same step with the section removed from the profile.
#[test]
fn dense_and_fp8_moe_steps_do_not_move() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GpuProfile::load("h100-sxm").unwrap();
    g.moe.mxfp4_w4a16 = None;
    let path = dir.path().join("h100-without-mxfp4-class.toml");
    std::fs::write(&path, toml::to_string(&g).unwrap()).unwrap();
    let without = path.to_str().unwrap();
    for (model, dtype) in [
        ("llama-3.1-8b", "fp8"),
        ("qwen3-30b-a3b", "fp8"),
        ("mixtral-8x7b", "fp8"),
    ] {
        assert_eq!(
            step_s(model, "h100-sxm", dtype),
            step_s(model, without, dtype),
            "{model}"
        );
    }
    let (with, old) = (
        step_s("gpt-oss-20b", "h100-sxm", "auto"),
        step_s("gpt-oss-20b", without, "auto"),
    );
    assert!(with != old, "{with} {old}");
}

/// A `[moe.mxfp4_w4a16]` value out of range is an error naming the key.
#[test]
fn an_mxfp4_class_value_out_of_range_is_named() {
    let mut g = GpuProfile::load("h100-sxm").unwrap();
    g.moe.mxfp4_w4a16.as_mut().unwrap().grouped_flops_fraction = 1.5;
    let e = g.validate("x.toml").unwrap_err().to_string();
    assert!(e.contains("moe.mxfp4_w4a16.grouped_flops_fraction"), "{e}");
    let mut g = GpuProfile::load("h100-sxm").unwrap();
    g.moe.mxfp4_w4a16.as_mut().unwrap().grouped_gemm_fixed_s = -1.0;
    let e = g.validate("x.toml").unwrap_err().to_string();
    assert!(e.contains("moe.mxfp4_w4a16.grouped_gemm_fixed_s"), "{e}");
}
