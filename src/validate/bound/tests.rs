use super::*;
use crate::validate::cv::saturation;
use crate::validate::{parse_reference, Comparison, Metric};

/// Round numbers whose bound is worked out by hand below.
fn hand_inputs() -> BoundInputs {
    BoundInputs {
        requests_per_s: 10.0,
        uncached_prompt_tokens: 100.0,
        output_tokens: 11.0,
        kv_full_token_reads: context_reads(100.0, 11.0, None),
        kv_local_token_reads: 0.0,
        matmul_params: 1e9,
        lm_head_params: 1e8,
        weight_bytes_per_param: 2.0,
        kv_full_bytes_per_token: 1e5,
        kv_local_bytes_per_token: 0.0,
        max_batch_seqs: 10.0,
        replicas: 1.0,
        gpus_per_replica: 2.0,
        l2_bytes_per_gpu: 1e6,
        peak_flops_per_s: 1e12,
        hbm_bandwidth_bytes_per_s: 1e10,
    }
}

#[test]
fn the_bound_of_a_constructed_load_matches_hand_arithmetic() {
    let x = hand_inputs();
    // 10 decode steps read contexts of 100, 101, ..., 109 tokens: 10 x 100 + 45.
    assert_eq!(x.kv_full_token_reads, 1045.0);
    let b = evaluate("H", &x);
    // FLOP/s: 10 req/s x 2 x (1e9 x (100 + 10) + 1e8 x 11) = 2.222e12.
    assert!((b.flops_per_s - 2.222e12).abs() < 1e3, "{}", b.flops_per_s);
    // Iterations/s >= 10 x 11 / 10 = 11, each reading 1.1e9 x 2 bytes less 2 x 1 MB of L2:
    // 11 x 2.198e9 = 2.4178e10; KV: 10 x 1045 x 1e5 = 1.045e9; total 2.5223e10 bytes/s.
    assert!(
        (b.hbm_bytes_per_s - 2.5223e10).abs() < 1.0,
        "{}",
        b.hbm_bytes_per_s
    );
    // Over two GPUs at 1e12 FLOP/s and 1e10 B/s: compute 1.111, memory 1.26115.
    assert!(
        (b.compute_share - 1.111).abs() < 1e-9,
        "{}",
        b.compute_share
    );
    assert!(
        (b.memory_share - 1.26115).abs() < 1e-9,
        "{}",
        b.memory_share
    );
    assert_eq!(b.gpu_time_per_s, b.memory_share);
    assert!(b.infeasible());
    // Weights that fit in L2 leave no memory term; compute alone is then the bound.
    let tiny = evaluate(
        "T",
        &BoundInputs {
            l2_bytes_per_gpu: 2e9,
            ..hand_inputs()
        },
    );
    assert_eq!(tiny.memory_share, 0.0);
    assert_eq!(tiny.gpu_time_per_s, tiny.compute_share);
}

#[test]
fn local_layers_read_at_most_their_window() {
    // min(3, 5) + min(4, 5) + 5 + 5 + 5 = 22.
    assert_eq!(sum_capped(3.0, 5.0, 5.0), 22.0);
    assert_eq!(sum_capped(7.0, 3.0, 5.0), 15.0);
    assert_eq!(sum_capped(0.0, 4.0, 100.0), 6.0);
    // Output 6: five decode steps over a 3-token prompt, window 5.
    assert_eq!(context_reads(3.0, 6.0, Some(5.0)), 22.0);
    assert_eq!(context_reads(3.0, 6.0, None), 5.0 * 3.0 + 10.0);
}

/// One online Llama-2-7B row on an H100 at `rate` req/s, kept up with as measured (its output
/// throughput is the offered one).
fn row_at(id: &str, rate: f64) -> ReferenceRow {
    let text = format!(
        "id,kind,engine,model,dtype,gpu,tp,input_len,output_len,num_requests,rate_rps,\
         max_num_seqs,output_tokens_per_s,ttft_mean_ms\n\
         {id},online,vllm,llama-2-7b,fp16,h100-sxm,1,600,250,100,{rate},128,{},50\n",
        rate * 250.0
    );
    parse_reference(&text, "x.csv").unwrap().remove(0)
}

