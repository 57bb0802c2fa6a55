//! Request traces: CSV files replayed request by request.
//!
//! Two column layouts are accepted (header required, columns in any order, names matched
//! without regard to case):
//! - servesim: `arrival_s,input_tokens,output_tokens`, optional `prefix_group,prefix_tokens`;
//!   arrival times in seconds as written (>= 0).
//! - Azure LLM inference trace (2023/2024): `TIMESTAMP,ContextTokens,GeneratedTokens`, with
//!   timestamps like `2023-11-16 18:15:46.6805900`, made relative to the first row.

use std::path::Path;

use super::lengths::parse_token_count;
use crate::error::{Error, Result};

/// One request of a trace: 16 bytes, so a month of the Azure trace (millions of rows) fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceRow {
    /// Arrival time, nanoseconds (servesim: as written; Azure: since the first row).
    pub arrival_ns: u64,
    /// Prompt length, tokens (>= 1).
    pub input_tokens: u32,
    /// Output length, tokens (>= 1).
    pub output_tokens: u32,
}

/// A loaded trace: rows in arrival order.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    /// The requests, nondecreasing arrival time, non-empty.
    pub rows: Vec<TraceRow>,
    /// `(prefix_group, prefix_tokens)` per row when the trace has those columns, else empty.
    /// `prefix_group` is `u32::MAX` for a request without a shared prefix.
    pub prefix: Vec<(u32, u32)>,
    /// Whether arrival times were written as numbers (servesim's `arrival_s`), which a
    /// trace in milliseconds could mistake; Azure timestamps carry their own unit.
    pub numeric_times: bool,
    /// Block identities per row (Mooncake traces), else empty.
    pub blocks: Vec<super::BlockIds>,
    /// Prompt tokens per identity of `blocks` (0 without identities).
    pub block_id_tokens: u32,
}

/// Rows above which a trace's inter-arrival times are judged for their unit.
pub(crate) const UNIT_CHECK_MIN_ROWS: usize = 1000;
/// Median inter-arrival time above which `arrival_s` looks like milliseconds, seconds.
pub(crate) const UNIT_CHECK_MAX_MEDIAN_GAP_S: f64 = 60.0;

impl Trace {
    /// Loads and checks a trace file. Errors name the file and the line.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let reader = crate::input::open_lines(path, crate::input::InputKind::Trace)?;
        Self::parse(reader, &path.display().to_string())
    }

    /// Parses a trace from a reader; `shown` names it in errors.
    pub(crate) fn parse<R: std::io::Read>(reader: R, shown: &str) -> Result<Self> {
        let err = |message: String| Error::Parse {
            path: shown.to_string(),
            message,
        };
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(reader);
        let headers = rdr.headers().map_err(|e| err(e.to_string()))?.clone();
        let cols = Columns::find(&headers).map_err(err)?;
        let mut rows = Vec::new();
        let mut prefix = Vec::new();
        let mut first_azure: Option<(i64, u32)> = None;
        let mut prev: Option<(u64, String)> = None;
        let mut record = csv::StringRecord::new();
        loop {
            match rdr.read_record(&mut record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(err(e.to_string())),
            }
            let line = record.position().map_or(0, |p| p.line());
            let at = |m: String| err(format!("line {line}: {m}"));
            let field = |c: usize| record.get(c).unwrap_or("");
            let t_text = field(cols.t_col);
            let prev_text = prev.as_ref().map_or("", |p| p.1.as_str());
            let arrival_ns = cols
                .arrival_ns(t_text, prev_text, &mut first_azure)
                .map_err(at)?;
            if let Some((p_ns, p_text)) = &prev {
                if arrival_ns < *p_ns {
                    return Err(at(format!(
                        "arrival time {t_text} is before the previous {p_text}"
                    )));
                }
            }
            let input_tokens = parse_token_count(cols.in_name, field(cols.in_col)).map_err(at)?;
            let output_tokens =
                parse_token_count(cols.out_name, field(cols.out_col)).map_err(at)?;
            if let Some((gc, pc)) = cols.prefix_cols {
                prefix.push(parse_prefix(field(gc), field(pc), input_tokens).map_err(at)?);
            }
            rows.push(TraceRow {
                arrival_ns,
                input_tokens,
                output_tokens,
            });
            match &mut prev {
                Some((p_ns, p_text)) => {
                    *p_ns = arrival_ns;
                    p_text.clear();
                    p_text.push_str(t_text);
                }
                None => prev = Some((arrival_ns, t_text.to_string())),
            }
        }
        if rows.is_empty() {
            return Err(err("the trace has no requests".into()));
        }
        rows.shrink_to_fit();
        prefix.shrink_to_fit();
        Ok(Trace {
            rows,
            prefix,
            numeric_times: !cols.azure,
            blocks: Vec::new(),
            block_id_tokens: 0,
        })
    }

    /// Mean arrival rate, requests per second: (rows - 1) / (last - first arrival); `None`
    /// when all requests arrive at the same instant.
    pub(crate) fn mean_rate_per_s(&self) -> Option<f64> {
        let (first, last) = (self.rows.first()?, self.rows.last()?);
        let span_s = (last.arrival_ns - first.arrival_ns) as f64 * 1e-9;
        (span_s > 0.0).then(|| (self.rows.len() - 1) as f64 / span_s)
    }

    /// Median time between consecutive arrivals, seconds (0 for a single row).
    pub(crate) fn median_gap_s(&self) -> f64 {
        let mut gaps: Vec<u64> = self
            .rows
            .windows(2)
            .map(|w| w[1].arrival_ns - w[0].arrival_ns)
            .collect();
        if gaps.is_empty() {
            return 0.0;
        }
        let mid = gaps.len() / 2;
        let (_, m, _) = gaps.select_nth_unstable(mid);
        *m as f64 * 1e-9
    }

    /// Mean prompt length, tokens.
    pub(crate) fn mean_input_tokens(&self) -> f64 {
        self.rows.iter().map(|r| r.input_tokens as f64).sum::<f64>() / self.rows.len() as f64
    }

    /// Mean output length, tokens.
    pub(crate) fn mean_output_tokens(&self) -> f64 {
        self.rows
            .iter()
            .map(|r| r.output_tokens as f64)
            .sum::<f64>()
            / self.rows.len() as f64
    }
}

