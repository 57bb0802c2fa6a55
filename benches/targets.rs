//! The performance targets of docs/performance.md (docs/architecture.md, "Speed"), one benchmark each:
//!
//! - (a) `run-1m-80pct`: 1,000,000 ShareGPT requests on Llama-3.1-8B / 1x H100 SXM (TP 1, bf16,
//!   vLLM with max_num_seqs 256 and a 2048-token budget, pinned so figures stay comparable
//!   across engine-default changes), Poisson arrivals at 80% of the measured offline capacity
//!   (66.5 req/s).
//!   Target: >= 1,000,000 simulated requests per wall second.
//! - (b) `run-1m-saturated-preempting`: the same requests offline (all at t = 0) with
//!   `scheduler.gpu_memory_utilization = 0.3`, so the KV cache (65,584 tokens) fills and the
//!   scheduler preempts. Target: >= 300,000 requests per wall second.
//! - (c) `run-1m-8-replicas-lor`: 8 replicas behind least-outstanding-requests routing at
//!   8 x 53.2 = 425.6 req/s. Target: >= 300,000 requests per wall second.
//! - (d) `plan-chat-slo`: `servesim::plan::plan` on the embedded `servesim plan` scenario
//!   (scenarios/chat-slo.toml): steady-state capacity of 72 candidates, rate search and fleet
//!   sizing of the cheapest, verification, headroom, batch point and curve. Target: under 5 s
//!   (end-to-end CLI time: scripts/perf-bench.sh).
//! - (e) `sweep-100pt/threads-{1,2}`: a 100-point `servesim::plan::sweep` over
//!   `workload.arrival.rate_per_s=1..100:100`, each point measured in steady state (from 4,000
//!   requests, doubling until its intervals are within 2%, at most 32,000), on a local rayon
//!   pool of 1 and 2 threads. Targets: under 20 s on 2 threads; >= 1.8x from 1 to 2 threads.
//!
//! - (f) `plan-diurnal-week`: `servesim::plan::plan` on scenarios/diurnal-week.toml: the peak
//!   plan, hour-by-hour sizing and a week of 24.2 million requests simulated with the
//!   autoscaler for each of the two cheapest candidates. Target: under 60 s. Ten samples take
//!   several minutes: `cargo bench --bench targets -- week` runs it alone.
//!
//! - (g) `ff-1m-1rps`, `ff-1m-25rps`, `ff-1m-80pct-defaults` (issue #13, the fast-forward of
//!   decode-only runs): 1,000,000 ShareGPT requests as `servesim bench --dataset-name sharegpt
//!   --num-prompts 1000000` runs them (Llama-3.1-8B / 1x H100 SXM, vLLM's own defaults for the
//!   H100: 1,024 sequences, 8,192-token budget), Poisson at 1 req/s (batches of one or two),
//!   at 25 req/s, and at 58.1 req/s = 80% of that deployment's offline capacity (72.65 req/s:
//!   `servesim bench --dataset-name sharegpt --num-prompts 1000000`, request_throughput).
//!   Targets: >= 1,000,000 simulated requests per wall second at 1 and 25 req/s, >= 3,000,000
//!   at 80%. `cargo bench --bench targets -- ff` runs them alone.
//!
//! - (h) `run-1m-1p1d-25rps`: prefill/decode disaggregation, one prefill and one decode
//!   replica of Llama-3.1-8B / H100 SXM (TP 1, vLLM defaults) with the default KV link
//!   (50 GB/s, 20 us), 1,000,000 requests of 1,024 prompt and 128 output tokens (`servesim
//!   bench`'s random dataset) at 25 req/s, Poisson. Target: >= 500,000 requests per wall
//!   second.
//! - (i) `run-1m-1p1d-1rps`: the same at 1 req/s, where the decode replica's batches of one or
//!   two are fast-forwarded (issue #30: P/D runs share the colocated event loop; before, this
//!   ran at about 200,000 requests per wall second). Target: >= 500,000 requests per wall
//!   second.
//!
//! - (j) `spec-1m-1rps`, `spec-1m-25rps` (issue #31): (g)'s runs at 1 and 25 req/s with
//!   EAGLE-3 speculative decoding (K = 3, acceptance rate 0.7). Target: >= 1,000,000
//!   simulated requests per wall second (the verify step is a decode step function like any
//!   other, so the fast-forward books speculating runs in bulk). `cargo bench --bench targets
//!   -- spec` runs them alone.
//!
//! - (k) `run-multi-turn-trace` (issue #32): a Mooncake-format trace of 200,000 requests
//!   (`SERVESIM_BENCH_REQUESTS` / 5): 20,000 conversations of 10 turns, one starting every
//!   125 ms, turns 3 s apart (80 req/s), each turn resending its history (+512 tokens a turn,
//!   64 output tokens), on 4 replicas of Llama-3.1-8B / H100 behind the `prefix-aware` router
//!   with prefix caching (the trace's theoretical hit rate, 0.8187, is kept). Target:
//!   >= 1,000,000 simulated requests per wall second.
//!
//! `cargo bench --bench targets` (about 1-2 minutes, plus (f)). Criterion prints time per iteration and,
//! for (a)-(c), the throughput in elements (simulated requests) per second.
//! `scripts/perf-bench.sh` runs it and prints the table with the sweep speed-up.
//! Set `SERVESIM_BENCH_REQUESTS` to change the request count of (a)-(c) (default 1,000,000).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use servesim::plan::{parse_vary, plan, sweep};
use servesim::scenario::{Resolved, Scenario};

