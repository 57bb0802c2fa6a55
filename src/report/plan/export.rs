//! The plan as documents for the report exporters: a candidates table (CSV) and the cost
//! workbook (XLSX), a live model finance can edit.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};
use crate::plan::{PlanResult, Status};
use crate::report::xlsx::{
    cost_workbook_bytes, CandidateRow, CostModel, CurveRow, DisaggPools, GpuPrices, WeekHour,
    WeekSheet, PRICE_COLUMNS,
};
use crate::report::{CellValue, Exporter, TableSheet, ToTable};

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Feasible => "feasible",
        Status::Infeasible => "infeasible",
        Status::Pruned => "pruned",
    }
}

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
                vec![
                    CellValue::Number((i + 1) as f64),
                    status_name(c.status).into(),
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
        let mut columns: Vec<String> = columns.iter().map(|s| s.to_string()).collect();
        let mut rows: Vec<Vec<CellValue>> = rows;
        // The xPyD rows are laid out on the columns without K; the K column then goes into
        // every row (empty on xPyD rows), so that no row shifts under the wrong header.
        if let Some(x) = &self.disaggregated {
            with_xpyd_rows(&mut columns, &mut rows, x);
        }
        with_speculative_column(&mut columns, &mut rows, self);
        with_reuse_columns(&mut columns, &mut rows, self);
        with_parallel_columns(&mut columns, &mut rows, self);
        Cow::Owned(TableSheet {
            name: "Search".into(),
            columns,
            rows,
        })
    }
}

/// With data or expert parallelism in the search space: `dp` and `ep` columns, last (after
/// every other column, so no column moves), with `tp` they give the deployment's
/// parallelism (`TP2 DP4 EP8`: tp 2, dp 4, ep 8; GPUs per replica tp x dp). Nothing
/// otherwise, so a plan without them reads as before. Rows after the colocated candidates
/// (xPyD) get empty cells.
fn with_parallel_columns(columns: &mut Vec<String>, rows: &mut [Vec<CellValue>], p: &PlanResult) {
    if p.candidates
        .iter()
        .all(|c| c.candidate.dp == 1 && c.candidate.ep == 1)
    {
        return;
    }
    columns.extend(["dp".to_string(), "ep".to_string()]);
    for (i, row) in rows.iter_mut().enumerate() {
        let c = p.candidates.get(i).map(|c| &c.candidate);
        row.extend([
            CellValue::Number(c.map_or(f64::NAN, |c| f64::from(c.dp))),
            CellValue::Number(c.map_or(f64::NAN, |c| f64::from(c.ep))),
        ]);
    }
}

/// With a `[speculative]` table, a `num_speculative_tokens` column (K, 0: off) after
/// `max_num_seqs`; nothing otherwise, so that a plan without speculation reads as before.
/// `rows` starts with the colocated candidates' rows, in order; rows after them (xPyD) get an
/// empty cell.
fn with_speculative_column(columns: &mut Vec<String>, rows: &mut [Vec<CellValue>], p: &PlanResult) {
    if p.candidates
        .iter()
        .all(|c| c.candidate.num_speculative_tokens.is_none())
    {
        return;
    }
    let at = 1 + columns
        .iter()
        .position(|c| c == "max_num_seqs")
        .unwrap_or(0);
    columns.insert(at, "num_speculative_tokens".into());
    let mut ks = p
        .candidates
        .iter()
        .map(|c| f64::from(c.candidate.num_speculative_tokens.unwrap_or(0)));
    for row in rows.iter_mut() {
        row.insert(at, CellValue::Number(ks.next().unwrap_or(f64::NAN)));
    }
}

