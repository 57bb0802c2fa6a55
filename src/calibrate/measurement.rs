//! The measurement record: one row per kernel x shape, as `servesim calibrate` writes it and
//! `servesim fit` / `validate-kernels` read it. The format is documented in docs/calibration.md.
//!
//! Lines starting with `#` are comments (files under `calibration/reference/` name their source
//! there). Shape fields that do not apply to a kernel are left empty.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The kernel classes the suite measures and the fitter understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelClass {
    /// HBM copy: reads and writes `bytes / 2` each (`bytes` counts both).
    StreamCopy,
    /// HBM read-only reduction over `bytes`.
    StreamReduce,
    /// Dense GEMM `m x k` activations by `k x n` weights (`m` = tokens).
    Gemm,
    /// Paged decode attention over `batch` sequences of `context` cached tokens.
    PagedDecodeAttention,
    /// Flash prefill attention (non-causal) of `batch` sequences of `context` tokens each,
    /// every query attending to every key of its sequence.
    PrefillAttention,
    /// A fused mixture-of-experts block (routing, the two grouped expert GEMMs, activation,
    /// weighted sum) of `m` tokens, each routed to `top_k` of `experts` experts whose gate+up
    /// weight is `k x 2n` and down weight `n x k` (`n`: the expert's intermediate width on
    /// this GPU, `k`: the hidden size).
    FusedMoe,
    /// An empty kernel: launch latency.
    EmptyKernel,
    /// NCCL all-reduce of `bytes` over `tp` GPUs.
    AllReduce,
    /// An engine's own low-latency NVLink all-reduce of `bytes` over `tp` GPUs (vLLM's
    /// custom and symmetric-memory kernels, TensorRT-LLM's), the kernel the step model prices
    /// up to the engine's size limit (`kernels::engine_allreduce_s`). Held-out rows only:
    /// `servesim fit` does not fit it.
    CustomAllReduce,
}

impl KernelClass {
    /// Every class, in report order.
    pub const ALL: [KernelClass; 9] = [
        KernelClass::StreamCopy,
        KernelClass::StreamReduce,
        KernelClass::Gemm,
        KernelClass::PagedDecodeAttention,
        KernelClass::PrefillAttention,
        KernelClass::FusedMoe,
        KernelClass::EmptyKernel,
        KernelClass::AllReduce,
        KernelClass::CustomAllReduce,
    ];

    /// The name used in the `kernel` column.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::StreamCopy => "stream_copy",
            KernelClass::StreamReduce => "stream_reduce",
            KernelClass::Gemm => "gemm",
            KernelClass::PagedDecodeAttention => "paged_decode_attention",
            KernelClass::PrefillAttention => "prefill_attention",
            KernelClass::FusedMoe => "fused_moe",
            KernelClass::EmptyKernel => "empty_kernel",
            KernelClass::AllReduce => "allreduce",
            KernelClass::CustomAllReduce => "custom_allreduce",
        }
    }

    /// Parses a `kernel` column value.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The shape columns a row of this class must fill.
    fn required_fields(self) -> &'static [&'static str] {
        match self {
            KernelClass::StreamCopy | KernelClass::StreamReduce => &["bytes"],
            KernelClass::Gemm => &["m", "n", "k"],
            KernelClass::FusedMoe => &["m", "n", "k", "experts", "top_k"],
            KernelClass::PagedDecodeAttention | KernelClass::PrefillAttention => {
                &["batch", "context", "q_heads", "kv_heads", "head_dim"]
            }
            KernelClass::EmptyKernel => &[],
            KernelClass::AllReduce | KernelClass::CustomAllReduce => &["tp", "bytes"],
        }
    }
}

