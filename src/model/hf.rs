//! Reading a Hugging Face `config.json` into a [`ModelSpec`].
//!
//! The reader knows the keys of the families served in 2026: Llama/Qwen/Mistral dense
//! models, Mixtral- and Qwen-style MoE, DeepSeek-style fine-grained MoE with shared experts and
//! dense leading layers, multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2), gpt-oss
//! (alternating sliding and full attention, attention sinks, MXFP4 experts), Llama-4 (nested
//! `text_config`, interleaved MoE layers with a shared expert, chunked attention) and Gemma-3
//! (sliding-window pattern). A key that names experts, MoE or LoRA ranks and that the reader
//! does not read is an error, never silently a smaller model.

use serde_json::{Map, Value};

use super::{CheckpointFormats, LocalAttentionSpec, LocalKind, MlaSpec, ModelSpec, MoeSpec};
use crate::error::{Error, Result};
use crate::precision::{KvDtype, WeightDtype};

/// Every key of the language model's config the reader interprets (the unread-key check
/// passes these).
const READ_KEYS: &[&str] = &[
    "name",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "intermediate_size_mlp",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "attention_bias",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "interleave_moe_layer_step",
    "moe_layers",
    "mlp_only_layers",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "sliding_window_pattern",
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    "quantization_config",
    "num_nextn_predict_layers",
    "text_config",
];

/// Words that make a key size-bearing when the reader does not read it: a count or width of
/// experts, a MoE layout, a low-rank dimension.
const SIZE_WORDS: &[&str] = &["expert", "moe", "lora"];

/// The language model's keys: the top level, overridden by a nested `text_config`
/// (multimodal checkpoints: Llama-4, Gemma-3).
struct Cfg<'a> {
    keys: Map<String, Value>,
    origin: &'a str,
}

impl<'a> Cfg<'a> {
    fn new(root: &Map<String, Value>, origin: &'a str) -> Result<Self> {
        let mut keys = root.clone();
        match root.get("text_config") {
            Some(Value::Object(text)) => {
                for (k, v) in text {
                    keys.insert(k.clone(), v.clone());
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(Error::config(origin, "text_config", "must be an object"));
            }
        }
        Ok(Cfg { keys, origin })
    }

    /// The value of `key`, `None` when absent or null.
    fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, why: &str) -> Error {
        Error::config(self.origin, key, why)
    }

    /// A non-negative integer key (`8.0` is accepted as 8).
    fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => match v.as_f64() {
                    Some(x) if x >= 0.0 && x.fract() == 0.0 && x < 9e15 => Ok(Some(x as u64)),
                    _ => Err(self.bad(key, "must be a non-negative integer")),
                },
            },
        }
    }

    fn required(&self, key: &str) -> Result<u64> {
        self.u64(key)?
            .ok_or_else(|| self.bad(key, "missing (required in config.json)"))
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.bad(key, "must be true or false")),
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A list of non-negative integers (`mlp_only_layers`, `no_rope_layers`).
    fn list_u64(&self, key: &str) -> Result<Option<Vec<u64>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| self.bad(key, "must be a list of non-negative integers"))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(_) => Err(self.bad(key, "must be a list")),
        }
    }

    /// A list of strings (`layer_types`).
    fn list_str(&self, key: &str) -> Result<Option<Vec<String>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.bad(key, "must be a list of strings"))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(_) => Err(self.bad(key, "must be a list")),
        }
    }

    /// The family, lower case (the nested `text_config`'s when there is one).
    fn model_type(&self) -> &str {
        self.str("model_type").unwrap_or("")
    }
}

