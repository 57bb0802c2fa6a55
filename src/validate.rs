//! Fidelity checks: re-simulate published measurements of real serving engines and compare.
//!
//! A reference file (calibration/reference/*.csv) holds one measurement per row: the
//! deployment (with `replicas` behind the router when the run had several), the load (offline:
//! all requests at t = 0; online: an arrival rate, evenly spaced or with `burstiness` gamma
//! gaps, or a closed loop of `max_concurrency` outstanding requests when no rate is given; a
//! shared system prompt; fixed lengths or a built-in `dataset`), and the measured figures
//! (means, medians and percentiles of TTFT, TPOT, ITL and E2E; see [`Metric::ALL`]). Each row becomes a
//! [`Scenario`]; nothing in the model is keyed to a row. The same machinery fits an engine
//! profile's host costs ([`fit_engine_host`]).

pub mod bound;
pub mod cv;
mod host_fit;
pub mod markdown;
mod result_file;

pub use host_fit::{
    fastest_measured_iteration, fit_engine_host, host_param, overloaded_without_host,
    set_host_param, FitOptions, HostFit, HostParamReport, HOST_BOUNDS, HOST_KEYS,
    PRIOR_ERROR_SCALE,
};
pub use result_file::{
    contradictions, parse_result_file, read_result_file, ResultDeployment, ResultFile, ResultLoad,
    MAX_REQUESTS,
};

/// Most requests of one reference row, which `validate` simulates request by request: 10
/// million (MLPerf's offline runs send up to 4 million samples; a million requests simulate in
/// about a second), so a typo of a billion cannot run for minutes without progress.
pub const MAX_ROW_REQUESTS: u64 = 10_000_000;

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use crate::engine::HostCosts;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::summary::RunSummary;

/// The embedded reference measurements (calibration/reference/serving-measurements.csv).
pub const REFERENCE_CSV: &str = include_str!("../calibration/reference/serving-measurements.csv");

/// How a reference row was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// Every request queued at t = 0; throughput measured.
    Offline,
    /// Requests at a constant rate; latency measured.
    Online,
}

/// A measured figure that servesim predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Output tokens per second.
    OutputTokensPerS,
    /// Mean TTFT, ms.
    TtftMeanMs,
    /// p90 TTFT, ms.
    TtftP90Ms,
    /// p99 TTFT, ms.
    TtftP99Ms,
    /// Mean E2E, ms.
    E2eMeanMs,
    /// p90 E2E, ms.
    E2eP90Ms,
    /// p99 E2E, ms.
    E2eP99Ms,
    /// (E2E mean - TTFT mean) / (output - 1), ms.
    ItlDerivedMs,
    /// Median TTFT, ms.
    TtftMedianMs,
    /// Median E2E, ms.
    E2eMedianMs,
    /// Mean TPOT (per request: (E2E - TTFT) / (output - 1), averaged over requests), ms.
    TpotMeanMs,
    /// Median TPOT, ms.
    TpotMedianMs,
    /// p90 TPOT, ms.
    TpotP90Ms,
    /// p99 TPOT, ms.
    TpotP99Ms,
    /// Mean inter-token latency (over all token gaps), ms.
    ItlMeanMs,
    /// Median inter-token latency, ms.
    ItlMedianMs,
    /// p99 inter-token latency, ms.
    ItlP99Ms,
}

impl Metric {
    /// Every metric, in report order, with its CSV column name.
    pub const ALL: [(Metric, &'static str); 17] = [
        (Metric::OutputTokensPerS, "output_tokens_per_s"),
        (Metric::TtftMeanMs, "ttft_mean_ms"),
        (Metric::TtftP90Ms, "ttft_p90_ms"),
        (Metric::TtftP99Ms, "ttft_p99_ms"),
        (Metric::E2eMeanMs, "e2e_mean_ms"),
        (Metric::E2eP90Ms, "e2e_p90_ms"),
        (Metric::E2eP99Ms, "e2e_p99_ms"),
        (Metric::ItlDerivedMs, "itl_derived_ms"),
        (Metric::TtftMedianMs, "ttft_median_ms"),
        (Metric::E2eMedianMs, "e2e_median_ms"),
        (Metric::TpotMeanMs, "tpot_mean_ms"),
        (Metric::TpotMedianMs, "tpot_median_ms"),
        (Metric::TpotP90Ms, "tpot_p90_ms"),
        (Metric::TpotP99Ms, "tpot_p99_ms"),
        (Metric::ItlMeanMs, "itl_mean_ms"),
        (Metric::ItlMedianMs, "itl_median_ms"),
        (Metric::ItlP99Ms, "itl_p99_ms"),
    ];

    /// Whether the metric is a time per output token (each is at least one iteration).
    pub fn is_per_token(self) -> bool {
        matches!(
            self,
            Metric::ItlDerivedMs
                | Metric::TpotMeanMs
                | Metric::TpotMedianMs
                | Metric::TpotP90Ms
                | Metric::TpotP99Ms
                | Metric::ItlMeanMs
                | Metric::ItlMedianMs
                | Metric::ItlP99Ms
        )
    }

    /// The CSV column name.
    pub fn name(self) -> &'static str {
        Metric::ALL
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("?", |(_, n)| n)
    }
}

/// The per-request lengths of a measured run, tokens: prompt (including any shared prefix)
/// and output of each completed request, index by index.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLens {
    /// Prompt tokens per request.
    pub input: Vec<u32>,
    /// Output tokens per request.
    pub output: Vec<u32>,
}

