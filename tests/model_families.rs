//! The model families of 2026 read from their published config.json
//! (tests/data/hf-configs/, with SOURCES.md): parameter counts and KV bytes per token against
//! the published figures (tests/data/hf-configs/published-params.csv), the catalog entries
//! against the configs they were written from, unread size-bearing keys, and model names as
//! users write them (Hugging Face ids through a local cache, folders).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::servesim;
use servesim::model::{load_model, AttentionKind, MlpKind, ModelSpec};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf-configs")
}

fn fixture(folder: &str) -> ModelSpec {
    let p = fixtures().join(folder).join("config.json");
    load_model(p.to_str().unwrap()).unwrap_or_else(|e| panic!("{folder}: {e}"))
}

/// One row of published-params.csv.
struct Published {
    model: String,
    folder: String,
    total: f64,
    active: f64,
    full_layers: u64,
    windowed_layers: u64,
    kv_bf16: f64,
    kv_fp8: f64,
    kv_windowed_bf16: f64,
}

fn published() -> Vec<Published> {
    let mut rdr = csv::Reader::from_path(fixtures().join("published-params.csv")).unwrap();
    let headers = rdr.headers().unwrap().clone();
    let col = |rec: &csv::StringRecord, name: &str| -> String {
        let i = headers.iter().position(|h| h == name).unwrap();
        rec.get(i).unwrap().to_string()
    };
    let num = |s: String| s.parse::<f64>().unwrap_or(0.0);
    rdr.records()
        .map(|r| {
            let r = r.unwrap();
            Published {
                model: col(&r, "model"),
                folder: col(&r, "config_fixture"),
                total: num(col(&r, "params_total_b")) * 1e9,
                active: num(col(&r, "params_active_b")) * 1e9,
                full_layers: num(col(&r, "layers_full_kv")) as u64,
                windowed_layers: num(col(&r, "layers_windowed")) as u64,
                kv_bf16: num(col(&r, "kv_bytes_per_token_bf16")),
                kv_fp8: num(col(&r, "kv_bytes_per_token_fp8")),
                kv_windowed_bf16: num(col(&r, "kv_bytes_per_token_windowed_layers_bf16")),
            }
        })
        .collect()
}

#[test]
fn every_published_config_reads_to_its_published_size_and_kv() {
    let rows = published();
    assert!(rows.len() >= 14, "{} rows", rows.len());
    let mut checked = 0;
    for p in &rows {
        let folder = fixtures().join(&p.folder);
        if p.folder.is_empty() || !folder.exists() {
            continue; // GLM-4.5: no published config.json was found (SOURCES.md)
        }
        let m = fixture(&p.folder);
        let total = m.total_params();
        let active = m.active_params();
        let err = |a: f64, b: f64| (a - b).abs() / b;
        assert!(
            err(total, p.total) <= 0.03,
            "{}: total {:.2}B vs published {:.2}B",
            p.model,
            total / 1e9,
            p.total / 1e9
        );
        assert!(
            err(active, p.active) <= 0.10,
            "{}: active {:.2}B vs published {:.2}B",
            p.model,
            active / 1e9,
            p.active / 1e9
        );
        let kv = m.kv_per_token(2.0);
        assert_eq!(kv.full_layers, p.full_layers, "{}", p.model);
        assert_eq!(
            kv.sliding_layers + kv.chunked_layers,
            p.windowed_layers,
            "{}",
            p.model
        );
        assert_eq!(kv.full_bytes, p.kv_bf16, "{}: full-layer KV bf16", p.model);
        assert_eq!(m.kv_per_token(1.0).full_bytes, p.kv_fp8, "{}", p.model);
        assert_eq!(kv.local_bytes, p.kv_windowed_bf16, "{}", p.model);
        checked += 1;
    }
    assert!(checked >= 14, "only {checked} configs checked");
}

