//! The result of one run, named as vLLM's `bench serve` names its keys, plus servesim's own.

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use crate::metrics::steady_state::SteadyState;
use crate::metrics::{PeriodSummary, TimeSeriesPoint};
use crate::table::{CellValue, TableSheet, ToTable};

/// One SLO's outcome: the percentile of the metric against its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SloOutcome {
    /// Threshold, ms.
    pub threshold_ms: f64,
    /// Percentile it applies to.
    pub percentile: f64,
    /// The metric at that percentile in this run, ms.
    pub value_ms: f64,
    /// Whether the SLO holds.
    pub met: bool,
}

/// SLO outcomes of a run (absent SLOs are `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    /// TTFT SLO.
    pub ttft: Option<SloOutcome>,
    /// TPOT SLO.
    pub tpot: Option<SloOutcome>,
    /// E2E SLO.
    pub e2e: Option<SloOutcome>,
    /// Whether every SLO set holds and the run kept up with its arrivals.
    pub all_met: bool,
}

/// Summary of one run. Latencies in ms, throughputs per second of the run's duration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Requests completed.
    pub completed: u64,
    /// Requests that did not complete (rejected + timed out + lost to a replica failure), as
    /// vLLM counts failures.
    pub failed: u64,
    /// First arrival to last completion, s.
    pub duration: f64,
    /// Prompt tokens of completed requests.
    pub total_input_tokens: u64,
    /// Output tokens of completed requests.
    pub total_output_tokens: u64,
    /// Completed requests per second.
    pub request_throughput: f64,
    /// Output tokens per second, summed over all requests.
    pub output_throughput: f64,
    /// Prompt plus output tokens per second.
    pub total_token_throughput: f64,
    /// Mean TTFT, ms.
    pub mean_ttft_ms: f64,
    /// Median TTFT, ms.
    pub median_ttft_ms: f64,
    /// p90 TTFT, ms.
    pub p90_ttft_ms: f64,
    /// p99 TTFT, ms.
    pub p99_ttft_ms: f64,
    /// Mean TPOT, ms.
    pub mean_tpot_ms: f64,
    /// Median TPOT, ms.
    pub median_tpot_ms: f64,
    /// p90 TPOT, ms.
    pub p90_tpot_ms: f64,
    /// p99 TPOT, ms.
    pub p99_tpot_ms: f64,
    /// Mean ITL, ms.
    pub mean_itl_ms: f64,
    /// Median ITL, ms.
    pub median_itl_ms: f64,
    /// p90 ITL, ms.
    pub p90_itl_ms: f64,
    /// p99 ITL, ms.
    pub p99_itl_ms: f64,
    /// Mean E2E latency, ms.
    pub mean_e2el_ms: f64,
    /// Median E2E latency, ms.
    pub median_e2el_ms: f64,
    /// p90 E2E latency, ms.
    pub p90_e2el_ms: f64,
    /// p99 E2E latency, ms.
    pub p99_e2el_ms: f64,
    /// Mean queueing delay (arrival to first scheduling), ms.
    pub mean_queue_ms: f64,
    /// p99 queueing delay, ms.
    pub p99_queue_ms: f64,
    /// Output tokens per second per GPU.
    pub output_throughput_per_gpu: f64,
    /// Completed requests per second that met every SLO.
    pub goodput: f64,
    /// Share of arrived requests that completed within every SLO, 0..1.
    pub goodput_share: f64,
    /// Mean sequences per iteration.
    pub mean_batch_size: f64,
    /// Median sequences per iteration.
    pub median_batch_size: f64,
    /// 99th percentile of sequences per iteration.
    pub p99_batch_size: f64,
    /// Largest batch (sequences) of any iteration.
    pub max_batch_size: f64,
    /// Time-weighted mean KV-cache utilisation, 0..1.
    pub kv_cache_utilization: f64,
    /// Median KV-cache utilisation over iterations, 0..1.
    pub median_kv_cache_utilization: f64,
    /// 99th percentile of KV-cache utilisation over iterations, 0..1.
    pub p99_kv_cache_utilization: f64,
    /// Peak KV-cache utilisation of any replica, 0..1.
    pub peak_kv_cache_utilization: f64,
    /// Preemptions (recompute).
    pub preemptions: u64,
    /// Requests rejected at arrival (admission control, or longer than max_model_len).
    pub rejected: u64,
    /// Requests whose client gave up before the first token.
    pub timed_out: u64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Requests still queued or running when the run stopped (0 unless truncated).
    pub in_flight: u64,
    /// Requests of the workload never sent because the run stopped early (`None` for a
    /// complete run, or when the workload's count is not known in advance: a synthetic stream
    /// that ends at `duration_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<u64>,
    /// Requests lost with a failed replica (not retried).
    pub lost: u64,
    /// Requests a client retried after their replica failed.
    pub retried: u64,
    /// Replica time paid for, replica-hours (provisioning, ready, draining or down).
    pub billed_replica_hours: f64,
    /// Prompt tokens served from the prefix cache.
    pub prefix_cache_hit_tokens: u64,
    /// Requests with block identities (a Mooncake trace): share of their admitted prompt
    /// tokens served from the prefix cache, 0..1 (absent without identities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// `prefix_cache_hit_rate` per replica (the prefill pool's in a disaggregated run); null
    /// for a replica that admitted no prompt tokens (no rate, not a rate of 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates: Option<Vec<Option<f64>>>,
    /// KV offloading: of `prefix_cache_hit_rate`, the share of the admitted prompt tokens the
    /// GPU prefix cache served, 0..1 (absent without a CPU tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate_gpu: Option<f64>,
    /// KV offloading: of `prefix_cache_hit_rate`, the share loaded from the CPU tier, 0..1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate_cpu: Option<f64>,
    /// `prefix_cache_hit_rate_gpu` per replica (null for a replica that admitted none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates_gpu: Option<Vec<Option<f64>>>,
    /// `prefix_cache_hit_rate_cpu` per replica (null for a replica that admitted none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates_cpu: Option<Vec<Option<f64>>>,
    /// Output tokens generated, each counted once, including by requests still in flight.
    pub generated_tokens: u64,
    /// Prompt tokens the prefills computed, recomputation after preemption included (above
    /// the prompt tokens when preemption recomputes, below when the prefix cache serves some).
    pub prefill_tokens_computed: u64,
    /// Engine iterations, all replicas.
    pub iterations: u64,
    /// Share of the duration the replicas were busy, 0..1 (mean over replicas).
    pub gpu_busy_share: f64,
    /// GPUs in the deployment.
    pub num_gpus: u32,
    /// Replicas.
    pub replicas: u32,
    /// KV-cache capacity per replica, tokens.
    pub kv_capacity_tokens: u64,
    /// Weight format (`bf16`, `fp16`, `fp8`, `fp4`, `mxfp4`; `mxfp4 experts + bf16` when the
    /// modules differ).
    pub weight_dtype: String,
    /// KV-cache format the run used, `auto` resolved (`bf16`, `fp16`, `fp8`).
    pub kv_cache_dtype: String,
    /// SLO outcomes.
    pub slo: SloReport,
    /// Why the run stopped early, if it did.
    pub truncated: Option<String>,
    /// What looked wrong in the input without being an error, one sentence each.
    pub warnings: Vec<String>,
    /// The steady state (warm-up and drain removed, with confidence intervals), when the run
    /// kept a request log and its arrivals are stationary.
    pub steady_state: Option<SteadyState>,
    /// Disaggregated runs: the pools and the KV transfers (absent for colocated runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggSummary>,
    /// Speculative decoding: tokens a sequence gained per verify step, the bonus token
    /// included, measured over the completed requests that speculated given their decode
    /// lengths: their speculated tokens over the verify steps those take in expectation, each
    /// request's last step gaining at most the tokens it had left
    /// ([`crate::speculative::measured_acceptance_length`]). The acceptance input's
    /// expectation for long outputs, less for short ones (1.0 for one decode token), at most
    /// K + 1. Absent without speculation, and when no request that speculated completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_mean_acceptance_length: Option<f64>,
    /// Speculative decoding: share of a verify step spent drafting, 0..1, at the run's mean
    /// decode batch and context (absent without speculation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_draft_share: Option<f64>,
    /// Speculative decoding: share of a verify step spent verifying (the target's wide
    /// forward and the host), 0..1, at the same batch and context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_verify_share: Option<f64>,
    /// Speculative decoding: the per-step token gain at the batch and context this run ran at
    /// (plain step time x acceptance length / verify step time, at the run's mean batch): how
    /// much faster one speculating step makes tokens than a plain step of the same batch. It
    /// is not this run against a run without speculation: a run whose engine caps the batch
    /// while speculating (SGLang's 48 sequences) can read above 1 and still be slower; compare
    /// two runs (or `plan`'s speculation verdict) for that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_speedup: Option<f64>,
    /// Speculative decoding: share of the run's decode-only steps that speculated (verify
    /// steps over verify steps plus plain decode steps of batches above
    /// `disable_by_batch_size`), 0..1; 0 when no step speculated (then the acceptance length,
    /// shares and speedup are absent: no verify step ran). Absent without speculation and
    /// when every decode-only step speculated (a share of 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode_step_share: Option<f64>,
}

