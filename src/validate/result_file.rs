//! Result files of `vllm bench serve --save-result` (and of `servesim bench --format json`,
//! which writes the same keys), read as reference rows so that the host-cost fitter can fit
//! an engine to a user's own measurements (`servesim fit-engine`).
//!
//! A result file does not say what it ran on; the deployment comes from the caller. From the
//! file: `completed`, `total_input_tokens`, `total_output_tokens` and `duration` (required),
//! `request_rate` (a number, or `"inf"` for all requests at once), `burstiness` (the gamma
//! shape of the arrival gaps; default 1, Poisson), `max_concurrency` (or `null`),
//! `num_prompts`, and the measured metrics `output_throughput`, `mean_ttft_ms`,
//! `p90_ttft_ms`, `p99_ttft_ms`, `mean_e2el_ms`, `p90_e2el_ms`, `p99_e2el_ms` (any that are
//! present; at least one). Where the file has the per-request `input_lens` and `output_lens`
//! (vLLM writes them with `--save-detailed`; a failed request has output length 0), each
//! simulated request draws its prompt and output lengths from the completed requests' lists;
//! otherwise every request gets the file's mean lengths. Other keys are ignored.
//!
//! The writer is here too ([`ResultFile`]): `servesim bench --format json` writes the same
//! keys, so that its output is a result file this reader takes.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{LoadKind, Metric, ReferenceRow, RequestLens};
use crate::error::{Error, Result};
use crate::metrics::RequestRecord;
use crate::summary::RunSummary;

/// What `vllm bench serve --save-result` writes about the load besides the metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResultLoad {
    /// Requests the client sent.
    pub num_prompts: u64,
    /// Arrival rate, req/s (infinite: all at once).
    pub request_rate_per_s: f64,
    /// Gamma shape of the arrival gaps (1: Poisson).
    pub burstiness: f64,
    /// The client's cap on outstanding requests, if any.
    pub max_concurrency: Option<u32>,
}

/// `servesim bench --format json`: the run's summary plus the keys `vllm bench serve
/// --save-result` writes about the load (`num_prompts`, `request_rate` as a number or
/// `"inf"`, `burstiness`, `max_concurrency` or `null`), so that the output is a valid result
/// file for [`parse_result_file`] (`servesim fit-engine`).
#[derive(Debug, Serialize)]
pub struct ResultFile<'a> {
    /// Requests the client sent.
    num_prompts: u64,
    /// Arrival rate, req/s, or `"inf"` (all at once), as vLLM writes it.
    request_rate: Value,
    /// Gamma shape of the arrival gaps (1: Poisson).
    burstiness: f64,
    /// The client's cap on outstanding requests, if any.
    max_concurrency: Option<u32>,
    /// The run's summary (vLLM's metric keys and servesim's own).
    #[serde(flatten)]
    summary: &'a RunSummary,
    /// Prompt tokens of each request, in the order they were sent (`--save-detailed`;
    /// requests sent at the same instant, as in an offline run, in the order they left).
    #[serde(skip_serializing_if = "Option::is_none")]
    input_lens: Option<Vec<u32>>,
    /// Output tokens of each request, 0 for one that did not complete (`--save-detailed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    output_lens: Option<Vec<u32>>,
}

impl<'a> ResultFile<'a> {
    /// The result file of a run under `load` summarized by `summary`; `detailed`: every
    /// request in the order it was sent, for the per-request lengths (vLLM's
    /// `--save-detailed`).
    pub fn new(
        load: ResultLoad,
        summary: &'a RunSummary,
        detailed: Option<&[RequestRecord]>,
    ) -> Self {
        ResultFile {
            num_prompts: load.num_prompts,
            request_rate: if load.request_rate_per_s.is_finite() {
                serde_json::json!(load.request_rate_per_s)
            } else {
                serde_json::json!("inf")
            },
            burstiness: load.burstiness,
            max_concurrency: load.max_concurrency,
            summary,
            input_lens: detailed.map(|r| r.iter().map(|r| r.input_tokens).collect()),
            output_lens: detailed.map(|r| r.iter().map(|r| r.output_tokens).collect()),
        }
    }
}

/// The deployment a result file was measured on, as the caller names it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultDeployment {
    /// Engine profile: a catalog name or a path to a profile TOML.
    pub engine: String,
    /// Model: a catalog name or a path to a config.json.
    pub model: String,
    /// GPU profile name or path.
    pub gpu: String,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Weight format (`bf16`, `fp16`, `fp8`).
    pub dtype: String,
    /// KV-cache format (`auto`, `fp8`).
    pub kv_cache_dtype: String,
}

