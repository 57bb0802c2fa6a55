//! Reference rows whose client repeats a set of prompts (issue #26): kubernetes-sigs/inference-perf's
//! `shared_prefix` data pre-generates `num_groups x num_prompts_per_group` prompts and sends
//! prompt `i mod` that count as request `i`, so after a prompt's first use vLLM's prefix cache
//! holds all of it. A row says so with `distinct_prompts`; its simulation then gives each
//! distinct prompt its own prefix group of the whole prompt less one token, and the datasheet
//! bound and the two-row check count a prompt's tokens only at its first use. The inference-perf
//! campaign's arrivals are a Poisson process (`burstiness` 1): its `constant` load draws
//! exponential gaps. Each test fails if the column is ignored.
//!
//!     cargo test --release --test repeated_prompts

use servesim::validate::{compare, parse_reference, read_reference, LoadKind, Metric};
use servesim::workload::ArrivalConfig;

const HEADER: &str = "id,kind,engine,model,dtype,gpu,tp,input_len,output_len,prefix_len,\
                      distinct_prompts,num_requests,rate_rps,burstiness,max_num_seqs,\
                      max_num_batched_tokens,max_model_len,output_tokens_per_s,ttft_mean_ms,e2e_mean_ms";

/// One online Llama-2-7B row on an H100: 600-token prompts of which 100 are a system prompt,
/// 64 output tokens, 400 requests at 4 req/s; `distinct` prompts repeated (blank: all new).
fn row(distinct: &str) -> String {
    format!(
        "{HEADER}\nX,online,vllm,llama-2-7b,fp16,h100-sxm,1,600,64,100,{distinct},400,4,1,128,2048,\
         4096,256,30,700\n"
    )
}

#[test]
fn a_row_with_distinct_prompts_caches_each_whole_prompt_after_its_first_use() {
    let fresh = &parse_reference(&row(""), "a.csv").unwrap()[0];
    let repeated = &parse_reference(&row("10"), "b.csv").unwrap()[0];
    assert_eq!(fresh.distinct_prompts, None);
    assert_eq!(repeated.distinct_prompts, Some(10));
    // The shared prefix the simulation is given: the system prompt, or all but the last token.
    assert_eq!(fresh.cached_prefix_len(), 100);
    assert_eq!(repeated.cached_prefix_len(), 599);
    let w = repeated.scenario().unwrap().workload;
    let p = w.prefix.expect("a prefix");
    assert_eq!((p.tokens, p.groups), (599, 10));
    // `burstiness` 1: Poisson arrivals at the row's rate.
    assert!(
        matches!(w.arrival, ArrivalConfig::Poisson { rate_per_s } if rate_per_s == 4.0),
        "{:?}",
        w.arrival
    );
    // Uncached prompt tokens per request: 500 for every request, or 500 for the 10 first uses
    // and 1 for the other 390.
    assert_eq!(fresh.uncached_prompt_tokens(600.0), 500.0);
    let mean = (10.0 * 500.0 + 390.0 * 1.0) / 400.0;
    assert!((repeated.uncached_prompt_tokens(600.0) - mean).abs() < 1e-12);
}

#[test]
fn repeated_prompts_shorten_the_simulated_first_token() {
    let ttft = |text: &str| {
        compare(&parse_reference(text, "x.csv").unwrap(), None)
            .unwrap()
            .into_iter()
            .find(|c| c.metric == Metric::TtftMeanMs)
            .unwrap()
            .predicted
    };
    let fresh = ttft(&row(""));
    let repeated = ttft(&row("10"));
    // A 500-token prefill is several ms on an H100; a cached prompt computes one token.
    assert!(repeated < fresh - 3.0, "{repeated} vs {fresh}");
}

#[test]
fn distinct_prompts_below_one_is_an_error_naming_the_column() {
    let err = parse_reference(&row("0"), "bad.csv")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.csv") && err.contains("distinct_prompts"),
        "{err}"
    );
}

/// Every row of the inference-perf campaign carries the protocol: 100 distinct prompts, Poisson
/// arrivals.
#[test]
fn the_inference_perf_rows_carry_their_protocol() {
    let mut n = 0;
    for file in [
        "calibration/reference/serving-measurements.csv",
        "calibration/reference/inference-sim-vllm-0.15.1-codellama-34b-tp2-h100.csv",
        "calibration/reference/inference-sim-vllm-0.15.1-mixtral-8x7b-tp2-h100.csv",
    ] {
        for r in read_reference(std::path::Path::new(file)).unwrap() {
            let campaign = r.id.starts_with("V-A") || r.id.starts_with("I-");
            assert_eq!(r.distinct_prompts.is_some(), campaign, "{}", r.id);
            if campaign {
                assert_eq!(r.kind, LoadKind::Online);
                assert_eq!(
                    (r.distinct_prompts, r.burstiness),
                    (Some(100), Some(1.0)),
                    "{}",
                    r.id
                );
                n += 1;
            }
        }
    }
    assert_eq!(n, 20);
}
