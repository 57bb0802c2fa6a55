//! Atomic writes: a report file is either absent, the previous version, or complete, and a
//! report folder is either the previous set of files or the new one, never a mix.
//!
//! - [`write_atomic`] writes a file's bytes to a temporary file in the destination's folder
//!   (same file system, so the final `rename` is atomic), flushes it to disk, and renames it
//!   over the destination. [`write_atomic_with`] does the same for a library that creates the
//!   file itself from a path (the PNG encoder), inside a private temporary folder.
//! - Temporary files and folders have unpredictable names and are created exclusively
//!   (`O_CREAT | O_EXCL`, which does not follow a symbolic link), so a link planted at a
//!   temporary name cannot redirect a write outside the output folder; the rename replaces a
//!   link planted at the destination itself instead of writing through it.
//! - [`ReportDir`] stages a whole report folder and swaps it in at once (see there).
//!
//! On any error the temporary file or folder is removed and the destination is left as it was.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The file in a report folder that lists the files one command wrote there (one name a
/// line), so that the next command may replace the folder as a whole.
pub const MANIFEST: &str = ".servesim-files";

/// The file present in a report folder while its files are being replaced one by one (a
/// folder that also holds files servesim did not write): the set is incomplete while it
/// exists.
pub const INCOMPLETE: &str = ".servesim-incomplete";

/// Tries before giving up on finding an unused temporary name (each is 64 random bits).
const NAME_TRIES: usize = 16;

/// 16 hexadecimal digits from the operating system's random source.
fn unpredictable() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The folder holding `path`, `.` for a bare file name.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The file name of `path`; an error when it names no file (`/`, `..`).
fn file_name_of(path: &Path) -> Result<&std::ffi::OsStr> {
    path.file_name().ok_or_else(|| {
        Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output path does not name a file",
            ),
        )
    })
}

/// `.NAME.RANDOM.tmp` (plus `suffix`) in `dir`.
fn temp_name(dir: &Path, name: &std::ffi::OsStr, suffix: &str) -> PathBuf {
    let mut n = OsString::from(".");
    n.push(name);
    n.push(format!(".{}.tmp{suffix}", unpredictable()));
    dir.join(n)
}

/// Creates a new file next to `path` under an unused unpredictable name, exclusively.
fn create_temp_file(path: &Path) -> Result<(fs::File, PathBuf)> {
    let (dir, name) = (parent_of(path), file_name_of(path)?);
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let tmp = temp_name(&dir, name, "");
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Error::io(&tmp, e)),
        }
    }
    Err(Error::io(
        path,
        last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()),
    ))
}

/// Creates a new folder next to `path` under an unused unpredictable name, exclusively
/// (private to the user where the platform allows).
fn create_temp_dir(path: &Path, suffix: &str) -> Result<PathBuf> {
    let (dir, name) = (parent_of(path), file_name_of(path)?);
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let tmp = temp_name(&dir, name, suffix);
        let mut b = fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        match b.create(&tmp) {
            Ok(()) => return Ok(tmp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Error::io(&tmp, e)),
        }
    }
    Err(Error::io(
        path,
        last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()),
    ))
}

/// Writes `bytes` to `path` atomically (an exclusive temporary file in the same folder, then
/// rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let (mut file, tmp) = create_temp_file(path)?;
    let result = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(&tmp, e))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| Error::io(path, e)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Lets `write` create the file at a temporary path, then renames it onto `path`.
///
/// The temporary path lies in a new private folder next to `path` and keeps `path`'s file
/// name (libraries such as the PNG encoder choose the format from the extension), so a
/// library that opens it with an ordinary create cannot be redirected by a planted link. If
/// `write` fails, or leaves no regular file behind, or the rename fails, the temporary folder
/// is removed, `path` is untouched, and the error is returned.
pub fn write_atomic_with(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let dir = create_temp_dir(path, "dir")?;
    let tmp = dir.join(file_name_of(path)?);
    let result = write(&tmp).and_then(|()| {
        let meta = fs::symlink_metadata(&tmp).map_err(|e| Error::io(&tmp, e))?;
        if !meta.is_file() {
            return Err(Error::Internal(format!(
                "{}: the writer left no regular file",
                path.display()
            )));
        }
        // Flush the data before the rename makes it visible, so a crash cannot leave a
        // destination that names a file with missing content.
        let file = fs::File::open(&tmp).map_err(|e| Error::io(&tmp, e))?;
        file.sync_all().map_err(|e| Error::io(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    });
    let _ = fs::remove_dir_all(&dir);
    result
}

/// Checks before any work that a file can be created in `dir`: creates an exclusive
/// temporary file there and removes it. The error names `dir` and says why (a read-only
/// file system, no permission).
pub fn probe_writable(dir: &Path) -> Result<()> {
    let probe = dir.join("servesim-probe");
    let (file, tmp) = create_temp_file(&probe)?;
    drop(file);
    fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, e))
}

