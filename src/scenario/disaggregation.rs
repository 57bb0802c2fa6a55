//! `deployment.mode = "disaggregated"`: the prefill and decode pools and the KV link, read
//! and checked into the simulator's [`DisaggConfig`]. docs/scenarios.md documents every key;
//! docs/disaggregation.md the model and the defaults' sources.

use serde::{Deserialize, Serialize};

use super::{resolve_deployment, DeploymentConfig, ResolvedDeployment, SchedulerOverrides};
use crate::error::{Error, Result};
use crate::sim::{DisaggConfig, PoolConfig, RouterKind};
use crate::speculative::SpeculativeConfig;

/// How the deployment serves: colocated replicas, or separate prefill and decode pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentMode {
    /// Every replica prefills and decodes (the default).
    #[default]
    Colocated,
    /// A prefill pool hands KV caches over a link to a decode pool.
    Disaggregated,
}

impl DeploymentMode {
    /// Whether this is the default, colocated mode (left out of serialized scenarios).
    pub fn is_colocated(&self) -> bool {
        *self == DeploymentMode::Colocated
    }
}

/// `[deployment.prefill]` / `[deployment.decode]`: one pool; unset keys take the
/// deployment's (`gpu`, `tp`, `dtype`, `router`) or the scheduler's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// Replicas in the pool.
    #[serde(default = "one")]
    pub replicas: u32,
    /// GPU profile of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Tensor-parallel size of each replica of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    /// Weight format of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// The pool's router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterKind>,
    /// Most sequences per iteration on a replica of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u32>,
    /// Token budget of one iteration on a replica of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u32>,
}

impl Default for PoolSection {
    fn default() -> Self {
        PoolSection {
            replicas: 1,
            gpu: None,
            tp: None,
            dtype: None,
            router: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
        }
    }
}

fn one() -> u32 {
    1
}

/// Link bandwidth per GPU of the smaller pool TP when the scenario gives none, GB/s: one
/// 400 Gb/s NIC per GPU (DGX H100 datasheet: 8 ConnectX-7 400 Gb/s ports for 8 GPUs).
pub const DEFAULT_BANDWIDTH_GB_S_PER_GPU: f64 = 50.0;

/// Slowest KV link a scenario may set, GB/s (1 MB/s: below any network a GPU cluster has;
/// slower links make transfer times leave the simulator's clock).
pub const MIN_BANDWIDTH_GB_S: f64 = 1e-3;
/// Fixed time of one KV transfer when the scenario gives none, us: our choice (no published
/// per-transfer measurement found; RDMA verbs complete in single-digit us, the connector's
/// notification and bookkeeping add more).
pub const DEFAULT_LATENCY_US: f64 = 20.0;

/// Both pools resolved: what each runs and its memory plan.
#[derive(Debug, Clone)]
pub struct ResolvedPools {
    /// The prefill pool's deployment, scheduler and memory.
    pub prefill: ResolvedDeployment,
    /// The decode pool's deployment, scheduler and memory.
    pub decode: ResolvedDeployment,
    /// The simulator's view of both pools and the link.
    pub sim: DisaggConfig,
}

/// The deployment a pool runs: the deployment's keys with the pool's on top.
fn pool_deployment(d: &DeploymentConfig, p: &PoolSection) -> DeploymentConfig {
    DeploymentConfig {
        gpu: p.gpu.clone().unwrap_or_else(|| d.gpu.clone()),
        tp: p.tp.unwrap_or(d.tp),
        dtype: p.dtype.clone().unwrap_or_else(|| d.dtype.clone()),
        replicas: p.replicas,
        router: p.router.unwrap_or(d.router),
        mode: DeploymentMode::Colocated,
        prefill: None,
        decode: None,
        kv_transfer_bandwidth_gb_s: None,
        kv_transfer_latency_us: None,
        kv_transfer_layerwise: None,
        ..d.clone()
    }
}

/// Renames an error's key into the pool's section: `deployment.tp` becomes
/// `deployment.prefill.tp`, and a scheduler limit the pool sets becomes the pool's key.
fn in_pool(e: Error, pool: &str, p: &PoolSection) -> Error {
    match e {
        Error::Config {
            source_name,
            key,
            reason,
        } => {
            let key = if let Some(rest) = key.strip_prefix("deployment.") {
                format!("deployment.{pool}.{rest}")
            } else if key == "deployment" {
                format!("deployment.{pool}")
            } else if (key == "scheduler.max_num_seqs" && p.max_num_seqs.is_some())
                || (key == "scheduler.max_num_batched_tokens" && p.max_num_batched_tokens.is_some())
            {
                format!("deployment.{pool}.{}", &key["scheduler.".len()..])
            } else {
                key
            };
            Error::Config {
                source_name,
                key,
                reason,
            }
        }
        other => other,
    }
}