/// Where a trace's columns are: its own (`arrival_s,input_tokens,output_tokens`, optionally
/// `prefix_group,prefix_tokens`) or the Azure LLM inference trace's
/// (`TIMESTAMP,ContextTokens,GeneratedTokens`).
struct Columns {
    /// Whether the header is the Azure trace's (absolute timestamps, no prefix columns).
    azure: bool,
    /// The arrival-time column's name and index.
    t_name: &'static str,
    t_col: usize,
    /// The prompt-length column's name and index.
    in_name: &'static str,
    in_col: usize,
    /// The output-length column's name and index.
    out_name: &'static str,
    out_col: usize,
    /// The `prefix_group` and `prefix_tokens` columns, when the trace has both.
    prefix_cols: Option<(usize, usize)>,
}

impl Columns {
    /// Finds the columns in `headers` (names matched ignoring case); the message names a
    /// missing column and the header.
    fn find(headers: &csv::StringRecord) -> std::result::Result<Self, String> {
        if headers.iter().all(|h| h.is_empty()) {
            return Err(
                "is empty: expected a header (arrival_s,input_tokens,output_tokens or \
                 TIMESTAMP,ContextTokens,GeneratedTokens) and one row per request"
                    .into(),
            );
        }
        let find = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
        let missing = |name: &str| {
            format!(
                "missing column '{name}' (have: {})",
                headers.iter().collect::<Vec<_>>().join(", ")
            )
        };
        let azure = find("arrival_s").is_none() && find("TIMESTAMP").is_some();
        let (t_name, in_name, out_name) = if azure {
            ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        } else {
            ("arrival_s", "input_tokens", "output_tokens")
        };
        let t_col = find(t_name).ok_or_else(|| missing(t_name))?;
        let in_col = find(in_name).ok_or_else(|| missing(in_name))?;
        let out_col = find(out_name).ok_or_else(|| missing(out_name))?;
        let group_col = if azure { None } else { find("prefix_group") };
        let ptok_col = if azure { None } else { find("prefix_tokens") };
        let prefix_cols = match (group_col, ptok_col) {
            (Some(g), Some(p)) => Some((g, p)),
            (None, None) => None,
            (Some(_), None) => return Err(missing("prefix_tokens")),
            (None, Some(_)) => return Err(missing("prefix_group")),
        };
        Ok(Columns {
            azure,
            t_name,
            t_col,
            in_name,
            in_col,
            out_name,
            out_col,
            prefix_cols,
        })
    }

