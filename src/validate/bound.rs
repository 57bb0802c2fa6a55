//! A physical feasibility bound on an online reference row: from the row's published
//! description alone (model, GPUs, arrival rate, lengths, formats) and the GPU profile's
//! datasheet peaks, a lower bound on the GPU time each second of wall time the described load
//! needs. Nothing here is fitted or keyed to a row, model or GPU.
//!
//! Every term is a lower bound on work the load cannot avoid, so the bound can only be below
//! the truth:
//!
//! - **Compute**: every matrix multiplication of the forward passes at the datasheet's dense
//!   tensor-core peak (100%) for the narrowest math the row's weight formats allow (16-bit
//!   weights: the BF16 peak; FP8: the FP8 peak; 4-bit: the fastest peak the GPU has, as W4A8 and
//!   FP4 kernels may run). Each uncached prompt token (the shared system prompt counted as
//!   always cached) and each generated token but the last passes once through the
//!   parameters one token multiplies (attention projections, the dense MLP or the top-k experts
//!   with shared experts and router), 2 FLOP per parameter; the LM head runs once per generated
//!   token. Norms, biases, attention sinks and the attention scores themselves are left out.
//! - **Memory**: each iteration produces at most one token per running sequence (no
//!   speculative decoding; the reference rows describe none), and at most the largest batch the
//!   engine may form runs (`max_num_seqs` of every data-parallel rank, or the client's
//!   concurrency cap when smaller), so the iterations per second are at least the generated
//!   tokens per second over that batch. Each iteration reads the weights one token multiplies
//!   (in the narrowest of the row's formats) from HBM at least once, less whatever the whole
//!   replica's L2 could hold from the iteration before; each decode step reads the KV of its
//!   context (the uncached prompt and the tokens generated before it; a local-attention layer
//!   at most its window; with lengths drawn at random only the full-attention layers, and from a
//!   dataset only the generated part, so that the means give a bound by Jensen's inequality).
//!   All of it at the datasheet's HBM bandwidth (100%).
//! - The load spreads perfectly over every GPU of every replica, and compute and memory
//!   overlap perfectly: the bound is the larger of the two shares, not their sum.
//!
//! A bound above 1 says the described load cannot be served even at datasheet peak: the
//! published description cannot hold as written (the run served lighter work than described),
//! and `validate` sets such a row aside from the rows predicted saturated, printing the bound.

use serde::Serialize;

use super::{LoadKind, ReferenceRow};
use crate::error::Result;
use crate::precision::WeightDtype;

/// What the bound rests on, per request and per second: the described load, the model's
/// per-token work and the GPUs' datasheet rates (module docs for why each is a lower bound).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundInputs {
    /// Offered arrival rate, requests/s.
    pub requests_per_s: f64,
    /// Mean prompt tokens per request that no cache can serve (prompt less shared prefix; with
    /// distinct prompts that repeat, only at their first use: `ReferenceRow::uncached_prompt_tokens`).
    pub uncached_prompt_tokens: f64,
    /// Mean tokens generated per request.
    pub output_tokens: f64,
    /// Mean over requests of the context tokens the decode steps read, full-attention layers.
    pub kv_full_token_reads: f64,
    /// Mean over requests of the context tokens the decode steps read, local-attention layers.
    pub kv_local_token_reads: f64,
    /// Parameters one token multiplies in the decoder layers (no LM head, no norms).
    pub matmul_params: f64,
    /// LM head parameters (one pass per generated token).
    pub lm_head_params: f64,
    /// Bytes per weight element (the narrowest of the row's formats).
    pub weight_bytes_per_param: f64,
    /// KV bytes per token of the full-attention layers, whole model.
    pub kv_full_bytes_per_token: f64,
    /// KV bytes per token of the local-attention layers, whole model.
    pub kv_local_bytes_per_token: f64,
    /// Largest batch one replica may run, sequences.
    pub max_batch_seqs: f64,
    /// Replicas.
    pub replicas: f64,
    /// GPUs per replica.
    pub gpus_per_replica: f64,
    /// L2 cache per GPU, bytes.
    pub l2_bytes_per_gpu: f64,
    /// Dense tensor-core peak per GPU at the row's math, FLOP/s.
    pub peak_flops_per_s: f64,
    /// Datasheet HBM bandwidth per GPU, bytes/s.
    pub hbm_bandwidth_bytes_per_s: f64,
}

impl BoundInputs {
    /// GPUs of the whole deployment (replicas x GPUs per replica).
    pub fn gpus(&self) -> f64 {
        self.replicas * self.gpus_per_replica
    }
}

