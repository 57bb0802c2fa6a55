//! Property test: random scenario TOML text (sections and keys from the schema of
//! docs/scenarios.md and docs/workloads.md with plausible, absurd and wrongly typed values,
//! unknown keys, unknown names, syntax damage) goes through `Scenario::parse`, `resolve` and a
//! short simulation (at most 200 requests, at most 50,000 events) without a panic or a hang;
//! every error is an input error, and every summary is free of NaN / infinity.
//!
//! The default run has 256 cases; the long runs (10,000 and 1,000,000 cases, on every core)
//! are ignored by default:
//!
//!     cargo test --release --test fuzz_scenarios _10k -- --ignored --nocapture
//!     cargo test --release --test fuzz_scenarios one_million -- --ignored --nocapture
//!
//! Cases, time and outcome of the long run are recorded in docs/reliability.md.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;
use servesim::scenario::Scenario;

/// Wall-time limit of one case: a scenario that takes longer counts as a hang. A case costs
/// at most a few seconds of CPU (50,000 events of the slowest kind, autoscaler decisions, take
/// about 0.6 s); the margin is for a machine shared with other builds, where a thread may get
/// a tenth of a core.
const CASE_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_REQUESTS: u64 = 200;
const MAX_EVENTS: u64 = 50_000;

/// A folder with the files a fuzzed scenario may reference (paths are relative to it).
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("servesim-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        w(
            "good.trace.csv",
            "arrival_s,input_tokens,output_tokens\n0.0,100,10\n0.5,2000,50\n0.5,1,1\n2.0,300,200\n",
        );
        w(
            "prefix.trace.csv",
            "arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n0,200,10,0,100\n1,300,20,1,50\n1.5,120,5,,\n",
        );
        w(
            "azure.trace.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n",
        );
        w(
            "bad.trace.csv",
            "arrival_s,input_tokens,output_tokens\n1.0,100,10\n0.5,-3,x\n",
        );
        w("header-only.trace.csv", "arrival_s,input_tokens,output_tokens\n");
        w("lengths.txt", "# lengths\n1\n17\n\n4096\n300\n");
        w("bad-lengths.txt", "12\nabc\n");
        w("lengths.csv", "tokens\n5\n6\n70000\n");
        dir
    })
}

// ---- value strategies -------------------------------------------------------------------

/// Values of any kind that are wrong for most keys.
fn absurd() -> BoxedStrategy<String> {
    prop_oneof![
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("0.0".to_string()),
        Just("-0.0".to_string()),
        Just("-3.5".to_string()),
        Just("nan".to_string()),
        Just("-nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("1e308".to_string()),
        Just("1e-308".to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("\"\"".to_string()),
        Just("\"NaN\"".to_string()),
        Just("\"12\"".to_string()),
        Just("true".to_string()),
        Just("[]".to_string()),
        Just("[1, -2, 3]".to_string()),
        Just("[[0, 1], [1, 0]]".to_string()),
        Just("{ a = 1 }".to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
        any::<i64>().prop_map(|x| x.to_string()),
        any::<f64>().prop_map(float),
        "[a-z]{0,8}".prop_map(|s| format!("\"{s}\"")),
    ]
    .boxed()
}

/// A float as TOML text (TOML spells NaN and infinity in lower case).
fn float(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:?}")
    }
}

/// How wild a case is: the weight (against 100) of an absurd value for any key, and the
/// probability of an unknown key in a section. Each case draws one level, so that some
/// cases are clean enough to reach the simulator and others stress the checks.
#[derive(Clone, Copy, Debug)]
struct Level {
    absurd: u32,
    unknown_key: f64,
    /// Whether the sections agree with each other (a model with a TP that fits it, pools only
    /// in a disaggregated deployment, one source of request lengths, ...), so that a case
    /// without an absurd value reaches the simulator; wild cases draw every key on its own.
    coherent: bool,
}

const LEVELS: [Level; 3] = [
    Level {
        absurd: 0,
        unknown_key: 0.0,
        coherent: true,
    },
    Level {
        absurd: 1,
        unknown_key: 0.005,
        coherent: true,
    },
    Level {
        absurd: 25,
        unknown_key: 0.1,
        coherent: false,
    },
];

/// `good` most of the time, an absurd value with weight `lvl.absurd` (of 100).
fn or_absurd(lvl: Level, good: BoxedStrategy<String>) -> BoxedStrategy<String> {
    if lvl.absurd == 0 {
        good
    } else {
        prop_oneof![100 => good, lvl.absurd => absurd()].boxed()
    }
}

fn s(lvl: Level, choices: &'static [&'static str]) -> BoxedStrategy<String> {
    or_absurd(
        lvl,
        proptest::sample::select(choices)
            .prop_map(|c| format!("\"{c}\""))
            .boxed(),
    )
}

