//! The step-time model: how long one engine iteration takes on one tensor-parallel group, and
//! how much KV cache fits (docs/architecture.md places it among the layers); the formulas are
//! written out in docs/model.md.
//!
//! Every operator is a roofline term `fixed + max(bytes / bandwidth, flops / rate)` with the GPU
//! profile's calibrated curves; the per-layer and per-step fixed costs and the engine's host
//! overhead are separate, named terms of the [`StepBreakdown`].

mod deployment;
pub mod kernels;
mod layers;
mod memory;
pub mod parallel;

pub use crate::step_time::{BatchShape, DecodeStep};
pub use deployment::{gqa_projection_widths, kv_heads_per_gpu, Deployment, ModuleFormats};
pub use memory::{plan_memory, DraftMemory, MemoryPlan};

use serde::Serialize;

use crate::clock::{self, secs_to_ns, BeyondClock};
use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::precision::{GemmMath, KvDtype};
use crate::step_time::StepTime;

/// Bytes per activation element (activations are 16-bit whatever the weight format).
pub const ACT_BYTES: f64 = 2.0;

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
    /// Tensor-parallel all-reduces, plus with pipeline parallelism the `pp - 1` sends of a
    /// micro-batch's hidden states between stages.
    pub allreduce_s: f64,
    /// MoE layers' token exchange: the expert-parallel all-to-all (dispatch and combine) or,
    /// with attention data parallelism and no expert parallelism, the all-gather and
    /// reduce-scatter around the experts (0 without data parallelism).
    #[serde(skip_serializing_if = "is_zero")]
    pub expert_comm_s: f64,
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

/// The routed experts of the MoE layers as one GPU runs them.
#[derive(Debug, Clone, Copy)]
struct ExpertShape {
    /// Routed experts of the model.
    experts: f64,
    /// Experts each token picks.
    top_k: f64,
    /// Intermediate width of one expert on this GPU (split by `tp x dp / ep`).
    inter: f64,
    /// Bytes per expert weight.
    weight_bytes: f64,
    /// Their tensor-core math.
    math: GemmMath,
    /// Bytes per element of a dispatched token (FP8 when the experts take FP8 activations).
    dispatch_bytes: f64,
    /// The fused-MoE kernel class that runs them: the engine's, or the MXFP4 W4A16 class
    /// for MXFP4 experts dequantized to BF16 ([`crate::gpu::MoeCurve::class_for`]).
    kernel: crate::gpu::MoeKernel,
}

/// The step-time model of one deployment, with the per-token-count terms precomputed.
#[derive(Debug, Clone)]
pub struct StepTimeModel {
    dep: Deployment,
    layers: f64,
    /// The token-count work of each kind of layer.
    layer_costs: Vec<layers::LayerCost>,
    /// The attention of each kind of layer.
    attention: Vec<layers::AttentionCost>,
    /// Layers whose decode reads the whole context (full and chunked attention).
    context_layers: f64,
    /// The routed experts (MoE models).
    experts: Option<ExpertShape>,
    /// LM head: (input width, output width per GPU).
    lm_head: (f64, f64),
    kv_bytes_per_ctx_token_layer: f64,
    /// Decode math per context token as an equivalent query width.
    q_width: f64,
    /// Prefill math per (query, key) pair as an equivalent query width.
    prefill_q_width: f64,
    /// The GPU curves of kernels queued back to back: every kernel's fixed time is shorter by
    /// the launch latency that isolated kernel timings include, since in an iteration the
    /// kernels are queued back to back (replayed from a CUDA graph, or launched by a host that
    /// runs ahead of the GPU). When the host cannot run ahead (no graph, short kernels),
    /// [`StepTimeModel::cpu_launch_time`] bounds the step by the launches instead.
    queued_gpu: GpuProfile,
    /// GEMM rate the attention math runs at (FP8 with an FP8 KV cache on FP8 hardware;
    /// the BF16 rate times `attention.fa3_fp8.prefill_rate_vs_bf16` for FlashAttention-3's
    /// two-level FP8 path).
    attention_rate: f64,
    /// `kv_bytes_per_ctx_token_layer` as decode attention's HBM time counts it: times 1, or
    /// `attention.fa3_fp8.decode_time_per_byte_vs_bf16` for FlashAttention-3's two-level FP8
    /// path (its FP8 bytes take longer each than BF16 ones), bytes.
    decode_kv_bytes_per_ctx_token_layer: f64,
    /// Decode attention's math rate: the BF16 rate, or over an FP8 cache (outside
    /// FlashAttention-3's two-level path) that times `attention.decode_fp8_kv_rate_vs_bf16`
    /// where the GPU profile sets it, FLOP/s.
    decode_attention_rate: f64,
    kernels_per_layer: f64,
    /// Which all-reduce kernel the engine runs at this TP degree, by message size.
    allreduce_limits: kernels::AllReduceLimits,
    /// Attention data-parallel ranks, as a float (the batch is split evenly over them).
    dp: f64,
    /// Precomputed token-count-dependent time (GEMMs, small ops, all-reduce, expert
    /// communication) in ns, by tokens per data-parallel rank.
    table_ns: Vec<u64>,
    /// Multiplier on every step time, dimensionless (1 = as modelled; 1.2 = 20% slower).
    time_scale: f64,
    /// Speculative decoding of the decode-only iterations, if on (see [`Speculation`]).
    speculation: Option<Box<Speculation>>,
}

/// Speculative decoding as the step-time model prices it (built by src/speculative.rs).
///
/// A decode-only iteration of `B` sequences becomes a verify step: `K` drafted tokens per
/// sequence (each a forward of the draft on `B` tokens: `draft`, or a host cost for n-gram
/// lookup), then one target forward on `B x (K + 1)` tokens (GEMMs and LM head on all of them,
/// attention math x `(K + 1)` over a KV read once, weights read once). Each sequence gains
/// `mean_acceptance_length` tokens per step on average, so the simulator, which advances a
/// decoding sequence one token per iteration, is given the step's time divided by it: the time
/// per generated token (the mean-field model of docs/speculative-decoding.md).
#[derive(Debug, Clone)]
pub struct Speculation {
    /// Drafted tokens per sequence per step (K >= 1).
    pub num_speculative_tokens: u32,
    /// Expected tokens a sequence gains per verify step, the bonus token included (1..=K+1).
    pub mean_acceptance_length: f64,
    /// The draft's step-time model (EAGLE head, MTP layer, draft model); `None` for n-gram.
    pub draft: Option<StepTimeModel>,
    /// Host time per sequence per step spent drafting (n-gram lookup), seconds.
    pub draft_host_s_per_seq: f64,
    /// Batches of more decoding sequences than this run without speculation (vLLM's
    /// `speculative_disable_by_batch_size`); `u32::MAX`: never off.
    pub disable_above_seqs: u32,
}

