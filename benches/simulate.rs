//! Simulator speed: simulated requests per wall second (DESIGN.md §5; docs/performance.md).
//!
//! `cargo bench --bench simulate`: quick 100k-request versions of benches/targets.rs (a)-(c).
//! Each benchmark reports its time per iteration and criterion's throughput line gives simulated
//! requests per wall second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use servesim::scenario::Scenario;

fn scenario(
    rate: &str,
    requests: u64,
    replicas: u32,
    router: &str,
) -> servesim::scenario::Resolved {
    let text = format!(
        r#"
seed = 1
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
replicas = {replicas}
router = "{router}"
[workload]
dataset = "sharegpt"
num_requests = {requests}
[workload.arrival]
{rate}
"#
    );
    Scenario::parse(&text, "bench", &[])
        .and_then(|s| s.resolve("bench"))
        .expect("the benchmark scenario is valid")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    // One H100 at 80% load: Llama-3.1-8B bf16 on vLLM saturates at 62.7 req/s of ShareGPT
    // (offline run, docs/performance.md), so 50 req/s; 8 replicas at 8 x 50.
    for (name, rate, n, replicas, router) in [
        (
            "sharegpt-100k-80pct",
            "kind = \"poisson\"\nrate_per_s = 50.0",
            100_000u64,
            1u32,
            "least-outstanding",
        ),
        (
            "sharegpt-100k-saturated",
            "kind = \"offline\"",
            100_000,
            1,
            "least-outstanding",
        ),
        (
            "sharegpt-100k-8-replicas",
            "kind = \"poisson\"\nrate_per_s = 400.0",
            100_000,
            8,
            "least-outstanding",
        ),
    ] {
        let r = scenario(rate, n, replicas, router);
        g.throughput(Throughput::Elements(n));
        g.bench_function(name, |b| b.iter(|| r.run().expect("runs")));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
