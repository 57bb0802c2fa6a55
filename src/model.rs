//! Transformer architecture: shapes, parameter counts, and bytes/FLOPs per operator.
//!
//! A [`ModelSpec`] comes from the catalog in `models/*.toml` (embedded in the binary) or from a
//! Hugging Face `config.json`. Everything the step-time model needs about a model is derived
//! here from the architecture, never from a per-model constant.

mod catalog;
mod hf;

pub use catalog::{catalog_names, load_model};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Mixture-of-experts block: the MLP is replaced by `num_experts` experts, `experts_per_token`
/// of which process each token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// Number of experts per MoE layer.
    pub num_experts: u32,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: u32,
}

/// A dense or MoE decoder-only transformer, as its config describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Catalog name, e.g. `llama-3.1-8b`.
    pub name: String,
    /// Human-readable name, e.g. `Llama-3.1-8B`.
    #[serde(default)]
    pub display_name: String,
    /// Where the architecture figures come from.
    #[serde(default)]
    pub source: String,
    /// Hidden size h.
    pub hidden_size: u64,
    /// Number of decoder layers L.
    pub num_layers: u64,
    /// Query heads n_h.
    pub num_attention_heads: u64,
    /// Key/value heads n_kv (GQA; equal to n_h for MHA).
    pub num_kv_heads: u64,
    /// Head dimension d.
    pub head_dim: u64,
    /// MLP intermediate size f (per expert for MoE).
    pub intermediate_size: u64,
    /// Vocabulary size V.
    pub vocab_size: u64,
    /// Whether the LM head shares the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Whether the QKV projection has a bias (Qwen2).
    #[serde(default)]
    pub attention_bias: bool,
    /// Longest context the model supports, tokens.
    #[serde(default = "default_max_position")]
    pub max_position_embeddings: u64,
    /// Published parameter count, for checking the derived count.
    #[serde(default)]
    pub published_params: f64,
    /// Mixture-of-experts block, if any.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
}

fn default_max_position() -> u64 {
    4096
}

/// Parameters of one decoder layer, split by operator (elements, not bytes), whole model (TP=1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerParams {
    /// QKV projection weights (+ bias).
    pub qkv: f64,
    /// Attention output projection.
    pub o: f64,
    /// Gate and up projections of one expert (or the dense MLP).
    pub gate_up: f64,
    /// Down projection of one expert (or the dense MLP).
    pub down: f64,
    /// MoE router (0 for dense).
    pub router: f64,
    /// RMSNorm weights.
    pub norms: f64,
}

impl ModelSpec {
    /// Checks that the architecture is self-consistent; `origin` names the file for errors.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let positive = [
            ("hidden_size", self.hidden_size),
            ("num_layers", self.num_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(Error::config(origin, key, "must be > 0, got 0"));
            }
        }
        if self.num_attention_heads % self.num_kv_heads != 0 {
            return Err(Error::config(
                origin,
                "num_kv_heads",
                format!(
                    "must divide num_attention_heads ({}), got {}",
                    self.num_attention_heads, self.num_kv_heads
                ),
            ));
        }
        if let Some(moe) = &self.moe {
            if moe.num_experts == 0 || moe.experts_per_token == 0 {
                return Err(Error::config(origin, "moe", "experts must be > 0"));
            }
            if moe.experts_per_token > moe.num_experts {
                return Err(Error::config(
                    origin,
                    "moe.experts_per_token",
                    format!(
                        "must be <= num_experts ({}), got {}",
                        moe.num_experts, moe.experts_per_token
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Query width n_h x d.
    pub fn q_dim(&self) -> u64 {
        self.num_attention_heads * self.head_dim
    }

    /// Key (or value) width n_kv x d.
    pub fn kv_dim(&self) -> u64 {
        self.num_kv_heads * self.head_dim
    }

    /// Number of experts (1 for a dense model).
    pub fn num_experts(&self) -> u64 {
        self.moe.as_ref().map_or(1, |m| m.num_experts as u64)
    }

    /// Experts each token uses (1 for a dense model).
    pub fn experts_per_token(&self) -> u64 {
        self.moe.as_ref().map_or(1, |m| m.experts_per_token as u64)
    }

    /// Parameters of one layer by operator.
    pub fn layer_params(&self) -> LayerParams {
        let h = self.hidden_size as f64;
        let qkv_out = (self.q_dim() + 2 * self.kv_dim()) as f64;
        let f = self.intermediate_size as f64;
        LayerParams {
            qkv: h * qkv_out + if self.attention_bias { qkv_out } else { 0.0 },
            o: self.q_dim() as f64 * h,
            gate_up: 2.0 * h * f,
            down: f * h,
            router: if self.moe.is_some() {
                h * self.num_experts() as f64
            } else {
                0.0
            },
            norms: 2.0 * h,
        }
    }

    /// Embedding parameters (V x h).
    pub fn embedding_params(&self) -> f64 {
        (self.vocab_size * self.hidden_size) as f64
    }

    /// LM head parameters (V x h; stored once more unless tied).
    pub fn lm_head_params(&self) -> f64 {
        (self.vocab_size * self.hidden_size) as f64
    }

    /// Total parameter count, all experts included.
    pub fn total_params(&self) -> f64 {
        let lp = self.layer_params();
        let experts = self.num_experts() as f64;
        let per_layer = lp.qkv + lp.o + experts * (lp.gate_up + lp.down) + lp.router + lp.norms;
        let head = if self.tie_word_embeddings {
            0.0
        } else {
            self.lm_head_params()
        };
        self.num_layers as f64 * per_layer
            + self.embedding_params()
            + head
            + self.hidden_size as f64
    }

    /// KV-cache bytes per token for the whole model: 2 x L x n_kv x d x bytes_per_elem.
    pub fn kv_bytes_per_token(&self, bytes_per_elem: f64) -> f64 {
        2.0 * self.num_layers as f64 * self.kv_dim() as f64 * bytes_per_elem
    }

    /// Expected number of distinct experts (of `num_experts`) that `tokens` tokens hit when
    /// each picks `experts_per_token` of them uniformly: E x (1 - (1 - k/E)^T). Dense: 1.
    pub fn expected_active_experts(&self, tokens: f64) -> f64 {
        match &self.moe {
            None => 1.0,
            Some(m) => crate::roofline::kernels::expected_active_experts(
                tokens.max(0.0),
                m.num_experts as f64,
                m.experts_per_token as f64,
            ),
        }
    }
}

/// Reads a model from a Hugging Face `config.json` text; `origin` names it in errors.
pub fn parse_hf_config(text: &str, origin: &str) -> Result<ModelSpec> {
    hf::parse(text, origin)
}
