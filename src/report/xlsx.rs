//! The cost workbook: a live model of the plan that finance can edit. Change the target load,
//! the price column, a $/GPU-hour, the headroom or the paid hours and the fleet, the winner
//! and the $ per million tokens follow, in Excel or LibreOffice.
//!
//! Sheets:
//! - `Inputs`: labels in column A, values in column B (the target load, tokens per request,
//!   the price column picked from a list, paid hours, headroom, batch discount, price ratio),
//!   the $/GPU-hour table by GPU type, and the chosen plan at these inputs, by formula.
//! - `Candidates`: one row per candidate; its sustained rate per replica is simulation data,
//!   everything after it is a formula of the inputs; the cheapest eligible row wins.
//!   Prefill/decode-disaggregated candidates follow the colocated ones: each pool's replicas
//!   scale from those servesim sized at the plan's load.
//! - `Curves`: each candidate's rate sweep from the simulation, with its $/M by formula, and
//!   two native charts (the throughput-latency trade-off, $/M against load).
//! - any extra tables (the plan's candidate table).
//!
//! Every formula cell also carries its cached result, computed by [`evaluate`] the same way,
//! so viewers that do not recalculate still show the numbers, and a test can compare the two.

use std::collections::HashSet;
use std::path::Path;

use rust_xlsxwriter::{
    Chart, ChartType, Color, DataValidation, DataValidationRule, Format, FormatAlign, FormatBorder,
    Formula, Workbook, Worksheet, XlsxError,
};

use super::atomic::write_atomic;
use crate::error::{Error, Result};
pub use crate::table::{CellValue, TableSheet};

/// The price columns of the GPU price table, in sheet order.
pub const PRICE_COLUMNS: [&str; 3] = ["on_demand", "reserved", "spot"];

/// $/GPU-hour of one GPU type, by price column.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPrices {
    /// GPU profile name, e.g. `"h100-sxm"`.
    pub gpu: String,
    /// On-demand, $/GPU-hour.
    pub on_demand: f64,
    /// Reserved, $/GPU-hour.
    pub reserved: f64,
    /// Spot, $/GPU-hour.
    pub spot: f64,
}

impl GpuPrices {
    fn by_column(&self, i: usize) -> f64 {
        [self.on_demand, self.reserved, self.spot][i.min(2)]
    }
}

/// One candidate row.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateRow {
    /// Short name, e.g. `"h100-sxm fp8 TP2 seqs256"`.
    pub label: String,
    /// GPU profile name (a row of the price table).
    pub gpu: String,
    /// Weight format.
    pub dtype: String,
    /// GPUs per replica.
    pub tp: u32,
    /// max_num_seqs (0 for an xPyD row: its pools keep their scenario's limits; left blank).
    pub max_num_seqs: u32,
    /// `feasible`, `pruned` or `infeasible`.
    pub status: String,
    /// Highest rate one replica alone sustains within the SLOs, req/s (`None`: not searched).
    pub rate_alone_per_s: Option<f64>,
    /// Sustained rate per replica inside the sized fleet, req/s: what the replicas formula
    /// divides by. `None` when the candidate cannot compete (not searched, or infeasible).
    pub rate_in_fleet_per_s: Option<f64>,
    /// Why it is infeasible or pruned.
    pub note: String,
    /// The pools of a prefill/decode-disaggregated (xPyD) candidate; `None` for a colocated
    /// one. The row's `gpu` and `tp` are then its prefill pool's.
    pub pools: Option<DisaggPools>,
}

/// The two pools of an xPyD candidate as servesim sized them. In the sheet each pool's
/// replicas scale with the target from these: ROUNDUP(replicas there x target x (1 +
/// headroom) / the load they were sized at).
#[derive(Debug, Clone, PartialEq)]
pub struct DisaggPools {
    /// Load both pools were sized and verified at, req/s.
    pub sized_at_rate_per_s: f64,
    /// Prefill replicas at that load.
    pub prefill_replicas: u32,
    /// Decode pool GPU profile name (a row of the price table).
    pub decode_gpu: String,
    /// GPUs per decode replica.
    pub decode_tp: u32,
    /// Decode replicas at that load.
    pub decode_replicas: u32,
}

/// One point of a candidate's rate sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveRow {
    /// The candidate's label.
    pub label: String,
    /// GPU profile name (for its price).
    pub gpu: String,
    /// Arrival rate per replica, req/s.
    pub rate_per_s: f64,
    /// p50 TTFT, ms.
    pub p50_ttft_ms: f64,
    /// p99 TTFT, ms.
    pub p99_ttft_ms: f64,
    /// p99 TPOT, ms.
    pub p99_tpot_ms: f64,
    /// Output tokens/s per GPU.
    pub output_tokens_per_s_per_gpu: f64,
    /// Whether the load was sustainable.
    pub sustainable: bool,
}

/// One hour of a period plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeekHour {
    /// Hour since the start.
    pub hour: u32,
    /// Arrival rate, in the workbook's rate unit (req/s, or session starts/s).
    pub rate_per_s: f64,
    /// With sessions, the hour's request rate (every turn), req/s: the hour's requests then
    /// come from it, not from `rate_per_s`. `None`: `rate_per_s` is the request rate.
    pub request_rate_per_s: Option<f64>,
    /// Replicas the hour-by-hour sizing needs.
    pub planned_replicas: u32,
    /// Replicas the autoscaled fleet paid for, mean over the hour.
    pub replicas: f64,
    /// Share of the hour's requests within every SLO.
    pub slo_attainment: f64,
}

/// The period plan's sheet: the chosen candidate hour by hour, the totals by formula.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekSheet {
    /// The candidate's label.
    pub label: String,
    /// Its GPU (a row of the price table).
    pub gpu: String,
    /// GPUs per replica.
    pub tp: u32,
    /// Replicas of the static fleet sized for the peak.
    pub static_replicas: u32,
    /// Hour by hour.
    pub hours: Vec<WeekHour>,
}

/// The formula results of the week sheet.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekResults {
    /// $/GPU-hour of the candidate's GPU in the chosen column.
    pub price: f64,
    /// Per hour: (GPUs, autoscaled cost, planned cost, requests).
    pub hours: Vec<(f64, f64, f64, f64)>,
    /// Autoscaled cost over the period, $.
    pub autoscaled_usd: f64,
    /// Hour-by-hour sized cost over the period, $.
    pub planned_usd: f64,
    /// Static fleet over the period, $.
    pub static_usd: f64,
    /// 1 - autoscaled / static.
    pub saving: f64,
    /// Requests over the period.
    pub requests: f64,
    /// Share of the period's requests within every SLO.
    pub attainment: f64,
}

/// The plan's batch point, for the batch-tier price: one replica of the plan's colocated
/// deployment at its SLO-bound rate and at capacity (no latency SLO). The batch discount is
/// taken off the cost at the SLO-bound rate, so the plan's discount prices the batch tier at
/// exactly the cost at capacity, its floor.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPointInputs {
    /// The deployment, e.g. `"h100-sxm fp8 TP2 seqs256"`.
    pub label: String,
    /// GPU profile name (a row of the price table).
    pub gpu: String,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
    /// Output tokens/s of one replica at the highest rate within the SLOs.
    pub output_tokens_per_s_at_slo: f64,
    /// Output tokens/s of one saturated replica (capacity, no latency SLO).
    pub output_tokens_per_s_at_capacity: f64,
}

/// Everything the workbook holds.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// Title of the Inputs sheet.
    pub title: String,
    /// Target load, req/s.
    pub target_rate_per_s: f64,
    /// Mean prompt tokens per request.
    pub input_tokens_per_request: f64,
    /// Mean output tokens per request.
    pub output_tokens_per_request: f64,
    /// Index into [`PRICE_COLUMNS`] of the price column in use.
    pub price_column: usize,
    /// Paid hours per month.
    pub paid_hours_per_month: f64,
    /// Extra load the fleet is sized for, as a share of the target (0.2 = 20% more).
    pub headroom: f64,
    /// Discount a batch tier can be sold at, 0..1, off the $ per 1M output tokens at the
    /// SLO-bound rate ([`BatchPointInputs`]).
    pub batch_discount: f64,
    /// The plan's batch point (`None`: no plan chosen, no batch tier).
    pub batch_point: Option<BatchPointInputs>,
    /// Price of an input token relative to an output token.
    pub input_output_price_ratio: f64,
    /// $/GPU-hour by GPU type.
    pub gpu_prices: Vec<GpuPrices>,
    /// Candidates, in the plan's rank order (ties go to the earlier row).
    pub candidates: Vec<CandidateRow>,
    /// Rate sweeps.
    pub curves: Vec<CurveRow>,
    /// The period plan, when the traffic varies over time.
    pub week: Option<WeekSheet>,
    /// The unit of every rate when it is not req/s (`sessions/s` for a session workload,
    /// whose tokens per request are then per session); `None`: req/s.
    pub rate_unit: Option<String>,
}

