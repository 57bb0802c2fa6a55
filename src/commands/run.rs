//! `servesim run`: simulate one scenario and report it.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{Format, RunArgs};
use servesim::metrics::steady_state::SteadyState;
use servesim::metrics::STEADY_STATE_RECORDS;
use servesim::report::atomic::ReportDir;
use servesim::report::plan::steady_line;
use servesim::report::{export_all, CsvExporter, Exporter, JsonExporter};
use servesim::scenario::{Resolved, Scenario};
use servesim::summary::{DisaggSummary, RunResult, RunSummary, TimeSeriesTable};

/// Runs `servesim run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let out = args
        .out
        .as_deref()
        .map(|o| super::begin_out_dir("--out", o))
        .transpose()?;
    let trace =
        super::trace_events::begin(args.trace_events.as_deref(), out.as_ref(), &REPORT_FILES)?;
    let set = super::overrides(&args.set, args.no_fast_forward);
    let mut sc = Scenario::load(args.scenario.as_deref(), &set)?;
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    let origin = args
        .scenario
        .as_ref()
        .map_or("<embedded default>".to_string(), |p| {
            p.display().to_string()
        });
    let mut resolved = sc.resolve(&origin)?;
    if resolved.has_steady_state() {
        // The same bound as every measurement of `plan`: a plan's re-run line analyses the
        // same sample of the same requests.
        resolved = resolved.with_request_log(STEADY_STATE_RECORDS);
    }
    let result = super::trace_events::with_trace(trace.as_deref(), |trace| {
        resolved.run_with_trace(false, trace).map(|(r, _)| r)
    })?;
    emit(&resolved, &result, args.format, out)
}

/// Writes a run's output folder (summary.json, summary.csv, timeseries.csv), if one is given,
/// then prints its result: the files first, so that a standard output whose reader went away
/// (`| head`) cannot lose them.
pub fn emit(
    resolved: &Resolved,
    result: &RunResult,
    format: Format,
    out: Option<ReportDir>,
) -> Result<()> {
    let s = &result.summary;
    let mut text = Vec::new();
    match format {
        Format::Json => JsonExporter::new("summary.json").write(s, &mut text)?,
        Format::Csv => CsvExporter::new("summary.csv").write(s, &mut text)?,
        Format::Table => print_table(&mut text, resolved, s)?,
    }
    if let Some(out) = out {
        write_outputs(result, out.path())
            .with_context(|| format!("writing {}", out.target().display()))?;
        let dir = out.commit().context("putting the report folder in place")?;
        note!("wrote {}", dir.display());
    }
    if format != Format::Table {
        for w in &s.warnings {
            note!("warning: {w}");
        }
    }
    super::to_stdout(&text)
}

/// The files [`write_outputs`] writes into a report folder.
pub const REPORT_FILES: [&str; 3] = ["summary.json", "summary.csv", "timeseries.csv"];

/// Writes a run's files ([`REPORT_FILES`]: summary.json, summary.csv, timeseries.csv) into
/// `dir`.
pub fn write_outputs(result: &RunResult, dir: &Path) -> Result<()> {
    let s = &result.summary;
    export_all(
        dir,
        s,
        &[
            &JsonExporter::new("summary.json"),
            &CsvExporter::new("summary.csv"),
        ],
    )
    .and_then(|_| {
        export_all(
            dir,
            &TimeSeriesTable(&result.timeseries),
            &[&CsvExporter::new("timeseries.csv")],
        )
    })?;
    Ok(())
}

