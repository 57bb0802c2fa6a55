//! Flag parsing (clap). Flags become validated configuration in `commands`, never here.

use std::path::PathBuf;

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
    /// Simulate one scenario (a TOML file, or the embedded default).
    Run(RunArgs),
    /// Simulate one deployment and workload given by flags, named as vLLM's benchmarks.
    Bench(Box<BenchArgs>),
    /// Re-simulate published measurements and print predicted against measured.
    Validate(ValidateArgs),
    /// Find the cheapest deployment that meets the SLOs at a target load; writes a report.
    ///
    /// Exit status: 0 with a recommendation; 1 when no candidate meets the SLOs (the plan
    /// and its report are still written, saying what stops each one); 2 for bad input,
    /// including a search space where no candidate can run at all.
    Plan(PlanArgs),
    /// Run a scenario over a grid of values of any keys, in parallel.
    Sweep(SweepArgs),
    /// Measure kernels on a CUDA GPU (HBM, GEMMs, paged attention, launch) into a CSV.
    Calibrate(CalibrateArgs),
    /// Fit a GPU profile's curves to a measurement CSV.
    Fit(FitArgs),
    /// Compare a GPU profile's kernel predictions with measurements; writes a PNG scatter.
    ValidateKernels(ValidateKernelsArgs),
    /// Fit an engine's host costs to `vllm bench serve --save-result` files; writes a profile.
    FitEngine(FitEngineArgs),
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
    /// Attention data-parallel ranks of a replica (vLLM's name; SGLang `--dp-size` with
    /// `--enable-dp-attention`): a replica has tensor-parallel size x this many GPUs.
    #[arg(long = "data-parallel-size", alias = "dp", default_value_t = 1)]
    pub dp: u32,
    /// Expert-parallel size of the MoE layers (SGLang `--ep-size`); 1: experts split
    /// tensor-parallel over the replica's GPUs.
    #[arg(long = "expert-parallel-size", alias = "ep-size", default_value_t = 1)]
    pub ep: u32,
    /// Spread the experts over all the replica's GPUs (vLLM's flag: expert-parallel size =
    /// tensor-parallel size x data-parallel size).
    #[arg(long = "enable-expert-parallel", conflicts_with = "ep")]
    pub enable_expert_parallel: bool,
    /// Redundant expert replicas per MoE layer placed by the load balancer (EPLB).
    #[arg(long = "num-redundant-experts", default_value_t = 0)]
    pub redundant_experts: u32,
    /// Weight format: bf16, fp16, fp8, fp4 (NVFP4), mxfp4, or auto (the default, as in a
    /// scenario and vLLM's `--dtype auto`: the checkpoint's own formats from its
    /// quantization_config, 16-bit where it declares none).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// A published checkpoint of the model other than its own, by Hugging Face id (one the
    /// catalog model declares under `published_checkpoints`, e.g.
    /// nvidia/DeepSeek-R1-0528-NVFP4-v2): its modules run in the formats it stores them in
    /// (the scenario's `deployment.checkpoint`).
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// KV-cache format: auto or fp8.
    #[arg(long = "kv-cache-dtype", default_value = "auto")]
    pub kv_cache_dtype: String,
    /// Serving engine profile: vllm, trtllm or sglang.
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// Fraction of GPU memory the engine may use (default: the engine profile's).
    #[arg(long = "gpu-memory-utilization", allow_negative_numbers = true)]
    pub gpu_memory_utilization: Option<f64>,
}

