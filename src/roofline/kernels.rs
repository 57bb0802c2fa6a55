//! Kernel-level predictions: the roofline terms the step-time model sums, exposed one kernel
//! at a time so that calibration (`servesim fit`, `validate-kernels`) checks exactly the
//! formulas the simulator uses.

use crate::gpu::{GpuProfile, MoeKernel};
use crate::precision::GemmMath;

use super::ACT_BYTES;

/// Time of one HBM-streaming kernel moving `bytes` (reads + writes), seconds.
pub fn stream_s(gpu: &GpuProfile, bytes: f64) -> f64 {
    gpu.memory.latency_s + bytes / gpu.memory.stream_bandwidth_bytes_per_s
}

/// One dense GEMM of `tokens` x `k` activations by a `k` x `n` weight matrix stored with
/// `weight_bytes` bytes per element, on the FP8 tensor cores when `fp8` (and the GPU has them),
/// BF16 otherwise: `fixed + max(bytes / bw, flops / (rate x T / (T + half)))` with the GPU's
/// curve for that operand type. Returns (time, streaming part).
pub fn gemm_s(
    gpu: &GpuProfile,
    tokens: f64,
    k: f64,
    n: f64,
    weight_bytes: f64,
    fp8: bool,
) -> (f64, f64) {
    let math = if fp8 { GemmMath::Fp8 } else { GemmMath::Bf16 };
    gemm_math_s(gpu, tokens, k, n, weight_bytes, math)
}

/// [`gemm_s`] for any tensor-core math ([`GemmMath`]: BF16, FP8, FP4 on the GPUs that have
/// it): the GPU's curve for that math, weights read at `weight_bytes` per element. Returns
/// (time, streaming part).
pub fn gemm_math_s(
    gpu: &GpuProfile,
    tokens: f64,
    k: f64,
    n: f64,
    weight_bytes: f64,
    math: GemmMath,
) -> (f64, f64) {
    if tokens <= 0.0 {
        return (0.0, 0.0);
    }
    let (peak, half) = gpu.gemm_math_curve(math);
    let weights = k * n;
    let bytes = weights * weight_bytes + tokens * (k + n) * ACT_BYTES;
    let flops = 2.0 * tokens * weights;
    let rate = peak * tokens / (tokens + half);
    let mem = bytes / gemm_stream_bandwidth(gpu, math);
    (gpu.gemm.fixed_s + mem.max(flops / rate), mem)
}

/// The bandwidth a GEMM of this math streams its operands at, bytes/s: the GPU's stream
/// bandwidth, times `gemm.fp4_stream_bandwidth_fraction` for FP4 GEMMs on a GPU with FP4
/// tensor cores (their block-scaled kernels read weights more slowly than BF16 and FP8 ones).
pub fn gemm_stream_bandwidth(gpu: &GpuProfile, math: GemmMath) -> f64 {
    let bw = gpu.memory.stream_bandwidth_bytes_per_s;
    match math {
        GemmMath::Fp4 if gpu.supports_fp4() => {
            bw * gpu.gemm.fp4_stream_bandwidth_fraction.unwrap_or(1.0)
        }
        _ => bw,
    }
}

pub use crate::model::expected_active_experts;

/// One layer's mixture-of-experts block as vLLM's Triton fused_moe runs it (the kernel the
/// `fused_moe` measurement rows time; [`fused_moe_work_s`] runs any kernel class): top-k routing of the router's logits, alignment of the
/// tokens to the experts, the two grouped expert GEMMs (gate+up of `hidden x 2 inter`, down of
/// `inter x hidden` per expert, weights in `weight_bytes`, on FP8 tensor cores when `fp8`),
/// the activation and the weighted sum back into token order. `tokens` tokens each visit
/// `top_k` of `experts`; every active expert's weights are read once, and its
/// `tokens x top_k / active` tokens run at the GEMM curve's rate for that many rows times
/// `moe.grouped_flops_fraction`, one fixed time per grouped GEMM and `moe.tile_wave_s` per
/// wave of output tiles. Returns (grouped GEMM time, its weight-streaming part, routing and
/// permutation time), seconds.
#[allow(clippy::too_many_arguments)]
pub fn fused_moe_s(
    gpu: &GpuProfile,
    tokens: f64,
    experts: f64,
    top_k: f64,
    hidden: f64,
    inter: f64,
    weight_bytes: f64,
    fp8: bool,
) -> (f64, f64, f64) {
    let math = if fp8 { GemmMath::Fp8 } else { GemmMath::Bf16 };
    let active = expected_active_experts(tokens, experts, top_k).max(1.0);
    if tokens <= 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let groups = ExpertWork {
        active,
        top_k,
        pairs: tokens * top_k,
        hidden,
        inter,
        weight_bytes,
        math,
        // The fused_moe kernel rows are timings of vLLM's (or SGLang's) Triton kernel.
        kernel: MoeKernel::Triton,
    };
    fused_moe_work_s(gpu, tokens, experts, &groups)
}

