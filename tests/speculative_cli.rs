//! Speculative decoding as a new user meets it on the command line: bad inputs exit 2 naming
//! the key and the reason, every command that reports KV capacity or step times takes
//! `--speculative-config`, and what they print and write shows K: the run table's rows, the
//! plan's candidates.csv, cost workbook (Search sheet) and index.html.

mod common;

use std::path::Path;

use common::servesim;
use serde_json::Value;

/// Exit code 2, one `error:` line containing every fragment of `wanted`, no panic.
fn assert_error_names(args: &[&str], wanted: &[&str]) {
    let (code, _, err) = servesim(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.starts_with("error:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in wanted {
        assert!(err.contains(w), "{args:?}: expected {w:?} in: {err}");
    }
}

const SMALL: [&str; 4] = ["--num-prompts", "8", "--output-len", "16"];

#[test]
fn mtp_needs_the_targets_mtp_layers() {
    // Llama-3.1-8B ships no MTP layer: vLLM would fail to load one.
    let spec = r#"{"method":"mtp","num_speculative_tokens":2}"#;
    let args = [&["bench", "--speculative-config", spec][..], &SMALL[..]].concat();
    assert_error_names(
        &args,
        &[
            "speculative.method",
            "num_nextn_predict_layers",
            "llama-3.1-8b",
        ],
    );
    // DeepSeek-V3's one layer drafts any K (reused), as vLLM runs it.
    let spec = r#"{"method":"mtp","num_speculative_tokens":3}"#;
    let ds = [
        "bench",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--tensor-parallel-size",
        "8",
        "--dtype",
        "fp8",
        "--speculative-config",
        spec,
    ];
    let (code, _, err) = servesim(&[&ds[..], &SMALL[..]].concat());
    assert_eq!(code, 0, "{err}");
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = servesim(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn estimate_takes_the_speculative_config_and_reserves_the_draft() {
    let plain = json(&["estimate", "--decode-batch", "32", "--format", "json"]);
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3}"#;
    let with = json(&[
        "estimate",
        "--decode-batch",
        "32",
        "--speculative-config",
        spec,
        "--format",
        "json",
    ]);
    assert!(plain.get("speculative").is_none());
    let kv = |v: &serde_json::Value| v["memory"]["kv_tokens"].as_u64().unwrap();
    // The EAGLE-3 head's weights and KV come out of the pool (vLLM), as `bench` plans it.
    assert!(kv(&with) < kv(&plain), "{} vs {}", kv(&with), kv(&plain));
    let s = &with["speculative"];
    let f = |k: &str| s[k].as_f64().unwrap();
    assert!(f("draft_s") > 0.0 && f("verify_s") > f("plain_s"));
    let gain = f("plain_s") * f("mean_acceptance_length") / (f("draft_s") + f("verify_s"));
    assert!((f("speedup") / gain - 1.0).abs() < 1e-12);
    assert_eq!(s["kv_slots_per_seq"].as_u64(), Some(6));
    // The plain figures are the same with and without the flag.
    assert_eq!(plain["step"], with["step"]);
}

#[test]
fn one_token_outputs_have_no_verify_step_and_no_speedup() {
    // The first token comes from the prefill: no decode step, so nothing speculated.
    let spec = r#"{"method":"eagle3","num_speculative_tokens":8,"acceptance_rate":1.0}"#;
    let v = json(&[
        "bench",
        "--num-prompts",
        "8",
        "--output-len",
        "1",
        "--speculative-config",
        spec,
        "--format",
        "json",
    ]);
    assert_eq!(v["spec_decode_step_share"].as_f64(), Some(0.0));
    for k in [
        "spec_decode_speedup",
        "spec_decode_mean_acceptance_length",
        "spec_decode_draft_share",
    ] {
        assert!(v.get(k).is_none(), "{k} reported without a verify step");
    }
}

#[test]
fn a_batch_limit_reports_the_share_of_steps_that_speculated() {
    let run = |limit: u32| {
        let spec = format!(
            r#"{{"method":"eagle3","num_speculative_tokens":3,"disable_by_batch_size":{limit}}}"#
        );
        json(&[
            "bench",
            "--num-prompts",
            "200",
            "--request-rate",
            "50",
            "--output-len",
            "64",
            "--speculative-config",
            &spec,
            "--format",
            "json",
        ])
    };
    let part = run(16);
    let share = part["spec_decode_step_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");
    // Over verify steps only, measured: the batch falls to the limit mostly as the run
    // drains, when each request has few of its 63 decode tokens left and its last verify step
    // gains at most those, so the figure lies between 1 and the input's expectation,
    // 1 + 0.72 + 0.72^2 + 0.72^3 (without the limit, it is within 3% of it).
    let l = part["spec_decode_mean_acceptance_length"].as_f64().unwrap();
    assert!(l > 1.0 && l < 2.611648, "{l}");
    assert!(part["spec_decode_speedup"].as_f64().unwrap() > 1.0);
    // No limit: every decode step speculated, and the share (1) is not reported.
    let all = run(100_000);
    assert!(all.get("spec_decode_step_share").is_none());
    let l = all["spec_decode_mean_acceptance_length"].as_f64().unwrap();
    assert!(l < 2.611648 && l / 2.611648 > 0.97, "{l}");
}

/// The value of the run table's row `label` (the text after it, trimmed); `None` without one.
fn table_value<'a>(table: &'a str, label: &str) -> Option<&'a str> {
    table
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
}

