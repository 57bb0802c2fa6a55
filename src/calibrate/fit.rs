//! The fitter: from whatever measurement rows are present, fits the GPU profile's curves and
//! fixed costs by minimising the mean squared log error of [`super::validate::predict`] (the
//! roofline's own kernel predictors) against the measured medians. Classes without rows keep
//! the base profile's values.
//!
//! Stages, in order (each sees the parameters the earlier ones fitted):
//! 1. memory (`stream_reduce` rows, or `stream_copy` rows when there are no reductions):
//!    `memory.latency_s`, `memory.stream_bandwidth_bytes_per_s`;
//! 2. GEMM (`gemm` rows; with both operand types also from a staged start, see
//!    `fit_gemm_stage`): `gemm.fixed_s` (one per source, the largest source's kept),
//!    `gemm.bf16_flops_per_s` (bf16 rows),
//!    `gemm.fp8_flops_per_s` and `gemm.fp8_half_rate_tokens` (fp8 rows),
//!    `gemm.fp4_flops_per_s` (nvfp4 and mxfp4 rows; FP4 GEMMs keep the FP8 ramp),
//!    `gemm.half_rate_tokens`;
//! 3. attention (`paged_decode_attention` rows): `attention.fixed_s`,
//!    `attention.decode_bandwidth_fraction`; (`prefill_attention` rows):
//!    `attention.prefill_flops_fraction`, `attention.prefill_half_rate_tokens`;
//! 4. fused MoE (`fused_moe` rows, Triton kernel, after the GEMM curve): `moe.tile_wave_s`;
//! 5. launch (`empty_kernel` rows): `small_ops.launch_s`;
//! 6. all-reduce (`allreduce` rows with tp > 1): `allreduce.latency_s`,
//!    `allreduce.bus_bandwidth_bytes_per_s`.
//!
//! Each stage runs Nelder-Mead on the logarithms of its parameters (so they stay positive and
//! the steps are scale-free), inside bounds, from the base profile's values, restarted from its
//! own best point until it stops improving. Deterministic: no random starts.

use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
pub(crate) use crate::numeric::nelder_mead;

use super::measurement::{KernelClass, Measurement};
use super::profile::{profile_intervals, Interval, ProfileOptions};
use super::validate::predict;

/// One fitted parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedParam {
    /// Dotted profile key, e.g. `gemm.bf16_flops_per_s`.
    pub key: &'static str,
    /// The base profile's value (in the key's unit).
    pub base: f64,
    /// The fitted value (in the key's unit).
    pub fitted: f64,
    /// Rows the stage that fitted it used.
    pub rows: usize,
    /// What the rows determine: the profile interval of the stage's loss over this parameter
    /// ([`crate::calibrate::profile`]); `None` when it was not profiled.
    pub interval: Option<Interval>,
}

impl FittedParam {
    /// What the rows determine, in words: the 95% interval, or that they do not determine it
    /// and the range that fits equally well (the value then stays at the base profile's, the
    /// documented prior, moved into that range).
    pub fn determination(&self) -> Option<String> {
        self.interval.map(|iv| {
            let text = iv.describe(&|v| format!("{v:.4e}"));
            if iv.determined() {
                text
            } else if (self.fitted - self.base).abs() <= 1e-9 * self.base.abs() {
                format!("{text}; kept at the base profile's value")
            } else {
                format!("{text}; the base profile's value moved to the nearest end of that range")
            }
        })
    }
}