/// The experts one GPU runs in one MoE layer: how many of its experts the tokens wake, the
/// (token, expert) pairs routed to them, and the expert shape and format.
#[derive(Debug, Clone, Copy)]
pub struct ExpertWork {
    /// Distinct experts on this GPU that receive tokens.
    pub active: f64,
    /// Experts each routed token picks.
    pub top_k: f64,
    /// (token, expert) pairs this GPU computes.
    pub pairs: f64,
    /// Hidden size.
    pub hidden: f64,
    /// Intermediate width of one expert on this GPU.
    pub inter: f64,
    /// Bytes per expert weight.
    pub weight_bytes: f64,
    /// Tensor-core math of the grouped GEMMs.
    pub math: GemmMath,
    /// The engine's fused-MoE kernel class: its GPU curve (`[moe]` of the GPU profile) and
    /// its chain: CUTLASS copies each routed token into expert order before the grouped GEMMs
    /// (TensorRT-LLM's CUTLASS MoE; see [`expand_rows_s`]), Triton gathers the rows inside the
    /// GEMM (vLLM's Triton fused_moe).
    pub kernel: MoeKernel,
}

/// Bytes per element of the activations the grouped GEMMs read for this math: BF16 2, FP8 1,
/// NVFP4 one half plus one FP8 scale per 16 elements.
fn activation_bytes(math: GemmMath) -> f64 {
    match math {
        GemmMath::Bf16 => ACT_BYTES,
        GemmMath::Fp8 => 1.0,
        GemmMath::Fp4 => 0.5 + 1.0 / 16.0,
    }
}

/// The kernels TensorRT-LLM's CUTLASS MoE runs on top of the routing, alignment, activation
/// and finalize that every fused MoE has (`CutlassMoeFCRunner::runMoe` in NVIDIA/TensorRT-LLM
/// cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu): `expandInputRowsKernel`
/// reads each of the `tokens` 16-bit rows once and writes it `top_k` times in expert order,
/// quantized to the grouped GEMMs' input format (one row per (token, expert) pair); above 256
/// tokens the one-CTA `fusedBuildExpertMapsSortFirstToken` prologue gives way to
/// `threeStepBuildExpertMapsSortFirstToken` (block prefix sums, a global prefix sum, a merge:
/// two kernels more than the one alignment kernel counted, each over the pairs' 4-byte ids).
/// Seconds.
pub fn expand_rows_s(gpu: &GpuProfile, tokens: f64, work: &ExpertWork) -> f64 {
    let expand =
        tokens * work.hidden * ACT_BYTES + work.pairs * work.hidden * activation_bytes(work.math);
    let prologue = if tokens > 256.0 {
        2.0 * small_op_s(gpu, work.pairs * 4.0)
    } else {
        0.0
    };
    small_op_s(gpu, expand) + prologue
}

/// Output-tile width of the grouped GEMMs, columns: BLOCK_SIZE_N 128, the most common choice of
/// vLLM's tuned Triton fused_moe configs for Hopper (vllm/model_executor/layers/fused_moe/
/// configs/, e.g. `E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json` at 2-256 tokens).
const MOE_TILE_N: f64 = 128.0;