/// `bench` with `args` as a table and as JSON (the same seed: the same run).
fn bench_table_and_json(args: &[&str]) -> (String, Value) {
    let a = [&["bench"][..], args].concat();
    let (code, table, err) = servesim(&a);
    assert_eq!(code, 0, "{a:?}: {err}");
    (table, json(&[&a[..], &["--format", "json"][..]].concat()))
}

/// Every speculation row of the run table, each holding the JSON result's figure as printed.
#[test]
fn the_run_table_shows_speculation() {
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3}"#;
    let (out, v) =
        bench_table_and_json(&[&["--speculative-config", spec][..], &SMALL[..]].concat());
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"));
    let row = |label: &str| table_value(&out, label).unwrap_or_else(|| panic!("{label}: {out}"));
    assert_eq!(row("Speculative decoding (method, K):"), "eagle3 K3");
    let l = f("spec_decode_mean_acceptance_length");
    // Measured over 15 decode tokens per request: under the input's expectation at p = 0.72,
    // K = 3 (1 + 0.72 + 0.72^2 + 0.72^3 = 2.61), as the capped last step of short outputs is.
    assert_eq!(
        row("Mean acceptance length (tok/verify step):"),
        format!("{l:.2}")
    );
    assert!(l > 1.0 && l < 2.61, "{l}");
    let (d, ve) = (f("spec_decode_draft_share"), f("spec_decode_verify_share"));
    assert!(
        d > 0.0 && ve > 0.0 && (d + ve - 1.0).abs() < 1e-9,
        "{d} + {ve}"
    );
    assert_eq!(
        row("Draft / verify share of a step:"),
        format!("{:.1}% / {:.1}%", 100.0 * d, 100.0 * ve)
    );
    assert_eq!(
        row("Per-step token gain at the run's batch:"),
        format!("{:.2}x", f("spec_decode_speedup"))
    );
    // EAGLE-3 K = 3 on vLLM: K drafts and K lookahead slots.
    assert_eq!(row("Speculative KV slots per sequence:"), "6");
    // Every decode step speculated: no share row; Llama-3.1-8B's 131,072-token context fits
    // in the KV capacity: no max_model_len note.
    assert!(
        table_value(&out, "Decode steps that speculated:").is_none(),
        "{out}"
    );
    assert!(!out.contains("note: max_model_len"), "{out}");
    let (_, plain, _) = servesim(&[&["bench"][..], &SMALL[..]].concat());
    assert!(!plain.contains("Speculative"), "{plain}");
    assert!(!plain.contains("acceptance"), "{plain}");
}

