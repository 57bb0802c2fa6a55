//! What a run shows a trace: each replica's iterations and its queue and KV cache over time.
//!
//! The simulator calls a [`TraceSink`] as it goes (nothing when there is none); a sink
//! decides what to keep and how to write it (src/report/chrome_trace.rs writes the Chrome
//! trace-event format that chrome://tracing and Perfetto open). A fast-forwarded run of
//! decode-only iterations reaches the sink as one span with its iteration count.

/// The role of a replica's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRole {
    /// A colocated replica (prefills and decodes).
    Colocated,
    /// A replica of a disaggregated deployment's prefill pool.
    Prefill,
    /// A replica of a disaggregated deployment's decode pool.
    Decode,
}

impl PoolRole {
    /// Lower-case name ("replica", "prefill", "decode").
    pub fn name(self) -> &'static str {
        match self {
            PoolRole::Colocated => "replica",
            PoolRole::Prefill => "prefill",
            PoolRole::Decode => "decode",
        }
    }
}

/// One engine iteration of a replica, or a fast-forwarded run of identical-batch decode
/// iterations (`iterations > 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSpan {
    /// The replica's pool.
    pub pool: PoolRole,
    /// The replica's slot in its pool.
    pub replica: u32,
    /// Start of the first iteration, ns.
    pub start_ns: u64,
    /// End of the last iteration, ns.
    pub end_ns: u64,
    /// Iterations in the span (1 unless fast-forwarded).
    pub iterations: u64,
    /// Decoding requests of each iteration (one token each).
    pub decodes: u32,
    /// Requests with a prefill chunk (0 in a fast-forwarded run).
    pub prefill_seqs: u32,
    /// Prompt tokens of those chunks.
    pub prefill_tokens: u64,
}

/// A replica's queue and KV cache at an instant (after an iteration ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceOccupancy {
    /// The replica's pool.
    pub pool: PoolRole,
    /// The replica's slot in its pool.
    pub replica: u32,
    /// When, ns.
    pub at_ns: u64,
    /// Requests waiting to be admitted.
    pub waiting: u64,
    /// Requests admitted (prefilling or decoding).
    pub running: u64,
    /// KV blocks in use.
    pub kv_used_blocks: u64,
    /// KV-cache capacity, blocks.
    pub kv_blocks: u64,
}

/// Receives what a run does, as it does it (in event order).
pub trait TraceSink {
    /// A replica finished an iteration or a fast-forwarded run.
    fn span(&mut self, span: &TraceSpan);
    /// A replica's queue and cache after its iteration ended.
    fn occupancy(&mut self, occupancy: &TraceOccupancy);
}