/// One of `good`, or (in wild cases) one of `bad` names or an absurd value.
fn named(
    lvl: Level,
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> BoxedStrategy<String> {
    let quoted = |c: &str| format!("\"{c}\"");
    let good = proptest::sample::select(good).prop_map(quoted).boxed();
    if lvl.absurd == 0 {
        good
    } else {
        prop_oneof![
            100 => good,
            lvl.absurd => proptest::sample::select(bad).prop_map(quoted),
            lvl.absurd => absurd(),
        ]
        .boxed()
    }
}

fn int(lvl: Level, lo: i64, hi: i64) -> BoxedStrategy<String> {
    or_absurd(
        lvl,
        prop_oneof![
            3 => (lo..=hi).prop_map(|x| x.to_string()),
            1 => Just(lo.to_string()),
            1 => Just(hi.to_string()),
        ]
        .boxed(),
    )
}

/// Floats in a range, spread over many orders of magnitude, and the range's ends.
fn real(lvl: Level, lo: f64, hi: f64) -> BoxedStrategy<String> {
    or_absurd(
        lvl,
        prop_oneof![
            4 => (lo..hi).prop_map(float),
            2 => (-9i32..9).prop_map(|e| float(10f64.powi(e))),
            1 => (lo as i64..=hi as i64).prop_map(|x| x.to_string()),
            1 => Just(float(lo)),
        ]
        .boxed(),
    )
}

/// A float uniform in `[lo, hi]` (no spread over magnitudes): a value the key accepts, for
/// coherent cases.
fn within(lvl: Level, lo: f64, hi: f64) -> BoxedStrategy<String> {
    or_absurd(lvl, (lo..=hi).prop_map(float).boxed())
}

fn boolean(lvl: Level) -> BoxedStrategy<String> {
    or_absurd(lvl, any::<bool>().prop_map(|b| b.to_string()).boxed())
}

fn name(lvl: Level) -> BoxedStrategy<String> {
    or_absurd(lvl, "[a-z ]{0,12}".prop_map(|s| format!("\"{s}\"")).boxed())
}

fn points(lvl: Level) -> BoxedStrategy<String> {
    let good = prop_oneof![
        3 => proptest::collection::vec((0.0f64..100.0, -1.0f64..50.0), 0..5).prop_map(|v| {
            let mut t = 0.0;
            let pts: Vec<String> = v
                .iter()
                .enumerate()
                .map(|(i, (dt, r))| {
                    if i > 0 {
                        t += dt;
                    }
                    format!("[{}, {}]", float(t), float(r.max(0.0)))
                })
                .collect();
            format!("[{}]", pts.join(", "))
        }),
        1 => Just("[[0, 10], [1, 0]]".to_string()),
        1 => Just("[[0, 0], [5, 0]]".to_string()),
        1 => Just("[[0, 1e-9]]".to_string()),
        1 => Just("[[5, 1], [0, 1]]".to_string()),
    ]
    .boxed();
    or_absurd(lvl, good)
}

// ---- sections ----------------------------------------------------------------------------

/// `Some(value)` with probability `p` (which may be 0 or 1, unlike `option::weighted`).
fn maybe<S: Strategy + 'static>(p: f64, v: S) -> BoxedStrategy<Option<S::Value>>
where
    S::Value: Clone,
{
    if p <= 0.0 {
        Just(None).boxed()
    } else if p >= 1.0 {
        v.prop_map(Some).boxed()
    } else {
        proptest::option::weighted(p, v).boxed()
    }
}

/// A key with its value strategy.
type KeyGen = (&'static str, BoxedStrategy<String>);

/// A random subset of the keys (each present with probability `presence`, order shuffled),
/// plus now and then an unknown key, as `key = value` lines.
fn keys(lvl: Level, gens: Vec<KeyGen>, presence: f64) -> BoxedStrategy<Vec<String>> {
    keys_with(
        lvl,
        gens.into_iter().map(|(k, v)| (k, presence, v)).collect(),
    )
}

/// As [`keys`], with a presence probability per key.
fn keys_with(
    lvl: Level,
    gens: Vec<(&'static str, f64, BoxedStrategy<String>)>,
) -> BoxedStrategy<Vec<String>> {
    let parts: Vec<BoxedStrategy<Option<String>>> = gens
        .into_iter()
        .map(|(k, presence, v)| {
            maybe(presence, v)
                .prop_map(move |o| o.map(|v| format!("{k} = {v}")))
                .boxed()
        })
        .collect();
    (parts, maybe(lvl.unknown_key, "[a-z_]{1,10}"))
        .prop_map(|(lines, unknown)| {
            let mut out: Vec<String> = lines.into_iter().flatten().collect();
            if let Some(u) = unknown {
                out.push(format!("{u}_x = 1"));
            }
            out
        })
        .prop_shuffle()
        .boxed()
}

fn deployment(lvl: Level) -> BoxedStrategy<Vec<String>> {
    let model: BoxedStrategy<String> = prop_oneof![
        8 => named(lvl, &["llama-3.1-8b", "llama-2-7b", "qwen2.5-7b", "mistral-nemo-12b"], &["no-such-model", "./missing/config.json", ""]),
        4 => s(lvl, &["llama-3.1-70b", "llama-2-70b", "codellama-34b", "qwen2.5-72b", "mixtral-8x7b"]),
        1 => s(lvl, &["llama-3.1-405b"]),
    ]
    .boxed();
    let gpu: BoxedStrategy<String> = prop_oneof![
        1 => named(lvl, &["h100-sxm", "h200-sxm", "b200", "a100-sxm-80gb", "h100-pcie"], &["h900", "", "gpus/none.toml"]),
    ]
    .boxed();
    keys_with(
        lvl,
        vec![
            ("model", 0.98, model),
            ("gpu", 0.98, gpu),
            ("tp", 0.6, prop_oneof![3 => named(lvl, &["1", "2", "4", "8"], &["3", "0", "16", "64"]).prop_map(|t| t.trim_matches('"').to_string()), 1 => int(lvl, 1, 16)].boxed()),
            (
                "dtype",
                0.4,
                named(lvl, &["bf16", "fp16", "fp8"], &["int4", "BF16"]),
            ),
            (
                "kv_cache_dtype",
                0.2,
                named(lvl, &["auto", "fp8"], &["bf16", "int8"]),
            ),
            ("engine", 0.4, named(lvl, &["vllm", "trtllm", "sglang"], &["tgi"])),
            ("replicas", 0.4, int(lvl, 1, 8)),
            (
                "router",
                0.3,
                named(
                    lvl,
                    &[
                        "round-robin",
                        "least-outstanding",
                        "least-kv",
                        "power-of-two",
                    ],
                    &["random"],
                ),
            ),
            (
                "mode",
                0.25,
                named(lvl, &["colocated", "disaggregated"], &["split"]),
            ),
            ("kv_transfer_bandwidth_gb_s", 0.15, real(lvl, 0.1, 1000.0)),
            ("kv_transfer_latency_us", 0.15, real(lvl, 0.0, 1000.0)),
            ("kv_transfer_layerwise", 0.1, boolean(lvl)),
        ],
    )
}

/// A pool of a disaggregated deployment (`[deployment.prefill]`, `[deployment.decode]`).
fn pool(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("replicas", int(lvl, 1, 4)),
            (
                "tp",
                named(lvl, &["1", "2", "4"], &["3", "0"])
                    .prop_map(|t| t.trim_matches('"').to_string())
                    .boxed(),
            ),
            (
                "gpu",
                named(lvl, &["h100-sxm", "h200-sxm", "b200"], &["h900"]),
            ),
            ("max_num_seqs", int(lvl, 1, 512)),
        ],
        0.4,
    )
}

fn scheduler(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("max_num_seqs", int(lvl, 1, 512)),
            ("max_num_batched_tokens", int(lvl, 512, 70_000)),
            ("enable_chunked_prefill", boolean(lvl)),
            ("enable_prefix_caching", boolean(lvl)),
            (
                "block_size",
                named(lvl, &["16", "32", "1", "64"], &["0", "2048", "100000"])
                    .prop_map(|t| t.trim_matches('"').to_string())
                    .boxed(),
            ),
            ("gpu_memory_utilization", real(lvl, 0.3, 1.0)),
            ("max_model_len", int(lvl, 1, 140_000)),
            (
                "batching",
                named(lvl, &["continuous", "static"], &["dynamic"]),
            ),
            ("reserve_output_kv", boolean(lvl)),
        ],
        0.3,
    )
}

