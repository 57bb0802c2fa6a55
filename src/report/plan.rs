//! The plan's report: the terminal table, the charts, and the report folder (plan.json,
//! candidates.csv, cost.xlsx, PNG/SVG plots, index.html).

mod export;
mod html;

pub use export::CostWorkbookExporter;
pub use html::escape;

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use super::plot::{
    cdf_series, render, render_stack, Chart, ImageFormat, Marker, Rule, Series, SeriesStyle,
};
use super::{export_all, write_atomic, CsvExporter, JsonExporter};
use crate::error::{Error, Result};
use crate::metrics::steady_state::SteadyState;
use crate::plan::{CandidateResult, LightLoad, LoadMeasurement, PlanOutput, PlanResult, Status};
use crate::scenario::Scenario;

fn io(e: std::io::Error) -> Error {
    Error::io("<stdout>", e)
}

/// One line on a steady-state measurement: the judged figures with their intervals.
pub fn steady_line(s: &SteadyState) -> String {
    let pm = |v: f64, h: Option<f64>, digits: usize| match h {
        Some(h) => format!("{v:.digits$} ± {h:.digits$}"),
        None => format!("{v:.digits$}"),
    };
    let mut parts: Vec<String> = s
        .slo
        .iter()
        .map(|c| {
            format!(
                "p{} {} {} ms (SLO {})",
                c.percentile,
                c.metric.name(),
                pm(c.value_ms.value, c.value_ms.half_width, 1),
                c.threshold_ms
            )
        })
        .collect();
    parts.push(format!(
        "goodput {}%",
        pm(
            100.0 * s.goodput_share.value,
            s.goodput_share.half_width.map(|h| 100.0 * h),
            1
        )
    ));
    parts.push(format!(
        "{} output tok/s",
        pm(s.output_throughput.value, s.output_throughput.half_width, 0)
    ));
    parts.push(if s.queue.stationary {
        "queue stationary".to_string()
    } else {
        "queue grows".to_string()
    });
    parts.join(", ")
}

/// A fleet measurement's verdict for people: `holds`, `MISSES: why`, or, for a one-fewer
/// fleet the plan could not resolve, `UNRESOLVED: why`.
pub(crate) fn fleet_verdict(m: &LoadMeasurement, unresolved: Option<&str>) -> String {
    match unresolved {
        Some(why) => format!("UNRESOLVED: {why}"),
        None if m.sustainable() => "holds".to_string(),
        None => format!("MISSES: {}", m.misses().join("; ")),
    }
}

/// The headroom against model error, for people: how much slower the GPUs may run, where it
/// was measured, and what a headroom under the search's 1% resolution means.
pub(crate) fn headroom_text(h: &crate::plan::ModelHeadroom) -> String {
    let mut t = if h.slower_pct >= 1.0 {
        format!(
            "holds if the GPUs run up to {:.0}% slower than modelled (every step x{:.2})",
            h.slower_pct, h.max_step_time_scale
        )
    } else {
        "under 1% (the search resolves 1%): the smallest fleet sits at its binding limit, so GPUs even slightly slower than modelled miss; plan.headroom = 0.1 sizes for GPUs 10% slower".to_string()
    };
    if let Some(k) = h.shard {
        t.push_str(&format!(
            "; measured on {k} replicas at their share of the target, a lower bound for the whole fleet"
        ));
    }
    t
}

fn fleet_line(label: &str, m: &LoadMeasurement, unresolved: Option<&str>) -> String {
    let s = m.steady();
    let verdict = fleet_verdict(m, unresolved);
    format!(
        "  {label}: {verdict}\n      {} requests, {} cut as warm-up, window {:.0}-{:.0} s: {}",
        m.requests,
        s.warmup_requests,
        s.window_start_s,
        s.window_end_s,
        steady_line(s)
    )
}

/// Lines for the infeasible candidates below the first `shown` rows of the table (those that
/// never ran: no price, the deployment does not resolve or does not fit; and those that ran
/// and cannot serve the target), one per GPU x dtype x TP and reason with its batch caps, so
/// none leaves the plan unsaid.
fn below_table_lines(t: &mut String, p: &PlanResult, shown: usize) {
    let below: Vec<&CandidateResult> = p
        .candidates
        .iter()
        .skip(shown)
        .filter(|c| c.status == Status::Infeasible)
        .collect();
    if below.is_empty() {
        return;
    }
    let not_run = below.iter().filter(|c| c.simulations == 0).count();
    let _ = writeln!(
        t,
        "Infeasible, below the table ({} candidates, {not_run} of them not run):",
        below.len(),
    );
    // The same reason up to its figures, for the same GPU, dtype and TP: one line.
    let reason = |c: &CandidateResult| -> String {
        c.note
            .as_deref()
            .unwrap_or("")
            .chars()
            .filter(|ch| !ch.is_ascii_digit())
            .collect()
    };
    let mut groups: Vec<(&CandidateResult, String, Vec<u32>)> = Vec::new();
    for c in below {
        let k = &c.candidate;
        let why = reason(c);
        match groups.iter_mut().find(|(g, w, _)| {
            let gk = &g.candidate;
            (gk.gpu.as_str(), gk.dtype.as_str(), gk.parallelism())
                == (k.gpu.as_str(), k.dtype.as_str(), k.parallelism())
                && *w == why
        }) {
            Some((_, _, seqs)) => seqs.push(k.max_num_seqs),
            None => groups.push((c, why, vec![k.max_num_seqs])),
        }
    }
    for (c, _, seqs) in groups {
        let k = &c.candidate;
        let _ = writeln!(
            t,
            "  {} {} {} seqs {}: {}",
            k.gpu,
            k.weights_label(),
            k.parallelism(),
            seqs.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            c.note.as_deref().unwrap_or("")
        );
    }
}

