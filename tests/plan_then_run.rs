//! A plan holds, checked by a second method: long `servesim run`s of the chosen fleet (20,000
//! requests, as a user would re-run it) meet every SLO with goodput at or above the threshold,
//! and one replica fewer misses. For the embedded default and every shipped scenario with a
//! `[plan]`.

mod common;

use common::{servesim, shell_words};
use serde_json::Value;

/// Plans `scenario` (None: the embedded default) into a temporary report folder; returns the
/// plan printed on stdout, after checking that plan.json holds the same object.
fn plan(scenario: Option<&str>, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let mut args = vec!["plan"];
    args.extend(scenario);
    args.extend(["--format", "json", "--out", report.to_str().unwrap()]);
    args.extend(extra);
    let (code, out, err) = servesim(&args);
    let printed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    // Exit 0 with a recommendation; 1, the report still written whole, without one.
    let want = if printed["recommendation"].is_null() {
        1
    } else {
        0
    };
    assert_eq!(code, want, "{args:?}: {err}");
    if want == 1 {
        assert!(err.contains("no candidate meets the SLOs"), "{err}");
    }
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("plan.json")).unwrap()).unwrap();
    assert_eq!(printed, file, "plan --format json prints plan.json");
    for f in ["candidates.csv", "cost.xlsx", "index.html"] {
        assert!(report.join(f).exists(), "{f} missing");
    }
    if !printed["chosen"].is_null() {
        for f in [
            "latency-cdf.png",
            "throughput-vs-p99-ttft.png",
            "throughput-vs-p99-tpot.png",
            "cost-vs-load.png",
            "timeseries.png",
        ] {
            assert!(report.join(f).exists(), "{f} missing");
        }
    }
    printed
}

/// `servesim plan` printed as a table, as a user reads it: the report folder (kept while the
/// returned directory lives), plan.json from it, and the printed text. The exit status
/// follows the documented rule: 0 with a recommendation, 1 without.
fn plan_table(scenario: &str, extra: &[&str]) -> (tempfile::TempDir, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let mut args = vec!["plan", scenario, "--out", report.to_str().unwrap()];
    args.extend(extra);
    let (code, text, err) = servesim(&args);
    let p: Value = serde_json::from_str(
        &std::fs::read_to_string(report.join("plan.json"))
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {err}")),
    )
    .unwrap();
    let want = if p["recommendation"].is_null() { 1 } else { 0 };
    assert_eq!(code, want, "{args:?}: {err}");
    (dir, p, text)
}

/// `servesim run` with the words of a printed line after `servesim`, exactly as printed
/// (`--format json` only chooses how the report is printed).
fn run_words(words: &[String]) -> Value {
    let mut args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    args.extend(["--format", "json"]);
    let (code, out, err) = servesim(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

/// The line's words with each `KEY=N` whose key is in `keys` set to `KEY=N-1`: the same line
/// with one replica fewer (in those settings).
fn one_fewer(words: &[String], keys: &[&str]) -> Vec<String> {
    words
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if keys.contains(&k) => {
                let n: u64 = v.parse().unwrap();
                format!("{k}={}", n - 1)
            }
            _ => w.clone(),
        })
        .collect()
}

/// The value of the last `KEY=N` in the line's words.
fn setting(words: &[String], key: &str) -> Option<u64> {
    words
        .iter()
        .rev()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .map(|v| v.parse().unwrap())
}

/// Runs the plan's recommended line exactly as printed and with one replica fewer (every
/// replica setting of a colocated fleet one lower; each xPyD pool one lower in turn): the
/// first holds, each one-fewer misses, and each run's steady state is the very one the plan
/// judged (same requests, same sample, same figures).
fn check_the_printed_line(p: &Value) {
    let rec = &p["recommendation"];
    assert!(!rec["run_command"].is_null(), "{rec}");
    check_line(p, rec["kind"].as_str().unwrap());
}

/// [`check_the_printed_line`] for the best deployment of `kind` (`colocated` or
/// `disaggregated`), recommended or not.
fn check_line(p: &Value, kind: &str) {
    let printed = if kind == "colocated" {
        &p["detail"]["run_command"]
    } else {
        &p["disaggregated"]["run_command"]
    };
    let line = printed.as_str().expect("the plan prints a re-run line");
    let words = shell_words(line);
    assert_eq!(&words[..2], ["servesim", "run"], "{line}");
    assert!(
        line.contains("workload.num_requests=") && line.contains("--seed "),
        "the line carries its run length and seed: {line}"
    );
    let (evidence, fewer): (&Value, Vec<(Vec<String>, &Value)>) = if kind == "colocated" {
        let d = &p["detail"];
        assert!(d["unresolved"].is_null(), "{}", d["unresolved"]);
        let keys = [
            "deployment.replicas",
            "autoscale.min_replicas",
            "autoscale.max_replicas",
            "autoscale.initial_replicas",
        ];
        let r = setting(&words, "deployment.replicas").unwrap();
        let i = p["chosen"].as_u64().unwrap() as usize;
        assert_eq!(p["candidates"][i]["replicas"].as_u64(), Some(r), "{line}");
        let fewer = if r > 1 {
            vec![(one_fewer(&words, &keys), &d["fleet"]["one_fewer"])]
        } else {
            assert!(d["fleet"]["one_fewer"].is_null());
            Vec::new()
        };
        (&d["verification"], fewer)
    } else {
        let e = &p["disaggregated"]["evidence"];
        let mut fewer = Vec::new();
        for (pool, key) in [("prefill", "fewer_prefill"), ("decode", "fewer_decode")] {
            let k = format!("deployment.{pool}.replicas");
            if setting(&words, &k).unwrap() > 1 {
                fewer.push((one_fewer(&words, &[k.as_str()]), &e[key]));
            }
        }
        (&e["holds"], fewer)
    };
    let at = run_words(&words);
    assert_eq!(
        at["steady_state"]["sustainable"], true,
        "{line}: {}",
        at["steady_state"]["misses"]
    );
    assert_eq!(
        at["steady_state"], evidence["summary"]["steady_state"],
        "{line}: the run is not the plan's measurement"
    );
    for (w, judged) in fewer {
        let f = run_words(&w);
        let st = &f["steady_state"];
        assert_eq!(
            st["sustainable"], false,
            "{w:?} holds too: the plan is not the smallest fleet"
        );
        assert!(!st["misses"].as_array().unwrap().is_empty());
        assert_eq!(
            st, &judged["summary"]["steady_state"],
            "{w:?}: the run is not the plan's one-fewer measurement"
        );
    }
}

