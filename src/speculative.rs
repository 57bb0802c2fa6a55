//! Speculative decoding as a scenario input: the `[speculative]` table (vLLM's
//! `--speculative-config` keys plus the acceptance), the acceptance model, and the draft each
//! method runs, priced by the same roofline ([`crate::roofline::Speculation`]).
//! docs/speculative-decoding.md gives the model, the defaults and their sources.

mod acceptance;

pub use acceptance::{measured_acceptance_length, AcceptanceLengths, VerifySteps, EXACT_TOKENS};

use serde::{Deserialize, Serialize};

use crate::engine::{DraftMemory as DraftPolicy, EngineProfile, SpeculativeDefaults};
use crate::error::{Error, Result};
use crate::model::load_model;
use crate::roofline::{Deployment, DraftMemory, Speculation, StepTimeModel, ACT_BYTES};

/// Per-position acceptance: one conditional probability for every position, or one per
/// position (the probability that draft token `i` is accepted given that tokens `1..i` were).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AcceptanceRate {
    /// The same conditional probability at every position.
    Uniform(f64),
    /// One conditional probability per drafted position, first position first.
    PerPosition(Vec<f64>),
}

/// What `acceptance_rate` accepts, as the error for anything else says it.
const ACCEPTANCE_FORMS: &str = "a number in [0, 1] (the conditional acceptance at every \
     drafted position, e.g. 0.7) or a list of numbers in [0, 1], one per drafted token \
     (e.g. [0.8, 0.6, 0.4]); or give mean_acceptance_length instead";

impl<'de> Deserialize<'de> for AcceptanceRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Forms;
        impl<'de> serde::de::Visitor<'de> for Forms {
            type Value = AcceptanceRate;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(ACCEPTANCE_FORMS)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
                Ok(AcceptanceRate::Uniform(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
                Ok(AcceptanceRate::Uniform(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
                Ok(AcceptanceRate::Uniform(v as f64))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut rates = Vec::new();
                while let Some(p) = seq.next_element::<Number>()? {
                    rates.push(p.0);
                }
                Ok(AcceptanceRate::PerPosition(rates))
            }
        }
        /// One list element: any number, else the forms in the error.
        struct Number(f64);
        impl<'de> Deserialize<'de> for Number {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                match d.deserialize_any(Forms)? {
                    AcceptanceRate::Uniform(p) => Ok(Number(p)),
                    AcceptanceRate::PerPosition(_) => Err(serde::de::Error::custom(format!(
                        "a list inside the list; expected {ACCEPTANCE_FORMS}"
                    ))),
                }
            }
        }
        d.deserialize_any(Forms)
    }
}

/// `num_speculative_tokens`: an integer 0..=16, said so for anything else.
fn k_from<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u32, D::Error> {
    let v = toml::Value::deserialize(d)?;
    match v.as_integer() {
        Some(k) if (0..=16).contains(&k) => Ok(k as u32),
        _ => Err(serde::de::Error::custom(format!(
            "must be an integer in 0..=16 (tokens drafted per sequence per step; 0: off), got {v}"
        ))),
    }
}

/// The `[speculative]` table of a scenario (and `bench --speculative-config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    /// `eagle`, `eagle3`, `mtp`, `draft_model` or `ngram`.
    pub method: String,
    /// Tokens drafted per sequence per step, K (0: speculation off).
    #[serde(deserialize_with = "k_from")]
    pub num_speculative_tokens: u32,
    /// Conditional acceptance per position: a number or a list of K numbers in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<AcceptanceRate>,
    /// Measured mean acceptance length: tokens a sequence gains per verify step, the bonus
    /// token included (1..=K+1). Exclusive with `acceptance_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_acceptance_length: Option<f64>,
    /// `draft_model`: the draft model (a catalog name or a config.json path). `eagle`,
    /// `eagle3`: the head's Hugging Face id as vLLM takes it, accepted and not read (the head
    /// is sized from the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `draft_model`: its tensor-parallel size, 1 or the target's (vLLM
    /// `draft_tensor_parallel_size`, also accepted under that name; default: the target's).
    #[serde(
        default,
        alias = "draft_tensor_parallel_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub tp: Option<u32>,
    /// Batches of more decoding sequences than this run without speculation (vLLM's
    /// `speculative_disable_by_batch_size`, TensorRT-LLM's `max_concurrency`; default: the
    /// engine profile's `speculative.disable_by_batch_size`, absent there: never off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_by_batch_size: Option<u32>,
    /// `ngram`: host time of the prompt lookup per sequence per step, microseconds
    /// (default [`NGRAM_HOST_US_PER_SEQ`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ngram_host_us_per_seq: Option<f64>,
}

