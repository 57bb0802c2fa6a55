#!/usr/bin/env python3
"""Writes the B200 TensorRT-LLM MLA context (prefill) rows of ai-dynamo/aiconfigurator as a CSV.

Usage:
  scripts/import_aiconfigurator_mla_context_b200.py AIC_CHECKOUT VERSION > FILE.csv
  e.g. VERSION 1.2.0rc5

Needs pyarrow. Rows: those of
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/trtllm/VERSION/context_mla_perf.parquet
with 128 query heads (DeepSeek-V3/R1's attention on one GPU, as each attention data-parallel
rank runs it) and prompts of 1,024 tokens or more, over a BF16 or an FP8 KV cache: the op on
`batch` prompts of `isl` tokens (q/k head dim 192, v head dim 128). `part`: `fit` for prompt
lengths 1,024, 2,048, 4,096, 8,192 and 12,288, `held-out` for the others (a split by shape).
Latency in ms converted to us.
"""
import sys

import aiconfigurator

FIT_ISL = {1024, 2048, 4096, 8192, 12288}


def main():
    repo, version = sys.argv[1:3]
    commit = aiconfigurator.head_commit(repo)
    path = (
        "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/trtllm/"
        f"{version}/context_mla_perf.parquet"
    )
    table = aiconfigurator.table(repo, path)
    rows = [r for r in table if r["num_heads"] == 128 and r["isl"] >= 1024]
    print("# Written by scripts/import_aiconfigurator_mla_context_b200.py from ai-dynamo/aiconfigurator")
    print(f"# at commit {commit}, {path}")
    print(f"# (TensorRT-LLM {version}, device 'NVIDIA B200', op mla_context): MLA prefill of `batch`")
    print("# prompts of `isl` tokens, 128 query heads, q/k head dim 192, v head dim 128.")
    print("# part: fit = isl 1024, 2048, 4096, 8192, 12288; held-out = the other lengths.")
    print("batch,isl,q_heads,kv_cache_dtype,latency_us,part,source")
    src = f"aiconfigurator@{commit[:10]} b200_sxm trtllm {version} context_mla_perf"
    for r in sorted(rows, key=lambda r: (r["kv_cache_dtype"], r["batch_size"], r["isl"])):
        part = "fit" if r["isl"] in FIT_ISL else "held-out"
        kv = {"bfloat16": "bf16", "fp8": "fp8"}[r["kv_cache_dtype"]]
        print(
            f"{r['batch_size']},{r['isl']},{r['num_heads']},{kv},"
            f"{r['latency'] * 1000.0:.3f},{part},\"{src}\""
        )


if __name__ == "__main__":
    main()