/// `servesim plan`'s embedded default.
const CHAT_SLO: &str = include_str!("../scenarios/chat-slo.toml");

/// Offline capacity of Llama-3.1-8B / H100 SXM / vLLM on ShareGPT, req/s: `servesim run
/// --set workload.arrival.kind=offline --set workload.num_requests=100000` (default scenario
/// with the deployment spelled out, `--set scheduler.max_num_seqs=256 --set
/// scheduler.max_num_batched_tokens=2048`) gives request_throughput = 66.46.
const CAPACITY_REQ_S: f64 = 66.5;

/// The scheduler settings every benchmark pins.
const PINNED: &str = "max_num_seqs = 256\nmax_num_batched_tokens = 2048";

fn requests() -> u64 {
    std::env::var("SERVESIM_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn scenario(requests: u64, replicas: u32, arrival: &str, scheduler: &str) -> Resolved {
    let text = format!(
        r#"
seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
tp = 1
dtype = "bf16"
engine = "vllm"
replicas = {replicas}
router = "least-outstanding"
[scheduler]
{scheduler}
[workload]
dataset = "sharegpt"
num_requests = {requests}
[workload.arrival]
{arrival}
"#
    );
    Scenario::parse(&text, "bench", &[])
        .and_then(|s| s.resolve("bench"))
        .expect("the benchmark scenario is valid")
}

/// `servesim bench --request-rate RATE --prefill-replicas 1 --decode-replicas 1` with
/// `requests`.
fn one_p_one_d(requests: u64, rate_per_s: f64) -> Resolved {
    let text = format!(
        r#"
seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
mode = "disaggregated"
[deployment.prefill]
replicas = 1
[deployment.decode]
replicas = 1
[workload]
num_requests = {requests}
input = {{ kind = "fixed", tokens = 1024 }}
output = {{ kind = "fixed", tokens = 128 }}
[workload.arrival]
kind = "poisson"
rate_per_s = {rate_per_s:.1}
"#
    );
    Scenario::parse(&text, "bench", &[])
        .and_then(|s| s.resolve("bench"))
        .expect("the benchmark scenario is valid")
}

fn runs(c: &mut Criterion) {
    let n = requests();
    let rate = 0.8 * CAPACITY_REQ_S;
    let cases = [
        (
            "run-1m-80pct",
            scenario(
                n,
                1,
                &format!("kind = \"poisson\"\nrate_per_s = {rate:.1}"),
                PINNED,
            ),
        ),
        (
            "run-1m-saturated-preempting",
            scenario(
                n,
                1,
                "kind = \"offline\"",
                &format!("{PINNED}\ngpu_memory_utilization = 0.3"),
            ),
        ),
        (
            "run-1m-8-replicas-lor",
            scenario(
                n,
                8,
                &format!("kind = \"poisson\"\nrate_per_s = {:.1}", 8.0 * rate),
                PINNED,
            ),
        ),
        ("run-1m-1p1d-25rps", one_p_one_d(n, 25.0)),
        ("run-1m-1p1d-1rps", one_p_one_d(n, 1.0)),
    ];
    let mut g = c.benchmark_group("targets");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(n));
    for (name, r) in &cases {
        // Setup: one run, to show what is being measured (and that (b) really preempts).
        let t = std::time::Instant::now();
        let s = r.run().expect("runs").summary;
        let wall = t.elapsed().as_secs_f64();
        eprintln!(
            "setup {name}: completed {} failed {} preemptions {} request_throughput {:.2} req/s \
             mean batch {:.1}, one run {:.3} s = {:.0} simulated req/s",
            s.completed,
            s.failed,
            s.preemptions,
            s.request_throughput,
            s.mean_batch_size,
            wall,
            n as f64 / wall
        );
        assert_eq!(s.completed, n, "{name}: every request completes");
        if name.contains("preempting") {
            assert!(
                s.preemptions > 0,
                "{name}: the KV cache must fill and preempt"
            );
        }
        g.bench_function(*name, |b| b.iter(|| r.run().expect("runs")));
    }
    g.finish();
}

