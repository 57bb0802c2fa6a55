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
    /// Measure kernels on a CUDA GPU (HBM, GEMMs, paged attention, launch) into a CSV.
    Calibrate(CalibrateArgs),
    /// Fit a GPU profile's curves to a measurement CSV.
    Fit(FitArgs),
    /// Compare a GPU profile's kernel predictions with measurements; writes a PNG scatter.
    ValidateKernels(ValidateKernelsArgs),
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

/// Flags of `servesim calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Models whose layer shapes are measured (repeatable).
    #[arg(long = "model", default_values_t = ["llama-3.1-8b".to_string(), "llama-3.1-70b".to_string()])]
    pub models: Vec<String>,
    /// Tensor-parallel degrees whose per-GPU shapes are measured (repeatable).
    #[arg(long = "tp", default_values_t = [1u64])]
    pub tp: Vec<u64>,
    /// Parts of the suite: stream, gemm, attention, launch (repeatable; default all).
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// Timed runs per kernel x shape (at least 20).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Output CSV.
    #[arg(long)]
    pub out: std::path::PathBuf,
}

/// Flags of `servesim fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// Measurement CSV (as `servesim calibrate` writes it).
    pub measurements: std::path::PathBuf,
    /// Base GPU profile: a name or a path; fields without rows keep its values.
    #[arg(long, default_value = "calibration/gpus/h100-sxm.toml")]
    pub base: String,
    /// Output profile TOML.
    #[arg(long)]
    pub out: std::path::PathBuf,
}

/// Flags of `servesim validate-kernels`.
#[derive(Debug, Args)]
pub struct ValidateKernelsArgs {
    /// GPU profile: a name or a path to a profile .toml.
    #[arg(long)]
    pub gpu: String,
    /// Measurement CSV.
    #[arg(long)]
    pub measurements: std::path::PathBuf,
    /// PNG scatter plot of predicted against measured.
    #[arg(long, default_value = "validate-kernels.png")]
    pub plot: std::path::PathBuf,
}