fn check_holds_and_one_fewer_misses(scenario: Option<&str>) {
    let p = plan(scenario, &[]);
    let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
    let c = &p["candidates"][i];
    for key in ["gpu", "dtype", "kv_cache_dtype", "tp", "max_num_seqs"] {
        assert!(!c["candidate"][key].is_null(), "candidate.{key} missing");
    }
    check_the_printed_line(&p);
}

/// DeepSeek-V3 (671B, MoE, MLA): the plan searches TP x attention DP x EP over H200 and H100,
/// chooses a deployment that fits (one HGX node of H200s or two nodes of H100s per replica),
/// and its printed line, re-run, meets the SLOs.
#[test]
fn the_deepseek_v3_chat_plan_fits_and_its_printed_line_meets_the_slos() {
    let scenario = "scenarios/deepseek-v3-chat.toml";
    check_holds_and_one_fewer_misses(Some(scenario));
    let (dir, p, text) = plan_table(scenario, &[]);
    check_parallelism_everywhere(&p, &text, &dir.path().join("report"));
    let cands = p["candidates"].as_array().unwrap();
    let par = |c: &Value, k: &str| c["candidate"][k].as_u64().unwrap_or(1);
    // The search weighed data and expert parallelism, not only TP.
    assert!(cands.iter().any(|c| par(c, "dp") > 1));
    assert!(cands.iter().any(|c| par(c, "ep") > 1));
    let c = &cands[p["chosen"].as_u64().unwrap() as usize];
    let gpus = par(c, "tp") * par(c, "dp");
    let gpu = c["candidate"]["gpu"].as_str().unwrap();
    assert!(
        (gpu == "h200-sxm" && gpus == 8) || (gpu == "h100-sxm" && gpus == 16),
        "{c}"
    );
    assert!(c["kv_capacity_tokens"].as_u64().unwrap() > 0);
    let line = p["detail"]["run_command"].as_str().unwrap();
    assert!(
        line.contains("deployment.dp=") && line.contains("deployment.ep="),
        "{line}"
    );
}

/// A data- or expert-parallel plan names each deployment with one label (`TP2 DP4 EP8`) in
/// every output: the printed table and headline, index.html's headline and candidates table
/// (DP and EP columns), the plots' titles; candidates.csv carries `dp` and `ep` as its last
/// columns, each row as plan.json has it. A one-replica fleet offers no re-run of 0 replicas.
fn check_parallelism_everywhere(p: &Value, text: &str, report: &std::path::Path) {
    let read = |f: &str| std::fs::read_to_string(report.join(f)).unwrap();
    let cands = p["candidates"].as_array().unwrap();
    let k = |c: &Value, key: &str| c["candidate"][key].as_u64().unwrap_or(1);
    let label = |c: &Value| match (k(c, "dp"), k(c, "ep")) {
        (1, 1) => format!("TP{}", k(c, "tp")),
        (dp, ep) => format!("TP{} DP{dp} EP{ep}", k(c, "tp")),
    };
    let csv = read("candidates.csv");
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().ends_with(",dp,ep"), "{csv}");
    for (c, line) in cands.iter().zip(lines) {
        let want = format!(",{},{}", k(c, "dp"), k(c, "ep"));
        assert!(line.ends_with(&want), "{line} for {}", c["candidate"]);
    }
    let chosen = &cands[p["chosen"].as_u64().unwrap() as usize];
    let name = label(chosen);
    assert!(
        p["recommendation"]["deployment"]
            .as_str()
            .unwrap()
            .contains(&name),
        "{}",
        p["recommendation"]
    );
    let replicas = chosen["replicas"].as_u64().unwrap();
    let fleet = match replicas {
        1 => "1 replica".to_string(),
        n => format!("{n} replicas"),
    };
    assert!(
        text.contains(&format!("({fleet} of {name})")),
        "the headline names {name}:\n{text}"
    );
    for c in cands.iter().take(15) {
        assert!(text.contains(&label(c)), "the table names {}", label(c));
    }
    let html = read("index.html");
    assert!(
        html.contains(&format!("replica(s) of {name},")),
        "html names {name}"
    );
    assert!(html.contains("data-key=\"dp\"") && html.contains("data-key=\"ep\""));
    let svg = read("cost-vs-load.svg");
    assert!(
        svg.contains(&format!("{name} seqs")),
        "the plot's title names {name}"
    );
    if replicas == 1 {
        assert!(text.contains("no smaller fleet exists"), "{text}");
        assert!(!text.contains("0 in place of 1"), "{text}");
        assert!(!html.contains("0 in place of 1"));
    }
}

