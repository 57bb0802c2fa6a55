//! The event loop: arrivals, routing, admission, and each replica's iterations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::replica::Replica;
use super::request::{Phase, Req, Slab, NONE, NO_TIME};
use super::router::Router;
use super::{SimConfig, SimOutput};
use crate::metrics::{Metrics, Outcome, RequestLog, RequestRecord, TimeSeries};
use crate::roofline::StepTimeModel;
use crate::workload::{RequestGenerator, RequestSpec};

const ARRIVAL: u32 = u32::MAX;

/// Runs one simulation to completion (or to a limit) and returns its metrics.
pub fn simulate(cfg: &SimConfig, step: &StepTimeModel, gen: &mut RequestGenerator) -> SimOutput {
    let n_rep = cfg.replicas.max(1) as usize;
    let mut replicas: Vec<Replica> = (0..n_rep)
        .map(|_| Replica::new(cfg.scheduler.clone()))
        .collect();
    let mut router = Router::new(
        cfg.router,
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f5e_7e00),
    );
    let mut slab = Slab::default();
    let mut metrics = Metrics {
        log: RequestLog::with_capacity(cfg.request_log_capacity),
        ..Metrics::default()
    };
    let mut ts = TimeSeries::new(n_rep as u32);
    let mut events: BinaryHeap<Reverse<(u64, u64, u32)>> = BinaryHeap::new();
    let mut seq: u64 = 0;
    let mut n_events: u64 = 0;
    let mut truncated = None;

    // Client-side gate on outstanding requests: the user's --max-concurrency (latency counted
    // from the send), or, for offline runs, enough queued work to keep every replica's
    // scheduler supplied (latency counted from t = 0) without holding every request in memory.
    let measure_from_send = cfg.max_concurrency.is_some();
    let cap: u64 = match cfg.max_concurrency {
        Some(c) => c.max(1) as u64,
        None if gen.is_offline() => n_rep as u64 * (2 * cfg.scheduler.max_num_seqs as u64 + 16),
        None => u64::MAX,
    };
    let mut outstanding: u64 = 0;
    let mut pending: Option<RequestSpec> = gen.next_request();
    let mut arrival_queued = false;
    if let Some(p) = pending {
        events.push(Reverse((
            p.arrival_ns + cfg.frontend_delay_ns,
            seq,
            ARRIVAL,
        )));
        seq += 1;
        arrival_queued = true;
    }

    while let Some(Reverse((now, _, kind))) = events.pop() {
        n_events += 1;
        if now > cfg.limits.max_sim_time_ns {
            truncated = Some(format!(
                "simulated-time limit of {:.0} s reached",
                cfg.limits.max_sim_time_ns as f64 / 1e9
            ));
            break;
        }
        if n_events > cfg.limits.max_events {
            truncated = Some(format!("event limit of {} reached", cfg.limits.max_events));
            break;
        }
        if kind == ARRIVAL {
            arrival_queued = false;
            let Some(spec) = pending.take() else { continue };
            // Latency counts from the client's send; the engine sees the request after the
            // API frontend's delay.
            let start_ns = if measure_from_send {
                now - cfg.frontend_delay_ns
            } else {
                spec.arrival_ns
            };
            if let Some((r, dur)) = arrive(
                cfg,
                step,
                &spec,
                start_ns,
                now,
                &mut replicas,
                &mut router,
                &mut slab,
                &mut metrics,
                &mut ts,
                &mut outstanding,
            ) {
                events.push(Reverse((now + dur, seq, r as u32)));
                seq += 1;
            }
            pending = gen.next_request();
        } else {
            let r = kind as usize;
            replicas[r].end_iteration(now, &mut slab, &mut metrics, &mut ts, &cfg.slo);
            outstanding -= replicas[r].take_departed();
            if let Some(dur) = replicas[r].schedule(now, &mut slab, &mut metrics, &cfg.slo, step) {
                events.push(Reverse((now + dur, seq, r as u32)));
                seq += 1;
            }
            outstanding -= replicas[r].take_departed();
        }
        if !arrival_queued && outstanding < cap {
            if let Some(p) = pending {
                // The client sends at its arrival time, or now if the concurrency cap held it
                // back; the engine sees it after the frontend delay.
                let at = p.arrival_ns.max(now.saturating_sub(cfg.frontend_delay_ns))
                    + cfg.frontend_delay_ns;
                events.push(Reverse((at, seq, ARRIVAL)));
                seq += 1;
                arrival_queued = true;
            }
        }
    }

    let in_flight: u64 = replicas.iter().map(|r| r.outstanding()).sum();
    if truncated.is_none() && in_flight > 0 {
        truncated = Some(format!(
            "stalled: {in_flight} requests could not be scheduled (a request needs more KV \
             blocks than the replica can ever free)"
        ));
    }
    SimOutput {
        peak_kv_blocks: replicas.iter().map(|r| r.peak_blocks).max().unwrap_or(0),
        metrics,
        timeseries: ts,
        in_flight,
        truncated,
        events: n_events,
    }
}

