//! Checks the MXFP4 W4A16 fused-MoE class of the H100 and H200 profiles (`[moe.mxfp4_w4a16]`:
//! OpenAI's triton_kernels `matmul_ogs`, TensorRT-LLM's TritonFusedMoE on Hopper) against
//! TensorRT-LLM's own MoE timings with MXFP4 weights and BF16 activations
//! (calibration/reference/trtllm-1.2-mxfp4-w4a16-moe-aiconfigurator.csv, written by
//! `scripts/import_aiconfigurator_moe.py AIC w4a16_mxfp4`) with the step model's own formula
//! (`kernels::fused_moe_work_s`), and fits the class's two keys on the H100 rows (the fit
//! set) by a grid scan; the H200 rows are held out and scored with the H100 figures.
//!
//!     cargo run --release --example mxfp4_moe_rows [-- ROWS.csv]
//!
//! Prints, per GPU: the model before the class (the engine's CUTLASS class at 4.25 bits per
//! weight on the BF16 curve), the committed class, and the fit; rows, rms log error, median
//! signed and median absolute error (predicted / measured - 1), and the error by tokens.
use servesim::gpu::{GpuProfile, MoeKernel, MoeKernelCurve};
use servesim::precision::{GemmMath, WeightDtype};

/// One timed MoE forward: (GPU, [tokens, hidden, intermediate, top-k, experts, MoE TP,
/// MoE EP], seconds).
type Row = (String, [f64; 7], f64);

#[path = "common/moe_rows.rs"]
mod moe_rows;
use moe_rows::{rows_by_gpu as rows, score};

/// The model's time for one row with the MXFP4 experts run by `kernel` in BF16 math
/// ([`moe_rows::predict_s`]).
fn predict(gpu: &GpuProfile, x: &[f64; 7], kernel: MoeKernel) -> f64 {
    moe_rows::predict_s(gpu, x, WeightDtype::Mxfp4.bytes(), GemmMath::Bf16, kernel)
}

fn errors(g: &GpuProfile, sel: &[&Row], kernel: MoeKernel) -> Vec<f64> {
    sel.iter()
        .map(|r| predict(g, &r.1, kernel) / r.2 - 1.0)
        .collect()
}

fn report(label: &str, g: &GpuProfile, sel: &[&Row], kernel: MoeKernel) {
    let e = errors(g, sel, kernel);
    let (rms, signed, abs) = score(&e);
    println!(
        "  {label}: {} rows, rms log error {rms:.3}, median {:+.1}%, median |error| {:.1}%",
        e.len(),
        signed * 100.0,
        abs * 100.0
    );
    let bins = [
        (1.0, 8.0),
        (16.0, 64.0),
        (80.0, 512.0),
        (768.0, 4096.0),
        (6144.0, 65536.0),
    ];
    for (lo, hi) in bins {
        let b: Vec<f64> = sel
            .iter()
            .zip(&e)
            .filter(|(r, _)| r.1[0] >= lo && r.1[0] <= hi)
            .map(|(_, x)| *x)
            .collect();
        let (rms, signed, abs) = score(&b);
        println!(
            "    tokens {lo:>5}-{hi:<5}: {:>4} rows, rms log {rms:.3}, median {:+.1}%, |median| {:.1}%",
            b.len(),
            signed * 100.0,
            abs * 100.0
        );
    }
}

/// The profile with a `[moe.mxfp4_w4a16]` curve of (grouped_flops_fraction,
/// dequant_weights_per_s, grouped_gemm_fixed_s).
fn with_class(base: &GpuProfile, p: (f64, f64, f64)) -> GpuProfile {
    let mut g = base.clone();
    g.moe.mxfp4_w4a16 = Some(MoeKernelCurve {
        grouped_flops_fraction: p.0,
        tile_wave_s: 0.0,
        stream_fraction: 1.0,
        dequant_weights_per_s: p.1,
        grouped_gemm_fixed_s: p.2,
        fp4_stream_fraction: None,
    });
    g
}

/// Whether a row is a split one HGX node serves: MoE TP x EP within 8 GPUs (the fit set's
/// domain; wider splits slice gpt-oss's 2,880-wide experts below 360 columns or one expert
/// per GPU, which no deployment of this shape runs).
fn in_node(r: &Row) -> bool {
    r.1[5] * r.1[6] <= 8.0
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        "calibration/reference/trtllm-1.2-mxfp4-w4a16-moe-aiconfigurator.csv".into()
    });
    let all = rows(&path);
    let h100 = GpuProfile::load("h100-sxm").expect("a catalog GPU");
    let fit: Vec<&Row> = all
        .iter()
        .filter(|r| r.0 == "h100-sxm" && in_node(r))
        .collect();
    // Grid scan of the three keys on the H100 rows within one node.
    let mut best = (f64::INFINITY, (0.0, 0.0, 0.0));
    for i in 0..=30 {
        let f = 0.35 + 0.01 * f64::from(i);
        for j in 0..=30 {
            let d = 3.5e12 + 0.1e12 * f64::from(j);
            for k in 0..=20 {
                let p = (f, d, 2.0e-6 * f64::from(k));
                let e = errors(&with_class(&h100, p), &fit, MoeKernel::Mxfp4W4a16);
                let (rms, _, _) = score(&e);
                if rms < best.0 {
                    best = (rms, p);
                }
            }
        }
    }
    let p = best.1;
    println!(
        "fit on {} H100 rows (MoE TP x EP <= 8): grouped_flops_fraction {:.2}, dequant_weights_per_s {:.2e}, grouped_gemm_fixed_s {:.1e} (rms log error {:.3})",
        fit.len(), p.0, p.1, p.2, best.0
    );
    for name in ["h100-sxm", "h200-sxm"] {
        let base = GpuProfile::load(name).expect("a catalog GPU");
        let mut before = base.clone();
        before.moe.mxfp4_w4a16 = None;
        let g = with_class(&base, p);
        for (domain, node) in [("MoE TP x EP <= 8", true), ("wider splits", false)] {
            let sel: Vec<&Row> = all
                .iter()
                .filter(|r| r.0 == name && in_node(r) == node)
                .collect();
            println!("{name}, {domain}:");
            report(
                "before (engine's CUTLASS class)",
                &before,
                &sel,
                MoeKernel::Cutlass,
            );
            if base.moe.mxfp4_w4a16.is_some() {
                report(
                    "committed [moe.mxfp4_w4a16]",
                    &base,
                    &sel,
                    MoeKernel::Mxfp4W4a16,
                );
            }
            report("fit (H100 figures)", &g, &sel, MoeKernel::Mxfp4W4a16);
        }
    }
}
