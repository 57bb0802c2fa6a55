//! Transformer architecture: shapes, parameter counts, and bytes/FLOPs per operator.
//!
//! A [`ModelSpec`] comes from the catalog in `models/*.toml` (embedded in the binary) or from a
//! Hugging Face `config.json`. Everything the step-time model needs about a model is derived
//! here from the architecture, never from a per-model constant.

mod hf;
mod hub;
mod layers;
mod load;

pub use hub::{looks_like_hub_id, resolve_model_path, HubLookup};
pub use layers::{AttentionKind, KvPerToken, LayerKind, MlpKind};
pub use load::{catalog_names, load_model};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::precision::{KvDtype, WeightDtype};

/// Mixture-of-experts block: the MLP of the MoE layers is replaced by `num_experts` routed
/// experts, `experts_per_token` of which process each token, plus optional shared experts that
/// every token passes through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// Number of routed experts per MoE layer.
    pub num_experts: u32,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: u32,
    /// Intermediate size of one routed expert (absent: the model's `intermediate_size`, as
    /// Mixtral's config writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_intermediate_size: Option<u64>,
    /// Intermediate size of the shared experts of a MoE layer, all of them together (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shared_expert_intermediate_size: u64,
    /// Layers (0-based) that keep a dense MLP of `intermediate_size` instead of experts
    /// (DeepSeek's `first_k_dense_replace`, Qwen's `mlp_only_layers`, Llama-4's interleaving).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dense_layers: Vec<u64>,
}

/// Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2): keys and values are stored as
/// one compressed latent of `kv_lora_rank + qk_rope_head_dim` values per token and layer,
/// shared by every head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaSpec {
    /// Rank of the compressed KV latent.
    pub kv_lora_rank: u64,
    /// Rank of the compressed query (absent: a plain query projection, as DeepSeek-V2-Lite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q_lora_rank: Option<u64>,
    /// Per-head query/key dimensions without rotary embedding.
    pub qk_nope_head_dim: u64,
    /// Per-head query/key dimensions with rotary embedding (the key part is shared by heads).
    pub qk_rope_head_dim: u64,
    /// Per-head value dimensions.
    pub v_head_dim: u64,
}

/// How a layer's attention is bounded: a window of the latest tokens, or chunks of the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalKind {
    /// Each token attends to the `window` tokens before it (Mistral, Gemma-3, gpt-oss).
    Sliding,
    /// Each token attends to the tokens of its own chunk of `window` tokens (Llama-4).
    Chunked,
}

/// Layers whose attention is local (a sliding window or a chunk) beside layers of full
/// attention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalAttentionSpec {
    /// Sliding window or chunked attention.
    pub kind: LocalKind,
    /// The window or chunk, tokens.
    pub window: u64,
    /// Layers (0-based) that keep full attention; every other layer is local.
    #[serde(default)]
    pub full_attention_layers: Vec<u64>,
}

