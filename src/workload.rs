//! Workload generation: when requests arrive and how long their prompts and outputs are.
//!
//! A [`WorkloadConfig`] (the `[workload]` table of a scenario) combines an arrival process
//! ([`ArrivalConfig`]) with length distributions ([`LengthConfig`]) or a built-in
//! [`dataset()`], or replays a trace file. A [`RequestGenerator`] turns it into a deterministic
//! stream of [`RequestSpec`]s for a seed. See docs/workloads.md.

mod arrival;
pub mod dataset;
mod lengths;
mod mooncake;
mod sessions;
mod trace;

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use dataset::{dataset, Dataset, ShareGptFilter, DATASET_NAMES, SHAREGPT_FILTER};

use crate::error::{Error, Result};
use arrival::{ArrivalProcess, Schedule};
use lengths::LengthSampler;
use trace::Trace;

/// The `[workload]` table of a scenario: arrivals, lengths, and when to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// How requests arrive (`[workload.arrival]`).
    pub arrival: ArrivalConfig,
    /// Built-in dataset name (see [`DATASET_NAMES`]); when set, prompt and output lengths come
    /// from it, except that `input` / `output`, when also given, override its side.
    #[serde(default)]
    pub dataset: Option<String>,
    /// Prompt-length distribution, tokens, not counting a shared prefix (`[workload.input]`).
    #[serde(default)]
    pub input: Option<LengthConfig>,
    /// Output-length distribution, tokens (`[workload.output]`).
    #[serde(default)]
    pub output: Option<LengthConfig>,
    /// Stop after this many requests.
    #[serde(default)]
    pub num_requests: Option<u64>,
    /// Stop generating arrivals after this much simulated time, seconds.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Shared system prompts (`[workload.prefix]`).
    #[serde(default)]
    pub prefix: Option<PrefixConfig>,
    /// Client-side cap on outstanding requests, requests (vLLM `--max-concurrency`). Stored
    /// here; the simulator enforces it.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Generated multi-turn sessions (`[workload.sessions]`): `[workload.arrival]` then says
    /// when sessions start (its rate is sessions per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsConfig>,
}

fn one() -> f64 {
    1.0
}
// The diurnal defaults are our choice of shape, in the spirit of the public week-long Azure LLM
// inference trace (AzurePublicDataset, AzureLLMInferenceDataset2024.md: a code service, May
// 2024, analysed in DynamoLLM, Stojkovic et al., arXiv:2408.00741): a daytime peak, a night
// trough and quieter weekends. The trace's own ratios are not reproduced here; replay it with
// `kind = "trace"` for its exact shape.
fn default_peak_to_trough() -> f64 {
    3.0
}
fn default_weekend_factor() -> f64 {
    0.6
}
fn default_peak_hour() -> f64 {
    14.0
}
fn default_days() -> u32 {
    7
}

/// Hourly points `[time_s, rate_per_s]` of a diurnal cycle (see [`ArrivalConfig::Diurnal`]),
/// one per hour from 0 to the end of the last day, scaled so that the mean of the
/// piecewise-linear rate over the period is `mean_rate_per_s`.
pub fn diurnal_points(
    mean_rate_per_s: f64,
    peak_to_trough: f64,
    weekend_factor: f64,
    peak_hour: f64,
    days: u32,
) -> Vec<[f64; 2]> {
    let hours = days.max(1) as usize * 24;
    // Weekday hourly weight 1 + a cos(2 pi (h - peak) / 24): max / min = (1 + a) / (1 - a).
    let k = peak_to_trough.max(1.0);
    let a = (k - 1.0) / (k + 1.0);
    let weight = |h: usize| {
        let day = (h / 24) % 7;
        let weekend = if day >= 5 { weekend_factor } else { 1.0 };
        let phase = 2.0 * std::f64::consts::PI * ((h % 24) as f64 - peak_hour) / 24.0;
        weekend * (1.0 + a * phase.cos())
    };
    // The cycle repeats: the last point equals the first, so trapezoids over hours 0..n.
    let w: Vec<f64> = (0..=hours).map(|h| weight(h % hours)).collect();
    let area: f64 = w.windows(2).map(|p| 0.5 * (p[0] + p[1])).sum::<f64>() / hours as f64;
    let scale = if area > 0.0 {
        mean_rate_per_s / area
    } else {
        0.0
    };
    w.iter()
        .enumerate()
        .map(|(h, x)| [h as f64 * 3600.0, x * scale])
        .collect()
}

/// An arrival process (`[workload.arrival]`, chosen by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ArrivalConfig {
    /// Poisson arrivals (exponential gaps), the first at t = 0.
    Poisson {
        /// Mean arrival rate, requests per second.
        rate_per_s: f64,
    },
    /// Gamma-distributed gaps (vLLM `--burstiness`), the first at t = 0.
    Gamma {
        /// Mean arrival rate, requests per second (mean gap 1 / rate).
        rate_per_s: f64,
        /// Gamma shape, dimensionless: 1 = Poisson, < 1 burstier, > 1 more regular; the
        /// gaps' coefficient of variation is 1 / sqrt(burstiness).
        burstiness: f64,
    },
    /// Evenly spaced arrivals: request i at i / rate seconds.
    Constant {
        /// Arrival rate, requests per second.
        rate_per_s: f64,
    },
    /// Every request at t = 0 (offline batch); needs `num_requests`.
    Offline,
    /// Non-homogeneous Poisson arrivals following a piecewise-linear rate (e.g. diurnal).
    Schedule {
        /// `[time_s, rate_per_s]` points: seconds since the start (the first at 0, sorted;
        /// two points at one time make a step) and requests per second (>= 0). Without
        /// `repeat_s` the last rate holds afterwards.
        points: Vec<[f64; 2]>,
        /// Period, seconds (>= the last point's time): the pattern repeats, ramping from the
        /// last point back to the first.
        #[serde(default)]
        repeat_s: Option<f64>,
    },
    /// A built-in daily and weekly cycle (docs/workloads.md, "Diurnal"): hourly rates that
    /// follow a cosine over the day between a trough and a peak, lower on weekends, scaled to
    /// a mean; sampled as a schedule (non-homogeneous Poisson). Day 0 is a Monday.
    Diurnal {
        /// Mean rate over the whole period, requests per second.
        mean_rate_per_s: f64,
        /// Weekday peak rate over weekday trough rate, >= 1.
        #[serde(default = "default_peak_to_trough")]
        peak_to_trough: f64,
        /// Weekend rates as a share of the same hour on a weekday, in (0, 1].
        #[serde(default = "default_weekend_factor")]
        weekend_factor: f64,
        /// Hour of the daily peak, 0..24 (the trough is 12 hours away).
        #[serde(default = "default_peak_hour")]
        peak_hour: f64,
        /// Days the cycle covers (it repeats after them), >= 1.
        #[serde(default = "default_days")]
        days: u32,
    },
    /// Replay a CSV trace; lengths come from the trace (see docs/workloads.md for formats).
    Trace {
        /// The trace file, relative to the current directory (the caller resolves
        /// scenario-relative paths).
        path: String,
        /// Multiplies every arrival time, dimensionless: 2 replays at half the rate.
        #[serde(default = "one")]
        time_scale: f64,
        /// Replay at this mean rate, requests per second, by scaling time; takes precedence
        /// over `time_scale`. Set by [`WorkloadConfig::set_rate`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_s: Option<f64>,
        /// The file's layout: `csv` (servesim's or Azure's columns) or `mooncake` (JSONL with
        /// block identities, see docs/workloads.md).
        #[serde(default, skip_serializing_if = "TraceFormat::is_csv")]
        format: TraceFormat,
        /// Mooncake: prompt tokens per `hash_ids` entry (default 512, Mooncake's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hash_block_tokens: Option<u32>,
    },
}

/// The layout of a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// CSV: `arrival_s,input_tokens,output_tokens[,prefix_group,prefix_tokens]` or Azure's.
    #[default]
    Csv,
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
}

impl TraceFormat {
    fn is_csv(&self) -> bool {
        *self == TraceFormat::Csv
    }
}

