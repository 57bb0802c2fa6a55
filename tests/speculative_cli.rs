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
