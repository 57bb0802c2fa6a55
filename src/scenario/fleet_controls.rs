//! The scenario's fleet controllers: `[autoscale]` and `[faults]`, read and checked into the
//! simulator's [`AutoscaleConfig`] and [`FaultConfig`]. docs/scenarios.md documents every key.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::roofline::Deployment;
use crate::sim::{AutoscaleConfig, AutoscalePolicy, FailureAt, FaultConfig, OnFailure};

/// `[autoscale]`: how the fleet grows and shrinks with the load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleSection {
    /// `utilization` (arrival rate against capacity), `queue` (waiting requests per replica)
    /// or `ttft` (p90 TTFT since the last decision).
    #[serde(default = "default_policy")]
    pub policy: String,
    /// Utilisation policy: the share of capacity to run at, (0, 1].
    #[serde(default = "default_target")]
    pub target_utilization: f64,
    /// Utilisation policy: requests/s one replica sustains within the SLOs (`plan` fills it
    /// in from its search).
    pub capacity_rate_per_replica: Option<f64>,
    /// Queue policy: scale up above this many waiting requests per ready replica.
    #[serde(default = "default_queue_high")]
    pub queue_high: f64,
    /// Queue policy: scale down below this many.
    #[serde(default = "default_queue_low")]
    pub queue_low: f64,
    /// TTFT policy: scale up above this p90 TTFT, ms (default: half the TTFT SLO).
    pub ttft_high_ms: Option<f64>,
    /// TTFT policy: scale down below this p90 TTFT, ms (default: a fifth of the TTFT SLO).
    pub ttft_low_ms: Option<f64>,
    /// Fewest replicas.
    #[serde(default = "one")]
    pub min_replicas: u32,
    /// Most replicas.
    #[serde(default = "default_max")]
    pub max_replicas: u32,
    /// Replicas at the start (default: `min_replicas`).
    pub initial_replicas: Option<u32>,
    /// Cold start, s: from the decision to add a replica to its serving (default: the
    /// weights over `weight_load_gb_per_s`, plus `engine_start_s`).
    pub scale_up_delay_s: Option<f64>,
    /// Rate a new replica loads its weights at, GB/s.
    #[serde(default = "default_load")]
    pub weight_load_gb_per_s: f64,
    /// Engine start after the weights are loaded (compilation, CUDA graphs, warm-up), s.
    #[serde(default = "default_engine_start")]
    pub engine_start_s: f64,
    /// Least time between a scaling action and a scale-down, s.
    #[serde(default = "default_cooldown")]
    pub scale_down_cooldown_s: f64,
    /// Most replicas added or removed by one decision.
    #[serde(default = "one")]
    pub step: u32,
    /// Time between decisions, s.
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Window the utilisation policy measures the arrival rate over, s.
    #[serde(default = "default_window")]
    pub window_s: f64,
}

fn default_policy() -> String {
    "utilization".into()
}
fn default_target() -> f64 {
    0.8
}
fn default_queue_high() -> f64 {
    4.0
}
fn default_queue_low() -> f64 {
    0.5
}
fn one() -> u32 {
    1
}
fn default_max() -> u32 {
    64
}
// Cold-start defaults, our choice, informed by measurements of vLLM's start: route179.dev
// ("Optimizing vLLM cold start with model streaming and compile caching", 2026-06-30) measured
// about 142 s to load ~20 GB of weights from local NVMe on a DGX Spark and 39 s of
// torch.compile before profiling and CUDA-graph warm-up; "Breaking the Ice: Analyzing Cold
// Start Latency in vLLM" (arXiv:2606.07362) finds the start CPU-bound after the weights load.
// A datacenter node reads weights faster than that DGX Spark; set the key to what your storage
// delivers.
fn default_load() -> f64 {
    1.0
}
fn default_engine_start() -> f64 {
    60.0
}
// Scale-down hysteresis and decision cadence: our choice, in the range Kubernetes' Horizontal
// Pod Autoscaler uses by default (a 15 s sync period and a 300 s scale-down stabilisation
// window, kubernetes.io "Horizontal Pod Autoscaling").
fn default_cooldown() -> f64 {
    600.0
}
fn default_interval() -> f64 {
    30.0
}
fn default_window() -> f64 {
    120.0
}

/// One failure at a given time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureSection {
    /// When, s since the start.
    pub time_s: f64,
    /// How many ready replicas fail.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Until they serve again, s (default: `faults.repair_s`).
    pub repair_s: Option<f64>,
}

/// `[faults]`: replica failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsSection {
    /// Failures at given times.
    #[serde(default)]
    pub failures: Vec<FailureSection>,
    /// Mean time between failures of one replica, hours (random failures when set).
    pub mtbf_hours: Option<f64>,
    /// Time a failed replica takes to serve again (replacement node, weights, engine), s.
    #[serde(default = "default_repair")]
    pub repair_s: f64,
    /// What the client does with a failed replica's requests: `retry` or `fail`.
    #[serde(default = "default_on_failure")]
    pub on_failure: String,
    /// Spare replicas `plan` adds to compare SLO attainment with and without them.
    #[serde(default = "one")]
    pub spares: u32,
}