/// Waves of output tiles one grouped GEMM of `active` experts, `rows` rows each and `n`
/// columns, runs over the GPU's SMs. Each expert's rows are padded to the tile height
/// (`moe_align_block_size`); the height follows the rows per expert, a power of two from 16 to
/// 128 (BLOCK_SIZE_M 16 -> 32 -> 64 -> 128 as the batch grows: vLLM's tuned configs and the
/// default of vLLM pull 34846), the width is [`MOE_TILE_N`].
pub fn tile_waves(gpu: &GpuProfile, active: f64, rows: f64, n: f64) -> f64 {
    if active <= 0.0 || rows <= 0.0 {
        return 0.0;
    }
    let height = rows.max(1.0).log2().ceil().exp2().clamp(16.0, 128.0);
    let tiles = active * (rows / height).ceil() * (n / MOE_TILE_N).ceil();
    (tiles / f64::from(gpu.datasheet.sm_count.max(1))).ceil()
}

/// The fused-MoE chain of [`fused_moe_s`] for any split of the experts: `routed_tokens` tokens
/// are routed (top-k over `experts` logits) on this GPU, `work` says what its grouped GEMMs
/// compute. Returns (grouped GEMM time, its weight-streaming part, routing and permutation
/// time), seconds.
pub fn fused_moe_work_s(
    gpu: &GpuProfile,
    routed_tokens: f64,
    experts: f64,
    work: &ExpertWork,
) -> (f64, f64, f64) {
    if work.pairs <= 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let active = work.active.max(1.0);
    let per_expert = work.pairs / active;
    let fixed = gpu.gemm.fixed_s;
    // The grouped kernels run the dense curve at a fraction of its math rate and stream at a
    // fraction of the stream bandwidth, their kernel class's (a CUTLASS grouped GEMM and
    // vLLM's Triton kernel are different code).
    let curve = gpu.moe.kernel(work.kernel);
    let mut grouped = gpu.clone();
    grouped.memory.stream_bandwidth_bytes_per_s *= curve.stream_fraction;
    if let Some(fp4) = curve.fp4_stream_fraction {
        grouped.gemm.fp4_stream_bandwidth_fraction = Some(fp4);
    }
    let f = curve.grouped_flops_fraction;
    grouped.gemm.bf16_flops_per_s *= f;
    grouped.gemm.fp8_flops_per_s *= f;
    grouped.gemm.fp4_flops_per_s *= f;
    let (hidden, inter) = (work.hidden, work.inter);
    let mut time = 0.0;
    let mut stream = 0.0;
    for (k, n) in [(hidden, 2.0 * inter), (inter, hidden)] {
        let (t, st) = match work.kernel {
            MoeKernel::Mxfp4W4a16 => {
                let d = DequantGemm {
                    active,
                    rows: per_expert,
                    k,
                    n,
                    weight_bytes: work.weight_bytes,
                    dequant_weights_per_s: curve.dequant_weights_per_s,
                    fixed_s: if curve.grouped_gemm_fixed_s > 0.0 {
                        curve.grouped_gemm_fixed_s
                    } else {
                        fixed
                    },
                };
                d.time_s(&grouped)
            }
            _ => {
                let (t, st) = gemm_math_s(&grouped, per_expert, k, n, work.weight_bytes, work.math);
                (fixed + (t - fixed) * active, st * active)
            }
        };
        time += t;
        stream += st;
        if curve.tile_wave_s > 0.0 {
            time += tile_waves(gpu, active, per_expert, n) * curve.tile_wave_s;
        }
    }
    let pairs = work.pairs;
    let tokens = routed_tokens;
    let routing = [
        // top-k of the fp32 logits, writing ids and weights
        tokens * experts * 4.0 + tokens * work.top_k * 8.0,
        // alignment of the (token, expert) pairs to the experts' blocks
        pairs * 8.0,
        // SiLU-and-mul of the gate+up output; matmul_ogs fuses it into the first GEMM's
        // epilogue (`fused_activation`: TensorRT-LLM's TritonFusedMoE, vLLM's
        // gpt_oss_triton_kernels_moe.py), so the MXFP4 W4A16 class has no such kernel
        match work.kernel {
            MoeKernel::Mxfp4W4a16 => 0.0,
            _ => pairs * 3.0 * inter * ACT_BYTES,
        },
        // weighted sum of each token's expert outputs back into token order
        (pairs + tokens) * hidden * ACT_BYTES,
    ]
    .iter()
    // (a kernel the class fuses away moves no bytes and launches nothing)
    .filter(|&&b| b > 0.0)
    .map(|&b| small_op_s(gpu, b))
    .sum::<f64>();
    let expand = match work.kernel {
        MoeKernel::Cutlass => expand_rows_s(gpu, tokens, work),
        // matmul_ogs gathers the rows inside the first GEMM, as vLLM's Triton kernel does.
        MoeKernel::Triton | MoeKernel::Mxfp4W4a16 => 0.0,
    };
    (time, stream, routing + expand)
}

