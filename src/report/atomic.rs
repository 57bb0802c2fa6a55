//! Atomic file writes: a report file is either absent, the previous version, or complete.
//!
//! Every exporter writes through [`write_atomic`] or [`write_atomic_with`]: the content goes to
//! a temporary file in the destination's directory (same file system, so the final `rename` is
//! atomic), is flushed to disk, and only then replaces the destination. On any error the
//! temporary file is removed and the destination is left as it was.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Distinguishes temporary files of concurrent writes from the same process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically (temporary file in the same directory, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |tmp| {
        let mut file = fs::File::create(tmp).map_err(|e| Error::io(tmp, e))?;
        file.write_all(bytes).map_err(|e| Error::io(tmp, e))?;
        Ok(())
    })
}

/// Lets `write` create the file at a temporary path in `path`'s directory, then renames it onto
/// `path`.
///
/// The temporary path keeps `path`'s extension (libraries such as the PNG encoder choose the
/// format from it). If `write` fails, or leaves no file behind, or the rename fails, the
/// temporary file is removed, `path` is untouched, and the error is returned.
pub fn write_atomic_with(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = temp_path_for(path)?;
    let result = write(&tmp).and_then(|()| {
        // Flush the data before the rename makes it visible, so a crash cannot leave a
        // destination that names a file with missing content.
        let file = fs::File::open(&tmp).map_err(|e| Error::io(&tmp, e))?;
        file.sync_all().map_err(|e| Error::io(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    });
    if result.is_err() {
        // Best effort: the temporary file may not exist if `write` failed before creating it.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `dir/.name.tmp<pid>-<n>.ext` next to `path`; an error if `path` names no file.
fn temp_path_for(path: &Path) -> Result<PathBuf> {
    let invalid = || {
        Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output path does not name a file",
            ),
        )
    };
    let file_name = path.file_name().ok_or_else(invalid)?;
    let stem = Path::new(file_name)
        .file_stem()
        .ok_or_else(invalid)?
        .to_string_lossy();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = format!(".{stem}.tmp{}-{n}", std::process::id());
    if let Some(ext) = Path::new(file_name).extension() {
        tmp_name.push('.');
        tmp_name.push_str(&ext.to_string_lossy());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(dir.join(tmp_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn writes_bytes_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        write_atomic(&path, b"[1]").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"[1]");
        assert_eq!(entries(dir.path()), vec!["out.json".to_string()]);
    }

    #[test]
    fn temp_path_keeps_extension_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.png");
        write_atomic_with(&path, |tmp| {
            assert_eq!(tmp.parent(), Some(dir.path()));
            assert_eq!(tmp.extension().and_then(|e| e.to_str()), Some("png"));
            fs::write(tmp, b"x").map_err(|e| Error::io(tmp, e))
        })
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"x");
    }

    #[test]
    fn failure_leaves_no_file_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        let err = write_atomic_with(&path, |tmp| {
            fs::write(tmp, b"partial").map_err(|e| Error::io(tmp, e))?;
            Err(Error::Internal("encoder failed".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("encoder failed"));
        assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
    }

    #[test]
    fn failure_keeps_previous_destination() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        write_atomic(&path, b"old").unwrap();
        let _ = write_atomic_with(&path, |tmp| {
            fs::write(tmp, b"new but broken").map_err(|e| Error::io(tmp, e))?;
            Err(Error::Internal("boom".into()))
        });
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), vec!["out.csv".to_string()]);
    }

    #[test]
    fn closure_that_writes_nothing_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        assert!(write_atomic_with(&path, |_| Ok(())).is_err());
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn missing_directory_and_bad_path_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.csv");
        assert!(matches!(write_atomic(&path, b"x"), Err(Error::Io { .. })));
        assert!(write_atomic(Path::new("/"), b"x").is_err());
        assert!(write_atomic(Path::new(".."), b"x").is_err());
    }
}
