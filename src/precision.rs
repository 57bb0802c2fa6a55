//! Numeric formats of weights and KV cache.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Storage format of the linear-layer weights (activations are always 16-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// bfloat16, 2 bytes; BF16 tensor-core math.
    #[default]
    Bf16,
    /// float16, 2 bytes; same cost as bf16.
    Fp16,
    /// FP8 (E4M3), 1 byte; FP8 tensor-core math where the GPU has it, else weight-only.
    Fp8,
    /// NVFP4: 4-bit E2M1 values with one FP8 (E4M3) scale per 16, 4.5 bits; FP4 tensor-core
    /// math where the GPU has it (Blackwell), else dequantized to BF16 in the GEMM's main loop
    /// (the engines' W4A16 kernels on Hopper and Ampere).
    Fp4,
    /// MXFP4 (OCP microscaling): 4-bit E2M1 values with one E8M0 scale per 32, 4.25 bits, as
    /// gpt-oss ships its experts; on Blackwell it runs with MXFP8 activations at the FP8 rate,
    /// elsewhere dequantized to BF16.
    Mxfp4,
}

/// The tensor-core math a GEMM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmMath {
    /// BF16/FP16 operands (also for weights dequantized from a narrower format).
    Bf16,
    /// FP8 operands.
    Fp8,
    /// FP4 operands (Blackwell).
    Fp4,
}

impl WeightDtype {
    /// A deployment's `dtype` setting: `None` for `auto` (the checkpoint's own formats),
    /// else the format it names. (`FromStr` alone reads `auto` as BF16, the 16-bit default of
    /// a checkpoint that declares nothing; a setting must keep `auto` apart.)
    pub fn parse_setting(s: &str) -> Result<Option<Self>, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(None)
        } else {
            s.parse().map(Some)
        }
    }

    /// Bytes per weight element.
    pub fn bytes(self) -> f64 {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 => 2.0,
            WeightDtype::Fp8 => 1.0,
            // 4 bits + an 8-bit scale per 16 (NVFP4) or per 32 (MXFP4) elements.
            WeightDtype::Fp4 => 0.5 + 1.0 / 16.0,
            WeightDtype::Mxfp4 => 0.5 + 1.0 / 32.0,
        }
    }

    /// Safetensors elements a checkpoint stores per weight in this format, as Hugging Face's
    /// `parameter_count` counts them (the product of each tensor's shape, whatever its dtype):
    /// one per 16-bit weight; the 8- and 4-bit formats store only one-byte elements (F8_E4M3
    /// weights; U8 pairs of E2M1 values with one F8_E4M3 (NVFP4) or U8 E8M0 (MXFP4) scale per
    /// 16 or 32 weights: ModelOpt's NVFP4 export, gpt-oss's `_blocks`/`_scales`), so their
    /// count is their byte count, 0.5625 per NVFP4 weight. The few FP32 scales per tensor
    /// (and DeepSeek's one per 128 x 128 block, 1/16384 per weight) are left out.
    pub fn stored_elements(self) -> f64 {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 => 1.0,
            _ => self.bytes(),
        }
    }

    /// The math a GEMM with weights in this format runs on a GPU with (`fp8`, `fp4`) tensor
    /// cores: a narrower format than the GPU computes is dequantized to BF16 (FP8 on Ampere,
    /// FP4 on Hopper), MXFP4 pairs with MXFP8 activations (FlashInfer's and TensorRT-LLM's
    /// W4A8 MoE kernels for gpt-oss on Blackwell).
    pub fn math(self, fp8: bool, fp4: bool) -> GemmMath {
        match self {
            WeightDtype::Fp8 if fp8 => GemmMath::Fp8,
            WeightDtype::Fp4 if fp4 => GemmMath::Fp4,
            WeightDtype::Mxfp4 if fp4 && fp8 => GemmMath::Fp8,
            _ => GemmMath::Bf16,
        }
    }
}

impl FromStr for WeightDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" | "auto" => Ok(WeightDtype::Bf16),
            "fp16" | "float16" | "half" => Ok(WeightDtype::Fp16),
            "fp8" | "fp8_e4m3" | "float8" => Ok(WeightDtype::Fp8),
            "fp4" | "nvfp4" => Ok(WeightDtype::Fp4),
            "mxfp4" => Ok(WeightDtype::Mxfp4),
            _ => Err(format!(
                "unknown dtype '{s}' (auto, bf16, fp16, fp8, fp4, mxfp4)"
            )),
        }
    }
}

