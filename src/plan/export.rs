//! The plan as documents for the report exporters: a candidates table (CSV) and the cost
//! workbook (XLSX) whose cells finance can edit.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use super::PlanResult;
use crate::error::{Error, Result};
use crate::report::xlsx::{cost_workbook_bytes, CostInputs};
use crate::report::{CellValue, Exporter, TableSheet, ToTable};

/// Every candidate, ranked, with its search result (candidates.csv, and a workbook sheet).
impl ToTable for PlanResult {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        let columns = [
            "rank",
            "gpu",
            "dtype",
            "kv_cache_dtype",
            "tp",
            "max_num_seqs",
            "max_rate_per_replica (req/s)",
            "saturation_rate_per_replica (req/s)",
            "replicas",
            "gpus",
            "usd_per_hour",
            "usd_per_million_output_tokens",
            "p99_ttft_ms at max rate",
            "p99_tpot_ms at max rate",
            "infeasible",
        ];
        let rows = self
            .candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let a = c.at_max_rate.as_ref();
                vec![
                    CellValue::Number((i + 1) as f64),
                    c.candidate.gpu.clone().into(),
                    c.candidate.dtype.clone().into(),
                    c.candidate.kv_cache_dtype.clone().into(),
                    CellValue::Number(c.candidate.tp as f64),
                    CellValue::Number(c.candidate.max_num_seqs as f64),
                    CellValue::Number(c.max_rate_per_replica),
                    CellValue::Number(c.saturation_rate_per_replica),
                    CellValue::Number(c.replicas as f64),
                    CellValue::Number(c.gpus as f64),
                    CellValue::Number(c.cost_at_target.map_or(f64::NAN, |x| x.usd_per_hour)),
                    CellValue::Number(
                        c.cost_at_target
                            .map_or(f64::NAN, |x| x.usd_per_million_output_tokens),
                    ),
                    CellValue::Number(a.map_or(f64::NAN, |s| s.p99_ttft_ms)),
                    CellValue::Number(a.map_or(f64::NAN, |s| s.p99_tpot_ms)),
                    c.infeasible.clone().unwrap_or_default().into(),
                ]
            })
            .collect();
        Cow::Owned(TableSheet {
            name: "Candidates".into(),
            columns: columns.iter().map(|s| s.to_string()).collect(),
            rows,
        })
    }
}

/// The cost workbook (cost.xlsx): one editable row per feasible candidate (the ten cheapest)
/// serving the target load, and the candidates table as a second sheet.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostWorkbookExporter;

impl CostWorkbookExporter {
    /// The workbook's cost rows.
    pub fn rows(plan: &PlanResult) -> Vec<CostInputs> {
        plan.candidates
            .iter()
            .filter(|c| c.infeasible.is_none())
            .take(10)
            .filter_map(|c| {
                let (cost, at) = (c.cost_at_target?, c.at_max_rate.as_ref()?);
                let n = at.completed.max(1) as f64;
                Some(CostInputs {
                    label: format!(
                        "{} {} tp{} seqs{} x{}",
                        c.candidate.gpu,
                        c.candidate.dtype,
                        c.candidate.tp,
                        c.candidate.max_num_seqs,
                        c.replicas
                    ),
                    gpu_name: c.candidate.gpu.clone(),
                    gpus: c.gpus,
                    price_usd_per_gpu_hour: cost.price_usd_per_gpu_hour,
                    output_tokens_per_s: plan.target_rate_per_s * at.total_output_tokens as f64 / n,
                    input_tokens_per_s: plan.target_rate_per_s * at.total_input_tokens as f64 / n,
                    utilization: 1.0,
                })
            })
            .collect()
    }
}

impl Exporter<PlanResult> for CostWorkbookExporter {
    fn name(&self) -> &'static str {
        "xlsx"
    }
    fn file_name(&self) -> &str {
        "cost.xlsx"
    }
    fn write(&self, plan: &PlanResult, out: &mut dyn Write) -> Result<()> {
        let table = plan.to_table().into_owned();
        let bytes = cost_workbook_bytes(&Self::rows(plan), &[table], Path::new("cost.xlsx"))?;
        out.write_all(&bytes).map_err(|e| Error::io("cost.xlsx", e))
    }
}
