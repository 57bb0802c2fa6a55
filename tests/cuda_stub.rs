//! `servesim calibrate --check` (feature `cuda`) against a stand-in driver
//! (tests/cuda_stub/libcuda_stub.c, built here with `$CC` or `cc`): the open-time checks run
//! through cudarc as on a GPU machine, without one. The stub reports an H200-like device and a
//! chosen CUDA version, and supports nothing beyond the device query, so the check ends with a
//! failed item (cuBLASLt, or the first module load) and exit code 1. Run with
//! `cargo test --release --features cuda --test cuda_stub`; set `SERVESIM_NVRTC` to a
//! `libnvrtc.so` to include the NVRTC choice. Skips without a C compiler, and fails then in
//! CI (`SERVESIM_CI`).
#![cfg(feature = "cuda")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the stub with `defines` into `dir/<name>/libcuda.so`; `None` without a C compiler.
fn stub(dir: &Path, name: &str, defines: &[&str]) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cuda_stub/libcuda_stub.c");
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
        .args(defines)
        .arg("-o")
        .arg(out.join("libcuda.so"))
        .arg(src)
        .status()
        .ok()?;
    assert!(status.success(), "{cc} could not build the stub driver");
    Some(out)
}

/// `servesim calibrate --check` with the stub driver in `lib` first on the library path.
fn check(lib: &Path) -> (i32, String, String) {
    let path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["calibrate", "--check"])
        .env("LD_LIBRARY_PATH", format!("{}:{path}", lib.display()))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(table: &'a str, item: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(item))
        .unwrap_or_else(|| panic!("no '{item}' row in:\n{table}"))
}

#[test]
fn check_picks_the_timing_symbol_the_driver_has_and_reports_versions() {
    let dir = tempfile::tempdir().unwrap();
    let Some(r550) = stub(dir.path(), "r550", &["-DDRIVER_VERSION=12040"]) else {
        common::skip_or_fail("no C compiler (set CC or install cc)");
        return;
    };
    // An R550-like driver (CUDA 12.4): no cuEventElapsedTime_v2, so the original symbol.
    let (code, table, err) = check(&r550);
    assert_eq!(code, 1, "{table}{err}");
    let sym = row(&table, "driver symbols");
    assert!(
        sym.contains(" ok ") && sym.ends_with("through cuEventElapsedTime"),
        "{sym}"
    );
    assert!(row(&table, "CUDA driver").contains("CUDA 12.4 (12040)"));
    let dev = row(&table, "device");
    assert!(
        dev.contains("NVIDIA H200, sm_90, 132 SMs") && dev.contains("profile h200-sxm"),
        "{dev}"
    );
    assert!(table.contains("FAILED"), "{table}");
    assert!(err.contains("calibration check failed"), "{err}");
    if std::env::var("SERVESIM_NVRTC").is_ok() {
        assert!(row(&table, "NVRTC").contains("cubin for sm_90"), "{table}");
    }

    // An R570-like driver (CUDA 12.8) exports both: the _v2 one.
    let r570 = stub(dir.path(), "r570", &["-DDRIVER_VERSION=12080", "-DWITH_V2"]).unwrap();
    let (_, table, _) = check(&r570);
    assert!(
        row(&table, "driver symbols").ends_with("through cuEventElapsedTime_v2"),
        "{table}"
    );
    assert!(row(&table, "CUDA driver").contains("CUDA 12.8"));
}

#[test]
fn check_refuses_an_old_driver_a_missing_gpu_and_a_newer_nvrtc() {
    let dir = tempfile::tempdir().unwrap();
    let Some(old) = stub(dir.path(), "old", &["-DOMIT_ALLOC_ASYNC"]) else {
        common::skip_or_fail("no C compiler (set CC or install cc)");
        return;
    };
    // A driver without a symbol the backend calls: exit 2, naming it, no panic.
    let (code, _, err) = check(&old);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the CUDA driver lacks cuMemAllocAsync"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // A driver that sees no GPU: exit 2 saying so.
    let none = stub(dir.path(), "none", &["-DNO_GPU"]).unwrap();
    let (code, _, err) = check(&none);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sees no GPU"), "{err}");

    // A CUDA 11.8 driver with a 12.x NVRTC: refused, naming the package to install.
    if let Ok(nvrtc) = std::env::var("SERVESIM_NVRTC") {
        let r520 = stub(dir.path(), "r520", &["-DDRIVER_VERSION=11080"]).unwrap();
        let (code, table, _) = check(&r520);
        assert_eq!(code, 1, "{table}");
        let n = row(&table, "NVRTC");
        assert!(
            n.contains("FAILED") && n.contains("newer than the driver's CUDA 11.8"),
            "{n} ({nvrtc})"
        );
        assert!(n.contains("nvidia-cuda-nvrtc-cu11"), "{n}");
    }
}

#[test]
fn without_a_c_compiler_the_stub_test_fails_in_ci() {
    let (passed, out) = common::rerun_in_ci_without_tools(
        "check_picks_the_timing_symbol_the_driver_has_and_reports_versions",
        &[("CC", "/nonexistent/cc")],
    );
    assert!(!passed && out.contains(common::CI_VAR), "{out}");
}
