//! `--trace-events FILE` on `run` and `bench`: a Chrome trace (the JSON trace-event format of
//! chrome://tracing and Perfetto) that leaves the run's figures as they are, shows every
//! replica's iterations and counters, and refuses a path it cannot write before running.

mod common;

use serde_json::Value;

/// Runs `args` with and without `--trace-events`; the trace, and checks stdout is the same.
fn traced(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json");
    let file = path.display().to_string();
    let (code, plain, err) = common::servesim(args);
    assert_eq!(code, 0, "{err}");
    let (code, with_trace, err) =
        common::servesim(&[args, &["--trace-events", &file][..]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(plain, with_trace, "tracing changed the run's figures");
    let text = std::fs::read_to_string(&path).expect("the trace is written");
    serde_json::from_str(&text).expect("the trace is JSON")
}

/// Every event has the fields the trace-event format requires for its phase.
fn check_format(trace: &Value) -> Vec<&Value> {
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string() && e["pid"].is_u64(), "{e}");
        match ph {
            "X" => assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}"),
            "C" => assert!(e["args"].is_object(), "{e}"),
            "M" | "i" => {}
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    assert_eq!(trace["otherData"]["capped"], false);
    events.iter().collect()
}

#[test]
fn a_run_traces_its_replicas_iterations_and_counters() {
    let trace = traced(&[
        "run",
        "--set",
        "workload.num_requests=200",
        "--set",
        "deployment.replicas=2",
        "--format",
        "json",
    ]);
    let events = check_format(&trace);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("replica ")), "{names:?}");
    let spans = events.iter().filter(|e| e["ph"] == "X").count();
    let counters = events.iter().filter(|e| e["ph"] == "C").count();
    assert!(
        spans > 100 && counters > 10,
        "{spans} spans, {counters} counters"
    );
}

#[test]
fn a_disaggregated_bench_traces_both_pools_and_its_fast_forwarded_runs() {
    let trace = traced(&[
        "bench",
        "--request-rate",
        "1",
        "--num-prompts",
        "50",
        "--prefill-replicas",
        "1",
        "--decode-replicas",
        "2",
        "--format",
        "json",
    ]);
    let events = check_format(&trace);
    let named = |prefix: &str| {
        events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .filter(|e| e["args"]["name"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    assert_eq!((named("prefill "), named("decode ")), (1, 2));
    // Decode batches of one or two at 1 req/s: most decode iterations are in runs.
    let runs = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"]["iterations"].as_u64().unwrap() > 1)
        .count();
    assert!(runs > 20, "{runs} fast-forwarded spans");
}

#[test]
fn a_trace_path_that_cannot_be_written_fails_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().display().to_string();
    for cmd in ["run", "bench"] {
        let (code, out, err) = common::servesim(&[cmd, "--trace-events", &folder]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(err.contains("--trace-events"), "{cmd}: {err}");
    }
}

/// A trace directly in the `--out` folder lands with the report (the folder is replaced as a
/// whole, so a trace written there first would be lost), a second time too; one named like a
/// report file, or deeper in the folder, is refused before the run and leaves no folder.
#[test]
fn a_trace_in_the_out_folder_lands_with_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let folder = out.display().to_string();
    let at = |name: &str| out.join(name).display().to_string();
    for cmd in ["run", "bench"] {
        for pass in 0..2 {
            let args = [cmd, "--out", &folder, "--trace-events", &at("trace.json")];
            let (code, _, err) = common::servesim(&args);
            assert_eq!(code, 0, "{cmd} pass {pass}: {err}");
            let text = std::fs::read_to_string(out.join("trace.json")).expect("the trace");
            let trace: Value = serde_json::from_str(&text).expect("the trace is JSON");
            assert!(!check_format(&trace).is_empty());
            assert!(out.join("summary.json").is_file(), "{cmd} pass {pass}");
            let listed = std::fs::read_to_string(out.join(".servesim-files")).unwrap();
            assert!(listed.lines().any(|l| l == "trace.json"), "{listed}");
        }
        std::fs::remove_dir_all(&out).unwrap();
        let mut refused = vec![at("summary.json"), at("sub/trace.json")];
        if cmd == "bench" {
            refused.push(at("result.json"));
        }
        for trace in &refused {
            let (code, _, err) =
                common::servesim(&[cmd, "--out", &folder, "--trace-events", trace]);
            assert_eq!(code, 2, "{cmd} {trace}: {err}");
            assert!(err.contains("--trace-events"), "{cmd} {trace}: {err}");
            assert!(!out.exists(), "{cmd} {trace}: a refused run left {folder}");
        }
    }
}
