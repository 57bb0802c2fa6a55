//! trtllm-bench's batch limits (tensorrt_llm/bench/build/tuning.py `calc_engine_setting`) on
//! MoE checkpoints: the rule's `param_count` is the checkpoint's safetensors element count
//! (bench/build/dataclasses.py `get_param_count`), so an NVFP4 weight counts 0.5625 elements
//! (a U8 pair of E2M1 values and an FP8 scale per 16), and the rule runs only for the
//! quantizations it tunes (bench/build/build.py `TUNED_QUANTS`: not MXFP4).

mod common;

use servesim::model::load_model;
use servesim::roofline::ModuleFormats;
use servesim::scenario::{trtllm_bench_param_count, Resolved, Scenario};

fn resolve(text: &str) -> Resolved {
    Scenario::parse(text, "test", &[])
        .and_then(|s| s.resolve("test"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `(max_num_seqs, max_num_batched_tokens)` of a trtllm deployment (`deployment` keys) under
/// an offline workload of `input` / `output` tokens, for the whole replica: the tool's limits
/// are each attention data-parallel rank's, so a replica of `dp` ranks holds `dp` times them.
fn limits(deployment: &str, input: u32, output: u32) -> (u32, u32) {
    let text = format!(
        "seed = 3\n[deployment]\n{deployment}\nengine = \"trtllm\"\n{}",
        common::fixed_offline_workload("num_requests = 10", input, output)
    );
    let r = resolve(&text);
    (
        r.sim.scheduler.max_num_seqs,
        r.sim.scheduler.max_num_batched_tokens,
    )
}

/// DeepSeek-R1's two checkpoints, counted as their safetensors metadata counts them: the
/// block-FP8 repository is "685B" (deepseek-ai/DeepSeek-V3 README: 671B of main model and 14B
/// of MTP module, the MTP layer storing its own copies of the embedding and the LM head), and
/// nvidia/DeepSeek-R1-0528-NVFP4-v2 393.6B (its model page's safetensors total): NVFP4
/// experts, dense MLPs, shared experts and O projection at 0.5625 elements a weight, the other
/// MLA projections, the MTP layer, the embeddings and the routers at one.
#[test]
fn deepseek_r1_checkpoints_count_as_their_safetensors_elements() {
    let r1 = load_model("deepseek-r1").expect("catalog model");
    let fp8 = trtllm_bench_param_count(
        &r1,
        &ModuleFormats::of_checkpoint(&r1, r1.checkpoint.as_ref().unwrap().other),
    );
    assert!((fp8 / 685e9 - 1.0).abs() < 0.001, "{fp8}");
    assert!((r1.total_params() / 671e9 - 1.0).abs() < 0.001);
    let v2 = r1.published_checkpoints["nvidia/DeepSeek-R1-0528-NVFP4-v2"].clone();
    let formats = ModuleFormats {
        attention: v2.attention.unwrap(),
        attention_out: v2.attention_out.unwrap(),
        dense: v2.other,
        experts: v2.experts,
        mtp: v2.mtp.unwrap(),
    };
    let nvfp4 = trtllm_bench_param_count(&r1, &formats);
    assert!((nvfp4 / 393.6e9 - 1.0).abs() < 0.001, "{nvfp4}");
}

/// The perf-overview's DeepSeek-R1 B200 DEP4 rows (`trtllm-bench --tp 4 --ep 4`, attention
/// DP, FP8 KV) at 1024/8192, by tuning.py's arithmetic in GiB: 4 x 180 GiB less 393.63 G
/// elements x 0.5 B (183.30 GiB) leaves 536.70 GiB, 95% of it 509.87 GiB; a request's KV
/// counted as 2 x 61 layers x 128 heads x 56 (hidden / heads) x 1 B = 874,496 B a token x
/// 9,216 tokens = 7.506 GiB: 67.9 requests -> 96 sequences per rank, 76 tokens -> 2,048. With
/// the 671 G parameters the rule was handed before, 387.2 GiB held 51.6 requests -> 64. At
/// 1000/1000, 313.0 requests -> 384 (was 237.7 -> 256).
#[test]
fn the_nvfp4_deepseek_r1_dep4_rows_get_the_batch_the_tool_derives() {
    let dep4 = "model = \"deepseek-r1\"\ngpu = \"b200\"\ntp = 1\ndp = 4\nep = 4\ndtype = \"fp4\"\n\
                checkpoint = \"nvidia/DeepSeek-R1-0528-NVFP4-v2\"\nkv_cache_dtype = \"fp8\"";
    assert_eq!(limits(dep4, 1024, 8192), (4 * 96, 4 * 2048));
    assert_eq!(limits(dep4, 1000, 1000), (4 * 384, 4 * 2048));
}

/// The FP8 checkpoint on eight H200s (the H200 DEP8 rows' deployment) counts its MTP layer:
/// 684.49 G one-byte elements (637.47 GiB) of 8 x 140.40 GiB leave 485.7 GiB, 95% of it 461.5
/// GiB, which holds 252.9 requests of 1024 + 1216 tokens -> 256 sequences per rank; without
/// the MTP layer (671.03 G) 259.5 requests -> 384.
#[test]
fn the_fp8_deepseek_r1_counts_its_mtp_layer() {
    let dep8 = "model = \"deepseek-r1\"\ngpu = \"h200-sxm\"\ntp = 1\ndp = 8\nep = 8\n\
                dtype = \"fp8\"\nkv_cache_dtype = \"fp8\"";
    assert_eq!(limits(dep8, 1024, 1216), (8 * 256, 8 * 2048));
}

/// gpt-oss's MXFP4 checkpoint loads as an MXFP4 quantization the rule does not tune, so
/// trtllm-bench keeps its build defaults: the engine profile's 2,048 sequences and 8,192
/// tokens, whatever the lengths.
#[test]
fn mxfp4_checkpoints_keep_the_engine_defaults() {
    let oss = "model = \"gpt-oss-120b\"\ngpu = \"b200\"\ntp = 1\ndp = 2\nep = 2\n\
               dtype = \"mxfp4\"\nkv_cache_dtype = \"fp8\"";
    assert_eq!(limits(oss, 1024, 8192), (2 * 2048, 2 * 8192));
    assert_eq!(limits(oss, 1000, 1000), (2 * 2048, 2 * 8192));
}