/// One reference measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ReferenceRow {
    /// Row id.
    pub id: String,
    /// Offline or online.
    pub kind: LoadKind,
    /// Engine profile name.
    pub engine: String,
    /// Engine release the measurement ran (`engine_version` column), if given.
    pub engine_version: Option<String>,
    /// Model catalog name.
    pub model: String,
    /// Weight format.
    pub dtype: String,
    /// The checkpoint measured, by Hugging Face id (`checkpoint` column), if given; a row runs
    /// it when its catalog model declares it (`published_checkpoints`), else the format of
    /// `dtype`. Not written out with the row.
    #[serde(skip)]
    pub checkpoint: Option<String>,
    /// KV format.
    pub kv_cache_dtype: String,
    /// GPU profile name.
    pub gpu: String,
    /// TP degree (of the attention, per data-parallel rank).
    pub tp: u32,
    /// Attention data-parallel ranks (`dp` column; blank: 1).
    pub dp: u32,
    /// Expert-parallel size (`ep` column; blank: 1, experts split tensor-parallel).
    pub ep: u32,
    /// Prompt tokens per request (including the shared prefix).
    pub input_len: u32,
    /// Output tokens per request the engine generated (with `ignore_eos`, the configured length).
    pub output_len: u32,
    /// Output tokens per request as the benchmark client counted them, when that differs from
    /// `output_len` (a client that re-tokenises the streamed text counts fewer); the metrics
    /// the client derived from its count (online output tokens/s, derived ITL) are predicted
    /// in the same count.
    pub output_len_counted: Option<f64>,
    /// Shared system-prompt tokens (0 for none).
    pub prefix_len: u32,
    /// Distinct prompts the benchmark client cycles through (`distinct_prompts` column;
    /// `None`: every prompt is new). kubernetes-sigs/inference-perf's `shared_prefix` data
    /// pre-generates `num_groups x num_prompts_per_group` prompts and sends prompt
    /// `i mod` that count as request `i`, so after each prompt's first use the whole prompt
    /// is in the engine's prefix cache while it stays there.
    pub distinct_prompts: Option<u32>,
    /// Per-request prompt and output lengths, tokens, when the measurement recorded them (a
    /// result file's `input_lens` / `output_lens`): request `i` of the simulation then gets
    /// pair `i` (in order, cycling) instead of the means above.
    #[serde(skip_serializing)]
    pub lens: Option<RequestLens>,
    /// Requests in the run.
    pub num_requests: u64,
    /// Arrival rate of an online row, req/s.
    pub rate_rps: Option<f64>,
    /// Arrival process of an online row: `None` for evenly spaced arrivals (the published
    /// reference runs), `Some(b)` for gamma-distributed gaps of shape `b` (vLLM's
    /// `--burstiness`; 1 is Poisson, `vllm bench serve`'s default).
    pub burstiness: Option<f64>,
    /// The client's cap on outstanding requests (vLLM `--max-concurrency`), if any. An online
    /// row without a rate is a closed-loop run: every request queued at t = 0, at most this many
    /// outstanding (`--request-rate inf --max-concurrency N`).
    pub max_concurrency: Option<u32>,
    /// Replicas of the deployment behind the router (1 unless the row says otherwise).
    pub replicas: u32,
    /// Built-in length dataset the run sampled (`workload.dataset`, e.g. `sharegpt`), if any;
    /// `input_len` / `output_len` then only document the published means.
    pub dataset: Option<String>,
    /// Spread of the lengths as vLLM's random dataset draws them (`vllm bench serve
    /// --random-range-ratio`, dimensionless, in [0, 1)): each request's input and output
    /// lengths uniform in [len (1 - r), len (1 + r)] around `input_len` / `output_len`;
    /// absent: every request has exactly those lengths.
    pub range_ratio: Option<f64>,
    /// Scheduler settings the measurement used (absent: engine defaults).
    pub max_num_seqs: Option<u32>,
    /// Token budget the measurement used.
    pub max_num_batched_tokens: Option<u32>,
    /// max_model_len the measurement used.
    pub max_model_len: Option<u32>,
    /// Memory fraction the measurement used.
    pub gpu_memory_utilization: Option<f64>,
    /// The measured figures.
    pub measured: Vec<(Metric, f64)>,
    /// Where the row comes from.
    pub source: String,
}

fn field<'a>(
    rec: &'a csv::StringRecord,
    headers: &csv::StringRecord,
    name: &str,
) -> Option<&'a str> {
    headers
        .iter()
        .position(|h| h == name)
        .and_then(|i| rec.get(i))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Parses reference rows from CSV text; `origin` names it in errors (with the line).
pub fn parse_reference(text: &str, origin: &str) -> Result<Vec<ReferenceRow>> {
    // Lines starting with '#' are notes (a file's comment header: engine flags, hardware).
    let mut rdr = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| Error::Parse {
            path: origin.into(),
            message: e.to_string(),
        })?
        .clone();
    for required in [
        "id",
        "kind",
        "engine",
        "model",
        "gpu",
        "tp",
        "input_len",
        "output_len",
        "num_requests",
    ] {
        if !headers.iter().any(|h| h == required) {
            return Err(Error::Parse {
                path: origin.into(),
                message: format!("missing column '{required}'"),
            });
        }
    }
    let mut rows = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| Error::Parse {
            path: origin.into(),
            message: format!("line {line}: {e}"),
        })?;
        let cells = Cells {
            rec: &rec,
            headers: &headers,
            line,
            origin,
        };
        rows.push(cells.row()?);
    }
    Ok(rows)
}

/// The cells of one line of a reference file, read by column name.
struct Cells<'a> {
    rec: &'a csv::StringRecord,
    headers: &'a csv::StringRecord,
    /// Line number in the file (the header is line 1).
    line: usize,
    /// The file, for errors.
    origin: &'a str,
}

