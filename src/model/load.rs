//! Loading a model by catalog name ([`crate::catalog`] embeds `models/*.toml`), by path or
//! by Hugging Face id.

use super::ModelSpec;
use crate::catalog::{self, Entry, Kind};
use crate::error::{Error, Result};

/// Names of the catalog models.
pub fn catalog_names() -> Vec<&'static str> {
    Kind::Model.names()
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
            let text = catalog::embedded(Kind::Model, name);
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