/// The pools and KV transfers of a disaggregated run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisaggSummary {
    /// Prefill replicas.
    pub prefill_replicas: u32,
    /// GPUs per prefill replica (TP).
    pub prefill_tp: u32,
    /// GPU of the prefill pool.
    pub prefill_gpu: String,
    /// Decode replicas.
    pub decode_replicas: u32,
    /// GPUs per decode replica (TP).
    pub decode_tp: u32,
    /// GPU of the decode pool.
    pub decode_gpu: String,
    /// Bandwidth of the link into each decode replica, GB/s (null: unlimited).
    pub kv_transfer_bandwidth_gb_s: Option<f64>,
    /// Fixed time of each transfer, us.
    pub kv_transfer_latency_us: f64,
    /// Transfers completed.
    pub transfers: u64,
    /// Mean KV bytes per transfer, MB.
    pub mean_transfer_mb: f64,
    /// Mean time of a transfer on its link, latency included, ms.
    pub mean_transfer_ms: f64,
    /// p99 time of a transfer on its link, ms.
    pub p99_transfer_ms: f64,
    /// Mean back-pressure wait (end of prefill to start of transfer), ms.
    pub mean_backpressure_wait_ms: f64,
    /// p99 back-pressure wait, ms.
    pub p99_backpressure_wait_ms: f64,
    /// Share of the run some transfer was moving bytes, averaged over the decode links.
    pub link_utilization: f64,
    /// Largest share of a prefill replica's KV blocks in use (held during transfers).
    pub peak_prefill_kv_utilization: f64,
    /// Largest share of a decode replica's KV blocks in use.
    pub peak_decode_kv_utilization: f64,
    /// KV capacity of one prefill replica, tokens.
    pub prefill_kv_capacity_tokens: u64,
    /// KV capacity of one decode replica, tokens.
    pub decode_kv_capacity_tokens: u64,
}

