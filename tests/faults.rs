//! Faults an outside test of hostile and careless invocations found (issue 29): a report lost
//! to a closed standard output, confident numbers from step times beyond the clock, writes
//! through planted links, half-replaced report folders, unbounded reads and grids, and the
//! smaller ones. One test per fault class; each failed on the code before its fix.
//! docs/reliability.md lists them.
//!
//! The tests that read `/dev/zero` or build a huge grid run the binary under a 4 GB address
//! space limit and a time-out, so that a regression fails the test instead of the machine.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{servesim, servesim_in};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
}

/// (exit code, stdout, stderr) of a finished command.
fn result(out: std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs servesim in `dir` with its standard output a pipe whose reader is gone before the
/// command writes anything (as `| head -c 10` is once it has its bytes): (exit code, stderr).
fn with_closed_stdout(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut child = bin()
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let (code, _, err) = result(child.wait_with_output().unwrap());
    (code, err)
}

/// Runs servesim in `dir` under bash with `limits` (`ulimit` options, e.g. `-v 4000000`) and
/// a time-out of `secs`: (exit code, stdout, stderr); 124 when it timed out.
fn limited(dir: &Path, limits: &str, secs: u32, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -c 0 {limits}; exec timeout {secs} \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    result(out)
}

/// Exit 2, nothing on stdout, no panic, and stderr holding every one of `want`.
fn assert_input_error(what: &str, (code, out, err): &(i32, String, String), want: &[&str]) {
    assert_eq!(
        *code, 2,
        "{what}: exit {code}\nstdout: {out:.500}\nstderr: {err}"
    );
    assert!(out.is_empty(), "{what}: stdout {out:.500}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    for w in want {
        assert!(err.contains(w), "{what}: stderr lacks {w:?}: {err}");
    }
}

/// The names and bytes of the files in `dir`, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn names(dir: &Path) -> Vec<String> {
    snapshot(dir).into_iter().map(|(n, _)| n).collect()
}

// ---- 1. a closed standard output -------------------------------------------------------