impl<'a> Cells<'a> {
    /// The trimmed cell of `col`; `None` when the column is absent or the cell blank.
    fn field(&self, col: &str) -> Option<&'a str> {
        field(self.rec, self.headers, col)
    }

    fn bad(&self, col: &str, why: String) -> Error {
        Error::Parse {
            path: self.origin.into(),
            message: format!("line {}: column '{col}': {why}", self.line),
        }
    }

    /// A required text cell.
    fn text(&self, col: &str) -> Result<String> {
        self.field(col)
            .map(str::to_string)
            .ok_or_else(|| self.bad(col, "missing value".into()))
    }

    /// An optional non-negative number.
    fn num(&self, col: &str) -> Result<Option<f64>> {
        match self.field(col) {
            None => Ok(None),
            Some(s) => match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                _ => Err(self.bad(col, format!("'{s}' is not a non-negative number"))),
            },
        }
    }

    /// A required non-negative number.
    fn req(&self, col: &str) -> Result<f64> {
        self.num(col)?
            .ok_or_else(|| self.bad(col, "missing value".into()))
    }

    /// An optional number that, when given, must pass `ok` (`rule` says how, e.g. "> 0").
    fn num_where(&self, col: &str, ok: fn(f64) -> bool, rule: &str) -> Result<Option<f64>> {
        match self.num(col)? {
            Some(v) if !ok(v) => Err(self.bad(col, format!("must be {rule} when given"))),
            v => Ok(v),
        }
    }

    /// The row these cells hold; the first failed check is the error (kind, the metrics, the
    /// rate, gpus, the lengths, then the fields in the row's order).
    fn row(&self) -> Result<ReferenceRow> {
        let kind = match self.text("kind")?.as_str() {
            "offline" => LoadKind::Offline,
            "online" => LoadKind::Online,
            other => return Err(self.bad("kind", format!("'{other}' is not offline or online"))),
        };
        let mut measured = Vec::new();
        for (m, col) in Metric::ALL {
            if let Some(v) = self.num(col)? {
                measured.push((m, v));
            }
        }
        let rate_rps = self.num("rate_rps")?;
        let closed_loop = rate_rps.is_none() && self.field("max_concurrency").is_some();
        if kind == LoadKind::Online && !closed_loop && rate_rps.is_none_or(|r| r <= 0.0) {
            return Err(self.bad(
                "rate_rps",
                "an online row needs a rate > 0 (or max_concurrency for a closed-loop run)".into(),
            ));
        }
        if let Some(g) = self.num("gpus")? {
            let tp = self.req("tp")?;
            let dp = self.num("dp")?.unwrap_or(1.0).max(1.0);
            if (tp * dp - g).abs() > 0.5 {
                return Err(self.bad("gpus", format!("{g} is not tp x dp ({tp} x {dp})")));
            }
        }
        let input_len = self.req("input_len")?.round() as u32;
        let output_len = self.req("output_len")?.round() as u32;
        if input_len == 0 || output_len == 0 {
            return Err(self.bad("input_len", "lengths must be >= 1".into()));
        }
        Ok(ReferenceRow {
            id: self.text("id")?,
            kind,
            engine: self.text("engine")?,
            engine_version: self.field("engine_version").map(str::to_string),
            model: self.text("model")?,
            dtype: self.field("dtype").unwrap_or("bf16").to_string(),
            checkpoint: self.field("checkpoint").map(str::to_string),
            kv_cache_dtype: self.field("kv_cache_dtype").unwrap_or("auto").to_string(),
            gpu: self.text("gpu")?,
            tp: self.req("tp")? as u32,
            dp: self.num("dp")?.map_or(1, |v| v as u32).max(1),
            ep: self.num("ep")?.map_or(1, |v| v as u32).max(1),
            input_len,
            output_len,
            output_len_counted: self.num_where("output_len_counted", |c| c >= 1.0, ">= 1")?,
            prefix_len: self.num("prefix_len")?.unwrap_or(0.0) as u32,
            distinct_prompts: self
                .num_where("distinct_prompts", |n| n >= 1.0, ">= 1")?
                .map(|n| n as u32),
            lens: None,
            num_requests: self.num_requests()?,
            rate_rps,
            burstiness: self.num_where("burstiness", |b| b > 0.0, "> 0")?,
            max_concurrency: self
                .num_where("max_concurrency", |c| c >= 1.0, ">= 1")?
                .map(|c| c as u32),
            replicas: self.replicas()?,
            dataset: self.field("dataset").map(str::to_string),
            range_ratio: self.num_where("range_ratio", |r| (0.0..1.0).contains(&r), "in [0, 1)")?,
            max_num_seqs: self.num("max_num_seqs")?.map(|v| v as u32),
            max_num_batched_tokens: self.num("max_num_batched_tokens")?.map(|v| v as u32),
            max_model_len: self.num("max_model_len")?.map(|v| v as u32),
            gpu_memory_utilization: self.num("gpu_memory_utilization")?,
            measured,
            source: self.field("source").unwrap_or("").to_string(),
        })
    }

    /// `num_requests`: a whole number in 1..=[`MAX_ROW_REQUESTS`].
    fn num_requests(&self) -> Result<u64> {
        match self.req("num_requests")? {
            n if n >= 1.0 && n <= MAX_ROW_REQUESTS as f64 && n.fract() == 0.0 => Ok(n as u64),
            n => Err(self.bad(
                "num_requests",
                format!(
                    "must be a whole number in 1..={MAX_ROW_REQUESTS} (each row is \
                     simulated request by request), got {n}"
                ),
            )),
        }
    }

    /// `replicas`: an integer in 1..=100000 (blank: 1).
    fn replicas(&self) -> Result<u32> {
        match self.num("replicas")? {
            None => Ok(1),
            Some(r) if r >= 1.0 && r.fract() == 0.0 && r <= 100_000.0 => Ok(r as u32),
            Some(r) => Err(self.bad("replicas", format!("'{r}' is not an integer in 1..=100000"))),
        }
    }
}