/// Planning with KV reuse (issue 32, Deliver 4): a session workload whose prompts are mostly
/// each session's own history. The plan sizes every (offload size, router) pair; the
/// prefix-aware router keeps a session's turns where its history is cached, so its fleets hit
/// the cache far more often than round-robin's and need fewer replicas (as simulated, not
/// preferred: both routers share one one-replica measurement, only the fleet differs). The
/// printed line carries the router and the offload size, holds as printed with the hit rate
/// the plan reports, and one replica fewer misses.
#[test]
fn the_agent_sessions_plan_weighs_routers_and_offload_and_holds_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, text, err) = servesim(&[
        "plan",
        "scenarios/agent-sessions.toml",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let json = std::fs::read_to_string(report.join("plan.json")).unwrap();
    let p: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(p["rate_unit"], "sessions/s");
    check_session_units(&text, &json, &report);
    assert!(text.contains("not priced apart"), "{text}");
    check_reuse_columns(&p, &text, &report);
    check_the_printed_line(&p);
    let cands = p["candidates"].as_array().unwrap();
    let find = |router: &str, gib: f64| {
        cands
            .iter()
            .find(|c| {
                c["candidate"]["router"] == router
                    && c["candidate"]["kv_offloading_size_gib"].as_f64() == Some(gib)
            })
            .unwrap_or_else(|| panic!("no candidate {router} {gib} GiB"))
    };
    for gib in [0.0, 64.0] {
        let (pa, rr) = (find("prefix-aware", gib), find("round-robin", gib));
        for c in [pa, rr] {
            assert_eq!(c["status"], "feasible", "{c}");
        }
        // One replica sees every turn whatever the router: the same measurement.
        assert_eq!(pa["max_rate_per_replica"], rr["max_rate_per_replica"]);
        let hit = |c: &Value| c["prefix_cache_hit_rate"].as_f64().unwrap();
        assert!(hit(pa) > hit(rr) + 0.2, "{} vs {}", hit(pa), hit(rr));
        assert!(pa["replicas"].as_u64() < rr["replicas"].as_u64());
        if gib > 0.0 {
            assert!(rr["prefix_cache_hit_rate_cpu"].as_f64().unwrap() > 0.0);
        } else {
            assert!(pa["prefix_cache_hit_rate_cpu"].is_null());
        }
    }
    let i = p["chosen"].as_u64().unwrap() as usize;
    let chosen = &cands[i];
    assert_eq!(chosen["candidate"]["router"], "prefix-aware");
    // The printed line, run as printed, reports the hit rate the plan shows.
    let line = p["detail"]["run_command"].as_str().unwrap();
    assert!(line.contains("deployment.router=prefix-aware"), "{line}");
    assert!(
        line.contains("deployment.kv_offloading_size_gib="),
        "{line}"
    );
    let run = run_words(&shell_words(line));
    assert_eq!(
        run["prefix_cache_hit_rate"], chosen["prefix_cache_hit_rate"],
        "{line}"
    );
}

/// The searched router and CPU offload size read in columns of their own, in the printed
/// table and in index.html's candidates table (rows that differ only in them do not look
/// alike), and the printed hit rates line up under `hit%` (the CPU tier's share apart, under
/// `cpu hit%`).
fn check_reuse_columns(p: &Value, text: &str, report: &std::path::Path) {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("rank "));
    let header = lines.next().unwrap();
    let end = header.find(" hit%").unwrap() + " hit%".len();
    assert!(header.contains(" cpu hit% "), "{header}");
    let cpu_end = header.find(" cpu hit%").unwrap() + " cpu hit%".len();
    let rows: Vec<&str> = lines.take_while(|l| l.starts_with("   ")).collect();
    assert!(!rows.is_empty());
    for row in &rows {
        for e in [end, cpu_end] {
            let cell = row[..e].rsplit(' ').next().unwrap();
            assert!(
                cell == "-" || cell.parse::<f64>().is_ok(),
                "not aligned under the header ({cell:?}):\n{header}\n{row}"
            );
        }
    }
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(html.contains("data-key=\"router\"") && html.contains("data-key=\"cpu_gib\""));
    for c in p["candidates"].as_array().unwrap() {
        let router = c["candidate"]["router"].as_str().unwrap();
        let gib = c["candidate"]["kv_offloading_size_gib"].as_f64().unwrap();
        let cells = format!("<td class=\"text\">{router}</td><td data-v=\"{gib}\">{gib}</td>");
        assert!(html.contains(&cells), "no {cells} in index.html");
    }
}