/// With searched routers or offload sizes, or a workload with block identities: `router`,
/// `kv_offloading_size_gib` and the fleet's prefix-cache hit rates (overall, CPU tier) before
/// `note`; with sessions every rate column says `sessions/s`. Nothing otherwise, so a plan
/// without them reads as before. Rows after the colocated candidates (xPyD) get empty cells.
fn with_reuse_columns(columns: &mut Vec<String>, rows: &mut [Vec<CellValue>], p: &PlanResult) {
    let searched = p
        .candidates
        .iter()
        .any(|c| c.candidate.router.is_some() || c.candidate.kv_offloading_size_gib.is_some());
    if !searched
        && p.rate_unit.is_none()
        && p.candidates
            .iter()
            .all(|c| c.prefix_cache_hit_rate.is_none())
    {
        return;
    }
    if let Some(u) = &p.rate_unit {
        for c in columns.iter_mut() {
            if c.contains("req/s") {
                *c = c.replace("req/s", u);
            }
        }
    }
    let at = columns
        .iter()
        .position(|c| c == "note")
        .unwrap_or(columns.len());
    for (k, name) in [
        "router",
        "kv_offloading_size_gib",
        "prefix_cache_hit_rate",
        "prefix_cache_hit_rate_cpu",
    ]
    .into_iter()
    .enumerate()
    {
        columns.insert(at + k, name.into());
    }
    let nan = f64::NAN;
    for (i, row) in rows.iter_mut().enumerate() {
        let c = p.candidates.get(i);
        let cells = [
            c.and_then(|c| c.candidate.router.clone())
                .unwrap_or_default()
                .into(),
            CellValue::Number(
                c.and_then(|c| c.candidate.kv_offloading_size_gib)
                    .unwrap_or(nan),
            ),
            CellValue::Number(c.and_then(|c| c.prefix_cache_hit_rate).unwrap_or(nan)),
            CellValue::Number(c.and_then(|c| c.prefix_cache_hit_rate_cpu).unwrap_or(nan)),
        ];
        let at = at.min(row.len());
        for (k, cell) in cells.into_iter().enumerate() {
            row.insert(at + k, cell);
        }
    }
}

/// Adds the xPyD candidates below the colocated ones: a `kind` column first, the pools'
/// columns last (empty for colocated rows). An xPyD row's TTFT and TPOT are those of the
/// sized deployment at the target, at the SLOs' percentiles.
fn with_xpyd_rows(
    columns: &mut Vec<String>,
    rows: &mut Vec<Vec<CellValue>>,
    x: &crate::plan::DisaggPlan,
) {
    let nan = f64::NAN;
    let width = columns.len();
    columns.insert(0, "kind".into());
    columns.extend(
        [
            "prefill_replicas",
            "prefill_gpu",
            "prefill_tp",
            "decode_replicas",
            "decode_gpu",
            "decode_tp",
        ]
        .map(String::from),
    );
    for r in rows.iter_mut() {
        r.insert(0, "colocated".into());
        r.extend([
            CellValue::Number(nan),
            String::new().into(),
            CellValue::Number(nan),
            CellValue::Number(nan),
            String::new().into(),
            CellValue::Number(nan),
        ]);
    }
    for (i, c) in x.candidates.iter().enumerate() {
        let feasible = c.status == Status::Feasible;
        let num = |v: f64| CellValue::Number(if feasible { v } else { nan });
        let mut r: Vec<CellValue> = vec![
            "disaggregated".into(),
            CellValue::Number((i + 1) as f64),
            status_name(c.status).into(),
            format!("{} / {}", c.prefill.gpu, c.decode.gpu).into(),
            c.dtype.clone().into(),
        ];
        // kv_cache_dtype .. binding_constraint: per-replica figures of a colocated search.
        r.push(String::new().into());
        r.extend((0..5).map(|_| CellValue::Number(nan)));
        r.push(String::new().into());
        r.extend([
            num((c.prefill.replicas + c.decode.replicas) as f64),
            num(c.gpus as f64),
            num(c.usd_per_hour),
            num(c.usd_per_million_output_tokens),
            num(c.ttft_ms),
            num(c.tpot_ms),
            CellValue::Number(nan),
            CellValue::Number(nan),
            CellValue::Number(nan),
            c.note.clone().unwrap_or_default().into(),
        ]);
        debug_assert_eq!(r.len(), width + 1);
        r.extend([
            num(c.prefill.replicas as f64),
            c.prefill.gpu.clone().into(),
            CellValue::Number(c.prefill.tp as f64),
            num(c.decode.replicas as f64),
            c.decode.gpu.clone().into(),
            CellValue::Number(c.decode.tp as f64),
        ]);
        rows.push(r);
    }
}

