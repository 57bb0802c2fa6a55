//! The layers of a model, one kind at a time: which attention and which MLP each layer has,
//! the parameters of each part, and the KV each kind of layer keeps per token.
//!
//! Every figure is derived from the architecture ([`ModelSpec`]'s keys), never from a
//! per-model constant: a model whose layers differ (dense and MoE layers, full and local
//! attention) is a list of layer kinds with their counts.

use serde::Serialize;

use super::{LocalKind, ModelSpec};

/// The attention of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// Every token attends to the whole context; the layer keeps every token's KV.
    Full,
    /// Each token attends to the last `window` tokens.
    Sliding,
    /// Each token attends to the tokens of its own chunk.
    Chunked,
}

/// The MLP of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpKind {
    /// One dense MLP of `intermediate_size`.
    Dense,
    /// Routed experts (plus shared experts, if any).
    Moe,
}

/// What one layer is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct LayerKind {
    /// Its attention.
    pub attention: AttentionKind,
    /// Its MLP.
    pub mlp: MlpKind,
}

/// KV-cache bytes per token, whole model (every layer, no parallelism), by attention kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct KvPerToken {
    /// Bytes one layer keeps per token (MLA: one latent of `kv_lora_rank + qk_rope_head_dim`
    /// values; otherwise K and V of every KV head).
    pub per_layer_bytes: f64,
    /// Layers of full attention (they keep every token).
    pub full_layers: u64,
    /// Layers of sliding-window attention.
    pub sliding_layers: u64,
    /// Layers of chunked attention.
    pub chunked_layers: u64,
    /// Window (sliding) or chunk (chunked) of the local layers, tokens (0 when none).
    pub window_tokens: u64,
    /// Bytes per token of the full-attention layers.
    pub full_bytes: f64,
    /// Bytes per token of the local layers, owed only for the tokens inside their window.
    pub local_bytes: f64,
}

impl ModelSpec {
    /// The kind of layer `i` (0-based).
    pub fn layer_kind(&self, i: u64) -> LayerKind {
        let attention = match &self.local_attention {
            Some(l) if !l.full_attention_layers.contains(&i) => match l.kind {
                LocalKind::Sliding => AttentionKind::Sliding,
                LocalKind::Chunked => AttentionKind::Chunked,
            },
            _ => AttentionKind::Full,
        };
        let mlp = match &self.moe {
            Some(m) if !m.dense_layers.contains(&i) => MlpKind::Moe,
            _ => MlpKind::Dense,
        };
        LayerKind { attention, mlp }
    }

    /// The distinct kinds of layer with how many layers of each, in order of first appearance
    /// (one entry for a uniform model).
    pub fn layer_groups(&self) -> Vec<(LayerKind, u64)> {
        let mut out: Vec<(LayerKind, u64)> = Vec::new();
        for i in 0..self.num_layers {
            let k = self.layer_kind(i);
            match out.iter_mut().find(|(g, _)| *g == k) {
                Some((_, n)) => *n += 1,
                None => out.push((k, 1)),
            }
        }
        out
    }

    /// Layers of a given MLP kind.
    pub fn layers_with_mlp(&self, mlp: MlpKind) -> u64 {
        self.layer_groups()
            .iter()
            .filter(|(k, _)| k.mlp == mlp)
            .map(|(_, n)| n)
            .sum()
    }