/// The drafting methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// EAGLE(-2) head: one decoder layer of the target's width and the target's LM head.
    Eagle,
    /// EAGLE-3 head: one decoder layer and a reduced draft vocabulary.
    Eagle3,
    /// Multi-token prediction: one MTP module of the target (DeepSeek-V3 style), reused for
    /// every drafted token.
    Mtp,
    /// A separate draft model on the same GPUs.
    DraftModel,
    /// Prompt lookup (n-gram): no GPU drafting, a host cost.
    Ngram,
}

/// Default conditional acceptance per position for EAGLE-3 when none is given. The source
/// (EAGLE-3 on gpt-oss-20b, MT-Bench, vLLM P-EAGLE post 2026-03-13, rows
/// PE-GPTOSS20B-E3-K3-MTBENCH and -K7-MTBENCH of calibration/reference/speculative-decoding.csv)
/// publishes 2.70 tokens per step at K = 3 and 3.27 at K = 7; no single rate gives both (2.70
/// at K = 3 needs p = 0.742, which gives 3.52 at K = 7). p = 0.72 sits between them: chain
/// expectation 2.61 at K = 3 (3% under the post) and 3.31 at K = 7 (1% over).
pub const EAGLE3_DEFAULT_RATE: f64 = 0.72;

/// Default conditional acceptance for MTP: the DeepSeek-V3 Technical Report (arXiv
/// 2412.19437, §5.4.3): "the acceptance rate of the second token prediction ranges between
/// 85% and 90%" (the low end).
pub const MTP_DEFAULT_RATE: f64 = 0.85;

/// EAGLE-3 heads' draft vocabulary: `draft_vocab_size = 32000` in the published
/// Llama-3.1-8B head (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, config.json).
pub const EAGLE3_DRAFT_VOCAB: u64 = 32_000;

/// Default host time of n-gram prompt lookup per sequence per step, microseconds. An
/// assumption without a published measurement (vLLM's proposer is a numba-compiled KMP
/// match over the sequence's tokens); override with `ngram_host_us_per_seq`.
pub const NGRAM_HOST_US_PER_SEQ: f64 = 10.0;

impl Method {
    fn parse(s: &str) -> Option<Method> {
        Some(match s {
            "eagle" => Method::Eagle,
            "eagle3" => Method::Eagle3,
            "mtp" | "deepseek_mtp" => Method::Mtp,
            "draft_model" => Method::DraftModel,
            "ngram" => Method::Ngram,
            _ => return None,
        })
    }
}

/// Expected tokens a sequence gains per verify step with conditional acceptance `rates`
/// (one per drafted position): `1 + sum_k prod_{i<=k} p_i` (the bonus token included).
pub fn expected_acceptance_length(rates: &[f64]) -> f64 {
    let mut all = 1.0;
    let mut sum = 1.0;
    for &p in rates {
        all *= p;
        sum += all;
    }
    sum
}

impl SpeculativeConfig {
    /// Whether this config speculates at all (K >= 1).
    pub fn is_on(&self) -> bool {
        self.num_speculative_tokens > 0
    }

    /// The method, checked; `origin` names the source in the error.
    pub fn method(&self, origin: &str) -> Result<Method> {
        Method::parse(&self.method).ok_or_else(|| {
            Error::config(
                origin,
                "speculative.method",
                format!(
                    "unknown method '{}'; known: eagle, eagle3, mtp, draft_model, ngram",
                    self.method
                ),
            )
        })
    }