/// A run's summary with the distributions and time series behind it (for plots).
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The summary.
    pub summary: RunSummary,
    /// TTFT CDF as (quantile, ms).
    pub ttft_cdf: Vec<(f64, f64)>,
    /// TPOT CDF as (quantile, ms).
    pub tpot_cdf: Vec<(f64, f64)>,
    /// E2E CDF as (quantile, ms).
    pub e2e_cdf: Vec<(f64, f64)>,
    /// Time series.
    pub timeseries: Vec<TimeSeriesPoint>,
    /// Per-period statistics up to the last arrival (empty unless asked for with
    /// `Resolved::with_periods` of the scenario module).
    pub periods: Vec<PeriodSummary>,
}

impl RunSummary {
    /// Whether completions kept up with arrivals offered at `rate_per_s`: a replica that falls
    /// behind builds a queue that grows for the whole run, so its median TTFT becomes a
    /// sizeable share (here more than 10%) of the arrival span; one that keeps up has a median
    /// TTFT independent of the run length.
    pub fn keeps_up(&self, rate_per_s: f64) -> bool {
        let span_s = self.arrived as f64 / rate_per_s.max(1e-12);
        self.median_ttft_ms / 1e3 <= 0.1 * span_s
    }
}

/// One header row and one data row (nested keys such as `slo.ttft.met` joined with dots).
/// An absent SLO has no columns, so compare rows of runs with the same SLOs.
impl ToTable for RunSummary {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        Cow::Owned(TableSheet::one_row("Summary", self))
    }
}

/// A run's time series as a table (timeseries.csv).
#[derive(Debug, Clone, Copy)]
pub struct TimeSeriesTable<'a>(pub &'a [TimeSeriesPoint]);

impl ToTable for TimeSeriesTable<'_> {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        let columns = [
            "time_s",
            "arrivals_per_s",
            "completions_per_s",
            "output_tokens_per_s",
            "running",
            "waiting",
            "kv_utilization",
        ];
        Cow::Owned(TableSheet {
            name: "Time series".into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: self
                .0
                .iter()
                .map(|p| {
                    [
                        p.time_s,
                        p.arrivals_per_s,
                        p.completions_per_s,
                        p.output_tokens_per_s,
                        p.running,
                        p.waiting,
                        p.kv_utilization,
                    ]
                    .into_iter()
                    .map(CellValue::Number)
                    .collect()
                })
                .collect(),
        })
    }
}
