//! The pairs of reference rows the check of [`super`] applies to, and their figures.

use super::super::super::cv::measured_kept_up;
use super::super::super::{LoadKind, Metric, ReferenceRow};
use super::{evaluate, PairCheck, PairInputs, PairRow};
use crate::error::Result;

/// A row's measured figures for a pair (module docs, 1-3), or `None` when it is not an
/// online row kept up with as measured, with a rate, a mean E2E and a mean TTFT.
fn pair_row(row: &ReferenceRow) -> Option<PairRow> {
    let rate = match (row.kind, row.rate_rps) {
        (LoadKind::Online, Some(r)) if r > 0.0 => r,
        _ => return None,
    };
    if measured_kept_up(row) != Some(true) || row.output_len < 2 {
        return None;
    }
    let get = |m: Metric| row.measured.iter().find(|(x, _)| *x == m).map(|&(_, v)| v);
    let decode_s = (get(Metric::E2eMeanMs)? - get(Metric::TtftMeanMs)?) / 1e3;
    let step_s = decode_s / (row.output_len as f64 - 1.0);
    (decode_s > 0.0).then(|| PairRow::new(&row.id, rate, step_s, decode_s))
}

/// The key two rows must share to be paired (`None`: the row takes part in no pair: recorded
/// per-request lengths, a dataset's lengths, a client concurrency cap, more than one replica
/// or data-parallel rank).
fn pair_key(row: &ReferenceRow) -> Option<String> {
    if row.lens.is_some()
        || row.dataset.is_some()
        || row.max_concurrency.is_some()
        || row.replicas != 1
        || row.dp != 1
    {
        return None;
    }
    Some(format!(
        "{} {} {} {:?} {} {} {} {:?} {:?} {:?} {:?} {:?} {:?} {}",
        row.group(),
        row.dtype,
        row.kv_cache_dtype,
        row.checkpoint,
        row.input_len,
        row.output_len,
        row.prefix_len,
        row.distinct_prompts,
        row.range_ratio,
        row.burstiness,
        row.max_num_seqs,
        row.max_num_batched_tokens,
        row.max_model_len,
        row.ep
    ))
}

/// The per-GPU work of `row`'s deployment at datasheet rates, with both rows' figures filled
/// in (`None` for a mixture-of-experts model: A3's one ridge point does not hold for experts
/// whose weights a batch reads in part).
pub(super) fn pair_inputs(
    row: &ReferenceRow,
    low: PairRow,
    high: PairRow,
) -> Result<Option<PairInputs>> {
    let resolved = row
        .scenario()?
        .resolve(&format!("reference row {}", row.id))?;
    let d = &resolved.deployment;
    let m = &d.model;
    if m.moe.is_some() {
        return Ok(None);
    }
    let gpus = d.gpus() as f64;
    let formats = [d.formats.attention, d.formats.dense, d.formats.experts];
    let widest = formats.iter().map(|f| f.bytes()).fold(0.0, f64::max);
    let peak = formats
        .iter()
        .map(|&f| super::super::peak_for(f, &d.gpu.datasheet))
        .fold(0.0, f64::max);
    let params = super::super::matmul_params(m);
    let kv = m.kv_per_token(d.kv_dtype.bytes());
    let prompt = row.uncached_prompt_tokens(row.input_len as f64);
    // Step j (1..O-1) reads the uncached prompt and the j - 1 tokens before it: mean
    // (O - 2) / 2 generated tokens.
    let context = prompt + (row.output_len as f64 - 2.0).max(0.0) / 2.0;
    Ok(Some(PairInputs {
        low,
        high,
        prompt_tokens: prompt,
        context_tokens: context,
        // Full-attention layers only: a local layer reads at most its window (A1 a lower bound).
        kv_bytes_per_token_per_gpu: kv.full_bytes / gpus,
        weight_bytes_per_gpu: params * widest / gpus,
        flops_per_token_per_gpu: 2.0 * params / gpus,
        peak_flops_per_s: peak,
        hbm_bandwidth_bytes_per_s: d.gpu.datasheet.hbm_bandwidth_bytes_per_s,
    }))
}

/// The check of every pair of `rows` that share a key, the lower rate first, in the rows'
/// order (pairs whose prompts per step or decoding requests do not grow with the rate are
/// left out: I1 needs both). Errors only when a row's deployment does not resolve.
pub fn pair_checks(rows: &[ReferenceRow]) -> Result<Vec<PairCheck>> {
    let usable: Vec<(&ReferenceRow, String, PairRow)> = rows
        .iter()
        .filter_map(|r| Some((r, pair_key(r)?, pair_row(r)?)))
        .collect();
    let mut out = Vec::new();
    for (i, (ra, ka, a)) in usable.iter().enumerate() {
        for (_, kb, b) in &usable[i + 1..] {
            if ka != kb || a.requests_per_s == b.requests_per_s {
                continue;
            }
            let (low, high) = if a.requests_per_s < b.requests_per_s {
                (a, b)
            } else {
                (b, a)
            };
            if high.prompts_per_step <= low.prompts_per_step
                || high.decoding_requests < low.decoding_requests
            {
                continue;
            }
            if let Some(x) = pair_inputs(ra, low.clone(), high.clone())? {
                out.push(evaluate(&x));
            }
        }
    }
    Ok(out)
}

/// The inconsistent pair `id` belongs to with the largest shortfall (`required - allowed`),
/// if any: `validate` sets such a row aside from the rows predicted saturated.
pub fn inconsistent_pair<'a>(checks: &'a [PairCheck], id: &str) -> Option<&'a PairCheck> {
    checks
        .iter()
        .filter(|c| c.inconsistent() && c.has(id))
        .max_by(|a, b| (a.required_s - a.allowed_s).total_cmp(&(b.required_s - b.allowed_s)))
}
