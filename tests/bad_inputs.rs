//! Bad input exits 2 with a precise, panic-free message and writes nothing.
//!
//! `tests/bad_inputs/` holds bad scenarios (`NAME.toml`, with any trace or length file it
//! references next to it) and, for each, `NAME.expected`: substrings, one per line, that
//! `servesim run tests/bad_inputs/NAME.toml` must print on stderr. One test runs them all and
//! reports every failing case at once. The other tests cover the remaining inputs: reference
//! CSVs (`validate --reference`), measurement CSVs (`fit`), `run --out` on failure, and flag
//! errors from clap. See docs/reliability.md.

mod common;

use common::servesim;

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Exit 2, nothing on stdout, an `error:` line, no panic; returns a description of what is
/// wrong, or `None` when all holds.
fn input_error_problem(code: i32, stdout: &str, stderr: &str) -> Option<String> {
    if code != 2 {
        return Some(format!("exit code {code}, expected 2"));
    }
    if !stdout.is_empty() {
        return Some(format!("stdout not empty: {stdout:?}"));
    }
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        return Some("panicked".into());
    }
    if !stderr.starts_with("error:") {
        return Some("stderr does not start with 'error:'".into());
    }
    None
}

fn assert_input_error(code: i32, stdout: &str, stderr: &str) {
    if let Some(p) = input_error_problem(code, stdout, stderr) {
        panic!("{p}\nstderr: {stderr}");
    }
}

/// The cases of tests/bad_inputs/, sorted: (name, scenario path relative to the crate root,
/// expected substrings).
fn cases() -> Vec<(String, String, Vec<String>)> {
    let dir = root().join("tests/bad_inputs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/bad_inputs exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".expected").map(str::to_string))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(format!("{name}.expected"))).unwrap();
            let expected: Vec<String> = text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            let scenario = format!("tests/bad_inputs/{name}.toml");
            assert!(
                root().join(&scenario).exists(),
                "{name}.expected has no {scenario}"
            );
            assert!(!expected.is_empty(), "{name}.expected is empty");
            (name, scenario, expected)
        })
        .collect()
}