/// The formats a checkpoint stores its weights in (its `quantization_config`), by module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointFormats {
    /// Routed experts.
    pub experts: WeightDtype,
    /// Everything else that is a linear layer: attention, dense MLPs, shared experts.
    pub other: WeightDtype,
    /// The attention projections, where the checkpoint leaves them out of its quantization
    /// (an `exclude_modules` / `ignore` entry naming `self_attn`); absent: `other`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<WeightDtype>,
    /// The attention's output projection, where the checkpoint quantizes it apart from the
    /// other attention projections (an exclude list naming a layer's other `self_attn`
    /// projections but not its `o_proj`: ModelOpt's DeepSeek recipe with `--enable_wo_quant`);
    /// absent: as `attention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_out: Option<WeightDtype>,
    /// The multi-token-prediction layers, where the checkpoint leaves them out of its
    /// quantization (an entry naming layer `num_hidden_layers`, the first MTP layer); absent:
    /// `other`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp: Option<WeightDtype>,
    /// The KV-cache format the checkpoint declares (absent: the 16-bit activation format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvDtype>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
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
    /// Published count of the parameters one token's forward pass multiplies, for checking
    /// the derived count (0: not given).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub published_active_params: f64,
    /// Mixture-of-experts block, if any.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
    /// Multi-head latent attention, if the model uses it (then `num_kv_heads` and `head_dim`
    /// describe the query heads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<MlaSpec>,
    /// Local (sliding-window or chunked) attention on some layers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_attention: Option<LocalAttentionSpec>,
    /// Whether each attention head has a learned sink logit (gpt-oss): one parameter per head
    /// and layer, no KV.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_sinks: bool,
    /// The checkpoint's own weight formats, when it ships quantized (`dtype = "auto"` runs
    /// them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointFormats>,
    /// Other published checkpoints of the model, by their Hugging Face id, with the formats
    /// their quantization config gives each module (`deployment.checkpoint` runs one; each
    /// entry's source is beside it in the catalog file).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub published_checkpoints: std::collections::BTreeMap<String, CheckpointFormats>,
    /// Multi-token-prediction layers the checkpoint ships beside its `num_layers` (Hugging
    /// Face `num_nextn_predict_layers`: 1 for DeepSeek-V3/R1 and GLM-4.5; 0 or absent: none).
    /// Engines load them only for `method = "mtp"` speculative decoding.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num_nextn_predict_layers: u64,
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
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
        self.validate_layers(origin)?;
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

    /// Checks the per-layer structure: layer indices within the model, positive MLA ranks
    /// and windows.
    fn validate_layers(&self, origin: &str) -> Result<()> {
        let lists = [
            (
                "moe.dense_layers",
                self.moe.as_ref().map(|m| &m.dense_layers),
            ),
            (
                "local_attention.full_attention_layers",
                self.local_attention
                    .as_ref()
                    .map(|l| &l.full_attention_layers),
            ),
        ];
        for (key, list) in lists {
            if let Some(&i) = list.and_then(|l| l.iter().find(|&&i| i >= self.num_layers)) {
                return Err(Error::config(
                    origin,
                    key,
                    format!("layer {i} is past the model's {} layers", self.num_layers),
                ));
            }
        }
        if let Some(l) = &self.local_attention {
            if l.window == 0 {
                return Err(Error::config(
                    origin,
                    "local_attention.window",
                    "must be > 0",
                ));
            }
        }
        if let Some(m) = &self.mla {
            for (key, v) in [
                ("mla.kv_lora_rank", m.kv_lora_rank),
                ("mla.qk_nope_head_dim", m.qk_nope_head_dim),
                ("mla.qk_rope_head_dim", m.qk_rope_head_dim),
                ("mla.v_head_dim", m.v_head_dim),
                ("mla.q_lora_rank", m.q_lora_rank.unwrap_or(1)),
            ] {
                if v == 0 {
                    return Err(Error::config(origin, key, "must be > 0, got 0"));
                }
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

    /// Parameters of one layer by operator (a GQA/MHA layer; the MLP of one routed expert for
    /// a MoE model).
    pub fn layer_params(&self) -> LayerParams {
        let h = self.hidden_size as f64;
        let qkv_out = (self.q_dim() + 2 * self.kv_dim()) as f64;
        let f = self.expert_intermediate() as f64;
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

    /// KV-cache bytes per token for the whole model with every layer keeping every token (as
    /// an engine without a hybrid KV allocator stores it): 2 x L x n_kv x d x bytes_per_elem,
    /// or L x (kv_lora_rank + qk_rope_head_dim) x bytes_per_elem with MLA.
    /// [`ModelSpec::kv_per_token`] splits it by attention kind.
    pub fn kv_bytes_per_token(&self, bytes_per_elem: f64) -> f64 {
        match &self.mla {
            Some(_) => self.num_layers as f64 * self.kv_elems_per_token_layer() * bytes_per_elem,
            None => 2.0 * self.num_layers as f64 * self.kv_dim() as f64 * bytes_per_elem,
        }
    }

    /// Expected number of distinct experts (of `num_experts`) that `tokens` tokens hit when
    /// each picks `experts_per_token` of them uniformly: E x (1 - (1 - k/E)^T). Dense: 1.
    pub fn expected_active_experts(&self, tokens: f64) -> f64 {
        match &self.moe {
            None => 1.0,
            Some(m) => expected_active_experts(
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

/// The expected number of distinct experts (of `experts`) that `tokens` tokens hit when each
/// picks `top_k` of them uniformly at random: `E (1 - (1 - k/E)^T)`.
pub fn expected_active_experts(tokens: f64, experts: f64, top_k: f64) -> f64 {
    if experts <= 0.0 || tokens <= 0.0 {
        return 0.0;
    }
    experts * (1.0 - (1.0 - (top_k / experts).min(1.0)).powf(tokens))
}
