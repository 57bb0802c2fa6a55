//! GPU profiles: datasheet figures plus the calibrated ceilings and efficiency curves that the
//! step-time model reads. Profiles live in `calibration/gpus/*.toml` (embedded in the binary);
//! a path to a profile file (for example one written by `servesim fit`) is accepted too.

use serde::{Deserialize, Serialize};

use crate::catalog::{self, Entry, Kind};
use crate::error::{Error, Result};

/// Vendor datasheet figures (peaks; never reached in practice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Datasheet {
    /// Device memory as the driver reports it, bytes.
    pub memory_bytes: f64,
    /// Peak HBM bandwidth, bytes/s.
    pub hbm_bandwidth_bytes_per_s: f64,
    /// Dense BF16/FP16 tensor-core peak, FLOP/s.
    pub bf16_flops_per_s: f64,
    /// Dense FP8 tensor-core peak, FLOP/s (0 when the GPU has no FP8 tensor cores).
    pub fp8_flops_per_s: f64,
    /// Dense FP4 tensor-core peak, FLOP/s (0 when the GPU has no FP4 tensor cores: FP4
    /// weights are then dequantized to BF16 in the GEMM).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fp4_flops_per_s: f64,
    /// Total NVLink bandwidth per GPU, bytes/s (0 when there is none).
    pub nvlink_bandwidth_bytes_per_s: f64,
    /// L2 cache, bytes.
    pub l2_bytes: f64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Board power, watts.
    pub tdp_watts: f64,
}

/// HBM streaming: moving `b` bytes takes `latency + b / stream_bandwidth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryCurve {
    /// Achievable read bandwidth for large transfers, bytes/s.
    pub stream_bandwidth_bytes_per_s: f64,
    /// Fixed time of one streaming kernel (launch-to-first-byte and tail), seconds.
    pub latency_s: f64,
}

/// Dense GEMM: `time = fixed + max(bytes / stream_bw, flops / (rate x T / (T + half_rate_tokens)))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmCurve {
    /// Fixed time of one GEMM kernel (prologue, epilogue, tail wave), seconds.
    pub fixed_s: f64,
    /// Achievable BF16 rate for large token counts, FLOP/s.
    pub bf16_flops_per_s: f64,
    /// Achievable FP8 rate for large token counts, FLOP/s (0 when unsupported).
    pub fp8_flops_per_s: f64,
    /// Achievable FP4 rate for large token counts, FLOP/s (0 when unsupported); FP4 GEMMs
    /// ramp like FP8 ones (`fp8_half_rate_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fp4_flops_per_s: f64,
    /// Token count (GEMM m dimension) at which the tensor cores reach half the achievable rate.
    pub half_rate_tokens: f64,
    /// The same for FP8 GEMMs, which run other kernels (smaller M tiles) than BF16 ones; absent:
    /// `half_rate_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_half_rate_tokens: Option<f64>,
    /// Whether `fixed_s` was fitted on GEMM rows timed by CUDA-graph replay (triton's
    /// `do_bench_cudagraph`, which times a captured graph of back-to-back calls): such a fixed
    /// time holds no host launch, so kernels queued back to back in a step overlap none of it.
    /// Absent or false: the fixed time is taken to include the launch latency
    /// (`small_ops.launch_s`), which the queued chain takes off (docs/model.md, "kernel
    /// queueing").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_s_graph_replayed: bool,
    /// Rate at which FP4 GEMMs (FP4 operands on both sides: NVFP4, MXFP4 x MXFP4) stream
    /// their weights, as a fraction of `memory.stream_bandwidth_bytes_per_s`, dimensionless;
    /// absent: 1 (as fast as any stream). Published B200 NVFP4 kernels read their weights well
    /// below the rate BF16 and MXFP8 GEMMs of the same shapes reach (docs/model.md, "FP4
    /// weight streaming").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4_stream_bandwidth_fraction: Option<f64>,
}

