//! Scenarios: the validated configuration of one run (deployment, scheduler, workload, SLOs,
//! limits, pricing, plan search space), read from TOML with `--set key=value` overrides.
//!
//! Reading happens in three steps, each with precise errors: TOML syntax (line and column),
//! structure (`deny_unknown_fields`, with the key path of the offending value), and
//! cross-field validation ([`Scenario::resolve`]): TP against heads, memory, token budget
//! against prompt length, percentiles, prices. The schema is documented in docs/scenarios.md.

mod disaggregation;
mod fleet_controls;
pub mod offload;
mod overrides;
mod run;

pub use disaggregation::{
    DeploymentMode, PoolSection, ResolvedPools, DEFAULT_BANDWIDTH_GB_S_PER_GPU, DEFAULT_LATENCY_US,
};
pub use fleet_controls::{AutoscaleSection, FailureSection, FaultsSection};
pub use overrides::apply_override;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::catalog;
use crate::engine::EngineProfile;
use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::metrics::steady_state::{SteadyStateConfig, Targets};
use crate::model::load_model;
use crate::precision::{KvDtype, WeightDtype};
use crate::roofline::{plan_memory, Deployment, MemoryPlan, ModuleFormats, StepTimeModel};
use crate::sim::{Limits, RouterKind, SchedulerConfig, SimConfig, SloPolicy};
use crate::speculative::{reservation, SpeculativeConfig};
use crate::workload::WorkloadConfig;

/// The range of `deployment.step_time_scale` a scenario may set, dimensionless: a what-if
/// multiplier on every step time, from 1000x faster to 1000x slower than modelled (beyond
/// that no GPU or engine is being described, and step times leave the clock).
pub const STEP_TIME_SCALE_RANGE: (f64, f64) = (1e-3, 1e3);

/// The embedded default scenario (`scenarios/default.toml`), used when no file is given.
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/default.toml");

/// The scenarios built into the binary, by their shipped path: `servesim plan` with no file
/// plans `scenarios/chat-slo.toml` and prints re-run lines naming it, which must run from any
/// folder ([`embedded_scenario`]).
const EMBEDDED_SCENARIOS: [(&str, &str); 2] = [
    ("scenarios/default.toml", DEFAULT_SCENARIO),
    (
        "scenarios/chat-slo.toml",
        include_str!("../scenarios/chat-slo.toml"),
    ),
];

/// The embedded scenario that `path` names when no file `path` exists (a real file always
/// wins): its shipped path (`scenarios/chat-slo.toml`) and text. A path names one by its
/// shipped path, its file name or its stem (`scenarios/chat-slo.toml`, `chat-slo.toml`,
/// `chat-slo`), with or without a leading `./`.
pub fn embedded_scenario(path: &Path) -> Option<(&'static str, &'static str)> {
    if path.exists() {
        return None;
    }
    let given = path.to_str()?;
    let given = given.strip_prefix("./").unwrap_or(given);
    EMBEDDED_SCENARIOS.into_iter().find(|(shipped, _)| {
        let file = shipped.strip_prefix("scenarios/").unwrap_or(shipped);
        given == *shipped || given == file || Some(given) == file.strip_suffix(".toml")
    })
}

/// The text of the scenario file `path` and the origin errors name it by: the file's path, or
/// `<embedded scenarios/NAME.toml>` when `path` names an embedded scenario and no such file
/// exists ([`embedded_scenario`]).
pub fn read_scenario_text(path: &Path) -> Result<(String, String)> {
    if let Some((shipped, text)) = embedded_scenario(path) {
        return Ok((text.to_string(), format!("<embedded {shipped}>")));
    }
    let text = crate::input::read_to_string(path, crate::input::InputKind::Config)?;
    Ok((text, path.display().to_string()))
}

/// What runs: model, GPU, parallelism, formats, engine, replicas, router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    /// Model: catalog name or path to a config.json.
    pub model: String,
    /// GPU profile name or path.
    pub gpu: String,
    /// Tensor-parallel size (GPUs per replica, per attention data-parallel rank).
    #[serde(default = "one")]
    pub tp: u32,
    /// Attention data-parallel ranks of a replica (vLLM `--data-parallel-size`, SGLang
    /// `--dp-size --enable-dp-attention`); a replica has `tp x dp` GPUs.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dp: u32,
    /// Pipeline-parallel stages of a replica (vLLM `--pipeline-parallel-size`, TensorRT-LLM
    /// `pp_size`): each stage holds `num_layers / pp` layers on its own `tp` GPUs, so a replica
    /// has `tp x pp` GPUs, and `pp` micro-batches are in flight (docs/model.md, "Pipeline
    /// parallelism"). 1: none.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub pp: u32,
    /// Expert-parallel size of the MoE layers (vLLM `--enable-expert-parallel` is `tp x dp`,
    /// SGLang `--ep-size`); 1 splits every expert over the replica's GPUs instead.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub ep: u32,
    /// Redundant expert replicas per MoE layer placed by the expert-parallel load balancer
    /// (EPLB), spread over the expert-parallel ranks.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub redundant_experts: u32,
    /// Weight format: bf16, fp16, fp8, fp4 (NVFP4), mxfp4, or auto (the checkpoint's own
    /// formats, module by module, from its `quantization_config`; bf16 when it has none).
    #[serde(default = "default_dtype")]
    pub dtype: String,
    /// A published checkpoint of the model other than its own, by its Hugging Face id
    /// (`nvidia/DeepSeek-R1-0528-NVFP4-v2`), among those the model declares
    /// (`published_checkpoints`): its modules run in the formats it stores them in, as `auto`
    /// runs the model's own. Absent: the model's own checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// KV-cache format: auto, fp8.
    #[serde(default = "default_kv")]
    pub kv_cache_dtype: String,
    /// Engine profile: vllm, trtllm, sglang.
    #[serde(default = "default_engine")]
    pub engine: String,
    /// Replicas behind the router.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Routing policy.
    #[serde(default)]
    pub router: RouterKind,
    /// Multiplier on every engine step time, dimensionless: 1 runs as modelled, 1.2 runs 20%
    /// slower (what-if the hardware or the engine is slower than the model says).
    #[serde(default = "unit_scale")]
    pub step_time_scale: f64,
    /// `colocated` (every replica prefills and decodes) or `disaggregated` (a prefill pool
    /// and a decode pool; `replicas` then does not apply).
    #[serde(default, skip_serializing_if = "DeploymentMode::is_colocated")]
    pub mode: DeploymentMode,
    /// Disaggregated: the prefill pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<PoolSection>,
    /// Disaggregated: the decode pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<PoolSection>,
    /// Disaggregated: bandwidth of the KV link into each decode replica, GB/s (`inf`:
    /// unlimited; default 50 per GPU of the smaller pool TP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_bandwidth_gb_s: Option<f64>,
    /// Disaggregated: fixed time of each KV transfer, us (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_latency_us: Option<f64>,
    /// Disaggregated: send each layer's KV while the prefill computes the next (default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_layerwise: Option<bool>,
    /// KV offloading: host memory per replica for KV blocks, GiB summed over its TP ranks
    /// (vLLM's `--kv-offloading-size`; each attention data-parallel rank has its own); absent
    /// or 0: no CPU tier. Needs prefix caching; serves requests with block identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offloading_size_gib: Option<f64>,
    /// KV offloading: host-link bandwidth of each GPU, one direction, GB/s (default
    /// [`offload::DEFAULT_BANDWIDTH_GB_S`], PCIe Gen5 x16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offloading_bandwidth_gb_s: Option<f64>,
    /// KV offloading: fixed time of one load from host memory, us (default
    /// [`offload::DEFAULT_LATENCY_US`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offloading_latency_us: Option<f64>,
}

fn one() -> u32 {
    1
}
fn is_one(v: &u32) -> bool {
    *v == 1
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}
fn unit_scale() -> f64 {
    1.0
}
fn default_dtype() -> String {
    "auto".into()
}
fn default_kv() -> String {
    "auto".into()
}
fn default_engine() -> String {
    "vllm".into()
}

/// Batching discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Batching {
    /// Continuous (iteration-level) batching.
    #[default]
    Continuous,
    /// Static batching: a new batch starts only when the previous one has finished.
    Static,
}

/// Scheduler overrides of the engine profile's defaults (every key optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerOverrides {
    /// Most sequences per iteration.
    pub max_num_seqs: Option<u32>,
    /// Token budget per iteration.
    pub max_num_batched_tokens: Option<u32>,
    /// Chunked prefill on or off.
    pub enable_chunked_prefill: Option<bool>,
    /// Prefix caching on or off.
    pub enable_prefix_caching: Option<bool>,
    /// Tokens per KV block.
    pub block_size: Option<u32>,
    /// Fraction of GPU memory for the engine.
    pub gpu_memory_utilization: Option<f64>,
    /// Longest prompt + output, tokens (default: the model's context length, capped by KV).
    pub max_model_len: Option<u32>,
    /// Continuous or static batching.
    pub batching: Option<Batching>,
    /// Reserve KV for the whole output at admission (TensorRT-LLM's guaranteed-no-evict).
    pub reserve_output_kv: Option<bool>,
    /// Asynchronous (overlap) scheduling on or off (vLLM `--async-scheduling` /
    /// `--no-async-scheduling`, SGLang `--disable-overlap-schedule`, TensorRT-LLM
    /// `disable_overlap_scheduler`).
    pub async_scheduling: Option<bool>,
}