/// The `block_m` tile height OpenAI's triton_kernels `matmul_ogs` pads each expert's rows to:
/// `max(16, min(next_power_of_2(rows per expert), 128))` (triton_kernels
/// `matmul_ogs_details/opt_flags.py` and `routing.py`, the heuristic TensorRT-LLM's
/// TritonFusedMoE and vLLM's MXFP4 path on Hopper inherit), rows.
pub fn matmul_ogs_block_m(rows_per_expert: f64) -> f64 {
    rows_per_expert
        .max(1.0)
        .log2()
        .ceil()
        .exp2()
        .clamp(16.0, 128.0)
}

/// One grouped GEMM of the MXFP4 W4A16 class ([`MoeKernel::Mxfp4W4a16`]) over `active`
/// experts of `rows` rows each, `k` x `n` weights per expert.
struct DequantGemm {
    active: f64,
    rows: f64,
    k: f64,
    n: f64,
    weight_bytes: f64,
    /// The class's dequantization limit, weights/s (0: none).
    dequant_weights_per_s: f64,
    /// Fixed time of the grouped GEMM, seconds.
    fixed_s: f64,
}

impl DequantGemm {
    /// `fixed_s + max(stream, math)`: the weights (and activation rows) stream at the grouped
    /// bandwidth or, if slower, at the class's dequantization rate; the BF16 MMAs run on every
    /// row of each expert's rows padded to whole `block_m` tiles ([`matmul_ogs_block_m`]), at
    /// the grouped BF16 peak (the padding, not a ramp, is the small-batch loss). `gpu`
    /// carries the class's scaled curve. Returns (time, streaming part), seconds.
    fn time_s(&self, gpu: &GpuProfile) -> (f64, f64) {
        if self.active <= 0.0 || self.rows <= 0.0 {
            return (0.0, 0.0);
        }
        let weights = self.active * self.k * self.n;
        let bytes =
            weights * self.weight_bytes + self.active * self.rows * (self.k + self.n) * ACT_BYTES;
        let mut stream = bytes / gpu.memory.stream_bandwidth_bytes_per_s;
        if self.dequant_weights_per_s > 0.0 {
            stream = stream.max(weights / self.dequant_weights_per_s);
        }
        let block_m = matmul_ogs_block_m(self.rows);
        let padded = (self.rows / block_m).ceil() * block_m;
        let flops = 2.0 * self.active * padded * self.k * self.n;
        let math = flops / gpu.gemm.bf16_flops_per_s;
        (self.fixed_s + stream.max(math), stream)
    }
}

/// One paged decode-attention kernel (one layer) over `context_tokens` cached tokens in total
/// across the batch, of which `hbm_tokens` are read from HBM (the rest are repeat reads of a
/// shared prefix served by L2); `kv_bytes_per_token` = 2 x kv_heads x head_dim x bytes per
/// element; `q_width` = query heads x head_dim on this GPU.
pub fn decode_attention_s(
    gpu: &GpuProfile,
    context_tokens: f64,
    hbm_tokens: f64,
    kv_bytes_per_token: f64,
    q_width: f64,
) -> f64 {
    let rate = decode_attention_bf16_flops_per_s(gpu);
    decode_attention_at_rate_s(
        gpu,
        context_tokens,
        hbm_tokens,
        kv_bytes_per_token,
        q_width,
        rate,
    )
}

