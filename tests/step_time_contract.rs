//! The step-time contract of src/step_time.rs (S1-S4), held by the shipped model
//! (`roofline::StepTimeModel`) over random shapes: every catalog model, GPU and engine, TP
//! degrees the model splits into, bf16/fp8 weights, auto/fp8 KV, step-time scales, decode
//! batches of 1-1024 sequences at 1-131,072 tokens of context each, shared prefixes.
//!
//! - The fast decode step (`decode_step(b).ns_at(c)`, what the simulator times decode-only
//!   iterations with) equals the full breakdown's total (`breakdown(b).total_s`, rounded to
//!   a ns) within 3 ns plus 2^-24 ns per context token: the precomputed table's
//!   per-token-count rounding (half a ns), the intercepts' rounding and the final floor, and
//!   each slope truncated to its fixed-point unit (at most 4.3 ns more at 72 million tokens).
//!   A mixed batch's time is rounded and then scaled by the step-time scale: its 3 ns are
//!   multiplied by the scale.
//! - S2: `step_ns` of a decode-only batch is `decode_step(b).ns_at(context)`, exactly.
//! - S4: times never shrink as the context grows, and the run walk (`DecodeStep::times`)
//!   equals `ns_at` at every iteration of a run, breakpoints included.
//! - S1: a mixed batch's `step_ns` is at least 1 ns and matches its breakdown as above; a
//!   time beyond the clock is an error on both paths (decode-only and mixed), never a
//!   saturated value.
//!
//! 256 cases by default (about a second); `PROPTEST_CASES=20000 cargo test --release --test
//! step_time_contract` for a long run.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use servesim::catalog::Kind;
use servesim::clock::secs_to_ns;
use servesim::engine::EngineProfile;
use servesim::gpu::GpuProfile;
use servesim::model::load_model;
use servesim::precision::{KvDtype, WeightDtype};
use servesim::roofline::{Deployment, StepTimeModel};
use servesim::step_time::{BatchShape, StepTime};

/// A deployment drawn at random, its step-time scale, and its model (`None` when the TP degree
/// does not split the model or the weights do not fit).
#[derive(Debug, Clone)]
struct Drawn {
    model: String,
    gpu: String,
    engine: String,
    tp: u32,
    fp8_weights: bool,
    fp8_kv: bool,
    scale: f64,
}

impl Drawn {
    fn step_model(&self) -> Option<StepTimeModel> {
        let weights = if self.fp8_weights {
            WeightDtype::Fp8
        } else {
            WeightDtype::Bf16
        };
        let kv = if self.fp8_kv {
            KvDtype::Fp8
        } else {
            KvDtype::Auto
        };
        let dep = Deployment::tensor_parallel(
            load_model(&self.model).ok()?,
            GpuProfile::load(&self.gpu).ok()?,
            EngineProfile::load(&self.engine).ok()?,
            self.tp,
            weights,
            kv,
        );
        let m = StepTimeModel::new(dep, 1024).ok()?;
        Some(if self.scale == 1.0 {
            m
        } else {
            m.with_time_scale(self.scale)
        })
    }
}

fn pick(names: Vec<&'static str>) -> impl Strategy<Value = String> {
    proptest::sample::select(names).prop_map(str::to_string)
}

fn drawn() -> impl Strategy<Value = Drawn> {
    (
        pick(Kind::Model.names()),
        pick(Kind::Gpu.names()),
        pick(Kind::Engine.names()),
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![3 => Just(1.0f64), 1 => 0.25f64..4.0],
    )
        .prop_map(
            |(model, gpu, engine, tp, fp8_weights, fp8_kv, scale)| Drawn {
                model,
                gpu,
                engine,
                tp,
                fp8_weights,
                fp8_kv,
                scale,
            },
        )
}

/// A decode batch: sequences, their total context, and shared-prefix tallies.
fn decode_batch() -> impl Strategy<Value = BatchShape> {
    (
        prop_oneof![1u32..16, 16u32..1025],
        prop_oneof![1u64..512, 512u64..131_073],
        0u64..1000,
        prop::option::of((1u64..4096, 1u32..8)),
    )
        .prop_map(|(seqs, per_seq, extra, prefix)| {
            let total = seqs as u64 * per_seq + extra;
            let b = BatchShape::decode_total(seqs, total);
            match prefix {
                // `users` requests share a prefix of `tokens` (within their context).
                Some((tokens, users)) => {
                    let users = users.min(seqs) as u64;
                    let tokens = tokens.min(per_seq);
                    b.with_shared_prefixes(users * tokens, tokens)
                }
                None => b,
            }
        })
}

/// Whether `fast` (ns) is within tolerance of the breakdown's `slow_s` at total context
/// `ctx` and time scale `scale`: 3 ns (the table's rounding, the other terms' and the final
/// floor), times the scale where the model scales a rounded time (a mixed batch), plus 2^-24
/// ns per context token (each decode slope truncated to its fixed-point unit), plus 1e-12
/// relative (the order of the floating-point sums).
fn close(fast: u64, slow_s: f64, ctx: u64, scale: f64) -> bool {
    let slow = secs_to_ns(slow_s).expect("the breakdown is on the clock") as f64;
    let tol = 3.0 * scale.max(1.0) + ctx as f64 / (1u64 << 24) as f64 + 1e-12 * slow;
    (fast as f64 - slow).abs() <= tol
}

