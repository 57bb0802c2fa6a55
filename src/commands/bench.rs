//! `servesim bench`: one run from vLLM-style flags.

use crate::cli::{BenchArgs, Format};
use anyhow::{bail, Context, Result};
use servesim::report::{write_atomic, Exporter, JsonExporter};
use servesim::scenario::Scenario;
use servesim::validate::{ResultFile, ResultLoad};

/// The bench flags that set a scenario key by themselves, with that key: an error about the
/// key names the flag the user typed.
const FLAG_OF_KEY: [(&str, &str); 4] = [
    ("deployment.kv_offloading_size_gib", "--kv-offloading-size"),
    (
        "deployment.kv_transfer_bandwidth_gb_s",
        "--kv-transfer-bandwidth",
    ),
    (
        "deployment.kv_transfer_latency_us",
        "--kv-transfer-latency-us",
    ),
    (
        "scheduler.gpu_memory_utilization",
        "--gpu-memory-utilization",
    ),
];

/// `e`, naming the bench flag instead of the scenario key when one flag sets that key.
fn name_the_flag(e: servesim::Error) -> servesim::Error {
    match e {
        servesim::Error::Config { key, reason, .. }
            if FLAG_OF_KEY.iter().any(|(k, _)| *k == key) =>
        {
            let flag = FLAG_OF_KEY
                .iter()
                .find(|(k, _)| *k == key)
                .map_or("", |f| f.1);
            servesim::Error::config("servesim bench", flag, reason)
        }
        other => other,
    }
}

