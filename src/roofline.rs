//! The step-time model: how long one engine iteration takes on one tensor-parallel group, and
//! how much KV cache fits. DESIGN.md §3; the formulas are written out in docs/model.md.
//!
//! Every operator is a roofline term `fixed + max(bytes / bandwidth, flops / rate)` with the GPU
//! profile's calibrated curves; the per-layer and per-step fixed costs and the engine's host
//! overhead are separate, named terms of the [`StepBreakdown`].

pub mod kernels;
mod memory;

pub use memory::{plan_memory, MemoryPlan};

use serde::Serialize;

use crate::engine::EngineProfile;
use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::model::ModelSpec;
use crate::precision::{KvDtype, WeightDtype};

/// Bytes per activation element (activations are 16-bit whatever the weight format).
pub const ACT_BYTES: f64 = 2.0;

/// What runs where: a model on a GPU type, split over `tp` GPUs, in given formats.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The model.
    pub model: ModelSpec,
    /// The GPU type.
    pub gpu: GpuProfile,
    /// The serving engine.
    pub engine: EngineProfile,
    /// Tensor-parallel degree (GPUs per replica).
    pub tp: u32,
    /// Weight format.
    pub weight_dtype: WeightDtype,
    /// KV-cache format.
    pub kv_dtype: KvDtype,
}

impl Deployment {
    /// Checks that the TP degree splits the model: it must divide the attention heads, and the
    /// KV heads must divide by it or be replicated across it.
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        let tp = self.tp as u64;
        if tp == 0 {
            return Err(Error::Infeasible(
                "tensor-parallel size must be >= 1".into(),
            ));
        }
        if m.num_attention_heads % tp != 0 {
            let fits: Vec<String> = (1..=m.num_attention_heads.min(64))
                .filter(|t| m.num_attention_heads % t == 0 && t.is_power_of_two())
                .map(|t| t.to_string())
                .collect();
            return Err(Error::Infeasible(format!(
                "tensor-parallel size {tp} does not divide the {} attention heads of {}; use one of {}",
                m.num_attention_heads,
                m.name,
                fits.join(", ")
            )));
        }
        if tp <= m.num_kv_heads && m.num_kv_heads % tp != 0
            || tp > m.num_kv_heads && tp % m.num_kv_heads != 0
        {
            return Err(Error::Infeasible(format!(
                "tensor-parallel size {tp} neither divides nor is a multiple of the {} KV heads of {}",
                m.num_kv_heads, m.name
            )));
        }
        Ok(())
    }

    /// KV heads held by each GPU (replicated when TP exceeds the KV heads).
    pub fn kv_heads_per_gpu(&self) -> u64 {
        (self.model.num_kv_heads / self.tp as u64).max(1)
    }

    /// KV-cache bytes per token on each GPU.
    pub fn kv_bytes_per_token_per_gpu(&self) -> f64 {
        2.0 * self.model.num_layers as f64
            * (self.kv_heads_per_gpu() * self.model.head_dim) as f64
            * self.kv_dtype.bytes()
    }

    /// Weight bytes held by each GPU: linear layers in the weight format, embeddings and
    /// LM head (vocab-parallel) in 16 bits, norms replicated.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        let m = &self.model;
        let tp = self.tp as f64;
        let lp = m.layer_params();
        let experts = m.num_experts() as f64;
        let linear = lp.qkv + lp.o + experts * (lp.gate_up + lp.down) + lp.router;
        let head = if m.tie_word_embeddings {
            0.0
        } else {
            m.lm_head_params()
        };
        let per_layer = linear / tp * self.weight_dtype.bytes() + lp.norms * ACT_BYTES;
        m.num_layers as f64 * per_layer + (m.embedding_params() + head) / tp * ACT_BYTES
    }

    /// Whether the weight GEMMs run on FP8 tensor cores (FP8 weights on a GPU that has them).
    pub fn fp8_gemms(&self) -> bool {
        self.weight_dtype == WeightDtype::Fp8 && self.gpu.supports_fp8()
    }
}

/// The shape of one iteration's batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BatchShape {
    /// Requests decoding one token each.
    pub decode_seqs: u32,
    /// Sum over decoding requests of the context each attends to (tokens).
    pub decode_context_tokens: u64,
    /// Of `decode_context_tokens`: repeat reads of shared-prefix KV blocks, i.e. tokens of a
    /// cached prefix that more than one decoding request attends to, counted once per request
    /// after the first. Their KV is the same memory; the repeats hit L2 when the prefix fits.
    pub decode_prefix_repeat_tokens: u64,
    /// Distinct shared-prefix tokens read by the decoding requests (each cached prefix once).
    pub decode_prefix_distinct_tokens: u64,
    /// Prompt tokens prefilled in this iteration (all chunks).
    pub prefill_tokens: u32,
    /// Requests with a prefill chunk in this iteration.
    pub prefill_seqs: u32,
    /// Causal-attention work of the prefill chunks: sum of `chunk x prior + chunk^2 / 2`
    /// (token^2 units).
    pub prefill_attention_units: f64,
    /// Requests whose logits are computed (decodes plus prefills that finish their prompt).
    pub sampled_seqs: u32,
}