/// The lower bound on the GPU time one second of the described load needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasheetBound {
    /// Row id.
    pub id: String,
    /// What the bound was computed from.
    pub inputs: BoundInputs,
    /// Tensor-core FLOP per second of wall time the load needs, all GPUs together.
    pub flops_per_s: f64,
    /// HBM bytes per second of wall time the load needs, all GPUs together.
    pub hbm_bytes_per_s: f64,
    /// `flops_per_s` over all GPUs' datasheet peak: compute time per second per GPU.
    pub compute_share: f64,
    /// `hbm_bytes_per_s` over all GPUs' datasheet bandwidth: memory time per second per GPU.
    pub memory_share: f64,
    /// The bound: GPU time per second of wall time, per GPU (the larger share; dimensionless).
    pub gpu_time_per_s: f64,
}

impl DatasheetBound {
    /// Whether the described load cannot be served even at datasheet peak (bound above 1).
    pub fn infeasible(&self) -> bool {
        self.gpu_time_per_s > 1.0
    }
}

/// The bound from its inputs (module docs: every term a lower bound).
pub fn evaluate(id: &str, x: &BoundInputs) -> DatasheetBound {
    let r = x.requests_per_s;
    // Token passes through the decoder layers: uncached prompt tokens and every generated
    // token but the last (fed back for the next step).
    let body_tokens = x.uncached_prompt_tokens + (x.output_tokens - 1.0).max(0.0);
    let flops_per_s =
        r * 2.0 * (x.matmul_params * body_tokens + x.lm_head_params * x.output_tokens);
    // Iterations per second, all replicas: each gives each of at most `max_batch_seqs`
    // sequences one token.
    let iterations_per_s = r * x.output_tokens / x.max_batch_seqs.max(1.0);
    let weight_bytes = (x.matmul_params + x.lm_head_params) * x.weight_bytes_per_param;
    let l2_bytes = x.l2_bytes_per_gpu * x.gpus_per_replica;
    // A model whose weights fit in L2 gets no weight term (nor a KV one: L2 could hold it).
    let hbm_bytes_per_s = if weight_bytes > l2_bytes {
        iterations_per_s * (weight_bytes - l2_bytes)
            + r * (x.kv_full_token_reads * x.kv_full_bytes_per_token
                + x.kv_local_token_reads * x.kv_local_bytes_per_token)
    } else {
        0.0
    };
    let gpus = x.gpus();
    let compute_share = flops_per_s / (gpus * x.peak_flops_per_s);
    let memory_share = hbm_bytes_per_s / (gpus * x.hbm_bandwidth_bytes_per_s);
    DatasheetBound {
        id: id.to_string(),
        inputs: x.clone(),
        flops_per_s,
        hbm_bytes_per_s,
        compute_share,
        memory_share,
        gpu_time_per_s: compute_share.max(memory_share),
    }
}

/// `sum over k in 0..n of min(a + k, w)` (tokens), for `a, n >= 0`.
fn sum_capped(a: f64, n: f64, w: f64) -> f64 {
    let n = n.max(0.0);
    let below = (w - a).clamp(0.0, n);
    below * a + below * (below - 1.0).max(0.0) / 2.0 + (n - below) * w
}

/// Context tokens one request's decode steps read: step `j` (1..output) reads at least the
/// uncached prompt and the `j - 1` tokens generated before it; `window` caps a local layer.
fn context_reads(uncached: f64, output: f64, window: Option<f64>) -> f64 {
    let steps = (output - 1.0).max(0.0);
    match window {
        Some(w) => sum_capped(uncached, steps, w),
        None => steps * uncached + steps * (steps - 1.0).max(0.0) / 2.0,
    }
}

/// The dense tensor-core peak of the fastest math weights in `dtype` may run on `gpu`
/// (16-bit: BF16; FP8: FP8; 4-bit: the GPU's fastest), FLOP/s.
pub(super) fn peak_for(dtype: WeightDtype, sheet: &crate::gpu::Datasheet) -> f64 {
    let bf16 = sheet.bf16_flops_per_s;
    match dtype {
        WeightDtype::Bf16 | WeightDtype::Fp16 => bf16,
        WeightDtype::Fp8 => bf16.max(sheet.fp8_flops_per_s),
        WeightDtype::Fp4 | WeightDtype::Mxfp4 => {
            bf16.max(sheet.fp8_flops_per_s).max(sheet.fp4_flops_per_s)
        }
    }
}