/// Offline capacity of Llama-3.1-8B / H100 SXM with vLLM's H100 defaults on ShareGPT, req/s
/// (`servesim bench --dataset-name sharegpt --num-prompts 1000000`: request_throughput 72.65).
const BENCH_CAPACITY_REQ_S: f64 = 72.65;

fn fast_forward_runs(c: &mut Criterion) {
    let n = requests();
    let cases = [
        ("ff-1m-1rps", 1.0, 1_000_000.0),
        ("ff-1m-25rps", 25.0, 1_000_000.0),
        (
            "ff-1m-80pct-defaults",
            0.8 * BENCH_CAPACITY_REQ_S,
            3_000_000.0,
        ),
    ];
    let mut g = c.benchmark_group("targets");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(n));
    let spec =
        "[speculative]\nmethod = \"eagle3\"\nnum_speculative_tokens = 3\nacceptance_rate = 0.7";
    let cases = cases
        .iter()
        .map(|&(name, rate, target)| (name.to_string(), rate, target, false))
        .chain([
            ("spec-1m-1rps".to_string(), 1.0, 1_000_000.0, true),
            ("spec-1m-25rps".to_string(), 25.0, 1_000_000.0, true),
        ]);
    for (name, rate, target, speculate) in cases {
        let arrival = format!("kind = \"poisson\"\nrate_per_s = {rate:.2}");
        let r = if speculate {
            // The speculative table after the arrival table, at the document's top level.
            let text = format!(
                "seed = 1\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\n\
                 [workload]\ndataset = \"sharegpt\"\nnum_requests = {n}\n\
                 [workload.arrival]\n{arrival}\n{spec}\n"
            );
            Scenario::parse(&text, "bench", &[])
                .and_then(|s| s.resolve("bench"))
                .expect("the benchmark scenario is valid")
        } else {
            scenario(n, 1, &arrival, "")
        };
        let t = std::time::Instant::now();
        let s = r.run().expect("runs").summary;
        let wall = t.elapsed().as_secs_f64();
        eprintln!(
            "setup {name}: completed {} request_throughput {:.2} req/s mean batch {:.1}, one run \
             {wall:.3} s = {:.0} simulated req/s (target {target:.0})",
            s.completed,
            s.request_throughput,
            s.mean_batch_size,
            n as f64 / wall
        );
        assert_eq!(s.completed, n, "{name}: every request completes");
        g.bench_function(&name, |b| b.iter(|| r.run().expect("runs")));
    }
    g.finish();
}

fn planning(c: &mut Criterion) {
    let origin = "<embedded scenarios/chat-slo.toml>";
    let sc = Scenario::parse(CHAT_SLO, origin, &[]).expect("chat-slo parses");
    let mut g = c.benchmark_group("targets");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("plan-chat-slo", |b| {
        b.iter(|| plan(&sc, origin).expect("plans"))
    });
    g.finish();
}