/// SLOs: each a threshold at a percentile, plus how the run enforces them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloConfig {
    /// TTFT threshold, ms.
    pub ttft_ms: Option<f64>,
    /// Percentile the TTFT threshold applies to, in (1, 100) (at or below 1 reads as a fraction).
    #[serde(default = "p99")]
    pub ttft_percentile: f64,
    /// TPOT threshold, ms.
    pub tpot_ms: Option<f64>,
    /// Percentile of the TPOT threshold.
    #[serde(default = "p99")]
    pub tpot_percentile: f64,
    /// E2E threshold, ms.
    pub e2e_ms: Option<f64>,
    /// Percentile of the E2E threshold.
    #[serde(default = "p99")]
    pub e2e_percentile: f64,
    /// Reject at arrival requests whose predicted TTFT already misses.
    #[serde(default)]
    pub admission_control: bool,
    /// Clients give up after waiting this long for a first token, s.
    pub queue_timeout_s: Option<f64>,
}

impl Default for SloConfig {
    fn default() -> Self {
        SloConfig {
            ttft_ms: None,
            ttft_percentile: 99.0,
            tpot_ms: None,
            tpot_percentile: 99.0,
            e2e_ms: None,
            e2e_percentile: 99.0,
            admission_control: false,
            queue_timeout_s: None,
        }
    }
}

fn p99() -> f64 {
    99.0
}

/// Run limits; reaching one stops the run and is reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Simulated-time limit, s.
    #[serde(default = "default_max_time")]
    pub max_sim_time_s: f64,
    /// Event limit.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Fast-forward runs of decode-only iterations (false: time every iteration on its own,
    /// the oracle the fast-forward is tested against; the same results, slower).
    #[serde(default = "default_true")]
    pub fast_forward: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_sim_time_s: default_max_time(),
            max_events: default_max_events(),
            fast_forward: true,
        }
    }
}

fn default_max_time() -> f64 {
    30.0 * 24.0 * 3600.0
}
fn default_true() -> bool {
    true
}
fn default_max_events() -> u64 {
    2_000_000_000
}

/// Pricing overrides (defaults from calibration/pricing.toml).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricingConfig {
    /// $/GPU-hour for the deployment's GPU, overriding the catalog.
    pub price_usd_per_gpu_hour: Option<f64>,
    /// Which catalog column: on_demand, reserved, spot.
    pub column: Option<String>,
    /// Price of an input token relative to an output token (for blended $/M tokens).
    pub input_output_price_ratio: Option<f64>,
    /// $/GPU-hour by GPU type (catalog names or aliases), overriding the catalog's every
    /// column for that type: `[pricing.gpus] h100-sxm = 4.5`, or `--set
    /// pricing.gpus.h100-sxm=4.5`. `price_usd_per_gpu_hour`, when set, wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<std::collections::BTreeMap<String, f64>>,
}

impl PricingConfig {
    /// The `pricing.gpus` price of `gpu` (a catalog name or alias), if one is set.
    pub fn gpu_price(&self, gpu: &str) -> Option<f64> {
        let name =
            |g: &str| crate::catalog::canonical(crate::catalog::Kind::Gpu, g).map(str::to_string);
        let want = name(gpu).unwrap_or_else(|| gpu.to_string());
        self.gpus
            .iter()
            .flatten()
            .find(|(k, _)| name(k).unwrap_or_else(|| k.to_string()) == want)
            .map(|(_, &p)| p)
    }
}

/// The search space of `servesim plan`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Target load, requests/s (default: the workload's rate).
    pub target_rate_per_s: Option<f64>,
    /// GPU types to consider.
    pub gpus: Option<Vec<String>>,
    /// Weight formats to consider.
    pub dtypes: Option<Vec<String>>,
    /// TP degrees to consider.
    pub tp: Option<Vec<u32>>,
    /// Attention data-parallel sizes to consider (default: for a MoE model 1 and the size
    /// that fills a node at each TP, else `deployment.dp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp: Option<Vec<u32>>,
    /// Expert parallelism off (`false`: experts split tensor-parallel) and on (`true`: over
    /// all `tp x dp` GPUs) to consider (default: both for a MoE model, else off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_parallel: Option<Vec<bool>>,
    /// max_num_seqs values to consider.
    pub max_num_seqs: Option<Vec<u32>>,
    /// Share of requests that must meet every SLO at a sustainable rate, in (0, 1].
    pub goodput_threshold: Option<f64>,
    /// Most replicas a plan may use.
    pub max_replicas: Option<u32>,
    /// Safety margin against model error, dimensionless: size the fleet so that it meets the
    /// SLOs with every step time `1 + headroom` times the model's (0.2 = GPUs 20% slower).
    pub headroom: Option<f64>,
    /// Search every candidate fully (default: skip those whose steady-state capacity alone
    /// already costs more than the best plan found).
    pub exhaustive: Option<bool>,
    /// Time-varying traffic: the length of the busiest window the static fleet is sized for,
    /// seconds, in whole minutes from 60 to 3600 (default 300: the busiest 5 minutes, not
    /// the busiest hour's mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_window_s: Option<f64>,
    /// Size for the model's measured error: the step-time headroom that covers this share of
    /// the reference rows' errors (`servesim validate`'s prediction interval, e.g. 0.9), in
    /// (0, 1); the larger of it and `headroom` applies.
    pub headroom_coverage: Option<f64>,
    /// Weigh prefill/decode-disaggregated (xPyD) deployments beside colocated ones (default:
    /// whether `deployment.mode` is `disaggregated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregated: Option<bool>,
    /// xPyD: TP degrees of the prefill pool to consider (default: `plan.tp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tp: Option<Vec<u32>>,
    /// xPyD: TP degrees of the decode pool to consider (default: `plan.tp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tp: Option<Vec<u32>>,
    /// xPyD: GPU types of the prefill pool to consider (default: `plan.gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_gpus: Option<Vec<String>>,
    /// xPyD: GPU types of the decode pool to consider (default: `plan.gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_gpus: Option<Vec<String>>,
    /// Speculative decoding: the `num_speculative_tokens` values to try per candidate (0:
    /// off); needs a `[speculative]` table. Default with the table: 0 and the table's K.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Vec<u32>>,
    /// Routers to size each candidate's fleet behind (names as `deployment.router`). Default
    /// when the workload carries block identities (sessions, a Mooncake trace): the
    /// scenario's router and `prefix-aware`; else the scenario's router alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routers: Option<Vec<String>>,
    /// CPU KV offload sizes per replica to try, GiB (0: none; as
    /// `deployment.kv_offloading_size_gib`). Default: the scenario's setting alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offloading_size_gib: Option<Vec<f64>>,
}

/// How steady-state figures are measured (`[measure]`): by plan, sweep and the curves, which
/// extend each run until every judged figure is precise enough, and by `run`'s steady-state
/// section. docs/capacity-planning.md ("Method") explains each setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasureConfig {
    /// Relative half-width of a judged figure's confidence interval at which a run stops
    /// growing, dimensionless.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Two-sided confidence of the intervals: 0.90, 0.95 or 0.99.
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// Batches of the batch-means intervals (at least 5).
    #[serde(default = "default_batches")]
    pub batches: u32,
    /// Requests of an adaptive measurement's first run, per replica.
    #[serde(default = "default_min_requests")]
    pub min_requests: u64,
    /// Most requests of an adaptive measurement's longest run, per replica.
    #[serde(default = "default_max_requests")]
    pub max_requests: u64,
}

impl Default for MeasureConfig {
    fn default() -> Self {
        MeasureConfig {
            tolerance: default_tolerance(),
            confidence: default_confidence(),
            batches: default_batches(),
            min_requests: default_min_requests(),
            max_requests: default_max_requests(),
        }
    }
}

fn default_tolerance() -> f64 {
    0.02
}
fn default_confidence() -> f64 {
    0.95
}
fn default_batches() -> u32 {
    10
}
fn default_min_requests() -> u64 {
    4000
}
fn default_max_requests() -> u64 {
    32000
}

/// A scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// What the scenario represents.
    #[serde(default)]
    pub description: String,
    /// Seed of every random choice in the run: an integer, or (for seeds above TOML's largest
    /// integer, 2^63 - 1) a string of digits; `--set seed=N` takes either.
    #[serde(default, with = "seed_text")]
    pub seed: u64,
    /// The deployment.
    pub deployment: DeploymentConfig,
    /// Scheduler overrides.
    #[serde(default)]
    pub scheduler: SchedulerOverrides,
    /// The workload.
    pub workload: WorkloadConfig,
    /// SLOs.
    #[serde(default)]
    pub slo: SloConfig,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Pricing.
    #[serde(default)]
    pub pricing: PricingConfig,
    /// Plan search space.
    #[serde(default)]
    pub plan: PlanConfig,
    /// Steady-state measurement.
    #[serde(default)]
    pub measure: MeasureConfig,
    /// An autoscaler (absent: the fleet is `deployment.replicas` throughout).
    #[serde(default)]
    pub autoscale: Option<AutoscaleSection>,
    /// Replica failures.
    #[serde(default)]
    pub faults: Option<FaultsSection>,
    /// Speculative decoding (absent, or `num_speculative_tokens = 0`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeConfig>,
}