fn print_table(w: &mut impl Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    writeln!(
        w,
        "============ servesim run: {} ============",
        if r.scenario.name.is_empty() {
            &r.origin
        } else {
            &r.scenario.name
        }
    )?;
    write_deployment_line(w, r, s)?;
    write_throughput_rows(w, s)?;
    write_latency_table(w, s)?;
    row(
        w,
        "Queueing delay mean / p99 (ms):",
        format!("{:.1} / {:.1}", s.mean_queue_ms, s.p99_queue_ms),
    )?;
    if let Some(x) = &s.disaggregation {
        write_disaggregation_rows(w, x)?;
    }
    row(
        w,
        "Batch mean / p50 / p99 (seqs/iteration):",
        format!(
            "{:.1} / {:.0} / {:.0}",
            s.mean_batch_size, s.median_batch_size, s.p99_batch_size
        ),
    )?;
    row(
        w,
        "KV cache utilisation mean / peak:",
        format!(
            "{:.1}% / {:.1}%",
            100.0 * s.kv_cache_utilization,
            100.0 * s.peak_kv_cache_utilization
        ),
    )?;
    row(w, "Preemptions:", s.preemptions.to_string())?;
    // Requests with block identities only (traces with hash_ids, sessions): the token hit
    // rate, by tier with KV offloading.
    match (
        s.prefix_cache_hit_rate,
        s.prefix_cache_hit_rate_gpu,
        s.prefix_cache_hit_rate_cpu,
    ) {
        (Some(all), Some(gpu), Some(cpu)) => row(
            w,
            "Prefix cache hit rate all / GPU / CPU:",
            format!(
                "{:.1}% / {:.1}% / {:.1}%",
                100.0 * all,
                100.0 * gpu,
                100.0 * cpu
            ),
        )?,
        (Some(all), _, _) => row(w, "Prefix cache hit rate:", format!("{:.1}%", 100.0 * all))?,
        _ => {}
    }
    write_speculation_rows(w, r, s)?;
    for (name, o) in [
        ("TTFT", s.slo.ttft),
        ("TPOT", s.slo.tpot),
        ("E2E", s.slo.e2e),
    ] {
        if let Some(o) = o {
            row(
                w,
                &format!("SLO p{} {name} <= {} ms:", o.percentile, o.threshold_ms),
                format!(
                    "{} ({:.1} ms)",
                    if o.met { "met" } else { "MISSED" },
                    o.value_ms
                ),
            )?;
        }
    }
    write_verdict_and_warnings(w, r, s)?;
    Ok(())
}

/// Speculative decoding, when the scenario speculates: the method and K, the acceptance
/// length over verify steps, the draft and verify shares of a step and the per-step speedup
/// at the run's batch, the share of decode steps that speculated where it is below 1, and the
/// KV slots each decoding sequence holds (and the `max_model_len` they cap).
fn write_speculation_rows(w: &mut dyn Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    let Some(spec) = r.scenario.speculative.as_ref().filter(|x| x.is_on()) else {
        return Ok(());
    };
    row(
        w,
        "Speculative decoding (method, K):",
        format!("{} K{}", spec.method, spec.num_speculative_tokens),
    )?;
    match s.spec_decode_mean_acceptance_length {
        Some(l) => row(w, "Mean acceptance length (tok/verify step):", format!("{l:.2}"))?,
        None => writeln!(
            w,
            "  no verify step ran (no decode-only step, or every batch above disable_by_batch_size): no acceptance or speedup to report"
        )?,
    }
    if let (Some(d), Some(v)) = (s.spec_decode_draft_share, s.spec_decode_verify_share) {
        row(
            w,
            "Draft / verify share of a step:",
            format!("{:.1}% / {:.1}%", 100.0 * d, 100.0 * v),
        )?;
    }
    if let Some(x) = s.spec_decode_speedup {
        row(
            w,
            "Per-step token gain at the run's batch:",
            format!("{x:.2}x"),
        )?;
    }
    if let Some(x) = s.spec_decode_step_share {
        row(
            w,
            "Decode steps that speculated:",
            format!("{:.1}%", 100.0 * x),
        )?;
    }
    write_spec_slots(w, r, s)
}

/// The KV slots a speculating sequence holds beyond its tokens, and the note when they cap
/// the default `max_model_len` (the KV capacity less the slots).
fn write_spec_slots(w: &mut dyn Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    let sched = &r.sim.scheduler;
    if sched.spec_kv_slots == 0 {
        return Ok(());
    }
    row(
        w,
        "Speculative KV slots per sequence:",
        sched.spec_kv_slots.to_string(),
    )?;
    let capped = s
        .kv_capacity_tokens
        .saturating_sub(u64::from(sched.spec_kv_slots));
    if u64::from(sched.max_model_len) == capped {
        writeln!(
            w,
            "  note: max_model_len {} = KV capacity {} less the {} speculative slots a sequence holds",
            sched.max_model_len, s.kv_capacity_tokens, sched.spec_kv_slots
        )?;
    }
    Ok(())
}

/// One `name: value` row of the run table, aligned as `vllm bench serve` prints it.
fn row(w: &mut dyn Write, k: &str, v: String) -> std::io::Result<()> {
    writeln!(w, "{k:<42}{v:>14}")
}

