//! `servesim estimate`: one deployment's memory plan and step time with its breakdown.

use std::borrow::Cow;
use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{EstimateArgs, Format};
use servesim::model::KvPerToken;
use servesim::report::{CsvExporter, Exporter, JsonExporter, TableSheet, ToTable};
use servesim::roofline::{BatchShape, MemoryPlan, StepBreakdown, StepTimeModel};
use servesim::scenario::resolve_deployment;

#[derive(Serialize)]
struct Estimate {
    model: String,
    gpu: String,
    tp: u32,
    /// Attention data-parallel ranks and expert-parallel size (GPUs per replica: tp x dp).
    dp: u32,
    ep: u32,
    /// Pipeline stages (GPUs per replica: tp x pp); absent at 1. Weights, KV and the memory
    /// plan are one stage's GPU's; the batch is one micro-batch.
    #[serde(skip_serializing_if = "is_one")]
    pp: u32,
    /// Layers of one pipeline stage (`num_layers / pp`).
    #[serde(skip)]
    layers_per_stage: u64,
    /// Parameters, all experts included (no multi-token-prediction module).
    params_total: f64,
    /// Parameters one token's forward pass multiplies (top-k and shared experts, LM head; not
    /// the embedding table).
    params_active: f64,
    dtype: String,
    kv_cache_dtype: String,
    engine: String,
    /// Scheduler settings the memory plan was made for (the engine's defaults for this GPU
    /// unless a flag sets them).
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    weights_bytes_per_gpu: f64,
    /// KV-cache bytes per token, whole model, every layer keeping every token.
    kv_bytes_per_token: f64,
    /// The same by attention kind: full-attention layers keep every token; sliding-window and
    /// chunked layers only their window (vLLM's hybrid KV allocator).
    kv_by_attention: KvPerToken,
    memory: MemoryPlan,
    batch: BatchShape,
    step: StepBreakdown,
    /// Of `step.host_s`, the engine's time per iteration that is never hidden under the GPU
    /// (`host.per_iteration_exposed_s`), seconds.
    host_exposed_s: f64,
    /// Weight bytes one GPU reads in this step: every layer's weights and the LM head, but of
    /// a MoE layer's routed experts only those the batch's tokens activate (expected count,
    /// as the step time prices them), and not the embedding table (a gather of the batch's
    /// rows; it is the LM head when the two are tied). With pipeline stages: the pass's bytes
    /// over its `pp` stages, per stage (each stage's GPUs read their own layers).
    weight_bytes_read_per_gpu: f64,
    /// What `weight_bytes_read_per_gpu` leaves out, for the table.
    #[serde(skip)]
    weights_read_note: String,
    /// `weight_bytes_read_per_gpu` over the GEMM time (layer GEMMs and LM head): what a
    /// profiler would report as the weights' bandwidth, bytes/s. With pipeline stages the
    /// pass's bytes (every stage's) over its GEMM time (the stages run one after another).
    implied_weight_bandwidth_bytes_per_s: f64,
    /// Output tokens per second of the batch (with pipeline stages: of this micro-batch;
    /// `pp` of them are in flight, so a replica makes `pp` times as many).
    output_tokens_per_s: f64,
    /// Speculative decoding of the decode batch, with `--speculative-config` (absent
    /// without); `memory` then holds the draft's reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    speculative: Option<SpecEstimate>,
}

/// One verify step of the estimate's decode batch (its prefill tokens, if any, are not part
/// of it: mixed iterations do not speculate).
#[derive(Serialize)]
struct SpecEstimate {
    method: String,
    num_speculative_tokens: u32,
    /// Tokens a sequence gains per verify step, the bonus token included.
    mean_acceptance_length: f64,
    /// Drafting: K draft forwards (or n-gram's host lookup), seconds.
    draft_s: f64,
    /// The target's forward over B x (K + 1) tokens and the host, seconds.
    verify_s: f64,
    /// The same batch's decode step without speculation, seconds.
    plain_s: f64,
    /// plain_s x mean_acceptance_length / (draft_s + verify_s): tokens per second of a
    /// speculating step over a plain step of the same batch.
    speedup: f64,
    /// Output tokens per second of the batch while speculating.
    output_tokens_per_s: f64,
    /// KV slots a decoding sequence holds beyond its tokens (drafts and lookahead).
    kv_slots_per_seq: u32,
    /// The longest request the KV holds: the capacity less the slots, or the model's limit.
    max_model_len: u32,
}