/// `kind = "..."` followed by that kind's keys (and, in wild cases, keys of other kinds).
fn with_kind(
    lvl: Level,
    kind: &'static str,
    gens: Vec<(&'static str, f64, BoxedStrategy<String>)>,
) -> BoxedStrategy<Vec<String>> {
    let k = or_absurd(lvl, Just(format!("\"{kind}\"")).boxed());
    (k, keys_with(lvl, gens))
        .prop_map(|(k, mut lines)| {
            lines.insert(0, format!("kind = {k}"));
            lines
        })
        .boxed()
}

fn arrival(lvl: Level) -> BoxedStrategy<Vec<String>> {
    let rate = || real(lvl, 1e-3, 1e4);
    let path = || {
        named(
            lvl,
            &["good.trace.csv", "prefix.trace.csv", "azure.trace.csv"],
            &[
                "bad.trace.csv",
                "header-only.trace.csv",
                "missing.csv",
                "lengths.txt",
            ],
        )
    };
    let stray = if lvl.absurd > 0 { 0.05 } else { 0.0 };
    prop_oneof![
        4 => with_kind(lvl, "poisson", vec![("rate_per_s", 0.97, rate()), ("burstiness", stray, real(lvl, 0.05, 5.0))]),
        2 => with_kind(lvl, "gamma", vec![("rate_per_s", 0.97, rate()), ("burstiness", 0.95, real(lvl, 0.05, 10.0))]),
        2 => with_kind(lvl, "constant", vec![("rate_per_s", 0.97, rate())]),
        2 => with_kind(lvl, "offline", vec![("rate_per_s", stray, rate())]),
        2 => with_kind(lvl, "schedule", vec![("points", 0.97, points(lvl)), ("repeat_s", 0.5, real(lvl, 200.0, 1000.0))]),
        2 => with_kind(lvl, "trace", vec![
            ("path", 0.97, path()),
            ("time_scale", 0.3, real(lvl, 1e-3, 100.0)),
            ("rate_per_s", 0.3, rate()),
        ]),
    ]
    .boxed()
}

fn lengths(lvl: Level) -> BoxedStrategy<Vec<String>> {
    let tokens = || int(lvl, 1, 140_000);
    let mean = || real(lvl, 1.0, 50_000.0);
    let clamp = || int(lvl, 1, 200_000);
    prop_oneof![
        3 => with_kind(lvl, "fixed", vec![("tokens", 0.97, tokens())]),
        2 => with_kind(lvl, "uniform", vec![("mean", 0.97, mean()), ("range_ratio", 0.97, real(lvl, 0.0, 0.999))]),
        2 => with_kind(lvl, "normal", vec![
            ("mean", 0.97, mean()),
            ("std", 0.97, real(lvl, 0.01, 10_000.0)),
            ("min", 0.4, int(lvl, 1, 5000)),
            ("max", 0.4, clamp()),
        ]),
        2 => with_kind(lvl, "lognormal", vec![
            ("mean", 0.97, mean()),
            ("median", 0.97, mean()),
            ("min", 0.4, int(lvl, 1, 5000)),
            ("max", 0.4, clamp()),
        ]),
        1 => with_kind(lvl, "empirical", vec![(
            "path",
            0.97,
            named(lvl, &["lengths.txt", "lengths.csv"], &["bad-lengths.txt", "nope.txt"]),
        )]),
        1 => with_kind(lvl, "list", vec![(
            "tokens",
            0.97,
            proptest::collection::vec(int(lvl, 1, 140_000), 0..6)
                .prop_map(|v| format!("[{}]", v.join(", ")))
                .boxed(),
        )]),
    ]
    .boxed()
}

fn workload(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys_with(
        lvl,
        vec![
            (
                "dataset",
                0.8,
                named(
                    lvl,
                    &[
                        "sharegpt",
                        "azure-conv-2023",
                        "azure-code-2023",
                        "arxiv-summarization",
                        "random",
                    ],
                    &["imagenet"],
                ),
            ),
            ("num_requests", 0.9, int(lvl, 1, 1_000_000_000)),
            ("duration_s", 0.2, real(lvl, 1e-3, 1e6)),
            ("max_concurrency", 0.2, int(lvl, 1, 300)),
        ],
    )
}

fn prefix(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![("tokens", int(lvl, 1, 5000)), ("groups", int(lvl, 1, 100))],
        1.0,
    )
}

fn slo(lvl: Level) -> BoxedStrategy<Vec<String>> {
    slo_keys(lvl)
}

fn slo_keys(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("ttft_ms", real(lvl, 1e-3, 5000.0)),
            ("ttft_percentile", real(lvl, 1e-3, 100.0)),
            ("tpot_ms", real(lvl, 1e-3, 200.0)),
            ("tpot_percentile", real(lvl, 1e-3, 100.0)),
            ("e2e_ms", real(lvl, 1e-3, 1e5)),
            ("e2e_percentile", real(lvl, 1e-3, 100.0)),
            ("admission_control", boolean(lvl)),
            ("queue_timeout_s", real(lvl, 1e-6, 100.0)),
        ],
        0.4,
    )
}