/// Under `disable_by_batch_size` the table shows the share of decode steps that speculated,
/// as the JSON result has it.
#[test]
fn the_run_table_shows_the_share_of_steps_that_speculated() {
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3,"disable_by_batch_size":4}"#;
    let (out, v) = bench_table_and_json(&[
        "--num-prompts",
        "40",
        "--request-rate",
        "50",
        "--output-len",
        "32",
        "--speculative-config",
        spec,
    ]);
    let share = v["spec_decode_step_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");
    assert_eq!(
        table_value(&out, "Decode steps that speculated:"),
        Some(format!("{:.1}%", 100.0 * share).as_str()),
        "{out}"
    );
}

/// Where the KV capacity is below the model's context (Llama-3.1-70B BF16 on two H100s), the
/// default max_model_len is the capacity less the speculative slots, and the table says so;
/// `estimate` plans the same capacity and max_model_len.
#[test]
fn the_run_table_notes_the_max_model_len_the_slots_cap() {
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3}"#;
    let deployment = [
        "--model",
        "llama-3.1-70b",
        "--tensor-parallel-size",
        "2",
        "--speculative-config",
        spec,
    ];
    let (out, v) = bench_table_and_json(&[&deployment[..], &SMALL[..]].concat());
    let cap = v["kv_capacity_tokens"].as_u64().unwrap();
    assert!(cap < 131_072, "{cap}: the context fits, no cap to note");
    let note = format!(
        "note: max_model_len {} = KV capacity {cap} less the 6 speculative slots a sequence holds",
        cap - 6
    );
    assert!(out.contains(&note), "{note}: {out}");
    let e = json(
        &[
            &["estimate"][..],
            &deployment[..],
            &["--format", "json"][..],
        ]
        .concat(),
    );
    assert_eq!(e["memory"]["kv_tokens"].as_u64(), Some(cap), "{e}");
    assert_eq!(
        e["speculative"]["max_model_len"].as_u64(),
        Some(cap - 6),
        "{e}"
    );
}

/// `estimate --speculative-config` plans the KV capacity `bench` runs with: 429,536 tokens for
/// EAGLE-3 K = 3 on Llama-3.1-8B, one H100, vLLM (docs/speculative-decoding.md), 449,056
/// without.
#[test]
fn estimate_plans_the_kv_capacity_bench_runs_with() {
    for (spec, tokens) in [
        (
            Some(r#"{"method":"eagle3","num_speculative_tokens":3}"#),
            429_536,
        ),
        (None, 449_056),
    ] {
        let flag: Vec<&str> = spec.map_or(vec![], |s| vec!["--speculative-config", s]);
        let e = json(&[&["estimate", "--format", "json"][..], &flag[..]].concat());
        let b = json(&[&["bench", "--format", "json"][..], &flag[..], &SMALL[..]].concat());
        assert_eq!(e["memory"]["kv_tokens"].as_u64(), Some(tokens), "{spec:?}");
        assert_eq!(b["kv_capacity_tokens"].as_u64(), Some(tokens), "{spec:?}");
    }
    let doc = std::fs::read_to_string("docs/speculative-decoding.md").unwrap();
    assert!(doc.contains("429,536 tokens for EAGLE-3 K = 3 on Llama-3.1-8B"));
    assert!(doc.contains("against 449,056 without"));
}

/// `servesim plan SCENARIO` on one deployment (h100-sxm FP8 TP2, 256 seqs, few requests)
/// with `sets` added, as JSON, its report written to `out`: the plan.
fn small_plan(scenario: &str, out: &Path, sets: &[&str]) -> Value {
    let mut a = common::one_deployment_plan_args(scenario, &["workload.num_requests=100"]);
    for s in sets {
        a.extend(["--set", s]);
    }
    a.extend(["--format", "json", "--out", out.to_str().unwrap()]);
    let v = json(&a);
    if v.get("plan").is_some() {
        v["plan"].clone()
    } else {
        v
    }
}

/// candidates.csv: its header and rows.
fn candidates_csv(dir: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(dir.join("candidates.csv")).unwrap();
    let header = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r
        .records()
        .map(|x| x.unwrap().iter().map(String::from).collect())
        .collect();
    (header, rows)
}

/// Row `n` (1-based) of `sheet` in the report's cost.xlsx, each cell's value as written
/// (scripts/xlsx_check.py); `None`, after a notice (a failure in CI), without python3.
fn sheet_row(dir: &Path, sheet: &str, n: u32) -> Option<Vec<String>> {
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/xlsx_check.py"
        ))
        .args(["sheet-row", dir.join("cost.xlsx").to_str().unwrap(), sheet])
        .arg(n.to_string())
        .output();
    match out {
        Ok(o) if o.status.success() => Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.split_once('\t').map_or("", |(_, v)| v).to_string())
                .collect(),
        ),
        Ok(o) => panic!("xlsx_check: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            common::skip_or_fail("python3 is not available for the sheet check");
            None
        }
    }
}

