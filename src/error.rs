//! The library's error type: every failure says what input was wrong, where, and why.

use std::path::PathBuf;

/// An error from servesim's library. Input errors map to exit code 2 at the command line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is invalid: `source_name: key.path: reason`.
    #[error("{source_name}: {key}: {reason}")]
    Config {
        /// Where the value came from (a file path, `--set`, a flag, or `<embedded default>`).
        source_name: String,
        /// The dotted key path of the offending value.
        key: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A file could not be parsed (TOML, CSV, JSON); the message carries line and column.
    #[error("{path}: {message}")]
    Parse {
        /// The file that failed to parse.
        path: String,
        /// The parser's message, with line and column where known.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {err}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The operating system's error (shown in the message, so not also a cause).
        err: std::io::Error,
    },
    /// A named catalog entry (model, GPU, engine, dataset) does not exist.
    #[error("unknown {kind} '{name}'; known: {known}")]
    Unknown {
        /// What kind of entry was asked for ("model", "gpu", ...).
        kind: &'static str,
        /// The name that was asked for.
        name: String,
        /// The names that exist, comma separated.
        known: String,
    },
    /// The deployment cannot run the model (does not fit, TP does not divide heads, ...).
    #[error("{0}")]
    Infeasible(String),
    /// The requested feature is not available in this build or on this machine.
    #[error("{0}")]
    Unavailable(String),
    /// An internal failure that is not the user's input (a bug, or a failed GPU call).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// Shorthand for a [`Error::Config`] error.
    pub fn config(
        source_name: impl Into<String>,
        key: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Config {
            source_name: source_name.into(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`Error::Io`] error.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            err: source,
        }
    }

    /// True when the error is the user's input (exit code 2) rather than an internal failure.
    pub fn is_input_error(&self) -> bool {
        !matches!(self, Error::Internal(_))
    }
}

/// Checks that a name read from the input (a scenario's, a model's, a GPU's, an engine's) has
/// no control character: names are printed in tables, logs and re-run lines, where a CR or LF
/// would forge or overwrite lines. The error names `origin` and `key`.
pub fn check_printable(origin: &str, key: &str, name: &str) -> Result<()> {
    match name.chars().find(|c| c.is_control()) {
        Some(c) => Err(Error::config(
            origin,
            key,
            format!("must not contain control characters, got {c:?} in {name:?}"),
        )),
        None => Ok(()),
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