#[test]
fn a_row_at_twice_its_bounds_load_is_flagged_and_one_at_half_is_not() {
    let base = datasheet_bound(&row_at("B", 10.0)).unwrap().unwrap();
    let per_rps = base.gpu_time_per_s / 10.0;
    assert!(per_rps > 0.0);
    let heavy = row_at("HEAVY", 2.0 / per_rps);
    let light = row_at("LIGHT", 0.5 / per_rps);
    let bh = datasheet_bound(&heavy).unwrap().unwrap();
    let bl = datasheet_bound(&light).unwrap().unwrap();
    assert!(
        (bh.gpu_time_per_s - 2.0).abs() < 1e-9,
        "{}",
        bh.gpu_time_per_s
    );
    assert!(
        (bl.gpu_time_per_s - 0.5).abs() < 1e-9,
        "{}",
        bl.gpu_time_per_s
    );
    assert!(bh.infeasible() && !bl.infeasible());
    // Both predicted saturated although the engine kept up: only the light one is counted.
    let rows = vec![heavy, light];
    let comps: Vec<Comparison> = rows
        .iter()
        .map(|r| Comparison {
            id: r.id.clone(),
            kind: LoadKind::Online,
            metric: Metric::TtftMeanMs,
            measured: 50.0,
            predicted: 1e5,
            signed_error: 1999.0,
            group: r.group(),
            keeps_up: Some(false),
        })
        .collect();
    let sat = saturation(&rows, &comps, &[bh, bl], &[]);
    assert_eq!(sat.counted, vec!["LIGHT".to_string()]);
    assert_eq!(sat.set_aside.len(), 1);
    assert_eq!(sat.set_aside[0].id, "HEAVY");
    let line = sat.describe();
    assert!(line.contains("LIGHT") && line.contains("set aside: HEAVY (") && line.contains("2.00"));
    // Without bounds both count.
    assert_eq!(saturation(&rows, &comps, &[], &[]).counted.len(), 2);
}

#[test]
fn a_llama_2_70b_tp4_row_is_bounded_as_its_architecture_says() {
    // Second method: the V-A6 description (20 req/s, 575-token prompts of which 100 are a
    // shared prefix, 248 output tokens, max_num_seqs 128, FP16, 4x H100 SXM) from the
    // Llama-2-70B architecture by hand: h 8192, 80 layers, 64 query and 8 KV heads of 128,
    // MLP 28672, vocabulary 32000.
    let text = "id,kind,engine,model,dtype,gpu,tp,input_len,output_len,prefix_len,num_requests,\
                rate_rps,max_num_seqs\n\
                R,online,vllm,llama-2-70b,fp16,h100-sxm,4,575,248,100,12000,20,128\n";
    let row = parse_reference(text, "x.csv").unwrap().remove(0);
    let b = datasheet_bound(&row).unwrap().unwrap();
    let h = 8192.0;
    let per_layer = h * (8192.0 + 2.0 * 1024.0) + 8192.0 * h + 3.0 * h * 28672.0;
    let body = 80.0 * per_layer;
    let head = 32000.0 * h;
    let flops = 20.0 * 2.0 * (body * (475.0 + 247.0) + head * 248.0);
    assert!(
        (b.flops_per_s / flops - 1.0).abs() < 1e-12,
        "{} {flops}",
        b.flops_per_s
    );
    let compute = flops / (4.0 * 989e12);
    let kv_per_token = 2.0 * 80.0 * 1024.0 * 2.0;
    let reads = 247.0 * 475.0 + 247.0 * 246.0 / 2.0;
    let bytes =
        20.0 * 248.0 / 128.0 * ((body + head) * 2.0 - 4.0 * 50e6) + 20.0 * reads * kv_per_token;
    let memory = bytes / (4.0 * 3.35e12);
    assert!(
        (b.compute_share - compute).abs() < 1e-12,
        "{} {compute}",
        b.compute_share
    );
    assert!(
        (b.memory_share - memory).abs() < 1e-12,
        "{} {memory}",
        b.memory_share
    );
    // About half the GPUs' datasheet time: the description alone does not rule it out.
    assert!(
        b.gpu_time_per_s > 0.45 && b.gpu_time_per_s < 0.55,
        "{}",
        b.gpu_time_per_s
    );
}

#[test]
fn offline_and_closed_loop_rows_have_no_bound() {
    let text = "id,kind,engine,model,gpu,tp,input_len,output_len,num_requests,max_concurrency\n\
                C,online,vllm,llama-2-7b,h100-sxm,1,300,64,200,8\n\
                O,offline,vllm,llama-2-7b,h100-sxm,1,300,64,200,\n";
    for row in parse_reference(text, "x.csv").unwrap() {
        assert!(datasheet_bound(&row).unwrap().is_none(), "{}", row.id);
    }
}