/// Flags of `servesim estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// The deployment.
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Pipeline-parallel stages (vLLM's `--pipeline-parallel-size`, TensorRT-LLM `pp_size`):
    /// each stage holds `num_layers / pp` layers on its own tensor-parallel GPUs, so weights
    /// and KV per GPU are one stage's; the batch is one micro-batch, its step the pass through
    /// every stage.
    #[arg(long = "pipeline-parallel-size", alias = "pp", default_value_t = 1)]
    pub pp: u32,
    /// Requests decoding one token each in the iteration.
    #[arg(long = "decode-batch", default_value_t = 1)]
    pub decode_batch: u32,
    /// Speculative decoding, as `bench --speculative-config` takes it (vLLM's JSON): the KV
    /// capacity with the draft's reservation and the draft and verify step times of the batch.
    #[arg(long = "speculative-config", value_name = "JSON")]
    pub speculative_config: Option<String>,
    /// Context length of each decoding request, tokens.
    #[arg(long, default_value_t = 1024)]
    pub context: u64,
    /// Prompt tokens prefilled in the same iteration (one chunk, no prior context).
    #[arg(long = "prefill-tokens", default_value_t = 0)]
    pub prefill_tokens: u32,
    /// Engine's max_num_seqs the memory plan reserves for (default: the engine's for the GPU).
    #[arg(long = "max-num-seqs")]
    pub max_num_seqs: Option<u32>,
    /// Engine's max_num_batched_tokens the memory plan reserves activations for (default: the
    /// engine's for the GPU).
    #[arg(long = "max-num-batched-tokens")]
    pub max_num_batched_tokens: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Flags of `servesim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario file (TOML); the embedded default when absent. `scenarios/chat-slo.toml`
    /// and `scenarios/default.toml` (or `chat-slo`, `default`) read the embedded copies when
    /// no such file exists.
    pub scenario: Option<PathBuf>,
    /// Override any scenario key, e.g. `--set workload.arrival.rate_per_s=20` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Time every engine iteration as its own event (the oracle the fast-forward of
    /// decode-only runs is checked against; same results, slower). Sets
    /// `limits.fast_forward = false`.
    #[arg(long = "no-fast-forward")]
    pub no_fast_forward: bool,
    /// Seed (overrides the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the run as a Chrome trace to FILE (open it in chrome://tracing or
    /// ui.perfetto.dev): each replica's iterations (batch, tokens; a fast-forwarded run of
    /// decode iterations as one span with its count), its queue and its KV use. At most
    /// 1,000,000 events; a capped trace says so in the file and on stderr.
    #[arg(long = "trace-events", value_name = "FILE")]
    pub trace_events: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write summary.json and timeseries.csv (and plots) into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Flags of `servesim bench`, named as `vllm bench serve` / `vllm bench throughput` name them.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The deployment.
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Replicas behind the router.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// Router: round-robin, least-outstanding, least-kv, power-of-two, prefix-aware (block
    /// identities), session-affinity (sessions).
    #[arg(long, default_value = "least-outstanding")]
    pub router: String,
    /// KV offloading to host memory, GiB per replica summed over its TP ranks (vLLM's
    /// `--kv-offloading-size`; `deployment.kv_offloading_size_gib`).
    #[arg(long = "kv-offloading-size", allow_negative_numbers = true)]
    pub kv_offloading_size: Option<f64>,
    /// Disaggregated serving: replicas of the prefill pool (with --decode-replicas).
    #[arg(long = "prefill-replicas")]
    pub prefill_replicas: Option<u32>,
    /// Disaggregated serving: replicas of the decode pool (with --prefill-replicas).
    #[arg(long = "decode-replicas")]
    pub decode_replicas: Option<u32>,
    /// Disaggregated: TP of each prefill replica (default: --tensor-parallel-size).
    #[arg(long = "prefill-tp")]
    pub prefill_tp: Option<u32>,
    /// Disaggregated: TP of each decode replica (default: --tensor-parallel-size).
    #[arg(long = "decode-tp")]
    pub decode_tp: Option<u32>,
    /// Disaggregated: KV link bandwidth into each decode replica, GB/s (default: 50 per GPU
    /// of the smaller pool TP; `inf`: unlimited).
    #[arg(long = "kv-transfer-bandwidth", allow_negative_numbers = true)]
    pub kv_transfer_bandwidth: Option<f64>,
    /// Disaggregated: fixed time of each KV transfer, us (default 20).
    #[arg(long = "kv-transfer-latency-us", allow_negative_numbers = true)]
    pub kv_transfer_latency_us: Option<f64>,
    /// Dataset: random, sharegpt, azure-conv-2023, azure-code-2023, arxiv-summarization.
    #[arg(long = "dataset-name", default_value = "random")]
    pub dataset_name: String,
    /// Mean prompt length of the random dataset, tokens.
    #[arg(long = "random-input-len", default_value_t = 1024)]
    pub random_input_len: u32,
    /// Mean output length of the random dataset, tokens.
    #[arg(long = "random-output-len", default_value_t = 128)]
    pub random_output_len: u32,
    /// Shared prefix prepended to every random prompt, tokens.
    #[arg(long = "random-prefix-len", default_value_t = 0)]
    pub random_prefix_len: u32,
    /// Random lengths are uniform in [len x (1 - r), len x (1 + r)].
    #[arg(long = "random-range-ratio", default_value_t = 0.0)]
    pub random_range_ratio: f64,
    /// Fixed prompt length (alias of --random-input-len with range ratio 0).
    #[arg(long = "input-len")]
    pub input_len: Option<u32>,
    /// Fixed output length (alias of --random-output-len with range ratio 0).
    #[arg(long = "output-len")]
    pub output_len: Option<u32>,
    /// Requests to send.
    #[arg(long = "num-prompts", default_value_t = 1000)]
    pub num_prompts: u64,
    /// Request rate, req/s; `inf` sends everything at t = 0.
    #[arg(long = "request-rate", default_value_t = f64::INFINITY)]
    pub request_rate: f64,
    /// Gamma shape of inter-arrival times: 1 = Poisson, < 1 burstier, > 1 more regular.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Most requests outstanding at once (client side).
    #[arg(long = "max-concurrency")]
    pub max_concurrency: Option<u32>,
    /// Engine's max_num_seqs.
    #[arg(long = "max-num-seqs")]
    pub max_num_seqs: Option<u32>,
    /// Engine's max_num_batched_tokens.
    #[arg(long = "max-num-batched-tokens")]
    pub max_num_batched_tokens: Option<u32>,
    /// Engine's max_model_len.
    #[arg(long = "max-model-len")]
    pub max_model_len: Option<u32>,
    /// Chunked prefill on or off (default: the engine profile's).
    #[arg(long = "enable-chunked-prefill", num_args = 0..=1, default_missing_value = "true")]
    pub enable_chunked_prefill: Option<bool>,
    /// Prefix caching on or off (default: the engine profile's).
    #[arg(long = "enable-prefix-caching", num_args = 0..=1, default_missing_value = "true")]
    pub enable_prefix_caching: Option<bool>,
    /// Asynchronous scheduling on or off (default: the engine profile's, on for every
    /// profile): vLLM's `--async-scheduling` / `--no-async-scheduling`. On, the engine plans the
    /// next iteration while the GPU runs this one: host time hides under the GPU, and a request
    /// arriving mid-iteration joins the iteration after the planned one.
    #[arg(long = "async-scheduling", num_args = 0..=1, default_missing_value = "true")]
    pub async_scheduling: Option<bool>,
    /// Asynchronous scheduling off (vLLM's `--no-async-scheduling`).
    #[arg(long = "no-async-scheduling", conflicts_with = "async_scheduling")]
    pub no_async_scheduling: bool,
    /// SLOs for goodput, as vLLM's `--goodput`: `ttft:MS tpot:MS e2el:MS`.
    #[arg(long, num_args = 1.., value_name = "KEY:MS")]
    pub goodput: Vec<String>,
    /// Time every engine iteration as its own event (the oracle the fast-forward of
    /// decode-only runs is checked against; same results, slower). Sets
    /// `limits.fast_forward = false`.
    #[arg(long = "no-fast-forward")]
    pub no_fast_forward: bool,
    /// Speculative decoding, as vLLM's `--speculative-config` JSON: `method` (eagle, eagle3,
    /// mtp, draft_model, ngram), `num_speculative_tokens`, `model` and
    /// `draft_tensor_parallel_size` (draft_model), `disable_by_batch_size`, plus servesim's
    /// `acceptance_rate` (a number or K numbers) or `mean_acceptance_length`.
    #[arg(long = "speculative-config", value_name = "JSON")]
    pub speculative_config: Option<String>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// With `--format json`: also write each request's prompt and output tokens
    /// (`input_lens`, `output_lens`; 0 output for a request that did not complete), as
    /// `vllm bench serve --save-detailed` does. `fit-engine` then simulates with them.
    #[arg(long = "save-detailed")]
    pub save_detailed: bool,
    /// Write the run as a Chrome trace to FILE (open it in chrome://tracing or
    /// ui.perfetto.dev): each replica's iterations (batch, tokens; a fast-forwarded run of
    /// decode iterations as one span with its count), its queue and its KV use. At most
    /// 1,000,000 events; a capped trace says so in the file and on stderr.
    #[arg(long = "trace-events", value_name = "FILE")]
    pub trace_events: Option<PathBuf>,
    /// Also write summary.json and timeseries.csv into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Flags of `servesim validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A reference file (repeatable; default: the embedded reference files, the fit set
    /// calibration/reference/serving-measurements.csv and vllm-blog-2026-fp8-kv-h100.csv, and the
    /// held-out trtllm-1.0-offline-70b-405b.csv and the inference-sim-vllm-0.15.1-*-h100.csv
    /// files).
    #[arg(long = "reference")]
    pub reference: Vec<PathBuf>,
    /// Only rows of this engine profile.
    #[arg(long)]
    pub engine: Option<String>,
    /// Fit this engine's host costs to its rows first, print them, and validate with them.
    #[arg(long = "fit-engine")]
    pub fit_engine: Option<String>,
    /// Share of the rows the prediction intervals hold, in (0, 1).
    #[arg(long, default_value_t = 0.9)]
    pub coverage: f64,
    /// Output format of the per-row table.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Print the cross-validation report as Markdown (the block docs/validation.md carries)
    /// instead of the tables.
    #[arg(long, conflicts_with_all = ["format", "fit_engine"])]
    pub markdown: bool,
    /// In-sample only: skip the grouped cross-validation (one refit of the engine's host
    /// costs per configuration of the fit set).
    #[arg(long = "no-cv", conflicts_with = "fit_engine")]
    pub no_cv: bool,
    /// Instead of the cross-validation, print (as --markdown) the table of the held-out files
    /// of other engine releases and engines that docs/validation.md reports, each row
    /// predicted by the committed costs; run from the repository root (the files name model
    /// configs by path).
    #[arg(long = "other-releases", requires = "markdown", conflicts_with_all = ["reference", "group", "engine"])]
    pub other_releases: bool,
    /// Cross-validate only this configuration (repeatable; as printed in the configuration
    /// table, e.g. "vllm 0.15.1 llama-2-7b TP1 h100-sxm"); the other rows are left out.
    #[arg(long = "group")]
    pub group: Vec<String>,
    /// Write comparisons.csv, out-of-sample.csv, summary.json, intervals.json, folds.json and
    /// predicted-vs-measured.png into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
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
    /// Only check what can be checked before timing (driver and library versions, symbols,
    /// module loads, one tiny launch of each kernel against its CPU reference) and print it.
    #[arg(long, conflicts_with_all = ["out", "only", "runs"])]
    pub check: bool,
    /// Output CSV (required unless --check).
    #[arg(long, required_unless_present = "check")]
    pub out: Option<PathBuf>,
}

/// Flags of `servesim fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// Measurement CSVs (as `servesim calibrate` writes them); their rows are fitted together.
    #[arg(required = true, num_args = 1..)]
    pub measurements: Vec<PathBuf>,
    /// Base GPU profile: a catalog name or a path; fields without rows keep its values.
    #[arg(long, default_value = "h100-sxm")]
    pub base: String,
    /// Output profile TOML.
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `servesim fit-engine`.
#[derive(Debug, Args)]
pub struct FitEngineArgs {
    /// Result files in `vllm bench serve --save-result` format (or `servesim bench --format
    /// json` output), measured on the deployment the flags below name.
    #[arg(required = true, num_args = 1..)]
    pub results: Vec<PathBuf>,
    /// Model the results were measured with: a catalog name or a config.json path.
    #[arg(long)]
    pub model: String,
    /// GPU type: a profile name or a path to a profile .toml.
    #[arg(long)]
    pub gpu: String,
    /// Tensor-parallel size.
    #[arg(long = "tp", alias = "tensor-parallel-size", default_value_t = 1)]
    pub tp: u32,
    /// Attention data-parallel ranks of a replica (vLLM's name; SGLang `--dp-size` with
    /// `--enable-dp-attention`): a replica has tensor-parallel size x this many GPUs.
    #[arg(long = "data-parallel-size", alias = "dp", default_value_t = 1)]
    pub dp: u32,
    /// Expert-parallel size of the MoE layers (SGLang `--ep-size`); 1: experts split
    /// tensor-parallel over the replica's GPUs.
    #[arg(long = "expert-parallel-size", alias = "ep-size", default_value_t = 1)]
    pub ep: u32,
    /// Spread the experts over all the replica's GPUs (vLLM's flag: expert-parallel size =
    /// tensor-parallel size x data-parallel size).
    #[arg(long = "enable-expert-parallel", conflicts_with = "ep")]
    pub enable_expert_parallel: bool,
    /// Redundant expert replicas per MoE layer placed by the load balancer (EPLB).
    #[arg(long = "num-redundant-experts", default_value_t = 0)]
    pub redundant_experts: u32,
    /// Weight format: bf16, fp16, fp8, fp4 (NVFP4), mxfp4, or auto (the default, as in a
    /// scenario and vLLM's `--dtype auto`: the checkpoint's own formats from its
    /// quantization_config, 16-bit where it declares none).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// KV-cache format: auto or fp8.
    #[arg(long = "kv-cache-dtype", default_value = "auto")]
    pub kv_cache_dtype: String,
    /// Engine profile to start from (name or .toml path); everything but the host costs is kept.
    #[arg(long, default_value = "vllm")]
    pub base: String,
    /// The fitted engine profile (TOML, the schema of calibration/engines/).
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `servesim validate-kernels`.
#[derive(Debug, Args)]
pub struct ValidateKernelsArgs {
    /// GPU profile: a name or a path to a profile .toml.
    #[arg(long)]
    pub gpu: String,
    /// Measurement CSVs (repeatable, or several after one flag); their rows are pooled.
    #[arg(long, required = true, num_args = 1..)]
    pub measurements: Vec<PathBuf>,
    /// PNG scatter plot of predicted against measured.
    #[arg(long, default_value = "validate-kernels.png")]
    pub plot: PathBuf,
}

/// Flags of `servesim plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Scenario with a target load, SLOs and a [plan] search space (default: the embedded
    /// scenarios/chat-slo.toml, also read for that path when no such file exists).
    pub scenario: Option<PathBuf>,
    /// Override any scenario key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Time every engine iteration as its own event (the oracle the fast-forward of
    /// decode-only runs is checked against; same results, slower). Sets
    /// `limits.fast_forward = false`.
    #[arg(long = "no-fast-forward")]
    pub no_fast_forward: bool,
    /// $/GPU-hour for every GPU type, > 0 (overrides calibration/pricing.toml).
    #[arg(long, allow_negative_numbers = true)]
    pub price: Option<f64>,
    /// Seed (overrides the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Report folder (plan.json, candidates.csv, cost.xlsx, plots, index.html).
    #[arg(long, default_value = "servesim-report")]
    pub out: PathBuf,
}

/// Flags of `servesim sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Scenario file (default: the embedded default scenario; `scenarios/chat-slo.toml` and
    /// `scenarios/default.toml` read the embedded copies when no such file exists).
    pub scenario: Option<PathBuf>,
    /// A key and its values: `KEY=v1,v2,...` or `KEY=start..end:steps` (repeatable: a grid).
    #[arg(
        long = "vary",
        value_name = "KEY=VALUES",
        required_unless_present = "merge"
    )]
    pub vary: Vec<String>,
    /// Run only slice K of N of the grid (0 <= K < N: the points whose index is K modulo N),
    /// writing its points and a shard.json into --out (one task of a job array).
    #[arg(long, value_name = "K/N", conflicts_with = "merge")]
    pub shard: Option<String>,
    /// Merge the folders of every shard of one sweep into --out: the same files one run of
    /// the whole grid writes.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with_all = ["vary", "scenario"])]
    pub merge: Vec<PathBuf>,
    /// Override any scenario key for every point (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Time every engine iteration as its own event (the oracle the fast-forward of
    /// decode-only runs is checked against; same results, slower). Sets
    /// `limits.fast_forward = false`.
    #[arg(long = "no-fast-forward")]
    pub no_fast_forward: bool,
    /// Output format on stdout (default: table on a terminal, csv when piped).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Output folder for sweep.csv and sweep.json.
    #[arg(long, default_value = "servesim-sweep")]
    pub out: PathBuf,
}