/// The `<tr>` of the candidate ranked `rank` in the report's index.html.
fn html_row(html: &str, rank: usize) -> &str {
    let start = html
        .find(&format!("data-rank=\"{rank}\">"))
        .unwrap_or_else(|| panic!("no row of rank {rank}"));
    let len = html[start..].find("</tr>").unwrap();
    &html[start..start + len]
}

/// With a `[speculative]` table, every report of the plan gives each candidate's K: the
/// `num_speculative_tokens` column right after `max_num_seqs` in candidates.csv and in the
/// workbook's Search sheet, and `256 K3`-style cells in index.html, rank by rank as in the
/// JSON plan; the columns after K keep their figures.
#[test]
fn the_plans_reports_give_each_candidates_k() {
    let dir = tempfile::tempdir().unwrap();
    let p = small_plan("scenarios/chat-slo-eagle3.toml", dir.path(), &[]);
    let cands = p["candidates"].as_array().unwrap();
    let ks: Vec<u64> = cands
        .iter()
        .map(|c| c["candidate"]["num_speculative_tokens"].as_u64().unwrap())
        .collect();
    let mut sorted = ks.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 1, 3], "the scenario's plan.speculative");

    let (header, rows) = candidates_csv(dir.path());
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let k_col = col("num_speculative_tokens");
    assert_eq!(k_col, col("max_num_seqs") + 1, "{header:?}");
    let rate_col = col("capacity_rate_per_replica (req/s)");
    assert_eq!(rate_col, k_col + 1, "{header:?}");
    assert_eq!(rows.len(), cands.len());
    for (i, (row, c)) in rows.iter().zip(cands).enumerate() {
        assert_eq!(row[col("rank")], (i + 1).to_string());
        assert_eq!(row[k_col], ks[i].to_string(), "rank {}: {row:?}", i + 1);
        assert_eq!(row[col("max_num_seqs")], "256");
        let rate: f64 = row[rate_col].parse().unwrap();
        assert_eq!(
            Some(rate),
            c["capacity_rate_per_replica"].as_f64(),
            "{row:?}"
        );
    }

    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    for (i, k) in ks.iter().enumerate() {
        let row = html_row(&html, i + 1);
        assert!(
            row.contains(&format!(">256 K{k}</td>")),
            "rank {}: {row}",
            i + 1
        );
    }

    if let Some(h) = sheet_row(dir.path(), "Search", 1) {
        assert_eq!(h, header, "the Search sheet's header is candidates.csv's");
        for (i, row) in rows.iter().enumerate() {
            let cells = sheet_row(dir.path(), "Search", i as u32 + 2).unwrap();
            assert_eq!(cells[k_col], row[k_col], "Search row {}", i + 2);
            assert_eq!(cells[rate_col], row[rate_col], "Search row {}", i + 2);
        }
    }
}

