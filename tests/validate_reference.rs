//! Fidelity against the reference measurements of calibration/reference/: the embedded
//! serving-measurements.csv and the TensorRT-LLM 70B/405B rows of
//! trtllm-1.0-offline-70b-405b.csv, so a regression in the step-time model, the engine
//! profiles or the simulator fails here. The targets are issue #18's where the model reaches
//! them (offline median <= 7%, no offline row worse than 25%, mean TTFT <= 12%; the 70B/405B
//! rows' median <= 8% with a bias within 5%) and the previous issue's where it does not yet
//! (mean E2E and ITL <= 10%: issue #18 asks 7%, measured 7.6%; see docs/validation.md).
//!
//! Measured with `cargo run --release -- validate` when this test was last updated:
//!
//! ```text
//! load      metric                rows  median |err|        bias       worst  worst row
//! offline   output_tokens_per_s     20          2.8%       +1.3%       13.3%  T-H200-2048-128
//! online    output_tokens_per_s     10          0.0%       -2.6%       25.9%  V-A6
//! online    ttft_mean_ms            10          7.9%    +8704.7%    87024.4%  V-A6
//! online    e2e_mean_ms             10          7.6%     +199.5%     1949.1%  V-A6
//! online    itl_derived_ms          10          7.6%      +10.4%       57.7%  V-A6
//! ```
//!
//! and `validate --reference calibration/reference/trtllm-1.0-offline-70b-405b.csv`: 40 rows,
//! median 4.5%, bias +1.8%, worst 20.6% (T-405b-H100-TP8-20000-2000). The TensorRT-LLM 0.14
//! files (dense Llama and Mixtral MoE, an older release than the profile's) are checked too.
//!
//! The assertions are the targets; the comments give the figure measured against them.

use servesim::validate::{
    compare, parse_reference, read_reference, step_time_headroom, summarize, ErrorSummary,
    LoadKind, Metric, REFERENCE_CSV,
};

fn summaries() -> Vec<ErrorSummary> {
    let rows = parse_reference(REFERENCE_CSV, "serving-measurements.csv").unwrap();
    let comps = compare(&rows, None).unwrap();
    summarize(&comps)
}

fn find(s: &[ErrorSummary], kind: LoadKind, metric: Metric) -> &ErrorSummary {
    s.iter()
        .find(|e| e.kind == kind && e.metric == metric)
        .unwrap_or_else(|| panic!("no {kind:?} {metric:?} rows in {s:#?}"))
}

#[test]
fn reference_rows_parse_and_every_comparison_is_finite() {
    let rows = parse_reference(REFERENCE_CSV, "serving-measurements.csv").unwrap();
    let offline = rows.iter().filter(|r| r.kind == LoadKind::Offline).count();
    let online = rows.iter().filter(|r| r.kind == LoadKind::Online).count();
    assert!(offline >= 20, "{offline} offline rows");
    assert!(online >= 10, "{online} online rows");
    let measured: usize = rows.iter().map(|r| r.measured.len()).sum();
    let comps = compare(&rows, None).unwrap();
    assert_eq!(comps.len(), measured);
    for c in &comps {
        assert!(
            c.predicted.is_finite() && c.predicted > 0.0,
            "{} {:?}: predicted {}",
            c.id,
            c.metric,
            c.predicted
        );
        assert!(c.measured > 0.0, "{} {:?}", c.id, c.metric);
        let err = (c.predicted - c.measured) / c.measured;
        assert!((err - c.signed_error).abs() < 1e-9, "{c:?}");
    }
    // Deterministic: the same rows give the same predictions.
    let again = compare(&rows, None).unwrap();
    for (a, b) in comps.iter().zip(&again) {
        assert_eq!(a.predicted.to_bits(), b.predicted.to_bits(), "{}", a.id);
    }
}

#[test]
fn offline_throughput_fidelity() {
    let s = summaries();
    let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    assert!(e.rows >= 20, "{e:?}");
    // Measured 2.8%.
    assert!(e.median_abs_error <= 0.07, "{e:#?}");
    // Measured 13.3% (T-H200-2048-128).
    assert!(e.worst_abs_error <= 0.25, "{e:#?}");
    // No systematic bias either way (measured +1.3%).
    assert!(e.mean_signed_error.abs() <= 0.05, "{e:#?}");
}

#[test]
fn held_out_trtllm_70b_405b_rows_fidelity() {
    let rows = read_reference(std::path::Path::new(
        "calibration/reference/trtllm-1.0-offline-70b-405b.csv",
    ))
    .unwrap();
    let comps = compare(&rows, None).unwrap();
    let s = summarize(&comps);
    let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    assert_eq!(e.rows, 40, "{e:?}");
    // Measured 4.5%.
    assert!(e.median_abs_error <= 0.08, "{e:#?}");
    // Measured +1.8%.
    assert!(e.mean_signed_error.abs() <= 0.05, "{e:#?}");
    // Measured 20.6% (T-405b-H100-TP8-20000-2000).
    assert!(e.worst_abs_error <= 0.25, "{e:#?}");
}

