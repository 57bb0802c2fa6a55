//! Mooncake request traces (kvcache-ai/Mooncake, FAST'25 release): JSON lines with
//! `timestamp` (arrival, ms from the trace start), `input_length`, `output_length` (tokens)
//! and `hash_ids` (one id per `hash_block_tokens` prompt tokens, 512 in the published
//! traces; an id covers its block and all blocks before it, so equal ids are a reusable
//! prefix).

use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::trace::{Trace, TraceRow};
use super::BlockIds;
use crate::error::{Error, Result};

/// One line as published.
#[derive(Deserialize)]
struct Line {
    timestamp: f64,
    input_length: i64,
    output_length: i64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

impl Trace {
    /// Loads a Mooncake JSONL trace whose ids each cover `block_tokens` tokens.
    pub(crate) fn load_mooncake(path: &Path, block_tokens: u32) -> Result<Self> {
        let reader = crate::input::open_lines(path, crate::input::InputKind::Trace)?;
        Self::parse_mooncake(
            std::io::BufReader::new(reader),
            &path.display().to_string(),
            block_tokens,
        )
    }

    /// Parses Mooncake JSON lines from `reader` (`shown` names it in errors); blank lines
    /// are skipped.
    pub(crate) fn parse_mooncake<R: BufRead>(
        reader: R,
        shown: &str,
        block_tokens: u32,
    ) -> Result<Self> {
        let err = |message: String| Error::Parse {
            path: shown.to_string(),
            message,
        };
        let mut rows = Vec::new();
        let mut blocks: Vec<BlockIds> = Vec::new();
        let mut prev_ns = 0u64;
        for (i, line) in reader.lines().enumerate() {
            let at = |m: String| err(format!("line {}: {m}", i + 1));
            let line = line.map_err(|e| at(e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let l: Line = serde_json::from_str(&line).map_err(|e| {
                at(format!(
                    "{e} (expected {{\"timestamp\": ms, \"input_length\": n, \"output_length\": n, \"hash_ids\": [..]}})"
                ))
            })?;
            if !l.timestamp.is_finite() || l.timestamp < 0.0 {
                return Err(at(format!(
                    "timestamp must be >= 0 ms, got {}",
                    l.timestamp
                )));
            }
            let arrival_ns = crate::clock::secs_to_ns(l.timestamp * 1e-3)
                .map_err(|e| at(format!("timestamp: {e}")))?;
            if arrival_ns < prev_ns {
                return Err(at(format!(
                    "timestamp {} ms is before the previous line's",
                    l.timestamp
                )));
            }
            prev_ns = arrival_ns;
            let count = |name: &str, v: i64| {
                u32::try_from(v).ok().filter(|&v| v >= 1).ok_or_else(|| {
                    at(format!(
                        "{name} must be an integer in 1..={}, got {v}",
                        u32::MAX
                    ))
                })
            };
            let input_tokens = count("input_length", l.input_length)?;
            let output_tokens = count("output_length", l.output_length)?;
            let most = (input_tokens as u64).div_ceil(block_tokens as u64);
            if l.hash_ids.len() as u64 > most {
                return Err(at(format!(
                    "{} hash_ids for {input_tokens} input tokens: at most {most} at {block_tokens} tokens each (workload.arrival.hash_block_tokens)",
                    l.hash_ids.len()
                )));
            }
            rows.push(TraceRow {
                arrival_ns,
                input_tokens,
                output_tokens,
            });
            blocks.push(l.hash_ids.into());
        }
        if rows.is_empty() {
            return Err(err("the trace has no requests".into()));
        }
        Ok(Trace {
            rows,
            prefix: Vec::new(),
            numeric_times: false,
            blocks,
            block_id_tokens: block_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace> {
        Trace::parse_mooncake(text.as_bytes(), "t.jsonl", 512)
    }

    #[test]
    fn reads_lines_and_identities() {
        let t = parse(
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n\n\
             {\"timestamp\": 27.5, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0]}\n",
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1].arrival_ns, 27_500_000);
        assert_eq!(&t.blocks[0][..], &[0, 1]);
        assert_eq!(t.block_id_tokens, 512);
    }

    #[test]
    fn errors_name_the_line_and_the_reason() {
        let cases = [
            ("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, 2]}", "line 1: 2 hash_ids for 10 input tokens: at most 1"),
            ("{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1}", "line 1: timestamp must be >= 0"),
            ("{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1}", "line 1: input_length must be an integer in 1..="),
            ("{\"timestamp\": 0, \"input_length\": 5}", "line 1: missing field `output_length`"),
            ("not json", "line 1: expected"),
            ("{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1}", "line 2: timestamp 4 ms is before"),
            ("", "no requests"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(
                e.starts_with("t.jsonl: ") && e.contains(want),
                "{e} / {want}"
            );
        }
    }
}