/// `label` in `m`'s rate unit: `req/s` becomes it, and `per request` then `per session`.
fn in_unit(m: &CostModel, label: &str) -> String {
    match &m.rate_unit {
        Some(u) => label
            .replace("req/s", u)
            .replace("per request", "per session"),
        None => label.to_string(),
    }
}

/// The formula results of one candidate row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CandidateCost {
    /// Replicas = ROUNDUP(target x (1 + headroom) / rate in fleet); an xPyD row's prefill
    /// replicas.
    pub replicas: f64,
    /// GPUs = replicas x TP (of both pools for an xPyD row).
    pub gpus: f64,
    /// $/GPU-hour in the chosen price column (the prefill pool's for an xPyD row).
    pub price_usd_per_gpu_hour: f64,
    /// An xPyD row's decode replicas and their $/GPU-hour.
    pub decode: Option<(f64, f64)>,
    /// Fleet $/hour.
    pub usd_per_hour: f64,
    /// Fleet $/month (paid hours).
    pub usd_per_month: f64,
    /// $ per million output tokens at the target.
    pub usd_per_million_output: f64,
}

/// Every formula's result, as the workbook computes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CostResults {
    /// Selected $/GPU-hour per GPU type (price table order).
    pub selected_prices: Vec<f64>,
    /// Per candidate (`None` for rows that cannot compete: their cells are empty).
    pub candidates: Vec<Option<CandidateCost>>,
    /// Index of the cheapest eligible candidate.
    pub chosen: Option<usize>,
    /// $ per million output tokens of each curve point.
    pub curve_usd_per_million: Vec<f64>,
    /// The chosen plan's blended $ per million output tokens (input priced at the ratio).
    pub blended_output: f64,
    /// The matching blended $ per million input tokens.
    pub blended_input: f64,
    /// The batch tier's $ per million output tokens: the cost at the SLO-bound rate less the
    /// batch discount.
    pub batch_usd_per_million: f64,
    /// The batch point's $ per million output tokens at the SLO-bound rate (one replica).
    pub slo_usd_per_million: f64,
    /// The batch point's $ per million output tokens at capacity: the batch tier's floor.
    pub capacity_usd_per_million: f64,
    /// The week sheet's formulas.
    pub week: Option<WeekResults>,
}

fn price_of(m: &CostModel, gpu: &str) -> f64 {
    m.gpu_prices
        .iter()
        .find(|p| p.gpu == gpu)
        .map_or(0.0, |p| p.by_column(m.price_column))
}

/// Computes every formula of the workbook exactly as Excel does.
pub fn evaluate(m: &CostModel) -> CostResults {
    let selected_prices = m
        .gpu_prices
        .iter()
        .map(|p| p.by_column(m.price_column))
        .collect();
    let tokens_per_hour = m.target_rate_per_s * m.output_tokens_per_request * 3600.0;
    let candidates: Vec<Option<CandidateCost>> = m
        .candidates
        .iter()
        .map(|c| {
            let price = price_of(m, &c.gpu);
            let (replicas, gpus, usd_per_hour, decode) = match &c.pools {
                Some(p) => {
                    if c.status != "feasible" || p.sized_at_rate_per_s <= 0.0 {
                        return None;
                    }
                    let factor = m.target_rate_per_s * (1.0 + m.headroom) / p.sized_at_rate_per_s;
                    let prefill = (p.prefill_replicas as f64 * factor).ceil();
                    let decode = (p.decode_replicas as f64 * factor).ceil();
                    let decode_price = price_of(m, &p.decode_gpu);
                    let decode_tp = p.decode_tp as f64;
                    (
                        prefill,
                        prefill * c.tp as f64 + decode * decode_tp,
                        prefill * c.tp as f64 * price + decode * decode_tp * decode_price,
                        Some((decode, decode_price)),
                    )
                }
                None => {
                    let rate = c.rate_in_fleet_per_s.filter(|r| *r > 0.0)?;
                    let replicas = (m.target_rate_per_s * (1.0 + m.headroom) / rate).ceil();
                    let gpus = replicas * c.tp as f64;
                    (replicas, gpus, gpus * price, None)
                }
            };
            Some(CandidateCost {
                replicas,
                gpus,
                price_usd_per_gpu_hour: price,
                decode,
                usd_per_hour,
                usd_per_month: usd_per_hour * m.paid_hours_per_month,
                usd_per_million_output: usd_per_hour / tokens_per_hour * 1e6,
            })
        })
        .collect();
    let chosen = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (i, c.usd_per_hour)))
        .fold(None, |best: Option<(usize, f64)>, (i, v)| match best {
            Some((_, b)) if b <= v => best,
            _ => Some((i, v)),
        })
        .map(|(i, _)| i);
    let curve_usd_per_million = m
        .curves
        .iter()
        .map(|p| price_of(m, &p.gpu) / (p.output_tokens_per_s_per_gpu * 3600.0) * 1e6)
        .collect();
    let (blended_output, blended_input) = match chosen.and_then(|i| candidates[i]) {
        Some(c) => {
            let weighted = m.output_tokens_per_request
                + m.input_output_price_ratio * m.input_tokens_per_request;
            let out = c.usd_per_hour / (m.target_rate_per_s * weighted * 3600.0) * 1e6;
            (out, out * m.input_output_price_ratio)
        }
        None => (0.0, 0.0),
    };
    let (slo, capacity) = m.batch_point.as_ref().map_or((0.0, 0.0), |b| {
        let usd_per_hour = price_of(m, &b.gpu) * f64::from(b.gpus_per_replica);
        let per_m = |tps: f64| usd_per_hour / (tps * 3600.0) * 1e6;
        (
            per_m(b.output_tokens_per_s_at_slo),
            per_m(b.output_tokens_per_s_at_capacity),
        )
    });
    let week = m.week.as_ref().map(|w| week_results(m, w));
    CostResults {
        selected_prices,
        candidates,
        chosen,
        curve_usd_per_million,
        blended_output,
        blended_input,
        batch_usd_per_million: slo * (1.0 - m.batch_discount),
        slo_usd_per_million: slo,
        capacity_usd_per_million: capacity,
        week,
    }
}

/// The period sheet's figures: per hour (GPUs, autoscaled $, planned $, requests), the
/// totals, the saving against the static fleet and the SLO attainment.
fn week_results(m: &CostModel, w: &WeekSheet) -> WeekResults {
    let price = price_of(m, &w.gpu);
    let tp = w.tp as f64;
    let hours: Vec<(f64, f64, f64, f64)> = w
        .hours
        .iter()
        .map(|h| {
            let gpus = h.replicas * tp;
            (
                gpus,
                gpus * price * 1.0,
                h.planned_replicas as f64 * tp * price,
                h.request_rate_per_s.unwrap_or(h.rate_per_s) * 3600.0,
            )
        })
        .collect();
    let autoscaled_usd: f64 = hours.iter().map(|h| h.1).sum();
    let planned_usd: f64 = hours.iter().map(|h| h.2).sum();
    let requests: f64 = hours.iter().map(|h| h.3).sum();
    let static_usd = w.static_replicas as f64 * tp * price * w.hours.len() as f64;
    let good: f64 = w
        .hours
        .iter()
        .zip(&hours)
        .map(|(h, x)| h.slo_attainment * x.3)
        .sum();
    WeekResults {
        price,
        hours,
        autoscaled_usd,
        planned_usd,
        static_usd,
        saving: 1.0 - autoscaled_usd / static_usd,
        requests,
        attainment: good / requests,
    }
}

/// Writes the workbook to `path`, atomically, with `extra_sheets` after the model's.
pub fn write_cost_workbook(path: &Path, m: &CostModel, extra_sheets: &[TableSheet]) -> Result<()> {
    let bytes = cost_workbook_bytes(m, extra_sheets, path)?;
    write_atomic(path, &bytes)
}