    /// Checks every key; `origin` names the source in errors.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let err = |key: &str, reason: String| Err(Error::config(origin, key, reason));
        let method = self.method(origin)?;
        let k = self.num_speculative_tokens;
        if k > 16 {
            return err(
                "speculative.num_speculative_tokens",
                format!("must be in 0..=16, got {k}"),
            );
        }
        // K = 0 is no speculation whatever the acceptance says: a table switched off by K alone
        // (or a plan's K = 0 candidate) keeps its acceptance for the K it was measured at.
        let acceptance = if k == 0 {
            (None, None)
        } else {
            (self.acceptance_rate.as_ref(), self.mean_acceptance_length)
        };
        match acceptance {
            (Some(_), Some(_)) => {
                return err(
                    "speculative.mean_acceptance_length",
                    "give one of acceptance_rate or mean_acceptance_length, not both (a mean length \
                     is what the rates imply: 1 + p1 + p1 p2 + ...)"
                        .into(),
                )
            }
            (Some(AcceptanceRate::Uniform(p)), None) if !(0.0..=1.0).contains(p) => {
                return err(
                    "speculative.acceptance_rate",
                    format!("must be in [0, 1], got {p}"),
                )
            }
            (Some(AcceptanceRate::PerPosition(v)), None) => {
                if v.len() != k as usize {
                    return err(
                        "speculative.acceptance_rate",
                        format!(
                            "a list needs one rate per drafted token (num_speculative_tokens = {k}), got {}",
                            v.len()
                        ),
                    );
                }
                if let Some(p) = v.iter().find(|p| !(0.0..=1.0).contains(*p)) {
                    return err(
                        "speculative.acceptance_rate",
                        format!("every rate must be in [0, 1], got {p}"),
                    );
                }
            }
            (None, Some(l)) if !(l >= 1.0 && l <= k as f64 + 1.0) => {
                return err(
                    "speculative.mean_acceptance_length",
                    format!("must be in [1, num_speculative_tokens + 1 = {}], got {l}", k + 1),
                )
            }
            (None, None) if k > 0 && !matches!(method, Method::Eagle3 | Method::Mtp) => {
                return err(
                    "speculative.acceptance_rate",
                    format!(
                        "method '{}' has no published default acceptance: give acceptance_rate or mean_acceptance_length",
                        self.method
                    ),
                )
            }
            _ => {}
        }
        match (method, &self.model) {
            (Method::DraftModel, None) if k > 0 => {
                return err(
                    "speculative.model",
                    "draft_model needs the draft model's name".into(),
                )
            }
            (m, Some(_)) if !matches!(m, Method::DraftModel | Method::Eagle | Method::Eagle3) => {
                return err(
                    "speculative.model",
                    format!(
                        "only draft_model, eagle and eagle3 take a model (method '{}')",
                        self.method
                    ),
                )
            }
            _ => {}
        }
        if self.tp == Some(0) {
            return err("speculative.tp", "must be >= 1".into());
        }
        if self.tp.is_some() && method != Method::DraftModel {
            return err("speculative.tp", "only draft_model takes its own tp".into());
        }
        if self.disable_by_batch_size == Some(0) {
            return err("speculative.disable_by_batch_size", "must be >= 1".into());
        }
        if let Some(h) = self.ngram_host_us_per_seq {
            if !(h.is_finite() && (0.0..=1e6).contains(&h)) {
                return err(
                    "speculative.ngram_host_us_per_seq",
                    format!("must be in [0, 1e6] us, got {h}"),
                );
            }
            if method != Method::Ngram {
                return err(
                    "speculative.ngram_host_us_per_seq",
                    "only ngram takes a host cost".into(),
                );
            }
        }
        Ok(())
    }

    /// The conditional acceptance per position (K numbers), from the input or the method's
    /// default; empty when a mean acceptance length was given instead.
    pub fn rates(&self) -> Vec<f64> {
        let k = self.num_speculative_tokens as usize;
        if k == 0 {
            return Vec::new();
        }
        match &self.acceptance_rate {
            Some(AcceptanceRate::Uniform(p)) => vec![*p; k],
            Some(AcceptanceRate::PerPosition(v)) => v.iter().copied().take(k).collect(),
            None if self.mean_acceptance_length.is_some() => Vec::new(),
            None => {
                let p = if self.method == "eagle3" {
                    EAGLE3_DEFAULT_RATE
                } else {
                    MTP_DEFAULT_RATE
                };
                vec![p; k]
            }
        }
    }

    /// Expected tokens a sequence gains per verify step, the bonus token included.
    pub fn mean_acceptance_length(&self) -> f64 {
        match self.mean_acceptance_length {
            _ if !self.is_on() => 1.0,
            Some(l) => l,
            None => expected_acceptance_length(&self.rates()),
        }
    }

    /// The distribution of tokens a sequence gains per verify step: the chain of the
    /// per-position rates ([`Self::rates`]), or, for a measured mean acceptance length, the
    /// uniform-rate chain with that mean ([`AcceptanceLengths::from_mean`]). One token surely
    /// when speculation is off.
    pub fn acceptance_lengths(&self) -> AcceptanceLengths {
        match self.mean_acceptance_length {
            _ if !self.is_on() => AcceptanceLengths::from_rates(&[]),
            Some(l) if self.acceptance_rate.is_none() => {
                AcceptanceLengths::from_mean(self.num_speculative_tokens, l)
            }
            _ => AcceptanceLengths::from_rates(&self.rates()),
        }
    }

    /// The speculation the step-time model prices for `target`, with a table of `max_tokens`
    /// tokens; `None` when K = 0. Errors name the key (`origin`: the scenario).
    pub fn speculation(
        &self,
        target: &Deployment,
        max_tokens: u32,
        origin: &str,
    ) -> Result<Option<Speculation>> {
        self.validate(origin)?;
        if !self.is_on() {
            return Ok(None);
        }
        let method = self.method(origin)?;
        let draft =
            match method {
                Method::Ngram => None,
                _ => {
                    let dep = self.draft_deployment(method, target, origin)?;
                    Some(StepTimeModel::new(dep, max_tokens).map_err(|e| {
                        Error::config(origin, "speculative", format!("the draft: {e}"))
                    })?)
                }
            };
        let host_us = if method == Method::Ngram {
            self.ngram_host_us_per_seq.unwrap_or(NGRAM_HOST_US_PER_SEQ)
        } else {
            0.0
        };
        Ok(Some(Speculation {
            num_speculative_tokens: self.num_speculative_tokens,
            mean_acceptance_length: self.mean_acceptance_length(),
            draft,
            draft_host_s_per_seq: host_us * 1e-6,
            disable_above_seqs: self.max_batch_seqs(&target.engine),
        }))
    }

    /// Decode-only batches of at most this many sequences speculate: the table's
    /// `disable_by_batch_size`, else the engine profile's, else every batch (`u32::MAX`); 0
    /// when speculation is off.
    pub fn max_batch_seqs(&self, engine: &EngineProfile) -> u32 {
        if !self.is_on() {
            return 0;
        }
        let engine_limit = engine
            .speculative
            .as_ref()
            .and_then(|d| d.disable_by_batch_size);
        self.disable_by_batch_size
            .or(engine_limit)
            .unwrap_or(u32::MAX)
    }

    /// The engine's speculative rules for `target` (its profile's `[speculative]` table; a
    /// profile without one: the draft counted by the memory profile, K lookahead slots, no
    /// limits, as vLLM).
    fn engine_rules(engine: &EngineProfile) -> SpeculativeDefaults {
        engine.speculative.clone().unwrap_or_default()
    }

    /// The sequence cap the engine applies while speculating when the scenario sets none
    /// (SGLang's 48); `None` when speculation is off or the engine has no such default.
    pub fn default_max_num_seqs(&self, engine: &EngineProfile) -> Option<u32> {
        if !self.is_on() {
            return None;
        }
        Self::engine_rules(engine).max_num_seqs
    }

    /// KV slots a decoding sequence holds beyond its context while speculating, as the
    /// engine allocates them: its K draft tokens (verified whether accepted or not: rejected
    /// drafts hold their slots for the step) and the lookahead slots of a draft that writes KV
    /// (EAGLE heads, MTP layers, draft models; not n-gram). 0 when speculation is off.
    pub fn kv_slots_per_seq(&self, engine: &EngineProfile) -> u32 {
        let ngram = Method::parse(&self.method) == Some(Method::Ngram);
        Self::engine_rules(engine).slots_per_seq(self.num_speculative_tokens, !ngram)
    }

    /// What the draft takes from one GPU's memory, by the engine's rule (its profile's
    /// `speculative.draft_memory`): counted by its memory profile (the draft's weights on the
    /// GPU, and its attention layers' KV in every token of the target's pool: vLLM V1,
    /// TensorRT-LLM), or a fixed set-aside off the static memory fraction (SGLang; only where
    /// the engine sizes that fraction itself: `fraction_explicit` false). `max_num_seqs`
    /// sizes the engine's pool headroom, if it adds one. Default (nothing) when off.
    pub fn draft_memory(
        &self,
        target: &Deployment,
        max_num_seqs: u32,
        fraction_explicit: bool,
        origin: &str,
    ) -> Result<DraftMemory> {
        self.validate(origin)?;
        if !self.is_on() {
            return Ok(DraftMemory::default());
        }
        let method = self.method(origin)?;
        if method == Method::Mtp {
            self.check_mtp_layers(&target.model, origin)?;
        }
        let rules = Self::engine_rules(&target.engine);
        let k = self.num_speculative_tokens;
        let headroom_tokens = rules.headroom_tokens(k, max_num_seqs);
        if rules.draft_memory == DraftPolicy::Reserved {
            let reserved_bytes = match (fraction_explicit, method) {
                (true, _) => 0.0,
                (false, Method::DraftModel) => rules.draft_model_reserved_bytes,
                (false, _) => rules.draft_reserved_bytes,
            };
            return Ok(DraftMemory {
                reserved_bytes,
                headroom_tokens,
                ..DraftMemory::default()
            });
        }
        if method == Method::Ngram {
            return Ok(DraftMemory {
                headroom_tokens,
                ..DraftMemory::default()
            });
        }
        let dep = self.draft_deployment(method, target, origin)?;
        Ok(DraftMemory {
            weight_bytes: draft_weight_bytes(method, &dep, target),
            kv_bytes_per_token: dep.kv_bytes_per_token_per_gpu(),
            reserved_bytes: 0.0,
            headroom_tokens,
        })
    }

    /// `mtp` needs the target's own MTP layers (`num_nextn_predict_layers` of its config), and
    /// K a multiple of their number when K exceeds it: vLLM reuses the layers in turn
    /// ("num_speculative_tokens ... must be divisible by n_predict",
    /// vllm/config/speculative.py, vllm-project/vllm 002e77c1f0ef), so DeepSeek's one layer
    /// drafts any K.
    fn check_mtp_layers(&self, target: &crate::model::ModelSpec, origin: &str) -> Result<()> {
        let n = target.num_nextn_predict_layers;
        let k = u64::from(self.num_speculative_tokens);
        if n == 0 {
            return Err(Error::config(
                origin,
                "speculative.method",
                format!(
                    "'mtp' needs the target's multi-token-prediction layers, and model '{}' has \
                     none (num_nextn_predict_layers is 0 or absent in its config, {}); use \
                     eagle3, draft_model or ngram",
                    target.name, target.source
                ),
            ));
        }
        if k > n && k % n != 0 {
            return Err(Error::config(
                origin,
                "speculative.num_speculative_tokens",
                format!(
                    "with '{}''s {n} MTP layers K must be at most {n} or a multiple of {n} \
                     (the layers are reused in turn, as vLLM does), got {k}",
                    target.name
                ),
            ));
        }
        Ok(())
    }

    /// What the draft runs on: the target's GPUs and engine (host time zeroed: it is the
    /// target's step that the host prepares), with the draft's model.
    fn draft_deployment(
        &self,
        method: Method,
        target: &Deployment,
        origin: &str,
    ) -> Result<Deployment> {
        let mut dep = target.clone();
        dep.engine.host.per_iteration_s = 0.0;
        dep.engine.host.per_sequence_s = 0.0;
        dep.engine.host.per_iteration_exposed_s = 0.0;
        let m = &mut dep.model;
        match method {
            Method::Eagle | Method::Eagle3 => {
                m.num_layers = 1;
                m.moe = None;
                m.local_attention = None;
                m.name = format!("{}-{}-head", m.name, self.method);
                if method == Method::Eagle3 {
                    m.vocab_size = m.vocab_size.min(EAGLE3_DRAFT_VOCAB);
                }
                // A dense head after an MoE target: no experts to split.
                dep.ep = 1;
                dep.redundant_experts = 0;
            }
            Method::Mtp => {
                self.check_mtp_layers(m, origin)?;
                m.num_layers = 1;
                m.local_attention = None;
                m.name = format!("{}-mtp", m.name);
                if let Some(moe) = &mut m.moe {
                    // The MTP module is one layer like the target's MoE layers.
                    moe.dense_layers.clear();
                }
                // The whole layer in the checkpoint's MTP format (BF16 in NVFP4 checkpoints).
                dep.formats = crate::roofline::ModuleFormats::uniform(target.formats.mtp);
            }
            Method::DraftModel => {
                let name = self.model.as_deref().unwrap_or_default();
                dep.model = load_model(name)
                    .map_err(|e| Error::config(origin, "speculative.model", e.to_string()))?;
                // vLLM: `draft_tensor_parallel_size` "can only be 1 or the same as the target
                // model's tensor parallel size" (vllm/config/speculative.py,
                // `SpeculativeConfig._verify_and_get_draft_tp`, vllm-project/vllm 002e77c1f0ef).
                match self.tp {
                    Some(tp) if tp != 1 && tp != target.tp => {
                        return Err(Error::config(
                            origin,
                            "speculative.tp",
                            format!(
                                "the draft's tp must be 1 or the target's tp ({}), got {tp} \
                                 (vLLM's draft_tensor_parallel_size rule)",
                                target.tp
                            ),
                        ))
                    }
                    _ => {}
                }
                dep.tp = self.tp.unwrap_or(target.tp);
                dep.dp = 1;
                dep.ep = 1;
                dep.redundant_experts = 0;
            }
            Method::Ngram => unreachable!("n-gram has no draft model"),
        }
        dep.validate()
            .map_err(|e| Error::config(origin, "speculative", format!("the draft: {e}")))?;
        Ok(dep)
    }
}