fn limits(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("max_sim_time_s", real(lvl, 1e-6, 1e7)),
            ("max_events", int(lvl, 1, 1_000_000)),
        ],
        0.5,
    )
}

fn pricing(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("price_usd_per_gpu_hour", real(lvl, 0.0, 20.0)),
            (
                "column",
                named(lvl, &["on_demand", "reserved", "spot"], &["free"]),
            ),
            ("input_output_price_ratio", real(lvl, 0.0, 2.0)),
        ],
        0.5,
    )
}

fn plan(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("target_rate_per_s", real(lvl, 1e-3, 100.0)),
            (
                "gpus",
                s(lvl, &["h100-sxm"]).prop_map(|g| format!("[{g}]")).boxed(),
            ),
            ("tp", Just("[1, 3]".to_string()).boxed()),
            ("goodput_threshold", real(lvl, 0.01, 1.0)),
            ("max_replicas", int(lvl, 1, 64)),
        ],
        0.3,
    )
}

fn top(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("name", name(lvl)),
            ("description", name(lvl)),
            ("seed", int(lvl, 0, 1000)),
        ],
        0.5,
    )
}

/// A section: present (with probability `p`) as `[header]` plus its lines.
fn section(
    header: &'static str,
    p: f64,
    body: BoxedStrategy<Vec<String>>,
) -> BoxedStrategy<String> {
    maybe(p, body)
        .prop_map(move |o| match o {
            Some(lines) => format!("[{header}]\n{}\n", lines.join("\n")),
            None => String::new(),
        })
        .boxed()
}

/// Occasional damage to the text: a truncated file, a broken header, a duplicated table.
fn damage(lvl: Level) -> BoxedStrategy<Option<(u8, usize)>> {
    let p = if lvl.absurd > 0 { 0.05 } else { 0.0 };
    maybe(p, (0u8..3, any::<usize>())).boxed()
}

fn scenario_text_at(lvl: Level) -> impl Strategy<Value = String> {
    (
        (
            top(lvl),
            section("deployment", 0.99, deployment(lvl)),
            section("scheduler", 0.5, scheduler(lvl)),
            section("workload", 0.99, workload(lvl)),
            section("workload.arrival", 0.98, arrival(lvl)),
            section("workload.input", 0.5, lengths(lvl)),
        ),
        (
            section("workload.output", 0.5, lengths(lvl)),
            section("workload.prefix", 0.15, prefix(lvl)),
            section("slo", 0.5, slo(lvl)),
            section("limits", 0.3, limits(lvl)),
            section("pricing", 0.2, pricing(lvl)),
            section("plan", 0.1, plan(lvl)),
        ),
        (
            section("deployment.prefill", 0.15, pool(lvl)),
            section("deployment.decode", 0.15, pool(lvl)),
            section("autoscale", 0.1, autoscale(lvl)),
            section("faults", 0.1, faults(lvl)),
        ),
        damage(lvl),
    )
        .prop_map(
            |((t, d, sc, w, a, i), (o, p, sl, l, pr, pl), (pp, dp, au, fa), dmg)| {
                let mut text = format!(
                    "{}\n{d}{sc}{w}{a}{i}{o}{p}{sl}{l}{pr}{pl}{pp}{dp}{au}{fa}",
                    t.join("\n")
                );
                if let Some((how, at)) = dmg {
                    let cut = at % (text.len() + 1);
                    let cut = (0..=cut).rev().find(|&c| text.is_char_boundary(c)).unwrap();
                    match how {
                        0 => text.truncate(cut),
                        1 => text.insert_str(cut, "\n[deployment\n"),
                        _ => text.push_str("\n[deployment]\ntp = 1\n"),
                    }
                }
                text
            },
        )
}

/// A random scenario text at a random [`Level`] of wildness: clean 50%, mild 30%, wild 20%.
fn scenario_text() -> impl Strategy<Value = String> {
    prop_oneof![5 => Just(LEVELS[0]), 3 => Just(LEVELS[1]), 2 => Just(LEVELS[2])].prop_flat_map(
        |lvl| {
            if lvl.coherent {
                coherent_text(lvl).boxed()
            } else {
                scenario_text_at(lvl).boxed()
            }
        },
    )
}

// ---- coherent scenarios ------------------------------------------------------------------

/// Models with the TP degrees that divide their heads and fit them on any of the GPUs below
/// (bf16), for coherent cases. Small ones first: a disaggregated deployment takes those.
const MODELS: [(&str, &[u32]); 8] = [
    ("llama-3.1-8b", &[1, 2, 4, 8]),
    ("llama-2-7b", &[1, 2, 4, 8]),
    ("qwen2.5-7b", &[1, 2, 4]),
    ("mistral-nemo-12b", &[1, 2, 4, 8]),
    ("llama-3.1-70b", &[4, 8]),
    ("mixtral-8x7b", &[2, 4, 8]),
    ("codellama-34b", &[2, 4, 8]),
    ("qwen2.5-72b", &[4, 8]),
];
const SMALL_MODELS: usize = 4;

/// `(model, tp)` of a coherent case; `small` keeps to the models a pool of TP <= 4 holds.
fn model_tp(small: bool) -> BoxedStrategy<(&'static str, u32)> {
    let n = if small { SMALL_MODELS } else { MODELS.len() };
    (0..n)
        .prop_flat_map(|i| {
            let (m, tps) = MODELS[i];
            let tps: Vec<u32> = tps
                .iter()
                .copied()
                .filter(|&t| t <= 4 || i >= SMALL_MODELS)
                .collect();
            proptest::sample::select(tps).prop_map(move |t| (m, t))
        })
        .boxed()
}

