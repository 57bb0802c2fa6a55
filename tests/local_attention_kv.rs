//! How the engines hold the KV of sliding-window layers (issue #28): vLLM's hybrid allocator
//! frees a window layer's blocks once they leave its window, so its pool counts only the
//! full-attention layers per token (with the windows of `max_num_seqs` requests set aside);
//! TensorRT-LLM's KV cache manager, without `kv_cache_config.max_attention_window`, gives every
//! layer one window of the max sequence length, so every layer keeps every token
//! (calibration/engines/trtllm.toml, `local_kv_window_only`). Each test fails if its engine's
//! rule is swapped for the other's.
//!
//!     cargo test --release --test local_attention_kv

mod common;

use common::fixed_offline_workload;
use servesim::roofline::MemoryPlan;
use servesim::scenario::Scenario;

/// gpt-oss-20b (12 sliding-window layers of 128 tokens, 12 full-attention layers, 8 KV heads
/// of 64) on one H200 with `engine`, BF16 KV, offline 1024 / 1024.
fn plan(engine: &str) -> MemoryPlan {
    let text = format!(
        "seed = 1\n[deployment]\nmodel = \"gpt-oss-20b\"\ngpu = \"h200-sxm\"\n\
         dtype = \"mxfp4\"\nkv_cache_dtype = \"auto\"\nengine = \"{engine}\"\n{}",
        fixed_offline_workload("num_requests = 100", 1024, 1024)
    );
    Scenario::parse(&text, "t", &[])
        .unwrap()
        .resolve("t")
        .unwrap()
        .memory
}

/// One token's K and V in one layer: 8 KV heads x 64 x 2 (K, V) x 2 bytes (BF16), from
/// openai/gpt-oss-20b's config.json, not from servesim's code.
const LAYER_BYTES: f64 = 8.0 * 64.0 * 2.0 * 2.0;

#[test]
fn trtllm_keeps_every_token_in_every_layer() {
    let p = plan("trtllm");
    assert_eq!(p.kv_bytes_per_token, 24.0 * LAYER_BYTES);
    assert_eq!(p.kv_window_reserved_bytes, 0.0);
    let block = p.block_size as f64 * p.kv_bytes_per_token;
    assert_eq!(p.kv_blocks, (p.kv_bytes / block).floor() as u64);
}

#[test]
fn vllm_keeps_only_the_windows_of_the_sliding_layers() {
    let p = plan("vllm");
    assert_eq!(p.kv_bytes_per_token, 12.0 * LAYER_BYTES);
    assert!(p.kv_window_reserved_bytes > 0.0);
    // The windows set aside: max_num_seqs requests x (cdiv(128, block) + 1) blocks x 12 layers.
    let bs = p.block_size as f64;
    let window_tokens = ((128.0 / bs).ceil() + 1.0) * bs;
    let per_seq = window_tokens * 12.0 * LAYER_BYTES;
    let seqs = p.kv_window_reserved_bytes / per_seq;
    assert_eq!(seqs, seqs.round(), "{seqs} requests' windows");
}
