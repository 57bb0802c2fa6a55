//! A plain table of numbers and text, shared by the CSV and XLSX exporters.

use std::borrow::Cow;

/// One cell of a [`TableSheet`].
#[derive(Debug, Clone, PartialEq)]
pub enum CellValue {
    /// A number; NaN and infinities are written as empty cells.
    Number(f64),
    /// Text.
    Text(String),
}

impl From<f64> for CellValue {
    fn from(v: f64) -> Self {
        CellValue::Number(v)
    }
}

impl From<&str> for CellValue {
    fn from(v: &str) -> Self {
        CellValue::Text(v.to_string())
    }
}

impl From<String> for CellValue {
    fn from(v: String) -> Self {
        CellValue::Text(v)
    }
}

/// A named table: a header row and data rows. Rows shorter than the header are padded with
/// empty cells; rows longer than the header are an error when exported.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableSheet {
    /// Sheet name (XLSX) or a caption; sanitised where a format restricts it.
    pub name: String,
    /// Column headers, with units, e.g. `"p99 TTFT (ms)"`.
    pub columns: Vec<String>,
    /// Data rows.
    pub rows: Vec<Vec<CellValue>>,
}

/// A document that can be shown as one table (what [`super::CsvExporter`] writes).
pub trait ToTable {
    /// The table, borrowed when the document already is one.
    fn to_table(&self) -> Cow<'_, TableSheet>;
}

impl ToTable for TableSheet {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        Cow::Borrowed(self)
    }
}

/// Shortest text that reads back as the same `f64`; empty for NaN and infinities.
pub(crate) fn number_text(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}