/// One verify step of a decode-only batch, seconds, as [`StepTimeModel::speculative_step`]
/// prices it at a given context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SpeculativeStep {
    /// Drafting: K draft forwards (or the n-gram host lookup).
    pub draft_s: f64,
    /// The step without drafting: the target's forward on B x (K + 1) tokens and the host.
    pub verify_s: f64,
    /// What the same batch takes without speculation (one token per sequence).
    pub plain_s: f64,
    /// Expected tokens per sequence per step.
    pub mean_acceptance_length: f64,
}

/// The token-count terms of a step, whole model, seconds.
#[derive(Debug, Clone, Copy, Default)]
struct TokenTerms {
    gemm: f64,
    stream: f64,
    small: f64,
    allreduce: f64,
    /// Expert-parallel all-to-all, or the gather/scatter of data-parallel MoE layers.
    expert_comm: f64,
}

impl StepTimeModel {
    /// Builds the model for a deployment; `max_tokens` sizes the precomputed table.
    pub fn new(dep: Deployment, max_tokens: u32) -> Result<Self> {
        dep.validate()?;
        let m = &dep.model;
        let tp = dep.tp as f64;
        let h = m.hidden_size as f64;
        let shape = dep.attention_shape();
        let attention = dep.attention_costs();
        let experts = m.moe.as_ref().map(|x| {
            let math = dep.math(dep.formats.experts);
            ExpertShape {
                experts: x.num_experts as f64,
                top_k: x.experts_per_token as f64,
                inter: m.expert_intermediate() as f64 / (dep.gpus() / dep.ep) as f64,
                weight_bytes: dep.formats.experts.bytes(),
                math,
                dispatch_bytes: if math == GemmMath::Bf16 {
                    ACT_BYTES
                } else {
                    1.0
                },
                kernel: dep
                    .gpu
                    .moe
                    .class_for(dep.engine.moe.kernel, dep.formats.experts, math),
            }
        });
        // FlashAttention-3's two-level FP8 path: where the engine runs it over an FP8 cache
        // and the GPU profile carries its figures.
        let fp8_kv = dep.kv_dtype == KvDtype::Fp8;
        let fa3_fp8 = dep.gpu.attention.fa3_fp8.filter(|_| {
            fp8_kv && dep.engine.attention.fp8_kv_kernel == crate::engine::Fp8KvKernel::Fa3TwoLevel
        });
        let mut model = StepTimeModel {
            layers: m.num_layers as f64,
            layer_costs: dep.layer_costs(),
            context_layers: attention
                .iter()
                .filter(|a| !matches!(a.span, layers::Span::Window(_)))
                .map(|a| a.count)
                .sum(),
            attention,
            experts,
            lm_head: (h, m.vocab_size as f64 / tp),
            kv_bytes_per_ctx_token_layer: shape.kv_bytes_per_ctx_token_layer,
            q_width: shape.decode_width,
            prefill_q_width: shape.prefill_width,
            queued_gpu: {
                let mut g = dep.gpu.clone();
                let hidden = g.small_ops.launch_s;
                if !g.gemm.fixed_s_graph_replayed {
                    g.gemm.fixed_s = (g.gemm.fixed_s - hidden).max(0.0);
                }
                if !g.attention.fixed_s_graph_replayed {
                    g.attention.fixed_s = (g.attention.fixed_s - hidden).max(0.0);
                }
                g.small_ops.kernel_s = (g.small_ops.kernel_s - hidden).max(0.0);
                g.attention.prefill_half_rate_tokens =
                    g.attention.prefill_half_rate_tokens_for(m.mla.is_some());
                g
            },
            attention_rate: match fa3_fp8 {
                Some(f) => dep.gpu.gemm.bf16_flops_per_s * f.prefill_rate_vs_bf16,
                None => kernels::prefill_attention_flops_per_s(&dep.gpu, fp8_kv),
            },
            decode_kv_bytes_per_ctx_token_layer: shape.kv_bytes_per_ctx_token_layer
                * fa3_fp8.map_or(1.0, |f| f.decode_time_per_byte_vs_bf16),
            decode_attention_rate: kernels::decode_attention_flops_per_s(
                &dep.gpu,
                fa3_fp8.is_none() && fp8_kv,
            ),
            kernels_per_layer: 4.0 + 4.0 + 1.0 + if dep.tp > 1 { 2.0 } else { 0.0 },
            allreduce_limits: kernels::AllReduceLimits {
                custom_max_bytes: if dep.engine.scheduler.custom_allreduce {
                    dep.engine
                        .allreduce
                        .custom_max_bytes(dep.tp)
                        .unwrap_or(f64::INFINITY)
                } else {
                    0.0
                },
                one_shot_max_bytes: dep.engine.allreduce.one_shot_max_bytes(dep.tp),
            },
            dp: dep.dp as f64,
            table_ns: Vec::new(),
            time_scale: 1.0,
            speculation: None,
            dep,
        };
        let n = max_tokens as usize + 1;
        let mut table = Vec::with_capacity(n);
        for t in 0..n {
            let x = model.token_terms(t as f64);
            table.push(
                secs_to_ns(x.gemm + x.small + x.allreduce + x.expert_comm).map_err(|e| {
                    Error::Infeasible(format!("the GEMM time of a {t}-token iteration: {e}"))
                })?,
            );
        }
        model.table_ns = table;
        Ok(model)
    }

    /// One GEMM of this deployment's attention format; returns (time, streaming part).
    fn gemm_time(&self, g: &GpuProfile, k: f64, n: f64, tokens: f64) -> (f64, f64) {
        let f = self.dep.formats.attention;
        kernels::gemm_math_s(g, tokens, k, n, f.bytes(), self.dep.math(f))
    }

