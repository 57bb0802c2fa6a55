//! Calibration with real kernels: a kernel suite run on a GPU (behind cargo feature `cuda`),
//! the measurement file it writes, the fitter that turns measurements into a GPU profile, and
//! the check of predicted against measured kernel times.
//!
//! One seam: [`KernelBackend`] is the suite's operations. `cuda.rs` implements it with cudarc
//! (the only code behind `#[cfg(feature = "cuda")]`); [`NoGpuBackend`] stands in everywhere else
//! and answers every call with [`Error::Unavailable`]. The suite driver ([`run_suite`]), the
//! kernels' sources and CPU references ([`kernels`]), the timing arithmetic ([`timing`]), the
//! driver and library checks ([`compat`]), the measurement format ([`measurement`]), the fitter
//! ([`fit`]) and the validation ([`validate`]) are plain code and are tested without a GPU;
//! [`nvrtc`] compiles the kernels without one. See docs/calibration.md.

pub mod compat;
#[cfg(feature = "cuda")]
mod cuda;
pub mod fit;
pub mod kernels;
pub mod measurement;
#[cfg(any(feature = "cuda", test))]
pub mod nvrtc;
pub mod profile;
pub mod timing;
pub mod validate;

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::ModelSpec;

pub use kernels::KV_BLOCK_TOKENS;
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
    /// Libraries and versions the backend uses (driver, NVRTC, cuBLASLt, timing symbol), for
    /// the measurement file's header.
    pub software: String,
    /// Whether fp8 GEMMs are measured: FP8 tensor cores (compute capability 8.9 or later) and
    /// a cuBLASLt fp8 algorithm that passed verification.
    pub supports_fp8: bool,
    /// Why fp8 GEMMs are not measured, when they are not.
    pub fp8_note: Option<String>,
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

/// The outcome of one item of `servesim calibrate --check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// Checked and right.
    Ok,
    /// Not available on this machine, and the suite goes on without it (e.g. fp8 GEMMs).
    Unsupported,
    /// Wrong or missing: the suite cannot run (or would time a wrong kernel).
    Failed,
}

/// One item of `servesim calibrate --check`: a library, a symbol set, a module, or one tiny
/// launch of a kernel against its CPU reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckItem {
    /// What was checked, e.g. `paged_decode_attention hd128 g8`.
    pub what: String,
    /// The outcome.
    pub status: CheckStatus,
    /// Versions, sizes, measured values, or why it failed.
    pub detail: String,
}

impl CheckItem {
    /// An item with `status`.
    pub fn new(what: impl Into<String>, status: CheckStatus, detail: impl Into<String>) -> Self {
        CheckItem {
            what: what.into(),
            status,
            detail: detail.into(),
        }
    }

    /// An item from a check's result: `Ok(detail)` or `Err(why)` (failed).
    pub fn from_result(what: impl Into<String>, r: std::result::Result<String, String>) -> Self {
        match r {
            Ok(d) => Self::new(what, CheckStatus::Ok, d),
            Err(e) => Self::new(what, CheckStatus::Failed, e),
        }
    }
}

/// The check items as a plain-text table (item, status, detail).
pub fn check_table(items: &[CheckItem]) -> String {
    let w = items.iter().map(|i| i.what.len()).max().unwrap_or(4).max(4);
    let mut s = format!("{:<w$}  {:<11}  detail\n", "item", "status");
    for i in items {
        let st = match i.status {
            CheckStatus::Ok => "ok",
            CheckStatus::Unsupported => "unsupported",
            CheckStatus::Failed => "FAILED",
        };
        s.push_str(&format!("{:<w$}  {:<11}  {}\n", i.what, st, i.detail));
    }
    s
}

/// `Ok` when no item failed, else an [`Error::Internal`] naming the first failure.
pub fn first_failure(items: &[CheckItem]) -> Result<()> {
    match items.iter().find(|i| i.status == CheckStatus::Failed) {
        None => Ok(()),
        Some(i) => Err(Error::Internal(format!(
            "calibration check failed: {}: {}",
            i.what, i.detail
        ))),
    }
}

