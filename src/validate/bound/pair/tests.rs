use super::rows::pair_inputs;
use super::*;
use crate::validate::cv::{embedded_rows, saturation};
use crate::validate::{compare, parse_reference, Comparison};
use crate::validate::{LoadKind, Metric, ReferenceRow};

/// Round numbers whose check is worked out by hand below: one GPU, 1 TFLOP/s and 1 GB/s at
/// datasheet, 1e8 weight bytes (stream 0.1 s), 1e9 FLOP per token (1 ms a token; ridge at 100
/// tokens), a 100-token prompt, 1e5 KV bytes per token over 200 context tokens (0.02 s per
/// decoding request).
fn hand(step_low_s: f64, step_high_s: f64) -> PairInputs {
    PairInputs {
        low: PairRow::new("L", 1.0, step_low_s, 10.0),
        high: PairRow::new("H", 2.0, step_high_s, 10.0),
        prompt_tokens: 100.0,
        context_tokens: 200.0,
        kv_bytes_per_token_per_gpu: 1e5,
        weight_bytes_per_gpu: 1e8,
        flops_per_token_per_gpu: 1e9,
        peak_flops_per_s: 1e12,
        hbm_bandwidth_bytes_per_s: 1e9,
    }
}

#[test]
fn i1_i2_i3_by_hand_a_consistent_pair_is_not_flagged_an_inconsistent_one_is() {
    // Decoding requests 10 -> 20: A1 growth 10 x 200 x 1e5 / 1e9 = 0.2 s.
    // Prompts per step 1 x 0.2 = 0.2 -> 2 x 0.5 = 1.0 (Δq 0.8).
    // I1: allowed = (0.5 - 0.2 - 0.2) / 0.8 = 0.125 s.
    // I2 at b = 20: R(120) - R(20) = max(0.1, 0.12) - max(0.1, 0.02) = 0.02 s.
    let c = evaluate(&hand(0.2, 0.5));
    assert!((c.decode_growth_s - 0.2).abs() < 1e-12, "{c:?}");
    assert!((c.allowed_s - 0.125).abs() < 1e-12, "{c:?}");
    assert!((c.required_s - 0.02).abs() < 1e-12, "{c:?}");
    assert!(!c.inconsistent());
    assert_eq!(c.step_shortfall_s, 0.0);
    // The whole prompt's GEMMs take 0.1 s at peak, under what the rows allow: consistent at
    // any stream rate.
    assert_eq!(c.consistent_below_hbm_fraction, None);
    // A smaller step growth: 0.2 -> 0.402 (Δq 0.604): allowed = 0.002 / 0.604 = 3.3 ms < 20 ms.
    let c = evaluate(&hand(0.2, 0.402));
    assert!((c.allowed_s - 0.002 / 0.604).abs() < 1e-12, "{c:?}");
    assert!(c.inconsistent());
    // Its margin in the higher rate's step: (0.02 - 0.00331) x 0.604 = 0.010 s.
    assert!((c.step_shortfall_s - (0.02 - 0.002 / 0.604) * 0.604).abs() < 1e-12);
    // I3: consistent once the weights stream in at least 0.12 - 0.00331 s: η* = 0.1 / 0.11669.
    let eta = c.consistent_below_hbm_fraction.unwrap();
    assert!((eta - 0.1 / (0.12 - 0.002 / 0.604)).abs() < 1e-12, "{eta}");
    // Scaling the bandwidth by η* in the check makes it (just) consistent.
    let slower = PairInputs {
        weight_bytes_per_gpu: 1e8 / eta,
        ..hand(0.2, 0.402)
    };
    let s = evaluate(&slower);
    assert!((s.required_s - s.allowed_s).abs() < 1e-9, "{s:?}");
    // A step that shrinks although prompts grow: no stream rate reconciles it.
    let c = evaluate(&hand(0.2, 0.3));
    assert!(c.allowed_s < 0.0 && c.inconsistent());
    assert_eq!(c.consistent_below_hbm_fraction, None);
}

/// Online Llama-2-7B TP1 H100 rows ([`rows_of`]).
fn rows_7b(gpu: &str, figures: &[(&str, f64, f64, f64)]) -> Vec<ReferenceRow> {
    rows_of("llama-2-7b", 1, gpu, figures)
}