/// The held-out TensorRT-LLM 0.14.0 rows (docs/validation.md, "Held out: an older release"):
/// every row simulates to a finite, positive, deterministic prediction, and the errors stay
/// where they were measured. These rows run on the 1.0 profile, and 1.0 runs 1-13% faster than
/// 0.14 by the two releases' own pages, so the bounds guard against regressions, not targets.
#[test]
fn held_out_trtllm_0_14_dense_and_moe_rows() {
    for (file, n, median, bias) in [
        // Measured: 130 rows, median 14.3%, bias +20.5%.
        (
            "calibration/reference/trtllm-0.14-offline-llama.csv",
            130,
            0.18,
            (0.10, 0.30),
        ),
        // Measured: 81 rows, median 12.7%, bias -14.8%.
        (
            "calibration/reference/trtllm-0.14-offline-mixtral.csv",
            81,
            0.16,
            (-0.25, -0.05),
        ),
    ] {
        let rows = read_reference(std::path::Path::new(file)).unwrap();
        assert_eq!(rows.len(), n, "{file}");
        let comps = compare(&rows, None).unwrap();
        let again = compare(&rows, None).unwrap();
        for (a, b) in comps.iter().zip(&again) {
            assert!(a.predicted.is_finite() && a.predicted > 0.0, "{file} {a:?}");
            assert_eq!(
                a.predicted.to_bits(),
                b.predicted.to_bits(),
                "{file} {}",
                a.id
            );
        }
        let s = summarize(&comps);
        let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
        assert_eq!(e.rows, n, "{file}");
        assert!(e.median_abs_error <= median, "{file}: {e:#?}");
        assert!(
            (bias.0..=bias.1).contains(&e.mean_signed_error),
            "{file}: {e:#?}"
        );
    }
}

#[test]
fn the_step_time_headroom_is_a_modest_slow_down() {
    let rows = parse_reference(REFERENCE_CSV, "serving-measurements.csv").unwrap();
    let comps = compare(&rows, None).unwrap();
    // Measured +7.8% at 90% coverage; a wider coverage never asks for less.
    let h90 = step_time_headroom(&comps, 0.9).unwrap();
    let h98 = step_time_headroom(&comps, 0.98).unwrap();
    assert!((0.0..=0.2).contains(&h90), "{h90}");
    assert!(h98 >= h90, "{h90} {h98}");
}

#[test]
fn online_latency_fidelity() {
    let s = summaries();
    let e2e = find(&s, LoadKind::Online, Metric::E2eMeanMs);
    assert!(e2e.rows >= 10, "{e2e:?}");
    // Measured 7.6% (issue #18 asks 7%).
    assert!(e2e.median_abs_error <= 0.10, "{e2e:#?}");
    let ttft = find(&s, LoadKind::Online, Metric::TtftMeanMs);
    assert!(ttft.rows >= 10, "{ttft:?}");
    // Measured 7.9%.
    assert!(ttft.median_abs_error <= 0.12, "{ttft:#?}");
    let itl = find(&s, LoadKind::Online, Metric::ItlDerivedMs);
    // Measured 7.6% (issue #18 asks 7%).
    assert!(itl.median_abs_error <= 0.10, "{itl:#?}");
    // Throughput of the online rows is the offered load when the engine keeps up (measured
    // 0.0%).
    let tput = find(&s, LoadKind::Online, Metric::OutputTokensPerS);
    assert!(tput.median_abs_error <= 0.02, "{tput:#?}");
}

#[test]
fn summaries_are_consistent_with_comparisons() {
    let rows = parse_reference(REFERENCE_CSV, "serving-measurements.csv").unwrap();
    let comps = compare(&rows, None).unwrap();
    for e in summarize(&comps) {
        let errs: Vec<f64> = comps
            .iter()
            .filter(|c| c.kind == e.kind && c.metric == e.metric)
            .map(|c| c.signed_error.abs())
            .collect();
        assert_eq!(errs.len(), e.rows);
        let worst = errs.iter().cloned().fold(0.0, f64::max);
        assert_eq!(worst, e.worst_abs_error, "{e:?}");
        assert!(e.median_abs_error <= e.worst_abs_error, "{e:?}");
        let below = errs.iter().filter(|&&x| x <= e.median_abs_error).count();
        assert!(2 * below >= e.rows, "{e:?}");
    }
}

/// The held-out MoE rows of issue #28 (docs/validation.md, "Held out: the MoE models of
/// 2026"): every one of the 176 rows (TP and attention-DP + EP deployments, NVFP4, MXFP4 and
/// FP8, B200/H200/H100) simulates to a finite, positive, deterministic prediction, and the
/// error stays where it was measured. Issue #28's target is a median of 15%; the model does
/// not reach it (measured 27.9%, bias +11.7%), so this is a regression guard, not the target.
#[test]
fn held_out_moe_rows_of_2026() {
    let files = [
        "calibration/reference/trtllm-post1.0-moe-offline.csv",
        "calibration/reference/trtllm-1.0-moe-offline.csv",
        "calibration/reference/trtllm-0.20-moe-offline.csv",
        "calibration/reference/trtllm-blog-moe-deepseek-r1.csv",
    ];
    let mut rows = Vec::new();
    for f in files {
        rows.extend(read_reference(std::path::Path::new(f)).unwrap());
    }
    assert_eq!(rows.len(), 176);
    assert!(rows.iter().any(|r| r.dp > 1 && r.ep > 1));
    let comps = compare(&rows, None).unwrap();
    let again = compare(&rows, None).unwrap();
    for (a, b) in comps.iter().zip(&again) {
        assert!(a.predicted.is_finite() && a.predicted > 0.0, "{a:?}");
        assert_eq!(a.predicted.to_bits(), b.predicted.to_bits(), "{}", a.id);
    }
    let s = summarize(&comps);
    let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    assert_eq!(e.rows, 176);
    // Measured: median 27.9%, bias +11.7%.
    assert!(e.median_abs_error <= 0.31, "{e:#?}");
    assert!((0.0..=0.25).contains(&e.mean_signed_error), "{e:#?}");
}