fn table(entries: &[(&str, toml::Value)]) -> toml::Table {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Translates the flags into a scenario table, so that flags and files share one validation.
fn scenario_table(a: &BenchArgs) -> Result<toml::Table> {
    use toml::Value as V;
    let deployment = deployment_table(a);
    let scheduler = scheduler_table(a);
    let workload = workload_table(a)?;
    let slo = slo_table(a)?;
    let limits = table(&[("fast_forward", V::Boolean(!a.no_fast_forward))]);
    let mut doc = table(&[
        ("name", V::String("bench".into())),
        ("limits", V::Table(limits)),
        // TOML integers stop at 2^63 - 1; larger seeds travel as text (the scenario reads both).
        (
            "seed",
            i64::try_from(a.seed).map_or_else(|_| V::String(a.seed.to_string()), V::Integer),
        ),
        ("deployment", V::Table(deployment)),
        ("scheduler", V::Table(scheduler)),
        ("workload", V::Table(workload)),
        ("slo", V::Table(slo)),
    ]);
    if let Some(json) = &a.speculative_config {
        doc.insert("speculative".into(), V::Table(speculative_table(json)?));
    }
    Ok(doc)
}

/// `[deployment]`: model, GPU, parallelism, formats, engine, replicas and router, and the P/D
/// pools when any of their flags is given.
fn deployment_table(a: &BenchArgs) -> toml::Table {
    use toml::Value as V;
    let d = &a.deployment;
    let mut deployment = table(&[
        ("model", V::String(d.model.clone())),
        ("gpu", V::String(d.gpu.clone())),
        ("tp", V::Integer(d.tp as i64)),
        ("dtype", V::String(d.dtype.clone())),
        ("kv_cache_dtype", V::String(d.kv_cache_dtype.clone())),
        ("engine", V::String(d.engine.clone())),
        ("replicas", V::Integer(a.replicas as i64)),
        ("router", V::String(a.router.clone())),
    ]);
    deployment.retain(|_, v| !matches!(v, V::String(s) if s.is_empty()));
    if let Some(gib) = a.kv_offloading_size {
        deployment.insert("kv_offloading_size_gib".into(), V::Float(gib));
    }
    // Data and expert parallelism only when set, so that a plain deployment reads as before.
    let ep = if d.enable_expert_parallel {
        d.tp.saturating_mul(d.dp)
    } else {
        d.ep
    };
    for (key, v, default) in [
        ("dp", d.dp, 1),
        ("ep", ep, 1),
        ("redundant_experts", d.redundant_experts, 0),
    ] {
        if v != default {
            deployment.insert(key.into(), V::Integer(v as i64));
        }
    }
    let disaggregated = a.prefill_replicas.is_some()
        || a.decode_replicas.is_some()
        || a.prefill_tp.is_some()
        || a.decode_tp.is_some()
        || a.kv_transfer_bandwidth.is_some()
        || a.kv_transfer_latency_us.is_some();
    if disaggregated {
        deployment.insert("mode".into(), V::String("disaggregated".into()));
        for (pool, replicas, tp) in [
            ("prefill", a.prefill_replicas, a.prefill_tp),
            ("decode", a.decode_replicas, a.decode_tp),
        ] {
            let mut t = toml::Table::new();
            t.insert("replicas".into(), V::Integer(replicas.unwrap_or(1) as i64));
            if let Some(tp) = tp {
                t.insert("tp".into(), V::Integer(tp as i64));
            }
            deployment.insert(pool.into(), V::Table(t));
        }
        if let Some(b) = a.kv_transfer_bandwidth {
            deployment.insert("kv_transfer_bandwidth_gb_s".into(), V::Float(b));
        }
        if let Some(l) = a.kv_transfer_latency_us {
            deployment.insert("kv_transfer_latency_us".into(), V::Float(l));
        }
    }
    deployment
}

/// `[scheduler]`: the engine limits given as flags (the engine's defaults otherwise).
fn scheduler_table(a: &BenchArgs) -> toml::Table {
    use toml::Value as V;
    let d = &a.deployment;
    let mut scheduler = toml::Table::new();
    let mut put = |k: &str, v: Option<V>| {
        if let Some(v) = v {
            scheduler.insert(k.into(), v);
        }
    };
    put("max_num_seqs", a.max_num_seqs.map(|x| V::Integer(x as i64)));
    put(
        "max_num_batched_tokens",
        a.max_num_batched_tokens.map(|x| V::Integer(x as i64)),
    );
    put(
        "max_model_len",
        a.max_model_len.map(|x| V::Integer(x as i64)),
    );
    put(
        "enable_chunked_prefill",
        a.enable_chunked_prefill.map(V::Boolean),
    );
    put(
        "enable_prefix_caching",
        a.enable_prefix_caching.map(V::Boolean),
    );
    let async_scheduling = a
        .async_scheduling
        .or(a.no_async_scheduling.then_some(false));
    put("async_scheduling", async_scheduling.map(V::Boolean));
    put(
        "gpu_memory_utilization",
        d.gpu_memory_utilization.map(V::Float),
    );
    scheduler
}

/// `[workload]`: arrivals (offline, Poisson or gamma), requests, lengths or dataset, shared
/// prefix and concurrency cap.
fn workload_table(a: &BenchArgs) -> Result<toml::Table> {
    use toml::Value as V;
    if !(a.burstiness.is_finite() && a.burstiness > 0.0) {
        // As vLLM: burstiness is a gamma shape, whatever the rate.
        bail!(servesim::Error::config(
            "--burstiness",
            "burstiness",
            format!("must be > 0, got {}", a.burstiness),
        ));
    }
    let arrival = if a.request_rate.is_infinite() && a.request_rate > 0.0 {
        table(&[("kind", V::String("offline".into()))])
    } else if a.burstiness == 1.0 {
        table(&[
            ("kind", V::String("poisson".into())),
            ("rate_per_s", V::Float(a.request_rate)),
        ])
    } else {
        table(&[
            ("kind", V::String("gamma".into())),
            ("rate_per_s", V::Float(a.request_rate)),
            ("burstiness", V::Float(a.burstiness)),
        ])
    };
    let mut workload = table(&[
        ("arrival", V::Table(arrival)),
        (
            "num_requests",
            V::Integer(a.num_prompts.min(i64::MAX as u64) as i64),
        ),
    ]);
    if a.dataset_name == "random" {
        let length = |fixed: Option<u32>, mean: u32| -> toml::Table {
            match fixed {
                Some(t) => table(&[
                    ("kind", V::String("fixed".into())),
                    ("tokens", V::Integer(t as i64)),
                ]),
                None if a.random_range_ratio == 0.0 => table(&[
                    ("kind", V::String("fixed".into())),
                    ("tokens", V::Integer(mean as i64)),
                ]),
                None => table(&[
                    ("kind", V::String("uniform".into())),
                    ("mean", V::Float(mean as f64)),
                    ("range_ratio", V::Float(a.random_range_ratio)),
                ]),
            }
        };
        workload.insert(
            "input".into(),
            V::Table(length(a.input_len, a.random_input_len)),
        );
        workload.insert(
            "output".into(),
            V::Table(length(a.output_len, a.random_output_len)),
        );
    } else {
        if a.input_len.is_some() || a.output_len.is_some() {
            bail!(servesim::Error::config(
                "--input-len/--output-len",
                "dataset",
                format!(
                    "fixed lengths apply to the random dataset, not '{}'",
                    a.dataset_name
                )
            ));
        }
        workload.insert("dataset".into(), V::String(a.dataset_name.clone()));
    }
    if a.random_prefix_len > 0 {
        workload.insert(
            "prefix".into(),
            V::Table(table(&[
                ("tokens", V::Integer(a.random_prefix_len as i64)),
                ("groups", V::Integer(1)),
            ])),
        );
    }
    if let Some(c) = a.max_concurrency {
        workload.insert("max_concurrency".into(), V::Integer(c as i64));
    }
    Ok(workload)
}

/// `[slo]` from `--goodput KEY:MS` pairs.
fn slo_table(a: &BenchArgs) -> Result<toml::Table> {
    use toml::Value as V;
    let mut slo = toml::Table::new();
    for g in &a.goodput {
        let (k, v) = g.split_once(':').ok_or_else(|| {
            servesim::Error::config("--goodput", g.as_str(), "expected KEY:MS, e.g. ttft:2000")
        })?;
        let ms: f64 = v.parse().map_err(|_| {
            servesim::Error::config(
                "--goodput",
                g.as_str(),
                format!("'{v}' is not a number of ms"),
            )
        })?;
        let key = match k {
            "ttft" => "ttft_ms",
            "tpot" => "tpot_ms",
            "e2el" | "e2e" => "e2e_ms",
            other => bail!(servesim::Error::config(
                "--goodput",
                other,
                "unknown SLO (ttft, tpot, e2el)"
            )),
        };
        slo.insert(key.into(), V::Float(ms));
    }
    Ok(slo)
}

/// `--speculative-config` JSON as the scenario's `[speculative]` table: vLLM's keys
/// (`draft_tensor_parallel_size` becomes `tp`; `prompt_lookup_max`/`_min` shape the n-gram
/// match, which the model does not price, and are accepted and ignored), servesim's own.
pub(super) fn speculative_table(json: &str) -> Result<toml::Table> {
    use toml::Value as V;
    let flag = "--speculative-config";
    let bad = |key: &str, reason: String| servesim::Error::config(flag, key, reason);
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| bad("speculative", format!("not valid JSON: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        bail!(bad("speculative", "must be a JSON object".into()));
    };
    let mut out = toml::Table::new();
    for (k, v) in map {
        let key = match k.as_str() {
            "draft_tensor_parallel_size" => "tp",
            "prompt_lookup_max" | "prompt_lookup_min" => continue,
            other => other,
        };
        let tv = match &v {
            serde_json::Value::Number(n) if n.is_u64() => {
                V::Integer(n.as_u64().unwrap_or(0).min(i64::MAX as u64) as i64)
            }
            serde_json::Value::Number(n) => V::Float(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => V::String(s.clone()),
            serde_json::Value::Array(xs) => V::Array(
                xs.iter()
                    .map(|x| x.as_f64().map(V::Float))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad(&k, "a list must hold numbers".into()))?,
            ),
            serde_json::Value::Null => continue,
            _ => bail!(bad(&k, format!("unsupported value {v}"))),
        };
        out.insert(key.into(), tv);
    }
    Ok(out)
}

/// The files of a bench report folder: a run's, and result.json.
const BENCH_REPORT_FILES: [&str; 4] = [
    super::run::REPORT_FILES[0],
    super::run::REPORT_FILES[1],
    super::run::REPORT_FILES[2],
    "result.json",
];

/// Runs `servesim bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let out = args
        .out
        .as_deref()
        .map(|o| super::begin_out_dir("--out", o))
        .transpose()?;
    let trace = super::trace_events::begin(
        args.trace_events.as_deref(),
        out.as_ref(),
        &BENCH_REPORT_FILES,
    )?;
    if args.save_detailed && args.format != Format::Json {
        bail!(servesim::Error::config(
            "--save-detailed",
            "format",
            "writes per-request lengths into the JSON result; add --format json",
        ));
    }
    let origin = "servesim bench flags";
    let sc = Scenario::from_table(scenario_table(args)?, origin).map_err(name_the_flag)?;
    let resolved = sc.resolve(origin).map_err(name_the_flag)?;
    let (result, mut requests) = super::trace_events::with_trace(trace.as_deref(), |trace| {
        resolved.run_with_trace(args.save_detailed, trace)
    })?;
    if args.format != Format::Json {
        return super::run::emit(&resolved, &result, args.format, out);
    }
    requests.sort_by_key(|r| r.arrival_ns);
    let doc = ResultFile::new(
        ResultLoad {
            num_prompts: args.num_prompts,
            request_rate_per_s: args.request_rate,
            burstiness: args.burstiness,
            max_concurrency: args.max_concurrency,
        },
        &result.summary,
        args.save_detailed.then_some(&requests[..]),
    );
    let mut bytes = Vec::new();
    JsonExporter::new("result.json").write(&doc, &mut bytes)?;
    // The files first: a standard output whose reader went away cannot lose them.
    if let Some(out) = out {
        super::run::write_outputs(&result, out.path())
            .and_then(|()| Ok(write_atomic(&out.path().join("result.json"), &bytes)?))
            .with_context(|| format!("writing {}", out.target().display()))?;
        let dir = out.commit().context("putting the report folder in place")?;
        note!("wrote {}", dir.display());
    }
    super::to_stdout(&bytes)
}
