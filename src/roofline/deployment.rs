//! What runs where: a model on a GPU type, its parallelism (tensor, attention data, expert)
//! and the formats of its weights and KV cache; what each GPU holds.

use serde::Serialize;

use super::ACT_BYTES;
use crate::engine::EngineProfile;
use crate::error::{Error, Result};
use crate::gpu::GpuProfile;
use crate::model::{MlpKind, ModelSpec};
use crate::precision::{GemmMath, KvDtype, WeightDtype};

/// The weight format of each kind of module, as the deployment runs them. The embeddings and
/// the LM head's storage are 16-bit whatever these say; routers are 16-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModuleFormats {
    /// Attention projections (QKV, or MLA's down- and up-projections), and the output
    /// projection unless `attention_out` says otherwise.
    pub attention: WeightDtype,
    /// The attention's output projection (O: `o_proj`, DeepSeek's `wo`): `attention` but in a
    /// checkpoint that quantizes it apart from the others (the `-v2` NVFP4 DeepSeek-R1
    /// checkpoints: NVFP4 O projection, BF16 MLA projections).
    pub attention_out: WeightDtype,
    /// Dense MLPs and shared experts.
    pub dense: WeightDtype,
    /// Routed experts.
    pub experts: WeightDtype,
    /// The multi-token-prediction layers (`num_nextn_predict_layers`) that `method = "mtp"`
    /// drafts with: the whole layer, its attention and experts included, runs in this format.
    pub mtp: WeightDtype,
}

impl ModuleFormats {
    /// Every module in one format.
    pub fn uniform(d: WeightDtype) -> Self {
        ModuleFormats {
            attention: d,
            attention_out: d,
            dense: d,
            experts: d,
            mtp: d,
        }
    }

    /// The formats of a checkpoint of `model` that a deployment names by one format `d`
    /// (`dtype = "fp4"`): what the published checkpoints of that format run, module by module.
    ///
    /// NVFP4 (`Fp4`) is an NVIDIA Model Optimizer (ModelOpt) checkpoint. ModelOpt's default
    /// NVFP4 recipe quantizes every linear layer but the LM head and the routers, which
    /// servesim keeps 16-bit anyway. Its recipe for MLA models (DeepSeek-V3/R1 and their
    /// architecture: NVIDIA/TensorRT-Model-Optimizer examples/deepseek/ptq.py @ 1030a22, which
    /// made nvidia/DeepSeek-R1-FP4) disables the attention quantizers (`*attn*`) and appends
    /// the MTP layer (`layers.{num_layers}*`) to `exclude_modules`, "as the mtp is not loaded
    /// in the quantized model"; its converter (quantize_to_nvfp4.py @ 1ef1d72) writes every
    /// module it did not quantize in BF16. So MLA attention stays BF16, dense MLPs, shared and
    /// routed experts go NVFP4, and the MTP layers of any NVFP4 checkpoint stay BF16 (ModelOpt
    /// calibrates only the layers its model loads). TensorRT-LLM's DeepSeek-R1 B200 blog
    /// (docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_
    /// Performance_on_NVIDIA_B200_GPUs.md @ 5685103, "Precision Strategy") runs exactly this:
    /// attention bf16, dense and MoE FFNs nvfp4, MTP layers bf16. Every other format is uniform.
    pub fn of_checkpoint(model: &ModelSpec, d: WeightDtype) -> Self {
        match d {
            WeightDtype::Fp4 => {
                let attention = if model.mla.is_some() {
                    WeightDtype::Bf16
                } else {
                    d
                };
                ModuleFormats {
                    attention,
                    attention_out: attention,
                    mtp: WeightDtype::Bf16,
                    ..ModuleFormats::uniform(d)
                }
            }
            _ => ModuleFormats::uniform(d),
        }
    }

    /// Whether the modules of the target model (the MTP layers aside) have one format.
    pub fn is_uniform(&self) -> bool {
        self.attention == self.dense
            && self.dense == self.experts
            && self.attention_out == self.attention
    }

    /// How reports name the formats: `fp8`; `mxfp4 experts + bf16` when the experts differ
    /// from the rest; `fp4 + bf16 attention` when only the attention differs; `fp4 + bf16
    /// attention, fp4 O projection` when the output projection differs from the attention's
    /// other projections.
    pub fn label(&self) -> String {
        let base = ModuleFormats {
            attention_out: self.attention,
            ..*self
        }
        .label_of_projections();
        if self.attention_out == self.attention {
            base
        } else {
            format!("{base}, {} O projection", self.attention_out)
        }
    }

