//! Speculative decoding (issue #31): no table or K = 0 changes nothing; with a fixed acceptance
//! the speedup falls as concurrency rises and drops below 1; acceptance 0 costs time; the
//! reported acceptance length, measured over the requests' decode lengths, is the input's
//! expectation for long outputs and what the capped last step allows for short ones (a Monte
//! Carlo oracle); the fast-forward stays the oracle's
//! equal; the step-time contract holds for verify steps; bad input names its key.
//!
//!     cargo test --release --test speculative

mod common;

use common::{fixed_offline_workload, one_deployment_plan_args, run_toml, servesim};
use servesim::scenario::Scenario;
use servesim::speculative::expected_acceptance_length;
use servesim::step_time::BatchShape;
use servesim::summary::RunSummary;

/// A closed loop of `concurrency` clients on Llama-3.1-8B / H100, fixed 256 / 256 tokens,
/// with `spec` appended (a `[speculative]` table or nothing).
fn closed_loop(concurrency: u32, spec: &str) -> String {
    let n = (concurrency * 3).max(60);
    format!(
        r#"seed = 3
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
engine = "trtllm"
{workload}{spec}"#,
        workload = fixed_offline_workload(
            &format!("num_requests = {n}\nmax_concurrency = {concurrency}"),
            256,
            256
        )
    )
}

const EAGLE3_K3_P06: &str = r#"[speculative]
method = "eagle3"
num_speculative_tokens = 3
acceptance_rate = 0.6
"#;

fn speedup(concurrency: u32, spec: &str) -> (f64, RunSummary) {
    let plain = run_toml(&closed_loop(concurrency, ""));
    let fast = run_toml(&closed_loop(concurrency, spec));
    assert_eq!(fast.completed, plain.completed);
    (fast.output_throughput / plain.output_throughput, fast)
}

#[test]
fn without_a_table_or_with_k_0_every_figure_is_the_same() {
    let text = closed_loop(16, "");
    let plain = serde_json::to_string(&run_toml(&text)).unwrap();
    let k0 = closed_loop(
        16,
        "[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 0\n",
    );
    assert_eq!(serde_json::to_string(&run_toml(&k0)).unwrap(), plain);
}

/// K = 0 is no speculation whatever acceptance the table still holds (a list for another K, a
/// measured mean length): it runs, and every figure equals the run without a table.
#[test]
fn k_0_ignores_the_acceptance_input() {
    let plain = serde_json::to_string(&run_toml(&closed_loop(16, ""))).unwrap();
    for acceptance in [
        "acceptance_rate = [0.9, 0.8, 0.7]",
        "mean_acceptance_length = 2.8",
    ] {
        let k0 = closed_loop(
            16,
            &format!(
                "[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 0\n{acceptance}\n"
            ),
        );
        assert_eq!(
            serde_json::to_string(&run_toml(&k0)).unwrap(),
            plain,
            "{acceptance}"
        );
    }
}

#[test]
fn the_speedup_falls_with_concurrency_and_drops_below_1() {
    let mut last = f64::INFINITY;
    let mut seen = Vec::new();
    for c in [1, 16, 64, 256] {
        let (s, _) = speedup(c, EAGLE3_K3_P06);
        seen.push((c, s));
        assert!(s < last * 1.02, "speedup rose with concurrency: {seen:?}");
        last = s;
    }
    eprintln!("speedup by concurrency: {seen:?}");
    assert!(seen[0].1 > 1.5, "{seen:?}");
    assert!(seen.last().unwrap().1 < 1.0, "{seen:?}");
}

#[test]
fn acceptance_0_costs_time() {
    let spec =
        "[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 3\nacceptance_rate = 0.0\n";
    for c in [1, 64] {
        let (s, r) = speedup(c, spec);
        assert!(
            s < 1.0,
            "concurrency {c}: speedup {s} with nothing accepted"
        );
        assert_eq!(r.spec_decode_mean_acceptance_length, Some(1.0));
    }
}

