//! Discrete-event simulation of a serving cluster: arrivals → router → replicas (continuous
//! batching, paged KV cache, preemption, prefix caching, SLO enforcement) → streaming metrics.
//!
//! One event loop ([`cluster`]) of typed events ([`event`]) drives every cluster kind: the
//! colocated replicas, or a prefill pool and a decode pool with the KV links between them
//! ([`disaggregated`]); the fleet's controllers (autoscaler, failures) are events of the same
//! loop. Time is integer nanoseconds; events are ordered by time, iteration ends before control
//! events, then by replica or sequence number, so a run is bit-for-bit reproducible for a
//! seed. A decode iteration costs O(1) amortised in the batch size: every decoding request
//! gains one token per iteration, so its finishing iteration is known when it starts decoding,
//! the sum of contexts grows by the batch size, and the requests that need a new KV block in an
//! iteration are counted by their block phase; between two events that change a batch, its
//! iterations are booked in bulk (the fast-forward, src/sim/replica/fast_forward.rs). The
//! simulator depends on the step-time contract of [`crate::step_time`], not on a model's
//! internals. The invariants it keeps are numbered in docs/invariants.md and checked in debug
//! builds as it runs ([`invariants`]).

mod cluster;
mod disaggregated;
mod event;
mod fleet;
mod invariants;
mod replica;
mod request;
mod router;
mod trace;

pub use cluster::{simulate, simulate_traced};
pub use disaggregated::simulate_disaggregated;
pub use fleet::{AutoscaleConfig, AutoscalePolicy, FailureAt, FaultConfig, OnFailure};
pub use replica::{ContentTokens, OffloadConfig};
pub use router::RouterKind;
pub use trace::{PoolRole, TraceOccupancy, TraceSink, TraceSpan};

use serde::Serialize;

use crate::metrics::{Metrics, TimeSeries};

/// Scheduler settings of one replica, resolved from the engine profile and the scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedulerConfig {
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Token budget of one iteration.
    pub max_num_batched_tokens: u32,
    /// Whether prompts may be split across iterations.
    pub chunked_prefill: bool,
    /// Whether shared prefixes are served from cached KV blocks.
    pub prefix_caching: bool,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV-cache capacity, blocks.
    pub kv_blocks: u64,
    /// Longest prompt plus output a request may have, tokens; longer requests are rejected.
    pub max_model_len: u32,
    /// Static batching baseline: admit a new batch only when the previous one has finished.
    pub static_batching: bool,
    /// Reserve KV for the whole output at admission (no preemption; fewer requests fit).
    pub reserve_output_kv: bool,
    /// Speculative decoding: KV slots a decoding sequence holds beyond its context (its
    /// draft tokens and the engine's lookahead slots; src/speculative.rs); 0 without.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub spec_kv_slots: u32,
    /// KV offloading to host memory (vLLM's `--kv-offloading-size`); `None` without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadConfig>,
    /// Speculative decoding: decode-only iterations of at most this many sequences speculate
    /// (the step-time model's `disable_above_seqs`); 0 without speculation. Counted, not
    /// priced: the step-time model prices the same rule.
    #[serde(skip)]
    pub spec_max_batch_seqs: u32,
    /// The engine plans iteration k+1 while iteration k runs (vLLM's asynchronous
    /// scheduling, SGLang's and TensorRT-LLM's overlap schedulers): a request queued after
    /// iteration k started joins iteration k+2 at the earliest, unless k+1 would otherwise be
    /// empty (docs/scenarios.md, "Planning ahead"). Set from the engine profile.
    #[serde(skip)]
    pub plans_ahead: bool,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// SLO thresholds and the policies that enforce them during the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SloPolicy {
    /// TTFT threshold, ns (a request is "good" only if it meets every threshold set).
    pub ttft_ns: Option<u64>,
    /// TPOT threshold, ns.
    pub tpot_ns: Option<u64>,
    /// E2E threshold, ns.
    pub e2e_ns: Option<u64>,
    /// Reject a request at arrival when its predicted TTFT already misses `ttft_ns`.
    pub admission_control: bool,
    /// A client gives up when it has waited this long without a first token, ns.
    pub queue_timeout_ns: Option<u64>,
}

/// Hard limits on one run; hitting one ends the run and is reported, never silent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// Simulated time limit, ns.
    pub max_sim_time_ns: u64,
    /// Event limit (arrivals + iterations).
    pub max_events: u64,
    /// Fast-forward runs of decode-only iterations in closed form (the same results as
    /// timing each iteration on its own, which `false` does: the oracle).
    pub fast_forward: bool,
}

impl Limits {
    /// Why a run stops at event number `n_events`, at `now_ns`: the limit it reached, or
    /// `None` while it may go on.
    pub fn reached(&self, now_ns: u64, n_events: u64) -> Option<String> {
        if now_ns > self.max_sim_time_ns {
            Some(format!(
                "simulated-time limit of {:.0} s reached",
                self.max_sim_time_ns as f64 / 1e9
            ))
        } else if n_events > self.max_events {
            Some(format!("event limit of {} reached", self.max_events))
        } else {
            None
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sim_time_ns: 30 * 24 * 3600 * 1_000_000_000,
            max_events: 2_000_000_000,
            fast_forward: true,
        }
    }
}

