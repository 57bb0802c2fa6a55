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

/// Parses, resolves and runs a scenario written as TOML; panics with the text on an error.
pub fn run_toml(text: &str) -> RunSummary {
    let sc = Scenario::parse(text, "test", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
    sc.resolve("test")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .run()
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .summary
}
