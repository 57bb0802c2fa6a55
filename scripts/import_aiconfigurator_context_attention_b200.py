#!/usr/bin/env python3
"""Writes the B200 TensorRT-LLM context-attention rows of ai-dynamo/aiconfigurator as a CSV.

Usage:
  scripts/import_aiconfigurator_context_attention_b200.py AIC_CHECKOUT VERSION > FILE.csv
  e.g. AIC_CHECKOUT 1.2.0rc5

Needs pyarrow. Rows: those of
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/attention/trtllm/VERSION/context_attention_perf.parquet
with head dim 128, no sliding window, prompts of 1,024 tokens or more and BF16 attention math (over a BF16 or an FP8 KV cache).
The collector (collector/trtllm/collect_attn.py) runs TensorRT-LLM's own attention module on a
batch of `batch` prompts of `isl` tokens each and times CUDA-graph replays
(collector/helper.py benchmark_with_power). `part`: `fit` for the q-head counts of even rank in
the table's sorted list of q-head counts, `held-out` for the others (a split by shape).
Latency in ms converted to us.
"""
import sys

import aiconfigurator


def main():
    repo, version = sys.argv[1:3]
    commit = aiconfigurator.head_commit(repo)
    path = (
        "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/attention/trtllm/"
        f"{version}/context_attention_perf.parquet"
    )
    table = aiconfigurator.table(repo, path)
    rows = [
        r
        for r in table
        if r["head_dim"] == 128 and r["window_size"] == 0 and r["attn_dtype"] == "bfloat16"
        and r["isl"] >= 1024
    ]
    heads = sorted({r["num_heads"] for r in rows})
    print("# Written by scripts/import_aiconfigurator_context_attention_b200.py from ai-dynamo/aiconfigurator")
    print(f"# at commit {commit}, {path}")
    print(f"# (TensorRT-LLM {version}, device 'NVIDIA B200'): the attention module on `batch` prompts of")
    print("# `isl` tokens (1,024 and more), CUDA-graph replays; head dim 128, no window, BF16 attention math.")
    print("# part: fit = q-head counts of even rank (1-based) in the sorted list, held-out = the others.")
    print("batch,isl,q_heads,kv_heads,head_dim,kv_cache_dtype,latency_us,part,source")
    src = f"aiconfigurator@{commit[:10]} b200_sxm trtllm {version} context_attention_perf"
    for r in sorted(rows, key=lambda r: (r["kv_cache_dtype"], r["num_heads"], r["num_key_value_heads"], r["batch_size"], r["isl"])):
        part = "fit" if (heads.index(r["num_heads"]) + 1) % 2 == 0 else "held-out"
        kv = {"bfloat16": "bf16", "fp8": "fp8"}[r["kv_cache_dtype"]]
        print(
            f"{r['batch_size']},{r['isl']},{r['num_heads']},{r['num_key_value_heads']},128,{kv},"
            f"{r['latency'] * 1000.0:.3f},{part},\"{src}\""
        )


if __name__ == "__main__":
    main()