/// Everything a simulation needs besides the step-time model and the request stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimConfig {
    /// Replicas behind the router.
    pub replicas: u32,
    /// Pipeline stages of each replica: the simulation runs `replicas x pipeline_stages`
    /// sub-replicas behind the router, one per micro-batch in flight, each with this
    /// config's scheduler (1: none; docs/model.md, "Pipeline parallelism").
    #[serde(skip_serializing_if = "is_one")]
    pub pipeline_stages: u32,
    /// GPUs per replica (`tp x dp x pp`), for per-GPU figures.
    pub gpus_per_replica: u32,
    /// Routing policy.
    pub router: RouterKind,
    /// Scheduler of each replica.
    pub scheduler: SchedulerConfig,
    /// SLOs and their enforcement.
    pub slo: SloPolicy,
    /// Run limits.
    pub limits: Limits,
    /// Client-side cap on outstanding requests (vLLM `--max-concurrency`); latency is then
    /// measured from when the client sends, as vLLM does.
    pub max_concurrency: Option<u32>,
    /// Seed of the router's random choices.
    pub seed: u64,
    /// Time the engine's API frontend takes between a client's send and the engine queue
    /// (tokenisation, request handling), ns.
    pub frontend_delay_ns: u64,
    /// Most per-request records kept for the steady-state analysis (0: none, the default;
    /// the streaming metrics do not need them).
    pub request_log_capacity: usize,
    /// An autoscaler (`None`: the fleet is `replicas` throughout).
    pub autoscale: Option<AutoscaleConfig>,
    /// Replica failures (`None`: none).
    pub faults: Option<FaultConfig>,
    /// Length of the periods of per-period statistics, ns (0: none).
    pub period_ns: u64,
    /// Prefill/decode disaggregation (`None`: colocated replicas, the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggConfig>,
}

/// One pool of a disaggregated deployment: its replicas, their GPUs and scheduler.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolConfig {
    /// Replicas in the pool.
    pub replicas: u32,
    /// GPUs per replica (the pool's TP degree).
    pub gpus_per_replica: u32,
    /// The pool's router.
    pub router: RouterKind,
    /// Scheduler of each replica of the pool.
    pub scheduler: SchedulerConfig,
}

/// Prefill/decode disaggregation: a prefill pool computes prompts and hands their KV cache
/// over a link to a decode pool, which generates the output (docs/disaggregation.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DisaggConfig {
    /// The prefill pool.
    pub prefill: PoolConfig,
    /// The decode pool.
    pub decode: PoolConfig,
    /// Bandwidth of the link into each decode replica, bytes/s (`f64::INFINITY`: unlimited);
    /// transfers sharing it share it equally.
    pub bandwidth_bytes_per_s: f64,
    /// Fixed time of each transfer (setup, completion notice), ns.
    pub latency_ns: u64,
    /// KV bytes of one token, whole model (all layers, K and V), bytes.
    pub kv_bytes_per_token: u64,
    /// Layers of the model (layer-wise transfer sends one layer at a time).
    pub layers: u32,
    /// Send each layer's KV while the prefill computes the next (off: after the prefill).
    pub layerwise: bool,
}

/// What one simulation produced.
#[derive(Debug, Clone)]
pub struct SimOutput {
    /// Streaming metrics of the whole cluster.
    pub metrics: Metrics,
    /// Per-interval time series.
    pub timeseries: TimeSeries,
    /// Requests still queued or running when the run ended (0 unless a limit was hit).
    pub in_flight: u64,
    /// Why the run stopped early, if it did.
    pub truncated: Option<String>,
    /// Largest number of KV blocks in use on any replica at any time.
    pub peak_kv_blocks: u64,
    /// When the last request arrived, ns (the end of the load; the drain follows).
    pub last_arrival_ns: u64,
    /// Events processed, every engine iteration counted (fast-forwarded ones too).
    pub events: u64,
    /// KV transfers of a disaggregated run (`None` for colocated runs).
    pub disaggregation: Option<DisaggStats>,
    /// Of the iterations, those booked in bulk by the fast-forward (not events of their own).
    pub fast_forwarded_iterations: u64,
    /// KV blocks still held by requests on any replica when the run ended, blocks (0 when
    /// every request has left: INV-4 of docs/invariants.md).
    pub blocks_held_at_end: u64,
    /// Requests with block identities, per replica slot of the first pool (the prefill pool
    /// of a disaggregated run): prompt tokens admitted and served from the prefix cache.
    pub prefix_cache_tokens: Vec<ContentTokens>,
}

/// What the KV transfers of a disaggregated run did.
#[derive(Debug, Clone, Default)]
pub struct DisaggStats {
    /// Transfers completed.
    pub transfers: u64,
    /// KV bytes moved, bytes.
    pub bytes: u128,
    /// Time of each transfer on its link, latency included, ns.
    pub transfer_time: crate::metrics::LatencyHistogram,
    /// Back-pressure: time from the end of a prompt's prefill to its transfer's start, ns.
    pub wait: crate::metrics::LatencyHistogram,
    /// Time any transfer was moving bytes, summed over the decode replicas' links, ns.
    pub link_busy_ns: u128,
    /// Decode replicas (links).
    pub links: u32,
    /// Largest number of KV blocks in use on any prefill replica, blocks.
    pub peak_prefill_blocks: u64,
    /// Largest number of KV blocks in use on any decode replica, blocks.
    pub peak_decode_blocks: u64,
    /// Requests whose KV was still waiting or moving when the run ended.
    pub in_transfer: u64,
    /// KV blocks still held by requests on any replica when the run ended (0 when every
    /// request has left: the conservation check).
    pub blocks_held_at_end: u64,
}

fn is_one(v: &u32) -> bool {
    *v == 1
}
