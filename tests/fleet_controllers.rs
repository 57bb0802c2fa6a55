//! The fleet's controllers inside the simulation: an autoscaler (cold starts, draining) and
//! replica failures (retry or fail), checked against what they must do.

use servesim::scenario::Scenario;
use servesim::summary::RunSummary;

/// Llama-3.1-8B on H100, fixed lengths, so that one replica's capacity is well defined: a
/// saturated closed loop completes 56.6 req/s (`servesim run` with `kind = "offline"`,
/// `max_concurrency = 144`, 20,000 requests).
const BASE: &str = r#"
seed = 5
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
dtype = "fp8"
[scheduler]
max_num_seqs = 64
[workload]
[workload.input]
kind = "fixed"
tokens = 512
[workload.output]
kind = "fixed"
tokens = 128
[slo]
ttft_ms = 1500.0
tpot_ms = 60.0
"#;

fn run(
    extra: &str,
    sets: &[&str],
    period_s: f64,
) -> (RunSummary, Vec<servesim::metrics::PeriodSummary>, usize) {
    let text = format!("{BASE}\n{extra}");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = Scenario::parse(&text, "test", &sets).unwrap_or_else(|e| panic!("{e}"));
    let r = sc
        .resolve("test")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_periods((period_s * 1e9) as u64);
    let (summary, periods) = r.run_with_periods().unwrap();
    let n = periods.len();
    (summary, periods, n)
}

fn conserved(s: &RunSummary) {
    assert_eq!(
        s.arrived,
        s.completed + s.rejected + s.timed_out + s.lost + s.in_flight,
        "every arrival ends completed, rejected, timed out, lost or in flight: {s:?}"
    );
}

#[test]
fn a_failure_at_peak_costs_attainment_without_a_spare_and_not_with_one() {
    // 3 replicas carry 140 req/s (47 each); one fails for 10 minutes at t = 600 s, leaving
    // 70 req/s each to two replicas that complete 56.6.
    let faults = "[faults]\nfailures = [{ time_s = 600.0, replicas = 1, repair_s = 600.0 }]\non_failure = \"retry\"\n";
    let sets = [
        "workload.arrival={kind=\"poisson\", rate_per_s=140.0}",
        "workload.duration_s=1800.0",
    ];
    let mut results = Vec::new();
    for replicas in [3, 4] {
        let mut s: Vec<&str> = sets.to_vec();
        let r = format!("deployment.replicas={replicas}");
        s.push(&r);
        let (sum, periods, _) = run(faults, &s, 300.0);
        conserved(&sum);
        assert_eq!(sum.lost, 0, "retried, not lost");
        assert!(sum.retried > 0, "the failed replica had requests in flight");
        let attainment = sum.goodput_share;
        results.push((replicas, attainment, periods));
    }
    let (_, a3, p3) = &results[0];
    let (_, a4, _) = &results[1];
    // Without a spare the two survivors are overloaded for 10 minutes.
    assert!(*a3 < 0.95, "N+0 attainment {a3}");
    let worst = p3.iter().map(|p| p.slo_attainment).fold(1.0, f64::min);
    assert!(worst < 0.8, "N+0: the failure's periods miss: {p3:?}");
    // With a spare the fleet holds.
    assert!(*a4 > 0.99, "N+1 attainment {a4}");
}

#[test]
fn failed_requests_are_lost_when_the_client_does_not_retry() {
    let faults = "[faults]\nfailures = [{ time_s = 100.0, replicas = 1, repair_s = 60.0 }]\non_failure = \"fail\"\n";
    let (s, _, _) = run(
        faults,
        &[
            "workload.arrival={kind=\"poisson\", rate_per_s=60.0}",
            "workload.num_requests=20000",
            "deployment.replicas=2",
        ],
        0.0,
    );
    conserved(&s);
    assert!(s.lost > 0 && s.retried == 0, "{s:?}");
    assert_eq!(s.failed, s.rejected + s.timed_out + s.lost);
}