    /// [`ModuleFormats::label`] for formats whose O projection is the attention's.
    fn label_of_projections(&self) -> String {
        if self.is_uniform() {
            self.attention.to_string()
        } else if self.dense == self.experts {
            format!("{} + {} attention", self.experts, self.attention)
        } else {
            format!("{} experts + {}", self.experts, self.attention)
        }
    }
}

/// What runs where: a model on a GPU type, split over `tp x dp` GPUs, in given formats.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The model.
    pub model: ModelSpec,
    /// The GPU type.
    pub gpu: GpuProfile,
    /// The serving engine.
    pub engine: EngineProfile,
    /// Tensor-parallel degree of the attention (GPUs per data-parallel rank).
    pub tp: u32,
    /// Attention data-parallel ranks (vLLM `--data-parallel-size`, SGLang `--dp-size` with
    /// `--enable-dp-attention`): each rank of `tp` GPUs holds its own requests' KV and runs its
    /// own attention; the MoE layers span all `tp x dp` GPUs. 1: none.
    pub dp: u32,
    /// Pipeline-parallel stages: each stage of `tp x dp` GPUs holds `num_layers / pp` layers
    /// (their weights and KV), and `pp` micro-batches are in flight, each one's step the whole
    /// model's on `tp x dp` GPUs plus `pp - 1` activation sends between stages. 1: none.
    pub pp: u32,
    /// Expert-parallel size: the routed experts are spread over `ep` ranks whole (vLLM
    /// `--enable-expert-parallel` makes it `tp x dp`, SGLang `--ep-size`) and the remaining
    /// `tp x dp / ep` factor splits each expert tensor-parallel. 1: experts split
    /// tensor-parallel over all `tp x dp` GPUs.
    pub ep: u32,
    /// Redundant expert replicas per MoE layer placed by the expert-parallel load balancer
    /// (EPLB; SGLang `--ep-num-redundant-experts`, vLLM `--num-redundant-experts`).
    pub redundant_experts: u32,
    /// The headline weight format (the deployment's `dtype`, or the checkpoint's main one).
    pub weight_dtype: WeightDtype,
    /// The format of each kind of module.
    pub formats: ModuleFormats,
    /// KV-cache format.
    pub kv_dtype: KvDtype,
}

impl Deployment {
    /// A tensor-parallel deployment of `tp` GPUs with every module in `weights` and the KV
    /// cache in `kv`: no data, pipeline or expert parallelism, no redundant experts.
    pub fn tensor_parallel(
        model: ModelSpec,
        gpu: GpuProfile,
        engine: EngineProfile,
        tp: u32,
        weights: WeightDtype,
        kv: KvDtype,
    ) -> Self {
        Deployment {
            model,
            gpu,
            engine,
            tp,
            dp: 1,
            pp: 1,
            ep: 1,
            redundant_experts: 0,
            weight_dtype: weights,
            formats: ModuleFormats::uniform(weights),
            kv_dtype: kv,
        }
    }

    /// GPUs of one replica: `tp x dp`.
    pub fn gpus(&self) -> u32 {
        self.tp.saturating_mul(self.dp)
    }

    /// GPUs of one replica with all its pipeline stages: `tp x dp x pp`.
    pub fn replica_gpus(&self) -> u32 {
        self.gpus().saturating_mul(self.pp)
    }

    /// Time of one pipeline-stage hand-off of `tokens` tokens, seconds: the hidden states
    /// (`hidden_size x tokens` at 16 bits) sent peer-to-peer over NVLink at one direction's
    /// half of the datasheet's total (bidirectional) NVLink bandwidth, after the NVLink
    /// peer-to-peer latency of a small message (the GPU profile's `allreduce.custom_latency_s`).
    /// Within one node only: across nodes the send takes the network's rate and latency.
    pub fn stage_transfer_s(&self, tokens: f64) -> f64 {
        let bytes = tokens * self.model.hidden_size as f64 * ACT_BYTES;
        let g = &self.gpu;
        if self.replica_gpus() <= g.network.gpus_per_node {
            g.allreduce.custom_latency_s + bytes / (g.datasheet.nvlink_bandwidth_bytes_per_s / 2.0)
        } else {
            g.network.internode_latency_s + bytes / g.network.internode_bandwidth_bytes_per_s
        }
    }

