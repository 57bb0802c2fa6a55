//! servesim: a capacity-planning simulator for LLM serving.
//!
//! # A reader's guide
//!
//! Data flows one way: configuration ([`scenario`]) → model of the hardware and the engine
//! ([`model`], [`gpu`], [`engine`], [`roofline`]) → discrete-event simulation ([`sim`], fed by
//! [`workload`]) → streaming [`metrics`] → one run's [`summary`] → analyses ([`plan`],
//! [`validate`]) → [`report`]s. Modules depend downward only (docs/architecture.md lists the
//! layers; `tests/module_graph.rs` fails on a cycle).
//!
//! Where to start, by question:
//! - *How long does one iteration take?* [`roofline::StepTimeModel`] (formulas in
//!   docs/model.md), fed by [`model::ModelSpec`], [`gpu::GpuProfile`] and
//!   [`engine::EngineProfile`], all loaded by name through [`catalog`].
//! - *What does the simulator do each iteration?* [`sim`]: the event loop, the replicas'
//!   scheduler (continuous batching over a paged KV cache), routers and the fleet; its
//!   invariants are numbered in docs/invariants.md.
//! - *What does a run report?* [`summary::RunSummary`] (named as `vllm bench serve` names its
//!   keys) and the steady-state analysis in [`metrics::steady_state`].
//! - *How is a plan found?* [`plan`]: candidate search, fleet sizing, headroom, pricing
//!   (docs/capacity-planning.md).
//! - *How good are the predictions?* [`validate`] re-simulates published measurements
//!   (docs/validation.md); [`calibrate`] measures and fits GPU profiles (docs/calibration.md).
//! - *How are files written?* [`report`] (every exporter), [`table`] (the shared table type),
//!   [`atomic_file`] (no half-written file).
//! - Shared helpers: [`clock`] (integer nanoseconds, one seconds-to-ns rule), [`numeric`]
//!   (quantiles, Nelder-Mead), [`precision`] (weight and KV formats), [`input`] (size-capped
//!   reads), [`error`] (the library's error type).
//!
//! The binary's `commands` turn flags into this library's configuration and print its results.

pub mod atomic_file;
pub mod calibrate;
pub mod catalog;
pub mod clock;
pub mod engine;
pub mod error;
pub mod gpu;
pub mod input;
pub mod metrics;
pub mod model;
pub mod numeric;
pub mod plan;
pub mod precision;
pub mod report;
pub mod roofline;
pub mod scenario;
pub mod sim;
pub mod speculative;
pub mod step_time;
pub mod summary;
pub mod table;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