/// The workbook as the bytes of an .xlsx file; `name` labels errors.
pub fn cost_workbook_bytes(
    m: &CostModel,
    extra_sheets: &[TableSheet],
    name: &Path,
) -> Result<Vec<u8>> {
    check(m, name)?;
    build_workbook(m, extra_sheets)
        .and_then(|mut wb| wb.save_to_buffer())
        .map_err(|e| xlsx_error(name, e))
}

fn xlsx_error(path: &Path, e: XlsxError) -> Error {
    Error::Internal(format!("{}: writing the workbook: {e}", path.display()))
}

/// Refuses a model whose numbers a workbook cannot hold (NaN, infinities) or whose rows would
/// not fit a sheet.
fn check(m: &CostModel, name: &Path) -> Result<()> {
    let bad = |what: &str| {
        Err(Error::Internal(format!(
            "{}: {what} is not a finite number",
            name.display()
        )))
    };
    for (what, v) in [
        ("the target load", m.target_rate_per_s),
        ("input tokens per request", m.input_tokens_per_request),
        ("output tokens per request", m.output_tokens_per_request),
        ("paid hours per month", m.paid_hours_per_month),
        ("the headroom", m.headroom),
        ("the batch discount", m.batch_discount),
        ("the price ratio", m.input_output_price_ratio),
    ] {
        if !v.is_finite() {
            return bad(what);
        }
    }
    let prices = m
        .gpu_prices
        .iter()
        .flat_map(|p| [p.on_demand, p.reserved, p.spot]);
    let rates = m
        .candidates
        .iter()
        .flat_map(|c| {
            [
                c.rate_alone_per_s,
                c.rate_in_fleet_per_s,
                c.pools.as_ref().map(|p| p.sized_at_rate_per_s),
            ]
        })
        .flatten();
    let curve = m.curves.iter().flat_map(|p| {
        [
            p.rate_per_s,
            p.p50_ttft_ms,
            p.p99_ttft_ms,
            p.p99_tpot_ms,
            p.output_tokens_per_s_per_gpu,
        ]
    });
    if prices.chain(rates).chain(curve).any(|v| !v.is_finite()) {
        return bad("a price, rate or curve figure");
    }
    if m.candidates.len() + m.gpu_prices.len() + m.curves.len() > 100_000 {
        return Err(Error::Internal(format!(
            "{}: too many rows for a workbook",
            name.display()
        )));
    }
    Ok(())
}

/// The chosen mark of a row whose rate is a capacity bound (a candidate the search pruned).
const BOUND_CHOSEN: &str = "chosen (a bound: rerun servesim plan)";

/// The longest text an Excel cell holds.
const MAX_TEXT: usize = 32_767;
/// What a formula shows where it has no number (no eligible candidate, zero throughput).
/// Text, not an empty string: a cached empty result reads as 0 in viewers that do not
/// recalculate.
const NA: &str = "n/a";
/// The most data rows a sheet holds below its header.
const MAX_DATA_ROWS: usize = 1_048_575;

/// Rows of the Inputs sheet (0-based) and what they hold.
mod layout {
    /// Target load.
    pub const TARGET: u32 = 2;
    /// Input tokens per request.
    pub const INPUT: u32 = 3;
    /// Output tokens per request.
    pub const OUTPUT: u32 = 4;
    /// Price column.
    pub const COLUMN: u32 = 5;
    /// Paid hours per month.
    pub const HOURS: u32 = 6;
    /// Headroom.
    pub const HEADROOM: u32 = 7;
    /// Batch discount.
    pub const DISCOUNT: u32 = 8;
    /// Input:output price ratio.
    pub const RATIO: u32 = 9;
    /// Header row of the price table.
    pub const PRICE_HEADER: u32 = 11;
}

/// `Inputs!$B$<row + 1>`.
fn input_ref(row: u32) -> String {
    format!("Inputs!$B${}", row + 1)
}

fn header_format() -> Format {
    Format::new()
        .set_bold()
        .set_text_wrap()
        .set_align(FormatAlign::Center)
        .set_align(FormatAlign::VerticalCenter)
        .set_background_color(Color::RGB(0xD9E1F2))
        .set_border_bottom(FormatBorder::Thin)
}

fn input_format(num: &str) -> Format {
    Format::new()
        .set_background_color(Color::RGB(0xFFF2CC))
        .set_border(FormatBorder::Hair)
        .set_border_color(Color::RGB(0xBFBFBF))
        .set_unlocked()
        .set_num_format(num)
}

/// A formula with its cached numeric result.
fn num_formula(f: String, v: f64) -> Formula {
    Formula::new(f).set_result(format!("{v}"))
}

fn build_workbook(m: &CostModel, extra: &[TableSheet]) -> std::result::Result<Workbook, XlsxError> {
    let r = evaluate(m);
    let mut wb = Workbook::new();
    // A fixed creation time (the ZIP epoch), not the clock's: identical plans give identical
    // bytes.
    let created = rust_xlsxwriter::ExcelDateTime::from_ymd(1980, 1, 1)?;
    wb.set_properties(&rust_xlsxwriter::DocProperties::new().set_creation_datetime(&created));
    let mut used: HashSet<String> = HashSet::new();
    for name in ["Inputs", "Candidates", "Curves"] {
        used.insert(name.to_lowercase());
    }
    let price_rows = m.gpu_prices.len() as u32;
    let ws = wb.add_worksheet();
    ws.set_name("Inputs")?;
    write_inputs(ws, m, &r)?;
    printable(ws);
    let ws = wb.add_worksheet();
    ws.set_name("Candidates")?;
    write_candidates(ws, m, &r, price_rows)?;
    printable(ws);
    let ws = wb.add_worksheet();
    ws.set_name("Curves")?;
    write_curves(ws, m, &r, price_rows)?;
    printable(ws);
    if let (Some(w), Some(wr)) = (&m.week, &r.week) {
        used.insert("week".into());
        let ws = wb.add_worksheet();
        ws.set_name("Week")?;
        write_week(ws, m, w, wr, price_rows)?;
        printable(ws);
    }
    for (i, t) in extra.iter().enumerate() {
        let name = sheet_name(&t.name, i + 5, &mut used);
        let ws = wb.add_worksheet();
        ws.set_name(name)?;
        write_table_sheet(ws, t)?;
    }
    Ok(wb)
}

/// Landscape, one page wide: the sheet prints (and converts to PDF) readably.
fn printable(ws: &mut Worksheet) {
    ws.set_landscape();
    ws.set_print_fit_to_pages(1, 0);
}

/// The price-table range the candidates look their GPU up in: `Inputs!$A$13:$E$<last>`.
fn price_table(price_rows: u32) -> String {
    let first = layout::PRICE_HEADER + 2;
    let last = layout::PRICE_HEADER + 1 + price_rows.max(1);
    format!("Inputs!$A${first}:$E${last}")
}

/// The Inputs sheet: the scalar inputs, the price table, the chosen plan at these inputs, its
/// blended and batch prices, and the notes on how the workbook computes.
fn write_inputs(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
) -> std::result::Result<(), XlsxError> {
    write_input_cells(ws, m)?;
    write_price_table(ws, m, r)?;
    // The chosen plan's block starts two rows below the price table.
    let at = layout::PRICE_HEADER + 3 + m.gpu_prices.len() as u32;
    write_chosen_plan(ws, m, r, at)?;
    write_blended_prices(ws, r, at)?;
    write_batch_tier(ws, m, r, at)?;
    write_input_notes(ws, m, at)
}

/// The grey italic format of the Inputs sheet's notes.
fn note_format() -> Format {
    Format::new()
        .set_italic()
        .set_font_color(Color::RGB(0x595959))
}

