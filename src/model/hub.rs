//! Model names as users write them: a Hugging Face id (`meta-llama/Llama-3.1-8B-Instruct`)
//! resolves to its `config.json` in the local Hugging Face cache, or is downloaded with the
//! hub client when the network allows; a model folder resolves to the `config.json` inside.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where a Hugging Face id was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubLookup {
    /// The cache's hub folder (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`).
    pub hub_dir: PathBuf,
    /// The repository's folder in it (`models--org--name`).
    pub repo_dir: PathBuf,
}

/// Whether `given` is written as a Hugging Face id: `org/name`, one slash, no extension the
/// catalog reads, not an absolute or dotted path.
pub fn looks_like_hub_id(given: &str) -> bool {
    let g = given.trim();
    let parts: Vec<&str> = g.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
        && !g.ends_with(".json")
        && !g.ends_with(".toml")
}

/// The hub cache folder the environment names, as the Hugging Face libraries find it.
fn hub_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let home = match std::env::var_os("HF_HOME").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"));
            base.join("huggingface")
        }
    };
    home.join("hub")
}

/// The cached `config.json` of `id` in `hub`: the snapshot `refs/main` names, else the only
/// (or the most recently modified) snapshot holding one.
fn cached_config(hub: &Path, id: &str) -> (HubLookup, Option<PathBuf>) {
    let repo_dir = hub.join(format!("models--{}", id.replace('/', "--")));
    let lookup = HubLookup {
        hub_dir: hub.to_path_buf(),
        repo_dir: repo_dir.clone(),
    };
    let snapshots = repo_dir.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo_dir.join("refs").join("main")) {
        let p = snapshots.join(rev.trim()).join("config.json");
        if p.is_file() {
            return (lookup, Some(p));
        }
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&snapshots)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("config.json"))
        .filter(|p| p.is_file())
        .map(|p| {
            let t = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (t, p)
        })
        .collect();
    found.sort();
    (lookup, found.pop().map(|(_, p)| p))
}

/// Downloads `id`'s `config.json` into the cache with the hub client (token from `HF_TOKEN`
/// or the cache's token file), unless `HF_HUB_OFFLINE` is set.
fn download(id: &str, hub: &Path) -> std::result::Result<PathBuf, String> {
    if std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Err("HF_HUB_OFFLINE is set".into());
    }
    let cache = hf_hub::Cache::new(hub.to_path_buf());
    let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(cache).with_progress(false);
    if let Ok(token) = std::env::var("HF_TOKEN") {
        if !token.is_empty() {
            builder = builder.with_token(Some(token));
        }
    }
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        if !endpoint.is_empty() {
            builder = builder.with_endpoint(endpoint);
        }
    }
    let api = builder.build().map_err(|e| e.to_string())?;
    api.model(id.to_string())
        .get("config.json")
        .map_err(|e| e.to_string())
}

/// The `config.json` a model name or path stands for: a file as given, the `config.json` in
/// a folder, or a Hugging Face id's in the local cache (downloaded when missing and the
/// network allows). The error says where it looked and how to get the file.
pub fn resolve_model_path(given: &str) -> Result<PathBuf> {
    let path = PathBuf::from(given);
    if path.is_dir() {
        let inner = path.join("config.json");
        if inner.is_file() {
            return Ok(inner);
        }
        return Err(Error::config(
            given,
            "model",
            format!(
                "the folder has no config.json ({} not found)",
                inner.display()
            ),
        ));
    }
    if path.exists() || !looks_like_hub_id(given) {
        return Ok(path);
    }
    let id = given.trim();
    let hub = hub_dir();
    let (lookup, cached) = cached_config(&hub, id);
    if let Some(p) = cached {
        return Ok(p);
    }
    match download(id, &hub) {
        Ok(p) => Ok(p),
        Err(why) => Err(Error::config(
            id,
            "model",
            format!(
                "not a catalog model, not a file or folder, and not in the Hugging Face cache \
                 (looked for {}/snapshots/<revision>/config.json, the revision from refs/main, \
                 under {} — set HF_HOME or HF_HUB_CACHE to use another cache); downloading it \
                 failed: {why}. Get it with `huggingface-cli download {id} config.json` (set \
                 HF_TOKEN for a gated model), or pass the path of its config.json or folder",
                lookup.repo_dir.display(),
                lookup.hub_dir.display(),
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_org_slash_name() {
        assert!(looks_like_hub_id("meta-llama/Llama-3.1-8B-Instruct"));
        assert!(looks_like_hub_id("Qwen/Qwen3-235B-A22B"));
        assert!(!looks_like_hub_id("models/llama.toml"));
        assert!(!looks_like_hub_id("dir/config.json"));
        assert!(!looks_like_hub_id("/abs/path"));
        assert!(!looks_like_hub_id("./x/y"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("llama-3.1-8b"));
    }

    #[test]
    fn the_cache_snapshot_named_by_refs_main_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("models--org--m");
        for rev in ["aaa", "bbb"] {
            let snap = repo.join("snapshots").join(rev);
            std::fs::create_dir_all(&snap).unwrap();
            std::fs::write(snap.join("config.json"), rev).unwrap();
        }
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join("main"), "aaa\n").unwrap();
        let (lookup, found) = cached_config(dir.path(), "org/m");
        assert_eq!(lookup.repo_dir, repo);
        assert_eq!(
            found.unwrap(),
            repo.join("snapshots").join("aaa").join("config.json")
        );
        let (_, none) = cached_config(dir.path(), "org/other");
        assert!(none.is_none());
    }
}