/// Reads reference rows from a file.
pub fn read_reference(path: &Path) -> Result<Vec<ReferenceRow>> {
    let text = crate::input::read_to_string(path, crate::input::InputKind::Table)?;
    parse_reference(&text, &path.display().to_string())
}

impl ReferenceRow {
    /// The weight format to simulate: a row that names the format its catalog model's
    /// checkpoint ships its experts in (gpt-oss: `mxfp4`) runs the checkpoint module by
    /// module (`auto`: MXFP4 experts, BF16 attention), as the engine loads it.
    fn checkpoint_dtype(&self) -> String {
        let Ok(w) = self.dtype.parse::<crate::precision::WeightDtype>() else {
            return self.dtype.clone();
        };
        match crate::model::load_model(&self.model) {
            Ok(m)
                if m.checkpoint
                    .as_ref()
                    .is_some_and(|c| c.experts == w && c.other != w) =>
            {
                "auto".into()
            }
            _ => self.dtype.clone(),
        }
    }

    /// The row's `checkpoint` when its catalog model declares it (`published_checkpoints`):
    /// the row then runs that checkpoint's module formats.
    fn declared_checkpoint(&self) -> Option<String> {
        let c = self.checkpoint.as_ref()?;
        crate::model::load_model(&self.model)
            .ok()
            .filter(|m| m.published_checkpoints.contains_key(c))
            .map(|_| c.clone())
    }

    /// The configuration the row measured, the unit of cross-validation: engine and its
    /// release (the first word of `engine_version`), model, TP degree and GPU (e.g.
    /// `vllm 0.15.1 llama-2-7b TP1 h100-sxm`). Rows of
    /// one configuration share their errors, so leaving one row out while its siblings stay in
    /// the fit would still be in-sample.
    pub fn group(&self) -> String {
        format!(
            "{} {} {} TP{} {}",
            self.engine,
            self.engine_version
                .as_deref()
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or("-"),
            self.model,
            self.tp,
            self.gpu
        )
    }

    /// The scenario that reproduces this measurement.
    pub fn scenario(&self) -> Result<Scenario> {
        use toml::Value as V;
        let mut t = toml::Table::new();
        t.insert("name".into(), V::String(self.id.clone()));
        t.insert("deployment".into(), V::Table(self.deployment_table()));
        t.insert("scheduler".into(), V::Table(self.scheduler_table()));
        t.insert("workload".into(), V::Table(self.workload_table()));
        Scenario::from_table(t, &format!("reference row {}", self.id))
    }

    /// The scenario's `[deployment]`: model, GPU, parallelism, formats, engine, replicas.
    fn deployment_table(&self) -> toml::Table {
        use toml::Value as V;
        let mut dep = toml::Table::new();
        dep.insert("model".into(), V::String(self.model.clone()));
        dep.insert("gpu".into(), V::String(self.gpu.clone()));
        dep.insert("tp".into(), V::Integer(self.tp as i64));
        if self.dp != 1 {
            dep.insert("dp".into(), V::Integer(self.dp as i64));
        }
        if self.ep != 1 {
            dep.insert("ep".into(), V::Integer(self.ep as i64));
        }
        dep.insert("dtype".into(), V::String(self.checkpoint_dtype()));
        if let Some(c) = self.declared_checkpoint() {
            dep.insert("checkpoint".into(), V::String(c));
        }
        dep.insert(
            "kv_cache_dtype".into(),
            V::String(self.kv_cache_dtype.clone()),
        );
        dep.insert("engine".into(), V::String(self.engine.clone()));
        if self.replicas > 1 {
            dep.insert("replicas".into(), V::Integer(self.replicas as i64));
        }
        dep
    }

    /// The scenario's `[scheduler]`: the settings the row gives (the rest: engine defaults).
    fn scheduler_table(&self) -> toml::Table {
        use toml::Value as V;
        let mut sch = toml::Table::new();
        if let Some(v) = self.max_num_seqs {
            sch.insert("max_num_seqs".into(), V::Integer(v as i64));
        }
        if let Some(v) = self.max_num_batched_tokens {
            sch.insert("max_num_batched_tokens".into(), V::Integer(v as i64));
        }
        if let Some(v) = self.max_model_len {
            sch.insert("max_model_len".into(), V::Integer(v as i64));
        }
        if let Some(v) = self.gpu_memory_utilization {
            sch.insert("gpu_memory_utilization".into(), V::Float(v));
        }
        sch
    }

    /// The scenario's `[workload.arrival]`: offline (and closed loop) at t = 0; online
    /// evenly spaced, Poisson or gamma at the row's rate.
    fn arrival_table(&self) -> toml::Table {
        use toml::Value as V;
        let mut arrival = toml::Table::new();
        match self.kind {
            LoadKind::Offline => {
                arrival.insert("kind".into(), V::String("offline".into()));
            }
            LoadKind::Online if self.rate_rps.is_none() => {
                // Closed loop (parse_reference admits no rate only with max_concurrency).
                arrival.insert("kind".into(), V::String("offline".into()));
            }
            LoadKind::Online => {
                let rate = V::Float(self.rate_rps.unwrap_or(1.0));
                match self.burstiness {
                    None => {
                        arrival.insert("kind".into(), V::String("constant".into()));
                    }
                    Some(1.0) => {
                        arrival.insert("kind".into(), V::String("poisson".into()));
                    }
                    Some(b) => {
                        arrival.insert("kind".into(), V::String("gamma".into()));
                        arrival.insert("burstiness".into(), V::Float(b));
                    }
                }
                arrival.insert("rate_per_s".into(), rate);
            }
        }
        arrival
    }

