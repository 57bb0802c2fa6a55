//! The fused-MoE kernel class is an engine semantic (docs/calibration.md §8, "Fused MoE: one
//! curve per kernel class"): vLLM and SGLang run the Triton `fused_moe`, TensorRT-LLM a CUTLASS
//! grouped GEMM, and each class runs its own curve of the GPU profile.

mod common;

use servesim::engine::EngineProfile;
use servesim::gpu::{GpuProfile, MoeKernel};

#[test]
fn each_engine_names_the_moe_kernel_it_runs() {
    for (engine, kernel) in [
        ("vllm", MoeKernel::Triton),
        ("sglang", MoeKernel::Triton),
        ("trtllm", MoeKernel::Cutlass),
    ] {
        let p = EngineProfile::load(engine).unwrap();
        assert_eq!(p.moe.kernel, kernel, "{engine}");
    }
    // Every shipped GPU profile carries both classes, and they differ: the Triton class is
    // fitted on Triton kernel rows, the CUTLASS class keeps its borrowed prior.
    for gpu in ["h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-80gb", "b200"] {
        let g = GpuProfile::load(gpu).unwrap();
        let (t, c) = (
            g.moe.kernel(MoeKernel::Triton),
            g.moe.kernel(MoeKernel::Cutlass),
        );
        assert!(g.moe.cutlass.is_some(), "{gpu}");
        assert_eq!(t.grouped_flops_fraction, 1.0, "{gpu}");
        assert!(t.tile_wave_s > 0.0, "{gpu}");
        assert_eq!(c.grouped_flops_fraction, 0.5214, "{gpu}");
        assert_eq!(c.tile_wave_s, 0.0, "{gpu}");
    }
}

/// A `[moe.cutlass]` value out of range is an error naming the key.
#[test]
fn a_cutlass_fraction_out_of_range_is_named() {
    let mut g = GpuProfile::load("h100-sxm").unwrap();
    g.moe.cutlass.as_mut().unwrap().grouped_flops_fraction = 1.5;
    let e = g.validate("x.toml").unwrap_err().to_string();
    assert!(e.contains("moe.cutlass.grouped_flops_fraction"), "{e}");
}

/// `servesim run` of scenarios/validation/mixtral-tp2-20rps.toml on `gpu` (a name or a
/// profile's path), written to `dir`: the JSON report.
fn mixtral_tp2_20rps(dir: &std::path::Path, gpu: &str) -> serde_json::Value {
    let text = std::fs::read_to_string("scenarios/validation/mixtral-tp2-20rps.toml").unwrap();
    let text = text.replace("gpu = \"h100-sxm\"", &format!("gpu = {gpu:?}"));
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = common::servesim(&["run", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Issue #26: vLLM 0.15.1 served Mixtral-8x7B FP16 at TP 2 on H100 SXM at 20 req/s (100-token
/// shared prefix + 475-token question, 248 output tokens, max_num_seqs 128, token budget
/// 2048) and kept up, at an ITL of 22.2 ms. Out of sample: no serving row set the Triton
/// curve (its kernel rows did). The run keeps up, at 22.2 ms within 10% (measured: 22.16 ms,
/// 19.5 req/s completed in the window, queue stationary). Second method: the same run on the
/// GPU curves before sessions 8-10 (the Triton class at the CUTLASS class's borrowed curve,
/// the BF16 GEMMs on vidur's 2024 kernel rows) saturates, so the check can fail. Since the
/// GEMM curve of vLLM 0.14's kernel rows, the MoE curve alone no longer decides it: the
/// borrowed curve keeps up too (22.8 ms against 21.3), within the check's 10%.
#[test]
fn vllm_mixtral_tp2_keeps_up_at_20_req_s_on_the_triton_curve() {
    let dir = tempfile::tempdir().unwrap();
    let s = mixtral_tp2_20rps(dir.path(), "h100-sxm");
    let st = &s["steady_state"];
    assert_eq!(st["queue"]["stationary"], true, "{st}");
    assert_eq!(st["sustainable"], true, "{st}");
    let itl = s["mean_itl_ms"].as_f64().unwrap();
    assert!((itl / 22.2 - 1.0).abs() < 0.10, "{itl}");

    let mut g = GpuProfile::load("h100-sxm").unwrap();
    let c = g.moe.kernel(MoeKernel::Cutlass);
    g.moe.grouped_flops_fraction = c.grouped_flops_fraction;
    g.moe.tile_wave_s = c.tile_wave_s;
    // The BF16 GEMM curve fitted on vidur's 2024 rows (calibration/gpus/h100-sxm.toml before
    // the session-9 refit; docs/calibration.md section 8).
    g.gemm.fixed_s = 5.418e-6;
    g.gemm.bf16_flops_per_s = 775.4e12;
    g.gemm.half_rate_tokens = 151.8;
    let gpu = dir.path().join("h100-one-curve.toml");
    std::fs::write(&gpu, toml::to_string(&g).unwrap()).unwrap();
    let slow = mixtral_tp2_20rps(dir.path(), gpu.to_str().unwrap());
    let st = &slow["steady_state"];
    assert_eq!(st["queue"]["stationary"], false, "{st}");
    let slow_itl = slow["mean_itl_ms"].as_f64().unwrap();
    assert!(slow_itl > 1.3 * itl, "{slow_itl} {itl}");
}