/// The reported acceptance length (measured: tokens per verify step over the requests'
/// actual decode lengths) against the input's expectation (per-position rates:
/// `1 + sum_k prod_{i<=k} p_i`, computed here), within 3% for 256-token outputs, and never
/// above it (a request's last step gains at most what is left), for each way of giving it.
#[test]
fn the_reported_acceptance_length_is_the_inputs_expectation() {
    for (table, expected) in [
        (
            "acceptance_rate = [0.9, 0.7, 0.5]",
            expected_acceptance_length(&[0.9, 0.7, 0.5]),
        ),
        ("acceptance_rate = 0.8", 1.0 + 0.8 + 0.64 + 0.512),
        ("mean_acceptance_length = 2.4", 2.4),
    ] {
        let spec =
            format!("[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 3\n{table}\n");
        let r = run_toml(&closed_loop(8, &spec));
        let got = r.spec_decode_mean_acceptance_length.unwrap();
        eprintln!("{table}: reported {got:.4}, expected {expected:.4}");
        assert!(
            (got / expected - 1.0).abs() < 0.03 && got <= expected,
            "{table}: {got} vs {expected}"
        );
        let (d, v) = (
            r.spec_decode_draft_share.unwrap(),
            r.spec_decode_verify_share.unwrap(),
        );
        assert!(d > 0.0 && v > d && (d + v - 1.0).abs() < 1e-9, "{d} {v}");
    }
}

/// One request at a time (every decode step a verify step), `output` tokens each, with
/// `spec` (the first token comes from the prefill: `output - 1` decode tokens).
fn lone_requests(output: u32, spec: &str) -> RunSummary {
    let text = format!(
        r#"seed = 3
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
engine = "trtllm"
{workload}[speculative]
method = "eagle3"
{spec}
"#,
        workload = fixed_offline_workload("num_requests = 6\nmax_concurrency = 1", 64, output)
    );
    run_toml(&text)
}

/// Verify steps of `d` decode tokens, sampled (seeded): per step, drafts accepted in order
/// with `rates` until the first rejection, plus the bonus token; the last step capped by the
/// tokens left. Returns the mean and its standard error over `n` requests.
fn sampled_verify_steps(rates: &[f64], d: u32, n: u32, seed: u64) -> (f64, f64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut sum, mut sq) = (0.0, 0.0);
    for _ in 0..n {
        let (mut left, mut steps) = (d as i64, 0.0);
        while left > 0 {
            let accepted = rates.iter().take_while(|&&p| rng.gen::<f64>() < p).count();
            left -= 1 + accepted as i64;
            steps += 1.0;
        }
        sum += steps;
        sq += steps * steps;
    }
    let mean = sum / n as f64;
    (
        mean,
        ((sq / n as f64 - mean * mean).max(0.0) / n as f64).sqrt(),
    )
}

/// Short outputs gain what their last step can: a 2-token output (one decode token) reports
/// 1.0; with every draft accepted (G = K + 1 = 4 surely) d tokens take ceil(d / 4) steps, so
/// never more than K + 1 per step; and the reported figure is d / E[N(d)] with E[N(d)] the
/// Monte Carlo of the capped acceptance process (within 4 standard errors), for rates, a rate
/// list and a mean length (its uniform-rate equivalent, solved here by bisection).
#[test]
fn short_outputs_report_what_their_last_step_can_gain() {
    let l = |output: u32, spec: &str| {
        lone_requests(output, spec)
            .spec_decode_mean_acceptance_length
            .unwrap()
    };
    assert_eq!(
        l(2, "num_speculative_tokens = 3\nacceptance_rate = 0.8"),
        1.0
    );
    for output in 2..=14u32 {
        let d = output - 1;
        let got = l(output, "num_speculative_tokens = 3\nacceptance_rate = 1.0");
        let want = d as f64 / d.div_ceil(4) as f64;
        assert!((got - want).abs() < 1e-12 && got <= 4.0, "d = {d}: {got}");
    }
    let p_for = |mean: f64| {
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..60 {
            let p = 0.5 * (lo + hi);
            if 1.0 + p + p * p + p * p * p < mean {
                lo = p;
            } else {
                hi = p;
            }
        }
        0.5 * (lo + hi)
    };
    for (table, rates, output) in [
        ("acceptance_rate = 0.7", vec![0.7; 3], 17),
        ("acceptance_rate = [0.9, 0.7, 0.5]", vec![0.9, 0.7, 0.5], 9),
        ("acceptance_rate = 0.7", vec![0.7; 3], 6),
        ("mean_acceptance_length = 2.4", vec![p_for(2.4); 3], 17),
    ] {
        let d = output - 1;
        let got = l(output, &format!("num_speculative_tokens = 3\n{table}"));
        let (steps, se) = sampled_verify_steps(&rates, d, 200_000, 11);
        let reported_steps = d as f64 / got;
        assert!(
            (reported_steps - steps).abs() < 4.0 * se,
            "{table}, d = {d}: reported {got} ({reported_steps} steps), sampled {steps} +- {se}"
        );
        assert!(got < expected_acceptance_length(&rates), "{table}: {got}");
    }
}