impl std::fmt::Display for KernelClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One measured kernel x shape. Times are microseconds; empty shape fields are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// Kernel class name (see [`KernelClass::name`]).
    pub kernel: String,
    /// GEMM: tokens (rows of the activation matrix).
    pub m: Option<u64>,
    /// GEMM: output features (columns of the weight matrix).
    pub n: Option<u64>,
    /// GEMM: input features (the reduction dimension).
    pub k: Option<u64>,
    /// Attention: sequences in the batch.
    pub batch: Option<u64>,
    /// Attention: cached tokens per sequence.
    pub context: Option<u64>,
    /// Attention: query heads (on this GPU).
    pub q_heads: Option<u64>,
    /// Attention: KV heads (on this GPU).
    pub kv_heads: Option<u64>,
    /// Attention: head dimension.
    pub head_dim: Option<u64>,
    /// All-reduce: GPUs in the group.
    pub tp: Option<u64>,
    /// Fused MoE: experts of the layer.
    #[serde(default)]
    pub experts: Option<u64>,
    /// Fused MoE: experts each token is routed to.
    #[serde(default)]
    pub top_k: Option<u64>,
    /// Element type: `bf16`, `fp8` (e4m3 weights and activations, bf16 output) or `u8` (raw bytes).
    pub dtype: String,
    /// GPU name as the driver reports it.
    pub gpu: String,
    /// Driver version (e.g. `13000`), or empty when not known.
    pub driver: String,
    /// Median kernel time, microseconds.
    pub median_us: f64,
    /// 10th percentile of the kernel time, microseconds.
    pub p10_us: f64,
    /// 90th percentile of the kernel time, microseconds.
    pub p90_us: f64,
    /// Bytes the kernel moves to or from HBM (reads + writes), as docs/calibration.md counts them.
    pub bytes: Option<f64>,
    /// Floating-point operations of the kernel (0 for pure data movement).
    pub flops: Option<f64>,
    /// Where the row came from (`servesim calibrate` or a citation).
    #[serde(default)]
    pub source: String,
}

impl Measurement {
    /// A row with only the kernel name, dtype, GPU and times filled in; shape fields empty.
    pub fn new(class: KernelClass, dtype: &str, gpu: &str, driver: &str) -> Self {
        Measurement {
            kernel: class.name().to_string(),
            m: None,
            n: None,
            k: None,
            batch: None,
            context: None,
            q_heads: None,
            kv_heads: None,
            head_dim: None,
            tp: None,
            experts: None,
            top_k: None,
            dtype: dtype.to_string(),
            gpu: gpu.to_string(),
            driver: driver.to_string(),
            median_us: 0.0,
            p10_us: 0.0,
            p90_us: 0.0,
            bytes: None,
            flops: None,
            source: String::new(),
        }
    }

    /// The row's kernel class (rows are validated on reading, so this is known for them).
    pub fn class(&self) -> Option<KernelClass> {
        KernelClass::parse(&self.kernel)
    }

    /// The median time, seconds.
    pub fn median_s(&self) -> f64 {
        self.median_us * 1e-6
    }

    fn field(&self, name: &str) -> Option<f64> {
        match name {
            "m" => self.m.map(|v| v as f64),
            "n" => self.n.map(|v| v as f64),
            "k" => self.k.map(|v| v as f64),
            "batch" => self.batch.map(|v| v as f64),
            "context" => self.context.map(|v| v as f64),
            "q_heads" => self.q_heads.map(|v| v as f64),
            "kv_heads" => self.kv_heads.map(|v| v as f64),
            "head_dim" => self.head_dim.map(|v| v as f64),
            "tp" => self.tp.map(|v| v as f64),
            "experts" => self.experts.map(|v| v as f64),
            "top_k" => self.top_k.map(|v| v as f64),
            "bytes" => self.bytes,
            _ => None,
        }
    }

    /// Checks the row's semantics; `Err((column, reason))` names the offending column.
    fn check(&self) -> std::result::Result<KernelClass, (&'static str, String)> {
        let class = KernelClass::parse(&self.kernel).ok_or_else(|| {
            let known: Vec<_> = KernelClass::ALL.iter().map(|c| c.name()).collect();
            (
                "kernel",
                format!(
                    "unknown kernel '{}'; known: {}",
                    self.kernel,
                    known.join(", ")
                ),
            )
        })?;
        for &f in class.required_fields() {
            match self.field(f) {
                None => return Err((f, format!("required for kernel '{}'", self.kernel))),
                Some(v) if !(v.is_finite() && v > 0.0) => {
                    return Err((f, format!("must be > 0, got {v}")))
                }
                _ => {}
            }
        }
        if class == KernelClass::FusedMoe && self.top_k > self.experts {
            return Err(("top_k", "exceeds experts".into()));
        }
        if class == KernelClass::FusedMoe && !matches!(self.dtype.as_str(), "bf16" | "fp8") {
            return Err((
                "dtype",
                format!("fused_moe dtype must be bf16 or fp8, got '{}'", self.dtype),
            ));
        }
        if class == KernelClass::Gemm
            && !matches!(self.dtype.as_str(), "bf16" | "fp8" | "nvfp4" | "mxfp4")
        {
            return Err((
                "dtype",
                format!(
                    "gemm dtype must be bf16, fp8, nvfp4 or mxfp4, got '{}'",
                    self.dtype
                ),
            ));
        }
        if matches!(
            class,
            KernelClass::PagedDecodeAttention | KernelClass::PrefillAttention
        ) {
            if let (Some(q), Some(kv)) = (self.q_heads, self.kv_heads) {
                if kv == 0 || q % kv != 0 {
                    return Err(("q_heads", "must be a multiple of kv_heads".into()));
                }
            }
        }
        for (col, v) in [
            ("median_us", self.median_us),
            ("p10_us", self.p10_us),
            ("p90_us", self.p90_us),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err((col, format!("must be a time > 0, got {v}")));
            }
        }
        if self.p10_us > self.median_us * (1.0 + 1e-9) {
            return Err(("p10_us", "exceeds median_us".into()));
        }
        if self.p90_us < self.median_us * (1.0 - 1e-9) {
            return Err(("p90_us", "is below median_us".into()));
        }
        for (col, v) in [("bytes", self.bytes), ("flops", self.flops)] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err((col, format!("must be >= 0, got {v}")));
                }
            }
        }
        Ok(class)
    }
}

