//! The per-layer shapes one GPU computes, by kind of layer: the GEMMs of its attention and
//! MLP, its MoE experts, its attention's KV reads and math. Built once per deployment from the
//! model's layer kinds ([`crate::model::ModelSpec::layer_groups`]).

use super::{Deployment, ACT_BYTES};
use crate::model::{AttentionKind, MlpKind};
use crate::precision::GemmMath;

/// One weight GEMM of a layer on one GPU.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gemm {
    /// Input width.
    pub k: f64,
    /// Output width.
    pub n: f64,
    /// Bytes per weight.
    pub weight_bytes: f64,
    /// Tensor-core math.
    pub math: GemmMath,
}

/// The token-count-dependent work of one kind of layer.
#[derive(Debug, Clone)]
pub(super) struct LayerCost {
    /// Layers of this kind.
    pub count: f64,
    /// Its dense GEMMs on one GPU: attention projections, then the dense MLP or the shared
    /// experts.
    pub gemms: Vec<Gemm>,
    /// Whether it has routed experts.
    pub moe: bool,
    /// Bytes the small element-wise kernels move per token.
    pub elementwise_bytes_per_token: f64,
    /// Small kernels per layer.
    pub small_kernels: f64,
}

/// How far one kind of layer's attention reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Span {
    /// The whole context.
    Full,
    /// The last `w` tokens: a decoding request reads `w` tokens (servesim charges the whole
    /// window: the batch shape carries the total context, not each request's).
    Window(f64),
    /// The tokens of the current chunk of `c`: a decode reads its context as full attention
    /// does until the first chunk boundary (charged so); a prefill row reads at most `c` keys.
    Chunk(f64),
}

/// The attention of one kind of layer.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttentionCost {
    /// Layers of this kind.
    pub count: f64,
    /// How far it reaches.
    pub span: Span,
}

/// The attention's per-GPU constants, the same for every layer.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttentionShape {
    /// KV bytes read per context token and layer on one GPU.
    pub kv_bytes_per_ctx_token_layer: f64,
    /// Decode math per context token, as an equivalent query width (FLOPs = 4 x width x ctx):
    /// heads x head_dim for GQA; MLA's absorbed decode (FlashMLA) multiplies each head's
    /// query by the 576-wide latent and the probabilities by its 512-wide value part.
    pub decode_width: f64,
    /// Prefill math per (query, key) pair, as an equivalent query width: heads x head_dim
    /// for GQA; MLA prefill runs unabsorbed, heads x (qk 192 + v 128) / 2.
    pub prefill_width: f64,
}

impl Deployment {
    /// The attention GEMMs of one layer on one GPU: QKV and O, or MLA's fused down-projection
    /// (replicated), query up-projection, the KV up-projection's two halves and O. Absorbed
    /// decode runs the halves as two batched GEMMs, one per head: the key half `W_UK` on the
    /// query before the attention and the value half `W_UV` on its output after it (the
    /// TensorRT-LLM DeepSeek-R1 blog's "UK_BGEMM" and "UV_GEMM", modules 4 and 7; vLLM's MLA
    /// `W_UK_T` and `W_UV` bmm's); the same weights and FLOPs as the one KV up-projection
    /// GEMM of an unabsorbed prefill, one fixed time more. O runs in `formats.attention_out`.
    pub(super) fn attention_gemms(&self) -> Vec<Gemm> {
        let m = &self.model;
        let tp = self.tp as f64;
        let h = m.hidden_size as f64;
        let in_format = |d: crate::precision::WeightDtype| {
            move |k: f64, n: f64| Gemm {
                k,
                n,
                weight_bytes: d.bytes(),
                math: self.math(d),
            }
        };
        let gemm = in_format(self.formats.attention);
        // The output projection, in its own format where the checkpoint gives it one.
        let out = in_format(self.formats.attention_out);
        match &m.mla {
            None => {
                let (q, kv) = super::gqa_projection_widths(m, self.tp as u64);
                vec![gemm(h, q + 2.0 * kv), out(q, h)]
            }
            Some(a) => {
                let heads = m.num_attention_heads as f64 / tp;
                let latent = (a.kv_lora_rank + a.qk_rope_head_dim) as f64;
                let qk = (a.qk_nope_head_dim + a.qk_rope_head_dim) as f64;
                let mut g = vec![gemm(h, latent + a.q_lora_rank.unwrap_or(0) as f64)];
                g.push(gemm(a.q_lora_rank.map_or(h, |r| r as f64), heads * qk));
                g.push(gemm(
                    a.kv_lora_rank as f64,
                    heads * a.qk_nope_head_dim as f64,
                ));
                g.push(gemm(a.kv_lora_rank as f64, heads * a.v_head_dim as f64));
                g.push(out(heads * a.v_head_dim as f64, h));
                g
            }
        }
    }