/// Runs `servesim estimate`.
pub fn run(args: &EstimateArgs) -> Result<()> {
    let (mut d, s) = super::deployment_config(
        &args.deployment,
        args.max_num_seqs,
        args.max_num_batched_tokens,
    );
    d.pp = args.pp;
    let origin = "servesim estimate flags";
    let spec = requested_speculation(args, origin)?;
    let resolved = resolve_deployment(&d, &s, origin, None, spec.as_ref())?;
    let (dep, memory) = (resolved.deployment, resolved.memory);
    let speculative = match &spec {
        Some(x) => spec_estimate(x, &dep, &resolved.scheduler, args, origin)?,
        None => None,
    };
    if args.decode_batch == 0 && args.prefill_tokens == 0 {
        return Err(servesim::Error::config(
            origin,
            "--decode-batch",
            "the iteration is empty: give --decode-batch of at least 1 or --prefill-tokens",
        )
        .into());
    }
    let mut batch = BatchShape::decode(args.decode_batch, args.context);
    if args.prefill_tokens > 0 {
        batch.add_prefill(args.prefill_tokens, 0, true);
    }
    let model = StepTimeModel::new(dep.clone(), 0)?;
    let step = model.breakdown(&batch);
    // The same rule as the simulator's: a step time off the clock is an error, never a NaN or
    // a century printed as a figure.
    servesim::clock::secs_to_ns(step.total_s).map_err(|e| {
        servesim::Error::config(
            "servesim estimate flags",
            "step time",
            format!("the iteration's time {e}"),
        )
    })?;
    let weight_gemm_bytes = dep.weight_bytes_per_gpu();
    // A micro-batch's pass reads every stage's weights: the whole model's bytes at `tp`.
    let pass = servesim::roofline::Deployment {
        pp: 1,
        ..dep.clone()
    };
    let (pass_bytes, read_note) = weight_bytes_read_per_gpu(&pass, f64::from(batch.tokens()));
    let stages = f64::from(dep.pp.max(1));
    let est = Estimate {
        model: dep.model.name.clone(),
        gpu: dep.gpu.name.clone(),
        tp: dep.tp,
        dp: dep.dp,
        ep: dep.ep,
        pp: dep.pp,
        layers_per_stage: dep.model.num_layers / u64::from(dep.pp.max(1)),
        params_total: dep.model.total_params(),
        params_active: dep.model.active_params(),
        dtype: dep.formats.label(),
        kv_cache_dtype: dep.kv_dtype.to_string(),
        engine: dep.engine.name.clone(),
        max_num_seqs: resolved.scheduler.max_num_seqs,
        max_num_batched_tokens: resolved.scheduler.max_num_batched_tokens,
        weights_bytes_per_gpu: weight_gemm_bytes,
        kv_bytes_per_token: dep.model.kv_bytes_per_token(dep.kv_dtype.bytes()),
        kv_by_attention: dep.model.kv_per_token(dep.kv_dtype.bytes()),
        memory,
        batch,
        step,
        host_exposed_s: dep.engine.host.per_iteration_exposed_s,
        weight_bytes_read_per_gpu: pass_bytes / stages,
        weights_read_note: read_note,
        implied_weight_bandwidth_bytes_per_s: if step.gemm_s + step.lm_head_s > 0.0 {
            pass_bytes / (step.gemm_s + step.lm_head_s)
        } else {
            0.0
        },
        output_tokens_per_s: if step.total_s > 0.0 {
            batch.sampled_seqs as f64 / step.total_s
        } else {
            0.0
        },
        speculative,
    };
    let mut out: Vec<u8> = Vec::new();
    match args.format {
        Format::Json => JsonExporter::new("estimate.json").write(&est, &mut out)?,
        Format::Csv => CsvExporter::new("estimate.csv").write(&est, &mut out)?,
        Format::Table => print_table(
            &mut out,
            &est,
            dep.gpu.memory.stream_bandwidth_bytes_per_s,
            dep.gpu.datasheet.hbm_bandwidth_bytes_per_s,
        )?,
    }
    super::to_stdout(&out)
}

