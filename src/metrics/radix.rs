//! Stable least-significant-digit radix sort by a 64-bit key, for the steady-state analysis
//! (its sorts of up to [`super::STEADY_STATE_RECORDS`] values and records were about 4% of the
//! instructions of a 1,000,000-request run at 1 req/s: docs/performance.md).
//!
//! Eight passes of one byte each, from the lowest; a pass whose byte is the same for every
//! element is skipped (it would not move anything), so keys of a narrow range (times of one
//! run, latencies of one metric) take a few passes. Each pass is stable, so the result is the
//! stable sort by the key: the same order as `sort_by_key` (and, for plain integers, as
//! `sort_unstable`, since equal integers cannot be told apart).

/// Below this many elements the standard library's sort is used (same result).
const SMALL: usize = 64;

/// Sorts `v` by `key`, stably (equal keys keep their order): the same result as
/// `v.sort_by_key(key)`, in O(8 n) moves and no comparisons.
pub fn sort_by_key<T: Copy>(v: &mut [T], key: impl Fn(&T) -> u64) {
    let n = v.len();
    if n < SMALL {
        v.sort_by_key(key);
        return;
    }
    // Counts of every byte value at every byte position, in one pass over the keys.
    let mut counts = vec![[0usize; 256]; 8];
    for x in v.iter() {
        let k = key(x);
        for (d, c) in counts.iter_mut().enumerate() {
            c[(k >> (8 * d)) as usize & 0xff] += 1;
        }
    }
    // Scratch space of the same size (its initial contents are overwritten by the first pass).
    let mut buf = v.to_vec();
    // Where the elements are now: `v` (false) or `buf` (true).
    let mut in_buf = false;
    for (d, c) in counts.iter().enumerate() {
        if c.contains(&n) {
            continue;
        }
        // Start of each byte value's range in the output.
        let mut start = [0usize; 256];
        let mut sum = 0;
        for (s, &k) in start.iter_mut().zip(c.iter()) {
            *s = sum;
            sum += k;
        }
        let (src, dst): (&[T], &mut [T]) = if in_buf {
            (&buf, &mut *v)
        } else {
            (&*v, &mut buf)
        };
        for x in src {
            let b = (key(x) >> (8 * d)) as usize & 0xff;
            dst[start[b]] = *x;
            start[b] += 1;
        }
        in_buf = !in_buf;
    }
    if in_buf {
        v.copy_from_slice(&buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (splitmix64), so the test needs no seed handling.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The radix sort gives the standard library's stable order, on keys of every width
    /// (full 64-bit, narrow, all equal, many ties) and on sizes around the small cut-off.
    #[test]
    fn it_orders_like_the_stable_standard_sort() {
        let mut s = 7u64;
        for n in [0usize, 1, 63, 64, 65, 1000, 70_000] {
            for mask in [u64::MAX, 0xffff, 0xff_0000_0000, 0, 7] {
                // (key, original position): the position shows whether ties kept their order.
                let v: Vec<(u64, u32)> = (0..n as u32)
                    .map(|i| (splitmix(&mut s) & mask, i))
                    .collect();
                let mut want = v.clone();
                want.sort_by_key(|p| p.0);
                let mut got = v;
                sort_by_key(&mut got, |p| p.0);
                assert_eq!(got, want, "n {n} mask {mask:x}");
            }
        }
    }

    /// Two passes, the minor key first, give the order of the compound key.
    #[test]
    fn minor_then_major_key_sorts_by_both() {
        let mut s = 11u64;
        let v: Vec<(u64, u64, u32)> = (0..5000u32)
            .map(|i| (splitmix(&mut s) % 50, splitmix(&mut s) % 40, i))
            .collect();
        let mut want = v.clone();
        want.sort_by_key(|r| (r.0, r.1));
        let mut got = v;
        sort_by_key(&mut got, |r| r.1);
        sort_by_key(&mut got, |r| r.0);
        assert_eq!(got, want);
    }
}