    /// The routed experts of one MoE layer on one GPU for `tokens` tokens on this GPU's
    /// data-parallel rank and `all` tokens over all ranks: (grouped GEMM time, its weight streaming, routing and permutation kernels,
    /// expert communication). Experts split tensor-parallel (EP 1) run every token of every
    /// rank through a slice of each active expert; expert-parallel ranks run whole experts
    /// for the pairs routed to them, and the busiest rank sets the pace
    /// ([`parallel::expert_straggler`]).
    fn expert_terms(&self, x: &ExpertShape, tokens: f64, all: f64) -> (f64, f64, f64, f64) {
        let g = &self.queued_gpu;
        let dep = &self.dep;
        let h = self.dep.model.hidden_size as f64;
        let gpus = dep.gpus();
        let active = kernels::expected_active_experts(all, x.experts, x.top_k);
        let (routed, work) = if dep.ep <= 1 {
            let work = kernels::ExpertWork {
                active: active.max(1.0),
                top_k: x.top_k,
                pairs: all * x.top_k,
                hidden: h,
                inter: x.inter,
                weight_bytes: x.weight_bytes,
                math: x.math,
                kernel: x.kernel,
            };
            (all, work)
        } else {
            let r = dep.redundant_experts as f64;
            let ep = dep.ep as f64;
            let gamma = parallel::expert_straggler(all, x.experts, x.top_k, dep.ep, r);
            let work = kernels::ExpertWork {
                active: active / x.experts * (x.experts + r) / ep,
                top_k: x.top_k,
                pairs: all * x.top_k / ep * gamma,
                hidden: h,
                inter: x.inter,
                weight_bytes: x.weight_bytes,
                math: x.math,
                kernel: x.kernel,
            };
            (tokens, work)
        };
        let (t, st, routing) = kernels::fused_moe_work_s(g, routed, x.experts, &work);
        let comm = if dep.dp <= 1 {
            // Tokens are on every GPU of the TP group: the layer's all-reduce sums the
            // experts' outputs.
            0.0
        } else if dep.ep <= 1 {
            parallel::gather_scatter_s(g, all * h * ACT_BYTES, gpus)
        } else {
            let per_gpu = tokens / dep.tp as f64;
            parallel::all_to_all_s(g, per_gpu, h, x.top_k, dep.ep, x.dispatch_bytes)
                + parallel::all_to_all_s(g, per_gpu, h, x.top_k, dep.ep, ACT_BYTES)
        };
        (t, st, routing, comm)
    }

    /// Token-count terms for the whole model at `tokens` tokens per data-parallel rank (every
    /// rank the same).
    fn token_terms(&self, tokens: f64) -> TokenTerms {
        self.token_terms_at(tokens, tokens * self.dp)
    }

    /// Token-count terms for the whole model on the busiest data-parallel rank: `tokens` of
    /// its own through the dense layers and attention projections, `all` tokens of every
    /// rank through the MoE layers' experts (gathered, or dispatched by the all-to-all).
    fn token_terms_at(&self, tokens: f64, all: f64) -> TokenTerms {
        let mut out = TokenTerms::default();
        if tokens <= 0.0 {
            return out;
        }
        let g = &self.queued_gpu;
        let m = &self.dep.model;
        let h = m.hidden_size as f64;
        let allreduce = parallel::allreduce_span_s(
            g,
            tokens * h * ACT_BYTES,
            self.dep.tp,
            self.allreduce_limits,
        );
        for c in &self.layer_costs {
            let mut gemm = 0.0;
            let mut stream = 0.0;
            let mut moe_small = 0.0;
            let mut comm = 0.0;
            for s in &c.gemms {
                let (t, st) = kernels::gemm_math_s(g, tokens, s.k, s.n, s.weight_bytes, s.math);
                gemm += t;
                stream += st;
            }
            let mut layer_ar = 2.0 * allreduce;
            if let (true, Some(x)) = (c.moe, &self.experts) {
                let (t, st, routing, moe_comm) = self.expert_terms(x, tokens, all);
                gemm += t;
                stream += st;
                moe_small = routing;
                comm = moe_comm;
                // The router: h x experts, 16-bit (the engines keep it unquantized).
                gemm += kernels::gemm_math_s(g, tokens, h, x.experts, ACT_BYTES, GemmMath::Bf16).0;
                if self.dep.dp > 1 {
                    // The experts' outputs come back by the all-to-all or the scatter; the
                    // attention's all-reduce stays.
                    layer_ar = allreduce;
                }
            }
            let small = c.small_kernels
                * kernels::small_op_s(g, tokens * c.elementwise_bytes_per_token / c.small_kernels)
                + moe_small;
            out.gemm += c.count * gemm;
            out.stream += c.count * stream;
            out.small += c.count * small;
            out.allreduce += c.count * layer_ar;
            out.expert_comm += c.count * comm;
        }
        if self.dep.pp > 1 {
            // A micro-batch's hidden states cross pp - 1 stage boundaries on their way
            // through the model (docs/model.md, "Pipeline parallelism").
            out.allreduce += (self.dep.pp - 1) as f64 * self.dep.stage_transfer_s(tokens);
        }
        out
    }