/// Every rate of a session plan counts sessions: the printed plan, plan.json, candidates.csv,
/// index.html and the workbook's sheets name sessions/s and never req/s (capacity included:
/// a saturated replica's requests/s over the mean requests per session).
fn check_session_units(text: &str, json: &str, report: &std::path::Path) {
    let read = |f: &str| std::fs::read_to_string(report.join(f)).unwrap();
    let mut xlsx = zip::ZipArchive::new(std::fs::File::open(report.join("cost.xlsx")).unwrap())
        .expect("cost.xlsx is a zip");
    let mut sheets = String::new();
    for i in 0..xlsx.len() {
        let mut f = xlsx.by_index(i).unwrap();
        if f.name().ends_with(".xml") {
            std::io::Read::read_to_string(&mut f, &mut sheets).unwrap();
        }
    }
    for (name, body) in [
        ("printed plan", text.to_string()),
        ("plan.json", json.to_string()),
        ("candidates.csv", read("candidates.csv")),
        ("index.html", read("index.html")),
        ("cost.xlsx", sheets),
    ] {
        assert!(body.contains("sessions/s"), "{name} names no sessions/s");
        if let Some(i) = body.find("req/s") {
            let near = &body[i.saturating_sub(120)..(i + 40).min(body.len())];
            panic!("{name} says req/s in a session plan: ...{near}...");
        }
    }
    assert!(text.contains("per replica: capacity ") && text.contains(" sessions/s ("));
}

/// A Mooncake-format trace (JSONL with hash_ids) of multi-turn sessions, generated: each of
/// `sessions` conversations of 6 turns starts 0.2 s after the last (with jitter), waits 3 to
/// 6 s between turns, and resends its whole history, 2 new 512-token blocks a turn after one
/// of 4 shared system-prompt blocks. Rows sorted by time, as the format has them.
fn write_mooncake_sessions(path: &std::path::Path, sessions: u64) -> usize {
    let mut state: u64 = 12345;
    let mut rnd = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut rows: Vec<(u64, String)> = Vec::new();
    let mut next_id = 100u64;
    for s in 0..sessions {
        let mut t = s as f64 * 200.0 + rnd() * 200.0;
        let mut hist = vec![s % 4];
        for _ in 0..6 {
            hist.extend([next_id, next_id + 1]);
            next_id += 2;
            let input = hist.len() as u64 * 512 - (rnd() * 300.0) as u64;
            let output = 50 + (rnd() * 200.0) as u64;
            let ids: Vec<String> = hist.iter().map(u64::to_string).collect();
            rows.push((
                t as u64,
                format!(
                    "{{\"timestamp\": {}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{}]}}",
                    t as u64,
                    ids.join(", ")
                ),
            ));
            t += 3000.0 + rnd() * 3000.0;
        }
    }
    rows.sort_by_key(|r| r.0);
    let body: Vec<String> = rows.into_iter().map(|r| r.1).collect();
    std::fs::write(path, body.join("\n") + "\n").unwrap();
    body.len()
}

/// A plan over a Mooncake trace (issue 32): a trace has its own timestamps, so the plan sizes
/// the fleet at the trace's busiest window (its whole span when shorter than
/// plan.peak_window_s) and every rate it tries replays the trace with time scaled to that
/// rate (`workload.arrival.rate_per_s`), its block identities intact (the saturated
/// capacity run replays it as a closed loop). The printed line, with that rate and the
/// trace's length, holds as printed and one replica fewer misses; the fleet's hit rate comes
/// from the trace's hash_ids; the whole trace is then simulated as written.
#[test]
fn a_mooncake_trace_plan_replays_time_scaled_and_holds_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("sessions.jsonl");
    let rows = write_mooncake_sessions(&trace, 1500);
    let scenario = dir.path().join("trace-plan.toml");
    let base = std::fs::read_to_string("scenarios/agent-sessions.toml").unwrap();
    let (head, _) = base.split_once("[workload]").unwrap();
    std::fs::write(
        &scenario,
        format!(
            "{head}[workload]\n[workload.arrival]\nkind = \"trace\"\nformat = \"mooncake\"\npath = \"{}\"\n\n[slo]\nttft_ms = 1000.0\ntpot_ms = 50.0\n\n[measure]\nmax_requests = 8000\n\n[plan]\ngpus = [\"h100-sxm\"]\ndtypes = [\"bf16\"]\ntp = [1]\nmax_num_seqs = [128]\nrouters = [\"prefix-aware\"]\n",
            trace.display()
        ),
    )
    .unwrap();
    let p = plan(Some(scenario.to_str().unwrap()), &[]);
    assert!(p["rate_unit"].is_null(), "a trace's rows are requests");
    let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
    let c = &p["candidates"][i];
    assert!(c["replicas"].as_u64().unwrap() >= 2, "{c}");
    assert!(c["capacity_rate_per_replica"].as_f64().unwrap() > 0.0);
    assert!(c["prefix_cache_hit_rate"].as_f64().unwrap() > 0.3, "{c}");
    let line = p["detail"]["run_command"].as_str().unwrap();
    let target = p["target_rate_per_s"].as_f64().unwrap();
    assert!(
        line.contains(&format!("workload.arrival.rate_per_s={target}")),
        "the line replays the trace at the planned rate: {line}"
    );
    let n = setting(&shell_words(line), "workload.num_requests").unwrap();
    assert!(
        n <= rows as u64,
        "the line asks for {n} of the trace's {rows} rows"
    );
    assert!(
        !p["week"].is_null(),
        "the trace as written is simulated too"
    );
    check_the_printed_line(&p);
}

