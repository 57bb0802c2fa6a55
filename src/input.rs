//! Reading input files with a size cap: every file servesim reads (scenarios, model configs,
//! GPU and engine profiles, length and trace files, measurement, reference and result files)
//! goes through here, so that a wrong path (`/dev/zero`, a disk image) fails at once with an
//! error naming the file and the cap instead of growing without bound.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// What a file is, and the most bytes servesim reads of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A scenario, a model's config.json, a GPU or engine profile: 16 MiB.
    Config,
    /// A length file, a measurement or reference CSV, a sweep's shard output: 256 MiB.
    Table,
    /// A benchmark result file (`vllm bench serve --save-result`, with per-request arrays):
    /// 1 GiB.
    Result,
    /// A request trace, read as a stream: 4 GiB (a month of the Azure trace is about 1 GB), and
    /// at most 1 MiB in any one line.
    Trace,
}

impl InputKind {
    /// The most bytes read of one file of this kind.
    pub fn cap_bytes(self) -> u64 {
        match self {
            InputKind::Config => 16 << 20,
            InputKind::Table => 256 << 20,
            InputKind::Result => 1 << 30,
            InputKind::Trace => 4 << 30,
        }
    }

    fn label(self) -> &'static str {
        match self {
            InputKind::Config => "a configuration file",
            InputKind::Table => "a table file",
            InputKind::Result => "a result file",
            InputKind::Trace => "a trace",
        }
    }
}

/// The most bytes in one line of a streamed file ([`open_lines`]).
pub const MAX_LINE_BYTES: usize = 1 << 20;

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn too_large(kind: InputKind) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "is larger than {}, the most servesim reads of {}; is it the right file?",
            human(kind.cap_bytes()),
            kind.label()
        ),
    )
}

/// Reads a whole text file of `kind`; an error naming the file when it cannot be read, is not
/// UTF-8, or is larger than the kind's cap (found after reading at most the cap plus one byte).
pub fn read_to_string(path: &Path, kind: InputKind) -> Result<String> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let cap = kind.cap_bytes();
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(Error::io(path, too_large(kind)));
    }
    String::from_utf8(bytes).map_err(|_| {
        Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ),
        )
    })
}

/// Opens a file of `kind` to be read as a stream of lines: the reader fails once it has given
/// the kind's cap, or a line longer than [`MAX_LINE_BYTES`] (its errors say why; the parser
/// that reports them names the file).
pub fn open_lines(path: &Path, kind: InputKind) -> Result<impl Read> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(Capped {
        inner: BufReader::new(file),
        left: kind.cap_bytes(),
        line: 0,
        kind,
    })
}

/// A reader that stops with an error past a total and a per-line number of bytes.
struct Capped<R> {
    inner: BufReader<R>,
    left: u64,
    line: usize,
    kind: InputKind,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let avail = self.inner.fill_buf()?;
        let n = avail.len().min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        if n as u64 > self.left {
            return Err(too_large(self.kind));
        }
        buf[..n].copy_from_slice(&avail[..n]);
        self.inner.consume(n);
        self.left -= n as u64;
        match buf[..n].iter().rposition(|&b| b == b'\n') {
            Some(i) => self.line = n - 1 - i,
            None => self.line += n,
        }
        if self.line > MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "has a line longer than {} MiB; is it the right file?",
                    MAX_LINE_BYTES >> 20
                ),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn dev_zero_fails_fast_naming_the_file_and_the_cap() {
        let t = std::time::Instant::now();
        let e = read_to_string(Path::new("/dev/zero"), InputKind::Config).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/dev/zero") && msg.contains("16 MiB"), "{msg}");
        let mut r = open_lines(Path::new("/dev/zero"), InputKind::Trace).unwrap();
        let mut sink = Vec::new();
        let e = r.read_to_end(&mut sink).unwrap_err();
        assert!(e.to_string().contains("longer than 1 MiB"), "{e}");
        assert!(sink.len() <= 2 * MAX_LINE_BYTES);
        assert!(t.elapsed().as_secs() < 10);
    }

    #[test]
    fn small_files_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.csv");
        std::fs::write(&p, "a,b\n1,2\n").unwrap();
        assert_eq!(read_to_string(&p, InputKind::Table).unwrap(), "a,b\n1,2\n");
        let mut s = String::new();
        open_lines(&p, InputKind::Trace)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "a,b\n1,2\n");
        let e = read_to_string(&dir.path().join("none"), InputKind::Table).unwrap_err();
        assert!(e.to_string().contains("none"));
    }
}