/// The CSV header, in column order.
pub const COLUMNS: [&str; 21] = [
    "kernel",
    "m",
    "n",
    "k",
    "batch",
    "context",
    "q_heads",
    "kv_heads",
    "head_dim",
    "tp",
    "experts",
    "top_k",
    "dtype",
    "gpu",
    "driver",
    "median_us",
    "p10_us",
    "p90_us",
    "bytes",
    "flops",
    "source",
];

fn parse_err(origin: &str, line: u64, column: &str, reason: impl std::fmt::Display) -> Error {
    Error::Parse {
        path: origin.to_string(),
        message: format!("line {line}, column '{column}': {reason}"),
    }
}

/// A csv-crate error as a parse error naming the line and, where known, the column.
fn csv_err(origin: &str, headers: &csv::StringRecord, e: &csv::Error) -> Error {
    let line = e.position().map(|p| p.line()).unwrap_or(0);
    let (column, reason) = match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => {
            let col = err
                .field()
                .and_then(|i| headers.get(i as usize))
                .unwrap_or("?")
                .to_string();
            (col, err.kind().to_string())
        }
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => (
            "-".to_string(),
            format!("{len} fields, but the header has {expected_len}"),
        ),
        _ => ("-".to_string(), e.to_string()),
    };
    parse_err(origin, line, &column, reason)
}

/// Parses measurements from CSV text; `origin` names the file in errors, which carry the line
/// number and the column name.
pub fn parse_measurements(text: &str, origin: &str) -> Result<Vec<Measurement>> {
    let mut rdr = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| Error::Parse {
            path: origin.to_string(),
            message: format!("header: {e}"),
        })?
        .clone();
    if headers.is_empty() || headers.iter().all(|h| h.is_empty()) {
        return Err(Error::Parse {
            path: origin.to_string(),
            message: "empty file: expected a header line naming the columns".into(),
        });
    }
    let expected = &COLUMNS;
    for h in headers.iter() {
        if !expected.contains(&h) {
            return Err(Error::Parse {
                path: origin.to_string(),
                message: format!(
                    "header: unknown column '{h}'; expected: {}",
                    expected.join(",")
                ),
            });
        }
    }
    for req in [
        "kernel",
        "dtype",
        "gpu",
        "driver",
        "median_us",
        "p10_us",
        "p90_us",
    ] {
        if !headers.iter().any(|h| h == req) {
            return Err(Error::Parse {
                path: origin.to_string(),
                message: format!("header: missing required column '{req}'"),
            });
        }
    }
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let more = rdr
            .read_record(&mut record)
            .map_err(|e| csv_err(origin, &headers, &e))?;
        if !more {
            break;
        }
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let row: Measurement = record
            .deserialize(Some(&headers))
            .map_err(|e| csv_err(origin, &headers, &e))?;
        if let Err((column, reason)) = row.check() {
            return Err(parse_err(origin, line, column, reason));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(Error::Parse {
            path: origin.to_string(),
            message: "no measurement rows after the header".into(),
        });
    }
    Ok(rows)
}

/// Reads a measurement file.
pub fn read_measurements(path: &Path) -> Result<Vec<Measurement>> {
    let text = crate::input::read_to_string(path, crate::input::InputKind::Table)?;
    parse_measurements(&text, &path.display().to_string())
}