/// Weight bytes one GPU reads in a step of `tokens` tokens (all data-parallel ranks), and
/// what they leave out in words: the weights it holds ([`Deployment::weight_bytes_per_gpu`])
/// less the embedding table when the LM head is a separate matrix (a step gathers only its
/// tokens' rows) and less, in every MoE layer, the routed experts the step does not touch:
/// of the experts a GPU holds it reads the expected share the batch activates,
/// `E[active] / experts` (the expected count the step time prices; at least one expert).
///
/// [`Deployment::weight_bytes_per_gpu`]: servesim::roofline::Deployment::weight_bytes_per_gpu
fn weight_bytes_read_per_gpu(dep: &servesim::roofline::Deployment, tokens: f64) -> (f64, String) {
    let m = &dep.model;
    let tp = f64::from(dep.tp.max(1));
    let (embedding, embedding_note) = if m.tie_word_embeddings {
        (0.0, "the embedding table is the LM head")
    } else {
        (
            m.embedding_params() / tp * servesim::roofline::ACT_BYTES,
            "not the embedding table: a step gathers its rows",
        )
    };
    let held = dep.weight_bytes_per_gpu() - embedding;
    let experts = m.num_experts() as f64;
    if m.moe.is_none() || experts <= 0.0 {
        return (held, embedding_note.to_string());
    }
    let moe_layers = m.layers_with_mlp(servesim::model::MlpKind::Moe) as f64;
    let held_experts_per_layer = dep.routed_expert_bytes_per_gpu_per_layer();
    let active = m.expected_active_experts(tokens).clamp(1.0, experts);
    let unread = moe_layers * held_experts_per_layer * (1.0 - active / experts);
    let note = format!(
        "routed experts: the {active:.1} of {experts:.0} per MoE layer that the step's {tokens:.0} token(s) activate, expected; {embedding_note}"
    );
    (held - unread, note)
}

/// `--speculative-config` read and checked (`None` without it); with pipeline stages it is an
/// error naming the flag (not modelled together).
fn requested_speculation(
    args: &EstimateArgs,
    origin: &str,
) -> Result<Option<servesim::speculative::SpeculativeConfig>> {
    match &args.speculative_config {
        Some(_) if args.pp > 1 => Err(servesim::Error::config(
            origin,
            "--speculative-config",
            "is not modelled with --pipeline-parallel-size > 1 (pipeline parallelism)",
        )
        .into()),
        Some(json) => Ok(Some(speculative_config(json)?)),
        None => Ok(None),
    }
}

/// `--speculative-config` JSON read as `bench` reads it, checked.
fn speculative_config(json: &str) -> Result<servesim::speculative::SpeculativeConfig> {
    use serde::Deserialize;
    let flag = "--speculative-config";
    let table = super::bench::speculative_table(json)?;
    let spec = servesim::speculative::SpeculativeConfig::deserialize(toml::Value::Table(table))
        .map_err(|e| servesim::Error::config(flag, "speculative", e.to_string()))?;
    Ok(spec)
}

/// The verify step of the decode batch (`None` with K = 0).
fn spec_estimate(
    spec: &servesim::speculative::SpeculativeConfig,
    dep: &servesim::roofline::Deployment,
    sched: &servesim::sim::SchedulerConfig,
    args: &EstimateArgs,
    origin: &str,
) -> Result<Option<SpecEstimate>> {
    let Some(x) = spec.speculation(dep, 0, origin)? else {
        return Ok(None);
    };
    let model = StepTimeModel::new(dep.clone(), 0)?.with_speculation(x);
    let batch = BatchShape::decode(args.decode_batch, args.context);
    let Some(step) = model.speculative_step(&batch) else {
        return Ok(None); // the batch is above disable_by_batch_size: it does not speculate
    };
    let total = step.draft_s + step.verify_s;
    let tokens = f64::from(args.decode_batch) * step.mean_acceptance_length;
    Ok(Some(SpecEstimate {
        method: spec.method.clone(),
        num_speculative_tokens: spec.num_speculative_tokens,
        mean_acceptance_length: step.mean_acceptance_length,
        draft_s: step.draft_s,
        verify_s: step.verify_s,
        plain_s: step.plain_s,
        speedup: if total > 0.0 {
            step.plain_s * step.mean_acceptance_length / total
        } else {
            0.0
        },
        output_tokens_per_s: if total > 0.0 { tokens / total } else { 0.0 },
        kv_slots_per_seq: sched.spec_kv_slots,
        max_model_len: sched.max_model_len,
    }))
}

/// One header row and one data row: every field, nested ones as `memory.kv_tokens`.
impl ToTable for Estimate {
    fn to_table(&self) -> Cow<'_, TableSheet> {
        Cow::Owned(TableSheet::one_row("Estimate", self))
    }
}