/// Whether a value carries a size: a positive number, `true`, a non-empty list or object.
fn size_bearing(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Fails naming every key (top level and `text_config`) that names experts, MoE or LoRA
/// ranks, carries a size, and that the reader does not read.
fn check_unread_keys(root: &Map<String, Value>, origin: &str) -> Result<()> {
    let mut unread = Vec::new();
    let text = root.get("text_config").and_then(Value::as_object);
    let scopes = [(None, Some(root)), (Some("text_config"), text)];
    for (scope, map) in scopes {
        let Some(map) = map else { continue };
        for (k, v) in map {
            let lower = k.to_ascii_lowercase();
            if SIZE_WORDS.iter().any(|w| lower.contains(w))
                && !READ_KEYS.contains(&k.as_str())
                && size_bearing(v)
            {
                unread.push(match scope {
                    Some(s) => format!("{s}.{k}"),
                    None => k.clone(),
                });
            }
        }
    }
    if unread.is_empty() {
        return Ok(());
    }
    Err(Error::config(
        origin,
        unread.join(", "),
        "servesim does not read these size-bearing keys (experts, MoE or LoRA ranks), so it \
         would size the model wrongly; describe the model in the catalog format (models/*.toml) \
         or ask for the family to be supported",
    ))
}

/// Parses a `config.json` text; `origin` names the file in errors.
pub(super) fn parse(text: &str, origin: &str) -> Result<ModelSpec> {
    let root: Value = serde_json::from_str(text).map_err(|e| Error::Parse {
        path: origin.to_string(),
        message: e.to_string(),
    })?;
    let Some(root) = root.as_object() else {
        return Err(Error::config(
            origin,
            "(top level)",
            "must be a JSON object",
        ));
    };
    check_unread_keys(root, origin)?;
    let cfg = Cfg::new(root, origin)?;
    let family = Family::of(cfg.model_type());
    let hidden_size = cfg.required("hidden_size")?;
    let num_attention_heads = cfg.required("num_attention_heads")?;
    if num_attention_heads == 0 {
        return Err(Error::config(origin, "num_attention_heads", "must be > 0"));
    }
    let num_layers = cfg.required("num_hidden_layers")?;
    let head_dim = match cfg.u64("head_dim")? {
        Some(d) => d,
        None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
        None => {
            return Err(cfg.bad(
                "head_dim",
                &format!(
                    "missing, and hidden_size ({hidden_size}) is not divisible by \
                     num_attention_heads ({num_attention_heads}): give head_dim"
                ),
            ))
        }
    };
    let moe = read_moe(&cfg, &family, num_layers)?;
    // Llama-4 keeps its experts' width in `intermediate_size` and its dense layers' in
    // `intermediate_size_mlp`.
    let intermediate_size = match cfg.u64("intermediate_size_mlp")? {
        Some(f) => f,
        None => cfg.required("intermediate_size")?,
    };
    let vocab_size = match (cfg.u64("vocab_size")?, family.default_vocab) {
        (Some(v), _) => v,
        (None, Some(v)) => v,
        (None, None) => cfg.required("vocab_size")?,
    };
    let mut spec = ModelSpec {
        display_name: String::new(),
        name: String::new(),
        source: format!("Hugging Face config {origin}"),
        hidden_size,
        num_layers,
        num_attention_heads,
        num_kv_heads: cfg
            .u64("num_key_value_heads")?
            .unwrap_or(num_attention_heads),
        head_dim,
        intermediate_size,
        vocab_size,
        tie_word_embeddings: cfg
            .bool("tie_word_embeddings")?
            .unwrap_or(family.default_tied),
        attention_bias: cfg
            .bool("attention_bias")?
            .unwrap_or(cfg.model_type() == "qwen2"),
        max_position_embeddings: cfg
            .u64("max_position_embeddings")?
            .or(family.default_max_position)
            .unwrap_or(4096),
        published_params: 0.0,
        published_active_params: 0.0,
        moe,
        mla: read_mla(&cfg)?,
        local_attention: read_local_attention(&cfg, &family, num_layers)?,
        attention_sinks: family.attention_sinks,
        checkpoint: read_quantization(&cfg)?,
        published_checkpoints: Default::default(),
        num_nextn_predict_layers: cfg.u64("num_nextn_predict_layers")?.unwrap_or(0),
    };
    if let Some(m) = &spec.mla {
        spec.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    }
    spec.validate(origin)?;
    if let Some(n) = cfg.str("name") {
        crate::error::check_printable(origin, "name", n)?;
    }
    spec.name = model_name(&cfg, &spec);
    spec.display_name = spec.name.clone();
    Ok(spec)
}

/// Named by a `name` key when the file has one, else by its architecture and size
/// (`qwen2-7.6B`), never by the folder it happens to sit in.
fn model_name(cfg: &Cfg<'_>, spec: &ModelSpec) -> String {
    match cfg.str("name").map(str::trim) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            let family = match cfg.model_type() {
                "" => "model",
                t => t,
            };
            let total = size_label(spec.total_params());
            match &spec.moe {
                Some(_) => format!("{family}-{total}-A{}", size_label(spec.active_params())),
                None => format!("{family}-{total}"),
            }
        }
    }
}

