//! Serving-engine profiles (vLLM, TensorRT-LLM, SGLang): scheduler defaults and the host-side
//! costs that belong to the engine, not to the GPU. Profiles live in
//! `calibration/engines/*.toml`, embedded in the binary.

use serde::{Deserialize, Serialize};

use crate::catalog::{self, Entry, Kind};
use crate::error::{Error, Result};
use crate::gpu::MoeKernel;

mod speculation;
pub use speculation::{DraftMemory, SpeculativeDefaults};

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
    /// The token counts the engine captures CUDA graphs for (ascending); a graphed iteration
    /// runs the graph of the smallest size that holds it, its GEMMs padded to that size.
    /// Empty: a graph for every size (no padding).
    #[serde(default)]
    pub cuda_graph_sizes: Vec<u32>,
    /// Whether iterations that carry prefill chunks replay graphs too (vLLM's piecewise
    /// graphs, attention outside them); `false`: only pure-decode iterations do (TensorRT-LLM),
    /// mixed ones launch every kernel from the host.
    #[serde(default = "yes")]
    pub cuda_graph_mixed: bool,
    /// The engine captures graphs only up to this multiple of `max_num_seqs` tokens (vLLM:
    /// 2, TensorRT-LLM: 1, its max batch size); absent: up to `cuda_graph_max_tokens` alone.
    #[serde(default)]
    pub cuda_graph_seqs_multiple: Option<u32>,
    /// Reserve KV blocks for the whole output at admission, so running requests are never
    /// preempted (TensorRT-LLM's GUARANTEED_NO_EVICT); vLLM allocates as it goes and preempts.
    pub reserve_output_kv: bool,
    /// Whether a sliding-window or chunked-attention layer's KV cache holds only its window
    /// (vLLM's hybrid KV allocator frees the blocks that leave it; SGLang likewise); `false`:
    /// every layer keeps every token, as TensorRT-LLM's KV cache manager sizes and fills its
    /// pool when `kv_cache_config.max_attention_window` is not set (one window, the max
    /// sequence length, for every layer; docs/model.md, "KV by attention kind").
    #[serde(default = "yes")]
    pub local_kv_window_only: bool,
    /// Whether TP all-reduces of small messages use the engine's custom NVLink kernel.
    pub custom_allreduce: bool,
    /// Whether the host prepares the next iteration while the GPU runs the current one (vLLM's
    /// asynchronous scheduling, TensorRT-LLM's overlap scheduler): an iteration then takes the
    /// longer of its GPU time and its host time, instead of their sum.
    #[serde(default)]
    pub async_scheduling: bool,
    /// Whether the asynchronous scheduling stays on while the engine speculates (absent: as
    /// `async_scheduling`). SGLang v0.5.6 turns its overlap scheduler off for EAGLE-3 and
    /// standalone speculative decoding (server_args.py), so its verify steps add their host
    /// time to the GPU's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_async_scheduling: Option<bool>,
    /// Larger defaults the engine picks on large-memory GPUs, if it does.
    #[serde(default)]
    pub large_gpu: Option<LargeGpuDefaults>,
    /// Limits the engine's benchmark tool derives from the workload instead of these defaults,
    /// if it does (`trtllm-bench`).
    #[serde(default)]
    pub workload_limits: Option<WorkloadLimits>,
}

/// `trtllm-bench`'s rule for the engine's batch limits (tensorrt_llm/bench/build/tuning.py,
/// `calc_engine_setting` and `finetune_setting`): the requests whose whole KV (at the
/// dataset's mean prompt + output length) fit in `kv_cache_fraction` of the memory the
/// weights leave on all `tp x pp` GPUs, divided among the `pp` pipeline micro-batches and
/// rounded up generously, give `max_batch_size`; that times `1 + input / output` gives
/// `max_num_tokens` (NVIDIA/TensorRT-LLM at 04cba882084a: `n_gpus = tp_size * pp_size`,
/// `raw_bs = min(kv_cache_max_requests, 4096) / pp_size`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadLimits {
    /// Fraction of the memory left by the weights the rule counts as KV cache.
    pub kv_cache_fraction: f64,
    /// Whether the tool runs without chunked prefill and so raises `max_num_tokens` to hold
    /// the longest prompt plus `max_batch_size` (trtllm-bench: `--enable_chunked_context` is
    /// off by default, and `get_settings` then sets `max_num_tokens = max(max_num_tokens,
    /// max_isl + max_batch_size)`, tensorrt_llm/bench/benchmark/utils/general.py,
    /// NVIDIA/TensorRT-LLM @ 0171265). The rule takes the workload's mean prompt for the
    /// longest: exact for the fixed-length datasets the tool's published runs use.
    #[serde(default)]
    pub whole_prompt_per_step: bool,
}

