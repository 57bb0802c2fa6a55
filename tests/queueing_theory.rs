//! The simulator and its steady-state analysis against queueing theory, where theory applies:
//! a replica that runs one sequence at a time (max_num_seqs = 1) is a single-server queue.
//! With Poisson arrivals and fixed lengths every request takes the same service time S, an
//! M/D/1 queue, whose mean wait is Wq = rho S / (2 (1 - rho)) (Pollaczek-Khinchine, with
//! E[S^2] = S^2), rho = lambda S.

mod common;

use servesim::scenario::Scenario;

const SCENARIO: &str = r#"
seed = 3
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
[scheduler]
max_num_seqs = 1
[workload]
num_requests = 1
[workload.arrival]
kind = "poisson"
rate_per_s = 1.0
[workload.input]
kind = "fixed"
tokens = 256
[workload.output]
kind = "fixed"
tokens = 64
"#;

fn scenario(sets: &[String]) -> Scenario {
    Scenario::parse(SCENARIO, "queueing-theory test", sets).unwrap()
}

#[test]
fn one_sequence_at_a_time_waits_as_an_m_d_1_queue() {
    // One request alone: its TTFT (frontend + prefill) and its service time S (the replica is
    // busy from its first scheduling to its last token).
    let alone = scenario(&[])
        .resolve("alone")
        .unwrap()
        .run()
        .unwrap()
        .summary;
    let ttft_alone_ms = alone.mean_ttft_ms;
    let service_ms = alone.mean_e2el_ms - alone.mean_queue_ms;
    assert!(service_ms > 0.0);
    for rho in [0.3, 0.5, 0.7] {
        let rate = rho / (service_ms / 1e3);
        let sets = vec![
            format!("workload.arrival.rate_per_s={rate}"),
            "workload.num_requests=100000".to_string(),
        ];
        let s = scenario(&sets)
            .resolve("m/d/1")
            .unwrap()
            .with_request_log(100_000)
            .run()
            .unwrap()
            .summary;
        let st = s
            .steady_state
            .expect("a logged Poisson run has a steady state");
        let wq_ms = rho * service_ms / (2.0 * (1.0 - rho));
        let predicted = ttft_alone_ms + wq_ms;
        let measured = st.ttft.mean_ms;
        let err = (measured - predicted) / predicted;
        // The sample mean of a queue's waits is noisy: at rho 0.7 and 100,000 requests, seeds
        // 1-6 land within 3.5% of the formula.
        assert!(
            err.abs() < 0.05,
            "rho {rho}: mean TTFT {measured:.2} ms in steady state, M/D/1 predicts {predicted:.2} ms \
             (S = {service_ms:.2} ms, Wq = {wq_ms:.2} ms): {:.1}% off",
            100.0 * err
        );
        assert!(st.sustainable, "rho {rho}: {:?}", st.misses);
        // Throughput in the window is the arrival rate times the output length.
        let expected_tps = rate * 64.0;
        assert!(
            (st.output_throughput.value - expected_tps).abs() / expected_tps < 0.03,
            "rho {rho}: {} tok/s against {expected_tps}",
            st.output_throughput.value
        );
    }
}

#[test]
fn past_saturation_the_queue_is_not_stationary() {
    let alone = scenario(&[])
        .resolve("alone")
        .unwrap()
        .run()
        .unwrap()
        .summary;
    let service_s = (alone.mean_e2el_ms - alone.mean_queue_ms) / 1e3;
    let sets = vec![
        format!("workload.arrival.rate_per_s={}", 1.1 / service_s),
        "workload.num_requests=20000".to_string(),
    ];
    let s = scenario(&sets)
        .resolve("overload")
        .unwrap()
        .with_request_log(20_000)
        .run()
        .unwrap()
        .summary;
    let st = s.steady_state.unwrap();
    assert!(!st.queue.stationary, "{:?}", st.queue);
    assert!(!st.sustainable);
    // Throughput saturates at one request per service time.
    let cap_tps = 64.0 / service_s;
    assert!(
        (st.output_throughput.value - cap_tps).abs() / cap_tps < 0.02,
        "{} tok/s at saturation against {cap_tps}",
        st.output_throughput.value
    );
}

/// Planning ahead (docs/scenarios.md): an engine with asynchronous scheduling forms iteration
/// n+1 when n starts, so a request arriving at a random time in a busy replica waits for the
/// rest of the running iteration (the residual of a near-constant step S: S/2) and then the
/// whole planned one (S); a synchronous engine admits it after the residual alone. The mean
/// queueing delays differ by 1.5 S_async - 0.5 S_sync (the frontend time is the same in both).
#[test]
fn planning_ahead_adds_one_iteration_to_the_wait_of_an_arrival() {
    let run = |on: bool| {
        let sets = vec![
            "scheduler.max_num_seqs=256".to_string(),
            "workload.arrival.rate_per_s=10".to_string(),
            "workload.num_requests=4000".to_string(),
            format!("scheduler.async_scheduling={on}"),
        ];
        scenario(&sets)
            .resolve("planning ahead")
            .unwrap()
            .run()
            .unwrap()
            .summary
    };
    let (on, off) = (run(true), run(false));
    // At 10 req/s of 64-token outputs about five requests run at once: the replica is busy
    // nearly all the time, and the iteration is nearly the same decode step throughout.
    let expected_ms = 1.5 * on.mean_itl_ms - 0.5 * off.mean_itl_ms;
    let measured_ms = on.mean_queue_ms - off.mean_queue_ms;
    assert!(
        (measured_ms - expected_ms).abs() < 0.1 * expected_ms,
        "queueing {:.2} ms planning ahead vs {:.2} ms without: {measured_ms:.2} ms more, \
         expected {expected_ms:.2} (ITL {:.2} / {:.2} ms)",
        on.mean_queue_ms,
        off.mean_queue_ms,
        on.mean_itl_ms,
        off.mean_itl_ms
    );
    // The first token comes that much later too; the per-token time does not grow.
    assert!(on.mean_ttft_ms - off.mean_ttft_ms > 0.8 * measured_ms);
    assert!(on.mean_itl_ms <= off.mean_itl_ms);
}