/// What a family's config leaves to its transformers class: the defaults the class applies
/// to absent keys, and what the architecture has without a key saying so.
struct Family {
    /// `vocab_size` when absent (Gemma-3's text config: 262,208).
    default_vocab: Option<u64>,
    /// `tie_word_embeddings` when absent.
    default_tied: bool,
    /// `max_position_embeddings` when absent.
    default_max_position: Option<u64>,
    /// One local layer in `sliding_window_pattern` layers is global (Gemma-3: 6).
    default_sliding_pattern: Option<u64>,
    /// Every MoE layer has a shared expert as wide as a routed one (Llama-4).
    shared_expert_like_routed: bool,
    /// Every head has a learned sink logit (gpt-oss).
    attention_sinks: bool,
    /// Every `no_rope_layer_interval`-th layer is global (no RoPE), the others chunked
    /// (Llama-4: 4).
    default_no_rope_interval: Option<u64>,
}

impl Family {
    /// The family of a `model_type` (transformers' configuration classes: Gemma3TextConfig,
    /// Llama4TextConfig, GptOssConfig).
    fn of(model_type: &str) -> Family {
        let mut f = Family {
            default_vocab: None,
            default_tied: false,
            default_max_position: None,
            default_sliding_pattern: None,
            shared_expert_like_routed: false,
            attention_sinks: false,
            default_no_rope_interval: None,
        };
        match model_type {
            "gemma3_text" | "gemma3" => {
                // huggingface/transformers configuration_gemma3.py: vocab_size=262_208,
                // tie_word_embeddings=True, max_position_embeddings=131_072,
                // sliding_window_pattern=6 ("5:1 attention pattern").
                f.default_vocab = Some(262_208);
                f.default_tied = true;
                f.default_max_position = Some(131_072);
                f.default_sliding_pattern = Some(6);
            }
            "gemma2" => {
                f.default_tied = true;
                f.default_sliding_pattern = Some(2);
            }
            "llama4_text" | "llama4" => {
                // modeling_llama4.py: Llama4TextMoe has one shared expert of
                // intermediate_size; configuration_llama4.py: no_rope_layer_interval=4.
                f.shared_expert_like_routed = true;
                f.default_no_rope_interval = Some(4);
            }
            "gpt_oss" => f.attention_sinks = true,
            _ => {}
        }
        f
    }
}

/// `model_type`s of mixture-of-experts architectures: a config of one without experts is an
/// error rather than a dense model.
const MOE_MODEL_TYPES: &[&str] = &[
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
];

/// The MoE block, from whichever family's keys the file uses.
fn read_moe(cfg: &Cfg<'_>, family: &Family, layers: u64) -> Result<Option<MoeSpec>> {
    let mut experts = None;
    for key in ["num_local_experts", "n_routed_experts", "num_experts"] {
        if let Some(e) = cfg.u64(key)? {
            experts = Some((key, e));
            break;
        }
    }
    // A mixture-of-experts architecture without experts is a broken config, not a dense model.
    let moe_type = MOE_MODEL_TYPES.contains(&cfg.model_type());
    match experts {
        Some((key, 0)) => return Err(cfg.bad(key, "must be at least 2 experts, got 0")),
        Some((_, e)) if e > 1 => {}
        _ if moe_type => {
            return Err(cfg.bad(
                "num_local_experts",
                &format!(
                    "a {} model needs at least 2 experts (num_local_experts, n_routed_experts \
                     or num_experts), got {}",
                    cfg.model_type(),
                    experts.map_or("none".to_string(), |(_, e)| e.to_string())
                ),
            ))
        }
        _ => {}
    }
    let Some((experts_key, e)) = experts.filter(|(_, e)| *e > 1) else {
        return Ok(None);
    };
    let k = match (
        cfg.u64("num_experts_per_tok")?,
        cfg.u64("experts_per_token")?,
    ) {
        (Some(k), _) | (None, Some(k)) => k,
        (None, None) => {
            return Err(cfg.bad(
                "num_experts_per_tok",
                &format!("missing while {experts_key} > 1"),
            ))
        }
    };
    let as_u32 = |key: &str, v: u64| u32::try_from(v).map_err(|_| cfg.bad(key, "is too large"));
    let expert_intermediate = cfg.u64("moe_intermediate_size")?;
    let width = match expert_intermediate {
        Some(f) => f,
        None => cfg.required("intermediate_size")?,
    };
    let shared = match (
        cfg.u64("shared_expert_intermediate_size")?,
        cfg.u64("n_shared_experts")?,
    ) {
        (Some(f), _) => f,
        (None, Some(n)) => n * width,
        (None, None) if family.shared_expert_like_routed => width,
        (None, None) => 0,
    };
    Ok(Some(MoeSpec {
        num_experts: as_u32(experts_key, e)?,
        experts_per_token: as_u32("num_experts_per_tok", k)?,
        // Llama-4 names the expert width `intermediate_size` and the dense one
        // `intermediate_size_mlp`: the expert width must then be kept apart.
        expert_intermediate_size: match (expert_intermediate, cfg.u64("intermediate_size_mlp")?) {
            (Some(f), _) => Some(f),
            (None, Some(_)) => Some(width),
            (None, None) => None,
        },
        shared_expert_intermediate_size: shared,
        dense_layers: dense_layers(cfg, layers)?,
    }))
}

