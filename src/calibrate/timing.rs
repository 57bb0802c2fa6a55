//! The timing method's arithmetic, separate from the CUDA calls so that it is tested without a
//! GPU: how many input copies rotate, how many launches make one sample, and how long the
//! stream is held so that the host's launch overhead stays out of the timed region.
//!
//! A sample (see docs/calibration.md, "Timing"): the spin kernel holds the stream for
//! `spin_ns`; behind it the host queues the start event, `n` launches over rotated inputs and
//! the end event. When the spin ends the queued launches run back to back, so the events
//! bracket GPU time only. The sample is `elapsed / n`. If queueing took the host longer than
//! the spin ([`hold_covered`] is false) the GPU may have idled between launches: the sample is
//! discarded and retried with a longer spin ([`longer_spin_ns`]).

/// Warm-up launches before the timed samples.
pub const WARMUP: usize = 5;
/// GPU time a sample aims for, microseconds: the event timer's resolution is about 0.5 µs
/// (CUDA driver API, cuEventElapsedTime), so a sample of 20 µs or more quantises by at most
/// 2.5%.
pub const TARGET_SAMPLE_US: f64 = 20.0;
/// Most launches in one sample.
pub const MAX_LAUNCHES_PER_SAMPLE: usize = 64;
/// First spin duration, nanoseconds, before the host's queueing time is known.
pub const SPIN_START_NS: u64 = 100_000;
/// Longest spin, nanoseconds; a host slower than this to queue one sample is an error.
pub const SPIN_MAX_NS: u64 = 200_000_000;

/// Copies of a `bytes`-sized input to rotate over so that together they hold more than twice
/// the `l2_bytes` L2 cache: run *i* reads copy *i mod R*, and between two reads of one copy at
/// least 2 x L2 of other data passes through the cache. No cap: R x bytes < 2 x L2 + bytes.
pub fn rotations(l2_bytes: u64, bytes: u64) -> u64 {
    (2 * l2_bytes + 1).div_ceil(bytes.max(1)).max(1)
}

/// Launches per sample for a kernel whose single held launch took `pilot_us`: enough for
/// [`TARGET_SAMPLE_US`], between 1 and [`MAX_LAUNCHES_PER_SAMPLE`].
pub fn launches_per_sample(pilot_us: f64) -> usize {
    if !(pilot_us.is_finite() && pilot_us > 0.0) {
        return MAX_LAUNCHES_PER_SAMPLE;
    }
    ((TARGET_SAMPLE_US / pilot_us).ceil() as usize).clamp(1, MAX_LAUNCHES_PER_SAMPLE)
}

/// Whether a spin of `spin_ns` covered the host's `host_ns` of queueing (start event, the
/// launches, end event) with a 20% margin for the spin's own start-up.
pub fn hold_covered(host_ns: u64, spin_ns: u64) -> bool {
    host_ns.saturating_mul(5) < spin_ns.saturating_mul(4)
}

/// The spin for a retry after `host_ns` of queueing outran a spin of `spin_ns`: twice the
/// longer of the two. `None` past [`SPIN_MAX_NS`].
pub fn longer_spin_ns(spin_ns: u64, host_ns: u64) -> Option<u64> {
    let next = 2 * spin_ns.max(host_ns);
    (next <= SPIN_MAX_NS).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_copies_always_exceed_twice_l2() {
        let l2 = 50 << 20; // H100 / H200: 50 MiB
        for bytes in [
            1u64,
            4096,
            1 << 20,
            3 << 20,
            6 << 20,
            50 << 20,
            100 << 20,
            8 << 30,
        ] {
            let r = rotations(l2, bytes);
            assert!(r * bytes > 2 * l2, "{bytes} B: {r} copies");
            assert!(
                (r - 1) * bytes <= 2 * l2,
                "{bytes} B: {r} copies, one too many"
            );
        }
        // The case: a 3 MiB attention input needs 34 copies, not 16.
        assert_eq!(rotations(l2, 3 << 20), 34);
        assert_eq!(rotations(l2, 1 << 30), 1);
    }

    #[test]
    fn samples_aim_for_twenty_microseconds() {
        assert_eq!(launches_per_sample(2.0), 10);
        assert_eq!(launches_per_sample(7.0), 3);
        assert_eq!(launches_per_sample(25.0), 1);
        assert_eq!(launches_per_sample(0.01), MAX_LAUNCHES_PER_SAMPLE);
        assert_eq!(launches_per_sample(f64::NAN), MAX_LAUNCHES_PER_SAMPLE);
    }

    #[test]
    fn a_hold_shorter_than_the_hosts_queueing_is_retried_longer() {
        assert!(hold_covered(50_000, 100_000));
        assert!(!hold_covered(90_000, 100_000));
        assert_eq!(longer_spin_ns(100_000, 90_000), Some(200_000));
        assert_eq!(longer_spin_ns(100_000, 300_000), Some(600_000));
        assert_eq!(longer_spin_ns(SPIN_MAX_NS, 0), None);
        // Doubling reaches the cap in a bounded number of retries.
        let (mut s, mut n) = (SPIN_START_NS, 0);
        while let Some(next) = longer_spin_ns(s, 0) {
            s = next;
            n += 1;
        }
        assert!(n <= 11, "{n}");
    }
}
