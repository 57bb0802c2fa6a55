//! The calibration suite's own CUDA C kernels (the files in `kernels/`), the compile units
//! NVRTC builds from them, the shapes the attention kernel supports, how it splits the KV
//! across thread blocks, and the CPU references the kernels are checked against.
//!
//! Plain code, compiled with or without feature `cuda`: the CUDA backend (`cuda.rs`) and the
//! NVRTC compile test (`nvrtc.rs`) build exactly the units [`suite_units`] lists.

/// Streaming kernels, the empty kernel, the spin kernel and the input fills.
pub const STREAM_SRC: &str = include_str!("kernels/stream.cu");
/// The split-KV paged decode-attention kernel and its merge pass (`-DHEAD_DIM`, `-DGROUP`).
pub const ATTENTION_SRC: &str = include_str!("kernels/attention.cu");

/// Kernels of [`STREAM_SRC`].
pub const STREAM_KERNELS: &[&str] = &[
    "empty_kernel",
    "copy_kernel",
    "reduce_kernel",
    "spin_kernel",
    "fill_bf16",
    "fill_fp8",
];
/// Kernels of [`ATTENTION_SRC`].
pub const ATTENTION_KERNELS: &[&str] = &["paged_decode_attention", "paged_decode_attention_merge"];

/// Head dimensions the attention kernel supports (`HEAD_DIM / 8` lanes per token must divide 32).
pub const ATTENTION_HEAD_DIMS: [u64; 3] = [64, 128, 256];
/// Largest GQA group (query heads per KV head) the attention kernel holds in registers.
pub const MAX_GROUP: u64 = 8;
/// Warps per block of the attention kernel (NWARPS in attention.cu).
pub const ATTENTION_WARPS: u32 = 4;
/// KV-cache block size of the paged attention kernel, tokens (BLOCK_TOKENS in attention.cu).
pub const KV_BLOCK_TOKENS: u64 = 16;
/// Fewest KV blocks one split covers (128 tokens: two blocks per warp), so a split's partial
/// state (written once, read once by the merge) stays small against the KV it reads.
pub const MIN_SPLIT_BLOCKS: u64 = 8;
/// Thread blocks per SM the split aims for: several resident blocks per SM keep enough loads
/// in flight to stream HBM.
pub const TARGET_BLOCKS_PER_SM: u64 = 4;

/// One NVRTC compilation: a source, its `-D` options, and the kernels it defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileUnit {
    /// A name for logs and tables, e.g. `attention hd128 g8`.
    pub name: String,
    /// File name NVRTC reports in its messages.
    pub file: &'static str,
    /// CUDA C source.
    pub source: &'static str,
    /// Extra NVRTC options (`-D...`).
    pub options: Vec<String>,
    /// `extern "C"` kernels the unit defines.
    pub kernels: &'static [&'static str],
}

/// The streaming unit.
pub fn stream_unit() -> CompileUnit {
    CompileUnit {
        name: "stream".into(),
        file: "servesim_stream.cu",
        source: STREAM_SRC,
        options: Vec::new(),
        kernels: STREAM_KERNELS,
    }
}

/// Why the attention kernel cannot run `head_dim` x `group`, or `Ok`.
pub fn attention_supported(head_dim: u64, group: u64) -> Result<(), String> {
    if !ATTENTION_HEAD_DIMS.contains(&head_dim) || group == 0 || group > MAX_GROUP {
        return Err(format!(
            "the paged attention kernel supports head_dim 64, 128 or 256 and 1..={MAX_GROUP} query \
             heads per KV head, not head_dim {head_dim} x group {group}"
        ));
    }
    Ok(())
}

/// The attention unit for `head_dim` x `group`; an error saying why when unsupported.
pub fn attention_unit(head_dim: u64, group: u64) -> Result<CompileUnit, String> {
    attention_supported(head_dim, group)?;
    Ok(CompileUnit {
        name: format!("attention hd{head_dim} g{group}"),
        file: "servesim_paged_attention.cu",
        source: ATTENTION_SRC,
        options: vec![format!("-DHEAD_DIM={head_dim}"), format!("-DGROUP={group}")],
        kernels: ATTENTION_KERNELS,
    })
}