/// Decode attention's math rate in BF16 on this GPU: the GEMM BF16 rate times
/// `attention.prefill_flops_fraction`, FLOP/s.
pub fn decode_attention_bf16_flops_per_s(gpu: &GpuProfile) -> f64 {
    gpu.gemm.bf16_flops_per_s * gpu.attention.prefill_flops_fraction
}

/// Decode attention's math rate on `gpu` over an FP8 (`fp8_kv`) or 16-bit KV cache, for
/// kernels outside FlashAttention-3's two-level FP8 path, FLOP/s: the BF16 rate, times
/// `attention.decode_fp8_kv_rate_vs_bf16` over an FP8 cache on a GPU with FP8 tensor cores.
pub fn decode_attention_flops_per_s(gpu: &GpuProfile, fp8_kv: bool) -> f64 {
    let ratio = match gpu.attention.decode_fp8_kv_rate_vs_bf16 {
        Some(r) if fp8_kv && gpu.supports_fp8() => r,
        _ => 1.0,
    };
    decode_attention_bf16_flops_per_s(gpu) * ratio
}

/// The GEMM rate prefill attention runs at on `gpu` over an FP8 (`fp8_kv`) or 16-bit KV cache,
/// for kernels outside FlashAttention-3's two-level FP8 path, FLOP/s: the BF16 rate, or over an
/// FP8 cache on a GPU with FP8 tensor cores `attention.prefill_fp8_kv_rate_vs_bf16` times it
/// (absent: the FP8 rate).
pub fn prefill_attention_flops_per_s(gpu: &GpuProfile, fp8_kv: bool) -> f64 {
    if !(fp8_kv && gpu.supports_fp8()) {
        return gpu.gemm.bf16_flops_per_s;
    }
    match gpu.attention.prefill_fp8_kv_rate_vs_bf16 {
        Some(r) => gpu.gemm.bf16_flops_per_s * r,
        None => gpu.gemm.fp8_flops_per_s,
    }
}

/// [`decode_attention_s`] with the attention math at `flops_per_s` (FLOP/s): over an FP8 KV
/// cache a GPU's decode kernels may run FP8 math (`attention.decode_fp8_kv_rate_vs_bf16`).
pub fn decode_attention_at_rate_s(
    gpu: &GpuProfile,
    context_tokens: f64,
    hbm_tokens: f64,
    kv_bytes_per_token: f64,
    q_width: f64,
    flops_per_s: f64,
) -> f64 {
    if context_tokens <= 0.0 {
        return 0.0;
    }
    let bytes = hbm_tokens * kv_bytes_per_token;
    let flops = 4.0 * q_width * context_tokens;
    let bw = gpu.memory.stream_bandwidth_bytes_per_s * gpu.attention.decode_bandwidth_fraction;
    gpu.attention.fixed_s + (bytes / bw).max(flops / flops_per_s)
}

/// One prefill-attention kernel (one layer) over `units` query-key pairs (causal chunks: the
/// sum of `chunk x prior + chunk^2 / 2`) of `query_tokens` query rows, with query width
/// `q_width` on this GPU, in BF16: `fixed + 4 q_width (units + half x query_tokens) / rate`.
/// Each query row costs `attention.prefill_half_rate_tokens` extra keys, so a row over L keys
/// runs at `rate x L / (L + half)`.
pub fn prefill_attention_s(gpu: &GpuProfile, units: f64, query_tokens: f64, q_width: f64) -> f64 {
    prefill_attention_at_rate_s(gpu, units, query_tokens, q_width, gpu.gemm.bf16_flops_per_s)
}

/// [`prefill_attention_s`] with the attention math at a given GEMM rate (the FP8 rate when
/// the KV cache is FP8 and the GPU has FP8 tensor cores), FLOP/s.
pub fn prefill_attention_at_rate_s(
    gpu: &GpuProfile,
    units: f64,
    query_tokens: f64,
    q_width: f64,
    gemm_rate: f64,
) -> f64 {
    if units <= 0.0 {
        return 0.0;
    }
    let rate = gemm_rate * gpu.attention.prefill_flops_fraction;
    let work = units + gpu.attention.prefill_half_rate_tokens * query_tokens.max(0.0);
    gpu.attention.fixed_s + 4.0 * q_width * work / rate
}