/// The deployment sections of a coherent case: `[deployment]` (colocated, or disaggregated
/// with both pools and the link keys) and the pool sections.
fn coherent_deployment(lvl: Level) -> BoxedStrategy<String> {
    let gpus = &["h100-sxm", "h200-sxm", "b200", "a100-sxm-80gb", "h100-pcie"];
    let shared = move |disagg: bool| {
        (
            model_tp(disagg),
            proptest::sample::select(&gpus[..]),
            prop_oneof![3 => Just("bf16"), 1 => Just("fp16"), 1 => Just("fp8")],
            prop_oneof![3 => Just("auto"), 1 => Just("fp8")],
            keys(
                lvl,
                vec![
                    ("engine", s(lvl, &["vllm", "trtllm", "sglang"])),
                    (
                        "router",
                        s(
                            lvl,
                            &[
                                "round-robin",
                                "least-outstanding",
                                "least-kv",
                                "power-of-two",
                            ],
                        ),
                    ),
                    ("step_time_scale", within(lvl, 0.5, 2.0)),
                ],
                0.4,
            ),
        )
            .prop_map(move |((model, tp), gpu, dtype, kv, extra)| {
                // FP8 needs FP8 tensor cores (not the A100's).
                let fp8_ok = gpu != "a100-sxm-80gb";
                let dtype = if fp8_ok { dtype } else { "bf16" };
                let kv = if fp8_ok { kv } else { "auto" };
                let mut lines = vec![
                    format!("model = \"{model}\""),
                    format!("gpu = \"{gpu}\""),
                    format!("tp = {tp}"),
                    format!("dtype = \"{dtype}\""),
                    format!("kv_cache_dtype = \"{kv}\""),
                ];
                lines.extend(extra);
                (lines, tp)
            })
    };
    let colocated = (
        shared(false),
        or_absurd(lvl, (1u32..=8).prop_map(|r| r.to_string()).boxed()),
    )
        .prop_map(|((mut lines, _), replicas)| {
            lines.push(format!("replicas = {replicas}"));
            format!("[deployment]\n{}\n", lines.join("\n"))
        });
    let pool = move |tp: u32| {
        (
            or_absurd(lvl, (1u32..=3).prop_map(|r| r.to_string()).boxed()),
            proptest::sample::select(&["h100-sxm", "h200-sxm", "b200"][..]),
            maybe(0.3, int(lvl, 1, 512)),
        )
            .prop_map(move |(replicas, gpu, seqs)| {
                let mut l = vec![
                    format!("replicas = {replicas}"),
                    format!("tp = {tp}"),
                    format!("gpu = \"{gpu}\""),
                ];
                if let Some(n) = seqs {
                    l.push(format!("max_num_seqs = {n}"));
                }
                l.join("\n")
            })
    };
    let disaggregated = shared(true)
        .prop_flat_map(move |(lines, tp)| {
            (
                Just(lines),
                pool(tp),
                pool(tp),
                keys(
                    lvl,
                    vec![
                        ("kv_transfer_bandwidth_gb_s", within(lvl, 0.1, 1000.0)),
                        ("kv_transfer_latency_us", within(lvl, 0.0, 1000.0)),
                        ("kv_transfer_layerwise", boolean(lvl)),
                    ],
                    0.3,
                ),
            )
        })
        .prop_map(|(mut lines, p, d, link)| {
            lines.push("mode = \"disaggregated\"".into());
            lines.extend(link);
            format!(
                "[deployment]\n{}\n[deployment.prefill]\n{p}\n[deployment.decode]\n{d}\n",
                lines.join("\n")
            )
        });
    prop_oneof![3 => colocated, 1 => disaggregated].boxed()
}

/// Request lengths of a coherent case: small enough that a prompt and its output fit every
/// model's context (and a `max_model_len` of 2048).
fn coherent_lengths(lvl: Level) -> BoxedStrategy<Vec<String>> {
    let tokens = || int(lvl, 1, 1000);
    let mean = || within(lvl, 1.0, 1000.0);
    prop_oneof![
        3 => with_kind(lvl, "fixed", vec![("tokens", 1.0, tokens())]),
        2 => with_kind(lvl, "uniform", vec![("mean", 1.0, mean()), ("range_ratio", 1.0, within(lvl, 0.0, 0.999))]),
        2 => (1.0f64..1000.0, 0.01f64..1000.0, maybe(0.4, 1u32..200), maybe(0.4, 1000u32..5000))
            .prop_map(|(m, sd, lo, hi)| {
                let mut l = vec!["kind = \"normal\"".to_string(), format!("mean = {}", float(m)), format!("std = {}", float(sd))];
                l.extend(lo.map(|v| format!("min = {v}")));
                l.extend(hi.map(|v| format!("max = {v}")));
                l
            }),
        2 => (1.0f64..1000.0, 1.0f64..3.0, maybe(0.4, 1u32..200), maybe(0.4, 1000u32..5000))
            .prop_map(|(median, k, lo, hi)| {
                let mut l = vec![
                    "kind = \"lognormal\"".to_string(),
                    format!("median = {}", float(median)),
                    format!("mean = {}", float(median * k)),
                ];
                l.extend(lo.map(|v| format!("min = {v}")));
                l.extend(hi.map(|v| format!("max = {v}")));
                l
            }),
        1 => with_kind(lvl, "empirical", vec![("path", 1.0, s(lvl, &["lengths.txt", "lengths.csv"]))]),
        1 => with_kind(lvl, "list", vec![(
            "tokens",
            1.0,
            proptest::collection::vec(int(lvl, 1, 1000), 1..6)
                .prop_map(|v| format!("[{}]", v.join(", ")))
                .boxed(),
        )]),
    ]
    .boxed()
}

