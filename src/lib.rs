//! servesim: a capacity-planning simulator for LLM serving.
//!
//! Data flows one way: configuration ([`scenario`]) → model of the hardware and the engine
//! ([`model`], [`gpu`], [`engine`], [`roofline`]) → discrete-event simulation ([`sim`], fed by
//! [`workload`]) → streaming [`metrics`] → planning ([`plan`]) → [`report`]s.
//! See docs/ for the physics, the simulator's semantics and the file formats.

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
pub mod step_time;
pub mod summary;
pub mod table;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