/// The fitted profile and what was fitted.
#[derive(Debug, Clone)]
pub struct FitResult {
    /// The base profile with the fitted parameters replaced.
    pub profile: GpuProfile,
    /// Every fitted parameter, in stage order.
    pub params: Vec<FittedParam>,
    /// Per stage: (name, rows, root-mean-square log error after the fit).
    pub stages: Vec<(&'static str, usize, f64)>,
}

/// A parameter of a stage: profile key, bounds, and accessors.
#[derive(Clone)]
struct Param {
    key: &'static str,
    lo: f64,
    hi: f64,
    get: fn(&GpuProfile) -> f64,
    set: fn(&mut GpuProfile, f64),
}

macro_rules! param {
    ($key:literal, $lo:expr, $hi:expr, $($f:ident).+) => {
        Param {
            key: $key,
            lo: $lo,
            hi: $hi,
            get: |g| g.$($f).+,
            set: |g, v| g.$($f).+ = v,
        }
    };
}

/// Mean squared log error of `gpu` over `rows` (rows it cannot predict count as a large error).
fn msle(gpu: &GpuProfile, rows: &[&Measurement]) -> f64 {
    let mut s = 0.0;
    for r in rows {
        let e = match predict(gpu, r) {
            Some(p) if p > 0.0 && p.is_finite() => (p / r.median_s()).ln(),
            _ => 10.0,
        };
        s += e * e;
    }
    s / rows.len().max(1) as f64
}

/// Fits `params` of `gpu` in place on `rows`; returns the root-mean-square log error and the
/// profile interval of each parameter. A parameter the rows do not determine (its profile
/// flat out to a search bound) is set back to `gpu`'s value before the fit (the prior the
/// profile documents), moved into the range that fits equally well.
fn fit_stage(
    gpu: &mut GpuProfile,
    params: &[Param],
    rows: &[&Measurement],
) -> (f64, Vec<Interval>) {
    let clamp = |p: &Param, v: f64| v.clamp(p.lo, p.hi);
    let to_x = |g: &GpuProfile| -> Vec<f64> {
        params
            .iter()
            .map(|p| clamp(p, (p.get)(g).max(p.lo)).ln())
            .collect()
    };
    let apply = |g: &mut GpuProfile, x: &[f64]| {
        for (p, xi) in params.iter().zip(x) {
            (p.set)(g, clamp(p, xi.exp()));
        }
    };
    let base = gpu.clone();
    let objective = |x: &[f64]| {
        let mut g = base.clone();
        apply(&mut g, x);
        msle(&g, rows)
    };
    let prior = to_x(gpu);
    let mut x = prior.clone();
    let mut best = objective(&x);
    // Restart from the best point with a shrinking simplex until it stops improving.
    for step in [0.7, 0.3, 0.1, 0.03] {
        let (nx, v) = nelder_mead(&objective, &x, step, 1e-14, 4000);
        if v <= best {
            best = v;
            x = nx;
        }
    }
    let bounds: Vec<(f64, f64)> = params.iter().map(|p| (p.lo.ln(), p.hi.ln())).collect();
    let coords: Vec<usize> = (0..params.len()).collect();
    let intervals = profile_intervals(
        &objective,
        rows.len(),
        &x,
        &bounds,
        &coords,
        gpu_profile_options(),
    );
    for (k, iv) in intervals.iter().enumerate() {
        if !iv.determined() {
            x[k] = iv.clamp(prior[k].exp()).ln();
        }
    }
    apply(gpu, &x);
    (objective(&x).sqrt(), intervals)
}

/// The profile search of the GPU fits: kernel rows are cheap to predict, so each inner refit
/// may run long.
fn gpu_profile_options() -> ProfileOptions {
    ProfileOptions {
        step_ln: 0.25,
        max_steps: 60,
        bisections: 5,
        inner_iterations: 1500,
        inner_tol: 1e-10,
    }
}

/// Device names as the driver reports them (`cuDeviceGetName`, nvidia-smi, PyTorch's
/// `get_device_name`) and the profile in calibration/gpus/ for each. The names are those of
/// vLLM's per-device kernel configs (vllm/model_executor/layers/fused_moe/configs/
/// `*device_name=NVIDIA_H200*.json` etc., spaces written as `_`) and of vidur's H100 profile
/// (calibration/reference/h100-operators.csv). Exact names only: "NVIDIA H200 NVL", "NVIDIA
/// H100 NVL", "NVIDIA GH200 480GB" or "NVIDIA H20" are other parts, with no profile here.
pub const DEVICE_PROFILES: &[(&str, &str)] = &[
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA B200", "b200"),
];

/// The profile name for a device name as the driver reports it, if there is one.
pub fn profile_for_device(device: &str) -> Option<&'static str> {
    DEVICE_PROFILES
        .iter()
        .find(|(n, _)| *n == device.trim())
        .map(|(_, p)| *p)
}

/// Refuses a base profile that is not the measured GPU's: a device name with a known profile
/// other than `base`'s, or a streaming row faster than `base`'s datasheet HBM bandwidth (the
/// fitter caps the stream bandwidth there, and the other parameters would absorb the error:
/// an H200 streams about 4.3 TB/s against the H100's 3.35 TB/s).
pub fn check_base(base: &GpuProfile, rows: &[Measurement]) -> Result<()> {
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        if seen.contains(&r.gpu.as_str()) {
            continue;
        }
        seen.push(&r.gpu);
        if let Some(p) = profile_for_device(&r.gpu) {
            if p != base.name {
                return Err(Error::config(
                    "--base",
                    "base",
                    format!(
                        "the measurements are from {} (profile {p}), the base profile is {}: fit \
                         with --base calibration/gpus/{p}.toml",
                        r.gpu, base.name
                    ),
                ));
            }
        }
    }
    let hbm = base.datasheet.hbm_bandwidth_bytes_per_s;
    for r in rows {
        if !matches!(
            r.class(),
            Some(KernelClass::StreamCopy | KernelClass::StreamReduce)
        ) {
            continue;
        }
        let Some(bytes) = r.bytes else { continue };
        let rate = bytes / r.median_s();
        if rate > hbm * 1.02 {
            return Err(Error::config(
                "--base",
                "base",
                format!(
                    "{} streamed {bytes:.0} B at {:.2} TB/s, faster than the base profile {}'s \
                     datasheet HBM bandwidth ({:.2} TB/s): the measurements are from another GPU",
                    r.gpu,
                    rate / 1e12,
                    base.name,
                    hbm / 1e12
                ),
            ));
        }
    }
    Ok(())
}

/// The publication a row comes from: its `source` up to the first " (" (the rows of one
/// table share how they were timed).
fn source_group(r: &Measurement) -> &str {
    r.source.split(" (").next().unwrap_or("").trim()
}

/// A restart has to beat the direct fit's mean squared log error by this share to replace it,
/// so that a fit the direct search already finds does not move by rounding.
const RESTART_MARGIN: f64 = 0.01;