/// A seed as TOML holds it: an integer up to 2^63 - 1 (TOML's range), above that a string of
/// digits, so that every `u64` seed (`--seed` takes any) round-trips through a scenario.
mod seed_text {
    use serde::de::{self, Deserializer, Visitor};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(*seed) {
            Ok(v) => s.serialize_i64(v),
            Err(_) => s.serialize_str(&seed.to_string()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        struct Seed;
        impl Visitor<'_> for Seed {
            type Value = u64;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number from 0 to 18446744073709551615")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
                u64::try_from(v).map_err(|_| E::custom(format!("must be >= 0, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
                Ok(v)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
                v.trim().parse().map_err(|_| {
                    E::custom(format!(
                        "'{v}' is not a whole number from 0 to 18446744073709551615"
                    ))
                })
            }
        }
        d.deserialize_any(Seed)
    }
}

/// A scenario with everything looked up and checked, ready to simulate.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The scenario as given (after overrides).
    pub scenario: Scenario,
    /// Where it came from, for messages.
    pub origin: String,
    /// The deployment (model, GPU, engine, TP, formats).
    pub deployment: Deployment,
    /// One GPU's memory plan.
    pub memory: MemoryPlan,
    /// The simulator's configuration.
    pub sim: SimConfig,
    /// Disaggregated: both pools (`deployment` and `memory` above are the decode pool's).
    pub pools: Option<ResolvedPools>,
}

impl Scenario {
    /// Parses scenario TOML text, applying `key=value` overrides before validation of the
    /// structure. `origin` names the text in errors (a path, or `<embedded default>`).
    pub fn parse(text: &str, origin: &str, overrides: &[String]) -> Result<Scenario> {
        let dir = Self::folder_of(origin);
        Self::parse_in(text, origin, dir.as_deref(), overrides)
    }

    /// The folder a scenario named `origin` lies in (`None` for `<embedded ...>` and flags).
    fn folder_of(origin: &str) -> Option<PathBuf> {
        if origin.starts_with('<') {
            return None;
        }
        Path::new(origin).parent().map(Path::to_path_buf)
    }

    /// As [`Scenario::parse`], with relative paths resolved from `dir` (the scenario file's
    /// folder, given as a path: it need not be UTF-8 to be named here).
    fn parse_in(
        text: &str,
        origin: &str,
        dir: Option<&Path>,
        overrides: &[String],
    ) -> Result<Scenario> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| Error::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        Self::from_table_in(table, origin, dir)
    }

    /// Reads a scenario from an already-parsed TOML table (as `bench` builds from flags).
    pub fn from_table(table: toml::Table, origin: &str) -> Result<Scenario> {
        let dir = Self::folder_of(origin);
        Self::from_table_in(table, origin, dir.as_deref())
    }