/// The title, the column widths and the shaded scalar inputs (target, tokens per request,
/// price column, paid hours, headroom, batch discount, price ratio) with their validations.
fn write_input_cells(ws: &mut Worksheet, m: &CostModel) -> std::result::Result<(), XlsxError> {
    use layout::*;
    let title = Format::new().set_bold().set_font_size(14);
    let note = note_format();
    ws.set_column_width(0, 50)?;
    ws.set_column_width(1, 30)?;
    for c in 2..5 {
        ws.set_column_width(c, 12)?;
    }
    ws.write_string_with_format(0, 0, clip(&m.title), &title)?;
    ws.write_string_with_format(
        1,
        0,
        "Shaded cells are inputs: edit them and the fleet, the winner and the costs follow.",
        &note,
    )?;
    let num = input_format("#,##0.00");
    let int = input_format("#,##0");
    let pct = input_format("0%");
    let text = input_format("@");
    ws.write_string(TARGET, 0, in_unit(m, "Target load (req/s)"))?;
    ws.write_number_with_format(TARGET, 1, m.target_rate_per_s, &num)?;
    ws.write_string(INPUT, 0, in_unit(m, "Input tokens per request"))?;
    ws.write_number_with_format(INPUT, 1, m.input_tokens_per_request, &num)?;
    ws.write_string(OUTPUT, 0, in_unit(m, "Output tokens per request"))?;
    ws.write_number_with_format(OUTPUT, 1, m.output_tokens_per_request, &num)?;
    ws.write_string(COLUMN, 0, "Price column (on_demand, reserved, spot)")?;
    ws.write_string_with_format(COLUMN, 1, PRICE_COLUMNS[m.price_column.min(2)], &text)?;
    let list = DataValidation::new()
        .allow_list_strings(&PRICE_COLUMNS)?
        .set_error_message("Pick on_demand, reserved or spot.")?;
    ws.add_data_validation(COLUMN, 1, COLUMN, 1, &list)?;
    ws.write_string(HOURS, 0, "Paid hours per month")?;
    ws.write_number_with_format(HOURS, 1, m.paid_hours_per_month, &int)?;
    ws.write_string(HEADROOM, 0, "Headroom (extra load the fleet is sized for)")?;
    ws.write_number_with_format(HEADROOM, 1, m.headroom, &pct)?;
    let share = DataValidation::new()
        .allow_decimal_number(DataValidationRule::Between(0.0, 10.0))
        .set_error_message("Headroom is a share of the target load, 0% to 1000%.")?;
    ws.add_data_validation(HEADROOM, 1, HEADROOM, 1, &share)?;
    ws.write_string(
        DISCOUNT,
        0,
        "Batch discount (off the $ per 1M output tokens at the SLO-bound rate)",
    )?;
    ws.write_number_with_format(DISCOUNT, 1, m.batch_discount, &pct)?;
    ws.write_string(
        RATIO,
        0,
        "Input:output price ratio (input token / output token)",
    )?;
    ws.write_number_with_format(RATIO, 1, m.input_output_price_ratio, &num)?;
    Ok(())
}

/// $/GPU-hour by GPU type (shaded inputs), the selected column by formula.
fn write_price_table(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
) -> std::result::Result<(), XlsxError> {
    use layout::*;
    let bold = Format::new().set_bold();
    let header = header_format();
    ws.write_string_with_format(PRICE_HEADER - 1, 0, "$/GPU-hour by GPU type", &bold)?;
    for (c, h) in ["GPU"]
        .iter()
        .chain(PRICE_COLUMNS.iter())
        .chain(["selected"].iter())
        .enumerate()
    {
        ws.write_string_with_format(PRICE_HEADER, c as u16, *h, &header)?;
    }
    let usd_in = input_format("$#,##0.00");
    let usd = Format::new().set_num_format("$#,##0.00");
    for (i, p) in m.gpu_prices.iter().enumerate() {
        let row = PRICE_HEADER + 1 + i as u32;
        let n = row + 1;
        ws.write_string(row, 0, clip(&p.gpu))?;
        for (c, v) in [p.on_demand, p.reserved, p.spot].into_iter().enumerate() {
            ws.write_number_with_format(row, 1 + c as u16, v, &usd_in)?;
        }
        let f = format!(
            "INDEX(B{n}:D{n},MATCH({},$B${}:$D${},0))",
            input_ref(COLUMN),
            PRICE_HEADER + 1,
            PRICE_HEADER + 1
        );
        ws.write_formula_with_format(row, 4, num_formula(f, r.selected_prices[i]), &usd)?;
    }
    Ok(())
}

/// The chosen candidate (index and formula results), if it has results.
fn chosen_cost(r: &CostResults) -> Option<(usize, CandidateCost)> {
    r.chosen.and_then(|i| r.candidates[i].map(|c| (i, c)))
}

/// The chosen plan at these inputs, from row `at`: the cheapest eligible candidate's label,
/// replicas, GPUs, $/hour, $/month and $ per 1M output tokens, looked up by formula, with its
/// status beside the label.
fn write_chosen_plan(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
    at: u32,
) -> std::result::Result<(), XlsxError> {
    let bold = Format::new().set_bold();
    let usd = Format::new().set_num_format("$#,##0.00");
    ws.write_string_with_format(
        at,
        0,
        "Chosen plan: the cheapest eligible candidate at these inputs",
        &bold,
    )?;
    let n = m.candidates.len().max(1) as u32;
    let elig = format!("Candidates!$P$2:$P${}", n + 1);
    let idx = format!("MATCH(MIN({elig}),{elig},0)");
    let chosen = chosen_cost(r);
    let pick = |col: &str| {
        format!(
            "IFERROR(INDEX(Candidates!${col}$2:${col}${},{idx}),\"{NA}\")",
            n + 1
        )
    };
    let rows: [(&str, String, Option<CellValue>, &Format); 6] = [
        (
            "Candidate",
            pick("A"),
            chosen.map(|(i, _)| CellValue::Text(m.candidates[i].label.clone())),
            &Format::new(),
        ),
        (
            "Replicas",
            pick("J"),
            chosen.map(|(_, c)| CellValue::Number(c.replicas)),
            &Format::new().set_num_format("#,##0"),
        ),
        (
            "GPUs",
            pick("K"),
            chosen.map(|(_, c)| CellValue::Number(c.gpus)),
            &Format::new().set_num_format("#,##0"),
        ),
        (
            "Fleet $/hour",
            pick("M"),
            chosen.map(|(_, c)| CellValue::Number(c.usd_per_hour)),
            &usd,
        ),
        (
            "Fleet $/month",
            pick("N"),
            chosen.map(|(_, c)| CellValue::Number(c.usd_per_month)),
            &usd,
        ),
        (
            "$ per 1M output tokens",
            pick("O"),
            chosen.map(|(_, c)| CellValue::Number(c.usd_per_million_output)),
            &Format::new().set_num_format("$#,##0.000").set_bold(),
        ),
    ];
    let cached = |v: &Option<CellValue>| match v {
        Some(CellValue::Number(x)) => format!("{x}"),
        Some(CellValue::Text(s)) => s.clone(),
        None => NA.to_string(),
    };
    for (k, (label, f, v, fmt)) in rows.iter().enumerate() {
        let row = at + 1 + k as u32;
        ws.write_string(row, 0, *label)?;
        ws.write_formula_with_format(row, 1, Formula::new(f).set_result(cached(v)), fmt)?;
    }
    // Beside the candidate: whether its figures were verified by simulation (feasible) or
    // are a capacity bound (pruned).
    ws.write_formula(
        at + 1,
        2,
        Formula::new(pick("F"))
            .set_result(chosen.map_or(NA.to_string(), |(i, _)| m.candidates[i].status.clone())),
    )?;
    Ok(())
}

/// Below the chosen plan (block at row `at`): its blended $ per 1M output and input tokens
/// and its batch-tier price, from the chosen row.
fn write_blended_prices(
    ws: &mut Worksheet,
    r: &CostResults,
    at: u32,
) -> std::result::Result<(), XlsxError> {
    use layout::*;
    let usd3 = Format::new().set_num_format("$#,##0.000");
    let hour = at + 5; // the $/hour row
    let weighted = format!(
        "({}+{}*{})",
        input_ref(OUTPUT),
        input_ref(RATIO),
        input_ref(INPUT)
    );
    let extra: [(&str, String, f64); 2] = [
        (
            "$ per 1M output tokens, blended (input at the ratio)",
            format!(
                "IFERROR(B{}/({}*{weighted}*3600)*1000000,\"{NA}\")",
                hour,
                input_ref(TARGET)
            ),
            r.blended_output,
        ),
        (
            "$ per 1M input tokens, blended",
            format!("IFERROR(B{}*{},\"{NA}\")", at + 8, input_ref(RATIO)),
            r.blended_input,
        ),
    ];
    let chosen = chosen_cost(r);
    for (k, (label, f, v)) in extra.into_iter().enumerate() {
        let row = at + 7 + k as u32;
        ws.write_string(row, 0, label)?;
        let res = if chosen.is_some() {
            format!("{v}")
        } else {
            NA.to_string()
        };
        ws.write_formula_with_format(row, 1, Formula::new(f).set_result(res), &usd3)?;
    }
    Ok(())
}

