//! Reading a Hugging Face `config.json` into a [`ModelSpec`].

use serde::Deserialize;

use super::{ModelSpec, MoeSpec};
use crate::error::{Error, Result};

/// The subset of a Hugging Face config that servesim reads; other keys are ignored.
#[derive(Debug, Deserialize)]
struct HfConfig {
    /// A name of the user's choosing (not a Hugging Face key): the model's name in reports.
    #[serde(default)]
    name: Option<String>,
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
    let mut spec = ModelSpec {
        display_name: String::new(),
        name: String::new(),
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
    // Named by a `name` key when the file has one, else by its architecture and size
    // (`qwen2-7.6B`), never by the folder it happens to sit in.
    let name = match cfg.name.as_deref().map(str::trim) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!(
            "{}-{}",
            cfg.model_type.as_deref().unwrap_or("model"),
            size_label(spec.total_params())
        ),
    };
    spec.display_name = name.clone();
    spec.name = name;
    Ok(spec)
}

/// A parameter count as the field writes it: `7.6B`, `70B`, `494M`.
fn size_label(params: f64) -> String {
    if params >= 9.95e9 {
        format!("{:.0}B", params / 1e9)
    } else if params >= 1e9 {
        format!("{:.1}B", params / 1e9)
    } else {
        format!("{:.0}M", params / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::size_label;

    #[test]
    fn sizes() {
        assert_eq!(size_label(8.03e9), "8.0B");
        assert_eq!(size_label(7.62e9), "7.6B");
        assert_eq!(size_label(70.55e9), "71B");
        assert_eq!(size_label(494e6), "494M");
    }
}