/// Bad `[plan]` reuse keys: exit 2 with the file, the key and the reason, before any run.
#[test]
fn bad_plan_routers_and_offload_sizes_are_named() {
    let base = std::fs::read_to_string("scenarios/agent-sessions.toml").unwrap();
    let (head, _) = base.split_once("[plan]").unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (extra, want) in [
        (
            "routers = [\"nope\"]",
            "plan.routers[0]: unknown router 'nope'",
        ),
        ("routers = []", "plan.routers: is empty"),
        (
            "kv_offloading_size_gib = [0, -1]",
            "plan.kv_offloading_size_gib[1]: must be a size in GiB",
        ),
        (
            "kv_offloading_size_gib = []",
            "plan.kv_offloading_size_gib: is empty",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("{head}[plan]\ngpus = [\"h100-sxm\"]\n{extra}\n"),
        )
        .unwrap();
        let (code, _, err) = servesim(&["plan", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{extra}: {err}");
        assert!(
            err.contains("bad.toml") && err.contains(want),
            "{extra}: {err}"
        );
    }
}

#[test]
fn the_default_plan_holds_and_one_replica_fewer_misses() {
    check_holds_and_one_fewer_misses(None);
}

#[test]
fn the_eagle3_plan_holds_and_one_replica_fewer_misses() {
    check_holds_and_one_fewer_misses(Some("scenarios/chat-slo-eagle3.toml"));
}

/// A per-position acceptance list measured at K = 4 while the plan searches K = 1 and 3: the
/// candidates take the list's first K rates, so the printed line must cut the list too (`run`
/// needs one rate per drafted token), and run exactly as printed it reproduces the plan.
#[test]
fn a_speculative_plan_with_a_longer_acceptance_list_reruns_as_printed() {
    let base = std::fs::read_to_string("scenarios/chat-slo-eagle3.toml").unwrap();
    let (head, _) = base.split_once("[plan]").unwrap();
    let text = format!(
        "{head}[plan]\ngpus = [\"h100-sxm\"]\ndtypes = [\"fp8\"]\ntp = [2]\n\
         max_num_seqs = [256]\nspeculative = [1, 3]\ngoodput_threshold = 0.9\n\n\
         [speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 4\n\
         acceptance_rate = [0.9, 0.8, 0.7, 0.6]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eagle3-list.toml");
    std::fs::write(&path, text).unwrap();
    let p = plan(Some(path.to_str().unwrap()), &[]);
    let line = p["detail"]["run_command"].as_str().unwrap();
    let i = p["chosen"].as_u64().unwrap() as usize;
    let k = p["candidates"][i]["candidate"]["num_speculative_tokens"]
        .as_u64()
        .unwrap();
    if k > 0 && k < 4 {
        let rates = ["0.9", "0.8", "0.7"][..k as usize].join(",");
        assert!(
            line.contains(&format!("'speculative.acceptance_rate=[{rates}]'")),
            "K = {k}: {line}"
        );
    }
    check_the_printed_line(&p);
}

#[test]
fn the_code_completion_plan_holds_and_one_replica_fewer_misses() {
    check_holds_and_one_fewer_misses(Some("scenarios/code-completion.toml"));
}

#[test]
fn the_batch_offline_plan_holds_and_one_replica_fewer_misses() {
    check_holds_and_one_fewer_misses(Some("scenarios/batch-offline.toml"));
}

#[test]
fn the_diurnal_week_plan_holds_at_its_peak_and_one_replica_fewer_misses() {
    check_holds_and_one_fewer_misses(Some("scenarios/diurnal-week.toml"));
}

#[test]
fn the_mlperf_server_plans_hold_and_one_replica_fewer_misses() {
    // MLPerf v4.1 Llama-2-70B Server on 8 H100s (4 x TP2) and 8 H200s (8 x TP1): batches of a
    // thousand sequences (docs/validation.md, "The large-batch regime").
    check_holds_and_one_fewer_misses(Some("scenarios/mlperf/llama2-70b-server-h100.toml"));
    check_holds_and_one_fewer_misses(Some("scenarios/mlperf/llama2-70b-server-h200.toml"));
}

/// MLPerf v5.1 Llama-2-70B Server on 8 H200s with the configuration of the software the
/// `trtllm` profile models (8 x TP1, 1,536 tokens per step): the plan's system rate, the 8
/// replicas of the published system times the rate one replica sustains, is within 15% of the
/// published median of 113.35 samples/s (issue #26's Done-when line; docs/validation.md, "The
/// large-batch regime"), and its printed line holds while one replica fewer misses. A
/// regression guard of that figure (no parameter is fitted on MLPerf rows), not a proof of it.
#[test]
fn the_mlperf_v51_h200_server_plan_is_within_15_percent_of_the_published_rate() {
    let p = plan(
        Some("scenarios/mlperf/llama2-70b-server-h200-v51.toml"),
        &[],
    );
    the_system_rate_is_within_15_percent(&p, 8.0, 113.35);
    check_the_printed_line(&p);
}

/// The chosen candidate of plan `p`, after checking that `replicas` of the published system
/// times the rate one replica sustains is within 15% of the `measured` samples/s.
fn the_system_rate_is_within_15_percent(p: &Value, replicas: f64, measured: f64) -> &Value {
    let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
    let c = &p["candidates"][i];
    let system_rate = replicas * c["max_rate_per_replica"].as_f64().unwrap();
    assert!(
        (system_rate / measured - 1.0).abs() <= 0.15,
        "{replicas} x {} = {system_rate} req/s against {measured}",
        c["max_rate_per_replica"]
    );
    c
}

/// MLPerf v5.0 Llama-2-70B Server on 8 H100s as NVIDIA ran it (4 x TP1 x PP2, 1,024 sequences
/// and tokens per micro-batch): the plan's system rate, the 4 replicas of the published system
/// times the rate one pipeline-parallel replica sustains, is within 15% of the published
/// 106.21 samples/s (issue #26's Done-when line; docs/validation.md, "The large-batch regime").
/// The fleet is sized for 100 req/s, just below 4 replicas' sustained rate: at the measured
/// 106.21 the plan takes 5 and one fewer runs at 100.9% of its capacity, where no run can show
/// a steady state (unresolved); at 100 the printed 4-replica line holds and 3 miss. A
/// regression guard of that figure (no parameter is fitted on MLPerf rows), not a proof of it.
#[test]
fn the_mlperf_v50_h100_pipeline_server_plan_is_within_15_percent_of_the_published_rate() {
    let p = plan(
        Some("scenarios/mlperf/llama2-70b-server-h100-v50.toml"),
        &["--set", "workload.arrival.rate_per_s=100"],
    );
    let c = the_system_rate_is_within_15_percent(&p, 4.0, 106.21);
    assert_eq!(c["candidate"]["pp"].as_u64(), Some(2), "{c}");
    assert_eq!(
        c["gpus"].as_u64(),
        Some(2 * c["replicas"].as_u64().unwrap())
    );
    check_the_printed_line(&p);
}

#[test]
fn every_shipped_scenario_with_a_plan_is_tested_here() {
    let tested = [
        "chat-slo.toml",
        "chat-slo-eagle3.toml",
        "code-completion.toml",
        "batch-offline.toml",
        "diurnal-week.toml",
        "long-context-rag.toml",
        "deepseek-v3-chat.toml",
        "mlperf/llama2-70b-server-h100.toml",
        "mlperf/llama2-70b-server-h200.toml",
        "mlperf/llama2-70b-server-h200-v51.toml",
        "mlperf/llama2-70b-server-h100-v50.toml",
        "agent-sessions.toml",
    ];
    // The scenarios and those of their sub-folders (scenarios/mlperf/), named from scenarios/.
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from("scenarios")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "toml") {
                files.push(path);
            }
        }
    }
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // `[plan]` with or without a comment after it.
        if text
            .lines()
            .any(|l| l.split('#').next().map(str::trim) == Some("[plan]"))
        {
            let name = path
                .strip_prefix("scenarios")
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            assert!(
                tested.contains(&name.as_str()),
                "{name} has a [plan] but no test"
            );
        }
    }
}

