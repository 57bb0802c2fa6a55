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
    /// KV-cache bytes per token on this GPU, of the layers the capacity counts (every layer;
    /// the full-attention layers only when the local layers' windows are set aside, see
    /// `kv_window_reserved_bytes`).
    pub kv_bytes_per_token: f64,
    /// Of `kv_bytes`: the sliding-window and chunked layers' KV set aside for `max_num_seqs`
    /// requests each holding its whole window (vLLM's hybrid KV allocator frees the blocks
    /// that leave the window), when that leaves more room than keeping every token in every
    /// layer; 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kv_window_reserved_bytes: f64,
    /// KV capacity of the replica, tokens (whole blocks; every attention data-parallel rank's).
    pub kv_tokens: u64,
    /// KV capacity of the replica, blocks.
    pub kv_blocks: u64,
    /// Tokens per block.
    pub block_size: u32,
    /// Speculative decoding: of `weight_bytes`, the draft's (an EAGLE head, an MTP layer, a
    /// draft model) where the engine counts it in its memory profile; 0 without one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draft_weight_bytes: f64,
    /// Speculative decoding: of `kv_bytes_per_token`, the draft's attention layers' KV, held
    /// in the target's pool; 0 without one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draft_kv_bytes_per_token: f64,
    /// Speculative decoding: of `reserved_bytes`, the engine's fixed set-aside for the draft
    /// (SGLang's); 0 without one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draft_reserved_bytes: f64,
    /// Speculative decoding: of `kv_tokens`, the tokens the engine adds to its pool beyond
    /// the profiled size for the slots speculating sequences hold (SGLang's headroom).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub headroom_tokens: u64,
}

/// What speculative decoding's draft takes from one GPU's memory, as the engine counts it
/// (built by src/speculative.rs from the engine profile's `[speculative]` table).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DraftMemory {
    /// The draft's weights on one GPU, bytes, where the engine's memory profile counts them.
    pub weight_bytes: f64,
    /// KV bytes per token of the draft's attention layers on one GPU, in the target's pool.
    pub kv_bytes_per_token: f64,
    /// A fixed set-aside for the draft instead of counting it, bytes per GPU.
    pub reserved_bytes: f64,
    /// Tokens added to the pool beyond the profiled size (whole replica).
    pub headroom_tokens: u64,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// The widest activation of one token in a layer on one GPU: (attention projections' output,
/// MLP intermediate).
fn activation_widths(dep: &Deployment) -> (f64, f64) {
    let m = &dep.model;
    let tp = dep.tp as f64;
    let plain = m.mla.is_none() && dep.dp == 1 && dep.ep == 1 && m.shared_expert_params() == 0.0;
    if plain {
        let qkv = (m.q_dim() + 2 * m.kv_dim()) as f64 / tp;
        let f = m.expert_intermediate() as f64 / tp * m.experts_per_token() as f64;
        return (qkv, f);
    }
    let qkv = match &m.mla {
        Some(a) => {
            m.num_attention_heads as f64 / tp * (a.qk_nope_head_dim + a.qk_rope_head_dim) as f64
                + (a.kv_lora_rank + a.qk_rope_head_dim + a.q_lora_rank.unwrap_or(0)) as f64
        }
        None => (m.q_dim() + 2 * m.kv_dim()) as f64 / tp,
    };
    let dense = m.intermediate_size as f64 / tp;
    let moe = match &m.moe {
        // Pairs per token of the rank's budget on one GPU: all ranks' tokens x top-k, spread
        // over the expert-parallel ranks, each expert split the remaining ways.
        Some(x) => {
            let slice = m.expert_intermediate() as f64 / (dep.gpus() / dep.ep) as f64;
            slice * x.experts_per_token as f64 * dep.dp as f64 / dep.ep as f64
                + x.shared_expert_intermediate_size as f64 / tp
        }
        None => 0.0,
    };
    let f = if m.layers_with_mlp(crate::model::MlpKind::Dense) > 0 {
        dense.max(moe)
    } else {
        moe
    };
    (qkv, f)
}