#[test]
fn every_catalog_model_is_within_3_and_10_percent_of_its_published_sizes() {
    for name in [
        "deepseek-v3",
        "deepseek-r1",
        "qwen3-235b-a22b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "gpt-oss-120b",
        "gpt-oss-20b",
        "llama-4-scout",
        "llama-4-maverick",
    ] {
        let m = load_model(name).unwrap();
        let t = (m.total_params() - m.published_params).abs() / m.published_params;
        let a = (m.active_params() - m.published_active_params).abs() / m.published_active_params;
        assert!(
            t <= 0.03,
            "{name}: total {:.2}B ({:.1}% off)",
            m.total_params() / 1e9,
            t * 100.0
        );
        assert!(
            a <= 0.10,
            "{name}: active {:.2}B ({:.1}% off)",
            m.active_params() / 1e9,
            a * 100.0
        );
    }
}

/// The catalog entry and the config it was written from describe the same architecture.
#[test]
fn catalog_entries_agree_with_their_configs() {
    for (name, folder) in [
        ("deepseek-v3", "deepseek-ai--DeepSeek-V3"),
        ("deepseek-r1", "deepseek-ai--DeepSeek-R1"),
        ("qwen3-235b-a22b", "Qwen--Qwen3-235B-A22B"),
        ("qwen3-32b", "Qwen--Qwen3-32B"),
        ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B"),
        ("gpt-oss-120b", "openai--gpt-oss-120b"),
        ("gpt-oss-20b", "openai--gpt-oss-20b"),
        (
            "llama-4-scout",
            "meta-llama--Llama-4-Scout-17B-16E-Instruct",
        ),
        (
            "llama-4-maverick",
            "meta-llama--Llama-4-Maverick-17B-128E-Instruct.subset",
        ),
        ("mixtral-8x7b", "mistralai--Mixtral-8x7B-v0.1"),
        ("llama-3.1-8b", "meta-llama--Llama-3.1-8B"),
    ] {
        let cat = load_model(name).unwrap();
        let hf = fixture(folder);
        let same = |a: &ModelSpec, b: &ModelSpec| {
            (
                a.hidden_size,
                a.num_layers,
                a.num_attention_heads,
                a.num_kv_heads,
                a.head_dim,
                a.vocab_size,
                a.tie_word_embeddings,
                a.attention_bias,
                a.max_position_embeddings,
                a.attention_sinks,
            ) == (
                b.hidden_size,
                b.num_layers,
                b.num_attention_heads,
                b.num_kv_heads,
                b.head_dim,
                b.vocab_size,
                b.tie_word_embeddings,
                b.attention_bias,
                b.max_position_embeddings,
                b.attention_sinks,
            )
        };
        assert!(same(&cat, &hf), "{name}: {cat:?}\nvs\n{hf:?}");
        assert_eq!(cat.moe, hf.moe, "{name}");
        assert_eq!(cat.mla, hf.mla, "{name}");
        assert_eq!(cat.local_attention, hf.local_attention, "{name}");
        assert_eq!(cat.checkpoint, hf.checkpoint, "{name}");
        assert_eq!(cat.total_params(), hf.total_params(), "{name}");
        // A dense model's intermediate size is its MLP's; the MoE entries keep the dense
        // layers' width there too.
        if cat.layers_with_mlp(MlpKind::Dense) > 0 {
            assert_eq!(cat.intermediate_size, hf.intermediate_size, "{name}");
        }
    }
}

