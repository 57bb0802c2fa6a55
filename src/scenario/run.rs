//! Running a resolved scenario: the simulation of its deployment and workload
//! ([`crate::sim`]) and the summary of what it produced ([`crate::summary::RunSummary`]),
//! beside the scenario it runs.

use super::Resolved;
use crate::error::{Error, Result};
use crate::metrics::steady_state::analyze_sample;
use crate::metrics::{LatencyHistogram, PeriodSummary, RequestRecord};
use crate::sim::{simulate_traced, ContentTokens, SimOutput, TraceSink};
use crate::summary::{DisaggSummary, RunResult, RunSummary, SloOutcome, SloReport};
use crate::workload::RequestGenerator;

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
        speculation_summary(
            &decode_model,
            self.scenario.speculative.as_ref(),
            &out.metrics,
            &mut result.summary,
        );
        result.summary.warnings = gen.warnings().to_vec();
        if let Some(w) = too_long_warning(&out.metrics) {
            result.summary.warnings.push(w);
        }
        if self.sim.scheduler.offload.is_some()
            && out.prefix_cache_tokens.iter().all(|t| t.prompt == 0)
        {
            result.summary.warnings.push(
                "KV offloading had no effect: the CPU tier serves only requests that carry \
                 block identities (a trace with hash_ids, or [workload.sessions]), and none did"
                    .to_string(),
            );
        }
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
        let slo = self.slo_report(out);
        let cache = PrefixCacheRates::of(
            self.sim.scheduler.offload.is_some(),
            &out.prefix_cache_tokens,
        );
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
            prefix_cache_hit_rate: cache.all,
            replica_prefix_cache_hit_rates: cache.replicas,
            prefix_cache_hit_rate_gpu: cache.gpu,
            prefix_cache_hit_rate_cpu: cache.cpu,
            replica_prefix_cache_hit_rates_gpu: cache.replicas_gpu,
            replica_prefix_cache_hit_rates_cpu: cache.replicas_cpu,
            generated_tokens: m.generated_tokens,
            prefill_tokens_computed: m.prefill_tokens_computed,
            iterations: m.iterations,
            // Busy time is summed over the sub-replicas of every pipeline stage.
            gpu_busy_share: if duration > 0.0 {
                let units = self.sim.replicas.max(1) * self.sim.pipeline_stages.max(1);
                finite(m.busy_ns as f64 / 1e9 / duration / units as f64)
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
            spec_decode_step_share: None,
            steady_state: self.steady_state(m),
        };
        with_curves(summary, out)
    }

    /// Each SLO's outcome, and whether all are met (some request completed, not truncated).
    fn slo_report(&self, out: &SimOutput) -> SloReport {
        let m = &out.metrics;
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
        slo
    }

    /// The steady-state analysis of the request log, when one was kept.
    fn steady_state(
        &self,
        m: &crate::metrics::Metrics,
    ) -> Option<crate::metrics::steady_state::SteadyState> {
        m.log.enabled().then(|| {
            analyze_sample(
                m.log.records(),
                m.log.seen(),
                &self.targets(),
                &self.scenario.measure.analysis(),
            )
        })
    }
}