    /// Checks that the parallelism splits the model: TP must divide the attention heads, and
    /// the KV heads must divide by it or be replicated across it; EP must divide the replica's
    /// GPUs and its experts.
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        let tp = self.tp as u64;
        if tp == 0 || self.dp == 0 || self.ep == 0 || self.pp == 0 {
            return Err(Error::Infeasible(
                "tensor-, data-, pipeline- and expert-parallel sizes must be >= 1".into(),
            ));
        }
        if m.num_layers % self.pp as u64 != 0 {
            return Err(Error::Infeasible(format!(
                "pipeline-parallel size {} does not divide the {} layers of {}",
                self.pp, m.num_layers, m.name
            )));
        }
        if m.num_attention_heads % tp != 0 {
            let fits: Vec<String> = (1..=m.num_attention_heads.min(64))
                .filter(|t| m.num_attention_heads % t == 0 && t.is_power_of_two())
                .map(|t| t.to_string())
                .collect();
            return Err(Error::Infeasible(format!(
                "tensor-parallel size {tp} does not divide the {} attention heads of {}; use one of {}",
                m.num_attention_heads,
                m.name,
                fits.join(", ")
            )));
        }
        if m.mla.is_none()
            && (tp <= m.num_kv_heads && m.num_kv_heads % tp != 0
                || tp > m.num_kv_heads && tp % m.num_kv_heads != 0)
        {
            return Err(Error::Infeasible(format!(
                "tensor-parallel size {tp} neither divides nor is a multiple of the {} KV heads of {}",
                m.num_kv_heads, m.name
            )));
        }
        self.validate_experts()
    }

    fn validate_experts(&self) -> Result<()> {
        let m = &self.model;
        let gpus = self.gpus();
        if self.ep == 1 && self.redundant_experts == 0 {
            return Ok(());
        }
        let Some(moe) = &m.moe else {
            return Err(Error::Infeasible(format!(
                "{} has no experts: expert parallelism and redundant experts need a MoE model",
                m.name
            )));
        };
        if gpus % self.ep != 0 {
            return Err(Error::Infeasible(format!(
                "expert-parallel size {} does not divide the replica's {gpus} GPUs (tp {} x dp {})",
                self.ep, self.tp, self.dp
            )));
        }
        let slots = moe.num_experts + self.redundant_experts;
        if slots % self.ep != 0 {
            return Err(Error::Infeasible(format!(
                "expert-parallel size {} does not divide the {} experts{} of {}",
                self.ep,
                moe.num_experts,
                if self.redundant_experts > 0 {
                    format!(" + {} redundant", self.redundant_experts)
                } else {
                    String::new()
                },
                m.name
            )));
        }
        Ok(())
    }

    /// KV heads held by each GPU (replicated when TP exceeds the KV heads; 1 latent with MLA).
    pub fn kv_heads_per_gpu(&self) -> u64 {
        kv_heads_per_gpu(&self.model, self.tp as u64)
    }

    /// KV-cache bytes one layer keeps per token on each GPU: the GPU's KV heads, or MLA's whole
    /// latent (every tensor-parallel GPU keeps all of it, as vLLM and SGLang store it).
    pub fn kv_bytes_per_token_layer_per_gpu(&self) -> f64 {
        if self.model.mla.is_some() {
            return self.model.kv_elems_per_token_layer() * self.kv_dtype.bytes();
        }
        2.0 * (self.kv_heads_per_gpu() * self.model.head_dim) as f64 * self.kv_dtype.bytes()
    }

    /// KV-cache bytes per token on each GPU, every layer keeping every token.
    pub fn kv_bytes_per_token_per_gpu(&self) -> f64 {
        if self.model.mla.is_some() {
            return self.model.num_layers as f64 * self.kv_bytes_per_token_layer_per_gpu();
        }
        2.0 * self.model.num_layers as f64
            * (self.kv_heads_per_gpu() * self.model.head_dim) as f64
            * self.kv_dtype.bytes()
    }

    /// Routed-expert weight bytes each GPU holds in one MoE layer: all the layer's experts
    /// (with EPLB's redundant replicas) in the experts' format, spread over all `tp x dp` GPUs.
    pub fn routed_expert_bytes_per_gpu_per_layer(&self) -> f64 {
        let experts = (self.model.num_experts() + self.redundant_experts as u64) as f64;
        experts * self.model.expert_params() * self.formats.experts.bytes() / self.gpus() as f64
    }

    /// Weight bytes held by each GPU: attention and dense MLPs split by TP (MLA's
    /// down-projections replicated), routed experts (with EPLB's redundant replicas) spread
    /// over all `tp x dp` GPUs, routers replicated in 16 bits, embeddings and LM head
    /// (vocab-parallel) in 16 bits, norms replicated.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        let m = &self.model;
        let tp = self.tp as f64;
        let f = &self.formats;
        let head = if m.tie_word_embeddings {
            0.0
        } else {
            m.lm_head_params()
        };
        let norms = 2.0 * m.hidden_size as f64 * ACT_BYTES;
        let mut attention = m.attention_split_params() * f.attention.bytes() / tp
            + m.attention_replicated_params() * f.attention.bytes();
        if f.attention_out != f.attention {
            // The O projection in its own format (split by TP like the rest).
            let o = m.attention_out_params();
            attention += o * (f.attention_out.bytes() - f.attention.bytes()) / tp;
        }
        let uniform_dense =
            m.moe.is_none() && m.mla.is_none() && !m.attention_sinks && f.is_uniform();
        let layers: f64 = if uniform_dense {
            // (QKV + O + MLP) / TP in one format: the sum as it always was.
            let lp = m.layer_params();
            let linear = lp.qkv + lp.o + lp.gate_up + lp.down;
            m.num_layers as f64 * (linear / tp * f.attention.bytes() + lp.norms * ACT_BYTES)
        } else {
            let moe = self.routed_expert_bytes_per_gpu_per_layer()
                + m.shared_expert_params() * f.dense.bytes() / tp
                + m.router_params() * ACT_BYTES;
            let dense = m.dense_mlp_params() * f.dense.bytes() / tp;
            m.layer_groups()
                .iter()
                .map(|(k, n)| {
                    let mlp = match k.mlp {
                        MlpKind::Dense => dense,
                        MlpKind::Moe => moe,
                    };
                    *n as f64 * (attention + mlp + norms)
                })
                .sum()
        };
        if self.pp <= 1 {
            return layers + (m.embedding_params() + head) / tp * ACT_BYTES;
        }
        // The heaviest stage: its share of the layers and the embedding (first stage) or the
        // LM head (last stage), whichever is larger.
        layers / self.pp as f64 + m.embedding_params().max(head) / tp * ACT_BYTES
    }

    /// The tensor-core math a module in format `d` runs on this GPU.
    pub fn math(&self, d: WeightDtype) -> GemmMath {
        d.math(self.gpu.supports_fp8(), self.gpu.supports_fp4())
    }

    /// Whether the attention GEMMs run on FP8 tensor cores (FP8 weights on a GPU that has
    /// them).
    pub fn fp8_gemms(&self) -> bool {
        self.math(self.formats.attention) == GemmMath::Fp8
    }
}