/// The bound of an online row with an arrival rate (`None` for offline and closed-loop rows:
/// their load is the engine's own pace, not a described rate).
pub fn datasheet_bound(row: &ReferenceRow) -> Result<Option<DatasheetBound>> {
    let rate = match (row.kind, row.rate_rps) {
        (LoadKind::Online, Some(r)) if r > 0.0 => r,
        _ => return Ok(None),
    };
    let resolved = row
        .scenario()?
        .resolve(&format!("reference row {}", row.id))?;
    let d = &resolved.deployment;
    let m = &d.model;
    let formats = [d.formats.attention, d.formats.dense, d.formats.experts];
    let weight_bytes_per_param = formats
        .iter()
        .map(|f| f.bytes())
        .fold(f64::INFINITY, f64::min);
    let peak = formats
        .iter()
        .map(|&f| peak_for(f, &d.gpu.datasheet))
        .fold(0.0, f64::max);
    let lm_head = m.lm_head_params();
    let matmul_params = matmul_params(m);
    let kv = m.kv_per_token(d.kv_dtype.bytes());
    let (uncached, output, full, local) = request_reads(row, kv.window_tokens as f64);
    let max_batch = resolved.sim.scheduler.max_num_seqs as f64;
    let max_batch = resolved
        .sim
        .max_concurrency
        .map_or(max_batch, |c| max_batch.min(c as f64));
    let x = BoundInputs {
        requests_per_s: rate,
        uncached_prompt_tokens: uncached,
        output_tokens: output,
        kv_full_token_reads: full,
        kv_local_token_reads: local,
        matmul_params,
        lm_head_params: lm_head,
        weight_bytes_per_param,
        kv_full_bytes_per_token: kv.full_bytes,
        kv_local_bytes_per_token: kv.local_bytes,
        max_batch_seqs: max_batch,
        replicas: resolved.sim.replicas as f64,
        gpus_per_replica: d.gpus() as f64,
        l2_bytes_per_gpu: d.gpu.datasheet.l2_bytes,
        peak_flops_per_s: peak,
        hbm_bandwidth_bytes_per_s: d.gpu.datasheet.hbm_bandwidth_bytes_per_s,
    };
    Ok(Some(evaluate(&row.id, &x)))
}

/// Parameters one token multiplies on tensor cores in the decoder layers (no LM head): the
/// active parameters less the LM head, the norms (two per layer and the final one), MLA's
/// latent norms, the QKV bias and the attention sinks.
pub(super) fn matmul_params(m: &crate::model::ModelSpec) -> f64 {
    let h = m.hidden_size as f64;
    let layers = m.num_layers as f64;
    let mla_norms = m.mla.as_ref().map_or(0.0, |a| {
        (a.kv_lora_rank + a.q_lora_rank.unwrap_or(0)) as f64
    });
    let bias = if m.attention_bias {
        (m.q_dim() + 2 * m.kv_dim()) as f64
    } else {
        0.0
    };
    let sinks = if m.attention_sinks {
        m.num_attention_heads as f64
    } else {
        0.0
    };
    let not_matmul = layers * (2.0 * h + mla_norms + bias + sinks) + h;
    (m.active_params() - m.lm_head_params() - not_matmul).max(0.0)
}

/// Per-request means: (uncached prompt tokens, generated tokens, full-attention context
/// reads, local-attention context reads). Recorded per-request lengths are summed exactly;
/// fixed lengths are exact; lengths drawn independently around the means (`range_ratio`) keep
/// only the full-attention term (convex in the lengths, so the means bound it); a dataset's
/// own lengths keep only the generated part of it (input and output may be correlated).
fn request_reads(row: &ReferenceRow, window: f64) -> (f64, f64, f64, f64) {
    let win = (window > 0.0).then_some(window);
    if let Some(l) = &row.lens {
        let n = l.input.len().min(l.output.len()).max(1) as f64;
        let mut sums = (0.0, 0.0, 0.0, 0.0);
        for (&i, &o) in l.input.iter().zip(&l.output) {
            let u = row.uncached_prompt_tokens(i as f64);
            let o = o as f64;
            sums.0 += u;
            sums.1 += o;
            sums.2 += context_reads(u, o, None);
            sums.3 += win.map_or(0.0, |w| context_reads(u, o, Some(w)));
        }
        return (sums.0 / n, sums.1 / n, sums.2 / n, sums.3 / n);
    }
    let u = row.uncached_prompt_tokens(row.input_len as f64);
    let o = row.output_len as f64;
    let from_dataset = row
        .dataset
        .as_deref()
        .and_then(crate::workload::dataset)
        .is_some_and(|d| d.input.is_some() && d.output.is_some());
    if from_dataset {
        (u, o, context_reads(0.0, o, None), 0.0)
    } else if row.range_ratio.is_some() {
        (u, o, context_reads(u, o, None), 0.0)
    } else {
        let local = win.map_or(0.0, |w| context_reads(u, o, Some(w)));
        (u, o, context_reads(u, o, None), local)
    }
}

/// The bounds of every online row with an arrival rate, in the rows' order.
pub fn datasheet_bounds(rows: &[ReferenceRow]) -> Result<Vec<DatasheetBound>> {
    let mut out = Vec::new();
    for r in rows {
        out.extend(datasheet_bound(r)?);
    }
    Ok(out)
}

pub mod pair;

#[cfg(test)]
mod tests;
