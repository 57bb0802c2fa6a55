//! `--trace-events FILE`: a run as a Chrome trace (the JSON trace-event format that
//! chrome://tracing and <https://ui.perfetto.dev> open), written as the run goes.
//!
//! Each replica is a process ("replica 0", "prefill 1", "decode 0") with one track of its
//! iterations as complete events (`"ph": "X"`): the batch's decodes, prefill chunks and
//! tokens in `args`; a fast-forwarded run of decode-only iterations is one event named
//! `decode xN` with its iteration count. Two counter tracks per replica (`"ph": "C"`) show
//! its queue (waiting, running requests) and its KV cache use (percent of its blocks),
//! written when they change. Times are microseconds with nanosecond decimals.
//!
//! The file is bounded: after `max_events` events the writer keeps counting but writes no
//! more, and says so in the file (a global instant event and `otherData.capped`) and to
//! the caller ([`TraceStats`]), which tells the user.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::sim::{PoolRole, TraceOccupancy, TraceSink, TraceSpan};

/// Events a trace holds by default: about 150 MB of JSON.
pub const DEFAULT_MAX_TRACE_EVENTS: u64 = 1_000_000;

/// What a finished trace holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceStats {
    /// Events written.
    pub written: u64,
    /// Events left out once the cap was reached.
    pub dropped: u64,
}

/// A Chrome trace written to `W` as a run goes (see the module's description).
pub struct ChromeTrace<W: Write> {
    out: W,
    max_events: u64,
    written: u64,
    dropped: u64,
    /// Whether anything follows the array's opening bracket (a separator is due).
    started: bool,
    /// Last counter values written, by process (waiting, running, KV use in 1/1000 %); a
    /// process appears here once named.
    counters: HashMap<u32, Option<(u64, u64, u64)>>,
    /// Time of the last event seen, ns.
    last_ns: u64,
    /// The first write error; nothing more is written after it.
    error: Option<io::Error>,
}

/// The process id of a replica: its pool in the high bits, its slot in the low ones.
fn pid(pool: PoolRole, replica: u32) -> u32 {
    let role = match pool {
        PoolRole::Colocated => 1,
        PoolRole::Prefill => 2,
        PoolRole::Decode => 3,
    };
    (role << 20) | (replica & 0xf_ffff)
}

/// `ns` as trace microseconds with three decimals.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

impl<W: Write> ChromeTrace<W> {
    /// Starts a trace on `out` that holds at most `max_events` events.
    pub fn new(mut out: W, max_events: u64) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(ChromeTrace {
            out,
            max_events,
            written: 0,
            dropped: 0,
            started: false,
            counters: HashMap::new(),
            last_ns: 0,
            error: None,
        })
    }

    /// Writes JSON objects into the event array.
    fn raw(&mut self, json: &str) -> bool {
        if self.error.is_some() {
            return false;
        }
        let sep: &[u8] = if self.started { b",\n" } else { b"" };
        let r = self
            .out
            .write_all(sep)
            .and_then(|()| self.out.write_all(json.as_bytes()));
        self.started = true;
        match r {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// Writes one event, or counts it once the cap is reached.
    fn event(&mut self, json: &str) {
        if self.written >= self.max_events {
            self.dropped += 1;
        } else if self.raw(json) {
            self.written += 1;
        }
    }

    /// The process of replica `replica` of `pool`, named the first time it appears (the
    /// metadata does not count against the cap).
    fn process(&mut self, pool: PoolRole, replica: u32) -> u32 {
        let p = pid(pool, replica);
        if let std::collections::hash_map::Entry::Vacant(e) = self.counters.entry(p) {
            e.insert(None);
            if self.dropped == 0 {
                let name = format!("{} {replica}", pool.name());
                self.raw(&format!(
                    "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{p},\"args\":{{\"name\":\"{name}\"}}}},\n\
                     {{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{p},\"args\":{{\"sort_index\":{p}}}}},\n\
                     {{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{p},\"tid\":1,\"args\":{{\"name\":\"iterations\"}}}}"
                ));
            }
        }
        p
    }

    /// Ends the JSON document and flushes; returns what it holds, or the first write error.
    pub fn finish(mut self) -> io::Result<TraceStats> {
        if self.dropped > 0 {
            let note = format!(
                "{{\"name\":\"trace capped: the first {} events written, {} more left out\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":{}}}",
                self.written,
                self.dropped,
                us(self.last_ns)
            );
            self.raw(&note);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let tail = format!(
            "\n],\n\"otherData\":{{\"generator\":\"servesim\",\"events_written\":{},\"events_left_out\":{},\"capped\":{}}}}}\n",
            self.written,
            self.dropped,
            self.dropped > 0
        );
        self.out.write_all(tail.as_bytes())?;
        self.out.flush()?;
        Ok(TraceStats {
            written: self.written,
            dropped: self.dropped,
        })
    }
}