fn activation_bytes(dep: &Deployment, max_batched_tokens: u32, max_num_seqs: u32) -> f64 {
    let m = &dep.model;
    let tp = dep.tp as f64;
    let h = m.hidden_size as f64;
    let (qkv, f) = activation_widths(dep);
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
    draft: &DraftMemory,
) -> MemoryPlan {
    let budget = dep.gpu.datasheet.memory_bytes * gpu_memory_utilization;
    let weights = dep.weight_bytes_per_gpu() + draft.weight_bytes;
    let act = activation_bytes(dep, max_batched_tokens, max_num_seqs);
    let reserved = dep.engine.host.runtime_reserved_bytes + draft.reserved_bytes;
    let kv = budget - weights - act - reserved;
    let (per_token, window_reserved) = kv_per_token(dep, kv, max_num_seqs, block_size, draft);
    // A pipeline stage keeps the KV of its `num_layers / pp` layers only.
    let per_token = if dep.pp > 1 {
        per_token / dep.pp as f64
    } else {
        per_token
    };
    let blocks = if kv - window_reserved > 0.0 {
        ((kv - window_reserved) / (per_token * block_size as f64)).floor() as u64
    } else {
        0
    };
    let blocks = blocks.saturating_mul(dep.dp.max(1) as u64);
    // The engine's headroom (SGLang) enlarges the pool by whole tokens; blocks here.
    let blocks = blocks.saturating_add(draft.headroom_tokens.div_ceil(block_size as u64));
    MemoryPlan {
        budget_bytes: budget,
        weight_bytes: weights,
        activation_bytes: act,
        reserved_bytes: reserved,
        kv_bytes: kv,
        kv_bytes_per_token: per_token,
        kv_window_reserved_bytes: window_reserved,
        kv_tokens: blocks * block_size as u64,
        kv_blocks: blocks,
        block_size,
        draft_weight_bytes: draft.weight_bytes,
        draft_kv_bytes_per_token: draft.kv_bytes_per_token,
        draft_reserved_bytes: draft.reserved_bytes,
        headroom_tokens: draft.headroom_tokens,
    }
}

/// The KV bytes per token the capacity counts on one GPU, and the bytes set aside for the
/// local layers' windows, for a pool of `kv` bytes. Without local (sliding-window or chunked)
/// layers every layer keeps every token. With them, vLLM's hybrid KV allocator takes every
/// layer's blocks from one pool and frees a local layer's blocks once they leave its window
/// (`SlidingWindowSpec`: at most `cdiv(window, block) + 1` blocks per decoding request;
/// `ChunkedLocalAttentionSpec`: the current chunk). The simulator allocates one block table
/// per request, so the capacity is counted in full-attention tokens under whichever of two
/// guarantees leaves more of them: every layer keeps every token (what vLLM logs as its KV
/// cache size), or the local layers' windows are set aside for `max_num_seqs` requests. An
/// engine whose local layers keep every token (`scheduler.local_kv_window_only = false`,
/// TensorRT-LLM) has only the first. A speculative draft's attention layers (full attention)
/// add their bytes to every token.
fn kv_per_token(
    dep: &Deployment,
    kv: f64,
    max_num_seqs: u32,
    block_size: u32,
    draft: &DraftMemory,
) -> (f64, f64) {
    let every_layer = dep.kv_bytes_per_token_per_gpu() + draft.kv_bytes_per_token;
    let m = &dep.model;
    let split = m.kv_per_token(1.0);
    let local_layers = (split.sliding_layers + split.chunked_layers) as f64;
    if local_layers == 0.0 || split.full_layers == 0 || !dep.engine.scheduler.local_kv_window_only {
        return (every_layer, 0.0);
    }
    let per_layer = dep.kv_bytes_per_token_layer_per_gpu();
    let bs = block_size as u64;
    let w = split.window_tokens;
    let window_tokens = if split.sliding_layers > 0 {
        (w.div_ceil(bs) + 1) * bs
    } else {
        w.div_ceil(bs) * bs
    };
    let reserve = max_num_seqs as f64 * window_tokens as f64 * local_layers * per_layer;
    let full = split.full_layers as f64 * per_layer + draft.kv_bytes_per_token;
    if (kv - reserve) / full > kv / every_layer {
        (full, reserve)
    } else {
        (every_layer, 0.0)
    }
}

/// Plans one GPU's memory, with what a speculative draft takes (`draft`;
/// `DraftMemory::default()` without one). Fails when the weights and workspace leave no room
/// for one sequence of `min_kv_tokens`, saying how much is missing and which TP degree would
/// fit.
pub fn plan_memory(
    dep: &Deployment,
    gpu_memory_utilization: f64,
    max_batched_tokens: u32,
    max_num_seqs: u32,
    block_size: u32,
    min_kv_tokens: u64,
    draft: &DraftMemory,
) -> Result<MemoryPlan> {
    let plan = plan_for(
        dep,
        gpu_memory_utilization,
        max_batched_tokens,
        max_num_seqs,
        block_size,
        draft,
    );
    let need = min_kv_tokens.max(block_size as u64) as f64 * plan.kv_bytes_per_token
        + plan.kv_window_reserved_bytes;
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
                    draft,
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
