//! index.html: the plan as a page people read. A summary card (the plan, its cost, its
//! evidence, its headroom and binding constraint), a sortable candidates table, the plots and
//! the method in a few lines. Self-contained: inline CSS and JavaScript, images beside it.
//!
//! The table sorts on a click on its header, and at load by the page's URL fragment,
//! `#sort=COLUMN:asc|desc` (a shareable view; the browser test uses it). When the script has
//! run, `<html data-ready="1">`; a script error sets `data-script-error`; once the page has
//! loaded, `data-images="LOADED/TOTAL"` counts the plots the browser could decode.

use std::fmt::Write as _;

use crate::metrics::steady_state::SteadyState;
use crate::plan::{LoadMeasurement, PlanResult, Status};
use crate::scenario::Scenario;

/// HTML-escapes text for element content and attribute values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#1f2328;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
.sub{color:#57606a;margin-top:0}
.card{border:1px solid #d0d7de;border-radius:8px;padding:1em 1.4em;background:#f6f8fa}
.card.none{background:#fff8f0;border-color:#e8a33d}
.kpis{display:flex;flex-wrap:wrap;gap:1.6em;margin:.6em 0 1em}
.kpi .v{font-size:1.5em;font-weight:600}.kpi .l{color:#57606a;font-size:.85em}
.ok{color:#1a7f37;font-weight:600}.miss{color:#cf222e;font-weight:600}
table{border-collapse:collapse;font-size:.88em;width:100%}
th,td{border-bottom:1px solid #d8dee4;padding:.3em .5em;text-align:right;white-space:nowrap}
th{background:#eaeef2;cursor:pointer;user-select:none;position:sticky;top:0}
th.text,td.text{text-align:left}td.note{white-space:normal;text-align:left;color:#57606a;min-width:30em;font-size:.85em}
th[aria-sort=ascending]::after{content:" \25B2"}th[aria-sort=descending]::after{content:" \25BC"}
tr.chosen td{background:#dafbe1;font-weight:600}tr.pruned td{color:#6e7781}
.wrap{max-height:32em;overflow:auto;border:1px solid #d0d7de;border-radius:6px}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #d0d7de;border-radius:4px}
figcaption{color:#57606a;font-size:.9em}
code{background:#eaeef2;padding:0 .25em;border-radius:3px}
.small{font-size:.9em;color:#57606a}
"#;

const SCRIPT: &str = r#"
(function(){
  var root=document.documentElement;
  window.addEventListener('error',function(e){root.setAttribute('data-script-error',String(e.message||e));});
  var table=document.getElementById('candidates');
  var heads=table.tHead.rows[0].cells;
  function key(cell,numeric){
    var v=cell.getAttribute('data-v');
    if(numeric){var x=parseFloat(v);return isNaN(x)?Infinity:x;}
    return (v===null?cell.textContent:v).toLowerCase();
  }
  function sortBy(col,dir){
    var th=heads[col],numeric=th.getAttribute('data-type')==='num',body=table.tBodies[0];
    var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){
      var x=key(a.cells[col],numeric),y=key(b.cells[col],numeric);
      var c=x<y?-1:x>y?1:0;
      if(c===0){c=parseFloat(a.getAttribute('data-rank'))-parseFloat(b.getAttribute('data-rank'));return c;}
      return dir==='desc'?-c:c;
    });
    rows.forEach(function(r){body.appendChild(r);});
    for(var i=0;i<heads.length;i++){heads[i].removeAttribute('aria-sort');}
    th.setAttribute('aria-sort',dir==='desc'?'descending':'ascending');
  }
  for(var i=0;i<heads.length;i++){(function(i){
    heads[i].addEventListener('click',function(){
      var cur=heads[i].getAttribute('aria-sort');
      sortBy(i,cur==='ascending'?'desc':'asc');
    });
  })(i);}
  var m=/sort=([a-z0-9_]+)(?::(asc|desc))?/.exec(location.hash);
  if(m){for(var j=0;j<heads.length;j++){if(heads[j].getAttribute('data-key')===m[1]){sortBy(j,m[2]||'asc');}}}
  window.addEventListener('load',function(){
    var imgs=document.images,ok=0;
    for(var k=0;k<imgs.length;k++){if(imgs[k].complete&&imgs[k].naturalWidth>0){ok++;}}
    root.setAttribute('data-images',ok+'/'+imgs.length);
  });
  root.setAttribute('data-ready','1');
})();
"#;

fn kpi(out: &mut String, value: &str, label: &str) {
    let _ = write!(
        out,
        "<div class=\"kpi\"><div class=\"v\">{}</div><div class=\"l\">{}</div></div>",
        escape(value),
        escape(label)
    );
}

fn evidence(s: &SteadyState) -> String {
    let mut parts: Vec<String> = s
        .slo
        .iter()
        .map(|c| {
            let hw = c
                .value_ms
                .half_width
                .map_or(String::new(), |h| format!(" ± {h:.1}"));
            format!(
                "p{} {} {:.1}{hw} ms (SLO {})",
                c.percentile,
                c.metric.name(),
                c.value_ms.value,
                c.threshold_ms
            )
        })
        .collect();
    parts.push(format!("goodput {:.1}%", 100.0 * s.goodput_share.value));
    parts.push(format!("{:.0} output tok/s", s.output_throughput.value));
    parts.join(", ")
}

fn fleet_row(out: &mut String, label: &str, m: &LoadMeasurement, unresolved: Option<&str>) {
    let s = m.steady();
    let verdict = match super::fleet_verdict(m, unresolved).split_once(": ") {
        None => "<span class=\"ok\">holds</span>".to_string(),
        Some((word, why)) => format!(
            "<span class=\"miss\">{}</span>: {}",
            word.to_lowercase(),
            escape(why)
        ),
    };
    let _ = write!(
        out,
        "<li><b>{}</b>: {verdict}<br><span class=\"small\">{} requests, {} cut as warm-up; {}</span></li>",
        escape(label),
        m.requests,
        s.warmup_requests,
        escape(&evidence(s))
    );
}

/// Columns of the candidates table: key (for `#sort=`), header, numeric.
const COLUMNS: [(&str, &str, bool); 14] = [
    ("rank", "rank", true),
    ("status", "status", false),
    ("gpu", "GPU", false),
    ("dtype", "dtype", false),
    ("tp", "TP", true),
    ("seqs", "max_num_seqs", true),
    ("capacity", "capacity/replica (req/s)", true),
    ("max_rate", "max rate/replica (req/s)", true),
    ("binding", "binding", false),
    ("replicas", "replicas", true),
    ("gpus", "GPUs", true),
    ("usd_per_hour", "$/hour", true),
    ("usd_per_million", "$/M output", true),
    ("note", "note", false),
];

/// The max_num_seqs cell, sorted by the number; with a `[speculative]` table it shows the
/// candidate's K after it (`256 K3`, K0: off), as the terminal table does.
fn seqs_cell(seqs: u32, k: Option<u32>) -> String {
    match k {
        None => format!("<td data-v=\"{seqs}\">{seqs}</td>"),
        Some(k) => format!("<td data-v=\"{seqs}\">{seqs} K{k}</td>"),
    }
}

/// A candidate's note, led by its fleet hit rate when the workload carries block identities
/// (else the note alone, as before). Router and CPU offload size have their own columns.
fn reuse_note(c: &crate::plan::CandidateResult) -> String {
    let mut lead = Vec::new();
    if let Some(h) = c.prefix_cache_hit_rate {
        let cpu = c
            .prefix_cache_hit_rate_cpu
            .filter(|&x| x > 0.0)
            .map_or(String::new(), |x| format!(" ({:.1}% from CPU)", 100.0 * x));
        lead.push(format!("prefix-cache hit rate {:.1}%{cpu}", 100.0 * h));
    }
    let note = c.note.as_deref().unwrap_or("");
    match (lead.is_empty(), note.is_empty()) {
        (true, _) => note.to_string(),
        (false, true) => lead.join(", "),
        (false, false) => format!("{}; {note}", lead.join(", ")),
    }
}

/// The optional columns of the candidates table, each shown only when the search varies it
/// (so a plan without them reads as before): `dp` and `ep` after `tp` (data and expert
/// parallelism), `router` and `cpu_gib` (CPU KV offload per replica) after `seqs`.
fn optional_columns(p: &PlanResult) -> Vec<(&'static str, (&'static str, &'static str, bool))> {
    let any =
        |f: &dyn Fn(&crate::plan::Candidate) -> bool| p.candidates.iter().any(|c| f(&c.candidate));
    let mut v = Vec::new();
    if any(&|c| c.dp != 1 || c.ep != 1) {
        v.push(("tp", ("dp", "DP", true)));
        v.push(("dp", ("ep", "EP", true)));
    }
    if any(&|c| c.router.is_some()) {
        v.push(("seqs", ("router", "router", false)));
    }
    if any(&|c| c.kv_offloading_size_gib.is_some()) {
        let after = if any(&|c| c.router.is_some()) {
            "router"
        } else {
            "seqs"
        };
        v.push((after, ("cpu_gib", "CPU offload (GiB/replica)", true)));
    }
    v
}

/// A candidate's cell of an optional column.
fn optional_cell(key: &str, c: &crate::plan::Candidate) -> String {
    match key {
        "dp" => format!("<td data-v=\"{0}\">{0}</td>", c.dp),
        "ep" => format!("<td data-v=\"{0}\">{0}</td>", c.ep),
        "router" => format!(
            "<td class=\"text\">{}</td>",
            escape(c.router.as_deref().unwrap_or("-"))
        ),
        _ => match c.kv_offloading_size_gib {
            Some(g) => format!("<td data-v=\"{g}\">{g}</td>"),
            None => "<td data-v=\"\">-</td>".to_string(),
        },
    }
}

fn table(out: &mut String, p: &PlanResult) {
    out.push_str("<div class=\"wrap\"><table id=\"candidates\"><thead><tr>");
    let unit = p.rate_unit.as_deref().unwrap_or("req/s");
    let mut columns = COLUMNS.to_vec();
    for (after, col) in optional_columns(p) {
        let at = columns
            .iter()
            .position(|c| c.0 == after)
            .map_or(0, |i| i + 1);
        columns.insert(at, col);
    }
    for &(key, title, num) in &columns {
        let title = title.replace("req/s", unit);
        let _ = write!(
            out,
            "<th data-key=\"{key}\" data-type=\"{}\"{}>{}</th>",
            if num { "num" } else { "text" },
            if num { "" } else { " class=\"text\"" },
            escape(&title)
        );
    }
    out.push_str("</tr></thead><tbody>");
    for (i, c) in p.candidates.iter().enumerate() {
        let class = if p.chosen == Some(i) {
            "chosen"
        } else {
            match c.status {
                Status::Pruned => "pruned",
                Status::Infeasible => "infeasible",
                Status::Feasible => "feasible",
            }
        };
        let _ = write!(out, "<tr class=\"{class}\" data-rank=\"{}\">", i + 1);
        let cells = row_cells(i, c);
        for &(key, _, _) in &columns {
            match cells.iter().find(|(k, _)| *k == key) {
                Some((_, cell)) => out.push_str(cell),
                None => out.push_str(&optional_cell(key, &c.candidate)),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

/// A candidate's cells of the [`COLUMNS`], by key.
fn row_cells(i: usize, c: &crate::plan::CandidateResult) -> Vec<(&'static str, String)> {
    let status = match c.status {
        Status::Feasible => "feasible",
        Status::Pruned => "pruned",
        Status::Infeasible => "infeasible",
    };
    let feasible = c.status == Status::Feasible;
    let num = |v: Option<f64>, digits: usize| match v {
        Some(x) if x.is_finite() => format!("<td data-v=\"{x}\">{x:.digits$}</td>"),
        _ => "<td data-v=\"\">-</td>".to_string(),
    };
    let text = |s: &str| format!("<td class=\"text\">{}</td>", escape(s));
    let cost = c.cost_at_target.filter(|_| c.status != Status::Infeasible);
    let sized = c.status != Status::Infeasible;
    vec![
        ("rank", num(Some((i + 1) as f64), 0)),
        ("status", text(status)),
        ("gpu", text(&c.candidate.gpu)),
        ("dtype", text(c.candidate.weights_label())),
        ("tp", num(Some(c.candidate.tp as f64), 0)),
        (
            "seqs",
            seqs_cell(c.candidate.max_num_seqs, c.candidate.num_speculative_tokens),
        ),
        (
            "capacity",
            num(
                (c.capacity_rate_per_replica > 0.0).then_some(c.capacity_rate_per_replica),
                2,
            ),
        ),
        (
            "max_rate",
            num(
                (c.status != Status::Pruned && c.max_rate_per_replica > 0.0)
                    .then_some(c.max_rate_per_replica),
                2,
            ),
        ),
        (
            "binding",
            text(c.binding.as_ref().map_or("-", |b| b.constraint.label())),
        ),
        ("replicas", num(sized.then_some(c.replicas as f64), 0)),
        ("gpus", num(sized.then_some(c.gpus as f64), 0)),
        ("usd_per_hour", num(cost.map(|x| x.usd_per_hour), 2)),
        (
            "usd_per_million",
            num(
                cost.filter(|_| feasible)
                    .map(|x| x.usd_per_million_output_tokens),
                3,
            ),
        ),
        (
            "note",
            format!("<td class=\"note\">{}</td>", escape(&reuse_note(c))),
        ),
    ]
}

/// The period plan: what the autoscaled fleet costs and attains against the static one.
fn week_section(h: &mut String, w: &crate::plan::week::WeekPlan) {
    let _ = write!(
        h,
        "<div class=\"card\" id=\"week\"><h2 style=\"margin-top:0;border:0\">The period: {} hours, busiest {:.0} minutes {:.2} {}</h2>",
        w.hours,
        w.peak_window_s / 60.0,
        w.peak_rate_per_s,
        w.rate_unit.as_deref().unwrap_or("req/s")
    );
    if w.rate_unit.is_some() {
        h.push_str("<p>Rates in sessions/s count session starts (each session's first request), as the plan's target; SLO attainment and failures count requests (every turn).</p>");
    }
    if let Some(c) = w.chosen_candidate() {
        h.push_str("<div class=\"kpis\">");
        kpi(
            h,
            &format!("${:.0}", c.static_cost_usd),
            "static fleet for the busiest window",
        );
        kpi(
            h,
            &format!("{:.3}%", 100.0 * c.static_period.slo_attainment),
            if c.static_period.meets_slos {
                "static: SLO attainment, every SLO met over the period"
            } else {
                "static: SLO attainment, SLOs MISSED over the period"
            },
        );
        kpi(
            h,
            &format!("${:.0}", c.autoscaled_cost_usd),
            "autoscaled (simulated)",
        );
        kpi(
            h,
            &format!(
                "{:.0}%",
                100.0 * (1.0 - c.autoscaled_cost_usd / c.static_cost_usd.max(1e-9))
            ),
            "saved by autoscaling",
        );
        kpi(
            h,
            &format!("{:.3}%", 100.0 * c.slo_attainment),
            "autoscaled: SLO attainment over the period",
        );
        kpi(h, &c.lost_requests.to_string(), "requests failed");
        let _ = write!(
            h,
            "</div><p>{}: {} replicas static; the autoscaler paid {:.1} replica-hours with a {:.0} s cold start; sizing hour by hour (no cold start) would cost ${:.0}. Hour by hour in <a href=\"fleet.csv\">fleet.csv</a> and the Week sheet of cost.xlsx.</p>",
            escape(&c.candidate.label()),
            c.static_replicas,
            c.summary.billed_replica_hours,
            c.cold_start_s,
            c.planned_cost_usd
        );
        if let Some(cmd) = &c.static_run_command {
            let _ = write!(
                h,
                "<p>Re-run the static fleet over the period: <code>{}</code></p>",
                escape(cmd)
            );
        }
    }
    if let Some(s) = &w.spares {
        let _ = write!(
            h,
            "<p>With the scenario's failures, the static fleet attains {:.3}% without spares and {:.3}% with {} spare(s).</p>",
            100.0 * s.attainment_without_spares,
            100.0 * s.attainment_with_spares,
            s.spares
        );
    }
    for n in &w.notes {
        let _ = write!(h, "<p class=\"small\">Note: {}</p>", escape(n));
    }
    h.push_str("</div>");
}

/// Captions of the plots, by file stem.
fn caption(stem: &str) -> &'static str {
    match stem {
        "throughput-vs-p99-ttft" => "One replica across load, each point a steady-state measurement, past saturation: output tokens/s per GPU against p99 TTFT, the SLO line and the plan's operating point.",
        "throughput-vs-p99-tpot" => "The same load sweep against p99 TPOT.",
        "cost-vs-load" => "$ per million output tokens against the load on one replica, with the maximum rate within the SLOs and the capacity.",
        "latency-cdf" => "The chosen fleet's verification run at the target: TTFT and TPOT distributions with the SLOs.",
        "timeseries" => "The verification run over simulated time: running and waiting requests and KV use, with the warm-up and the drain marked.",
        "week" => "The period hour by hour: the load; the replicas the autoscaler paid for and had ready against the hour-by-hour sizing and the static fleet; the p99 TTFT of each hour's requests against the SLO.",
        _ => "",
    }
}

/// The colocated and disaggregated (xPyD) best side by side, and the xPyD candidates.
fn xpyd_section(h: &mut String, p: &PlanResult, x: &crate::plan::DisaggPlan) {
    h.push_str("<h2>Colocated or disaggregated</h2><table><tr><th>kind</th><th>deployment</th><th>GPUs</th><th>$/hour</th></tr>");
    match p.chosen_candidate() {
        Some(c) => {
            let _ = write!(
                h,
                "<tr><td>colocated</td><td>{} × {} {}</td><td>{}</td><td>{:.2}</td></tr>",
                c.replicas,
                escape(&c.candidate.gpu),
                c.candidate.parallelism(),
                c.gpus,
                c.cost_at_target.map_or(0.0, |x| x.usd_per_hour)
            );
        }
        None => h.push_str("<tr><td>colocated</td><td>none feasible</td><td></td><td></td></tr>"),
    }
    for (i, c) in x.candidates.iter().enumerate() {
        if c.status == crate::plan::Status::Feasible {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
                if Some(i) == x.best {
                    "disaggregated (best)"
                } else {
                    "disaggregated"
                },
                escape(&c.label()),
                c.gpus,
                c.usd_per_hour
            );
        } else {
            let _ = write!(
                h,
                "<tr><td>disaggregated</td><td>P {} TP{} / D {} TP{}: {}</td><td></td><td></td></tr>",
                escape(&c.prefill.gpu),
                c.prefill.tp,
                escape(&c.decode.gpu),
                c.decode.tp,
                escape(c.note.as_deref().unwrap_or("infeasible"))
            );
        }
    }
    let _ = write!(
        h,
        "</table><p>Recommended: <b>{}</b>.{}</p>",
        escape(&x.recommended),
        x.run_command.as_deref().map_or(String::new(), |c| format!(
            " Re-run the best xPyD deployment: <code>{}</code>",
            escape(c)
        ))
    );
}

/// The plan's card when its recommendation is disaggregated (xPyD): the deployment, its GPUs
/// and cost, the re-run line, and the colocated alternative it beats (its card follows).
fn xpyd_card(h: &mut String, p: &PlanResult, r: &crate::plan::Recommendation) {
    let _ = write!(
        h,
        "<div class=\"card\" id=\"summary\"><h2 style=\"margin-top:0;border:0\">The plan: disaggregated</h2><p><b>{}</b>: prefill and decode on separate pools.</p><div class=\"kpis\">",
        escape(&r.deployment)
    );
    kpi(h, &format!("${:.2}", r.usd_per_hour), "per hour");
    kpi(h, &r.gpus.to_string(), "GPUs");
    kpi(
        h,
        &format!("${:.3}", r.usd_per_million_output_tokens),
        "per million output tokens",
    );
    h.push_str("</div>");
    if let Some(c) = p.chosen_candidate() {
        if let Some(x) = c.cost_at_target {
            let _ = write!(
                h,
                "<p>Recommended over the best colocated fleet ({} GPUs, ${:.2}/hour): the colocated alternative below. The candidates of both kinds: Colocated or disaggregated.</p>",
                c.gpus, x.usd_per_hour
            );
        }
    }
    if let Some(cmd) = &r.run_command {
        let _ = write!(h, "<p>Re-run it: <code>{}</code></p>", escape(cmd));
    }
    h.push_str("</div>");
}

/// The chosen plan's card: its fleet, cost, headroom, binding constraint, whole-fleet
/// evidence, re-run line and batch point.
fn chosen_card(
    h: &mut String,
    p: &PlanResult,
    c: &crate::plan::CandidateResult,
    d: &crate::plan::ChosenDetail,
) {
    let cost = c.cost_at_target;
    let unit = p.rate_unit.as_deref().unwrap_or("req/s");
    let (id, heading) = if super::xpyd_recommended(p).is_some() {
        ("colocated", "The colocated alternative")
    } else {
        ("summary", "The plan")
    };
    let _ = write!(
        h,
        "<div class=\"card\" id=\"{id}\"><h2 style=\"margin-top:0;border:0\">{heading}</h2>"
    );
    let _ = write!(
        h,
        "<p><b>{} × {}</b>: {} replica(s) of {}, {} weights, {} KV, max_num_seqs {}.</p><div class=\"kpis\">",
        c.gpus,
        escape(&c.candidate.gpu),
        c.replicas,
        match (c.candidate.dp, c.candidate.ep, c.candidate.pp) {
            (1, 1, 1) => format!("TP {}", c.candidate.tp),
            _ => c.candidate.parallelism(),
        },
        escape(c.candidate.weights_label()),
        escape(if c.candidate.kv_cache_dtype == "auto" { "16-bit" } else { &c.candidate.kv_cache_dtype }),
        c.candidate.max_num_seqs
    );
    if let Some(x) = cost {
        kpi(h, &format!("${:.2}", x.usd_per_hour), "per hour");
        kpi(h, &format!("${:.0}", x.usd_per_month), "per month (730 h)");
        kpi(
            h,
            &format!("${:.3}", x.usd_per_million_output_tokens),
            "per million output tokens",
        );
    }
    kpi(
        h,
        &if d.headroom.slower_pct >= 1.0 {
            format!("{:.0}%", d.headroom.slower_pct)
        } else {
            "under 1%".to_string()
        },
        "headroom: GPUs may run this much slower",
    );
    kpi(
        h,
        c.binding.as_ref().map_or("none", |b| b.constraint.label()),
        "binding constraint per replica",
    );
    h.push_str("</div><ul>");
    fleet_row(
        h,
        &format!(
            "{} replica(s) at {:.2} {unit}",
            d.fleet.replicas, p.target_rate_per_s
        ),
        &d.verification,
        None,
    );
    match &d.fleet.one_fewer {
        Some(m) => fleet_row(
            h,
            &format!("{} replica(s), one fewer", m.replicas),
            m,
            d.unresolved.as_deref(),
        ),
        None => match &d.unresolved {
            Some(why) => {
                let _ = write!(
                    h,
                    "<li><span class=\"miss\">unresolved</span>: {}</li>",
                    escape(why)
                );
            }
            None => h.push_str("<li>One replica holds: no smaller fleet exists.</li>"),
        },
    }
    if let Some(cmd) = &d.run_command {
        let _ = write!(
            h,
            "<li>Re-run the fleet as measured{}: <code>{}</code></li>",
            escape(&super::one_fewer_hint(d)),
            escape(cmd)
        );
    }
    if let Some(b) = &c.binding {
        let _ = write!(
            h,
            "<li>One replica sustains {:.2} {unit} (capacity {:.2}); just above, <b>{}</b> binds: {}.</li>",
            c.max_rate_per_replica,
            c.capacity_rate_per_replica,
            escape(b.constraint.label()),
            escape(&b.detail)
        );
    }
    let b = &d.batch;
    let _ = write!(
        h,
        "<li>Batch point: ${:.3} per million output tokens at capacity (no latency SLO) against ${:.3} at the SLO-bound rate: a {:.0}% batch discount.</li></ul>",
        b.usd_per_million_at_capacity,
        b.usd_per_million_at_slo,
        100.0 * b.discount
    );
    if let Some(n) = &p.near_tie {
        let _ = write!(h, "<p class=\"small\">Note: {}</p>", escape(n));
    }
    tpot_table(h, &d.batch, unit);
}

/// The batch point by TPOT SLO, closing the chosen plan's card.
fn tpot_table(h: &mut String, b: &crate::plan::BatchPoint, unit: &str) {
    let _ = write!(h, "<table style=\"width:auto\"><thead><tr><th>TPOT SLO</th><th>max {unit} per replica</th><th>$/M output</th><th>batch discount</th></tr></thead><tbody>");
    for r in &b.by_tpot {
        if r.max_rate_per_replica > 0.0 {
            let _ = write!(
                h,
                "<tr><td>{:.0} ms</td><td>{:.2}</td><td>${:.3}</td><td>{:.0}%</td></tr>",
                r.tpot_ms,
                r.max_rate_per_replica,
                r.usd_per_million,
                100.0 * r.discount
            );
        } else {
            let _ = write!(
                h,
                "<tr><td>{:.0} ms</td><td>not reachable</td><td>-</td><td>-</td></tr>",
                r.tpot_ms
            );
        }
    }
    h.push_str("</tbody></table></div>");
}

/// The whole page; `images` are (png, svg) file names beside it, in order.
pub fn page(sc: &Scenario, p: &PlanResult, images: &[(String, String)]) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let title = if sc.name.is_empty() { "plan" } else { &sc.name };
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>servesim plan: {}</title><style>{STYLE}</style></head><body>",
        escape(title)
    );
    let slo = &sc.slo;
    let slos: Vec<String> = [
        slo.ttft_ms
            .map(|t| format!("p{} TTFT ≤ {t} ms", slo.ttft_percentile)),
        slo.tpot_ms
            .map(|t| format!("p{} TPOT ≤ {t} ms", slo.tpot_percentile)),
        slo.e2e_ms
            .map(|t| format!("p{} E2E ≤ {t} ms", slo.e2e_percentile)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let _ = write!(
        h,
        "<h1>servesim plan: {}</h1><p class=\"sub\">{} at {:.2} {}; SLOs: {}; goodput ≥ {:.0}%. {}</p>",
        escape(title),
        escape(&sc.deployment.model),
        p.target_rate_per_s,
        p.rate_unit.as_deref().unwrap_or("req/s"),
        escape(&if slos.is_empty() { "none".to_string() } else { slos.join(", ") }),
        100.0 * p.goodput_threshold,
        escape(&sc.description)
    );
    if let Some(r) = super::xpyd_recommended(p) {
        xpyd_card(&mut h, p, r);
    }
    match (p.chosen_candidate(), &p.detail) {
        (Some(c), Some(d)) => chosen_card(&mut h, p, c, d),
        _ => {
            h.push_str("<div class=\"card none\" id=\"summary\"><h2 style=\"margin-top:0;border:0\">No plan</h2><p>No candidate meets the SLOs at this load within the search space. The table says what stops each one.</p>");
            for line in p.slo_below_floor.iter().flat_map(|f| f.lines()) {
                let _ = write!(
                    h,
                    "<p><b>SLO below the physical floor:</b> {}</p>",
                    escape(line)
                );
            }
            if let Some(n) = &p.nearest_slo {
                let _ = write!(h, "<p>{}</p>", escape(n));
            }
            h.push_str("</div>");
        }
    }
    if let Some(w) = &p.week {
        week_section(&mut h, w);
    }
    if let Some(x) = &p.disaggregated {
        xpyd_section(&mut h, p, x);
    }
    let _ = write!(
        h,
        "<h2>Candidates</h2><p class=\"small\">{} candidates; click a column to sort. Pruned candidates were not searched fully: their steady-state capacity alone needs a fleet dearer than the plan.</p>",
        p.candidates.len()
    );
    table(&mut h, p);
    if p.candidates
        .iter()
        .any(|c| c.candidate.kv_offloading_size_gib.is_some_and(|g| g > 0.0))
    {
        let _ = write!(
            h,
            "<p class=\"small\">{}</p>",
            escape(super::CPU_OFFLOAD_PRICE_NOTE)
        );
    }
    if !images.is_empty() {
        h.push_str("<h2>Plots</h2>");
    }
    for (png, svg) in images {
        let stem = png.trim_end_matches(".png");
        let _ = write!(
            h,
            "<figure><a href=\"{}\"><img src=\"{}\" alt=\"{}\"></a><figcaption>{}</figcaption></figure>",
            escape(svg),
            escape(png),
            escape(stem),
            escape(caption(stem))
        );
    }
    let m = &p.method;
    let _ = write!(
        h,
        "<h2>Method</h2><p>Every figure is measured in steady state: the warm-up is cut by MSER-5 on TTFT and TPOT, the drain after the last arrival is excluded, and each judged figure carries a {:.0}% batch-means interval over {} batches; runs grow (same seed, doubled length) until the intervals are within ±{:.0}% or the verdict is certain, up to {} requests per replica, and a run must span ten queue relaxation times at its load. A candidate's capacity is a saturated closed loop; its maximum rate is bracketed and bisected to {:.0}% with common random numbers; its fleet is the smallest that holds at the target, router included, with one replica fewer shown failing. {} simulations. See docs/capacity-planning.md.</p>",
        100.0 * m.analysis.confidence,
        m.analysis.batches,
        100.0 * m.analysis.tolerance,
        m.max_requests_per_replica,
        100.0 * m.rate_precision,
        p.simulations
    );
    h.push_str("<p>Files: <a href=\"plan.json\">plan.json</a> · <a href=\"candidates.csv\">candidates.csv</a> · <a href=\"cost.xlsx\">cost.xlsx</a> (a live cost model: edit the target load, prices or headroom and the fleet and $/M follow).</p>");
    let _ = writeln!(h, "<script>{SCRIPT}</script></body></html>");
    h
}