/// The error of a deployment that fits without its draft and not with it: it names the
/// speculative key to change (`speculative.model` for a draft model, else
/// `speculative.method`) and what the draft takes (`draft`), after the memory plan's own
/// reason (`e`).
pub fn draft_does_not_fit(
    spec: &SpeculativeConfig,
    draft: &DraftMemory,
    e: &dyn std::fmt::Display,
    origin: &str,
) -> Error {
    let key = match Method::parse(&spec.method) {
        Some(Method::DraftModel) => "speculative.model",
        _ => "speculative.method",
    };
    let what = match &spec.model {
        Some(m) if key == "speculative.model" => format!("the draft model '{m}'"),
        _ => format!("the '{}' draft", spec.method),
    };
    Error::config(
        origin,
        key,
        format!(
            "the target fits without speculation, but {what} does not fit beside it \
             ({:.1} GB of draft weights and {:.1} GB set aside per GPU, {:.0} B of draft KV per \
             token): {e}; choose a smaller draft, or a larger tp",
            draft.weight_bytes / 1e9,
            draft.reserved_bytes / 1e9,
            draft.kv_bytes_per_token
        ),
    )
}

/// What speculative decoding `spec` (if any) takes from `target`'s memory by its engine's
/// rule, and the KV slots each decoding sequence holds besides its tokens
/// ([`SpeculativeConfig::draft_memory`], [`SpeculativeConfig::kv_slots_per_seq`]); nothing
/// without speculation.
pub fn reservation(
    spec: Option<&SpeculativeConfig>,
    target: &Deployment,
    max_num_seqs: u32,
    fraction_explicit: bool,
    origin: &str,
) -> Result<(DraftMemory, u32)> {
    match spec {
        Some(x) => Ok((
            x.draft_memory(target, max_num_seqs, fraction_explicit, origin)?,
            x.kv_slots_per_seq(&target.engine),
        )),
        None => Ok((DraftMemory::default(), 0)),
    }
}