    fn from_table_in(table: toml::Table, origin: &str, dir: Option<&Path>) -> Result<Scenario> {
        let de = toml::Value::Table(table);
        let mut sc: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let key = if path == "." {
                "(top level)".to_string()
            } else {
                path
            };
            // The parser's message may add context lines; the key path already says where.
            let inner = e.into_inner().to_string();
            let reason = inner.lines().next().unwrap_or("").trim().to_string();
            Error::config(origin, key, reason)
        })?;
        crate::error::check_printable(origin, "name", &sc.name)?;
        // Paths inside a file resolve from the file's folder; `<embedded ...>` and flags
        // have none.
        if let Some(dir) = dir {
            sc.resolve_paths(dir, origin)?;
        }
        Ok(sc)
    }

    /// Reads a scenario file (or the embedded default when `path` is `None`, or the embedded
    /// scenario `path` names when no such file exists: [`embedded_scenario`]).
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Scenario> {
        match path {
            Some(p) => match embedded_scenario(p) {
                Some((shipped, text)) => {
                    Self::parse(text, &format!("<embedded {shipped}>"), overrides)
                }
                None => {
                    let text = crate::input::read_to_string(p, crate::input::InputKind::Config)?;
                    Self::parse_in(&text, &p.display().to_string(), p.parent(), overrides)
                }
            },
            None => Self::parse(DEFAULT_SCENARIO, "<embedded default>", overrides),
        }
    }

    /// Checks `limits.max_events`, the pricing keys (prices, input/output ratio) and the
    /// plan's (goodput threshold, step-time scale, replica cap, headroom and its coverage,
    /// peak window).
    fn check_pricing_and_plan(&self, origin: &str) -> Result<()> {
        let d = &self.deployment;
        let err = |key: &str, reason: String| Error::config(origin, key, reason);
        if self.limits.max_events == 0 {
            return Err(err("limits.max_events", "must be > 0".into()));
        }
        if let Some(p) = self.pricing.price_usd_per_gpu_hour {
            check_gpu_price(p).map_err(|why| err("pricing.price_usd_per_gpu_hour", why))?;
        }
        for (gpu, &p) in self.pricing.gpus.iter().flatten() {
            let key = format!("pricing.gpus.{gpu}");
            if crate::catalog::canonical(crate::catalog::Kind::Gpu, gpu).is_none() {
                return Err(err(
                    &key,
                    format!(
                        "not a GPU of the catalog; known: {}",
                        crate::gpu::gpu_names().join(", ")
                    ),
                ));
            }
            check_gpu_price(p).map_err(|why| err(&key, why))?;
        }
        if let Some(r) = self.pricing.input_output_price_ratio {
            if !(r.is_finite() && r >= 0.0) {
                return Err(err(
                    "pricing.input_output_price_ratio",
                    format!("must be >= 0, got {r}"),
                ));
            }
        }
        if let Some(g) = self.plan.goodput_threshold {
            if !(g > 0.0 && g <= 1.0) {
                return Err(err(
                    "plan.goodput_threshold",
                    format!("must be in (0, 1], got {g}"),
                ));
            }
        }
        if !(STEP_TIME_SCALE_RANGE.0..=STEP_TIME_SCALE_RANGE.1).contains(&d.step_time_scale) {
            return Err(err(
                "deployment.step_time_scale",
                format!(
                    "must be in [{}, {}] (a what-if multiplier on every step time), got {}",
                    STEP_TIME_SCALE_RANGE.0, STEP_TIME_SCALE_RANGE.1, d.step_time_scale
                ),
            ));
        }
        if let Some(r) = self.plan.max_replicas {
            if !(1..=100_000).contains(&r) {
                return Err(err(
                    "plan.max_replicas",
                    format!("must be in 1..=100000, got {r}"),
                ));
            }
        }
        if let Some(c) = self.plan.headroom_coverage {
            if !(c > 0.0 && c < 1.0) {
                return Err(err(
                    "plan.headroom_coverage",
                    format!("must be in (0, 1), got {c}"),
                ));
            }
        }
        if let Some(h) = self.plan.headroom {
            if !(h.is_finite() && (0.0..=10.0).contains(&h)) {
                return Err(err("plan.headroom", format!("must be in [0, 10], got {h}")));
            }
        }
        if let Some(w) = self.plan.peak_window_s {
            if !((60.0..=3600.0).contains(&w) && w % 60.0 == 0.0) {
                return Err(err(
                    "plan.peak_window_s",
                    format!("must be whole minutes from 60 to 3600 s, got {w}"),
                ));
            }
        }
        Ok(())
    }

    /// Looks everything up and checks every cross-field constraint.
    pub fn resolve(&self, origin: &str) -> Result<Resolved> {
        let d = &self.deployment;
        let err = |key: &str, reason: String| Error::config(origin, key, reason);
        let mean_lengths = || {
            let gen = crate::workload::RequestGenerator::new(&self.workload, self.seed, origin)?;
            Ok((gen.mean_input_tokens(), gen.mean_output_tokens()))
        };
        let pools = self.resolve_pools(origin, &mean_lengths)?;
        let ResolvedDeployment {
            deployment,
            memory,
            scheduler,
        } = match &pools {
            Some(p) => p.decode.clone(),
            None => resolve_deployment(
                d,
                &self.scheduler,
                origin,
                Some(&mean_lengths),
                self.speculative.as_ref(),
            )?,
        };
        let max_model_len = match &pools {
            Some(p) => scheduler
                .max_model_len
                .min(p.prefill.scheduler.max_model_len),
            None => scheduler.max_model_len,
        };
        self.check_workload_fits(origin, max_model_len, scheduler.block_size)?;
        let slo = self.slo_policy(origin)?;
        let max_sim_time_ns = self.max_sim_time_ns(origin)?;
        self.check_pricing_and_plan(origin)?;
        self.measure.validate(origin)?;
        if let Some(spec) = &self.speculative {
            // The draft is built here too, so that a bad draft fails before any run.
            spec.speculation(&deployment, 1, origin)?;
        }
        let autoscale = match &self.autoscale {
            Some(a) => Some(a.resolve(origin, &deployment, self.slo.ttft_ms)?),
            None => None,
        };
        let faults = match &self.faults {
            Some(f) => Some(f.resolve(origin)?),
            None => None,
        };
        let (replicas, gpus_per_replica, router) = match &pools {
            Some(p) => (
                p.sim.prefill.replicas + p.sim.decode.replicas,
                p.sim.decode.gpus_per_replica,
                p.sim.decode.router,
            ),
            None => (d.replicas, deployment.replica_gpus(), d.router),
        };
        self.check_pipeline_features(origin)?;
        let sim = SimConfig {
            replicas,
            pipeline_stages: d.pp,
            gpus_per_replica,
            router,
            scheduler,
            slo,
            limits: Limits {
                max_sim_time_ns,
                max_events: self.limits.max_events,
                fast_forward: self.limits.fast_forward,
            },
            max_concurrency: self.workload.max_concurrency,
            seed: self.seed,
            frontend_delay_ns: crate::clock::secs_to_ns(deployment.engine.host.per_request_s)
                .map_err(|e| err("deployment.engine", format!("host.per_request_s: {e}")))?,
            request_log_capacity: 0,
            autoscale,
            faults,
            period_ns: 0,
            disaggregation: pools.as_ref().map(|p| p.sim.clone()),
        };
        Ok(Resolved {
            scenario: self.clone(),
            origin: origin.to_string(),
            deployment,
            memory,
            sim,
            pools,
        })
    }

    /// Pipeline parallelism (`deployment.pp > 1`) runs without an autoscaler, faults,
    /// speculative decoding and KV offloading (not modelled with pipeline stages).
    fn check_pipeline_features(&self, origin: &str) -> Result<()> {
        if self.deployment.pp == 1 {
            return Ok(());
        }
        reject_unmodelled(
            origin,
            &[
                ("autoscale", self.autoscale.is_some()),
                ("faults", self.faults.is_some()),
                ("speculative", self.speculative.is_some()),
                (
                    "deployment.kv_offloading_size_gib",
                    self.deployment.kv_offloading_size_gib.is_some(),
                ),
            ],
            PIPELINE,
        )
    }

    /// The prefill and decode pools of a disaggregated deployment (`None` when colocated),
    /// after checking that nothing set is unmodelled in its mode.
    fn resolve_pools(
        &self,
        origin: &str,
        mean_lengths: &dyn Fn() -> Result<(f64, f64)>,
    ) -> Result<Option<ResolvedPools>> {
        let d = &self.deployment;
        Ok(match d.mode {
            DeploymentMode::Colocated => {
                disaggregation::check_colocated(d, origin)?;
                None
            }
            DeploymentMode::Disaggregated => {
                reject_unmodelled(
                    origin,
                    &[
                        ("autoscale", self.autoscale.is_some()),
                        ("faults", self.faults.is_some()),
                        ("deployment.dp", d.dp != 1),
                        ("deployment.pp", d.pp != 1),
                        ("deployment.ep", d.ep != 1),
                        ("deployment.redundant_experts", d.redundant_experts != 0),
                    ],
                    "deployment.mode = \"disaggregated\"",
                )?;
                Some(disaggregation::resolve_pools(
                    d,
                    &self.scheduler,
                    origin,
                    Some(mean_lengths),
                    self.speculative.as_ref(),
                )?)
            }
        })
    }

    /// The workload is valid and its shortest request fits in `max_model_len` tokens.
    fn check_workload_fits(&self, origin: &str, max_model_len: u32, block_size: u32) -> Result<()> {
        self.workload.validate(origin)?;
        if let Some(t) = self.workload.block_id_tokens() {
            if t % block_size != 0 {
                let key = if self.workload.sessions.is_some() {
                    "workload.sessions.hash_block_tokens"
                } else {
                    "workload.arrival.hash_block_tokens"
                };
                return Err(Error::config(
                    origin,
                    key,
                    format!(
                        "must be a multiple of scheduler.block_size ({block_size}), got {t}: a block identity names whole KV blocks"
                    ),
                ));
            }
        }
        if let Some(shortest) = self.workload.shortest_request_tokens() {
            if shortest > max_model_len as u64 {
                return Err(Error::config(
                    origin,
                    "workload",
                    format!(
                        "every request has at least {shortest} tokens (prompt + output), more than \
                         max_model_len ({max_model_len}); every request would be rejected"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `limits.max_sim_time_s` on the clock, nanoseconds.
    fn max_sim_time_ns(&self, origin: &str) -> Result<u64> {
        if self.limits.max_sim_time_s.is_nan() || self.limits.max_sim_time_s <= 0.0 {
            return Err(Error::config(
                origin,
                "limits.max_sim_time_s",
                format!("must be > 0, got {}", self.limits.max_sim_time_s),
            ));
        }
        crate::clock::secs_to_ns(self.limits.max_sim_time_s)
            .map_err(|e| Error::config(origin, "limits.max_sim_time_s", e.to_string()))
    }

    fn slo_policy(&self, origin: &str) -> Result<SloPolicy> {
        let s = &self.slo;
        let ms = |key: &str, v: Option<f64>| -> Result<Option<u64>> {
            match v {
                None => Ok(None),
                Some(x) if x.is_finite() && x > 0.0 => crate::clock::ms_to_ns(x)
                    .map(Some)
                    .map_err(|e| Error::config(origin, key, e.to_string())),
                Some(x) => Err(Error::config(origin, key, format!("must be > 0, got {x}"))),
            }
        };
        for (key, p) in [
            ("slo.ttft_percentile", s.ttft_percentile),
            ("slo.tpot_percentile", s.tpot_percentile),
            ("slo.e2e_percentile", s.e2e_percentile),
        ] {
            check_percentile(origin, key, p)?;
        }
        let timeout = match s.queue_timeout_s {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(
                crate::clock::secs_to_ns(t)
                    .map_err(|e| Error::config(origin, "slo.queue_timeout_s", e.to_string()))?,
            ),
            Some(t) => {
                return Err(Error::config(
                    origin,
                    "slo.queue_timeout_s",
                    format!("must be > 0, got {t}"),
                ))
            }
        };
        let ttft_ns = ms("slo.ttft_ms", s.ttft_ms)?;
        if s.admission_control && ttft_ns.is_none() {
            return Err(Error::config(
                origin,
                "slo.admission_control",
                "needs slo.ttft_ms (admission control rejects requests predicted to miss it)",
            ));
        }
        Ok(SloPolicy {
            ttft_ns,
            tpot_ns: ms("slo.tpot_ms", s.tpot_ms)?,
            e2e_ns: ms("slo.e2e_ms", s.e2e_ms)?,
            admission_control: s.admission_control,
            queue_timeout_ns: timeout,
        })
    }
}

/// The deployment and scheduler sections of a scenario, resolved: what runs, how its
/// scheduler is set, and one GPU's memory plan. Every command builds its deployment here
/// (`estimate` from flags, `run`, `bench`, `sweep` and each candidate of `plan` from a
/// scenario), so the same deployment has the same KV capacity and format everywhere.
#[derive(Debug, Clone)]
pub struct ResolvedDeployment {
    /// Model, GPU, engine, TP and the formats (the KV format resolved: never `auto`).
    pub deployment: Deployment,
    /// One GPU's memory plan: weights, activations, reservations, KV capacity.
    pub memory: MemoryPlan,
    /// The scheduler: the engine profile's defaults for this GPU with the overrides applied,
    /// KV blocks from the memory plan, `max_model_len` capped at the KV capacity.
    pub scheduler: SchedulerConfig,
}

/// Checks the deployment's parallelism and replica count: TP >= 1, DP and EP in 1..=4096,
/// at most 4096 GPUs per replica, 1..=100000 replicas.
fn check_deployment_shape(d: &DeploymentConfig, origin: &str) -> Result<()> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    if d.tp == 0 {
        return Err(err("deployment.tp", "must be >= 1, got 0".into()));
    }
    for (key, v) in [
        ("deployment.dp", d.dp),
        ("deployment.ep", d.ep),
        ("deployment.pp", d.pp),
    ] {
        if !(1..=4096).contains(&v) {
            return Err(err(key, format!("must be in 1..=4096, got {v}")));
        }
    }
    if d.tp.saturating_mul(d.dp) > 4096 {
        return Err(err(
            "deployment.dp",
            format!(
                "tp x dp = {} GPUs per replica; at most 4096",
                d.tp as u64 * d.dp as u64
            ),
        ));
    }
    check_pipeline_shape(d, origin)?;
    if d.replicas == 0 || d.replicas > 100_000 {
        return Err(err(
            "deployment.replicas",
            format!("must be in 1..=100000, got {}", d.replicas),
        ));
    }
    Ok(())
}

/// Checks what pipeline parallelism (`deployment.pp > 1`) runs with: at most 4096 GPUs per
/// replica, and neither attention data parallelism nor expert parallelism (not modelled with
/// pipeline stages).
fn check_pipeline_shape(d: &DeploymentConfig, origin: &str) -> Result<()> {
    if d.pp == 1 {
        return Ok(());
    }
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    let gpus = d.tp as u64 * d.dp as u64 * d.pp as u64;
    if gpus > 4096 {
        return Err(err(
            "deployment.pp",
            format!("tp x dp x pp = {gpus} GPUs per replica; at most 4096"),
        ));
    }
    reject_unmodelled(
        origin,
        &[
            ("deployment.dp", d.dp != 1),
            ("deployment.ep", d.ep != 1),
            ("deployment.redundant_experts", d.redundant_experts != 0),
        ],
        PIPELINE,
    )
}

/// The setting that pipeline parallelism does not model a feature with.
const PIPELINE: &str = "deployment.pp > 1 (pipeline parallelism)";

/// An error naming the first key of `keys` that is set (`(key, set)`, in order) as "is not
/// modelled with `setting`"; `Ok` when none is.
fn reject_unmodelled(origin: &str, keys: &[(&str, bool)], setting: &str) -> Result<()> {
    match keys.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(Error::config(
            origin,
            *key,
            format!("is not modelled with {setting}"),
        )),
        None => Ok(()),
    }
}

/// Checks the scheduler's limits: max_num_seqs, block size and the token budget.
fn check_scheduler_limits(
    origin: &str,
    max_num_seqs: u32,
    max_batched: u32,
    block_size: u32,
) -> Result<()> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    if max_num_seqs == 0 || max_num_seqs > 1_000_000 {
        return Err(err(
            "scheduler.max_num_seqs",
            format!("must be in 1..=1000000, got {max_num_seqs}"),
        ));
    }
    if block_size == 0 || block_size > 1024 {
        return Err(err(
            "scheduler.block_size",
            format!("must be in 1..=1024, got {block_size}"),
        ));
    }
    if max_batched < block_size {
        return Err(err(
            "scheduler.max_num_batched_tokens",
            format!("must be at least the block size ({block_size}), got {max_batched}"),
        ));
    }
    if max_batched > 1 << 20 {
        return Err(err(
            "scheduler.max_num_batched_tokens",
            format!("must be at most 1048576, got {max_batched}"),
        ));
    }
    if max_batched < max_num_seqs {
        return Err(err(
            "scheduler.max_num_batched_tokens",
            format!("must be at least max_num_seqs ({max_num_seqs}), got {max_batched}"),
        ));
    }
    Ok(())
}

/// An engine whose limits depend on the workload (trtllm-bench's rule) gets them from the
/// workload's mean lengths, unless the scenario sets both.
#[allow(clippy::too_many_arguments)]
fn apply_workload_limits(
    engine: &mut EngineProfile,
    d: &DeploymentConfig,
    s: &SchedulerOverrides,
    model: &crate::model::ModelSpec,
    gpu: &GpuProfile,
    weight_dtype: WeightDtype,
    formats: &ModuleFormats,
    kv_dtype: KvDtype,
    lengths: &dyn Fn() -> Result<(f64, f64)>,
) -> Result<()> {
    let Some(rule) = engine.scheduler.workload_limits.clone() else {
        return Ok(());
    };
    let Some(weight_bytes) = limit_weight_bytes(weight_dtype) else {
        return Ok(());
    };
    if s.max_num_seqs.is_none() || s.max_num_batched_tokens.is_none() {
        let (input_tokens, output_tokens) = lengths()?;
        // trtllm-bench's `--tp` is every GPU of a pipeline stage; the limits it derives become
        // each attention data-parallel rank's (the LLM API applies them per rank) and each
        // pipeline micro-batch's (`--pp`: tuning.py divides the requests among them).
        let gpus = d.tp.saturating_mul(d.dp);
        let inputs = crate::engine::LimitInputs {
            params: trtllm_bench_param_count(model, formats),
            weight_bytes,
            kv_bytes_per_token: limit_kv_bytes_per_token(model, gpus, kv_dtype),
            gpu_memory_bytes: gpu.datasheet.memory_bytes,
            tp: gpus,
            pp: d.pp,
            input_tokens,
            output_tokens,
        };
        if let Some((seqs, tokens)) = rule.limits(&inputs) {
            engine.scheduler.max_num_seqs = seqs;
            engine.scheduler.max_num_batched_tokens = tokens.max(seqs);
        }
    }
    Ok(())
}

/// The context length the scheduler admits before the KV cache caps it:
/// `scheduler.max_model_len`, at most the model's, else the model's.
fn requested_model_len(
    deployment: &Deployment,
    s: &SchedulerOverrides,
    origin: &str,
) -> Result<u32> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    let model_len = deployment
        .model
        .max_position_embeddings
        .min(u32::MAX as u64) as u32;
    let max_model_len = s.max_model_len.unwrap_or(model_len);
    if max_model_len == 0 {
        return Err(err("scheduler.max_model_len", "must be > 0".into()));
    }
    if s.max_model_len.is_some_and(|l| l > model_len) {
        return Err(err(
            "scheduler.max_model_len",
            format!(
                "{} exceeds the model's context length ({model_len})",
                max_model_len
            ),
        ));
    }
    Ok(max_model_len)
}

/// The context length the scheduler admits, as vLLM decides it: an explicit
/// (`explicit`) max_model_len must fit in the KV cache of `kv_tokens`, the default is capped at
/// it; with continuous batching and chunked prefill off, the token budget must hold a whole
/// prompt of that length.
fn kv_capped_model_len(
    origin: &str,
    explicit: bool,
    max_model_len: u32,
    kv_tokens: u64,
    max_batched: u32,
    chunked: bool,
    continuous: bool,
) -> Result<u32> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    // Like vLLM: an explicit max_model_len must fit in the KV cache; the default is capped
    // at the KV capacity.
    let max_model_len = if explicit {
        if max_model_len as u64 > kv_tokens {
            return Err(err(
                "scheduler.max_model_len",
                format!(
                    "{max_model_len} tokens do not fit in the KV cache ({} tokens per replica); \
                     lower it or raise gpu_memory_utilization / TP",
                    kv_tokens
                ),
            ));
        }
        max_model_len
    } else {
        max_model_len.min(kv_tokens.min(u32::MAX as u64) as u32)
    };
    if !chunked && continuous && max_batched < max_model_len {
        return Err(err(
            "scheduler.max_num_batched_tokens",
            format!(
                "{max_batched} cannot hold a prompt of max_model_len ({max_model_len}) tokens \
                 with chunked prefill off; enable chunked prefill, raise it, or lower max_model_len"
            ),
        ));
    }
    Ok(max_model_len)
}