/// Under the blended prices (block at row `at`): the batch tier's price, the batch discount
/// taken off the plan's cost at the SLO-bound rate (one replica of its colocated deployment,
/// at the selected price of its GPU), and the cost at capacity, the tier's floor: at the
/// plan's discount the tier is priced at exactly that floor.
fn write_batch_tier(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
    at: u32,
) -> std::result::Result<(), XlsxError> {
    use layout::*;
    let usd3 = Format::new().set_num_format("$#,##0.000");
    let (batch, slo, cap) = (at + 9, at + 10, at + 11);
    let Some(b) = &m.batch_point else {
        ws.write_string(batch, 0, "Batch tier $ per 1M output tokens")?;
        return ws.write_string(batch, 1, NA).map(|_| ());
    };
    let per_m = |tps: f64| {
        format!(
            "IFERROR(VLOOKUP(\"{}\",{},5,FALSE)*{}/({tps}*3600)*1000000,\"{NA}\")",
            b.gpu.replace('"', "\"\""),
            price_table(m.gpu_prices.len() as u32),
            b.gpus_per_replica
        )
    };
    let rows = [
        (
            batch,
            "Batch tier $ per 1M output tokens (the batch discount off the SLO-bound cost below)"
                .to_string(),
            format!(
                "IFERROR(B{}*(1-{}),\"{NA}\")",
                slo + 1,
                input_ref(DISCOUNT)
            ),
            r.batch_usd_per_million,
        ),
        (
            slo,
            format!(
                "$ per 1M output tokens at the SLO-bound rate: one replica of {} ({:.0} output tok/s)",
                b.label, b.output_tokens_per_s_at_slo
            ),
            per_m(b.output_tokens_per_s_at_slo),
            r.slo_usd_per_million,
        ),
        (
            cap,
            format!(
                "$ per 1M output tokens at capacity, no latency SLO ({:.0} output tok/s): the batch tier's floor",
                b.output_tokens_per_s_at_capacity
            ),
            per_m(b.output_tokens_per_s_at_capacity),
            r.capacity_usd_per_million,
        ),
    ];
    for (row, label, f, v) in rows {
        ws.write_string(row, 0, clip(&label))?;
        ws.write_formula_with_format(row, 1, num_formula(f, v), &usd3)?;
    }
    Ok(())
}

/// The notes under the chosen plan (block at row `at`): how the workbook sizes and prices.
fn write_input_notes(
    ws: &mut Worksheet,
    m: &CostModel,
    at: u32,
) -> std::result::Result<(), XlsxError> {
    let note = note_format();
    let notes = [
        "Replicas = ROUNDUP(target x (1 + headroom) / sustained rate per replica in the fleet), per candidate (sheet Candidates).",
        "The sustained rates come from the simulation: one replica's highest rate within the SLOs, adjusted to the fleet servesim sized and verified (R replicas hold at the target, R - 1 do not).",
        "Scaling linearly from those rates is the spreadsheet's approximation; rerun servesim plan with --set plan.target_rate_per_s=... to size and verify a new target by simulation.",
        "Prefill/decode-disaggregated (P/D) rows: each pool's replicas = ROUNDUP(replicas at the load servesim sized them at x target x (1 + headroom) / that load) (columns T..W); $/hour adds both pools at their GPUs' prices.",
        "$ per 1M output tokens = fleet $/hour / (target x output tokens per request x 3600) x 1,000,000.",
        "Pruned rows (status pruned: the search did not size them, their capacity alone cost more) carry one replica's steady-state capacity as their rate, so their replicas and cost are lower bounds; when one wins (the status beside the chosen candidate says pruned), rerun servesim plan with these prices (pricing.gpus.<gpu>) to size it by simulation.",
    ];
    for (k, t) in notes.iter().enumerate() {
        ws.write_string_with_format(at + 13 + k as u32, 0, in_unit(m, t), &note)?;
    }
    Ok(())
}

/// Candidates columns: header (with unit) and width. Columns R..X hold an xPyD row's decode
/// pool and the load both pools were sized at; J, K, L are then its prefill pool's.
const CANDIDATE_COLUMNS: [(&str, f64); 24] = [
    ("Candidate", 40.0),
    ("GPU (P/D: prefill)", 14.0),
    ("dtype", 7.0),
    ("TP (P/D: prefill)", 7.0),
    ("max_num_seqs", 8.0),
    ("status", 10.0),
    ("note", 24.0),
    ("one replica alone (req/s)", 12.0),
    ("sustained rate per replica in the fleet (req/s)", 14.0),
    ("replicas (P/D: prefill)", 9.0),
    ("GPUs (P/D: both pools)", 7.0),
    ("$/GPU-hour (P/D: prefill)", 10.0),
    ("fleet $/hour", 11.0),
    ("fleet $/month", 12.0),
    ("$ per 1M output tokens", 11.0),
    ("eligible $/hour", 10.0),
    ("chosen", 8.0),
    ("P/D: decode GPU", 14.0),
    ("P/D: decode TP", 8.0),
    ("P/D: pools sized at (req/s)", 11.0),
    ("P/D: prefill replicas there", 10.0),
    ("P/D: decode replicas there", 10.0),
    ("P/D: decode replicas", 9.0),
    ("P/D: decode $/GPU-hour", 10.0),
];

fn write_candidates(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
    price_rows: u32,
) -> std::result::Result<(), XlsxError> {
    let header = header_format();
    for (c, (t, w)) in CANDIDATE_COLUMNS.iter().enumerate() {
        ws.write_string_with_format(0, c as u16, in_unit(m, t), &header)?;
        ws.set_column_width(c as u16, *w)?;
    }
    ws.set_row_height(0, 60)?;
    ws.set_freeze_panes(1, 1)?;
    let rate_in = input_format("0.00");
    let int = Format::new().set_num_format("#,##0");
    let usd = Format::new().set_num_format("$#,##0.00");
    let usd3 = Format::new().set_num_format("$#,##0.000");
    let target = input_ref(layout::TARGET);
    let headroom = input_ref(layout::HEADROOM);
    let hours = input_ref(layout::HOURS);
    let out = input_ref(layout::OUTPUT);
    let table = price_table(price_rows);
    let n_rows = m.candidates.len().max(1) as u32;
    let elig = format!("$P$2:$P${}", n_rows + 1);
    for (i, c) in m.candidates.iter().enumerate() {
        let row = i as u32 + 1;
        let n = row + 1;
        ws.write_string(row, 0, clip(&c.label))?;
        ws.write_string(row, 1, clip(&c.gpu))?;
        ws.write_string(row, 2, clip(&c.dtype))?;
        ws.write_number(row, 3, c.tp as f64)?;
        if c.pools.is_none() {
            ws.write_number(row, 4, c.max_num_seqs as f64)?;
        }
        ws.write_string(row, 5, clip(&c.status))?;
        ws.write_string(row, 6, clip(&c.note))?;
        if let Some(v) = c.rate_alone_per_s {
            ws.write_number_with_format(row, 7, v, &Format::new().set_num_format("0.00"))?;
        }
        if let Some(p) = &c.pools {
            ws.write_string(row, 17, clip(&p.decode_gpu))?;
            ws.write_number(row, 18, p.decode_tp as f64)?;
            ws.write_number_with_format(row, 19, p.sized_at_rate_per_s, &rate_in)?;
            ws.write_number(row, 20, p.prefill_replicas as f64)?;
            ws.write_number(row, 21, p.decode_replicas as f64)?;
        }
        let Some(cost) = r.candidates[i] else {
            continue;
        };
        // Replicas, GPUs and $/hour: one pool from the sustained rate per replica, or an
        // xPyD row's two pools scaled from the load servesim sized them at.
        let (replicas, gpus, usd_per_hour) = match cost.decode {
            Some((decode, decode_price)) => {
                let factor = format!("({target}*(1+{headroom})/T{n})");
                ws.write_formula_with_format(
                    row,
                    22,
                    num_formula(format!("ROUNDUP(V{n}*{factor},0)"), decode),
                    &int,
                )?;
                ws.write_formula_with_format(
                    row,
                    23,
                    num_formula(format!("VLOOKUP(R{n},{table},5,FALSE)"), decode_price),
                    &usd,
                )?;
                (
                    format!("ROUNDUP(U{n}*{factor},0)"),
                    format!("J{n}*D{n}+W{n}*S{n}"),
                    format!("J{n}*D{n}*L{n}+W{n}*S{n}*X{n}"),
                )
            }
            None => {
                let rate = c.rate_in_fleet_per_s.unwrap_or(0.0);
                ws.write_number_with_format(row, 8, rate, &rate_in)?;
                (
                    format!("ROUNDUP({target}*(1+{headroom})/I{n},0)"),
                    format!("J{n}*D{n}"),
                    format!("K{n}*L{n}"),
                )
            }
        };
        let cells: [(u16, String, f64, &Format); 7] = [
            (9, replicas, cost.replicas, &int),
            (10, gpus, cost.gpus, &int),
            (
                11,
                format!("VLOOKUP(B{n},{table},5,FALSE)"),
                cost.price_usd_per_gpu_hour,
                &usd,
            ),
            (12, usd_per_hour, cost.usd_per_hour, &usd),
            (13, format!("M{n}*{hours}"), cost.usd_per_month, &usd),
            (
                14,
                format!("M{n}/({target}*{out}*3600)*1000000"),
                cost.usd_per_million_output,
                &usd3,
            ),
            (15, format!("M{n}"), cost.usd_per_hour, &usd),
        ];
        for (col, f, v, fmt) in cells {
            ws.write_formula_with_format(row, col, num_formula(f, v), fmt)?;
        }
        let mark = match (r.chosen == Some(i), c.status == "pruned") {
            (true, true) => BOUND_CHOSEN,
            (true, false) => "chosen",
            _ => "-",
        };
        ws.write_formula(
            row,
            16,
            Formula::new(format!(
                "IF(ROW()-1=MATCH(MIN({elig}),{elig},0),IF($F{n}=\"pruned\",\"{BOUND_CHOSEN}\",\"chosen\"),\"-\")"
            ))
            .set_result(mark),
        )?;
    }
    Ok(())
}

