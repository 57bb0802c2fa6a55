//! A re-run line of the embedded default plan (`servesim run scenarios/chat-slo.toml ...`)
//! runs as printed from any folder: a scenario path naming an embedded scenario reads the
//! embedded copy when no such file exists (saying so on stderr), and a real file always wins.

mod common;

use std::path::Path;

use common::{servesim, servesim_in, shell_words};
use serde_json::Value;

/// `servesim ARGS --format json` in `dir`: the report and stderr; fails the test on an error.
fn run_json(dir: &Path, args: &[&str]) -> (Value, String) {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let (code, out, err) = servesim_in(dir, &all);
    assert_eq!(code, 0, "{all:?} in {}: {err}", dir.display());
    (serde_json::from_str(&out).unwrap(), err)
}

#[test]
fn the_default_plans_rerun_line_runs_as_printed_from_another_folder() {
    let dir = tempfile::tempdir().unwrap();
    // No scenario: the embedded default, one deployment searched.
    let args = [
        "plan",
        "--set",
        "plan.gpus=[\"h100-sxm\"]",
        "--set",
        "plan.tp=[2]",
        "--set",
        "plan.max_num_seqs=[256]",
        "--format",
        "json",
        "--out",
        "report",
    ];
    let (code, out, err) = servesim_in(dir.path(), &args);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    let line = plan["recommendation"]["run_command"]
        .as_str()
        .expect("the plan recommends a deployment");
    let words = shell_words(line);
    assert_eq!(
        words[..3],
        ["servesim", "run", "scenarios/chat-slo.toml"],
        "{line}"
    );
    let words: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let (elsewhere, note) = run_json(dir.path(), &words);
    assert!(
        note.contains("using the embedded scenarios/chat-slo.toml"),
        "stderr: {note}"
    );
    let (root, root_err) = run_json(Path::new(env!("CARGO_MANIFEST_DIR")), &words);
    assert!(
        !root_err.contains("embedded"),
        "the real file wins: {root_err}"
    );
    assert_eq!(
        elsewhere, root,
        "the same run from a temporary folder and the root"
    );
}

#[test]
fn a_short_name_reads_the_embedded_copy_and_a_real_file_wins() {
    let few = ["--set", "workload.num_requests=200"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (shipped, _) = run_json(
        root,
        &[&["run", "scenarios/chat-slo.toml"][..], &few].concat(),
    );
    let dir = tempfile::tempdir().unwrap();
    for name in ["chat-slo", "chat-slo.toml", "./scenarios/chat-slo.toml"] {
        let (r, err) = run_json(dir.path(), &[&["run", name][..], &few].concat());
        assert!(err.contains("embedded"), "{name}: {err}");
        assert_eq!(r, shipped, "{name}");
    }
    // A real scenarios/chat-slo.toml in the folder is read, not the embedded copy.
    std::fs::create_dir(dir.path().join("scenarios")).unwrap();
    let own = std::fs::read_to_string(root.join("scenarios/default.toml")).unwrap();
    std::fs::write(dir.path().join("scenarios/chat-slo.toml"), own).unwrap();
    let (mine, err) = run_json(
        dir.path(),
        &[&["run", "scenarios/chat-slo.toml"][..], &few].concat(),
    );
    assert!(!err.contains("embedded"), "{err}");
    let (default, _) = run_json(
        root,
        &[&["run", "scenarios/default.toml"][..], &few].concat(),
    );
    assert_eq!(mine, default, "the folder's own file is the one run");
    // A name that is neither a file nor an embedded scenario is still an input error.
    let (code, _, err) = servesim(&["run", "no-such-scenario.toml"]);
    assert_eq!(code, 2, "{err}");
}
