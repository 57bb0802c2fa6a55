#!/usr/bin/env python3
"""Writes servesim paged-decode-attention rows from the attention tables of a checkout of
ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_decode_attention.py AIC_CHECKOUT SYSTEM VERSION [bf16|fp8] [mid] > FILE.csv
  e.g. AIC_CHECKOUT h100_sxm 0.14.0 bf16
       AIC_CHECKOUT h100_sxm 0.14.0 bf16 mid   (the held-out band below)

Needs pyarrow (the tables are Parquet files). Rows, in servesim's measurement format
(docs/calibration.md): the rows of
aic-core/src/aiconfigurator_core/systems/data/SYSTEM/attention/vllm/VERSION/generation_attention_perf.parquet
with head_dim 128, no sliding window and the given KV-cache format, whose time is the GPU's
(`step` + 1 cached tokens per sequence: the collector's `step` is the history before the query
token):
- batch <= 256 and at least 4 x the 50 MB L2 of KV in the batch (200 MB). The collector
  (collector/helper.py, benchmark_with_power) times back-to-back replays of a CUDA graph
  holding this one layer's kernels, launched one by one from Python, over the same KV: rows
  with little KV sit on a floor of 10-12 us whatever the batch (1-16), context and GPU (H100
  and H200 alike), the rate of the replays' host launches rather than the kernels' fixed time;
  and between that and 200 MB part of the KV stays in L2 across replays (rows run up to
  3.6 TB/s, above the HBM datasheet), which a serving step, reading every layer's KV in turn,
  does not see. Batches over 256 at short contexts pay a per-sequence cost the profile does
  not model (67 us at batch 256 and 446 us at 2048 with 1-64 cached tokens, vLLM 0.14 H100).
- at least 4 KV heads: with 1 or 2 KV heads and batches under 32 the vLLM 0.14 tables (H100,
  H200) and the vLLM 0.19 H200 table run the read at 30-70% of the bandwidth the other rows
  reach, the vLLM 0.19 H100 table does not (a split-KV launch choice that differs between the
  collections, which the profile does not model); Llama-3 models at TP 1-2 have 8 or 4.
With `mid`: the band the rows above leave out by their KV, from one L2 (50 MB) to 4 x the L2
(200 MB), batch <= 256, every KV-head count (1-8). These are the sizes of a large model's
decode at high TP (Llama-2-70B at TP 4, 2 KV heads per GPU: 16-80 MB per layer at 22-110
sequences of 715 tokens). Their times sit above the collector's launch floor (35 us and up),
but part of their KV may stay in L2 across the replays, so they are lower bounds on what a
serving step pays, and the 1-2 KV-head rows of the vLLM 0.14 tables carry the split-KV choice
above. They go into no fit: they score the profile's decode term where the fitted rows do not
reach (docs/calibration.md, "Paged decode attention").
What is timed (collector/vllm/collect_attn.py of that repository): one decoder layer's
`impl.forward` of vLLM's FLASH_ATTN backend (the vllm_flash_attn FlashAttention-3 build on
Hopper) with its KV-cache write (`do_kv_cache_update`, reshape_and_cache) for one query token
per sequence, every sequence at the same length, KV pages of 64 tokens, BF16 queries (an FP8
query is cast before the timed region). One figure per shape: p10_us and p90_us repeat it.
The `dtype` column is the KV-cache format; servesim's kernel predictor for this class prices
BF16 KV (2 bytes per element), so only `bf16` files go into `servesim fit`.
"""
import sys

import aiconfigurator

HEAD_DIM = 128
L2_BYTES = 50e6
HBM_MAX_BATCH, HBM_MIN_BYTES = 256, 4 * L2_BYTES
MIN_KV_HEADS = 4
GPU_NAMES = {"h100_sxm": "NVIDIA H100 80GB HBM3", "h200_sxm": "NVIDIA H200"}


def main():
    repo, system, version = sys.argv[1:4]
    kv = sys.argv[4] if len(sys.argv) > 4 else "bf16"
    mid = len(sys.argv) > 5 and sys.argv[5] == "mid"
    kv_name = {"bf16": "bfloat16", "fp8": "fp8"}[kv]
    commit = aiconfigurator.head_commit(repo)
    path = (
        f"aic-core/src/aiconfigurator_core/systems/data/{system}/attention/vllm/{version}/"
        "generation_attention_perf.parquet"
    )
    blob = aiconfigurator.table(repo, path)
    elem_bytes = 2 if kv == "bf16" else 1

    def kv_bytes(r):
        b, ctx = r["batch_size"], r["step"] + 1
        return b * ctx * 2 * r["num_key_value_heads"] * HEAD_DIM * elem_bytes

    def kept(r):
        if r["head_dim"] != HEAD_DIM or r.get("window_size", 0) != 0:
            return False
        if r["kv_cache_dtype"] != kv_name or r["batch_size"] > HBM_MAX_BATCH:
            return False
        if mid:
            return L2_BYTES <= kv_bytes(r) < HBM_MIN_BYTES
        return r["num_key_value_heads"] >= MIN_KV_HEADS and kv_bytes(r) >= HBM_MIN_BYTES

    # Some tables hold a shape twice (two runs): the median of its figures.
    shapes = {}
    for r in blob:
        if kept(r):
            key = (r["num_heads"], r["num_key_value_heads"], r["batch_size"], r["step"])
            shapes.setdefault(key, []).append(r)
    source = (
        f"ai-dynamo/aiconfigurator@{commit[:12]} {system}/attention/vllm/{version}/"
        "generation_attention_perf.parquet"
    )
    print(f"# {source}")
    if mid:
        band = (
            f"{L2_BYTES:.0f} B <= KV < {HBM_MIN_BYTES:.0f} B, every KV-head count; held out: "
            "lower bounds on a serving step's time (part of the KV may stay in L2 across replays)"
        )
    else:
        band = f"KV >= {HBM_MIN_BYTES:.0f} B, >= {MIN_KV_HEADS} KV heads"
    print(
        f"# vLLM {version} FLASH_ATTN decode with its KV-cache write (collector/vllm/collect_attn.py), "
        f"{kv} KV, head_dim {HEAD_DIM}; batch <= {HBM_MAX_BATCH}, {band}; "
        "written by scripts/import_aiconfigurator_decode_attention.py"
    )
    print(
        "kernel,m,n,k,batch,context,q_heads,kv_heads,head_dim,tp,experts,top_k,dtype,gpu,driver,"
        "median_us,p10_us,p90_us,bytes,flops,source"
    )
    for key in sorted(shapes):
        group = shapes[key]
        lat = sorted(x["latency"] for x in group)
        r = group[0]
        b, ctx = r["batch_size"], r["step"] + 1
        qh, kvh = r["num_heads"], r["num_key_value_heads"]
        us = (lat[(len(lat) - 1) // 2] + lat[len(lat) // 2]) / 2 * 1e3
        nbytes = kv_bytes(r)
        flops = 4 * b * ctx * qh * HEAD_DIM
        print(
            f"paged_decode_attention,,,,{b},{ctx},{qh},{kvh},{HEAD_DIM},,,,{kv},"
            f"{GPU_NAMES[system]},,{us:.3f},{us:.3f},{us:.3f},{nbytes},{flops},\"{source}\""
        )


if __name__ == "__main__":
    main()