/// The GEMM stage: the curve (`params`: rates and ramps) is shared by every row, while each
/// source ([`source_group`]) gets its own fixed time, since publications time kernels
/// differently (one kernel at a time with CUDA events, or replayed from a CUDA graph) and
/// that shifts small GEMMs by microseconds. `gemm.fixed_s` becomes the fixed time of the
/// source with the most rows. Returns the root-mean-square log error.
///
/// With rows of both operand types, the joint search is also started from a staged point (the
/// BF16 curve fitted on the BF16 rows alone, then the FP8 curve on the FP8 rows): a joint
/// simplex from the base can settle where one type's rows pull the other's rate to a bound
/// (a source whose few large FP8 GEMMs want a long fixed time did). The better end wins,
/// the staged one only when clearly better ([`RESTART_MARGIN`]).
fn fit_gemm_stage(
    gpu: &mut GpuProfile,
    params: &[Param],
    rows: &[&Measurement],
) -> (f64, Vec<Interval>) {
    let prior = gpu.clone();
    let mut direct = gpu.clone();
    let (direct_e, direct_x) = fit_gemm_curve(&mut direct, params, rows);
    // The staged start fits the BF16 curve, then the narrow (FP8 and FP4) curves.
    let is_fp8 = |key: &str| key.starts_with("gemm.fp8_") || key.starts_with("gemm.fp4_");
    let of = |fp8: bool| -> (Vec<Param>, Vec<&Measurement>) {
        (
            params
                .iter()
                .filter(|p| is_fp8(p.key) == fp8)
                .cloned()
                .collect(),
            rows.iter()
                .copied()
                .filter(|r| (r.dtype != "bf16") == fp8)
                .collect(),
        )
    };
    let (bf16_params, bf16_rows) = of(false);
    let (fp8_params, fp8_rows) = of(true);
    let (e, x) = if bf16_rows.is_empty() || fp8_rows.is_empty() || fp8_params.is_empty() {
        *gpu = direct;
        (direct_e, direct_x)
    } else {
        let mut staged = gpu.clone();
        fit_gemm_curve(&mut staged, &bf16_params, &bf16_rows);
        fit_gemm_curve(&mut staged, &fp8_params, &fp8_rows);
        let (staged_e, staged_x) = fit_gemm_curve(&mut staged, params, rows);
        if staged_e * staged_e < direct_e * direct_e * (1.0 - RESTART_MARGIN) {
            *gpu = staged;
            (staged_e, staged_x)
        } else {
            *gpu = direct;
            (direct_e, direct_x)
        }
    };
    // What the rows determine: the curve's parameters and the largest source's fixed time.
    let g = GemmObjective::new(gpu, params, rows);
    let mut coords: Vec<usize> = (0..params.len()).collect();
    coords.push(params.len() + g.largest);
    let ivs = profile_intervals(
        &|x: &[f64]| g.eval(x),
        rows.len(),
        &x,
        &g.bounds(),
        &coords,
        gpu_profile_options(),
    );
    // An undetermined curve parameter goes back to its prior (the base profile's value), moved
    // into the range that fits equally well.
    for (p, iv) in params.iter().zip(&ivs) {
        if !iv.determined() {
            (p.set)(gpu, iv.clamp((p.get)(&prior)));
        }
    }
    if !ivs[params.len()].determined() {
        gpu.gemm.fixed_s = ivs[params.len()].clamp(prior.gemm.fixed_s);
    }
    // gemm.fixed_s is listed with the curve's parameters: its interval last.
    let mut out = vec![ivs[params.len()]];
    out.extend_from_slice(&ivs[..params.len()]);
    (e, out)
}

/// The GEMM stage's loss: the curve (`params`) shared by every row and one fixed time per
/// source ([`source_group`]); the point is the logarithms of the curve's parameters, then of
/// the sources' fixed times.
struct GemmObjective<'a> {
    base: GpuProfile,
    params: &'a [Param],
    rows: &'a [&'a Measurement],
    group_of: Vec<usize>,
    groups: usize,
    /// The source with the most rows (its fixed time becomes `gemm.fixed_s`).
    largest: usize,
}

/// Bounds of a source's GEMM fixed time, seconds.
const GEMM_FIXED_BOUNDS: (f64, f64) = (1e-7, 2e-5);