/// KV heads each GPU of a tensor-parallel group of `tp` holds: the KV heads split over the
/// GPUs, replicated when `tp` exceeds them (each GPU keeps one head, as vLLM and TensorRT-LLM
/// do); 1 (the latent) with MLA.
pub fn kv_heads_per_gpu(model: &ModelSpec, tp: u64) -> u64 {
    if model.mla.is_some() {
        return 1;
    }
    (model.num_kv_heads / tp.max(1)).max(1)
}

/// Per-GPU output widths of a GQA layer's attention projections at tensor-parallel size `tp`:
/// (query `n_h d / TP`, keys or values `kv_heads_per_gpu x d`). The one rule the step-time
/// model and the calibration's GEMM shapes (calibrate's `layer_gemms`) share.
pub fn gqa_projection_widths(model: &ModelSpec, tp: u64) -> (f64, f64) {
    (
        model.q_dim() as f64 / tp as f64,
        (kv_heads_per_gpu(model, tp) * model.head_dim) as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::load_model;

    #[test]
    fn nvfp4_checkpoints_keep_mla_attention_and_mtp_layers_in_bf16() {
        use WeightDtype as W;
        let r1 = load_model("deepseek-r1").unwrap();
        let f = ModuleFormats::of_checkpoint(&r1, W::Fp4);
        assert_eq!(
            (f.attention, f.dense, f.experts, f.mtp),
            (W::Bf16, W::Fp4, W::Fp4, W::Bf16)
        );
        let dense = load_model("llama-3.1-70b").unwrap();
        let f = ModuleFormats::of_checkpoint(&dense, W::Fp4);
        assert_eq!((f.attention, f.dense, f.experts), (W::Fp4, W::Fp4, W::Fp4));
        assert_eq!(f.mtp, W::Bf16);
        for d in [W::Bf16, W::Fp16, W::Fp8, W::Mxfp4] {
            assert_eq!(
                ModuleFormats::of_checkpoint(&r1, d),
                ModuleFormats::uniform(d)
            );
        }
    }
}
