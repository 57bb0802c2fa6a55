//! `servesim plan` over time-varying traffic: hour-by-hour sizing, the whole period simulated
//! with the autoscaler, against the static fleet for the peak. Short periods on Llama-3.1-8B
//! keep these quick; scenarios/diurnal-week.toml is the full week (benches/targets.rs).

mod common;

use common::servesim;
use serde_json::Value;

const BASE: &str = r#"
name = "week-test"
seed = 3
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
dtype = "fp8"
[workload]
dataset = "sharegpt"
[slo]
ttft_ms = 2000.0
tpot_ms = 80.0
[plan]
gpus = ["h100-sxm"]
dtypes = ["fp8"]
tp = [1]
max_num_seqs = [256]
"#;

/// Writes `BASE` + `extra` to a scenario file, plans it, returns plan.json and the folder.
fn plan(extra: &str, sets: &[&str]) -> (Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("week.toml");
    std::fs::write(&path, format!("{BASE}\n{extra}")).unwrap();
    let out = dir.path().join("report");
    let mut args = vec![
        "plan",
        path.to_str().unwrap(),
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ];
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let (code, stdout, err) = servesim(&args);
    assert_eq!(code, 0, "{err}");
    (serde_json::from_str(&stdout).unwrap(), dir)
}

fn chosen(p: &Value) -> &Value {
    let w = &p["week"];
    &w["candidates"][w["chosen"].as_u64().expect("a candidate was chosen") as usize]
}

/// A ramp from 40 to 200 req/s over three hours and back.
const RAMP: &str = r#"
[workload.arrival]
kind = "schedule"
points = [[0.0, 80.0], [10800.0, 400.0], [21600.0, 80.0]]
[autoscale]
policy = "utilization"
target_utilization = 0.8
min_replicas = 1
step = 2
scale_down_cooldown_s = 300.0
"#;

#[test]
fn a_ramp_is_planned_hour_by_hour_and_autoscaled_for_less_than_the_static_fleet() {
    let (p, dir) = plan(&format!("{RAMP}\n"), &["workload.duration_s=21600.0"]);
    let w = &p["week"];
    for key in [
        "static_cost_usd",
        "autoscaled_cost_usd",
        "slo_attainment",
        "lost_requests",
    ] {
        assert!(w[key].is_number(), "week.{key} missing: {w}");
    }
    assert_eq!(w["hours"], 6);
    let c = chosen(&p);
    let hours = c["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 6);
    // Every request of the period was simulated.
    let arrived: f64 = hours
        .iter()
        .map(|h| h["arrival_rate_per_s"].as_f64().unwrap() * 3600.0)
        .sum();
    assert_eq!(c["summary"]["arrived"].as_f64().unwrap(), arrived);
    // The hour-by-hour sizing follows the load.
    let planned: Vec<u64> = hours
        .iter()
        .map(|h| h["planned_replicas"].as_u64().unwrap())
        .collect();
    assert!(
        planned[2] > planned[0] && planned[2] >= planned[5],
        "{planned:?}"
    );
    assert_eq!(
        planned.iter().max().copied(),
        c["static_replicas"].as_u64(),
        "the static fleet is the peak hour's"
    );
    let stat = w["static_cost_usd"].as_f64().unwrap();
    let auto = w["autoscaled_cost_usd"].as_f64().unwrap();
    assert!(auto < stat, "autoscaled ${auto} against static ${stat}");
    assert!(w["slo_attainment"].as_f64().unwrap() >= 0.99, "{w}");
    // The report: fleet.csv with its columns, the week plot, the Week sheet.
    let csv = std::fs::read_to_string(dir.path().join("report/fleet.csv")).unwrap();
    assert!(
        csv.starts_with("hour,arrival_rate_per_s,replicas,gpus,slo_attainment,cost_usd"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 7);
    assert!(dir.path().join("report/week.png").exists());
    let sheets = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/xlsx_check.py"
        ))
        .arg("sheets")
        .arg(dir.path().join("report/cost.xlsx"))
        .output();
    match sheets {
        Ok(o) if o.status.success() => {
            let names = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(names.lines().any(|l| l == "Week"), "sheets: {names}");
        }
        _ => common::skip_or_fail("python3 is not available for the sheet check"),
    }
}

