//! The cost workbook for finance: editable inputs and live formulas, so a changed $/GPU-hour or
//! utilisation recomputes the cost per million tokens in Excel or LibreOffice.
//!
//! Every formula cell also carries its cached result, computed here the same way, so viewers
//! that do not recalculate still show the numbers. No cell holds NaN or an infinity, and a
//! zero throughput gives an empty cost cell (`IFERROR`), never `#DIV/0!`.

use std::collections::HashSet;
use std::path::Path;

use rust_xlsxwriter::{
    Color, DataValidation, DataValidationRule, Format, FormatAlign, FormatBorder, Formula,
    Workbook, Worksheet, XlsxError,
};

use super::atomic::write_atomic;
pub use super::table::{CellValue, TableSheet};
use crate::error::{Error, Result};

/// Hours in the average month (8760 / 12), the basis of "$/month".
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Name of the sheet with the cost model.
pub const COST_SHEET: &str = "Cost";

/// One deployment plan's inputs to the cost model: one row of the "Cost" sheet.
#[derive(Debug, Clone, PartialEq)]
pub struct CostInputs {
    /// The plan's name, e.g. `"llama-3.1-70b tp4 x3"`.
    pub label: String,
    /// GPU model, e.g. `"H100 SXM"`.
    pub gpu_name: String,
    /// GPUs in the whole deployment.
    pub gpus: u32,
    /// Price of one GPU for one hour, in US dollars.
    pub price_usd_per_gpu_hour: f64,
    /// Output tokens per second of the whole deployment while busy.
    pub output_tokens_per_s: f64,
    /// Input (prompt) tokens per second of the whole deployment while busy.
    pub input_tokens_per_s: f64,
    /// Share of paid hours the fleet is busy, 0..=1.
    pub utilization: f64,
}

/// The formulas of one plan row, with their cached results.
#[derive(Debug, Clone, PartialEq)]
pub struct CostRow {
    /// Fleet $/hour = GPUs × $/GPU-hour.
    pub usd_per_hour: f64,
    /// Fleet $/month = $/hour × 730.
    pub usd_per_month: f64,
    /// Effective output tokens/hour = output tokens/s × 3600 × utilisation.
    pub output_tokens_per_hour: f64,
    /// Effective total tokens/hour = (input + output tokens/s) × 3600 × utilisation.
    pub total_tokens_per_hour: f64,
    /// $ per million output tokens; `None` where the formula shows an empty cell.
    pub usd_per_million_output: Option<f64>,
    /// $ per million input + output tokens; `None` where the formula shows an empty cell.
    pub usd_per_million_total: Option<f64>,
}

/// Computes a plan's cost row exactly as the workbook's formulas do (non-finite inputs count
/// as the empty cells they are written as, i.e. zero).
pub fn cost_row(p: &CostInputs) -> CostRow {
    let f = |v: f64| if v.is_finite() { v } else { 0.0 };
    let usd_per_hour = f64::from(p.gpus) * f(p.price_usd_per_gpu_hour);
    let usd_per_month = usd_per_hour * HOURS_PER_MONTH;
    let util = f(p.utilization);
    let output_tokens_per_hour = f(p.output_tokens_per_s) * 3600.0 * util;
    let total_tokens_per_hour =
        (f(p.output_tokens_per_s) + f(p.input_tokens_per_s)) * 3600.0 * util;
    // IFERROR(x / y * 1e6, ""): empty where the division fails.
    let per_million = |tokens: f64| {
        let v = usd_per_hour / tokens * 1e6;
        (tokens != 0.0 && v.is_finite()).then_some(v)
    };
    CostRow {
        usd_per_hour,
        usd_per_month,
        output_tokens_per_hour,
        total_tokens_per_hour,
        usd_per_million_output: per_million(output_tokens_per_hour),
        usd_per_million_total: per_million(total_tokens_per_hour),
    }
}

/// The "Cost" sheet's columns: header (with unit), column width.
const COST_COLUMNS: [(&str, f64); 13] = [
    ("Plan", 28.0),
    ("GPU", 14.0),
    ("GPUs", 8.0),
    ("$/GPU-hour", 12.0),
    ("Output tokens/s (busy)", 14.0),
    ("Input tokens/s (busy)", 14.0),
    ("Utilisation (% of hours busy)", 14.0),
    ("Fleet $/hour", 13.0),
    ("Fleet $/month (730 h)", 15.0),
    ("Effective output tokens/hour", 17.0),
    ("Effective total tokens/hour", 17.0),
    ("$ per 1M output tokens", 14.0),
    ("$ per 1M total tokens", 14.0),
];

/// Writes the cost workbook to `path`, atomically: the "Cost" sheet (one row per plan) and one
/// sheet per table in `extra_sheets` (sheet names are made valid and unique for Excel).
pub fn write_cost_workbook(
    path: &Path,
    plans: &[CostInputs],
    extra_sheets: &[TableSheet],
) -> Result<()> {
    let bytes = cost_workbook_bytes(plans, extra_sheets, path)?;
    write_atomic(path, &bytes)
}

