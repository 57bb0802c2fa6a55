//! Fidelity against the reference measurements of calibration/reference/, in sample and out of
//! sample (docs/validation.md).
//!
//! The out-of-sample figures are grouped cross-validation: each configuration (engine release,
//! model, TP, GPU) of the fit set predicted with its engine's host costs refitted without it,
//! held-out files by the committed costs. The full cross-validation is `servesim validate`
//! (one refit per configuration, minutes); it writes `out-of-sample.csv`, committed as
//! calibration/validation/out-of-sample.csv, from which docs/validation.md's tables and the
//! planner's validated headroom are computed. These tests keep that file honest at a small
//! cost: its in-sample column must be this model's predictions (any change to the model or
//! the committed costs fails here until the file is regenerated), one configuration is
//! cross-validated again and must reproduce the file's out-of-sample predictions, and the
//! document's generated block must be the report of the file.
//!
//! The assertions on the figures are regression guards around what was measured (given in the
//! comments), named in-sample or out-of-sample; issue #26's targets that the out-of-sample
//! figures do not reach are said so in docs/validation.md, not asserted as met.

use servesim::validate::cv::{self, committed, cross_validate, embedded_rows, fit_rows, Headline};
use servesim::validate::markdown::{
    generated_block, generated_block_at, markdown, other_files_markdown, OTHER_BEGIN_MARKER,
    OTHER_REFERENCE_FILES,
};
use servesim::validate::{
    compare, read_reference, step_time_headroom, summarize, Comparison, ErrorSummary, LoadKind,
    Metric,
};

fn find(s: &[ErrorSummary], kind: LoadKind, metric: Metric) -> &ErrorSummary {
    s.iter()
        .find(|e| e.kind == kind && e.metric == metric)
        .unwrap_or_else(|| panic!("no {kind:?} {metric:?} rows in {s:#?}"))
}

/// The out-of-sample median |error| of a headline family in the committed residuals.
fn committed_median(h: Headline) -> f64 {
    let c = committed().unwrap();
    let idx = h.pick(&c.out_of_sample);
    cv::stats(&c.out_of_sample, &idx).unwrap().median_abs
}

fn same_prediction(a: &Comparison, b: &Comparison) -> bool {
    a.id == b.id
        && a.metric == b.metric
        && a.group == b.group
        && (a.predicted - b.predicted).abs() <= 1e-9 * b.predicted.abs().max(1.0)
}