/// Mooncake's tokens per block identity (FAST'25 trace release: `hash_ids` per 512 tokens).
pub const MOONCAKE_HASH_BLOCK_TOKENS: u32 = 512;

/// Block identities of a prompt: one id per `hash_block_tokens` tokens from its start, each
/// naming its block and everything before it (equal ids: the same prefix). Shared, so that
/// a request carries its identities without copying them.
pub type BlockIds = std::sync::Arc<[u64]>;

pub use sessions::{SessionsConfig, NO_SESSION, SESSION_HASH_BLOCK_TOKENS};

/// A token-length distribution (`[workload.input]` / `[workload.output]`, chosen by
/// `kind`). Every sampled length is an integer of at least 1 token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum LengthConfig {
    /// Always the same length.
    Fixed {
        /// Length, tokens (>= 1).
        tokens: u32,
    },
    /// vLLM's random dataset: an integer uniform in [mean (1 - r), mean (1 + r)] (rounded down).
    Uniform {
        /// Centre, tokens (>= 1).
        mean: f64,
        /// Half-width relative to the mean, dimensionless, in [0, 1).
        range_ratio: f64,
    },
    /// A normal rounded to an integer and clamped to [max(min, 1), max].
    Normal {
        /// Mean before clamping, tokens (> 0).
        mean: f64,
        /// Standard deviation, tokens (>= 0).
        std: f64,
        /// Smallest length, tokens (default 1).
        #[serde(default)]
        min: Option<u32>,
        /// Largest length, tokens (default unbounded).
        #[serde(default)]
        max: Option<u32>,
    },
    /// A lognormal fitted to a mean and a median (sigma^2 = 2 ln(mean / median),
    /// mu = ln(median)), rounded and clamped to [max(min, 1), max].
    Lognormal {
        /// Mean before clamping, tokens (>= median).
        mean: f64,
        /// Median, tokens (> 0).
        median: f64,
        /// Smallest length, tokens (default 1).
        #[serde(default)]
        min: Option<u32>,
        /// Largest length, tokens (default unbounded).
        #[serde(default)]
        max: Option<u32>,
    },
    /// Lengths drawn uniformly from a file: one count per line, or a CSV with a `tokens`
    /// column.
    Empirical {
        /// The file, relative to the current directory.
        path: String,
    },
    /// An inline list replayed in order: request `i` gets `tokens[i mod n]`, so an input and
    /// an output list of equal length keep each request's pair (`fit-engine` uses it for a
    /// result file's per-request `input_lens` / `output_lens`). Not with a dataset's filter.
    List {
        /// The lengths, tokens (each >= 1; at least one).
        tokens: Vec<u32>,
    },
}

impl LengthConfig {
    /// The shortest length this distribution can produce, tokens (`None` for a file, which
    /// is not read here, and for an invalid config).
    pub fn shortest(&self) -> Option<u64> {
        if matches!(self, LengthConfig::Empirical { .. }) {
            return None;
        }
        LengthSampler::from_config(self, "", "")
            .ok()
            .map(|s| s.min() as u64)
    }
}

/// Shared system prompts (`[workload.prefix]`): each request starts with the prompt of one of
/// `groups` groups, chosen uniformly at random (seeded). The prefix is part of the prompt:
/// input tokens = `tokens` + the sampled question length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixConfig {
    /// Length of each group's shared prompt, tokens (>= 1).
    pub tokens: u32,
    /// Number of distinct shared prompts (>= 1).
    pub groups: u32,
}

fn positive(origin: &str, key: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        let what = if v.is_infinite() { "finite" } else { "> 0" };
        Err(Error::config(
            origin,
            key,
            format!("must be {what}, got {v}"),
        ))
    }
}

fn at_least_one(origin: &str, key: &str, v: u64) -> Result<()> {
    if v >= 1 {
        Ok(())
    } else {
        Err(Error::config(origin, key, format!("must be >= 1, got {v}")))
    }
}

fn check_bounds(origin: &str, key: &str, min: Option<u32>, max: Option<u32>) -> Result<()> {
    if let Some(hi) = max {
        at_least_one(origin, &format!("{key}.max"), hi as u64)?;
        if let Some(lo) = min {
            if lo > hi {
                return Err(Error::config(
                    origin,
                    format!("{key}.min"),
                    format!("must be <= max ({hi}), got {lo}"),
                ));
            }
        }
    }
    Ok(())
}

impl LengthConfig {
    /// Checks the distribution's parameters; `key` is its dotted path (e.g. `workload.input`).
    pub fn validate(&self, origin: &str, key: &str) -> Result<()> {
        match self {
            LengthConfig::Fixed { tokens } => {
                at_least_one(origin, &format!("{key}.tokens"), *tokens as u64)
            }
            LengthConfig::Uniform { mean, range_ratio } => {
                if !(mean.is_finite() && *mean >= 1.0) {
                    return Err(Error::config(
                        origin,
                        format!("{key}.mean"),
                        format!("must be >= 1, got {mean}"),
                    ));
                }
                if !(0.0..1.0).contains(range_ratio) {
                    return Err(Error::config(
                        origin,
                        format!("{key}.range_ratio"),
                        format!("must be in [0, 1), got {range_ratio}"),
                    ));
                }
                Ok(())
            }
            LengthConfig::Normal {
                mean,
                std,
                min,
                max,
            } => {
                positive(origin, &format!("{key}.mean"), *mean)?;
                if !(std.is_finite() && *std >= 0.0) {
                    return Err(Error::config(
                        origin,
                        format!("{key}.std"),
                        format!("must be >= 0, got {std}"),
                    ));
                }
                check_bounds(origin, key, *min, *max)
            }
            LengthConfig::Lognormal {
                mean,
                median,
                min,
                max,
            } => {
                positive(origin, &format!("{key}.median"), *median)?;
                if !(mean.is_finite() && mean >= median) {
                    return Err(Error::config(
                        origin,
                        format!("{key}.mean"),
                        format!(
                            "must be >= median ({median}) for a lognormal, got {mean}; for a left-skewed distribution use a clamped normal"
                        ),
                    ));
                }
                check_bounds(origin, key, *min, *max)
            }
            LengthConfig::Empirical { path } => {
                if path.trim().is_empty() {
                    return Err(Error::config(
                        origin,
                        format!("{key}.path"),
                        "must name a file",
                    ));
                }
                Ok(())
            }
            LengthConfig::List { tokens } => {
                if tokens.is_empty() {
                    return Err(Error::config(
                        origin,
                        format!("{key}.tokens"),
                        "must hold at least one length",
                    ));
                }
                if let Some(i) = tokens.iter().position(|&t| t == 0) {
                    return Err(Error::config(
                        origin,
                        format!("{key}.tokens"),
                        format!("every length must be >= 1, got 0 at index {i}"),
                    ));
                }
                Ok(())
            }
        }
    }
}

impl ArrivalConfig {
    /// Checks the arrival process's parameters (key paths under `workload.arrival`).
    pub fn validate(&self, origin: &str) -> Result<()> {
        const K: &str = "workload.arrival";
        match self {
            ArrivalConfig::Poisson { rate_per_s } | ArrivalConfig::Constant { rate_per_s } => {
                positive(origin, &format!("{K}.rate_per_s"), *rate_per_s)
            }
            ArrivalConfig::Gamma {
                rate_per_s,
                burstiness,
            } => {
                positive(origin, &format!("{K}.rate_per_s"), *rate_per_s)?;
                positive(origin, &format!("{K}.burstiness"), *burstiness)
            }
            ArrivalConfig::Offline => Ok(()),
            ArrivalConfig::Diurnal {
                mean_rate_per_s,
                peak_to_trough,
                weekend_factor,
                peak_hour,
                days,
            } => validate_diurnal(
                origin,
                *mean_rate_per_s,
                *peak_to_trough,
                *weekend_factor,
                *peak_hour,
                *days,
            ),
            ArrivalConfig::Schedule { points, repeat_s } => {
                validate_schedule(origin, points, *repeat_s)
            }
            ArrivalConfig::Trace {
                path,
                time_scale,
                rate_per_s,
                hash_block_tokens,
                ..
            } => {
                if let Some(t) = hash_block_tokens {
                    at_least_one(origin, &format!("{K}.hash_block_tokens"), *t as u64)?;
                }
                if path.trim().is_empty() {
                    return Err(Error::config(
                        origin,
                        format!("{K}.path"),
                        "must name a file",
                    ));
                }
                positive(origin, &format!("{K}.time_scale"), *time_scale)?;
                if let Some(r) = rate_per_s {
                    positive(origin, &format!("{K}.rate_per_s"), *r)?;
                }
                Ok(())
            }
        }
    }
}