/// The table for people: the deployment, its memory plan, and the batch's step time by
/// part (`stream_bw`, `datasheet_bw`: the GPU's measured and datasheet HBM bandwidth, bytes/s).
fn print_table(
    out: &mut dyn Write,
    e: &Estimate,
    stream_bw: f64,
    datasheet_bw: f64,
) -> std::io::Result<()> {
    print_heading(out, e)?;
    print_memory(out, e)?;
    print_step(out, e, stream_bw, datasheet_bw)
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// The deployment in one line: model, GPUs and parallelism, formats, engine.
fn print_heading(out: &mut dyn Write, e: &Estimate) -> std::io::Result<()> {
    if e.pp > 1 {
        writeln!(
            out,
            "{} on {} x{} (TP {} x PP {}; {} weights, {} KV, {} engine; per GPU: one stage of {} layers)",
            e.model,
            e.gpu,
            e.tp * e.pp,
            e.tp,
            e.pp,
            e.dtype,
            e.kv_cache_dtype,
            e.engine,
            e.layers_per_stage
        )?;
    } else if e.dp == 1 && e.ep == 1 {
        writeln!(
            out,
            "{} on {} x{} ({} weights, {} KV, {} engine)",
            e.model, e.gpu, e.tp, e.dtype, e.kv_cache_dtype, e.engine
        )?;
    } else {
        writeln!(
            out,
            "{} on {} x{} (TP {} x DP {}, EP {}; {} weights, {} KV, {} engine)",
            e.model,
            e.gpu,
            e.tp * e.dp,
            e.tp,
            e.dp,
            e.ep,
            e.dtype,
            e.kv_cache_dtype,
            e.engine
        )?;
    }
    Ok(())
}

/// Parameters, weights and KV per token, the KV capacity and the settings it was planned for,
/// and a note when the batch's KV exceeds it.
fn print_memory(out: &mut dyn Write, e: &Estimate) -> std::io::Result<()> {
    writeln!(
        out,
        "  parameters             {:>9.2} B total, {:.2} B active per token",
        e.params_total / 1e9,
        e.params_active / 1e9
    )?;
    writeln!(
        out,
        "  weights per GPU        {:>9.2} GB",
        e.weights_bytes_per_gpu / 1e9
    )?;
    if e.pp > 1 {
        writeln!(
            out,
            "  KV bytes per token     {:>9.0} B (whole model); {:.0} B per GPU (one stage)",
            e.kv_bytes_per_token, e.memory.kv_bytes_per_token
        )?;
    } else {
        writeln!(
            out,
            "  KV bytes per token     {:>9.0} B (whole model)",
            e.kv_bytes_per_token
        )?;
    }
    let k = &e.kv_by_attention;
    if k.sliding_layers + k.chunked_layers > 0 {
        writeln!(
            out,
            "    by attention          {:.0} B in {} full-attention layers; {:.0} B in {} {} layers, kept only for their {}-token {}",
            k.full_bytes,
            k.full_layers,
            k.local_bytes,
            k.sliding_layers + k.chunked_layers,
            if k.sliding_layers > 0 { "sliding-window" } else { "chunked" },
            k.window_tokens,
            if k.sliding_layers > 0 { "window" } else { "chunk" },
        )?;
    }
    writeln!(
        out,
        "  KV capacity per replica {:>8} tokens ({} blocks of {}; {:.2} GB of KV per GPU)",
        e.memory.kv_tokens,
        e.memory.kv_blocks,
        e.memory.block_size,
        e.memory.kv_bytes / 1e9
    )?;
    writeln!(
        out,
        "  (memory planned for max_num_seqs {}, max_num_batched_tokens {})",
        e.max_num_seqs, e.max_num_batched_tokens
    )?;
    let batch_kv = e.batch.decode_context_tokens + e.batch.prefill_tokens as u64;
    if batch_kv > e.memory.kv_tokens {
        writeln!(
            out,
            "  note: this batch holds {batch_kv} tokens of KV, more than the capacity: an engine would not run it at once"
        )?;
    }
    Ok(())
}

/// The batch and its step time by part, with what it implies.
fn print_step(
    out: &mut dyn Write,
    e: &Estimate,
    stream_bw: f64,
    datasheet_bw: f64,
) -> std::io::Result<()> {
    let ms = |s: f64| format!("{:>9.3} ms", s * 1e3);
    writeln!(
        out,
        "batch: {} decoding at {} tokens context, {} prefill tokens",
        e.batch.decode_seqs,
        e.batch.decode_context_tokens / e.batch.decode_seqs.max(1) as u64,
        e.batch.prefill_tokens
    )?;
    let s = &e.step;
    writeln!(out, "  weight GEMMs           {}   (of which weight streaming {} at {:.2} TB/s measured; datasheet {:.2} TB/s)", ms(s.gemm_s), ms(s.weight_stream_s), stream_bw / 1e12, datasheet_bw / 1e12)?;
    writeln!(out, "  LM head                {}", ms(s.lm_head_s))?;
    writeln!(out, "  attention              {}", ms(s.attention_s))?;
    writeln!(out, "  all-reduce             {}", ms(s.allreduce_s))?;
    if s.expert_comm_s > 0.0 {
        writeln!(
            out,
            "  expert all-to-all      {}   (MoE dispatch and combine across ranks)",
            ms(s.expert_comm_s)
        )?;
    }
    writeln!(out, "  small ops              {}", ms(s.small_ops_s))?;
    writeln!(out, "  kernel launches        {}", ms(s.launch_s))?;
    if e.host_exposed_s > 0.0 {
        writeln!(
            out,
            "  engine host overhead   {}   (of which {} per step the GPU always waits for)",
            ms(s.host_s),
            ms(e.host_exposed_s)
        )?;
    } else {
        writeln!(out, "  engine host overhead   {}", ms(s.host_s))?;
    }
    if s.host_overlap_s > 0.0 {
        writeln!(
            out,
            "  hidden under the GPU  -{}   (asynchronous scheduling: the step takes the longer of the two)",
            ms(s.host_overlap_s)
        )?;
    }
    writeln!(out, "  step time              {}", ms(s.total_s))?;
    if e.pp > 1 {
        writeln!(
            out,
            "  (one micro-batch's pass through the {} stages, the {} stage hand-off(s) in all-reduce; {} micro-batches are in flight)",
            e.pp,
            e.pp - 1,
            e.pp
        )?;
    }
    let (stages, micro) = if e.pp > 1 {
        (
            format!(
                "; per stage: the pass reads {:.2} GB over its {} stages",
                e.weight_bytes_read_per_gpu * f64::from(e.pp) / 1e9,
                e.pp
            ),
            format!(
                " (this micro-batch; {} in flight: {:.0} per replica)",
                e.pp,
                e.output_tokens_per_s * f64::from(e.pp)
            ),
        )
    } else {
        (String::new(), String::new())
    };
    writeln!(
        out,
        "  weights read per GPU     {:.2} GB of {:.2} GB held ({}{stages})\n  implied weight bandwidth {:.2} TB/s (weights read over the GEMM and LM-head time); output {:.0} tokens/s{micro}",
        e.weight_bytes_read_per_gpu / 1e9,
        e.weights_bytes_per_gpu / 1e9,
        e.weights_read_note,
        e.implied_weight_bandwidth_bytes_per_s / 1e12,
        e.output_tokens_per_s
    )?;
    print_speculation(out, e)
}

/// The verify step of the decode batch and the draft's memory, with `--speculative-config`.
fn print_speculation(out: &mut dyn Write, e: &Estimate) -> std::io::Result<()> {
    let Some(x) = &e.speculative else {
        return Ok(());
    };
    let ms = |s: f64| format!("{:>9.3} ms", s * 1e3);
    writeln!(
        out,
        "speculative decoding: {} K{}, {:.2} tokens per sequence per verify step",
        x.method, x.num_speculative_tokens, x.mean_acceptance_length
    )?;
    writeln!(out, "  draft                  {}", ms(x.draft_s))?;
    writeln!(
        out,
        "  verify                 {}   (the target over {} tokens per sequence)",
        ms(x.verify_s),
        x.num_speculative_tokens + 1
    )?;
    writeln!(out, "  plain decode step      {}", ms(x.plain_s))?;
    writeln!(
        out,
        "  per-step token gain {:.2}x; output {:.0} tokens/s",
        x.speedup, x.output_tokens_per_s
    )?;
    let m = &e.memory;
    writeln!(
        out,
        "  draft memory: {:.2} GB weights and {:.0} B KV per token per GPU counted in the plan; {:.2} GB set aside; {} pool tokens added",
        m.draft_weight_bytes / 1e9,
        m.draft_kv_bytes_per_token,
        m.draft_reserved_bytes / 1e9,
        m.headroom_tokens
    )?;
    writeln!(
        out,
        "  KV slots per decoding sequence {} (drafts and lookahead); max_model_len {}{}",
        x.kv_slots_per_seq,
        x.max_model_len,
        if u64::from(x.max_model_len) + u64::from(x.kv_slots_per_seq) == e.memory.kv_tokens {
            " = the KV capacity less the slots"
        } else {
            ""
        }
    )
}