    /// Per-GPU widths of the attention output (query) and KV, for the element-wise kernels.
    fn attention_widths(&self) -> (f64, f64) {
        let m = &self.model;
        let tp = self.tp as f64;
        match &m.mla {
            None => super::gqa_projection_widths(m, self.tp as u64),
            Some(a) => {
                let q = m.num_attention_heads as f64 / tp
                    * (a.qk_nope_head_dim + a.qk_rope_head_dim) as f64;
                // The latent, plus the RMSNorms of the latents (read and write).
                let norms = 2.0 * (a.kv_lora_rank + a.q_lora_rank.unwrap_or(0)) as f64;
                (q, (a.kv_lora_rank + a.qk_rope_head_dim) as f64 + norms)
            }
        }
    }

    /// The work of each kind of layer on one GPU.
    pub(super) fn layer_costs(&self) -> Vec<LayerCost> {
        let m = &self.model;
        let tp = self.tp as f64;
        let h = m.hidden_size as f64;
        let (q, kv) = self.attention_widths();
        let attention = self.attention_gemms();
        let dense_gemm = |f: f64| {
            let g = |k: f64, n: f64| Gemm {
                k,
                n,
                weight_bytes: self.formats.dense.bytes(),
                math: self.math(self.formats.dense),
            };
            [g(h, 2.0 * f), g(f, h)]
        };
        let mut out: Vec<LayerCost> = Vec::new();
        for (kind, count) in m.layer_groups() {
            let mut gemms = attention.clone();
            let moe = kind.mlp == MlpKind::Moe;
            let f = if moe {
                m.moe
                    .as_ref()
                    .map_or(0, |x| x.shared_expert_intermediate_size) as f64
                    / tp
            } else {
                m.intermediate_size as f64 / tp
            };
            if f > 0.0 {
                gemms.extend(dense_gemm(f));
            }
            // Serving engines fuse the residual add into RMSNorm (vLLM fused_add_rms_norm,
            // TensorRT-LLM's fused residual norm): 2 such kernels (read 2h, write 2h), rotary
            // on q and k (read+write), SiLU-and-mul (read 2f, write f; for routed experts it
            // is part of the fused-MoE chain); 16-bit activations. MLA normalizes its latents
            // (kv_a_layernorm, and q_a_layernorm with a query LoRA) with RMSNorms of their
            // own: a kernel each (their bytes are in the KV width; the TensorRT-LLM
            // DeepSeek-R1 blog's module 2).
            let mla_norms = m
                .mla
                .as_ref()
                .map_or(0.0, |a| 1.0 + a.q_lora_rank.map_or(0.0, |_| 1.0));
            let small_kernels = if moe && f == 0.0 { 3.0 } else { 4.0 } + mla_norms;
            let cost = LayerCost {
                count: count as f64,
                gemms,
                moe,
                elementwise_bytes_per_token: (8.0 * h + 2.0 * (q + kv) + 3.0 * f) * ACT_BYTES,
                small_kernels,
            };
            // Layers that differ only in their attention share their token-count work.
            match out
                .iter_mut()
                .find(|c| c.moe == cost.moe && c.gemms.len() == cost.gemms.len())
            {
                Some(c) => c.count += cost.count,
                None => out.push(cost),
            }
        }
        out
    }

    /// The attention of each kind of layer, with how many layers of each.
    pub(super) fn attention_costs(&self) -> Vec<AttentionCost> {
        let m = &self.model;
        let window = m.local_attention.as_ref().map_or(0.0, |l| l.window as f64);
        let mut out: Vec<AttentionCost> = Vec::new();
        for (kind, count) in m.layer_groups() {
            let span = match kind.attention {
                AttentionKind::Full => Span::Full,
                AttentionKind::Sliding => Span::Window(window),
                AttentionKind::Chunked => Span::Chunk(window),
            };
            match out.iter_mut().find(|c| c.span == span) {
                Some(c) => c.count += count as f64,
                None => out.push(AttentionCost {
                    count: count as f64,
                    span,
                }),
            }
        }
        out
    }

    /// The attention's per-GPU constants.
    pub(super) fn attention_shape(&self) -> AttentionShape {
        let m = &self.model;
        let tp = self.tp as f64;
        match &m.mla {
            None => {
                let q = m.q_dim() as f64 / tp;
                AttentionShape {
                    kv_bytes_per_ctx_token_layer: 2.0
                        * (self.kv_heads_per_gpu() * m.head_dim) as f64
                        * self.kv_dtype.bytes(),
                    decode_width: q,
                    prefill_width: q,
                }
            }
            Some(a) => {
                let heads = m.num_attention_heads as f64 / tp;
                let (c, r) = (a.kv_lora_rank as f64, a.qk_rope_head_dim as f64);
                AttentionShape {
                    kv_bytes_per_ctx_token_layer: self.kv_bytes_per_token_layer_per_gpu(),
                    decode_width: heads * (2.0 * c + r) / 2.0,
                    prefill_width: heads
                        * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) as f64
                        / 2.0,
                }
            }
        }
    }
}