/// How a [`ReportDir`] puts its files in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Files are staged in a fresh folder next to the target, which replaces the target by
    /// rename: readers see the old set or the new one. Used when the target does not exist or
    /// holds only files servesim wrote (its manifest lists them).
    Swap,
    /// The target holds other files too (or its parent cannot be written): files are staged
    /// in a fresh folder inside it and moved over the old ones one by one, while
    /// [`INCOMPLETE`] marks the set as incomplete.
    InPlace,
}

/// A report folder written as a whole.
///
/// [`ReportDir::begin`] (before any work) creates a fresh, private, unpredictably named
/// staging folder, which also proves the output location writable; the command writes its
/// files into [`ReportDir::path`]; [`ReportDir::commit`] puts them in place:
///
/// - the target does not exist, or holds only the files the last servesim command listed in
///   its [`MANIFEST`]: the staging folder, with its own manifest, is renamed over the target
///   (the old folder is first renamed aside and then removed), so an interruption leaves the
///   old set or the new one, never a mix;
/// - the target holds files servesim did not write: the staged files are moved in one by one
///   over the old ones, files of the old manifest that the new set lacks are removed, and an
///   [`INCOMPLETE`] file marks the folder while this happens.
///
/// Dropped without a commit (an error, a panic), it removes the staging folder and any parent
/// folders `begin` created, so a failed command leaves nothing behind.
#[derive(Debug)]
pub struct ReportDir {
    target: PathBuf,
    staging: PathBuf,
    mode: Mode,
    /// Folders `begin` created above the target (deepest last), removed again on failure.
    created: Vec<PathBuf>,
    done: bool,
}