/// A run's result: its `summary` with the latency CDFs, time series and per-period figures of
/// `out`.
fn with_curves(summary: RunSummary, out: &SimOutput) -> RunResult {
    let m = &out.metrics;
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

/// The prefix cache's token hit rates of a run: overall and per replica, and per tier (GPU,
/// CPU) with KV offloading; dimensionless, 0..1.
struct PrefixCacheRates {
    all: Option<f64>,
    replicas: Option<Vec<Option<f64>>>,
    gpu: Option<f64>,
    cpu: Option<f64>,
    replicas_gpu: Option<Vec<Option<f64>>>,
    replicas_cpu: Option<Vec<Option<f64>>>,
}

impl PrefixCacheRates {
    /// The rates of the per-replica `tallies`; the tier rates only with `offload`.
    fn of(offload: bool, tallies: &[ContentTokens]) -> Self {
        let all = prefix_hit_rate(tallies);
        PrefixCacheRates {
            all,
            replicas: all.map(|_| tallies.iter().map(|t| rate_of(t.hit, t.prompt)).collect()),
            gpu: tier_rate(offload, tallies, gpu_hit),
            cpu: tier_rate(offload, tallies, cpu_hit),
            replicas_gpu: replica_tier_rates(offload, tallies, gpu_hit),
            replicas_cpu: replica_tier_rates(offload, tallies, cpu_hit),
        }
    }
}

/// Fills the speculative-decoding figures of `s`: the acceptance length measured over the
/// completed requests' decode tokens in speculating iterations (`config`'s acceptance,
/// [`crate::speculative::measured_acceptance_length`]), and the shares and speedup from the
/// decode model, evaluated at the mean batch of the decode-only iterations that speculated
/// and the run's mean context (prompt plus half the output per request); nothing without
/// speculation. With no verify step (every output one token long: the first comes from the
/// prefill; or every decode batch above the speculative batch limit) only the step share, 0,
/// is reported: there is no acceptance or speedup to report.
fn speculation_summary(
    model: &crate::roofline::StepTimeModel,
    config: Option<&crate::speculative::SpeculativeConfig>,
    m: &crate::metrics::Metrics,
    s: &mut RunSummary,
) {
    let (Some(spec), Some(config)) = (model.speculation(), config) else {
        return;
    };
    let l = spec.mean_acceptance_length.max(1.0);
    let verify_steps = m.speculated_iterations as f64 / l;
    let plain_steps = (m.decode_only_iterations - m.speculated_iterations) as f64;
    let all_speculated = m.speculated_iterations > 0 && plain_steps == 0.0;
    if !all_speculated {
        // Reported only where it is not 1, so that a run that speculated at every decode
        // step reads as before.
        s.spec_decode_step_share = Some(if verify_steps > 0.0 {
            finite(verify_steps / (verify_steps + plain_steps))
        } else {
            0.0
        });
    }
    if m.speculated_iterations == 0 {
        return;
    }
    // Over verify steps only: the steps above the batch limit gain one token and are not
    // verify steps. Measured over the completed requests' speculated tokens: a request's final
    // run of t of them takes E[N(t)] verify steps (its last step capped by the tokens left),
    // its other speculated tokens 1 / L each.
    let lengths = &m.speculated_lengths;
    s.spec_decode_mean_acceptance_length = crate::speculative::measured_acceptance_length(
        &config.acceptance_lengths(),
        lengths.uncapped_tokens(),
        lengths.final_runs(),
    )
    .map(finite);
    let batch = if all_speculated {
        (s.mean_batch_size.round() as u32).max(1)
    } else {
        // The mean batch of the steps that speculated: the run's may lie above the limit.
        ((m.speculated_tokens as f64 / m.speculated_iterations as f64).round() as u32).max(1)
    };
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

/// `a / b`, 0 when `b` is 0.
/// A warning when requests were turned away for their length: the run's figures then describe
/// only the requests that fit, which a user who set the lengths may not expect.
fn too_long_warning(m: &crate::metrics::Metrics) -> Option<String> {
    (m.rejected_too_long > 0).then(|| {
        format!(
            "{} of {} requests ({:.1}%) were rejected at arrival: their prompt + output tokens \
             exceed max_model_len; raise scheduler.max_model_len or shorten the workload's lengths",
            m.rejected_too_long,
            m.arrived,
            100.0 * ratio(m.rejected_too_long, m.arrived)
        )
    })
}

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

/// [`tier_rate`] per replica (`None` for a replica that admitted none).
fn replica_tier_rates(
    offload: bool,
    tallies: &[ContentTokens],
    tier: fn(&ContentTokens) -> u64,
) -> Option<Vec<Option<f64>>> {
    tier_rate(offload, tallies, tier)?;
    Some(tallies.iter().map(|t| rate_of(tier(t), t.prompt)).collect())
}

/// `hit / prompt` tokens, `None` when no prompt token was admitted (a replica given no
/// traffic has no hit rate, not a rate of 0).
fn rate_of(hit: u64, prompt: u64) -> Option<f64> {
    (prompt > 0).then(|| hit as f64 / prompt as f64)
}

/// Token hit rate of the prefix cache over requests with block identities, `None` when no
/// such request was admitted.
fn prefix_hit_rate(tallies: &[ContentTokens]) -> Option<f64> {
    let (hit, prompt) = tallies
        .iter()
        .fold((0, 0), |(h, p), t| (h + t.hit, p + t.prompt));
    (prompt > 0).then(|| ratio(hit, prompt))
}
