//! Speculative decoding against published speedups (issue #31, docs/validation.md
//! "Speculative decoding"): every row of calibration/reference/speculative-decoding.csv that
//! publishes both an acceptance length and a speedup for a configuration servesim can express
//! is simulated with and without speculation, given the row's published acceptance length,
//! and the predicted speedup is compared with the published one. Out of sample: nothing in
//! the step-time model or the speculation model was set from these rows.
//!
//!     cargo test --release --test speculative_validation -- --nocapture   # prints the table

use std::collections::HashMap;

use servesim::scenario::Scenario;

/// A row of the reference file, by column name.
fn rows() -> HashMap<String, HashMap<String, String>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/reference/speculative-decoding.csv"
    );
    let mut r = csv::Reader::from_path(path).expect("the reference file reads");
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            let row: HashMap<String, String> = headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect();
            (row["id"].clone(), row)
        })
        .collect()
}

/// How servesim expresses a row's deployment: model, GPU, TP, weight format, engine.
struct Setup {
    model: &'static str,
    gpu: &'static str,
    tp: u32,
    dtype: &'static str,
    engine: &'static str,
}

/// TensorRT-LLM blog1: DeepSeek-R1 on 8 B200, attention TP 8, NVFP4 weights (servesim's `fp4`
/// runs the NVFP4 checkpoint's formats: experts and dense MLPs NVFP4, attention and the MTP
/// layer BF16, as the blog's "Precision Strategy" does).
const TRT_DSR1: Setup = Setup {
    model: "deepseek-r1",
    gpu: "b200",
    tp: 8,
    dtype: "fp4",
    engine: "trtllm",
};

/// Mean TPOT, ms, of `batch` concurrent requests of `isl` / `osl` tokens with MTP drafting
/// `k` tokens at acceptance length `al` (k = 0: no speculation).
fn tpot_ms(s: &Setup, batch: u32, isl: u32, osl: u32, k: u32, al: f64) -> f64 {
    let spec = if k == 0 {
        String::new()
    } else {
        format!(
            "[speculative]\nmethod = \"mtp\"\nnum_speculative_tokens = {k}\nmean_acceptance_length = {al}\n"
        )
    };
    let text = format!(
        r#"seed = 1
[deployment]
model = "{}"
gpu = "{}"
tp = {}
dtype = "{}"
engine = "{}"
[workload]
num_requests = {}
max_concurrency = {batch}
[workload.arrival]
kind = "offline"
[workload.input]
kind = "fixed"
tokens = {isl}
[workload.output]
kind = "fixed"
tokens = {osl}
{spec}"#,
        s.model,
        s.gpu,
        s.tp,
        s.dtype,
        s.engine,
        batch * 3
    );
    let r = Scenario::parse(&text, "validation", &[])
        .and_then(|sc| sc.resolve("validation"))
        .and_then(|r| r.run())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    r.summary.mean_tpot_ms
}

fn num(row: &HashMap<String, String>, key: &str) -> f64 {
    row[key]
        .parse()
        .unwrap_or_else(|_| panic!("{}: {key} = '{}'", row["id"], row[key]))
}

#[test]
fn published_speedups_are_reproduced_given_their_acceptance() {
    let rows = rows();
    let s = &TRT_DSR1;
    let mut out = Vec::new();
    // Autoregressive MTP with K = 1..5 against no MTP, batch 1, ISL 1k / OSL 2k.
    let plain = tpot_ms(s, 1, 1024, 2048, 0, 1.0);
    for k in 1..=5 {
        let row = &rows[&format!("TRT-DSR1-MTP{k}")];
        assert_eq!(num(row, "num_speculative_tokens") as u32, k);
        let (isl, osl) = (num(row, "isl") as u32, num(row, "osl") as u32);
        let al = num(row, "acceptance_length");
        let predicted = plain / tpot_ms(s, num(row, "batch_size") as u32, isl, osl, k, al);
        out.push((row["id"].clone(), al, predicted, num(row, "speedup")));
    }
    // Relaxed acceptance (lossy) against strict MTP 3: same steps, more tokens per step.
    let strict = tpot_ms(
        s,
        1,
        1024,
        2048,
        3,
        num(&rows["TRT-DSR1-MTP3"], "acceptance_length"),
    );
    for id in [
        "TRT-DSR1-MTP3-RELAX-TOP1-D00",
        "TRT-DSR1-MTP3-RELAX-TOP10-D05",
        "TRT-DSR1-MTP3-RELAX-TOP10-D06",
        "TRT-DSR1-MTP3-RELAX-TOP15-D05",
    ] {
        let row = &rows[id];
        let al = num(row, "acceptance_length");
        let predicted = strict / tpot_ms(s, 1, 1024, 2048, 3, al);
        out.push((id.to_string(), al, predicted, num(row, "speedup")));
    }
    let mut errors: Vec<f64> = Vec::new();
    println!("| row | acceptance length | predicted speedup | published | error |");
    println!("|---|---|---|---|---|");
    for (id, al, p, m) in &out {
        let e = p / m - 1.0;
        errors.push(e.abs());
        println!("| {id} | {al:.2} | {p:.2} | {m:.2} | {:+.1}% |", e * 100.0);
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    println!(
        "median |error| {:.1}% over {} rows",
        median * 100.0,
        errors.len()
    );
    let misses: Vec<_> = out
        .iter()
        .filter(|(_, _, p, m)| (p / m - 1.0).abs() > 0.15)
        .collect();
    assert!(misses.is_empty(), "rows beyond 15%: {misses:?}");
    assert!(median < 0.10, "median error {median}");
}