fn write_curves(
    ws: &mut Worksheet,
    m: &CostModel,
    r: &CostResults,
    price_rows: u32,
) -> std::result::Result<(), XlsxError> {
    let header = header_format();
    let cols = [
        ("Candidate", 30.0),
        ("GPU", 12.0),
        ("rate per replica (req/s)", 11.0),
        ("p50 TTFT (ms)", 10.0),
        ("p99 TTFT (ms)", 10.0),
        ("p99 TPOT (ms)", 10.0),
        ("output tokens/s per GPU", 11.0),
        ("sustainable", 10.0),
        ("$ per 1M output tokens", 11.0),
    ];
    for (c, (t, w)) in cols.iter().enumerate() {
        ws.write_string_with_format(0, c as u16, in_unit(m, t), &header)?;
        ws.set_column_width(c as u16, *w)?;
    }
    ws.set_row_height(0, 48)?;
    ws.set_freeze_panes(1, 0)?;
    let table = price_table(price_rows);
    let usd3 = Format::new().set_num_format("$#,##0.000");
    let rate = Format::new().set_num_format("0.00");
    let ms = Format::new().set_num_format("#,##0.0");
    let tps = Format::new().set_num_format("#,##0");
    let rows = &m.curves[..m.curves.len().min(MAX_DATA_ROWS)];
    for (i, p) in rows.iter().enumerate() {
        let row = i as u32 + 1;
        let n = row + 1;
        ws.write_string(row, 0, clip(&p.label))?;
        ws.write_string(row, 1, clip(&p.gpu))?;
        for (c, v, fmt) in [
            (2, p.rate_per_s, &rate),
            (3, p.p50_ttft_ms, &ms),
            (4, p.p99_ttft_ms, &ms),
            (5, p.p99_tpot_ms, &ms),
            (6, p.output_tokens_per_s_per_gpu, &tps),
        ] {
            ws.write_number_with_format(row, c, v, fmt)?;
        }
        ws.write_string(row, 7, if p.sustainable { "yes" } else { "no" })?;
        let f = format!("IFERROR(VLOOKUP(B{n},{table},5,FALSE)/(G{n}*3600)*1000000,\"{NA}\")");
        let v = r.curve_usd_per_million[i];
        let res = if v.is_finite() {
            format!("{v}")
        } else {
            NA.to_string()
        };
        ws.write_formula_with_format(row, 8, Formula::new(f).set_result(res), &usd3)?;
    }
    // Charts: one series per candidate, over its block of rows.
    let mut blocks: Vec<(String, u32, u32)> = Vec::new();
    for (i, p) in rows.iter().enumerate() {
        let row = i as u32 + 1;
        match blocks.last_mut() {
            Some((label, _, last)) if *label == p.label => *last = row,
            _ => blocks.push((p.label.clone(), row, row)),
        }
    }
    if blocks.is_empty() {
        return Ok(());
    }
    let mut trade = Chart::new(ChartType::ScatterStraightWithMarkers);
    trade
        .title()
        .set_name("Throughput vs p99 TTFT (one replica, steady state)");
    trade.x_axis().set_name("p99 TTFT (ms)").set_log_base(10);
    trade.y_axis().set_name("output tokens/s per GPU");
    let mut cost = Chart::new(ChartType::ScatterStraightWithMarkers);
    cost.title()
        .set_name("$ per 1M output tokens vs load (one replica)");
    cost.x_axis()
        .set_name(in_unit(m, "arrival rate per replica (req/s)").as_str());
    cost.y_axis()
        .set_name("$ per 1M output tokens")
        .set_log_base(10);
    for (_, first, last) in blocks.iter().take(12) {
        trade
            .add_series()
            .set_name(("Curves", *first, 0))
            .set_categories(("Curves", *first, 4, *last, 4))
            .set_values(("Curves", *first, 6, *last, 6));
        cost.add_series()
            .set_name(("Curves", *first, 0))
            .set_categories(("Curves", *first, 2, *last, 2))
            .set_values(("Curves", *first, 8, *last, 8));
    }
    ws.insert_chart(1, 10, &trade)?;
    ws.insert_chart(18, 10, &cost)?;
    Ok(())
}

/// Rows of the week sheet above its table (0-based): TP, GPU, static replicas.
const WEEK_HEAD: u32 = 6;

/// The week sheet's rows above its table ([`WEEK_HEAD`]): the period, TP, GPU, the static
/// fleet (an input) and the $/GPU-hour looked up from the Inputs sheet (`price`, $/GPU-hour,
/// cached).
fn write_week_head(
    ws: &mut Worksheet,
    w: &WeekSheet,
    price: f64,
    price_rows: u32,
) -> std::result::Result<(), XlsxError> {
    let bold = Format::new().set_bold();
    let usd = Format::new().set_num_format("$#,##0.00");
    ws.set_column_width(0, 34)?;
    for c in 1..10 {
        ws.set_column_width(c, 13)?;
    }
    ws.write_string_with_format(
        0,
        0,
        clip(&format!("The period, hour by hour: {}", w.label)),
        &bold,
    )?;
    ws.write_string(1, 0, "GPUs per replica (TP x DP)")?;
    ws.write_number(1, 1, w.tp as f64)?;
    ws.write_string(2, 0, "GPU")?;
    ws.write_string(2, 1, clip(&w.gpu))?;
    ws.write_string(3, 0, "Static fleet sized for the peak (replicas)")?;
    ws.write_number_with_format(3, 1, w.static_replicas as f64, &input_format("#,##0"))?;
    ws.write_string(4, 0, "$/GPU-hour (from Inputs)")?;
    let table = price_table(price_rows);
    ws.write_formula_with_format(
        4,
        1,
        num_formula(format!("VLOOKUP(B3,{table},5,FALSE)"), price),
        &usd,
    )?;
    Ok(())
}