/// The workload sections of a coherent case: one source of lengths (a dataset, input and
/// output sections, or a trace) with an arrival process that suits it.
fn coherent_workload(lvl: Level) -> BoxedStrategy<String> {
    let rate = || real(lvl, 1e-3, 1e4);
    let good_points = prop_oneof![
        3 => proptest::collection::vec((0.0f64..100.0, 0.0f64..50.0), 1..5).prop_map(|v| {
            let mut t = 0.0;
            let pts: Vec<String> = v
                .iter()
                .enumerate()
                .map(|(i, (dt, r))| {
                    if i > 0 {
                        t += dt.max(0.01);
                    }
                    format!("[{}, {}]", float(t), float(if i == 0 { r.max(0.5) } else { *r }))
                })
                .collect();
            format!("[{}]", pts.join(", "))
        }),
        1 => Just("[[0, 10], [1, 0]]".to_string()),
    ];
    let synthetic = prop_oneof![
        4 => with_kind(lvl, "poisson", vec![("rate_per_s", 1.0, rate())]),
        2 => with_kind(lvl, "gamma", vec![("rate_per_s", 1.0, rate()), ("burstiness", 1.0, within(lvl, 0.05, 10.0))]),
        2 => with_kind(lvl, "constant", vec![("rate_per_s", 1.0, rate())]),
        2 => with_kind(lvl, "offline", vec![]),
        2 => with_kind(lvl, "schedule", vec![("points", 1.0, or_absurd(lvl, good_points.boxed())), ("repeat_s", 0.5, within(lvl, 200.0, 1000.0))]),
    ]
    .boxed();
    let trace = with_kind(
        lvl,
        "trace",
        vec![
            (
                "path",
                1.0,
                s(
                    lvl,
                    &["good.trace.csv", "prefix.trace.csv", "azure.trace.csv"],
                ),
            ),
            ("time_scale", 0.3, within(lvl, 1e-3, 100.0)),
        ],
    );
    let common = keys_with(
        lvl,
        vec![
            ("num_requests", 1.0, int(lvl, 1, 1_000_000_000)),
            ("duration_s", 0.2, real(lvl, 1e-3, 1e6)),
            ("max_concurrency", 0.2, int(lvl, 1, 300)),
        ],
    );
    let section = |h: &str, lines: Vec<String>| format!("[{h}]\n{}\n", lines.join("\n"));
    let from_dataset = (
        common.clone(),
        s(
            lvl,
            &[
                "sharegpt",
                "azure-conv-2023",
                "azure-code-2023",
                "arxiv-summarization",
            ],
        ),
        synthetic.clone(),
    )
        .prop_map(move |(c, d, a)| {
            format!(
                "[workload]\ndataset = {d}\n{}\n{}",
                c.join("\n"),
                section("workload.arrival", a)
            )
        });
    let from_lengths = (
        common.clone(),
        synthetic,
        coherent_lengths(lvl),
        coherent_lengths(lvl),
        maybe(0.15, (1u32..40, 1u32..20)),
        maybe(0.3, Just("dataset = \"random\"")),
    )
        .prop_map(move |(c, a, i, o, prefix, random)| {
            let mut t = format!("[workload]\n{}\n{}\n", random.unwrap_or(""), c.join("\n"));
            t += &section("workload.arrival", a);
            t += &section("workload.input", i);
            t += &section("workload.output", o);
            if let Some((tokens, groups)) = prefix {
                t += &format!("[workload.prefix]\ntokens = {tokens}\ngroups = {groups}\n");
            }
            t
        });
    let from_trace = (common, trace).prop_map(move |(c, a)| {
        format!(
            "[workload]\n{}\n{}",
            c.join("\n"),
            section("workload.arrival", a)
        )
    });
    prop_oneof![3 => from_dataset, 4 => from_lengths, 1 => from_trace].boxed()
}

/// The scheduler of a coherent case (chunked prefill on: off needs a budget above the
/// model's context).
fn coherent_scheduler(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("max_num_seqs", int(lvl, 1, 512)),
            ("max_num_batched_tokens", int(lvl, 2048, 70_000)),
            ("enable_prefix_caching", boolean(lvl)),
            (
                "block_size",
                s(lvl, &["16", "32"])
                    .prop_map(|t| t.trim_matches('"').to_string())
                    .boxed(),
            ),
            ("gpu_memory_utilization", within(lvl, 0.6, 0.95)),
            (
                "max_model_len",
                s(lvl, &["2048", "4096"])
                    .prop_map(|t| t.trim_matches('"').to_string())
                    .boxed(),
            ),
            ("batching", s(lvl, &["continuous", "static"])),
            ("reserve_output_kv", boolean(lvl)),
        ],
        0.3,
    )
}

/// SLOs of a coherent case: admission control only with a TTFT threshold.
fn coherent_slo(lvl: Level) -> BoxedStrategy<Vec<String>> {
    (
        coherent_slo_keys(lvl),
        any::<bool>(),
        within(lvl, 1.0, 5000.0),
    )
        .prop_map(|(mut lines, admission, ttft)| {
            if admission {
                lines.retain(|l| !l.starts_with("ttft_ms") && !l.starts_with("admission_control"));
                lines.push(format!("ttft_ms = {ttft}"));
                lines.push("admission_control = true".into());
            } else {
                lines.retain(|l| !l.starts_with("admission_control"));
            }
            lines
        })
        .boxed()
}

fn coherent_slo_keys(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("ttft_ms", within(lvl, 1.0, 5000.0)),
            ("ttft_percentile", within(lvl, 1.0, 100.0)),
            ("tpot_ms", within(lvl, 1.0, 200.0)),
            ("tpot_percentile", within(lvl, 1.0, 100.0)),
            ("e2e_ms", within(lvl, 10.0, 1e5)),
            ("e2e_percentile", within(lvl, 1.0, 100.0)),
            ("queue_timeout_s", within(lvl, 1e-3, 100.0)),
        ],
        0.4,
    )
}

fn coherent_plan(lvl: Level) -> BoxedStrategy<Vec<String>> {
    keys(
        lvl,
        vec![
            ("target_rate_per_s", within(lvl, 0.1, 100.0)),
            ("gpus", Just("[\"h100-sxm\"]".to_string()).boxed()),
            ("tp", Just("[1, 2]".to_string()).boxed()),
            ("goodput_threshold", within(lvl, 0.5, 1.0)),
            ("max_replicas", int(lvl, 1, 64)),
        ],
        0.3,
    )
}