/// Attention kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionCurve {
    /// Fixed time of one attention kernel, seconds.
    pub fixed_s: f64,
    /// Paged decode attention's KV read bandwidth as a fraction of the stream bandwidth.
    pub decode_bandwidth_fraction: f64,
    /// Prefill (flash) attention rate for long sequences as a fraction of the GEMM BF16 rate.
    pub prefill_flops_fraction: f64,
    /// Keys per query row at which prefill attention reaches half that rate: each query row
    /// costs as much as this many extra keys (softmax rescaling, pipeline fill of its key loop).
    #[serde(default)]
    pub prefill_half_rate_tokens: f64,
    /// The same for multi-head latent attention's prefill (DeepSeek-V3/R1: q/k head dim 192,
    /// v head dim 128, so more math per key than the head-dim-128 kernels the value above is
    /// fitted on), tokens; absent: `prefill_half_rate_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla_prefill_half_rate_tokens: Option<f64>,
    /// Prefill attention's rate over an FP8 KV cache as a multiple of its BF16 rate, for a GPU
    /// whose attention kernels keep BF16 math over an FP8 cache (TensorRT-LLM's B200
    /// context-attention rows: within 0-20% of the BF16-KV time, docs/validation.md, "The B200
    /// rows of the smaller MoE models"), dimensionless; absent: the FP8 tensor rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_fp8_kv_rate_vs_bf16: Option<f64>,
    /// Decode attention's math rate over an FP8 KV cache as a multiple of its BF16 rate, for
    /// a GPU whose decode kernels run FP8 math over an FP8 cache (TensorRT-LLM's B200
    /// trtllm-gen MLA generation kernels: calibration/reference/b200-decode-attention.md),
    /// dimensionless; absent: 1 (BF16 math, the rate of the BF16 path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_fp8_kv_rate_vs_bf16: Option<f64>,
    /// FlashAttention-3's FP8 path with two-level accumulation on this GPU, for engines whose
    /// `attention.fp8_kv_kernel` is `fa3-two-level` (absent: FP8 at the FP8 tensor rate over
    /// half the bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fa3_fp8: Option<Fa3Fp8Attention>,
    /// Whether `fixed_s` was read off kernel times of CUDA-graph replay (triton's
    /// `do_bench_cudagraph`): such a fixed time holds no host launch, so the queued chain of a
    /// step does not take `small_ops.launch_s` off it. Absent or false: it is taken off
    /// (docs/model.md, "kernel queueing").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_s_graph_replayed: bool,
}

impl AttentionCurve {
    /// The prefill half-rate tokens for a model's attention kind: for multi-head latent
    /// attention `mla_prefill_half_rate_tokens` where the profile sets it, otherwise
    /// `prefill_half_rate_tokens`, tokens.
    pub fn prefill_half_rate_tokens_for(&self, mla: bool) -> f64 {
        match self.mla_prefill_half_rate_tokens {
            Some(h) if mla => h,
            _ => self.prefill_half_rate_tokens,
        }
    }
}

/// FlashAttention-3's FP8 attention (vLLM's fork, two-level FP32 accumulation) relative to
/// its BF16 path on the same GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fa3Fp8Attention {
    /// Prefill attention rate over an FP8 cache as a multiple of the BF16 rate (the FP8
    /// tensor cores' 2x is lost to the accumulation flushes), dimensionless.
    pub prefill_rate_vs_bf16: f64,
    /// Decode attention's HBM time per FP8 cache byte as a multiple of a BF16 byte's (1: the
    /// FP8 path streams at the BF16 path's bandwidth), dimensionless.
    pub decode_time_per_byte_vs_bf16: f64,
}

/// Small memory-bound kernels (norms, rotary, activation, residual add).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmallOpsCurve {
    /// Minimum GPU time of one small kernel, seconds.
    pub kernel_s: f64,
    /// Their bandwidth as a fraction of the stream bandwidth.
    pub bandwidth_fraction: f64,
    /// Host time to launch one kernel without CUDA graphs, seconds.
    pub launch_s: f64,
}