/// Online vLLM 0.15.1 rows of `model` at TP `tp` on `gpu` (a profile name or path), each
/// `(id, rate, E2E mean ms, TTFT mean ms)`, kept up with (throughput as offered), 40 s of
/// arrivals of 600 + 250 tokens with a 100-token shared prefix.
fn rows_of(
    model: &str,
    tp: u32,
    gpu: &str,
    figures: &[(&str, f64, f64, f64)],
) -> Vec<ReferenceRow> {
    let mut text = String::from(
        "id,kind,engine,engine_version,model,dtype,gpu,tp,input_len,output_len,prefix_len,\
         num_requests,rate_rps,max_num_seqs,output_tokens_per_s,ttft_mean_ms,e2e_mean_ms\n",
    );
    for (id, rate, e2e, ttft) in figures {
        text.push_str(&format!(
            "{id},online,vllm,0.15.1,{model},fp16,{gpu},{tp},600,250,100,{},{rate},128,{},{ttft},\
             {e2e}\n",
            (rate * 40.0) as u64,
            rate * 250.0
        ));
    }
    parse_reference(&text, "x.csv").unwrap()
}

#[test]
fn saturation_counts_the_rows_of_an_inconsistent_pair_and_notes_the_pair() {
    // Steps (E2E - TTFT) / 249: 9.0 ms at 5 req/s, 9.05 ms at 10: the step grows less than
    // the 11 added decoding requests' KV reads (1.1 ms), so I1 allows a prompt nothing.
    let rows = rows_7b(
        "h100-sxm",
        &[("LO", 5.0, 2291.0, 50.0), ("HI", 10.0, 2303.45, 50.0)],
    );
    let checks = pair_checks(&rows).unwrap();
    assert_eq!(checks.len(), 1);
    assert!(checks[0].inconsistent(), "{:?}", checks[0]);
    assert_eq!(
        (
            checks[0].inputs.low.id.as_str(),
            checks[0].inputs.high.id.as_str()
        ),
        ("LO", "HI")
    );
    let predicted_saturated = |id: &str| Comparison {
        id: id.into(),
        kind: LoadKind::Online,
        metric: Metric::E2eMeanMs,
        measured: 1.0,
        predicted: 2.0,
        signed_error: -0.5,
        group: String::new(),
        keeps_up: Some(false),
    };
    let comps = vec![predicted_saturated("LO"), predicted_saturated("HI")];
    // The check is not a physical bound: both rows stay counted, each noted with the pair.
    let sat = saturation(&rows, &comps, &[], &checks);
    assert_eq!(sat.counted.len(), 2, "{sat:?}");
    assert_eq!(sat.counted_with_inconsistent_pair.len(), 2);
    assert!(
        sat.describe().contains("not a physical bound"),
        "{}",
        sat.describe()
    );
    // Without the check both are counted and nothing is noted; a consistent pair notes nothing.
    let plain = saturation(&rows, &comps, &[], &[]);
    assert_eq!(plain.counted.len(), 2);
    assert!(plain.counted_with_inconsistent_pair.is_empty());
    let fine = rows_7b(
        "h100-sxm",
        &[("LO", 5.0, 2291.0, 50.0), ("HI", 10.0, 2800.0, 50.0)],
    );
    let checks = pair_checks(&fine).unwrap();
    assert!(!checks[0].inconsistent(), "{:?}", checks[0]);
    let sat = saturation(&fine, &comps, &[], &checks);
    assert_eq!(sat.counted.len(), 2);
    assert!(sat.counted_with_inconsistent_pair.is_empty());
}

/// The pair's inputs under scripts/mixed-step-kernel-rows.py's conventions (derived-ITL
/// column as the step, rate x E2E as the batch, the whole input plus O / 2 as the context,
/// every request's prompt less the system prompt computed: the script predates the rows'
/// `distinct_prompts` and prices the prompts as if none repeated).
fn script_inputs(rows: &[ReferenceRow], lo: &str, hi: &str) -> PairInputs {
    let get = |id: &str| rows.iter().find(|r| r.id == id).unwrap();
    let figure =
        |r: &ReferenceRow, m: Metric| r.measured.iter().find(|(x, _)| *x == m).unwrap().1 / 1e3;
    let side = |r: &ReferenceRow| {
        let rate = r.rate_rps.unwrap();
        let e2e = figure(r, Metric::E2eMeanMs);
        // The script rounds the batch for its GEMM floor: 0.02 ms at most, within `tol`.
        PairRow::new(&r.id, rate, figure(r, Metric::ItlDerivedMs), e2e)
    };
    let (a, b) = (get(lo), get(hi));
    let mut x = pair_inputs(a, side(a), side(b)).unwrap().unwrap();
    x.context_tokens = a.input_len as f64 + a.output_len as f64 / 2.0;
    x.prompt_tokens = (a.input_len - a.prefix_len) as f64;
    x
}