/// Without a `[speculative]` table no report has a K: no column in candidates.csv or the
/// Search sheet, no `K` in index.html's batch cells.
#[test]
fn a_plan_without_speculation_has_no_k_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = small_plan("scenarios/chat-slo.toml", dir.path(), &[]);
    assert!(
        p.get("speculation").is_none_or(Value::is_null),
        "{}",
        p["speculation"]
    );
    let (header, rows) = candidates_csv(dir.path());
    assert!(!rows.is_empty());
    assert!(
        !header.iter().any(|h| h == "num_speculative_tokens"),
        "{header:?}"
    );
    let at = header.iter().position(|h| h == "max_num_seqs").unwrap();
    assert_eq!(header[at + 1], "capacity_rate_per_replica (req/s)");
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let row = html_row(&html, 1);
    assert!(row.contains(">256</td>"), "{row}");
    assert!(!html.contains("256 K"), "{row}");
    if let Some(h) = sheet_row(dir.path(), "Search", 1) {
        assert_eq!(h, header);
    }
}

/// With xPyD candidates beside the colocated ones (`plan.disaggregated`), the K column does
/// not shift the xPyD rows: each figure stays under its header, and their K cell is empty.
#[test]
fn xpyd_rows_stay_under_their_headers_beside_the_k_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = small_plan(
        "scenarios/chat-slo-eagle3.toml",
        dir.path(),
        &["plan.disaggregated=true"],
    );
    let (header, rows) = candidates_csv(dir.path());
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(col("num_speculative_tokens"), col("max_num_seqs") + 1);
    let xs = p["disaggregated"]["candidates"].as_array().unwrap();
    let xpyd: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "disaggregated").collect();
    assert_eq!(xpyd.len(), xs.len());
    assert!(!xpyd.is_empty());
    for (row, x) in xpyd.iter().zip(xs) {
        assert_eq!(row.len(), header.len(), "{row:?}");
        assert_eq!(row[col("num_speculative_tokens")], "", "{row:?}");
        assert_eq!(row[col("binding_constraint")], "", "{row:?}");
        assert_eq!(
            row[col("prefill_gpu")],
            x["prefill"]["gpu"].as_str().unwrap()
        );
        assert_eq!(
            row[col("decode_tp")],
            x["decode"]["tp"].to_string(),
            "{row:?}"
        );
        if x["status"] == "feasible" {
            let n = x["prefill"]["replicas"].as_u64().unwrap()
                + x["decode"]["replicas"].as_u64().unwrap();
            assert_eq!(row[col("replicas")], n.to_string(), "{row:?}");
        }
    }
    for row in rows.iter().filter(|r| r[0] == "colocated") {
        assert!(["0", "1", "3"].contains(&row[col("num_speculative_tokens")].as_str()));
    }
}

#[test]
fn speculative_input_errors_say_what_is_accepted() {
    let bench = |spec: &str| {
        [&["bench", "--speculative-config", spec][..], &SMALL[..]]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let cases: [(&str, &[&str]); 5] = [
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":"high"}"#,
            &[
                "speculative.acceptance_rate",
                "a number in [0, 1]",
                "a list",
            ],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":-0.2}"#,
            &["speculative.acceptance_rate", "[0, 1]"],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":0.7,"mean_acceptance_length":2.5}"#,
            &["give one of"],
        ),
        (
            r#"{"method":"draft_model","model":"llama-3.1-405b","num_speculative_tokens":3,"acceptance_rate":0.7}"#,
            &[
                "speculative.model",
                "llama-3.1-405b",
                "fits without speculation",
            ],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":-1}"#,
            &["speculative.num_speculative_tokens", "0..=16"],
        ),
    ];
    for (spec, wanted) in cases {
        let args = bench(spec);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_error_names(&a, wanted);
    }
}
