//! The physical floor under the latency SLOs: when no candidate meets them, whether an SLO
//! asks for less time than one forward pass takes on the fastest candidate of the search
//! space, so that no fleet, load or setting of the search could ever meet it.

use super::{candidate_scenario, CandidateResult};
use crate::roofline::BatchShape;
use crate::scenario::Scenario;

/// The fastest single passes over the candidates that resolve: (one prompt token's forward
/// pass alone at batch 1, ns, its candidate's label), and the same for one decode step of a
/// single sequence (none when every candidate speculates: a verify step then yields several
/// tokens, and its time per token is no floor).
struct Floors {
    prefill: Option<(u64, String)>,
    decode: Option<(u64, String)>,
}

/// The fastest passes of `candidates` under `base` (see [`Floors`]). A candidate that does
/// not resolve or whose step is off the clock is left out (the table says why it cannot run).
fn floors(base: &Scenario, origin: &str, candidates: &[CandidateResult]) -> Floors {
    let mut out = Floors {
        prefill: None,
        decode: None,
    };
    let mut one_token = BatchShape::default();
    one_token.add_prefill(1, 0, true);
    let keep = |best: &mut Option<(u64, String)>, ns: u64, label: &str| {
        if best.as_ref().is_none_or(|(b, _)| ns < *b) {
            *best = Some((ns, label.to_string()));
        }
    };
    for c in candidates {
        let Ok(resolved) = candidate_scenario(base, &c.candidate, 1.0).resolve(origin) else {
            continue;
        };
        let Ok(model) = resolved.step_model() else {
            continue;
        };
        let label = c.candidate.label();
        if let Ok(ns) = model.step_ns(&one_token) {
            keep(&mut out.prefill, ns, &label);
        }
        if model.speculation().is_none() {
            if let Ok(ns) = model.step_ns(&BatchShape::decode(1, 1)) {
                keep(&mut out.decode, ns, &label);
            }
        }
    }
    out
}

/// When an SLO is below the physical floor of every candidate: one line per such SLO, stating
/// the floor in ms and what it is (`None` when every SLO is above its floor).
pub(super) fn slo_below_floor(
    base: &Scenario,
    origin: &str,
    candidates: &[CandidateResult],
) -> Option<String> {
    let s = &base.slo;
    if s.ttft_ms.is_none() && s.tpot_ms.is_none() {
        return None;
    }
    let f = floors(base, origin, candidates);
    // (SLO, its percentile, name, floor, what the floor is, why it binds every request).
    let checks = [
        (
            s.ttft_ms,
            s.ttft_percentile,
            "TTFT",
            &f.prefill,
            "one forward pass of a single prompt token alone (batch 1, reading every weight once)",
            "every request's first token needs at least one such pass, so no fleet, load or setting of this search can meet it",
        ),
        (
            s.tpot_ms,
            s.tpot_percentile,
            "TPOT",
            &f.decode,
            "one decode step of a single sequence alone (batch 1)",
            "every output token after the first needs at least one such step",
        ),
    ];
    let mut lines = Vec::new();
    for (slo, pct, name, floor, what, why) in checks {
        if let (Some(slo), Some((ns, label))) = (slo, floor) {
            let floor_ms = *ns as f64 / 1e6;
            if slo < floor_ms {
                lines.push(format!(
                    "the p{pct} {name} SLO of {slo} ms is below the physical floor of {floor_ms:.2} ms: {what} on the fastest candidate, {label}; {why}"
                ));
            }
        }
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}