impl fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp16 => "fp16",
            WeightDtype::Fp8 => "fp8",
            WeightDtype::Fp4 => "fp4",
            WeightDtype::Mxfp4 => "mxfp4",
        })
    }
}

/// Storage format of the KV cache, as a deployment sets it (`kv_cache_dtype`).
///
/// The one rule every command follows ([`KvDtype::resolve`]): `auto` takes the format the
/// checkpoint declares, as vLLM (since PR #30785, Dec. 2025, which reads
/// `kv_cache_quant_algo` from `hf_quant_config.json`) and TensorRT-LLM (`KvCacheConfig.dtype`
/// `auto` follows the checkpoint's quantization config) do. servesim models an FP8 deployment
/// as an FP8 checkpoint made by NVIDIA's Model Optimizer, which declares
/// `kv_cache_quant_algo = "FP8"`; so `auto` is FP8 with FP8 weights and the 16-bit activation
/// format otherwise. An explicit format overrides it (an FP8 checkpoint without KV scales, as
/// llm-compressor's FP8 builds ship, runs a 16-bit KV cache: `kv_cache_dtype = "bf16"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// What the checkpoint declares: see [`KvDtype::resolve`]. 2 bytes until resolved.
    #[default]
    Auto,
    /// bfloat16 KV cache: 2 bytes.
    Bf16,
    /// float16 KV cache: 2 bytes.
    Fp16,
    /// FP8 (E4M3) KV cache: 1 byte.
    Fp8,
}

impl KvDtype {
    /// Bytes per KV element.
    pub fn bytes(self) -> f64 {
        match self {
            KvDtype::Auto | KvDtype::Bf16 | KvDtype::Fp16 => 2.0,
            KvDtype::Fp8 => 1.0,
        }
    }

    /// The format this setting gives with weights in `weights`: `auto` follows the checkpoint
    /// (FP8 weights come with an FP8 KV cache, 16-bit weights with the same 16-bit format);
    /// an explicit format stays.
    pub fn resolve(self, weights: WeightDtype) -> KvDtype {
        match (self, weights) {
            (KvDtype::Auto, WeightDtype::Bf16) => KvDtype::Bf16,
            (KvDtype::Auto, WeightDtype::Fp16) => KvDtype::Fp16,
            (KvDtype::Auto, WeightDtype::Fp8) => KvDtype::Fp8,
            // NVIDIA's NVFP4 checkpoints (ModelOpt) declare an FP8 KV cache; gpt-oss's MXFP4
            // checkpoint declares none.
            (KvDtype::Auto, WeightDtype::Fp4) => KvDtype::Fp8,
            (KvDtype::Auto, WeightDtype::Mxfp4) => KvDtype::Bf16,
            (explicit, _) => explicit,
        }
    }
}

impl FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(KvDtype::Auto),
            "bf16" | "bfloat16" => Ok(KvDtype::Bf16),
            "fp16" | "float16" | "half" => Ok(KvDtype::Fp16),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(KvDtype::Fp8),
            _ => Err(format!(
                "unknown kv-cache dtype '{s}' (auto, bf16, fp16, fp8)"
            )),
        }
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvDtype::Auto => "auto",
            KvDtype::Bf16 => "bf16",
            KvDtype::Fp16 => "fp16",
            KvDtype::Fp8 => "fp8",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_weights_and_explicit_formats_stay() {
        use KvDtype as K;
        use WeightDtype as W;
        assert_eq!(K::Auto.resolve(W::Bf16), K::Bf16);
        assert_eq!(K::Auto.resolve(W::Fp16), K::Fp16);
        assert_eq!(K::Auto.resolve(W::Fp8), K::Fp8);
        assert_eq!(K::Bf16.resolve(W::Fp8), K::Bf16);
        assert_eq!(K::Fp8.resolve(W::Bf16), K::Fp8);
        for k in [K::Auto, K::Bf16, K::Fp16, K::Fp8] {
            assert_eq!(k.to_string().parse::<K>().unwrap(), k);
        }
    }
}
