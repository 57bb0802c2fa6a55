//! Reading a Hugging Face `config.json` into a [`ModelSpec`].

use serde::Deserialize;

use super::{ModelSpec, MoeSpec};
use crate::error::{Error, Result};

/// The subset of a Hugging Face config that servesim reads; other keys are ignored.
#[derive(Debug, Deserialize)]
struct HfConfig {
    #[serde(default)]
    _name_or_path: Option<String>,
    #[serde(default)]
    model_type: Option<String>,
    hidden_size: Option<u64>,
    num_hidden_layers: Option<u64>,
    num_attention_heads: Option<u64>,
    #[serde(default)]
    num_key_value_heads: Option<u64>,
    #[serde(default)]
    head_dim: Option<u64>,
    intermediate_size: Option<u64>,
    vocab_size: Option<u64>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    max_position_embeddings: Option<u64>,
    #[serde(default)]
    num_local_experts: Option<u32>,
    #[serde(default)]
    num_experts_per_tok: Option<u32>,
    #[serde(default)]
    attention_bias: Option<bool>,
}

fn required(value: Option<u64>, origin: &str, key: &str) -> Result<u64> {
    value.ok_or_else(|| Error::config(origin, key, "missing (required in config.json)"))
}

/// Parses a `config.json` text; `origin` names the file in errors.
pub(super) fn parse(text: &str, origin: &str) -> Result<ModelSpec> {
    let cfg: HfConfig = serde_json::from_str(text).map_err(|e| Error::Parse {
        path: origin.to_string(),
        message: e.to_string(),
    })?;
    let hidden_size = required(cfg.hidden_size, origin, "hidden_size")?;
    let num_attention_heads = required(cfg.num_attention_heads, origin, "num_attention_heads")?;
    if num_attention_heads == 0 {
        return Err(Error::config(origin, "num_attention_heads", "must be > 0"));
    }
    let head_dim = cfg.head_dim.unwrap_or(hidden_size / num_attention_heads);
    let moe = match (cfg.num_local_experts, cfg.num_experts_per_tok) {
        (Some(e), Some(k)) if e > 1 => Some(MoeSpec {
            num_experts: e,
            experts_per_token: k,
        }),
        (Some(e), None) if e > 1 => {
            return Err(Error::config(
                origin,
                "num_experts_per_tok",
                "missing while num_local_experts > 1",
            ))
        }
        _ => None,
    };
    let name = std::path::Path::new(origin)
        .parent()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| cfg.model_type.clone().unwrap_or_else(|| "hf-model".into()));
    let spec = ModelSpec {
        display_name: cfg._name_or_path.clone().unwrap_or_else(|| name.clone()),
        name,
        source: format!("Hugging Face config {origin}"),
        hidden_size,
        num_layers: required(cfg.num_hidden_layers, origin, "num_hidden_layers")?,
        num_attention_heads,
        num_kv_heads: cfg.num_key_value_heads.unwrap_or(num_attention_heads),
        head_dim,
        intermediate_size: required(cfg.intermediate_size, origin, "intermediate_size")?,
        vocab_size: required(cfg.vocab_size, origin, "vocab_size")?,
        tie_word_embeddings: cfg.tie_word_embeddings.unwrap_or(false),
        attention_bias: cfg
            .attention_bias
            .unwrap_or(cfg.model_type.as_deref() == Some("qwen2")),
        max_position_embeddings: cfg.max_position_embeddings.unwrap_or(4096),
        published_params: 0.0,
        moe,
    };
    spec.validate(origin)?;
    Ok(spec)
}
