//! Reports: one exporter per file format behind one small trait, in the manner of hyperfine's
//! `src/export/`.
//!
//! The building blocks here know nothing of the simulator's types:
//! - [`atomic`]: every file is written to an exclusive, unpredictably named temporary file in
//!   the destination directory and renamed into place, so a report file is never half-written;
//!   a report folder is staged and swapped in whole ([`atomic::ReportDir`]).
//! - [`Exporter`]: writes one document type `D` in one format; [`export_all`] runs several
//!   into a directory. [`JsonExporter`] serialises any `D: Serialize` (and refuses NaN and
//!   infinities, which JSON cannot hold); [`CsvExporter`] writes any `D: ToTable`.
//! - [`plot`]: typed chart descriptions rendered to PNG or SVG.
//! - [`xlsx`]: the cost workbook for finance, with live formulas and editable inputs.
//! - [`chrome_trace`]: a run's iterations and replica states as a Chrome trace.

pub mod chrome_trace;
mod finite;
pub mod plan;
pub mod plot;
pub mod sweep;
pub mod xlsx;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use crate::atomic_file as atomic;
pub use crate::table::{CellValue, TableSheet, ToTable};
pub use atomic::{write_atomic, write_atomic_with};

use crate::error::{Error, Result};

/// Writes a document of type `D` in one format.
pub trait Exporter<D: ?Sized> {
    /// Short name of the format, for messages (`"json"`, `"csv"`).
    fn name(&self) -> &'static str;

    /// The file name this exporter writes inside an output directory (no directory part).
    fn file_name(&self) -> &str;

    /// Writes `doc` to `out`. Errors name what was wrong with the document where they can.
    fn write(&self, doc: &D, out: &mut dyn Write) -> Result<()>;

    /// Writes `doc` to the file `path`, atomically. The default buffers [`Exporter::write`] in
    /// memory; formats whose encoder wants a path of its own may override it.
    fn export(&self, doc: &D, path: &Path) -> Result<()> {
        let mut buf = Vec::new();
        self.write(doc, &mut buf)?;
        write_atomic(path, &buf)
    }
}