    /// Attention parameters of one layer that every tensor-parallel GPU holds whole: MLA's
    /// down-projections of the query and of the KV latent (replicated linear layers in the
    /// engines) and their norms; 0 for GQA.
    pub fn attention_replicated_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        match &self.mla {
            Some(m) => {
                let kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) as f64;
                let q_a = m.q_lora_rank.map_or(0.0, |r| h * r as f64);
                let norms = (m.kv_lora_rank + m.q_lora_rank.unwrap_or(0)) as f64;
                kv_a + q_a + norms
            }
            None => 0.0,
        }
    }

    /// Attention parameters of one layer that tensor parallelism splits by heads: the QKV
    /// (or MLA up-projection) and output projections, their biases and the attention sinks.
    pub fn attention_split_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        let heads = self.num_attention_heads as f64;
        let sinks = if self.attention_sinks { heads } else { 0.0 };
        match &self.mla {
            Some(m) => {
                let qk = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
                let q_in = m.q_lora_rank.map_or(h, |r| r as f64);
                let q = q_in * heads * qk;
                let kv_b =
                    m.kv_lora_rank as f64 * heads * (m.qk_nope_head_dim + m.v_head_dim) as f64;
                let o = heads * m.v_head_dim as f64 * h;
                q + kv_b + o + sinks
            }
            None => {
                let lp = self.layer_params();
                lp.qkv + lp.o + sinks
            }
        }
    }

    /// Parameters of one layer's attention output projection (O; MLA's `o_proj`), part of
    /// [`ModelSpec::attention_split_params`].
    pub fn attention_out_params(&self) -> f64 {
        match &self.mla {
            Some(m) => {
                self.num_attention_heads as f64 * m.v_head_dim as f64 * self.hidden_size as f64
            }
            None => self.layer_params().o,
        }
    }

    /// Attention parameters of one layer.
    pub fn attention_params(&self) -> f64 {
        self.attention_replicated_params() + self.attention_split_params()
    }

    /// Parameters of one dense MLP of `intermediate_size` (gate, up, down).
    pub fn dense_mlp_params(&self) -> f64 {
        3.0 * (self.hidden_size * self.intermediate_size) as f64
    }

    /// Intermediate size of one routed expert (the dense size for a dense model).
    pub fn expert_intermediate(&self) -> u64 {
        self.moe
            .as_ref()
            .and_then(|m| m.expert_intermediate_size)
            .unwrap_or(self.intermediate_size)
    }

    /// Parameters of one routed expert (gate, up, down).
    pub fn expert_params(&self) -> f64 {
        3.0 * (self.hidden_size * self.expert_intermediate()) as f64
    }

    /// Parameters of a MoE layer's shared experts, all together (0 when none).
    pub fn shared_expert_params(&self) -> f64 {
        let f = self
            .moe
            .as_ref()
            .map_or(0, |m| m.shared_expert_intermediate_size);
        3.0 * (self.hidden_size * f) as f64
    }

    /// Parameters of one MoE layer's router (h x experts; 0 for a dense model).
    pub fn router_params(&self) -> f64 {
        match &self.moe {
            Some(m) => (self.hidden_size * m.num_experts as u64) as f64,
            None => 0.0,
        }
    }

    /// Parameters of the MLP of one layer of kind `mlp`, with `experts` of its routed experts.
    fn mlp_params(&self, mlp: MlpKind, experts: f64) -> f64 {
        match mlp {
            MlpKind::Dense => self.dense_mlp_params(),
            MlpKind::Moe => {
                experts * self.expert_params() + self.shared_expert_params() + self.router_params()
            }
        }
    }

    /// Total parameter count, every expert included (the multi-token-prediction module some
    /// checkpoints carry is not: engines load it only for speculative decoding).
    pub fn total_params(&self) -> f64 {
        let experts = self.num_experts() as f64;
        let norms = 2.0 * self.hidden_size as f64;
        let attention = self.attention_params();
        let layers: f64 = self
            .layer_groups()
            .iter()
            .map(|(k, n)| *n as f64 * (attention + self.mlp_params(k.mlp, experts) + norms))
            .sum();
        let head = if self.tie_word_embeddings {
            0.0
        } else {
            self.lm_head_params()
        };
        layers + self.embedding_params() + head + self.hidden_size as f64
    }

    /// Parameters one token's forward pass multiplies: every layer's attention, its dense MLP
    /// or its top-k routed experts with the shared experts and the router, the norms and the
    /// LM head. The embedding table is not counted: a token reads one row of it.
    pub fn active_params(&self) -> f64 {
        let k = self.experts_per_token() as f64;
        let norms = 2.0 * self.hidden_size as f64;
        let attention = self.attention_params();
        let layers: f64 = self
            .layer_groups()
            .iter()
            .map(|(kind, n)| *n as f64 * (attention + self.mlp_params(kind.mlp, k) + norms))
            .sum();
        layers + self.lm_head_params() + self.hidden_size as f64
    }

    /// KV-cache elements one layer keeps per token: MLA's latent (`kv_lora_rank +
    /// qk_rope_head_dim`, shared by all heads), otherwise K and V of each KV head.
    pub fn kv_elems_per_token_layer(&self) -> f64 {
        match &self.mla {
            Some(m) => (m.kv_lora_rank + m.qk_rope_head_dim) as f64,
            None => 2.0 * self.kv_dim() as f64,
        }
    }

    /// KV-cache bytes per token, whole model, by attention kind, at `bytes_per_elem`.
    pub fn kv_per_token(&self, bytes_per_elem: f64) -> KvPerToken {
        let per_layer = self.kv_elems_per_token_layer() * bytes_per_elem;
        let mut kv = KvPerToken {
            per_layer_bytes: per_layer,
            window_tokens: self.local_attention.as_ref().map_or(0, |l| l.window),
            ..Default::default()
        };
        for (kind, n) in self.layer_groups() {
            match kind.attention {
                AttentionKind::Full => kv.full_layers += n,
                AttentionKind::Sliding => kv.sliding_layers += n,
                AttentionKind::Chunked => kv.chunked_layers += n,
            }
        }
        kv.full_bytes = kv.full_layers as f64 * per_layer;
        kv.local_bytes = (kv.sliding_layers + kv.chunked_layers) as f64 * per_layer;
        kv
    }
}