/// Handles one arrival: route, check, admit or reject. Returns the replica and the duration of
/// an iteration it started, if the replica was idle.
#[allow(clippy::too_many_arguments)]
fn arrive(
    cfg: &SimConfig,
    step: &StepTimeModel,
    spec: &RequestSpec,
    start_ns: u64,
    now: u64,
    replicas: &mut [Replica],
    router: &mut Router,
    slab: &mut Slab,
    metrics: &mut Metrics,
    ts: &mut TimeSeries,
    outstanding: &mut u64,
) -> Option<(usize, u64)> {
    metrics.arrived += 1;
    metrics.first_arrival_ns = Some(
        metrics
            .first_arrival_ns
            .map_or(start_ns, |t| t.min(start_ns)),
    );
    ts.arrival(now);
    let input = spec.input_tokens.max(1);
    let output = spec.output_tokens.max(1);
    let too_long = input as u64 + output as u64 > cfg.scheduler.max_model_len as u64;
    let r = router.pick(replicas);
    let reject = too_long
        || (cfg.slo.admission_control
            && cfg
                .slo
                .ttft_ns
                .is_some_and(|t| replicas[r].predict_ttft_ns(now, input, step) > t));
    if reject {
        metrics.log.push(RequestRecord {
            arrival_ns: start_ns,
            first_token_ns: now,
            end_ns: now,
            input_tokens: input,
            output_tokens: 0,
            outcome: Outcome::Rejected,
        });
        metrics.rejected += 1;
        metrics.last_event_ns = metrics.last_event_ns.max(now);
        return None;
    }
    *outstanding += 1;
    let id = slab.insert(Req {
        arrival_ns: start_ns,
        first_token_ns: NO_TIME,
        last_token_ns: NO_TIME,
        first_scheduled_ns: NO_TIME,
        input,
        output,
        generated: 0,
        prefill_len: input,
        computed: 0,
        own_blocks: 0,
        shared_blocks: 0,
        reserve: 0,
        prefix_group: if spec.prefix_tokens > 0 {
            spec.prefix_group
        } else {
            NONE
        },
        prefix_tokens: spec.prefix_tokens.min(input.saturating_sub(1)),
        dec_iter0: 0,
        dec_kv0: 0,
        dec_gen0: 0,
        finish_iter: 0,
        epoch: 0,
        phase: Phase::Waiting,
        prev: NONE,
        next: NONE,
    });
    let rep = &mut replicas[r];
    rep.enqueue(slab, id);
    if !rep.is_busy() {
        let dur = rep.schedule(now, slab, metrics, &cfg.slo, step);
        *outstanding -= rep.take_departed();
        return dur.map(|d| (r, d));
    }
    None
}