/// Every token a speculating iteration made belongs to one completed request: the
/// per-request counts the measured length is computed from add up to the iterations' tokens,
/// with plain steps above a batch limit, mixed (prefill) iterations, preemptions (a small KV
/// pool) and disaggregated decode replicas (requests landing while an iteration is in flight).
#[test]
fn the_per_request_speculated_tokens_add_up_to_the_iterations() {
    use servesim::sim::{simulate, simulate_disaggregated};
    use servesim::workload::RequestGenerator;
    let varied = "num_requests = 300\n[workload.input]\nkind = \"uniform\"\nmean = 600\n\
                  range_ratio = 0.9\n[workload.output]\nkind = \"uniform\"\nmean = 150\n\
                  range_ratio = 0.99\n[workload.arrival]\nkind = \"poisson\"\nrate_per_s = 8.0\n";
    let base = "seed = 4\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n";
    let spec = "[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 3\n";
    let cases = [
        (
            format!("{base}[workload]\n{varied}{spec}disable_by_batch_size = 6\n"),
            None,
        ),
        (format!("{base}[workload]\n{varied}{spec}"), Some(220u64)),
        (
            format!(
                "{base}mode = \"disaggregated\"\n[deployment.prefill]\nreplicas = 1\n\
                 [deployment.decode]\nreplicas = 2\n[workload]\n{varied}{spec}"
            ),
            None,
        ),
    ];
    for (text, kv_blocks) in cases {
        let mut r = Scenario::parse(&text, "t", &[])
            .unwrap()
            .resolve("t")
            .unwrap();
        if let Some(b) = kv_blocks {
            r.sim.scheduler.kv_blocks = b;
        }
        let mut gen = RequestGenerator::new(&r.scenario.workload, r.sim.seed, "t").unwrap();
        let out = match r.pool_step_models().unwrap() {
            Some((prefill, decode)) => simulate_disaggregated(&r.sim, &prefill, &decode, &mut gen),
            None => simulate(&r.sim, &r.step_model().unwrap(), &mut gen),
        };
        let m = &out.metrics;
        assert_eq!(m.completed, 300, "{text}");
        let counted = m.speculated_lengths.tokens();
        assert!(m.speculated_tokens > 0, "{text}");
        assert!(m.speculated_tokens < m.generated_tokens, "{text}");
        assert_eq!(counted, m.speculated_tokens, "{text}");
        if kv_blocks.is_some() {
            assert!(m.preemptions > 0, "no preemption: {text}");
        }
    }
}