impl<W: Write> TraceSink for ChromeTrace<W> {
    fn span(&mut self, s: &TraceSpan) {
        self.last_ns = self.last_ns.max(s.end_ns);
        let p = self.process(s.pool, s.replica);
        let kind = match (s.decodes > 0, s.prefill_seqs > 0) {
            (true, true) => "prefill+decode",
            (false, true) => "prefill",
            _ => "decode",
        };
        let name = if s.iterations > 1 {
            format!("{kind} x{}", s.iterations)
        } else {
            kind.to_string()
        };
        let tokens = s.decodes as u64 + s.prefill_tokens;
        self.event(&format!(
            "{{\"name\":\"{name}\",\"cat\":\"iteration\",\"ph\":\"X\",\"pid\":{p},\"tid\":1,\"ts\":{},\"dur\":{},\"args\":{{\"iterations\":{},\"batch\":{},\"decodes\":{},\"prefill_seqs\":{},\"prefill_tokens\":{},\"tokens_per_iteration\":{tokens}}}}}",
            us(s.start_ns),
            us(s.end_ns - s.start_ns),
            s.iterations,
            s.decodes + s.prefill_seqs,
            s.decodes,
            s.prefill_seqs,
            s.prefill_tokens,
        ));
    }

    fn occupancy(&mut self, o: &TraceOccupancy) {
        self.last_ns = self.last_ns.max(o.at_ns);
        let p = self.process(o.pool, o.replica);
        let kv_milli_pct = o.kv_used_blocks * 100_000 / o.kv_blocks.max(1);
        let now = (o.waiting, o.running, kv_milli_pct);
        let last = self.counters.get(&p).copied().flatten();
        if last == Some(now) {
            return;
        }
        self.counters.insert(p, Some(now));
        let ts = us(o.at_ns);
        if last.map(|l| (l.0, l.1)) != Some((now.0, now.1)) {
            self.event(&format!(
                "{{\"name\":\"queue\",\"ph\":\"C\",\"pid\":{p},\"ts\":{ts},\"args\":{{\"waiting\":{},\"running\":{}}}}}",
                o.waiting, o.running
            ));
        }
        if last.map(|l| l.2) != Some(now.2) {
            self.event(&format!(
                "{{\"name\":\"KV cache used %\",\"ph\":\"C\",\"pid\":{p},\"ts\":{ts},\"args\":{{\"used\":{}.{:03}}}}}",
                kv_milli_pct / 1000,
                kv_milli_pct % 1000
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start_ns: u64, end_ns: u64, iterations: u64) -> TraceSpan {
        TraceSpan {
            pool: PoolRole::Decode,
            replica: 2,
            start_ns,
            end_ns,
            iterations,
            decodes: 8,
            prefill_seqs: 0,
            prefill_tokens: 0,
        }
    }

    fn occupancy(at_ns: u64, waiting: u64) -> TraceOccupancy {
        TraceOccupancy {
            pool: PoolRole::Decode,
            replica: 2,
            at_ns,
            waiting,
            running: 8,
            kv_used_blocks: 1,
            kv_blocks: 3,
        }
    }

    /// Two spans (one a fast-forwarded run) and two identical occupancies into a trace
    /// holding at most `cap` events: what it says, and the bytes.
    fn trace(cap: u64) -> (TraceStats, serde_json::Value) {
        let mut out = Vec::new();
        let mut t = ChromeTrace::new(&mut out, cap).unwrap();
        t.span(&span(1_500, 9_000_250, 1));
        t.occupancy(&occupancy(9_000_250, 3));
        t.occupancy(&occupancy(9_100_000, 3)); // unchanged: not written
        t.span(&span(9_000_250, 90_000_000, 57));
        let stats = t.finish().unwrap();
        (stats, serde_json::from_slice(&out).expect("valid JSON"))
    }

    #[test]
    fn a_trace_is_json_with_spans_counters_and_named_replicas() {
        let (stats, doc) = trace(100);
        // Two spans, the queue and the KV counters once each.
        assert_eq!(
            stats,
            TraceStats {
                written: 4,
                dropped: 0
            }
        );
        let events = doc["traceEvents"].as_array().unwrap();
        let named: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(named, vec!["decode 2"]);
        let spans: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(spans[0]["ts"].as_f64(), Some(1.5));
        assert_eq!(spans[0]["dur"].as_f64(), Some(8998.75));
        assert_eq!(spans[1]["name"], "decode x57");
        assert_eq!(spans[1]["args"]["iterations"], 57);
        let kv = events
            .iter()
            .find(|e| e["name"] == "KV cache used %")
            .unwrap();
        assert_eq!(kv["args"]["used"].as_f64(), Some(33.333));
        assert_eq!(doc["otherData"]["capped"], false);
    }

    #[test]
    fn a_capped_trace_says_so_and_stays_valid_json() {
        let (stats, doc) = trace(2);
        assert_eq!(
            stats,
            TraceStats {
                written: 2,
                dropped: 2
            }
        );
        assert_eq!(doc["otherData"]["capped"], true);
        assert_eq!(doc["otherData"]["events_written"], 2);
        assert_eq!(doc["otherData"]["events_left_out"], 2);
        let events = doc["traceEvents"].as_array().unwrap();
        let note = events.last().unwrap();
        assert_eq!(note["ph"], "i");
        assert!(note["name"].as_str().unwrap().starts_with("trace capped"));
    }
}