impl ReportDir {
    /// Prepares to write the folder `target`; `flag` names it in errors (`--out`). Fails before
    /// any work when `target` is not a folder or its location cannot be written.
    pub fn begin(flag: &str, target: &Path) -> Result<ReportDir> {
        let bad = |why: String| Error::config(flag, target.display().to_string(), why);
        let meta = fs::symlink_metadata(target).ok();
        if let Some(m) = &meta {
            if !m.file_type().is_symlink() && !m.is_dir() {
                return Err(bad("exists and is not a folder".into()));
            }
        }
        let parent = parent_of(target);
        let mut created = Vec::new();
        if let Some(a) = parent.ancestors().find(|a| a.exists()) {
            if !a.is_dir() {
                return Err(bad(format!("{} is not a folder", a.display())));
            }
        }
        for a in parent.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if a.as_os_str().is_empty() || a.exists() {
                continue;
            }
            fs::create_dir(a).map_err(|e| bad(format!("cannot create {}: {e}", a.display())))?;
            created.push(a.to_path_buf());
        }
        let mut dir = ReportDir {
            target: target.to_path_buf(),
            staging: PathBuf::new(),
            mode: Mode::Swap,
            created,
            done: false,
        };
        // A link at the target is replaced by the new folder, not written through: an output
        // path is never left a link the run did not make.
        let swappable = match &meta {
            None => true,
            Some(m) if m.file_type().is_symlink() => true,
            Some(_) => only_servesim_files(target),
        };
        let sibling = if swappable {
            create_temp_dir(target, "new")
        } else {
            Err(Error::Internal(String::new()))
        };
        match sibling {
            Ok(s) => dir.staging = s,
            Err(sibling_err) => {
                let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
                if !is_dir {
                    return Err(bad(format!("cannot write here: {}", reason(&sibling_err))));
                }
                dir.mode = Mode::InPlace;
                dir.staging = create_temp_dir(&target.join("servesim"), "new")
                    .map_err(|e| bad(format!("cannot write here: {}", reason(&e))))?;
            }
        }
        Ok(dir)
    }

    /// The folder to write the report's files into now.
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// The folder the report will be in.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Puts the staged files in place (see [`ReportDir`]); returns the target.
    pub fn commit(mut self) -> Result<PathBuf> {
        let names = staged_names(&self.staging)?;
        let mut manifest = names.join("\n");
        manifest.push('\n');
        write_atomic(&self.staging.join(MANIFEST), manifest.as_bytes())?;
        match self.mode {
            Mode::Swap => self.swap()?,
            Mode::InPlace => self.move_in(&names)?,
        }
        self.done = true;
        Ok(self.target.clone())
    }

    /// Renames the staging folder over the target (the old one renamed aside first).
    fn swap(&mut self) -> Result<()> {
        // The staging folder was made private; the report gets the permissions of the folder
        // it replaces, or those a new folder gets here.
        let perms = match fs::metadata(&self.target) {
            Ok(m) => Some(m.permissions()),
            Err(_) => default_dir_permissions(&self.target),
        };
        if let Some(p) = perms {
            fs::set_permissions(&self.staging, p).map_err(|e| Error::io(&self.staging, e))?;
        }
        let meta = fs::symlink_metadata(&self.target);
        let Ok(meta) = meta else {
            return fs::rename(&self.staging, &self.target).map_err(|e| Error::io(&self.target, e));
        };
        // A link is replaced, whatever it points at; a folder that gained other files since
        // `begin` keeps them: then the files move in one by one.
        if !meta.file_type().is_symlink() && !only_servesim_files(&self.target) {
            let names = staged_names(&self.staging)?;
            return self.move_in(&names);
        }
        let old = create_temp_dir(&self.target, "old")?;
        fs::remove_dir(&old).map_err(|e| Error::io(&old, e))?;
        if fs::rename(&self.target, &old).is_err() {
            // A mount point, say: it cannot move, so its files are replaced in place.
            let names = staged_names(&self.staging)?;
            return self.move_in(&names);
        }
        if let Err(e) = fs::rename(&self.staging, &self.target) {
            // Put the old folder back: the target stays as it was.
            let _ = fs::rename(&old, &self.target);
            return Err(Error::io(&self.target, e));
        }
        let _ = fs::remove_dir_all(&old);
        Ok(())
    }

    /// Moves the staged files into the target one by one under the [`INCOMPLETE`] mark.
    fn move_in(&mut self, names: &[String]) -> Result<()> {
        let mark = self.target.join(INCOMPLETE);
        write_atomic(
            &mark,
            b"servesim is replacing the files of this report folder; until this file is gone \
              they are a mix of two reports\n",
        )?;
        let old: Vec<String> = fs::read_to_string(self.target.join(MANIFEST))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default();
        for n in names.iter().map(String::as_str).chain([MANIFEST]) {
            let to = self.target.join(n);
            fs::rename(self.staging.join(n), &to).map_err(|e| Error::io(&to, e))?;
        }
        for stale in old
            .iter()
            .filter(|o| !names.contains(o) && is_plain_name(o))
        {
            let _ = fs::remove_file(self.target.join(stale));
        }
        let _ = fs::remove_dir_all(&self.staging);
        fs::remove_file(&mark).map_err(|e| Error::io(&mark, e))
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let _ = fs::remove_dir_all(&self.staging);
        for d in self.created.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

/// The permissions a folder created next to `path` gets (the process's umask applied), found
/// by creating one and removing it.
fn default_dir_permissions(path: &Path) -> Option<fs::Permissions> {
    let (dir, name) = (parent_of(path), file_name_of(path).ok()?);
    let probe = temp_name(&dir, name, "mode");
    fs::create_dir(&probe).ok()?;
    let perms = fs::metadata(&probe).map(|m| m.permissions()).ok();
    let _ = fs::remove_dir(&probe);
    perms
}

/// The operating system's reason of an I/O error, without the temporary path it names.
fn reason(e: &Error) -> String {
    match e {
        Error::Io { err, .. } => err.to_string(),
        other => other.to_string(),
    }
}

/// A file name with no folder part (a manifest line that may be removed).
fn is_plain_name(n: &str) -> bool {
    !n.is_empty() && Path::new(n).file_name().is_some_and(|f| f == n) && n != MANIFEST
}

/// The names in the staging folder, sorted (the manifest excluded).
fn staged_names(staging: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in fs::read_dir(staging).map_err(|e| Error::io(staging, e))? {
        let e = e.map_err(|e| Error::io(staging, e))?;
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| Error::Internal(format!("a report file name is not UTF-8: {n:?}")))?;
        if name != MANIFEST {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether every entry of the folder `dir` is listed in its manifest (or is the manifest):
/// the folder holds only what the last servesim command wrote. An empty folder qualifies.
fn only_servesim_files(dir: &Path) -> bool {
    let listed: Vec<String> = fs::read_to_string(dir.join(MANIFEST))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let Ok(rd) = fs::read_dir(dir) else {
        return false;
    };
    rd.filter_map(|e| e.ok()).all(|e| {
        let n = e.file_name();
        n == MANIFEST || n.to_str().is_some_and(|s| listed.iter().any(|l| l == s))
    })
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
    fn temp_path_keeps_file_name_in_a_private_folder_next_to_the_destination() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.png");
        let mut seen = PathBuf::new();
        write_atomic_with(&path, |tmp| {
            assert_eq!(tmp.parent().and_then(Path::parent), Some(dir.path()));
            assert_eq!(tmp.file_name().and_then(|e| e.to_str()), Some("plot.png"));
            seen = tmp.to_path_buf();
            fs::write(tmp, b"x").map_err(|e| Error::io(tmp, e))
        })
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"x");
        assert!(!seen.exists());
        assert_eq!(entries(dir.path()), vec!["plot.png".to_string()]);
    }

    #[test]
    fn temporary_names_are_unpredictable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        let (_, a) = create_temp_file(&path).unwrap();
        let (_, b) = create_temp_file(&path).unwrap();
        assert_ne!(a, b);
        // Neither is the old `.NAME.tmp<pid>-<n>` pattern.
        let pid = format!("tmp{}-", std::process::id());
        for p in [&a, &b] {
            assert!(!p.to_string_lossy().contains(&pid), "{}", p.display());
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_a_temporary_name_is_not_followed() {
        // The writer must create its temporary file itself: an existing entry (here a link to
        // a file outside the folder) is never opened.
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("out.json");
        let tmp = temp_name(dir.path(), std::ffi::OsStr::new("out.json"), "");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let e = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_the_destination_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("summary.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(!fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        let png = dir.path().join("plot.png");
        std::os::unix::fs::symlink(&victim, &png).unwrap();
        write_atomic_with(&png, |tmp| {
            fs::write(tmp, b"x").map_err(|e| Error::io(tmp, e))
        })
        .unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(!fs::symlink_metadata(&png).unwrap().file_type().is_symlink());
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

    fn stage(target: &Path, files: &[(&str, &str)]) -> ReportDir {
        let r = ReportDir::begin("--out", target).unwrap();
        for (n, text) in files {
            write_atomic(&r.path().join(n), text.as_bytes()).unwrap();
        }
        r
    }

    #[test]
    fn a_report_folder_is_swapped_in_whole() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("report");
        stage(&target, &[("a.json", "1"), ("b.png", "1"), ("c.csv", "1")])
            .commit()
            .unwrap();
        assert_eq!(entries(&target), [MANIFEST, "a.json", "b.png", "c.csv"]);
        // A second report with other files replaces the set: no stale c.csv beside it.
        let r = stage(&target, &[("a.json", "2"), ("d.svg", "2")]);
        // Until the commit, the old set is untouched and the new one is elsewhere.
        assert_eq!(fs::read_to_string(target.join("a.json")).unwrap(), "1");
        r.commit().unwrap();
        assert_eq!(entries(&target), [MANIFEST, "a.json", "d.svg"]);
        assert_eq!(fs::read_to_string(target.join("a.json")).unwrap(), "2");
        // Nothing else is left next to it.
        assert_eq!(entries(root.path()), ["report"]);
        // The report has the permissions of an ordinary new folder, not the private staging's.
        let plain = root.path().join("plain");
        fs::create_dir(&plain).unwrap();
        assert_eq!(
            fs::metadata(&target).unwrap().permissions(),
            fs::metadata(&plain).unwrap().permissions()
        );
    }

    #[test]
    fn an_abandoned_report_leaves_the_old_folder_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("report");
        stage(&target, &[("a.json", "1")]).commit().unwrap();
        drop(stage(&target, &[("a.json", "2"), ("b.csv", "2")]));
        assert_eq!(entries(&target), [MANIFEST, "a.json"]);
        assert_eq!(fs::read_to_string(target.join("a.json")).unwrap(), "1");
        assert_eq!(entries(root.path()), ["report"]);
        // A new folder below missing parents: a failure removes the parents it made.
        let deep = root.path().join("x/y/report");
        drop(stage(&deep, &[("a.json", "1")]));
        assert_eq!(entries(root.path()), ["report"]);
    }

    #[test]
    fn a_folder_with_other_files_keeps_them_and_is_marked_while_replaced() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("work");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("notes.txt"), "mine").unwrap();
        stage(&target, &[("a.json", "1"), ("c.csv", "1")])
            .commit()
            .unwrap();
        assert_eq!(entries(&target), [MANIFEST, "a.json", "c.csv", "notes.txt"]);
        let r = stage(&target, &[("a.json", "2")]);
        // The staging folder is inside, hidden; the marker appears only during the commit.
        assert!(!target.join(INCOMPLETE).exists());
        r.commit().unwrap();
        assert_eq!(entries(&target), [MANIFEST, "a.json", "notes.txt"]);
        assert_eq!(
            fs::read_to_string(target.join("notes.txt")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn begin_refuses_a_file_and_an_unwritable_place_before_any_work() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f");
        fs::write(&file, "x").unwrap();
        let e = ReportDir::begin("--out", &file).unwrap_err();
        assert!(e.to_string().contains("exists and is not a folder"), "{e}");
        let below = file.join("sub");
        let e = ReportDir::begin("--out", &below).unwrap_err();
        assert!(e.to_string().contains("is not a folder"), "{e}");
        assert!(e.is_input_error());
    }
}