/// Checks a diurnal arrival process's parameters (key paths under `workload.arrival`).
fn validate_diurnal(
    origin: &str,
    mean_rate_per_s: f64,
    peak_to_trough: f64,
    weekend_factor: f64,
    peak_hour: f64,
    days: u32,
) -> Result<()> {
    const K: &str = "workload.arrival";
    positive(origin, &format!("{K}.mean_rate_per_s"), mean_rate_per_s)?;
    if !(peak_to_trough.is_finite() && peak_to_trough >= 1.0) {
        return Err(Error::config(
            origin,
            format!("{K}.peak_to_trough"),
            format!("must be >= 1, got {peak_to_trough}"),
        ));
    }
    if !(weekend_factor > 0.0 && weekend_factor <= 1.0) {
        return Err(Error::config(
            origin,
            format!("{K}.weekend_factor"),
            format!("must be in (0, 1], got {weekend_factor}"),
        ));
    }
    if !(peak_hour.is_finite() && (0.0..24.0).contains(&peak_hour)) {
        return Err(Error::config(
            origin,
            format!("{K}.peak_hour"),
            format!("must be in [0, 24), got {peak_hour}"),
        ));
    }
    if !(1..=366).contains(&days) {
        return Err(Error::config(
            origin,
            format!("{K}.days"),
            format!("must be in 1..=366, got {days}"),
        ));
    }
    Ok(())
}

/// Checks a piecewise-linear rate schedule (`points` of [time_s, rate_per_s], sorted, from
/// time 0; `repeat_s` at or after the last point) with some arrivals (key paths under
/// `workload.arrival`).
fn validate_schedule(origin: &str, points: &[[f64; 2]], repeat_s: Option<f64>) -> Result<()> {
    const K: &str = "workload.arrival";
    let Some(first) = points.first() else {
        return Err(Error::config(
            origin,
            format!("{K}.points"),
            "needs at least one [time_s, rate_per_s] point",
        ));
    };
    if first[0] != 0.0 {
        return Err(Error::config(
            origin,
            format!("{K}.points[0]"),
            format!("the first point must be at time 0, got {}", first[0]),
        ));
    }
    let mut prev = 0.0;
    for (i, [t, r]) in points.iter().copied().enumerate() {
        let key = format!("{K}.points[{i}]");
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::config(
                origin,
                key,
                format!("time must be >= 0, got {t}"),
            ));
        }
        if t < prev {
            return Err(Error::config(
                origin,
                key,
                format!(
                    "time {t} is before the previous point's {prev}; points must be sorted by time"
                ),
            ));
        }
        if !(r.is_finite() && r >= 0.0) {
            return Err(Error::config(
                origin,
                key,
                format!("rate must be >= 0, got {r}"),
            ));
        }
        prev = t;
    }
    if let Some(p) = repeat_s {
        positive(origin, &format!("{K}.repeat_s"), p)?;
        if p < prev {
            return Err(Error::config(
                origin,
                format!("{K}.repeat_s"),
                format!("must be >= the last point's time {prev}, got {p}"),
            ));
        }
    }
    if points.iter().all(|p| p[1] == 0.0) {
        return Err(Error::config(
            origin,
            format!("{K}.points"),
            "all rates are zero",
        ));
    }
    if !Schedule::new(points, repeat_s).has_arrivals() {
        return Err(Error::config(
            origin,
            format!("{K}.points"),
            "the rate is zero everywhere (nonzero rates only at steps)",
        ));
    }
    Ok(())
}

impl WorkloadConfig {
    /// Checks every value and their combination; errors carry the dotted key path
    /// (e.g. `workload.arrival.rate_per_s: must be > 0, got -3`).
    pub fn validate(&self, origin: &str) -> Result<()> {
        self.arrival.validate(origin)?;
        let is_trace = matches!(self.arrival, ArrivalConfig::Trace { .. });
        if let Some(sessions) = &self.sessions {
            self.validate_sessions(sessions, is_trace, origin)?;
        } else if is_trace {
            for (key, set) in [
                ("workload.dataset", self.dataset.is_some()),
                ("workload.input", self.input.is_some()),
                ("workload.output", self.output.is_some()),
            ] {
                if set {
                    return Err(Error::config(
                        origin,
                        key,
                        "a trace supplies its own lengths; remove this",
                    ));
                }
            }
        } else {
            let ds = match &self.dataset {
                Some(name) => Some(dataset(name).ok_or_else(|| {
                    Error::config(
                        origin,
                        "workload.dataset",
                        format!(
                            "unknown dataset '{name}'; known: {}",
                            DATASET_NAMES.join(", ")
                        ),
                    )
                })?),
                None => None,
            };
            let has_in = self.input.is_some() || ds.as_ref().is_some_and(|d| d.input.is_some());
            let has_out = self.output.is_some() || ds.as_ref().is_some_and(|d| d.output.is_some());
            if !(has_in && has_out) {
                let reason = match &self.dataset {
                    Some(name) => format!("dataset '{name}' needs input and output lengths"),
                    None => "needs input and output lengths, or a dataset".to_string(),
                };
                return Err(Error::config(origin, "workload", reason));
            }
            if let Some(l) = &self.input {
                l.validate(origin, "workload.input")?;
            }
            if let Some(l) = &self.output {
                l.validate(origin, "workload.output")?;
            }
            if self.num_requests.is_none() && self.duration_s.is_none() {
                return Err(Error::config(
                    origin,
                    "workload",
                    "needs num_requests or duration_s",
                ));
            }
        }
        let sessions_end = self
            .sessions
            .as_ref()
            .is_some_and(|s| s.num_sessions.is_some());
        if matches!(self.arrival, ArrivalConfig::Offline)
            && self.num_requests.is_none()
            && !sessions_end
        {
            return Err(Error::config(
                origin,
                "workload.num_requests",
                "offline arrivals (all at t = 0) need num_requests",
            ));
        }
        if let Some(n) = self.num_requests {
            at_least_one(origin, "workload.num_requests", n)?;
        }
        if let Some(d) = self.duration_s {
            positive(origin, "workload.duration_s", d)?;
        }
        if let Some(p) = &self.prefix {
            at_least_one(origin, "workload.prefix.tokens", p.tokens as u64)?;
            at_least_one(origin, "workload.prefix.groups", p.groups as u64)?;
        }
        if let Some(c) = self.max_concurrency {
            at_least_one(origin, "workload.max_concurrency", c as u64)?;
        }
        Ok(())
    }

    /// `[workload.sessions]`: supplies lengths and prefixes, so `dataset`, `input`,
    /// `output` and `prefix` must be absent, and sessions start by a synthetic arrival
    /// process; a stopping rule (num_requests, duration_s or sessions.num_sessions).
    fn validate_sessions(&self, s: &SessionsConfig, is_trace: bool, origin: &str) -> Result<()> {
        if is_trace {
            return Err(Error::config(
                origin,
                "workload.sessions",
                "generates its own requests; a trace cannot start sessions (remove one of them)",
            ));
        }
        for (key, set) in [
            ("workload.dataset", self.dataset.is_some()),
            ("workload.input", self.input.is_some()),
            ("workload.output", self.output.is_some()),
            ("workload.prefix", self.prefix.is_some()),
        ] {
            if set {
                return Err(Error::config(
                    origin,
                    key,
                    "[workload.sessions] supplies lengths and system prompts; remove this",
                ));
            }
        }
        s.validate(origin)?;
        if self.num_requests.is_none() && self.duration_s.is_none() && s.num_sessions.is_none() {
            return Err(Error::config(
                origin,
                "workload",
                "needs num_requests, duration_s or sessions.num_sessions",
            ));
        }
        Ok(())
    }

