//! Memory planner: how much KV cache fits beside the weights, and which TP degree fits at all.

use serde::Serialize;

use super::{Deployment, ACT_BYTES};
use crate::error::{Error, Result};

/// How one GPU's memory is split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryPlan {
    /// Memory the engine may use: device memory x gpu_memory_utilization, bytes.
    pub budget_bytes: f64,
    /// Weights on this GPU, bytes.
    pub weight_bytes: f64,
    /// Peak activation workspace for a full token budget, bytes.
    pub activation_bytes: f64,
    /// Runtime reservations (CUDA context, workspaces, graphs), bytes.
    pub reserved_bytes: f64,
    /// What is left for the KV cache, bytes.
    pub kv_bytes: f64,
    /// KV-cache bytes per token on this GPU.
    pub kv_bytes_per_token: f64,
    /// KV capacity, tokens (whole blocks).
    pub kv_tokens: u64,
    /// KV capacity, blocks.
    pub kv_blocks: u64,
    /// Tokens per block.
    pub block_size: u32,
}

fn activation_bytes(dep: &Deployment, max_batched_tokens: u32, max_num_seqs: u32) -> f64 {
    let m = &dep.model;
    let tp = dep.tp as f64;
    let h = m.hidden_size as f64;
    let qkv = (m.q_dim() + 2 * m.kv_dim()) as f64 / tp;
    let f = m.intermediate_size as f64 / tp * m.experts_per_token() as f64;
    // Peak of the profiling run: hidden state, QKV output, gate+up output and activation
    // output for the whole token budget, plus fp32 logits for the sampled sequences.
    max_batched_tokens as f64 * (h + qkv + 3.0 * f) * ACT_BYTES
        + max_num_seqs as f64 * m.vocab_size as f64 / tp * 4.0
}

fn plan_for(
    dep: &Deployment,
    gpu_memory_utilization: f64,
    max_batched_tokens: u32,
    max_num_seqs: u32,
    block_size: u32,
) -> MemoryPlan {
    let budget = dep.gpu.datasheet.memory_bytes * gpu_memory_utilization;
    let weights = dep.weight_bytes_per_gpu();
    let act = activation_bytes(dep, max_batched_tokens, max_num_seqs);
    let reserved = dep.engine.host.runtime_reserved_bytes;
    let kv = budget - weights - act - reserved;
    let per_token = dep.kv_bytes_per_token_per_gpu();
    let blocks = if kv > 0.0 {
        (kv / (per_token * block_size as f64)).floor() as u64
    } else {
        0
    };
    MemoryPlan {
        budget_bytes: budget,
        weight_bytes: weights,
        activation_bytes: act,
        reserved_bytes: reserved,
        kv_bytes: kv,
        kv_bytes_per_token: per_token,
        kv_tokens: blocks * block_size as u64,
        kv_blocks: blocks,
        block_size,
    }
}

/// Plans one GPU's memory. Fails when the weights and workspace leave no room for one
/// sequence of `min_kv_tokens`, saying how much is missing and which TP degree would fit.
pub fn plan_memory(
    dep: &Deployment,
    gpu_memory_utilization: f64,
    max_batched_tokens: u32,
    max_num_seqs: u32,
    block_size: u32,
    min_kv_tokens: u64,
) -> Result<MemoryPlan> {
    let plan = plan_for(
        dep,
        gpu_memory_utilization,
        max_batched_tokens,
        max_num_seqs,
        block_size,
    );
    let need = min_kv_tokens.max(block_size as u64) as f64 * plan.kv_bytes_per_token;
    if plan.kv_bytes >= need {
        return Ok(plan);
    }
    let missing = need - plan.kv_bytes;
    let heads = dep.model.num_attention_heads;
    let fitting_tp = [1u32, 2, 4, 8, 16, 32, 64]
        .into_iter()
        .filter(|&t| t > dep.tp && heads % t as u64 == 0)
        .find(|&t| {
            let mut d = dep.clone();
            d.tp = t;
            d.validate().is_ok()
                && plan_for(
                    &d,
                    gpu_memory_utilization,
                    max_batched_tokens,
                    max_num_seqs,
                    block_size,
                )
                .kv_bytes
                    >= min_kv_tokens.max(block_size as u64) as f64 * d.kv_bytes_per_token_per_gpu()
        });
    let hint = match fitting_tp {
        Some(t) => format!("tensor-parallel size {t} fits"),
        None => "no tensor-parallel size up to 64 fits on this GPU type".to_string(),
    };
    Err(Error::Infeasible(format!(
        "{} ({}, {:.1} GB of weights per GPU) does not fit on {} at TP {}: {:.1} GB missing \
         (budget {:.1} GB at gpu_memory_utilization {}); {hint}",
        dep.model.name,
        dep.weight_dtype,
        plan.weight_bytes / 1e9,
        dep.gpu.name,
        dep.tp,
        missing / 1e9,
        plan.budget_bytes / 1e9,
        gpu_memory_utilization,
    )))
}
