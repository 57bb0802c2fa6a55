//! The result of one run, named as vLLM's `bench serve` names its keys, plus servesim's own.

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::metrics::steady_state::{analyze_sample, SteadyState};
use crate::metrics::{LatencyHistogram, PeriodSummary, RequestRecord, TimeSeriesPoint};
use crate::scenario::Resolved;
use crate::sim::{simulate_traced, ContentTokens, SimOutput, TraceSink};
use crate::table::{CellValue, TableSheet, ToTable};
use crate::workload::RequestGenerator;

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
    /// `prefix_cache_hit_rate` per replica (the prefill pool's in a disaggregated run); 0
    /// for a replica that admitted none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates: Option<Vec<f64>>,
    /// KV offloading: of `prefix_cache_hit_rate`, the share of the admitted prompt tokens the
    /// GPU prefix cache served, 0..1 (absent without a CPU tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate_gpu: Option<f64>,
    /// KV offloading: of `prefix_cache_hit_rate`, the share loaded from the CPU tier, 0..1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate_cpu: Option<f64>,
    /// `prefix_cache_hit_rate_gpu` per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates_gpu: Option<Vec<f64>>,
    /// `prefix_cache_hit_rate_cpu` per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_prefix_cache_hit_rates_cpu: Option<Vec<f64>>,
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
    /// Speculative decoding: expected tokens a sequence gains per verify step, the bonus
    /// token included (absent without speculation).
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
    /// [`Resolved::with_periods`]).
    pub periods: Vec<PeriodSummary>,
}

fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

