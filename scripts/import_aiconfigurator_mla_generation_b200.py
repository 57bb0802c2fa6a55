#!/usr/bin/env python3
"""Writes the B200 TensorRT-LLM MLA generation (decode) rows of ai-dynamo/aiconfigurator as a CSV.

Usage:
  scripts/import_aiconfigurator_mla_generation_b200.py AIC_CHECKOUT VERSION > FILE.csv
  e.g. VERSION 1.2.0rc5

Needs pyarrow. Rows: those of
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/trtllm/VERSION/generation_mla_perf.parquet
with 128 query heads (DeepSeek-V3/R1's attention on one GPU: tensor-parallel size 1, as every
attention data-parallel rank runs it) and at least 2^17 cached tokens over the batch
(batch x context), over a BF16 or an FP8 KV cache. Context = isl + step. `part`: `fit` for the
rows of 2^20 cached tokens and more (where the kernel's math or its KV read, not its fixed
time, sets the time), `held-out` for those of 2^17 to 2^20. Latency in ms converted to us.
"""
import sys

import aiconfigurator


def main():
    repo, version = sys.argv[1:3]
    commit = aiconfigurator.head_commit(repo)
    path = (
        "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/trtllm/"
        f"{version}/generation_mla_perf.parquet"
    )
    table = aiconfigurator.table(repo, path)
    rows = [
        r
        for r in table
        if r["num_heads"] == 128 and r["batch_size"] * (r["isl"] + r["step"]) >= 2**17
    ]
    print("# Written by scripts/import_aiconfigurator_mla_generation_b200.py from ai-dynamo/aiconfigurator")
    print(f"# at commit {commit}, {path}")
    print(f"# (TensorRT-LLM {version}, device 'NVIDIA B200', op mla_generation): one MLA decode step of")
    print("# `batch` sequences of `context` cached tokens, 128 query heads, KV latent 512 + rope 64.")
    print("# part: fit = batch x context >= 2^20, held-out = 2^17 to 2^20.")
    print("batch,context,q_heads,kv_cache_dtype,latency_us,part,source")
    src = f"aiconfigurator@{commit[:10]} b200_sxm trtllm {version} generation_mla_perf"
    key = lambda r: (r["kv_cache_dtype"], r["batch_size"], r["isl"] + r["step"])
    for r in sorted(rows, key=key):
        ctx = r["isl"] + r["step"]
        part = "fit" if r["batch_size"] * ctx >= 2**20 else "held-out"
        kv = {"bfloat16": "bf16", "fp8": "fp8"}[r["kv_cache_dtype"]]
        print(
            f"{r['batch_size']},{ctx},{r['num_heads']},{kv},"
            f"{r['latency'] * 1000.0:.3f},{part},\"{src}\""
        )


if __name__ == "__main__":
    main()