#[test]
fn the_script_figures_are_reproduced_under_its_conventions() {
    // docs/validation.md, "Where the out-of-sample errors come from": what the rows allow a
    // prompt to add, and the mixed step's GEMMs at 989 TFLOP/s less the decode step's weights
    // at 3.35 TB/s (I1, I2), ms.
    let rows = embedded_rows().unwrap();
    for (lo, hi, allowed, required) in [
        ("V-A7", "V-A8", 11.7, 8.5),
        ("V-A5", "V-A6", 7.4, 10.1),
        ("I-CL34-C5", "I-CL34-C10", 3.2, 7.9),
        ("I-CL34-G8", "I-CL34-G20", 4.8, 8.9),
        ("V-A1", "V-A2", 7.6, 2.9),
        ("V-A9", "V-A10", 8.7, 3.4),
    ] {
        let c = evaluate(&script_inputs(&rows, lo, hi));
        let tol = 0.08;
        assert!(
            (1e3 * c.allowed_s - allowed).abs() < tol,
            "{lo}->{hi}: {c:?}"
        );
        assert!(
            (1e3 * c.required_s - required).abs() < tol,
            "{lo}->{hi}: {c:?}"
        );
    }
}

/// calibration/gpus/h100-sxm.toml with its GEMMs, weight streams and decode attention at the
/// datasheet rates (no fixed times, no ramp), written to `dir`; its path.
fn datasheet_h100(dir: &std::path::Path) -> String {
    let text = include_str!("../../../../calibration/gpus/h100-sxm.toml");
    let mut out = String::new();
    let mut section = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            section = t.split(']').next().unwrap_or("").to_string() + "]";
        }
        let key = t.split('=').next().unwrap_or("").trim();
        let set = match (section.as_str(), key) {
            ("[memory]", "stream_bandwidth_bytes_per_s") => Some("3.35e12"),
            ("[memory]", "latency_s") => Some("0.0"),
            ("[gemm]", "fixed_s") => Some("0.0"),
            ("[gemm]", "bf16_flops_per_s") => Some("989e12"),
            ("[gemm]", "half_rate_tokens") => Some("1e-3"),
            ("[attention]", "fixed_s") => Some("0.0"),
            ("[attention]", "decode_bandwidth_fraction") => Some("1.0"),
            _ => None,
        };
        match set {
            Some(v) => out.push_str(&format!("{key} = {v}\n")),
            None => out.push_str(&format!("{line}\n")),
        }
    }
    let path = dir.join("h100-datasheet.toml");
    std::fs::write(&path, out).unwrap();
    path.to_string_lossy().into_owned()
}

/// Simulates `model` at TP `tp` at `rates` on `gpu` (vLLM 0.15.1's committed host costs),
/// takes the simulated latencies as the measurements, and returns the pairs' checks.
fn simulated_checks(model: &str, tp: u32, gpu: &str, rates: &[f64]) -> Vec<PairCheck> {
    let ids: Vec<String> = rates.iter().map(|r| format!("R{r}")).collect();
    let probe: Vec<(&str, f64, f64, f64)> = ids
        .iter()
        .zip(rates)
        .map(|(id, &r)| (id.as_str(), r, 1000.0, 50.0))
        .collect();
    let comps = compare(&rows_of(model, tp, gpu, &probe), None).unwrap();
    assert!(comps.iter().all(|c| c.keeps_up == Some(true)), "{comps:?}");
    let predicted = |id: &str, m: Metric| {
        comps
            .iter()
            .find(|c| c.id == id && c.metric == m)
            .unwrap_or_else(|| panic!("{id} {m:?}"))
            .predicted
    };
    let simulated: Vec<(&str, f64, f64, f64)> = probe
        .iter()
        .map(|&(id, r, _, _)| {
            let e2e = predicted(id, Metric::E2eMeanMs);
            (id, r, e2e, predicted(id, Metric::TtftMeanMs))
        })
        .collect();
    pair_checks(&rows_of(model, tp, gpu, &simulated)).unwrap()
}

#[test]
fn a_pair_simulated_on_a_datasheet_gpu_is_consistent() {
    // The check is below the truth where its model holds: simulate rates of one
    // configuration on an H100 whose GEMMs, weight streams and decode attention run at the
    // datasheet rates, take the simulated latencies as the measurements, and no pair may be
    // flagged (I1's allowed at least I2's required). Llama-2-7B TP1 and Llama-2-70B TP4, the
    // latter at V-A5 / V-A6's rates.
    let dir = tempfile::tempdir().unwrap();
    let datasheet = datasheet_h100(dir.path());
    // The committed profile too (weights streamed at 3.0 of 3.35 TB/s, GEMMs at 801 TFLOP/s).
    for (model, tp, rates, gpu) in [
        ("llama-2-7b", 1, &[5.0, 10.0, 20.0][..], datasheet.as_str()),
        ("llama-2-70b", 4, &[8.0, 20.0][..], datasheet.as_str()),
        ("llama-2-70b", 4, &[5.0, 10.0][..], "h100-sxm"),
    ] {
        let checks = simulated_checks(model, tp, gpu, rates);
        assert_eq!(checks.len(), rates.len() * (rates.len() - 1) / 2, "{model}");
        for c in &checks {
            assert!(!c.inconsistent(), "{model}: {}: {c:?}", c.describe());
        }
    }
}
