//! Predicted against measured kernel times, per kernel class. Predictions come from
//! [`crate::roofline::kernels`], the same functions the step-time model sums.

use std::path::Path;

use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::roofline::kernels;

use super::measurement::{KernelClass, Measurement};

/// The model's time for the kernel and shape of `row`, seconds; `None` when the row cannot be
/// predicted (an fp8 or fp4 GEMM on a profile without that math, or a shape field missing).
pub fn predict(gpu: &GpuProfile, row: &Measurement) -> Option<f64> {
    let f = |v: Option<u64>| v.map(|x| x as f64);
    match row.class()? {
        KernelClass::StreamCopy | KernelClass::StreamReduce => {
            Some(kernels::stream_s(gpu, row.bytes?))
        }
        KernelClass::Gemm => {
            use crate::precision::{GemmMath, WeightDtype};
            // FP4 rows time both operands in FP4 (NVFP4: a scale per 16 values, MXFP4: per 32).
            let (math, wbytes) = match row.dtype.as_str() {
                "fp8" if gpu.gemm.fp8_flops_per_s > 0.0 => (GemmMath::Fp8, 1.0),
                "nvfp4" if gpu.supports_fp4() => (GemmMath::Fp4, WeightDtype::Fp4.bytes()),
                "mxfp4" if gpu.supports_fp4() => (GemmMath::Fp4, WeightDtype::Mxfp4.bytes()),
                "bf16" => (GemmMath::Bf16, 2.0),
                _ => return None,
            };
            let (m, k, n) = (f(row.m)?, f(row.k)?, f(row.n)?);
            Some(kernels::gemm_math_s(gpu, m, k, n, wbytes, math).0)
        }
        KernelClass::FusedMoe => {
            let (fp8, wbytes) = match row.dtype.as_str() {
                "fp8" if gpu.gemm.fp8_flops_per_s > 0.0 => (true, 1.0),
                "bf16" => (false, 2.0),
                _ => return None,
            };
            let (gemm, _, routing) = kernels::fused_moe_s(
                gpu,
                f(row.m)?,
                f(row.experts)?,
                f(row.top_k)?,
                f(row.k)?,
                f(row.n)?,
                wbytes,
                fp8,
            );
            Some(gemm + routing)
        }
        KernelClass::PrefillAttention => {
            let (b, s) = (f(row.batch)?, f(row.context)?);
            let q_width = f(row.q_heads)? * f(row.head_dim)?;
            // Non-causal: every query row attends to all `s` keys of its sequence.
            Some(kernels::prefill_attention_s(gpu, b * s * s, b * s, q_width))
        }
        KernelClass::PagedDecodeAttention => {
            let tokens = f(row.batch)? * f(row.context)?;
            let kv_bytes_per_token = 2.0 * f(row.kv_heads)? * f(row.head_dim)? * 2.0;
            let q_width = f(row.q_heads)? * f(row.head_dim)?;
            // The calibration kernel gives every request its own KV: all of it from HBM.
            Some(kernels::decode_attention_s(
                gpu,
                tokens,
                tokens,
                kv_bytes_per_token,
                q_width,
            ))
        }
        KernelClass::EmptyKernel => Some(kernels::empty_kernel_s(gpu)),
        KernelClass::AllReduce => {
            let tp = u32::try_from(row.tp?).ok()?;
            Some(kernels::allreduce_s(gpu, row.bytes?, tp)).filter(|t| *t > 0.0)
        }
        KernelClass::CustomAllReduce => {
            // No engine here: the engine's two-shot kernel at any size the GPU profile allows
            // it (`allreduce.custom_max_bytes`), NCCL above. Which sizes an engine runs
            // one-shot is the engine profile's (`allreduce.one_shot_max_bytes_by_tp`):
            // tests/kernel_reference.rs scores vLLM's rows with vLLM's.
            let tp = u32::try_from(row.tp?).ok()?;
            let limits = kernels::AllReduceLimits {
                custom_max_bytes: f64::INFINITY,
                one_shot_max_bytes: 0.0,
            };
            Some(kernels::engine_allreduce_s(gpu, row.bytes?, tp, limits)).filter(|t| *t > 0.0)
        }
    }
}

/// One row's prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct RowCheck {
    /// Kernel class.
    pub class: KernelClass,
    /// Measured median, seconds.
    pub measured_s: f64,
    /// Predicted, seconds.
    pub predicted_s: f64,
}

impl RowCheck {
    /// Relative error `predicted / measured - 1` (positive: the model is slower).
    pub fn error(&self) -> f64 {
        self.predicted_s / self.measured_s - 1.0
    }
}

/// Summary of one kernel class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSummary {
    /// Kernel class.
    pub class: KernelClass,
    /// Rows compared.
    pub rows: usize,
    /// Median of |predicted / measured - 1| (a fraction, 0.05 = 5%).
    pub median_abs_error: f64,
    /// Largest |predicted / measured - 1| (a fraction).
    pub max_abs_error: f64,
    /// Geometric-mean bias `exp(mean ln(predicted / measured)) - 1` (a fraction; > 0: slower).
    pub bias: f64,
}

/// Every row's check and the per-class summaries.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    /// One entry per row that could be predicted, in file order.
    pub rows: Vec<RowCheck>,
    /// One summary per class present, in [`KernelClass::ALL`] order.
    pub classes: Vec<ClassSummary>,
    /// Rows that could not be predicted (e.g. fp8 on a profile without fp8).
    pub skipped: usize,
}