#[test]
fn the_chosen_plan_is_the_same_for_seeds_1_to_5() {
    let mut chosen = Vec::new();
    for seed in 1..=5 {
        let s = seed.to_string();
        let p = plan(None, &["--seed", &s]);
        let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
        let c = &p["candidates"][i];
        chosen.push((
            c["candidate"].clone(),
            c["replicas"].as_u64().unwrap(),
            p["near_tie"].clone(),
        ));
    }
    let first = &chosen[0];
    for (seed, c) in chosen.iter().enumerate() {
        assert!(
            (c.0 == first.0 && c.1 == first.1) || !c.2.is_null() || !first.2.is_null(),
            "seed {} chose {:?}, seed 1 chose {:?}, and neither says the top two are within noise",
            seed + 1,
            c,
            first
        );
    }
}

#[test]
fn an_unreachable_slo_says_what_stops_each_candidate_and_the_nearest_slo() {
    let p = plan(
        Some("scenarios/code-completion.toml"),
        &["--set", "slo.ttft_ms=1", "--set", "slo.tpot_ms=1"],
    );
    assert!(p["chosen"].is_null());
    assert!(p["recommendation"].is_null(), "exits 1 (the helper checks)");
    let candidates = p["candidates"].as_array().unwrap();
    for c in candidates {
        assert_eq!(c["status"], "infeasible", "{c}");
        let note = c["note"].as_str().unwrap();
        assert!(
            note.contains("light load") && note.contains("TTFT"),
            "{note}"
        );
        assert!(c["light_load"]["ttft_ms"].as_f64().unwrap() > 1.0);
    }
    let nearest = p["nearest_slo"].as_str().unwrap();
    assert!(
        nearest.contains("TTFT <=") && nearest.contains("TPOT <="),
        "{nearest}"
    );
}

/// The headline states the recommendation, in the text and on index.html: when it is
/// disaggregated, the xPyD deployment heads the plan and the colocated best follows as the
/// alternative.
fn check_headline(p: &Value, text: &str, report: &std::path::Path) {
    let rec = &p["recommendation"];
    let first = text.lines().find(|l| l.starts_with("Plan: ")).unwrap();
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    let deployment = rec["deployment"].as_str().unwrap();
    if rec["kind"] == "disaggregated" {
        assert!(first.contains(deployment), "{first} is not {rec}");
        assert!(first.contains(&format!(
            "${:.2}/hour",
            rec["usd_per_hour"].as_f64().unwrap()
        )));
        assert!(text.contains("\nColocated alternative: "), "{text}");
        let plan = html
            .find(">The plan: disaggregated<")
            .expect("an xPyD plan card");
        let alt = html
            .find(">The colocated alternative<")
            .expect("the colocated card");
        assert!(plan < alt && html[plan..alt].contains(&html_escape(deployment)));
    } else {
        assert!(!text.contains("Colocated alternative"), "{text}");
        assert!(html.contains(">The plan<"));
    }
}