/// Checks the decode contract for one drawn deployment, batch and run length; returns
/// whether the deployment exists (TP splits the model).
fn check_decode(d: &Drawn, b: &BatchShape, run_len: u64) -> Result<bool, TestCaseError> {
    let Some(m) = d.step_model() else {
        return Ok(false);
    };
    let on_clock = |e| TestCaseError::fail(format!("{d:?} {b:?}: {e}"));
    let step = StepTime::decode_step(&m, b).map_err(on_clock)?;
    let ctx = b.decode_context_tokens;
    let fast = step.ns_at(ctx).map_err(on_clock)?;
    let full = m.breakdown(b).total_s * d.scale;
    prop_assert!(
        close(fast, full, ctx, d.scale),
        "{d:?} {b:?}: fast {fast} ns, breakdown {full} s"
    );
    // S2: the simulator's path is the decode step, exactly.
    prop_assert_eq!(StepTime::step_ns(&m, b), Ok(fast));
    // S4: a run of `run_len` iterations, each `seqs` tokens longer.
    let seqs = b.decode_seqs as u64;
    let last = ctx + seqs * (run_len - 1);
    prop_assert!(
        step.exact_through(last),
        "{d:?} {b:?}: a run to {last} tokens overflows"
    );
    let mut times = step.times(ctx, seqs, 0);
    let mut prev = 0;
    for k in 0..run_len {
        let ns = times.next_ns();
        prop_assert_eq!(
            ns,
            step.ns_at(ctx + seqs * k).map_err(on_clock)?,
            "iteration {} of {:?} {:?}",
            k,
            d,
            b
        );
        prop_assert!(ns >= prev, "times shrink at iteration {}", k);
        prev = ns;
    }
    // The walk's last time is the breakdown's at the run's last context too.
    let mut at_last = *b;
    at_last.decode_context_tokens = last;
    let full_last = m.breakdown(&at_last).total_s * d.scale;
    prop_assert!(
        close(prev, full_last, last, d.scale),
        "{d:?} {b:?} at {last} tokens: walk {prev} ns, breakdown {full_last} s"
    );
    Ok(true)
}

/// Checks a mixed batch (decodes plus prefill chunks) against its breakdown (S1).
fn check_mixed(
    d: &Drawn,
    b: &BatchShape,
    chunks: &[(u32, u64, bool)],
) -> Result<bool, TestCaseError> {
    let Some(m) = d.step_model() else {
        return Ok(false);
    };
    let mut mixed = *b;
    for &(chunk, prior, last) in chunks {
        mixed.add_prefill(chunk, prior, last);
    }
    let ns = StepTime::step_ns(&m, &mixed)
        .map_err(|e| TestCaseError::fail(format!("{d:?} {mixed:?}: {e}")))?;
    prop_assert!(ns >= 1);
    let full = m.breakdown(&mixed).total_s * d.scale;
    prop_assert!(
        close(ns, full, mixed.decode_context_tokens, d.scale),
        "{d:?} {mixed:?}: {ns} ns, breakdown {full} s"
    );
    Ok(true)
}

/// Cases per property (`PROPTEST_CASES` overrides).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Runs `strategy` through `check` for [`cases`] cases; at least half of them must draw a
/// deployment that exists.
fn run<S: Strategy>(strategy: S, check: impl Fn(S::Value) -> Result<bool, TestCaseError>) {
    let n = cases();
    let ran = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |v| {
            if check(v)? {
                ran.set(ran.get() + 1);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ran.get() * 2 >= n,
        "only {} of {n} cases drew a deployment",
        ran.get()
    );
}

#[test]
fn the_fast_decode_step_is_the_breakdown_and_keeps_the_contract() {
    run((drawn(), decode_batch(), 2u64..3000), |(d, b, n)| {
        check_decode(&d, &b, n)
    });
}

#[test]
fn a_mixed_batch_takes_its_breakdown_time() {
    let chunks = prop::collection::vec((1u32..4096, 0u64..32_768, any::<bool>()), 1..4);
    run((drawn(), decode_batch(), chunks), |(d, b, c)| {
        check_mixed(&d, &b, &c)
    });
}

/// S1 at the clock's edge: every drawn deployment, scaled so its iterations take longer than
/// the clock holds, gives an error for a decode-only batch (from `decode_step` or its `ns_at`,
/// and the same from `step_ns`: S2) and for a mixed one, never a saturated time.
#[test]
fn times_beyond_the_clock_are_errors_on_both_paths() {
    let chunks = prop::collection::vec((1u32..4096, 0u64..32_768, any::<bool>()), 1..4);
    run((drawn(), decode_batch(), chunks), |(mut d, b, c)| {
        // Every iteration takes at least 1 ns; 1e20 times that is 1e11 s, some 3,000 years.
        d.scale = 1e20;
        let Some(m) = d.step_model() else {
            return Ok(false);
        };
        let decode = StepTime::decode_step(&m, &b).and_then(|s| s.ns_at(b.decode_context_tokens));
        prop_assert!(decode.is_err(), "{d:?} {b:?}: {decode:?}");
        prop_assert_eq!(StepTime::step_ns(&m, &b), decode);
        let mut mixed = b;
        for &(chunk, prior, last) in &c {
            mixed.add_prefill(chunk, prior, last);
        }
        let e = StepTime::step_ns(&m, &mixed);
        prop_assert!(e.is_err(), "{d:?} {mixed:?}: {e:?}");
        Ok(true)
    });
}