/// The check item of the fp8 GEMM's verification. cuBLASLt answering that it has no fp8
/// algorithm ([`Error::Unavailable`]) makes fp8 unsupported, and the suite goes on with bf16;
/// an fp8 GEMM that ran and disagreed with the CPU reference fails.
pub fn fp8_item(res: Result<()>) -> CheckItem {
    let what = "gemm fp8 16x64x48";
    match res {
        Ok(()) => CheckItem::new(what, CheckStatus::Ok, "matches the CPU reference"),
        Err(Error::Unavailable(why)) => CheckItem::new(what, CheckStatus::Unsupported, why),
        Err(e) => CheckItem::new(what, CheckStatus::Failed, e.to_string()),
    }
}

/// The kernel suite's operations. Every timing is the median etc. of at least
/// [`SuiteConfig::runs`] samples after warm-up, with inputs rotated over more than twice the L2
/// cache (see [`timing`]).
pub trait KernelBackend {
    /// The device the backend runs on (after [`Self::check`], with fp8 support as verified).
    fn device(&self) -> Result<DeviceInfo>;
    /// Everything that can be checked before timing: libraries and versions, driver symbols,
    /// module loads, and one tiny launch of each kernel against its CPU reference. Failures are
    /// items, not errors; an error means nothing could be checked.
    fn check(&mut self) -> Result<Vec<CheckItem>>;
    /// [`Self::check`], as an error naming the first failed item.
    fn verify(&mut self) -> Result<()> {
        let items = self.check()?;
        first_failure(&items)
    }
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
    fn check(&mut self) -> Result<Vec<CheckItem>> {
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
/// [`Error::Unavailable`] saying so; with it, an [`Error::Unavailable`] when no CUDA driver or
/// GPU is found, or when a library the suite needs is missing or does not suit the driver
/// (checked before any kernel runs).
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

/// `servesim calibrate --check` on GPU `device`: the items of opening the backend (driver,
/// symbols, libraries, module load) and, when it opened, of [`KernelBackend::check`]. An
/// [`Error::Unavailable`] when there is no CUDA build, driver or GPU to check.
pub fn check_device(device: usize) -> Result<Vec<CheckItem>> {
    #[cfg(feature = "cuda")]
    {
        cuda::check(device)
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

/// The four weight GEMMs of one layer of `model` split over `tp` GPUs, with the widths the
/// step-time model charges ([`crate::roofline::gqa_projection_widths`]): qkv
/// (h -> n_h d / TP + 2 x KV heads per GPU x d, the KV heads replicated when TP exceeds
/// them), o (n_h d / TP -> h), gate_up (h -> 2f / TP), down (f / TP -> h). An error when
/// `tp` does not divide the query heads or the MLP, or neither divides the other of `tp` and
/// the KV heads.
pub fn layer_gemms(model: &ModelSpec, tp: u64) -> Result<Vec<GemmShape>> {
    let h = model.hidden_size;
    let q = model.q_dim();
    let f = model.intermediate_size;
    let kv = model.num_kv_heads;
    let kv_splits = kv > 0 && (tp <= kv && kv % tp == 0 || tp > kv && tp % kv == 0);
    if tp == 0 || q % tp != 0 || f % tp != 0 || !kv_splits {
        return Err(Error::Infeasible(format!(
            "{}: tensor-parallel size {tp} does not divide the layer's dimensions",
            model.name
        )));
    }
    let (q_width, kv_width) = crate::roofline::gqa_projection_widths(model, tp);
    let qkv = (q_width + 2.0 * kv_width) as u64;
    Ok(vec![
        GemmShape {
            op: "qkv",
            k: h,
            n: qkv,
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

/// Bytes and FLOPs of one calibration GEMM as the kernel moves them: weights and input
/// activations in `dtype` (fp8 inputs are one byte each, as cuBLASLt reads them), bf16 output.
pub fn gemm_bytes_flops(m: u64, k: u64, n: u64, dtype: GemmDtype) -> (f64, f64) {
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let bytes = (k * n + m * k) * dtype.bytes() + m * n * crate::roofline::ACT_BYTES;
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

/// What a suite run produced: the measurement rows, and every shape it skipped with the reason.
#[derive(Debug, Clone, Default)]
pub struct SuiteOutput {
    /// One row per kernel x shape x dtype measured.
    pub rows: Vec<Measurement>,
    /// One line per skipped shape or group of shapes: what, and why.
    pub skipped: Vec<String>,
}

/// Runs the suite on `backend`: checks every kernel first (an error when one fails), then
/// measures each part. `progress` receives one line per measurement. Shapes that do not fit in
/// [`SuiteConfig::max_alloc_bytes`] or in free device memory, attention shapes the kernel does
/// not support, and fp8 GEMMs cuBLASLt has no algorithm for are skipped, with a progress line
/// and a line in [`SuiteOutput::skipped`]; the rest of the suite runs.
pub fn run_suite(
    backend: &mut dyn KernelBackend,
    cfg: &SuiteConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<SuiteOutput> {
    if cfg.runs < 20 {
        return Err(Error::config(
            "--runs",
            "runs",
            format!("at least 20 timed runs per kernel, got {}", cfg.runs),
        ));
    }
    backend.verify()?;
    let dev = backend.device()?;
    progress(&format!(
        "device: {} (driver {}, L2 {} MB, {:.1} GB free, fp8 {}); {}",
        dev.name,
        dev.driver,
        dev.l2_bytes / 1_000_000,
        dev.free_bytes as f64 / 1e9,
        if dev.supports_fp8 { "yes" } else { "no" },
        dev.software
    ));
    progress("verified every kernel against its CPU reference");
    let mut run = SuiteRun {
        budget: cfg.max_alloc_bytes.min(dev.free_bytes / 10 * 8),
        backend,
        cfg,
        progress,
        dev,
        out: SuiteOutput::default(),
    };
    let has = |p: Part| cfg.parts.contains(&p);
    if has(Part::Launch) {
        run.launch()?;
    }
    if has(Part::Stream) {
        run.stream()?;
    }
    if has(Part::Gemm) {
        run.gemms()?;
    }
    if has(Part::Attention) {
        run.attention()?;
    }
    Ok(run.out)
}

/// A suite run in progress: the backend and device, the memory budget of one shape (bytes),
/// and the rows and skipped lines so far.
struct SuiteRun<'a> {
    backend: &'a mut dyn KernelBackend,
    cfg: &'a SuiteConfig,
    progress: &'a mut dyn FnMut(&str),
    dev: DeviceInfo,
    budget: u64,
    out: SuiteOutput,
}

impl SuiteRun<'_> {
    /// Skips `line` (what, and why): a progress line and a line in the output.
    fn skip(&mut self, line: String) {
        (self.progress)(&format!("{line}: skipped"));
        self.out.skipped.push(line);
    }

    /// A measurement row of `class` in `dtype` with `t`'s times, on this device.
    fn row(&self, class: KernelClass, dtype: &str, t: Timing) -> Measurement {
        let mut r = Measurement::new(class, dtype, &self.dev.name, &self.dev.driver);
        r.median_us = t.median_us;
        r.p10_us = t.p10_us;
        r.p90_us = t.p90_us;
        r.source = "servesim calibrate".to_string();
        r
    }

    /// The empty kernel: launch overhead.
    fn launch(&mut self) -> Result<()> {
        let t = self.backend.empty_kernel(self.cfg.runs)?;
        let mut r = self.row(KernelClass::EmptyKernel, "u8", t);
        r.bytes = Some(0.0);
        r.flops = Some(0.0);
        (self.progress)(&format!("empty_kernel: {:.2} us", t.median_us));
        self.out.rows.push(r);
        Ok(())
    }

    /// HBM copy and reduction at each size within the budget.
    fn stream(&mut self) -> Result<()> {
        let cfg = self.cfg;
        for &b in &cfg.stream_bytes {
            // Copy holds a source and a destination of b/2 each; the reduction holds b.
            if b > self.budget {
                self.skip(format!("stream {b} B (over the memory budget)"));
                continue;
            }
            for class in [KernelClass::StreamCopy, KernelClass::StreamReduce] {
                let t = if class == KernelClass::StreamCopy {
                    self.backend.stream_copy(b, cfg.runs)?
                } else {
                    self.backend.stream_reduce(b, cfg.runs)?
                };
                let mut r = self.row(class, "u8", t);
                r.bytes = Some(b as f64);
                r.flops = Some(0.0);
                (self.progress)(&format!(
                    "{class} {b} B: {:.2} us ({:.0} GB/s)",
                    t.median_us,
                    b as f64 / t.median_us * 1e-3
                ));
                self.out.rows.push(r);
            }
        }
        Ok(())
    }

    /// The weight GEMMs of every model's layers at every TP and batch, in bf16 and (where the
    /// device has it) fp8; each distinct shape once.
    fn gemms(&mut self) -> Result<()> {
        let cfg = self.cfg;
        let mut dtypes = vec![GemmDtype::Bf16];
        if self.dev.supports_fp8 {
            dtypes.push(GemmDtype::Fp8);
        } else {
            let why = self
                .dev
                .fp8_note
                .clone()
                .unwrap_or_else(|| "not supported".into());
            self.skip(format!("gemm fp8, every shape ({why})"));
        }
        let mut seen = std::collections::HashSet::new();
        for model in &cfg.models {
            for &tp in &cfg.tp {
                for g in layer_gemms(model, tp)? {
                    for &m in &cfg.batches {
                        for &dt in &dtypes {
                            if seen.insert((m, g.k, g.n, dt.name())) {
                                self.gemm(model, &g, m, dt)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// One GEMM of layer shape `g` of `model` at `m` tokens in `dt`; skipped when it does not
    /// fit the budget or cuBLASLt has no fp8 algorithm for it.
    fn gemm(&mut self, model: &ModelSpec, g: &GemmShape, m: u64, dt: GemmDtype) -> Result<()> {
        let (bytes, flops) = gemm_bytes_flops(m, g.k, g.n, dt);
        let shape = format!("gemm {} m={m} k={} n={}", dt.name(), g.k, g.n);
        if bytes * 2.0 > self.budget as f64 {
            self.skip(format!("{shape} (memory)"));
            return Ok(());
        }
        let t = match self.backend.gemm(m, g.k, g.n, dt, self.cfg.runs) {
            // cuBLASLt may have no fp8 algorithm for a skinny shape.
            Err(Error::Unavailable(why)) if dt == GemmDtype::Fp8 => {
                self.skip(format!("{shape} ({why})"));
                return Ok(());
            }
            r => r?,
        };
        let mut r = self.row(KernelClass::Gemm, dt.name(), t);
        (r.m, r.k, r.n) = (Some(m), Some(g.k), Some(g.n));
        r.bytes = Some(bytes);
        r.flops = Some(flops);
        (self.progress)(&format!(
            "gemm {} {} m={m} k={} n={} {}: {:.2} us ({:.0} TFLOP/s)",
            model.name,
            g.op,
            g.k,
            g.n,
            dt.name(),
            t.median_us,
            flops / t.median_us * 1e-6
        ));
        self.out.rows.push(r);
        Ok(())
    }

    /// Paged decode attention of every model at every TP whose heads split, at every batch
    /// and context; each distinct shape once.
    fn attention(&mut self) -> Result<()> {
        let cfg = self.cfg;
        let mut seen = std::collections::HashSet::new();
        for model in &cfg.models {
            for &tp in &cfg.tp {
                let what = format!("paged_decode_attention {} TP{tp}", model.name);
                if tp == 0 || model.num_kv_heads % tp != 0 || model.num_attention_heads % tp != 0 {
                    self.skip(format!(
                        "{what} ({} query / {} KV heads do not split over {tp} GPUs)",
                        model.num_attention_heads, model.num_kv_heads
                    ));
                    continue;
                }
                let (q_heads, kv_heads) = (model.num_attention_heads / tp, model.num_kv_heads / tp);
                if let Err(why) = kernels::attention_supported(model.head_dim, q_heads / kv_heads) {
                    self.skip(format!("{what}, every shape ({why})"));
                    continue;
                }
                for &batch in &cfg.attention_batches {
                    for &context in &cfg.attention_contexts {
                        let s = AttentionShape {
                            batch,
                            context,
                            q_heads,
                            kv_heads,
                            head_dim: model.head_dim,
                        };
                        if seen.insert((batch, context, q_heads, kv_heads, s.head_dim)) {
                            self.attention_shape(&what, s)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// One paged decode-attention shape (`what`: the model and TP); skipped when it does not
    /// fit the budget or the kernel does not support it.
    fn attention_shape(&mut self, what: &str, s: AttentionShape) -> Result<()> {
        let shape = format!("{what} batch {} context {}", s.batch, s.context);
        let (bytes, flops) = attention_bytes_flops(s);
        if bytes > self.budget as f64 {
            self.skip(format!("{shape} (memory)"));
            return Ok(());
        }
        let t = match self.backend.paged_decode_attention(s, self.cfg.runs) {
            Err(Error::Unavailable(why)) => {
                self.skip(format!("{shape} ({why})"));
                return Ok(());
            }
            r => r?,
        };
        let mut r = self.row(KernelClass::PagedDecodeAttention, "bf16", t);
        r.batch = Some(s.batch);
        r.context = Some(s.context);
        r.q_heads = Some(s.q_heads);
        r.kv_heads = Some(s.kv_heads);
        r.head_dim = Some(s.head_dim);
        r.bytes = Some(bytes);
        r.flops = Some(flops);
        (self.progress)(&format!(
            "{shape}: {:.2} us ({:.0} GB/s)",
            t.median_us,
            bytes / t.median_us * 1e-3
        ));
        self.out.rows.push(r);
        Ok(())
    }
}

/// Writes `bytes` to `path` atomically ([`crate::atomic_file::write_atomic`]: an exclusive,
/// unpredictably named temporary file in the same directory, flushed and synced, then renamed
/// over `path`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::atomic_file::write_atomic(path, bytes)
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
        assert!(b.device().is_err() && b.verify().is_err() && b.check().is_err());
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

    /// TP 16 exceeds Llama 3.1 405B's 8 KV heads: each GPU keeps one KV head (replicated), as
    /// the step-time model charges it, not half a head (`(n_h + 2 n_kv) d / TP`).
    #[test]
    fn layer_gemms_replicate_kv_heads_as_the_step_time_model_does() {
        use crate::engine::EngineProfile;
        use crate::precision::{KvDtype, WeightDtype};
        use crate::roofline::Deployment;
        let m = load_model("llama-3.1-405b").unwrap();
        assert_eq!(m.num_kv_heads, 8);
        let dep = Deployment::tensor_parallel(
            m.clone(),
            GpuProfile::load("h100-sxm").unwrap(),
            EngineProfile::load("vllm").unwrap(),
            16,
            WeightDtype::Bf16,
            KvDtype::Auto,
        );
        assert_eq!(dep.kv_heads_per_gpu(), 1);
        let g = layer_gemms(&m, 16).unwrap();
        let qkv = 128 * 128 / 16 + 2 * dep.kv_heads_per_gpu() * 128;
        assert_eq!((g[0].op, g[0].k, g[0].n), ("qkv", 16384, qkv));
        assert_eq!(qkv, 1280); // not (128 + 16) x 128 / 16 = 1152
                               // The KV cache the step-time model keeps per token and layer is those heads' K and V.
        assert_eq!(
            dep.kv_bytes_per_token_layer_per_gpu(),
            2.0 * (dep.kv_heads_per_gpu() * 128) as f64 * 2.0
        );
        // Below the KV heads both rules agree.
        let g8 = layer_gemms(&m, 8).unwrap();
        assert_eq!(g8[0].n, (128 + 16) * 128 / 8);
        // 3 GPUs split neither the query heads nor the KV heads.
        assert!(layer_gemms(&m, 3).is_err());
    }

    /// A backend that answers with the model's own predictions: exercises the suite driver.
    /// `fp8`: what verifying the fp8 GEMM gives (`Ok`, or cuBLASLt without an algorithm);
    /// `fp8_shapes_fail`: every timed fp8 GEMM answers that cuBLASLt has no algorithm.
    struct ModelBackend {
        gpu: GpuProfile,
        fp8: CheckStatus,
        fp8_shapes_fail: bool,
    }
    impl ModelBackend {
        fn new(gpu: GpuProfile) -> Self {
            ModelBackend {
                gpu,
                fp8: CheckStatus::Ok,
                fp8_shapes_fail: false,
            }
        }
    }
    impl KernelBackend for ModelBackend {
        fn device(&self) -> Result<DeviceInfo> {
            Ok(DeviceInfo {
                name: "Model GPU".into(),
                driver: "0".into(),
                software: "model".into(),
                supports_fp8: self.fp8 == CheckStatus::Ok,
                fp8_note: (self.fp8 != CheckStatus::Ok).then(|| "no fp8 algorithm".into()),
                l2_bytes: 50 << 20,
                free_bytes: 80 << 30,
            })
        }
        fn check(&mut self) -> Result<Vec<CheckItem>> {
            let fp8 = match self.fp8 {
                CheckStatus::Ok => Ok(()),
                CheckStatus::Unsupported => Err(Error::Unavailable("no fp8 algorithm".into())),
                CheckStatus::Failed => Err(Error::Internal("D[0,0] = 3, CPU reference 2".into())),
            };
            Ok(vec![
                CheckItem::new("copy_kernel", CheckStatus::Ok, "matches"),
                fp8_item(fp8),
            ])
        }
        fn stream_copy(&mut self, b: u64, _: usize) -> Result<Timing> {
            t(crate::roofline::kernels::stream_s(&self.gpu, b as f64))
        }
        fn stream_reduce(&mut self, b: u64, _: usize) -> Result<Timing> {
            t(crate::roofline::kernels::stream_s(&self.gpu, b as f64))
        }
        fn gemm(&mut self, m: u64, k: u64, n: u64, d: GemmDtype, _: usize) -> Result<Timing> {
            if d == GemmDtype::Fp8 && self.fp8_shapes_fail {
                return Err(Error::Unavailable("cuBLASLt has no fp8 algorithm".into()));
            }
            let fp8 = matches!(d, GemmDtype::Fp8);
            let g = &self.gpu;
            t(crate::roofline::kernels::gemm_s(g, m as f64, k as f64, n as f64, d.bytes(), fp8).0)
        }
        fn paged_decode_attention(&mut self, s: AttentionShape, _: usize) -> Result<Timing> {
            let tokens = (s.batch * s.context) as f64;
            t(crate::roofline::kernels::decode_attention_s(
                &self.gpu,
                tokens,
                tokens,
                4.0 * (s.kv_heads * s.head_dim) as f64,
                (s.q_heads * s.head_dim) as f64,
            ))
        }
        fn empty_kernel(&mut self, _: usize) -> Result<Timing> {
            t(self.gpu.small_ops.launch_s)
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
        let out = run_suite(&mut ModelBackend::new(gpu.clone()), &cfg, &mut |_| {}).unwrap();
        let rows = out.rows;
        assert!(out.skipped.is_empty(), "{:?}", out.skipped);
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
        assert!(run_suite(&mut ModelBackend::new(gpu), &few, &mut |_| {}).is_err());
    }

    #[test]
    fn an_unsupported_attention_shape_is_skipped_and_reported() {
        // Llama-3.1-405B has 16 query heads per KV head at any TP: beyond the kernel's 8.
        let gpu = GpuProfile::load("h100-sxm").unwrap();
        let mut cfg = SuiteConfig::new(vec![
            load_model("llama-3.1-405b").unwrap(),
            load_model("llama-3.1-8b").unwrap(),
        ]);
        cfg.parts = vec![Part::Attention];
        cfg.tp = vec![1, 3];
        let mut lines = Vec::new();
        let out = run_suite(&mut ModelBackend::new(gpu), &cfg, &mut |l| {
            lines.push(l.to_string())
        })
        .unwrap();
        // Every 8B shape at TP 1 is measured; 405B (group 16) and TP 3 are skipped with a reason.
        assert_eq!(out.rows.len(), 5 * 4);
        assert!(out.rows.iter().all(|r| r.q_heads == Some(32)));
        assert_eq!(out.skipped.len(), 3, "{:?}", out.skipped);
        assert!(out.skipped[0].contains("llama-3.1-405b TP1, every shape"));
        assert!(out.skipped[0].contains("group 16"), "{}", out.skipped[0]);
        assert!(out.skipped.iter().any(|s| s.contains("llama-3.1-8b TP3")));
        assert!(lines.iter().any(|l| l.ends_with(": skipped")));
    }

    #[test]
    fn fp8_without_an_algorithm_is_skipped_and_bf16_goes_on() {
        let gpu = GpuProfile::load("h100-sxm").unwrap();
        let mut cfg = SuiteConfig::new(vec![load_model("llama-3.1-8b").unwrap()]);
        cfg.parts = vec![Part::Gemm];
        cfg.batches = vec![1, 64];
        // Verification finds no fp8 algorithm: fp8 is unsupported, the suite runs bf16.
        let mut b = ModelBackend::new(gpu.clone());
        b.fp8 = CheckStatus::Unsupported;
        let out = run_suite(&mut b, &cfg, &mut |_| {}).unwrap();
        assert_eq!(out.rows.len(), 4 * 2);
        assert!(out.rows.iter().all(|r| r.dtype == "bf16"));
        assert_eq!(
            out.skipped,
            ["gemm fp8, every shape (no fp8 algorithm)".to_string()]
        );
        // Verification passes, but timed shapes have no algorithm: each is skipped.
        let mut b = ModelBackend::new(gpu.clone());
        b.fp8_shapes_fail = true;
        let out = run_suite(&mut b, &cfg, &mut |_| {}).unwrap();
        assert_eq!(out.rows.len(), 4 * 2);
        assert_eq!(out.skipped.len(), 4 * 2);
        assert!(
            out.skipped[0].starts_with("gemm fp8 m=1 k=4096"),
            "{:?}",
            out.skipped
        );
        // An fp8 GEMM that runs and disagrees with the CPU reference stops the suite.
        let mut b = ModelBackend::new(gpu);
        b.fp8 = CheckStatus::Failed;
        let e = run_suite(&mut b, &cfg, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("gemm fp8 16x64x48"), "{e}");
    }

    #[test]
    fn check_items_and_table() {
        let items = vec![
            CheckItem::new("driver", CheckStatus::Ok, "CUDA 12.4"),
            fp8_item(Err(Error::Unavailable("no algorithm".into()))),
            CheckItem::from_result("copy_kernel", Err("differs".into())),
        ];
        assert_eq!(items[1].status, CheckStatus::Unsupported);
        let t = check_table(&items);
        assert!(t.contains("unsupported") && t.contains("FAILED") && t.contains("CUDA 12.4"));
        let e = first_failure(&items).unwrap_err();
        assert_eq!(
            e.to_string(),
            "calibration check failed: copy_kernel: differs"
        );
        assert!(first_failure(&items[..2]).is_ok());
        assert_eq!(fp8_item(Ok(())).status, CheckStatus::Ok);
        assert_eq!(
            fp8_item(Err(Error::Internal("x".into()))).status,
            CheckStatus::Failed
        );
    }

    #[test]
    fn gemm_bytes_count_what_the_kernel_moves() {
        // bf16: weights, activations in and out at 2 bytes.
        let (b, f) = gemm_bytes_flops(16, 4096, 1024, GemmDtype::Bf16);
        assert_eq!(b, (4096.0 * 1024.0 + 16.0 * 4096.0 + 16.0 * 1024.0) * 2.0);
        assert_eq!(f, 2.0 * 16.0 * 4096.0 * 1024.0);
        // fp8: weights and input activations at 1 byte (the kernel reads e4m3), bf16 output.
        let (b, _) = gemm_bytes_flops(16, 4096, 1024, GemmDtype::Fp8);
        assert_eq!(b, 4096.0 * 1024.0 + 16.0 * 4096.0 + 16.0 * 1024.0 * 2.0);
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