/// The line naming the deployment: colocated (TP, or TP x DP with EP) or disaggregated pools.
fn write_deployment_line(w: &mut impl Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    let d = &r.deployment;
    match &s.disaggregation {
        None if d.pp > 1 => writeln!(
            w,
            "{} on {} replica(s) x {} {} (TP {} x PP {}: {} micro-batches in flight), {} weights, {} KV, {} engine; KV capacity {} tokens/replica",
            d.model.name, s.replicas, d.replica_gpus(), d.gpu.name, d.tp, d.pp, d.pp, d.formats.label(), d.kv_dtype, d.engine.name, s.kv_capacity_tokens
        )?,
        None if d.dp == 1 && d.ep == 1 => writeln!(
            w,
            "{} on {} replica(s) x {} {} (TP {}), {} weights, {} KV, {} engine; KV capacity {} tokens/replica",
            d.model.name, s.replicas, d.tp, d.gpu.name, d.tp, d.formats.label(), d.kv_dtype, d.engine.name, s.kv_capacity_tokens
        )?,
        None => writeln!(
            w,
            "{} on {} replica(s) x {} {} (TP {} x DP {}, EP {}), {} weights, {} KV, {} engine; KV capacity {} tokens/replica",
            d.model.name, s.replicas, d.gpus(), d.gpu.name, d.tp, d.dp, d.ep, d.formats.label(), d.kv_dtype, d.engine.name, s.kv_capacity_tokens
        )?,
        Some(x) => writeln!(
            w,
            "{} disaggregated: {}P x {} (TP {}) + {}D x {} (TP {}), {} KV, {} engine; KV capacity {} / {} tokens per prefill / decode replica; KV link {} per decode replica, {:.0} us per transfer",
            d.model.name,
            x.prefill_replicas,
            x.prefill_gpu,
            x.prefill_tp,
            x.decode_replicas,
            x.decode_gpu,
            x.decode_tp,
            d.kv_dtype,
            d.engine.name,
            x.prefill_kv_capacity_tokens,
            x.decode_kv_capacity_tokens,
            x.kv_transfer_bandwidth_gb_s
                .map_or("unlimited".to_string(), |b| format!("{b:.0} GB/s")),
            x.kv_transfer_latency_us
        )?,
    }
    Ok(())
}

/// Requests, tokens, throughput and goodput.
fn write_throughput_rows(w: &mut dyn Write, s: &RunSummary) -> Result<()> {
    row(w, "Successful requests:", s.completed.to_string())?;
    row(
        w,
        "Failed (rejected + timed out):",
        format!("{} + {}", s.rejected, s.timed_out),
    )?;
    row(w, "Benchmark duration (s):", format!("{:.2}", s.duration))?;
    row(w, "Total input tokens:", s.total_input_tokens.to_string())?;
    row(
        w,
        "Total generated tokens:",
        s.total_output_tokens.to_string(),
    )?;
    row(
        w,
        "Request throughput (req/s):",
        format!("{:.2}", s.request_throughput),
    )?;
    row(
        w,
        "Output token throughput (tok/s):",
        format!("{:.1}", s.output_throughput),
    )?;
    row(
        w,
        "Output token throughput per GPU (tok/s):",
        format!("{:.1}", s.output_throughput_per_gpu),
    )?;
    row(
        w,
        "Total token throughput (tok/s):",
        format!("{:.1}", s.total_token_throughput),
    )?;
    row(
        w,
        "Goodput (req/s):",
        format!(
            "{:.2} ({:.1}% of arrivals)",
            s.goodput,
            100.0 * s.goodput_share
        ),
    )?;
    Ok(())
}

/// TTFT, TPOT, ITL and E2E: mean, median, p90, p99.
fn write_latency_table(w: &mut impl Write, s: &RunSummary) -> Result<()> {
    writeln!(
        w,
        "{:<18}{:>12}{:>12}{:>12}{:>12}",
        "latency (ms)", "mean", "median", "p90", "p99"
    )?;
    for (name, v) in [
        (
            "TTFT",
            [
                s.mean_ttft_ms,
                s.median_ttft_ms,
                s.p90_ttft_ms,
                s.p99_ttft_ms,
            ],
        ),
        (
            "TPOT",
            [
                s.mean_tpot_ms,
                s.median_tpot_ms,
                s.p90_tpot_ms,
                s.p99_tpot_ms,
            ],
        ),
        (
            "ITL",
            [s.mean_itl_ms, s.median_itl_ms, s.p90_itl_ms, s.p99_itl_ms],
        ),
        (
            "E2E",
            [
                s.mean_e2el_ms,
                s.median_e2el_ms,
                s.p90_e2el_ms,
                s.p99_e2el_ms,
            ],
        ),
    ] {
        writeln!(
            w,
            "{name:<18}{:>12.2}{:>12.2}{:>12.2}{:>12.2}",
            v[0], v[1], v[2], v[3]
        )?;
    }
    Ok(())
}

