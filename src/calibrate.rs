//! Calibration with real kernels: a kernel suite run on a GPU (behind cargo feature `cuda`),
//! the measurement file it writes, the fitter that turns measurements into a GPU profile, and
//! the check of predicted against measured kernel times.
//!
//! One seam: [`KernelBackend`] is the suite's operations. `cuda.rs` implements it with cudarc
//! (the only code behind `#[cfg(feature = "cuda")]`); [`NoGpuBackend`] stands in everywhere else
//! and answers every call with [`Error::Unavailable`]. The suite driver ([`run_suite`]), the
//! measurement format ([`measurement`]), the fitter ([`fit`]) and the validation ([`validate`])
//! are plain code and are tested without a GPU. See docs/calibration.md.

#[cfg(feature = "cuda")]
mod cuda;
pub mod fit;
pub mod measurement;
pub mod validate;

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::ModelSpec;

pub use measurement::{KernelClass, Measurement};

/// GEMM element type of a calibration run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmDtype {
    /// bf16 inputs and output, fp32 accumulation.
    Bf16,
    /// fp8 (e4m3) inputs, bf16 output, fp32 accumulation.
    Fp8,
}

impl GemmDtype {
    /// The name used in the `dtype` column.
    pub fn name(self) -> &'static str {
        match self {
            GemmDtype::Bf16 => "bf16",
            GemmDtype::Fp8 => "fp8",
        }
    }

    /// Bytes per weight element.
    pub fn bytes(self) -> f64 {
        match self {
            GemmDtype::Bf16 => 2.0,
            GemmDtype::Fp8 => 1.0,
        }
    }
}

/// The device a backend runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// GPU name as the driver reports it, e.g. `NVIDIA H200`.
    pub name: String,
    /// Driver API version as the driver reports it, e.g. `13000`.
    pub driver: String,
    /// Whether the GPU has FP8 tensor cores (compute capability 8.9 or later).
    pub supports_fp8: bool,
    /// L2 cache size, bytes (input buffers rotate over more than this).
    pub l2_bytes: u64,
    /// Free device memory when the backend opened, bytes.
    pub free_bytes: u64,
}

/// Spread of one kernel's repeated timings, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Median, microseconds.
    pub median_us: f64,
    /// 10th percentile, microseconds.
    pub p10_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
}

impl Timing {
    /// Summarises samples (microseconds): median, p10 and p90 by the nearest-rank method on
    /// the sorted samples. An error when there are none or one is not a finite positive time.
    pub fn from_samples(samples: &[f64]) -> Result<Self> {
        if samples.is_empty() {
            return Err(Error::Internal("no timing samples".into()));
        }
        if samples.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::Internal(format!(
                "a timing sample is not a positive time: {samples:?}"
            )));
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((q * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)];
        let median = if s.len() % 2 == 1 {
            s[s.len() / 2]
        } else {
            0.5 * (s[s.len() / 2 - 1] + s[s.len() / 2])
        };
        Ok(Timing {
            median_us: median,
            p10_us: at(0.1).min(median),
            p90_us: at(0.9).max(median),
        })
    }
}

/// Shape of one paged decode-attention measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Sequences in the batch.
    pub batch: u64,
    /// Cached tokens per sequence.
    pub context: u64,
    /// Query heads.
    pub q_heads: u64,
    /// KV heads.
    pub kv_heads: u64,
    /// Head dimension.
    pub head_dim: u64,
}

/// KV-cache block size of the paged attention kernel, tokens.
pub const KV_BLOCK_TOKENS: u64 = 16;

/// The kernel suite's operations. Every timing is the median etc. of at least
/// [`SuiteConfig::runs`] runs after warm-up, with inputs rotated over more than the L2 cache.
pub trait KernelBackend {
    /// The device the backend runs on.
    fn device(&self) -> Result<DeviceInfo>;
    /// Checks every kernel's output against a CPU reference on small inputs; an error names
    /// the kernel that disagrees.
    fn verify(&mut self) -> Result<()>;
    /// Device-to-device copy of `bytes / 2` bytes (so `bytes` counts reads + writes).
    fn stream_copy(&mut self, bytes: u64, runs: usize) -> Result<Timing>;
    /// Read-only reduction over `bytes` bytes.
    fn stream_reduce(&mut self, bytes: u64, runs: usize) -> Result<Timing>;
    /// GEMM of `m x k` activations by `k x n` weights in `dtype`.
    fn gemm(&mut self, m: u64, k: u64, n: u64, dtype: GemmDtype, runs: usize) -> Result<Timing>;
    /// Paged decode attention (bf16 KV in blocks of [`KV_BLOCK_TOKENS`] tokens).
    fn paged_decode_attention(&mut self, shape: AttentionShape, runs: usize) -> Result<Timing>;
    /// An empty kernel launched back to back: time per launch.
    fn empty_kernel(&mut self, runs: usize) -> Result<Timing>;
}