/// The metric keys of a result file and what they measure.
const METRIC_KEYS: [(&str, Metric); 7] = [
    ("output_throughput", Metric::OutputTokensPerS),
    ("mean_ttft_ms", Metric::TtftMeanMs),
    ("p90_ttft_ms", Metric::TtftP90Ms),
    ("p99_ttft_ms", Metric::TtftP99Ms),
    ("mean_e2el_ms", Metric::E2eMeanMs),
    ("p90_e2el_ms", Metric::E2eP90Ms),
    ("p99_e2el_ms", Metric::E2eP99Ms),
];

/// Reads one result file as a reference row named after the file.
pub fn read_result_file(path: &Path, dep: &ResultDeployment) -> Result<ReferenceRow> {
    let text = crate::input::read_to_string(path, crate::input::InputKind::Result)?;
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    parse_result_file(&text, &path.display().to_string(), &id, dep)
}

/// Parses result-file text as a reference row `id`; `origin` names the file in errors, which
/// name the offending key.
pub fn parse_result_file(
    text: &str,
    origin: &str,
    id: &str,
    dep: &ResultDeployment,
) -> Result<ReferenceRow> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Parse {
        path: origin.to_string(),
        message: format!("not JSON: {e}"),
    })?;
    let Value::Object(obj) = value else {
        return Err(Error::Parse {
            path: origin.to_string(),
            message: "not a `vllm bench serve --save-result` file: expected a JSON object".into(),
        });
    };
    let r = Reader { obj: &obj, origin };
    let completed = r.completed()?;
    let total_output = r.positive("total_output_tokens")?;
    let input = r.positive("total_input_tokens")? / completed as f64;
    let output = total_output / completed as f64;
    let duration = r.positive("duration")?;
    if input < 0.5 || output < 0.5 {
        return Err(r.bad(
            if input < 0.5 {
                "total_input_tokens"
            } else {
                "total_output_tokens"
            },
            "fewer tokens than completed requests".into(),
        ));
    }
    let rate = r.request_rate()?;
    let burstiness = match obj.get("burstiness") {
        None | Some(Value::Null) => 1.0,
        Some(_) => r.positive("burstiness")?,
    };
    let max_concurrency = match obj.get("max_concurrency") {
        None | Some(Value::Null) => None,
        Some(_) => Some(u32::try_from(r.count("max_concurrency")?).unwrap_or(u32::MAX)),
    };
    let measured = r.measured()?;
    check_consistent(&r, &measured, total_output / duration)?;
    let lens = r.request_lens(completed)?;
    Ok(ReferenceRow {
        id: id.to_string(),
        kind: if rate.is_some() {
            LoadKind::Online
        } else {
            LoadKind::Offline
        },
        engine: dep.engine.clone(),
        engine_version: None,
        model: dep.model.clone(),
        dtype: dep.dtype.clone(),
        checkpoint: None,
        kv_cache_dtype: dep.kv_cache_dtype.clone(),
        gpu: dep.gpu.clone(),
        tp: dep.tp,
        dp: 1,
        ep: 1,
        input_len: input.round().max(1.0) as u32,
        output_len: output.round().max(1.0) as u32,
        output_len_counted: None,
        prefix_len: 0,
        distinct_prompts: None,
        lens,
        num_requests: completed,
        rate_rps: rate,
        burstiness: rate.map(|_| burstiness),
        max_concurrency,
        replicas: 1,
        dataset: None,
        range_ratio: None,
        max_num_seqs: None,
        max_num_batched_tokens: None,
        max_model_len: None,
        gpu_memory_utilization: None,
        measured,
        source: origin.to_string(),
    })
}

/// Most completed requests of one result file (or reference row) a fit or a validation
/// simulates: each of a fit's hundreds of evaluations replays every file, so more would run
/// for many minutes without progress.
pub const MAX_REQUESTS: u64 = 100_000;

