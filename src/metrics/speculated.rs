//! Completed requests' decode tokens made in speculating iterations: what the measured
//! acceptance length of a run is computed from
//! ([`crate::speculative::measured_acceptance_length`]), streaming (one count per distinct
//! length, never one record per request).

use std::collections::BTreeMap;

/// Lengths below this are counted in a dense array, longer ones in a map.
const DENSE_TOKENS: usize = 1 << 14;

/// The tokens completed requests made in speculating (decode-only, within the speculative
/// batch limit) iterations, split where a verify step's gain can be capped: a request's final
/// run of consecutive speculating iterations, when its last token came from one (its last
/// verify step gains at most the tokens left), counted by length; and every other speculated
/// token (runs that a mixed or plain step followed), whose steps gain the acceptance's full
/// mean. Empty without speculation.
#[derive(Debug, Clone, Default)]
pub struct SpeculatedLengths {
    /// `dense[t]`: requests whose final speculated run made t tokens, t < [`DENSE_TOKENS`]
    /// (grown on demand).
    dense: Vec<u64>,
    /// The same for longer runs.
    sparse: BTreeMap<u64, u64>,
    /// Speculated tokens outside the requests' final runs, tokens.
    uncapped_tokens: u64,
}

impl SpeculatedLengths {
    /// Counts one completed request that made `tokens` tokens in speculating iterations, the
    /// last `final_run` of them (0: its last token was not speculated) in its final run of
    /// consecutive speculating iterations.
    pub fn record(&mut self, tokens: u64, final_run: u64) {
        debug_assert!(final_run <= tokens);
        let final_run = final_run.min(tokens);
        self.uncapped_tokens += tokens - final_run;
        match usize::try_from(final_run) {
            Ok(0) => {}
            Ok(t) if t < DENSE_TOKENS => {
                if self.dense.len() <= t {
                    self.dense.resize(t + 1, 0);
                }
                self.dense[t] += 1;
            }
            _ => *self.sparse.entry(final_run).or_insert(0) += 1,
        }
    }

    /// Speculated tokens outside the requests' final runs, tokens.
    pub fn uncapped_tokens(&self) -> u64 {
        self.uncapped_tokens
    }

    /// Final runs as (tokens, requests) pairs with at least one request, ascending tokens.
    pub fn final_runs(&self) -> impl Iterator<Item = (u64, u64)> + Clone + '_ {
        let dense = self
            .dense
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(t, &n)| (t as u64, n));
        dense.chain(self.sparse.iter().map(|(&t, &n)| (t, n)))
    }

    /// Every speculated token counted, tokens.
    pub fn tokens(&self) -> u64 {
        self.uncapped_tokens + self.final_runs().map(|(t, n)| t * n).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_final_run_once_in_order_and_the_rest_as_tokens() {
        let mut s = SpeculatedLengths::default();
        for (tokens, run) in [
            (0, 0),
            (5, 5),
            (3, 1),
            (9, 5),
            (1 << 20, 1 << 20),
            (DENSE_TOKENS as u64, DENSE_TOKENS as u64),
            (1 << 21, 1 << 20),
            (7, 0),
        ] {
            s.record(tokens, run);
        }
        let got: Vec<_> = s.final_runs().collect();
        assert_eq!(
            got,
            vec![(1, 1), (5, 2), (DENSE_TOKENS as u64, 1), (1 << 20, 2)]
        );
        assert_eq!(s.uncapped_tokens(), 2 + 4 + (1 << 20) + 7);
        assert_eq!(
            s.tokens(),
            5 + 3 + 9 + (1 << 20) + DENSE_TOKENS as u64 + (1 << 21) + 7
        );
    }
}