    /// Prompt tokens the engine can find in its prefix cache, as the simulated workload's
    /// shared prefix: with `distinct_prompts`, the whole prompt but its last token (each of
    /// the distinct prompts is one prefix group; vLLM computes at least one prompt token of
    /// a request, `KVCacheManager.get_computed_blocks` looks up `num_tokens - 1`);
    /// otherwise the shared system prompt, `prefix_len`.
    pub fn cached_prefix_len(&self) -> u32 {
        match self.distinct_prompts {
            Some(_) => self.input_len.saturating_sub(1),
            None => self.prefix_len,
        }
    }

    /// Mean prompt tokens a request of `input` tokens leaves to compute, a lower bound: the
    /// part after the shared system prompt; with `distinct_prompts`, that part only at each
    /// distinct prompt's first use (every later use finds the whole prompt cached and computes
    /// at least one token), averaged over the row's requests.
    pub fn uncached_prompt_tokens(&self, input: f64) -> f64 {
        let fresh = (input - self.prefix_len as f64).max(0.0);
        match self.distinct_prompts {
            None => fresh,
            Some(d) => {
                let n = self.num_requests.max(1) as f64;
                let first = (d as f64).min(n);
                (first * fresh + (n - first) * fresh.min(1.0)) / n
            }
        }
    }

    /// The scenario's `[workload]`: arrivals, requests, lengths (per request, fixed, or the
    /// dataset's), concurrency cap, dataset and shared prefix.
    fn workload_table(&self) -> toml::Table {
        use toml::Value as V;
        let fixed = |n: u32| {
            let mut l = toml::Table::new();
            l.insert("kind".into(), V::String("fixed".into()));
            l.insert("tokens".into(), V::Integer(n as i64));
            V::Table(l)
        };
        // vLLM's random dataset (`--random-range-ratio r`): uniform in [n (1 - r), n (1 + r)].
        let uniform = |n: u32, r: f64| {
            let mut l = toml::Table::new();
            l.insert("kind".into(), V::String("uniform".into()));
            l.insert("mean".into(), V::Float(n as f64));
            l.insert("range_ratio".into(), V::Float(r));
            V::Table(l)
        };
        let mut w = toml::Table::new();
        w.insert("arrival".into(), V::Table(self.arrival_table()));
        w.insert("num_requests".into(), V::Integer(self.num_requests as i64));
        // The prefix is part of the prompt: the question is what follows it.
        let prefix_len = self.cached_prefix_len();
        let question = |n: u32| n.saturating_sub(prefix_len).max(1);
        let list = |tokens: Vec<u32>| {
            let mut l = toml::Table::new();
            l.insert("kind".into(), V::String("list".into()));
            l.insert(
                "tokens".into(),
                V::Array(tokens.into_iter().map(|t| V::Integer(t as i64)).collect()),
            );
            V::Table(l)
        };
        match &self.lens {
            Some(lens) => {
                w.insert(
                    "input".into(),
                    list(lens.input.iter().map(|&n| question(n)).collect()),
                );
                w.insert("output".into(), list(lens.output.clone()));
            }
            None => {
                // A dataset with its own length distributions supplies them (given lengths would
                // take precedence over it); `input_len` / `output_len` then only document means.
                let from_dataset = self
                    .dataset
                    .as_deref()
                    .and_then(crate::workload::dataset)
                    .is_some_and(|d| d.input.is_some() && d.output.is_some());
                if !from_dataset {
                    match self.range_ratio {
                        Some(r) => {
                            w.insert("input".into(), uniform(question(self.input_len), r));
                            w.insert("output".into(), uniform(self.output_len, r));
                        }
                        None => {
                            w.insert("input".into(), fixed(question(self.input_len)));
                            w.insert("output".into(), fixed(self.output_len));
                        }
                    }
                }
            }
        }
        if let Some(c) = self.max_concurrency {
            w.insert("max_concurrency".into(), V::Integer(c as i64));
        }
        if let Some(d) = &self.dataset {
            w.insert("dataset".into(), V::String(d.clone()));
        }
        if prefix_len > 0 {
            let mut p = toml::Table::new();
            p.insert("tokens".into(), V::Integer(prefix_len as i64));
            let groups = self.distinct_prompts.map_or(1, i64::from);
            p.insert("groups".into(), V::Integer(groups));
            w.insert("prefix".into(), V::Table(p));
        }
        w
    }
}

/// Predicted against measured for one metric of one row.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Row id.
    pub id: String,
    /// Offline or online.
    pub kind: LoadKind,
    /// The metric.
    pub metric: Metric,
    /// Measured value.
    pub measured: f64,
    /// Predicted value.
    pub predicted: f64,
    /// (predicted - measured) / measured.
    pub signed_error: f64,
    /// The row's configuration ([`ReferenceRow::group`]).
    pub group: String,
    /// For an online row with an arrival rate: whether the simulated engine keeps up with it
    /// ([`RunSummary::keeps_up`]).
    pub keeps_up: Option<bool>,
}

/// Simulates one row, with `host` in place of its engine's host costs when given.
fn simulate(row: &ReferenceRow, host: Option<&HostCosts>) -> Result<RunSummary> {
    let mut resolved = row
        .scenario()?
        .resolve(&format!("reference row {}", row.id))?;
    if let Some(h) = host {
        resolved.deployment.engine.host = h.clone();
        resolved.sim.frontend_delay_ns = crate::clock::secs_to_ns(h.per_request_s)
            .map_err(|e| Error::config(&resolved.origin, "host.per_request_s", e.to_string()))?;
    }
    Ok(resolved.run()?.summary)
}