fn sweeping(c: &mut Criterion) {
    let origin = "<embedded scenarios/chat-slo.toml>";
    let base = vec!["workload.num_requests=2000".to_string()];
    let vary = [parse_vary("workload.arrival.rate_per_s=1..100:100").expect("valid --vary")];
    let mut g = c.benchmark_group("targets/sweep-100pt");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a rayon pool");
        let points =
            pool.install(|| sweep(CHAT_SLO, origin, &base, &vary, None, &|| {}).expect("sweeps"));
        assert_eq!(points.len(), 100);
        assert!(points.iter().all(|p| p.error.is_none()), "every point runs");
        g.throughput(Throughput::Elements(100));
        g.bench_function(format!("threads-{threads}"), |b| {
            b.iter(|| {
                pool.install(|| {
                    sweep(CHAT_SLO, origin, &base, &vary, None, &|| {}).expect("sweeps")
                })
            })
        });
    }
    g.finish();
}

fn planning_week(c: &mut Criterion) {
    let origin = "scenarios/diurnal-week.toml";
    let sc = Scenario::parse(include_str!("../scenarios/diurnal-week.toml"), origin, &[])
        .expect("diurnal-week parses");
    let mut g = c.benchmark_group("targets");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(60));
    g.bench_function("plan-diurnal-week", |b| {
        b.iter(|| plan(&sc, origin).expect("plans"))
    });
    g.finish();
}

/// Writes the multi-turn trace of (k): `convs` conversations of 10 turns, one starting every
/// 125 ms, its turns 3 s apart, in arrival order.
fn multi_turn_trace(convs: u64) -> std::path::PathBuf {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!("servesim-bench-sessions-{convs}.jsonl"));
    let mut rows: Vec<(u64, u64, u64)> = (0..convs)
        .flat_map(|c| (1..=10u64).map(move |k| (c * 125 + (k - 1) * 3000, c, k)))
        .collect();
    rows.sort_unstable();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("a temp file"));
    for (t_ms, c, k) in rows {
        // Turn k resends the k + 1 blocks of turn k - 1's prompt and adds one.
        let list: Vec<String> = (0..k + 2).map(|j| (10 + c * 16 + j).to_string()).collect();
        let input = (2 + k) * 512 + 100;
        writeln!(
            f,
            "{{\"timestamp\": {t_ms}, \"input_length\": {input}, \"output_length\": 64, \"hash_ids\": [{}]}}",
            list.join(", ")
        )
        .expect("writes");
    }
    path
}

fn multi_turn(c: &mut Criterion) {
    let convs = (requests() / 50).max(1);
    let n = convs * 10;
    let path = multi_turn_trace(convs);
    let text = format!(
        "seed = 1\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\ntp = 1\nreplicas = 4\n\
         router = \"prefix-aware\"\n[scheduler]\nenable_prefix_caching = true\n[workload.arrival]\n\
         kind = \"trace\"\nformat = \"mooncake\"\npath = \"{}\"\n",
        path.display()
    );
    let r = Scenario::parse(&text, "bench", &[])
        .and_then(|s| s.resolve("bench"))
        .expect("the benchmark scenario is valid");
    let t = std::time::Instant::now();
    let s = r.run().expect("runs").summary;
    let wall = t.elapsed().as_secs_f64();
    eprintln!(
        "setup run-multi-turn-trace: completed {} hit rate {:.4} mean TTFT {:.1} ms, one run \
         {wall:.3} s = {:.0} simulated req/s (target 1000000)",
        s.completed,
        s.prefix_cache_hit_rate.unwrap_or(0.0),
        s.mean_ttft_ms,
        n as f64 / wall
    );
    assert_eq!(s.completed, n, "every request completes");
    let mut g = c.benchmark_group("targets");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(n));
    g.bench_function("run-multi-turn-trace", |b| {
        b.iter(|| r.run().expect("runs"))
    });
    g.finish();
}

criterion_group!(
    benches,
    multi_turn,
    runs,
    fast_forward_runs,
    planning,
    sweeping,
    planning_week
);
criterion_main!(benches);