#[test]
fn every_bad_input_file_exits_2_with_its_expected_message() {
    let cases = cases();
    assert!(cases.len() >= 25, "only {} cases", cases.len());
    // Every scenario in the folder has its expectation.
    for e in std::fs::read_dir(root().join("tests/bad_inputs")).unwrap() {
        let f = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = f.strip_suffix(".toml") {
            assert!(
                cases.iter().any(|(n, _, _)| n == stem),
                "tests/bad_inputs/{f} has no {stem}.expected"
            );
        }
    }
    let mut failures = Vec::new();
    for (name, scenario, expected) in &cases {
        let (code, stdout, stderr) = servesim(&["run", scenario]);
        if let Some(p) = input_error_problem(code, &stdout, &stderr) {
            failures.push(format!("{name}: {p}\n  stderr: {stderr}"));
            continue;
        }
        for want in expected {
            if !stderr.contains(want.as_str()) {
                failures.push(format!("{name}: stderr lacks {want:?}\n  stderr: {stderr}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn syntax_errors_give_line_and_column() {
    let (code, out, err) = servesim(&["run", "tests/bad_inputs/syntax_error.toml"]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("line 5, column 10"), "{err}");
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The header and first data row of the shipped reference file.
fn reference_header_and_row() -> (String, String) {
    let text =
        std::fs::read_to_string(root().join("calibration/reference/serving-measurements.csv"))
            .unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    (
        lines.next().unwrap().to_string(),
        lines.next().unwrap().to_string(),
    )
}

#[test]
fn bad_reference_csv_names_the_line_and_column_and_writes_nothing() {
    let dir = temp();
    let (header, row) = reference_header_and_row();
    assert!(row.contains(",offline,"), "{row}");
    let bad_row = row.replacen(",offline,", ",sideways,", 1);
    let f = write(
        dir.path(),
        "ref.csv",
        &format!("{header}\n{row}\n{bad_row}\n"),
    );
    let out_dir = dir.path().join("report");
    let (code, out, err) = servesim(&[
        "validate",
        "--reference",
        f.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("ref.csv: line 3"), "{err}");
    assert!(
        err.contains("'kind'") && err.contains("'sideways'"),
        "{err}"
    );
    assert!(!out_dir.exists(), "validate wrote {}", out_dir.display());
}

#[test]
fn reference_csv_with_a_non_numeric_count_names_the_line() {
    let dir = temp();
    let (header, row) = reference_header_and_row();
    assert!(row.contains(",30000,"), "{row}");
    let f = write(
        dir.path(),
        "ref.csv",
        &format!("{header}\n{}\n", row.replacen(",30000,", ",lots,", 1)),
    );
    let (code, out, err) = servesim(&["validate", "--reference", f.to_str().unwrap()]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("ref.csv: line 2"), "{err}");
    assert!(
        err.contains("'num_requests'") && err.contains("'lots'"),
        "{err}"
    );
}

#[test]
fn reference_csv_with_a_missing_column_names_it() {
    let dir = temp();
    let f = write(dir.path(), "ref.csv", "id,kind\nx,offline\n");
    let (code, out, err) = servesim(&["validate", "--reference", f.to_str().unwrap()]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("ref.csv: missing column"), "{err}");
}

const MEAS_HEADER: &str = "kernel,m,n,k,dtype,gpu,driver,median_us,p10_us,p90_us";

#[test]
fn bad_measurement_csv_names_the_line_and_does_not_create_the_output() {
    let dir = temp();
    let f = write(
        dir.path(),
        "meas.csv",
        &format!(
            "{MEAS_HEADER}\ngemm,1,4096,4096,bf16,g,,40,39,41\ngemm,1,4096,4096,bf16,g,,-40,39,41\n"
        ),
    );
    let out_file = dir.path().join("fitted.toml");
    let (code, out, err) = servesim(&[
        "fit",
        f.to_str().unwrap(),
        "--base",
        "h100-sxm",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("meas.csv: line 3"), "{err}");
    assert!(err.contains("'median_us'") && err.contains("-40"), "{err}");
    assert!(!out_file.exists());
    // No temporary file is left behind either.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn measurement_csv_missing_column_and_empty_file_are_input_errors() {
    let dir = temp();
    let out_file = dir.path().join("fitted.toml");
    for (name, text, want) in [
        (
            "cols.csv",
            "kernel,m,n\ngemm,1,4096\n",
            "header: missing required column",
        ),
        ("empty.csv", "", "empty file"),
        (
            "text.csv",
            &*format!("{MEAS_HEADER}\ngemm,one,4096,4096,bf16,g,,40,39,41\n"),
            "line 2",
        ),
    ] {
        let f = write(dir.path(), name, text);
        let (code, out, err) = servesim(&[
            "fit",
            f.to_str().unwrap(),
            "--base",
            "h100-sxm",
            "--out",
            out_file.to_str().unwrap(),
        ]);
        assert_input_error(code, &out, &err);
        assert!(err.contains(name) && err.contains(want), "{name}: {err}");
        assert!(!out_file.exists(), "{name}");
    }
}

#[test]
fn a_failed_run_writes_no_output_folder() {
    let dir = temp();
    let out_dir = dir.path().join("run");
    let (code, out, err) = servesim(&[
        "run",
        "tests/bad_inputs/negative_rate.toml",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_input_error(code, &out, &err);
    assert!(!out_dir.exists());
    // The same through a --set override on the embedded default.
    let (code, out, err) = servesim(&[
        "run",
        "--set",
        "deployment.tp=3",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("does not divide"), "{err}");
    assert!(!out_dir.exists());
}

#[test]
fn missing_scenario_file_is_an_input_error_naming_it() {
    let (code, out, err) = servesim(&["run", "tests/bad_inputs/no-such-scenario.toml"]);
    assert_input_error(code, &out, &err);
    assert!(err.contains("no-such-scenario.toml"), "{err}");
}

#[test]
fn flag_errors_come_from_clap_and_exit_2() {
    for (args, want) in [
        (&["run", "--bogus"][..], "unexpected argument '--bogus'"),
        (&["run", "--format", "yaml"][..], "invalid value 'yaml'"),
        (&["run", "--seed", "abc"][..], "invalid value 'abc'"),
        (&["frobnicate"][..], "unrecognized subcommand"),
        (&["fit"][..], "required arguments were not provided"),
        (
            &["run", "--set", "deployment.tp"][..],
            "--set: deployment.tp",
        ),
        (&["run", "--set", "deployment.tp=two"][..], "deployment.tp"),
    ] {
        let (code, out, err) = servesim(args);
        assert_input_error(code, &out, &err);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