/// Simulates every row (in parallel) and compares; `host` overrides the engine's host costs
/// (used by the fitter).
pub fn compare(rows: &[ReferenceRow], host: Option<&HostCosts>) -> Result<Vec<Comparison>> {
    let per_row: Vec<Result<Vec<Comparison>>> = rows
        .par_iter()
        .map(|row| {
            let s = simulate(row, host)?;
            // The client's token count, for the figures it derived from that count.
            let counted = row.output_len_counted.unwrap_or(row.output_len as f64);
            let itl = if counted > 1.0 {
                (s.mean_e2el_ms - s.mean_ttft_ms) / (counted - 1.0)
            } else {
                0.0
            };
            let client_tokens_per_generated = counted / row.output_len as f64;
            let group = row.group();
            let keeps_up = match (row.kind, row.rate_rps) {
                (LoadKind::Online, Some(rate)) => Some(s.keeps_up(rate)),
                _ => None,
            };
            Ok(row
                .measured
                .iter()
                .map(|&(metric, measured)| {
                    let predicted = match metric {
                        Metric::OutputTokensPerS => {
                            s.output_throughput * client_tokens_per_generated
                        }
                        Metric::TtftMeanMs => s.mean_ttft_ms,
                        Metric::TtftP90Ms => s.p90_ttft_ms,
                        Metric::TtftP99Ms => s.p99_ttft_ms,
                        Metric::E2eMeanMs => s.mean_e2el_ms,
                        Metric::E2eP90Ms => s.p90_e2el_ms,
                        Metric::E2eP99Ms => s.p99_e2el_ms,
                        Metric::ItlDerivedMs => itl,
                        Metric::TtftMedianMs => s.median_ttft_ms,
                        Metric::E2eMedianMs => s.median_e2el_ms,
                        Metric::TpotMeanMs => s.mean_tpot_ms,
                        Metric::TpotMedianMs => s.median_tpot_ms,
                        Metric::TpotP90Ms => s.p90_tpot_ms,
                        Metric::TpotP99Ms => s.p99_tpot_ms,
                        Metric::ItlMeanMs => s.mean_itl_ms,
                        Metric::ItlMedianMs => s.median_itl_ms,
                        Metric::ItlP99Ms => s.p99_itl_ms,
                    };
                    Comparison {
                        id: row.id.clone(),
                        kind: row.kind,
                        metric,
                        measured,
                        predicted,
                        signed_error: if measured > 0.0 {
                            (predicted - measured) / measured
                        } else {
                            0.0
                        },
                        group: group.clone(),
                        keeps_up,
                    }
                })
                .collect())
        })
        .collect();
    let mut out = Vec::new();
    for r in per_row {
        out.extend(r?);
    }
    Ok(out)
}

/// Median and worst absolute error of one metric (over one load kind).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorSummary {
    /// The metric.
    pub metric: Metric,
    /// Load kind of the rows summarised.
    pub kind: LoadKind,
    /// Rows.
    pub rows: usize,
    /// Median |error|.
    pub median_abs_error: f64,
    /// Mean signed error (bias).
    pub mean_signed_error: f64,
    /// Worst |error| and its row.
    pub worst_abs_error: f64,
    /// Row of the worst error.
    pub worst_id: String,
}

/// Per-(metric, kind) error summaries.
pub fn summarize(comps: &[Comparison]) -> Vec<ErrorSummary> {
    let mut out = Vec::new();
    for kind in [LoadKind::Offline, LoadKind::Online] {
        for (metric, _) in Metric::ALL {
            let mut v: Vec<&Comparison> = comps
                .iter()
                .filter(|c| c.metric == metric && c.kind == kind)
                .collect();
            if v.is_empty() {
                continue;
            }
            v.sort_by(|a, b| a.signed_error.abs().total_cmp(&b.signed_error.abs()));
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2].signed_error.abs()
            } else {
                (v[n / 2 - 1].signed_error.abs() + v[n / 2].signed_error.abs()) / 2.0
            };
            let worst = v[n - 1];
            out.push(ErrorSummary {
                metric,
                kind,
                rows: n,
                median_abs_error: median,
                mean_signed_error: v.iter().map(|c| c.signed_error).sum::<f64>() / n as f64,
                worst_abs_error: worst.signed_error.abs(),
                worst_id: worst.id.clone(),
            });
        }
    }
    out
}

/// A prediction interval of one metric: over the reference rows, `measured / predicted - 1`
/// lay in [`low`, `high`] for a share `coverage` of them (empirical quantiles of the log ratio,
/// linear interpolation), so a prediction `p` of this metric stands for a measurement in
/// `[p (1 + low), p (1 + high)]` with that confidence, as far as the rows are representative.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictionInterval {
    /// The metric.
    pub metric: Metric,
    /// Load kind of the rows.
    pub kind: LoadKind,
    /// Rows the interval rests on.
    pub rows: usize,
    /// Share of the rows inside the interval, in (0, 1).
    pub coverage: f64,
    /// Lower bound of `measured / predicted - 1` (a fraction; negative: measured below).
    pub low: f64,
    /// Upper bound of `measured / predicted - 1` (a fraction).
    pub high: f64,
}

/// Central interval of the log ratios `ln(measured / predicted)` holding `coverage` of them,
/// as fractions `(low, high)` of the prediction; `None` without rows.
fn ratio_interval(mut log_ratios: Vec<f64>, coverage: f64) -> Option<(f64, f64)> {
    log_ratios.retain(|x| x.is_finite());
    if log_ratios.is_empty() {
        return None;
    }
    log_ratios.sort_by(f64::total_cmp);
    let tail = (1.0 - coverage.clamp(0.0, 1.0)) / 2.0;
    Some((
        crate::numeric::quantile_interpolated(&log_ratios, tail).exp() - 1.0,
        crate::numeric::quantile_interpolated(&log_ratios, 1.0 - tail).exp() - 1.0,
    ))
}

