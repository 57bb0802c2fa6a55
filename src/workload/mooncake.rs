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

/// A line in the form the published traces and the generators write it, read without serde
/// (the parse of a large trace otherwise costs about as much as simulating it): one object of
/// the four keys, each at most once, `timestamp` and the lengths as plain non-negative
/// integers below 2^53, ids as integers of u64, JSON whitespace anywhere between tokens. The
/// ids go into `ids`. `None` for anything else (another key, a fraction, an exponent, a sign,
/// a leading zero, a duplicate or missing key, bad syntax): serde reads that line, and its
/// answer or error, as before.
fn fast_line(line: &str, ids: &mut Vec<u64>) -> Option<Line> {
    let mut p = Json(line.as_bytes());
    let (mut timestamp, mut input, mut output, mut with_ids) = (None, None, None, false);
    ids.clear();
    p.eat(b'{')?;
    loop {
        let key = p.key()?;
        let slot = match key {
            b"timestamp" => &mut timestamp,
            b"input_length" => &mut input,
            b"output_length" => &mut output,
            b"hash_ids" if !with_ids => {
                with_ids = true;
                p.ids(ids)?;
                if p.eat(b',').is_none() {
                    break;
                }
                continue;
            }
            _ => return None,
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(p.int().filter(|&v| v < 1 << 53)?);
        if p.eat(b',').is_none() {
            break;
        }
    }
    p.eat(b'}')?;
    p.skip_ws();
    if !p.0.is_empty() {
        return None;
    }
    Some(Line {
        timestamp: timestamp? as f64,
        input_length: input? as i64,
        output_length: output? as i64,
        hash_ids: Vec::new(),
    })
}

/// The rest of a line being read by [`fast_line`].
struct Json<'a>(&'a [u8]);

impl Json<'_> {
    fn skip_ws(&mut self) {
        while let [b' ' | b'\t' | b'\n' | b'\r', rest @ ..] = self.0 {
            self.0 = rest;
        }
    }

    /// The byte `c` after optional whitespace.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.skip_ws();
        let (&first, rest) = self.0.split_first()?;
        (first == c).then(|| self.0 = rest)
    }

    /// `"name":` with a name of letters and underscores (no escapes).
    fn key(&mut self) -> Option<&[u8]> {
        self.eat(b'"')?;
        let n = self.0.iter().position(|&c| c == b'"')?;
        let (name, rest) = self.0.split_at(n);
        if !name.iter().all(|&c| c.is_ascii_lowercase() || c == b'_') {
            return None;
        }
        self.0 = &rest[1..];
        self.eat(b':')?;
        Some(name)
    }

    /// A non-negative integer without a leading zero, fraction or exponent, that fits u64.
    fn int(&mut self) -> Option<u64> {
        self.skip_ws();
        let n = self.0.iter().take_while(|c| c.is_ascii_digit()).count();
        let (digits, rest) = self.0.split_at(n);
        if n == 0
            || (n > 1 && digits[0] == b'0')
            || matches!(rest.first(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let mut v = 0u64;
        for &d in digits {
            v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
        }
        self.0 = rest;
        Some(v)
    }

    /// `[id, id, ...]` into `ids`.
    fn ids(&mut self, ids: &mut Vec<u64>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            ids.push(self.int()?);
            if self.eat(b',').is_none() {
                return self.eat(b']');
            }
        }
    }
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
        let (mut reader, mut buf, mut ids) = (reader, String::new(), Vec::new());
        for i in 0u64.. {
            let at = |m: String| err(format!("line {}: {m}", i + 1));
            buf.clear();
            if reader.read_line(&mut buf).map_err(|e| at(e.to_string()))? == 0 {
                break;
            }
            // As `BufRead::lines` gives it: without "\n" or "\r\n".
            let line = buf.strip_suffix('\n').unwrap_or(&buf);
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() {
                continue;
            }
            let l = match fast_line(line, &mut ids) {
                Some(l) => l,
                None => {
                    let l: Line = serde_json::from_str(line).map_err(|e| {
                        at(format!(
                            "{e} (expected {{\"timestamp\": ms, \"input_length\": n, \"output_length\": n, \"hash_ids\": [..]}})"
                        ))
                    })?;
                    ids.clear();
                    ids.extend_from_slice(&l.hash_ids);
                    l
                }
            };
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
            if ids.len() as u64 > most {
                return Err(at(format!(
                    "{} hash_ids for {input_tokens} input tokens: at most {most} at {block_tokens} tokens each (workload.arrival.hash_block_tokens)",
                    ids.len()
                )));
            }
            rows.push(TraceRow {
                arrival_ns,
                input_tokens,
                output_tokens,
            });
            blocks.push(ids.as_slice().into());
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

    /// The serde-free reading of a line gives what serde gives, or leaves the line to serde.
    #[test]
    fn the_fast_reading_agrees_with_serde() {
        let lines = [
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}",
            "{\"hash_ids\":[],\"output_length\":1,\"input_length\":7,\"timestamp\":9007199254740991}",
            " {\"timestamp\" : 12 ,\t\"input_length\": 3, \"output_length\": 4 } ",
            "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 3, \"hash_ids\": [18446744073709551615]}",
            "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 3, \"hash_ids\": [18446744073709551616]}",
            "{\"timestamp\": 27.5, \"input_length\": 512, \"output_length\": 1}",
            "{\"timestamp\": 1e3, \"input_length\": 512, \"output_length\": 1}",
            "{\"timestamp\": 01, \"input_length\": 512, \"output_length\": 1}",
            "{\"timestamp\": -1, \"input_length\": 512, \"output_length\": 1}",
            "{\"timestamp\": 9007199254740993, \"input_length\": 5, \"output_length\": 1}",
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"extra\": 2}",
            "{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 5, \"output_length\": 1}",
            "{\"timestamp\": 1, \"input_length\": 5}",
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1,}",
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1} x",
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1,]}",
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": null}",
        ];
        let mut ids = Vec::new();
        let mut fast = 0;
        for line in lines {
            let Some(l) = fast_line(line, &mut ids) else {
                continue;
            };
            fast += 1;
            let s: Line = serde_json::from_str(line).expect("serde reads what the fast path reads");
            assert_eq!(
                (
                    l.timestamp.to_bits(),
                    l.input_length,
                    l.output_length,
                    &ids[..]
                ),
                (
                    s.timestamp.to_bits(),
                    s.input_length,
                    s.output_length,
                    &s.hash_ids[..]
                ),
                "{line}"
            );
        }
        assert_eq!(fast, 4, "the plain lines are read without serde");
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