    /// Prompt tokens per block identity when the requests carry identities (a Mooncake
    /// trace, generated sessions), else `None`.
    pub fn block_id_tokens(&self) -> Option<u32> {
        if let Some(s) = &self.sessions {
            return Some(s.block_tokens());
        }
        match &self.arrival {
            ArrivalConfig::Trace {
                format: TraceFormat::Mooncake,
                hash_block_tokens,
                ..
            } => Some(hash_block_tokens.unwrap_or(MOONCAKE_HASH_BLOCK_TOKENS)),
            _ => None,
        }
    }

    /// Sets the mean arrival rate, requests per second (used by capacity planning's search):
    /// poisson / gamma / constant take it as their rate; a schedule's rates are scaled so its
    /// mean (see [`Self::mean_rate_per_s`]) equals it (no-op when that mean is zero); a trace
    /// is replayed with time scaled to that mean rate; offline is unchanged.
    pub fn set_rate(&mut self, rate_per_s: f64) {
        let mean = self.mean_rate_per_s();
        match &mut self.arrival {
            ArrivalConfig::Poisson { rate_per_s: r }
            | ArrivalConfig::Gamma { rate_per_s: r, .. }
            | ArrivalConfig::Constant { rate_per_s: r } => *r = rate_per_s,
            ArrivalConfig::Offline => {}
            ArrivalConfig::Schedule { points, .. } => {
                if let Some(m) = mean.filter(|m| m.is_finite() && *m > 0.0) {
                    let k = rate_per_s / m;
                    for p in points.iter_mut() {
                        p[1] *= k;
                    }
                }
            }
            ArrivalConfig::Trace { rate_per_s: r, .. } => *r = Some(rate_per_s),
            ArrivalConfig::Diurnal {
                mean_rate_per_s, ..
            } => *mean_rate_per_s = rate_per_s,
        }
    }

    /// The fewest tokens (prompt, shared prefix included, plus output) any request of this
    /// workload can have, where the config alone determines it (explicit lengths; `None` for
    /// datasets, empirical files and traces).
    pub fn shortest_request_tokens(&self) -> Option<u64> {
        if self.dataset.is_some() || matches!(self.arrival, ArrivalConfig::Trace { .. }) {
            return None;
        }
        let prefix = self.prefix.as_ref().map_or(0, |p| p.tokens as u64);
        Some(prefix + self.input.as_ref()?.shortest()? + self.output.as_ref()?.shortest()?)
    }

    /// Mean arrival rate, requests per second, where the config alone determines it: the
    /// rate of poisson / gamma / constant; a schedule's mean over `[0, duration_s]` (else over
    /// one period, else over its points' span); a trace's `rate_per_s` if set. `None` for
    /// offline and for a trace replayed at its own rate (see
    /// [`RequestGenerator::mean_rate_per_s`]).
    pub fn mean_rate_per_s(&self) -> Option<f64> {
        match &self.arrival {
            ArrivalConfig::Poisson { rate_per_s }
            | ArrivalConfig::Gamma { rate_per_s, .. }
            | ArrivalConfig::Constant { rate_per_s } => Some(*rate_per_s),
            ArrivalConfig::Offline => None,
            ArrivalConfig::Schedule { points, repeat_s } => {
                Some(Schedule::new(points, *repeat_s).mean_rate_per_s(self.duration_s))
            }
            ArrivalConfig::Trace { rate_per_s, .. } => *rate_per_s,
            ArrivalConfig::Diurnal {
                mean_rate_per_s, ..
            } => Some(*mean_rate_per_s),
        }
    }
}

/// `prefix_group` of a request without a shared prefix.
pub const NO_PREFIX_GROUP: u32 = u32::MAX;

/// One generated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    /// Arrival time, nanoseconds since the start of the run.
    pub arrival_ns: u64,
    /// Prompt length including any shared prefix, tokens (>= 1, > `prefix_tokens`).
    pub input_tokens: u32,
    /// Output length, tokens (>= 1).
    pub output_tokens: u32,
    /// Shared-prefix group, or [`NO_PREFIX_GROUP`] (`u32::MAX`) for none.
    pub prefix_group: u32,
    /// Length of the shared prefix at the start of the prompt, tokens (0 for none).
    pub prefix_tokens: u32,
    /// Block identities of the prompt (traces that carry them, generated sessions), else
    /// `None`: the prefix cache then matches on `prefix_group` as before.
    pub blocks: Option<BlockIds>,
    /// Prompt tokens per identity of `blocks` (0 without identities).
    pub block_id_tokens: u32,
    /// The session the request belongs to ([`NO_SESSION`] for none).
    pub session: u64,
    /// Whether it is its session's last turn.
    pub last_turn: bool,
}

/// Where requests come from.
#[derive(Debug, Clone)]
enum Source {
    Synthetic {
        arrivals: ArrivalProcess,
        input: LengthSampler,
        output: LengthSampler,
        filter: Option<ShareGptFilter>,
    },
    Trace {
        trace: Trace,
        next: usize,
        /// Multiplier on the trace's arrival times, dimensionless.
        scale: f64,
    },
    Sessions(Box<sessions::SessionSource>),
}

/// A deterministic stream of requests for a workload and a seed. Arrivals, lengths and
/// prefix groups draw from separate random streams, so changing the rate leaves the sequence
/// of lengths unchanged.
#[derive(Debug, Clone)]
pub struct RequestGenerator {
    source: Source,
    prefix: Option<PrefixConfig>,
    arrival_rng: ChaCha8Rng,
    length_rng: ChaCha8Rng,
    prefix_rng: ChaCha8Rng,
    emitted: u64,
    num_requests: Option<u64>,
    duration_s: Option<f64>,
    last_ns: u64,
    done: bool,
    /// The arrival time, s, that stopped the stream by passing the clock's range (u64 ns).
    overflow_s: Option<f64>,
    offline: bool,
    mean_input: f64,
    mean_output: f64,
    mean_rate: Option<f64>,
    warnings: Vec<String>,
}

/// Loads the trace of `cfg` (at `path`) in its format.
fn load_trace(cfg: &WorkloadConfig, path: &str, origin: &str) -> Result<Trace> {
    let ArrivalConfig::Trace {
        format,
        hash_block_tokens,
        ..
    } = &cfg.arrival
    else {
        return Trace::load(Path::new(path));
    };
    match format {
        TraceFormat::Csv => {
            if hash_block_tokens.is_some() {
                return Err(Error::config(
                    origin,
                    "workload.arrival.hash_block_tokens",
                    "applies to format = \"mooncake\" only",
                ));
            }
            Trace::load(Path::new(path))
        }
        TraceFormat::Mooncake => Trace::load_mooncake(
            Path::new(path),
            hash_block_tokens.unwrap_or(MOONCAKE_HASH_BLOCK_TOKENS),
        ),
    }
}

/// A replayed trace's source, its mean input and output tokens and its mean rate (req/s);
/// a warning when its arrival times look like milliseconds.
fn trace_source(
    cfg: &WorkloadConfig,
    path: &str,
    time_scale: f64,
    rate_per_s: Option<f64>,
    origin: &str,
    warnings: &mut Vec<String>,
) -> Result<(Source, f64, f64, Option<f64>)> {
    let trace = load_trace(cfg, path, origin)?;
    if !trace.blocks.is_empty() && cfg.prefix.is_some() {
        return Err(Error::config(
            origin,
            "workload.prefix",
            format!("the trace {path} names its prompts' blocks (hash_ids), which the prefix cache matches; remove this"),
        ));
    }
    if !trace.prefix.is_empty() && cfg.prefix.is_some() {
        return Err(Error::config(
            origin,
            "workload.prefix",
            format!(
                "the trace {path} has its own prefix_group / prefix_tokens columns; remove this"
            ),
        ));
    }
    let native = trace.mean_rate_per_s();
    let scale = match (rate_per_s, native) {
        (Some(r), Some(n)) => n / r,
        (Some(_), None) => {
            return Err(Error::config(
                origin,
                "workload.arrival.rate_per_s",
                format!("every request of the trace {path} arrives at the same instant, so it has no rate to scale"),
            ))
        }
        (None, _) => time_scale,
    };
    let (mi, mo) = (trace.mean_input_tokens(), trace.mean_output_tokens());
    let rate = native.map(|n| n / scale);
    let gap_s = trace.median_gap_s() * scale;
    if trace.numeric_times
        && trace.rows.len() > trace::UNIT_CHECK_MIN_ROWS
        && gap_s > trace::UNIT_CHECK_MAX_MEDIAN_GAP_S
    {
        let span_s = trace.rows.last().map_or(0, |r| r.arrival_ns) as f64 * 1e-9 * scale;
        warnings.push(format!(
            "{path}: the median gap between arrivals is {gap_s:.0} s over {} rows \
             (the trace spans {span_s:.0} s): are its arrival_s values in \
             milliseconds? Then set workload.arrival.time_scale = 0.001",
            trace.rows.len()
        ));
    }
    Ok((
        Source::Trace {
            trace,
            next: 0,
            scale,
        },
        mi,
        mo,
        rate,
    ))
}