fn slo_outcome(h: &LatencyHistogram, threshold_ns: Option<u64>, pct: f64) -> Option<SloOutcome> {
    threshold_ns.map(|t| {
        let v = h.percentile_ns(pct);
        SloOutcome {
            threshold_ms: t as f64 / 1e6,
            percentile: pct,
            value_ms: v / 1e6,
            met: h.count() > 0 && v <= t as f64,
        }
    })
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

impl Resolved {
    /// Simulates the scenario with its own seed.
    pub fn run(&self) -> Result<RunResult> {
        self.run_with_seed(self.scenario.seed)
    }

    /// The same scenario keeping a log of up to `capacity` requests, so that the summary
    /// carries the steady state ([`RunSummary::steady_state`]) when the arrivals have one.
    pub fn with_request_log(mut self, capacity: usize) -> Self {
        self.sim.request_log_capacity = capacity;
        self
    }

    /// The same scenario keeping per-period statistics, each period `period_ns` long.
    pub fn with_periods(mut self, period_ns: u64) -> Self {
        self.sim.period_ns = period_ns;
        self
    }

    /// Simulates the scenario with its own seed; the summary and the per-period statistics.
    pub fn run_with_periods(&self) -> Result<(RunSummary, Vec<PeriodSummary>)> {
        let r = self.run()?;
        Ok((r.summary, r.periods))
    }

    /// Simulates the scenario with its own seed, also returning every request that left the
    /// system (lengths, times, outcome) in the order they left. The summary is the one
    /// [`Resolved::run`] gives.
    pub fn run_with_requests(&self) -> Result<(RunResult, Vec<RequestRecord>)> {
        self.simulate_seed(self.scenario.seed, true, None)
    }

    /// As [`Resolved::run`] (with `keep_requests`, as [`Resolved::run_with_requests`]),
    /// showing every iteration and replica state to `trace` as the run goes.
    pub fn run_with_trace(
        &self,
        keep_requests: bool,
        trace: Option<&mut dyn TraceSink>,
    ) -> Result<(RunResult, Vec<RequestRecord>)> {
        self.simulate_seed(self.scenario.seed, keep_requests, trace)
    }

    /// Simulates the scenario with `seed` (for replications).
    pub fn run_with_seed(&self, seed: u64) -> Result<RunResult> {
        self.simulate_seed(seed, false, None)
            .map(|(result, _)| result)
    }

    /// Simulates with `seed`; with `keep_requests`, every request's record besides (the
    /// summary still sees only the log the scenario asked for).
    fn simulate_seed(
        &self,
        seed: u64,
        keep_requests: bool,
        trace: Option<&mut dyn TraceSink>,
    ) -> Result<(RunResult, Vec<RequestRecord>)> {
        let mut gen = RequestGenerator::new(&self.scenario.workload, seed, &self.origin).map_err(
            |e| match e {
                // A trace or length file that cannot be read: say which setting names it.
                Error::Io { .. } => Error::config(&self.origin, "workload", e.to_string()),
                other => other,
            },
        )?;
        let mut sim = self.sim.clone();
        sim.seed = seed;
        if keep_requests {
            sim.request_log_capacity = usize::MAX;
        }
        let (mut out, decode_model) = match self.pool_step_models()? {
            Some((prefill, decode)) => (
                simulate_traced(&sim, &prefill, &decode, &mut gen, trace),
                decode,
            ),
            None => {
                let step = self.step_model()?;
                (simulate_traced(&sim, &step, &step, &mut gen, trace), step)
            }
        };
        let mut requests = Vec::new();
        if keep_requests {
            let log = std::mem::take(&mut out.metrics.log);
            (requests, out.metrics.log) = log.split_at_capacity(self.sim.request_log_capacity);
        }
        let mut result = self.summarize(&out);
        speculation_summary(&decode_model, &mut result.summary);
        result.summary.warnings = gen.warnings().to_vec();
        let s = &mut result.summary;
        if let Some(why) = &mut s.truncated {
            // Say how much of the load the stopped run never sent, where that is known.
            s.unsent = gen
                .planned_requests()
                .map(|n| n.saturating_sub(out.metrics.arrived));
            if !why.contains("never sent") {
                match s.unsent {
                    Some(n) => why.push_str(&format!("; {n} requests never sent")),
                    None => why.push_str("; the rest of the workload was never sent"),
                }
            }
        }
        Ok((result, requests))
    }

    /// The disaggregation section of a run's summary (`None` when colocated).
    fn disagg_summary(&self, out: &SimOutput, duration_s: f64) -> Option<DisaggSummary> {
        let (Some(p), Some(st)) = (&self.pools, &out.disaggregation) else {
            return None;
        };
        let d = &p.sim;
        let ms = |ns: f64| finite(ns / 1e6);
        let share = |peak: u64, cap: u64| finite(peak as f64 / cap.max(1) as f64);
        Some(DisaggSummary {
            prefill_replicas: d.prefill.replicas,
            prefill_tp: d.prefill.gpus_per_replica,
            prefill_gpu: p.prefill.deployment.gpu.name.clone(),
            decode_replicas: d.decode.replicas,
            decode_tp: d.decode.gpus_per_replica,
            decode_gpu: p.decode.deployment.gpu.name.clone(),
            kv_transfer_bandwidth_gb_s: d
                .bandwidth_bytes_per_s
                .is_finite()
                .then_some(d.bandwidth_bytes_per_s / 1e9),
            kv_transfer_latency_us: d.latency_ns as f64 / 1e3,
            transfers: st.transfers,
            mean_transfer_mb: if st.transfers > 0 {
                finite(st.bytes as f64 / st.transfers as f64 / 1e6)
            } else {
                0.0
            },
            mean_transfer_ms: ms(st.transfer_time.mean_ns()),
            p99_transfer_ms: ms(st.transfer_time.percentile_ns(99.0)),
            mean_backpressure_wait_ms: ms(st.wait.mean_ns()),
            p99_backpressure_wait_ms: ms(st.wait.percentile_ns(99.0)),
            link_utilization: if duration_s > 0.0 {
                finite(st.link_busy_ns as f64 / 1e9 / duration_s / st.links.max(1) as f64)
            } else {
                0.0
            },
            peak_prefill_kv_utilization: share(
                st.peak_prefill_blocks,
                p.prefill.scheduler.kv_blocks,
            ),
            peak_decode_kv_utilization: share(st.peak_decode_blocks, p.decode.scheduler.kv_blocks),
            prefill_kv_capacity_tokens: p.prefill.memory.kv_tokens,
            decode_kv_capacity_tokens: p.decode.memory.kv_tokens,
        })
    }

    /// Builds the summary of a finished simulation.
    pub fn summarize(&self, out: &SimOutput) -> RunResult {
        let m = &out.metrics;
        let start = m.first_arrival_ns.unwrap_or(0);
        let duration = m.last_event_ns.saturating_sub(start) as f64 / 1e9;
        let per_s = |x: f64| {
            if duration > 0.0 {
                finite(x / duration)
            } else {
                0.0
            }
        };
        let gpus = self.gpus();
        let (ttft, tpot, itl, e2e, queue) = (
            m.ttft.summary(),
            m.tpot.summary(),
            m.itl.summary(),
            m.e2e.summary(),
            m.queue.summary(),
        );
        let s = &self.scenario.slo;
        let p = &self.sim.slo;
        let mut slo = SloReport {
            ttft: slo_outcome(&m.ttft, p.ttft_ns, s.ttft_percentile),
            tpot: slo_outcome(&m.tpot, p.tpot_ns, s.tpot_percentile),
            e2e: slo_outcome(&m.e2e, p.e2e_ns, s.e2e_percentile),
            all_met: false,
        };
        slo.all_met = [slo.ttft, slo.tpot, slo.e2e]
            .iter()
            .all(|o| o.is_none_or(|o| o.met))
            && m.completed > 0
            && out.truncated.is_none();
        let offload = self.sim.scheduler.offload.is_some();
        let summary = RunSummary {
            completed: m.completed,
            failed: m.rejected + m.timed_out + m.lost,
            duration,
            total_input_tokens: m.input_tokens,
            total_output_tokens: m.output_tokens,
            request_throughput: per_s(m.completed as f64),
            output_throughput: per_s(m.output_tokens as f64),
            total_token_throughput: per_s((m.input_tokens + m.output_tokens) as f64),
            mean_ttft_ms: ttft.mean_ms,
            median_ttft_ms: ttft.median_ms,
            p90_ttft_ms: ttft.p90_ms,
            p99_ttft_ms: ttft.p99_ms,
            mean_tpot_ms: tpot.mean_ms,
            median_tpot_ms: tpot.median_ms,
            p90_tpot_ms: tpot.p90_ms,
            p99_tpot_ms: tpot.p99_ms,
            mean_itl_ms: itl.mean_ms,
            median_itl_ms: itl.median_ms,
            p90_itl_ms: itl.p90_ms,
            p99_itl_ms: itl.p99_ms,
            mean_e2el_ms: e2e.mean_ms,
            median_e2el_ms: e2e.median_ms,
            p90_e2el_ms: e2e.p90_ms,
            p99_e2el_ms: e2e.p99_ms,
            mean_queue_ms: queue.mean_ms,
            p99_queue_ms: queue.p99_ms,
            output_throughput_per_gpu: per_s(m.output_tokens as f64) / gpus.max(1) as f64,
            goodput: per_s(m.good as f64),
            goodput_share: if m.arrived > 0 {
                m.good as f64 / m.arrived as f64
            } else {
                0.0
            },
            mean_batch_size: m.batch_size.mean(),
            median_batch_size: m.batch_size_hist.percentile_ns(50.0),
            p99_batch_size: m.batch_size_hist.percentile_ns(99.0),
            max_batch_size: m.batch_size.max(),
            kv_cache_utilization: finite(m.kv_utilization.mean()),
            median_kv_cache_utilization: m.kv_permille_hist.percentile_ns(50.0) / 1000.0,
            p99_kv_cache_utilization: m.kv_permille_hist.percentile_ns(99.0) / 1000.0,
            peak_kv_cache_utilization: finite(
                out.peak_kv_blocks as f64 / self.sim.scheduler.kv_blocks.max(1) as f64,
            ),
            preemptions: m.preemptions,
            rejected: m.rejected,
            timed_out: m.timed_out,
            arrived: m.arrived,
            in_flight: out.in_flight,
            unsent: None,
            lost: m.lost,
            retried: m.retried,
            billed_replica_hours: m.billed_replica_ns as f64 / 3.6e12,
            prefix_cache_hit_tokens: m.prefix_cache_hit_tokens,
            prefix_cache_hit_rate: prefix_hit_rate(&out.prefix_cache_tokens),
            replica_prefix_cache_hit_rates: prefix_hit_rate(&out.prefix_cache_tokens).map(|_| {
                out.prefix_cache_tokens
                    .iter()
                    .map(|t| ratio(t.hit, t.prompt))
                    .collect()
            }),
            prefix_cache_hit_rate_gpu: tier_rate(offload, &out.prefix_cache_tokens, gpu_hit),
            prefix_cache_hit_rate_cpu: tier_rate(offload, &out.prefix_cache_tokens, cpu_hit),
            replica_prefix_cache_hit_rates_gpu: replica_tier_rates(
                offload,
                &out.prefix_cache_tokens,
                gpu_hit,
            ),
            replica_prefix_cache_hit_rates_cpu: replica_tier_rates(
                offload,
                &out.prefix_cache_tokens,
                cpu_hit,
            ),
            generated_tokens: m.generated_tokens,
            prefill_tokens_computed: m.prefill_tokens_computed,
            iterations: m.iterations,
            gpu_busy_share: if duration > 0.0 {
                finite(m.busy_ns as f64 / 1e9 / duration / self.sim.replicas.max(1) as f64)
            } else {
                0.0
            },
            num_gpus: gpus,
            replicas: self.sim.replicas,
            kv_capacity_tokens: self.memory.kv_tokens,
            weight_dtype: self.deployment.formats.label(),
            kv_cache_dtype: self.deployment.kv_dtype.to_string(),
            slo,
            truncated: out.truncated.clone(),
            warnings: Vec::new(),
            disaggregation: self.disagg_summary(out, duration),
            spec_decode_mean_acceptance_length: None,
            spec_decode_draft_share: None,
            spec_decode_verify_share: None,
            spec_decode_speedup: None,
            steady_state: m.log.enabled().then(|| {
                analyze_sample(
                    m.log.records(),
                    m.log.seen(),
                    &self.targets(),
                    &self.scenario.measure.analysis(),
                )
            }),
        };
        RunResult {
            summary,
            ttft_cdf: m.ttft.cdf_ms(100),
            tpot_cdf: m.tpot.cdf_ms(100),
            e2e_cdf: m.e2e.cdf_ms(100),
            timeseries: out.timeseries.points(),
            periods: match m.periods.period_ns() {
                0 => Vec::new(),
                p => m
                    .periods
                    .summaries(out.last_arrival_ns.div_ceil(p).max(1) as usize),
            },
        }
    }
}

/// Fills the speculative-decoding figures of `s` from the decode model, evaluated at the
/// run's mean batch and mean context (prompt plus half the output per request); nothing
/// without speculation.
fn speculation_summary(model: &crate::roofline::StepTimeModel, s: &mut RunSummary) {
    let Some(spec) = model.speculation() else {
        return;
    };
    s.spec_decode_mean_acceptance_length = Some(finite(spec.mean_acceptance_length));
    let batch = (s.mean_batch_size.round() as u32).max(1);
    let per_request = if s.completed > 0 {
        (s.total_input_tokens as f64 + s.total_output_tokens as f64 / 2.0) / s.completed as f64
    } else {
        0.0
    };
    let shape = crate::step_time::BatchShape::decode(batch, per_request.round() as u64);
    if let Some(step) = model.speculative_step(&shape) {
        let total = step.draft_s + step.verify_s;
        if total > 0.0 {
            s.spec_decode_draft_share = Some(finite(step.draft_s / total));
            s.spec_decode_verify_share = Some(finite(step.verify_s / total));
            s.spec_decode_speedup =
                Some(finite(step.plain_s * step.mean_acceptance_length / total));
        }
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

/// `a / b`, 0 when `b` is 0.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Prompt tokens the GPU prefix cache served.
fn gpu_hit(t: &ContentTokens) -> u64 {
    t.hit - t.cpu_hit
}

/// Prompt tokens loaded from the CPU tier.
fn cpu_hit(t: &ContentTokens) -> u64 {
    t.cpu_hit
}

/// KV offloading (`offload`): the share of admitted prompt tokens with block identities
/// that one tier (`tier`) served, over every replica; `None` without a CPU tier or
/// identities.
fn tier_rate(
    offload: bool,
    tallies: &[ContentTokens],
    tier: fn(&ContentTokens) -> u64,
) -> Option<f64> {
    let (hit, prompt) = tallies
        .iter()
        .fold((0, 0), |(h, p), t| (h + tier(t), p + t.prompt));
    (offload && prompt > 0).then(|| ratio(hit, prompt))
}

/// [`tier_rate`] per replica (0 for a replica that admitted none).
fn replica_tier_rates(
    offload: bool,
    tallies: &[ContentTokens],
    tier: fn(&ContentTokens) -> u64,
) -> Option<Vec<f64>> {
    tier_rate(offload, tallies, tier)?;
    Some(tallies.iter().map(|t| ratio(tier(t), t.prompt)).collect())
}

/// Token hit rate of the prefix cache over requests with block identities, `None` when no
/// such request was admitted.
fn prefix_hit_rate(tallies: &[ContentTokens]) -> Option<f64> {
    let (hit, prompt) = tallies
        .iter()
        .fold((0, 0), |(h, p), t| (h + t.hit, p + t.prompt));
    (prompt > 0).then(|| ratio(hit, prompt))
}
