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

/// A document that can be shown as one table (what `report::CsvExporter` writes).
pub trait ToTable {
    /// The table, borrowed when the document already is one.
    fn to_table(&self) -> Cow<'_, TableSheet>;
}

impl TableSheet {
    /// One header row and one data row of any serializable document: nested keys joined
    /// with dots (`memory.kv_tokens`), arrays left out.
    pub fn one_row<T: serde::Serialize + ?Sized>(name: &str, doc: &T) -> TableSheet {
        let mut columns = Vec::new();
        let mut cells = Vec::new();
        if let Ok(v) = serde_json::to_value(doc) {
            flatten("", &v, &mut columns, &mut cells);
        }
        TableSheet {
            name: name.into(),
            columns,
            rows: vec![cells],
        }
    }
}

/// Flattens a JSON value into dotted keys and cells (nested objects joined with dots).
fn flatten(
    prefix: &str,
    v: &serde_json::Value,
    columns: &mut Vec<String>,
    cells: &mut Vec<CellValue>,
) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, columns, cells);
            }
        }
        serde_json::Value::Number(n) => {
            columns.push(prefix.to_string());
            cells.push(CellValue::Number(n.as_f64().unwrap_or(f64::NAN)));
        }
        serde_json::Value::Bool(b) => {
            columns.push(prefix.to_string());
            cells.push(CellValue::Text(b.to_string()));
        }
        serde_json::Value::String(s) => {
            columns.push(prefix.to_string());
            cells.push(CellValue::Text(s.clone()));
        }
        serde_json::Value::Null => {
            columns.push(prefix.to_string());
            cells.push(CellValue::Text(String::new()));
        }
        serde_json::Value::Array(_) => {}
    }
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
