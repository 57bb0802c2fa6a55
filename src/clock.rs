//! The simulation clock: time is integer nanoseconds in a `u64`, and every time computed or
//! given in seconds (a step time, an arrival, a setting in s, ms or us) enters the clock
//! through the one conversion here, under one rule: a time that is not finite, is negative,
//! or lies beyond [`MAX_NS`] is an error ([`BeyondClock`]) the caller must handle (reject the
//! input, or end the run as truncated and say why), never a value saturated to something
//! that looks plausible.

/// The latest time the clock holds, ns: 2^62 ns, about 146 years. Twice it still fits a `u64`,
/// so the sum of two clock times (`now + duration`) cannot overflow.
pub const MAX_NS: u64 = 1 << 62;

/// [`MAX_NS`] in years (of 365.25 days), for messages.
pub const MAX_YEARS: f64 = MAX_NS as f64 / 1e9 / (365.25 * 86_400.0);

/// A time that the nanosecond clock cannot hold: not finite, negative, or beyond [`MAX_NS`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{} is not a time the simulator's nanosecond clock holds (0 to about {MAX_YEARS:.0} years)", seconds_text(*.seconds))]
pub struct BeyondClock {
    /// The time that was asked for, s (NaN or infinite when it was not finite).
    pub seconds: f64,
}

fn seconds_text(s: f64) -> String {
    if s.is_finite() {
        format!("{s:.4e} s")
    } else {
        format!("{s} s")
    }
}

/// Seconds to integer nanoseconds, rounded to nearest: the conversion every duration of the
/// simulation goes through. Errors when `seconds` is not finite, below -0.5 ns, or beyond
/// [`MAX_NS`].
#[inline]
pub fn secs_to_ns(seconds: f64) -> Result<u64, BeyondClock> {
    to_ns(seconds, 1e9)
}

/// Milliseconds to nanoseconds under the rule of [`secs_to_ns`].
#[inline]
pub fn ms_to_ns(ms: f64) -> Result<u64, BeyondClock> {
    to_ns(ms, 1e6)
}

/// Microseconds to nanoseconds under the rule of [`secs_to_ns`].
#[inline]
pub fn us_to_ns(us: f64) -> Result<u64, BeyondClock> {
    to_ns(us, 1e3)
}

/// A time already in (fractional) nanoseconds, e.g. a step time multiplied by a scale, rounded
/// onto the clock under the rule of [`secs_to_ns`].
#[inline]
pub fn ns_f64_to_ns(ns: f64) -> Result<u64, BeyondClock> {
    to_ns(ns, 1.0)
}

/// An integer time (a sum of clock times, say) checked against the clock's range.
#[inline]
pub fn check_ns(ns: u64) -> Result<u64, BeyondClock> {
    if ns <= MAX_NS {
        Ok(ns)
    } else {
        Err(BeyondClock {
            seconds: ns as f64 * 1e-9,
        })
    }
}

/// The one rule: `value x ns_per_unit`, rounded, must be a finite integer in `[0, MAX_NS]`.
#[inline]
fn to_ns(value: f64, ns_per_unit: f64) -> Result<u64, BeyondClock> {
    let ns = crate::numeric::round(value * ns_per_unit);
    // NaN fails both comparisons; -0.0 (a tiny negative rounding error) is 0.
    if ns >= 0.0 && ns <= MAX_NS as f64 {
        Ok(ns as u64)
    } else {
        Err(BeyondClock {
            seconds: value * ns_per_unit / 1e9,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_and_rounds_to_nearest() {
        assert_eq!(secs_to_ns(1.5), Ok(1_500_000_000));
        assert_eq!(secs_to_ns(1.4e-9), Ok(1));
        assert_eq!(secs_to_ns(0.0), Ok(0));
        assert_eq!(secs_to_ns(-0.0), Ok(0));
        // A rounding error below half a nanosecond is zero, not an error.
        assert_eq!(secs_to_ns(-1e-12), Ok(0));
        assert_eq!(ms_to_ns(2.5), Ok(2_500_000));
        assert_eq!(us_to_ns(20.0), Ok(20_000));
        assert_eq!(ns_f64_to_ns(7.6), Ok(8));
    }

    #[test]
    fn non_finite_negative_and_beyond_the_clock_are_errors() {
        for s in [f64::NAN, f64::INFINITY, -f64::INFINITY, -1.0, 1e300, 5e9] {
            let e = secs_to_ns(s).unwrap_err();
            assert!(e.to_string().contains("146 years"), "{e}");
        }
        assert!(ns_f64_to_ns(1e300).is_err());
        assert!(ms_to_ns(f64::NAN).is_err());
        // The edge itself is on the clock; and twice it fits a u64.
        assert_eq!(ns_f64_to_ns(MAX_NS as f64), Ok(MAX_NS));
        assert!(MAX_NS.checked_mul(2).is_some());
        assert!((MAX_YEARS - 146.1).abs() < 0.1, "{MAX_YEARS}");
    }
}