/// The time the mean-field simulator charges for d speculated tokens, d / L verify steps,
/// against the E[N(d)] steps they take (each request's last step capped), for the
/// uniform-rate chains of L = 2.5, 3.0, 3.5 at K = 3 and 7: the percentages
/// docs/speculative-decoding.md states under Limits, which an independent renewal recursion
/// (Python, floating point) gave to three decimals. `-- --nocapture` prints the table.
#[test]
fn the_mean_field_undercharges_short_outputs_by_the_stated_gap() {
    use servesim::speculative::{AcceptanceLengths, VerifySteps};
    let stated = [
        (3, 2.5, [6.580, 0.825, 0.206]),
        (3, 3.0, [7.485, 0.969, 0.242]),
        (3, 3.5, [6.686, 1.082, 0.270]),
        (7, 2.5, [8.723, 1.091, 0.273]),
        (7, 3.0, [10.935, 1.370, 0.342]),
        (7, 3.5, [12.743, 1.606, 0.401]),
    ];
    for (k, l, gaps) in stated {
        let steps = VerifySteps::new(&AcceptanceLengths::from_mean(k, l), 512);
        for (d, gap) in [16u64, 128, 512].into_iter().zip(gaps) {
            let exact = steps.expected(d);
            let got = 100.0 * (exact / (d as f64 / l) - 1.0);
            eprintln!(
                "K = {k}, L = {l}, d = {d}: E[N] = {exact:.2} steps, d / L = {:.2}, {got:.3}% more",
                d as f64 / l
            );
            assert!(
                (got - gap).abs() < 6e-4,
                "K = {k}, L = {l}, d = {d}: {got} vs {gap}"
            );
        }
    }
}

/// INV-7 with speculation: the fast-forwarded run equals the one timed iteration by
/// iteration, at a low rate (long runs) and in a closed loop.
#[test]
fn the_fast_forward_matches_the_oracle_with_speculation() {
    let low_rate = format!(
        "{}{EAGLE3_K3_P06}",
        closed_loop(4, "").replace("kind = \"offline\"", "kind = \"poisson\"\nrate_per_s = 2.0")
    );
    for text in [closed_loop(32, EAGLE3_K3_P06), low_rate] {
        let run = |ff: bool| {
            let set = [format!("limits.fast_forward={ff}")];
            let r = Scenario::parse(&text, "t", &set)
                .unwrap()
                .resolve("t")
                .unwrap()
                .run()
                .unwrap();
            serde_json::to_value(&r.summary).unwrap()
        };
        let (fast, oracle) = (run(true), run(false));
        for key in [
            "completed",
            "generated_tokens",
            "iterations",
            "duration",
            "mean_tpot_ms",
            "mean_ttft_ms",
            "output_throughput",
            "spec_decode_mean_acceptance_length",
        ] {
            assert_eq!(fast[key], oracle[key], "{key}\n{text}");
        }
    }
}

/// S2 and S4 for verify steps: a speculating model times decode-only batches by its decode
/// step function, which never shrinks with the context and walks runs exactly.
#[test]
fn the_step_time_contract_holds_for_verify_steps() {
    for spec in [
        EAGLE3_K3_P06,
        "[speculative]\nmethod = \"ngram\"\nnum_speculative_tokens = 4\nacceptance_rate = 0.5\n",
        "[speculative]\nmethod = \"draft_model\"\nmodel = \"llama-3.1-8b\"\nnum_speculative_tokens = 2\nmean_acceptance_length = 2.0\n",
    ] {
        let text = closed_loop(8, spec).replace("llama-3.1-8b\"\ngpu", "llama-3.1-70b\"\ntp = 4\ngpu");
        let r = Scenario::parse(&text, "t", &[]).unwrap().resolve("t").unwrap();
        let m = r.step_model().unwrap();
        assert!(m.speculation().is_some());
        for batch in [1u32, 7, 64, 300] {
            let shape = BatchShape::decode(batch, 0);
            let d = m.decode_step(&shape).unwrap();
            let mut prev = 0;
            let mut walk = d.times(100, batch as u64, 0);
            for k in 0..2000u64 {
                let ctx = 100 + k * batch as u64;
                let ns = m.step_ns(&BatchShape::decode_total(batch, ctx)).unwrap();
                assert_eq!(ns, d.ns_at(ctx).unwrap());
                assert_eq!(walk.next_ns(), ns);
                assert!(ns >= prev && ns >= 1);
                prev = ns;
            }
        }
    }
}