/// What [`WorkloadLimits::limits`] needs to know about the deployment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitInputs {
    /// Parameters of the whole checkpoint as the tool counts them: its safetensors elements
    /// (counted module by module in the checkpoint's formats by the scenario resolver; an NVFP4
    /// weight is 0.5625 of them).
    pub params: f64,
    /// Bytes per weight the rule assumes (1 for FP8, 2 otherwise).
    pub weight_bytes: f64,
    /// KV-cache bytes per token of the whole model, with KV heads counted as
    /// `max(tp, kv_heads)` as the tool does.
    pub kv_bytes_per_token: f64,
    /// Memory of one GPU, bytes.
    pub gpu_memory_bytes: f64,
    /// GPUs of one pipeline stage of the replica (trtllm-bench's `tp_size`).
    pub tp: u32,
    /// Pipeline stages (trtllm-bench's `pp_size`): the memory of `tp x pp` GPUs holds the
    /// weights and KV, and each of the `pp` micro-batches gets its share of the requests.
    pub pp: u32,
    /// Mean prompt length of the workload, tokens.
    pub input_tokens: f64,
    /// Mean output length of the workload, tokens.
    pub output_tokens: f64,
}

impl WorkloadLimits {
    /// (max_num_seqs, max_num_batched_tokens) by the rule, or `None` when not even one
    /// request's KV fits (the engine's own memory check then decides).
    pub fn limits(&self, x: &LimitInputs) -> Option<(u32, u32)> {
        let gib = (1u64 << 30) as f64;
        let gpus = x.tp as f64 * x.pp.max(1) as f64;
        let available = (x.gpu_memory_bytes * gpus - x.params * x.weight_bytes) / gib;
        let cache = available * self.kv_cache_fraction;
        let per_request = x.kv_bytes_per_token / gib * (x.input_tokens + x.output_tokens);
        if !(cache > 0.0 && per_request > 0.0 && x.output_tokens > 0.0) {
            return None;
        }
        let requests = cache / per_request;
        if requests < 1.0 {
            return None;
        }
        let raw_bs = requests.min(4096.0) / x.pp.max(1) as f64;
        let raw_tokens = (raw_bs * (1.0 + x.input_tokens / x.output_tokens)).min(32768.0);
        let up = |v: f64, step: f64| step * (v / step).ceil();
        let bs = if raw_bs < 256.0 {
            up(raw_bs, 32.0).max(64.0)
        } else if raw_bs < 1024.0 {
            up(raw_bs, 128.0)
        } else {
            up(raw_bs, 256.0)
        };
        let tokens = if raw_tokens < 4096.0 {
            up(raw_tokens, 256.0).max(2048.0)
        } else if raw_tokens < 8192.0 {
            up(raw_tokens, 512.0)
        } else {
            up(raw_tokens, 1024.0)
        };
        let tokens = if self.whole_prompt_per_step {
            tokens.max(x.input_tokens.ceil() + bs)
        } else {
            tokens
        };
        Some((bs as u32, tokens.min(u32::MAX as f64) as u32))
    }
}

