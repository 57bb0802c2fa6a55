//! Checks the CUTLASS fused-MoE class of the H100 and H200 profiles against TensorRT-LLM's own
//! MoE timings (calibration/reference/trtllm-1.2-cutlass-moe-fp8-aiconfigurator.csv, written by
//! scripts/import_aiconfigurator_moe.py) with the step model's own formula
//! (`kernels::fused_moe_work_s`, the class TensorRT-LLM runs), and scans
//! `moe.cutlass.stream_fraction` on the H100 rows (the fit set) with the H200 rows held out.
//!
//!     cargo run --release --example cutlass_moe_rows [-- ROWS.csv]
//!
//! Prints, per GPU and stream fraction: rows, rms log error, median signed and median absolute
//! error (predicted / measured - 1).
use servesim::gpu::{GpuProfile, MoeKernel};
use servesim::precision::GemmMath;

/// One timed MoE forward: (GPU, tokens, hidden, intermediate, top-k, experts, MoE TP, MoE EP,
/// seconds).
type Row = (String, [f64; 7], f64);

#[path = "common/moe_rows.rs"]
mod moe_rows;
use moe_rows::{rows_by_gpu as rows, score};

/// The model's time for one row ([`moe_rows::predict_s`]: FP8 experts, the CUTLASS class).
fn predict(gpu: &GpuProfile, x: &[f64; 7]) -> f64 {
    moe_rows::predict_s(gpu, x, 1.0, GemmMath::Fp8, MoeKernel::Cutlass)
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        "calibration/reference/trtllm-1.2-cutlass-moe-fp8-aiconfigurator.csv".into()
    });
    let all = rows(&path);
    for name in ["h100-sxm", "h200-sxm"] {
        let base = GpuProfile::load(name).expect("a catalog GPU");
        let sel: Vec<&Row> = all.iter().filter(|r| r.0 == name).collect();
        let committed = base.moe.kernel(MoeKernel::Cutlass).stream_fraction;
        println!(
            "{name}: {} rows (committed stream_fraction {committed})",
            sel.len()
        );
        for s in [0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0] {
            let mut g = base.clone();
            let mut c = g.moe.kernel(MoeKernel::Cutlass);
            c.stream_fraction = s;
            g.moe.cutlass = Some(c);
            let e: Vec<f64> = sel.iter().map(|r| predict(&g, &r.1) / r.2 - 1.0).collect();
            let (rms, signed, abs) = score(&e);
            println!(
                "  stream_fraction {s:.2}: rms log error {rms:.3}, median {:+.1}%, median |error| {:.1}%",
                signed * 100.0,
                abs * 100.0
            );
        }
    }
}
