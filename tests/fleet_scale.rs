//! Fleets of many replicas are sized on shards: k replicas carrying the share k / R of the
//! target stand for R (DESIGN: exchangeable replicas behind a load-balancing router; the shard
//! pools less, so it errs towards more replicas). This measures that error against sizing the
//! same fleets whole, at moderate R where whole sizing is affordable, and bounds it.
//!
//! `cargo test --release --test fleet_scale -- --ignored --nocapture` prints the table that
//! docs/capacity-planning.md ("Large fleets") quotes (several minutes).

use servesim::plan::{size_on_shards, size_whole};
use servesim::scenario::Scenario;

/// Llama-3.1-8B chat on one H100 SXM (FP8, max_num_seqs 256) per replica, behind the
/// least-outstanding router; `tpot_ms` sets what binds.
fn scenario(tpot_ms: f64) -> Scenario {
    let text = format!(
        r#"
seed = 11
[deployment]
model = "llama-3.1-8b"
gpu = "h100-sxm"
tp = 1
dtype = "fp8"
engine = "vllm"
router = "least-outstanding"
[scheduler]
max_num_seqs = 256
[workload]
dataset = "sharegpt"
num_requests = 2000
[workload.arrival]
kind = "poisson"
rate_per_s = 100.0
[slo]
ttft_ms = 1000.0
tpot_ms = {tpot_ms}
"#
    );
    Scenario::parse(&text, "fleet-scale", &[]).unwrap()
}

#[test]
#[ignore = "minutes: sizes fleets of 25 to 100 replicas whole"]
fn sizing_on_shards_overestimates_whole_fleets_by_at_most_two_percent() {
    // One replica's steady-state capacity and highest sustainable rate under each SLO, as
    // `servesim plan` measures them (tests read them from a plan of one candidate).
    let mut worst: f64 = 0.0;
    println!("| TPOT SLO | target req/s | whole | shard of 8 | shard of 16 | shard of 32 |");
    println!("|---|---|---|---|---|---|");
    for tpot in [11.0, 50.0] {
        let sc = scenario(tpot);
        let (capacity, per_replica) = one_replica(&sc);
        for target in [2_500.0, 5_000.0, 10_000.0] {
            let start = (target / per_replica).ceil() as u32;
            let whole = size_whole(&sc, "fleet-scale", target, capacity, start, 1024)
                .unwrap()
                .expect("a fleet holds")
                .replicas;
            let mut row = format!("| {tpot} ms | {target} | {whole} |");
            for k in [8, 16, 32] {
                let shard = size_on_shards(&sc, "fleet-scale", target, capacity, start, 1024, k)
                    .unwrap()
                    .expect("a shard holds")
                    .replicas;
                let err = (shard as f64 - whole as f64) / whole as f64;
                row.push_str(&format!(" {shard} ({:+.1}%) |", 100.0 * err));
                if k == servesim::plan::SHARD_REPLICAS {
                    worst = worst.max(err.abs());
                }
            }
            println!("{row}");
        }
    }
    assert!(
        worst <= 0.02,
        "the plan's shard errs by {:.1}%",
        100.0 * worst
    );
}

/// One replica's capacity and highest sustainable rate (req/s), from `servesim plan`'s search
/// of this single candidate.
fn one_replica(sc: &Scenario) -> (f64, f64) {
    let mut one = sc.clone();
    one.plan.gpus = Some(vec!["h100-sxm".into()]);
    one.plan.dtypes = Some(vec!["fp8".into()]);
    one.plan.tp = Some(vec![1]);
    one.plan.max_num_seqs = Some(vec![256]);
    one.plan.target_rate_per_s = Some(100.0);
    let p = servesim::plan::plan(&one, "fleet-scale").unwrap().plan;
    let c = &p.candidates[0];
    (c.capacity_rate_per_replica, c.max_rate_per_replica)
}
