//! The embedded model catalog (`models/*.toml`) and lookup by name or path.

use super::ModelSpec;
use crate::catalog::{self, Entry, Kind};
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
    ("deepseek-v3", include_str!("../../models/deepseek-v3.toml")),
    ("deepseek-r1", include_str!("../../models/deepseek-r1.toml")),
    (
        "qwen3-235b-a22b",
        include_str!("../../models/qwen3-235b-a22b.toml"),
    ),
    ("qwen3-32b", include_str!("../../models/qwen3-32b.toml")),
    (
        "qwen3-30b-a3b",
        include_str!("../../models/qwen3-30b-a3b.toml"),
    ),
    (
        "gpt-oss-120b",
        include_str!("../../models/gpt-oss-120b.toml"),
    ),
    ("gpt-oss-20b", include_str!("../../models/gpt-oss-20b.toml")),
    (
        "llama-4-scout",
        include_str!("../../models/llama-4-scout.toml"),
    ),
    (
        "llama-4-maverick",
        include_str!("../../models/llama-4-maverick.toml"),
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
    crate::error::check_printable(origin, "name", &spec.name)?;
    crate::error::check_printable(origin, "display_name", &spec.display_name)?;
    Ok(spec)
}

/// Loads a model by catalog name (case-insensitive; [`crate::catalog`]), from a path to a
/// `*.toml` in the catalog format, a Hugging Face `config.json` or the folder holding it, or
/// by Hugging Face id (`org/name`, [`super::resolve_model_path`]).
pub fn load_model(name_or_path: &str) -> Result<ModelSpec> {
    match catalog::resolve(Kind::Model, name_or_path)? {
        Entry::Catalog(name) => {
            let text = CATALOG
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| *t)
                .unwrap_or_default(); // resolve() only returns names of CATALOG
            parse_toml(text, &format!("models/{name}.toml"))
        }
        Entry::Path(_) => {
            let path = super::resolve_model_path(name_or_path)?;
            let text = crate::input::read_to_string(&path, crate::input::InputKind::Config)?;
            let origin = path.display().to_string();
            if name_or_path.ends_with(".toml") {
                parse_toml(&text, name_or_path)
            } else if path.as_os_str() == name_or_path {
                super::parse_hf_config(&text, name_or_path)
            } else {
                super::parse_hf_config(&text, &origin)
            }
        }
    }
}