/// `[autoscale]` (colocated only), each policy with the keys it needs.
fn autoscale(lvl: Level) -> BoxedStrategy<Vec<String>> {
    let policy = prop_oneof![
        Just(vec![
            "policy = \"utilization\"".to_string(),
            "capacity_rate_per_replica = 5.0".to_string()
        ]),
        Just(vec!["policy = \"queue\"".to_string()]),
        Just(vec![
            "policy = \"ttft\"".to_string(),
            "ttft_high_ms = 500.0".to_string()
        ]),
    ];
    (
        policy,
        keys(
            lvl,
            vec![
                ("min_replicas", int(lvl, 1, 2)),
                ("max_replicas", int(lvl, 2, 8)),
                ("step", int(lvl, 1, 2)),
                ("scale_up_delay_s", within(lvl, 0.0, 300.0)),
                ("scale_down_cooldown_s", within(lvl, 0.0, 600.0)),
                ("interval_s", within(lvl, 0.1, 60.0)),
                ("target_utilization", within(lvl, 0.1, 1.0)),
                ("queue_high", within(lvl, 2.0, 20.0)),
                ("queue_low", within(lvl, 0.0, 1.0)),
            ],
            0.3,
        ),
    )
        .prop_map(|(mut p, k)| {
            // (interval_s stays below the default 120 s window.)
            p.extend(k);
            p
        })
        .boxed()
}

/// `[faults]` (colocated only): scheduled failures and random ones.
fn faults(lvl: Level) -> BoxedStrategy<Vec<String>> {
    (
        proptest::collection::vec((0.0f64..100.0, 1u32..3, 1.0f64..300.0), 0..3),
        keys(
            lvl,
            vec![
                ("mtbf_hours", within(lvl, 0.001, 10.0)),
                ("repair_s", within(lvl, 1.0, 900.0)),
                ("on_failure", s(lvl, &["retry", "fail"])),
            ],
            0.5,
        ),
    )
        .prop_map(|(fs, mut k)| {
            let items: Vec<String> = fs
                .iter()
                .map(|(t, n, r)| {
                    format!(
                        "{{ time_s = {}, replicas = {n}, repair_s = {} }}",
                        float(*t),
                        float(*r)
                    )
                })
                .collect();
            k.push(format!("failures = [{}]", items.join(", ")));
            k
        })
        .boxed()
}

/// A coherent scenario: sections that agree, with values from their valid ranges and (mild
/// level) now and then an absurd value or an unknown key.
fn coherent_text(lvl: Level) -> impl Strategy<Value = String> {
    (
        (
            top(lvl),
            coherent_deployment(lvl),
            section("scheduler", 0.5, coherent_scheduler(lvl)),
            coherent_workload(lvl),
            section("slo", 0.5, coherent_slo(lvl)),
            section("limits", 0.3, limits(lvl)),
        ),
        (
            section("pricing", 0.2, pricing(lvl)),
            section("plan", 0.1, coherent_plan(lvl)),
            section("autoscale", 0.1, autoscale(lvl)),
            section("faults", 0.1, faults(lvl)),
        ),
    )
        .prop_map(|((t, d, sc, w, sl, l), (pr, pl, a, f))| {
            // The fleet's controllers are not modelled with disaggregated pools.
            let (a, f) = if d.contains("disaggregated") {
                (String::new(), String::new())
            } else {
                (a, f)
            };
            format!("{}\n{d}{sc}{w}{sl}{l}{pr}{pl}{a}{f}", t.join("\n"))
        })
}

// ---- the property ------------------------------------------------------------------------

/// Keys that are legitimately null in a summary.
const NULLABLE: [&str; 6] = [
    ".slo.ttft",
    ".slo.tpot",
    ".slo.e2e",
    ".truncated",
    ".steady_state",
    ".disaggregation.kv_transfer_bandwidth_gb_s",
];

