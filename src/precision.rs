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
}

impl WeightDtype {
    /// Bytes per weight element.
    pub fn bytes(self) -> f64 {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 => 2.0,
            WeightDtype::Fp8 => 1.0,
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
            _ => Err(format!("unknown dtype '{s}' (bf16, fp16, fp8)")),
        }
    }
}

impl fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp16 => "fp16",
            WeightDtype::Fp8 => "fp8",
        })
    }
}

/// Storage format of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// Same as the activations: 2 bytes.
    #[default]
    Auto,
    /// FP8 KV cache: 1 byte.
    Fp8,
}

impl KvDtype {
    /// Bytes per KV element.
    pub fn bytes(self) -> f64 {
        match self {
            KvDtype::Auto => 2.0,
            KvDtype::Fp8 => 1.0,
        }
    }
}

impl FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" | "bf16" | "fp16" | "bfloat16" | "float16" => Ok(KvDtype::Auto),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(KvDtype::Fp8),
            _ => Err(format!("unknown kv-cache dtype '{s}' (auto, fp8)")),
        }
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvDtype::Auto => "auto",
            KvDtype::Fp8 => "fp8",
        })
    }
}
