#!/usr/bin/env python3
"""Writes servesim GEMM rows from the B200 TensorRT-LLM GEMM table of ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_gemm_b200.py AIC_CHECKOUT VERSION [fit|held-out|all] > FILE.csv
  e.g. AIC_CHECKOUT 1.2.0rc5 all

Needs pyarrow. Rows, in servesim's measurement format (docs/calibration.md): the BF16, FP8
(per-tensor, dynamic) and NVFP4 rows of
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/gemm/trtllm/VERSION/gemm_perf.parquet
whose N and K are both LLM projection sizes (SIZES) at the M of GRID. The collector
(collector/trtllm/collect_gemm.py) times TensorRT-LLM's own `Linear` module forward on BF16
input, so an FP8 or NVFP4 row includes the kernel that quantizes the activations (FP8: the
dynamic scale as well); it builds up to five copies of a small layer so that the weights do
not stay in L2, and divides the time by the copies. One figure per shape: p10_us and p90_us
repeat it. `dtype` is the table's (fp8 -> fp8, nvfp4 -> nvfp4). The split: `fit` keeps the
shapes whose N and K grid positions sum to an even number, `held-out` the others.
"""
import sys

import aiconfigurator

GRID = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
SIZES = [2560, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384]
DTYPES = {"bfloat16": ("bf16", 2.0), "fp8": ("fp8", 1.0), "nvfp4": ("nvfp4", 0.5 + 1.0 / 16.0)}
ACT_BYTES = 2


def main():
    repo, version = sys.argv[1:3]
    part = sys.argv[3] if len(sys.argv) > 3 else "all"
    commit = aiconfigurator.head_commit(repo)
    path = (
        "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/gemm/trtllm/"
        f"{version}/gemm_perf.parquet"
    )
    table = aiconfigurator.table(repo, path)
    rows = [
        r
        for r in table
        if r["gemm_dtype"] in DTYPES and r["n"] in SIZES and r["k"] in SIZES and r["m"] in GRID
    ]
    print("# Written by scripts/import_aiconfigurator_gemm_b200.py from ai-dynamo/aiconfigurator at commit")
    print(f"# {commit}, {path}")
    print(f"# (TensorRT-LLM {version}, device 'NVIDIA B200'; latency in ms converted to us). Linear-module")
    print("# forward on BF16 input (FP8 and NVFP4 rows include the activation quantization); N, K in")
    print(f"# {SIZES}, M in {GRID}; part: {part} (checkerboard over N and K grid")
    print("# positions: fit = even sum, held-out = odd).")
    print(
        "kernel,m,n,k,batch,context,q_heads,kv_heads,head_dim,tp,experts,top_k,dtype,gpu,driver,"
        "median_us,p10_us,p90_us,bytes,flops,source"
    )
    for r in sorted(rows, key=lambda r: (r["gemm_dtype"], r["n"], r["k"], r["m"])):
        m, n, k = r["m"], r["n"], r["k"]
        even = (SIZES.index(n) + SIZES.index(k)) % 2 == 0
        if (part == "fit" and not even) or (part == "held-out" and even):
            continue
        dtype, wb = DTYPES[r["gemm_dtype"]]
        us = r["latency"] * 1000.0
        nbytes = int(n * k * wb + m * (k + n) * ACT_BYTES)
        src = f"ai-dynamo/aiconfigurator trtllm {version} gemm_perf (b200_sxm {commit[:10]}, {r['kernel_source']}, Linear forward)"
        print(
            f"gemm,{m},{n},{k},,,,,,,,,{dtype},{r['device']},,{us:.3f},{us:.3f},{us:.3f},{nbytes},{2 * m * n * k},\"{src}\""
        )


if __name__ == "__main__":
    main()