    /// The time of one iteration with its breakdown by operator class.
    pub fn breakdown(&self, b: &BatchShape) -> StepBreakdown {
        let tokens = b.tokens() as f64;
        if tokens <= 0.0 {
            return StepBreakdown::default();
        }
        let g = &self.queued_gpu;
        let x = self.rank_token_terms(b);
        let sampled = self.lm_head_rows(b);
        let (lm_head_s, _) = self.gemm_time(g, self.lm_head.0, self.lm_head.1, sampled);
        let attention_s = self.attention_time(b);
        // Per step: embedding gather, final norm, sampling (3 small kernels).
        let small_ops_s = x.small + 3.0 * g.small_ops.kernel_s;
        let gpu_s = x.gemm + lm_head_s + attention_s + x.allreduce + small_ops_s + x.expert_comm;
        let (launch_s, host_s, host_overlap_s) = self.host_terms(b, gpu_s);
        StepBreakdown {
            gemm_s: x.gemm,
            weight_stream_s: x.stream,
            lm_head_s,
            attention_s,
            allreduce_s: x.allreduce,
            expert_comm_s: x.expert_comm,
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
    /// The engine's exposed per-iteration time (`host.per_iteration_exposed_s`) is added to
    /// every iteration, asynchronous or not.
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
        (
            launch_s,
            host_s + self.dep.engine.host.per_iteration_exposed_s,
            overlap_s,
        )
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

    /// Decode and prefill attention of every layer on one GPU. With attention data
    /// parallelism each rank attends for its share of the decoding requests (split evenly)
    /// and the busiest rank for its prompt chunks.
    /// Window layers read `window` tokens per decoding request; chunked and window layers'
    /// prefill rows read at most their chunk or window of keys.
    /// A layer's decode and prefill rows are one attention call (vLLM's and SGLang's varlen
    /// FlashAttention-3 path: one KV-cache write, one launch), so a mixed step pays
    /// `attention.fixed_s` once per layer, not once per kind of row.
    fn attention_time(&self, b: &BatchShape) -> f64 {
        let g = &self.queued_gpu;
        let dp = self.dp;
        let ctx = b.decode_context_tokens as f64 / dp;
        let hbm = self.decode_hbm_context_tokens(b) / dp;
        // Prompt chunks run on the ranks that hold them (see `rank_tokens`).
        let units = b.prefill_attention_units / self.prefill_ranks(b);
        let prefill = b.prefill_tokens as f64 / self.prefill_ranks(b);
        let seqs = b.decode_seqs as f64 / dp;
        let mut total = 0.0;
        for a in &self.attention {
            let (dec, dec_hbm, pre) = match a.span {
                layers::Span::Full => (ctx, hbm, units),
                layers::Span::Chunk(c) => (ctx, hbm, units.min(prefill * c)),
                layers::Span::Window(w) => (seqs * w, seqs * w, units.min(prefill * w)),
            };
            let decode_s = kernels::decode_attention_at_rate_s(
                g,
                dec,
                dec_hbm,
                self.decode_kv_bytes_per_ctx_token_layer,
                self.q_width,
                self.decode_attention_rate,
            );
            let prefill_s = kernels::prefill_attention_at_rate_s(
                g,
                pre,
                prefill,
                self.prefill_q_width,
                self.attention_rate,
            );
            let shared_fixed = if decode_s > 0.0 && prefill_s > 0.0 {
                g.attention.fixed_s
            } else {
                0.0
            };
            total += a.count * (decode_s + prefill_s - shared_fixed);
        }
        total
    }

    /// Tokens of the iteration on the busiest data-parallel rank. TensorRT-LLM and vLLM
    /// balance requests over the ranks by count, so the decoding requests split evenly; a
    /// prompt chunk runs on the one rank that holds its request, so the prefill tokens split
    /// over at most `prefill_seqs` ranks ([`StepTimeModel::prefill_ranks`]). The ranks meet
    /// at every MoE layer's collectives, so the iteration waits for the busiest one.
    fn rank_tokens(&self, b: &BatchShape) -> u32 {
        let dp = self.dep.dp.max(1);
        if dp == 1 || b.prefill_tokens == 0 {
            return b.tokens().div_ceil(dp);
        }
        b.decode_seqs.div_ceil(dp) + b.prefill_tokens.div_ceil(self.prefill_ranks(b) as u32)
    }

    /// Data-parallel ranks the iteration's prompt chunks run on: one per prefilling request,
    /// at most `dp` (1 without data parallelism).
    fn prefill_ranks(&self, b: &BatchShape) -> f64 {
        b.prefill_seqs.clamp(1, self.dep.dp.max(1)) as f64
    }

    /// The token-count terms of iteration `b` on its busiest rank: from the table when every
    /// rank runs the same tokens (one rank, or a decode-only batch split evenly), otherwise
    /// the busiest rank's own tokens through the dense layers and all ranks' tokens through
    /// the experts.
    fn rank_token_terms(&self, b: &BatchShape) -> TokenTerms {
        let t = self.padded_tokens(b) as f64;
        if self.dep.dp <= 1 || b.prefill_tokens == 0 {
            return self.token_terms(t);
        }
        self.token_terms_at(t, b.tokens() as f64)
    }

    /// Whether the iteration replays a CUDA graph: the engine captures graphs, the iteration
    /// is within the captured sizes, and it is a pure decode or the engine graphs mixed
    /// iterations too.
    fn graphed(&self, b: &BatchShape) -> bool {
        let s = &self.dep.engine.scheduler;
        s.cuda_graphs
            && self.rank_tokens(b) <= s.graph_limit_tokens()
            && (s.cuda_graph_mixed || b.prefill_tokens == 0)
    }

    /// Tokens per data-parallel rank the GEMMs, small ops and all-reduces run on: a graphed
    /// iteration is padded to the smallest captured size that holds it.
    fn padded_tokens(&self, b: &BatchShape) -> u32 {
        let t = self.rank_tokens(b);
        if !self.graphed(b) {
            return t;
        }
        self.dep.engine.scheduler.graph_size(t)
    }

    /// Tokens per data-parallel rank a decode-only iteration of `b` runs with `q` query tokens
    /// per sequence (1: plain decode, K + 1: a verify step). A graphed verify step pads its
    /// sequences, not its tokens, to a captured size, each with its `q` tokens, as
    /// TensorRT-LLM captures one graph per (batch size, draft length) with batch x (draft
    /// length + 1) tokens (`capture` in tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py,
    /// NVIDIA/TensorRT-LLM @ 7b437aa). vLLM
    /// instead rounds its token capture sizes up to multiples of K + 1
    /// (`adjust_cudagraph_sizes_for_spec_decode`, vllm/config/compilation.py), which pads to
    /// the same count or fewer tokens: this rule is its upper bound.
    fn padded_query_tokens(&self, b: &BatchShape, q: u32) -> u32 {
        if q == 1 {
            return self.padded_tokens(b);
        }
        let wide = BatchShape::decode_total(b.decode_seqs.saturating_mul(q), 0);
        let tokens = self.rank_tokens(&wide);
        if !self.graphed(&wide) {
            return tokens;
        }
        let seqs = self.rank_tokens(b);
        let s = &self.dep.engine.scheduler;
        s.graph_size(seqs).saturating_mul(q).max(tokens)
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

    /// Sequences whose logits the LM head computes on one rank: the sampled ones, or for a
    /// padded pure decode the whole padded batch.
    fn lm_head_rows(&self, b: &BatchShape) -> f64 {
        let sampled = b.sampled_seqs.div_ceil(self.dep.dp.max(1)).max(1);
        if b.prefill_tokens == 0 {
            sampled.max(self.padded_tokens(b)) as f64
        } else {
            sampled as f64
        }
    }

    /// The engine's host time: each data-parallel rank's scheduler handles its own share of
    /// the sequences, at the same time as the others.
    fn host_time(&self, b: &BatchShape) -> f64 {
        let h = &self.dep.engine.host;
        h.per_iteration_s + h.per_sequence_s * ((b.decode_seqs + b.prefill_seqs) as f64 / self.dp)
    }

    /// The token-count terms of a step (GEMMs, small ops, all-reduce, expert communication)
    /// for `t` padded tokens per rank, ns: from the precomputed table, or computed past its
    /// end.
    #[inline]
    fn token_table_ns(&self, t: usize) -> Result<u64, BeyondClock> {
        match self.table_ns.get(t) {
            Some(&ns) => Ok(ns),
            None => {
                let x = self.token_terms(t as f64);
                secs_to_ns(x.gemm + x.small + x.allreduce + x.expert_comm)
            }
        }
    }

    /// The step time of decode-only batches shaped like `b` (its sequences, padding and shared
    /// prefixes; its context is ignored) as an exact integer function of the total context:
    /// the upper envelope of a few lines in fixed point. The simulator times every decode-only
    /// iteration with it, so a run of iterations of one batch can be summed in integers
    /// (the fast-forward) and equal, bit for bit, the iterations timed one by one.
    /// An error when a line's time is not finite or beyond the clock ([`crate::clock`]).
    pub fn decode_step(&self, b: &BatchShape) -> Result<DecodeStep, BeyondClock> {
        debug_assert_eq!(b.prefill_tokens, 0);
        if let Some(spec) = self.speculating(b) {
            let (lines, per_token) = self.speculative_lines(b, spec)?;
            return DecodeStep::new(&lines, self.time_scale / per_token);
        }
        DecodeStep::new(&self.decode_lines(b, 1, (0.0, 0.0))?, self.time_scale)
    }

    /// The speculation that applies to decode-only batch `b`, if any.
    #[inline]
    fn speculating(&self, b: &BatchShape) -> Option<&Speculation> {
        self.speculation
            .as_deref()
            .filter(|s| b.decode_seqs > 0 && b.decode_seqs <= s.disable_above_seqs)
    }

    /// The lines of a verify step of `b` (seconds, unscaled) and the expected tokens per
    /// sequence per step the time is divided by.
    fn speculative_lines(
        &self,
        b: &BatchShape,
        spec: &Speculation,
    ) -> Result<([(f64, f64); 4], f64), BeyondClock> {
        let k = spec.num_speculative_tokens as f64;
        let (mut a, mut s) = match &spec.draft {
            Some(d) => d.gpu_line(b)?,
            None => (0.0, 0.0),
        };
        a = a * k + spec.draft_host_s_per_seq * b.decode_seqs as f64 / self.dp;
        s *= k;
        let lines = self.decode_lines(b, spec.num_speculative_tokens + 1, (a, s))?;
        Ok((lines, spec.mean_acceptance_length))
    }

    /// The GPU time of one decode-only forward of `b` as one line in the total context
    /// (intercept s, slope s per token): an upper bound of the GPU lines of
    /// [`StepTimeModel::decode_lines`], no host time (a draft runs inside the target's step).
    fn gpu_line(&self, b: &BatchShape) -> Result<(f64, f64), BeyondClock> {
        let lines = self.decode_lines(b, 1, (0.0, 0.0))?;
        let sync_host = if self.dep.engine.scheduler.async_scheduling {
            0.0
        } else {
            self.host_time(b)
        };
        let a = lines[0].0.max(lines[1].0) - sync_host;
        Ok((a, lines[0].1.max(lines[1].1)))
    }

    /// The lines (intercept s, slope s per context token) of a decode-only iteration of `b`
    /// in which every sequence runs `q` query tokens through the model (1: plain decode;
    /// K + 1: a verify step), plus `extra` GPU time (a draft's line) on the GPU lines.
    fn decode_lines(
        &self,
        b: &BatchShape,
        q: u32,
        extra: (f64, f64),
    ) -> Result<[(f64, f64); 4], BeyondClock> {
        // The GEMMs, LM head and launches see q tokens per sequence.
        let wide = BatchShape::decode_total(b.decode_seqs.saturating_mul(q), 0);
        let tb = if q == 1 { b } else { &wide };
        let padded = self.padded_query_tokens(b, q);
        let table = self.token_table_ns(padded as usize)?;
        let g = &self.queued_gpu;
        let lm_rows = if q == 1 {
            self.lm_head_rows(b)
        } else {
            padded as f64
        };
        let lm = self.gemm_time(g, self.lm_head.0, self.lm_head.1, lm_rows).0
            + 3.0 * g.small_ops.kernel_s;
        // The GPU time is `base + layers x (fixed + max(hbm x kv / bw, 4 q ctx / rate))` with
        // hbm = ctx less the L2-served repeat reads (kernels::decode_attention_s): two lines.
        // Window layers read a fixed number of tokens per request: part of the base.
        let mut base = table as f64 * 1e-9 + lm + self.context_layers * g.attention.fixed_s;
        let seqs = b.decode_seqs as f64 / self.dp;
        for a in &self.attention {
            if let layers::Span::Window(w) = a.span {
                let read = seqs * w;
                base += a.count
                    * kernels::decode_attention_at_rate_s(
                        g,
                        read,
                        read,
                        self.decode_kv_bytes_per_ctx_token_layer,
                        self.q_width * q as f64,
                        self.decode_attention_rate,
                    );
            }
        }
        if q != 1 {
            base += extra.0;
        }
        let bw = g.memory.stream_bandwidth_bytes_per_s * g.attention.decode_bandwidth_fraction;
        let rate = self.decode_attention_rate;
        let repeat = self.decode_l2_repeat_tokens(b);
        let mut mem_slope =
            self.context_layers * self.decode_kv_bytes_per_ctx_token_layer / bw / self.dp;
        let mut flop_slope = self.context_layers * 4.0 * self.q_width / rate / self.dp;
        if q != 1 {
            flop_slope *= q as f64;
            mem_slope += extra.1;
            flop_slope += extra.1;
        }
        // Host side (host_terms): a synchronous engine adds its host time to the longer of the
        // GPU and the launches; an asynchronous one takes the longer of the GPU and the host.
        // A verify step is synchronous where the engine turns its overlap off to speculate
        // (`speculative_async_scheduling`, e.g. SGLang v0.5.6).
        let launch = self.cpu_launch_time(tb);
        let host = self.host_time(b);
        let exposed = self.dep.engine.host.per_iteration_exposed_s;
        let sched = &self.dep.engine.scheduler;
        let overlapped = sched.overlaps(q > 1);
        let (gpu_extra, host_line) = if overlapped {
            (exposed, launch + host + exposed)
        } else {
            (host + exposed, launch + host + exposed)
        };
        Ok([
            (base + gpu_extra - repeat * mem_slope, mem_slope),
            (base + gpu_extra, flop_slope),
            (host_line, 0.0),
            // An iteration takes at least 1 ns.
            (1e-9, 0.0),
        ])
    }

    /// A verify step of the decode-only batch `b` at its context, split into drafting and
    /// the rest, with the same batch's plain decode time; `None` when the batch does not
    /// speculate (no speculation, or past its batch limit).
    pub fn speculative_step(&self, b: &BatchShape) -> Option<SpeculativeStep> {
        let spec = self.speculating(b)?;
        let ctx = b.decode_context_tokens as f64;
        let at = |l: &[(f64, f64); 4]| {
            l.iter().map(|&(a, s)| a + s * ctx).fold(0.0, f64::max) * self.time_scale
        };
        let (lines, per_token) = self.speculative_lines(b, spec).ok()?;
        let undrafted = Speculation {
            draft: None,
            draft_host_s_per_seq: 0.0,
            ..spec.clone()
        };
        let (bare, _) = self.speculative_lines(b, &undrafted).ok()?;
        let plain = self.decode_lines(b, 1, (0.0, 0.0)).ok()?;
        let (total, verify) = (at(&lines), at(&bare));
        Some(SpeculativeStep {
            draft_s: total - verify,
            verify_s: verify,
            plain_s: at(&plain),
            mean_acceptance_length: per_token,
        })
    }

    /// The speculation the model prices, if any.
    pub fn speculation(&self) -> Option<&Speculation> {
        self.speculation.as_deref()
    }

    /// The same model with speculative decoding of its decode-only iterations.
    pub fn with_speculation(mut self, spec: Speculation) -> Self {
        self.speculation = Some(Box::new(spec));
        self
    }

    /// Iteration time in integer nanoseconds, from the precomputed table (the simulator's path).
    /// Equals `breakdown(b).total_s` rounded, up to the table's per-term rounding; decode-only
    /// batches are timed by [`StepTimeModel::decode_step`]. An error when the time is not
    /// finite or beyond the clock ([`crate::clock`]): the caller ends the run and says why.
    #[inline]
    pub fn step_ns(&self, b: &BatchShape) -> Result<u64, BeyondClock> {
        if b.tokens() == 0 {
            return Ok(0);
        }
        if b.prefill_tokens == 0 {
            return self.decode_step(b)?.ns_at(b.decode_context_tokens);
        }
        let table = if self.dep.dp <= 1 {
            self.token_table_ns(self.padded_tokens(b) as usize)?
        } else {
            let x = self.rank_token_terms(b);
            secs_to_ns(x.gemm + x.small + x.allreduce + x.expert_comm)?
        };
        let g = &self.queued_gpu;
        let sampled = self.lm_head_rows(b);
        let lm = self.gemm_time(g, self.lm_head.0, self.lm_head.1, sampled).0
            + 3.0 * g.small_ops.kernel_s;
        let attn = self.attention_time(b);
        let gpu_s = table as f64 * 1e-9 + lm + attn;
        let (launch, host, overlap) = self.host_terms(b, gpu_s);
        let rest = lm + attn + launch + host - overlap;
        // Both terms are on the clock (at most 2^62 ns), so their sum cannot overflow.
        let ns = (table + secs_to_ns(rest)?).max(1);
        if self.time_scale == 1.0 {
            clock::check_ns(ns)
        } else {
            Ok(clock::ns_f64_to_ns(ns as f64 * self.time_scale)?.max(1))
        }
    }

    /// The same model with every step time multiplied by `scale` (> 0): what-if the GPUs or
    /// the engine run slower (> 1) or faster (< 1) than modelled.
    pub fn with_time_scale(mut self, scale: f64) -> Self {
        self.time_scale = scale;
        self
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// The contract of src/step_time.rs, held by the model's own methods (S2: decode-only
/// batches are timed by [`StepTimeModel::decode_step`] in both).
impl StepTime for StepTimeModel {
    #[inline]
    fn step_ns(&self, batch: &BatchShape) -> Result<u64, BeyondClock> {
        StepTimeModel::step_ns(self, batch)
    }

    #[inline]
    fn decode_step(&self, batch: &BatchShape) -> Result<DecodeStep, BeyondClock> {
        StepTimeModel::decode_step(self, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineProfile;
    use crate::gpu::{MoeKernel, MoeKernelCurve};
    use crate::model::load_model;
    use crate::precision::WeightDtype;

    fn model(name: &str, gpu: &str, tp: u32) -> StepTimeModel {
        // The tests read `dep` back from the model to vary one thing at a time.
        let dep = Deployment::tensor_parallel(
            load_model(name).unwrap(),
            GpuProfile::load(gpu).unwrap(),
            EngineProfile::load("vllm").unwrap(),
            tp,
            WeightDtype::Bf16,
            KvDtype::Auto,
        );
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
        let ns = m.step_ns(&shared).unwrap() as i64;
        assert!(
            (ns - secs_to_ns(b.total_s).unwrap() as i64).abs() <= 2,
            "{ns} vs {b:?}"
        );
    }

    /// A mixed step's decode and prefill rows are one attention call per layer: its attention
    /// is the decode-only and prefill-only calls' sum less one `attention.fixed_s` per layer.
    #[test]
    fn a_mixed_step_pays_the_attention_fixed_time_once_per_layer() {
        let m = model("llama-2-7b", "h100-sxm", 1);
        let decode = BatchShape::decode(16, 700);
        let mut prefill = BatchShape::default();
        prefill.add_prefill(256, 512, true);
        let mut mixed = decode;
        mixed.add_prefill(256, 512, true);
        let (d, p, both) = (
            m.breakdown(&decode).attention_s,
            m.breakdown(&prefill).attention_s,
            m.breakdown(&mixed).attention_s,
        );
        let fixed = m.queued_gpu.attention.fixed_s;
        assert!(fixed > 1e-6, "{fixed}");
        let layers = m.dep.model.num_layers as f64;
        assert!(
            (both - (d + p - layers * fixed)).abs() < 1e-12,
            "{both} vs {d} + {p} - {layers} x {fixed}"
        );
    }

    #[test]
    fn asynchronous_scheduling_hides_host_time_under_the_gpu() {
        let mut dep = model("llama-3.1-8b", "h100-sxm", 1).dep;
        dep.engine.host.per_iteration_s = 1e-3;
        dep.engine.host.per_sequence_s = 0.0;
        dep.engine.host.per_iteration_exposed_s = 0.0;
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
        assert!(
            (m.step_ns(&b).unwrap() as i64 - secs_to_ns(slow.total_s).unwrap() as i64).abs() <= 2
        );
    }

    #[test]
    fn the_exposed_host_time_adds_to_every_iteration_synchronous_or_not() {
        let mut dep = model("llama-3.1-8b", "h100-sxm", 1).dep;
        dep.engine.host.per_iteration_s = 1e-3;
        dep.engine.host.per_sequence_s = 0.0;
        dep.engine.host.per_iteration_exposed_s = 0.0;
        let b = BatchShape::decode(64, 1000);
        let mut mixed = BatchShape::decode(64, 1000);
        mixed.add_prefill(300, 0, true);
        for asyn in [false, true] {
            dep.engine.scheduler.async_scheduling = asyn;
            let without = StepTimeModel::new(dep.clone(), 2048).unwrap();
            let mut with_dep = dep.clone();
            with_dep.engine.host.per_iteration_exposed_s = 0.8e-3;
            let with = StepTimeModel::new(with_dep, 2048).unwrap();
            for shape in [&b, &mixed] {
                let (a, e) = (without.breakdown(shape), with.breakdown(shape));
                assert!(
                    (e.total_s - a.total_s - 0.8e-3).abs() < 1e-12,
                    "{a:?} {e:?}"
                );
                // Never hidden: the overlap is the same as without it.
                assert_eq!(a.host_overlap_s, e.host_overlap_s);
                // The simulator's integer path agrees.
                let d =
                    with.step_ns(shape).unwrap() as i64 - without.step_ns(shape).unwrap() as i64;
                assert!((d - 800_000).abs() <= 2, "{d}");
            }
        }
    }

    #[test]
    fn graphed_decodes_run_the_padded_size_and_mixed_ones_do_not() {
        let mut dep = model("llama-3.1-70b", "h100-sxm", 4).dep;
        dep.weight_dtype = WeightDtype::Fp8;
        dep.formats = ModuleFormats::uniform(WeightDtype::Fp8);
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
        let ns = m.step_ns(&BatchShape::decode(300, 500)).unwrap() as i64;
        assert!(
            (ns - secs_to_ns(d300.total_s).unwrap() as i64).abs() <= 3,
            "{ns} {d300:?}"
        );
    }

    #[test]
    fn a_graphed_verify_step_pads_its_sequences_not_its_tokens() {
        let mut dep = model("llama-3.1-70b", "h100-sxm", 4).dep;
        dep.engine = EngineProfile::load("trtllm").unwrap();
        dep.engine.scheduler.max_num_seqs = 1024;
        let m = StepTimeModel::new(dep, 4096).unwrap();
        // One sequence verifying 5 tokens runs the 1-graph with 5 tokens, not the 8-token one.
        assert_eq!(m.padded_query_tokens(&BatchShape::decode(1, 500), 5), 5);
        // Three sequences run the 4-graph: 4 x 5 tokens.
        assert_eq!(m.padded_query_tokens(&BatchShape::decode(3, 500), 5), 20);
        // A plain decode pads as before.
        assert_eq!(m.padded_query_tokens(&BatchShape::decode(3, 500), 1), 4);
    }

    #[test]
    fn graph_replayed_gemm_fixed_times_keep_the_launch_and_mla_runs_its_own_kernels() {
        // Llama: 4 weight GEMMs per layer; a fixed time fitted on graph-replayed rows keeps
        // the launch latency the queued chain would otherwise take off each of them.
        let mut dep = model("llama-3.1-8b", "h100-sxm", 1).dep;
        let b = BatchShape::decode(1, 500);
        let gemm = |d: &Deployment| {
            StepTimeModel::new(d.clone(), 64)
                .unwrap()
                .breakdown(&b)
                .gemm_s
        };
        // The committed H100 and H200 profiles carry the flag: their fixed time is
        // aiconfigurator's, fitted on vLLM 0.14 GEMMs replayed from a CUDA graph.
        assert!(dep.gpu.gemm.fixed_s_graph_replayed);
        assert!(
            crate::gpu::GpuProfile::load("h200-sxm")
                .unwrap()
                .gemm
                .fixed_s_graph_replayed
        );
        dep.gpu.gemm.fixed_s_graph_replayed = false;
        let queued = gemm(&dep);
        dep.gpu.gemm.fixed_s_graph_replayed = true;
        let graphed = gemm(&dep);
        let per_gemm = (graphed - queued) / (4.0 * dep.model.num_layers as f64);
        assert!(
            (per_gemm - dep.gpu.small_ops.launch_s).abs() < 1e-12,
            "{per_gemm}"
        );
        // MLA with a query LoRA: fused down-projection, query up-projection, the KV
        // up-projection's key and value halves (two batched GEMMs in absorbed decode) and O;
        // 4 small kernels plus the two latent RMSNorms.
        let ds = model("deepseek-r1", "h100-sxm", 8);
        let dense = &ds.layer_costs[0];
        assert_eq!(ds.dep.attention_gemms().len(), 5);
        assert_eq!(dense.small_kernels, 6.0);
    }

    #[test]
    fn a_graph_replayed_attention_fixed_time_keeps_its_launch() {
        // A decode step's attention: one kernel per layer; a fixed time read off
        // graph-replayed kernel times keeps the launch the queued chain takes off otherwise.
        let mut dep = model("llama-3.1-8b", "b200", 1).dep;
        let b = BatchShape::decode(4, 1024);
        let attention = |d: &Deployment| {
            StepTimeModel::new(d.clone(), 64)
                .unwrap()
                .breakdown(&b)
                .attention_s
        };
        dep.gpu.attention.fixed_s_graph_replayed = false;
        let queued = attention(&dep);
        dep.gpu.attention.fixed_s_graph_replayed = true;
        let graphed = attention(&dep);
        let per_layer = (graphed - queued) / dep.model.num_layers as f64;
        assert!(
            (per_layer - dep.gpu.small_ops.launch_s).abs() < 1e-12,
            "{per_layer}"
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
        // The step model charges exactly that chain per layer, beside the dense GEMMs and the
        // 16-bit router.
        let b = m.breakdown(&BatchShape::decode(1, 100));
        let dense: f64 = m.layer_costs[0]
            .gemms
            .iter()
            .map(|g| m.gemm_time(&m.queued_gpu, g.k, g.n, 1.0).0)
            .sum::<f64>()
            + kernels::gemm_math_s(&m.queued_gpu, 1.0, 4096.0, 8.0, 2.0, GemmMath::Bf16).0;
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
    fn attention_dp_ranks_wait_for_the_rank_that_prefills() {
        let mut dep = model("qwen3-30b-a3b", "h100-sxm", 1).dep;
        dep.dp = 4;
        let m = StepTimeModel::new(dep, 8192).unwrap();
        // 64 decodes and 4,096 prompt tokens: one prompt on one rank, or four on four.
        let mut one = BatchShape::decode(64, 64 * 1000);
        one.add_prefill(4096, 0, true);
        let mut four = BatchShape::decode(64, 64 * 1000);
        for _ in 0..4 {
            four.add_prefill(1024, 0, true);
        }
        assert_eq!(m.rank_tokens(&one), 16 + 4096);
        assert_eq!(m.rank_tokens(&four), 16 + 1024);
        // The experts run all 4,160 tokens either way; the busiest rank's own layers and
        // attention run 4,112 tokens against 1,040: about a third longer here.
        let (t1, t4) = (m.step_ns(&one).unwrap(), m.step_ns(&four).unwrap());
        assert!(t1 as f64 > 1.2 * t4 as f64, "{t1} {t4}");
        // The simulator's path and the breakdown agree on the busiest rank.
        let b = m.breakdown(&one).total_s * 1e9;
        assert!((b - t1 as f64).abs() < 1e-3 * b, "{b} {t1}");
        // The experts run every rank's tokens either way: equal expert communication.
        assert_eq!(
            m.breakdown(&one).expert_comm_s,
            m.breakdown(&four).expert_comm_s
        );
        // A decode-only batch splits evenly, as before.
        let decode = BatchShape::decode(64, 64 * 1000);
        assert_eq!(m.rank_tokens(&decode), 16);
    }

    #[test]
    fn tensorrt_llm_moe_expands_the_tokens_before_the_grouped_gemms() {
        let vllm = model("qwen3-30b-a3b", "h100-sxm", 1);
        let mut dep = vllm.dep.clone();
        dep.engine = EngineProfile::load("trtllm").unwrap();
        assert_eq!(
            dep.engine.moe.kernel,
            MoeKernel::Cutlass,
            "the trtllm profile runs the CUTLASS MoE chain"
        );
        // One curve for both classes, so that only the chain differs.
        dep.gpu.moe.cutlass = None;
        dep.engine.moe.kernel = MoeKernel::Triton;
        let without = StepTimeModel::new(dep.clone(), 4096).unwrap();
        dep.engine.moe.kernel = MoeKernel::Cutlass;
        let expand = StepTimeModel::new(dep, 4096).unwrap();
        for tokens in [64u32, 4096] {
            let mut b = BatchShape::default();
            b.add_prefill(tokens, 0, true);
            let (a, e) = (without.breakdown(&b), expand.breakdown(&b));
            assert_eq!(a.gemm_s, e.gemm_s);
            let extra = e.small_ops_s - a.small_ops_s;
            // 48 MoE layers, each one expand kernel (and two prologue kernels above 256
            // tokens), at least the small-op kernel time each.
            let kernels = if tokens > 256 { 3.0 } else { 1.0 };
            assert!(
                extra >= 48.0 * kernels * expand.queued_gpu.small_ops.kernel_s,
                "{extra}"
            );
            // The copy: T h 2 + T k h 2 bytes (BF16) per layer.
            let bytes = 48.0 * tokens as f64 * 2048.0 * 2.0 * 9.0;
            assert!(extra > bytes / expand.dep.gpu.memory.stream_bandwidth_bytes_per_s);
        }
    }

    #[test]
    fn each_moe_kernel_class_runs_its_own_gpu_curve() {
        let mut dep = model("qwen3-30b-a3b", "h100-sxm", 1).dep;
        dep.gpu.moe.grouped_flops_fraction = 1.0;
        dep.gpu.moe.tile_wave_s = 0.0;
        dep.gpu.moe.cutlass = Some(MoeKernelCurve {
            grouped_flops_fraction: 0.25,
            tile_wave_s: 0.0,
            stream_fraction: 1.0,
            dequant_weights_per_s: 0.0,
            grouped_gemm_fixed_s: 0.0,
            fp4_stream_fraction: None,
        });
        let mut b = BatchShape::default();
        b.add_prefill(4096, 0, true);
        let gemm = |dep: &Deployment, kernel| {
            let mut dep = dep.clone();
            dep.engine.moe.kernel = kernel;
            StepTimeModel::new(dep, 4096).unwrap().breakdown(&b).gemm_s
        };
        let (triton, cutlass) = (
            gemm(&dep, MoeKernel::Triton),
            gemm(&dep, MoeKernel::Cutlass),
        );
        // A quarter of the math rate for the experts' GEMMs of a 4,096-token prefill.
        assert!(cutlass > 1.5 * triton, "{cutlass} {triton}");
        // Without a curve of its own, the CUTLASS class runs the Triton one.
        dep.gpu.moe.cutlass = None;
        assert_eq!(gemm(&dep, MoeKernel::Cutlass), triton);
    }

    #[test]
    fn a_shared_prefix_larger_than_the_l2_gets_no_reuse() {
        let m = model("llama-2-7b", "h100-sxm", 1);
        // 8,192 shared tokens of Llama-2-7B: 134 MB of KV per layer, more than the L2.
        let plain = BatchShape::decode(16, 9000);
        let shared = plain.with_shared_prefixes(16 * 8192, 8192);
        assert_eq!(m.breakdown(&plain), m.breakdown(&shared));
    }

    #[test]
    fn step_times_beyond_the_clock_are_errors_not_saturated_values() {
        // 1e13 x a 7 ms step is 2e3 years: beyond the 146-year clock, in both timing paths.
        let m = model("llama-3.1-8b", "h100-sxm", 1).with_time_scale(1e13);
        let decode = BatchShape::decode(4, 400);
        assert!(m.decode_step(&decode).is_err());
        assert!(m.step_ns(&decode).is_err());
        let mut mixed = BatchShape::decode(4, 400);
        mixed.add_prefill(100, 0, true);
        let e = m.step_ns(&mixed).unwrap_err();
        assert!(e.to_string().contains("clock"), "{e}");
        // An engine whose host time is 1e300 s cannot build the decode envelope either.
        let mut dep = model("llama-3.1-8b", "h100-sxm", 1).dep;
        dep.engine.host.per_iteration_s = 1e300;
        let slow = StepTimeModel::new(dep, 64).unwrap();
        assert!(slow.step_ns(&decode).is_err());
        assert!(slow.step_ns(&mixed).is_err());
        // At scale 1 the same batches are a few ms.
        let ok = model("llama-3.1-8b", "h100-sxm", 1);
        assert!(ok.step_ns(&mixed).unwrap() < 100_000_000);
    }
}
