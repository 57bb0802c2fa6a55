//! `--trace-events FILE` (`run`, `bench`): the run written as a Chrome trace as it goes, into a
//! new file in a private temporary folder next to FILE, renamed onto FILE once the run and the
//! trace are complete (before anything is printed). A FILE directly inside the `--out` folder
//! is written into that folder's staging area and lands with the report (which replaces the
//! folder as a whole, so a trace written there first would be lost).

use std::fs::OpenOptions;
use std::io::BufWriter;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Result};

use servesim::report::atomic::{ReportDir, MANIFEST};
use servesim::report::chrome_trace::{ChromeTrace, DEFAULT_MAX_TRACE_EVENTS};
use servesim::report::write_atomic_with;
use servesim::sim::TraceSink;
use servesim::Error;

/// Where the trace of `--trace-events FILE` is written, checked before any work: FILE itself
/// ([`super::check_out_file`]), or, when FILE lies directly in the `--out` folder, the same
/// name in the report's staging folder. A FILE deeper inside the `--out` folder, or one named
/// like a file the report writes (`report_files`), is an error.
pub fn begin(
    file: Option<&Path>,
    out: Option<&ReportDir>,
    report_files: &[&str],
) -> Result<Option<PathBuf>> {
    let Some(file) = file else {
        return Ok(None);
    };
    let flag = "--trace-events";
    let bad = |why: &str| Error::config(flag, file.display().to_string(), why);
    let Some(out) = out else {
        super::check_out_file(flag, file)?;
        return Ok(Some(file.to_path_buf()));
    };
    let (target, at) = (resolved(out.target()), resolved(file));
    if !at.starts_with(&target) {
        super::check_out_file(flag, file)?;
        return Ok(Some(file.to_path_buf()));
    }
    let name = match at
        .strip_prefix(&target)
        .map(|r| r.components().collect::<Vec<_>>())
    {
        Ok(c) if c.len() == 1 => c[0].as_os_str().to_os_string(),
        _ => bail!(bad(
            "lies inside the --out folder, which is replaced as a whole; give a file directly \
             in it or outside it"
        )),
    };
    if name == MANIFEST || report_files.iter().any(|f| name == *f) {
        bail!(bad("names a file of the --out report; give another name"));
    }
    Ok(Some(out.path().join(name)))
}

/// `path` made absolute (`.` dropped, `..` applied to the part before it), with its links
/// resolved as far as it exists, so two spellings of one place compare equal.
fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut lexical = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                lexical.pop();
            }
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    let mut out = loop {
        if let Ok(c) = existing.canonicalize() {
            break c;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(p), Some(n)) => {
                rest.push(n);
                existing = p;
            }
            _ => break existing.to_path_buf(),
        }
    };
    out.extend(rest.into_iter().rev());
    out
}

/// Runs `run` with a Chrome trace into `path` when there is one (`None` otherwise); warns on
/// stderr when the trace was capped.
pub fn with_trace<T>(
    path: Option<&Path>,
    run: impl FnOnce(Option<&mut dyn TraceSink>) -> servesim::Result<T>,
) -> Result<T> {
    let Some(path) = path else {
        return Ok(run(None)?);
    };
    let mut result = None;
    write_atomic_with(path, |tmp| {
        // A new file in write_atomic_with's private folder, created exclusively.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(|e| Error::io(tmp, e))?;
        let mut trace = ChromeTrace::new(BufWriter::new(file), DEFAULT_MAX_TRACE_EVENTS)
            .map_err(|e| Error::io(path, e))?;
        result = Some(run(Some(&mut trace))?);
        let stats = trace.finish().map_err(|e| Error::io(path, e))?;
        if stats.dropped > 0 {
            eprintln!(
                "warning: {}: the trace holds the first {} events; {} more were left out",
                path.display(),
                stats.written,
                stats.dropped
            );
        }
        Ok(())
    })?;
    Ok(result.expect("the run succeeded"))
}
