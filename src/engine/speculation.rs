//! How an engine finds room for speculative decoding, and the limits it puts on it: the
//! `[speculative]` table of an engine profile (calibration/engines/*.toml). The scenario's own
//! `[speculative]` table (src/speculative.rs) overrides the limits; the memory rules are the
//! engine's and are not scenario keys. docs/speculative-decoding.md, "Memory", gives the rules
//! of each engine with their sources.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where the draft's weights and KV cache (an EAGLE head, an MTP layer, a draft model) come
/// from. Sources (the profiles' `speculative.source` repeats them): vLLM at commit
/// 003df2961dd8 (main after 0.15), vllm/v1/spec_decode/eagle.py (`load_model`: the draft's
/// attention layers join the target's forward context, so the KV cache specs and the one
/// pool cover them); TensorRT-LLM tensorrt_llm/_torch/speculative/utils.py
/// (`get_num_spec_layers`); SGLang python/sglang/srt/server_args.py
/// (`_handle_gpu_memory_settings`: `reserved_mem += 2 GiB`, 6 GiB for STANDALONE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraftMemory {
    /// The draft is loaded before the engine profiles its memory, and its attention layers
    /// take their KV from the target's pool: the target gets fewer KV tokens (vLLM V1,
    /// TensorRT-LLM's one-model MTP and EAGLE-3).
    #[default]
    Profiled,
    /// The engine lowers its static memory fraction by a fixed amount for the draft
    /// (`draft_reserved_bytes`, `draft_model_reserved_bytes`) and sizes the target's pool
    /// from the rest; the draft's own weights and KV live in that set-aside (SGLang).
    Reserved,
}

/// The `[speculative]` table of an engine profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeDefaults {
    /// Where the draft's weights and KV come from.
    #[serde(default)]
    pub draft_memory: DraftMemory,
    /// `reserved`: bytes per GPU set aside for an EAGLE head or an MTP layer.
    #[serde(default)]
    pub draft_reserved_bytes: f64,
    /// `reserved`: bytes per GPU set aside for a separate draft model.
    #[serde(default)]
    pub draft_model_reserved_bytes: f64,
    /// KV slots a decoding sequence holds beyond its context, besides its K draft tokens,
    /// as K plus this (vLLM `num_lookahead_tokens` = K: offset 0, vllm/v1/core/sched/
    /// scheduler.py `Scheduler.__init__` and vllm/v1/core/kv_cache_manager.py
    /// `allocate_slots` at 003df2961dd8; TensorRT-LLM `get_num_extra_kv_tokens` = K - 1:
    /// offset -1, tensorrt_llm/_torch/speculative/utils.py); never below 0, in slots. Methods
    /// without a draft that writes KV (n-gram) hold only their K draft tokens.
    #[serde(default)]
    pub lookahead_offset: i32,
    /// Whether the engine enlarges its token pool beyond the profiled size by the slots its
    /// speculating sequences hold: `max_num_seqs x (2K + 1) + 100` tokens (SGLang's
    /// `draft_runner_cache_size` headroom, python/sglang/srt/model_executor/model_runner.py).
    #[serde(default)]
    pub pool_headroom: bool,
    /// The sequence cap while speculating when the scenario sets none (SGLang: 48,
    /// python/sglang/srt/server_args.py `_handle_speculative_decoding`); absent: the
    /// engine's usual default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u32>,
    /// Batches of more decoding sequences than this run without speculation, when the
    /// scenario's `speculative.disable_by_batch_size` is not given; absent: never off (vLLM
    /// V0's `speculative_disable_by_batch_size` defaulted to None; TensorRT-LLM's
    /// `max_concurrency` defaults to None, tensorrt_llm/_torch/speculative/drafter.py
    /// `should_use_spec_decode`; SGLang has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_by_batch_size: Option<u32>,
    /// Where the figures of this table come from (engine source files and versions).
    #[serde(default)]
    pub source: String,
}

/// Largest set-aside a profile may give, bytes per GPU (the largest GPU's memory).
const MAX_RESERVED_BYTES: f64 = 300e9;

impl SpeculativeDefaults {
    /// Checks the table; errors name `origin` and the key (`speculative.*`).
    pub fn validate(&self, origin: &str) -> Result<()> {
        let err = |key: &str, reason: String| Err(Error::config(origin, key, reason));
        for (key, v) in [
            (
                "speculative.draft_reserved_bytes",
                self.draft_reserved_bytes,
            ),
            (
                "speculative.draft_model_reserved_bytes",
                self.draft_model_reserved_bytes,
            ),
        ] {
            if !(v.is_finite() && (0.0..=MAX_RESERVED_BYTES).contains(&v)) {
                return err(
                    key,
                    format!("must be in [0, {MAX_RESERVED_BYTES:e}] bytes, got {v}"),
                );
            }
            if v > 0.0 && self.draft_memory != DraftMemory::Reserved {
                return err(
                    key,
                    "a set-aside needs draft_memory = \"reserved\" (with \"profiled\" the draft is counted)".into(),
                );
            }
        }
        if !(-16..=16).contains(&self.lookahead_offset) {
            return err(
                "speculative.lookahead_offset",
                format!(
                    "must be in -16..=16 (slots beyond K), got {}",
                    self.lookahead_offset
                ),
            );
        }
        if self.max_num_seqs == Some(0) {
            return err("speculative.max_num_seqs", "must be >= 1".into());
        }
        if self.disable_by_batch_size == Some(0) {
            return err("speculative.disable_by_batch_size", "must be >= 1".into());
        }
        if self.source.trim().is_empty() {
            return err(
                "speculative.source",
                "the engine's speculative rules need their source".into(),
            );
        }
        Ok(())
    }

    /// KV slots a decoding sequence speculating `k` tokens holds beyond its context: its `k`
    /// draft tokens (written by the verify step whether accepted or not) and, for a draft
    /// that writes KV (`draft_writes_kv`), the lookahead slots.
    pub fn slots_per_seq(&self, k: u32, draft_writes_kv: bool) -> u32 {
        if k == 0 {
            return 0;
        }
        let lookahead = if draft_writes_kv {
            (k as i64 + self.lookahead_offset as i64).max(0) as u32
        } else {
            0
        };
        k + lookahead
    }

    /// Tokens the engine adds to its pool beyond the profiled size (`pool_headroom`).
    pub fn headroom_tokens(&self, k: u32, max_num_seqs: u32) -> u64 {
        if !self.pool_headroom || k == 0 {
            return 0;
        }
        max_num_seqs as u64 * (2 * k as u64 + 1) + 100
    }
}
