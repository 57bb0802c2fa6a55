//! FlashAttention-3's FP8 path in vLLM (two-level FP32 accumulation, vllm-project/
//! flash-attention pull 104) is an engine semantic with per-GPU figures: vLLM names the kernel
//! (`[attention] fp8_kv_kernel = "fa3-two-level"`), the H100/H200 profiles carry its figures
//! (`[attention.fa3_fp8]`, from the single-request sweep of the vLLM FP8-KV blog post, Figure
//! 2), and nothing else moves: BF16 caches, other engines' FP8 caches, GPUs without the figures.

use servesim::engine::{EngineProfile, Fp8KvKernel};
use servesim::gpu::GpuProfile;
use servesim::model::load_model;
use servesim::precision::{KvDtype, WeightDtype};
use servesim::roofline::{Deployment, StepTimeModel};
use servesim::step_time::BatchShape;

/// Llama-3.1-8B BF16 at TP 1 on `gpu` under `engine` with the given KV format.
fn model(gpu: GpuProfile, engine: &str, kv: KvDtype) -> StepTimeModel {
    let dep = Deployment::tensor_parallel(
        load_model("llama-3.1-8b").unwrap(),
        gpu,
        EngineProfile::load(engine).unwrap(),
        1,
        WeightDtype::Bf16,
        kv,
    );
    StepTimeModel::new(dep, 8192).unwrap()
}

fn h100() -> GpuProfile {
    GpuProfile::load("h100-sxm").unwrap()
}

fn without_fa3(mut g: GpuProfile) -> GpuProfile {
    g.attention.fa3_fp8 = None;
    g
}

/// Eight requests decoding at 20k tokens of context each (the blog's concurrency-8 shape).
fn decode8() -> BatchShape {
    BatchShape::decode(8, 20_000)
}

/// One 8192-token chunk of a prompt whose first 49,152 tokens are already cached.
fn late_chunk() -> BatchShape {
    let mut b = BatchShape::default();
    b.add_prefill(8192, 49_152, false);
    b
}

fn ns(m: &StepTimeModel, b: &BatchShape) -> u64 {
    m.step_ns(b).unwrap()
}

#[test]
fn vllm_names_the_fa3_path_and_only_hopper_profiles_carry_it() {
    assert_eq!(
        EngineProfile::load("vllm").unwrap().attention.fp8_kv_kernel,
        Fp8KvKernel::Fa3TwoLevel
    );
    for e in ["trtllm", "sglang"] {
        let p = EngineProfile::load(e).unwrap();
        assert_eq!(p.attention.fp8_kv_kernel, Fp8KvKernel::Native, "{e}");
    }
    for g in ["h100-sxm", "h200-sxm"] {
        let f = GpuProfile::load(g).unwrap().attention.fa3_fp8.unwrap();
        assert_eq!(
            (f.decode_time_per_byte_vs_bf16, f.prefill_rate_vs_bf16),
            (1.085, 1.075),
            "{g}"
        );
    }
    assert!(GpuProfile::load("b200")
        .unwrap()
        .attention
        .fa3_fp8
        .is_none());
}

/// Only vLLM over an FP8 cache on a GPU with the figures moves; with it, decode and prefill
/// attention both take longer than FP8 at the FP8 tensor rate over half the bytes.
#[test]
fn only_fp8_kv_under_vllm_moves() {
    let same = |engine: &str, kv: KvDtype| {
        let (a, b) = (
            model(h100(), engine, kv),
            model(without_fa3(h100()), engine, kv),
        );
        for shape in [decode8(), late_chunk()] {
            assert_eq!(ns(&a, &shape), ns(&b, &shape), "{engine} {kv:?}");
        }
    };
    same("vllm", KvDtype::Auto);
    same("trtllm", KvDtype::Fp8);
    same("sglang", KvDtype::Fp8);
    let b200 = GpuProfile::load("b200").unwrap();
    let on_b200 = model(b200.clone(), "vllm", KvDtype::Fp8);
    let mut with = b200;
    with.attention.fa3_fp8 = h100().attention.fa3_fp8;
    assert_ne!(
        ns(&on_b200, &decode8()),
        ns(&model(with, "vllm", KvDtype::Fp8), &decode8()),
        "the figures are what moves it"
    );

    let fa3 = model(h100(), "vllm", KvDtype::Fp8);
    let native = model(without_fa3(h100()), "vllm", KvDtype::Fp8);
    let bf16 = model(h100(), "vllm", KvDtype::Auto);
    for shape in [decode8(), late_chunk()] {
        let (f, n, b) = (ns(&fa3, &shape), ns(&native, &shape), ns(&bf16, &shape));
        assert!(n < f && f < b, "{shape:?}: native {n} fa3 {f} bf16 {b}");
    }
}

/// Regression guard (in sample: `decode_time_per_byte_vs_bf16` is set from these slopes):
/// the decode step's growth per context token with an FP8 cache is 54.2% of the BF16 one,
/// the blog's single-request ITL slopes (2.37e-05 / 4.37e-05 ms per token).
#[test]
fn decode_slope_ratio_is_the_published_one() {
    let slope = |kv| {
        let m = model(h100(), "vllm", kv);
        let at = |ctx| ns(&m, &BatchShape::decode(1, ctx)) as f64;
        (at(128_000) - at(1_000)) / 127_000.0
    };
    let ratio = slope(KvDtype::Fp8) / slope(KvDtype::Auto);
    assert!((ratio - 2.37 / 4.37).abs() < 0.005, "{ratio}");
}

/// A fraction out of range is an error naming the key; an unknown kernel name is a parse
/// error naming the value.
#[test]
fn bad_figures_are_named() {
    for bad in [0.0, 5.0, f64::NAN] {
        let mut g = h100();
        g.attention.fa3_fp8.as_mut().unwrap().prefill_rate_vs_bf16 = bad;
        let e = g.validate("x.toml").unwrap_err().to_string();
        assert!(e.contains("attention.fa3_fp8.prefill_rate_vs_bf16"), "{e}");
        let mut g = h100();
        g.attention
            .fa3_fp8
            .as_mut()
            .unwrap()
            .decode_time_per_byte_vs_bf16 = bad;
        let e = g.validate("x.toml").unwrap_err().to_string();
        assert!(
            e.contains("attention.fa3_fp8.decode_time_per_byte_vs_bf16"),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let text = servesim::catalog::embedded(servesim::catalog::Kind::Engine, "vllm").replace(
        "fp8_kv_kernel = \"fa3-two-level\"",
        "fp8_kv_kernel = \"fa4\"",
    );
    let path = dir.path().join("vllm.toml");
    std::fs::write(&path, text).unwrap();
    let e = EngineProfile::load(path.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("fa4") && e.contains("vllm.toml"), "{e}");
}