fn yes() -> bool {
    true
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
    /// The largest iteration (tokens) the engine replays a CUDA graph for, with its batch
    /// limits as they finally are: `cuda_graph_max_tokens`, capped by the multiple of
    /// `max_num_seqs` and by the token budget.
    pub fn graph_limit_tokens(&self) -> u32 {
        let by_seqs = match self.cuda_graph_seqs_multiple {
            Some(k) => self.max_num_seqs.saturating_mul(k),
            None => u32::MAX,
        };
        self.cuda_graph_max_tokens
            .min(by_seqs)
            .min(self.max_num_batched_tokens)
    }

    /// The captured size a graphed iteration of `tokens` tokens runs (`tokens` itself without
    /// a size list): the smallest listed size that holds it, where the sizes above the graph
    /// limit are replaced by the limit itself (TensorRT-LLM pads to its max batch size when a
    /// listed size exceeds it; `_filter_cuda_graph_batch_sizes`).
    pub fn graph_size(&self, tokens: u32) -> u32 {
        let limit = self.graph_limit_tokens();
        self.cuda_graph_sizes
            .iter()
            .map(|&n| n.min(limit))
            .find(|&n| n >= tokens)
            .unwrap_or(tokens)
    }

    /// Whether the engine prepares iteration n+1 while the GPU runs iteration n, in a run that
    /// speculates (`speculating`) or not: `async_scheduling`, or for speculation
    /// `speculative_async_scheduling` when the profile sets it.
    pub fn overlaps(&self, speculating: bool) -> bool {
        if speculating {
            self.speculative_async_scheduling
                .unwrap_or(self.async_scheduling)
        } else {
            self.async_scheduling
        }
    }

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
    /// Time per iteration that the GPU waits outside the model's kernels even with
    /// asynchronous scheduling (input preparation, sampling and bookkeeping between two
    /// steps), seconds: added to every iteration, never hidden under the GPU.
    #[serde(default)]
    pub per_iteration_exposed_s: f64,
    /// API frontend time per request before it reaches the scheduler (HTTP, tokenisation),
    /// seconds; it adds to TTFT and E2E.
    #[serde(default)]
    pub per_request_s: f64,
    /// Memory the runtime keeps outside weights, activations and KV (CUDA context, cuBLAS
    /// workspaces, CUDA graphs), bytes per GPU.
    pub runtime_reserved_bytes: f64,
}

/// A documented prior of one host cost: where a fit keeps the cost when the measurements do
/// not determine it (docs/validation.md), with its public source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPrior {
    /// The prior value, seconds.
    pub value: f64,
    /// Its spread: a factor either way that counts as one standard deviation (> 1).
    pub factor: f64,
    /// A hard upper bound, seconds, if one is documented (for the per-iteration cost: the
    /// fastest iteration any public run of this engine version shows; for the exposed
    /// per-iteration time: that iteration less its weights' stream time at datasheet
    /// bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Where the bound comes from (required with `max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_source: Option<String>,
    /// Where the value comes from (a published overhead measurement, a profiler trace).
    pub source: String,
}

/// The priors of the host costs, by key of [`HostCosts`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPriors {
    /// Prior of `host.per_iteration_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_iteration_s: Option<HostPrior>,
    /// Prior of `host.per_sequence_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_sequence_s: Option<HostPrior>,
    /// Prior of `host.per_request_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request_s: Option<HostPrior>,
    /// Prior of `host.per_iteration_exposed_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_iteration_exposed_s: Option<HostPrior>,
}

impl HostPriors {
    /// The prior of host cost number `k` (per iteration, per sequence, per request, exposed
    /// per iteration).
    pub fn get(&self, k: usize) -> Option<&HostPrior> {
        match k {
            0 => self.per_iteration_s.as_ref(),
            1 => self.per_sequence_s.as_ref(),
            2 => self.per_request_s.as_ref(),
            3 => self.per_iteration_exposed_s.as_ref(),
            _ => None,
        }
    }

    /// Whether no prior is given.
    pub fn is_empty(&self) -> bool {
        self.per_iteration_s.is_none()
            && self.per_sequence_s.is_none()
            && self.per_request_s.is_none()
    }
}

/// Which all-reduce implementation the engine picks for a message: its own low-latency
/// NVLink kernels (custom one-shot / two-shot, symmetric memory) up to a size that depends on
/// the TP degree, NCCL above.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReducePolicy {
    /// `[tp, bytes]` pairs: the largest message the engine's own kernels take at that TP
    /// degree; a degree not listed uses the entry of the largest listed degree below it.
    /// Empty: no engine limit (the GPU's `allreduce.custom_max_bytes` alone decides).
    #[serde(default)]
    pub custom_max_bytes_by_tp: Vec<(u32, f64)>,
    /// `[tp, bytes]` pairs: messages below this size run the engine's one-shot kernel at that
    /// TP degree, larger ones its two-shot kernel (the same lookup as
    /// `custom_max_bytes_by_tp`). Empty: two-shot at every size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_shot_max_bytes_by_tp: Vec<(u32, f64)>,
}

