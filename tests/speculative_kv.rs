//! Speculative decoding's memory as the engines reserve it (issue #31): the draft's weights and
//! KV come out of the target's pool (vLLM, TensorRT-LLM) or out of a fixed set-aside (SGLang),
//! each decoding sequence holds its draft and lookahead slots, and the engines' limits are
//! profile settings a scenario overrides. Each test fails if the reservation it checks is
//! removed.
//!
//!     cargo test --release --test speculative_kv

mod common;

use common::{fixed_offline_workload, servesim};
use servesim::roofline::StepTimeModel;
use servesim::scenario::{Resolved, Scenario};
use servesim::step_time::BatchShape;

/// Llama-3.1-8B BF16 on one H100 with `engine`, offline, 256 / 256 tokens, and `extra`
/// appended (scheduler keys, a `[speculative]` table).
fn scenario(engine: &str, extra: &str) -> Resolved {
    let text = format!(
        r#"seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
dtype = "bf16"
engine = "{engine}"
{workload}{extra}"#,
        workload = fixed_offline_workload("num_requests = 100", 256, 256)
    );
    Scenario::parse(&text, "t", &[])
        .unwrap()
        .resolve("t")
        .unwrap()
}

fn eagle3(k: u32) -> String {
    format!("[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = {k}\n")
}

/// vLLM loads the EAGLE-3 head before profiling and keeps its layer's KV in every block: the
/// target's KV capacity is what the budget less the head's weights holds at 33 layers' KV per
/// token instead of 32. The head's size is computed here from Llama-3.1-8B's shapes
/// (config.json: hidden 4096, 32 heads, 8 KV heads of 128, intermediate 14336) and EAGLE-3's
/// draft vocabulary of 32,000, not from servesim's code.
#[test]
fn vllm_takes_the_heads_weights_and_kv_from_the_targets_pool() {
    let plain = scenario("vllm", "").memory;
    let spec = scenario("vllm", &eagle3(3)).memory;
    let h = 4096.0;
    let layer = 2.0 * h * h + 2.0 * h * 1024.0 + 3.0 * h * 14336.0;
    let head = 32_000.0 * h + 3.0 * h * h; // its LM head and its 3h -> h fusion
    let expected_weights = (layer + head) * 2.0;
    let w = spec.draft_weight_bytes;
    assert!(
        (w / expected_weights - 1.0).abs() < 0.005,
        "head weights {w:e} B, expected {expected_weights:e} B"
    );
    assert_eq!(spec.weight_bytes, plain.weight_bytes + w);
    assert_eq!(
        spec.draft_kv_bytes_per_token * 32.0,
        plain.kv_bytes_per_token
    );
    assert_eq!(
        spec.kv_bytes_per_token,
        plain.kv_bytes_per_token * 33.0 / 32.0
    );
    let block = (plain.block_size as f64) * spec.kv_bytes_per_token;
    let blocks = ((plain.kv_bytes - w) / block).floor() as u64;
    assert_eq!(spec.kv_blocks, blocks);
    assert!(spec.kv_blocks < plain.kv_blocks);
    eprintln!(
        "vLLM EAGLE-3 on Llama-3.1-8B / H100: {} -> {} KV tokens ({:+.2}%), head {:.2} GB",
        plain.kv_tokens,
        spec.kv_tokens,
        (spec.kv_tokens as f64 / plain.kv_tokens as f64 - 1.0) * 100.0,
        w / 1e9
    );
}

/// SGLang sets 2 GiB aside for the draft off its static fraction (6 GiB for a draft model),
/// caps the batch at 48 while speculating, and adds `48 x (2K + 1) + 100` tokens of headroom
/// to its pool; a scenario's own `max_num_seqs` or `gpu_memory_utilization` is taken as given.
#[test]
fn sglang_sets_memory_aside_and_caps_the_batch() {
    let plain = scenario("sglang", "");
    let spec = scenario("sglang", &eagle3(3));
    let gib = (1u64 << 30) as f64;
    assert_eq!(spec.sim.scheduler.max_num_seqs, 48);
    assert_eq!(spec.memory.draft_reserved_bytes, 2.0 * gib);
    assert_eq!(spec.memory.draft_weight_bytes, 0.0);
    assert_eq!(spec.memory.headroom_tokens, 48 * 7 + 100);
    // The plain plan at the speculating batch cap: the set-aside and the headroom alone move it.
    let same_cap = scenario("sglang", "[scheduler]\nmax_num_seqs = 48\n").memory;
    let m = &spec.memory;
    assert!((same_cap.kv_bytes - m.kv_bytes - 2.0 * gib).abs() < 1.0);
    let blocks = (m.kv_bytes / (m.kv_bytes_per_token * m.block_size as f64)).floor() as u64;
    assert_eq!(m.kv_blocks, blocks + (48 * 7 + 100u64).div_ceil(16));
    assert!(m.kv_blocks < plain.memory.kv_blocks);
    // Given limits stay.
    let given = scenario(
        "sglang",
        &format!(
            "[scheduler]\nmax_num_seqs = 256\ngpu_memory_utilization = 0.88\n{}",
            eagle3(3)
        ),
    );
    assert_eq!(given.sim.scheduler.max_num_seqs, 256);
    assert_eq!(given.memory.draft_reserved_bytes, 0.0);
    // A draft model takes the larger set-aside.
    let draft = scenario(
        "sglang",
        "[speculative]\nmethod = \"draft_model\"\nmodel = \"llama-2-7b\"\nnum_speculative_tokens = 4\nacceptance_rate = 0.6\n",
    );
    assert_eq!(draft.memory.draft_reserved_bytes, 6.0 * gib);
}