/// The KV transfers, back-pressure and per-pool KV use of a disaggregated run.
fn write_disaggregation_rows(w: &mut dyn Write, x: &DisaggSummary) -> Result<()> {
    row(
        w,
        "KV transfers / mean MB:",
        format!("{} / {:.1}", x.transfers, x.mean_transfer_mb),
    )?;
    row(
        w,
        "KV transfer time mean / p99 (ms):",
        format!("{:.2} / {:.2}", x.mean_transfer_ms, x.p99_transfer_ms),
    )?;
    row(
        w,
        "Back-pressure wait mean / p99 (ms):",
        format!(
            "{:.2} / {:.2}",
            x.mean_backpressure_wait_ms, x.p99_backpressure_wait_ms
        ),
    )?;
    row(
        w,
        "KV link utilization:",
        format!("{:.1}%", 100.0 * x.link_utilization),
    )?;
    row(
        w,
        "Peak KV use prefill / decode:",
        format!(
            "{:.1}% / {:.1}%",
            100.0 * x.peak_prefill_kv_utilization,
            100.0 * x.peak_decode_kv_utilization
        ),
    )?;
    Ok(())
}

/// The steady-state section (or why there is none), then the warnings and a truncation.
fn write_verdict_and_warnings(w: &mut impl Write, r: &Resolved, s: &RunSummary) -> Result<()> {
    match &s.steady_state {
        Some(st) => write_steady_state(w, st)?,
        None if !r.has_steady_state() => {
            writeln!(w, "Steady state: not analysed (time-varying arrivals)")?;
        }
        None => {
            writeln!(
                w,
                "Steady state: not analysed (whole-run figures, as vllm bench serve reports; `servesim run` cuts the warm-up and the drain)"
            )?;
        }
    }
    for warning in &s.warnings {
        writeln!(w, "WARNING: {warning}")?;
    }
    if let Some(t) = &s.truncated {
        writeln!(
            w,
            "WARNING: run stopped early: {t}; {} requests still in flight",
            s.in_flight
        )?;
    }
    Ok(())
}

/// The steady-state section: the window, the judged figures and the verdict, judged as
/// `servesim plan` judges a fleet (warm-up cut, drain excluded, stationary queue).
fn write_steady_state(w: &mut impl Write, st: &SteadyState) -> Result<()> {
    let sample = if st.requests_per_record > 1.0 {
        format!(
            "; analysed on a systematic sample of 1 in {:.0} requests (at most {STEADY_STATE_RECORDS} records), counts and rates scaled",
            st.requests_per_record
        )
    } else {
        String::new()
    };
    writeln!(
        w,
        "Steady state ({} requests; those arriving {:.0}-{:.0} s judged; {} warm-up requests cut by MSER-5, drain excluded{sample}):",
        st.requests, st.window_start_s, st.window_end_s, st.warmup_requests
    )?;
    if st.window_end_s - st.window_start_s < 1e-3 {
        // Arrivals at one instant (a burst): no rate or queue trend exists over a window of no
        // length, so the steady-state line would read "0 tok/s, queue stationary".
        writeln!(
            w,
            "  the judged requests all arrived at one instant (a burst): no throughput or queue trend can be judged over it; the whole-run figures above describe the run"
        )?;
    } else {
        writeln!(w, "  {}", steady_line(st))?;
    }
    writeln!(
        w,
        "  TTFT p50/p99 {:.1}/{:.1} ms, TPOT p50/p99 {:.2}/{:.2} ms, {:.2} req/s completed in the window",
        st.ttft.median_ms, st.ttft.p99_ms, st.tpot.median_ms, st.tpot.p99_ms, st.request_throughput
    )?;
    let verdict = if st.sustainable && st.slo.is_empty() {
        // Nothing to meet: say so rather than "every SLO" of none.
        "HOLDS: no SLO set (only the queue judged: stationary)".to_string()
    } else if st.sustainable {
        "HOLDS: every SLO at its percentile, goodput at or above its threshold, queue stationary"
            .to_string()
    } else {
        format!(
            "MISSES: {}",
            st.misses
                .iter()
                .map(|m| m.reason.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    let precision = if st.converged {
        ""
    } else {
        " (intervals wider than measure.tolerance: a longer run would be more precise)"
    };
    writeln!(w, "  verdict: {verdict}{precision}")?;
    Ok(())
}