/// Every unit the suite can compile: the streaming unit and one attention unit per supported
/// head_dim x group.
pub fn suite_units() -> Vec<CompileUnit> {
    let mut units = vec![stream_unit()];
    for hd in ATTENTION_HEAD_DIMS {
        for g in 1..=MAX_GROUP {
            units.push(attention_unit(hd, g).expect("listed shapes are supported"));
        }
    }
    units
}

/// How the attention kernel splits each sequence's KV blocks across thread blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPlan {
    /// Splits per (sequence, KV head): the grid's z dimension. 1 means no merge pass.
    pub splits: u64,
    /// KV blocks each split covers (the last may cover fewer).
    pub blocks_per_split: u64,
}

/// The split of a batch of `batch` sequences x `kv_heads` KV heads, each of up to `max_blocks`
/// KV blocks, on a GPU of `sm_count` SMs: enough splits that the grid has
/// [`TARGET_BLOCKS_PER_SM`] blocks per SM, but none shorter than [`MIN_SPLIT_BLOCKS`] blocks.
/// Without splits, Llama-3.1-8B at batch 1 (8 KV heads) would run 8 blocks on 132 SMs.
pub fn attention_split(batch: u64, kv_heads: u64, max_blocks: u64, sm_count: u64) -> SplitPlan {
    let blocks = (batch * kv_heads).max(1);
    let target = TARGET_BLOCKS_PER_SM * sm_count.max(1);
    let wanted = target.div_ceil(blocks);
    let longest = max_blocks.div_ceil(MIN_SPLIT_BLOCKS).max(1);
    let splits = wanted.min(longest).max(1);
    let blocks_per_split = max_blocks.div_ceil(splits).max(1);
    SplitPlan {
        // Recount so that no split is empty for a full-length sequence.
        splits: max_blocks.div_ceil(blocks_per_split).max(1),
        blocks_per_split,
    }
}

