#!/usr/bin/env python3
"""Writes the B200 rows of TensorRT-LLM's CUTLASS MoE (NVFP4 and FP8) from a checkout of ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_moe_b200.py AIC_CHECKOUT > calibration/reference/trtllm-1.2-cutlass-moe-b200-aiconfigurator.csv

Needs pyarrow (the tables are Parquet files). Reads
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet at
the checkout's HEAD and keeps the `moe_torch_flow_cutlass` rows (TensorRT-LLM's CUTLASS MoE
backend, gated SwiGLU kernel, the backend the perf-overview's DeepSeek-R1 rows name) with
balanced routing and moe_dtype nvfp4 (NVFP4 weights and activations, one FP8 scale per 16) or
fp8 (per-tensor FP8). The collector (collector/trtllm/collect_moe.py of that repository) builds
TensorRT-LLM's MoE module with `create_moe` (routing, expand, the two grouped GEMMs, activation,
finalize; no all-reduce), autotunes it and times `forward` for `num_tokens` tokens replayed
from a CUDA graph; each GPU holds `num_experts / moe_ep_size` experts, each sliced
`moe_tp_size` ways. Latency in milliseconds, as the table has it. Same release and collector
as scripts/import_aiconfigurator_moe.py's H100/H200 FP8 rows.
"""
import sys

import aiconfigurator

PATH = "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet"
COLUMNS = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
DTYPES = {"nvfp4": "fp4", "fp8": "fp8"}


def main():
    repo = sys.argv[1]
    commit = aiconfigurator.head_commit(repo)
    print(f"# Written by scripts/import_aiconfigurator_moe_b200.py from ai-dynamo/aiconfigurator at commit {commit},")
    print(f"# {PATH}:")
    print("# TensorRT-LLM 1.2.0rc5's MoE module (create_moe, CUTLASS backend: moe_torch_flow_cutlass) on a B200, timed")
    print("# from a CUDA graph by collector/trtllm/collect_moe.py; NVFP4 (dtype fp4) and per-tensor FP8 rows, balanced")
    print("# routing, gated kernel. Each GPU holds num_experts / moe_ep_size experts sliced moe_tp_size ways;")
    print("# latency_ms per forward. Fit set: the rows of hidden_size other than 7168; held out: hidden_size 7168")
    print("# (DeepSeek-V3/R1's experts). examples/cutlass_moe_b200_rows.rs")
    print("gpu,dtype," + ",".join(COLUMNS) + ",latency_ms")
    blob = aiconfigurator.table(repo, PATH)
    rows = [
        r
        for r in blob
        if r["moe_dtype"] in DTYPES
        and r["distribution"] == "balanced"
        and r["kernel_source"] == "moe_torch_flow_cutlass"
    ]
    rows.sort(key=lambda r: (r["moe_dtype"],) + tuple(r[c] for c in COLUMNS[1:] + COLUMNS[:1]))
    for r in rows:
        print("b200," + DTYPES[r["moe_dtype"]] + "," + ",".join(str(int(r[c])) for c in COLUMNS) + f",{r['latency']:.6f}")


if __name__ == "__main__":
    main()