/// Tensor-parallel all-reduce. NCCL: `latency + 2 (TP-1)/TP x bytes / bus_bandwidth`. An
/// engine's own NVLink kernels (vLLM, TensorRT-LLM and SGLang ship them): one-shot, each GPU
/// reads every peer's whole buffer, `custom_latency + (TP-1) x bytes / custom_bandwidth`;
/// two-shot (reduce-scatter, then all-gather), `custom_two_shot_latency + 2 (TP-1)/TP x bytes /
/// custom_bandwidth`. The engine profile says which it runs at a size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReduceCurve {
    /// Latency of one small all-reduce, seconds.
    pub latency_s: f64,
    /// Bus bandwidth for large messages, bytes/s.
    pub bus_bandwidth_bytes_per_s: f64,
    /// Latency of a small all-reduce done by an engine's custom one-shot kernel over
    /// NVLink peer-to-peer, seconds.
    pub custom_latency_s: f64,
    /// Latency of the engine's two-shot kernel (two phases, each with a barrier among the
    /// GPUs), seconds; absent: `custom_latency_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_two_shot_latency_s: Option<f64>,
    /// Rate at which the engine's kernels read their peers' buffers, bytes/s per GPU; absent:
    /// `bus_bandwidth_bytes_per_s` (NCCL's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_bandwidth_bytes_per_s: Option<f64>,
    /// Largest message the GPU's peer-to-peer NVLink path lets an engine's custom kernel take,
    /// bytes (0: no NVLink, always NCCL); the engine profile's own limit per TP degree applies
    /// below it.
    pub custom_max_bytes: f64,
}

/// Which fused-MoE kernel an engine runs: the implementation of its grouped expert GEMMs,
/// each with its own curve in a GPU profile's `[moe]` section ([`MoeCurve::kernel`]) and its
/// own chain of kernels around them (`roofline::kernels::fused_moe_work_s`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeKernel {
    /// vLLM's Triton `fused_moe` (SGLang runs its copy): the grouped GEMMs gather each
    /// expert's rows themselves, in output tiles of BLOCK_SIZE_M x BLOCK_SIZE_N.
    #[default]
    Triton,
    /// A CUTLASS grouped GEMM MoE (TensorRT-LLM's `CutlassMoeFCRunner`): the routed rows are
    /// first copied into expert order by a kernel of their own (`expandInputRowsKernel`).
    Cutlass,
    /// MXFP4 experts with BF16 activations on a GPU without FP4 tensor cores: OpenAI's
    /// triton_kernels `matmul_ogs` (TensorRT-LLM's TritonFusedMoE, the backend it serves
    /// gpt-oss with on Hopper), which gathers each expert's rows inside the GEMM, pads them to
    /// its `block_m` tile and dequantizes the 4-bit weights to BF16 in the main loop. Not an
    /// engine's choice: the step model runs it for MXFP4 experts where the GPU profile has
    /// a `[moe.mxfp4_w4a16]` curve ([`MoeCurve::class_for`]).
    #[serde(rename = "mxfp4_w4a16")]
    Mxfp4W4a16,
}

/// One fused-MoE kernel class's curve: how its grouped GEMMs run against the dense GEMM curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeKernelCurve {
    /// The grouped GEMMs' math rate as a fraction of the dense GEMM curve's (they gather rows
    /// per expert and pad each expert's rows to the kernel's tile), dimensionless.
    pub grouped_flops_fraction: f64,
    /// Time each wave of the grouped GEMMs' output tiles adds over the GPU's SMs, seconds
    /// (`tile_waves` of the step model's kernels); 0 (the default): no such term.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tile_wave_s: f64,
    /// The bandwidth the grouped GEMMs stream their weights and activations at, as a fraction
    /// of `memory.stream_bandwidth_bytes_per_s`, dimensionless; 1 (the default): the stream
    /// bandwidth. TensorRT-LLM's CUTLASS MoE on Hopper streams its FP8 experts well below it
    /// (docs/validation.md, "The CUTLASS MoE's streaming rate").
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub stream_fraction: f64,
    /// Weight elements the grouped GEMMs dequantize per second on the whole GPU (a limit of
    /// the SMs, not of HBM: 4-bit values converted and scaled to BF16 in registers before the
    /// MMA), weights/s; 0 (the default): no such limit. The weight streaming takes
    /// `max(bytes / stream bandwidth, weights / this rate)`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dequant_weights_per_s: f64,
    /// Fixed time of one of the class's grouped GEMMs (launch, per-expert tile scheduling,
    /// pipeline fill and tail), in place of `gemm.fixed_s`, seconds; 0 (the default):
    /// `gemm.fixed_s`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grouped_gemm_fixed_s: f64,
    /// The fraction of the stream bandwidth (after `stream_fraction`) the class's NVFP4
    /// grouped GEMMs stream their weights at, in place of `gemm.fp4_stream_bandwidth_fraction`
    /// (the dense NVFP4 GEMMs'), dimensionless; absent: that one. TensorRT-LLM's CUTLASS
    /// NVFP4 MoE on a B200 streams large expert sets faster than the dense NVFP4 GEMMs do
    /// (docs/validation.md, "trtllm-bench's limits and the B200 MoE rows").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4_stream_fraction: Option<f64>,
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