/// Runs each exporter on `doc`, writing `dir/<file_name>` atomically; creates `dir` if needed.
///
/// File names are checked first (a plain name, no two alike), so a bad set writes nothing.
/// On the first failure the error is returned; files written before it are complete and stay.
/// Returns the paths written, in the exporters' order.
pub fn export_all<D: ?Sized>(
    dir: &Path,
    doc: &D,
    exporters: &[&dyn Exporter<D>],
) -> Result<Vec<PathBuf>> {
    let mut seen = HashSet::new();
    for e in exporters {
        let name = e.file_name();
        let plain = Path::new(name)
            .file_name()
            .is_some_and(|f| f == std::ffi::OsStr::new(name));
        if !plain {
            return Err(Error::config(
                "report",
                e.name(),
                format!("file name '{name}' must be a plain file name, without directories"),
            ));
        }
        if !seen.insert(name) {
            return Err(Error::config(
                "report",
                e.name(),
                format!("two exporters would both write '{name}'"),
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut written = Vec::with_capacity(exporters.len());
    for e in exporters {
        let path = dir.join(e.file_name());
        e.export(doc, &path)?;
        written.push(path);
    }
    Ok(written)
}

/// Pretty-printed JSON of any `D: Serialize`; refuses NaN and infinities (JSON has neither,
/// and serde_json would silently write `null`), naming the offending field's path.
#[derive(Debug, Clone)]
pub struct JsonExporter {
    file_name: String,
}

impl JsonExporter {
    /// An exporter that writes `file_name` (e.g. `"summary.json"`).
    pub fn new(file_name: impl Into<String>) -> Self {
        JsonExporter {
            file_name: file_name.into(),
        }
    }
}

impl<D: Serialize + ?Sized> Exporter<D> for JsonExporter {
    fn name(&self) -> &'static str {
        "json"
    }
    fn file_name(&self) -> &str {
        &self.file_name
    }
    fn write(&self, doc: &D, out: &mut dyn Write) -> Result<()> {
        if let Some((path, v)) = finite::first_non_finite(doc) {
            return Err(Error::Internal(format!(
                "{}: {path} is {v}, which JSON cannot represent",
                self.file_name
            )));
        }
        serde_json::to_writer_pretty(&mut *out, doc).map_err(|e| {
            if e.is_io() {
                // A failed write (a full disk, a closed pipe) is the writer's, not a bug.
                Error::io(&self.file_name, e.into())
            } else {
                Error::Internal(format!("{}: {e}", self.file_name))
            }
        })?;
        out.write_all(b"\n")
            .map_err(|e| Error::io(&self.file_name, e))
    }
}

/// A CSV file of any [`ToTable`] document: a header row, then one row per data row.
/// NaN and infinities are written as empty fields; short rows are padded with empty fields.
#[derive(Debug, Clone)]
pub struct CsvExporter {
    file_name: String,
}

impl CsvExporter {
    /// An exporter that writes `file_name` (e.g. `"sweep.csv"`).
    pub fn new(file_name: impl Into<String>) -> Self {
        CsvExporter {
            file_name: file_name.into(),
        }
    }
}

impl<D: ToTable + ?Sized> Exporter<D> for CsvExporter {
    fn name(&self) -> &'static str {
        "csv"
    }
    fn file_name(&self) -> &str {
        &self.file_name
    }
    fn write(&self, doc: &D, out: &mut dyn Write) -> Result<()> {
        let table = doc.to_table();
        let width = table.columns.len();
        let csv_err = |e: csv::Error| Error::Internal(format!("{}: {e}", self.file_name));
        let mut w = csv::Writer::from_writer(out);
        w.write_record(&table.columns).map_err(csv_err)?;
        for (i, row) in table.rows.iter().enumerate() {
            if row.len() > width {
                return Err(Error::Internal(format!(
                    "{}: row {} has {} cells but the table has {width} columns",
                    self.file_name,
                    i + 1,
                    row.len()
                )));
            }
            let mut fields: Vec<String> = row
                .iter()
                .map(|c| match c {
                    CellValue::Number(v) => crate::table::number_text(*v),
                    CellValue::Text(s) => s.clone(),
                })
                .collect();
            fields.resize(width, String::new());
            w.write_record(&fields).map_err(csv_err)?;
        }
        w.flush().map_err(|e| Error::io(&self.file_name, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Summary {
        model: String,
        ttft_ms: Vec<f64>,
    }

    /// A writer whose reader has gone away.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_json_write_is_an_io_error_keeping_its_kind() {
        let doc = Summary {
            model: "m".into(),
            ttft_ms: vec![1.0],
        };
        match JsonExporter::new("summary.json").write(&doc, &mut ClosedPipe) {
            Err(Error::Io { err, .. }) => assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe),
            other => panic!("expected an Io error, got {other:?}"),
        }
    }

    fn table() -> TableSheet {
        TableSheet {
            name: "Sweep".into(),
            columns: vec!["rate (req/s)".into(), "p99 TTFT (ms)".into(), "note".into()],
            rows: vec![
                vec![1.0.into(), 12.5.into(), "ok, \"quoted\"".into()],
                vec![2.0.into(), f64::NAN.into()],
            ],
        }
    }

    #[test]
    fn json_is_pretty_and_complete() {
        let doc = Summary {
            model: "llama".into(),
            ttft_ms: vec![1.5, 2.0],
        };
        let mut out = Vec::new();
        Exporter::write(&JsonExporter::new("s.json"), &doc, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\n  \"model\": \"llama\""), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["ttft_ms"][1], 2.0);
    }

    #[test]
    fn json_refuses_nan_and_names_the_field() {
        let doc = Summary {
            model: "llama".into(),
            ttft_ms: vec![1.5, f64::INFINITY],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let err = Exporter::export(&JsonExporter::new("s.json"), &doc, &path).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("$.ttft_ms[1]") && msg.contains("inf"), "{msg}");
        assert!(!path.exists());
    }

    #[test]
    fn csv_writes_header_quotes_and_pads() {
        let mut out = Vec::new();
        Exporter::write(&CsvExporter::new("t.csv"), &table(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "rate (req/s),p99 TTFT (ms),note\n1,12.5,\"ok, \"\"quoted\"\"\"\n2,,\n"
        );
    }

    #[test]
    fn csv_rejects_overlong_rows() {
        let mut t = table();
        t.rows.push(vec![1.0.into(); 4]);
        let mut out = Vec::new();
        let err = Exporter::write(&CsvExporter::new("t.csv"), &t, &mut out).unwrap_err();
        assert!(err.to_string().contains("row 3 has 4 cells"), "{err}");
    }

    #[test]
    fn export_all_writes_each_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("reports");
        let (csv, json) = (CsvExporter::new("t.csv"), JsonExporter::new("t.json"));
        // TableSheet is not Serialize; export a Serialize + ToTable wrapper via two calls.
        let paths = export_all(&out, &table(), &[&csv]).unwrap();
        assert_eq!(paths, vec![out.join("t.csv")]);
        let doc = Summary {
            model: "m".into(),
            ttft_ms: vec![],
        };
        let paths = export_all(&out, &doc, &[&json]).unwrap();
        assert!(paths[0].exists());
        assert!(std::fs::read_to_string(out.join("t.csv"))
            .unwrap()
            .starts_with("rate"));
    }

    #[test]
    fn export_all_rejects_bad_or_duplicate_names_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (CsvExporter::new("t.csv"), CsvExporter::new("t.csv"));
        assert!(export_all(dir.path(), &table(), &[&a, &b]).is_err());
        let c = CsvExporter::new("../t.csv");
        assert!(export_all(dir.path(), &table(), &[&a, &c]).is_err());
        let d = CsvExporter::new("");
        assert!(export_all(dir.path(), &table(), &[&d]).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
