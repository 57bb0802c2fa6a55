//! The golden snapshot of servesim's predictions (tests/golden/README.md): every reference
//! row's predicted figures (`servesim validate` over each file of calibration/reference/ it
//! reads), `servesim run` of the shipped scenarios, three `bench` runs (one disaggregated)
//! and the `plan` of the embedded scenario and of the long-context RAG scenario (colocated
//! and xPyD candidates), each kept in tests/golden/NAME.json. A prediction that moves by any
//! amount, in any bit, fails the test with a list of what moved (old, new, relative change).
//!
//! A change that moves predictions on purpose regenerates the snapshot in the same commit,
//! so that its diff shows what moved:
//!
//!     SERVESIM_BLESS=1 cargo test --release --test golden
//!
//! The scenarios left out: scenarios/diurnal-week.toml (a week of 24 million requests a run;
//! tests/week_plan.rs covers it).

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One prediction kept: its file name and the `servesim` arguments that make it (stdout is
/// its JSON).
struct Case {
    name: String,
    args: Vec<String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir` ending in `ext`, sorted, as paths relative to the repository (the
/// binary runs there; no machine's absolute path reaches an output).
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| Path::new(dir).join(e.expect("a directory entry").file_name()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn cases(out: &Path) -> Vec<Case> {
    let mut v = Vec::new();
    // Every reference file: those validate cannot read (kernel measurements, notes, rows of
    // models or formats the simulator does not have yet) are told apart by its exit code.
    for f in files("calibration/reference", "csv") {
        let path = f.display().to_string();
        v.push(Case {
            name: format!("validate-{}", stem(&f)),
            args: args(&["validate", "--reference", &path, "--format", "json"]),
        });
    }
    for f in files("scenarios", "toml") {
        if stem(&f) == "diurnal-week" {
            continue;
        }
        let path = f.display().to_string();
        v.push(Case {
            name: format!("run-{}", stem(&f)),
            args: args(&["run", &path, "--format", "json"]),
        });
    }
    let bench = [
        ("bench-default", vec![]),
        (
            "bench-sharegpt-4rps",
            vec![
                "--dataset-name",
                "sharegpt",
                "--num-prompts",
                "2000",
                "--request-rate",
                "4",
            ],
        ),
        (
            "bench-1p2d-20rps",
            vec![
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "2",
                "--num-prompts",
                "3000",
                "--request-rate",
                "20",
            ],
        ),
    ];
    for (name, extra) in bench {
        let mut a = args(&["bench", "--format", "json"]);
        a.extend(args(&extra));
        v.push(Case {
            name: name.into(),
            args: a,
        });
    }
    let rag = "scenarios/long-context-rag.toml".to_string();
    for (name, scenario) in [
        ("plan-chat-slo", None),
        ("plan-long-context-rag", Some(rag)),
    ] {
        let folder = out.join(name).display().to_string();
        let mut a = args(&["plan", "--format", "json", "--out", &folder]);
        a.extend(scenario);
        v.push(Case {
            name: name.into(),
            args: a,
        });
    }
    v
}

/// Where `new` differs from `old` (numbers bit for bit), as readable lines.
fn differences(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in a {
                match b.get(k) {
                    Some(y) => differences(&format!("{path}.{k}"), x, y, out),
                    None => out.push(format!("{path}.{k}: gone (was {x})")),
                }
            }
            for (k, y) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: new ({y})"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            out.push(format!("{path}: {} entries -> {}", a.len(), b.len()))
        }
        (Value::Number(x), Value::Number(y)) => {
            let same = match (x.as_u64(), y.as_u64(), x.as_i64(), y.as_i64()) {
                (Some(p), Some(q), _, _) => p == q,
                (_, _, Some(p), Some(q)) => p == q,
                _ => x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits),
            };
            if !same {
                let (p, q) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                let rel = (q - p) / p.abs().max(f64::MIN_POSITIVE);
                out.push(format!("{path}: {x} -> {y} ({:+.3e} relative)", rel));
            }
        }
        _ if old != new => out.push(format!("{path}: {old} -> {new}")),
        _ => {}
    }
}

/// Runs a case; its JSON, or why it did not run (for a reference file `validate` cannot
/// read; any other case must run).
fn predict(case: &Case) -> Result<Value, String> {
    let a: Vec<&str> = case.args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = common::servesim(&a);
    if code != 0 && case.name.starts_with("validate-") {
        return Err(stderr.trim().to_string());
    }
    assert_eq!(code, 0, "servesim {}: {stderr}", case.args.join(" "));
    Ok(serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{}: {e}\n{stdout}", case.name)))
}

/// What moved in one case, as report lines (none when nothing did).
fn moved(case: &Case, old: &Value, new: &Value) -> Vec<String> {
    let mut diff = Vec::new();
    differences("", old, new, &mut diff);
    if diff.is_empty() {
        return diff;
    }
    let mut lines = vec![format!(
        "{} (servesim {}): {} figures moved",
        case.name,
        case.args.join(" "),
        diff.len()
    )];
    let shown = diff.len().min(25);
    lines.extend(diff[..shown].iter().map(|d| format!("    {d}")));
    if diff.len() > shown {
        lines.push(format!("    ... and {} more", diff.len() - shown));
    }
    lines
}

#[test]
fn predictions_match_the_golden_snapshot() {
    let bless = std::env::var_os("SERVESIM_BLESS").is_some_and(|v| v == "1");
    let tmp = tempfile::tempdir().unwrap();
    let cases = cases(tmp.path());
    // The cases are separate processes: run them side by side.
    let got: Vec<Result<Value, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = cases.iter().map(|c| s.spawn(|| predict(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a case ran"))
            .collect()
    });
    let read = cases
        .iter()
        .zip(&got)
        .filter(|(c, g)| g.is_ok() && c.name.starts_with("validate-"))
        .count();
    assert!(read >= 4, "validate reads only {read} reference files");
    let dir = root().join("tests/golden");
    let mut report = Vec::new();
    // A snapshot with no prediction behind it: its case is gone or no longer runs.
    for f in files("tests/golden", "json") {
        let name = stem(&f);
        match cases.iter().zip(&got).find(|(c, _)| c.name == name) {
            None => report.push(format!("{name}: a snapshot without a case")),
            Some((c, Err(why))) => report.push(format!(
                "{name}: servesim {} no longer runs: {why}",
                c.args.join(" ")
            )),
            Some(_) => {}
        }
    }
    for (case, new) in cases.iter().zip(&got) {
        let Ok(new) = new else {
            continue;
        };
        let file = dir.join(format!("{}.json", case.name));
        if bless {
            let text = serde_json::to_string_pretty(new).unwrap() + "\n";
            std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            continue;
        }
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let old: Value = serde_json::from_str(&text).expect("a snapshot is JSON");
                report.extend(moved(case, &old, new));
            }
            Err(_) => report.push(format!("{}: no snapshot ({})", case.name, file.display())),
        }
    }
    assert!(
        bless || report.is_empty(),
        "predictions moved from the golden snapshot (tests/golden/):\n{}\n\
         If they moved on purpose, regenerate the snapshot in the same commit:\n    \
         SERVESIM_BLESS=1 cargo test --release --test golden",
        report.join("\n")
    );
}

/// The comparison sees a one-bit change, a key gone or new, an array resized.
#[test]
fn the_comparison_sees_any_change() {
    let old = serde_json::json!({"a": 0.1, "b": [1, 2], "c": {"d": "x"}});
    let one_bit = f64::from_bits(0.1f64.to_bits() + 1);
    for new in [
        serde_json::json!({"a": one_bit, "b": [1, 2], "c": {"d": "x"}}),
        serde_json::json!({"a": 0.1, "b": [1, 2, 3], "c": {"d": "x"}}),
        serde_json::json!({"a": 0.1, "b": [1, 2], "c": {}}),
        serde_json::json!({"a": 0.1, "b": [1, 2], "c": {"d": "x", "e": 1}}),
        serde_json::json!({"a": 0.1, "b": [1, 3], "c": {"d": "x"}}),
    ] {
        let mut diff = Vec::new();
        differences("", &old, &new, &mut diff);
        assert!(!diff.is_empty(), "{new}");
    }
    let mut diff = Vec::new();
    differences("", &old, &old.clone(), &mut diff);
    assert!(diff.is_empty());
}