/// The weight format the deployment asks for (`None`: auto, the checkpoint's own) and its
/// KV-cache setting.
fn requested_formats(d: &DeploymentConfig, origin: &str) -> Result<(Option<WeightDtype>, KvDtype)> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    let explicit_dtype =
        WeightDtype::parse_setting(&d.dtype).map_err(|e| err("deployment.dtype", e))?;
    let kv_setting: KvDtype = d
        .kv_cache_dtype
        .parse()
        .map_err(|e| err("deployment.kv_cache_dtype", e))?;
    Ok((explicit_dtype, kv_setting))
}

/// Resolves a deployment and its scheduler overrides: looks up the model, GPU and engine
/// ([`crate::catalog`]), applies the KV-format rule ([`crate::precision::KvDtype::resolve`])
/// and the engine's defaults for the GPU, and plans the memory. Errors name `origin` and the
/// key (`deployment.*`, `scheduler.*`).
/// `mean_lengths` gives the workload's mean prompt and output tokens, for an engine whose
/// batch limits depend on them (`workload_limits`, trtllm-bench's); without it those limits
/// are not applied. `spec`: speculative decoding, whose draft and slots take KV as the
/// engine reserves them ([`SpeculativeConfig::draft_memory`]).
pub fn resolve_deployment(
    d: &DeploymentConfig,
    s: &SchedulerOverrides,
    origin: &str,
    mean_lengths: Option<&dyn Fn() -> Result<(f64, f64)>>,
    spec: Option<&SpeculativeConfig>,
) -> Result<ResolvedDeployment> {
    let (explicit_dtype, kv_setting) = requested_formats(d, origin)?;
    check_deployment_shape(d, origin)?;
    // Lookup and feasibility errors name the scenario and the key they come from.
    let at = |key: &'static str| move |e: Error| Error::config(origin, key, e.to_string());
    let mut engine = EngineProfile::load(&d.engine).map_err(at("deployment.engine"))?;
    let gpu = GpuProfile::load(&d.gpu).map_err(at("deployment.gpu"))?;
    let model = load_model(&d.model).map_err(at("deployment.model"))?;
    let model = with_checkpoint(model, d.checkpoint.as_deref(), explicit_dtype, origin)?;
    let (weight_dtype, formats, kv_dtype) = resolve_formats(&model, explicit_dtype, kv_setting);
    engine.scheduler.for_gpu(&gpu);
    if let Some(lengths) = mean_lengths {
        apply_workload_limits(
            &mut engine,
            d,
            s,
            &model,
            &gpu,
            weight_dtype,
            &formats,
            kv_dtype,
            lengths,
        )?;
    }
    let spec_seqs = spec.and_then(|x| x.default_max_num_seqs(&engine));
    let ChosenLimits {
        max_num_seqs,
        max_batched,
        chunked,
        prefix,
        block_size,
        batching,
        reserve_output,
    } = ChosenLimits::apply(&mut engine.scheduler, s, spec_seqs, origin)?;

    let deployment = Deployment {
        model,
        gpu,
        engine,
        tp: d.tp,
        dp: d.dp,
        pp: d.pp,
        ep: d.ep,
        redundant_experts: d.redundant_experts,
        weight_dtype,
        formats,
        kv_dtype,
    };
    deployment.validate().map_err(|e| {
        let key = match e.to_string() {
            m if m.contains("expert") => "deployment.ep",
            m if m.contains("pipeline") => "deployment.pp",
            _ => "deployment.tp",
        };
        Error::config(origin, key, e.to_string())
    })?;
    let max_model_len = requested_model_len(&deployment, s, origin)?;
    // Pipeline stages: each of the `pp` micro-batches in flight is simulated as a sub-replica
    // with 1/pp of the replica's KV pool (docs/model.md, "Pipeline parallelism").
    let stages = d.pp.max(1) as u64;
    let es = &deployment.engine.scheduler;
    let explicit_fraction = s.gpu_memory_utilization.is_some();
    let (draft, slots) = reservation(spec, &deployment, max_num_seqs, explicit_fraction, origin)?;
    let memory = deployment_memory(
        &deployment,
        es.gpu_memory_utilization,
        (max_batched, max_num_seqs, block_size),
        spec,
        &draft,
        origin,
    )?;
    let max_model_len = kv_capped_model_len(
        origin,
        s.max_model_len.is_some(),
        max_model_len,
        (memory.kv_tokens / stages).saturating_sub(slots as u64),
        max_batched,
        chunked,
        batching == Batching::Continuous,
    )?;
    // Each attention data-parallel rank runs its own scheduler with these limits; the
    // simulated replica schedules for all of them at once (the load split evenly).
    let ranks = d.dp;
    Ok(ResolvedDeployment {
        scheduler: SchedulerConfig {
            max_num_seqs: max_num_seqs.saturating_mul(ranks),
            max_num_batched_tokens: max_batched.saturating_mul(ranks),
            chunked_prefill: chunked,
            prefix_caching: prefix,
            block_size,
            kv_blocks: memory.kv_blocks / stages,
            max_model_len,
            static_batching: batching == Batching::Static,
            reserve_output_kv: reserve_output,
            spec_kv_slots: slots,
            offload: offload::resolve(d, prefix, &memory, origin)?,
            spec_max_batch_seqs: spec.map_or(0, |x| x.max_batch_seqs(&deployment.engine)),
            plans_ahead: es.overlaps(spec.is_some()),
        },
        deployment,
        memory,
    })
}