#[test]
fn the_families_per_layer_structure_comes_from_their_keys() {
    // DeepSeek-V3: 3 dense layers, then MoE; MLA latent of 576 per layer; 70,272 B/token bf16.
    let v3 = fixture("deepseek-ai--DeepSeek-V3");
    assert_eq!(v3.layers_with_mlp(MlpKind::Dense), 3);
    assert_eq!(v3.layer_kind(2).mlp, MlpKind::Dense);
    assert_eq!(v3.layer_kind(3).mlp, MlpKind::Moe);
    assert_eq!(v3.kv_bytes_per_token(1.0), 35_136.0);
    assert_eq!(v3.mla.as_ref().unwrap().q_lora_rank, Some(1536));
    // DeepSeek-V2-Lite: q_lora_rank null (a plain query projection), 2 shared experts.
    let lite = fixture("deepseek-ai--DeepSeek-V2-Lite");
    assert_eq!(lite.mla.as_ref().unwrap().q_lora_rank, None);
    assert_eq!(
        lite.moe.as_ref().unwrap().shared_expert_intermediate_size,
        2 * 1408
    );
    // gpt-oss: alternating sliding (128) and full attention; sinks; MXFP4 experts, BF16 rest.
    let oss = fixture("openai--gpt-oss-120b");
    assert_eq!(oss.layer_kind(0).attention, AttentionKind::Sliding);
    assert_eq!(oss.layer_kind(1).attention, AttentionKind::Full);
    assert!(oss.attention_sinks);
    let c = oss.checkpoint.as_ref().unwrap();
    assert_eq!(
        (c.experts.to_string(), c.other.to_string()),
        ("mxfp4".into(), "bf16".into())
    );
    // Llama-4 Maverick: nested text_config, MoE every other layer with a shared expert, dense
    // layers 16384 wide, chunked attention with every 4th layer global.
    let mav = fixture("meta-llama--Llama-4-Maverick-17B-128E-Instruct.subset");
    assert_eq!(mav.layers_with_mlp(MlpKind::Moe), 24);
    assert_eq!(mav.layer_kind(1).mlp, MlpKind::Moe);
    assert_eq!(mav.intermediate_size, 16384);
    let moe = mav.moe.as_ref().unwrap();
    assert_eq!(moe.expert_intermediate_size, Some(8192));
    assert_eq!(moe.shared_expert_intermediate_size, 8192);
    assert_eq!(mav.layer_kind(3).attention, AttentionKind::Full);
    assert_eq!(mav.layer_kind(4).attention, AttentionKind::Chunked);
    // Gemma-3: the sparse text_config takes Gemma3TextConfig's defaults (vocab 262,208, tied
    // embeddings, one global layer in six).
    let gemma = fixture("google--gemma-3-27b-it");
    assert_eq!(gemma.vocab_size, 262_208);
    assert!(gemma.tie_word_embeddings);
    assert_eq!(gemma.kv_per_token(2.0).full_layers, 10);
    assert_eq!(gemma.layer_kind(5).attention, AttentionKind::Full);
    // Qwen3 dense: no sliding window (use_sliding_window false), no experts.
    let q = fixture("Qwen--Qwen3-32B");
    assert!(q.moe.is_none() && q.local_attention.is_none() && q.mla.is_none());
}

fn write_config(dir: &Path, name: &str, text: &str) -> String {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("config.json");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_config_with_expert_keys_servesim_cannot_read_exits_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let v3 =
        std::fs::read_to_string(fixtures().join("deepseek-ai--DeepSeek-V3/config.json")).unwrap();
    // A family that names its expert count and expert width with keys servesim does not read.
    let renamed = v3
        .replace("\"n_routed_experts\"", "\"num_routed_experts\"")
        .replace("\"moe_intermediate_size\"", "\"expert_ffn_hidden_size\"");
    let path = write_config(dir.path(), "unknown-moe", &renamed);
    let (code, out, err) = servesim(&["estimate", "--model", &path]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("num_routed_experts"), "{err}");
    assert!(err.contains("expert_ffn_hidden_size"), "{err}");
    assert!(out.is_empty(), "{out}");
    // An unknown family with plain dense keys still reads.
    let plain = r#"{"model_type": "brand_new", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "router_aux_loss_coef": 0.01, "num_experts": 1}"#;
    let path = write_config(dir.path(), "brand-new", plain);
    let (code, out, err) = servesim(&["estimate", "--model", &path, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"params_total\""), "{out}");
}