/// The KV slots a decoding sequence holds besides its tokens: K draft tokens, plus K
/// lookahead slots in vLLM (`num_lookahead_tokens`), K - 1 in TensorRT-LLM
/// (`num_extra_kv_tokens`), none for n-gram, whose proposer writes no KV.
#[test]
fn each_decoding_sequence_holds_its_draft_and_lookahead_slots() {
    let slots = |engine: &str, extra: &str| scenario(engine, extra).sim.scheduler.spec_kv_slots;
    assert_eq!(slots("vllm", ""), 0);
    assert_eq!(slots("vllm", &eagle3(0)), 0);
    assert_eq!(slots("vllm", &eagle3(3)), 6);
    assert_eq!(slots("trtllm", &eagle3(3)), 5);
    assert_eq!(slots("sglang", &eagle3(3)), 6);
    let ngram =
        "[speculative]\nmethod = \"ngram\"\nnum_speculative_tokens = 4\nacceptance_rate = 0.5\n";
    assert_eq!(slots("vllm", ngram), 4);
}

/// With KV as the binding limit, the slots each running sequence holds let fewer sequences
/// run at once: the peak KV use per running sequence rises by the slots' share.
#[test]
fn the_slots_take_kv_from_running_sequences() {
    // A pool of 200 blocks (3,200 tokens) and 24-token prompts with 8 output tokens: every
    // request fits in 2 blocks (32 tokens) without speculation, 3 with 10 slots (K = 5).
    let run = |spec: &str| {
        let text = format!(
            r#"seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
engine = "vllm"
[scheduler]
max_num_seqs = 1024
{workload}{spec}"#,
            workload = fixed_offline_workload("num_requests = 400", 24, 8)
        );
        let mut s = Scenario::parse(&text, "t", &[])
            .unwrap()
            .resolve("t")
            .unwrap();
        s.sim.scheduler.kv_blocks = 200;
        s.run().unwrap().summary
    };
    let plain = run("");
    let spec = run(&eagle3(5));
    assert_eq!(plain.completed, 400);
    assert_eq!(spec.completed, 400);
    assert_eq!(plain.preemptions + spec.preemptions, 0);
    assert_eq!(plain.max_batch_size, 100.0);
    assert_eq!(spec.max_batch_size, 66.0);
}

/// `disable_by_batch_size` in the engine profile is the default the scenario's key overrides.
#[test]
fn the_engines_batch_limit_is_a_default_the_scenario_overrides() {
    let dir = tempfile_dir("engine-limit");
    let profile = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/engines/vllm.toml"
    ))
    .unwrap()
    .replace(
        "lookahead_offset = 0\n",
        "lookahead_offset = 0\ndisable_by_batch_size = 32\n",
    );
    let path = dir.join("limited.toml");
    std::fs::write(&path, profile).unwrap();
    let engine = path.to_str().unwrap();
    let at = |m: &StepTimeModel, b: u32| m.step_ns(&BatchShape::decode(b, 512)).unwrap();
    let plain = scenario(engine, "").step_model().unwrap();
    let by_engine = scenario(engine, &eagle3(3)).step_model().unwrap();
    assert_ne!(at(&by_engine, 32), at(&plain, 32));
    assert_eq!(at(&by_engine, 33), at(&plain, 33));
    let overridden = scenario(
        engine,
        &format!("{}disable_by_batch_size = 64\n", eagle3(3)),
    )
    .step_model()
    .unwrap();
    assert_ne!(at(&overridden, 64), at(&plain, 64));
    assert_eq!(at(&overridden, 65), at(&plain, 65));
    // The shipped profiles never switch speculation off (none of the engines does by default).
    let vllm = scenario("vllm", &eagle3(3)).step_model().unwrap();
    let vllm_plain = scenario("vllm", "").step_model().unwrap();
    assert_ne!(at(&vllm, 1024), at(&vllm_plain, 1024));
}

/// A bad `[speculative]` table in an engine profile names the file, the key and the reason,
/// and exits 2.
#[test]
fn a_bad_engine_table_names_file_key_and_reason() {
    let dir = tempfile_dir("bad-engine");
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/engines/vllm.toml"
    ))
    .unwrap();
    for (from, to, key) in [
        (
            "lookahead_offset = 0\n",
            "lookahead_offset = 40\n",
            "speculative.lookahead_offset",
        ),
        (
            "lookahead_offset = 0\n",
            "lookahead_offset = 0\ndraft_reserved_bytes = 1e9\n",
            "speculative.draft_reserved_bytes",
        ),
        (
            "lookahead_offset = 0\n",
            "lookahead_offset = 0\ndisable_by_batch_size = 0\n",
            "speculative.disable_by_batch_size",
        ),
        (
            "lookahead_offset = 0\n",
            "lookahead_offset = 0\nmax_num_seqs = 0\n",
            "speculative.max_num_seqs",
        ),
    ] {
        let path = dir.join("bad.toml");
        std::fs::write(&path, base.replace(from, to)).unwrap();
        let p = path.to_str().unwrap();
        let (code, _, err) = servesim(&[
            "estimate",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--engine",
            p,
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(p) && err.contains(key), "{err}");
    }
}

/// A fresh folder under the target directory for this test's files.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("speculative-kv-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