/// `disable_by_batch_size`: batches above it decode as without speculation.
#[test]
fn speculation_switches_off_above_the_batch_limit() {
    let spec = format!("{EAGLE3_K3_P06}disable_by_batch_size = 32\n");
    let r = Scenario::parse(&closed_loop(8, &spec), "t", &[])
        .unwrap()
        .resolve("t")
        .unwrap();
    let on = r.step_model().unwrap();
    let plain = Scenario::parse(&closed_loop(8, ""), "t", &[])
        .unwrap()
        .resolve("t")
        .unwrap()
        .step_model()
        .unwrap();
    let at = |m: &servesim::roofline::StepTimeModel, b: u32| {
        m.step_ns(&BatchShape::decode(b, 512)).unwrap()
    };
    assert_ne!(at(&on, 32), at(&plain, 32));
    assert_eq!(at(&on, 33), at(&plain, 33));
}

#[test]
fn bench_takes_vllms_speculative_config_and_reports_the_acceptance() {
    let args = |spec: Option<&str>| {
        let mut a = vec![
            "bench",
            "--model",
            "llama-3.1-8b",
            "--engine",
            "trtllm",
            "--input-len",
            "128",
            "--output-len",
            "128",
            "--num-prompts",
            "50",
            "--max-concurrency",
            "4",
            "--format",
            "json",
        ];
        if let Some(s) = spec {
            a.extend(["--speculative-config", s]);
        }
        servesim(&a)
    };
    let (code, out, err) = args(Some(
        r#"{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}"#,
    ));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Measured over 127 decode tokens per request: within 3% of the input's expectation, and
    // under it (each request's last step is capped by the tokens left).
    let l = v["spec_decode_mean_acceptance_length"].as_f64().unwrap();
    let expected = 1.0 + 0.7 + 0.49 + 0.343;
    assert!(l <= expected && l / expected > 0.97, "{l}");
    assert!(v["spec_decode_draft_share"].as_f64().unwrap() > 0.0);
    let (_, plain, _) = args(None);
    assert!(!plain.contains("spec_decode"));
    let (code, k0, err) = args(Some(
        r#"{"method": "eagle3", "num_speculative_tokens": 0, "mean_acceptance_length": 2.5}"#,
    ));
    assert_eq!(code, 0, "K = 0 ignores the acceptance: {err}");
    assert_eq!(k0, plain);
    // vLLM's `model` for an EAGLE-3 head is accepted (the head is sized from the target).
    let (code, head, err) = args(Some(
        r#"{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3, "acceptance_rate": 0.7}"#,
    ));
    assert_eq!(code, 0, "{err}");
    assert_eq!(head, out);
    for (bad, key) in [
        (
            r#"{"method": "medusa", "num_speculative_tokens": 3}"#,
            "speculative.method",
        ),
        (
            r#"{"method": "ngram", "num_speculative_tokens": 3}"#,
            "speculative.acceptance_rate",
        ),
        (
            r#"{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": [0.5]}"#,
            "speculative.acceptance_rate",
        ),
        (
            r#"{"method": "draft_model", "num_speculative_tokens": 3, "mean_acceptance_length": 2, "model": "no-such"}"#,
            "speculative.model",
        ),
        (
            // vLLM's rule: the draft's TP is 1 or the target's (TP 1 here).
            r#"{"method": "draft_model", "num_speculative_tokens": 3, "mean_acceptance_length": 2, "model": "llama-2-7b", "tp": 8}"#,
            "speculative.tp",
        ),
        (
            // The same under vLLM's spelling of the key.
            r#"{"method": "draft_model", "num_speculative_tokens": 3, "mean_acceptance_length": 2, "model": "llama-2-7b", "draft_tensor_parallel_size": 8}"#,
            "speculative.tp",
        ),
        (
            r#"{"method": "eagle3", "num_speculative_tokens": 3, "foo": 1}"#,
            "foo",
        ),
        ("not json", "--speculative-config"),
    ] {
        let (code, _, err) = args(Some(bad));
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains(key), "{bad}: {err}");
    }
}

