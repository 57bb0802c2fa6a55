//! The embedded model catalog (`models/*.toml`) and lookup by name or path.

use std::path::Path;

use super::ModelSpec;
use crate::error::{Error, Result};

/// (file name, contents) of every catalog model, embedded at build time.
const CATALOG: &[(&str, &str)] = &[
    (
        "llama-3.1-8b",
        include_str!("../../models/llama-3.1-8b.toml"),
    ),
    (
        "llama-3.1-70b",
        include_str!("../../models/llama-3.1-70b.toml"),
    ),
    (
        "llama-3.1-405b",
        include_str!("../../models/llama-3.1-405b.toml"),
    ),
    ("llama-2-7b", include_str!("../../models/llama-2-7b.toml")),
    ("llama-2-70b", include_str!("../../models/llama-2-70b.toml")),
    (
        "codellama-34b",
        include_str!("../../models/codellama-34b.toml"),
    ),
    ("qwen2.5-7b", include_str!("../../models/qwen2.5-7b.toml")),
    ("qwen2.5-72b", include_str!("../../models/qwen2.5-72b.toml")),
    (
        "mistral-nemo-12b",
        include_str!("../../models/mistral-nemo-12b.toml"),
    ),
    (
        "mixtral-8x7b",
        include_str!("../../models/mixtral-8x7b.toml"),
    ),
];

/// Names of the catalog models.
pub fn catalog_names() -> Vec<&'static str> {
    CATALOG.iter().map(|(n, _)| *n).collect()
}

fn parse_toml(text: &str, origin: &str) -> Result<ModelSpec> {
    let spec: ModelSpec = toml::from_str(text).map_err(|e| Error::Parse {
        path: origin.to_string(),
        message: e.to_string(),
    })?;
    spec.validate(origin)?;
    Ok(spec)
}

/// Loads a model by catalog name (case-insensitive), or from a path to a `*.toml` in the
/// catalog format or a Hugging Face `config.json`.
pub fn load_model(name_or_path: &str) -> Result<ModelSpec> {
    let lower = name_or_path.to_ascii_lowercase();
    if let Some((name, text)) = CATALOG.iter().find(|(n, _)| *n == lower) {
        return parse_toml(text, &format!("models/{name}.toml"));
    }
    let path = Path::new(name_or_path);
    let looks_like_path = name_or_path.contains('/')
        || name_or_path.ends_with(".json")
        || name_or_path.ends_with(".toml");
    if looks_like_path {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        return if name_or_path.ends_with(".toml") {
            parse_toml(&text, name_or_path)
        } else {
            super::parse_hf_config(&text, name_or_path)
        };
    }
    Err(Error::Unknown {
        kind: "model",
        name: name_or_path.to_string(),
        known: catalog_names().join(", ") + " (or a path to a config.json)",
    })
}