/// The cost workbook as the bytes of an .xlsx file; `name` labels errors.
pub fn cost_workbook_bytes(
    plans: &[CostInputs],
    extra_sheets: &[TableSheet],
    name: &Path,
) -> Result<Vec<u8>> {
    build_workbook(plans, extra_sheets)
        .and_then(|mut wb| wb.save_to_buffer())
        .map_err(|e| xlsx_error(name, e))
}

fn xlsx_error(path: &Path, e: XlsxError) -> Error {
    Error::Internal(format!("{}: writing the workbook: {e}", path.display()))
}

/// The most data rows a sheet holds below its header.
const MAX_DATA_ROWS: usize = 1_048_575;
/// The longest text an Excel cell holds.
const MAX_TEXT: usize = 32_767;

fn build_workbook(
    plans: &[CostInputs],
    extra_sheets: &[TableSheet],
) -> std::result::Result<Workbook, XlsxError> {
    let mut wb = Workbook::new();
    let ws = wb.add_worksheet();
    ws.set_name(COST_SHEET)?;
    write_cost_sheet(ws, plans)?;

    let mut used: HashSet<String> = HashSet::from([COST_SHEET.to_lowercase()]);
    for (i, t) in extra_sheets.iter().enumerate() {
        let name = sheet_name(&t.name, i + 2, &mut used);
        let ws = wb.add_worksheet();
        ws.set_name(name)?;
        write_table_sheet(ws, t)?;
    }
    Ok(wb)
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

fn write_cost_sheet(
    ws: &mut Worksheet,
    plans: &[CostInputs],
) -> std::result::Result<(), XlsxError> {
    let header = header_format();
    let input = |num: &str| {
        Format::new()
            .set_background_color(Color::RGB(0xFFF2CC))
            .set_border(FormatBorder::Hair)
            .set_border_color(Color::RGB(0xBFBFBF))
            .set_unlocked()
            .set_num_format(num)
    };
    let text_in = input("@");
    let int_in = input("#,##0");
    let usd_in = input("$#,##0.00");
    let pct_in = input("0%");
    let usd = Format::new().set_num_format("$#,##0.00");
    let usd0 = Format::new().set_num_format("$#,##0");
    let int = Format::new().set_num_format("#,##0");
    let usd_bold = Format::new().set_num_format("$#,##0.00").set_bold();

    for (c, (title, width)) in COST_COLUMNS.iter().enumerate() {
        let c = c as u16;
        ws.write_string_with_format(0, c, *title, &header)?;
        ws.set_column_width(c, *width)?;
    }
    ws.set_row_height(0, 48)?;
    ws.set_freeze_panes(1, 0)?;

    let plans = &plans[..plans.len().min(MAX_DATA_ROWS - 3)];
    for (i, p) in plans.iter().enumerate() {
        let r = i as u32 + 1;
        let n = r + 1; // Excel's 1-based row number
        ws.write_string_with_format(r, 0, clip(&p.label), &text_in)?;
        ws.write_string_with_format(r, 1, clip(&p.gpu_name), &text_in)?;
        ws.write_number_with_format(r, 2, f64::from(p.gpus), &int_in)?;
        write_input(ws, r, 3, p.price_usd_per_gpu_hour, &usd_in)?;
        write_input(ws, r, 4, p.output_tokens_per_s, &int_in)?;
        write_input(ws, r, 5, p.input_tokens_per_s, &int_in)?;
        write_input(ws, r, 6, p.utilization, &pct_in)?;

        let row = cost_row(p);
        let cached = |v: Option<f64>| match v {
            Some(v) if v.is_finite() => format!("{v}"),
            _ => String::new(),
        };
        let formulas = [
            (7, format!("C{n}*D{n}"), Some(row.usd_per_hour), &usd),
            (8, format!("H{n}*730"), Some(row.usd_per_month), &usd0),
            (
                9,
                format!("E{n}*3600*G{n}"),
                Some(row.output_tokens_per_hour),
                &int,
            ),
            (
                10,
                format!("(E{n}+F{n})*3600*G{n}"),
                Some(row.total_tokens_per_hour),
                &int,
            ),
            (
                11,
                format!("IFERROR(H{n}/J{n}*1000000,\"\")"),
                row.usd_per_million_output,
                &usd_bold,
            ),
            (
                12,
                format!("IFERROR(H{n}/K{n}*1000000,\"\")"),
                row.usd_per_million_total,
                &usd,
            ),
        ];
        for (c, f, v, fmt) in formulas {
            ws.write_formula_with_format(r, c, Formula::new(f).set_result(cached(v)), fmt)?;
        }
    }
    if !plans.is_empty() {
        let last = plans.len() as u32;
        let dv = DataValidation::new()
            .allow_decimal_number(DataValidationRule::Between(0.0, 1.0))
            .set_error_message("Utilisation is a share of hours, between 0% and 100%.")?;
        ws.add_data_validation(1, 6, last, 6, &dv)?;
    }

    let notes_row = plans.len() as u32 + 2;
    let note = Format::new()
        .set_italic()
        .set_font_color(Color::RGB(0x595959));
    let notes = [
        "Shaded cells are inputs: edit them and the costs recompute. Throughputs are the whole \
         fleet's while busy; utilisation is the share of paid hours it is busy.",
        "Fleet $/hour = GPUs × $/GPU-hour.   Fleet $/month = $/hour × 730 (hours in an average \
         month).",
        "Effective output tokens/hour = output tokens/s × 3600 × utilisation.   Effective total \
         tokens/hour = (input + output tokens/s) × 3600 × utilisation.",
        "$ per 1M output tokens = $/hour ÷ effective output tokens/hour × 1,000,000 (every paid \
         hour counts, busy or idle).   $ per 1M total tokens uses input + output tokens.   Empty \
         when the throughput is zero.",
    ];
    for (i, text) in notes.iter().enumerate() {
        ws.write_string_with_format(notes_row + i as u32, 0, *text, &note)?;
    }
    Ok(())
}

/// An input number; a non-finite one is left empty (still shaded and editable).
fn write_input(
    ws: &mut Worksheet,
    r: u32,
    c: u16,
    v: f64,
    fmt: &Format,
) -> std::result::Result<(), XlsxError> {
    if v.is_finite() {
        ws.write_number_with_format(r, c, v, fmt)?;
    } else {
        ws.write_blank(r, c, fmt)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn plan(price: f64, out_tps: f64) -> CostInputs {
        CostInputs {
            label: "llama-70b tp4 x2".into(),
            gpu_name: "H100 SXM".into(),
            gpus: 8,
            price_usd_per_gpu_hour: price,
            output_tokens_per_s: out_tps,
            input_tokens_per_s: 3.0 * out_tps,
            utilization: 0.5,
        }
    }

    #[test]
    fn cost_row_matches_the_formulas() {
        let r = cost_row(&plan(2.5, 1000.0));
        assert_eq!(r.usd_per_hour, 20.0);
        assert_eq!(r.usd_per_month, 20.0 * 730.0);
        assert_eq!(r.output_tokens_per_hour, 1000.0 * 3600.0 * 0.5);
        let expect = 20.0 / 1_800_000.0 * 1e6;
        assert!((r.usd_per_million_output.unwrap() - expect).abs() < 1e-9);
        assert!((r.usd_per_million_total.unwrap() - expect / 4.0).abs() < 1e-9);
    }

    #[test]
    fn zero_or_nan_throughput_gives_empty_cost() {
        let r = cost_row(&plan(2.5, 0.0));
        assert_eq!(r.usd_per_million_output, None);
        assert_eq!(r.usd_per_million_total, None);
        let r = cost_row(&plan(f64::NAN, f64::INFINITY));
        assert_eq!(r.usd_per_hour, 0.0);
        assert_eq!(r.usd_per_million_output, None);
    }

    #[test]
    fn writes_a_valid_xlsx_with_extra_sheets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cost.xlsx");
        let extra = vec![
            TableSheet {
                name: "Sweep: rate/p99?".into(),
                columns: vec!["rate (req/s)".into(), "p99 (ms)".into()],
                rows: vec![vec![1.0.into(), f64::NAN.into()], vec!["x".into()]],
            },
            TableSheet {
                name: "cost".into(),
                columns: vec![],
                rows: vec![],
            },
            TableSheet {
                name: String::new(),
                columns: vec![],
                rows: vec![],
            },
        ];
        let plans = vec![plan(2.5, 1000.0), plan(f64::NAN, 0.0)];
        write_cost_workbook(&path, &plans, &extra).unwrap();
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        assert_eq!(&bytes[..4], b"PK\x03\x04");
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn empty_workbook_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cost.xlsx");
        write_cost_workbook(&path, &[], &[]).unwrap();
        assert!(path.metadata().unwrap().len() > 0);
    }

    #[test]
    fn sheet_names_are_valid_and_unique() {
        let mut used = HashSet::from(["cost".to_string()]);
        assert_eq!(sheet_name("a/b:c", 2, &mut used), "a_b_c");
        assert_eq!(sheet_name("A/B:C", 3, &mut used), "A_B_C (2)");
        assert_eq!(sheet_name("Cost", 4, &mut used), "Cost (2)");
        assert_eq!(sheet_name("''", 5, &mut used), "Sheet5");
        let long = sheet_name(&"x".repeat(40), 6, &mut used);
        assert_eq!(long.chars().count(), 31);
        let long2 = sheet_name(&"x".repeat(40), 7, &mut used);
        assert_eq!(long2, format!("{} (2)", "x".repeat(27)));
        assert_eq!(sheet_name("History", 8, &mut used), "History (2)");
    }
}
