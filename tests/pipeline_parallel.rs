//! Pipeline parallelism (`deployment.pp`, docs/model.md "Pipeline parallelism"): a stage holds
//! 1/pp of the layers' weights and KV per GPU, a replica runs as pp sub-replicas (one per
//! micro-batch in flight) with 1/pp of its KV pool each, its step is the whole model's plus
//! pp - 1 stage hand-offs, and reports count tp x pp GPUs per replica while printing the
//! replicas asked for.

mod common;

use servesim::scenario::{Resolved, Scenario};

/// Llama-2-70B FP8 on H100 at TP 1 with `pp` stages and `replicas` replicas, a small
/// offline workload of `requests` requests.
fn text(pp: u32, replicas: u32, requests: u32) -> String {
    format!(
        "seed = 3\n[deployment]\nmodel = \"llama-2-70b\"\ngpu = \"h100-sxm\"\ntp = 1\npp = {pp}\n\
         dtype = \"fp8\"\nkv_cache_dtype = \"fp8\"\nengine = \"trtllm\"\nreplicas = {replicas}\n\
         [scheduler]\nmax_num_seqs = 64\nmax_num_batched_tokens = 1024\n{}",
        common::fixed_offline_workload(&format!("num_requests = {requests}"), 200, 20)
    )
}