/// Renders measurements as CSV text (header plus one line per row), preceded by `comment`
/// lines (each prefixed with `# `).
pub fn to_csv(rows: &[Measurement], comment: &[String]) -> Result<String> {
    let mut out = String::new();
    for c in comment {
        out.push_str("# ");
        out.push_str(c);
        out.push('\n');
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r)
            .map_err(|e| Error::Internal(format!("serialising a measurement row: {e}")))?;
    }
    if rows.is_empty() {
        w.write_record(COLUMNS)
            .map_err(|e| Error::Internal(format!("writing the CSV header: {e}")))?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Error::Internal(format!("flushing CSV: {e}")))?;
    out.push_str(&String::from_utf8_lossy(&bytes));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "kernel,m,n,k,batch,context,q_heads,kv_heads,head_dim,tp,dtype,gpu,driver,median_us,p10_us,p90_us,bytes,flops,source";

    fn file(rows: &[&str]) -> String {
        let mut s = format!("# comment line\n{HEADER}\n");
        for r in rows {
            s.push_str(r);
            s.push('\n');
        }
        s
    }

    const GOOD: &str =
        "gemm,1,4096,4096,,,,,,,bf16,H100,13000,40.0,38.0,42.0,33570816,33554432,test";

    #[test]
    fn reads_a_good_file() {
        let rows = parse_measurements(&file(&[GOOD]), "t.csv").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].class(), Some(KernelClass::Gemm));
        assert_eq!(rows[0].k, Some(4096));
        assert_eq!(rows[0].batch, None);
    }

    #[test]
    fn round_trips_through_to_csv() {
        let rows = parse_measurements(&file(&[GOOD]), "t.csv").unwrap();
        let text = to_csv(&rows, &["hello".into()]).unwrap();
        assert!(text.starts_with("# hello\nkernel,m,n,k"));
        assert_eq!(parse_measurements(&text, "r.csv").unwrap(), rows);
    }

    fn err_of(text: &str) -> String {
        parse_measurements(text, "bad.csv").unwrap_err().to_string()
    }

    #[test]
    fn rejects_a_non_number_with_line_and_column() {
        let bad = GOOD.replace("40.0", "fast");
        let e = err_of(&file(&[GOOD, &bad]));
        assert!(e.contains("bad.csv"), "{e}");
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains("median_us"), "{e}");
    }

    #[test]
    fn rejects_a_missing_shape_field() {
        let bad = GOOD.replace("gemm,1,", "gemm,,");
        let e = err_of(&file(&[bad.as_str()]));
        assert!(e.contains("line 3") && e.contains("'m'"), "{e}");
    }

    #[test]
    fn rejects_unknown_kernel_and_bad_spread() {
        let e = err_of(&file(&[&GOOD.replace("gemm,", "conv,")]));
        assert!(
            e.contains("unknown kernel 'conv'") && e.contains("line 3"),
            "{e}"
        );
        let e = err_of(&file(&[GOOD, &GOOD.replace("38.0", "41.0")]));
        assert!(e.contains("line 4") && e.contains("p10_us"), "{e}");
        let e = err_of(&file(&[&GOOD.replace("40.0", "-1")]));
        assert!(e.contains("median_us"), "{e}");
    }

    #[test]
    fn rejects_wrong_field_count_unknown_column_and_empty_files() {
        let e = err_of(&file(&["gemm,1,2,3"]));
        assert!(e.contains("line 3") && e.contains("fields"), "{e}");
        let e = err_of(&format!("{HEADER},speed\n"));
        assert!(e.contains("unknown column 'speed'"), "{e}");
        assert!(err_of("").contains("empty file"));
        assert!(err_of(&file(&[])).contains("no measurement rows"));
        let e = err_of("kernel,m\ngemm,1\n");
        assert!(e.contains("missing required column"), "{e}");
    }

    #[test]
    fn rejects_bad_gemm_dtype_and_gqa_mismatch() {
        let e = err_of(&file(&[&GOOD.replace("bf16", "int4")]));
        assert!(e.contains("dtype"), "{e}");
        // FP4 GEMM rows are read; a fused-MoE row stays BF16 or FP8.
        assert!(parse_measurements(&file(&[&GOOD.replace("bf16", "nvfp4")]), "ok.csv").is_ok());
        let attn = "paged_decode_attention,,,,8,1024,32,6,128,,bf16,H100,,50,45,55,,,";
        let e = err_of(&file(&[attn]));
        assert!(e.contains("q_heads"), "{e}");
    }
}