#[test]
fn a_closed_stdout_loses_no_report_and_stays_quiet() {
    let d = tmp();
    let cases: [(&[&str], &str, &[&str]); 3] = [
        (
            &[
                "run",
                "--set",
                "workload.num_requests=300",
                "--format",
                "json",
                "--out",
                "r",
            ],
            "r",
            &["summary.json", "summary.csv", "timeseries.csv"],
        ),
        (
            &[
                "bench",
                "--num-prompts",
                "50",
                "--format",
                "json",
                "--out",
                "b",
            ],
            "b",
            &["summary.json", "result.json", "timeseries.csv"],
        ),
        (
            &[
                "sweep",
                "--vary",
                "workload.num_requests=20,40",
                "--format",
                "csv",
                "--out",
                "s",
            ],
            "s",
            &["sweep.csv", "sweep.json"],
        ),
    ];
    for (args, folder, files) in cases {
        let (code, err) = with_closed_stdout(d.path(), args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("error"), "{args:?}: {err}");
        for f in files {
            let p = d.path().join(folder).join(f);
            assert!(p.exists(), "{args:?}: {f} missing; stderr: {err}");
        }
    }
    // The report is whole: its JSON parses.
    let s = std::fs::read_to_string(d.path().join("r/summary.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(v["completed"], 300);
}

#[test]
fn plan_with_a_closed_stdout_writes_the_same_whole_report() {
    let d = tmp();
    let (code, out, err) = servesim_in(d.path(), &["plan", "--format", "json", "--out", "a"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with('{'));
    let (code, err) = with_closed_stdout(d.path(), &["plan", "--format", "json", "--out", "b"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("error"), "{err}");
    let (a, b) = (snapshot(&d.path().join("a")), snapshot(&d.path().join("b")));
    assert_eq!(
        a.iter().map(|f| &f.0).collect::<Vec<_>>(),
        b.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert!(a.iter().any(|f| f.0 == "index.html"));
}

// ---- 2. step times beyond the clock -------------------------------------------------------

#[test]
fn an_absurd_step_time_scale_exits_2_naming_the_key_and_the_range() {
    for v in ["1e13", "1e-300", "1e300"] {
        let r = servesim(&[
            "run",
            "--set",
            &format!("deployment.step_time_scale={v}"),
            "--set",
            "workload.num_requests=50",
            "--format",
            "json",
        ]);
        assert_input_error(v, &r, &["deployment.step_time_scale", "[0.001, 1000]"]);
    }
}

#[test]
fn absurd_engine_and_gpu_profiles_exit_2_and_estimate_never_prints_nan() {
    let d = tmp();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let engine = std::fs::read_to_string(root.join("calibration/engines/vllm.toml")).unwrap();
    // The [host] per-iteration cost, whatever its committed value.
    let engine: String = engine
        .lines()
        .map(|l| {
            if l.starts_with("per_iteration_s =") {
                "per_iteration_s = 1e300"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(engine.contains("1e300"));
    std::fs::write(d.path().join("slow.toml"), engine).unwrap();
    let gpu = std::fs::read_to_string(root.join("calibration/gpus/h100-sxm.toml")).unwrap();
    let gpu = gpu.replace(
        "stream_bandwidth_bytes_per_s = 3.0e12",
        "stream_bandwidth_bytes_per_s = 1e-300",
    );
    assert!(gpu.contains("1e-300"));
    std::fs::write(d.path().join("slow-gpu.toml"), gpu).unwrap();
    let run = servesim_in(
        d.path(),
        &[
            "run",
            "--set",
            "deployment.engine=./slow.toml",
            "--format",
            "json",
        ],
    );
    assert_input_error("engine", &run, &["host.per_iteration_s", "[0, 1]"]);
    let run = servesim_in(
        d.path(),
        &[
            "run",
            "--set",
            "deployment.gpu=./slow-gpu.toml",
            "--format",
            "json",
        ],
    );
    assert_input_error(
        "gpu run",
        &run,
        &["memory.stream_bandwidth_bytes_per_s", "[1e10, 1e15]"],
    );
    for format in ["table", "json", "csv"] {
        let est = servesim_in(
            d.path(),
            &["estimate", "--gpu", "./slow-gpu.toml", "--format", format],
        );
        assert!(!est.1.contains("NaN"), "{}", est.1);
        assert_input_error(
            "gpu estimate",
            &est,
            &["memory.stream_bandwidth_bytes_per_s"],
        );
    }
}

#[test]
fn a_step_time_beyond_the_clock_ends_the_run_as_truncated_saying_why() {
    use servesim::scenario::Scenario;
    // Profiles and settings are checked for plausible values first (the tests above); this
    // reaches the simulator by changing the resolved scenario, as a library user could.
    for extra in [
        &[][..],
        &[
            "deployment.mode=disaggregated",
            "deployment.prefill.replicas=1",
            "deployment.decode.replicas=1",
        ][..],
    ] {
        let mut set = vec!["workload.num_requests=50".to_string()];
        set.extend(extra.iter().map(|s| s.to_string()));
        let sc = Scenario::load(None, &set).unwrap();
        let mut r = sc.resolve("<embedded default>").unwrap();
        r.scenario.deployment.step_time_scale = 1e13;
        let s = r.run().unwrap().summary;
        let why = s.truncated.clone().unwrap_or_default();
        assert!(
            why.contains("clock") && why.contains("iteration"),
            "{extra:?}: truncated {:?}, {} completed, TPOT {} ms",
            s.truncated,
            s.completed,
            s.mean_tpot_ms
        );
        assert_eq!(s.completed, 0, "{extra:?}");
        assert!(s.duration < 1e9, "{extra:?}: {}", s.duration);
        // No NaN or infinity anywhere (the JSON exporter refuses them).
        use servesim::report::{Exporter, JsonExporter};
        JsonExporter::new("summary.json")
            .write(&s, &mut Vec::new())
            .unwrap();
    }
}

// ---- 3. links planted in the output folder ------------------------------------------------

#[cfg(unix)]
#[test]
fn links_planted_in_the_output_folder_are_never_written_through() {
    use std::os::unix::fs::symlink;
    let d = tmp();
    let outside = tmp();
    let out = d.path().join("r");
    std::fs::create_dir(&out).unwrap();
    let child = bin()
        .args([
            "run",
            "--set",
            "workload.num_requests=20000",
            "--format",
            "json",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The temporary names the writer used to choose (`.NAME.tmp<pid>-<n>.EXT`), planted while
    // the run simulates, each a link to a file outside the folder.
    let pid = child.id();
    let mut victims = Vec::new();
    for (stem, ext) in [
        ("summary", "json"),
        ("summary", "csv"),
        ("timeseries", "csv"),
    ] {
        for n in 0..6 {
            let victim = outside.path().join(format!("{stem}-{n}.{ext}"));
            std::fs::write(&victim, "precious").unwrap();
            let _ = symlink(&victim, out.join(format!(".{stem}.tmp{pid}-{n}.{ext}")));
            victims.push(victim);
        }
    }
    let (code, _, err) = result(child.wait_with_output().unwrap());
    assert_eq!(code, 0, "{err}");
    for v in &victims {
        assert_eq!(
            std::fs::read_to_string(v).unwrap(),
            "precious",
            "{}",
            v.display()
        );
    }
    // The report's files are its own, not links.
    for f in ["summary.json", "summary.csv", "timeseries.csv"] {
        let m = std::fs::symlink_metadata(out.join(f)).unwrap();
        assert!(m.is_file(), "{f}");
    }

    // `--out` itself a link to a folder elsewhere: the report replaces the link; nothing is
    // written into the folder it pointed at.
    let elsewhere = outside.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("summary.json"), "precious").unwrap();
    let link = d.path().join("link");
    symlink(&elsewhere, &link).unwrap();
    let (code, _, err) = servesim_in(
        d.path(),
        &["run", "--set", "workload.num_requests=50", "--out", "link"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(names(&elsewhere), ["summary.json"]);
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("summary.json")).unwrap(),
        "precious"
    );
    let m = std::fs::symlink_metadata(&link).unwrap();
    assert!(m.is_dir() && !m.file_type().is_symlink());
    assert!(link.join("summary.json").is_file());
}

// ---- 4. a report folder replaced as a whole -----------------------------------------------

#[cfg(target_os = "linux")]
#[test]
fn an_interrupted_plan_leaves_the_previous_report_whole() {
    let d = tmp();
    let (code, _, err) = servesim_in(d.path(), &["plan", "--price", "3", "--out", "report"]);
    assert_eq!(code, 0, "{err}");
    let report = d.path().join("report");
    let before = snapshot(&report);
    let plan_json = before.iter().find(|f| f.0 == "plan.json").unwrap().1.len();
    // A file-size limit a little above plan.json (the first file written): the kernel kills
    // the next plan (SIGXFSZ) when it writes a larger file, after the smaller ones.
    let limit_kib = plan_json / 1024 + 8;
    assert!(
        before.iter().any(|f| f.1.len() > (limit_kib + 1) * 1024),
        "no file of the report is larger than {limit_kib} KiB: the test cannot interrupt it"
    );
    let (code, _, err) = limited(
        d.path(),
        &format!("-f {limit_kib}"),
        300,
        &["plan", "--price", "4", "--out", "report"],
    );
    assert_ne!(code, 0, "the plan was not interrupted: {err}");
    // The folder is the previous report, byte for byte: no new file beside old ones, and no
    // temporary file.
    let after = snapshot(&report);
    assert_eq!(
        before.iter().map(|f| &f.0).collect::<Vec<_>>(),
        after.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (b, a) in before.iter().zip(&after) {
        assert!(b.1 == a.1, "{} changed", b.0);
    }
    // A complete plan then replaces it.
    let (code, _, err) = servesim_in(d.path(), &["plan", "--price", "4", "--out", "report"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(snapshot(&report), before);
}

// ---- 5. unbounded reads, grids and event rates -------------------------------------------

/// 4 GB of address space and 60 s: a read or a grid without a bound fails the test.
const BOUNDED: &str = "-v 4000000";

#[cfg(target_os = "linux")]
#[test]
fn every_input_file_read_from_dev_zero_fails_fast_naming_the_path_and_the_cap() {
    let d = tmp();
    let scen = |body: &str| {
        format!("[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n[workload]\nnum_requests = 10\n{body}")
    };
    std::fs::write(
        d.path().join("trace.toml"),
        scen("[workload.arrival]\nkind = \"trace\"\npath = \"/dev/zero\"\n"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("lengths.toml"),
        scen(
            "[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 1\n\
             [workload.input]\nkind = \"empirical\"\npath = \"/dev/zero\"\n\
             [workload.output]\nkind = \"fixed\"\ntokens = 10\n",
        ),
    )
    .unwrap();
    let cases: [(&str, &[&str]); 10] = [
        ("model", &["run", "--set", "deployment.model=/dev/zero"]),
        ("gpu", &["run", "--set", "deployment.gpu=/dev/zero"]),
        ("engine", &["run", "--set", "deployment.engine=/dev/zero"]),
        ("scenario", &["run", "/dev/zero"]),
        ("trace", &["run", "trace.toml"]),
        ("lengths", &["run", "lengths.toml"]),
        (
            "sweep scenario",
            &["sweep", "/dev/zero", "--vary", "seed=1,2", "--out", "s"],
        ),
        ("measurements", &["fit", "/dev/zero", "--out", "f.toml"]),
        ("reference", &["validate", "--reference", "/dev/zero"]),
        (
            "result file",
            &[
                "fit-engine",
                "/dev/zero",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-sxm",
                "--out",
                "e.toml",
            ],
        ),
    ];
    for (what, args) in cases {
        let r = limited(d.path(), BOUNDED, 60, args);
        assert_input_error(what, &r, &["/dev/zero", "the right file?"]);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_sweep_grid_beyond_a_million_points_fails_before_it_is_built() {
    let d = tmp();
    let r = limited(
        d.path(),
        BOUNDED,
        60,
        &[
            "sweep",
            "--vary",
            "workload.num_requests=1..10000:10000",
            "--vary",
            "seed=1..10000:10000",
            "--out",
            "s",
        ],
    );
    assert_input_error(
        "grid",
        &r,
        &["workload.num_requests (10000) x seed (10000)", "1000000"],
    );
}

#[cfg(target_os = "linux")]
#[test]
fn event_rates_beyond_their_bounds_exit_2_naming_the_setting() {
    let d = tmp();
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "autoscaler interval",
            &[
                "--set",
                "autoscale.interval_s=1e-9",
                "--set",
                "autoscale.capacity_rate_per_replica=5",
            ],
            "autoscale.interval_s",
        ),
        (
            "utilisation window",
            &[
                "--set",
                "autoscale.interval_s=0.1",
                "--set",
                "autoscale.window_s=1e8",
                "--set",
                "autoscale.capacity_rate_per_replica=5",
            ],
            "autoscale.window_s",
        ),
        (
            "failure rate",
            &["--set", "faults.mtbf_hours=1e-9"],
            "faults.mtbf_hours",
        ),
    ];
    for (what, set, key) in cases {
        let mut args = vec!["run", "--set", "workload.num_requests=2000"];
        args.extend(set);
        let r = limited(d.path(), BOUNDED, 60, &args);
        assert_input_error(what, &r, &[key]);
    }
}

// ---- 7. the smaller ones -----------------------------------------------------------------

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_out_fails_before_the_work_naming_the_path() {
    // /sys refuses new folders (to root too).
    for args in [
        &["run", "--out", "/sys/servesim-report"][..],
        &["validate", "--out", "/sys/servesim-report"][..],
        &[
            "sweep",
            "--vary",
            "seed=1,2",
            "--out",
            "/sys/servesim-report",
        ][..],
        &[
            "fit",
            "calibration/reference/h100-gemm-2025.csv",
            "--out",
            "/sys/servesim.toml",
        ][..],
    ] {
        let r = servesim(args);
        assert_input_error(&args.join(" "), &r, &["/sys/servesim", "cannot write here"]);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_on_stdout_is_blamed_on_stdout() {
    let out = bin()
        .args([
            "run",
            "--set",
            "workload.num_requests=50",
            "--format",
            "json",
        ])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let (code, _, err) = result(out);
    assert_ne!(code, 0);
    assert!(err.contains("standard output"), "{err}");
    assert!(!err.contains("summary.json"), "{err}");
}

#[test]
fn fit_finds_its_default_base_profile_in_the_catalog_from_any_folder() {
    let d = tmp();
    let rows =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/reference/h100-gemm-2025.csv");
    let (code, out, err) = servesim_in(
        d.path(),
        &["fit", rows.to_str().unwrap(), "--out", "fitted.toml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote fitted.toml"), "{out}");
}

#[cfg(unix)]
#[test]
fn a_scenario_in_a_folder_whose_name_is_not_utf8_says_so() {
    use std::os::unix::ffi::OsStrExt;
    let d = tmp();
    let weird = d.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir(&weird).unwrap();
    std::fs::write(
        weird.join("trace.csv"),
        "arrival_s,input_tokens,output_tokens\n0,100,10\n1,100,10\n",
    )
    .unwrap();
    std::fs::write(
        weird.join("s.toml"),
        "[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n[workload]\n\
         [workload.arrival]\nkind = \"trace\"\npath = \"trace.csv\"\n",
    )
    .unwrap();
    let out = bin()
        .arg("run")
        .arg(weird.join("s.toml"))
        .current_dir(d.path())
        .output()
        .unwrap();
    let r = result(out);
    assert_input_error(
        "non-UTF-8 folder",
        &r,
        &["workload.arrival.path", "not UTF-8"],
    );
    // From inside the folder the same scenario runs.
    let out = bin()
        .args(["run", "s.toml"])
        .current_dir(&weird)
        .output()
        .unwrap();
    let (code, _, err) = result(out);
    assert_eq!(code, 0, "{err}");
}

/// A `vllm bench serve --save-result`-like file of one load (4 req/s, 512 prompt and 128
/// output tokens) with `completed` requests and a mean TTFT of `ttft_ms`.
fn result_file(completed: u64, ttft_ms: f64) -> String {
    let duration = completed as f64 / 4.0;
    let output = completed * 128;
    format!(
        r#"{{"num_prompts": {completed}, "request_rate": 4.0, "burstiness": 1.0,
        "max_concurrency": null, "duration": {duration}, "completed": {completed},
        "total_input_tokens": {}, "total_output_tokens": {output},
        "output_throughput": {}, "mean_ttft_ms": {ttft_ms}, "p99_ttft_ms": {}}}"#,
        completed * 512,
        output as f64 / duration,
        2.0 * ttft_ms
    )
}

#[test]
fn request_counts_that_would_run_for_minutes_exit_2_at_once() {
    let d = tmp();
    std::fs::write(d.path().join("huge.json"), result_file(1_000_000_000, 40.0)).unwrap();
    let r = limited(
        d.path(),
        "",
        60,
        &[
            "fit-engine",
            "huge.json",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            "e.toml",
        ],
    );
    assert_input_error("fit-engine", &r, &["huge.json", "completed", "100000"]);
    let header = "id,kind,engine,model,gpu,tp,input_len,output_len,num_requests,rate_rps,output_tokens_per_s";
    std::fs::write(
        d.path().join("ref.csv"),
        format!("{header}\nhuge,offline,vllm,llama-3.1-8b,h100-sxm,1,128,128,1000000000,,5000\n"),
    )
    .unwrap();
    let r = limited(d.path(), "", 60, &["validate", "--reference", "ref.csv"]);
    assert_input_error("validate", &r, &["ref.csv", "num_requests", "10000000"]);
}

#[test]
fn contradictory_result_files_are_named() {
    let d = tmp();
    // Two files of one load whose TTFTs are 10x apart: a warning naming both.
    std::fs::write(d.path().join("a.json"), result_file(200, 40.0)).unwrap();
    std::fs::write(d.path().join("b.json"), result_file(200, 400.0)).unwrap();
    let args = |files: &[&'static str]| {
        let mut a = vec!["fit-engine"];
        a.extend(files);
        a.extend([
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            "e.toml",
        ]);
        a
    };
    let (code, _, err) = servesim_in(d.path(), &args(&["a.json", "b.json"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning") && err.contains("a and b describe the same load"),
        "{err}"
    );
    // A file that contradicts itself (its p90 above its p99) is an error naming the keys.
    let bad = result_file(200, 40.0).replace(
        "\"p99_ttft_ms\": 80",
        "\"p90_ttft_ms\": 90.0, \"p99_ttft_ms\": 80",
    );
    std::fs::write(d.path().join("c.json"), bad).unwrap();
    let r = servesim_in(d.path(), &args(&["c.json"]));
    assert_input_error("p90 > p99", &r, &["c.json", "p99_ttft_ms", "p90_ttft_ms"]);
}

/// A Hugging Face config.json of a small Llama-like model, with `extra` keys replacing its own.
fn config_json(extra: &[(&str, &str)]) -> String {
    let mut keys = vec![
        ("model_type", "\"llama\""),
        ("hidden_size", "4096"),
        ("num_hidden_layers", "4"),
        ("num_attention_heads", "32"),
        ("num_key_value_heads", "8"),
        ("intermediate_size", "14336"),
        ("vocab_size", "32000"),
    ];
    for (k, v) in extra {
        keys.retain(|(kk, _)| kk != k);
        keys.push((k, v));
    }
    let body: Vec<String> = keys.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    format!("{{{}}}", body.join(", "))
}

#[test]
fn model_configs_that_cannot_be_read_exactly_exit_2() {
    let d = tmp();
    type Keys<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&str, Keys, &str); 3] = [
        (
            "floored head_dim",
            &[("hidden_size", "4000"), ("num_attention_heads", "48")],
            "head_dim",
        ),
        (
            "mixtral without experts",
            &[
                ("model_type", "\"mixtral\""),
                ("num_local_experts", "0"),
                ("num_experts_per_tok", "2"),
            ],
            "num_local_experts",
        ),
        (
            "mixtral, no expert keys",
            &[("model_type", "\"mixtral\"")],
            "num_local_experts",
        ),
    ];
    for (what, extra, key) in cases {
        let p = d.path().join("config.json");
        std::fs::write(&p, config_json(extra)).unwrap();
        let r = servesim(&["estimate", "--model", p.to_str().unwrap()]);
        assert_input_error(what, &r, &[key]);
    }
    // The unchanged config loads.
    std::fs::write(d.path().join("config.json"), config_json(&[])).unwrap();
    let (code, _, err) = servesim(&[
        "estimate",
        "--model",
        d.path().join("config.json").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_sweep_whose_every_point_is_invalid_exits_2() {
    let d = tmp();
    let r = servesim_in(
        d.path(),
        &[
            "sweep",
            "--vary",
            "deployment.tp=3,5",
            "--format",
            "csv",
            "--out",
            "s",
        ],
    );
    assert_input_error(
        "sweep",
        &r,
        &["every one of the 2 points failed", "deployment.tp"],
    );
    assert!(!d.path().join("s").exists());
}

#[test]
fn a_run_cut_by_a_limit_says_how_many_requests_were_never_sent() {
    for limit in ["limits.max_events=2000", "limits.max_sim_time_s=5"] {
        let (code, out, err) = servesim(&[
            "run",
            "--set",
            "workload.num_requests=5000",
            "--set",
            limit,
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let why = v["truncated"].as_str().unwrap_or_default();
        let unsent = v["unsent"].as_u64().expect("unsent is a count");
        assert!(unsent > 0 && unsent < 5000, "{unsent}");
        assert!(
            why.contains(&format!("{unsent} requests never sent")),
            "{why}"
        );
        let arrived = v["arrived"].as_u64().unwrap();
        assert_eq!(arrived + unsent, 5000, "{out:.400}");
    }
}

#[test]
fn the_largest_seed_works_as_set_as_with_the_flag() {
    let run = |args: &[&str]| {
        let mut a = vec![
            "run",
            "--set",
            "workload.num_requests=100",
            "--format",
            "json",
        ];
        a.extend(args);
        let (code, out, err) = servesim(&a);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let max = "18446744073709551615";
    let by_flag = run(&["--seed", max]);
    assert_eq!(run(&["--set", &format!("seed={max}")]), by_flag);
    assert_eq!(run(&["--set", &format!("seed=\"{max}\"")]), by_flag);
    // And bench, which turns its flags into a scenario, keeps it too.
    let bench = |seed: &str| {
        servesim(&[
            "bench",
            "--num-prompts",
            "20",
            "--request-rate",
            "10",
            "--seed",
            seed,
            "--format",
            "json",
        ])
    };
    let (a, b) = (bench(max), bench("9223372036854775807"));
    assert_eq!((a.0, b.0), (0, 0), "{}", a.2);
    assert_ne!(a.1, b.1, "the seed was clamped");
}
