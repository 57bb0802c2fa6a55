//! A two-row consistency check on online reference rows: two rows of one configuration and
//! workload at two arrival rates, from their measured step times and latencies, allow each
//! added prompt at most some time in an iteration; a GPU running its GEMMs at the datasheet
//! peaks needs at least some other time for that prompt. When the first is below the second,
//! the pair cannot both be as published on such a GPU. **This is a consistency check under a
//! model of the engine's iteration, not a physical bound** (assumptions M and A3 below are not
//! bounds; A3 in particular fails on a real GPU whose weight stream runs below the datasheet
//! bandwidth, which is why each check also prints the stream fraction at which the pair
//! would be consistent).
//!
//! Rows `l` (rate `λ_l`) and `h` (`λ_h > λ_l`), both kept up with as measured (steady
//! state), of one group (engine, release, model, TP, GPU) with the same formats, lengths,
//! prefix, scheduler limits and arrival process; one replica, no data parallelism, a dense
//! model, fixed or uniformly drawn lengths. Generated tokens per request `O`, uncached prompt
//! `P` (input less the shared prefix; where the client repeats a set of distinct prompts, the
//! mean over requests, only first uses computing theirs: `ReferenceRow::uncached_prompt_tokens`;
//! the time a prompt adds is convex in its tokens, so the mean understates what the mixture
//! needs and the check stays on the lenient side), per row the mean E2E `E`, mean TTFT `T`.
//!
//! Measured, per row `i` (definitions, no assumption beyond steady state):
//! 1. `S_i = (E_i - T_i) / (O - 1)`: the mean gap between a request's tokens, i.e. the mean
//!    iteration as decoding requests see it (the generated count, not the client's).
//! 2. `b_i = λ_i (E_i - T_i)`: the mean number of decoding requests (Little's law on the
//!    decode phase).
//! 3. `q_i = λ_i S_i`: prompts per iteration (each request's prompt enters once).
//!
//! Model and assumptions (none of M, A1-A3 is a physical bound; each is stated so a reader can
//! reject it):
//! - **M (mean field)**: an iteration lasts `D(B) + Σ x` over its prompts, `D(B)` the same
//!   iteration without them; a row's mean iteration is the iteration of its mean content:
//!   `S_i = D(b_i) + q_i x_i`, `x_i` the mean time a prompt adds in row `i`.
//! - **A1 (decode growth)**: `D(b_h) - D(b_l) >= (b_h - b_l) c k / BW`: the decode iteration
//!   grows at least by the added requests' KV reads at the datasheet HBM bandwidth `BW` per
//!   GPU (`c` context tokens a decoding request reads per step at least: its uncached prompt
//!   and half the tokens generated before it; `k` KV bytes per token per GPU). Needs: kernels
//!   of an iteration run one after another, no kernel and no exposed host time gets shorter
//!   as the batch grows, and attention reads each context from HBM.
//! - **A2 (a prompt costs no less beside more decodes)**: `x_h >= x_l` when `b_h >= b_l`. Holds
//!   when every kernel's time is convex in its tokens (a roofline `max(bytes/BW, FLOP/peak)`
//!   plus a fixed time is) and exposed host time is `max(host, GPU)`-like (also convex).
//! - **A3 (datasheet GPU)**: the iteration's GEMMs run at exactly their roofline at the
//!   datasheet rates, `R(m) = max(W / BW, m F / peak)` per GPU at `m` tokens (`W` the weight
//!   bytes one GPU streams, `F` its FLOP per token; the widest weight format and the fastest
//!   peak the row's formats allow, which lowers `R(m + P) - R(m)`, so the mix of formats keeps
//!   I2 below the truth under A3), and everything else a prompt brings (its attention, norms,
//!   all-reduce growth, host time) adds no less than nothing.
//!
//! Chain (numbered invariants the tests cite):
//! - **I1** (measurements, M, A1, A2): `S_h - S_l = D(b_h) - D(b_l) + q_h x_h - q_l x_l` and
//!   `q_h x_h - q_l x_l = (q_h - q_l) x_h + q_l (x_h - x_l) >= (q_h - q_l) x_h`, so for
//!   `q_h > q_l`: `x_h <= allowed = (S_h - S_l - (b_h - b_l) c k / BW) / (q_h - q_l)`.
//! - **I2** (A3): `x_h >= required = R(b_h + P) - R(b_h)`.
//! - **I3**: `allowed < required` contradicts M and A1-A3 together: the pair is inconsistent
//!   at datasheet rates. A slower weight stream (fraction `η` of `BW`) hides more of the
//!   prompt's FLOPs: `R` is then `max(W / (η BW), m F / peak)`, and the pair is consistent for
//!   `η <= η* = (W / BW) / ((b_h + P) F / peak - allowed)` (for `0 <= allowed` below the
//!   prompt's whole GEMM time `P F / peak`; none when `allowed < 0`: no stream rate helps).
//!
//! The figures match scripts/mixed-step-kernel-rows.py (section 3) when fed its conventions
//! (derived-ITL column as the step, `λ E` as the batch, the whole input plus `O / 2` as the
//! context); the definitions above take the generated count, the decode phase and the
//! uncached context, each of which can only raise `allowed` (fewer pairs flagged).

use serde::Serialize;

mod rows;
pub use rows::{inconsistent_pair, pair_checks};

/// One row of a pair, from its measured figures (module docs, 1-3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRow {
    /// Row id.
    pub id: String,
    /// Arrival rate, requests/s.
    pub requests_per_s: f64,
    /// Mean iteration as decoding requests see it, `S`, seconds.
    pub step_s: f64,
    /// Mean decoding requests, `b` (requests).
    pub decoding_requests: f64,
    /// Prompts per iteration, `q` (dimensionless).
    pub prompts_per_step: f64,
}