impl BatchShape {
    /// A pure decode batch of `batch` requests each attending to `context` tokens.
    pub fn decode(batch: u32, context: u64) -> Self {
        BatchShape {
            decode_seqs: batch,
            decode_context_tokens: batch as u64 * context,
            sampled_seqs: batch,
            ..Default::default()
        }
    }

    /// Records that the decoding requests share cached prefixes: `per_request` prefix tokens
    /// summed over the decoding requests that use one, `distinct` tokens over the prefixes.
    pub fn with_shared_prefixes(mut self, per_request: u64, distinct: u64) -> Self {
        debug_assert!(distinct <= per_request && per_request <= self.decode_context_tokens);
        self.decode_prefix_repeat_tokens = per_request.saturating_sub(distinct);
        self.decode_prefix_distinct_tokens = distinct;
        self
    }

    /// A pure decode batch of `batch` requests attending to `total_context` tokens in all.
    pub fn decode_total(batch: u32, total_context: u64) -> Self {
        BatchShape {
            decode_seqs: batch,
            decode_context_tokens: total_context,
            sampled_seqs: batch,
            ..Default::default()
        }
    }

    /// Adds one prefill chunk of `chunk` tokens after `prior` already-cached tokens.
    pub fn add_prefill(&mut self, chunk: u32, prior: u64, finishes_prompt: bool) {
        let c = chunk as f64;
        self.prefill_tokens += chunk;
        self.prefill_seqs += 1;
        self.prefill_attention_units += c * prior as f64 + c * c / 2.0;
        if finishes_prompt {
            self.sampled_seqs += 1;
        }
    }

    /// Tokens processed by the weight GEMMs.
    pub fn tokens(&self) -> u32 {
        self.decode_seqs + self.prefill_tokens
    }
}

/// Time of one iteration by operator class, seconds (per TP group; all GPUs run in lockstep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepBreakdown {
    /// Weight GEMMs of all layers (QKV, O, MLP/experts, router).
    pub gemm_s: f64,
    /// Of `gemm_s`: the part that streams weights at the measured bandwidth.
    pub weight_stream_s: f64,
    /// LM head for the sampled tokens.
    pub lm_head_s: f64,
    /// Decode and prefill attention.
    pub attention_s: f64,
    /// Tensor-parallel all-reduces.
    pub allreduce_s: f64,
    /// Norms, rotary, activation, residual adds, embedding, sampling.
    pub small_ops_s: f64,
    /// Kernel-launch time not hidden by CUDA graphs (0 when graphs are replayed).
    pub launch_s: f64,
    /// Engine host overhead (scheduling, input preparation, output processing).
    pub host_s: f64,
    /// Of the host and launch time, the part hidden under the GPU's work by an engine that
    /// prepares the next iteration while the GPU runs this one (subtracted from the sum).
    pub host_overlap_s: f64,
    /// The iteration: the sum of the above less `host_overlap_s`.
    pub total_s: f64,
}

/// Per-layer GEMM shapes on one GPU: (weight elements, input width, output width).
#[derive(Debug, Clone, Copy)]
struct GemmShape {
    weights: f64,
    k: f64,
    n: f64,
    /// Whether this is an expert GEMM (weights are per expert).
    expert: bool,
}

/// The step-time model of one deployment, with the per-token-count terms precomputed.
#[derive(Debug, Clone)]
pub struct StepTimeModel {
    dep: Deployment,
    layers: f64,
    gemms: Vec<GemmShape>,
    router_weights: f64,
    lm_head: GemmShape,
    kv_bytes_per_ctx_token_layer: f64,
    q_width: f64,
    /// The GPU curves of kernels queued back to back: every kernel's fixed time is shorter by
    /// the launch latency that isolated kernel timings include, since in an iteration the
    /// kernels are queued back to back (replayed from a CUDA graph, or launched by a host that
    /// runs ahead of the GPU). When the host cannot run ahead (no graph, short kernels),
    /// [`StepTimeModel::launch_time`] bounds the step by the launches instead.
    queued_gpu: GpuProfile,
    /// GEMM rate the attention math runs at (FP8 with an FP8 KV cache on FP8 hardware).
    attention_rate: f64,
    elementwise_bytes_per_token_layer: f64,
    small_kernels_per_layer: f64,
    kernels_per_layer: f64,
    /// Largest all-reduce message the engine's own NVLink kernels take at this TP degree,
    /// bytes (0: always NCCL).
    custom_allreduce_max_bytes: f64,
    /// Intermediate width of one expert on this GPU (MoE models; experts split by TP).
    expert_inter: f64,
    /// Precomputed token-count-dependent time (GEMMs, small ops, all-reduce) in ns, by tokens.
    table_ns: Vec<u64>,
    /// Multiplier on every step time, dimensionless (1 = as modelled; 1.2 = 20% slower).
    time_scale: f64,
}