#[test]
fn with_instant_scaling_the_replicas_track_the_load() {
    // The policy counts 45 req/s a replica; the load steps 40 -> 160 -> 80 req/s, an hour each.
    let cap = 45.0;
    let autoscale = format!(
        "[autoscale]\npolicy = \"utilization\"\ntarget_utilization = 1.0\ncapacity_rate_per_replica = {cap}\n\
         min_replicas = 1\nmax_replicas = 20\nscale_up_delay_s = 0.0\nscale_down_cooldown_s = 0.0\nstep = 20\n\
         interval_s = 10.0\nwindow_s = 300.0\n"
    );
    let (s, periods, _) = run(
        &autoscale,
        &[
            "workload.arrival={kind=\"schedule\", points=[[0.0, 40.0], [3600.0, 40.0], [3600.0, 160.0], [7200.0, 160.0], [7200.0, 80.0], [10800.0, 80.0]]}",
            "workload.duration_s=10800.0",
        ],
        3600.0,
    );
    conserved(&s);
    for (h, rate) in [40.0f64, 160.0, 80.0].into_iter().enumerate() {
        let want = (rate / cap).ceil();
        let got = periods[h].ready_replicas;
        // The estimate of the rate is noisy near a boundary and the first minutes of an hour
        // still carry the last hour's fleet: within one replica of ceil(load / capacity).
        assert!(
            (got - want).abs() <= 1.0,
            "hour {h}: {got:.2} replicas ready on average, ceil({rate} / {cap}) = {want}"
        );
    }
    assert!(periods[1].ready_replicas > periods[0].ready_replicas + 1.5);
    assert!(periods[2].ready_replicas < periods[1].ready_replicas - 0.5);
}

#[test]
fn a_long_cold_start_hurts_the_ramp_and_a_short_one_does_not() {
    let policy = |delay: f64| {
        format!(
            "[autoscale]\npolicy = \"utilization\"\ntarget_utilization = 0.8\ncapacity_rate_per_replica = 45.0\n\
             min_replicas = 1\nmax_replicas = 20\nscale_up_delay_s = {delay}\nscale_down_cooldown_s = 600.0\nstep = 4\n"
        )
    };
    let sets = [
        "workload.arrival={kind=\"schedule\", points=[[0.0, 20.0], [1800.0, 20.0], [1800.0, 150.0], [5400.0, 150.0]]}",
        "workload.duration_s=5400.0",
    ];
    let (fast, _, _) = run(&policy(30.0), &sets, 0.0);
    let (slow, _, _) = run(&policy(1800.0), &sets, 0.0);
    conserved(&fast);
    conserved(&slow);
    assert!(
        fast.goodput_share > slow.goodput_share + 0.1,
        "30 s cold start {:.3} vs 30 min {:.3}",
        fast.goodput_share,
        slow.goodput_share
    );
}

#[test]
fn bad_autoscale_and_faults_values_name_their_key() {
    for (extra, key) in [
        (
            "[autoscale]\npolicy = \"magic\"\ncapacity_rate_per_replica = 1.0\n",
            "autoscale.policy",
        ),
        (
            "[autoscale]\ncapacity_rate_per_replica = -1.0\n",
            "autoscale.capacity_rate_per_replica",
        ),
        (
            "[autoscale]\npolicy = \"utilization\"\n",
            "autoscale.capacity_rate_per_replica",
        ),
        (
            "[autoscale]\ncapacity_rate_per_replica = 1.0\nmin_replicas = 4\nmax_replicas = 2\n",
            "autoscale.max_replicas",
        ),
        (
            "[autoscale]\ncapacity_rate_per_replica = 1.0\ninterval_s = 60.0\nwindow_s = 10.0\n",
            "autoscale.window_s",
        ),
        (
            "[autoscale]\ncapacity_rate_per_replica = 1.0\nscale_up_delay_s = -5.0\n",
            "autoscale.scale_up_delay_s",
        ),
        ("[faults]\non_failure = \"pray\"\n", "faults.on_failure"),
        ("[faults]\nmtbf_hours = 0.0\n", "faults.mtbf_hours"),
        (
            "[faults]\nfailures = [{ time_s = -1.0 }]\n",
            "faults.failures[0].time_s",
        ),
        ("[faults]\nrepair_s = nan\n", "faults.repair_s"),
    ] {
        let text = format!("{BASE}\n{extra}\n");
        let sets = [
            "workload.num_requests=10".to_string(),
            "workload.arrival={kind=\"poisson\", rate_per_s=1.0}".to_string(),
        ];
        let err = Scenario::parse(&text, "test.toml", &sets)
            .and_then(|s| s.resolve("test.toml"))
            .expect_err(extra);
        let msg = err.to_string();
        assert!(msg.contains(key), "{extra}: {msg}");
        assert!(err.is_input_error(), "{msg}");
    }
}