/// The scheduler limits a deployment runs with: the scenario's `[scheduler]` values, else the
/// engine's defaults (a speculative config's default `max_num_seqs` before the engine's).
struct ChosenLimits {
    /// Sequences in one batch (per attention data-parallel rank).
    max_num_seqs: u32,
    /// Tokens in one batch (per rank).
    max_batched: u32,
    /// Whether long prompts are prefilled in chunks.
    chunked: bool,
    /// Whether the prefix cache is on.
    prefix: bool,
    /// KV block size, tokens.
    block_size: u32,
    /// Batching discipline.
    batching: Batching,
    /// Whether a request reserves KV for its whole output at admission.
    reserve_output: bool,
}

impl ChosenLimits {
    /// Chooses the limits, checks them, and writes `gpu_memory_utilization`, `max_num_seqs`,
    /// `max_num_batched_tokens`, `block_size` and `async_scheduling` into the engine's defaults `es`.
    fn apply(
        es: &mut crate::engine::SchedulerDefaults,
        s: &SchedulerOverrides,
        spec_seqs: Option<u32>,
        origin: &str,
    ) -> Result<Self> {
        if let Some(v) = s.gpu_memory_utilization {
            if !(v > 0.0 && v <= 1.0) {
                return Err(Error::config(
                    origin,
                    "scheduler.gpu_memory_utilization",
                    format!("must be in (0, 1], got {v}"),
                ));
            }
            es.gpu_memory_utilization = v;
        }
        let max_num_seqs = s.max_num_seqs.or(spec_seqs).unwrap_or(es.max_num_seqs);
        let max_batched = s
            .max_num_batched_tokens
            .unwrap_or(es.max_num_batched_tokens);
        let chunked = s
            .enable_chunked_prefill
            .unwrap_or(es.enable_chunked_prefill);
        let prefix = s.enable_prefix_caching.unwrap_or(es.enable_prefix_caching);
        let block_size = s.block_size.unwrap_or(es.block_size);
        let batching = s.batching.unwrap_or_default();
        check_scheduler_limits(origin, max_num_seqs, max_batched, block_size)?;
        es.max_num_seqs = max_num_seqs;
        es.max_num_batched_tokens = max_batched;
        es.block_size = block_size;
        let reserve_output = s.reserve_output_kv.unwrap_or(es.reserve_output_kv);
        if let Some(on) = s.async_scheduling {
            es.async_scheduling = on;
        }
        Ok(ChosenLimits {
            max_num_seqs,
            max_batched,
            chunked,
            prefix,
            block_size,
            batching,
            reserve_output,
        })
    }
}

/// The memory plan of `deployment` with its `draft` model's reservation, at
/// `gpu_memory_utilization` and the limits (`max_num_batched_tokens`, `max_num_seqs`,
/// `block_size`); when only the draft does not fit, the error says so.
fn deployment_memory(
    deployment: &Deployment,
    gpu_memory_utilization: f64,
    (max_batched, max_num_seqs, block_size): (u32, u32, u32),
    spec: Option<&SpeculativeConfig>,
    draft: &crate::roofline::DraftMemory,
    origin: &str,
) -> Result<MemoryPlan> {
    let plan = |draft: &crate::roofline::DraftMemory| {
        plan_memory(
            deployment,
            gpu_memory_utilization,
            max_batched,
            max_num_seqs,
            block_size,
            block_size as u64,
            draft,
        )
    };
    plan(draft).map_err(|e| {
        // The target alone fits: the draft is what does not.
        match spec.filter(|_| plan(&Default::default()).is_ok()) {
            Some(x) => crate::speculative::draft_does_not_fit(x, draft, &e, origin),
            None => Error::config(origin, "deployment", e.to_string()),
        }
    })
}

/// The model with `checkpoint` (a published checkpoint it declares, by Hugging Face id) as
/// its own checkpoint; the model as it is without one. Errors (naming `origin` and
/// `deployment.checkpoint`): a checkpoint the model does not declare, or an explicit `dtype`
/// other than the one the checkpoint stores its experts (or, for a dense model, its layers) in.
pub fn with_checkpoint(
    mut model: crate::model::ModelSpec,
    checkpoint: Option<&str>,
    explicit: Option<WeightDtype>,
    origin: &str,
) -> Result<crate::model::ModelSpec> {
    let Some(name) = checkpoint else {
        return Ok(model);
    };
    let err = |reason: String| Error::config(origin, "deployment.checkpoint", reason);
    let Some(c) = model.published_checkpoints.get(name).cloned() else {
        let known: Vec<&str> = model
            .published_checkpoints
            .keys()
            .map(|k| k.as_str())
            .collect();
        return Err(err(format!(
            "'{name}' is not a checkpoint model '{}' declares ({})",
            model.name,
            if known.is_empty() {
                "it declares none; use deployment.dtype".to_string()
            } else {
                format!("known: {}", known.join(", "))
            }
        )));
    };
    let headline = if model.moe.is_some() {
        c.experts
    } else {
        c.other
    };
    if let Some(w) = explicit.filter(|w| *w != headline) {
        return Err(err(format!(
            "'{name}' stores its weights in {headline}, but deployment.dtype is {w}: set \
             dtype = \"auto\" or \"{headline}\""
        )));
    }
    model.checkpoint = Some(c);
    Ok(model)
}