/// The layers that keep a dense MLP, by each family's rule:
/// DeepSeek: layer i is MoE iff `i >= first_k_dense_replace && i % moe_layer_freq == 0`;
/// Qwen-MoE: iff `i not in mlp_only_layers && (i + 1) % decoder_sparse_step == 0`;
/// Llama-4: iff `i in moe_layers`, by default `(i + 1) % interleave_moe_layer_step == 0`.
fn dense_layers(cfg: &Cfg<'_>, layers: u64) -> Result<Vec<u64>> {
    let first_dense = cfg.u64("first_k_dense_replace")?.unwrap_or(0);
    let nonzero = |key: &str| -> Result<u64> {
        match cfg.u64(key)? {
            Some(0) => Err(cfg.bad(key, "must be >= 1")),
            v => Ok(v.unwrap_or(1)),
        }
    };
    let freq = nonzero("moe_layer_freq")?;
    let sparse_step = nonzero("decoder_sparse_step")?;
    let interleave = nonzero("interleave_moe_layer_step")?;
    let mlp_only = cfg.list_u64("mlp_only_layers")?.unwrap_or_default();
    let moe_layers = cfg.list_u64("moe_layers")?;
    Ok((0..layers)
        .filter(|&i| {
            let moe = match &moe_layers {
                Some(list) => list.contains(&i),
                None => {
                    i >= first_dense
                        && i % freq == 0
                        && (i + 1) % sparse_step == 0
                        && (i + 1) % interleave == 0
                        && !mlp_only.contains(&i)
                }
            };
            !moe
        })
        .collect())
}

/// Multi-head latent attention, when `kv_lora_rank` is set.
fn read_mla(cfg: &Cfg<'_>) -> Result<Option<MlaSpec>> {
    let Some(kv_lora_rank) = cfg.u64("kv_lora_rank")? else {
        return Ok(None);
    };
    Ok(Some(MlaSpec {
        kv_lora_rank,
        q_lora_rank: cfg.u64("q_lora_rank")?,
        qk_nope_head_dim: cfg.required("qk_nope_head_dim")?,
        qk_rope_head_dim: cfg.required("qk_rope_head_dim")?,
        v_head_dim: cfg.required("v_head_dim")?,
    }))
}