    /// A row's arrival time `t_text`, ns: seconds as written, or an Azure timestamp made
    /// relative to the first row's (`first_azure`, set by the first row); `prev_text` is the
    /// previous row's time, named when this one is before the first.
    fn arrival_ns(
        &self,
        t_text: &str,
        prev_text: &str,
        first_azure: &mut Option<(i64, u32)>,
    ) -> std::result::Result<u64, String> {
        if !self.azure {
            let t: f64 = t_text
                .parse()
                .map_err(|_| format!("arrival_s '{t_text}' is not a number"))?;
            if !t.is_finite() || t < 0.0 {
                return Err(format!("arrival_s must be >= 0, got {t_text}"));
            }
            return crate::clock::secs_to_ns(t).map_err(|e| format!("arrival_s: {e}"));
        }
        let (secs, nanos) = parse_timestamp(t_text)?;
        let (s0, n0) = *first_azure.get_or_insert((secs, nanos));
        let rel = (secs as i128 - s0 as i128) * 1_000_000_000 + nanos as i128 - n0 as i128;
        if rel < 0 {
            return Err(format!(
                "arrival time {t_text} is before the previous {prev_text}"
            ));
        }
        u64::try_from(rel)
            .ok()
            .and_then(|ns| crate::clock::check_ns(ns).ok())
            .ok_or_else(|| {
                format!(
                    "{} {t_text} is too far from the first row (more than the simulator's \
                     clock holds, about {:.0} years)",
                    self.t_name,
                    crate::clock::MAX_YEARS
                )
            })
    }
}