/// HTML-escaped as index.html writes text.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[test]
fn the_rag_plan_weighs_xpyd_under_a_tight_tpot_slo_and_its_choice_holds() {
    let rag = "scenarios/long-context-rag.toml";
    let tight = "slo.tpot_ms=30".to_string();
    let (dir, p, text) = plan_table(rag, &["--set", &tight]);
    check_headline(&p, &text, &dir.path().join("report"));
    let x = &p["disaggregated"];
    let xs = x["candidates"].as_array().expect("xPyD candidates weighed");
    assert!(xs.len() >= 2, "{x}");
    assert!(
        p["candidates"].as_array().unwrap().len() >= 2,
        "colocated candidates weighed beside"
    );
    let best = &xs[x["best"].as_u64().expect("a feasible xPyD deployment") as usize];
    let colocated = &p["candidates"][p["chosen"].as_u64().expect("a colocated plan") as usize];
    // The recommendation is the cheaper kind's best.
    let (xu, cu) = (
        best["usd_per_hour"].as_f64().unwrap(),
        colocated["cost_at_target"]["usd_per_hour"]
            .as_f64()
            .unwrap(),
    );
    let kind = if xu < cu {
        "disaggregated"
    } else {
        "colocated"
    };
    assert_eq!(x["recommended"], kind, "xPyD ${xu}/h, colocated ${cu}/h");
    // The plan's one answer names the same deployment, cost and re-run line.
    let rec = &p["recommendation"];
    assert_eq!(rec["kind"], kind, "{rec}");
    if kind == "disaggregated" {
        assert_eq!(rec["run_command"], x["run_command"], "{rec}");
        assert_eq!(rec["usd_per_hour"].as_f64(), Some(xu), "{rec}");
    } else {
        assert_eq!(rec["run_command"], p["detail"]["run_command"], "{rec}");
        assert_eq!(rec["usd_per_hour"].as_f64(), Some(cu), "{rec}");
    }

    // The best xPyD deployment, re-run as printed (the line carries the plan's --set), and
    // with one replica fewer in each pool.
    let cmd = x["run_command"].as_str().unwrap();
    assert!(cmd.contains(&format!("--set {tight}")), "{cmd}");
    check_line(&p, "disaggregated");
    let words = shell_words(cmd);
    let n = setting(&words, "workload.num_requests").unwrap();
    let at = run_words(&words);
    assert!(at["disaggregation"]["transfers"].as_u64().unwrap() >= n * 9 / 10);
}

#[test]
fn the_rag_plan_holds_and_one_replica_fewer_misses() {
    // As shipped: whichever kind the plan recommends, colocated or xPyD.
    check_holds_and_one_fewer_misses(Some("scenarios/long-context-rag.toml"));
}

#[test]
fn a_plan_of_hundreds_of_replicas_holds_as_printed_and_one_replica_fewer_misses() {
    // Llama-3.1-8B chat at 20,000 req/s, its TPOT SLO binding below capacity (so one replica
    // fewer misses rather than sitting too close to capacity to tell); its plan is sized on
    // shards and judged whole. The file is shared with scripts/perf-plan-fleet.sh.
    let p = plan(Some("tests/data/fleet-20k.toml"), &[]);
    let i = p["chosen"].as_u64().expect("a plan was chosen") as usize;
    let r = p["candidates"][i]["replicas"].as_u64().unwrap();
    assert!(r >= 100, "{r} replicas: not a large fleet");
    check_the_printed_line(&p);
}

/// Twenty minutes of four-turn sessions on Llama-3.1-8B (issue 32, period plans over
/// sessions): 0.3 sessions/s, a two-minute ramp to 2 sessions/s held for eight minutes,
/// back to 0.3 (about 1,400 sessions, 5,500 requests). `session-affinity` keeps a session's
/// turns on its replica and sends first turns to the least loaded one.
const WEEK_SESSIONS: &str = r#"
name = "week-sessions"
seed = 5
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
tp = 1
dtype = "bf16"
router = "session-affinity"
[scheduler]
enable_prefix_caching = true
[workload]
duration_s = 1200.0
[workload.arrival]
kind = "schedule"
points = [[0.0, 0.3], [240.0, 0.3], [360.0, 2.0], [840.0, 2.0], [960.0, 0.3], [1200.0, 0.3]]
[workload.sessions]
system_prompt_tokens = 256
system_prompts = 4
turns = { kind = "fixed", tokens = 4 }
think_time_ms = { kind = "lognormal", mean = 3000, median = 2000 }
new_tokens = { kind = "normal", mean = 1500, std = 300 }
output_tokens = { kind = "normal", mean = 400, std = 100 }
[slo]
ttft_ms = 1000.0
tpot_ms = 20.0
[measure]
max_requests = 4000
[plan]
gpus = ["h100-sxm"]
dtypes = ["bf16"]
tp = [1]
max_num_seqs = [64]
routers = ["session-affinity"]
"#;

/// Session starts and requests of `text`'s workload, counted by hand: each session's first
/// request is the first one carrying its id. Returns the busiest `window_ns` window starting
/// on a whole minute, counted directly over the starts (no sliding sums): (sessions in it,
/// its start ns), and the most requests in any such window.
fn busiest_windows(text: &str, window_ns: u64) -> (u64, u64, u64, u64, u64) {
    use servesim::scenario::Scenario;
    use servesim::workload::RequestGenerator;
    let sc = Scenario::parse(text, "test", &[]).unwrap();
    let mut gen = RequestGenerator::new(&sc.workload, sc.seed, "test").unwrap();
    let mut seen = std::collections::HashSet::new();
    let (mut starts, mut requests) = (Vec::new(), Vec::new());
    while let Some(r) = gen.next_request() {
        requests.push(r.arrival_ns);
        if seen.insert(r.session) {
            starts.push(r.arrival_ns);
        }
    }
    let minute = 60_000_000_000u64;
    let last = requests.iter().copied().max().unwrap();
    let count = |xs: &[u64], at: u64| {
        xs.iter()
            .filter(|&&t| t >= at && t < at + window_ns)
            .count()
    };
    let (mut best, mut best_at, mut best_requests) = (0, 0, 0);
    for at in (0..=last).step_by(minute as usize) {
        let n = count(&starts, at);
        if n > best {
            (best, best_at) = (n, at);
        }
        best_requests = best_requests.max(count(&requests, at));
    }
    (
        best as u64,
        best_at,
        best_requests as u64,
        starts.len() as u64,
        requests.len() as u64,
    )
}