/// One small memory-bound kernel moving `bytes`, seconds.
pub fn small_op_s(gpu: &GpuProfile, bytes: f64) -> f64 {
    gpu.small_ops.kernel_s
        + bytes / (gpu.memory.stream_bandwidth_bytes_per_s * gpu.small_ops.bandwidth_fraction)
}

/// One all-reduce of `bytes` over `tp` GPUs, seconds (0 for TP 1).
pub fn allreduce_s(gpu: &GpuProfile, bytes: f64, tp: u32) -> f64 {
    if tp <= 1 {
        return 0.0;
    }
    let tp = tp as f64;
    gpu.allreduce.latency_s
        + 2.0 * (tp - 1.0) / tp * bytes / gpu.allreduce.bus_bandwidth_bytes_per_s
}

/// Which of its all-reduce kernels an engine runs at a TP degree, by message size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllReduceLimits {
    /// Largest message its own NVLink kernels take (capped by the GPU's
    /// `allreduce.custom_max_bytes`; 0: always NCCL), bytes.
    pub custom_max_bytes: f64,
    /// Messages below this size run its one-shot kernel, larger ones two-shot, bytes.
    pub one_shot_max_bytes: f64,
}

/// One all-reduce as a serving engine runs it: its own low-latency NVLink kernels for
/// messages up to `limits.custom_max_bytes` (one-shot below `limits.one_shot_max_bytes`,
/// two-shot above; [`crate::gpu::AllReduceCurve`]), NCCL above, seconds.
pub fn engine_allreduce_s(gpu: &GpuProfile, bytes: f64, tp: u32, limits: AllReduceLimits) -> f64 {
    if tp <= 1 {
        return 0.0;
    }
    let ar = &gpu.allreduce;
    if bytes > limits.custom_max_bytes.min(ar.custom_max_bytes) {
        return allreduce_s(gpu, bytes, tp);
    }
    let t = tp as f64;
    let bw = ar
        .custom_bandwidth_bytes_per_s
        .unwrap_or(ar.bus_bandwidth_bytes_per_s);
    if bytes < limits.one_shot_max_bytes {
        ar.custom_latency_s + (t - 1.0) * bytes / bw
    } else {
        ar.custom_two_shot_latency_s.unwrap_or(ar.custom_latency_s)
            + 2.0 * (t - 1.0) / t * bytes / bw
    }
}