/// The backend of a build without CUDA, or of a machine without a GPU: every call fails with
/// [`Error::Unavailable`] carrying `reason`.
#[derive(Debug, Clone)]
pub struct NoGpuBackend {
    /// Why there is no GPU backend.
    pub reason: String,
}

/// The message of a build without feature `cuda`.
pub const NO_CUDA_BUILD: &str =
    "this servesim was built without CUDA support; rebuild with --features cuda";

impl Default for NoGpuBackend {
    fn default() -> Self {
        NoGpuBackend {
            reason: NO_CUDA_BUILD.to_string(),
        }
    }
}

impl NoGpuBackend {
    fn err<T>(&self) -> Result<T> {
        Err(Error::Unavailable(self.reason.clone()))
    }
}

impl KernelBackend for NoGpuBackend {
    fn device(&self) -> Result<DeviceInfo> {
        self.err()
    }
    fn verify(&mut self) -> Result<()> {
        self.err()
    }
    fn stream_copy(&mut self, _: u64, _: usize) -> Result<Timing> {
        self.err()
    }
    fn stream_reduce(&mut self, _: u64, _: usize) -> Result<Timing> {
        self.err()
    }
    fn gemm(&mut self, _: u64, _: u64, _: u64, _: GemmDtype, _: usize) -> Result<Timing> {
        self.err()
    }
    fn paged_decode_attention(&mut self, _: AttentionShape, _: usize) -> Result<Timing> {
        self.err()
    }
    fn empty_kernel(&mut self, _: usize) -> Result<Timing> {
        self.err()
    }
}

/// Opens the kernel backend on GPU `device`. Without feature `cuda` this is an
/// [`Error::Unavailable`] saying so; with it, an [`Error::Unavailable`] when no CUDA driver
/// (or NVRTC / cuBLASLt library) can be loaded, checked before any CUDA call.
pub fn open_backend(device: usize) -> Result<Box<dyn KernelBackend>> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(cuda::CudaBackend::open(device)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        Err(Error::Unavailable(NoGpuBackend::default().reason))
    }
}

/// Which parts of the suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// HBM copy and reduction.
    Stream,
    /// Weight GEMMs.
    Gemm,
    /// Paged decode attention.
    Attention,
    /// Empty-kernel launch latency.
    Launch,
}

/// What `servesim calibrate` measures.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Models whose layer shapes (GEMMs, attention heads) are measured.
    pub models: Vec<ModelSpec>,
    /// Tensor-parallel degrees: shapes are split as one GPU of the group sees them.
    pub tp: Vec<u64>,
    /// GEMM token counts (m).
    pub batches: Vec<u64>,
    /// HBM streaming sizes, bytes.
    pub stream_bytes: Vec<u64>,
    /// Attention batch sizes.
    pub attention_batches: Vec<u64>,
    /// Attention context lengths, tokens.
    pub attention_contexts: Vec<u64>,
    /// Timed runs per kernel x shape (at least 20).
    pub runs: usize,
    /// Parts to run.
    pub parts: Vec<Part>,
    /// Largest total device allocation one measurement may make, bytes.
    pub max_alloc_bytes: u64,
}

impl SuiteConfig {
    /// The default suite for `models`: HBM 1 MB..8 GB, GEMMs at 1..1024 tokens, attention
    /// at batch 1..256 x context 128..8192, 20 runs.
    pub fn new(models: Vec<ModelSpec>) -> Self {
        SuiteConfig {
            models,
            tp: vec![1],
            batches: (0..=10).map(|i| 1u64 << i).collect(),
            stream_bytes: (20..=33).map(|i| 1u64 << i).collect(),
            attention_batches: vec![1, 4, 16, 64, 256],
            attention_contexts: vec![128, 512, 2048, 8192],
            runs: 20,
            parts: vec![Part::Stream, Part::Gemm, Part::Attention, Part::Launch],
            max_alloc_bytes: 24 << 30,
        }
    }
}

/// One weight GEMM of a model layer as one GPU of a TP group sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmShape {
    /// Operator name: `qkv`, `o`, `gate_up` or `down`.
    pub op: &'static str,
    /// Input features.
    pub k: u64,
    /// Output features.
    pub n: u64,
}

