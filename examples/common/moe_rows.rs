//! The MoE kernel-row files' reader and the median, shared by the MoE row examples
//! (cutlass_moe_rows, cutlass_moe_b200_rows, mxfp4_moe_rows).

/// One timed MoE forward: (the columns before the shape, [tokens, hidden, intermediate, top-k,
/// experts, MoE TP, MoE EP], seconds).
pub type RawRow = (Vec<String>, [f64; 7], f64);

/// The rows of the CSV at `path` (lines starting with `#` and the header skipped), whose seven
/// shape columns start at column `shape_at` and are followed by the time in milliseconds.
/// Panics naming the file and line on a malformed one (an example, not the library).
pub fn rows(path: &str, shape_at: usize) -> Vec<RawRow> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> f64 {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{path}: '{line}': column {i} is not a number"))
        };
        let shape: [f64; 7] = std::array::from_fn(|k| num(shape_at + k));
        let label = f[..shape_at].iter().map(|s| s.to_string()).collect();
        out.push((label, shape, num(shape_at + 7) * 1e-3));
    }
    out
}

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
