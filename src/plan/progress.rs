//! What a plan reports as it goes, for a progress bar: the library counts its steps and names
//! its stages; the command draws (or not).

/// Receives a plan's progress. Every method defaults to nothing.
pub trait Progress: Sync {
    /// `n` more steps of work are now known.
    fn add(&self, _n: u64) {}
    /// `n` steps are done.
    fn done(&self, _n: u64) {}
    /// The stage now running, for people (e.g. "fleet sizing").
    fn stage(&self, _what: &str) {}
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