/// The weight formats a deployment runs and its KV format: an explicit `dtype` names a
/// checkpoint of that format, whose modules run as the published checkpoints of the format
/// leave them ([`ModuleFormats::of_checkpoint`]: NVFP4 keeps MLA attention and the MTP layers
/// in BF16), or, for NVFP4, as the model's own NVFP4 checkpoint does (its exclude lists
/// honoured), with the KV `auto` rule of [`KvDtype::resolve`], except that an explicit
/// `dtype` equal to the checkpoint's own headline format names that checkpoint, whose KV
/// declaration then decides as under `auto`; `auto` runs the checkpoint's own formats module
/// by module and the KV format it declares (16-bit when it declares none, as vLLM's `auto`
/// does), or BF16 for an unquantized checkpoint. Returns (headline format, module formats,
/// KV format).
pub fn resolve_formats(
    model: &crate::model::ModelSpec,
    explicit: Option<WeightDtype>,
    kv_setting: KvDtype,
) -> (WeightDtype, ModuleFormats, KvDtype) {
    let own = |c: &crate::model::CheckpointFormats| {
        let attention = c.attention.unwrap_or(c.other);
        ModuleFormats {
            attention,
            attention_out: c.attention_out.unwrap_or(attention),
            dense: c.other,
            experts: c.experts,
            mtp: c.mtp.unwrap_or(c.other),
        }
    };
    // The format the checkpoint is known by: its experts' for an MoE model, else the rest's.
    let headline = |c: &crate::model::CheckpointFormats| {
        if model.moe.is_some() {
            c.experts
        } else {
            c.other
        }
    };
    // `auto` KV of the model's own checkpoint: what it declares, else 16-bit (vLLM's `auto`).
    let declared = |c: &crate::model::CheckpointFormats| match kv_setting {
        KvDtype::Auto => c.kv_cache.unwrap_or(KvDtype::Bf16),
        explicit => explicit,
    };
    match (explicit, &model.checkpoint) {
        (Some(w), Some(c)) if c.experts == w && w == WeightDtype::Fp4 => {
            (w, own(c), kv_setting.resolve(w))
        }
        // The checkpoint's own format named explicitly (DeepSeek-V3's block FP8 as `fp8`): the
        // same checkpoint as `auto`, so the same KV (a declaration-less FP8 checkpoint gets a
        // 16-bit KV cache, not the ModelOpt FP8 KV that `fp8` assumes of a converted model).
        (Some(w), Some(c)) if headline(c) == w => {
            (w, ModuleFormats::of_checkpoint(model, w), declared(c))
        }
        (Some(w), _) => (
            w,
            ModuleFormats::of_checkpoint(model, w),
            kv_setting.resolve(w),
        ),
        (None, None) => (
            WeightDtype::Bf16,
            ModuleFormats::uniform(WeightDtype::Bf16),
            kv_setting.resolve(WeightDtype::Bf16),
        ),
        (None, Some(c)) => (headline(c), own(c), declared(c)),
    }
}

/// KV bytes per token of the whole replica as trtllm-bench's limit rule counts them
/// (tensorrt_llm/bench/build/tuning.py `calc_engine_setting`): `2 x layers x max(tp,
/// num_key_value_heads) x head_size x bytes`, with the config's head size (for MLA models,
/// which give no `head_dim`, hidden / heads: the tool does not know the latent).
fn limit_kv_bytes_per_token(model: &crate::model::ModelSpec, tp: u32, kv: KvDtype) -> f64 {
    let kv_heads = model.num_kv_heads.max(tp as u64) as f64;
    let head = match model.mla {
        Some(_) => (model.hidden_size / model.num_attention_heads) as f64,
        None => model.head_dim as f64,
    };
    2.0 * model.num_layers as f64 * kv_heads * head * kv.bytes()
}

/// The parameter count trtllm-bench's limit rule multiplies by its bytes per weight: the sum
/// of the checkpoint's safetensors element counts (`ModelConfig.get_param_count`,
/// tensorrt_llm/bench/build/dataclasses.py at NVIDIA/TensorRT-LLM 04cba882084a:
/// `sum(get_safetensors_metadata(...).parameter_count.values())`, huggingface_hub's per-dtype
/// sums of each tensor's shape product, src/huggingface_hub/utils/_safetensors.py), module by
/// module in the checkpoint's formats ([`WeightDtype::stored_elements`]: an NVFP4 weight is
/// 0.5625 elements), with the multi-token-prediction layers the checkpoint ships
/// (`num_nextn_predict_layers`; each one MoE layer in the MTP format, its `eh_proj` (2h x h)
/// and two norms, and the copies of the embedding and the LM head that DeepSeek-V3's files
/// store under the layer: deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, "685B, which includes
/// 671B of the Main Model weights and 14B of the MTP Module weights", README.md). For
/// DeepSeek-R1 this gives 684.49 G for the block-FP8 checkpoint (685B on its model page) and
/// 393.63 G for nvidia/DeepSeek-R1-0528-NVFP4-v2 (393.6B as its safetensors metadata counts
/// them), where the rule used to be handed 671.03 G.
pub fn trtllm_bench_param_count(model: &crate::model::ModelSpec, f: &ModuleFormats) -> f64 {
    use crate::model::MlpKind;
    let h = model.hidden_size as f64;
    let norms = 2.0 * h;
    let out = model.attention_out_params();
    let attention = |a: WeightDtype, o: WeightDtype| {
        (model.attention_params() - out) * a.stored_elements() + out * o.stored_elements()
    };
    let moe = |experts: WeightDtype, dense: WeightDtype| {
        model.num_experts() as f64 * model.expert_params() * experts.stored_elements()
            + model.shared_expert_params() * dense.stored_elements()
            + model.router_params()
    };
    let dense = model.dense_mlp_params() * f.dense.stored_elements();
    let main_attention = attention(f.attention, f.attention_out);
    let layers: f64 = model
        .layer_groups()
        .iter()
        .map(|(k, n)| {
            let mlp = match k.mlp {
                MlpKind::Dense => dense,
                MlpKind::Moe => moe(f.experts, f.dense),
            };
            *n as f64 * (main_attention + mlp + norms)
        })
        .sum();
    let head = if model.tie_word_embeddings {
        0.0
    } else {
        model.lm_head_params()
    };
    let main = layers + model.embedding_params() + head + h;
    let mtp_mlp = if model.moe.is_some() {
        moe(f.mtp, f.mtp)
    } else {
        model.dense_mlp_params() * f.mtp.stored_elements()
    };
    let mtp_layer = attention(f.mtp, f.mtp)
        + mtp_mlp
        + 2.0 * h * h * f.mtp.stored_elements()
        + 2.0 * norms
        + model.embedding_params()
        + model.lm_head_params();
    main + model.num_nextn_predict_layers as f64 * mtp_layer
}

/// Bytes per weight as trtllm-bench's limit rule counts them (`BYTES_PER_ELEM`: FP8 1,
/// NVFP4 0.5, unquantized 2), or `None` for a checkpoint whose quantization the rule does not
/// tune: `get_benchmark_engine_settings` (tensorrt_llm/bench/build/build.py at
/// NVIDIA/TensorRT-LLM 000a01de66f0) runs `calc_engine_setting` only for `TUNED_QUANTS`
/// (NVFP4, FP8, FP8_BLOCK_SCALES, no quantization) and otherwise keeps BuildConfig's
/// max_batch_size and max_num_tokens; an MXFP4 checkpoint (gpt-oss) loads as W4A8_MXFP4_MXFP8,
/// W4A8_MXFP4_FP8 or W4A16_MXFP4 (`ModelConfig.get_mxfp4_quant_algo`,
/// tensorrt_llm/_torch/model_config.py), none of them tuned, so the engine's defaults stand.
fn limit_weight_bytes(w: WeightDtype) -> Option<f64> {
    match w {
        WeightDtype::Fp8 => Some(1.0),
        WeightDtype::Fp4 => Some(0.5),
        WeightDtype::Bf16 | WeightDtype::Fp16 => Some(2.0),
        WeightDtype::Mxfp4 => None,
    }
}

impl MeasureConfig {
    /// Checks every value; errors name the key.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let err = |key: &str, reason: String| Err(Error::config(origin, key, reason));
        if !(self.tolerance.is_finite() && self.tolerance > 0.0 && self.tolerance < 1.0) {
            return err(
                "measure.tolerance",
                format!("must be in (0, 1), got {}", self.tolerance),
            );
        }
        if ![0.90, 0.95, 0.99].contains(&self.confidence) {
            return err(
                "measure.confidence",
                format!("must be 0.90, 0.95 or 0.99, got {}", self.confidence),
            );
        }
        if !(5..=100).contains(&self.batches) {
            return err(
                "measure.batches",
                format!("must be in 5..=100, got {}", self.batches),
            );
        }
        if self.min_requests < 100 {
            return err(
                "measure.min_requests",
                format!("must be at least 100, got {}", self.min_requests),
            );
        }
        if self.max_requests < self.min_requests || self.max_requests > 10_000_000 {
            return err(
                "measure.max_requests",
                format!(
                    "must be in measure.min_requests ({})..=10000000, got {}",
                    self.min_requests, self.max_requests
                ),
            );
        }
        Ok(())
    }

    /// The steady-state analysis settings these keys give.
    pub fn analysis(&self) -> SteadyStateConfig {
        SteadyStateConfig {
            batches: self.batches as usize,
            confidence: self.confidence,
            tolerance: self.tolerance,
            ..SteadyStateConfig::default()
        }
    }
}

impl Resolved {
    /// The step-time model of this deployment, its table sized to the token budget.
    pub fn step_model(&self) -> Result<StepTimeModel> {
        let tokens = self.sim.scheduler.max_num_batched_tokens + self.sim.scheduler.max_num_seqs;
        let model = StepTimeModel::new(self.deployment.clone(), tokens)?
            .with_time_scale(self.scenario.deployment.step_time_scale);
        self.speculate(model, &self.deployment, tokens)
    }