/// When no candidate meets the SLOs: the best latencies each searched candidate reaches at
/// light load, nearest to the SLOs first, so the reader sees how far off they are.
fn light_load_lines(t: &mut String, sc: &Scenario, p: &PlanResult) {
    let slo = &sc.slo;
    let mut rows: Vec<(&CandidateResult, LightLoad, f64)> = p
        .candidates
        .iter()
        .filter_map(|c| c.light_load.map(|l| (c, l)))
        .map(|(c, l)| {
            let worst = [
                slo.ttft_ms.map(|x| l.ttft_ms / x),
                slo.tpot_ms.map(|x| l.tpot_ms / x),
                slo.e2e_ms.map(|x| l.e2e_ms / x),
            ]
            .into_iter()
            .flatten()
            .fold(0.0f64, f64::max);
            (c, l, worst)
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    rows.sort_by(|a, b| a.2.total_cmp(&b.2));
    let _ = writeln!(
        t,
        "Best latencies at light load (nearest the SLOs first; SLO: p{} TTFT {}, p{} TPOT {}):",
        slo.ttft_percentile,
        slo.ttft_ms.map_or("-".into(), |x| format!("{x} ms")),
        slo.tpot_percentile,
        slo.tpot_ms.map_or("-".into(), |x| format!("{x} ms")),
    );
    for (c, l, _) in rows {
        let _ = writeln!(
            t,
            "  {:<32} at {:.3} {} per replica: p{} TTFT {:.1} ms, p{} TPOT {:.2} ms{}",
            c.candidate.label(),
            l.rate_per_s,
            unit(p),
            slo.ttft_percentile,
            l.ttft_ms,
            slo.tpot_percentile,
            l.tpot_ms,
            slo.e2e_ms.map_or(String::new(), |_| format!(
                ", p{} E2E {:.0} ms",
                slo.e2e_percentile, l.e2e_ms
            ))
        );
    }
}

/// Candidates the terminal table shows; candidates.csv has them all.
const TABLE_ROWS: usize = 15;

/// The candidate table's columns: header, narrowest width, right-aligned.
const TABLE_COLUMNS: [(&str, usize, bool); 13] = [
    ("rank", 4, true),
    ("gpu", 13, false),
    ("dtype", 5, false),
    ("tp", 2, true),
    ("seqs", 4, true),
    ("cap/rep", 8, true),
    ("max/rep", 8, true),
    ("binding", 11, false),
    ("reps", 5, true),
    ("GPUs", 5, true),
    ("$/hour", 8, true),
    ("$/M out", 8, true),
    ("note", 0, false),
];

/// One candidate's cells of the terminal table.
fn table_row(i: usize, c: &CandidateResult) -> [String; 13] {
    let (usd, per_m) = match (c.status, c.cost_at_target) {
        (Status::Feasible, Some(x)) => (
            format!("{:.2}", x.usd_per_hour),
            format!("{:.3}", x.usd_per_million_output_tokens),
        ),
        (Status::Pruned, Some(x)) => (format!(">={:.2}", x.usd_per_hour), "-".into()),
        _ => ("-".into(), "-".into()),
    };
    let reps = match c.status {
        Status::Feasible => c.replicas.to_string(),
        Status::Pruned => format!(">={}", c.replicas),
        Status::Infeasible => "-".into(),
    };
    // A candidate that cannot run at all (it does not fit, or does not resolve) has no
    // capacity to show; its note says why.
    let cannot_run = c.status == Status::Infeasible && c.capacity_rate_per_replica <= 0.0;
    let max = match c.status {
        Status::Pruned => "-".to_string(),
        _ if cannot_run => "-".to_string(),
        _ => format!("{:.2}", c.max_rate_per_replica),
    };
    let cap = if cannot_run {
        "-".to_string()
    } else {
        format!("{:.2}", c.capacity_rate_per_replica)
    };
    [
        (i + 1).to_string(),
        c.candidate.gpu.clone(),
        c.candidate.weights_label().to_string(),
        // With data or expert parallelism, the deployment's label (`TP2 DP4 EP8`), as
        // plan.json, the report's page and plots name it (the column is `parallelism` then).
        match (c.candidate.dp, c.candidate.ep) {
            (1, 1) => c.candidate.tp.to_string(),
            _ => c.candidate.parallelism(),
        },
        // With a [speculative] table, the candidate's K after its batch cap: `256 K3`.
        match c.candidate.num_speculative_tokens {
            None => c.candidate.max_num_seqs.to_string(),
            Some(k) => format!("{} K{k}", c.candidate.max_num_seqs),
        },
        cap,
        max,
        c.binding
            .as_ref()
            .map_or("-", |b| b.constraint.label())
            .to_string(),
        reps,
        if c.status == Status::Infeasible {
            "-".into()
        } else {
            c.gpus.to_string()
        },
        usd,
        per_m,
        c.note.clone().unwrap_or_default(),
    ]
}

/// A table column: header, narrowest width, right-aligned.
type Column = (&'static str, usize, bool);

/// The terminal table's columns and rows: [`TABLE_COLUMNS`], with `router` and `cpu GiB`
/// after `seqs` when the plan searches them, and `hit%` (the sized fleet's prefix-cache hit
/// rate) before `note` when the workload carries block identities.
fn candidate_table(p: &PlanResult) -> (Vec<Column>, Vec<Vec<String>>) {
    let shown = &p.candidates[..p.candidates.len().min(TABLE_ROWS)];
    let mut columns = TABLE_COLUMNS.to_vec();
    let mut rows: Vec<Vec<String>> = shown
        .iter()
        .enumerate()
        .map(|(i, c)| table_row(i, c).to_vec())
        .collect();
    let router = p.candidates.iter().any(|c| c.candidate.router.is_some());
    let offload = p
        .candidates
        .iter()
        .any(|c| c.candidate.kv_offloading_size_gib.is_some());
    let hits = p.rate_unit.is_some()
        || p.candidates
            .iter()
            .any(|c| c.prefix_cache_hit_rate.is_some());
    if p.candidates
        .iter()
        .any(|c| c.candidate.dp != 1 || c.candidate.ep != 1)
    {
        // `TP8` beside `TP2 DP4 EP8`: one label for every row.
        columns[3] = ("parallelism", 11, false);
        for (row, c) in rows.iter_mut().zip(shown) {
            row[3] = c.candidate.parallelism();
        }
    }
    let note = columns.len() - 1;
    if hits {
        // The CPU tier's share in a column of its own, so the hit rates line up.
        let cpu_hits = shown
            .iter()
            .any(|c| c.prefix_cache_hit_rate_cpu.is_some_and(|x| x > 0.0));
        if cpu_hits {
            columns.insert(note, ("cpu hit%", 8, true));
        }
        columns.insert(note, ("hit%", 5, true));
        for (row, c) in rows.iter_mut().zip(shown) {
            let pct = |x: Option<f64>| x.map_or("-".into(), |h| format!("{:.1}", 100.0 * h));
            if cpu_hits {
                let cpu = c.prefix_cache_hit_rate_cpu.filter(|&x| x > 0.0);
                row.insert(note, pct(cpu));
            }
            row.insert(note, pct(c.prefix_cache_hit_rate));
        }
    }
    let seqs = 5;
    if offload {
        columns.insert(seqs, ("cpu GiB", 7, true));
        for (row, c) in rows.iter_mut().zip(shown) {
            let g = c.candidate.kv_offloading_size_gib.unwrap_or(0.0);
            row.insert(seqs, format!("{g}"));
        }
    }
    if router {
        columns.insert(seqs, ("router", 17, false));
        for (row, c) in rows.iter_mut().zip(shown) {
            row.insert(seqs, c.candidate.router.clone().unwrap_or_default());
        }
    }
    (columns, rows)
}

/// Under the table, with sessions or searched routers: the rate units, and which routers
/// were searched and why.
fn reuse_lines(t: &mut String, sc: &Scenario, p: &PlanResult) {
    if let Some(u) = &p.rate_unit {
        let _ = writeln!(
            t,
            "units: target, cap/rep and max/rep in {u} (workload.arrival starts sessions; cap/rep: a saturated replica's completed requests/s over the mean requests per session); hit%: prompt tokens served from the prefix cache in the sized fleet's run"
        );
    }
    if p.candidates
        .iter()
        .any(|c| c.candidate.kv_offloading_size_gib.is_some_and(|g| g > 0.0))
    {
        let _ = writeln!(t, "{CPU_OFFLOAD_PRICE_NOTE}");
    }
    let shown = &p.candidates[..p.candidates.len().min(TABLE_ROWS)];
    if shown
        .iter()
        .any(|c| c.prefix_cache_hit_rate_cpu.is_some_and(|x| x > 0.0))
    {
        let _ = writeln!(
            t,
            "cpu hit%: of the prompt tokens, those loaded from the CPU tier (part of hit%)"
        );
    }
    let mut routers: Vec<&str> = Vec::new();
    for c in &p.candidates {
        if let Some(r) = c.candidate.router.as_deref() {
            if !routers.contains(&r) {
                routers.push(r);
            }
        }
    }
    if !routers.is_empty() {
        let why = if sc.plan.routers.is_some() {
            "plan.routers"
        } else {
            "default for a workload with block identities: the scenario's router and prefix-aware; plan.routers sets them"
        };
        let _ = writeln!(t, "routers searched: {} ({why})", routers.join(", "));
    }
}

/// What a CPU KV tier costs in the plan: nothing apart, said so a user does not read it as
/// free by omission.
pub(crate) const CPU_OFFLOAD_PRICE_NOTE: &str = "cpu GiB: host DRAM per replica for the CPU KV tier; not priced apart: $/hour is the GPUs' $/GPU-hour, which for a cloud instance includes its host memory (check the instance has that much DRAM per replica; on owned hardware price it yourself)";

/// The unit of the plan's arrival rates: `rate_unit`, else req/s.
fn unit(p: &PlanResult) -> &str {
    p.rate_unit.as_deref().unwrap_or("req/s")
}

/// Writes the header and `rows` in columns as wide as their widest cell, one space apart, so
/// no two columns run together whatever the figures.
fn write_columns(t: &mut String, columns: &[(&str, usize, bool)], rows: &[Vec<String>]) {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(j, (h, min, _))| {
            rows.iter()
                .map(|r| r[j].chars().count())
                .chain([h.len(), *min])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let header: Vec<String> = columns.iter().map(|(h, _, _)| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (j, cell) in row.iter().enumerate() {
            let (_, _, right) = columns[j];
            if j > 0 {
                line.push(' ');
            }
            let pad = widths[j].saturating_sub(cell.chars().count());
            if j + 1 == row.len() {
                line.push_str(cell);
            } else if right {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        let _ = writeln!(t, "{}", line.trim_end());
    }
}

/// Writes the plan as a table and its chosen deployment with the evidence, for people.
pub fn write_plan_text(w: &mut dyn Write, sc: &Scenario, p: &PlanResult) -> Result<()> {
    let mut t = String::new();
    let slo = &sc.slo;
    let fmt_slo =
        |v: Option<f64>, pct: f64, name: &str| v.map(|ms| format!("p{pct} {name} <= {ms} ms"));
    let slos: Vec<String> = [
        fmt_slo(slo.ttft_ms, slo.ttft_percentile, "TTFT"),
        fmt_slo(slo.tpot_ms, slo.tpot_percentile, "TPOT"),
        fmt_slo(slo.e2e_ms, slo.e2e_percentile, "E2E"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let _ =
        writeln!(
        t,
        "============ servesim plan: {} ============\n{} at {:.2} {}; SLOs: {}; goodput >= {:.0}%",
        sc.name,
        sc.deployment.model,
        p.target_rate_per_s,
        unit(p),
        if slos.is_empty() { "none".into() } else { slos.join(", ") },
        100.0 * p.goodput_threshold
    );
    let (columns, rows) = candidate_table(p);
    write_columns(&mut t, &columns, &rows);
    if p.candidates.len() > TABLE_ROWS {
        let _ = writeln!(
            t,
            "     ... {} more in candidates.csv",
            p.candidates.len() - TABLE_ROWS
        );
    }
    reuse_lines(&mut t, sc, p);
    below_table_lines(&mut t, p, TABLE_ROWS);
    let pruned = p
        .candidates
        .iter()
        .filter(|c| c.status == Status::Pruned)
        .count();
    if pruned > 0 {
        let _ = writeln!(
            t,
            "({pruned} candidates not searched fully: their steady-state capacity alone needs a fleet dearer than the plan; plan.exhaustive = true searches them)"
        );
    }
    let xpyd = xpyd_recommended(p);
    if let Some(r) = xpyd {
        write_xpyd_headline(&mut t, p, r);
    }
    match (p.chosen_candidate(), &p.detail) {
        (Some(c), Some(d)) => {
            let heading = if xpyd.is_some() {
                "Colocated alternative"
            } else {
                "Plan"
            };
            write_chosen_text(&mut t, sc, p, c, d, heading);
        }
        _ => {
            let _ = writeln!(
                t,
                "\nNo candidate meets the SLOs at this load within the search space."
            );
            for line in p.slo_below_floor.iter().flat_map(|f| f.lines()) {
                let _ = writeln!(t, "  SLO below the physical floor: {line}");
            }
            light_load_lines(&mut t, sc, p);
            if let Some(n) = &p.nearest_slo {
                let _ = writeln!(t, "  {n}");
            }
        }
    }
    if let Some(w) = &p.week {
        write_week_text(&mut t, sc, w);
    }
    if let Some(x) = &p.disaggregated {
        write_xpyd_text(&mut t, p, x);
    }
    let m = &p.method;
    let _ = writeln!(
        t,
        "method: steady state (MSER-5 warm-up cut, drain excluded), {:.0}% batch-means intervals over {} batches, runs extended to ±{:.0}% (up to {} requests per replica; fleets at least {}); rates bisected to {:.0}%; fleets above {} replicas sized on shards of {}; the chosen fleet and one fewer judged whole at the printed line's length and seed",
        100.0 * m.analysis.confidence,
        m.analysis.batches,
        100.0 * m.analysis.tolerance,
        m.max_requests_per_replica,
        m.fleet_min_requests,
        100.0 * m.rate_precision,
        crate::plan::FULL_SIZING_MAX,
        crate::plan::SHARD_REPLICAS
    );
    let _ = writeln!(t, "({} simulations)", p.simulations);
    w.write_all(t.as_bytes()).map_err(io)
}

/// The plan's recommendation when it is a disaggregated (xPyD) deployment: the headline then
/// states it, and the best colocated fleet follows as the alternative.
pub(crate) fn xpyd_recommended(p: &PlanResult) -> Option<&crate::plan::Recommendation> {
    p.recommendation
        .as_ref()
        .filter(|r| r.kind == "disaggregated")
}

/// The headline of a plan whose recommendation is disaggregated: the deployment, its GPUs
/// and cost, against the colocated alternative below.
fn write_xpyd_headline(t: &mut String, p: &PlanResult, r: &crate::plan::Recommendation) {
    let _ = writeln!(
        t,
        "\nPlan: disaggregated (prefill/decode) {}: {} GPUs, ${:.2}/hour, ${:.3} per M output tokens",
        r.deployment, r.gpus, r.usd_per_hour, r.usd_per_million_output_tokens
    );
    let alternative = p
        .chosen_candidate()
        .and_then(|c| c.cost_at_target.map(|x| (c.gpus, x.usd_per_hour)));
    if let Some((gpus, usd)) = alternative {
        let _ = writeln!(
            t,
            "  recommended over the best colocated fleet ({gpus} GPUs, ${usd:.2}/hour: the colocated alternative below); its candidates under Disaggregated"
        );
    }
    if let Some(cmd) = &r.run_command {
        let _ = writeln!(t, "  re-run it: {cmd}");
    }
}

/// The chosen plan: its fleet, cost, per-replica figures, whole-fleet evidence (R and R - 1),
/// re-run line, headroom and batch point.
fn write_chosen_text(
    t: &mut String,
    sc: &Scenario,
    p: &PlanResult,
    c: &CandidateResult,
    d: &crate::plan::ChosenDetail,
    heading: &str,
) {
    let unit = unit(p);
    let cost = c.cost_at_target.unwrap_or_else(|| {
        crate::plan::pricing::cost(c.gpus, c.price_usd_per_gpu_hour, 0.0, 0.0, 0.0)
    });
    let _ = writeln!(
        t,
        "\n{heading}: {} x {} ({} of {}), {} weights, {} KV, max_num_seqs {}{}",
        c.gpus,
        c.candidate.gpu,
        replicas_word(c.replicas),
        match (c.candidate.dp, c.candidate.ep, c.candidate.pp) {
            (1, 1, 1) => format!("TP {}", c.candidate.tp),
            _ => c.candidate.parallelism(),
        },
        c.candidate.weights_label(),
        c.candidate.kv_cache_dtype,
        c.candidate.max_num_seqs,
        match c.candidate.num_speculative_tokens {
            None => String::new(),
            Some(0) => ", no speculative decoding".into(),
            Some(k) => format!(", speculative decoding K = {k}"),
        }
    );
    let _ = writeln!(
        t,
        "  cost: ${:.2}/hour, ${:.0}/month at ${:.2}/GPU-hour; ${:.3} per M output tokens, ${:.3} per M total tokens",
        cost.usd_per_hour, cost.usd_per_month, cost.price_usd_per_gpu_hour, cost.usd_per_million_output_tokens, cost.usd_per_million_total_tokens
    );
    let _ = writeln!(
        t,
        "  blended prices (input at {}x output): ${:.3} per M output, ${:.3} per M input",
        sc.pricing.input_output_price_ratio.unwrap_or(0.25),
        cost.usd_per_million_output_blended,
        cost.usd_per_million_input_blended
    );
    let _ = writeln!(
        t,
        "  per replica: capacity {:.2} {unit} ({:.0} output tok/s); sustains {:.2} {unit} within the SLOs; binding: {}",
        c.capacity_rate_per_replica,
        c.capacity_output_tokens_per_s,
        c.max_rate_per_replica,
        c.binding
            .as_ref()
            .map_or("none found".to_string(), |b| format!(
                "{}: {}",
                b.constraint.label(),
                b.detail
            ))
    );
    let _ = writeln!(
        t,
        "{}",
        fleet_line(
            &format!(
                "fleet of {} at {:.2} {unit}",
                d.fleet.replicas, p.target_rate_per_s
            ),
            &d.verification,
            None
        )
    );
    match &d.fleet.one_fewer {
        Some(m) => {
            let _ = writeln!(
                t,
                "{}",
                fleet_line(
                    &format!("fleet of {} (one fewer)", m.replicas),
                    m,
                    d.unresolved.as_deref()
                )
            );
        }
        None => match &d.unresolved {
            Some(why) => {
                let _ = writeln!(t, "  UNRESOLVED: {why}");
            }
            None => {
                let _ = writeln!(t, "  (one replica holds: no smaller fleet exists)");
            }
        },
    }
    if let Some(cmd) = &d.run_command {
        let _ = writeln!(
            t,
            "  re-run the fleet as measured{}: {cmd}",
            one_fewer_hint(d)
        );
    }
    let _ = writeln!(
        t,
        "  headroom: {}{}",
        headroom_text(&d.headroom),
        match (p.method.validated_headroom, p.method.step_time_scale > 1.0) {
            (Some(v), _) => format!(
                "; sized {:.1}% slower than modelled (the model's out-of-sample error on the reference rows at plan.headroom_coverage: {:+.1}%)",
                100.0 * (p.method.step_time_scale - 1.0),
                100.0 * v
            ),
            (None, true) => format!(
                "; sized with plan.headroom = {:.0}%",
                100.0 * (p.method.step_time_scale - 1.0)
            ),
            (None, false) => String::new(),
        }
    );
    write_batch_point(t, &d.batch, unit);
    if let Some(n) = &p.near_tie {
        let _ = writeln!(t, "  note: {n}");
    }
    speculation_lines(t, p);
}

/// How to re-run one replica fewer from the re-run line: ` (R - 1 in place of R ...)`, or
/// nothing for a one-replica fleet (no smaller fleet exists; a 0-replica run is no fleet).
pub(crate) fn one_fewer_hint(d: &crate::plan::ChosenDetail) -> String {
    match d.fleet.replicas {
        0 | 1 => String::new(),
        r => format!(
            " ({} in place of {r} in its replica settings for one fewer)",
            r - 1
        ),
    }
}

/// The batch point: cost per million output tokens at capacity against the SLO-bound rate,
/// and by TPOT SLO.
fn write_batch_point(t: &mut String, b: &crate::plan::BatchPoint, unit: &str) {
    let _ = writeln!(
        t,
        "  batch point: ${:.3} per M output tokens at capacity (no latency SLO) vs ${:.3} at the SLO-bound rate: funds a {:.0}% batch discount",
        b.usd_per_million_at_capacity,
        b.usd_per_million_at_slo,
        100.0 * b.discount
    );
    let rate = format!("max {unit}/replica");
    let w = 20.max(rate.len() + 2);
    let _ = writeln!(
        t,
        "    {:>12}{:>w$}{:>12}{:>16}",
        "TPOT SLO", rate, "$/M out", "batch discount"
    );
    for r in &b.by_tpot {
        if r.max_rate_per_replica > 0.0 {
            let _ = writeln!(
                t,
                "    {:>9.0} ms{:>w$.2}{:>12.3}{:>15.0}%",
                r.tpot_ms,
                r.max_rate_per_replica,
                r.usd_per_million,
                100.0 * r.discount
            );
        } else {
            let _ = writeln!(
                t,
                "    {:>9.0} ms{:>w$}{:>12}{:>16}",
                r.tpot_ms, "not reachable", "-", "-"
            );
        }
    }
}

/// The xPyD candidates and the best of each kind side by side, for people.
fn write_xpyd_text(t: &mut String, p: &PlanResult, x: &crate::plan::DisaggPlan) {
    let _ = writeln!(
        t,
        "\nDisaggregated (xPyD) candidates: {} weighed",
        x.candidates.len()
    );
    let _ = writeln!(
        t,
        "{:>4} {:<34}{:>5}{:>9}{:>10}{:>10}{:>11}  note",
        "rank", "deployment", "GPUs", "$/hour", "TTFT ms", "TPOT ms", "bp wait ms"
    );
    for (i, c) in x.candidates.iter().enumerate().take(TABLE_ROWS) {
        if c.status == Status::Feasible {
            let _ = writeln!(
                t,
                "{:>4} {:<34}{:>5}{:>9.2}{:>10.0}{:>10.1}{:>11.1}  {}",
                i + 1,
                c.label(),
                c.gpus,
                c.usd_per_hour,
                c.ttft_ms,
                c.tpot_ms,
                c.backpressure_wait_ms,
                match (c.one_fewer_prefill_holds, c.one_fewer_decode_holds) {
                    (Some(false), Some(false)) => "one fewer P or D misses",
                    (Some(false), None) => "one fewer P misses",
                    (None, Some(false)) => "one fewer D misses",
                    _ => "",
                }
            );
        } else {
            let _ = writeln!(
                t,
                "{:>4} {:<34}{:>5}{:>9}{:>10}{:>10}{:>11}  {}",
                i + 1,
                format!(
                    "P {} TP{} / D {} TP{}",
                    c.prefill.gpu, c.prefill.tp, c.decode.gpu, c.decode.tp
                ),
                "-",
                "-",
                "-",
                "-",
                "-",
                c.note.as_deref().unwrap_or("")
            );
        }
    }
    let colocated = p.chosen_candidate();
    let best = x.best.map(|i| &x.candidates[i]);
    let _ = writeln!(t, "Best of each kind:");
    match colocated {
        Some(c) => {
            let _ = writeln!(
                t,
                "  colocated:     {} x {} {} ({} GPUs), ${:.2}/hour",
                c.replicas,
                c.candidate.gpu,
                c.candidate.parallelism(),
                c.gpus,
                c.cost_at_target.map_or(0.0, |x| x.usd_per_hour)
            );
        }
        None => {
            let _ = writeln!(t, "  colocated:     none feasible");
        }
    }
    match best {
        Some(b) => {
            let _ = writeln!(
                t,
                "  disaggregated: {} ({} GPUs), ${:.2}/hour",
                b.label(),
                b.gpus,
                b.usd_per_hour
            );
        }
        None => {
            let _ = writeln!(t, "  disaggregated: none feasible");
        }
    }
    let _ = writeln!(t, "Recommended: {}", x.recommended);
    if let Some(cmd) = &x.run_command {
        let _ = writeln!(t, "  re-run the best xPyD deployment: {cmd}");
    }
}

/// `s` seconds since the start of a period as `day D hh:mm` (`hh:mm` within the first day).
fn clock(s: f64) -> String {
    let m = (s / 60.0).round() as u64;
    let (d, h, m) = (m / 1440, (m / 60) % 24, m % 60);
    if d == 0 {
        format!("{h:02}:{m:02}")
    } else {
        format!("day {d} {h:02}:{m:02}")
    }
}

/// The period plan, for people.
fn write_week_text(t: &mut String, sc: &Scenario, w: &crate::plan::week::WeekPlan) {
    let peak_hour = w
        .candidates
        .first()
        .and_then(|c| {
            c.hours
                .iter()
                .max_by(|a, b| a.arrival_rate_per_s.total_cmp(&b.arrival_rate_per_s))
        })
        .map_or(0, |h| h.hour);
    let unit = w.rate_unit.as_deref().unwrap_or("req/s");
    let _ = writeln!(
        t,
        "\nPeriod: {} hours; the plan above is for the busiest {:.0} minutes ({:.2} {unit} from {}); the busiest hour (hour {peak_hour}) averages {:.2} {unit}; every request of the period simulated:",
        w.hours,
        w.peak_window_s / 60.0,
        w.peak_rate_per_s,
        clock(w.peak_start_s),
        w.peak_hour_rate_per_s
    );
    if w.rate_unit.is_some() {
        let _ = writeln!(
            t,
            "  units: the period's rates in {unit}, counting session starts (each session's first request), as the plan's target; the autoscaler counts requests (every turn)"
        );
    }
    for (i, c) in w.candidates.iter().enumerate() {
        let worst = c
            .hours
            .iter()
            .min_by(|a, b| a.slo_attainment.total_cmp(&b.slo_attainment));
        let range = |f: fn(&crate::plan::week::HourRow) -> u32| {
            let lo = c.hours.iter().map(f).min().unwrap_or(0);
            let hi = c.hours.iter().map(f).max().unwrap_or(0);
            format!("{lo}-{hi}")
        };
        let sp = &c.static_period;
        let _ = writeln!(
            t,
            "{} {}: static fleet {} ${:.0}, {} over the period (p99 TTFT {:.0} ms, p99 TPOT {:.1} ms, SLO attainment {:.3}%); hour-by-hour {} replicas ${:.0}; autoscaled ${:.0} ({:+.0}% against static, {:.1} replica-hours, cold start {:.0} s), SLO attainment {:.3}% (worst hour {}: {:.2}%), {} requests failed",
            if Some(i) == w.chosen { "  CHOSEN" } else { "        " },
            c.candidate.label(),
            replicas_word(c.static_replicas),
            c.static_cost_usd,
            if sp.meets_slos { "meets every SLO" } else { "MISSES the SLOs" },
            sp.p99_ttft_ms,
            sp.p99_tpot_ms,
            100.0 * sp.slo_attainment,
            range(|h| h.planned_replicas),
            c.planned_cost_usd,
            c.autoscaled_cost_usd,
            100.0 * (c.autoscaled_cost_usd / c.static_cost_usd.max(1e-9) - 1.0),
            c.summary.billed_replica_hours,
            c.cold_start_s,
            100.0 * c.slo_attainment,
            worst.map_or(0, |h| h.hour),
            100.0 * worst.map_or(1.0, |h| h.slo_attainment),
            c.lost_requests
        );
    }
    if let Some(cmd) = w
        .chosen_candidate()
        .and_then(|c| c.static_run_command.as_ref())
    {
        let _ = writeln!(t, "  re-run the static fleet over the period: {cmd}");
    }
    if let Some(s) = &w.spares {
        let _ = writeln!(
            t,
            "  with the scenario's faults, the static fleet: SLO attainment {:.3}% ({} failed) without spares, {:.3}% ({} failed) with {} spare(s)",
            100.0 * s.attainment_without_spares,
            s.lost_without_spares,
            100.0 * s.attainment_with_spares,
            s.lost_with_spares,
            s.spares
        );
    }
    if let Some(a) = &sc.autoscale {
        let _ = writeln!(
            t,
            "  autoscaler: {} policy{}, {}-{} replicas, step {}, decisions every {} s, scale-down cooldown {} s",
            a.policy,
            if a.policy == "utilization" {
                format!(" at {:.0}% of the measured capacity", 100.0 * a.target_utilization)
            } else {
                String::new()
            },
            a.min_replicas,
            a.max_replicas,
            a.step,
            a.interval_s,
            a.scale_down_cooldown_s
        );
    }
    for n in &w.notes {
        let _ = writeln!(t, "  note: {n}");
    }
    let _ = writeln!(t, "  hour by hour: fleet.csv, week.png");
}

/// The plan's charts, by file stem.
pub fn plan_charts(sc: &Scenario, out: &PlanOutput) -> Vec<(&'static str, Chart)> {
    let p = &out.plan;
    let mut charts = Vec::new();
    if let (Some(c), Some(_)) = (p.chosen_candidate(), &p.detail) {
        charts.extend(chosen_charts(sc, c));
    }
    if let Some(run) = &out.verification_run {
        charts.extend(verification_charts(sc, run));
    }
    charts
}

/// The chosen candidate's load sweep: throughput against p99 TTFT and TPOT, and cost against
/// load.
fn chosen_charts(sc: &Scenario, c: &CandidateResult) -> Vec<(&'static str, Chart)> {
    let mut charts = Vec::new();
    let title = format!(
        "{} {} {} seqs {} (1 replica)",
        c.candidate.gpu,
        c.candidate.weights_label(),
        c.candidate.parallelism(),
        c.candidate.max_num_seqs
    );
    let binding = c.binding.as_ref().map_or(String::new(), |b| {
        format!(", binding: {}", b.constraint.label())
    });
    let split = |f: &dyn Fn(&crate::plan::CurvePoint) -> f64| -> Vec<Series> {
        let steady: Vec<(f64, f64)> = c
            .curve
            .iter()
            .filter(|q| q.stationary)
            .map(|q| (f(q), q.output_tokens_per_s_per_gpu))
            .collect();
        let saturated: Vec<(f64, f64)> = c
            .curve
            .iter()
            .filter(|q| !q.stationary)
            .map(|q| (f(q), q.output_tokens_per_s_per_gpu))
            .collect();
        let mut v = vec![Series {
            name: "load sweep (steady state)".into(),
            points: steady,
            style: SeriesStyle::LineWithPoints,
        }];
        if !saturated.is_empty() {
            v.push(Series {
                name: "past saturation: queue grows".into(),
                points: saturated,
                style: SeriesStyle::Points,
            });
        }
        v
    };
    let gpu_out = |s: &SteadyState| s.output_throughput.value / c.candidate.gpus().max(1) as f64;
    let marker = |x: f64, s: &SteadyState| Marker {
        x,
        y: gpu_out(s),
        label: format!(
            "plan: {:.2} {} per replica{binding}",
            c.max_rate_per_replica,
            crate::plan::measure::rate_unit(sc)
        ),
    };
    for (stem, metric, slo_ms, pct, log_x) in [
        (
            "throughput-vs-p99-ttft",
            "TTFT",
            sc.slo.ttft_ms,
            sc.slo.ttft_percentile,
            true,
        ),
        (
            "throughput-vs-p99-tpot",
            "TPOT",
            sc.slo.tpot_ms,
            sc.slo.tpot_percentile,
            false,
        ),
    ] {
        let pick = |q: &crate::plan::CurvePoint| {
            if metric == "TTFT" {
                q.p99_ttft_ms
            } else {
                q.p99_tpot_ms
            }
        };
        let at = c.at_max_rate.as_ref();
        charts.push((
            stem,
            Chart {
                title: format!("throughput vs p99 {metric}: {title}"),
                x_label: format!("p99 {metric} (ms)"),
                y_label: "output tokens/s per GPU".into(),
                series: split(&pick),
                x_rules: slo_ms
                    .map(|t| Rule {
                        value: t,
                        label: format!("SLO p{pct} {metric} {t} ms"),
                    })
                    .into_iter()
                    .collect(),
                y_rules: vec![],
                markers: at
                    .map(|s| {
                        let x = if metric == "TTFT" {
                            s.ttft.p99_ms
                        } else {
                            s.tpot.p99_ms
                        };
                        vec![marker(x, s)]
                    })
                    .unwrap_or_default(),
                log_x,
                log_y: false,
            },
        ));
    }
    let unit = crate::plan::measure::rate_unit(sc);
    charts.push(("cost-vs-load", cost_chart(c, &title, &binding, unit)));
    charts
}

/// Cost per million output tokens against the load per replica, with the maximum rate within
/// the SLOs and the capacity marked.
fn cost_chart(c: &CandidateResult, title: &str, binding: &str, unit: &str) -> Chart {
    Chart {
        title: format!("$ per 1M output tokens vs load: {title}"),
        x_label: format!("arrival rate per replica ({unit})"),
        y_label: "$ per 1M output tokens".into(),
        series: vec![Series {
            name: format!(
                "{} at ${:.2}/GPU-hour",
                c.candidate.gpu, c.price_usd_per_gpu_hour
            ),
            points: c
                .curve
                .iter()
                .filter(|q| q.usd_per_million_output_tokens > 0.0)
                .map(|q| (q.rate_per_s, q.usd_per_million_output_tokens))
                .collect(),
            style: SeriesStyle::LineWithPoints,
        }],
        x_rules: vec![
            Rule {
                value: c.max_rate_per_replica,
                label: format!("max rate within SLOs{binding}"),
            },
            Rule {
                value: c.capacity_rate_per_replica,
                label: "capacity (saturated)".into(),
            },
        ],
        y_rules: vec![],
        markers: vec![],
        log_x: false,
        log_y: true,
    }
}

/// The verification run's latency CDFs and time series (with its steady-state window).
fn verification_charts(
    sc: &Scenario,
    run: &crate::summary::RunResult,
) -> Vec<(&'static str, Chart)> {
    let mut charts = Vec::new();
    charts.push((
        "latency-cdf",
        Chart {
            title: "verification run of the fleet: TTFT and TPOT CDFs (whole run)".into(),
            x_label: "latency (ms)".into(),
            y_label: "fraction of requests".into(),
            series: vec![
                cdf_series("TTFT", &run.ttft_cdf),
                cdf_series("TPOT", &run.tpot_cdf),
            ],
            x_rules: [("TTFT", sc.slo.ttft_ms), ("TPOT", sc.slo.tpot_ms)]
                .iter()
                .filter_map(|&(metric, v)| {
                    v.map(|v| Rule {
                        value: v,
                        label: format!("{metric} SLO {v} ms"),
                    })
                })
                .collect(),
            y_rules: vec![],
            markers: vec![],
            log_x: true,
            log_y: false,
        },
    ));
    let ts = &run.timeseries;
    let window = run.summary.steady_state.as_ref();
    charts.push((
        "timeseries",
        Chart {
            title: "verification run of the fleet: time series".into(),
            x_label: "simulated time (s)".into(),
            y_label: "requests; KV use (% of capacity)".into(),
            series: vec![
                Series {
                    name: "running".into(),
                    points: ts.iter().map(|p| (p.time_s, p.running)).collect(),
                    style: SeriesStyle::Line,
                },
                Series {
                    name: "waiting".into(),
                    points: ts.iter().map(|p| (p.time_s, p.waiting)).collect(),
                    style: SeriesStyle::Line,
                },
                Series {
                    name: "KV use %".into(),
                    points: ts
                        .iter()
                        .map(|p| (p.time_s, 100.0 * p.kv_utilization))
                        .collect(),
                    style: SeriesStyle::Line,
                },
            ],
            x_rules: window
                .map(|w| {
                    vec![
                        Rule {
                            value: w.window_start_s,
                            label: "warm-up ends".into(),
                        },
                        Rule {
                            value: w.window_end_s,
                            label: "last arrival: drain".into(),
                        },
                    ]
                })
                .unwrap_or_default(),
            y_rules: vec![],
            markers: vec![],
            log_x: false,
            log_y: false,
        },
    ));
    charts
}

/// The period plan's stacked chart (load, replicas, p99 TTFT by hour), when there is one.
pub fn week_charts(sc: &Scenario, p: &PlanResult) -> Option<Vec<Chart>> {
    let w = p.week.as_ref()?;
    let c = w.chosen_candidate()?;
    let hours = |f: &dyn Fn(&crate::plan::week::HourRow) -> f64| -> Vec<(f64, f64)> {
        c.hours.iter().map(|h| (h.hour as f64, f(h))).collect()
    };
    let name = c.candidate.label();
    let base = |title: String, y: &str, series: Vec<Series>| Chart {
        title,
        x_label: "hour".into(),
        y_label: y.into(),
        series,
        x_rules: vec![],
        y_rules: vec![],
        markers: vec![],
        log_x: false,
        log_y: false,
    };
    let load = base(
        format!("load over the period ({} hours)", w.hours),
        &format!(
            "arrival rate ({})",
            w.rate_unit.as_deref().unwrap_or("req/s")
        ),
        vec![Series {
            name: if w.rate_unit.is_some() {
                "session starts".into()
            } else {
                "arrivals".into()
            },
            points: hours(&|h| h.arrival_rate_per_s),
            style: SeriesStyle::Line,
        }],
    );
    let mut replicas = base(
        format!("replicas: {name}"),
        "replicas",
        vec![
            // Dots as well: where every replica paid for is ready the two lines coincide,
            // and the dots keep this one visible under the other.
            Series {
                name: "autoscaled: paid for".into(),
                points: hours(&|h| h.replicas),
                style: SeriesStyle::LineWithPoints,
            },
            Series {
                name: "autoscaled: ready".into(),
                points: hours(&|h| h.ready_replicas),
                style: SeriesStyle::Line,
            },
            Series {
                name: "sized hour by hour".into(),
                points: hours(&|h| h.planned_replicas as f64),
                style: SeriesStyle::Line,
            },
        ],
    );
    replicas.y_rules.push(Rule {
        value: c.static_replicas as f64,
        label: format!("static fleet for the peak: {}", c.static_replicas),
    });
    let mut ttft = base(
        "p99 TTFT of each hour's requests, autoscaled".into(),
        "p99 TTFT (ms)",
        vec![Series {
            name: "p99 TTFT".into(),
            points: hours(&|h| h.p99_ttft_ms),
            style: SeriesStyle::Line,
        }],
    );
    if let Some(t) = sc.slo.ttft_ms {
        ttft.y_rules.push(Rule {
            value: t,
            label: format!("SLO {t} ms"),
        });
    }
    Some(vec![load, replicas, ttft])
}

/// Writes the report folder: plan.json, candidates.csv, cost.xlsx, every chart as PNG and
/// SVG, and index.html.
pub fn write_plan_report(dir: &Path, sc: &Scenario, out: &PlanOutput) -> Result<()> {
    let p = &out.plan;
    export_all(
        dir,
        p,
        &[
            &JsonExporter::new("plan.json"),
            &CsvExporter::new("candidates.csv"),
            &CostWorkbookExporter,
        ],
    )?;
    let mut images = Vec::new();
    if let Some(charts) = week_charts(sc, p) {
        for (name, format) in [
            ("week.png", ImageFormat::Png),
            ("week.svg", ImageFormat::Svg),
        ] {
            render_stack(&charts, &dir.join(name), format, 1200, 360)?;
        }
        images.push(("week.png".to_string(), "week.svg".to_string()));
        if let Some(w) = &p.week {
            export_all(dir, w, &[&CsvExporter::new("fleet.csv")])?;
        }
    }
    for (stem, chart) in plan_charts(sc, out) {
        let png = format!("{stem}.png");
        let svg = format!("{stem}.svg");
        render(&chart, &dir.join(&png), ImageFormat::Png)?;
        render(&chart, &dir.join(&svg), ImageFormat::Svg)?;
        images.push((png, svg));
    }
    let page = html::page(sc, p, &images);
    write_atomic(&dir.join("index.html"), page.as_bytes())
}

/// Whether speculative decoding pays at the target, and the batch at which it stops paying.
fn speculation_lines(t: &mut String, p: &PlanResult) {
    use crate::plan::{SearchOutcome, SpeculationAnswer};
    let Some(v) = &p.speculation else {
        return;
    };
    let cost = |x: &Option<(String, f64)>, outcome: SearchOutcome, side: &str| match (x, outcome) {
        (Some((label, usd)), _) => format!("${usd:.3}/M output tokens ({label})"),
        (None, SearchOutcome::NotSearched) => format!("not searched (plan.speculative has {side})"),
        (None, SearchOutcome::Pruned) => {
            "pruned (already costs more than the plan at its capacity)".to_string()
        }
        (None, _) => "no feasible fleet".to_string(),
    };
    let _ = writeln!(
        t,
        "\nSpeculative decoding at {:.1} {}:",
        p.target_rate_per_s,
        unit(p)
    );
    let _ = writeln!(
        t,
        "  with:    {}",
        cost(&v.with, v.with_outcome, "no K >= 1")
    );
    let _ = writeln!(
        t,
        "  without: {}",
        cost(&v.without, v.without_outcome, "no K = 0")
    );
    let ratio = match (&v.with, &v.without) {
        (Some(w), Some(o)) => Some(w.1 / o.1),
        _ => None,
    };
    let verdict = match (v.verdict, ratio) {
        (SpeculationAnswer::EqualWithinResolution, Some(r)) => format!(
            "with and without cost the same within the search's resolution (about 3%): {:+.1}%",
            100.0 * (r - 1.0)
        ),
        (SpeculationAnswer::Pays, Some(r)) => format!(
            "speculation pays at the target load: {:.1}% cheaper",
            100.0 * (1.0 - r)
        ),
        (SpeculationAnswer::Pays, None) => "speculation pays at the target load".into(),
        (SpeculationAnswer::DoesNotPay, _) => "speculation does not pay at the target load".into(),
        _ => "not compared: one side was not searched or neither has a feasible fleet".into(),
    };
    let _ = writeln!(t, "  {verdict}");
    match (v.stops_paying_at_batch, v.speedup_by_batch.is_empty()) {
        (_, true) => {
            let _ = writeln!(
                t,
                "  on {}: no speculative K searched, no speedup by batch measured",
                v.deployment
            );
        }
        (Some(b), false) => {
            let _ = writeln!(
                t,
                "  on {}: decode speedup < 1 from a batch of {b} sequences",
                v.deployment
            );
        }
        (None, false) => {
            let _ = writeln!(
                t,
                "  on {}: speculation speeds decoding up at every batch up to max_num_seqs",
                v.deployment
            );
        }
    }
}

/// `1 replica`, `4 replicas`.
fn replicas_word(n: u32) -> String {
    if n == 1 {
        "1 replica".into()
    } else {
        format!("{n} replicas")
    }
}