/// A synthetic source (an arrival process and length samplers, or a dataset's), its mean
/// input and output tokens (after the dataset's filter) and its mean rate (req/s).
/// Generated sessions starting by `arrival`: their source, mean input and output tokens
/// per request, and mean request rate (session rate x mean turns) when the rate is known.
fn session_source(
    cfg: &WorkloadConfig,
    sc: &SessionsConfig,
    origin: &str,
) -> Result<(Source, f64, f64, Option<f64>)> {
    let starts = arrival_process(&cfg.arrival, origin)?;
    let session_rate = cfg.mean_rate_per_s();
    let src = sessions::SessionSource::new(sc, starts, origin)?;
    let (input, output, turns) = src.means();
    Ok((
        Source::Sessions(Box::new(src)),
        input,
        output,
        session_rate.map(|r| r * turns),
    ))
}

/// The arrival process of a synthetic `arrival` (offline for a trace, which has its own).
fn arrival_process(arrival: &ArrivalConfig, origin: &str) -> Result<ArrivalProcess> {
    Ok(match arrival {
        ArrivalConfig::Poisson { rate_per_s } => ArrivalProcess::poisson(*rate_per_s),
        ArrivalConfig::Gamma {
            rate_per_s,
            burstiness,
        } => ArrivalProcess::gamma(*rate_per_s, *burstiness, origin)?,
        ArrivalConfig::Constant { rate_per_s } => ArrivalProcess::constant(*rate_per_s),
        ArrivalConfig::Schedule { points, repeat_s } => ArrivalProcess::schedule(points, *repeat_s),
        ArrivalConfig::Diurnal {
            mean_rate_per_s,
            peak_to_trough,
            weekend_factor,
            peak_hour,
            days,
        } => ArrivalProcess::schedule(
            &diurnal_points(
                *mean_rate_per_s,
                *peak_to_trough,
                *weekend_factor,
                *peak_hour,
                *days,
            ),
            Some(*days as f64 * 86_400.0),
        ),
        _ => ArrivalProcess::Offline,
    })
}

fn synthetic_source(
    cfg: &WorkloadConfig,
    arrival: &ArrivalConfig,
    origin: &str,
) -> Result<(Source, f64, f64, Option<f64>)> {
    let arrivals = arrival_process(arrival, origin)?;
    let ds = cfg.dataset.as_deref().and_then(dataset);
    let pick = |given: &Option<LengthConfig>, from_ds: Option<LengthConfig>, key: &str| {
        given
            .clone()
            .or(from_ds)
            .ok_or_else(|| Error::config(origin, "workload", format!("needs {key} lengths")))
    };
    let input_cfg = pick(
        &cfg.input,
        ds.as_ref().and_then(|d| d.input.clone()),
        "input",
    )?;
    let output_cfg = pick(
        &cfg.output,
        ds.as_ref().and_then(|d| d.output.clone()),
        "output",
    )?;
    let input = LengthSampler::from_config(&input_cfg, origin, "workload.input")?;
    let output = LengthSampler::from_config(&output_cfg, origin, "workload.output")?;
    let filter = ds
        .as_ref()
        .filter(|d| d.sharegpt_filter)
        .map(|_| SHAREGPT_FILTER);
    if filter.is_some() {
        for (key, c) in [
            ("workload.input", &cfg.input),
            ("workload.output", &cfg.output),
        ] {
            if matches!(c, Some(LengthConfig::List { .. })) {
                return Err(Error::config(
                    origin,
                    key,
                    "a list replays lengths in order, which the dataset's filter would reorder; remove workload.dataset",
                ));
            }
        }
    }
    let (mi, mo) = match &filter {
        Some(f) => {
            let (keep, mi, mo) = f.expected(&input, &output);
            if keep < 1e-3 {
                return Err(Error::config(
                    origin,
                    "workload.dataset",
                    format!(
                        "vLLM's ShareGPT filter (prompt 4..=1024, output >= 4, total <= 2048 tokens) keeps only {keep:.2e} of requests with these lengths"
                    ),
                ));
            }
            (mi, mo)
        }
        None => (input.mean(), output.mean()),
    };
    let mi = mi + cfg.prefix.as_ref().map_or(0.0, |p| p.tokens as f64);
    Ok((
        Source::Synthetic {
            arrivals,
            input,
            output,
            filter,
        },
        mi,
        mo,
        cfg.mean_rate_per_s(),
    ))
}

