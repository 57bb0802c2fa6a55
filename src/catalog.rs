//! Catalog names: the one resolver every command uses to turn a name given for a model, GPU
//! profile, engine profile or price into a catalog entry or a file path.
//!
//! Every lookup goes through [`resolve`], so an alias accepted in one place (`h200` in
//! `estimate --gpu`) is accepted everywhere (a scenario's `deployment.gpu`, `plan.gpus`, the
//! price catalog), and an unknown name is one error listing the valid names and aliases.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// What kind of catalog entry a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A model (`models/*.toml`), or a path to a catalog-format `.toml` or a Hugging Face
    /// `config.json`.
    Model,
    /// A GPU profile (`calibration/gpus/*.toml`), or a path to a profile `.toml`.
    Gpu,
    /// A serving-engine profile (`calibration/engines/*.toml`), or a path to a profile `.toml`.
    Engine,
}

impl Kind {
    /// The word used in messages.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::Gpu => "gpu",
            Kind::Engine => "engine",
        }
    }

    /// The catalog's entry names.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            Kind::Model => crate::model::catalog_names(),
            Kind::Gpu => crate::gpu::gpu_names(),
            Kind::Engine => crate::engine::engine_names(),
        }
    }

    /// (alias, catalog name) pairs, as the field spells them: `h100` is the SXM part.
    pub fn aliases(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Kind::Model => &[],
            Kind::Gpu => &[
                ("h100", "h100-sxm"),
                ("h100-sxm5", "h100-sxm"),
                ("h100_sxm", "h100-sxm"),
                ("h100-pcie-80gb", "h100-pcie"),
                ("h200", "h200-sxm"),
                ("h200-sxm5", "h200-sxm"),
                ("h200_sxm", "h200-sxm"),
                ("a100", "a100-sxm-80gb"),
                ("a100-sxm", "a100-sxm-80gb"),
                ("a100-80gb", "a100-sxm-80gb"),
                ("b200-sxm", "b200"),
            ],
            Kind::Engine => &[
                ("tensorrt-llm", "trtllm"),
                ("tensorrt_llm", "trtllm"),
                ("trt-llm", "trtllm"),
            ],
        }
    }

    /// What a path given instead of a name must be.
    fn path_hint(self) -> &'static str {
        match self {
            Kind::Model => {
                "a path to a config.json, its folder or a model .toml, or a Hugging Face id \
                 (org/name)"
            }
            Kind::Gpu => "a path to a profile .toml",
            Kind::Engine => "a path to an engine profile .toml",
        }
    }

    /// The valid names, then the aliases and what paths are accepted, for error messages.
    pub fn known(self) -> String {
        let mut s = self.names().join(", ");
        let aliases = self.aliases();
        if !aliases.is_empty() {
            s.push_str(" (aliases: ");
            s.push_str(
                &aliases
                    .iter()
                    .map(|(a, n)| format!("{a} = {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            s.push(')');
        }
        s.push_str(", or ");
        s.push_str(self.path_hint());
        s
    }
}

/// What a given name refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A catalog entry, by its catalog name.
    Catalog(&'static str),
    /// A file, as given.
    Path(PathBuf),
}

/// The catalog name `given` stands for (case-insensitive, aliases included), if any.
pub fn canonical(kind: Kind, given: &str) -> Option<&'static str> {
    let lower = given.trim().to_ascii_lowercase();
    let names = kind.names();
    if let Some(n) = names.iter().find(|n| **n == lower) {
        return Some(n);
    }
    kind.aliases()
        .iter()
        .find(|(a, _)| *a == lower)
        .and_then(|(_, n)| names.iter().find(|x| *x == n).copied())
}

/// Whether `given` is written as a file path rather than a name: it has a directory part or
/// a file extension the catalog reads (`.toml`, `.json`).
pub fn looks_like_path(given: &str) -> bool {
    given.contains('/')
        || given.contains('\\')
        || given.ends_with(".toml")
        || given.ends_with(".json")
}

/// Resolves a name given for `kind`: a catalog name or alias, else a path; anything else is
/// an [`Error::Unknown`] listing the valid names and aliases.
pub fn resolve(kind: Kind, given: &str) -> Result<Entry> {
    if let Some(n) = canonical(kind, given) {
        return Ok(Entry::Catalog(n));
    }
    if looks_like_path(given) {
        return Ok(Entry::Path(PathBuf::from(given)));
    }
    Err(Error::Unknown {
        kind: kind.label(),
        name: given.to_string(),
        known: kind.known(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_points_at_a_catalog_entry() {
        for kind in [Kind::Model, Kind::Gpu, Kind::Engine] {
            for (alias, name) in kind.aliases() {
                assert!(kind.names().contains(name), "{alias} -> {name}");
                assert_eq!(canonical(kind, alias), Some(*name));
                assert_eq!(canonical(kind, &alias.to_ascii_uppercase()), Some(*name));
            }
            for name in kind.names() {
                assert_eq!(resolve(kind, name).unwrap(), Entry::Catalog(name));
            }
        }
    }

    #[test]
    fn paths_and_unknown_names() {
        assert_eq!(
            resolve(Kind::Gpu, "my/h200.toml").unwrap(),
            Entry::Path("my/h200.toml".into())
        );
        assert_eq!(
            resolve(Kind::Model, "config.json").unwrap(),
            Entry::Path("config.json".into())
        );
        let e = resolve(Kind::Gpu, "h20").unwrap_err().to_string();
        assert!(e.contains("unknown gpu 'h20'"), "{e}");
        assert!(
            e.contains("h200-sxm") && e.contains("h200 = h200-sxm"),
            "{e}"
        );
    }
}