/// The chosen candidate's period, hour by hour (fleet.csv). With sessions the arrival rate
/// says `(sessions/s)` and the hour's request rate follows as a last column.
impl ToTable for crate::plan::week::WeekPlan {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        let mut columns: Vec<String> = [
            "hour",
            "arrival_rate_per_s",
            "replicas",
            "gpus",
            "slo_attainment",
            "cost_usd",
            "planned_replicas",
            "ready_replicas",
            "p99_ttft_ms",
            "static_slo_attainment",
        ]
        .iter()
        .map(|c| c.to_string())
        .collect();
        if let Some(u) = &self.rate_unit {
            columns[1] = format!("arrival_rate_per_s ({u})");
            columns.push("request_rate_per_s (req/s)".into());
        }
        let sessions = self.rate_unit.is_some();
        let rows = self
            .chosen_candidate()
            .map(|c| {
                c.hours
                    .iter()
                    .map(|h| {
                        [
                            h.hour as f64,
                            h.arrival_rate_per_s,
                            h.replicas,
                            h.gpus,
                            h.slo_attainment,
                            h.cost_usd,
                            h.planned_replicas as f64,
                            h.ready_replicas,
                            h.p99_ttft_ms,
                            h.static_slo_attainment,
                        ]
                        .into_iter()
                        .chain(sessions.then(|| h.request_rate_per_s.unwrap_or(f64::NAN)))
                        .map(CellValue::Number)
                        .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Cow::Owned(TableSheet {
            name: "Week".into(),
            columns,
            rows,
        })
    }
}

/// The chosen candidate's batch point for the workbook: its output tokens/s per replica at
/// the SLO-bound rate and at capacity, recovered from the plan's $ per million output tokens
/// there (tokens/s = $/hour / ($/M x 3600) x 1e6), so the workbook's formulas at the plan's
/// prices give the plan's figures back. `None` without a chosen plan or with either cost 0.
fn batch_point(plan: &PlanResult) -> Option<crate::report::xlsx::BatchPointInputs> {
    let c = plan.chosen_candidate()?;
    let b = &plan.detail.as_ref()?.batch;
    let gpus = c.candidate.gpus();
    let usd_per_hour = f64::from(gpus) * c.price_usd_per_gpu_hour;
    let tps = |usd_per_million: f64| {
        (usd_per_million > 0.0 && usd_per_hour > 0.0)
            .then(|| usd_per_hour / (usd_per_million * 3600.0) * 1e6)
    };
    Some(crate::report::xlsx::BatchPointInputs {
        label: c.candidate.label(),
        gpu: c.candidate.gpu.clone(),
        gpus_per_replica: gpus,
        output_tokens_per_s_at_slo: tps(b.usd_per_million_at_slo)?,
        output_tokens_per_s_at_capacity: tps(b.usd_per_million_at_capacity)?,
    })
}

/// The cost workbook (cost.xlsx): the plan as a live model (sheets Inputs, Candidates, Curves;
/// src/report/xlsx.rs) and the candidates table as a last sheet.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostWorkbookExporter;

impl CostWorkbookExporter {
    /// The workbook's model of `plan`: its inputs as written give the plan's chosen fleet.
    pub fn model(plan: &PlanResult) -> CostModel {
        let candidates = candidate_rows(plan);
        let curves = plan
            .candidates
            .iter()
            .flat_map(|c| {
                c.curve.iter().map(|p| CurveRow {
                    label: candidate_label(&c.candidate),
                    gpu: c.candidate.gpu.clone(),
                    rate_per_s: p.rate_per_s,
                    p50_ttft_ms: p.p50_ttft_ms,
                    p99_ttft_ms: p.p99_ttft_ms,
                    p99_tpot_ms: p.p99_tpot_ms,
                    output_tokens_per_s_per_gpu: p.output_tokens_per_s_per_gpu,
                    sustainable: p.sustainable,
                })
            })
            .collect();
        let price_column = PRICE_COLUMNS
            .iter()
            .position(|c| *c == plan.price_column.name())
            .unwrap_or(0);
        CostModel {
            title: format!(
                "servesim cost model: {:.2} {}, plan of {} candidates",
                plan.target_rate_per_s,
                plan.rate_unit.as_deref().unwrap_or("req/s"),
                plan.candidates.len()
            ),
            target_rate_per_s: plan.target_rate_per_s,
            input_tokens_per_request: plan.input_tokens_per_request,
            output_tokens_per_request: plan.output_tokens_per_request,
            price_column,
            paid_hours_per_month: crate::plan::pricing::HOURS_PER_MONTH,
            headroom: 0.0,
            batch_discount: plan.detail.as_ref().map_or(0.0, |d| d.batch.discount),
            batch_point: batch_point(plan),
            input_output_price_ratio: plan.input_output_price_ratio,
            gpu_prices: plan
                .gpu_prices
                .iter()
                .map(|p| GpuPrices {
                    gpu: p.gpu.clone(),
                    on_demand: p.on_demand,
                    reserved: p.reserved,
                    spot: p.spot,
                })
                .collect(),
            candidates,
            curves,
            week: plan.week.as_ref().and_then(week_sheet),
            rate_unit: plan.rate_unit.clone(),
        }
    }
}

/// A candidate's name in the workbook: GPU, format, parallelism, max_num_seqs.
fn candidate_label(c: &crate::plan::Candidate) -> String {
    let router = c.router.as_ref().map_or(String::new(), |r| format!(" {r}"));
    let cpu = c
        .kv_offloading_size_gib
        .map_or(String::new(), |g| format!(" cpu {g} GiB"));
    format!(
        "{} {} {} seqs{}{router}{cpu}",
        c.gpu,
        c.weights_label(),
        c.parallelism(),
        c.max_num_seqs
    )
}

/// The workbook's candidate rows: every colocated candidate (a pruned one at its capacity
/// bound), then the xPyD candidates with their pools.
fn candidate_rows(plan: &PlanResult) -> Vec<CandidateRow> {
    plan
        .candidates
        .iter()
        .map(|c| CandidateRow {
            label: candidate_label(&c.candidate),
            gpu: c.candidate.gpu.clone(),
            dtype: c.candidate.weights_label().to_string(),
            // GPUs per replica (TP x DP), as the workbook multiplies by replicas.
            tp: c.candidate.gpus(),
            max_num_seqs: c.candidate.max_num_seqs,
            status: status_name(c.status).to_string(),
            rate_alone_per_s: (c.status != Status::Pruned && c.max_rate_per_replica > 0.0)
                .then_some(c.max_rate_per_replica),
            // A pruned candidate's capacity bounds its rate: its replicas and cost in the
            // sheet are lower bounds, so a price change can still make it win.
            rate_in_fleet_per_s: match c.status {
                Status::Feasible => Some(c.rate_in_fleet_per_replica),
                Status::Pruned => Some(c.capacity_rate_per_replica),
                Status::Infeasible => None,
            },
            note: match c.status {
                Status::Pruned => format!(
                    "capacity bound, not searched: its rate is one replica's steady-state capacity, so its replicas and cost are lower bounds; when it wins, rerun servesim plan with these prices to size it by simulation ({})",
                    c.note.as_deref().unwrap_or("")
                ),
                _ => c.note.clone().unwrap_or_default(),
            },
            pools: None,
        })
        .chain(plan.disaggregated.iter().flat_map(|x| {
            x.candidates.iter().map(|c| CandidateRow {
                label: c.label(),
                gpu: c.prefill.gpu.clone(),
                dtype: c.dtype.clone(),
                tp: c.prefill.tp,
                max_num_seqs: 0,
                status: status_name(c.status).to_string(),
                rate_alone_per_s: None,
                rate_in_fleet_per_s: None,
                note: c.note.clone().unwrap_or_default(),
                pools: Some(DisaggPools {
                    sized_at_rate_per_s: plan.target_rate_per_s,
                    prefill_replicas: c.prefill.replicas,
                    decode_gpu: c.decode.gpu.clone(),
                    decode_tp: c.decode.tp,
                    decode_replicas: c.decode.replicas,
                }),
            })
        }))
        .collect()
}

/// The period sheet of a week plan's chosen candidate (none without one).
fn week_sheet(w: &crate::plan::week::WeekPlan) -> Option<WeekSheet> {
    let c = w.chosen_candidate()?;
    Some(WeekSheet {
        label: candidate_label(&c.candidate),
        gpu: c.candidate.gpu.clone(),
        tp: c.candidate.gpus(),
        static_replicas: c.static_replicas,
        hours: c
            .hours
            .iter()
            .map(|h| WeekHour {
                hour: h.hour,
                rate_per_s: h.arrival_rate_per_s,
                request_rate_per_s: h.request_rate_per_s,
                planned_replicas: h.planned_replicas,
                replicas: h.replicas,
                slo_attainment: h.slo_attainment,
            })
            .collect(),
    })
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
        let bytes = cost_workbook_bytes(&Self::model(plan), &[table], Path::new("cost.xlsx"))?;
        out.write_all(&bytes).map_err(|e| Error::io("cost.xlsx", e))
    }
}