#[test]
fn reference_rows_parse_and_every_comparison_is_finite() {
    let rows = embedded_rows().unwrap();
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
fn the_committed_residuals_hold_this_models_in_sample_predictions() {
    // Regenerate with `servesim validate --out DIR` and copy DIR/out-of-sample.csv to
    // calibration/validation/out-of-sample.csv (scripts/update-validation.sh).
    let live = compare(&embedded_rows().unwrap(), None).unwrap();
    let file = committed().unwrap();
    assert_eq!(file.in_sample.len(), live.len(), "rows or metrics changed");
    for (f, l) in file.in_sample.iter().zip(&live) {
        assert!(
            same_prediction(f, l),
            "stale calibration/validation/out-of-sample.csv: {} {:?} committed {}, now {} \
             (run scripts/update-validation.sh)",
            l.id,
            l.metric,
            f.predicted,
            l.predicted
        );
    }
}

#[test]
fn one_configuration_cross_validated_again_reproduces_the_committed_file() {
    // The TensorRT-LLM 1.0 8B H200 rows, predicted with host costs refitted on the H100 rows
    // only (a fit on 10 offline rows: seconds).
    let group = "trtllm 1.0 llama-3.1-8b TP1 h200-sxm".to_string();
    let rows = embedded_rows().unwrap();
    let again = cross_validate(
        &rows,
        &fit_rows().unwrap(),
        Some(std::slice::from_ref(&group)),
    )
    .unwrap();
    assert_eq!(again.folds.len(), 1);
    assert!(again.folds[0].refitted && again.folds[0].fitted_rows == 10);
    let file = committed().unwrap();
    let mine: Vec<&Comparison> = file
        .out_of_sample
        .iter()
        .filter(|c| c.group == group)
        .collect();
    assert_eq!(mine.len(), again.out_of_sample.len());
    for (f, a) in mine.iter().zip(&again.out_of_sample) {
        assert!(
            same_prediction(f, a),
            "{} {:?}: committed {}, again {}",
            a.id,
            a.metric,
            f.predicted,
            a.predicted
        );
    }
    // Out of sample differs from in sample: the refit did not see these rows.
    assert!(again
        .in_sample
        .iter()
        .zip(&again.out_of_sample)
        .any(|(i, o)| i.predicted != o.predicted));
}

#[test]
fn docs_validation_md_carries_the_report_of_the_committed_cross_validation() {
    let doc = std::fs::read_to_string("docs/validation.md").unwrap();
    let block = generated_block(&doc).expect("docs/validation.md has no generated block");
    let rows = embedded_rows().unwrap();
    let want = markdown(&rows, &fit_rows().unwrap(), &committed().unwrap(), 0.9).unwrap();
    assert_eq!(
        block.trim(),
        want.trim(),
        "docs/validation.md's generated block differs from `servesim validate --markdown` \
         (run scripts/update-validation.sh)"
    );
}

#[test]
fn docs_validation_md_carries_the_other_releases_table() {
    let doc = std::fs::read_to_string("docs/validation.md").unwrap();
    let block = generated_block_at(&doc, OTHER_BEGIN_MARKER)
        .expect("docs/validation.md has no other-releases block");
    let files: Vec<_> = OTHER_REFERENCE_FILES
        .iter()
        .map(|f| {
            let rows = read_reference(std::path::Path::new(f)).unwrap();
            let comps = compare(&rows, None).unwrap();
            (*f, rows, comps)
        })
        .collect();
    assert_eq!(
        block.trim(),
        other_files_markdown(&files).unwrap().trim(),
        "docs/validation.md's other-releases table differs from `servesim validate --markdown \
         --other-releases` (run scripts/update-validation.sh)"
    );
}

#[test]
fn out_of_sample_regression_guards() {
    // Measured (committed cross-validation, `servesim validate`, session 13): offline throughput
    // 3.9%, TTFT 12.6%, E2E 5.5%, ITL 7.6% (docs/validation.md). Issue #26 asks 8/12/8/8%: the
    // offline, E2E and ITL lines are its targets; TTFT is a regression guard around the
    // measured figure.
    assert!(committed_median(Headline::OfflineThroughput) <= 0.08);
    assert!(committed_median(Headline::Ttft) <= 0.14);
    assert!(committed_median(Headline::E2e) <= 0.08);
    assert!(committed_median(Headline::PerToken) <= 0.08);
}

#[test]
fn in_sample_regression_guards() {
    // In sample: the committed host costs were fitted on these rows, so these figures guard
    // against regressions and say nothing about carrying over (docs/validation.md).
    let rows = embedded_rows().unwrap();
    let comps = compare(&rows, None).unwrap();
    let s = summarize(&comps);
    let off = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    // Measured 4.0% over the 60 TensorRT-LLM 1.0 rows (20 fitted, 40 held out), worst 20.3%.
    assert!(off.median_abs_error <= 0.07, "{off:#?}");
    assert!(off.worst_abs_error <= 0.25, "{off:#?}");
    assert!(off.mean_signed_error.abs() <= 0.05, "{off:#?}");
    // Throughput of the open-loop online rows is the offered load when the engine keeps up,
    // except where the model itself is near saturation (its mean E2E over three times the
    // measured one; no row since session 13). The campaign's arrivals are a Poisson process
    // (`burstiness` 1): a run of 3,000-12,000 simulated arrivals spans its nominal duration
    // within about 1 / sqrt(3000) = 1.8%, where inference-perf scales its exponential gaps to
    // the stage's duration exactly, so the offered rates agree within 2.2% (measured).
    let near_saturation = |id: &str| {
        comps
            .iter()
            .any(|c| c.id == id && c.metric == Metric::E2eMeanMs && c.predicted > 3.0 * c.measured)
    };
    let tput: Vec<(&str, f64)> = comps
        .iter()
        .filter(|c| c.kind == LoadKind::Online && c.metric == Metric::OutputTokensPerS)
        .filter(|c| c.keeps_up == Some(true) && !near_saturation(&c.id))
        .map(|c| (c.id.as_str(), c.signed_error.abs()))
        .collect();
    assert!(
        tput.len() >= 20 && tput.iter().all(|&(_, e)| e <= 0.03),
        "{tput:?}"
    );
}

#[test]
fn held_out_trtllm_70b_405b_rows_fidelity() {
    // Held out: in no fit. Measured 4.5% median, +1.4% bias, worst 20.3%
    // (T-405b-H100-TP8-20000-2000) before this revision's host costs; see the committed report.
    let rows = read_reference(std::path::Path::new(
        "calibration/reference/trtllm-1.0-offline-70b-405b.csv",
    ))
    .unwrap();
    let comps = compare(&rows, None).unwrap();
    let s = summarize(&comps);
    let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    assert_eq!(e.rows, 40, "{e:?}");
    assert!(e.median_abs_error <= 0.08, "{e:#?}");
    assert!(e.mean_signed_error.abs() <= 0.05, "{e:#?}");
    assert!(e.worst_abs_error <= 0.25, "{e:#?}");
}

/// The held-out vLLM 0.15.1 CodeLlama-34B TP2 and Mixtral-8x7B TP2 rows (the V-A rows' campaign,
/// calibration/reference/README.md): embedded as held-out files (in no fit), each row's derived
/// per-token time is its own (E2E - TTFT) / (counted tokens - 1), and the per-token errors stay
/// where they were measured (held out: CodeLlama median 20.8%, Mixtral 31.1%, both too slow;
/// docs/validation.md, Known gaps), a regression guard, not a target.
#[test]
fn held_out_inference_sim_vllm_rows() {
    let fit = fit_rows().unwrap();
    for (file, group, median) in [
        (
            "calibration/reference/inference-sim-vllm-0.15.1-codellama-34b-tp2-h100.csv",
            "vllm 0.15.1 codellama-34b TP2 h100-sxm",
            // Measured (session 13, the rows' repeated prompts and Poisson arrivals): ITL 1.1%,
            // E2E 1.1%, TTFT 1.2% median |error|; 17.3 / 17.5 / 26.4% before.
            [0.03, 0.03, 0.04],
        ),
        (
            "calibration/reference/inference-sim-vllm-0.15.1-mixtral-8x7b-tp2-h100.csv",
            "vllm 0.15.1 mixtral-8x7b TP2 h100-sxm",
            // Measured: ITL 1.5%, E2E 1.3%, TTFT 8.9% (2.8 / 2.5 / 15.7% before).
            [0.04, 0.04, 0.12],
        ),
    ] {
        assert!(cv::HELD_OUT_FILES.iter().any(|(p, _)| *p == file), "{file}");
        let rows = read_reference(std::path::Path::new(file)).unwrap();
        assert_eq!(rows.len(), 5, "{file}");
        assert!(
            !fit.iter().any(|r| r.group() == group),
            "{group} is in a fit"
        );
        for r in &rows {
            assert_eq!(r.group(), group);
            let get = |m: Metric| r.measured.iter().find(|(k, _)| *k == m).unwrap().1;
            let counted = r.output_len_counted.unwrap();
            let itl = (get(Metric::E2eMeanMs) - get(Metric::TtftMeanMs)) / (counted - 1.0);
            assert!(
                (itl - get(Metric::ItlDerivedMs)).abs() < 0.01,
                "{} {itl}",
                r.id
            );
        }
        let comps = compare(&rows, None).unwrap();
        let s = summarize(&comps);
        let metrics = [Metric::ItlDerivedMs, Metric::E2eMeanMs, Metric::TtftMeanMs];
        for (m, bound) in metrics.into_iter().zip(median) {
            let e = find(&s, LoadKind::Online, m);
            assert_eq!(e.rows, 5, "{file}");
            assert!(e.median_abs_error <= bound, "{file}: {e:#?}");
        }
    }
}

/// The held-out TensorRT-LLM 0.14.0 rows (docs/validation.md, "Held out: an older release"):
/// every row simulates to a finite, positive, deterministic prediction, and the errors stay
/// where they were measured. These rows run on the 1.0 profile, and 1.0 runs 1-13% faster than
/// 0.14 by the two releases' own pages, so the bounds guard against regressions, not targets.
#[test]
fn held_out_trtllm_0_14_dense_and_moe_rows() {
    for (file, n, median, bias) in [
        (
            "calibration/reference/trtllm-0.14-offline-llama.csv",
            130,
            0.18,
            (0.10, 0.30),
        ),
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
fn the_step_time_headroom_comes_from_out_of_sample_errors() {
    let c = committed().unwrap();
    let oos = step_time_headroom(&c.out_of_sample, 0.9).unwrap();
    let ins = step_time_headroom(&c.in_sample, 0.9).unwrap();
    // The planner's validated headroom is the out-of-sample one, floored at zero.
    assert_eq!(
        cv::committed_step_time_headroom(0.9).unwrap(),
        Some(oos.max(0.0))
    );
    // A wider coverage never asks for less; out of sample asks at least as much here.
    let h98 = step_time_headroom(&c.out_of_sample, 0.98).unwrap();
    assert!(h98 >= oos, "{oos} {h98}");
    assert!(oos >= ins - 1e-12, "out of sample {oos}, in sample {ins}");
    assert!((0.0..=0.5).contains(&oos), "{oos}");
}

#[test]
fn summaries_are_consistent_with_comparisons() {
    let rows = embedded_rows().unwrap();
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
/// not reach it (measured 23.9%, mean signed error +15.6%, out of sample: no parameter is set
/// from these rows), so this is a regression guard, not the target. TensorRT-LLM runs the
/// CUTLASS MoE class (`[moe.cutlass]` of the GPU profiles), which the Triton kernel rows of
/// the fused-MoE fit do not move (docs/calibration.md, "Fused MoE: one curve per kernel class").
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
    // The v1.0 page's multi-GPU MoE columns ran attention data parallelism, experts split
    // tensor-parallel (calibration/reference/README.md).
    let dp_without_ep = rows.iter().filter(|r| r.dp > 1 && r.ep == 1).count();
    assert_eq!(dp_without_ep, 70);
    let comps = compare(&rows, None).unwrap();
    let again = compare(&rows, None).unwrap();
    for (a, b) in comps.iter().zip(&again) {
        assert!(a.predicted.is_finite() && a.predicted > 0.0, "{a:?}");
        assert_eq!(a.predicted.to_bits(), b.predicted.to_bits(), "{}", a.id);
    }
    let s = summarize(&comps);
    let e = find(&s, LoadKind::Offline, Metric::OutputTokensPerS);
    assert_eq!(e.rows, 176);
    // Measured: median 23.9%, mean signed error +15.6%.
    assert!(e.median_abs_error <= 0.27, "{e:#?}");
    assert!((0.0..=0.23).contains(&e.mean_signed_error), "{e:#?}");
}