/// Grouped expert GEMMs of mixture-of-experts layers (fused-MoE kernels), one curve per
/// [`MoeKernel`] class: the section's own keys are the Triton class's, `[moe.cutlass]` the
/// CUTLASS class's. Each class's figures come from kernel rows of that kernel only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeCurve {
    /// Triton class: the grouped GEMMs' math rate as a fraction of the dense GEMM curve's
    /// (they gather rows per expert and pad each expert's rows to the kernel's tile).
    pub grouped_flops_fraction: f64,
    /// Triton class: time each wave of the grouped GEMMs' output tiles adds over the GPU's
    /// SMs, seconds: a tile fills its K pipeline from HBM before its first MMA, so a grouped
    /// GEMM of many small experts (few rows and a narrow N each: many tiles, little work per
    /// tile) pays it once per wave (`tile_waves` of the step model's kernels). 0 (the
    /// default): no such term.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tile_wave_s: f64,
    /// CUTLASS class (`[moe.cutlass]`); absent: the Triton class's figures stand in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutlass: Option<MoeKernelCurve>,
    /// MXFP4-weight, BF16-activation class (`[moe.mxfp4_w4a16]`: triton_kernels
    /// `matmul_ogs` on a GPU without FP4 tensor cores); absent: MXFP4 experts run the engine's
    /// own class at 4.25 bits per weight on the BF16 curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mxfp4_w4a16: Option<MoeKernelCurve>,
}

impl Default for MoeCurve {
    fn default() -> Self {
        MoeCurve {
            grouped_flops_fraction: 1.0,
            tile_wave_s: 0.0,
            cutlass: None,
            mxfp4_w4a16: None,
        }
    }
}

impl MoeCurve {
    /// The curve of one kernel class.
    pub fn kernel(&self, kernel: MoeKernel) -> MoeKernelCurve {
        let triton = MoeKernelCurve {
            grouped_flops_fraction: self.grouped_flops_fraction,
            tile_wave_s: self.tile_wave_s,
            stream_fraction: 1.0,
            dequant_weights_per_s: 0.0,
            grouped_gemm_fixed_s: 0.0,
            fp4_stream_fraction: None,
        };
        match kernel {
            MoeKernel::Triton => triton,
            MoeKernel::Cutlass => self.cutlass.unwrap_or(triton),
            MoeKernel::Mxfp4W4a16 => self.mxfp4_w4a16.unwrap_or(triton),
        }
    }

    /// The kernel class that runs experts stored in `weights` with `math` under an engine
    /// whose fused MoE is `engine`: MXFP4 experts dequantized to BF16 (no FP4 tensor cores)
    /// run triton_kernels `matmul_ogs` ([`MoeKernel::Mxfp4W4a16`]) where this profile has
    /// its curve (TensorRT-LLM, vLLM and SGLang all serve gpt-oss on Hopper with it); every
    /// other format runs the engine's class.
    pub fn class_for(
        &self,
        engine: MoeKernel,
        weights: crate::precision::WeightDtype,
        math: crate::precision::GemmMath,
    ) -> MoeKernel {
        use crate::precision::{GemmMath, WeightDtype};
        if weights == WeightDtype::Mxfp4 && math == GemmMath::Bf16 && self.mxfp4_w4a16.is_some() {
            MoeKernel::Mxfp4W4a16
        } else {
            engine
        }
    }
}

/// How the GPUs of a replica are connected beyond one NVLink domain, and the all-to-all of
/// expert parallelism.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCurve {
    /// GPUs that share one NVLink domain (a node, for HGX boards).
    pub gpus_per_node: u32,
    /// Achieved bandwidth of one GPU to GPUs in other nodes (its RDMA NIC), bytes/s.
    pub internode_bandwidth_bytes_per_s: f64,
    /// Fixed time of one all-to-all that crosses nodes (dispatch or combine), seconds.
    pub internode_latency_s: f64,
}