impl StepTimeModel {
    /// Builds the model for a deployment; `max_tokens` sizes the precomputed table.
    pub fn new(dep: Deployment, max_tokens: u32) -> Result<Self> {
        dep.validate()?;
        let m = &dep.model;
        let tp = dep.tp as f64;
        let h = m.hidden_size as f64;
        let q = m.q_dim() as f64 / tp;
        let kv = (dep.kv_heads_per_gpu() * m.head_dim) as f64;
        let f = m.intermediate_size as f64 / tp;
        let gemms = vec![
            GemmShape {
                weights: h * (q + 2.0 * kv),
                k: h,
                n: q + 2.0 * kv,
                expert: false,
            },
            GemmShape {
                weights: q * h,
                k: q,
                n: h,
                expert: false,
            },
            GemmShape {
                weights: h * 2.0 * f,
                k: h,
                n: 2.0 * f,
                expert: m.moe.is_some(),
            },
            GemmShape {
                weights: f * h,
                k: f,
                n: h,
                expert: m.moe.is_some(),
            },
        ];
        let v = m.vocab_size as f64 / tp;
        let kv_bytes = dep.kv_dtype.bytes();
        let mut model = StepTimeModel {
            layers: m.num_layers as f64,
            gemms,
            router_weights: if m.moe.is_some() {
                h * m.num_experts() as f64
            } else {
                0.0
            },
            lm_head: GemmShape {
                weights: h * v,
                k: h,
                n: v,
                expert: false,
            },
            kv_bytes_per_ctx_token_layer: 2.0 * kv * kv_bytes,
            q_width: q,
            queued_gpu: {
                let mut g = dep.gpu.clone();
                let hidden = g.small_ops.launch_s;
                g.gemm.fixed_s = (g.gemm.fixed_s - hidden).max(0.0);
                g.attention.fixed_s = (g.attention.fixed_s - hidden).max(0.0);
                g.small_ops.kernel_s = (g.small_ops.kernel_s - hidden).max(0.0);
                g
            },
            attention_rate: if dep.kv_dtype == KvDtype::Fp8 && dep.gpu.supports_fp8() {
                dep.gpu.gemm.fp8_flops_per_s
            } else {
                dep.gpu.gemm.bf16_flops_per_s
            },
            // Serving engines fuse the residual add into RMSNorm (vLLM fused_add_rms_norm,
            // TensorRT-LLM's fused residual norm): 2 such kernels (read 2h, write 2h), rotary
            // on q and k (read+write), SiLU-and-mul (read 2f, write f; for MoE it is part of
            // the fused-MoE chain); 16-bit activations.
            elementwise_bytes_per_token_layer: (8.0 * h
                + 2.0 * (q + kv)
                + if m.moe.is_some() { 0.0 } else { 3.0 * f })
                * ACT_BYTES,
            small_kernels_per_layer: if m.moe.is_some() { 3.0 } else { 4.0 },
            expert_inter: f,
            kernels_per_layer: 4.0 + 4.0 + 1.0 + if dep.tp > 1 { 2.0 } else { 0.0 },
            custom_allreduce_max_bytes: if dep.engine.scheduler.custom_allreduce {
                dep.engine
                    .allreduce
                    .custom_max_bytes(dep.tp)
                    .unwrap_or(f64::INFINITY)
            } else {
                0.0
            },
            table_ns: Vec::new(),
            time_scale: 1.0,
            dep,
        };
        let n = max_tokens as usize + 1;
        let mut table = Vec::with_capacity(n);
        for t in 0..n {
            let (gemm, _, small, ar) = model.token_terms(t as f64);
            table.push(secs_to_ns(gemm + small + ar));
        }
        model.table_ns = table;
        Ok(model)
    }

    /// One GEMM of this deployment's weight format; returns (time, streaming part).
    fn gemm_time(&self, g: &GpuProfile, weights: f64, k: f64, n: f64, tokens: f64) -> (f64, f64) {
        debug_assert!((weights - k * n).abs() <= 1e-6 * weights.max(1.0));
        kernels::gemm_s(
            g,
            tokens,
            k,
            n,
            self.dep.weight_dtype.bytes(),
            self.dep.fp8_gemms(),
        )
    }