/// Per-(metric, load kind) prediction intervals holding `coverage` (in (0, 1)) of the rows'
/// errors. Rows with a non-positive measured or predicted value are left out.
pub fn prediction_intervals(comps: &[Comparison], coverage: f64) -> Vec<PredictionInterval> {
    let mut out = Vec::new();
    for kind in [LoadKind::Offline, LoadKind::Online] {
        for (metric, _) in Metric::ALL {
            let logs: Vec<f64> = comps
                .iter()
                .filter(|c| c.metric == metric && c.kind == kind)
                .filter(|c| c.measured > 0.0 && c.predicted > 0.0)
                .map(|c| (c.measured / c.predicted).ln())
                .collect();
            let rows = logs.len();
            if let Some((low, high)) = ratio_interval(logs, coverage) {
                out.push(PredictionInterval {
                    metric,
                    kind,
                    rows,
                    coverage,
                    low,
                    high,
                });
            }
        }
    }
    out
}

/// The step-time headroom the reference rows call for: the fractional slow-down `h` such that
/// real iterations took at most `(1 + h)` times the predicted ones on a share `coverage` of
/// the rows (the upper end of the central interval). An iteration's time is read off the
/// metrics it sets: offline throughput (`predicted / measured`) and the online derived ITL
/// (`measured / predicted`). `None` without such rows; may be negative when the model is slow.
pub fn step_time_headroom(comps: &[Comparison], coverage: f64) -> Option<f64> {
    let logs: Vec<f64> = comps
        .iter()
        .filter(|c| c.measured > 0.0 && c.predicted > 0.0)
        .filter_map(|c| match (c.kind, c.metric) {
            (LoadKind::Offline, Metric::OutputTokensPerS) => Some((c.predicted / c.measured).ln()),
            (LoadKind::Online, Metric::ItlDerivedMs) => Some((c.measured / c.predicted).ln()),
            _ => None,
        })
        .collect();
    ratio_interval(logs, coverage).map(|(_, high)| high)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "id,kind,engine,model,dtype,gpu,tp,input_len,output_len,output_len_counted,prefix_len,num_requests,rate_rps,max_num_seqs,max_num_batched_tokens,max_model_len,output_tokens_per_s,e2e_mean_ms,ttft_mean_ms,itl_derived_ms";

    fn row(counted: &str) -> String {
        format!("{HEADER}\nX,online,vllm,llama-2-7b,fp16,h100-sxm,1,300,64,{counted},0,200,2,128,2048,4096,100,1000,30,10\n")
    }

    #[test]
    fn client_counted_metrics_are_predicted_in_the_clients_count() {
        let engine = parse_reference(&row(""), "a.csv").unwrap();
        let client = parse_reference(&row("48"), "b.csv").unwrap();
        assert_eq!(client[0].output_len, 64);
        assert_eq!(client[0].output_len_counted, Some(48.0));
        let get = |rows: &[ReferenceRow], m: Metric| {
            compare(rows, None)
                .unwrap()
                .into_iter()
                .find(|c| c.metric == m)
                .unwrap()
                .predicted
        };
        let ratio = |m: Metric| get(&client, m) / get(&engine, m);
        // The simulated work is the same (64 tokens generated): latencies agree ...
        assert_eq!(ratio(Metric::E2eMeanMs), 1.0);
        // ... while the figures the client derived from its count use that count.
        let tput = ratio(Metric::OutputTokensPerS);
        assert!((tput - 48.0 / 64.0).abs() < 1e-9, "{tput}");
        let itl = ratio(Metric::ItlDerivedMs);
        assert!((itl - 63.0 / 47.0).abs() < 1e-9, "{itl}");
    }

    fn comp(kind: LoadKind, metric: Metric, measured: f64, predicted: f64) -> Comparison {
        Comparison {
            id: String::new(),
            kind,
            metric,
            measured,
            predicted,
            signed_error: (predicted - measured) / measured,
            group: String::new(),
            keeps_up: None,
        }
    }

    #[test]
    fn prediction_intervals_are_quantiles_of_the_measured_to_predicted_ratio() {
        // Eleven rows measured at 0.90, 0.92, ..., 1.10 times the prediction.
        let comps: Vec<Comparison> = (0..11)
            .map(|i| {
                let r = 0.90 + 0.02 * i as f64;
                comp(LoadKind::Online, Metric::E2eMeanMs, 100.0 * r, 100.0)
            })
            .collect();
        let iv = prediction_intervals(&comps, 0.8);
        assert_eq!(iv.len(), 1);
        let p = &iv[0];
        assert_eq!(
            (p.rows, p.metric, p.kind),
            (11, Metric::E2eMeanMs, LoadKind::Online)
        );
        // The 10th and 90th percentiles of 11 evenly spaced ratios are the 2nd and 10th.
        assert!((p.low - (0.92 - 1.0)).abs() < 1e-9, "{p:?}");
        assert!((p.high - (1.08 - 1.0)).abs() < 1e-9, "{p:?}");
        // Full coverage spans the extremes; a wider coverage never narrows the band.
        let full = &prediction_intervals(&comps, 1.0)[0];
        assert!((full.low + 0.10).abs() < 1e-9 && (full.high - 0.10).abs() < 1e-9);
        assert!(full.high >= p.high && full.low <= p.low);
    }

    #[test]
    fn step_time_headroom_reads_throughput_and_itl_the_right_way_round() {
        // Offline: measured throughput 20% below the prediction = iterations 25% longer.
        let slow_offline = comp(LoadKind::Offline, Metric::OutputTokensPerS, 800.0, 1000.0);
        let h = step_time_headroom(std::slice::from_ref(&slow_offline), 0.9).unwrap();
        assert!((h - 0.25).abs() < 1e-9, "{h}");
        // Online: measured ITL 10% above the prediction = iterations 10% longer.
        let slow_online = comp(LoadKind::Online, Metric::ItlDerivedMs, 11.0, 10.0);
        let h = step_time_headroom(&[slow_online], 0.9).unwrap();
        assert!((h - 0.10).abs() < 1e-9, "{h}");
        // Other metrics do not count; no rows, no headroom.
        let e2e = comp(LoadKind::Online, Metric::E2eMeanMs, 2.0, 1.0);
        assert_eq!(step_time_headroom(&[e2e], 0.9), None);
    }

    #[test]
    fn a_counted_length_below_one_is_an_error_naming_the_column() {
        let err = parse_reference(&row("0.5"), "c.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("c.csv") && err.contains("output_len_counted"),
            "{err}"
        );
    }

    /// One online row with the optional columns of published serving benchmarks.
    fn extended(extra_header: &str, extra: &str) -> Result<Vec<ReferenceRow>> {
        let text = format!(
            "# a note line, as in a file's comment header\n\
             id,kind,engine,model,gpu,tp,input_len,output_len,num_requests,rate_rps,{extra_header}\n\
             X,online,vllm,llama-2-7b,h100-sxm,1,300,64,200,{extra}\n"
        );
        parse_reference(&text, "x.csv")
    }

    #[test]
    fn median_tpot_and_itl_columns_are_read_and_predicted_from_the_summary() {
        let cols = "ttft_median_ms,e2e_median_ms,tpot_mean_ms,tpot_median_ms,tpot_p90_ms,\
                    tpot_p99_ms,itl_mean_ms,itl_median_ms,itl_p99_ms";
        let rows = extended(cols, "4,1,2,3,4,5,6,7,8,9").unwrap();
        let names: Vec<&str> = rows[0].measured.iter().map(|(m, _)| m.name()).collect();
        assert_eq!(names.join(","), cols.replace(' ', ""));
        let comps = compare(&rows, None).unwrap();
        assert_eq!(comps.len(), 9);
        let p = |m: Metric| comps.iter().find(|c| c.metric == m).unwrap().predicted;
        // A lightly loaded 7B: every latency is positive and the medians sit below the tails.
        assert!(p(Metric::TtftMedianMs) > 0.0 && p(Metric::E2eMedianMs) > p(Metric::TtftMedianMs));
        assert!(p(Metric::TpotMedianMs) > 0.0 && p(Metric::TpotP99Ms) >= p(Metric::TpotMedianMs));
        assert!(p(Metric::ItlMedianMs) > 0.0 && p(Metric::ItlP99Ms) >= p(Metric::ItlMedianMs));
    }

    #[test]
    fn replicas_dataset_and_closed_loop_columns_reach_the_scenario() {
        let rows = extended("replicas,dataset", "2,3,sharegpt").unwrap();
        let sc = rows[0].scenario().unwrap();
        assert_eq!(sc.deployment.replicas, 3);
        assert_eq!(sc.workload.dataset.as_deref(), Some("sharegpt"));
        // The dataset's own distributions apply: the row's mean lengths are not passed on.
        assert!(sc.workload.input.is_none() && sc.workload.output.is_none());
        let random = extended("dataset", "2,random").unwrap()[0]
            .scenario()
            .unwrap();
        assert!(
            random.workload.input.is_some(),
            "random takes the row's lengths"
        );
        // No rate but a concurrency cap: every request queued at once, at most 8 outstanding.
        let rows = extended("max_concurrency", ",8").unwrap();
        assert_eq!(rows[0].kind, LoadKind::Online);
        assert_eq!(rows[0].rate_rps, None);
        let sc = rows[0].scenario().unwrap();
        assert_eq!(sc.workload.max_concurrency, Some(8));
        assert!(
            format!("{:?}", sc.workload.arrival).contains("Offline"),
            "{:?}",
            sc.workload.arrival
        );
        // Neither a rate nor a cap is an error naming the column; so is a fractional replica count.
        let err = extended("max_num_seqs", ",8").unwrap_err().to_string();
        assert!(err.contains("x.csv") && err.contains("rate_rps"), "{err}");
        let err = extended("replicas", "2,1.5").unwrap_err().to_string();
        assert!(err.contains("replicas"), "{err}");
        // An unknown dataset is refused when the scenario resolves, naming the key.
        let sc = extended("dataset", "2,openorca").unwrap()[0]
            .scenario()
            .unwrap();
        let err = sc.resolve("x").unwrap_err().to_string();
        assert!(err.contains("dataset"), "{err}");
    }
    #[test]
    fn a_range_ratio_draws_lengths_uniformly_around_the_means() {
        use crate::workload::LengthConfig;
        let sc = extended("range_ratio", "2,0.15").unwrap()[0]
            .scenario()
            .unwrap();
        let uniform = |l: &Option<LengthConfig>| match l {
            Some(LengthConfig::Uniform { mean, range_ratio }) => Some((*mean, *range_ratio)),
            _ => None,
        };
        assert_eq!(uniform(&sc.workload.input), Some((300.0, 0.15)));
        assert_eq!(uniform(&sc.workload.output), Some((64.0, 0.15)));
        // Without it, every request has the row's lengths.
        let fixed = extended("burstiness", "2,1").unwrap()[0]
            .scenario()
            .unwrap();
        assert_eq!(uniform(&fixed.workload.input), None);
        // Outside [0, 1): an error naming the file and the column.
        let err = extended("range_ratio", "2,1.5").unwrap_err().to_string();
        assert!(
            err.contains("x.csv") && err.contains("range_ratio"),
            "{err}"
        );
    }
}