    /// `model` with the scenario's speculative decoding, if it has one with K >= 1.
    fn speculate(
        &self,
        model: StepTimeModel,
        dep: &Deployment,
        tokens: u32,
    ) -> Result<StepTimeModel> {
        match &self.scenario.speculative {
            Some(s) => Ok(match s.speculation(dep, tokens, &self.origin)? {
                Some(spec) => model.with_speculation(spec),
                None => model,
            }),
            None => Ok(model),
        }
    }

    /// What a steady-state analysis of this scenario judges: its SLOs and the plan's goodput
    /// threshold (default 0.9).
    pub fn targets(&self) -> Targets {
        let s = &self.scenario.slo;
        Targets {
            ttft: s.ttft_ms.map(|t| (t, s.ttft_percentile)),
            tpot: s.tpot_ms.map(|t| (t, s.tpot_percentile)),
            e2e: s.e2e_ms.map(|t| (t, s.e2e_percentile)),
            goodput_threshold: self.scenario.plan.goodput_threshold.unwrap_or(0.9),
        }
    }

    /// Whether the arrivals are stationary (Poisson, gamma, constant, or a closed loop under
    /// a client concurrency cap), so that a steady state exists to analyse; a trace replayed
    /// at a set mean rate (`workload.arrival.rate_per_s`) counts too: it is the load `plan`
    /// judges in steady state, so its printed re-run line shows the same analysis.
    pub fn has_steady_state(&self) -> bool {
        use crate::workload::ArrivalConfig as A;
        match self.scenario.workload.arrival {
            A::Poisson { .. } | A::Gamma { .. } | A::Constant { .. } => true,
            A::Offline => self.sim.max_concurrency.is_some(),
            A::Trace { rate_per_s, .. } => rate_per_s.is_some(),
            A::Schedule { .. } | A::Diurnal { .. } => false,
        }
    }

    /// GPUs of the whole deployment (both pools when disaggregated).
    pub fn gpus(&self) -> u32 {
        match &self.sim.disaggregation {
            Some(d) => {
                d.prefill.replicas * d.prefill.gpus_per_replica
                    + d.decode.replicas * d.decode.gpus_per_replica
            }
            None => self.sim.replicas * self.sim.gpus_per_replica,
        }
    }

    /// Disaggregated: the step-time models of the prefill and the decode pool.
    pub fn pool_step_models(&self) -> Result<Option<(StepTimeModel, StepTimeModel)>> {
        let Some(p) = &self.pools else {
            return Ok(None);
        };
        let scale = self.scenario.deployment.step_time_scale;
        let model = |r: &ResolvedDeployment| -> Result<StepTimeModel> {
            Ok(StepTimeModel::new(
                r.deployment.clone(),
                r.scheduler.max_num_batched_tokens + r.scheduler.max_num_seqs,
            )?
            .with_time_scale(scale))
        };
        let decode = model(&p.decode)?;
        let tokens = p.decode.scheduler.max_num_batched_tokens + p.decode.scheduler.max_num_seqs;
        let decode = self.speculate(decode, &p.decode.deployment, tokens)?;
        Ok(Some((model(&p.prefill)?, decode)))
    }
}

/// Resolves a path given in a scenario relative to the scenario's directory; `key` and
/// `origin` name it in the error when the joined path cannot be written as text (a folder
/// name that is not UTF-8: a scenario's paths are TOML strings).
pub fn resolve_relative(dir: &Path, path: &str, origin: &str, key: &str) -> Result<String> {
    let p = PathBuf::from(path);
    if p.is_absolute() || dir.as_os_str().is_empty() {
        return Ok(path.to_string());
    }
    dir.join(p).into_os_string().into_string().map_err(|_| {
        Error::config(
            origin,
            key,
            format!(
                "'{path}' is relative to the scenario's folder {}, whose name is not UTF-8, so \
                 it cannot be followed exactly; rename the folder, or run from inside it",
                dir.display()
            ),
        )
    })
}

/// Makes the workload's file paths (trace, empirical lengths) relative to the scenario file.
fn resolve_workload_paths(w: &mut WorkloadConfig, dir: &Path, origin: &str) -> Result<()> {
    use crate::workload::{ArrivalConfig, LengthConfig};
    if let ArrivalConfig::Trace { path, .. } = &mut w.arrival {
        *path = resolve_relative(dir, path, origin, "workload.arrival.path")?;
    }
    for (key, l) in [
        ("workload.input.path", &mut w.input),
        ("workload.output.path", &mut w.output),
    ] {
        if let Some(LengthConfig::Empirical { path }) = l {
            *path = resolve_relative(dir, path, origin, key)?;
        }
    }
    Ok(())
}

/// A model, GPU or engine given as a path, relative to `dir`; a catalog name stays.
fn resolve_catalog_path(
    kind: catalog::Kind,
    dir: &Path,
    given: &mut String,
    origin: &str,
    key: &str,
) -> Result<()> {
    if let Ok(catalog::Entry::Path(_)) = catalog::resolve(kind, given) {
        *given = resolve_relative(dir, given, origin, key)?;
    }
    Ok(())
}

impl Scenario {
    /// Makes every file path the scenario names relative to `dir`, the scenario file's folder:
    /// `deployment.model`, `deployment.gpu`, `deployment.engine` and `plan.gpus` when they are
    /// paths rather than catalog names, the trace and empirical length files.
    fn resolve_paths(&mut self, dir: &Path, origin: &str) -> Result<()> {
        use catalog::Kind;
        let d = &mut self.deployment;
        // A Hugging Face id (`org/name`) stays an id unless the scenario's folder holds a
        // folder of that name.
        let hub_id = crate::model::looks_like_hub_id(&d.model)
            && !dir.join(&d.model).exists()
            && !Path::new(&d.model).exists();
        if !hub_id {
            resolve_catalog_path(Kind::Model, dir, &mut d.model, origin, "deployment.model")?;
        }
        resolve_catalog_path(Kind::Gpu, dir, &mut d.gpu, origin, "deployment.gpu")?;
        resolve_catalog_path(
            Kind::Engine,
            dir,
            &mut d.engine,
            origin,
            "deployment.engine",
        )?;
        for g in self.plan.gpus.iter_mut().flatten() {
            resolve_catalog_path(Kind::Gpu, dir, g, origin, "plan.gpus")?;
        }
        for (key, gpus) in [
            ("plan.prefill_gpus", &mut self.plan.prefill_gpus),
            ("plan.decode_gpus", &mut self.plan.decode_gpus),
        ] {
            for g in gpus.iter_mut().flatten() {
                resolve_catalog_path(Kind::Gpu, dir, g, origin, key)?;
            }
        }
        for (key, p) in [
            ("deployment.prefill.gpu", &mut d.prefill),
            ("deployment.decode.gpu", &mut d.decode),
        ] {
            if let Some(g) = p.as_mut().and_then(|p| p.gpu.as_mut()) {
                resolve_catalog_path(Kind::Gpu, dir, g, origin, key)?;
            }
        }
        resolve_workload_paths(&mut self.workload, dir, origin)
    }
}
/// A percentile key's value: strictly between 0 and 100 (p100 is the maximum, which no run
/// can bound), and above 1, where a value reads as a fraction meant as a percentile
/// (`0.99` for p99); the error names the key and says what to write.
fn check_percentile(origin: &str, key: &str, p: f64) -> Result<()> {
    // A fraction below 1 reads as a percentile meant x 100 (0.99 for p99); 1 itself would be
    // p100, the maximum, which no percentile key accepts.
    if p.is_finite() && p > 0.0 && p < 1.0 {
        return Err(Error::config(
            origin,
            key,
            format!(
                "{p} looks like a fraction: percentiles are in (0, 100), write {} for p{}",
                100.0 * p,
                100.0 * p
            ),
        ));
    }
    if p == 1.0 {
        return Err(Error::config(
            origin,
            key,
            "1 is p1 or, as a fraction, p100 (the maximum, which no run can bound): percentiles \
             are in (0, 100) exclusive; write 99 for p99",
        ));
    }
    if !(p > 0.0 && p < 100.0) {
        return Err(Error::config(
            origin,
            key,
            format!("must be a percentile in (0, 100), such as 99 for p99; got {p}"),
        ));
    }
    Ok(())
}

/// Checks a $/GPU-hour price: finite and above 0. A price of 0 makes every deployment cost
/// $0 per million tokens, so a plan could not rank its candidates by cost; the reason names
/// that (the caller names the key or flag).
pub fn check_gpu_price(usd_per_gpu_hour: f64) -> std::result::Result<(), String> {
    let p = usd_per_gpu_hour;
    if p.is_finite() && p > 0.0 {
        return Ok(());
    }
    let why = if p == 0.0 {
        " (a free GPU makes every deployment cost $0 per million tokens, so the plan could not rank deployments by cost)"
    } else {
        ""
    };
    Err(format!("must be a $/GPU-hour price > 0, got {p}{why}"))
}