    /// Token-count terms for the whole model: (gemm, weight-stream part, small ops, all-reduce).
    fn token_terms(&self, tokens: f64) -> (f64, f64, f64, f64) {
        if tokens <= 0.0 {
            return (0.0, 0.0, 0.0, 0.0);
        }
        let g = &self.queued_gpu;
        let m = &self.dep.model;
        let mut gemm = 0.0;
        let mut stream = 0.0;
        let mut moe_small = 0.0;
        for s in self.gemms.iter().filter(|s| !s.expert) {
            let (t, st) = self.gemm_time(g, s.weights, s.k, s.n, tokens);
            gemm += t;
            stream += st;
        }
        if let Some(moe) = &m.moe {
            let (t, st, routing) = kernels::fused_moe_s(
                g,
                tokens,
                moe.num_experts as f64,
                moe.experts_per_token as f64,
                m.hidden_size as f64,
                self.expert_inter,
                self.dep.weight_dtype.bytes(),
                self.dep.fp8_gemms(),
            );
            gemm += t;
            stream += st;
            moe_small = routing;
        }
        if self.router_weights > 0.0 {
            gemm += self
                .gemm_time(
                    g,
                    self.router_weights,
                    m.hidden_size as f64,
                    m.num_experts() as f64,
                    tokens,
                )
                .0;
        }
        let small = self.small_kernels_per_layer
            * kernels::small_op_s(
                g,
                tokens * self.elementwise_bytes_per_token_layer / self.small_kernels_per_layer,
            )
            + moe_small;
        let ar = 2.0
            * kernels::engine_allreduce_s(
                g,
                tokens * m.hidden_size as f64 * ACT_BYTES,
                self.dep.tp,
                self.custom_allreduce_max_bytes,
            );
        (
            self.layers * gemm,
            self.layers * stream,
            self.layers * small,
            self.layers * ar,
        )
    }

    /// The time of one iteration with its breakdown by operator class.
    pub fn breakdown(&self, b: &BatchShape) -> StepBreakdown {
        let tokens = b.tokens() as f64;
        if tokens <= 0.0 {
            return StepBreakdown::default();
        }
        let g = &self.queued_gpu;
        let (gemm_s, weight_stream_s, layer_small, allreduce_s) =
            self.token_terms(self.padded_tokens(b) as f64);
        let sampled = self.lm_head_rows(b);
        let (lm_head_s, _) = self.gemm_time(
            g,
            self.lm_head.weights,
            self.lm_head.k,
            self.lm_head.n,
            sampled,
        );
        let attention_s = self.attention_time(b);
        // Per step: embedding gather, final norm, sampling (3 small kernels).
        let small_ops_s = layer_small + 3.0 * g.small_ops.kernel_s;
        let gpu_s = gemm_s + lm_head_s + attention_s + allreduce_s + small_ops_s;
        let (launch_s, host_s, host_overlap_s) = self.host_terms(b, gpu_s);
        StepBreakdown {
            gemm_s,
            weight_stream_s,
            lm_head_s,
            attention_s,
            allreduce_s,
            small_ops_s,
            launch_s,
            host_s,
            host_overlap_s,
            total_s: gpu_s + launch_s + host_s - host_overlap_s,
        }
    }

    /// The host side of an iteration that keeps the GPU busy for `gpu_s`: (launch time not
    /// hidden under the GPU, host time, hidden part of the host time). Without CUDA graphs the
    /// host issues every kernel, and the GPU cannot finish before the last launch. An engine
    /// that schedules synchronously adds its host time to the iteration; one that schedules
    /// asynchronously prepares the next iteration while the GPU runs, so the iteration takes
    /// the longer of the two.
    fn host_terms(&self, b: &BatchShape, gpu_s: f64) -> (f64, f64, f64) {
        let cpu_launch_s = self.cpu_launch_time(b);
        let launch_s = (cpu_launch_s - gpu_s).max(0.0);
        let host_s = self.host_time(b);
        let overlap_s = if self.dep.engine.scheduler.async_scheduling {
            let total = gpu_s.max(cpu_launch_s + host_s);
            gpu_s + launch_s + host_s - total
        } else {
            0.0
        };
        (launch_s, host_s, overlap_s)
    }

    /// Decode context tokens whose KV comes from HBM: all of it, less the repeat reads of a
    /// shared prefix when the distinct prefix KV of one layer fits in half the L2 (the blocks
    /// are the same memory, read by concurrent CTAs of the same kernel; the other half of the
    /// L2 is left to the streaming KV of the other requests).
    fn decode_hbm_context_tokens(&self, b: &BatchShape) -> f64 {
        b.decode_context_tokens as f64 - self.decode_l2_repeat_tokens(b)
    }