#[test]
fn a_long_cold_start_leaves_fewer_replicas_ready_on_the_ramp_at_no_lower_cost() {
    let (fast, _) = plan(RAMP, &["workload.duration_s=21600.0"]);
    let (slow, _) = plan(
        RAMP,
        &[
            "workload.duration_s=21600.0",
            "autoscale.scale_up_delay_s=1800.0",
        ],
    );
    let hours = |p: &Value| chosen(p)["hours"].as_array().unwrap().clone();
    let sum = |p: &Value, key: &str| -> f64 {
        hours(p)[..3].iter().map(|h| h[key].as_f64().unwrap()).sum()
    };
    // Replicas are paid from the decision to add them: the same decisions cost the same, but
    // with a 30-minute cold start they serve half an hour later, so on the ramp fewer of the
    // replicas paid for are ready and latency rises.
    let cost = |p: &Value| p["week"]["autoscaled_cost_usd"].as_f64().unwrap();
    assert!(
        cost(&slow) >= cost(&fast) * (1.0 - 1e-3),
        "a slower start never makes the fleet cheaper: {} vs {}",
        cost(&slow),
        cost(&fast)
    );
    let lag = |p: &Value| sum(p, "replicas") - sum(p, "ready_replicas");
    assert!(
        lag(&slow) > lag(&fast) + 0.5,
        "replica-hours paid but not ready on the ramp: {} with a 30-minute cold start, {} with the default",
        lag(&slow),
        lag(&fast)
    );
    let worst_ttft = |p: &Value| {
        hours(p)[..3]
            .iter()
            .map(|h| h["p99_ttft_ms"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    assert!(
        worst_ttft(&slow) > worst_ttft(&fast),
        "p99 TTFT on the ramp: {} vs {}",
        worst_ttft(&slow),
        worst_ttft(&fast)
    );
    assert_eq!(chosen(&slow)["cold_start_s"], 1800.0);
}

#[test]
fn under_constant_load_the_autoscaled_fleet_is_the_static_plan() {
    let flat = r#"
[workload.arrival]
kind = "schedule"
points = [[0.0, 150.0], [7200.0, 150.0]]
[autoscale]
policy = "utilization"
target_utilization = 1.0
min_replicas = 1
scale_down_cooldown_s = 0.0
"#;
    let (p, _) = plan(flat, &["workload.duration_s=7200.0"]);
    let c = chosen(&p);
    let r = c["static_replicas"].as_f64().unwrap();
    assert!(r >= 2.0, "a fleet of several replicas: {r}");
    for h in c["hours"].as_array().unwrap() {
        assert_eq!(h["planned_replicas"].as_f64().unwrap(), r, "{h}");
        let billed = h["replicas"].as_f64().unwrap();
        assert!(
            (billed - r).abs() < 0.02,
            "hour {}: {billed} replicas paid for against the static {r}",
            h["hour"]
        );
    }
}

#[test]
fn with_failures_the_plan_reports_attainment_with_and_without_spares() {
    let faults = r#"
[workload.arrival]
kind = "schedule"
points = [[0.0, 150.0], [7200.0, 150.0]]
[faults]
failures = [{ time_s = 3000.0, replicas = 1, repair_s = 1200.0 }]
spares = 1
"#;
    let (p, _) = plan(faults, &["workload.duration_s=7200.0"]);
    let s = &p["week"]["spares"];
    let without = s["attainment_without_spares"].as_f64().unwrap();
    let with = s["attainment_with_spares"].as_f64().unwrap();
    assert!(without < 0.99 && with >= 0.99, "{s}");
}

#[test]
fn bad_autoscale_and_faults_values_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, key) in [
        (
            "[autoscale]\ntarget_utilization = 1.5\n",
            "autoscale.target_utilization",
        ),
        ("[autoscale]\nstep = 0\n", "autoscale.step"),
        ("[faults]\nrepair_s = -1.0\n", "faults.repair_s"),
        (
            "[faults]\nfailures = [{ time_s = 10.0, replicas = 0 }]\n",
            "faults.failures[0].replicas",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("{BASE}\n[workload.arrival]\nkind = \"schedule\"\npoints = [[0.0, 10.0], [600.0, 10.0]]\n{extra}"),
        )
        .unwrap();
        let (code, _, err) = servesim(&[
            "plan",
            path.to_str().unwrap(),
            "--set",
            "workload.duration_s=600.0",
            "--out",
            dir.path().join("r").to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{extra}: {err}");
        assert!(
            err.contains(key) && err.contains("bad.toml"),
            "{extra}: {err}"
        );
    }
}

/// A day at 30 req/s with a 10-minute spike to 120 req/s (Llama-3.1-70B FP8, TP 2 on H100).
/// Its busiest hour averages 45 req/s, which hides the spike.
const SPIKE_DAY: &str = r#"
name = "day-with-a-spike"
seed = 7
[deployment]
model = "llama-3.1-70b"
gpu = "h100-sxm"
tp = 2
dtype = "fp8"
router = "least-outstanding"
[workload]
dataset = "sharegpt"
duration_s = 86400.0
[workload.arrival]
kind = "schedule"
points = [[0.0, 30.0], [36000.0, 30.0], [36000.0, 120.0], [36600.0, 120.0], [36600.0, 30.0], [86400.0, 30.0]]
[slo]
ttft_ms = 2000.0
tpot_ms = 80.0
[plan]
gpus = ["h100-sxm"]
dtypes = ["fp8"]
tp = [2]
max_num_seqs = [256]
"#;

/// `servesim run` of a printed line's words after `servesim`, exactly as printed, with
/// `replicas` in place of its `deployment.replicas` when given.
fn run_line(line: &str, replicas: Option<u64>) -> Value {
    assert!(!line.contains('\''), "plain words: {line}");
    let mut args: Vec<String> = line
        .split_whitespace()
        .skip(1)
        .map(|w| match (w.split_once('='), replicas) {
            (Some(("deployment.replicas", _)), Some(r)) => format!("deployment.replicas={r}"),
            _ => w.to_string(),
        })
        .collect();
    args.extend(["--format".into(), "json".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = servesim(&refs);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_ten_minute_spike_sizes_the_static_fleet_that_meets_the_slos_over_the_whole_day() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spike.toml");
    std::fs::write(&path, SPIKE_DAY).unwrap();
    let out = dir.path().join("report");
    let (code, stdout, err) = servesim(&[
        "plan",
        path.to_str().unwrap(),
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let p: Value = serde_json::from_str(&stdout).unwrap();
    let w = &p["week"];
    // The plan is made at the busiest five minutes, not the busiest hour's mean.
    let (window, hour) = (
        w["peak_rate_per_s"].as_f64().unwrap(),
        w["peak_hour_rate_per_s"].as_f64().unwrap(),
    );
    assert_eq!(w["peak_window_s"], 300.0);
    assert!(
        window > 2.0 * hour,
        "busiest window {window}, busiest hour {hour}"
    );
    assert!((p["target_rate_per_s"].as_f64().unwrap() - window).abs() < 1e-9);
    // The static fleet it reports meets every SLO over the whole day, in `servesim run`
    // without an autoscaler, exactly as printed.
    let c = chosen(&p);
    let r = c["static_replicas"].as_u64().unwrap();
    assert_eq!(
        c["static_period"]["meets_slos"], true,
        "{}",
        c["static_period"]
    );
    let line = c["static_run_command"].as_str().expect("a static line");
    assert!(
        line.contains(&format!("deployment.replicas={r}")) && !line.contains("autoscale"),
        "{line}"
    );
    let threshold = p["goodput_threshold"].as_f64().unwrap();
    let day = run_line(line, None);
    assert_eq!(day["slo"]["all_met"], true, "{line}: {}", day["slo"]);
    assert!(day["goodput_share"].as_f64().unwrap() >= threshold, "{day}");
    assert_eq!(
        day["goodput_share"], c["static_period"]["slo_attainment"],
        "the run is the plan's period simulation"
    );
    // A fleet sized for the busiest hour's mean (what one replica sustains, scaled) misses
    // over the day: the spike is what sizes the fleet.
    let i = p["chosen"].as_u64().unwrap() as usize;
    let per_replica = p["candidates"][i]["max_rate_per_replica"].as_f64().unwrap();
    let hourly = (hour / per_replica).ceil() as u64;
    assert!(
        hourly < r,
        "{hourly} replicas for the hour's mean, {r} for the spike"
    );
    let short = run_line(line, Some(hourly));
    assert_eq!(short["slo"]["all_met"], false, "{}", short["slo"]);
    // The period section reports the static fleet's attainment beside the autoscaled one's.
    assert!(w["static_slo_attainment"].as_f64().unwrap() >= threshold);
    assert!(w["slo_attainment"].is_number());
}

#[test]
fn the_period_report_names_the_deployment_as_every_other_plan_output_does() {
    // An attention data-parallel candidate (TP1 DP2): the period section, the period chart
    // and the report page label it with its DP and EP, as the candidate table does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("week.toml");
    let flat =
        "[workload.arrival]\nkind = \"schedule\"\npoints = [[0.0, 150.0], [3600.0, 150.0]]\n\
                [autoscale]\npolicy = \"utilization\"\nmin_replicas = 1\n";
    std::fs::write(&path, format!("{BASE}\n{flat}")).unwrap();
    let out = dir.path().join("report");
    let (code, stdout, err) = servesim(&[
        "plan",
        path.to_str().unwrap(),
        "--set",
        "workload.duration_s=3600.0",
        "--set",
        "plan.dp=[2]",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let label = "h100-sxm fp8 TP1 DP2 EP1 seqs 256";
    let period = stdout
        .lines()
        .find(|l| l.starts_with("  CHOSEN"))
        .expect("a chosen period candidate");
    assert!(period.contains(label), "{period}");
    let svg = std::fs::read_to_string(out.join("week.svg")).unwrap();
    assert!(
        svg.contains(&format!("replicas: {label}")),
        "week.svg lacks {label}"
    );
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        html.contains(&format!("{label}: ")),
        "index.html lacks {label}"
    );
}