// Our choice: replacing a failed node takes at least a cold start (see above); 15 minutes
// allows for rescheduling onto a spare node.
fn default_repair() -> f64 {
    900.0
}
fn default_on_failure() -> String {
    "retry".into()
}

/// Shortest time between autoscaler decisions, s: each is an event of the run, and the
/// utilisation signal keeps a count per interval of the window.
pub const MIN_INTERVAL_S: f64 = 0.1;
/// Most intervals one utilisation window may hold.
pub const MAX_WINDOW_INTERVALS: u64 = 100_000;
/// Shortest mean time between failures of one replica, hours (0.36 s): each
/// failure and each repair is an event of the run.
pub const MIN_MTBF_HOURS: f64 = 1e-4;

fn secs(origin: &str, key: &str, v: f64) -> Result<u64> {
    if (0.0..=1e9).contains(&v) {
        crate::clock::secs_to_ns(v).map_err(|e| Error::config(origin, key, e.to_string()))
    } else {
        Err(Error::config(
            origin,
            key,
            format!("must be a time in [0, 1e9] s, got {v}"),
        ))
    }
}

fn positive(origin: &str, key: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(Error::config(origin, key, format!("must be > 0, got {v}")))
    }
}

impl AutoscaleSection {
    /// The cold start of `dep`: weights over the load bandwidth plus the engine start, s.
    pub fn cold_start_s(&self, dep: &Deployment) -> f64 {
        match self.scale_up_delay_s {
            Some(s) => s,
            None => {
                let bytes = dep.weight_bytes_per_gpu() * dep.tp as f64;
                bytes / (self.weight_load_gb_per_s * 1e9) + self.engine_start_s
            }
        }
    }

    /// The scaling policy with its thresholds checked; `ttft_slo_ms` gives the TTFT policy's
    /// defaults.
    fn policy(&self, origin: &str, ttft_slo_ms: Option<f64>) -> Result<AutoscalePolicy> {
        let err = |key: &str, why: String| Error::config(origin, format!("autoscale.{key}"), why);
        Ok(match self.policy.as_str() {
            "utilization" => {
                if !(self.target_utilization > 0.0 && self.target_utilization <= 1.0) {
                    return Err(err(
                        "target_utilization",
                        format!("must be in (0, 1], got {}", self.target_utilization),
                    ));
                }
                let cap = self.capacity_rate_per_replica.ok_or_else(|| {
                    err(
                        "capacity_rate_per_replica",
                        "the utilization policy needs the requests/s one replica sustains (servesim plan fills it in)".into(),
                    )
                })?;
                AutoscalePolicy::Utilization {
                    target: self.target_utilization,
                    capacity_rate_per_replica: positive(
                        origin,
                        "autoscale.capacity_rate_per_replica",
                        cap,
                    )?,
                }
            }
            "queue" => {
                if !(self.queue_low.is_finite()
                    && self.queue_low >= 0.0
                    && self.queue_high.is_finite()
                    && self.queue_high > self.queue_low)
                {
                    return Err(err(
                        "queue_high",
                        format!(
                            "must be finite and above queue_low ({}), got {}",
                            self.queue_low, self.queue_high
                        ),
                    ));
                }
                AutoscalePolicy::Queue {
                    high: self.queue_high,
                    low: self.queue_low,
                }
            }
            "ttft" => {
                let slo = ttft_slo_ms;
                let high = self.ttft_high_ms.or(slo.map(|t| 0.5 * t)).ok_or_else(|| {
                    err(
                        "ttft_high_ms",
                        "needs a value, or slo.ttft_ms to derive it".into(),
                    )
                })?;
                let low = self
                    .ttft_low_ms
                    .or(slo.map(|t| 0.2 * t))
                    .unwrap_or(0.4 * high);
                positive(origin, "autoscale.ttft_high_ms", high)?;
                if !(low.is_finite() && low >= 0.0 && low < high) {
                    return Err(err(
                        "ttft_low_ms",
                        format!("must be in [0, ttft_high_ms = {high}), got {low}"),
                    ));
                }
                let ms = |key: &str, v: f64| {
                    crate::clock::ms_to_ns(v).map_err(|e| err(key, e.to_string()))
                };
                AutoscalePolicy::Ttft {
                    high_ns: ms("ttft_high_ms", high)?,
                    low_ns: ms("ttft_low_ms", low)?,
                }
            }
            other => {
                return Err(err(
                    "policy",
                    format!("unknown policy '{other}' (utilization, queue, ttft)"),
                ))
            }
        })
    }

