//! The MoE kernel-row files' reader, the step model's time for one row and the error summary,
//! shared by the MoE row examples (cutlass_moe_rows, cutlass_moe_b200_rows, mxfp4_moe_rows).
//! Each example compiles this file as its own module and uses a part of it.
#![allow(dead_code)]

use servesim::gpu::{GpuProfile, MoeKernel};
use servesim::precision::GemmMath;
use servesim::roofline::kernels::{self, ExpertWork};

/// One timed MoE forward: (the columns before the shape, [tokens, hidden, intermediate, top-k,
/// experts, MoE TP, MoE EP], seconds).
pub type RawRow = (Vec<String>, [f64; 7], f64);

/// The rows of the CSV at `path` (lines starting with `#` and the header skipped), whose seven
/// shape columns start at column `shape_at` and are followed by the time in milliseconds.
/// Panics naming the file and line on a malformed one (an example, not the library).
pub fn rows(path: &str, shape_at: usize) -> Vec<RawRow> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> f64 {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{path}: '{line}': column {i} is not a number"))
        };
        let shape: [f64; 7] = std::array::from_fn(|k| num(shape_at + k));
        let label = f[..shape_at].iter().map(|s| s.to_string()).collect();
        out.push((label, shape, num(shape_at + 7) * 1e-3));
    }
    out
}

/// The rows of a file whose first column names the GPU: (GPU, shape, seconds).
pub fn rows_by_gpu(path: &str) -> Vec<(String, [f64; 7], f64)> {
    rows(path, 1)
        .into_iter()
        .map(|(label, shape, s)| (label[0].clone(), shape, s))
        .collect()
}

/// The step model's time for one row (`kernels::fused_moe_work_s`, grouped GEMMs and routing),
/// seconds: the GPU holds experts / ep experts, each sliced tp ways; all `tokens` are routed on
/// it and their pairs spread evenly over the expert-parallel ranks; the experts stored at
/// `weight_bytes` per weight, multiplied in `math` by `kernel`.
pub fn predict_s(
    gpu: &GpuProfile,
    x: &[f64; 7],
    weight_bytes: f64,
    math: GemmMath,
    kernel: MoeKernel,
) -> f64 {
    let [tokens, hidden, inter, top_k, experts, tp, ep] = *x;
    let work = ExpertWork {
        active: (kernels::expected_active_experts(tokens, experts, top_k) / ep).max(1.0),
        top_k,
        pairs: tokens * top_k / ep,
        hidden,
        inter: inter / tp,
        weight_bytes,
        math,
        kernel,
    };
    let (gemm, _, routing) = kernels::fused_moe_work_s(gpu, tokens, experts, &work);
    gemm + routing
}

/// (rms log error, median signed, median absolute) of the errors `e` (predicted / measured - 1).
pub fn score(e: &[f64]) -> (f64, f64, f64) {
    let rms = (e.iter().map(|x| (1.0 + x).ln().powi(2)).sum::<f64>() / e.len() as f64).sqrt();
    let abs = median(e.iter().map(|x| x.abs()).collect());
    (rms, median(e.to_vec()), abs)
}

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
