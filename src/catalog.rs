//! Catalog names: the one resolver every command uses to turn a name given for a model, GPU
//! profile, engine profile or price into a catalog entry or a file path.
//!
//! Every lookup goes through [`resolve`], so an alias accepted in one place (`h200` in
//! `estimate --gpu`) is accepted everywhere (a scenario's `deployment.gpu`, `plan.gpus`, the
//! price catalog), and an unknown name is one error listing the valid names and aliases.
//!
//! The catalog is pure data: the files embedded at build time, by kind. The modules that
//! parse them (model, gpu, engine) depend on it, never the other way round.

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
        self.files().iter().map(|(n, _)| *n).collect()
    }

    /// (name, contents) of every embedded file of this kind.
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Kind::Model => MODELS,
            Kind::Gpu => GPUS,
            Kind::Engine => ENGINES,
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

/// The contents of the embedded file `name` of `kind` (a name [`resolve`] returned as
/// [`Entry::Catalog`]); empty for a name the catalog does not hold.
pub fn embedded(kind: Kind, name: &str) -> &'static str {
    kind.files()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_default()
}

/// (file name, contents) of every catalog model (`models/*.toml`), embedded at build time.
const MODELS: &[(&str, &str)] = &[
    ("llama-3.1-8b", include_str!("../models/llama-3.1-8b.toml")),
    (
        "llama-3.1-70b",
        include_str!("../models/llama-3.1-70b.toml"),
    ),
    (
        "llama-3.1-405b",
        include_str!("../models/llama-3.1-405b.toml"),
    ),
    ("llama-2-7b", include_str!("../models/llama-2-7b.toml")),
    ("llama-2-70b", include_str!("../models/llama-2-70b.toml")),
    (
        "codellama-34b",
        include_str!("../models/codellama-34b.toml"),
    ),
    ("qwen2.5-7b", include_str!("../models/qwen2.5-7b.toml")),
    ("qwen2.5-72b", include_str!("../models/qwen2.5-72b.toml")),
    (
        "mistral-nemo-12b",
        include_str!("../models/mistral-nemo-12b.toml"),
    ),
    ("mixtral-8x7b", include_str!("../models/mixtral-8x7b.toml")),
    ("deepseek-v3", include_str!("../models/deepseek-v3.toml")),
    ("deepseek-r1", include_str!("../models/deepseek-r1.toml")),
    (
        "qwen3-235b-a22b",
        include_str!("../models/qwen3-235b-a22b.toml"),
    ),
    ("qwen3-32b", include_str!("../models/qwen3-32b.toml")),
    (
        "qwen3-30b-a3b",
        include_str!("../models/qwen3-30b-a3b.toml"),
    ),
    ("gpt-oss-120b", include_str!("../models/gpt-oss-120b.toml")),
    ("gpt-oss-20b", include_str!("../models/gpt-oss-20b.toml")),
    (
        "llama-4-scout",
        include_str!("../models/llama-4-scout.toml"),
    ),
    (
        "llama-4-maverick",
        include_str!("../models/llama-4-maverick.toml"),
    ),
];

/// (name, contents) of every embedded GPU profile (`calibration/gpus/*.toml`).
const GPUS: &[(&str, &str)] = &[
    (
        "h100-sxm",
        include_str!("../calibration/gpus/h100-sxm.toml"),
    ),
    (
        "h100-pcie",
        include_str!("../calibration/gpus/h100-pcie.toml"),
    ),
    (
        "h200-sxm",
        include_str!("../calibration/gpus/h200-sxm.toml"),
    ),
    (
        "a100-sxm-80gb",
        include_str!("../calibration/gpus/a100-sxm-80gb.toml"),
    ),
    ("b200", include_str!("../calibration/gpus/b200.toml")),
];

/// (name, contents) of every embedded engine profile (`calibration/engines/*.toml`).
const ENGINES: &[(&str, &str)] = &[
    ("vllm", include_str!("../calibration/engines/vllm.toml")),
    ("trtllm", include_str!("../calibration/engines/trtllm.toml")),
    ("sglang", include_str!("../calibration/engines/sglang.toml")),
];

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
