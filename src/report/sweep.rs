//! The sweep's table for people: one row per grid point, the varied values first, then the
//! figures a what-if compares (throughput, p99 latencies, goodput, KV, preemptions) and the
//! steady-state verdict. `sweep.csv` (every summary column) and `sweep.json` hold the rest.

use std::io::Write;

use crate::error::{Error, Result};
use crate::plan::SweepPoint;

/// Writes the sweep as an aligned table: `title` on top, one column per varied key (`keys`),
/// then the figures of each point. Steady-state figures where the point's arrivals are
/// stationary (warm-up and drain removed), whole-run figures otherwise.
pub fn write_sweep_text(
    w: &mut dyn Write,
    title: &str,
    keys: &[String],
    points: &[SweepPoint],
) -> Result<()> {
    let io = |e: std::io::Error| Error::io("<stdout>", e);
    let failed = points.iter().filter(|p| p.error.is_some()).count();
    writeln!(
        w,
        "============ servesim sweep: {title} ({} points{}) ============",
        points.len(),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        }
    )
    .map_err(io)?;
    let mut header: Vec<String> = keys.to_vec();
    header.extend(
        [
            "req/s",
            "out tok/s",
            "p99 TTFT ms",
            "p99 TPOT ms",
            "goodput",
            "weights/KV",
            "KV tokens",
            "preempt",
            "verdict",
        ]
        .map(String::from),
    );
    let mut rows = vec![header];
    let mut whole_run = false;
    for p in points {
        let mut row: Vec<String> = p.overrides.iter().map(|(_, v)| v.clone()).collect();
        match (&p.summary, &p.error) {
            (Some(s), _) => {
                let (rate, out, ttft, tpot, good, verdict) = match &s.steady_state {
                    Some(st) => (
                        st.request_throughput,
                        st.output_throughput.value,
                        st.ttft.p99_ms,
                        st.tpot.p99_ms,
                        st.goodput_share.value,
                        if st.sustainable {
                            "sustainable".to_string()
                        } else {
                            format!("NOT sustainable: {}", misses_text(st))
                        },
                    ),
                    None => {
                        whole_run = true;
                        (
                            s.request_throughput,
                            s.output_throughput,
                            s.p99_ttft_ms,
                            s.p99_tpot_ms,
                            s.goodput_share,
                            "- (whole run)".to_string(),
                        )
                    }
                };
                row.extend([
                    format!("{rate:.2}"),
                    format!("{out:.0}"),
                    format!("{ttft:.1}"),
                    format!("{tpot:.2}"),
                    format!("{:.1}%", 100.0 * good),
                    format!("{}/{}", s.weight_dtype, s.kv_cache_dtype),
                    s.kv_capacity_tokens.to_string(),
                    s.preemptions.to_string(),
                    verdict,
                ]);
            }
            (None, e) => {
                row.extend(std::iter::repeat_n("-".to_string(), 8));
                row.push(format!("error: {}", e.as_deref().unwrap_or("")));
            }
        }
        rows.push(row);
    }
    write_aligned(w, &rows)?;
    writeln!(
        w,
        "figures: steady state (warm-up cut by MSER-5, drain excluded) where the arrivals are \
         stationary{}; KV tokens per replica; every column in sweep.csv",
        if whole_run {
            ", the whole run otherwise"
        } else {
            ""
        }
    )
    .map_err(io)?;
    Ok(())
}

/// The SLO checks a point missed, for people.
fn misses_text(st: &crate::metrics::steady_state::SteadyState) -> String {
    st.misses
        .iter()
        .map(|m| match m.check.as_str() {
            "ttft" => "TTFT",
            "tpot" => "TPOT",
            "e2e" => "E2E",
            "warmup" => "no steady state",
            "queue" => "queue grows",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `rows` (the header first) right-aligned in columns, the last column (the verdict)
/// left-aligned.
fn write_aligned(w: &mut dyn Write, rows: &[Vec<String>]) -> Result<()> {
    let io = |e: std::io::Error| Error::io("<stdout>", e);
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == columns {
                // The verdict, left-aligned and last: it may be long.
                line.push_str("  ");
                line.push_str(cell);
            } else {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(&format!("{cell:>width$}", width = widths[c]));
            }
        }
        writeln!(w, "{}", line.trim_end()).map_err(io)?;
    }
    Ok(())
}