impl<'a> GemmObjective<'a> {
    fn new(base: &GpuProfile, params: &'a [Param], rows: &'a [&'a Measurement]) -> Self {
        let mut groups: Vec<(&str, usize)> = Vec::new();
        for r in rows {
            let g = source_group(r);
            match groups.iter_mut().find(|(k, _)| *k == g) {
                Some(e) => e.1 += 1,
                None => groups.push((g, 1)),
            }
        }
        let group_of = rows
            .iter()
            .map(|r| {
                let g = source_group(r);
                groups.iter().position(|(k, _)| *k == g).unwrap_or(0)
            })
            .collect();
        let largest = (0..groups.len()).max_by_key(|&i| groups[i].1).unwrap_or(0);
        GemmObjective {
            base: base.clone(),
            params,
            rows,
            group_of,
            groups: groups.len(),
            largest,
        }
    }

    /// The profile with the point `x` applied (the largest source's fixed time as
    /// `gemm.fixed_s`).
    fn apply(&self, g: &mut GpuProfile, x: &[f64]) {
        let n = self.params.len();
        for (p, xi) in self.params.iter().zip(x) {
            (p.set)(g, xi.exp().clamp(p.lo, p.hi));
        }
        g.gemm.fixed_s = x[n + self.largest]
            .exp()
            .clamp(GEMM_FIXED_BOUNDS.0, GEMM_FIXED_BOUNDS.1);
    }

    /// Mean squared log error at `x`.
    fn eval(&self, x: &[f64]) -> f64 {
        let n = self.params.len();
        let mut g = self.base.clone();
        self.apply(&mut g, x);
        let mut s = 0.0;
        for (r, &gi) in self.rows.iter().zip(&self.group_of) {
            g.gemm.fixed_s = x[n + gi]
                .exp()
                .clamp(GEMM_FIXED_BOUNDS.0, GEMM_FIXED_BOUNDS.1);
            let e = match predict(&g, r) {
                Some(p) if p > 0.0 && p.is_finite() => (p / r.median_s()).ln(),
                _ => 10.0,
            };
            s += e * e;
        }
        s / self.rows.len().max(1) as f64
    }

    /// Bounds of every coordinate, logarithms.
    fn bounds(&self) -> Vec<(f64, f64)> {
        let mut b: Vec<(f64, f64)> = self.params.iter().map(|p| (p.lo.ln(), p.hi.ln())).collect();
        b.extend((0..self.groups).map(|_| (GEMM_FIXED_BOUNDS.0.ln(), GEMM_FIXED_BOUNDS.1.ln())));
        b
    }

    /// The point of `gpu`'s values (every source at `gemm.fixed_s`).
    fn point(&self, gpu: &GpuProfile) -> Vec<f64> {
        let mut x: Vec<f64> = self
            .params
            .iter()
            .map(|p| (p.get)(gpu).max(p.lo).clamp(p.lo, p.hi).ln())
            .collect();
        x.extend((0..self.groups).map(|_| {
            gpu.gemm
                .fixed_s
                .clamp(GEMM_FIXED_BOUNDS.0, GEMM_FIXED_BOUNDS.1)
                .ln()
        }));
        x
    }
}

/// One simplex search of the GEMM stage from `gpu`'s values (see [`fit_gemm_stage`]): the
/// root-mean-square log error and the point found.
fn fit_gemm_curve(
    gpu: &mut GpuProfile,
    params: &[Param],
    rows: &[&Measurement],
) -> (f64, Vec<f64>) {
    let g = GemmObjective::new(gpu, params, rows);
    let objective = |x: &[f64]| g.eval(x);
    let mut x = g.point(gpu);
    let mut best = objective(&x);
    for step in [0.7, 0.3, 0.1, 0.03] {
        let (nx, v) = nelder_mead(&objective, &x, step, 1e-14, 8000);
        if v <= best {
            best = v;
            x = nx;
        }
    }
    g.apply(gpu, &x);
    (best.sqrt(), x)
}

/// Fits `base`'s parameters to `rows` (see the module docs for which rows feed which
/// parameters). An error when no row can be used, or when `base` is not the measured GPU's
/// profile ([`check_base`]).
pub fn fit_profile(base: &GpuProfile, rows: &[Measurement]) -> Result<FitResult> {
    check_base(base, rows)?;
    let of = |c: KernelClass| -> Vec<&Measurement> {
        rows.iter().filter(|r| r.class() == Some(c)).collect()
    };
    let mut fit = Fitting {
        gpu: base.clone(),
        stages: Vec::new(),
        fitted: Vec::new(),
    };
    let mut stream = of(KernelClass::StreamReduce);
    if stream.is_empty() {
        stream = of(KernelClass::StreamCopy);
    }
    fit.memory_stage(&stream);
    fit.gemm_stage(&of(KernelClass::Gemm));
    fit.attention_stage(&of(KernelClass::PagedDecodeAttention));
    fit.prefill_stage(&of(KernelClass::PrefillAttention));
    fit.moe_stage(&of(KernelClass::FusedMoe));
    fit.launch_stage(&of(KernelClass::EmptyKernel));
    let ar: Vec<&Measurement> = of(KernelClass::AllReduce)
        .into_iter()
        .filter(|r| r.tp.unwrap_or(0) > 1)
        .collect();
    fit.allreduce_stage(&ar);

    let Fitting {
        gpu,
        stages,
        fitted,
    } = fit;
    if stages.is_empty() {
        return Err(Error::Infeasible(
            "no measurement row the fitter can use (stream, gemm, paged_decode_attention, prefill_attention, fused_moe, empty_kernel, allreduce)".into(),
        ));
    }
    gpu.validate("fitted profile")?;
    let params = fitted
        .into_iter()
        .map(|(key, rows, interval)| FittedParam {
            key,
            base: value_of(base, key),
            fitted: value_of(&gpu, key),
            rows,
            interval,
        })
        .collect();
    Ok(FitResult {
        profile: gpu,
        params,
        stages,
    })
}

/// A fit in progress: the profile so far, the stages done (name, rows, root-mean-square log
/// error) and the parameters fitted (key, rows, interval). Each stage runs only when it has
/// rows, in the order of [`fit_profile`].
struct Fitting {
    gpu: GpuProfile,
    stages: Vec<(&'static str, usize, f64)>,
    fitted: Vec<(&'static str, usize, Option<Interval>)>,
}

impl Fitting {
    /// Fits `params` to `rows` ([`fit_stage`]) and records the stage as `name`.
    fn stage(&mut self, name: &'static str, params: &[Param], rows: &[&Measurement]) {
        let (e, ivs) = fit_stage(&mut self.gpu, params, rows);
        self.stages.push((name, rows.len(), e));
        self.fitted.extend(
            params
                .iter()
                .zip(ivs)
                .map(|(p, iv)| (p.key, rows.len(), Some(iv))),
        );
    }

    /// HBM: latency and streaming bandwidth (at most the datasheet's).
    fn memory_stage(&mut self, rows: &[&Measurement]) {
        if rows.is_empty() {
            return;
        }
        let hbm = self.gpu.datasheet.hbm_bandwidth_bytes_per_s;
        let params = [
            param!("memory.latency_s", 1e-8, 1e-3, memory.latency_s),
            param!(
                "memory.stream_bandwidth_bytes_per_s",
                hbm * 0.05,
                hbm,
                memory.stream_bandwidth_bytes_per_s
            ),
        ];
        self.stage("memory", &params, rows);
    }

    /// GEMMs: the ramp, the BF16 rate, the FP8 rate and ramp when there are FP8 rows and the
    /// GPU has FP8, and the FP4 rate when there are NVFP4/MXFP4 rows and the GPU has FP4; one
    /// fixed time per source ([`fit_gemm_stage`]).
    fn gemm_stage(&mut self, gemm: &[&Measurement]) {
        if gemm.is_empty() {
            return;
        }
        let gpu = &mut self.gpu;
        let bf16 = gpu.datasheet.bf16_flops_per_s;
        let fp8 = gpu.datasheet.fp8_flops_per_s;
        let mut params = vec![param!(
            "gemm.half_rate_tokens",
            0.01,
            1e5,
            gemm.half_rate_tokens
        )];
        if gemm.iter().any(|r| r.dtype == "bf16") {
            params.push(param!(
                "gemm.bf16_flops_per_s",
                bf16 * 0.01,
                bf16,
                gemm.bf16_flops_per_s
            ));
        }
        if fp8 > 0.0 && gemm.iter().any(|r| r.dtype == "fp8") {
            if gpu.gemm.fp8_flops_per_s <= 0.0 {
                gpu.gemm.fp8_flops_per_s = 0.5 * fp8;
            }
            if gpu.gemm.fp8_half_rate_tokens.is_none() {
                gpu.gemm.fp8_half_rate_tokens = Some(gpu.gemm.half_rate_tokens);
            }
            params.push(param!(
                "gemm.fp8_flops_per_s",
                fp8 * 0.01,
                fp8,
                gemm.fp8_flops_per_s
            ));
            // FP8 GEMMs run other kernels (smaller M tiles): their own ramp.
            params.push(Param {
                key: "gemm.fp8_half_rate_tokens",
                lo: 0.01,
                hi: 1e5,
                get: |g| {
                    g.gemm
                        .fp8_half_rate_tokens
                        .unwrap_or(g.gemm.half_rate_tokens)
                },
                set: |g, v| g.gemm.fp8_half_rate_tokens = Some(v),
            });
        }
        let fp4 = gpu.datasheet.fp4_flops_per_s;
        let is_fp4 = |r: &Measurement| matches!(r.dtype.as_str(), "nvfp4" | "mxfp4");
        if fp4 > 0.0 && gemm.iter().any(|r| is_fp4(r)) {
            if gpu.gemm.fp4_flops_per_s <= 0.0 {
                gpu.gemm.fp4_flops_per_s = 0.5 * fp4;
            }
            params.push(param!(
                "gemm.fp4_flops_per_s",
                fp4 * 0.01,
                fp4,
                gemm.fp4_flops_per_s
            ));
            // FP4 GEMMs ramp like FP8 ones (the profile's one narrow-math ramp, which the
            // grouped MoE GEMMs share): only the rate is fitted here.
        }
        let used: Vec<&Measurement> = gemm
            .iter()
            .copied()
            .filter(|r| {
                r.dtype == "bf16" || (fp8 > 0.0 && r.dtype == "fp8") || (fp4 > 0.0 && is_fp4(r))
            })
            .collect();
        let (e, ivs) = fit_gemm_stage(gpu, &params, &used);
        self.stages.push(("gemm", used.len(), e));
        let keys = std::iter::once("gemm.fixed_s").chain(params.iter().map(|p| p.key));
        self.fitted
            .extend(keys.zip(ivs).map(|(k, iv)| (k, used.len(), Some(iv))));
    }

    /// Paged decode attention: fixed time and the share of HBM bandwidth it reaches.
    fn attention_stage(&mut self, rows: &[&Measurement]) {
        if rows.is_empty() {
            return;
        }
        let params = [
            param!("attention.fixed_s", 1e-8, 1e-3, attention.fixed_s),
            param!(
                "attention.decode_bandwidth_fraction",
                0.01,
                1.0,
                attention.decode_bandwidth_fraction
            ),
        ];
        self.stage("attention", &params, rows);
    }

    /// Prefill attention: the share of peak FLOP/s it reaches and its ramp.
    fn prefill_stage(&mut self, rows: &[&Measurement]) {
        if rows.is_empty() {
            return;
        }
        let params = [
            param!(
                "attention.prefill_flops_fraction",
                0.01,
                1.0,
                attention.prefill_flops_fraction
            ),
            Param {
                key: "attention.prefill_half_rate_tokens",
                lo: 0.01,
                hi: 1e5,
                get: |g| g.attention.prefill_half_rate_tokens.max(1.0),
                set: |g, v| g.attention.prefill_half_rate_tokens = v,
            },
        ];
        self.stage("prefill attention", &params, rows);
    }

    /// Fused MoE: the time each wave of the grouped GEMMs' output tiles adds
    /// (`moe.tile_wave_s`, [`crate::roofline::kernels::tile_waves`]) for the Triton class, the
    /// kernel the `fused_moe` rows time. The grouped GEMMs run the dense curve at
    /// `moe.grouped_flops_fraction`, which stays at the base profile's value, and so does the
    /// CUTLASS class's curve (`[moe.cutlass]`): no row here times that kernel.
    fn moe_stage(&mut self, rows: &[&Measurement]) {
        if rows.is_empty() {
            return;
        }
        // Start inside the bounds (the log-space simplex cannot start from 0).
        if self.gpu.moe.tile_wave_s <= 0.0 {
            self.gpu.moe.tile_wave_s = 1e-6;
        }
        let params = [param!("moe.tile_wave_s", 1e-9, 1e-4, moe.tile_wave_s)];
        self.stage("fused moe", &params, rows);
    }

    /// Kernel launch: the geometric mean of the empty-kernel rows (the MSLE minimiser of a
    /// constant); no interval.
    fn launch_stage(&mut self, empty: &[&Measurement]) {
        if empty.is_empty() {
            return;
        }
        let mean_ln = empty.iter().map(|r| r.median_s().ln()).sum::<f64>() / empty.len() as f64;
        self.gpu.small_ops.launch_s = mean_ln.exp();
        let e = msle(&self.gpu, empty).sqrt();
        self.stages.push(("launch", empty.len(), e));
        self.fitted.push(("small_ops.launch_s", empty.len(), None));
    }

    /// All-reduce (rows of TP > 1): latency and bus bandwidth.
    fn allreduce_stage(&mut self, rows: &[&Measurement]) {
        if rows.is_empty() {
            return;
        }
        let params = [
            param!("allreduce.latency_s", 1e-8, 1e-2, allreduce.latency_s),
            param!(
                "allreduce.bus_bandwidth_bytes_per_s",
                1e8,
                1e14,
                allreduce.bus_bandwidth_bytes_per_s
            ),
        ];
        self.stage("allreduce", &params, rows);
    }
}

/// The value of a fitted key in `g` (NaN for a key the fitter does not know).
fn value_of(g: &GpuProfile, key: &str) -> f64 {
    match key {
        "memory.latency_s" => g.memory.latency_s,
        "memory.stream_bandwidth_bytes_per_s" => g.memory.stream_bandwidth_bytes_per_s,
        "gemm.fixed_s" => g.gemm.fixed_s,
        "gemm.half_rate_tokens" => g.gemm.half_rate_tokens,
        "gemm.bf16_flops_per_s" => g.gemm.bf16_flops_per_s,
        "gemm.fp8_flops_per_s" => g.gemm.fp8_flops_per_s,
        "gemm.fp4_flops_per_s" => g.gemm.fp4_flops_per_s,
        "gemm.fp8_half_rate_tokens" => g.gemm.fp8_half_rate_tokens.unwrap_or(f64::NAN),
        "attention.prefill_flops_fraction" => g.attention.prefill_flops_fraction,
        "moe.grouped_flops_fraction" => g.moe.grouped_flops_fraction,
        "moe.tile_wave_s" => g.moe.tile_wave_s,
        "attention.prefill_half_rate_tokens" => g.attention.prefill_half_rate_tokens,
        "attention.fixed_s" => g.attention.fixed_s,
        "attention.decode_bandwidth_fraction" => g.attention.decode_bandwidth_fraction,
        "small_ops.launch_s" => g.small_ops.launch_s,
        "allreduce.latency_s" => g.allreduce.latency_s,
        "allreduce.bus_bandwidth_bytes_per_s" => g.allreduce.bus_bandwidth_bytes_per_s,
        _ => f64::NAN,
    }
}

impl FitResult {
    /// The fitted profile as TOML, headed by comments naming the measurement file, the date
    /// and the base profile, and listing each fitted parameter with its base value.
    pub fn to_toml(&self, measurements: &str, base: &str, date: &str) -> Result<String> {
        let body = toml::to_string_pretty(&self.profile)
            .map_err(|e| Error::Internal(format!("serialising the fitted profile: {e}")))?;
        let mut s = format!(
            "# Fitted by `servesim fit` from {measurements} on {date} (UTC),\n# base profile {base}.\n# Fitted parameters (base -> fitted, rows used):\n"
        );
        for p in &self.params {
            s.push_str(&format!(
                "#   {} = {:.4e} -> {:.4e} ({} rows){}\n",
                p.key,
                p.base,
                p.fitted,
                p.rows,
                p.determination()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ));
        }
        for (name, rows, e) in &self.stages {
            s.push_str(&format!(
                "#   stage {name}: {rows} rows, rms log error {e:.4}\n"
            ));
        }
        s.push_str("# Every other value is the base profile's.\n\n");
        s.push_str(&body);
        Ok(s)
    }

    /// A plain-text table of the fitted parameters, each with what the rows determine.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<38} {:>12} {:>12} {:>8} {:>6}  what the rows determine\n",
            "parameter", "base", "fitted", "change", "rows"
        );
        for p in &self.params {
            s.push_str(&format!(
                "{:<38} {:>12.4e} {:>12.4e} {:>+7.1}% {:>6}  {}\n",
                p.key,
                p.base,
                p.fitted,
                100.0 * (p.fitted / p.base - 1.0),
                p.rows,
                p.determination()
                    .unwrap_or_else(|| "(a mean: no profile)".into())
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::super::{
        attention_bytes_flops, gemm_bytes_flops, layer_gemms, AttentionShape, GemmDtype,
    };
    use super::*;
    use crate::model::load_model;

    /// The true profile: the H100's with every fitted parameter moved away from the base.
    fn truth() -> GpuProfile {
        let mut g = GpuProfile::load("h100-sxm").unwrap();
        g.memory.stream_bandwidth_bytes_per_s = 2.6e12;
        g.memory.latency_s = 5.0e-6;
        g.gemm.fixed_s = 7.0e-6;
        g.gemm.bf16_flops_per_s = 640e12;
        g.gemm.fp8_flops_per_s = 1150e12;
        g.gemm.half_rate_tokens = 55.0;
        g.attention.fixed_s = 9.0e-6;
        g.attention.decode_bandwidth_fraction = 0.62;
        g.small_ops.launch_s = 4.1e-6;
        g.allreduce.latency_s = 28e-6;
        g.allreduce.bus_bandwidth_bytes_per_s = 420e9;
        g
    }

    /// Rows shaped like the suite's, timed by `truth` with 3% multiplicative noise.
    fn synthetic(truth: &GpuProfile, seed: u64) -> Vec<Measurement> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rows = Vec::new();
        let mut push = |mut r: Measurement, rng: &mut ChaCha8Rng| {
            let t = predict(truth, &r).unwrap();
            let noise: f64 = 1.0 + rng.gen_range(-0.03..0.03);
            r.median_us = t * 1e6 * noise;
            r.p10_us = r.median_us * 0.98;
            r.p90_us = r.median_us * 1.02;
            rows.push(r);
        };
        for i in 20..=33 {
            for c in [KernelClass::StreamCopy, KernelClass::StreamReduce] {
                let mut r = Measurement::new(c, "u8", "synthetic", "");
                r.bytes = Some((1u64 << i) as f64);
                push(r, &mut rng);
            }
        }
        for model in ["llama-3.1-8b", "llama-3.1-70b"] {
            let m = load_model(model).unwrap();
            for g in layer_gemms(&m, 1).unwrap() {
                for b in 0..=10 {
                    for dt in [GemmDtype::Bf16, GemmDtype::Fp8] {
                        let mut r = Measurement::new(KernelClass::Gemm, dt.name(), "s", "");
                        (r.m, r.k, r.n) = (Some(1 << b), Some(g.k), Some(g.n));
                        let (bytes, flops) = gemm_bytes_flops(1 << b, g.k, g.n, dt);
                        (r.bytes, r.flops) = (Some(bytes), Some(flops));
                        push(r, &mut rng);
                    }
                }
            }
            for batch in [1, 4, 16, 64, 256] {
                for context in [128, 512, 2048, 8192] {
                    let s = AttentionShape {
                        batch,
                        context,
                        q_heads: m.num_attention_heads,
                        kv_heads: m.num_kv_heads,
                        head_dim: m.head_dim,
                    };
                    let mut r =
                        Measurement::new(KernelClass::PagedDecodeAttention, "bf16", "s", "");
                    r.batch = Some(batch);
                    r.context = Some(context);
                    r.q_heads = Some(s.q_heads);
                    r.kv_heads = Some(s.kv_heads);
                    r.head_dim = Some(s.head_dim);
                    r.bytes = Some(attention_bytes_flops(s).0);
                    push(r, &mut rng);
                }
            }
        }
        for _ in 0..5 {
            push(
                Measurement::new(KernelClass::EmptyKernel, "u8", "s", ""),
                &mut rng,
            );
        }
        for tp in [2, 4, 8] {
            for p in [11, 18, 21, 23, 25, 26, 28] {
                let mut r = Measurement::new(KernelClass::AllReduce, "bf16", "s", "");
                r.tp = Some(tp);
                r.bytes = Some((1u64 << p) as f64);
                push(r, &mut rng);
            }
        }
        rows
    }

    #[test]
    fn recovers_known_parameters_from_noisy_synthetic_rows() {
        let truth = truth();
        let base = GpuProfile::load("h100-sxm").unwrap();
        let rows = synthetic(&truth, 42);
        let fit = fit_profile(&base, &rows).unwrap();
        let g = &fit.profile;
        let check = |key: &str, got: f64, want: f64, tol: f64| {
            let e = (got / want - 1.0).abs();
            assert!(
                e < tol,
                "{key}: fitted {got:.4e}, true {want:.4e} ({:.1}% off)",
                100.0 * e
            );
        };
        check(
            "bw",
            g.memory.stream_bandwidth_bytes_per_s,
            truth.memory.stream_bandwidth_bytes_per_s,
            0.05,
        );
        check(
            "mem latency",
            g.memory.latency_s,
            truth.memory.latency_s,
            0.10,
        );
        check("gemm fixed", g.gemm.fixed_s, truth.gemm.fixed_s, 0.10);
        check(
            "bf16",
            g.gemm.bf16_flops_per_s,
            truth.gemm.bf16_flops_per_s,
            0.05,
        );
        check(
            "fp8",
            g.gemm.fp8_flops_per_s,
            truth.gemm.fp8_flops_per_s,
            0.05,
        );
        check(
            "half",
            g.gemm.half_rate_tokens,
            truth.gemm.half_rate_tokens,
            0.10,
        );
        check(
            "attn fixed",
            g.attention.fixed_s,
            truth.attention.fixed_s,
            0.10,
        );
        check(
            "attn frac",
            g.attention.decode_bandwidth_fraction,
            truth.attention.decode_bandwidth_fraction,
            0.05,
        );
        check(
            "launch",
            g.small_ops.launch_s,
            truth.small_ops.launch_s,
            0.05,
        );
        check(
            "ar latency",
            g.allreduce.latency_s,
            truth.allreduce.latency_s,
            0.10,
        );
        check(
            "ar bw",
            g.allreduce.bus_bandwidth_bytes_per_s,
            truth.allreduce.bus_bandwidth_bytes_per_s,
            0.05,
        );
        // Everything the rows do not speak for is the base profile's.
        assert_eq!(g.datasheet, base.datasheet);
        assert_eq!(g.small_ops.kernel_s, base.small_ops.kernel_s);
        assert_eq!(
            g.attention.prefill_flops_fraction,
            base.attention.prefill_flops_fraction
        );
        for (_, _, e) in &fit.stages {
            assert!(*e < 0.03, "{:?}", fit.stages);
        }
    }

    #[test]
    fn is_deterministic_and_keeps_classes_without_rows() {
        let base = GpuProfile::load("h100-sxm").unwrap();
        let rows: Vec<Measurement> = synthetic(&truth(), 7)
            .into_iter()
            .filter(|r| r.class() == Some(KernelClass::EmptyKernel))
            .collect();
        let a = fit_profile(&base, &rows).unwrap();
        let b = fit_profile(&base, &rows).unwrap();
        assert_eq!(a.profile, b.profile);
        assert_eq!(a.profile.gemm, base.gemm);
        assert_eq!(a.profile.memory, base.memory);
        assert_eq!(a.params.len(), 1);
    }

    #[test]
    fn writes_a_toml_that_loads_back() {
        let base = GpuProfile::load("h100-sxm").unwrap();
        let fit = fit_profile(&base, &synthetic(&truth(), 3)).unwrap();
        let text = fit.to_toml("m.csv", "h100-sxm", "2025-01-01").unwrap();
        assert!(text.starts_with("# Fitted by `servesim fit` from m.csv on 2025-01-01"));
        let back = GpuProfile::from_toml(&text, "fitted.toml").unwrap();
        assert_eq!(back, fit.profile);
        assert!(fit.table().contains("gemm.bf16_flops_per_s"));
    }

    #[test]
    fn refuses_a_base_that_is_not_the_measured_gpu() {
        let h100 = GpuProfile::load("h100-sxm").unwrap();
        let h200 = GpuProfile::load("h200-sxm").unwrap();
        // Rows from an H200 streaming at 4.3 TB/s (H200 datasheet 4.8 TB/s).
        let mut h200_truth = h200.clone();
        h200_truth.memory.stream_bandwidth_bytes_per_s = 4.3e12;
        let rows: Vec<Measurement> = synthetic(&h200_truth, 11)
            .into_iter()
            .map(|mut r| {
                r.gpu = "NVIDIA H200".into();
                r
            })
            .collect();
        let e = fit_profile(&h100, &rows).unwrap_err();
        assert!(e.is_input_error());
        let msg = e.to_string();
        assert!(msg.contains("NVIDIA H200 (profile h200-sxm)"), "{msg}");
        assert!(
            msg.contains("--base calibration/gpus/h200-sxm.toml"),
            "{msg}"
        );
        // The right base fits, and the bandwidth is not pinned at a cap.
        let fit = fit_profile(&h200, &rows).unwrap();
        let bw = fit.profile.memory.stream_bandwidth_bytes_per_s;
        assert!((bw / 4.3e12 - 1.0).abs() < 0.05, "{bw:e}");
        // An unknown name cannot be matched, but streaming faster than the base's HBM can.
        let anon: Vec<Measurement> = rows
            .into_iter()
            .map(|mut r| {
                r.gpu = "Some GPU".into();
                r
            })
            .collect();
        let msg = fit_profile(&h100, &anon).unwrap_err().to_string();
        assert!(
            msg.contains("faster than the base profile h100-sxm's"),
            "{msg}"
        );
        assert!(fit_profile(&h200, &anon).is_ok());
    }

    #[test]
    fn device_names_map_to_profiles_exactly() {
        assert_eq!(profile_for_device("NVIDIA H200"), Some("h200-sxm"));
        assert_eq!(
            profile_for_device("NVIDIA H100 80GB HBM3"),
            Some("h100-sxm")
        );
        assert_eq!(profile_for_device("NVIDIA H100 PCIe"), Some("h100-pcie"));
        assert_eq!(profile_for_device("NVIDIA H200 NVL"), None);
        assert_eq!(profile_for_device("NVIDIA GH200 480GB"), None);
        assert_eq!(profile_for_device("NVIDIA H20"), None);
        for (_, p) in DEVICE_PROFILES {
            assert_eq!(GpuProfile::load(p).unwrap().name, *p);
        }
    }

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let f = |x: &[f64]| (x[0] - 1.0).powi(2) + 3.0 * (x[1] + 2.0).powi(2);
        let (x, v) = nelder_mead(&f, &[0.0, 0.0], 0.5, 1e-16, 5000);
        assert!(v < 1e-10 && (x[0] - 1.0).abs() < 1e-4 && (x[1] + 2.0).abs() < 1e-4);
    }

    #[test]
    fn fp4_gemm_rows_fit_the_fp4_rate_and_leave_the_fp8_curve() {
        // BF16 and NVFP4/MXFP4 GEMM rows timed by a B200 whose FP4 rate is 4.5 PFLOP/s.
        let base = GpuProfile::load("b200").unwrap();
        let mut truth = base.clone();
        truth.gemm.fp4_flops_per_s = 4.5e15;
        truth.gemm.bf16_flops_per_s = 1.5e15;
        let mut rows = Vec::new();
        for dt in ["bf16", "nvfp4", "mxfp4"] {
            for (k, n) in [(4096u64, 6144u64), (7168, 4096), (2048, 7168)] {
                for b in 0..=14 {
                    let mut r = Measurement::new(KernelClass::Gemm, dt, "s", "");
                    (r.m, r.k, r.n) = (Some(1 << b), Some(k), Some(n));
                    r.flops = Some((2u64 << b) as f64 * (k * n) as f64);
                    let t = predict(&truth, &r).unwrap() * 1e6;
                    (r.median_us, r.p10_us, r.p90_us) = (t, t, t);
                    rows.push(r);
                }
            }
        }
        let fit = fit_profile(&base, &rows).unwrap();
        let g = &fit.profile.gemm;
        assert!((g.fp4_flops_per_s / 4.5e15 - 1.0).abs() < 0.02, "{g:?}");
        assert!((g.bf16_flops_per_s / 1.5e15 - 1.0).abs() < 0.02, "{g:?}");
        // No FP8 rows: the FP8 curve (whose ramp FP4 GEMMs share) stays the base's.
        assert_eq!(g.fp8_flops_per_s, base.gemm.fp8_flops_per_s);
        assert_eq!(g.fp8_half_rate_tokens, base.gemm.fp8_half_rate_tokens);
        assert!(fit.params.iter().any(|p| p.key == "gemm.fp4_flops_per_s"));
        // A profile without FP4 tensor cores cannot time an FP4 row.
        let h100 = GpuProfile::load("h100-sxm").unwrap();
        let fp4_row = rows.iter().find(|r| r.dtype == "nvfp4").unwrap();
        assert!(predict(&h100, fp4_row).is_none());
    }
}