impl AllReducePolicy {
    /// The engine's limit at TP degree `tp`, bytes (`None`: no engine limit).
    pub fn custom_max_bytes(&self, tp: u32) -> Option<f64> {
        by_tp(&self.custom_max_bytes_by_tp, tp)
    }

    /// Below which size the engine runs its one-shot kernel at TP degree `tp`, bytes (0: it
    /// runs two-shot at every size).
    pub fn one_shot_max_bytes(&self, tp: u32) -> f64 {
        by_tp(&self.one_shot_max_bytes_by_tp, tp).unwrap_or(0.0)
    }
}

/// The entry of a `[tp, bytes]` table for TP degree `tp`: that of the largest listed degree at
/// or below it, else the smallest listed degree's; `None` for an empty table.
fn by_tp(table: &[(u32, f64)], tp: u32) -> Option<f64> {
    table
        .iter()
        .filter(|(t, _)| *t <= tp)
        .max_by_key(|(t, _)| *t)
        .or_else(|| table.iter().min_by_key(|(t, _)| *t))
        .map(|&(_, b)| b)
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
    /// Documented priors of the host costs, used by the fits where the measurements do not
    /// determine a cost.
    #[serde(default, skip_serializing_if = "HostPriors::is_empty")]
    pub host_prior: HostPriors,
    /// All-reduce implementation choice.
    #[serde(default)]
    pub allreduce: AllReducePolicy,
    /// How the engine finds room for speculative decoding and its limits on it (absent: the
    /// draft counted by the memory profile, K lookahead slots, no limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeDefaults>,
    /// The engine's fused-MoE kernel class (absent: Triton fused_moe).
    #[serde(default, skip_serializing_if = "MoeKernels::is_default")]
    pub moe: MoeKernels,
    /// The engine's attention kernels where they differ by KV-cache format (absent: FP8
    /// attention at the FP8 tensor rate over half the bytes).
    #[serde(default, skip_serializing_if = "AttentionKernels::is_default")]
    pub attention: AttentionKernels,
}

/// The attention kernel an engine runs over an FP8 KV cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8KvKernel {
    /// FP8 attention at the GPU's FP8 tensor rate, reading the FP8 cache's bytes.
    #[default]
    Native,
    /// vLLM's FlashAttention-3 fork with two-level FP32 accumulation of the FP8 products
    /// (vllm-project/flash-attention pull 104): the GPU profile's `[attention.fa3_fp8]`
    /// figures apply ([`crate::gpu::Fa3Fp8Attention`]); a GPU without them runs `native`.
    Fa3TwoLevel,
}

/// The engine's attention kernel classes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionKernels {
    /// Kernel over an FP8 KV cache (`native`, the default, or `fa3-two-level`).
    #[serde(default)]
    pub fp8_kv_kernel: Fp8KvKernel,
}

impl AttentionKernels {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The engine's fused-MoE kernel: which implementation of the grouped expert GEMMs it runs,
/// and with it the chain of kernels around them beyond what every fused MoE runs (routing,
/// alignment, the grouped GEMMs, activation, the weighted sum back into token order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeKernels {
    /// The kernel class (`triton`, the default: vLLM's Triton fused_moe, which gathers the
    /// rows inside the grouped GEMMs; `cutlass`: TensorRT-LLM's CUTLASS MoE, whose rows are
    /// copied into expert order, quantized to the GEMMs' input format, by a kernel of their
    /// own, with a three-kernel sort prologue above 256 tokens:
    /// `roofline::kernels::expand_rows_s`). The GPU profile's `[moe]` curve of that class
    /// applies ([`crate::gpu::MoeCurve::kernel`]).
    #[serde(default)]
    pub kernel: MoeKernel,
}

impl MoeKernels {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Names of the embedded engine profiles.
pub fn engine_names() -> Vec<&'static str> {
    Kind::Engine.names()
}