impl Default for NetworkCurve {
    /// An HGX node of eight GPUs with one 400 Gb/s ConnectX-7 NIC per GPU (DGX H100/H200/B200
    /// datasheets), at the bandwidth and latency DeepEP's low-latency kernels reach on it:
    /// fitting `latency + remote share x bytes / bandwidth` to DeepEP's published dispatch
    /// times (README, H800 + CX7, 128 tokens x 7168 x top-8 FP8: EP16 118 us, EP32 155,
    /// EP64 173, EP128 192, EP256 194; 7.57 MB per rank, remote share 1 - 8/EP) gives
    /// 46.7 GB/s and 37 us (DeepEP's normal kernels: 43-58 GB/s at EP16-64).
    fn default() -> Self {
        NetworkCurve {
            gpus_per_node: 8,
            internode_bandwidth_bytes_per_s: 46.7e9,
            internode_latency_s: 37e-6,
        }
    }
}

impl NetworkCurve {
    fn is_default(&self) -> bool {
        *self == NetworkCurve::default()
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// A GPU as the step-time model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuProfile {
    /// Catalog name, e.g. `h100-sxm`.
    pub name: String,
    /// Human-readable name.
    pub display_name: String,
    /// Vendor figures.
    pub datasheet: Datasheet,
    /// HBM streaming curve.
    pub memory: MemoryCurve,
    /// GEMM curve.
    pub gemm: GemmCurve,
    /// Attention kernels.
    pub attention: AttentionCurve,
    /// Small kernels and launches.
    pub small_ops: SmallOpsCurve,
    /// All-reduce within a TP group.
    pub allreduce: AllReduceCurve,
    /// Fused-MoE kernels (absent: grouped GEMMs at the dense curve's rate).
    #[serde(default)]
    pub moe: MoeCurve,
    /// Nodes and the network between them (absent: eight GPUs per node, DeepEP's figures).
    #[serde(default, skip_serializing_if = "NetworkCurve::is_default")]
    pub network: NetworkCurve,
}

/// Names of the embedded GPU profiles.
pub fn gpu_names() -> Vec<&'static str> {
    Kind::Gpu.names()
}