/// Sliding-window or chunked attention, by each family's keys: `layer_types` (gpt-oss,
/// newer Gemma), `sliding_window_pattern` (Gemma-3: every n-th layer global),
/// `use_sliding_window` with `max_window_layers` (Qwen2/3), a bare `sliding_window`
/// (Mistral: every layer), `attention_chunk_size` with `no_rope_layers` (Llama-4: the layers
/// without RoPE are global).
fn read_local_attention(
    cfg: &Cfg<'_>,
    family: &Family,
    layers: u64,
) -> Result<Option<LocalAttentionSpec>> {
    if let Some(chunk) = cfg.u64("attention_chunk_size")?.filter(|&c| c > 0) {
        let rope = cfg.list_u64("no_rope_layers")?.filter(|l| !l.is_empty());
        let interval = cfg
            .u64("no_rope_layer_interval")?
            .or(family.default_no_rope_interval);
        let global: Vec<u64> = match (rope, interval) {
            // no_rope_layers[i] = 1: layer i uses RoPE (chunked); 0: no RoPE (global).
            (Some(list), _) => (0..layers)
                .filter(|&i| list.get(i as usize) == Some(&0))
                .collect(),
            (None, Some(n)) if n > 0 => (0..layers).filter(|i| (i + 1) % n == 0).collect(),
            _ => Vec::new(),
        };
        return Ok(Some(LocalAttentionSpec {
            kind: LocalKind::Chunked,
            window: chunk,
            full_attention_layers: global,
        }));
    }
    let Some(window) = cfg.u64("sliding_window")?.filter(|&w| w > 0) else {
        return Ok(None);
    };
    if cfg.bool("use_sliding_window")? == Some(false) {
        return Ok(None);
    }
    let full: Vec<u64> = if let Some(types) = cfg.list_str("layer_types")? {
        if types.len() as u64 != layers {
            return Err(cfg.bad(
                "layer_types",
                &format!("has {} entries for {layers} layers", types.len()),
            ));
        }
        let mut full = Vec::new();
        for (i, t) in types.iter().enumerate() {
            match t.as_str() {
                "full_attention" => full.push(i as u64),
                "sliding_attention" => {}
                other => {
                    return Err(cfg.bad(
                        "layer_types",
                        &format!("'{other}' is neither full_attention nor sliding_attention"),
                    ))
                }
            }
        }
        full
    } else if let Some(n) = cfg
        .u64("sliding_window_pattern")?
        .or(family.default_sliding_pattern)
    {
        (0..layers).filter(|i| n > 0 && (i + 1) % n == 0).collect()
    } else if cfg.bool("use_sliding_window")? == Some(true) {
        // Qwen2: the first max_window_layers layers keep full attention.
        let m = cfg.u64("max_window_layers")?.unwrap_or(layers).min(layers);
        (0..m).collect()
    } else {
        Vec::new()
    };
    if full.len() as u64 == layers {
        return Ok(None);
    }
    Ok(Some(LocalAttentionSpec {
        kind: LocalKind::Sliding,
        window,
        full_attention_layers: full,
    }))
}

