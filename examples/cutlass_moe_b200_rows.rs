//! Checks the B200 profile's CUTLASS fused-MoE class against TensorRT-LLM's own B200 MoE
//! timings (calibration/reference/trtllm-1.2-cutlass-moe-b200-aiconfigurator.csv, written by
//! scripts/import_aiconfigurator_moe_b200.py) with the step model's own formula
//! (`kernels::fused_moe_work_s`), per weight format (NVFP4, FP8), and scans
//! `moe.cutlass.stream_fraction` on the fit set (every shape but hidden 7168) with the
//! hidden-7168 shapes (DeepSeek-V3/R1's experts) held out. NVFP4 rows also take the
//! profile's `gemm.fp4_stream_bandwidth_fraction`, as the step model does.
//!
//!     cargo run --release --example cutlass_moe_b200_rows [-- ROWS.csv [PREDICTIONS.csv]]
//!
//! Prints, per format, set and stream fraction: rows, rms log error, median signed and median
//! absolute error (predicted / measured - 1), and the saturated streaming rate the rows show.
use servesim::gpu::{GpuProfile, MoeKernel};
use servesim::precision::{GemmMath, WeightDtype};
use servesim::roofline::kernels;

/// One timed MoE forward: (format, [tokens, hidden, intermediate, top-k, experts, MoE TP,
/// MoE EP], seconds).
type Row = (WeightDtype, [f64; 7], f64);

#[path = "common/moe_rows.rs"]
mod moe_rows;
use moe_rows::score;

fn rows(path: &str) -> Vec<Row> {
    moe_rows::rows(path, 2)
        .into_iter()
        .map(|(label, shape, s)| {
            let dtype = match label[1].as_str() {
                "fp4" => WeightDtype::Fp4,
                "fp8" => WeightDtype::Fp8,
                other => panic!("{path}: unknown dtype {other}"),
            };
            (dtype, shape, s)
        })
        .collect()
}

/// The model's time for one row ([`moe_rows::predict_s`]: the CUTLASS class, FP4 math for
/// NVFP4 experts, FP8 for FP8 ones).
fn predict(gpu: &GpuProfile, d: WeightDtype, x: &[f64; 7]) -> f64 {
    let math = if d == WeightDtype::Fp4 {
        GemmMath::Fp4
    } else {
        GemmMath::Fp8
    };
    moe_rows::predict_s(gpu, x, d.bytes(), math, MoeKernel::Cutlass)
}

/// Whether a row streams a large set of experts with few rows each: every expert its GPU
/// holds active under random routing as under the collector's balanced routing (at least 99%
/// expected), at most 32 (token, expert) pairs per expert, and at least 500 MB of expert
/// weights on the GPU, so that streaming them, not the per-forward work, takes most of the
/// time: these rows say how fast NVFP4 experts stream.
fn streaming_bound(d: WeightDtype, x: &[f64; 7]) -> bool {
    let [tokens, hidden, inter, top_k, experts, tp, ep] = *x;
    let local = experts / ep;
    let active = kernels::expected_active_experts(tokens, experts, top_k) / ep;
    let bytes = local * 3.0 * hidden * inter / tp * d.bytes();
    active >= 0.99 * local && tokens * top_k / ep <= 32.0 * local && bytes >= 500e6
}

/// rms log error, median signed and median absolute error of `gpu` over `sel`.
fn errors(gpu: &GpuProfile, sel: &[&Row]) -> (f64, f64, f64) {
    let e: Vec<f64> = sel
        .iter()
        .map(|r| predict(gpu, r.0, &r.1) / r.2 - 1.0)
        .collect();
    score(&e)
}

/// Which rows a scan keeps.
type RowFilter = fn(&Row) -> bool;

/// Scans `moe.cutlass.fp4_stream_fraction` on the streaming-bound NVFP4 rows, fit set and
/// held-out set apart, and on every NVFP4 row.
fn scan_fp4_streaming(base: &GpuProfile, all: &[Row]) {
    let c = base.moe.kernel(MoeKernel::Cutlass);
    println!(
        "fp4 (committed moe.cutlass.fp4_stream_fraction {:?}, gemm.fp4_stream_bandwidth_fraction {:?}):",
        c.fp4_stream_fraction, base.gemm.fp4_stream_bandwidth_fraction
    );
    let fit: RowFilter = |r| r.1[1] != 7168.0 && streaming_bound(r.0, &r.1);
    let held: RowFilter = |r| r.1[1] == 7168.0 && streaming_bound(r.0, &r.1);
    let every: RowFilter = |_| true;
    let sets = [
        ("streaming-bound, fit (hidden != 7168)", fit),
        ("streaming-bound, held out (hidden 7168)", held),
        ("every row", every),
    ];
    for (set, keep) in sets.iter() {
        let sel: Vec<&Row> = all
            .iter()
            .filter(|r| r.0 == WeightDtype::Fp4 && keep(r))
            .collect();
        println!("  {set}: {} rows", sel.len());
        for f in [0.36, 0.40, 0.44, 0.48, 0.50, 0.52, 0.54, 0.56, 0.60, 0.65] {
            let mut g = base.clone();
            let mut c = g.moe.kernel(MoeKernel::Cutlass);
            c.fp4_stream_fraction = Some(f);
            g.moe.cutlass = Some(c);
            let (rms, signed, abs) = errors(&g, &sel);
            println!(
                "    fp4_stream_fraction {f:.2}: rms log error {rms:.3}, median {:+.1}%, median |error| {:.1}%",
                signed * 100.0,
                abs * 100.0
            );
        }
    }
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        "calibration/reference/trtllm-1.2-cutlass-moe-b200-aiconfigurator.csv".into()
    });
    let all = rows(&path);
    let base = GpuProfile::load("b200").expect("a catalog GPU");
    // With a second argument, also write every row with the committed profile's prediction.
    if let Some(out) = std::env::args().nth(2) {
        let mut text =
            String::from("dtype,tokens,hidden,inter,top_k,experts,tp,ep,measured_s,predicted_s\n");
        for (d, x, t) in &all {
            let cells: Vec<String> = x.iter().map(|v| v.to_string()).collect();
            text += &format!("{d},{},{t},{}\n", cells.join(","), predict(&base, *d, x));
        }
        std::fs::write(&out, text).unwrap_or_else(|e| panic!("{out}: {e}"));
    }
    let committed = base.moe.kernel(MoeKernel::Cutlass).stream_fraction;
    println!("b200: committed moe.cutlass.stream_fraction {committed}");
    scan_fp4_streaming(&base, &all);
    for d in [WeightDtype::Fp4, WeightDtype::Fp8] {
        for (set, held) in [
            ("fit (hidden != 7168)", false),
            ("held out (hidden 7168)", true),
        ] {
            let sel: Vec<&Row> = all
                .iter()
                .filter(|r| r.0 == d && (r.1[1] == 7168.0) == held)
                .collect();
            println!("{d} {set}: {} rows", sel.len());
            for s in [0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3] {
                let mut g = base.clone();
                let mut c = g.moe.kernel(MoeKernel::Cutlass);
                c.stream_fraction = s;
                g.moe.cutlass = Some(c);
                let e: Vec<f64> = sel
                    .iter()
                    .map(|r| predict(&g, d, &r.1) / r.2 - 1.0)
                    .collect();
                let (rms, signed, abs) = score(&e);
                println!(
                    "  stream_fraction {s:.2}: rms log error {rms:.3}, median {:+.1}%, median |error| {:.1}%",
                    signed * 100.0,
                    abs * 100.0
                );
            }
        }
    }
}