    /// Of the decode context, the repeat reads of shared prefixes served by L2 (see
    /// [`StepTimeModel::decode_hbm_context_tokens`]), tokens.
    fn decode_l2_repeat_tokens(&self, b: &BatchShape) -> f64 {
        let distinct_bytes =
            b.decode_prefix_distinct_tokens as f64 * self.kv_bytes_per_ctx_token_layer;
        if b.decode_prefix_repeat_tokens > 0
            && distinct_bytes <= self.dep.gpu.datasheet.l2_bytes / 2.0
        {
            b.decode_prefix_repeat_tokens as f64
        } else {
            0.0
        }
    }

    fn attention_time(&self, b: &BatchShape) -> f64 {
        let g = &self.queued_gpu;
        let per_layer = kernels::decode_attention_s(
            g,
            b.decode_context_tokens as f64,
            self.decode_hbm_context_tokens(b),
            self.kv_bytes_per_ctx_token_layer,
            self.q_width,
        ) + kernels::prefill_attention_at_rate_s(
            g,
            b.prefill_attention_units,
            b.prefill_tokens as f64,
            self.q_width,
            self.attention_rate,
        );
        self.layers * per_layer
    }

    /// Whether the iteration replays a CUDA graph: the engine captures graphs, the iteration
    /// is within the captured sizes, and it is a pure decode or the engine graphs mixed
    /// iterations too.
    fn graphed(&self, b: &BatchShape) -> bool {
        let s = &self.dep.engine.scheduler;
        s.cuda_graphs
            && b.tokens() <= s.graph_limit_tokens()
            && (s.cuda_graph_mixed || b.prefill_tokens == 0)
    }

    /// Tokens the GEMMs, small ops and all-reduces run on: a graphed iteration is padded to
    /// the smallest captured size that holds it.
    fn padded_tokens(&self, b: &BatchShape) -> u32 {
        let t = b.tokens();
        if !self.graphed(b) {
            return t;
        }
        self.dep.engine.scheduler.graph_size(t)
    }

    /// Host time spent launching the iteration's kernels: none when a CUDA graph is replayed,
    /// otherwise one launch per kernel.
    fn cpu_launch_time(&self, b: &BatchShape) -> f64 {
        if self.graphed(b) {
            return 0.0;
        }
        let n_kernels = self.layers * self.kernels_per_layer + 4.0;
        n_kernels * kernels::empty_kernel_s(&self.dep.gpu)
    }

    /// Sequences whose logits the LM head computes: the sampled ones, or for a padded pure
    /// decode the whole padded batch.
    fn lm_head_rows(&self, b: &BatchShape) -> f64 {
        let sampled = b.sampled_seqs.max(1);
        if b.prefill_tokens == 0 {
            sampled.max(self.padded_tokens(b)) as f64
        } else {
            sampled as f64
        }
    }

    fn host_time(&self, b: &BatchShape) -> f64 {
        let h = &self.dep.engine.host;
        h.per_iteration_s + h.per_sequence_s * (b.decode_seqs + b.prefill_seqs) as f64
    }

    /// The token-count terms of a step (GEMMs, small ops, all-reduce) for `t` padded tokens,
    /// ns: from the precomputed table, or computed past its end.
    #[inline]
    fn token_table_ns(&self, t: usize) -> u64 {
        match self.table_ns.get(t) {
            Some(&ns) => ns,
            None => {
                let (gemm, _, small, ar) = self.token_terms(t as f64);
                secs_to_ns(gemm + small + ar)
            }
        }
    }

    /// The step time of decode-only batches shaped like `b` (its sequences, padding and shared
    /// prefixes; its context is ignored) as an exact integer function of the total context:
    /// the upper envelope of a few lines in fixed point. The simulator times every decode-only
    /// iteration with it, so a run of iterations of one batch can be summed in integers
    /// (the fast-forward) and equal, bit for bit, the iterations timed one by one.
    pub fn decode_step(&self, b: &BatchShape) -> DecodeStep {
        debug_assert_eq!(b.prefill_tokens, 0);
        let table = self.token_table_ns(self.padded_tokens(b) as usize);
        let g = &self.queued_gpu;
        let lm =
            self.gemm_time(
                g,
                self.lm_head.weights,
                self.lm_head.k,
                self.lm_head.n,
                self.lm_head_rows(b),
            )
            .0 + 3.0 * g.small_ops.kernel_s;
        // The GPU time is `base + layers x (fixed + max(hbm x kv / bw, 4 q ctx / rate))` with
        // hbm = ctx less the L2-served repeat reads (kernels::decode_attention_s): two lines.
        let base = table as f64 * 1e-9 + lm + self.layers * g.attention.fixed_s;
        let bw = g.memory.stream_bandwidth_bytes_per_s * g.attention.decode_bandwidth_fraction;
        let rate = g.gemm.bf16_flops_per_s * g.attention.prefill_flops_fraction;
        let repeat = self.decode_l2_repeat_tokens(b);
        let mem_slope = self.layers * self.kv_bytes_per_ctx_token_layer / bw;
        let flop_slope = self.layers * 4.0 * self.q_width / rate;
        // Host side (host_terms): a synchronous engine adds its host time to the longer of the
        // GPU and the launches; an asynchronous one takes the longer of the GPU and the host.
        let launch = self.cpu_launch_time(b);
        let host = self.host_time(b);
        let (gpu_extra, host_line) = if self.dep.engine.scheduler.async_scheduling {
            (0.0, launch + host)
        } else {
            (host, launch + host)
        };
        let scale = self.time_scale;
        DecodeStep::new(
            &[
                (base + gpu_extra - repeat * mem_slope, mem_slope),
                (base + gpu_extra, flop_slope),
                (host_line, 0.0),
                // An iteration takes at least 1 ns.
                (1e-9, 0.0),
            ],
            scale,
        )
    }