/// `plan` on the chat scenario with EAGLE-3 (two candidates: one deployment without and with
/// K = 3) says whether speculation pays at the target and what a million output tokens costs
/// with and without it; its re-run line sets K.
#[test]
fn plan_reports_whether_speculation_pays_and_the_cost_with_and_without() {
    let args = one_deployment_plan_args(
        "scenarios/chat-slo-eagle3.toml",
        &["plan.speculative=[0, 3]"],
    );
    let (code, out, err) = plan_out_of_tree(&[&args[..], &["--format", "json"][..]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plan = if v.get("plan").is_some() {
        &v["plan"]
    } else {
        &v
    };
    let s = &plan["speculation"];
    let with = s["with"][1]
        .as_f64()
        .expect("a feasible fleet with speculation");
    let without = s["without"][1].as_f64().expect("a feasible fleet without");
    assert!(with > 0.0 && without > 0.0, "{s}");
    // The JSON verdict says what the text says: a difference under the search's 3%
    // resolution is a tie, and pays_at_target is true only when the verdict is "pays".
    let expected = if (with / without - 1.0).abs() < 0.03 {
        "equal_within_resolution"
    } else if with < without {
        "pays"
    } else {
        "does_not_pay"
    };
    assert_eq!(s["verdict"], expected, "{s}");
    assert_eq!(
        s["pays_at_target"].as_bool().unwrap(),
        expected == "pays",
        "{s}"
    );
    // The verdict's speedups fall with the batch, and the break-even is where they cross 1.
    let by_batch = s["speedup_by_batch"].as_array().unwrap();
    let first = by_batch[0][1].as_f64().unwrap();
    let last = by_batch.last().unwrap()[1].as_f64().unwrap();
    assert!(first > last, "{s}");
    if let Some(b) = s["stops_paying_at_batch"].as_u64() {
        assert!(by_batch
            .iter()
            .all(|p| (p[0].as_u64().unwrap() < b) == (p[1].as_f64().unwrap() >= 1.0)));
    }
    // The text report says it in words.
    let (code, text, err) = plan_out_of_tree(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("Speculative decoding at 40.0 req/s"),
        "{text}"
    );
    assert!(
        text.contains("speculative.num_speculative_tokens="),
        "{text}"
    );
    let tie = text.contains("cost the same within the search's resolution");
    assert_eq!(tie, expected == "equal_within_resolution", "{text}");
}

/// `servesim ARGS` (a `plan`) with its report folder in a fresh temporary directory: plans that
/// tests run at the same time in the repository root would otherwise share
/// `servesim-report/`, and one's rename could race another's.
fn plan_out_of_tree(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    servesim(&[args, &["--out", out.to_str().unwrap()]].concat())
}

/// `servesim plan` on chat-slo-eagle3 (h100-sxm TP2, 256 seqs) with `sets` added; the JSON
/// plan's speculation verdict and the text report.
fn small_plan(sets: &[&str]) -> (serde_json::Value, String) {
    let mut a = one_deployment_plan_args("scenarios/chat-slo-eagle3.toml", sets);
    let (code, text, err) = plan_out_of_tree(&a);
    assert_eq!(code, 0, "{sets:?}: {err}");
    a.extend(["--format", "json"]);
    let (code, out, err) = plan_out_of_tree(&a);
    assert_eq!(code, 0, "{sets:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plan = if v.get("plan").is_some() {
        v["plan"].clone()
    } else {
        v
    };
    (plan["speculation"].clone(), text)
}

/// A per-position list for K = 3 serves the K = 0 candidates (ignored) and K = 1 (its first
/// rate): without speculation has a feasible fleet.
#[test]
fn plan_with_a_rate_list_searches_k_0_and_smaller_k() {
    let (s, text) = small_plan(&[
        "speculative.acceptance_rate=[0.9, 0.8, 0.7]",
        "plan.speculative=[0, 1, 3]",
    ]);
    assert_eq!(s["without_outcome"], "feasible", "{s}\n{text}");
    assert!(s["without"][1].as_f64().is_some(), "{s}");
    assert!(!text.contains("without: no feasible fleet"), "{text}");
    // A K beyond the list's length is refused, naming the key.
    assert_plan_refused(
        "scenarios/chat-slo-eagle3.toml",
        &[
            "speculative.acceptance_rate=[0.9, 0.8, 0.7]",
            "plan.speculative=[0, 4]",
        ],
        &["plan.speculative[1]", "exceeds the 3 rates"],
    );
}

/// `servesim plan SCENARIO` with `sets` exits 2 with one `error:` line holding every fragment
/// of `wanted`, without a panic.
fn assert_plan_refused(scenario: &str, sets: &[&str], wanted: &[&str]) {
    let mut a = vec!["plan", scenario];
    for s in sets {
        a.extend(["--set", s]);
    }
    let (code, _, err) = servesim(&a);
    assert_eq!(code, 2, "{a:?}: {err}");
    assert!(
        err.starts_with("error:") && !err.contains("panicked"),
        "{err}"
    );
    for w in wanted {
        assert!(err.contains(w), "{a:?}: expected {w:?} in: {err}");
    }
}

/// A side `plan.speculative` does not list is "not searched", not "no feasible fleet", and
/// with no K >= 1 no speedup by batch is claimed.
#[test]
fn plan_verdict_says_which_side_was_not_searched() {
    let (s, text) = small_plan(&["plan.speculative=[0]"]);
    assert_eq!(s["with_outcome"], "not_searched", "{s}");
    assert_eq!(s["verdict"], "not_compared", "{s}");
    assert_eq!(s["pays_at_target"], false, "{s}");
    assert!(s["speedup_by_batch"].as_array().unwrap().is_empty(), "{s}");
    assert!(!text.contains("with:    no feasible fleet"), "{text}");
    assert!(text.contains("with:    not searched"), "{text}");
    assert!(
        !text.contains("at every batch up to max_num_seqs"),
        "{text}"
    );
    let (s, text) = small_plan(&["plan.speculative=[3, 3]"]);
    assert_eq!(s["without_outcome"], "not_searched", "{s}");
    assert!(text.contains("without: not searched"), "{text}");
}

/// `plan.speculative` needs a `[speculative]` table, and a K other than the table's needs the
/// acceptance as one rate (a mean length holds for the table's K only).
#[test]
fn plan_speculative_needs_a_table_and_one_rate_to_vary_k() {
    assert_plan_refused(
        "scenarios/chat-slo.toml",
        &["plan.speculative=[0, 3]"],
        &["plan.speculative"],
    );
    // chat-slo-eagle3 with a measured mean length (for K = 3) in place of the rate.
    let text = std::fs::read_to_string("scenarios/chat-slo-eagle3.toml").unwrap();
    let rate = "acceptance_rate = 0.72";
    assert!(text.contains(rate));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eagle3-mean-length.toml");
    std::fs::write(&path, text.replace(rate, "mean_acceptance_length = 2.5")).unwrap();
    assert_plan_refused(
        path.to_str().unwrap(),
        &["plan.speculative=[0, 3, 1]"],
        &["plan.speculative[2]", "K = 1 differs", "mean length"],
    );
}

/// The doc's EAGLE-3 default row states what p = 0.72 gives (2.61 at K = 3, 3.31 at K = 7),
/// not the source's 2.70 as if the default reproduced it.
#[test]
fn the_eagle3_default_row_states_what_the_default_gives() {
    use servesim::speculative::EAGLE3_DEFAULT_RATE;
    let doc = std::fs::read_to_string("docs/speculative-decoding.md").unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `eagle3` |"))
        .expect("the eagle3 default row");
    let l3 = expected_acceptance_length(&[EAGLE3_DEFAULT_RATE; 3]);
    let l7 = expected_acceptance_length(&[EAGLE3_DEFAULT_RATE; 7]);
    assert!(row.contains(&format!("= {l3:.2} at K = 3")), "{l3}: {row}");
    assert!(row.contains(&format!("{l7:.2} at K = 7")), "{l7}: {row}");
    assert!(!row.contains("chain expectation 2.70"), "{row}");
}

/// The doc says what `spec_decode_speedup` measures (the step at the run's batch, not the run
/// against a run without speculation) and how to compare runs.
#[test]
fn the_speedup_field_is_documented_as_a_per_step_gain() {
    let doc = std::fs::read_to_string("docs/speculative-decoding.md").unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `spec_decode_speedup` |"))
        .expect("the spec_decode_speedup row");
    assert!(!row.contains("speculation pays there"), "{row}");
    assert!(row.contains("per-step token gain"), "{row}");
    assert!(doc.contains("does not mean the run got faster"));
    assert!(doc.contains("For MoE targets"));
}
