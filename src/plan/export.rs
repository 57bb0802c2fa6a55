//! The plan as documents for the report exporters: a candidates table (CSV) and the cost
//! workbook (XLSX) whose cells finance can edit.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use super::{PlanResult, Status};
use crate::error::{Error, Result};
use crate::report::xlsx::{cost_workbook_bytes, CostInputs};
use crate::report::{CellValue, Exporter, TableSheet, ToTable};

/// Every candidate, ranked, with its search result (candidates.csv, and a workbook sheet).
impl ToTable for PlanResult {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        let columns = [
            "rank",
            "status",
            "gpu",
            "dtype",
            "kv_cache_dtype",
            "kv_capacity_tokens per replica",
            "tp",
            "max_num_seqs",
            "capacity_rate_per_replica (req/s)",
            "max_rate_per_replica (req/s)",
            "binding_constraint",
            "replicas",
            "gpus",
            "usd_per_hour",
            "usd_per_million_output_tokens",
            "p99_ttft_ms at max rate",
            "p99_tpot_ms at max rate",
            "light-load rate (req/s per replica)",
            "p99_ttft_ms at light load",
            "p99_tpot_ms at light load",
            "note",
        ];
        let nan = f64::NAN;
        let rows = self
            .candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let a = c.at_max_rate.as_ref();
                let status = match c.status {
                    Status::Feasible => "feasible",
                    Status::Infeasible => "infeasible",
                    Status::Pruned => "pruned",
                };
                vec![
                    CellValue::Number((i + 1) as f64),
                    status.to_string().into(),
                    c.candidate.gpu.clone().into(),
                    c.candidate.dtype.clone().into(),
                    c.candidate.kv_cache_dtype.clone().into(),
                    CellValue::Number(c.kv_capacity_tokens as f64),
                    CellValue::Number(c.candidate.tp as f64),
                    CellValue::Number(c.candidate.max_num_seqs as f64),
                    CellValue::Number(c.capacity_rate_per_replica),
                    CellValue::Number(if c.status == Status::Pruned {
                        nan
                    } else {
                        c.max_rate_per_replica
                    }),
                    c.binding
                        .as_ref()
                        .map_or(String::new(), |b| b.constraint.label().to_string())
                        .into(),
                    CellValue::Number(c.replicas as f64),
                    CellValue::Number(c.gpus as f64),
                    CellValue::Number(c.cost_at_target.map_or(nan, |x| x.usd_per_hour)),
                    CellValue::Number(if c.status == Status::Feasible {
                        c.cost_at_target
                            .map_or(nan, |x| x.usd_per_million_output_tokens)
                    } else {
                        nan
                    }),
                    CellValue::Number(a.map_or(nan, |s| s.ttft.p99_ms)),
                    CellValue::Number(a.map_or(nan, |s| s.tpot.p99_ms)),
                    CellValue::Number(c.light_load.map_or(nan, |l| l.rate_per_s)),
                    CellValue::Number(c.light_load.map_or(nan, |l| l.ttft_ms)),
                    CellValue::Number(c.light_load.map_or(nan, |l| l.tpot_ms)),
                    c.note.clone().unwrap_or_default().into(),
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
            .filter(|c| c.status == Status::Feasible)
            .take(10)
            .filter_map(|c| {
                let cost = c.cost_at_target?;
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
                    output_tokens_per_s: c.fleet_output_tokens_per_s,
                    input_tokens_per_s: c.fleet_input_tokens_per_s,
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