/// A row's shared prefix from its `prefix_group` and `prefix_tokens` fields: (group, tokens),
/// `(u32::MAX, 0)` for none. The prefix must be shorter than the prompt (`input_tokens`).
fn parse_prefix(
    g_text: &str,
    p_text: &str,
    input_tokens: u32,
) -> std::result::Result<(u32, u32), String> {
    let group = if g_text.is_empty() {
        u32::MAX
    } else {
        g_text
            .parse::<u32>()
            .ok()
            .filter(|&g| g != u32::MAX)
            .ok_or_else(|| {
                format!(
                    "prefix_group '{g_text}' is not a non-negative integer below {}",
                    u32::MAX
                )
            })?
    };
    let ptoks = if p_text.is_empty() {
        0
    } else {
        p_text
            .parse::<u32>()
            .map_err(|_| format!("prefix_tokens '{p_text}' is not a non-negative integer"))?
    };
    if ptoks >= input_tokens {
        return Err(format!(
            "prefix_tokens {ptoks} must be below input_tokens {input_tokens} (the prefix is part of the prompt)"
        ));
    }
    let group = if ptoks == 0 { u32::MAX } else { group };
    if group == u32::MAX && ptoks > 0 {
        return Err(format!("prefix_tokens {ptoks} without a prefix_group"));
    }
    Ok((group, ptoks))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in month `mo` (1-12) of year `y` of the proleptic Gregorian calendar.
fn days_in_month(y: i64, mo: i64) -> i64 {
    match mo {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fraction]` (a `T` separator is also accepted; fraction of any
/// length, digits past nanoseconds ignored) into (seconds since the epoch, nanoseconds).
pub(crate) fn parse_timestamp(text: &str) -> std::result::Result<(i64, u32), String> {
    let bad = || format!("TIMESTAMP '{text}' is not like 2023-11-16 18:15:46.6805900");
    let t = text.trim();
    let (date, time) = t
        .split_once(' ')
        .or_else(|| t.split_once('T'))
        .ok_or_else(bad)?;
    let num = |s: &str, lo: i64, hi: i64| -> std::result::Result<i64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 4 {
            return Err(bad());
        }
        let v: i64 = s.parse().map_err(|_| bad())?;
        if v < lo || v > hi {
            return Err(bad());
        }
        Ok(v)
    };
    let mut dparts = date.split('-');
    let (Some(y), Some(mo), Some(d), None) =
        (dparts.next(), dparts.next(), dparts.next(), dparts.next())
    else {
        return Err(bad());
    };
    let (y, mo, d) = (num(y, 0, 9999)?, num(mo, 1, 12)?, num(d, 1, 31)?);
    if d > days_in_month(y, mo) {
        return Err(format!(
            "TIMESTAMP '{text}' names day {d} of a month that has {}",
            days_in_month(y, mo)
        ));
    }
    let (hms, frac) = match time.trim().split_once('.') {
        Some((a, b)) => (a, b),
        None => (time.trim(), ""),
    };
    let mut tparts = hms.split(':');
    let (Some(h), Some(mi), Some(s), None) =
        (tparts.next(), tparts.next(), tparts.next(), tparts.next())
    else {
        return Err(bad());
    };
    let (h, mi, s) = (num(h, 0, 23)?, num(mi, 0, 59)?, num(s, 0, 60)?);
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut nanos: u32 = 0;
    for i in 0..9 {
        let digit = frac.as_bytes().get(i).map_or(0, |b| (b - b'0') as u32);
        nanos = nanos * 10 + digit;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    Ok((secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace> {
        Trace::parse(text.as_bytes(), "trace.csv")
    }

    #[test]
    fn servesim_format() {
        let t = parse("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,200,20\n1.5,300,30\n")
            .unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[1].arrival_ns, 500_000_000);
        assert_eq!(t.rows[2].input_tokens, 300);
        assert!(t.prefix.is_empty());
        assert!((t.mean_rate_per_s().unwrap() - 2.0 / 1.5).abs() < 1e-12);
        assert!((t.mean_input_tokens() - 200.0).abs() < 1e-12);
    }

    #[test]
    fn servesim_format_with_prefix_columns_in_any_order() {
        let t = parse(
            "output_tokens,prefix_tokens,arrival_s,prefix_group,input_tokens\n5,50,0,3,100\n6,,1,,20\n",
        )
        .unwrap();
        assert_eq!(t.prefix, vec![(3, 50), (u32::MAX, 0)]);
        assert_eq!(t.rows[0].output_tokens, 5);
    }

    #[test]
    fn azure_format_and_timestamps() {
        let t = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2023-11-16 18:15:46.6805900,374,44\n\
             2023-11-16 18:15:50.9951690,396,109\n\
             2023-11-16 18:15:51.5,879,10\n\
             2023-11-17 00:00:00,1,1\n",
        )
        .unwrap();
        assert_eq!(t.rows[0].arrival_ns, 0);
        assert_eq!(t.rows[1].arrival_ns, 4_314_579_000);
        assert_eq!(t.rows[2].arrival_ns, 4_819_410_000);
        // 18:15:46.68059 to midnight is 5 h 44 min 13.31941 s.
        assert_eq!(t.rows[3].arrival_ns, 20_653_319_410_000);
        assert_eq!(t.rows[1].input_tokens, 396);
        assert_eq!(t.rows[1].output_tokens, 109);
    }

    #[test]
    fn timestamps_across_months_and_leap_days() {
        let (a, _) = parse_timestamp("2024-02-28 12:00:00").unwrap();
        let (b, _) = parse_timestamp("2024-03-01T12:00:00").unwrap();
        assert_eq!(b - a, 2 * 86_400);
        let (c, n) = parse_timestamp("1970-01-01 00:00:01.123456789123").unwrap();
        assert_eq!((c, n), (1, 123_456_789));
        assert!(parse_timestamp("2023-13-01 00:00:00").is_err());
        // Days a month does not have (issue 29: February 30 was taken as March 1 or 2).
        for bad in [
            "2023-02-30 00:00:00",
            "2023-02-29 00:00:00",
            "2100-02-29 00:00:00",
            "2023-04-31 00:00:00",
        ] {
            let e = parse_timestamp(bad).unwrap_err();
            assert!(e.contains("a month that has"), "{bad}: {e}");
        }
        assert!(parse_timestamp("2000-02-29 00:00:00").is_ok());
        assert!(parse_timestamp("2023-12-31 23:59:59").is_ok());
        assert!(parse_timestamp("yesterday").is_err());
        assert!(parse_timestamp("2023-11-16 18:15:46.68x").is_err());
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = parse("a,b\n1,2\n").unwrap_err().to_string();
        assert_eq!(e, "trace.csv: missing column 'arrival_s' (have: a, b)");
        let e = parse("arrival_s,output_tokens\n1,2\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "trace.csv: missing column 'input_tokens' (have: arrival_s, output_tokens)"
        );
        let e = parse(
            "arrival_s,input_tokens,output_tokens\n0,1,1\n1,1,1\n2,1,1\n3,1,1\n4.0,1,1\n3.2,1,1\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "trace.csv: line 7: arrival time 3.2 is before the previous 4.0"
        );
        let cases = [
            ("0,-5,1", "line 3: input_tokens must be >= 1, got -5"),
            ("0,0,1", "line 3: input_tokens must be >= 1, got 0"),
            ("0,abc,1", "line 3: input_tokens 'abc' is not an integer"),
            ("0,5,0", "line 3: output_tokens must be >= 1, got 0"),
            ("x,5,1", "line 3: arrival_s 'x' is not a number"),
            ("-1,5,1", "line 3: arrival_s must be >= 0, got -1"),
        ];
        for (row, want) in cases {
            let text = format!("arrival_s,input_tokens,output_tokens\n0,1,1\n{row}\n");
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.starts_with("trace.csv: ") && e.contains(want),
                "{e} / {want}"
            );
        }
        let e = parse("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,1,1\n2023-11-16 18:15:46.4,1,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3: arrival time 2023-11-16 18:15:46.4 is before the previous 2023-11-16 18:15:46.5"), "{e}");
        let e = parse("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.5,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing column 'GeneratedTokens'"), "{e}");
        let e = parse("arrival_s,input_tokens,output_tokens\n0,10,1,7\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("trace.csv: "), "{e}");
        let e = parse("arrival_s,input_tokens,output_tokens\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no requests"), "{e}");
        let e =
            parse("arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,1,0,10\n")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("line 2: prefix_tokens 10 must be below input_tokens 10"),
            "{e}"
        );
    }
}