/// The bf16 bits of `x`, rounded to nearest even.
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The value of bf16 bits `b`.
pub fn bf16_value(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The value of an fp8 e4m3 code (finite codes; the suite's fills use a handful of exact ones).
pub fn e4m3_value(c: u8) -> f32 {
    let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((c >> 3) & 0xf) as i32;
    let m = (c & 7) as f32;
    let v = if e == 0 {
        m / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    };
    sign * v
}

/// The inputs of one paged decode-attention call, in the kernel's layouts (attention.cu).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionCase {
    /// Head dimension.
    pub head_dim: u64,
    /// Query heads per KV head.
    pub group: u64,
    /// KV heads.
    pub kv_heads: u64,
    /// Logical blocks per sequence in the block table.
    pub max_blocks: u64,
    /// Cached tokens of each sequence.
    pub context_lens: Vec<i32>,
    /// Queries, bf16 bits, `[batch][kv_heads * group][head_dim]`.
    pub q: Vec<u16>,
    /// K pool, bf16 bits, `[num_blocks][kv_heads][16][head_dim]`.
    pub k_cache: Vec<u16>,
    /// V pool, same layout as `k_cache`.
    pub v_cache: Vec<u16>,
    /// Physical block of each logical block, `[batch][max_blocks]`.
    pub block_table: Vec<i32>,
}

impl AttentionCase {
    /// A small case with contexts of 1, 17 and 45 tokens (one partial block, a full block plus
    /// one token, three blocks less three tokens), 2 KV heads, values exact in bf16 (multiples
    /// of 1/8 in [-1, 1]) and a scrambled block table, from a fixed seed.
    pub fn small(head_dim: u64, group: u64, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let contexts = [1i32, 17, 45];
        let (batch, kv_heads) = (contexts.len() as u64, 2u64);
        let q_heads = kv_heads * group;
        let max_blocks = 45u64.div_ceil(KV_BLOCK_TOKENS);
        let num_blocks = batch * max_blocks + 3;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut rand_bf16 = |len: u64| -> Vec<u16> {
            (0..len)
                .map(|_| bf16_bits(rng.gen_range(-8i32..=8) as f32 * 0.125))
                .collect()
        };
        let per_block = kv_heads * KV_BLOCK_TOKENS * head_dim;
        let q = rand_bf16(batch * q_heads * head_dim);
        let k_cache = rand_bf16(num_blocks * per_block);
        let v_cache = rand_bf16(num_blocks * per_block);
        let mut phys: Vec<i32> = (0..num_blocks as i32).collect();
        for i in (1..phys.len()).rev() {
            phys.swap(i, rng.gen_range(0..=i));
        }
        AttentionCase {
            head_dim,
            group,
            kv_heads,
            max_blocks,
            context_lens: contexts.to_vec(),
            q,
            k_cache,
            v_cache,
            block_table: phys[..(batch * max_blocks) as usize].to_vec(),
        }
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> u64 {
        self.context_lens.len() as u64
    }

    /// The softmax scale, 1 / sqrt(head_dim).
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Softmax attention of every query head over its sequence's cached tokens, in f64:
    /// `[batch][kv_heads * group][head_dim]`.
    pub fn reference(&self) -> Vec<f64> {
        let (hd, group, kvh_n) = (self.head_dim, self.group, self.kv_heads);
        let q_heads = kvh_n * group;
        let scale = self.scale() as f64;
        let mut out = Vec::with_capacity((self.batch() * q_heads * hd) as usize);
        for (s, &ctx) in self.context_lens.iter().enumerate() {
            let s = s as u64;
            let ctx = ctx.max(0) as u64;
            for h in 0..q_heads {
                let kvh = h / group;
                let qv: Vec<f64> = (0..hd)
                    .map(|d| bf16_value(self.q[((s * q_heads + h) * hd + d) as usize]) as f64)
                    .collect();
                let at = |cache: &[u16], tok: u64, d: u64| -> f64 {
                    let p = self.block_table[(s * self.max_blocks + tok / KV_BLOCK_TOKENS) as usize]
                        as u64;
                    let idx =
                        ((p * kvh_n + kvh) * KV_BLOCK_TOKENS + tok % KV_BLOCK_TOKENS) * hd + d;
                    bf16_value(cache[idx as usize]) as f64
                };
                let scores: Vec<f64> = (0..ctx)
                    .map(|t| {
                        (0..hd)
                            .map(|d| qv[d as usize] * at(&self.k_cache, t, d))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let den: f64 = w.iter().sum();
                for d in 0..hd {
                    let num: f64 = (0..ctx)
                        .map(|t| w[t as usize] * at(&self.v_cache, t, d))
                        .sum();
                    out.push(if den > 0.0 { num / den } else { 0.0 });
                }
            }
        }
        out
    }

    /// Compares a kernel's output with [`Self::reference`] (tolerance 1e-3, relative above 1);
    /// an error naming the first element that disagrees.
    pub fn check(&self, got: &[f32], what: &str) -> Result<(), String> {
        let want = self.reference();
        if got.len() != want.len() {
            return Err(format!(
                "{what}: {} outputs, expected {}",
                got.len(),
                want.len()
            ));
        }
        let per_seq = (self.kv_heads * self.group * self.head_dim) as usize;
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let g = g as f64;
            if g.is_nan() || (g - w).abs() > 1e-3 * w.abs().max(1.0) {
                let (s, r) = (i / per_seq, i % per_seq);
                let (h, d) = (r / self.head_dim as usize, r % self.head_dim as usize);
                return Err(format!(
                    "{what} (head_dim {}, group {}): out[seq {s}, head {h}, {d}] = {g}, CPU \
                     reference {w}",
                    self.head_dim, self.group
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_cover_every_supported_shape_once() {
        let units = suite_units();
        assert_eq!(
            units.len(),
            1 + ATTENTION_HEAD_DIMS.len() * MAX_GROUP as usize
        );
        let mut names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), units.len());
        for k in STREAM_KERNELS.iter().chain(ATTENTION_KERNELS) {
            let unit_src = if STREAM_KERNELS.contains(k) {
                STREAM_SRC
            } else {
                ATTENTION_SRC
            };
            assert!(
                unit_src.contains(&format!("void {k}(")) || unit_src.contains(&format!(") {k}(")),
                "{k} is not defined in its source"
            );
        }
    }

    #[test]
    fn unsupported_shapes_say_why() {
        assert!(attention_supported(128, 8).is_ok());
        let e = attention_supported(128, 16).unwrap_err();
        assert!(e.contains("group 16"), "{e}");
        assert!(attention_supported(96, 4)
            .unwrap_err()
            .contains("head_dim 96"));
        assert!(attention_supported(128, 0).is_err());
        assert!(attention_unit(80, 1).is_err());
    }

    #[test]
    fn split_fills_the_gpu_without_tiny_splits() {
        // Llama-3.1-8B, batch 1, context 8192 on 132 SMs: 512 KV blocks over 8 KV heads.
        let p = attention_split(1, 8, 512, 132);
        // 64 splits of 8 blocks: as many as MIN_SPLIT_BLOCKS allows, 512 blocks on 132 SMs.
        assert_eq!(
            p,
            SplitPlan {
                splits: 64,
                blocks_per_split: 8
            }
        );
        assert!(8 * p.splits >= (TARGET_BLOCKS_PER_SM * 132).min(8 * 512 / MIN_SPLIT_BLOCKS));
        assert!(p.blocks_per_split >= MIN_SPLIT_BLOCKS, "{p:?}");
        assert!(p.splits * p.blocks_per_split >= 512);
        assert!(
            (p.splits - 1) * p.blocks_per_split < 512,
            "an empty split: {p:?}"
        );
        // A batch that already fills the GPU is not split.
        assert_eq!(attention_split(256, 8, 512, 132).splits, 1);
        // Short contexts are not split below MIN_SPLIT_BLOCKS.
        assert_eq!(attention_split(1, 8, 8, 132).splits, 1);
        assert_eq!(attention_split(1, 8, 16, 132).splits, 2);
        for batch in [1, 3, 16, 64] {
            for mb in [1, 7, 8, 9, 100, 513, 4096] {
                let p = attention_split(batch, 4, mb, 132);
                assert!(p.splits >= 1 && p.blocks_per_split >= 1);
                assert!(p.splits * p.blocks_per_split >= mb, "{p:?} for {mb}");
                assert!((p.splits - 1) * p.blocks_per_split < mb, "{p:?} for {mb}");
            }
        }
    }

    #[test]
    fn number_formats() {
        assert_eq!(bf16_value(bf16_bits(-0.875)), -0.875);
        assert_eq!(bf16_value(bf16_bits(1.0)), 1.0);
        let codes = [0xBCu8, 0xB8, 0xB0, 0x00, 0x30, 0x38, 0x3C];
        let vals = [-1.5f32, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5];
        for (c, v) in codes.iter().zip(vals) {
            assert_eq!(e4m3_value(*c), v);
        }
    }

    #[test]
    fn attention_reference_is_a_softmax_average() {
        let case = AttentionCase::small(64, 2, 5);
        let out = case.reference();
        assert_eq!(out.len(), 3 * 4 * 64);
        // Sequence 0 has one token: every head's output is that token's V row.
        let p = case.block_table[0] as usize;
        for h in 0..4usize {
            let kvh = h / 2;
            for d in 0..64usize {
                let v = bf16_value(case.v_cache[((p * 2 + kvh) * 16) * 64 + d]) as f64;
                assert_eq!(out[h * 64 + d], v);
            }
        }
        // Outputs are convex combinations of V values in [-1, 1].
        assert!(out.iter().all(|x| x.abs() <= 1.0 + 1e-12));
        let got: Vec<f32> = out.iter().map(|&x| x as f32).collect();
        assert!(case.check(&got, "reference").is_ok());
        let mut bad = got.clone();
        bad[700] += 0.01;
        assert!(case
            .check(&bad, "perturbed")
            .unwrap_err()
            .contains("out[seq 2"));
    }
}