fn check_finite(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Null if NULLABLE.contains(&path) || path.ends_with(".half_width") => Ok(()),
        Value::Null => Err(format!("null (NaN or infinity) at {path}")),
        Value::Number(n) if !n.as_f64().is_some_and(f64::is_finite) => {
            Err(format!("non-finite {n} at {path}"))
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| check_finite(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m
            .iter()
            .try_for_each(|(k, x)| check_finite(x, &format!("{path}.{k}"))),
        _ => Ok(()),
    }
}

/// Outcome of one scenario: which stage stopped it.
#[derive(Debug)]
enum Outcome {
    ParseError,
    ResolveError,
    RunError,
    Ran,
}

/// Parses, resolves and runs `text`; Err describes a property violation.
fn exercise(text: &str, origin: &str) -> Result<Outcome, String> {
    let input = |stage: &str, e: servesim::Error| {
        if std::env::var_os("SERVESIM_FUZZ_VERBOSE").is_some() {
            eprintln!("{stage}: {e}");
        }
        if e.is_input_error() {
            let msg = e.to_string();
            if msg.trim().is_empty() {
                Err(format!("{stage}: empty error message"))
            } else {
                Ok(())
            }
        } else {
            Err(format!("{stage}: not an input error: {e}"))
        }
    };
    let mut sc = match Scenario::parse(text, origin, &[]) {
        Ok(sc) => sc,
        Err(e) => return input("parse", e).map(|_| Outcome::ParseError),
    };
    // Keep the run short: at most MAX_REQUESTS requests and MAX_EVENTS events.
    let w = &mut sc.workload;
    let is_trace = matches!(w.arrival, servesim::workload::ArrivalConfig::Trace { .. });
    w.num_requests = match w.num_requests {
        Some(n) => Some(n.min(MAX_REQUESTS)),
        None if w.duration_s.is_some() && !is_trace => Some(MAX_REQUESTS),
        None => None,
    };
    sc.limits.max_events = sc.limits.max_events.min(MAX_EVENTS);
    let resolved = match sc.resolve(origin) {
        Ok(r) => r,
        Err(e) => return input("resolve", e).map(|_| Outcome::ResolveError),
    };
    // Keep a request log so that the steady-state analysis runs on every random scenario too.
    let result = match resolved.with_request_log(1 << 20).run() {
        Ok(r) => r,
        Err(e) => return input("run", e).map(|_| Outcome::RunError),
    };
    let s = &result.summary;
    let v = serde_json::to_value(s).map_err(|e| format!("summary does not serialize: {e}"))?;
    check_finite(&v, "")?;
    // Conservation: every request that arrived completed, failed (rejected, timed out, lost)
    // or is still in flight when a limit stopped the run.
    if s.completed + s.failed + s.in_flight != s.arrived {
        return Err(format!(
            "completed {} + failed {} + in flight {} != arrived {}",
            s.completed, s.failed, s.in_flight, s.arrived
        ));
    }
    if s.truncated.is_none() && s.in_flight != 0 {
        return Err(format!(
            "{} requests in flight after a complete run",
            s.in_flight
        ));
    }
    for (q, ms) in result
        .ttft_cdf
        .iter()
        .chain(&result.tpot_cdf)
        .chain(&result.e2e_cdf)
    {
        if !(q.is_finite() && ms.is_finite()) {
            return Err(format!("non-finite CDF point ({q}, {ms})"));
        }
    }
    Ok(Outcome::Ran)
}

/// Runs [`exercise`] on its own thread with a time-out, so that a hang fails the case
/// instead of the whole test binary. A panic shows as a disconnected channel.
fn exercise_with_timeout(text: &str) -> Result<Outcome, String> {
    let origin = fixtures().join("fuzz.toml").display().to_string();
    let (tx, rx) = mpsc::channel();
    let owned = text.to_string();
    std::thread::Builder::new()
        .name("fuzz-case".into())
        .spawn(move || {
            let _ = tx.send(exercise(&owned, &origin));
        })
        .unwrap();
    match rx.recv_timeout(CASE_TIMEOUT) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("hang: over {CASE_TIMEOUT:?}")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("panicked".into()),
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Failures are shrunk to a minimal scenario; keep that bounded.
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Counts of each outcome, printed at the end (`--nocapture`) to show the cases reach every
/// stage.
#[derive(Default)]
struct Tally {
    parse: u64,
    resolve: u64,
    run: u64,
    ran: u64,
}

impl Tally {
    fn cases(&self) -> u64 {
        self.parse + self.resolve + self.run + self.ran
    }
}

/// Runs `cases` random scenarios on `threads` runners (each with its own seed, drawn at
/// random unless `PROPTEST_RNG_SEED` fixes them); panics with the first failing scenario.
/// Returns the tally.
fn fuzz_on(cases: u32, threads: u32) -> Tally {
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    use std::sync::Mutex;
    let tally = Mutex::new(Tally::default());
    let t0 = std::time::Instant::now();
    let base: u64 = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand_seed);
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for k in 0..threads {
            let (tally, failure) = (&tally, &failure);
            let share = cases / threads + u32::from(k < cases % threads);
            scope.spawn(move || {
                let mut seed = [0u8; 32];
                seed[..8].copy_from_slice(&base.wrapping_add(k as u64).to_le_bytes());
                let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
                let mut runner = TestRunner::new_with_rng(config(share), rng);
                let result = runner.run(&scenario_text(), |text| {
                    match exercise_with_timeout(&text) {
                        Ok(o) => {
                            let mut t = tally.lock().unwrap();
                            match o {
                                Outcome::ParseError => t.parse += 1,
                                Outcome::ResolveError => t.resolve += 1,
                                Outcome::RunError => t.run += 1,
                                Outcome::Ran => t.ran += 1,
                            }
                            Ok(())
                        }
                        Err(why) => Err(TestCaseError::fail(format!(
                            "{why}\n--- scenario ---\n{text}"
                        ))),
                    }
                });
                if let Err(e) = result {
                    failure
                        .lock()
                        .unwrap()
                        .get_or_insert(format!("seed {}: {e}", base.wrapping_add(k as u64)));
                }
            });
        }
    });
    let t = tally.into_inner().unwrap();
    eprintln!(
        "fuzz_scenarios: {} cases in {:.1} s on {threads} thread(s) (seeds from {base}): {} parse errors, {} resolve errors, {} run errors, {} simulated",
        t.cases(),
        t0.elapsed().as_secs_f64(),
        t.parse,
        t.resolve,
        t.run,
        t.ran
    );
    if let Some(e) = failure.into_inner().unwrap() {
        panic!("{e}");
    }
    t
}

/// A seed from the clock and the process (the runs differ; the seed is printed to replay one).
fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ ((std::process::id() as u64) << 32)
}

fn fuzz(cases: u32, threads: u32) {
    let t = fuzz_on(cases, threads);
    // The generator reaches every stage, and the simulator in at least half of the cases.
    assert!(t.resolve > 0 && t.parse > 0, "no parse or resolve error");
    assert!(
        2 * t.ran >= t.cases(),
        "only {} of {} cases reached the simulator",
        t.ran,
        t.cases()
    );
}

#[test]
fn random_scenarios_never_panic_hang_or_produce_nan() {
    fuzz(256, 1);
}

/// Threads of the long runs: every core.
fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

#[test]
#[ignore = "10,000 cases: cargo test --release --test fuzz_scenarios -- --ignored --nocapture"]
fn random_scenarios_never_panic_hang_or_produce_nan_10k() {
    fuzz(10_000, cores());
}

#[test]
#[ignore = "1,000,000 cases, on every core: cargo test --release --test fuzz_scenarios one_million -- --ignored --nocapture"]
fn random_scenarios_never_panic_hang_or_produce_nan_one_million() {
    fuzz(1_000_000, cores());
}

#[test]
fn the_generator_can_produce_a_scenario_that_runs() {
    // A fixed, valid scenario through the same path, as a sanity check of `exercise`.
    let text = "[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n\
                [workload]\n\
                [workload.arrival]\nkind = \"trace\"\npath = \"good.trace.csv\"\n";
    assert!(matches!(exercise_with_timeout(text), Ok(Outcome::Ran)));
}