/// Checks that the pool and link keys are only set with `mode = "disaggregated"`.
pub fn check_colocated(d: &DeploymentConfig, origin: &str) -> Result<()> {
    let set = [
        ("deployment.prefill", d.prefill.is_some()),
        ("deployment.decode", d.decode.is_some()),
        (
            "deployment.kv_transfer_bandwidth_gb_s",
            d.kv_transfer_bandwidth_gb_s.is_some(),
        ),
        (
            "deployment.kv_transfer_latency_us",
            d.kv_transfer_latency_us.is_some(),
        ),
        (
            "deployment.kv_transfer_layerwise",
            d.kv_transfer_layerwise.is_some(),
        ),
    ];
    match set.iter().find(|(_, s)| *s) {
        Some((key, _)) => Err(Error::config(
            origin,
            *key,
            "applies only with deployment.mode = \"disaggregated\"",
        )),
        None => Ok(()),
    }
}

/// Resolves both pools and the link of a disaggregated deployment; errors name the pool's
/// key (`deployment.prefill.tp`, `deployment.kv_transfer_bandwidth_gb_s`, ...). `spec`:
/// speculative decoding, which the decode pool runs (its draft and slots take its KV).
pub fn resolve_pools(
    d: &DeploymentConfig,
    s: &SchedulerOverrides,
    origin: &str,
    mean_lengths: Option<&dyn Fn() -> Result<(f64, f64)>>,
    spec: Option<&SpeculativeConfig>,
) -> Result<ResolvedPools> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    let mut resolved = Vec::with_capacity(2);
    for (name, section) in [("prefill", &d.prefill), ("decode", &d.decode)] {
        let p = section.clone().unwrap_or_default();
        if p.replicas == 0 || p.replicas > 100_000 {
            return Err(err(
                &format!("deployment.{name}.replicas"),
                format!("must be in 1..=100000, got {}", p.replicas),
            ));
        }
        let pd = pool_deployment(d, &p);
        let ps = SchedulerOverrides {
            max_num_seqs: p.max_num_seqs.or(s.max_num_seqs),
            max_num_batched_tokens: p.max_num_batched_tokens.or(s.max_num_batched_tokens),
            ..s.clone()
        };
        let pool_spec = if name == "decode" { spec } else { None };
        let r = resolve_deployment(&pd, &ps, origin, mean_lengths, pool_spec)
            .map_err(|e| in_pool(e, name, &p))?;
        resolved.push((p, pd, r));
    }
    let (dp, dd, decode) = resolved.pop().expect("two pools");
    let (pp, pd, prefill) = resolved.pop().expect("two pools");

    let min_tp = pd.tp.min(dd.tp);
    let bandwidth_gb_s = d
        .kv_transfer_bandwidth_gb_s
        .unwrap_or(DEFAULT_BANDWIDTH_GB_S_PER_GPU * min_tp as f64);
    if bandwidth_gb_s.is_nan() || bandwidth_gb_s < MIN_BANDWIDTH_GB_S {
        return Err(err(
            "deployment.kv_transfer_bandwidth_gb_s",
            format!(
                "must be at least {MIN_BANDWIDTH_GB_S} GB/s (inf: unlimited), got {bandwidth_gb_s}"
            ),
        ));
    }
    let latency_us = d.kv_transfer_latency_us.unwrap_or(DEFAULT_LATENCY_US);
    if !(latency_us.is_finite() && (0.0..=1e9).contains(&latency_us)) {
        return Err(err(
            "deployment.kv_transfer_latency_us",
            format!("must be in [0, 1e9], got {latency_us}"),
        ));
    }
    if prefill.scheduler.block_size != decode.scheduler.block_size {
        return Err(err(
            "scheduler.block_size",
            format!(
                "the pools' engines use different KV block sizes ({} and {}); set it",
                prefill.scheduler.block_size, decode.scheduler.block_size
            ),
        ));
    }
    // The KV cache moves in the prefill pool's format.
    let m = &prefill.deployment.model;
    let kv_bytes_per_token = m
        .kv_bytes_per_token(prefill.deployment.kv_dtype.bytes())
        .round() as u64;
    let pool = |p: &PoolSection, c: &DeploymentConfig, r: &ResolvedDeployment| PoolConfig {
        replicas: p.replicas,
        gpus_per_replica: c.tp,
        router: c.router,
        scheduler: r.scheduler.clone(),
    };
    let sim = DisaggConfig {
        prefill: pool(&pp, &pd, &prefill),
        decode: pool(&dp, &dd, &decode),
        bandwidth_bytes_per_s: bandwidth_gb_s * 1e9,
        latency_ns: crate::clock::us_to_ns(latency_us)
            .map_err(|e| err("deployment.kv_transfer_latency_us", e.to_string()))?,
        kv_bytes_per_token,
        layers: m.num_layers.min(u32::MAX as u64) as u32,
        layerwise: d.kv_transfer_layerwise.unwrap_or(false),
    };
    Ok(ResolvedPools {
        prefill,
        decode,
        sim,
    })
}
