//! Serving-engine profiles (vLLM, TensorRT-LLM, SGLang): scheduler defaults and the host-side
//! costs that belong to the engine, not to the GPU. Profiles live in
//! `calibration/engines/*.toml`, embedded in the binary.

use serde::{Deserialize, Serialize};

use crate::catalog::{self, Entry, Kind};
use crate::error::{Error, Result};

/// Scheduler defaults of an engine; a scenario may override each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerDefaults {
    /// Most sequences in one iteration (vLLM `max_num_seqs`).
    pub max_num_seqs: u32,
    /// Token budget of one iteration (vLLM `max_num_batched_tokens`).
    pub max_num_batched_tokens: u32,
    /// Whether long prompts are split into chunks that share iterations with decodes.
    pub enable_chunked_prefill: bool,
    /// Whether KV blocks of shared prefixes are reused across requests.
    pub enable_prefix_caching: bool,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Fraction of GPU memory the engine may use (weights + activations + KV).
    pub gpu_memory_utilization: f64,
    /// Whether decode iterations replay CUDA graphs (no per-kernel launch cost).
    pub cuda_graphs: bool,
    /// Largest batch (tokens) captured in CUDA graphs.
    pub cuda_graph_max_tokens: u32,
    /// Reserve KV blocks for the whole output at admission, so running requests are never
    /// preempted (TensorRT-LLM's GUARANTEED_NO_EVICT); vLLM allocates as it goes and preempts.
    pub reserve_output_kv: bool,
    /// Whether TP all-reduces of small messages use the engine's custom NVLink kernel.
    pub custom_allreduce: bool,
    /// Larger defaults the engine picks on large-memory GPUs, if it does.
    #[serde(default)]
    pub large_gpu: Option<LargeGpuDefaults>,
}

/// Scheduler defaults an engine uses instead on GPUs with at least `min_memory_bytes` whose
/// name contains none of `exclude` (vLLM: 70 GiB and more, except A100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LargeGpuDefaults {
    /// Smallest device memory the rule applies to, bytes.
    pub min_memory_bytes: f64,
    /// GPU names (substrings) the rule never applies to.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// max_num_seqs on such GPUs.
    pub max_num_seqs: u32,
    /// max_num_batched_tokens on such GPUs.
    pub max_num_batched_tokens: u32,
}

impl SchedulerDefaults {
    /// Applies the large-GPU defaults when `gpu` qualifies.
    pub fn for_gpu(&mut self, gpu: &crate::gpu::GpuProfile) {
        if let Some(l) = &self.large_gpu {
            let excluded = l.exclude.iter().any(|x| gpu.name.contains(x.as_str()));
            if gpu.datasheet.memory_bytes >= l.min_memory_bytes && !excluded {
                self.max_num_seqs = l.max_num_seqs;
                self.max_num_batched_tokens = l.max_num_batched_tokens;
            }
        }
    }
}

/// Host-side costs of the engine, fitted (see docs/validation.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Scheduling, input preparation and output processing per iteration, seconds.
    pub per_iteration_s: f64,
    /// Additional host time per sequence in the batch (detokenise, stream out), seconds.
    pub per_sequence_s: f64,
    /// API frontend time per request before it reaches the scheduler (HTTP, tokenisation),
    /// seconds; it adds to TTFT and E2E.
    #[serde(default)]
    pub per_request_s: f64,
    /// Memory the runtime keeps outside weights, activations and KV (CUDA context, cuBLAS
    /// workspaces, CUDA graphs), bytes per GPU.
    pub runtime_reserved_bytes: f64,
}

/// A serving engine's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// Name: `vllm`, `trtllm` or `sglang`.
    pub name: String,
    /// Human-readable name and version the figures refer to.
    pub display_name: String,
    /// Scheduler defaults.
    pub scheduler: SchedulerDefaults,
    /// Host costs.
    pub host: HostCosts,
}

const CATALOG: &[(&str, &str)] = &[
    ("vllm", include_str!("../calibration/engines/vllm.toml")),
    ("trtllm", include_str!("../calibration/engines/trtllm.toml")),
    ("sglang", include_str!("../calibration/engines/sglang.toml")),
];

/// Names of the embedded engine profiles.
pub fn engine_names() -> Vec<&'static str> {
    CATALOG.iter().map(|(n, _)| *n).collect()
}

impl EngineProfile {
    /// Loads an engine profile by name or alias ([`crate::catalog`]: `tensorrt-llm` is
    /// `trtllm`) or from a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        let (origin, text) = match catalog::resolve(Kind::Engine, name_or_path)? {
            Entry::Catalog(name) => (
                format!("calibration/engines/{name}.toml"),
                CATALOG
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, t)| t.to_string())
                    .unwrap_or_default(), // resolve() only returns names of CATALOG
            ),
            Entry::Path(path) => (
                name_or_path.to_string(),
                std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?,
            ),
        };
        let p: EngineProfile = toml::from_str(&text).map_err(|e| Error::Parse {
            path: origin.clone(),
            message: e.to_string(),
        })?;
        p.validate(&origin)?;
        Ok(p)
    }

    /// Checks the profile's figures.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let s = &self.scheduler;
        if s.max_num_seqs == 0 {
            return Err(Error::config(
                origin,
                "scheduler.max_num_seqs",
                "must be > 0",
            ));
        }
        if s.block_size == 0 {
            return Err(Error::config(origin, "scheduler.block_size", "must be > 0"));
        }
        if !(s.gpu_memory_utilization > 0.0 && s.gpu_memory_utilization <= 1.0) {
            return Err(Error::config(
                origin,
                "scheduler.gpu_memory_utilization",
                format!("must be in (0, 1], got {}", s.gpu_memory_utilization),
            ));
        }
        for (key, v) in [
            ("host.per_iteration_s", self.host.per_iteration_s),
            ("host.per_sequence_s", self.host.per_sequence_s),
            ("host.per_request_s", self.host.per_request_s),
            (
                "host.runtime_reserved_bytes",
                self.host.runtime_reserved_bytes,
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(origin, key, format!("must be >= 0, got {v}")));
            }
        }
        Ok(())
    }
}
