//! Speculative decoding as a new user meets it on the command line: bad inputs exit 2 naming
//! the key and the reason, and every command that reports KV capacity or step times takes
//! `--speculative-config`.

mod common;

use common::servesim;

/// Exit code 2, one `error:` line containing every fragment of `wanted`, no panic.
fn assert_error_names(args: &[&str], wanted: &[&str]) {
    let (code, _, err) = servesim(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.starts_with("error:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in wanted {
        assert!(err.contains(w), "{args:?}: expected {w:?} in: {err}");
    }
}

const SMALL: [&str; 4] = ["--num-prompts", "8", "--output-len", "16"];

#[test]
fn mtp_needs_the_targets_mtp_layers() {
    // Llama-3.1-8B ships no MTP layer: vLLM would fail to load one.
    let spec = r#"{"method":"mtp","num_speculative_tokens":2}"#;
    let args = [&["bench", "--speculative-config", spec][..], &SMALL[..]].concat();
    assert_error_names(
        &args,
        &[
            "speculative.method",
            "num_nextn_predict_layers",
            "llama-3.1-8b",
        ],
    );
    // DeepSeek-V3's one layer drafts any K (reused), as vLLM runs it.
    let spec = r#"{"method":"mtp","num_speculative_tokens":3}"#;
    let ds = [
        "bench",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--tensor-parallel-size",
        "8",
        "--dtype",
        "fp8",
        "--speculative-config",
        spec,
    ];
    let (code, _, err) = servesim(&[&ds[..], &SMALL[..]].concat());
    assert_eq!(code, 0, "{err}");
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = servesim(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn estimate_takes_the_speculative_config_and_reserves_the_draft() {
    let plain = json(&["estimate", "--decode-batch", "32", "--format", "json"]);
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3}"#;
    let with = json(&[
        "estimate",
        "--decode-batch",
        "32",
        "--speculative-config",
        spec,
        "--format",
        "json",
    ]);
    assert!(plain.get("speculative").is_none());
    let kv = |v: &serde_json::Value| v["memory"]["kv_tokens"].as_u64().unwrap();
    // The EAGLE-3 head's weights and KV come out of the pool (vLLM), as `bench` plans it.
    assert!(kv(&with) < kv(&plain), "{} vs {}", kv(&with), kv(&plain));
    let s = &with["speculative"];
    let f = |k: &str| s[k].as_f64().unwrap();
    assert!(f("draft_s") > 0.0 && f("verify_s") > f("plain_s"));
    let gain = f("plain_s") * f("mean_acceptance_length") / (f("draft_s") + f("verify_s"));
    assert!((f("speedup") / gain - 1.0).abs() < 1e-12);
    assert_eq!(s["kv_slots_per_seq"].as_u64(), Some(6));
    // The plain figures are the same with and without the flag.
    assert_eq!(plain["step"], with["step"]);
}

#[test]
fn one_token_outputs_have_no_verify_step_and_no_speedup() {
    // The first token comes from the prefill: no decode step, so nothing speculated.
    let spec = r#"{"method":"eagle3","num_speculative_tokens":8,"acceptance_rate":1.0}"#;
    let v = json(&[
        "bench",
        "--num-prompts",
        "8",
        "--output-len",
        "1",
        "--speculative-config",
        spec,
        "--format",
        "json",
    ]);
    assert_eq!(v["spec_decode_step_share"].as_f64(), Some(0.0));
    for k in [
        "spec_decode_speedup",
        "spec_decode_mean_acceptance_length",
        "spec_decode_draft_share",
    ] {
        assert!(v.get(k).is_none(), "{k} reported without a verify step");
    }
}

#[test]
fn a_batch_limit_reports_the_share_of_steps_that_speculated() {
    let run = |limit: u32| {
        let spec = format!(
            r#"{{"method":"eagle3","num_speculative_tokens":3,"disable_by_batch_size":{limit}}}"#
        );
        json(&[
            "bench",
            "--num-prompts",
            "200",
            "--request-rate",
            "50",
            "--output-len",
            "64",
            "--speculative-config",
            &spec,
            "--format",
            "json",
        ])
    };
    let part = run(16);
    let share = part["spec_decode_step_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");
    // Over verify steps only: the input's expectation, 1 + 0.72 + 0.72^2 + 0.72^3.
    let l = part["spec_decode_mean_acceptance_length"].as_f64().unwrap();
    assert!((l - 2.611648).abs() < 1e-9, "{l}");
    assert!(part["spec_decode_speedup"].as_f64().unwrap() > 1.0);
    // No limit: every decode step speculated, and the share (1) is not reported.
    let all = run(100_000);
    assert!(all.get("spec_decode_step_share").is_none());
}

#[test]
fn the_run_table_shows_speculation() {
    let spec = r#"{"method":"eagle3","num_speculative_tokens":3}"#;
    let (code, out, err) =
        servesim(&[&["bench", "--speculative-config", spec][..], &SMALL[..]].concat());
    assert_eq!(code, 0, "{err}");
    for w in [
        "eagle3 K3",
        "Mean acceptance length (tok/verify step):",
        "Draft / verify share of a step:",
        "Speculative KV slots per sequence:",
    ] {
        assert!(out.contains(w), "{w} missing: {out}");
    }
    let (_, plain, _) = servesim(&[&["bench"][..], &SMALL[..]].concat());
    assert!(!plain.contains("Speculative"), "{plain}");
}

#[test]
fn speculative_input_errors_say_what_is_accepted() {
    let bench = |spec: &str| {
        [&["bench", "--speculative-config", spec][..], &SMALL[..]]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let cases: [(&str, &[&str]); 5] = [
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":"high"}"#,
            &[
                "speculative.acceptance_rate",
                "a number in [0, 1]",
                "a list",
            ],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":-0.2}"#,
            &["speculative.acceptance_rate", "[0, 1]"],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":3,"acceptance_rate":0.7,"mean_acceptance_length":2.5}"#,
            &["give one of"],
        ),
        (
            r#"{"method":"draft_model","model":"llama-3.1-405b","num_speculative_tokens":3,"acceptance_rate":0.7}"#,
            &[
                "speculative.model",
                "llama-3.1-405b",
                "fits without speculation",
            ],
        ),
        (
            r#"{"method":"eagle3","num_speculative_tokens":-1}"#,
            &["speculative.num_speculative_tokens", "0..=16"],
        ),
    ];
    for (spec, wanted) in cases {
        let args = bench(spec);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_error_names(&a, wanted);
    }
}