/// The checkpoint's weight formats from its `quantization_config`: DeepSeek's block FP8
/// (`quant_method` fp8: every linear layer), gpt-oss's MXFP4 (`modules_to_not_convert` keeps
/// attention and the router in BF16: the experts are MXFP4), NVIDIA ModelOpt's NVFP4/FP8
/// (`quant_algo`), compressed-tensors FP8; an FP8 KV cache when it declares one. Modules the
/// checkpoint leaves unquantized (`exclude_modules`, `ignore`) keep their 16-bit format: the
/// attention and the MTP layers are read from those lists.
fn read_quantization(cfg: &Cfg<'_>) -> Result<Option<CheckpointFormats>> {
    let Some(q) = cfg.get("quantization_config") else {
        return Ok(None);
    };
    let Some(q) = q.as_object() else {
        return Err(cfg.bad("quantization_config", "must be an object"));
    };
    let s = |k: &str| {
        q.get(k)
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
    };
    let method = s("quant_method").unwrap_or_default();
    let algo = s("quant_algo").unwrap_or_default();
    let format = match (method.as_str(), algo.as_str()) {
        ("mxfp4", _) => WeightDtype::Mxfp4,
        (_, "nvfp4") | ("nvfp4", _) | ("modelopt_fp4", _) => WeightDtype::Fp4,
        ("fp8", _) | ("fbgemm_fp8", _) | (_, "fp8") => WeightDtype::Fp8,
        ("compressed-tensors", _) if Value::Object(q.clone()).to_string().contains("float") => {
            WeightDtype::Fp8
        }
        _ => {
            return Err(cfg.bad(
                "quantization_config.quant_method",
                &format!(
                    "'{method}' is not a format servesim models (fp8, mxfp4, nvfp4); set \
                     deployment.dtype explicitly"
                ),
            ))
        }
    };
    let list = |k: &str| -> Vec<String> {
        q.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    // gpt-oss's list: a checkpoint that leaves attention in 16 bits quantizes only the MLPs'
    // experts.
    let attention_kept = list("modules_to_not_convert")
        .iter()
        .any(|m| m.contains("self_attn"));
    // ModelOpt's (`exclude_modules` in hf_quant_config.json, `ignore` in config.json) and
    // compressed-tensors' (`ignore`) lists of modules left unquantized, in the checkpoint's
    // 16-bit format: the attention (`self_attn`) and the MTP layers (the layers numbered from
    // num_hidden_layers on, where DeepSeek-V3 keeps its MTP module).
    let excluded: Vec<String> = ["exclude_modules", "ignore"]
        .iter()
        .flat_map(|k| list(k))
        .collect();
    let mtp_layer = format!(
        "layers.{}",
        cfg.u64("num_hidden_layers")?.unwrap_or(u64::MAX)
    );
    let names_mtp = |m: &String| {
        m.match_indices(&mtp_layer)
            .any(|(i, _)| !m[i + mtp_layer.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    let kept = |yes: bool| yes.then_some(WeightDtype::Bf16);
    // Which attention projections an entry leaves out: ModelOpt names them per module
    // (`model.layers.N.self_attn.q_a_proj`, `...o_proj`; quantize_to_nvfp4.py renames
    // DeepSeek's `wo` to `o_proj`) or the whole attention (`model.layers.N.self_attn*`).
    let (attention_excluded, out_excluded) = attention_exclusions(&excluded);
    let kv = s("kv_cache_quant_algo")
        .filter(|a| a.contains("fp8"))
        .map(|_| KvDtype::Fp8)
        .or_else(|| {
            q.get("kv_cache_scheme")
                .filter(|v| !v.is_null())
                .map(|_| KvDtype::Fp8)
        });
    Ok(Some(CheckpointFormats {
        experts: format,
        other: if attention_kept {
            WeightDtype::Bf16
        } else {
            format
        },
        attention: kept(attention_excluded),
        attention_out: (out_excluded != attention_excluded).then_some(if out_excluded {
            WeightDtype::Bf16
        } else {
            format
        }),
        mtp: kept(excluded.iter().any(names_mtp)),
        kv_cache: kv,
    }))
}

/// Whether a list of unquantized modules leaves out the attention's projections other than O,
/// and its output projection O: an entry naming one projection of a layer's `self_attn`
/// (`...self_attn.kv_b_proj`, `...self_attn.o_proj`) leaves out that one; an entry naming the
/// attention without a projection (`...self_attn*`) leaves out all of them.
fn attention_exclusions(excluded: &[String]) -> (bool, bool) {
    let (mut projections, mut out) = (false, false);
    for m in excluded {
        let Some(i) = m.find("self_attn") else {
            continue;
        };
        let rest = &m[i + "self_attn".len()..];
        if rest.contains("o_proj") {
            out = true;
        } else if rest.contains("proj") {
            projections = true;
        } else {
            (projections, out) = (true, true);
        }
    }
    (projections, out)
}

/// A parameter count as the field writes it: `7.6B`, `70B`, `494M`.
fn size_label(params: f64) -> String {
    if params >= 9.95e9 {
        format!("{:.0}B", params / 1e9)
    } else if params >= 1e9 {
        format!("{:.1}B", params / 1e9)
    } else {
        format!("{:.0}M", params / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::{attention_exclusions, size_label};

    #[test]
    fn attention_exclusions_tell_the_output_projection_apart() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // ModelOpt's DeepSeek recipe: the whole attention out (nvidia/DeepSeek-R1-FP4).
        assert_eq!(
            attention_exclusions(&list(&["model.layers.0.self_attn*", "lm_head"])),
            (true, true)
        );
        // With --enable_wo_quant (the -v2 checkpoints): every projection but O listed.
        let v2 = list(&[
            "model.layers.3.self_attn.q_a_proj",
            "model.layers.3.self_attn.q_b_proj",
            "model.layers.3.self_attn.kv_a_proj_with_mqa",
            "model.layers.3.self_attn.kv_b_proj",
            "lm_head",
        ]);
        assert_eq!(attention_exclusions(&v2), (true, false));
        assert_eq!(
            attention_exclusions(&list(&["model.layers.3.self_attn.o_proj"])),
            (false, true)
        );
        assert_eq!(attention_exclusions(&list(&["lm_head"])), (false, false));
    }

    #[test]
    fn sizes() {
        assert_eq!(size_label(8.03e9), "8.0B");
        assert_eq!(size_label(7.62e9), "7.6B");
        assert_eq!(size_label(70.55e9), "71B");
        assert_eq!(size_label(494e6), "494M");
    }
}