impl EngineProfile {
    /// Loads an engine profile by name or alias ([`crate::catalog`]: `tensorrt-llm` is
    /// `trtllm`) or from a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        let (origin, text) = match catalog::resolve(Kind::Engine, name_or_path)? {
            Entry::Catalog(name) => (
                format!("calibration/engines/{name}.toml"),
                catalog::embedded(Kind::Engine, name).to_string(),
            ),
            Entry::Path(path) => (
                name_or_path.to_string(),
                crate::input::read_to_string(&path, crate::input::InputKind::Config)?,
            ),
        };
        let p: EngineProfile = toml::from_str(&text).map_err(|e| Error::Parse {
            path: origin.clone(),
            message: e.to_string(),
        })?;
        p.validate(&origin)?;
        Ok(p)
    }

    /// Checks the profile's figures: the scheduler defaults, the all-reduce table, the host
    /// costs (non-negative, then plausible), the names, and the host priors.
    pub fn validate(&self, origin: &str) -> Result<()> {
        self.validate_scheduler(origin)?;
        let tables = [
            (
                "custom_max_bytes_by_tp",
                &self.allreduce.custom_max_bytes_by_tp,
            ),
            (
                "one_shot_max_bytes_by_tp",
                &self.allreduce.one_shot_max_bytes_by_tp,
            ),
        ];
        for (name, table) in tables {
            for (i, &(tp, bytes)) in table.iter().enumerate() {
                if tp == 0 || !(bytes.is_finite() && bytes >= 0.0) {
                    return Err(Error::config(
                        origin,
                        format!("allreduce.{name}[{i}]"),
                        format!("needs a TP degree >= 1 and bytes >= 0, got [{tp}, {bytes}]"),
                    ));
                }
            }
        }
        self.host.check_non_negative(origin)?;
        if let Some(spec) = &self.speculative {
            spec.validate(origin)?;
        }
        crate::error::check_printable(origin, "name", &self.name)?;
        crate::error::check_printable(origin, "display_name", &self.display_name)?;
        self.host.check_plausible(origin)?;
        self.validate_host_priors(origin)
    }

    /// The scheduler defaults: sequences, KV share of the workload limits, CUDA-graph sizes,
    /// block size, memory fraction.
    fn validate_scheduler(&self, origin: &str) -> Result<()> {
        let s = &self.scheduler;
        if s.max_num_seqs == 0 {
            return Err(Error::config(
                origin,
                "scheduler.max_num_seqs",
                "must be > 0",
            ));
        }
        if let Some(w) = &s.workload_limits {
            if !(w.kv_cache_fraction > 0.0 && w.kv_cache_fraction <= 1.0) {
                return Err(Error::config(
                    origin,
                    "scheduler.workload_limits.kv_cache_fraction",
                    format!("must be in (0, 1], got {}", w.kv_cache_fraction),
                ));
            }
        }
        if s.cuda_graph_sizes.windows(2).any(|w| w[0] >= w[1])
            || s.cuda_graph_sizes.first() == Some(&0)
        {
            return Err(Error::config(
                origin,
                "scheduler.cuda_graph_sizes",
                "must be ascending token counts >= 1",
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
        Ok(())
    }

    /// Each host prior: value > 0, factor > 1, a bound > 0 with its source, and its source.
    fn validate_host_priors(&self, origin: &str) -> Result<()> {
        let names = [
            "per_iteration_s",
            "per_sequence_s",
            "per_request_s",
            "per_iteration_exposed_s",
        ];
        for (k, name) in names.iter().enumerate() {
            let Some(p) = self.host_prior.get(k) else {
                continue;
            };
            let key = |f: &str| format!("host_prior.{name}.{f}");
            if !(p.value.is_finite() && p.value > 0.0) {
                return Err(Error::config(
                    origin,
                    key("value"),
                    format!("must be > 0, got {}", p.value),
                ));
            }
            if !(p.factor.is_finite() && p.factor > 1.0) {
                return Err(Error::config(
                    origin,
                    key("factor"),
                    format!("must be > 1, got {}", p.factor),
                ));
            }
            if let Some(m) = p.max {
                if !(m.is_finite() && m > 0.0) {
                    return Err(Error::config(
                        origin,
                        key("max"),
                        format!("must be > 0, got {m}"),
                    ));
                }
                if p.max_source.as_deref().is_none_or(|t| t.trim().is_empty()) {
                    return Err(Error::config(
                        origin,
                        key("max_source"),
                        "a bound needs its source",
                    ));
                }
            }
            if p.source.trim().is_empty() {
                return Err(Error::config(
                    origin,
                    key("source"),
                    "a prior needs its source",
                ));
            }
        }
        Ok(())
    }
}

impl HostCosts {
    /// Every host cost finite and >= 0 (and the reserved runtime memory), `origin` naming the
    /// profile in errors.
    fn check_non_negative(&self, origin: &str) -> Result<()> {
        for (key, v) in [
            ("host.per_iteration_s", self.per_iteration_s),
            ("host.per_sequence_s", self.per_sequence_s),
            ("host.per_request_s", self.per_request_s),
            ("host.per_iteration_exposed_s", self.per_iteration_exposed_s),
            ("host.runtime_reserved_bytes", self.runtime_reserved_bytes),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(origin, key, format!("must be >= 0, got {v}")));
            }
        }
        Ok(())
    }

    /// Plausible host costs, seconds (a busy Python scheduler takes tens of ms per iteration,
    /// not seconds): a typo such as 1e300 is an error naming the key, not a run of centuries.
    fn check_plausible(&self, origin: &str) -> Result<()> {
        for (key, v, hi) in [
            ("host.per_iteration_s", self.per_iteration_s, 1.0),
            ("host.per_sequence_s", self.per_sequence_s, 0.1),
            ("host.per_request_s", self.per_request_s, 10.0),
            (
                "host.per_iteration_exposed_s",
                self.per_iteration_exposed_s,
                1.0,
            ),
        ] {
            if v > hi {
                return Err(Error::config(
                    origin,
                    key,
                    format!("must be in [0, {hi}] s (a plausible engine), got {v:e}"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trtllm_bench_limits_follow_the_tools_rule() {
        let rule = WorkloadLimits {
            kv_cache_fraction: 0.95,
            whole_prompt_per_step: false,
        };
        // Llama-3.1-8B FP8 on one H100 (81,559 MiB): 8.03e9 one-byte weights, 64 KiB of FP8 KV
        // per token (32 layers x 8 heads x 128 x 2). 128/2048: 515 requests fit, rounded up to
        // 640; 515 x (1 + 128/2048) = 547 tokens, raised to the 2048 floor.
        let x = LimitInputs {
            params: 8.03e9,
            weight_bytes: 1.0,
            kv_bytes_per_token: 65536.0,
            gpu_memory_bytes: 85_520_809_984.0,
            tp: 1,
            pp: 1,
            input_tokens: 128.0,
            output_tokens: 2048.0,
        };
        assert_eq!(rule.limits(&x), Some((640, 2048)));
        // 128/128: 4096 requests (the cap), 8192 tokens.
        let short = LimitInputs {
            output_tokens: 128.0,
            ..x
        };
        assert_eq!(rule.limits(&short), Some((4096, 8192)));
        // Llama-3.1-405B FP8 on eight H100s, 128/4096: 242 requests -> 256, 2048 tokens.
        let big = LimitInputs {
            params: 405.85e9,
            kv_bytes_per_token: 2.0 * 126.0 * 8.0 * 128.0,
            tp: 8,
            output_tokens: 4096.0,
            ..x
        };
        assert_eq!(rule.limits(&big), Some((256, 2048)));
        // Weights that do not fit leave nothing to size.
        let none = LimitInputs { tp: 1, ..big };
        assert_eq!(rule.limits(&none), None);
        // Without chunked prefill the token budget holds the prompt and the batch: a
        // 20,000-token prompt with 640 sequences needs 20,640 tokens; a short prompt keeps
        // the rule's own figure.
        let whole = WorkloadLimits {
            whole_prompt_per_step: true,
            ..rule.clone()
        };
        let long = LimitInputs {
            input_tokens: 20_000.0,
            ..x
        };
        let (bs, _) = rule.limits(&long).unwrap();
        assert_eq!(whole.limits(&long), Some((bs, 20_000 + bs)));
        assert_eq!(whole.limits(&x), Some((640, 2048)));
    }

    #[test]
    fn trtllm_bench_limits_with_pipeline_stages_count_every_gpu_and_split_the_requests() {
        let rule = WorkloadLimits {
            kv_cache_fraction: 0.95,
            whole_prompt_per_step: false,
        };
        // Llama-2-70B FP8 (68.98e9 one-byte weights, 160 KiB of FP8 KV per token: 80 layers x
        // 8 heads x 128 x 2) on H100s at 128/128, by tuning.py's arithmetic in GiB:
        // TP1 PP2: 2 x 79.65 - 64.24 = 95.05 GiB free, x 0.95 = 90.30 GiB of KV, 2,312
        // requests of 256 tokens, 1,156 per micro-batch -> 1,280; 2,312 tokens -> 2,560.
        let pp2 = LimitInputs {
            params: 68.98e9,
            weight_bytes: 1.0,
            kv_bytes_per_token: 163_840.0,
            gpu_memory_bytes: 85_520_809_984.0,
            tp: 1,
            pp: 2,
            input_tokens: 128.0,
            output_tokens: 128.0,
        };
        assert_eq!(rule.limits(&pp2), Some((1280, 2560)));
        // TP2 PP1 has the same memory and requests, all in one batch: 2,312 -> 2,560 requests,
        // 4,624 tokens -> 5,120.
        let tp2 = LimitInputs {
            tp: 2,
            pp: 1,
            ..pp2
        };
        assert_eq!(rule.limits(&tp2), Some((2560, 5120)));
        // Counting one GPU's memory, as the rule did before it read `pp`: 15.40 GiB free, 375
        // requests -> 384, 2,048 tokens.
        let one = LimitInputs { pp: 1, ..pp2 };
        assert_eq!(rule.limits(&one), Some((384, 2048)));
    }

    #[test]
    fn allreduce_limits_by_tp_degree() {
        let p = AllReducePolicy {
            custom_max_bytes_by_tp: vec![(2, 16e6), (4, 8e6), (8, 524_288.0)],
            one_shot_max_bytes_by_tp: vec![(2, 8e6), (4, 524_288.0), (8, 262_144.0)],
        };
        assert_eq!(p.custom_max_bytes(2), Some(16e6));
        assert_eq!(p.custom_max_bytes(4), Some(8e6));
        assert_eq!(p.custom_max_bytes(6), Some(8e6));
        assert_eq!(p.custom_max_bytes(16), Some(524_288.0));
        assert_eq!(AllReducePolicy::default().custom_max_bytes(8), None);
        // The one-shot table reads the same way; empty: two-shot at every size.
        assert_eq!(p.one_shot_max_bytes(4), 524_288.0);
        assert_eq!(p.one_shot_max_bytes(6), 524_288.0);
        assert_eq!(p.one_shot_max_bytes(1), 8e6);
        assert_eq!(AllReducePolicy::default().one_shot_max_bytes(4), 0.0);
    }

    #[test]
    fn graph_sizes_pad_up_to_the_engines_limit() {
        let mut s = EngineProfile::load("trtllm").unwrap().scheduler;
        s.max_num_seqs = 224;
        s.max_num_batched_tokens = 2048;
        // Sizes above the max batch size are replaced by it (TensorRT-LLM pads to it).
        assert_eq!(s.graph_limit_tokens(), 224);
        assert_eq!(s.graph_size(100), 128);
        assert_eq!(s.graph_size(176), 224);
        assert_eq!(s.graph_size(224), 224);
        // vLLM captures up to twice max_num_seqs, every 8 tokens to 256.
        let mut v = EngineProfile::load("vllm").unwrap().scheduler;
        v.max_num_seqs = 128;
        assert_eq!(v.graph_limit_tokens(), 256);
        assert_eq!(v.graph_size(97), 104);
        assert_eq!(v.graph_size(300), 300);
    }

    #[test]
    fn a_bad_allreduce_entry_names_its_key() {
        let mut p = EngineProfile::load("vllm").unwrap();
        p.allreduce.custom_max_bytes_by_tp = vec![(0, 1e6)];
        let e = p.validate("x.toml").unwrap_err().to_string();
        assert!(e.contains("allreduce.custom_max_bytes_by_tp[0]"), "{e}");
        let mut p = EngineProfile::load("vllm").unwrap();
        p.allreduce.one_shot_max_bytes_by_tp = vec![(4, 524_288.0), (8, f64::NAN)];
        let e = p.validate("x.toml").unwrap_err().to_string();
        assert!(e.contains("allreduce.one_shot_max_bytes_by_tp[1]"), "{e}");
    }
}