impl GpuProfile {
    /// Parses a profile from TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let p: GpuProfile = toml::from_str(text).map_err(|e| Error::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        p.validate(origin)?;
        Ok(p)
    }

    /// Loads a profile by catalog name or alias ([`crate::catalog`]) or from a path to a TOML
    /// file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        match catalog::resolve(Kind::Gpu, name_or_path)? {
            Entry::Catalog(name) => {
                let text = catalog::embedded(Kind::Gpu, name);
                Self::from_toml(text, &format!("calibration/gpus/{name}.toml"))
            }
            Entry::Path(path) => {
                let text = crate::input::read_to_string(&path, crate::input::InputKind::Config)?;
                Self::from_toml(&text, name_or_path)
            }
        }
    }

    /// Checks every figure is positive and every fraction in (0, 1].
    pub fn validate(&self, origin: &str) -> Result<()> {
        let positive = [
            ("datasheet.memory_bytes", self.datasheet.memory_bytes),
            (
                "datasheet.hbm_bandwidth_bytes_per_s",
                self.datasheet.hbm_bandwidth_bytes_per_s,
            ),
            (
                "datasheet.bf16_flops_per_s",
                self.datasheet.bf16_flops_per_s,
            ),
            (
                "memory.stream_bandwidth_bytes_per_s",
                self.memory.stream_bandwidth_bytes_per_s,
            ),
            ("gemm.bf16_flops_per_s", self.gemm.bf16_flops_per_s),
            ("gemm.half_rate_tokens", self.gemm.half_rate_tokens),
            (
                "allreduce.bus_bandwidth_bytes_per_s",
                self.allreduce.bus_bandwidth_bytes_per_s,
            ),
        ];
        for (key, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::config(origin, key, format!("must be > 0, got {v}")));
            }
        }
        let optional_positive = [
            (
                "allreduce.custom_two_shot_latency_s",
                self.allreduce.custom_two_shot_latency_s,
            ),
            (
                "allreduce.custom_bandwidth_bytes_per_s",
                self.allreduce.custom_bandwidth_bytes_per_s,
            ),
        ];
        for (key, v) in optional_positive {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(Error::config(origin, key, format!("must be > 0, got {v}")));
            }
        }
        let non_negative = [
            ("datasheet.fp8_flops_per_s", self.datasheet.fp8_flops_per_s),
            ("datasheet.fp4_flops_per_s", self.datasheet.fp4_flops_per_s),
            ("gemm.fp4_flops_per_s", self.gemm.fp4_flops_per_s),
            (
                "network.internode_latency_s",
                self.network.internode_latency_s,
            ),
            ("memory.latency_s", self.memory.latency_s),
            ("gemm.fixed_s", self.gemm.fixed_s),
            ("gemm.fp8_flops_per_s", self.gemm.fp8_flops_per_s),
            ("attention.fixed_s", self.attention.fixed_s),
            (
                "gemm.fp8_half_rate_tokens",
                self.gemm.fp8_half_rate_tokens.unwrap_or(0.0),
            ),
            (
                "attention.prefill_half_rate_tokens",
                self.attention.prefill_half_rate_tokens,
            ),
            ("small_ops.kernel_s", self.small_ops.kernel_s),
            ("small_ops.launch_s", self.small_ops.launch_s),
            ("allreduce.latency_s", self.allreduce.latency_s),
            (
                "allreduce.custom_latency_s",
                self.allreduce.custom_latency_s,
            ),
            (
                "allreduce.custom_max_bytes",
                self.allreduce.custom_max_bytes,
            ),
        ];
        for (key, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(origin, key, format!("must be >= 0, got {v}")));
            }
        }
        self.check_fractions(origin)?;
        let bw = self.network.internode_bandwidth_bytes_per_s;
        if !(bw.is_finite() && bw > 0.0) {
            return Err(Error::config(
                origin,
                "network.internode_bandwidth_bytes_per_s",
                format!("must be > 0, got {bw}"),
            ));
        }
        if !(1..=1024).contains(&self.network.gpus_per_node) {
            return Err(Error::config(
                origin,
                "network.gpus_per_node",
                format!("must be in 1..=1024, got {}", self.network.gpus_per_node),
            ));
        }
        if self.memory.stream_bandwidth_bytes_per_s > self.datasheet.hbm_bandwidth_bytes_per_s {
            return Err(Error::config(
                origin,
                "memory.stream_bandwidth_bytes_per_s",
                "exceeds the datasheet HBM bandwidth",
            ));
        }
        self.check_kv_format_ratios(origin)?;
        self.check_plausible(origin)
    }

    /// `attention.fa3_fp8`, `attention.prefill_fp8_kv_rate_vs_bf16` and
    /// `attention.decode_fp8_kv_rate_vs_bf16`: every ratio finite and
    /// within [0.25, 4].
    fn check_kv_format_ratios(&self, origin: &str) -> Result<()> {
        let fa3 = self.attention.fa3_fp8.map_or(Vec::new(), |f| {
            vec![
                (
                    "attention.fa3_fp8.prefill_rate_vs_bf16",
                    f.prefill_rate_vs_bf16,
                ),
                (
                    "attention.fa3_fp8.decode_time_per_byte_vs_bf16",
                    f.decode_time_per_byte_vs_bf16,
                ),
            ]
        });
        let ratios = [
            (
                "attention.prefill_fp8_kv_rate_vs_bf16",
                self.attention.prefill_fp8_kv_rate_vs_bf16,
            ),
            (
                "attention.decode_fp8_kv_rate_vs_bf16",
                self.attention.decode_fp8_kv_rate_vs_bf16,
            ),
        ];
        let set = ratios.into_iter().filter_map(|(k, v)| v.map(|v| (k, v)));
        for (key, v) in fa3.into_iter().chain(set) {
            if !(v.is_finite() && (0.25..=4.0).contains(&v)) {
                return Err(Error::config(
                    origin,
                    key,
                    format!("must be in [0.25, 4], got {v}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks every efficiency fraction of the profile is in (0, 1].
    fn check_fractions(&self, origin: &str) -> Result<()> {
        let fractions = [
            (
                "attention.decode_bandwidth_fraction",
                self.attention.decode_bandwidth_fraction,
            ),
            (
                "attention.prefill_flops_fraction",
                self.attention.prefill_flops_fraction,
            ),
            (
                "small_ops.bandwidth_fraction",
                self.small_ops.bandwidth_fraction,
            ),
            (
                "moe.grouped_flops_fraction",
                self.moe.grouped_flops_fraction,
            ),
            (
                "moe.cutlass.grouped_flops_fraction",
                self.moe.kernel(MoeKernel::Cutlass).grouped_flops_fraction,
            ),
            (
                "moe.cutlass.stream_fraction",
                self.moe.kernel(MoeKernel::Cutlass).stream_fraction,
            ),
            (
                "moe.mxfp4_w4a16.grouped_flops_fraction",
                self.moe
                    .kernel(MoeKernel::Mxfp4W4a16)
                    .grouped_flops_fraction,
            ),
            (
                "moe.mxfp4_w4a16.stream_fraction",
                self.moe.kernel(MoeKernel::Mxfp4W4a16).stream_fraction,
            ),
            (
                "gemm.fp4_stream_bandwidth_fraction",
                self.gemm.fp4_stream_bandwidth_fraction.unwrap_or(1.0),
            ),
            (
                "moe.cutlass.fp4_stream_fraction",
                self.moe
                    .kernel(MoeKernel::Cutlass)
                    .fp4_stream_fraction
                    .unwrap_or(1.0),
            ),
        ];
        for (key, v) in fractions {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(Error::config(
                    origin,
                    key,
                    format!("must be in (0, 1], got {v}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks every figure the step-time model reads against a range that holds any GPU from a
    /// V100 to well beyond a B200 (10x either way), so that a typo (a bandwidth of 1e-300, a
    /// fixed time of an hour) is an error naming the key and the range instead of step times
    /// of centuries.
    fn check_plausible(&self, origin: &str) -> Result<()> {
        crate::error::check_printable(origin, "name", &self.name)?;
        crate::error::check_printable(origin, "display_name", &self.display_name)?;
        let ranges = self.plausible_ranges();
        let or_none = [
            (
                "datasheet.fp8_flops_per_s",
                self.datasheet.fp8_flops_per_s,
                1e12,
                1e17,
            ),
            (
                "gemm.fp8_flops_per_s",
                self.gemm.fp8_flops_per_s,
                1e12,
                1e17,
            ),
            (
                "gemm.fp8_half_rate_tokens",
                self.gemm.fp8_half_rate_tokens.unwrap_or(1.0),
                1e-3,
                1e6,
            ),
            (
                "attention.mla_prefill_half_rate_tokens",
                self.attention.mla_prefill_half_rate_tokens.unwrap_or(0.0),
                1e-3,
                1e6,
            ),
        ];
        let out = ranges
            .into_iter()
            .find(|&(_, v, lo, hi)| !(lo..=hi).contains(&v))
            .or_else(|| {
                or_none
                    .into_iter()
                    .find(|&(_, v, lo, hi)| v != 0.0 && !(lo..=hi).contains(&v))
            });
        match out {
            Some((key, v, lo, hi)) => Err(Error::config(
                origin,
                key,
                format!("must be in [{lo:e}, {hi:e}] (a plausible GPU), got {v:e}"),
            )),
            None => Ok(()),
        }
    }

    /// (key, value, low, high) of every figure that must lie in a plausible GPU's range; a
    /// value of 0 is allowed where the key says "0: none".
    fn plausible_ranges(&self) -> [(&'static str, f64, f64, f64); 26] {
        [
            (
                "datasheet.memory_bytes",
                self.datasheet.memory_bytes,
                1e9,
                1e13,
            ),
            (
                "datasheet.hbm_bandwidth_bytes_per_s",
                self.datasheet.hbm_bandwidth_bytes_per_s,
                1e10,
                1e15,
            ),
            (
                "datasheet.bf16_flops_per_s",
                self.datasheet.bf16_flops_per_s,
                1e12,
                1e17,
            ),
            ("datasheet.l2_bytes", self.datasheet.l2_bytes, 0.0, 1e10),
            (
                "memory.stream_bandwidth_bytes_per_s",
                self.memory.stream_bandwidth_bytes_per_s,
                1e10,
                1e15,
            ),
            ("memory.latency_s", self.memory.latency_s, 0.0, 1e-3),
            ("gemm.fixed_s", self.gemm.fixed_s, 0.0, 1e-3),
            (
                "gemm.bf16_flops_per_s",
                self.gemm.bf16_flops_per_s,
                1e12,
                1e17,
            ),
            (
                "gemm.half_rate_tokens",
                self.gemm.half_rate_tokens,
                1e-3,
                1e6,
            ),
            ("attention.fixed_s", self.attention.fixed_s, 0.0, 1e-3),
            (
                "attention.decode_bandwidth_fraction",
                self.attention.decode_bandwidth_fraction,
                1e-2,
                1.0,
            ),
            (
                "attention.prefill_flops_fraction",
                self.attention.prefill_flops_fraction,
                1e-2,
                1.0,
            ),
            (
                "attention.prefill_half_rate_tokens",
                self.attention.prefill_half_rate_tokens,
                0.0,
                1e6,
            ),
            ("small_ops.kernel_s", self.small_ops.kernel_s, 0.0, 1e-3),
            (
                "small_ops.bandwidth_fraction",
                self.small_ops.bandwidth_fraction,
                1e-2,
                1.0,
            ),
            ("small_ops.launch_s", self.small_ops.launch_s, 0.0, 1e-3),
            ("allreduce.latency_s", self.allreduce.latency_s, 0.0, 1e-2),
            (
                "allreduce.bus_bandwidth_bytes_per_s",
                self.allreduce.bus_bandwidth_bytes_per_s,
                1e8,
                1e14,
            ),
            (
                "allreduce.custom_latency_s",
                self.allreduce.custom_latency_s,
                0.0,
                1e-2,
            ),
            (
                "moe.grouped_flops_fraction",
                self.moe.grouped_flops_fraction,
                1e-2,
                1.0,
            ),
            ("moe.tile_wave_s", self.moe.tile_wave_s, 0.0, 1e-4),
            (
                "moe.cutlass.grouped_flops_fraction",
                self.moe.kernel(MoeKernel::Cutlass).grouped_flops_fraction,
                1e-2,
                1.0,
            ),
            (
                "moe.cutlass.tile_wave_s",
                self.moe.kernel(MoeKernel::Cutlass).tile_wave_s,
                0.0,
                1e-4,
            ),
            (
                "moe.mxfp4_w4a16.tile_wave_s",
                self.moe.kernel(MoeKernel::Mxfp4W4a16).tile_wave_s,
                0.0,
                1e-4,
            ),
            (
                "moe.mxfp4_w4a16.grouped_gemm_fixed_s",
                self.moe.kernel(MoeKernel::Mxfp4W4a16).grouped_gemm_fixed_s,
                0.0,
                1e-3,
            ),
            (
                "moe.mxfp4_w4a16.dequant_weights_per_s",
                self.moe.kernel(MoeKernel::Mxfp4W4a16).dequant_weights_per_s,
                0.0,
                1e16,
            ),
        ]
    }

    /// Whether the GPU has FP8 tensor cores.
    pub fn supports_fp8(&self) -> bool {
        self.datasheet.fp8_flops_per_s > 0.0 && self.gemm.fp8_flops_per_s > 0.0
    }

    /// Whether the GPU has FP4 tensor cores.
    pub fn supports_fp4(&self) -> bool {
        self.datasheet.fp4_flops_per_s > 0.0 && self.gemm.fp4_flops_per_s > 0.0
    }

    /// The GEMM curve of a kind of tensor-core math: (achievable rate in FLOP/s, half-rate
    /// token count); math the GPU lacks falls back as [`crate::precision::WeightDtype::math`]
    /// decides before this is asked.
    pub fn gemm_math_curve(&self, math: crate::precision::GemmMath) -> (f64, f64) {
        use crate::precision::GemmMath;
        match math {
            GemmMath::Fp4 if self.supports_fp4() => (
                self.gemm.fp4_flops_per_s,
                self.gemm
                    .fp8_half_rate_tokens
                    .unwrap_or(self.gemm.half_rate_tokens),
            ),
            GemmMath::Fp8 | GemmMath::Fp4 => self.gemm_curve(true),
            GemmMath::Bf16 => self.gemm_curve(false),
        }
    }

    /// The GEMM curve for FP8 (`fp8`, on a GPU that supports it) or BF16 operands: (achievable
    /// rate in FLOP/s, half-rate token count).
    pub fn gemm_curve(&self, fp8: bool) -> (f64, f64) {
        if fp8 && self.supports_fp8() {
            (
                self.gemm.fp8_flops_per_s,
                self.gemm
                    .fp8_half_rate_tokens
                    .unwrap_or(self.gemm.half_rate_tokens),
            )
        } else {
            (self.gemm.bf16_flops_per_s, self.gemm.half_rate_tokens)
        }
    }
}
