//! Helpers shared by the integration tests: run the binary, run a scenario.
#![allow(dead_code)] // each test crate uses the helpers it needs

use std::path::Path;
use std::process::Command;

use servesim::scenario::Scenario;
use servesim::summary::RunSummary;

/// Runs the `servesim` binary in `dir`: (exit code, stdout, stderr).
pub fn servesim_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the servesim binary runs"); // cargo built it for the integration tests
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the `servesim` binary in the repository root.
pub fn servesim(args: &[&str]) -> (i32, String, String) {
    servesim_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// The arguments of `servesim plan SCENARIO` searching one deployment (h100-sxm TP2, 256
/// seqs; the scenario's dtypes and K values), with `--set S` for each of `sets`.
pub fn one_deployment_plan_args<'a>(scenario: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "plan",
        scenario,
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.tp=[2]",
        "--set",
        "plan.max_num_seqs=[256]",
    ];
    for s in sets {
        a.extend(["--set", s]);
    }
    a
}

/// Parses, resolves and runs a scenario written as TOML; panics with the text on an error.
pub fn run_toml(text: &str) -> RunSummary {
    let sc = Scenario::parse(text, "test", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
    sc.resolve("test")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .run()
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .summary
}

/// A scenario's `[workload]` table: `keys` (`num_requests = 100`, and any other key of the
/// table), every request at once (offline), each with `input` prompt and `output` output
/// tokens.
pub fn fixed_offline_workload(keys: &str, input: u32, output: u32) -> String {
    format!(
        "[workload]\n{keys}\n[workload.arrival]\nkind = \"offline\"\n\
         [workload.input]\nkind = \"fixed\"\ntokens = {input}\n\
         [workload.output]\nkind = \"fixed\"\ntokens = {output}\n"
    )
}

/// The environment variable `.ci/run` sets: in CI a test whose tool (LibreOffice, Chromium, a
/// C or C++ compiler, python3) is missing fails instead of skipping.
pub const CI_VAR: &str = "SERVESIM_CI";

/// Whether the tests run in CI (`SERVESIM_CI` set to anything but `0` or nothing).
pub fn in_ci() -> bool {
    std::env::var(CI_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test whose tool is missing (`what` says which): skips with a notice locally, and fails in
/// CI ([`CI_VAR`]), where a skip would pass without checking anything.
pub fn skip_or_fail(what: &str) {
    if in_ci() {
        panic!("{what}, and {CI_VAR} is set (CI runs every test): install it");
    }
    eprintln!("SKIPPED: {what}");
}

/// Runs the test `name` of the calling test binary again, as CI would (`SERVESIM_CI=1`) on a
/// machine without its tool (an empty `PATH`, plus `env`): (whether it passed, its output).
/// The check that a missing tool fails in CI instead of skipping.
pub fn rerun_in_ci_without_tools(name: &str, env: &[(&str, &str)]) -> (bool, String) {
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CI_VAR, "1")
        .env("PATH", empty.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The filter must have found the test: `1 passed` or `1 failed`.
    assert!(text.contains("running 1 test"), "{name}: {text}");
    (out.status.success(), text)
}

/// The words of a command line as a POSIX shell splits it (plain words and single quotes:
/// what the plan's re-run lines use).
pub fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for ch in line.chars() {
        match ch {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

/// The data rows of a committed reference CSV (lines starting with `#` and the header
/// skipped), each split into exactly `columns` fields (the last, a free-text source, may hold
/// commas). Panics naming the line on a short one.
pub fn reference_fields(path: &str, columns: usize) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|line| {
            let f: Vec<String> = line.splitn(columns, ',').map(str::to_string).collect();
            assert_eq!(f.len(), columns, "{path}: {line}");
            f
        })
        .collect()
}

/// The upper median of a list (the middle value; the upper of the two for an even count).
pub fn upper_median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