impl RequestGenerator {
    /// Validates `cfg` (errors name `origin` and the key path), loads any trace or empirical
    /// file (relative to the current directory), and seeds the random streams from `seed`.
    pub fn new(cfg: &WorkloadConfig, seed: u64, origin: &str) -> Result<Self> {
        cfg.validate(origin)?;
        let stream = |n: u64| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            r.set_stream(n);
            r
        };
        let mut warnings = Vec::new();
        let (source, mean_input, mean_output, mean_rate) = match &cfg.arrival {
            ArrivalConfig::Trace {
                path,
                time_scale,
                rate_per_s,
                ..
            } => trace_source(cfg, path, *time_scale, *rate_per_s, origin, &mut warnings)?,
            other => match &cfg.sessions {
                Some(sc) => session_source(cfg, sc, origin)?,
                None => synthetic_source(cfg, other, origin)?,
            },
        };
        Ok(RequestGenerator {
            source,
            prefix: cfg.prefix.clone(),
            arrival_rng: stream(1),
            length_rng: stream(2),
            prefix_rng: stream(3),
            emitted: 0,
            num_requests: cfg.num_requests,
            duration_s: cfg.duration_s,
            last_ns: 0,
            done: false,
            overflow_s: None,
            offline: matches!(cfg.arrival, ArrivalConfig::Offline),
            mean_input,
            mean_output,
            mean_rate,
            warnings,
        })
    }

    /// What looked wrong in the input without being an error (e.g. a trace whose arrival
    /// times look like milliseconds), one sentence each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The next request, arrival times nondecreasing; `None` once `num_requests` have been
    /// produced, the next arrival would come after `duration_s`, the trace is exhausted, or
    /// time would pass the simulator's clock ([`crate::clock::MAX_NS`], about 146 years). O(1), no
    /// allocation.
    pub fn next_request(&mut self) -> Option<RequestSpec> {
        if self.done || self.num_requests.is_some_and(|n| self.emitted >= n) {
            self.done = true;
            return None;
        }
        let spec = self.draw();
        match &spec {
            Some(s) => {
                self.emitted += 1;
                self.last_ns = s.arrival_ns;
            }
            None => self.done = true,
        }
        spec
    }

    fn draw(&mut self) -> Option<RequestSpec> {
        let past_end = |t_s: f64, d: Option<f64>| d.is_some_and(|d| t_s > d);
        if let Source::Sessions(src) = &mut self.source {
            let t = src.next(
                &mut self.arrival_rng,
                &mut self.length_rng,
                &mut self.overflow_s,
            )?;
            if past_end(t.arrival_ns as f64 * 1e-9, self.duration_s) {
                return None;
            }
            return Some(RequestSpec {
                arrival_ns: t.arrival_ns.max(self.last_ns),
                input_tokens: t.input,
                output_tokens: t.output,
                prefix_group: NO_PREFIX_GROUP,
                prefix_tokens: 0,
                block_id_tokens: src.block_tokens(),
                blocks: Some(t.blocks),
                session: t.session,
                last_turn: t.last,
            });
        }
        let mut blocks = None;
        let mut block_id_tokens = 0;
        let (arrival_ns, input, output, trace_prefix) = match &mut self.source {
            Source::Synthetic {
                arrivals,
                input,
                output,
                filter,
            } => {
                let t_s = arrivals.next_s(&mut self.arrival_rng)?;
                if past_end(t_s, self.duration_s) {
                    return None;
                }
                let Ok(ns) = crate::clock::secs_to_ns(t_s) else {
                    self.overflow_s = Some(t_s);
                    return None;
                };
                let (i, o) = match filter {
                    Some(f) => f.sample(input, output, &mut self.length_rng),
                    None => (
                        input.sample_at(self.emitted, &mut self.length_rng),
                        output.sample_at(self.emitted, &mut self.length_rng),
                    ),
                };
                (ns, i, o, None)
            }
            Source::Trace { trace, next, scale } => {
                let row = *trace.rows.get(*next)?;
                let p = trace.prefix.get(*next).copied();
                if let Some(b) = trace.blocks.get(*next) {
                    blocks = Some(b.clone());
                    block_id_tokens = trace.block_id_tokens;
                }
                *next += 1;
                let ns = if *scale == 1.0 {
                    row.arrival_ns
                } else {
                    let t_s = row.arrival_ns as f64 * 1e-9 * *scale;
                    let Ok(ns) = crate::clock::secs_to_ns(t_s) else {
                        self.overflow_s = Some(t_s);
                        return None;
                    };
                    ns
                };
                if past_end(ns as f64 * 1e-9, self.duration_s) {
                    return None;
                }
                (ns, row.input_tokens, row.output_tokens, p)
            }
            Source::Sessions(_) => unreachable!("sessions return above"),
        };
        let (input_tokens, prefix_group, prefix_tokens) = match (trace_prefix, &self.prefix) {
            (Some((g, t)), _) => (input, g, t),
            (None, Some(p)) => {
                // groups >= 1 is validated; max(1) keeps the range non-empty regardless.
                let group = self.prefix_rng.gen_range(0..p.groups.max(1));
                if matches!(self.source, Source::Trace { .. }) {
                    // The trace's prompt already includes the prefix; keep >= 1 own token.
                    let t = p.tokens.min(input - 1);
                    (input, if t == 0 { NO_PREFIX_GROUP } else { group }, t)
                } else {
                    (p.tokens.saturating_add(input), group, p.tokens)
                }
            }
            (None, None) => (input, NO_PREFIX_GROUP, 0),
        };
        Some(RequestSpec {
            arrival_ns: arrival_ns.max(self.last_ns),
            input_tokens,
            output_tokens: output,
            prefix_group,
            prefix_tokens,
            blocks,
            block_id_tokens,
            session: NO_SESSION,
            last_turn: false,
        })
    }

    /// When the stream stopped because its next arrival lay past the simulator's clock
    /// ([`crate::clock::MAX_NS`], about 146 years): that arrival's time, s, and the requests of
    /// `num_requests` never sent (`None` when the stream ended normally).
    pub fn overflowed(&self) -> Option<(f64, Option<u64>)> {
        self.overflow_s
            .map(|t| (t, self.num_requests.map(|n| n.saturating_sub(self.emitted))))
    }

    /// Requests the workload sends in all, when known in advance: `num_requests` (at most the
    /// trace's rows), or a trace's rows (those before `duration_s`); `None` for a synthetic
    /// stream that ends at `duration_s`.
    pub fn planned_requests(&self) -> Option<u64> {
        let rows = match &self.source {
            Source::Trace { trace, scale, .. } => Some(match self.duration_s {
                Some(d) => trace
                    .rows
                    .iter()
                    .take_while(|r| r.arrival_ns as f64 * 1e-9 * scale <= d)
                    .count() as u64,
                None => trace.rows.len() as u64,
            }),
            Source::Synthetic { .. } => None,
            // Sessions may end before num_requests: not known in advance.
            Source::Sessions(_) => return None,
        };
        match (self.num_requests, rows) {
            (Some(n), Some(r)) => Some(n.min(r)),
            (Some(n), None) if self.duration_s.is_none() => Some(n),
            (_, r) => r,
        }
    }

    /// Whether every request arrives at t = 0 (offline batch).
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// Expected prompt length including any shared prefix, tokens (analytic, or the trace's
    /// average).
    pub fn mean_input_tokens(&self) -> f64 {
        self.mean_input
    }

    /// Expected output length, tokens (analytic, or the trace's average).
    pub fn mean_output_tokens(&self) -> f64 {
        self.mean_output
    }

    /// Expected arrival rate, requests per second: as [`WorkloadConfig::mean_rate_per_s`],
    /// and for a trace its (scaled) average rate; `None` for offline or a trace whose
    /// requests all arrive at once.
    pub fn mean_rate_per_s(&self) -> Option<f64> {
        self.mean_rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(arrival: ArrivalConfig) -> WorkloadConfig {
        WorkloadConfig {
            arrival,
            dataset: None,
            input: Some(LengthConfig::Uniform {
                mean: 500.0,
                range_ratio: 0.5,
            }),
            output: Some(LengthConfig::Lognormal {
                mean: 200.0,
                median: 120.0,
                min: None,
                max: Some(2000),
            }),
            num_requests: Some(10_000),
            duration_s: None,
            prefix: None,
            max_concurrency: None,
            sessions: None,
        }
    }

    fn run(cfg: &WorkloadConfig, seed: u64) -> Vec<RequestSpec> {
        let mut g = RequestGenerator::new(cfg, seed, "test").unwrap();
        let mut v = Vec::new();
        while let Some(r) = g.next_request() {
            v.push(r);
        }
        v
    }

    fn err(cfg: &WorkloadConfig) -> String {
        cfg.validate("s.toml").unwrap_err().to_string()
    }

    #[derive(Deserialize)]
    struct Scenario {
        workload: WorkloadConfig,
    }

    #[test]
    fn parses_toml() {
        let text = r#"
            [workload]
            dataset = "sharegpt"
            num_requests = 100
            max_concurrency = 64
            [workload.arrival]
            kind = "schedule"
            points = [[0, 10], [43200, 40.5], [86400, 10]]
            repeat_s = 86400
            [workload.prefix]
            tokens = 100
            groups = 4
            [workload.output]
            kind = "fixed"
            tokens = 128
        "#;
        let s: Scenario = toml::from_str(text).unwrap();
        assert_eq!(
            s.workload.prefix,
            Some(PrefixConfig {
                tokens: 100,
                groups: 4
            })
        );
        assert!(matches!(s.workload.arrival, ArrivalConfig::Schedule { .. }));
        s.workload.validate("s.toml").unwrap();
        let t: Scenario = toml::from_str(
            "[workload]\nnum_requests = 1\n[workload.arrival]\nkind = \"trace\"\npath = \"x.csv\"\n",
        )
        .unwrap();
        assert_eq!(
            t.workload.arrival,
            ArrivalConfig::Trace {
                path: "x.csv".into(),
                time_scale: 1.0,
                rate_per_s: None,
                format: TraceFormat::Csv,
                hash_block_tokens: None,
            }
        );
        let bad = "[workload]\nnum_requests = 1\n[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 1\nrate = 2\n";
        assert!(toml::from_str::<Scenario>(bad).is_err());
        let bad = "[workload]\nnum_request = 1\n[workload.arrival]\nkind = \"offline\"\n";
        assert!(toml::from_str::<Scenario>(bad).is_err());
    }

    #[test]
    fn validate_messages_carry_key_paths() {
        let mut c = base(ArrivalConfig::Poisson { rate_per_s: -3.0 });
        assert_eq!(
            err(&c),
            "s.toml: workload.arrival.rate_per_s: must be > 0, got -3"
        );
        c.arrival = ArrivalConfig::Gamma {
            rate_per_s: 1.0,
            burstiness: 0.0,
        };
        assert!(err(&c).contains("workload.arrival.burstiness: must be > 0, got 0"));
        c.arrival = ArrivalConfig::Constant {
            rate_per_s: f64::NAN,
        };
        assert!(err(&c).contains("workload.arrival.rate_per_s: must be > 0, got NaN"));

        let mut c = base(ArrivalConfig::Poisson { rate_per_s: 1.0 });
        c.input = Some(LengthConfig::Uniform {
            mean: 100.0,
            range_ratio: 1.5,
        });
        assert!(err(&c).contains("workload.input.range_ratio: must be in [0, 1), got 1.5"));
        c.input = Some(LengthConfig::Fixed { tokens: 0 });
        assert!(err(&c).contains("workload.input.tokens: must be >= 1, got 0"));
        c.input = Some(LengthConfig::Lognormal {
            mean: 100.0,
            median: 200.0,
            min: None,
            max: None,
        });
        assert!(err(&c).contains("workload.input.mean: must be >= median (200)"));
        c.input = Some(LengthConfig::Normal {
            mean: 100.0,
            std: -1.0,
            min: None,
            max: None,
        });
        assert!(err(&c).contains("workload.input.std: must be >= 0"));
        c.input = Some(LengthConfig::Normal {
            mean: 100.0,
            std: 1.0,
            min: Some(50),
            max: Some(10),
        });
        assert!(err(&c).contains("workload.input.min: must be <= max (10), got 50"));
        c.input = None;
        assert_eq!(
            err(&c),
            "s.toml: workload: needs input and output lengths, or a dataset"
        );
        c.dataset = Some("random".into());
        assert!(err(&c).contains("workload: dataset 'random' needs input and output lengths"));
        c.dataset = Some("shargpt".into());
        assert!(err(&c).contains("workload.dataset: unknown dataset 'shargpt'; known: sharegpt"));
        c.dataset = Some("sharegpt".into());
        c.validate("s.toml").unwrap();

        let mut c = base(ArrivalConfig::Poisson { rate_per_s: 1.0 });
        c.num_requests = None;
        assert_eq!(
            err(&c),
            "s.toml: workload: needs num_requests or duration_s"
        );
        c.duration_s = Some(0.0);
        assert!(err(&c).contains("workload.duration_s: must be > 0, got 0"));
        c.num_requests = Some(0);
        c.duration_s = Some(10.0);
        assert!(err(&c).contains("workload.num_requests: must be >= 1, got 0"));
        c.num_requests = None;
        c.arrival = ArrivalConfig::Offline;
        assert!(err(&c).contains("workload.num_requests: offline arrivals"));
        c.num_requests = Some(1);
        c.prefix = Some(PrefixConfig {
            tokens: 10,
            groups: 0,
        });
        assert!(err(&c).contains("workload.prefix.groups: must be >= 1, got 0"));
        c.prefix = None;
        c.max_concurrency = Some(0);
        assert!(err(&c).contains("workload.max_concurrency: must be >= 1"));

        let sched = |points: Vec<[f64; 2]>, repeat_s| {
            let c = base(ArrivalConfig::Schedule { points, repeat_s });
            c.validate("s.toml")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(sched(vec![], None).contains("workload.arrival.points: needs at least one"));
        assert!(sched(vec![[1.0, 1.0]], None)
            .contains("workload.arrival.points[0]: the first point must be at time 0"));
        assert!(sched(vec![[0.0, 1.0], [5.0, 1.0], [4.0, 1.0]], None)
            .contains("workload.arrival.points[2]: time 4 is before the previous point's 5; points must be sorted"));
        assert!(sched(vec![[0.0, 1.0], [5.0, -1.0]], None)
            .contains("workload.arrival.points[1]: rate must be >= 0, got -1"));
        assert!(sched(vec![[0.0, 0.0], [5.0, 0.0]], None)
            .contains("workload.arrival.points: all rates are zero"));
        assert!(
            sched(vec![[0.0, 0.0], [5.0, 0.0], [5.0, 1.0]], Some(5.0)).contains("zero everywhere")
        );
        assert!(sched(vec![[0.0, 1.0], [5.0, 2.0]], Some(4.0))
            .contains("workload.arrival.repeat_s: must be >= the last point's time 5, got 4"));
        assert_eq!(sched(vec![[0.0, 1.0], [5.0, 2.0]], Some(10.0)), "");

        let mut c = base(ArrivalConfig::Trace {
            path: "t.csv".into(),
            time_scale: 0.0,
            rate_per_s: None,
            format: TraceFormat::Csv,
            hash_block_tokens: None,
        });
        c.input = None;
        c.output = None;
        assert!(err(&c).contains("workload.arrival.time_scale: must be > 0, got 0"));
        c.arrival = ArrivalConfig::Trace {
            path: "t.csv".into(),
            time_scale: 1.0,
            rate_per_s: None,
            format: TraceFormat::Csv,
            hash_block_tokens: None,
        };
        c.num_requests = None;
        c.validate("s.toml").unwrap();
        c.dataset = Some("sharegpt".into());
        assert!(err(&c).contains("workload.dataset: a trace supplies its own lengths"));
    }

    #[test]
    fn poisson_and_gamma_through_the_generator() {
        for (arrival, want_cv) in [
            (ArrivalConfig::Poisson { rate_per_s: 25.0 }, 1.0),
            (
                ArrivalConfig::Gamma {
                    rate_per_s: 25.0,
                    burstiness: 0.5,
                },
                f64::sqrt(2.0),
            ),
        ] {
            let mut c = base(arrival);
            c.num_requests = Some(200_001);
            let v = run(&c, 1);
            let gaps: Vec<f64> = v
                .windows(2)
                .map(|w| (w[1].arrival_ns - w[0].arrival_ns) as f64 * 1e-9)
                .collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            assert!(
                (1.0 / mean / 25.0 - 1.0).abs() < 0.02,
                "rate {}",
                1.0 / mean
            );
            assert!(
                (var.sqrt() / mean / want_cv - 1.0).abs() < 0.04,
                "cv {}",
                var.sqrt() / mean
            );
        }
    }

    #[test]
    fn constant_offline_and_duration() {
        let mut c = base(ArrivalConfig::Constant { rate_per_s: 3.0 });
        c.num_requests = None;
        c.duration_s = Some(10.0);
        let v = run(&c, 1);
        // t = 0, 1/3, ..., 10: 31 arrivals.
        assert_eq!(v.len(), 31);
        for (i, r) in v.iter().enumerate() {
            assert_eq!(r.arrival_ns, (i as f64 / 3.0 * 1e9).round() as u64);
        }
        let mut c = base(ArrivalConfig::Offline);
        c.num_requests = Some(1000);
        let mut g = RequestGenerator::new(&c, 1, "t").unwrap();
        assert!(g.is_offline());
        assert_eq!(g.mean_rate_per_s(), None);
        let mut n = 0;
        while let Some(r) = g.next_request() {
            assert_eq!(r.arrival_ns, 0);
            n += 1;
        }
        assert_eq!(n, 1000);
        assert_eq!(g.next_request(), None);
    }

    #[test]
    fn schedule_follows_its_rate() {
        // Rate ramps from 10 to 50 req/s over 100 s, then stays at 50.
        let mut c = base(ArrivalConfig::Schedule {
            points: vec![[0.0, 10.0], [100.0, 50.0]],
            repeat_s: None,
        });
        c.num_requests = None;
        c.duration_s = Some(200.0);
        let v = run(&c, 3);
        let count = |a: f64, b: f64| {
            v.iter()
                .filter(|r| {
                    let t = r.arrival_ns as f64 * 1e-9;
                    t >= a && t < b
                })
                .count() as f64
        };
        for (a, b, want) in [
            (0.0, 20.0, 280.0),
            (80.0, 100.0, 920.0),
            (150.0, 200.0, 2500.0),
        ] {
            let got = count(a, b);
            assert!(
                (got - want).abs() < 4.0 * want.sqrt(),
                "[{a},{b}): {got} vs {want}"
            );
        }
        assert!((c.mean_rate_per_s().unwrap() - 40.0).abs() < 1e-9);
        assert!(v.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    }

    #[test]
    fn determinism_and_independent_streams() {
        let c = base(ArrivalConfig::Poisson { rate_per_s: 5.0 });
        let a = run(&c, 17);
        assert_eq!(a, run(&c, 17));
        assert_ne!(a, run(&c, 18));
        let lens = |v: &[RequestSpec]| {
            v.iter()
                .map(|r| (r.input_tokens, r.output_tokens))
                .collect::<Vec<_>>()
        };
        let mut faster = c.clone();
        faster.set_rate(50.0);
        let b = run(&faster, 17);
        assert_eq!(
            lens(&a),
            lens(&b),
            "changing the rate must not change lengths"
        );
        assert_ne!(a[5].arrival_ns, b[5].arrival_ns);
        let mut g = c.clone();
        g.arrival = ArrivalConfig::Gamma {
            rate_per_s: 5.0,
            burstiness: 0.3,
        };
        assert_eq!(lens(&a), lens(&run(&g, 17)));
    }

    #[test]
    fn set_rate_for_every_arrival_kind() {
        let mut c = base(ArrivalConfig::Gamma {
            rate_per_s: 1.0,
            burstiness: 2.0,
        });
        c.set_rate(7.5);
        assert_eq!(c.mean_rate_per_s(), Some(7.5));
        let mut c = base(ArrivalConfig::Schedule {
            points: vec![[0.0, 0.0], [10.0, 10.0]],
            repeat_s: Some(20.0),
        });
        assert_eq!(c.mean_rate_per_s(), Some(5.0));
        c.set_rate(20.0);
        assert!((c.mean_rate_per_s().unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(
            c.arrival,
            ArrivalConfig::Schedule {
                points: vec![[0.0, 0.0], [10.0, 40.0]],
                repeat_s: Some(20.0)
            }
        );
        let mut c = base(ArrivalConfig::Offline);
        c.set_rate(3.0);
        assert_eq!(c.arrival, ArrivalConfig::Offline);
        assert_eq!(c.mean_rate_per_s(), None);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        std::fs::write(
            &p,
            "arrival_s,input_tokens,output_tokens\n0,10,5\n1,20,6\n2,30,7\n4,40,8\n",
        )
        .unwrap();
        let mut c = base(ArrivalConfig::Trace {
            path: p.display().to_string(),
            time_scale: 1.0,
            rate_per_s: None,
            format: TraceFormat::Csv,
            hash_block_tokens: None,
        });
        c.input = None;
        c.output = None;
        c.num_requests = None;
        let g = RequestGenerator::new(&c, 0, "t").unwrap();
        assert_eq!(g.mean_rate_per_s(), Some(0.75));
        assert_eq!((g.mean_input_tokens(), g.mean_output_tokens()), (25.0, 6.5));
        c.set_rate(3.0);
        assert_eq!(c.mean_rate_per_s(), Some(3.0));
        let v = run(&c, 0);
        assert_eq!(
            v.iter().map(|r| r.arrival_ns).collect::<Vec<_>>(),
            vec![0, 250_000_000, 500_000_000, 1_000_000_000]
        );
        assert_eq!(v[2].input_tokens, 30);
        assert_eq!(v[2].prefix_group, NO_PREFIX_GROUP);
    }

    #[test]
    fn trace_replay_with_limits_and_time_scale() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("azure.csv");
        std::fs::write(
            &p,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,100,10\n2023-11-16 18:15:47.5,200,20\n2023-11-16 18:15:49.5,300,30\n",
        )
        .unwrap();
        let mut c = base(ArrivalConfig::Trace {
            path: p.display().to_string(),
            time_scale: 2.0,
            rate_per_s: None,
            format: TraceFormat::Csv,
            hash_block_tokens: None,
        });
        c.input = None;
        c.output = None;
        c.num_requests = None;
        c.duration_s = Some(5.0);
        c.prefix = Some(PrefixConfig {
            tokens: 150,
            groups: 2,
        });
        let v = run(&c, 0);
        assert_eq!(v.len(), 2, "the third arrives at 6 s, after duration_s");
        assert_eq!(v[1].arrival_ns, 2_000_000_000);
        assert_eq!((v[0].input_tokens, v[0].prefix_tokens), (100, 99));
        assert_eq!((v[1].input_tokens, v[1].prefix_tokens), (200, 150));
        assert!(v[1].prefix_group < 2);
        c.arrival = ArrivalConfig::Trace {
            path: dir.path().join("missing.csv").display().to_string(),
            time_scale: 1.0,
            rate_per_s: None,
            format: TraceFormat::Csv,
            hash_block_tokens: None,
        };
        let e = RequestGenerator::new(&c, 0, "t").unwrap_err().to_string();
        assert!(e.contains("missing.csv"), "{e}");
    }

    #[test]
    fn lists_give_each_request_its_pair_in_order_and_refuse_a_filtering_dataset() {
        let mut c = base(ArrivalConfig::Poisson { rate_per_s: 1.0 });
        c.input = Some(LengthConfig::List {
            tokens: vec![10, 20, 30],
        });
        c.output = Some(LengthConfig::List {
            tokens: vec![1, 2, 3],
        });
        let mut g = RequestGenerator::new(&c, 5, "t").unwrap();
        let pairs: Vec<(u32, u32)> = (0..5)
            .map(|_| g.next_request().unwrap())
            .map(|r| (r.input_tokens, r.output_tokens))
            .collect();
        assert_eq!(pairs, [(10, 1), (20, 2), (30, 3), (10, 1), (20, 2)]);
        c.dataset = Some("sharegpt".into());
        let e = RequestGenerator::new(&c, 0, "t").unwrap_err().to_string();
        assert!(
            e.contains("workload.input") && e.contains("in order"),
            "{e}"
        );
    }

    #[test]
    fn prefix_is_part_of_the_prompt() {
        let mut c = base(ArrivalConfig::Poisson { rate_per_s: 1.0 });
        c.input = Some(LengthConfig::Fixed { tokens: 50 });
        c.prefix = Some(PrefixConfig {
            tokens: 100,
            groups: 3,
        });
        let mut g = RequestGenerator::new(&c, 2, "t").unwrap();
        assert_eq!(g.mean_input_tokens(), 150.0);
        let mut seen = [false; 3];
        for _ in 0..100 {
            let r = g.next_request().unwrap();
            assert_eq!((r.input_tokens, r.prefix_tokens), (150, 100));
            seen[r.prefix_group as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn extreme_rates_and_ten_million_requests() {
        let mut c = base(ArrivalConfig::Poisson { rate_per_s: 1e6 });
        c.num_requests = Some(10_000_000);
        c.input = Some(LengthConfig::Fixed { tokens: 1 });
        c.output = Some(LengthConfig::Fixed { tokens: 1 });
        let mut g = RequestGenerator::new(&c, 1, "t").unwrap();
        let (mut n, mut last) = (0u64, 0u64);
        while let Some(r) = g.next_request() {
            assert!(r.arrival_ns >= last);
            last = r.arrival_ns;
            n += 1;
        }
        assert_eq!(n, 10_000_000);
        assert!((last as f64 * 1e-9 - 10.0).abs() < 0.1, "{last}");

        // At 1e-6 req/s, time runs past the clock (about 146 years) and the stream ends.
        for arrival in [
            ArrivalConfig::Constant { rate_per_s: 1e-6 },
            ArrivalConfig::Poisson { rate_per_s: 1e-6 },
            ArrivalConfig::Gamma {
                rate_per_s: 1e-6,
                burstiness: 0.1,
            },
        ] {
            c.arrival = arrival;
            let mut g = RequestGenerator::new(&c, 1, "t").unwrap();
            let mut last = 0;
            let mut n = 0;
            while let Some(r) = g.next_request() {
                assert!(r.arrival_ns >= last);
                last = r.arrival_ns;
                n += 1;
            }
            assert!(n > 1000 && n < 10_000_000, "{n}");
        }
    }
}