/// The four weight GEMMs of one layer of `model` split over `tp` GPUs:
/// qkv (h -> (n_h + 2 n_kv) d / TP), o (n_h d / TP -> h), gate_up (h -> 2f / TP), down (f / TP -> h).
/// An error when `tp` does not divide the dimensions.
pub fn layer_gemms(model: &ModelSpec, tp: u64) -> Result<Vec<GemmShape>> {
    let h = model.hidden_size;
    let d = model.head_dim;
    let qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * d;
    let q = model.num_attention_heads * d;
    let f = model.intermediate_size;
    if tp == 0 || qkv % tp != 0 || q % tp != 0 || f % tp != 0 {
        return Err(Error::Infeasible(format!(
            "{}: tensor-parallel size {tp} does not divide the layer's dimensions",
            model.name
        )));
    }
    Ok(vec![
        GemmShape {
            op: "qkv",
            k: h,
            n: qkv / tp,
        },
        GemmShape {
            op: "o",
            k: q / tp,
            n: h,
        },
        GemmShape {
            op: "gate_up",
            k: h,
            n: 2 * f / tp,
        },
        GemmShape {
            op: "down",
            k: f / tp,
            n: h,
        },
    ])
}

/// Bytes and FLOPs of a GEMM as the model counts them (weights + activations in and out).
pub fn gemm_bytes_flops(m: u64, k: u64, n: u64, dtype: GemmDtype) -> (f64, f64) {
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let bytes = k * n * dtype.bytes() + m * (k + n) * crate::roofline::ACT_BYTES;
    (bytes, 2.0 * m * k * n)
}

/// Bytes (KV read) and FLOPs (QK and PV) of one paged decode-attention kernel with bf16 KV.
pub fn attention_bytes_flops(s: AttentionShape) -> (f64, f64) {
    let tokens = (s.batch * s.context) as f64;
    let kv_per_token = 2.0 * (s.kv_heads * s.head_dim) as f64 * 2.0;
    (
        tokens * kv_per_token,
        4.0 * (s.q_heads * s.head_dim) as f64 * tokens,
    )
}

