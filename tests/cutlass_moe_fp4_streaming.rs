//! `moe.cutlass.fp4_stream_fraction`: the rate TensorRT-LLM's CUTLASS MoE streams NVFP4
//! experts at on a B200, apart from the dense NVFP4 GEMMs' `gemm.fp4_stream_bandwidth_fraction`
//! (fitted on TensorRT-LLM's own B200 MoE rows: examples/cutlass_moe_b200_rows.rs).

use servesim::gpu::{GpuProfile, MoeKernel};
use servesim::precision::GemmMath;
use servesim::roofline::kernels::{self, ExpertWork};

/// DeepSeek-R1's experts at DEP4 (64 of 256 on a GPU) for `tokens` routed tokens, in `math`
/// with `bytes` per weight, through the CUTLASS class: (GEMM seconds, streaming seconds).
fn deepseek_ep4(gpu: &GpuProfile, tokens: f64, math: GemmMath, bytes: f64) -> (f64, f64) {
    let work = ExpertWork {
        active: (kernels::expected_active_experts(tokens, 256.0, 8.0) / 4.0).max(1.0),
        top_k: 8.0,
        pairs: tokens * 8.0 / 4.0,
        hidden: 7168.0,
        inter: 2048.0,
        weight_bytes: bytes,
        math,
        kernel: MoeKernel::Cutlass,
    };
    let (gemm, stream, _) = kernels::fused_moe_work_s(gpu, tokens, 256.0, &work);
    (gemm, stream)
}

/// The key replaces the dense NVFP4 fraction for the CUTLASS class's NVFP4 experts only: at
/// 512 tokens (every expert streamed, 16 pairs each) their streaming time scales by 0.36 /
/// 0.51, FP8 experts and the dense NVFP4 GEMMs' own fraction are untouched, and values outside
/// (0, 1] are rejected naming the key.
#[test]
fn the_cutlass_class_streams_nvfp4_experts_at_its_own_fraction() {
    let b200 = GpuProfile::load("b200").unwrap();
    let c = b200.moe.kernel(MoeKernel::Cutlass);
    assert_eq!(c.fp4_stream_fraction, Some(0.51));
    assert_eq!(b200.gemm.fp4_stream_bandwidth_fraction, Some(0.36));
    let mut dense = b200.clone();
    dense.moe.cutlass = Some(servesim::gpu::MoeKernelCurve {
        fp4_stream_fraction: None,
        ..c
    });
    let (_, own) = deepseek_ep4(&b200, 512.0, GemmMath::Fp4, 0.5625);
    let (_, borrowed) = deepseek_ep4(&dense, 512.0, GemmMath::Fp4, 0.5625);
    assert!(
        (own / borrowed - 0.36 / 0.51).abs() < 1e-9,
        "{own} against {borrowed}"
    );
    assert_eq!(
        deepseek_ep4(&b200, 512.0, GemmMath::Fp8, 1.0),
        deepseek_ep4(&dense, 512.0, GemmMath::Fp8, 1.0)
    );
    for bad in [0.0, 1.5, f64::NAN] {
        let mut g = b200.clone();
        g.moe.cutlass = Some(servesim::gpu::MoeKernelCurve {
            fp4_stream_fraction: Some(bad),
            ..c
        });
        let e = g.validate("b200.toml").unwrap_err().to_string();
        assert!(e.contains("moe.cutlass.fp4_stream_fraction"), "{e}");
    }
}