fn resolve(text: &str) -> Resolved {
    Scenario::parse(text, "test", &[])
        .and_then(|s| s.resolve("test"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn a_stage_holds_half_the_weights_and_half_the_kv_per_token_of_the_whole_model() {
    let one = resolve(&text(1, 1, 10));
    let two = resolve(&text(2, 1, 10));
    // Llama-2-70B has untied embeddings and LM head of one size: the heaviest stage (half the
    // layers and one of the two) holds exactly half of the whole model's weights.
    let (w1, w2) = (one.memory.weight_bytes, two.memory.weight_bytes);
    assert!(
        (w2 / w1 - 0.5).abs() < 1e-12,
        "{w2} bytes per GPU at PP2 against {w1} at PP1"
    );
    let (k1, k2) = (one.memory.kv_bytes_per_token, two.memory.kv_bytes_per_token);
    assert_eq!(k2, k1 / 2.0, "40 of 80 layers' KV per token on a stage");
    // What the halved weights free becomes KV: the pool per GPU grows by their bytes.
    assert!(
        (two.memory.kv_bytes - one.memory.kv_bytes - (w1 - w2)).abs() < 1.0,
        "{} vs {}",
        two.memory.kv_bytes,
        one.memory.kv_bytes
    );
}

#[test]
fn a_replica_runs_as_one_sub_replica_per_stage_with_its_share_of_the_kv_pool() {
    let r = resolve(&text(2, 3, 10));
    assert_eq!(r.sim.replicas, 3, "the replicas asked for");
    assert_eq!(r.sim.pipeline_stages, 2);
    assert_eq!(r.sim.gpus_per_replica, 2, "tp 1 x pp 2");
    assert_eq!(r.gpus(), 6);
    assert_eq!(r.sim.scheduler.kv_blocks, r.memory.kv_blocks / 2);
    // The limits apply per micro-batch, as TensorRT-LLM's micro-batch scheduler applies them.
    assert_eq!(r.sim.scheduler.max_num_seqs, 64);
    assert_eq!(r.sim.scheduler.max_num_batched_tokens, 1024);
}

#[test]
fn a_pipeline_run_counts_tp_x_pp_gpus_and_prints_the_replicas_asked_for() {
    let pp2 = common::run_toml(&text(2, 1, 256));
    assert_eq!(pp2.replicas, 1, "the summary prints the replicas asked for");
    assert_eq!(pp2.num_gpus, 2, "1 replica x tp 1 x pp 2");
    assert_eq!(pp2.completed, 256);
    let (code, out, err) = common::servesim(&[
        "run",
        "scenarios/mlperf/llama2-70b-server-h100-v50.toml",
        "--set",
        "workload.num_requests=300",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("4 replica(s) x 2 h100-sxm (TP 1 x PP 2"),
        "the deployment line names 4 replicas of 2 GPUs:\n{out}"
    );
}

#[test]
fn the_stage_hand_off_adds_its_bytes_over_nvlink_to_every_step() {
    use servesim::roofline::StepTimeModel;
    use servesim::step_time::BatchShape;
    let one = resolve(&text(1, 1, 10)).deployment;
    let mut two = one.clone();
    two.pp = 2;
    let tokens = 1000u32;
    // One 1000-token prompt (a prefill runs its exact token count: no graph padding).
    let b = BatchShape {
        prefill_tokens: tokens,
        prefill_seqs: 1,
        prefill_attention_units: tokens as f64 * tokens as f64 / 2.0,
        sampled_seqs: 1,
        ..Default::default()
    };
    let s1 = StepTimeModel::new(one, 2048).unwrap().breakdown(&b);
    let s2 = StepTimeModel::new(two.clone(), 2048).unwrap().breakdown(&b);
    // 1000 tokens x 8192 x 2 bytes at 450 GB/s, after the 7 us NVLink latency.
    let expected = two.gpu.allreduce.custom_latency_s
        + tokens as f64 * 8192.0 * 2.0 / (two.gpu.datasheet.nvlink_bandwidth_bytes_per_s / 2.0);
    assert!(
        (s2.allreduce_s - s1.allreduce_s - expected).abs() < 1e-12,
        "{} - {} vs {expected}",
        s2.allreduce_s,
        s1.allreduce_s
    );
    assert_eq!(s1.gemm_s, s2.gemm_s, "the whole model's GEMMs either way");
}

/// trtllm-bench's limits with pipeline stages (tensorrt_llm/bench/build/tuning.py:
/// `n_gpus = tp_size * pp_size`, `raw_bs = min(kv_cache_max_requests, 4096) / pp_size`),
/// worked by hand for Llama-2-70B FP8 (68,976,648,192 one-byte weights, 163,840 bytes of FP8
/// KV per token) on 81,559-MiB H100s at 200/20 tokens: TP 1 x PP 2 frees 2 x 79.65 - 64.24 =
/// 95.05 GiB, 95% of it holds 2,690 requests of 220 tokens, 1,345 per micro-batch -> 1,536
/// sequences and 1,345 x 11 = 14,795 -> 15,360 tokens; TP 2 the same 2,690 in one batch ->
/// 2,816 and 29,590 -> 29,696. Counting one GPU only (the rule before it read `pp`) gave 436
/// requests -> 512 and 5,120.
#[test]
fn trtllm_bench_limits_count_every_stages_memory_and_apply_per_micro_batch() {
    let text = |tp: u32, pp: u32| {
        format!(
            "seed = 3\n[deployment]\nmodel = \"llama-2-70b\"\ngpu = \"h100-sxm\"\ntp = {tp}\n\
             pp = {pp}\ndtype = \"fp8\"\nkv_cache_dtype = \"fp8\"\nengine = \"trtllm\"\n{}",
            common::fixed_offline_workload("num_requests = 10", 200, 20)
        )
    };
    let pp2 = resolve(&text(1, 2));
    assert_eq!(
        (
            pp2.sim.scheduler.max_num_seqs,
            pp2.sim.scheduler.max_num_batched_tokens
        ),
        (1536, 15360)
    );
    let tp2 = resolve(&text(2, 1));
    assert_eq!(
        (
            tp2.sim.scheduler.max_num_seqs,
            tp2.sim.scheduler.max_num_batched_tokens
        ),
        (2816, 29696)
    );
}

/// `servesim estimate --pipeline-parallel-size` (vLLM's flag) prints one stage's weights and
/// KV per GPU and one micro-batch's pass: the same GEMMs as one GPU holding every layer, plus
/// the hand-off; without the flag its JSON has no `pp` key (outputs as before).
#[test]
fn estimate_with_pipeline_stages_reports_one_stages_memory_and_the_passes_step() {
    let estimate = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "estimate",
            "--model",
            "llama-2-70b",
            "--gpu",
            "h100-sxm",
            "--dtype",
            "fp8",
            "--kv-cache-dtype",
            "fp8",
            "--engine",
            "trtllm",
            "--max-num-seqs",
            "1024",
            "--max-num-batched-tokens",
            "1024",
            "--decode-batch",
            "256",
            "--context",
            "1000",
            "--format",
            "json",
        ];
        args.extend(extra);
        let (code, out, err) = common::servesim(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(&out).unwrap()
    };
    let one = estimate(&[]);
    let two = estimate(&["--pipeline-parallel-size", "2"]);
    assert!(one.get("pp").is_none(), "{one}");
    assert_eq!(two["pp"], 2);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let w = |v: &serde_json::Value| f(v, "weights_bytes_per_gpu");
    assert!(
        (w(&two) / w(&one) - 0.5).abs() < 1e-12,
        "{} vs {}",
        w(&two),
        w(&one)
    );
    let kv = |v: &serde_json::Value| v["memory"]["kv_bytes_per_token"].as_f64().unwrap();
    assert_eq!(kv(&two), kv(&one) / 2.0);
    assert_eq!(f(&two, "kv_bytes_per_token"), f(&one, "kv_bytes_per_token"));
    let step = |v: &serde_json::Value, k: &str| v["step"][k].as_f64().unwrap();
    assert_eq!(step(&two, "gemm_s"), step(&one, "gemm_s"));
    // One hand-off of 256 tokens x 8192 x 2 bytes over half of 900 GB/s after the profile's
    // NVLink peer-to-peer latency (4.49 us, the one-shot all-reduce's): 13.8 us.
    let latency = servesim::gpu::GpuProfile::load("h100-sxm")
        .unwrap()
        .allreduce
        .custom_latency_s;
    assert!((latency - 4.49e-6).abs() < 1e-9, "{latency}");
    let handoff = step(&two, "allreduce_s") - step(&one, "allreduce_s");
    assert!(
        (handoff - (latency + 256.0 * 8192.0 * 2.0 / 450e9)).abs() < 1e-9,
        "{handoff}"
    );
    let (code, _, err) = common::servesim(&[
        "estimate",
        "--model",
        "llama-2-70b",
        "--pipeline-parallel-size",
        "2",
        "--speculative-config",
        "{\"method\":\"ngram\",\"num_speculative_tokens\":3}",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--speculative-config: is not modelled with --pipeline-parallel-size > 1"),
        "{err}"
    );
}