/// Runs the suite on `backend`: verifies every kernel first, then measures each part.
/// `progress` receives one line per measurement. Shapes that do not fit in
/// [`SuiteConfig::max_alloc_bytes`] or in free device memory are skipped with a progress note.
pub fn run_suite(
    backend: &mut dyn KernelBackend,
    cfg: &SuiteConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Measurement>> {
    if cfg.runs < 20 {
        return Err(Error::config(
            "--runs",
            "runs",
            format!("at least 20 timed runs per kernel, got {}", cfg.runs),
        ));
    }
    let dev = backend.device()?;
    progress(&format!(
        "device: {} (driver {}, L2 {} MB, {:.1} GB free, fp8 {})",
        dev.name,
        dev.driver,
        dev.l2_bytes / 1_000_000,
        dev.free_bytes as f64 / 1e9,
        if dev.supports_fp8 { "yes" } else { "no" }
    ));
    backend.verify()?;
    progress("verified every kernel against its CPU reference");
    let budget = cfg.max_alloc_bytes.min(dev.free_bytes / 10 * 8);
    let source = "servesim calibrate";
    let row = |class: KernelClass, dtype: &str, t: Timing| {
        let mut r = Measurement::new(class, dtype, &dev.name, &dev.driver);
        r.median_us = t.median_us;
        r.p10_us = t.p10_us;
        r.p90_us = t.p90_us;
        r.source = source.to_string();
        r
    };
    let mut out = Vec::new();
    let has = |p: Part| cfg.parts.contains(&p);

    if has(Part::Launch) {
        let t = backend.empty_kernel(cfg.runs)?;
        let mut r = row(KernelClass::EmptyKernel, "u8", t);
        r.bytes = Some(0.0);
        r.flops = Some(0.0);
        progress(&format!("empty_kernel: {:.2} us", t.median_us));
        out.push(r);
    }
    if has(Part::Stream) {
        for &b in &cfg.stream_bytes {
            // Copy holds a source and a destination of b/2 each; the reduction holds b.
            if b > budget {
                progress(&format!("stream {b} B: skipped (over the memory budget)"));
                continue;
            }
            for class in [KernelClass::StreamCopy, KernelClass::StreamReduce] {
                let t = if class == KernelClass::StreamCopy {
                    backend.stream_copy(b, cfg.runs)?
                } else {
                    backend.stream_reduce(b, cfg.runs)?
                };
                let mut r = row(class, "u8", t);
                r.bytes = Some(b as f64);
                r.flops = Some(0.0);
                progress(&format!(
                    "{class} {b} B: {:.2} us ({:.0} GB/s)",
                    t.median_us,
                    b as f64 / t.median_us * 1e-3
                ));
                out.push(r);
            }
        }
    }
    if has(Part::Gemm) {
        let mut dtypes = vec![GemmDtype::Bf16];
        if dev.supports_fp8 {
            dtypes.push(GemmDtype::Fp8);
        }
        let mut seen = std::collections::HashSet::new();
        for model in &cfg.models {
            for &tp in &cfg.tp {
                for g in layer_gemms(model, tp)? {
                    for &m in &cfg.batches {
                        for &dt in &dtypes {
                            if !seen.insert((m, g.k, g.n, dt.name())) {
                                continue;
                            }
                            let (bytes, flops) = gemm_bytes_flops(m, g.k, g.n, dt);
                            if bytes * 2.0 > budget as f64 {
                                progress(&format!("gemm {m}x{}x{}: skipped (memory)", g.k, g.n));
                                continue;
                            }
                            let t = match backend.gemm(m, g.k, g.n, dt, cfg.runs) {
                                // cuBLASLt may have no fp8 algorithm for a skinny shape.
                                Err(Error::Unavailable(why)) if dt == GemmDtype::Fp8 => {
                                    progress(&format!(
                                        "gemm fp8 {m}x{}x{}: skipped ({why})",
                                        g.k, g.n
                                    ));
                                    continue;
                                }
                                r => r?,
                            };
                            let mut r = row(KernelClass::Gemm, dt.name(), t);
                            (r.m, r.k, r.n) = (Some(m), Some(g.k), Some(g.n));
                            r.bytes = Some(bytes);
                            r.flops = Some(flops);
                            progress(&format!(
                                "gemm {} {} m={m} k={} n={} {}: {:.2} us ({:.0} TFLOP/s)",
                                model.name,
                                g.op,
                                g.k,
                                g.n,
                                dt.name(),
                                t.median_us,
                                flops / t.median_us * 1e-6
                            ));
                            out.push(r);
                        }
                    }
                }
            }
        }
    }
    if has(Part::Attention) {
        let mut seen = std::collections::HashSet::new();
        for model in &cfg.models {
            for &tp in &cfg.tp {
                if model.num_kv_heads % tp != 0 || model.num_attention_heads % tp != 0 {
                    continue;
                }
                let (q_heads, kv_heads) = (model.num_attention_heads / tp, model.num_kv_heads / tp);
                for &batch in &cfg.attention_batches {
                    for &context in &cfg.attention_contexts {
                        let s = AttentionShape {
                            batch,
                            context,
                            q_heads,
                            kv_heads,
                            head_dim: model.head_dim,
                        };
                        if !seen.insert((batch, context, q_heads, kv_heads, s.head_dim)) {
                            continue;
                        }
                        let (bytes, flops) = attention_bytes_flops(s);
                        if bytes > budget as f64 {
                            progress(&format!(
                                "attention batch {batch} context {context}: skipped (memory)"
                            ));
                            continue;
                        }
                        let t = backend.paged_decode_attention(s, cfg.runs)?;
                        let mut r = row(KernelClass::PagedDecodeAttention, "bf16", t);
                        r.batch = Some(batch);
                        r.context = Some(context);
                        r.q_heads = Some(q_heads);
                        r.kv_heads = Some(kv_heads);
                        r.head_dim = Some(s.head_dim);
                        r.bytes = Some(bytes);
                        r.flops = Some(flops);
                        progress(&format!(
                            "paged_decode_attention {} batch {batch} context {context}: {:.2} us ({:.0} GB/s)",
                            model.name,
                            t.median_us,
                            bytes / t.median_us * 1e-3
                        ));
                        out.push(r);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed and
/// synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_sibling(path, "");
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// A temporary path next to `path` (same directory, so a rename is atomic), ending in
/// `suffix` (the PNG encoder picks its format from the extension).
pub fn temp_sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.tmp-{}{suffix}", std::process::id()))
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock.
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuProfile;
    use crate::model::load_model;

    #[test]
    fn no_gpu_backend_says_built_without_cuda() {
        let mut b = NoGpuBackend::default();
        let e = b.empty_kernel(20).unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)));
        assert!(e.to_string().contains("built without CUDA support"), "{e}");
        assert!(e.is_input_error());
        assert!(b.device().is_err() && b.verify().is_err());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn open_backend_without_feature_says_so() {
        let e = open_backend(0).err().unwrap();
        assert!(e.to_string().contains("built without CUDA support"), "{e}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn open_backend_without_a_driver_does_not_panic() {
        // On a machine with a GPU this opens it; without one it must be a clean error.
        if let Err(e) = open_backend(0) {
            assert!(
                matches!(e, Error::Unavailable(_) | Error::Internal(_)),
                "{e}"
            );
        }
    }

    #[test]
    fn timing_summary() {
        let t = Timing::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(t.median_us, 3.0);
        assert!(t.p10_us <= t.median_us && t.median_us <= t.p90_us);
        assert!(Timing::from_samples(&[]).is_err());
        assert!(Timing::from_samples(&[1.0, f64::NAN]).is_err());
    }

    #[test]
    fn layer_gemms_split_by_tp() {
        let m = load_model("llama-2-70b").unwrap();
        let g = layer_gemms(&m, 8).unwrap();
        assert_eq!((g[0].k, g[0].n), (8192, (64 + 16) * 128 / 8));
        assert_eq!((g[1].k, g[1].n), (64 * 128 / 8, 8192));
        assert_eq!((g[2].k, g[2].n), (8192, 2 * 28672 / 8));
        assert_eq!((g[3].k, g[3].n), (28672 / 8, 8192));
        assert!(layer_gemms(&m, 7).is_err());
    }

    /// A backend that answers with the model's own predictions: exercises the suite driver.
    struct ModelBackend(GpuProfile);
    impl KernelBackend for ModelBackend {
        fn device(&self) -> Result<DeviceInfo> {
            Ok(DeviceInfo {
                name: "Model GPU".into(),
                driver: "0".into(),
                supports_fp8: true,
                l2_bytes: 50 << 20,
                free_bytes: 80 << 30,
            })
        }
        fn verify(&mut self) -> Result<()> {
            Ok(())
        }
        fn stream_copy(&mut self, b: u64, _: usize) -> Result<Timing> {
            t(crate::roofline::kernels::stream_s(&self.0, b as f64))
        }
        fn stream_reduce(&mut self, b: u64, _: usize) -> Result<Timing> {
            t(crate::roofline::kernels::stream_s(&self.0, b as f64))
        }
        fn gemm(&mut self, m: u64, k: u64, n: u64, d: GemmDtype, _: usize) -> Result<Timing> {
            let fp8 = matches!(d, GemmDtype::Fp8);
            let g = &self.0;
            t(crate::roofline::kernels::gemm_s(g, m as f64, k as f64, n as f64, d.bytes(), fp8).0)
        }
        fn paged_decode_attention(&mut self, s: AttentionShape, _: usize) -> Result<Timing> {
            let tokens = (s.batch * s.context) as f64;
            t(crate::roofline::kernels::decode_attention_s(
                &self.0,
                tokens,
                tokens,
                4.0 * (s.kv_heads * s.head_dim) as f64,
                (s.q_heads * s.head_dim) as f64,
            ))
        }
        fn empty_kernel(&mut self, _: usize) -> Result<Timing> {
            t(self.0.small_ops.launch_s)
        }
    }
    fn t(s: f64) -> Result<Timing> {
        Timing::from_samples(&[s * 1e6])
    }

    #[test]
    fn suite_produces_rows_that_validate_exactly() {
        let gpu = GpuProfile::load("h100-sxm").unwrap();
        let mut cfg = SuiteConfig::new(vec![load_model("llama-3.1-8b").unwrap()]);
        cfg.max_alloc_bytes = 64 << 30;
        let rows = run_suite(&mut ModelBackend(gpu.clone()), &cfg, &mut |_| {}).unwrap();
        let text = measurement::to_csv(&rows, &[]).unwrap();
        let back = measurement::parse_measurements(&text, "suite.csv").unwrap();
        assert_eq!(back.len(), rows.len());
        let v = validate::validate(&gpu, &back);
        for c in &v.classes {
            assert!(c.median_abs_error < 1e-9, "{c:?}");
        }
        assert!(back.iter().any(|r| r.dtype == "fp8"));
        let mut few = cfg.clone();
        few.runs = 5;
        assert!(run_suite(&mut ModelBackend(gpu), &few, &mut |_| {}).is_err());
    }

    #[test]
    fn atomic_write_and_date() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let d = today_utc();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