/// Compares `gpu`'s predictions with every row of `rows`.
pub fn validate(gpu: &GpuProfile, rows: &[Measurement]) -> Validation {
    let mut checks = Vec::new();
    let mut skipped = 0;
    for r in rows {
        match (r.class(), predict(gpu, r)) {
            (Some(class), Some(p)) if p > 0.0 && r.median_s() > 0.0 => checks.push(RowCheck {
                class,
                measured_s: r.median_s(),
                predicted_s: p,
            }),
            _ => skipped += 1,
        }
    }
    let mut classes = Vec::new();
    for class in KernelClass::ALL {
        let c: Vec<&RowCheck> = checks.iter().filter(|r| r.class == class).collect();
        if c.is_empty() {
            continue;
        }
        let mut abs: Vec<f64> = c.iter().map(|r| r.error().abs()).collect();
        let max = abs.iter().cloned().fold(0.0, f64::max);
        let mean_log = c
            .iter()
            .map(|r| (r.predicted_s / r.measured_s).ln())
            .sum::<f64>()
            / c.len() as f64;
        classes.push(ClassSummary {
            class,
            rows: c.len(),
            median_abs_error: crate::numeric::median(&mut abs),
            max_abs_error: max,
            bias: mean_log.exp() - 1.0,
        });
    }
    Validation {
        rows: checks,
        classes,
        skipped,
    }
}

impl Validation {
    /// A plain-text table: class, rows, median |error|, max |error|, bias.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<24} {:>5} {:>12} {:>12} {:>10}\n",
            "kernel class", "rows", "median |err|", "max |err|", "bias"
        );
        for c in &self.classes {
            s.push_str(&format!(
                "{:<24} {:>5} {:>11.1}% {:>11.1}% {:>+9.1}%\n",
                c.class.name(),
                c.rows,
                100.0 * c.median_abs_error,
                100.0 * c.max_abs_error,
                100.0 * c.bias
            ));
        }
        if self.skipped > 0 {
            s.push_str(&format!(
                "({} rows could not be predicted with this profile)\n",
                self.skipped
            ));
        }
        s
    }

    /// Draws predicted against measured (log-log, microseconds), one colour per class, with
    /// the y = x line, as a PNG at `path` (written atomically). `title` heads the plot.
    pub fn plot_png(&self, path: &Path, title: &str) -> Result<()> {
        if self.rows.is_empty() {
            return Err(Error::Infeasible("no rows to plot".into()));
        }
        crate::atomic_file::write_atomic_with(path, |tmp| draw(self, tmp, title))
    }
}

const FONT: &str = "servesim-sans";

fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE.get_or_init(|| {
        plotters::style::register_font(
            FONT,
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        )
        .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Internal(
            "could not load the embedded DejaVu font".into(),
        ))
    }
}

fn draw(v: &Validation, path: &Path, title: &str) -> Result<()> {
    use plotters::prelude::*;
    register_font()?;
    let plot_err = |e: String| Error::Internal(format!("drawing {}: {e}", path.display()));
    let us: Vec<(f64, f64)> = v
        .rows
        .iter()
        .map(|r| (r.measured_s * 1e6, r.predicted_s * 1e6))
        .collect();
    let lo = us
        .iter()
        .map(|(a, b)| a.min(*b))
        .fold(f64::INFINITY, f64::min);
    let hi = us.iter().map(|(a, b)| a.max(*b)).fold(0.0, f64::max);
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);

    let root = BitMapBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 26))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
        .map_err(|e| plot_err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("measured median (µs)")
        .y_desc("predicted (µs)")
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .x_label_formatter(&|x| format!("{x}"))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| plot_err(e.to_string()))?;
    chart
        .draw_series(LineSeries::new(
            [(lo, lo), (hi, hi)],
            ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(2),
        ))
        .map_err(|e| plot_err(e.to_string()))?
        .label("y = x")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.6)));
    for (i, c) in v.classes.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = v
            .rows
            .iter()
            .zip(&us)
            .filter(|(r, _)| r.class == c.class)
            .map(|(_, p)| *p)
            .collect();
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new(*p, 5, ShapeStyle::from(&color).filled())),
            )
            .map_err(|e| plot_err(e.to_string()))?
            .label(format!(
                "{} ({} rows, median |err| {:.1}%)",
                c.class.name(),
                c.rows,
                100.0 * c.median_abs_error
            ))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, ShapeStyle::from(&color).filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| plot_err(e.to_string()))?;
    root.present().map_err(|e| plot_err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kernel: KernelClass, us: f64) -> Measurement {
        let mut r = Measurement::new(kernel, "bf16", "g", "");
        r.median_us = us;
        r.p10_us = us;
        r.p90_us = us;
        r
    }

    #[test]
    fn allreduce_and_empty_kernel_are_checked() {
        let gpu = GpuProfile::load("h100-sxm").unwrap();
        let mut a = row(KernelClass::AllReduce, 0.0);
        a.tp = Some(8);
        a.bytes = Some(64.0 * 1024.0 * 1024.0);
        a.median_us = kernels::allreduce_s(&gpu, 64.0 * 1024.0 * 1024.0, 8) * 1e6 * 1.1;
        let e = row(KernelClass::EmptyKernel, gpu.small_ops.launch_s * 1e6);
        let mut fp8 = row(KernelClass::Gemm, 10.0);
        fp8.dtype = "fp8".into();
        fp8.m = Some(1);
        fp8.k = Some(64);
        fp8.n = Some(64);
        let v = validate(&gpu, &[a, e, fp8]);
        assert_eq!(v.classes.len(), 3);
        assert_eq!(v.classes[0].class, KernelClass::Gemm);
        let ar = v
            .classes
            .iter()
            .find(|c| c.class == KernelClass::AllReduce)
            .unwrap();
        assert!((ar.median_abs_error - (1.0 / 1.1 - 1.0f64).abs()).abs() < 1e-9);
        assert!(v.table().contains("allreduce"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.png");
        v.plot_png(&p, "test").unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
    }
}