/// A period plan over sessions sizes for session starts, not for every turn (issue 32): its
/// busiest window in sessions/s is the hand count of session starts in the busiest five
/// minutes over 300 s, the steady plan's target is that rate, every output names sessions/s,
/// the printed line for the peak holds as printed and one replica fewer misses; the static
/// fleet's line over the whole period holds as printed and one replica fewer misses too.
#[test]
fn a_week_plan_over_sessions_counts_session_starts_and_holds_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("week-sessions.toml");
    std::fs::write(&path, WEEK_SESSIONS).unwrap();
    let report = dir.path().join("report");
    let (code, text, err) = servesim(&[
        "plan",
        path.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let json = std::fs::read_to_string(report.join("plan.json")).unwrap();
    let p: Value = serde_json::from_str(&json).unwrap();
    let w = &p["week"];
    assert_eq!(p["rate_unit"], "sessions/s");
    assert_eq!(w["rate_unit"], "sessions/s");
    check_session_units(&text, &json, &report);
    assert!(
        text.contains("Period: 1 hours;") && text.contains(" sessions/s from "),
        "{text}"
    );
    // The hand count: session starts in the busiest five minutes over 300 s.
    let (peak, peak_at, peak_requests, sessions, requests) =
        busiest_windows(WEEK_SESSIONS, 300_000_000_000);
    assert_eq!(w["peak_window_s"], 300.0);
    assert_eq!(w["peak_rate_per_s"].as_f64(), Some(peak as f64 / 300.0));
    assert_eq!(w["peak_start_s"].as_f64(), Some(peak_at as f64 * 1e-9));
    assert_eq!(p["target_rate_per_s"], w["peak_rate_per_s"]);
    // Counting every turn would have sized for about four times the load.
    assert!(
        peak_requests as f64 > 3.0 * peak as f64,
        "{peak_requests} requests, {peak} sessions"
    );
    let c = &w["candidates"][w["chosen"].as_u64().unwrap() as usize];
    let hour = &c["hours"][0];
    assert_eq!(
        hour["arrival_rate_per_s"].as_f64(),
        Some(sessions as f64 / 3600.0)
    );
    assert_eq!(
        hour["request_rate_per_s"].as_f64(),
        Some(requests as f64 / 3600.0)
    );
    assert_eq!(c["summary"]["arrived"].as_u64(), Some(requests));
    let fleet = std::fs::read_to_string(report.join("fleet.csv")).unwrap();
    assert!(
        fleet.starts_with("hour,arrival_rate_per_s (sessions/s),")
            && fleet
                .lines()
                .next()
                .unwrap()
                .ends_with(",request_rate_per_s (req/s)"),
        "{fleet}"
    );
    // The peak: the printed line holds as printed, one replica fewer misses.
    check_the_printed_line(&p);
    let line = p["detail"]["run_command"].as_str().unwrap();
    assert!(
        line.contains(&format!("rate_per_s={}", w["peak_rate_per_s"])),
        "{line}"
    );
    // The static fleet over the period, as printed, and with one replica fewer.
    let r = c["static_replicas"].as_u64().unwrap();
    assert!(r >= 2, "{c}");
    let words = shell_words(c["static_run_command"].as_str().unwrap());
    assert_eq!(setting(&words, "deployment.replicas"), Some(r));
    let period = run_words(&words);
    assert_eq!(period["slo"]["all_met"], true, "{}", period["slo"]);
    assert_eq!(
        period["goodput_share"],
        c["static_period"]["slo_attainment"]
    );
    let keys = [
        "deployment.replicas",
        "autoscale.min_replicas",
        "autoscale.max_replicas",
        "autoscale.initial_replicas",
    ];
    let fewer = run_words(&one_fewer(&words, &keys));
    assert_eq!(fewer["slo"]["all_met"], false, "{}", fewer["slo"]);
}

/// A period plan over sessions needs generated sessions: a trace cannot start them, and the
/// plan says so before any run (exit 2, the file and the key).
#[test]
fn a_session_period_plan_over_a_trace_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(
        &trace,
        "timestamp,input_tokens,output_tokens\n0,10,10\n1000,10,10\n",
    )
    .unwrap();
    let (head, tail) = WEEK_SESSIONS.split_once("kind = \"schedule\"").unwrap();
    let (_, tail) = tail.split_once('\n').unwrap();
    let (_, tail) = tail.split_once('\n').unwrap();
    let text = format!(
        "{head}kind = \"trace\"\npath = \"{}\"\n{tail}",
        trace.display()
    );
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let (code, _, err) = servesim(&["plan", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml")
            && err.contains("workload.sessions: ")
            && err.contains("a trace cannot start sessions"),
        "{err}"
    );
}
