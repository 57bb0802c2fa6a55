//! Flag parsing (clap). Flags become validated configuration in `commands`, never here.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// servesim: predict LLM-serving throughput, latency and cost per million tokens.
#[derive(Debug, Parser)]
#[command(name = "servesim", version, about, long_about = None)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// servesim's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Weights, KV capacity and the step time (with its breakdown) of one deployment.
    Estimate(EstimateArgs),
}

/// Output format of a command's main result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// A table for people.
    #[default]
    Table,
    /// JSON for machines.
    Json,
    /// CSV.
    Csv,
}

/// Flags naming a deployment (model on GPUs with an engine).
#[derive(Debug, Clone, Args)]
pub struct DeploymentArgs {
    /// Model: a catalog name (see `models/`) or a path to a Hugging Face config.json.
    #[arg(long, default_value = "llama-3.1-8b")]
    pub model: String,
    /// GPU type: a profile name (see `calibration/gpus/`) or a path to a profile .toml.
    #[arg(long, default_value = "h100-sxm")]
    pub gpu: String,
    /// Tensor-parallel size (GPUs per replica).
    #[arg(long = "tensor-parallel-size", alias = "tp", default_value_t = 1)]
    pub tp: u32,
    /// Weight format: bf16, fp16 or fp8.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// KV-cache format: auto or fp8.
    #[arg(long = "kv-cache-dtype", default_value = "auto")]
    pub kv_cache_dtype: String,
    /// Serving engine profile: vllm, trtllm or sglang.
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// Fraction of GPU memory the engine may use (default: the engine profile's).
    #[arg(long = "gpu-memory-utilization")]
    pub gpu_memory_utilization: Option<f64>,
}

/// Flags of `servesim estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// The deployment.
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Requests decoding one token each in the iteration.
    #[arg(long = "decode-batch", default_value_t = 1)]
    pub decode_batch: u32,
    /// Context length of each decoding request, tokens.
    #[arg(long, default_value_t = 1024)]
    pub context: u64,
    /// Prompt tokens prefilled in the same iteration (one chunk, no prior context).
    #[arg(long = "prefill-tokens", default_value_t = 0)]
    pub prefill_tokens: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}