    /// Checks every key and builds the simulator's autoscaler; `ttft_slo_ms` gives the TTFT
    /// policy's defaults.
    pub fn resolve(
        &self,
        origin: &str,
        dep: &Deployment,
        ttft_slo_ms: Option<f64>,
    ) -> Result<AutoscaleConfig> {
        let err = |key: &str, why: String| Error::config(origin, format!("autoscale.{key}"), why);
        let policy = self.policy(origin, ttft_slo_ms)?;
        if self.min_replicas == 0 {
            return Err(err("min_replicas", "must be >= 1, got 0".into()));
        }
        if self.max_replicas < self.min_replicas || self.max_replicas > 100_000 {
            return Err(err(
                "max_replicas",
                format!(
                    "must be in min_replicas ({})..=100000, got {}",
                    self.min_replicas, self.max_replicas
                ),
            ));
        }
        let initial = self.initial_replicas.unwrap_or(self.min_replicas);
        if !(self.min_replicas..=self.max_replicas).contains(&initial) {
            return Err(err(
                "initial_replicas",
                format!(
                    "must be in min_replicas..=max_replicas ({}..={}), got {initial}",
                    self.min_replicas, self.max_replicas
                ),
            ));
        }
        if self.step == 0 {
            return Err(err("step", "must be >= 1, got 0".into()));
        }
        positive(
            origin,
            "autoscale.weight_load_gb_per_s",
            self.weight_load_gb_per_s,
        )?;
        secs(origin, "autoscale.engine_start_s", self.engine_start_s)?;
        let delay = secs(origin, "autoscale.scale_up_delay_s", self.cold_start_s(dep))?;
        if self.interval_s.is_nan() || self.interval_s < MIN_INTERVAL_S {
            return Err(err(
                "interval_s",
                format!(
                    "must be at least {MIN_INTERVAL_S} s (each decision is an event of the run; \
                     Kubernetes' autoscaler decides every 15 s), got {}",
                    self.interval_s
                ),
            ));
        }
        let interval = secs(origin, "autoscale.interval_s", self.interval_s)?;
        let window = secs(origin, "autoscale.window_s", self.window_s)?;
        if window < interval {
            return Err(err(
                "window_s",
                format!(
                    "must be at least interval_s ({}), got {}",
                    self.interval_s, self.window_s
                ),
            ));
        }
        // The utilisation signal keeps one arrival count per interval of the window.
        if window / interval > MAX_WINDOW_INTERVALS {
            return Err(err(
                "window_s",
                format!(
                    "must be at most {MAX_WINDOW_INTERVALS} x interval_s ({} s), got {} s",
                    self.interval_s, self.window_s
                ),
            ));
        }
        Ok(AutoscaleConfig {
            policy,
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            initial_replicas: initial,
            scale_up_delay_ns: delay,
            scale_down_cooldown_ns: secs(
                origin,
                "autoscale.scale_down_cooldown_s",
                self.scale_down_cooldown_s,
            )?,
            step: self.step,
            interval_ns: interval,
            window_ns: window,
        })
    }
}

impl FaultsSection {
    /// Checks every key and builds the simulator's fault schedule.
    pub fn resolve(&self, origin: &str) -> Result<FaultConfig> {
        let repair = secs(origin, "faults.repair_s", self.repair_s)?;
        if self.failures.len() > 100_000 {
            return Err(Error::config(
                origin,
                "faults.failures",
                format!("at most 100000 failures, got {}", self.failures.len()),
            ));
        }
        let failures = self
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let key = |k: &str| format!("faults.failures[{i}].{k}");
                if f.replicas == 0 {
                    return Err(Error::config(
                        origin,
                        key("replicas"),
                        "must be >= 1, got 0",
                    ));
                }
                Ok(FailureAt {
                    time_ns: secs(origin, &key("time_s"), f.time_s)?,
                    replicas: f.replicas,
                    repair_ns: match f.repair_s {
                        Some(r) => secs(origin, &key("repair_s"), r)?,
                        None => repair,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mtbf_ns = match self.mtbf_hours {
            None => None,
            Some(h) => {
                if h.is_nan() || h < MIN_MTBF_HOURS {
                    return Err(Error::config(
                        origin,
                        "faults.mtbf_hours",
                        format!(
                            "must be at least {MIN_MTBF_HOURS} h (each failure and repair is an \
                             event of the run), got {h}"
                        ),
                    ));
                }
                Some(secs(origin, "faults.mtbf_hours", h * 3600.0)?.max(1))
            }
        };
        let on_failure = match self.on_failure.as_str() {
            "retry" => OnFailure::Retry,
            "fail" => OnFailure::Fail,
            other => {
                return Err(Error::config(
                    origin,
                    "faults.on_failure",
                    format!("unknown value '{other}' (retry, fail)"),
                ))
            }
        };
        Ok(FaultConfig {
            failures,
            mtbf_ns,
            repair_ns: repair,
            on_failure,
        })
    }
}