impl PairRow {
    /// The figures from a step, a rate and a mean decode phase (seconds).
    pub fn new(id: &str, requests_per_s: f64, step_s: f64, decode_phase_s: f64) -> PairRow {
        PairRow {
            id: id.to_string(),
            requests_per_s,
            step_s,
            decoding_requests: requests_per_s * decode_phase_s,
            prompts_per_step: requests_per_s * step_s,
        }
    }
}

/// What the check rests on: both rows and the per-GPU work at datasheet rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairInputs {
    /// The row at the lower rate.
    pub low: PairRow,
    /// The row at the higher rate.
    pub high: PairRow,
    /// Uncached prompt tokens per request, `P`.
    pub prompt_tokens: f64,
    /// Context tokens a decoding request reads per step at least, mean over its steps, `c`.
    pub context_tokens: f64,
    /// KV bytes per context token, per GPU, `k`.
    pub kv_bytes_per_token_per_gpu: f64,
    /// Weight bytes one GPU streams per iteration (its share of the decoder's matrices), `W`.
    pub weight_bytes_per_gpu: f64,
    /// GEMM FLOP per token, per GPU, `F`.
    pub flops_per_token_per_gpu: f64,
    /// Dense tensor-core peak per GPU, FLOP/s.
    pub peak_flops_per_s: f64,
    /// Datasheet HBM bandwidth per GPU, bytes/s, `BW`.
    pub hbm_bandwidth_bytes_per_s: f64,
}

/// The check of one pair (module docs, I1-I3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairCheck {
    /// What it was computed from.
    pub inputs: PairInputs,
    /// A1: the least the decode iteration grows between the rows, seconds.
    pub decode_growth_s: f64,
    /// I1: the most a prompt may add to an iteration at the higher rate, seconds.
    pub allowed_s: f64,
    /// I2: the least a prompt adds at the higher rate's batch on a datasheet GPU, seconds.
    pub required_s: f64,
    /// I3: the largest fraction of the datasheet HBM bandwidth at which the weight stream
    /// makes the pair consistent (`None`: consistent at any rate, or at none when
    /// `allowed_s < 0`; see [`PairCheck::inconsistent`]).
    pub consistent_below_hbm_fraction: Option<f64>,
    /// How much less the mean step grows between the rows than a datasheet GPU needs,
    /// `(required - allowed) (q_h - q_l)`, seconds (0 when consistent): the check's margin in
    /// the measured quantity it is most sensitive to (to first order, the error in the two
    /// rows' steps that would clear the flag).
    pub step_shortfall_s: f64,
}

impl PairCheck {
    /// Whether the pair contradicts M and A1-A3 (I3): it allows a prompt less than it needs.
    pub fn inconsistent(&self) -> bool {
        self.allowed_s < self.required_s
    }

    /// Whether `id` is one of the pair's rows.
    pub fn has(&self, id: &str) -> bool {
        self.inputs.low.id == id || self.inputs.high.id == id
    }

    /// One clause: what the rows allow a prompt against what it needs, and the stream rate
    /// that would reconcile them.
    pub fn describe(&self) -> String {
        let x = &self.inputs;
        let eta = match self.consistent_below_hbm_fraction {
            Some(f) => format!(
                "consistent while the weights stream at no more than {:.0}% of the \
                 datasheet HBM bandwidth",
                100.0 * f
            ),
            None if self.allowed_s < 0.0 => "consistent at no HBM rate".to_string(),
            None => "consistent at any HBM rate".to_string(),
        };
        let margin = if self.inconsistent() {
            format!(
                "; the step grows {:.2} ms less than that needs",
                1e3 * self.step_shortfall_s
            )
        } else {
            String::new()
        };
        format!(
            "{} -> {}: a {:.0}-token prompt may add at most {:.1} ms, its GEMMs need {:.1} ms \
             at datasheet rates; {eta}{margin}",
            x.low.id,
            x.high.id,
            x.prompt_tokens,
            1e3 * self.allowed_s,
            1e3 * self.required_s,
        )
    }
}

/// The check from its inputs (module docs, I1-I3).
pub fn evaluate(x: &PairInputs) -> PairCheck {
    let (l, h) = (&x.low, &x.high);
    let bw = x.hbm_bandwidth_bytes_per_s;
    let decode_growth_s = (h.decoding_requests - l.decoding_requests)
        * x.context_tokens
        * x.kv_bytes_per_token_per_gpu
        / bw;
    let allowed_s =
        (h.step_s - l.step_s - decode_growth_s) / (h.prompts_per_step - l.prompts_per_step);
    let stream_s = x.weight_bytes_per_gpu / bw;
    let compute = |m: f64| m * x.flops_per_token_per_gpu / x.peak_flops_per_s;
    let roofline = |m: f64| stream_s.max(compute(m));
    let b = h.decoding_requests;
    let required_s = roofline(b + x.prompt_tokens) - roofline(b);
    let whole_prompt_s = compute(x.prompt_tokens);
    let consistent_below_hbm_fraction = (allowed_s >= 0.0 && allowed_s < whole_prompt_s)
        .then(|| stream_s / (compute(b + x.prompt_tokens) - allowed_s));
    let step_shortfall_s =
        (required_s - allowed_s).max(0.0) * (h.prompts_per_step - l.prompts_per_step);
    PairCheck {
        inputs: x.clone(),
        decode_growth_s,
        allowed_s,
        required_s,
        consistent_below_hbm_fraction,
        step_shortfall_s,
    }
}

#[cfg(test)]
mod tests;