fn write_week(
    ws: &mut Worksheet,
    m: &CostModel,
    w: &WeekSheet,
    r: &WeekResults,
    price_rows: u32,
) -> std::result::Result<(), XlsxError> {
    let header = header_format();
    let bold = Format::new().set_bold();
    let usd = Format::new().set_num_format("$#,##0.00");
    let usd0 = Format::new().set_num_format("$#,##0");
    let pct = Format::new().set_num_format("0.000%");
    let num2 = Format::new().set_num_format("0.00");
    let int = Format::new().set_num_format("#,##0");
    write_week_head(ws, w, r.price, price_rows)?;
    let rate_col = in_unit(m, "arrival rate (req/s)");
    let cols = [
        "hour",
        rate_col.as_str(),
        "replicas sized hour by hour",
        "replicas autoscaled (simulated)",
        "GPUs autoscaled",
        "autoscaled cost ($)",
        "hour-by-hour cost ($)",
        "SLO attainment (simulated)",
        "requests",
    ];
    for (c, t) in cols.iter().enumerate() {
        ws.write_string_with_format(WEEK_HEAD, c as u16, *t, &header)?;
    }
    ws.set_row_height(WEEK_HEAD, 45)?;
    let first = WEEK_HEAD + 1;
    for (i, (h, x)) in w.hours.iter().zip(&r.hours).enumerate() {
        let row = first + i as u32;
        let n = row + 1;
        ws.write_number(row, 0, h.hour as f64)?;
        ws.write_number_with_format(row, 1, h.rate_per_s, &num2)?;
        ws.write_number(row, 2, h.planned_replicas as f64)?;
        ws.write_number_with_format(row, 3, h.replicas, &num2)?;
        ws.write_formula_with_format(row, 4, num_formula(format!("D{n}*$B$2"), x.0), &num2)?;
        ws.write_formula_with_format(row, 5, num_formula(format!("E{n}*$B$5*1"), x.1), &usd)?;
        ws.write_formula_with_format(row, 6, num_formula(format!("C{n}*$B$2*$B$5"), x.2), &usd)?;
        ws.write_number_with_format(row, 7, h.slo_attainment, &pct)?;
        if h.request_rate_per_s.is_some() {
            // Sessions: the hour's requests are every turn, not the starts of column B.
            ws.write_number_with_format(row, 8, x.3, &int)?;
        } else {
            ws.write_formula_with_format(row, 8, num_formula(format!("B{n}*3600"), x.3), &int)?;
        }
    }
    let last = first + w.hours.len().max(1) as u32; // the last data row, 1-based
    let total = first + w.hours.len() as u32 + 1;
    let rows: [(&str, String, f64, &Format); 6] = [
        (
            "Autoscaled, the period ($)",
            format!("SUM(F{}:F{last})", first + 1),
            r.autoscaled_usd,
            &usd0,
        ),
        (
            "Sized hour by hour, the period ($)",
            format!("SUM(G{}:G{last})", first + 1),
            r.planned_usd,
            &usd0,
        ),
        (
            "Static fleet for the peak, the period ($)",
            format!("B4*B2*B5*COUNT(A{}:A{last})", first + 1),
            r.static_usd,
            &usd0,
        ),
        (
            "Autoscaling saves (share of static)",
            format!("1-B{}/B{}", total + 1, total + 3),
            r.saving,
            &pct,
        ),
        (
            "Requests",
            format!("SUM(I{}:I{last})", first + 1),
            r.requests,
            &int,
        ),
        (
            "SLO attainment, the period",
            format!(
                "SUMPRODUCT(H{f}:H{last},I{f}:I{last})/B{}",
                total + 5,
                f = first + 1
            ),
            r.attainment,
            &pct,
        ),
    ];
    for (k, (label, f, v, fmt)) in rows.into_iter().enumerate() {
        let row = total + k as u32;
        ws.write_string_with_format(row, 0, label, &bold)?;
        ws.write_formula_with_format(row, 1, num_formula(f, v), fmt)?;
    }
    Ok(())
}

fn write_table_sheet(ws: &mut Worksheet, t: &TableSheet) -> std::result::Result<(), XlsxError> {
    let header = header_format();
    let width = t.columns.len().min(16_384);
    for (c, title) in t.columns.iter().take(width).enumerate() {
        let chars = title.chars().count() as f64;
        ws.write_string_with_format(0, c as u16, clip(title), &header)?;
        ws.set_column_width(c as u16, (chars * 0.6 + 4.0).clamp(10.0, 40.0))?;
    }
    ws.set_freeze_panes(1, 0)?;
    for (i, row) in t.rows.iter().take(MAX_DATA_ROWS).enumerate() {
        let r = i as u32 + 1;
        for (c, cell) in row.iter().take(16_384).enumerate() {
            let c = c as u16;
            match cell {
                CellValue::Number(v) if v.is_finite() => {
                    ws.write_number(r, c, *v)?;
                }
                CellValue::Number(_) => {}
                CellValue::Text(s) => {
                    ws.write_string(r, c, clip(s))?;
                }
            }
        }
    }
    Ok(())
}