/// The draft's weights on one GPU, bytes. A draft model: all of it at its own TP. An EAGLE
/// head or an MTP layer shares the target's embedding (and EAGLE's the target's LM head), as
/// vLLM's proposer loads them (vllm/v1/spec_decode/eagle.py shares `embed_tokens` and
/// `lm_head` with the target where the draft's checkpoint has none): its layer, plus
/// EAGLE-3's own LM head of its draft vocabulary and its fusion of three hidden states
/// (3h -> h), or the MTP module's projection of the concatenated embedding and hidden state
/// (2h -> h, DeepSeek-V3 report §2.2).
fn draft_weight_bytes(method: Method, dep: &Deployment, target: &Deployment) -> f64 {
    let m = &dep.model;
    let tp = dep.tp as f64;
    let all = dep.weight_bytes_per_gpu();
    if method == Method::DraftModel {
        return all;
    }
    let head = if m.tie_word_embeddings {
        0.0
    } else {
        m.lm_head_params()
    };
    let layer = all - (m.embedding_params() + head) / tp * ACT_BYTES;
    let h = target.model.hidden_size as f64;
    let own = match method {
        Method::Eagle3 => m.vocab_size as f64 * h + 3.0 * h * h,
        Method::Mtp => 2.0 * h * h,
        _ => 0.0,
    };
    let layers = match method {
        // Every MTP layer of the checkpoint is loaded, however many drafts reuse them.
        Method::Mtp => target.model.num_nextn_predict_layers.max(1) as f64,
        _ => 1.0,
    };
    (layer + own / tp * ACT_BYTES) * layers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain expectation against a Monte Carlo of the acceptance process it describes
    /// (draft tokens accepted in order until the first rejection, plus the bonus token).
    #[test]
    fn the_expected_acceptance_length_matches_a_sampled_chain() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for rates in [
            vec![0.7; 3],
            vec![0.9, 0.8, 0.6, 0.4, 0.2],
            vec![0.0; 4],
            vec![1.0; 2],
        ] {
            let n = 200_000;
            let mut total = 0u64;
            for _ in 0..n {
                let mut gained = 1;
                for &p in &rates {
                    if rng.gen::<f64>() < p {
                        gained += 1;
                    } else {
                        break;
                    }
                }
                total += gained;
            }
            let sampled = total as f64 / n as f64;
            let expected = expected_acceptance_length(&rates);
            assert!(
                (sampled / expected - 1.0).abs() < 0.01,
                "{rates:?}: sampled {sampled}, expected {expected}"
            );
        }
        assert_eq!(expected_acceptance_length(&[0.5, 0.5]), 1.75);
    }

    #[test]
    fn bad_inputs_name_their_key() {
        let base = SpeculativeConfig {
            method: "eagle3".into(),
            num_speculative_tokens: 3,
            acceptance_rate: None,
            mean_acceptance_length: None,
            model: None,
            tp: None,
            disable_by_batch_size: None,
            ngram_host_us_per_seq: None,
        };
        assert!(base.validate("s.toml").is_ok());
        let cases = [
            (
                SpeculativeConfig {
                    method: "medusa".into(),
                    ..base.clone()
                },
                "speculative.method",
            ),
            (
                SpeculativeConfig {
                    acceptance_rate: Some(AcceptanceRate::Uniform(1.5)),
                    ..base.clone()
                },
                "speculative.acceptance_rate",
            ),
            (
                SpeculativeConfig {
                    acceptance_rate: Some(AcceptanceRate::PerPosition(vec![0.5, 0.5])),
                    ..base.clone()
                },
                "speculative.acceptance_rate",
            ),
            (
                SpeculativeConfig {
                    mean_acceptance_length: Some(4.5),
                    ..base.clone()
                },
                "speculative.mean_acceptance_length",
            ),
            (
                SpeculativeConfig {
                    method: "draft_model".into(),
                    mean_acceptance_length: Some(2.0),
                    ..base.clone()
                },
                "speculative.model",
            ),
            (
                SpeculativeConfig {
                    method: "ngram".into(),
                    ..base.clone()
                },
                "speculative.acceptance_rate",
            ),
        ];
        for (cfg, key) in cases {
            let e = cfg.validate("s.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