/// Launch latency of an empty kernel, seconds.
pub fn empty_kernel_s(gpu: &GpuProfile) -> f64 {
    gpu.small_ops.launch_s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gemm.fp4_stream_bandwidth_fraction` slows the weight streaming of FP4 GEMMs only: a
    /// memory-bound FP4 GEMM's streaming part grows by 1 / fraction, a BF16 or FP8 one (and
    /// an FP4 one on a GPU without FP4 tensor cores, which dequantizes to BF16) is unchanged,
    /// and a compute-bound FP4 GEMM is unchanged.
    #[test]
    fn fp4_stream_fraction_slows_only_fp4_weight_streaming() {
        let base = GpuProfile::load("b200").unwrap();
        let mut full = base.clone();
        full.gemm.fp4_stream_bandwidth_fraction = None;
        let mut half = base.clone();
        half.gemm.fp4_stream_bandwidth_fraction = Some(0.5);
        let (k, n) = (7168.0, 4096.0);
        let (_, s_full) = gemm_math_s(&full, 8.0, k, n, 0.5625, GemmMath::Fp4);
        let (t_half, s_half) = gemm_math_s(&half, 8.0, k, n, 0.5625, GemmMath::Fp4);
        assert!((s_half / s_full - 2.0).abs() < 1e-12, "{s_half} {s_full}");
        assert!(
            (t_half - base.gemm.fixed_s - s_half).abs() < 1e-15,
            "memory-bound"
        );
        for math in [GemmMath::Bf16, GemmMath::Fp8] {
            assert_eq!(
                gemm_math_s(&full, 8.0, k, n, 1.0, math),
                gemm_math_s(&half, 8.0, k, n, 1.0, math)
            );
        }
        // Compute-bound: 16,384 tokens.
        let big = |g: &GpuProfile| gemm_math_s(g, 16384.0, k, n, 0.5625, GemmMath::Fp4).0;
        assert_eq!(big(&full), big(&half));
        // Hopper has no FP4 tensor cores: the key does not apply.
        let mut h100 = GpuProfile::load("h100-sxm").unwrap();
        let before = gemm_math_s(&h100, 8.0, k, n, 0.5625, GemmMath::Fp4);
        h100.gemm.fp4_stream_bandwidth_fraction = Some(0.5);
        assert_eq!(gemm_math_s(&h100, 8.0, k, n, 0.5625, GemmMath::Fp4), before);
        // The committed B200 profile carries the published figure; out-of-range values are
        // rejected naming the key.
        assert_eq!(base.gemm.fp4_stream_bandwidth_fraction, Some(0.36));
        for bad in [0.0, 1.5, f64::NAN] {
            half.gemm.fp4_stream_bandwidth_fraction = Some(bad);
            let e = half.validate("b200.toml").unwrap_err().to_string();
            assert!(e.contains("gemm.fp4_stream_bandwidth_fraction"), "{e}");
        }
    }

    /// `moe.cutlass.stream_fraction` slows the streaming of the CUTLASS class's grouped GEMMs
    /// only (a bandwidth-bound kernel's time is bytes over bandwidth): at one token per expert
    /// the CUTLASS chain's streaming part grows by exactly 1 / fraction, its routing and
    /// expand kernels do not move, and the Triton class (vLLM, SGLang) is unchanged. The
    /// committed Hopper profiles carry the fitted figure (docs/validation.md, "The CUTLASS
    /// MoE's streaming rate"); out-of-range values are rejected naming the key.
    #[test]
    fn cutlass_stream_fraction_slows_only_cutlass_grouped_streaming() {
        let base = GpuProfile::load("h100-sxm").unwrap();
        let with = |s: f64| {
            let mut g = base.clone();
            let mut c = g.moe.kernel(MoeKernel::Cutlass);
            c.stream_fraction = s;
            // At the dense curve's math rate one row per expert is weight-bound at either
            // fraction (at the committed 0.52 a one-row GEMM's ramp makes it math-bound).
            c.grouped_flops_fraction = 1.0;
            g.moe.cutlass = Some(c);
            g
        };
        let (full, half) = (with(1.0), with(0.5));
        // Qwen3-235B-A22B's experts at EP 8: 16 experts of 4096 x 1536 on the GPU, 16 tokens
        // of top-8 routing: about one row per active expert, weight-bound.
        let work = |kernel| ExpertWork {
            active: 16.0,
            top_k: 8.0,
            pairs: 16.0,
            hidden: 4096.0,
            inter: 1536.0,
            weight_bytes: 1.0,
            math: GemmMath::Fp8,
            kernel,
        };
        let cut = work(MoeKernel::Cutlass);
        let (t_full, s_full, r_full) = fused_moe_work_s(&full, 16.0, 128.0, &cut);
        let (t_half, s_half, r_half) = fused_moe_work_s(&half, 16.0, 128.0, &cut);
        assert!((s_half / s_full - 2.0).abs() < 1e-12, "{s_half} {s_full}");
        assert!(
            (t_half - t_full - (s_half - s_full)).abs() < 1e-15,
            "weight-bound: the time grows by the streaming part"
        );
        assert_eq!(r_full, r_half);
        let tri = work(MoeKernel::Triton);
        assert_eq!(
            fused_moe_work_s(&full, 16.0, 128.0, &tri),
            fused_moe_work_s(&half, 16.0, 128.0, &tri)
        );
        for name in ["h100-sxm", "h200-sxm"] {
            let g = GpuProfile::load(name).unwrap();
            assert_eq!(g.moe.kernel(MoeKernel::Cutlass).stream_fraction, 0.60);
            assert_eq!(g.moe.kernel(MoeKernel::Triton).stream_fraction, 1.0);
        }
        for bad in [0.0, 1.5, f64::NAN] {
            let e = with(bad).validate("h100-sxm.toml").unwrap_err().to_string();
            assert!(e.contains("moe.cutlass.stream_fraction"), "{e}");
        }
    }
}