    /// Iteration time in integer nanoseconds, from the precomputed table (the simulator's path).
    /// Equals `breakdown(b).total_s` rounded, up to the table's per-term rounding; decode-only
    /// batches are timed by [`StepTimeModel::decode_step`].
    #[inline]
    pub fn step_ns(&self, b: &BatchShape) -> u64 {
        if b.tokens() == 0 {
            return 0;
        }
        if b.prefill_tokens == 0 {
            return self.decode_step(b).ns_at(b.decode_context_tokens);
        }
        let table = self.token_table_ns(self.padded_tokens(b) as usize);
        let g = &self.queued_gpu;
        let sampled = self.lm_head_rows(b);
        let lm =
            self.gemm_time(
                g,
                self.lm_head.weights,
                self.lm_head.k,
                self.lm_head.n,
                sampled,
            )
            .0 + 3.0 * g.small_ops.kernel_s;
        let attn = self.attention_time(b);
        let gpu_s = table as f64 * 1e-9 + lm + attn;
        let (launch, host, overlap) = self.host_terms(b, gpu_s);
        let rest = lm + attn + launch + host - overlap;
        let ns = (table + secs_to_ns(rest)).max(1);
        if self.time_scale == 1.0 {
            ns
        } else {
            ((ns as f64 * self.time_scale).round() as u64).max(1)
        }
    }

    /// The same model with every step time multiplied by `scale` (> 0): what-if the GPUs or
    /// the engine run slower (> 1) or faster (< 1) than modelled.
    pub fn with_time_scale(mut self, scale: f64) -> Self {
        self.time_scale = scale;
        self
    }
}

/// Fraction bits of [`DecodeStep`]'s fixed-point lines (units of 2^-24 ns).
pub const DECODE_STEP_FRACTION_BITS: u32 = 24;

/// The time of a decode-only iteration of a fixed batch as a function of its total context
/// `c` (tokens): `floor(max_j(a_j + s_j c) / 2^24)` ns with integer intercepts `a_j` (rounding
/// included) and slopes `s_j` in units of 2^-24 ns. Being integer, a run of iterations whose
/// context grows by the batch size each time can be timed and summed exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeStep {
    /// (intercept, slope per context token), 2^-24 ns; slopes are >= 0.
    lines: [(i128, i128); 4],
}

impl DecodeStep {
    /// The envelope of `(intercept_s, slope_s_per_token)` lines, each multiplied by `scale`.
    fn new(lines_s: &[(f64, f64); 4], scale: f64) -> Self {
        let unit = scale * 1e9 * (1u64 << DECODE_STEP_FRACTION_BITS) as f64;
        // Far beyond any step time, small enough that `a + s c` cannot overflow for any u64 `c`
        // with a slope in range.
        const CAP: f64 = 1e30;
        let fixed = |v: f64| -> i128 {
            let x = v * unit;
            if x.is_nan() {
                0
            } else if x.abs() < 9e18 {
                // The common case, without the slow float-to-i128 conversion (truncated: a
                // 2^-24 ns unit is far below the 1 ns the step is rounded to).
                x as i64 as i128
            } else {
                x.clamp(-CAP, CAP).round() as i128
            }
        };
        let half = 1i128 << (DECODE_STEP_FRACTION_BITS - 1);
        let mut lines = [(0, 0); 4];
        for (l, &(a, s)) in lines.iter_mut().zip(lines_s.iter()) {
            *l = (fixed(a) + half, fixed(s).clamp(0, (1i128 << 62) - 1));
        }
        DecodeStep { lines }
    }

    /// The lines, (intercept, slope per context token) in 2^-24 ns.
    pub fn lines(&self) -> &[(i128, i128); 4] {
        &self.lines
    }