#[test]
fn a_hugging_face_id_resolves_through_the_cache_or_says_where_it_looked() {
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("hub/models--openai--gpt-oss-20b");
    let snap = repo.join("snapshots/0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::copy(
        fixtures().join("openai--gpt-oss-20b/config.json"),
        snap.join("config.json"),
    )
    .unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .env("HF_HOME", home.path())
            .env_remove("HF_HUB_CACHE")
            .env("HF_HUB_OFFLINE", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&[
        "estimate",
        "--model",
        "openai/gpt-oss-20b",
        "--dtype",
        "auto",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!((v["params_total"].as_f64().unwrap() - 20.91e9).abs() < 0.1e9);
    assert_eq!(v["dtype"], "mxfp4 experts + bf16");
    // The folder holding a config.json is a model too.
    let (code, _, err) = run(&["estimate", "--model", snap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // An id not in the cache, with the network off: exit 2, where it looked, how to get it.
    let (code, out, err) = run(&["estimate", "--model", "acme/not-cached-7b"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("models--acme--not-cached-7b"), "{err}");
    assert!(
        err.contains(&home.path().join("hub").display().to_string()),
        "{err}"
    );
    assert!(
        err.contains("huggingface-cli download acme/not-cached-7b"),
        "{err}"
    );
    assert!(err.contains("HF_TOKEN"), "{err}");
}

#[test]
fn gpt_oss_weights_per_gpu_match_its_checkpoint_size() {
    // The gpt-oss model card: the 120b checkpoint is 60.8 GiB, the 20b 12.8 GiB (MXFP4
    // experts, BF16 rest); servesim's weights at TP 1 in the checkpoint's formats.
    for (model, gib) in [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)] {
        let (code, out, err) = servesim(&[
            "estimate", "--model", model, "--gpu", "h200-sxm", "--dtype", "auto", "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let w = v["weights_bytes_per_gpu"].as_f64().unwrap() / (1u64 << 30) as f64;
        assert!((w - gib).abs() / gib < 0.03, "{model}: {w:.2} GiB vs {gib}");
    }
}

/// The expert-parallel terms against a measurement they were not built from: SGLang's
/// decode-only DeepSeek-V3 on 9 nodes of 8 H100s (LMSYS, May 2025; EP72 with attention DP72,
/// 256 sequences per GPU at 2,000 tokens of KV, 32 redundant experts;
/// calibration/reference/lmsys-moe-large-ep-h100.csv): 22,282 output tokens/s per node.
#[test]
fn large_scale_expert_parallel_decode_matches_the_lmsys_h100_run() {
    let (code, out, err) = servesim(&[
        "estimate",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm",
        "--tp",
        "1",
        "--dp",
        "72",
        "--ep-size",
        "72",
        "--num-redundant-experts",
        "32",
        "--dtype",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--engine",
        "sglang",
        "--decode-batch",
        "18432",
        "--context",
        "2000",
        "--max-num-seqs",
        "256",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let per_node = v["output_tokens_per_s"].as_f64().unwrap() / 9.0;
    // Measured 20,435 per node (-8.3%).
    assert!((per_node - 22_282.0).abs() / 22_282.0 < 0.15, "{per_node}");
    assert!(v["step"]["expert_comm_s"].as_f64().unwrap() > 0.0);
}

/// An NVFP4 checkpoint's own exclude list sets the formats of the modules it names: ModelOpt's
/// DeepSeek recipe leaves each layer's attention (`model.layers.N.self_attn*`) and the MTP
/// layer (`model.layers.61*`, the layer after the last of `num_hidden_layers`) unquantized, in
/// BF16; with an `ignore` list naming only the LM head every linear layer is NVFP4. An explicit
/// `fp4` on a model with no NVFP4 checkpoint runs the ModelOpt recipe's formats.
#[test]
fn an_nvfp4_checkpoints_exclude_list_keeps_its_attention_and_mtp_layers_16_bit() {
    use servesim::precision::{KvDtype, WeightDtype as W};
    use servesim::scenario::resolve_formats;
    let dir = tempfile::tempdir().unwrap();
    let r1 =
        std::fs::read_to_string(fixtures().join("deepseek-ai--DeepSeek-R1/config.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&r1).unwrap();
    let with_ignore = |ignore: Vec<String>| {
        let mut v = v.clone();
        v["quantization_config"] = serde_json::json!({
            "quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
            "group_size": 16, "ignore": ignore,
        });
        v.to_string()
    };
    let mut ignore: Vec<String> = (0..61)
        .map(|i| format!("model.layers.{i}.self_attn*"))
        .collect();
    ignore.extend(["lm_head".to_string(), "model.layers.61*".to_string()]);
    let m = load_model(&write_config(dir.path(), "fp4", &with_ignore(ignore))).unwrap();
    let (w, f, kv) = resolve_formats(&m, None, KvDtype::Auto);
    assert_eq!((w, kv), (W::Fp4, KvDtype::Fp8));
    assert_eq!(
        (f.attention, f.dense, f.experts, f.mtp),
        (W::Bf16, W::Fp4, W::Fp4, W::Bf16)
    );
    assert_eq!(resolve_formats(&m, Some(W::Fp4), KvDtype::Auto).1, f);
    // Only the LM head left out: every layer, the MTP one included, in NVFP4.
    let m = load_model(&write_config(
        dir.path(),
        "all",
        &with_ignore(vec!["lm_head".into(), "model.layers.6*".into()]),
    ))
    .unwrap();
    let f = resolve_formats(&m, None, KvDtype::Auto).1;
    assert_eq!(
        (f.attention, f.dense, f.experts, f.mtp),
        (W::Fp4, W::Fp4, W::Fp4, W::Fp4)
    );
    // The catalog's DeepSeek-R1 (an FP8 checkpoint) run as `fp4`: the recipe's formats.
    let f = resolve_formats(
        &load_model("deepseek-r1").unwrap(),
        Some(W::Fp4),
        KvDtype::Auto,
    )
    .1;
    assert_eq!(
        (f.attention, f.dense, f.experts, f.mtp),
        (W::Bf16, W::Fp4, W::Fp4, W::Bf16)
    );
    assert_eq!(f.label(), "fp4 + bf16 attention");
    // A GQA model's NVFP4 checkpoint quantizes its attention (ModelOpt's default recipe).
    let f = resolve_formats(
        &load_model("qwen3-235b-a22b").unwrap(),
        Some(W::Fp4),
        KvDtype::Auto,
    )
    .1;
    assert_eq!(
        (f.attention, f.dense, f.experts, f.mtp),
        (W::Fp4, W::Fp4, W::Fp4, W::Bf16)
    );
}

/// An explicit `dtype` equal to the checkpoint's own format names that checkpoint, so its KV
/// follows the checkpoint's declaration as under `auto`: DeepSeek-V3's block-FP8 checkpoint
/// declares no KV format, so `fp8` with KV `auto` keeps a 16-bit KV cache (as vLLM's `auto`
/// does), the same as `dtype = auto`; an explicit KV format still wins. A model whose
/// checkpoint is 16-bit, run as `fp8`, is a converted (ModelOpt-style) checkpoint with an FP8
/// KV cache.
#[test]
fn naming_a_checkpoints_own_format_keeps_its_kv_declaration() {
    use servesim::precision::{KvDtype, WeightDtype as W};
    use servesim::scenario::resolve_formats;
    let v3 = load_model("deepseek-v3").unwrap();
    let auto = resolve_formats(&v3, None, KvDtype::Auto);
    let fp8 = resolve_formats(&v3, Some(W::Fp8), KvDtype::Auto);
    assert_eq!((auto.0, auto.2), (W::Fp8, KvDtype::Bf16));
    assert_eq!((fp8.0, fp8.2), (W::Fp8, KvDtype::Bf16));
    assert_eq!(
        resolve_formats(&v3, Some(W::Fp8), KvDtype::Fp8).2,
        KvDtype::Fp8
    );
    // A different format than the checkpoint's: the converted checkpoint's KV rule.
    assert_eq!(
        resolve_formats(&v3, Some(W::Bf16), KvDtype::Auto).2,
        KvDtype::Bf16
    );
    let llama = load_model("llama-3.1-8b").unwrap();
    assert_eq!(
        resolve_formats(&llama, Some(W::Fp8), KvDtype::Auto).2,
        KvDtype::Fp8
    );
}

/// `estimate`, `bench` and `fit-engine` default to `--dtype auto`, as a scenario does: a
/// checkpoint published in FP8 is estimated as published, and a 16-bit model as before.
#[test]
fn the_command_lines_dtype_defaults_to_the_checkpoints_own() {
    let estimate = |extra: &[&str]| {
        let mut args = vec![
            "estimate", "--gpu", "h200-sxm", "--tp", "8", "--format", "json",
        ];
        args.extend(extra);
        let (code, out, err) = servesim(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert_eq!(
        estimate(&["--model", "deepseek-v3"]),
        estimate(&["--model", "deepseek-v3", "--dtype", "fp8"])
    );
    assert_eq!(
        estimate(&["--model", "llama-3.1-8b"]),
        estimate(&["--model", "llama-3.1-8b", "--dtype", "bf16"])
    );
}

/// ModelOpt's DeepSeek recipe with `--enable_wo_quant` (the `-v2` NVFP4 checkpoints) lists each
/// layer's MLA projections but not `o_proj` among its unquantized modules: the O projection
/// runs NVFP4, the other attention projections BF16.
#[test]
fn an_exclude_list_without_o_proj_quantizes_the_output_projection_alone() {
    use servesim::precision::{KvDtype, WeightDtype as W};
    use servesim::scenario::resolve_formats;
    let dir = tempfile::tempdir().unwrap();
    let r1 =
        std::fs::read_to_string(fixtures().join("deepseek-ai--DeepSeek-R1/config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&r1).unwrap();
    let mut exclude: Vec<String> = (0..61)
        .flat_map(|i| {
            ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"]
                .map(|p| format!("model.layers.{i}.self_attn.{p}"))
        })
        .collect();
    exclude.extend(["lm_head".to_string(), "model.layers.61*".to_string()]);
    v["quantization_config"] = serde_json::json!({
        "quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": exclude,
    });
    let m = load_model(&write_config(dir.path(), "v2", &v.to_string())).unwrap();
    let f = resolve_formats(&m, None, KvDtype::Auto).1;
    assert_eq!(
        (f.attention, f.attention_out, f.dense, f.experts, f.mtp),
        (W::Bf16, W::Fp4, W::Fp4, W::Fp4, W::Bf16)
    );
    assert_eq!(f.label(), "fp4 + bf16 attention, fp4 O projection");
}

/// `deployment.checkpoint` runs a published checkpoint the catalog model declares: DeepSeek-R1's
/// `-0528-NVFP4-v2` holds its O projections in NVFP4, so each GPU of an attention-DP replica
/// (every rank holds the whole attention) holds 61 x 128 x 128 x 7168 O weights at 4.5 bits
/// instead of 16. A checkpoint the model does not declare, or a `dtype` other than the
/// checkpoint's, is an error naming the key.
#[test]
fn a_named_checkpoint_runs_its_own_module_formats() {
    use servesim::scenario::{resolve_deployment, DeploymentConfig, SchedulerOverrides};
    let dep = |checkpoint: Option<&str>, dtype: &str| {
        let mut t = toml::Table::new();
        for (k, v) in [
            ("model", "deepseek-r1"),
            ("gpu", "b200"),
            ("dtype", dtype),
            ("kv_cache_dtype", "fp8"),
            ("engine", "trtllm"),
        ] {
            t.insert(k.into(), toml::Value::String(v.into()));
        }
        t.insert("dp".into(), toml::Value::Integer(4));
        t.insert("ep".into(), toml::Value::Integer(4));
        if let Some(c) = checkpoint {
            t.insert("checkpoint".into(), toml::Value::String(c.into()));
        }
        let d: DeploymentConfig = t.try_into().unwrap();
        resolve_deployment(&d, &SchedulerOverrides::default(), "x.toml", None, None)
    };
    let v2 = "nvidia/DeepSeek-R1-0528-NVFP4-v2";
    let plain = dep(None, "fp4").unwrap().deployment;
    let named = dep(Some(v2), "fp4").unwrap().deployment;
    assert_eq!(
        dep(Some(v2), "auto").unwrap().deployment.formats,
        named.formats
    );
    assert_eq!(
        named.formats.label(),
        "fp4 + bf16 attention, fp4 O projection"
    );
    let o_params = 61.0 * 128.0 * 128.0 * 7168.0;
    let saved = plain.weight_bytes_per_gpu() - named.weight_bytes_per_gpu();
    let expected = o_params * (2.0 - servesim::precision::WeightDtype::Fp4.bytes());
    assert!(
        (saved / expected - 1.0).abs() < 1e-9,
        "{saved} vs {expected}"
    );
    let err = dep(Some("nvidia/DeepSeek-R1-FP4-v3"), "fp4")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deployment.checkpoint") && err.contains(v2),
        "{err}"
    );
    let err = dep(Some(v2), "fp8").unwrap_err().to_string();
    assert!(
        err.contains("deployment.checkpoint") && err.contains("fp4"),
        "{err}"
    );
}