/// A file that contradicts itself is an error naming the keys: a p90 above the p99, or an
/// output throughput other than `total_output_tokens / duration` (vLLM writes exactly that).
fn check_consistent(r: &Reader, measured: &[(Metric, f64)], throughput: f64) -> Result<()> {
    let get = |m: Metric| measured.iter().find(|x| x.0 == m).map(|x| x.1);
    for (p90, p99, k90, k99) in [
        (
            Metric::TtftP90Ms,
            Metric::TtftP99Ms,
            "p90_ttft_ms",
            "p99_ttft_ms",
        ),
        (
            Metric::E2eP90Ms,
            Metric::E2eP99Ms,
            "p90_e2el_ms",
            "p99_e2el_ms",
        ),
    ] {
        if let (Some(a), Some(b)) = (get(p90), get(p99)) {
            if a > b * (1.0 + 1e-9) {
                return Err(r.bad(
                    k99,
                    format!("{b} is below {k90} ({a}): the file contradicts itself"),
                ));
            }
        }
    }
    if let Some(t) = get(Metric::OutputTokensPerS) {
        if (t / throughput - 1.0).abs() > 0.02 {
            return Err(r.bad(
                "output_throughput",
                format!(
                    "{t} contradicts total_output_tokens / duration = {throughput:.1} (more than \
                     2% apart): the file contradicts itself"
                ),
            ));
        }
    }
    Ok(())
}

/// Rows that describe the same load (deployment, rate, burstiness, concurrency, requests and
/// mean lengths within 1%) yet disagree on a measured metric by more than a quarter: one of
/// them was probably measured on something else. One warning per such pair, naming both.
pub fn contradictions(rows: &[ReferenceRow]) -> Vec<String> {
    let close = |a: f64, b: f64| (a - b).abs() <= 0.01 * a.abs().max(b.abs());
    let same_load = |a: &ReferenceRow, b: &ReferenceRow| {
        (
            &a.engine,
            &a.model,
            &a.gpu,
            a.tp,
            &a.dtype,
            &a.kv_cache_dtype,
        ) == (
            &b.engine,
            &b.model,
            &b.gpu,
            b.tp,
            &b.dtype,
            &b.kv_cache_dtype,
        ) && a.kind == b.kind
            && a.max_concurrency == b.max_concurrency
            && a.num_requests == b.num_requests
            && close(a.input_len as f64, b.input_len as f64)
            && close(a.output_len as f64, b.output_len as f64)
            && match (a.rate_rps, b.rate_rps) {
                (Some(x), Some(y)) => close(x, y),
                (None, None) => true,
                _ => false,
            }
            && a.burstiness.unwrap_or(1.0) == b.burstiness.unwrap_or(1.0)
    };
    let mut out = Vec::new();
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            if !same_load(a, b) {
                continue;
            }
            for &(m, x) in &a.measured {
                let Some(&(_, y)) = b.measured.iter().find(|p| p.0 == m) else {
                    continue;
                };
                if x.max(y) > 1.25 * x.min(y) {
                    out.push(format!(
                        "{} and {} describe the same load but their {} differ: {x} and {y}; \
                         was one measured on another deployment?",
                        a.id,
                        b.id,
                        m.name()
                    ));
                }
            }
        }
    }
    out
}

/// Typed access to a result file's keys, with errors naming the file and the key.
struct Reader<'a> {
    obj: &'a Map<String, Value>,
    origin: &'a str,
}