    /// The envelope at total context `ctx`, 2^-24 ns.
    #[inline]
    pub fn fixed_at(&self, ctx: u64) -> i128 {
        let c = ctx as i128;
        self.lines
            .iter()
            .map(|&(a, s)| a + s * c)
            .max()
            .unwrap_or(0)
    }

    /// The iteration time at total context `ctx`, ns (at least 1).
    #[inline]
    pub fn ns_at(&self, ctx: u64) -> u64 {
        let x = self.fixed_at(ctx) >> DECODE_STEP_FRACTION_BITS;
        x.clamp(1, u64::MAX as i128) as u64
    }
}

/// Seconds to integer nanoseconds, rounding to nearest; negative or non-finite become 0.
pub fn secs_to_ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::load_model;

    fn model(name: &str, gpu: &str, tp: u32) -> StepTimeModel {
        // The tests read `dep` back from the model to vary one thing at a time.
        let dep = Deployment {
            model: load_model(name).unwrap(),
            gpu: GpuProfile::load(gpu).unwrap(),
            engine: EngineProfile::load("vllm").unwrap(),
            tp,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Auto,
        };
        StepTimeModel::new(dep, 2048).unwrap()
    }

    #[test]
    fn shared_prefix_repeats_are_read_from_l2_when_the_prefix_fits() {
        let m = model("llama-2-7b", "h100-sxm", 1);
        let plain = BatchShape::decode(64, 700);
        // 64 requests share a 96-token prefix: 63 x 96 repeat reads, 96 distinct tokens
        // (1.6 MB of KV per layer, well inside half the 50 MB L2).
        let shared = plain.with_shared_prefixes(64 * 96, 96);
        let (a, b) = (m.breakdown(&plain), m.breakdown(&shared));
        assert!(b.attention_s < a.attention_s, "{a:?} {b:?}");
        // The saving is the repeat reads' share of the KV bytes (the fixed time aside).
        let saved = 1.0 - b.attention_s / a.attention_s;
        let repeat_share = (63.0 * 96.0) / (64.0 * 700.0);
        assert!(
            (saved - repeat_share).abs() < 0.01,
            "{saved} vs {repeat_share}"
        );
        assert_eq!(a.gemm_s, b.gemm_s);
        // The simulator's path (the precomputed table) sees the same saving.
        let ns = m.step_ns(&shared) as i64;
        assert!(
            (ns - secs_to_ns(b.total_s) as i64).abs() <= 2,
            "{ns} vs {b:?}"
        );
    }

    #[test]
    fn asynchronous_scheduling_hides_host_time_under_the_gpu() {
        let mut dep = model("llama-3.1-8b", "h100-sxm", 1).dep;
        dep.engine.host.per_iteration_s = 1e-3;
        dep.engine.host.per_sequence_s = 0.0;
        let b = BatchShape::decode(64, 1000);
        dep.engine.scheduler.async_scheduling = false;
        let sync = StepTimeModel::new(dep.clone(), 2048).unwrap().breakdown(&b);
        dep.engine.scheduler.async_scheduling = true;
        let asyn = StepTimeModel::new(dep.clone(), 2048).unwrap().breakdown(&b);
        let gpu = sync.total_s - sync.host_s;
        assert!(gpu > 1e-3, "{sync:?}");
        assert!((sync.total_s - (gpu + 1e-3)).abs() < 1e-12);
        // The GPU takes longer than the host: the host time disappears.
        assert!((asyn.total_s - gpu).abs() < 1e-12, "{asyn:?}");
        assert!((asyn.host_overlap_s - 1e-3).abs() < 1e-12);
        // A host slower than the GPU sets the pace instead.
        dep.engine.host.per_iteration_s = 2.0 * gpu;
        let m = StepTimeModel::new(dep, 2048).unwrap();
        let slow = m.breakdown(&b);
        assert!((slow.total_s - 2.0 * gpu).abs() < 1e-12, "{slow:?}");
        assert!((m.step_ns(&b) as i64 - secs_to_ns(slow.total_s) as i64).abs() <= 2);
    }

    #[test]
    fn graphed_decodes_run_the_padded_size_and_mixed_ones_do_not() {
        let mut dep = model("llama-3.1-70b", "h100-sxm", 4).dep;
        dep.weight_dtype = WeightDtype::Fp8;
        dep.engine = EngineProfile::load("trtllm").unwrap();
        dep.engine.scheduler.max_num_seqs = 1024;
        let m = StepTimeModel::new(dep, 4096).unwrap();
        // 300 decodes run the 384-graph: GEMMs as for 384 tokens, attention for 300 requests.
        let d300 = m.breakdown(&BatchShape::decode(300, 500));
        let d384 = m.breakdown(&BatchShape::decode(384, 500));
        assert_eq!(d300.gemm_s, d384.gemm_s);
        assert!(d300.attention_s < d384.attention_s);
        // With a prefill chunk the iteration is eager (TensorRT-LLM): no padding.
        let mut mixed = BatchShape::decode(300, 500);
        mixed.add_prefill(20, 0, true);
        let mut mixed_384 = BatchShape::decode(364, 500);
        mixed_384.add_prefill(20, 0, true);
        assert!(m.breakdown(&mixed).gemm_s < m.breakdown(&mixed_384).gemm_s);
        // The simulator's path agrees with the breakdown.
        let ns = m.step_ns(&BatchShape::decode(300, 500)) as i64;
        assert!(
            (ns - secs_to_ns(d300.total_s) as i64).abs() <= 3,
            "{ns} {d300:?}"
        );
    }

    #[test]
    fn engines_switch_to_nccl_above_their_custom_all_reduce_size() {
        let mut dep = model("llama-3.1-70b", "h100-sxm", 8).dep;
        dep.engine = EngineProfile::load("trtllm").unwrap();
        dep.engine.scheduler.cuda_graphs = false;
        let m = StepTimeModel::new(dep.clone(), 4096).unwrap();
        // 16 tokens x 8192 x 2 B = 256 KiB: custom; 128 tokens = 2 MiB: NCCL at TP 8.
        let small = m.breakdown(&BatchShape::decode(16, 100)).allreduce_s;
        let large = m.breakdown(&BatchShape::decode(128, 100)).allreduce_s;
        let per_layer = |s: f64| s / (2.0 * 80.0);
        assert!(per_layer(small) < 12e-6, "{small}");
        assert!(per_layer(large) > dep.gpu.allreduce.latency_s, "{large}");
        // vLLM keeps its symmetric-memory path up to 64 MiB at TP 8.
        dep.engine = EngineProfile::load("vllm").unwrap();
        dep.engine.scheduler.cuda_graphs = false;
        let v = StepTimeModel::new(dep.clone(), 4096).unwrap();
        let vl = v.breakdown(&BatchShape::decode(128, 100)).allreduce_s;
        assert!(per_layer(vl) < dep.gpu.allreduce.latency_s, "{vl}");
    }

    #[test]
    fn moe_layers_cost_the_fused_moe_chain_of_the_experts_they_wake() {
        let m = model("mixtral-8x7b", "h100-sxm", 2);
        let dep = &m.dep;
        let per_layer = |t: f64| {
            let (gemm, _, routing) = kernels::fused_moe_s(
                &m.queued_gpu,
                t,
                8.0,
                2.0,
                4096.0,
                14336.0 / 2.0,
                dep.weight_dtype.bytes(),
                false,
            );
            (gemm, routing)
        };
        // One token wakes 2 of 8 experts, 64 tokens nearly all 8: the weights read grow ~4x.
        let (one, r1) = per_layer(1.0);
        let (many, r64) = per_layer(64.0);
        assert!(many > 3.0 * one, "{one} {many}");
        assert!(r64 > r1 && r1 > 0.0);
        // The step model charges exactly that chain per layer, beside the dense GEMMs.
        let b = m.breakdown(&BatchShape::decode(1, 100));
        let dense: f64 = m
            .gemms
            .iter()
            .filter(|g| !g.expert)
            .map(|g| m.gemm_time(&m.queued_gpu, g.weights, g.k, g.n, 1.0).0)
            .sum::<f64>()
            + m.gemm_time(&m.queued_gpu, m.router_weights, 4096.0, 8.0, 1.0)
                .0;
        assert!(
            (b.gemm_s - 32.0 * (dense + one)).abs() < 1e-9 * b.gemm_s,
            "{b:?}"
        );
        // A grouped-GEMM rate below the dense one makes the experts' math slower, not their
        // weight reads.
        let mut slow = m.queued_gpu.clone();
        slow.moe.grouped_flops_fraction = 0.25;
        let big = kernels::fused_moe_s(&slow, 4096.0, 8.0, 2.0, 4096.0, 7168.0, 2.0, false).0;
        let fast =
            kernels::fused_moe_s(&m.queued_gpu, 4096.0, 8.0, 2.0, 4096.0, 7168.0, 2.0, false).0;
        assert!(big > 1.5 * fast, "{big} {fast}");
    }

    #[test]
    fn a_shared_prefix_larger_than_the_l2_gets_no_reuse() {
        let m = model("llama-2-7b", "h100-sxm", 1);
        // 8,192 shared tokens of Llama-2-7B: 134 MB of KV per layer, more than the L2.
        let plain = BatchShape::decode(16, 9000);
        let shared = plain.with_shared_prefixes(16 * 8192, 8192);
        assert_eq!(m.breakdown(&plain), m.breakdown(&shared));
    }
}