/// Text cut to what one Excel cell holds.
fn clip(s: &str) -> &str {
    match s.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A valid Excel sheet name (1..=31 characters, none of `[]:*?/\`, no leading or trailing
/// apostrophe) derived from `wanted`, unique (case-insensitively) among `used`.
fn sheet_name(wanted: &str, position: usize, used: &mut HashSet<String>) -> String {
    let cleaned: String = wanted
        .chars()
        .map(|c| match c {
            '[' | ']' | ':' | '*' | '?' | '/' | '\\' => '_',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let cleaned = cleaned.trim().trim_matches('\'').trim();
    let base: String = if cleaned.is_empty() {
        format!("Sheet{position}")
    } else {
        cleaned.chars().take(31).collect()
    };
    let mut name = base.clone();
    let mut k = 2;
    while used.contains(&name.to_lowercase()) || name.eq_ignore_ascii_case("history") {
        let suffix = format!(" ({k})");
        let keep = 31 - suffix.chars().count();
        name = format!("{}{suffix}", base.chars().take(keep).collect::<String>());
        k += 1;
    }
    used.insert(name.to_lowercase());
    name
}

/// A small model for examples and tests: three candidates on two GPU types, two with curves.
pub fn sample_model() -> CostModel {
    CostModel {
        title: "servesim cost model: sample".into(),
        target_rate_per_s: 40.0,
        input_tokens_per_request: 230.0,
        output_tokens_per_request: 200.0,
        price_column: 0,
        paid_hours_per_month: 730.0,
        headroom: 0.0,
        batch_discount: 0.3,
        batch_point: Some(BatchPointInputs {
            label: "h100-sxm fp8 TP2 seqs256".into(),
            gpu: "h100-sxm".into(),
            gpus_per_replica: 2,
            output_tokens_per_s_at_slo: 4200.0,
            output_tokens_per_s_at_capacity: 6000.0,
        }),
        input_output_price_ratio: 0.25,
        gpu_prices: sample_prices(),
        candidates: sample_candidates(),
        curves: sample_curves(),
        week: Some(sample_week()),
        rate_unit: None,
    }
}

/// The sample's prices: H100 and H200, $/GPU-hour.
fn sample_prices() -> Vec<GpuPrices> {
    vec![
        GpuPrices {
            gpu: "h100-sxm".into(),
            on_demand: 3.0,
            reserved: 2.2,
            spot: 1.35,
        },
        GpuPrices {
            gpu: "h200-sxm".into(),
            on_demand: 4.0,
            reserved: 3.1,
            spot: 2.0,
        },
    ]
}

/// The sample's candidates: two feasible colocated, one infeasible, one xPyD.
fn sample_candidates() -> Vec<CandidateRow> {
    vec![
        CandidateRow {
            label: "h100-sxm fp8 TP2 seqs256".into(),
            gpu: "h100-sxm".into(),
            dtype: "fp8".into(),
            tp: 2,
            max_num_seqs: 256,
            status: "feasible".into(),
            rate_alone_per_s: Some(26.9),
            rate_in_fleet_per_s: Some(26.9),
            note: String::new(),
            pools: None,
        },
        CandidateRow {
            label: "h200-sxm bf16 TP4 seqs128".into(),
            gpu: "h200-sxm".into(),
            dtype: "bf16".into(),
            tp: 4,
            max_num_seqs: 128,
            status: "feasible".into(),
            rate_alone_per_s: Some(30.0),
            rate_in_fleet_per_s: Some(31.5),
            note: String::new(),
            pools: None,
        },
        CandidateRow {
            label: "a100-sxm-80gb bf16 TP2 seqs64".into(),
            gpu: "a100-sxm-80gb".into(),
            dtype: "bf16".into(),
            tp: 2,
            max_num_seqs: 64,
            status: "infeasible".into(),
            rate_alone_per_s: None,
            rate_in_fleet_per_s: None,
            note: "does not fit".into(),
            pools: None,
        },
        // 2 prefill replicas of one H100 and 1 decode replica of two H200s: $14/h at
        // on-demand prices, against the H100 TP2 fleet's $12/h.
        CandidateRow {
            label: "2P x h100-sxm TP1 + 1D x h200-sxm TP2".into(),
            gpu: "h100-sxm".into(),
            dtype: "fp8".into(),
            tp: 1,
            max_num_seqs: 0, // an xPyD row's pools keep their scenario's limits
            status: "feasible".into(),
            rate_alone_per_s: None,
            rate_in_fleet_per_s: None,
            note: String::new(),
            pools: Some(DisaggPools {
                sized_at_rate_per_s: 40.0,
                prefill_replicas: 2,
                decode_gpu: "h200-sxm".into(),
                decode_tp: 2,
                decode_replicas: 1,
            }),
        },
    ]
}

/// The sample's curves: six load points of each feasible colocated candidate.
fn sample_curves() -> Vec<CurveRow> {
    let curve = |label: &str, gpu: &str, tps: f64| -> Vec<CurveRow> {
        (1..=6)
            .map(|k| CurveRow {
                label: label.into(),
                gpu: gpu.into(),
                rate_per_s: 2.0 * k as f64,
                p50_ttft_ms: 40.0 + 5.0 * k as f64,
                p99_ttft_ms: 90.0 * (1.0 + 0.3 * k as f64),
                p99_tpot_ms: 15.0 + 4.0 * k as f64,
                output_tokens_per_s_per_gpu: tps * k as f64,
                sustainable: k < 6,
            })
            .collect()
    };
    let mut curves = curve("h100-sxm fp8 TP2 seqs256", "h100-sxm", 200.0);
    curves.extend(curve("h200-sxm bf16 TP4 seqs128", "h200-sxm", 150.0));
    curves
}

/// The sample's week: 24 hours of a diurnal load on the H100 candidate.
fn sample_week() -> WeekSheet {
    WeekSheet {
        label: "h100-sxm fp8 TP2 seqs256".into(),
        gpu: "h100-sxm".into(),
        tp: 2,
        static_replicas: 3,
        hours: (0..24)
            .map(|h| {
                let rate = 40.0 + 25.0 * ((h as f64 - 14.0) * std::f64::consts::PI / 12.0).cos();
                WeekHour {
                    hour: h,
                    rate_per_s: rate,
                    request_rate_per_s: None,
                    planned_replicas: (rate / 26.9).ceil() as u32,
                    replicas: (rate / 20.0).ceil(),
                    slo_attainment: 1.0 - 0.0001 * h as f64,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_eligible_candidate_wins_and_follows_the_target() {
        let mut m = sample_model();
        let r = evaluate(&m);
        // 40 req/s: 2 x TP2 H100 at $3 = $12/h against 2 x TP4 H200 at $4 = $32/h.
        assert_eq!(r.chosen, Some(0));
        let c = r.candidates[0].unwrap();
        assert_eq!((c.replicas, c.gpus, c.usd_per_hour), (2.0, 4.0, 12.0));
        let expect = 12.0 / (40.0 * 200.0 * 3600.0) * 1e6;
        assert!((c.usd_per_million_output - expect).abs() < 1e-12);
        assert!(r.candidates[2].is_none());
        // Spot prices, headroom and a price ratio feed through.
        m.price_column = 2;
        m.headroom = 0.5;
        let r = evaluate(&m);
        let c = r.candidates[0].unwrap();
        assert_eq!((c.replicas, c.usd_per_hour), (3.0, 3.0 * 2.0 * 1.35));
        // The batch tier: the discount off one replica's cost at the SLO-bound rate (spot
        // H100 $1.35, TP2, 4200 output tok/s), at the selected price.
        let slo = 1.35 * 2.0 / (4200.0 * 3600.0) * 1e6;
        assert!((r.slo_usd_per_million - slo).abs() < 1e-12);
        assert!((r.batch_usd_per_million - slo * 0.7).abs() < 1e-12);
        // The discount a batch point funds prices the tier at its floor, the cost at capacity.
        m.batch_discount = 1.0 - 4200.0 / 6000.0;
        let r = evaluate(&m);
        assert!((r.batch_usd_per_million - r.capacity_usd_per_million).abs() < 1e-9);
        m.batch_discount = 0.3;
        // A target the H100 row needs 4 replicas for and the H200 row 3: still the H100 row.
        m.target_rate_per_s = 80.0;
        m.headroom = 0.0;
        let r = evaluate(&m);
        assert_eq!(r.candidates[0].unwrap().replicas, 3.0);
        assert_eq!(r.chosen, Some(0));
    }

    #[test]
    fn an_xpyd_row_prices_both_pools_and_wins_when_its_gpus_are_cheaper() {
        let mut m = sample_model();
        let r = evaluate(&m);
        // As sized: 2 x 1 H100 at $3 + 1 x 2 H200 at $4 = $14/h, 4 GPUs; the colocated $12/h wins.
        let pd = r.candidates[3].unwrap();
        assert_eq!(
            (pd.replicas, pd.gpus, pd.usd_per_hour, pd.decode),
            (2.0, 4.0, 14.0, Some((1.0, 4.0)))
        );
        assert_eq!(r.chosen, Some(0));
        // Dear H100s: the colocated fleet's 4 pay $40/h, the P/D fleet's 2 H100 + 2 H200 $28/h.
        m.gpu_prices[0].on_demand = 10.0;
        let r = evaluate(&m);
        assert_eq!(r.candidates[3].unwrap().usd_per_hour, 28.0);
        assert_eq!(r.chosen, Some(3));
        // Each pool follows the target: 1.5 x (2 prefill, 1 decode) rounds up to (3, 2).
        m.target_rate_per_s = 60.0;
        let pd = evaluate(&m).candidates[3].unwrap();
        assert_eq!((pd.replicas, pd.decode.map(|d| d.0)), (3.0, Some(2.0)));
        // Not feasible: no cost, whatever its pools say.
        m.candidates[3].status = "infeasible".into();
        assert!(evaluate(&m).candidates[3].is_none());
    }

    #[test]
    fn writes_a_valid_xlsx_and_refuses_nan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cost.xlsx");
        let extra = vec![TableSheet {
            name: "Candidates".into(),
            columns: vec!["rate (req/s)".into()],
            rows: vec![vec![1.0.into()], vec![f64::NAN.into()]],
        }];
        write_cost_workbook(&path, &sample_model(), &extra).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"PK\x03\x04");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let mut bad = sample_model();
        bad.candidates[0].rate_in_fleet_per_s = Some(f64::NAN);
        let err = write_cost_workbook(&dir.path().join("bad.xlsx"), &bad, &[]).unwrap_err();
        assert!(err.to_string().contains("not a finite number"), "{err}");
        assert!(!dir.path().join("bad.xlsx").exists());
    }

    #[test]
    fn the_same_model_gives_the_same_bytes_a_second_later() {
        // Issue 29: the workbook carried its creation time, so identical plans differed.
        let a = cost_workbook_bytes(&sample_model(), &[], Path::new("a.xlsx")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let b = cost_workbook_bytes(&sample_model(), &[], Path::new("b.xlsx")).unwrap();
        assert!(a == b, "the workbook's bytes depend on when it was written");
    }

    #[test]
    fn an_empty_model_is_fine() {
        let mut m = sample_model();
        m.candidates.clear();
        m.curves.clear();
        let r = evaluate(&m);
        assert_eq!(r.chosen, None);
        let dir = tempfile::tempdir().unwrap();
        write_cost_workbook(&dir.path().join("cost.xlsx"), &m, &[]).unwrap();
    }

    #[test]
    fn sheet_names_are_valid_and_unique() {
        let mut used = HashSet::from(["inputs".to_string()]);
        assert_eq!(sheet_name("a/b:c", 2, &mut used), "a_b_c");
        assert_eq!(sheet_name("A/B:C", 3, &mut used), "A_B_C (2)");
        assert_eq!(sheet_name("Inputs", 4, &mut used), "Inputs (2)");
        assert_eq!(sheet_name("''", 5, &mut used), "Sheet5");
        let long = sheet_name(&"x".repeat(40), 6, &mut used);
        assert_eq!(long.chars().count(), 31);
        let long2 = sheet_name(&"x".repeat(40), 7, &mut used);
        assert_eq!(long2, format!("{} (2)", "x".repeat(27)));
        assert_eq!(sheet_name("History", 8, &mut used), "History (2)");
    }
}