impl Reader<'_> {
    /// `completed`: a count within [`MAX_REQUESTS`] and not above `num_prompts` (when given).
    fn completed(&self) -> Result<u64> {
        let completed = self.count("completed")?;
        if completed > MAX_REQUESTS {
            return Err(self.bad(
                "completed",
                format!(
                    "{completed} requests is more than the {MAX_REQUESTS} a fit simulates per file \
                     (each of its hundreds of evaluations replays them); measure fewer prompts"
                ),
            ));
        }
        if let Some(Value::Number(_)) = self.obj.get("num_prompts") {
            let sent = self.count("num_prompts")?;
            if completed > sent {
                return Err(self.bad(
                    "completed",
                    format!("{completed} requests completed but num_prompts is {sent}"),
                ));
            }
        }
        Ok(completed)
    }

    /// `request_rate`: req/s > 0, or `None` for `"inf"` (every request at once).
    fn request_rate(&self) -> Result<Option<f64>> {
        match self.obj.get("request_rate") {
            None => Err(self.bad("request_rate", "missing".into())),
            Some(Value::String(s))
                if matches!(s.to_ascii_lowercase().as_str(), "inf" | "infinity") =>
            {
                Ok(None)
            }
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
                _ => Err(self.bad("request_rate", format!("must be > 0 or \"inf\", got {n}"))),
            },
            Some(other) => Err(self.bad(
                "request_rate",
                format!("must be a number or \"inf\", got {other}"),
            )),
        }
    }

    /// The measured metrics present ([`METRIC_KEYS`]), each > 0; at least one.
    fn measured(&self) -> Result<Vec<(Metric, f64)>> {
        let mut measured = Vec::new();
        for (key, metric) in METRIC_KEYS {
            match self.obj.get(key) {
                None | Some(Value::Null) => {}
                Some(_) => measured.push((metric, self.positive(key)?)),
            }
        }
        if measured.is_empty() {
            return Err(self.bad(
                "mean_e2el_ms",
                "no measured metric (output_throughput, mean_ttft_ms, mean_e2el_ms, ...) to fit"
                    .into(),
            ));
        }
        Ok(measured)
    }

    fn bad(&self, key: &str, reason: String) -> Error {
        Error::config(self.origin, key, reason)
    }

    /// A number > 0 (finite).
    fn positive(&self, key: &str) -> Result<f64> {
        match self.obj.get(key) {
            None => Err(self.bad(key, "missing".into())),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(self.bad(key, format!("must be > 0, got {n}"))),
            },
            Some(other) => Err(self.bad(key, format!("must be a number, got {other}"))),
        }
    }

    /// A list of whole numbers >= 0, or `None` when the key is absent or null.
    fn lengths(&self, key: &str) -> Result<Option<Vec<u32>>> {
        let items = match self.obj.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(self.bad(key, format!("must be a list of token counts, got {other}")))
            }
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_u64() {
                Some(n) if n <= u32::MAX as u64 => Ok(n as u32),
                _ => Err(self.bad(
                    key,
                    format!("item {i} must be a whole number of tokens >= 0, got {v}"),
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// The completed requests' lengths from `input_lens` and `output_lens` (both or neither;
    /// an output length of 0 marks a failed request), which must number `completed`.
    fn request_lens(&self, completed: u64) -> Result<Option<RequestLens>> {
        let (input, output) = match (self.lengths("input_lens")?, self.lengths("output_lens")?) {
            (None, None) => return Ok(None),
            (Some(_), None) => {
                return Err(self.bad("output_lens", "missing beside input_lens".into()))
            }
            (None, Some(_)) => {
                return Err(self.bad("input_lens", "missing beside output_lens".into()))
            }
            (Some(i), Some(o)) => (i, o),
        };
        if input.len() != output.len() {
            return Err(self.bad(
                "output_lens",
                format!("has {} items, input_lens {}", output.len(), input.len()),
            ));
        }
        let (input, output): (Vec<u32>, Vec<u32>) = input
            .into_iter()
            .zip(output)
            .filter(|&(_, o)| o > 0)
            .unzip();
        if input.len() as u64 != completed {
            return Err(self.bad(
                "output_lens",
                format!(
                    "{} requests with output tokens, but completed is {completed}",
                    input.len()
                ),
            ));
        }
        if let Some(i) = input.iter().position(|&n| n == 0) {
            return Err(self.bad(
                "input_lens",
                format!("a completed request has no prompt tokens (item {i})"),
            ));
        }
        Ok(Some(RequestLens { input, output }))
    }

    /// A whole number >= 1.
    fn count(&self, key: &str) -> Result<u64> {
        let v = self.positive(key)?;
        if v.fract() != 0.0 || v > 1e12 {
            return Err(self.bad(key, format!("must be a whole number, got {v}")));
        }
        Ok(v as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::LengthConfig;

    fn dep() -> ResultDeployment {
        ResultDeployment {
            engine: "vllm".into(),
            model: "llama-3.1-8b".into(),
            gpu: "h100-sxm".into(),
            tp: 1,
            dtype: "bf16".into(),
            kv_cache_dtype: "auto".into(),
        }
    }

    const VLLM: &str = r#"{"date": "20250101-000000", "backend": "vllm", "model_id": "m",
        "num_prompts": 200, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": null,
        "duration": 52.1, "completed": 200, "total_input_tokens": 102400,
        "total_output_tokens": 25600, "request_throughput": 3.8, "output_throughput": 491.2,
        "mean_ttft_ms": 41.0, "median_ttft_ms": 39.0, "p99_ttft_ms": 80.2, "mean_tpot_ms": 9.1,
        "mean_itl_ms": 9.0, "mean_e2el_ms": 1200.5, "p99_e2el_ms": 1500.0}"#;

    #[test]
    fn a_vllm_result_becomes_an_online_row() {
        let r = parse_result_file(VLLM, "a.json", "a", &dep()).unwrap();
        assert_eq!(r.kind, LoadKind::Online);
        assert_eq!((r.input_len, r.output_len, r.num_requests), (512, 128, 200));
        assert_eq!((r.rate_rps, r.burstiness), (Some(4.0), Some(1.0)));
        assert_eq!(r.max_concurrency, None);
        let metrics: Vec<Metric> = r.measured.iter().map(|m| m.0).collect();
        assert_eq!(
            metrics,
            vec![
                Metric::OutputTokensPerS,
                Metric::TtftMeanMs,
                Metric::TtftP99Ms,
                Metric::E2eMeanMs,
                Metric::E2eP99Ms
            ]
        );
        // The row simulates: Poisson arrivals at the file's rate.
        let s = r.scenario().unwrap();
        assert!(format!("{:?}", s.workload.arrival).contains("Poisson"));
    }

    #[test]
    fn per_request_lengths_are_replayed_in_order_without_the_failed_requests() {
        let text = VLLM
            .replace("\"completed\": 200", "\"completed\": 3")
            .replace(
            "\"duration\": 52.1,",
            "\"duration\": 52.1, \"input_lens\": [10, 20, 30, 40], \"output_lens\": [5, 0, 7, 9],",
        );
        let r = parse_result_file(&text, "d.json", "d", &dep()).unwrap();
        let lens = r.lens.clone().unwrap();
        assert_eq!(lens.input, [10, 30, 40]);
        assert_eq!(lens.output, [5, 7, 9]);
        let w = r.scenario().unwrap().workload;
        let list = |c: Option<LengthConfig>| match c {
            Some(LengthConfig::List { tokens }) => tokens,
            other => panic!("expected a list, got {other:?}"),
        };
        assert_eq!(list(w.input), [10, 30, 40]);
        assert_eq!(list(w.output), [5, 7, 9]);
    }

    #[test]
    fn broken_per_request_lengths_name_the_key() {
        let with = |lens: &str, completed: u32| {
            let text = VLLM
                .replace("\"completed\": 200", &format!("\"completed\": {completed}"))
                .replace(
                    "\"duration\": 52.1,",
                    &format!("\"duration\": 52.1, {lens}"),
                );
            parse_result_file(&text, "d.json", "d", &dep())
                .unwrap_err()
                .to_string()
        };
        let e = with("\"input_lens\": [1, 2],", 2);
        assert!(e.contains("output_lens") && e.contains("missing"), "{e}");
        let e = with("\"input_lens\": [1, 2], \"output_lens\": [3],", 1);
        assert!(e.contains("output_lens") && e.contains("1 items"), "{e}");
        let e = with("\"input_lens\": [1, -2], \"output_lens\": [3, 4],", 2);
        assert!(e.contains("input_lens") && e.contains("item 1"), "{e}");
        let e = with("\"input_lens\": [1, 2], \"output_lens\": [3, 4],", 5);
        assert!(e.contains("completed is 5"), "{e}");
        let e = with("\"input_lens\": [0, 2], \"output_lens\": [3, 4],", 2);
        assert!(e.contains("input_lens") && e.contains("item 0"), "{e}");
    }

    #[test]
    fn an_infinite_rate_with_a_concurrency_cap_is_an_offline_row() {
        let text = VLLM
            .replace("\"request_rate\": 4.0", "\"request_rate\": \"inf\"")
            .replace("\"max_concurrency\": null", "\"max_concurrency\": 32");
        let r = parse_result_file(&text, "b.json", "b", &dep()).unwrap();
        assert_eq!(r.kind, LoadKind::Offline);
        assert_eq!(r.max_concurrency, Some(32));
        assert_eq!(r.scenario().unwrap().workload.max_concurrency, Some(32));
    }

    #[test]
    fn foreign_or_broken_json_names_the_file_and_the_key() {
        let e = |t: &str| {
            parse_result_file(t, "r.json", "r", &dep())
                .unwrap_err()
                .to_string()
        };
        assert!(e("[1, 2]").contains("r.json"), "{}", e("[1, 2]"));
        assert!(e("{\"completed\": ").contains("not JSON"));
        let missing = e(&VLLM.replace("\"duration\": 52.1,", ""));
        assert!(
            missing.contains("r.json") && missing.contains("duration"),
            "{missing}"
        );
        let wrong = e(&VLLM.replace("\"completed\": 200", "\"completed\": \"all\""));
        assert!(wrong.contains("completed"), "{wrong}");
        let rate = e(&VLLM.replace("\"request_rate\": 4.0", "\"request_rate\": -1"));
        assert!(rate.contains("request_rate"), "{rate}");
        let none = e(&VLLM
            .replace("\"output_throughput\": 491.2,", "")
            .replace("\"mean_ttft_ms\": 41.0,", "")
            .replace("\"p99_ttft_ms\": 80.2,", "")
            .replace(", \"p99_e2el_ms\": 1500.0", "")
            .replace("\"mean_e2el_ms\": 1200.5", "\"x\": 1"));
        assert!(none.contains("no measured metric"), "{none}");
    }
}
