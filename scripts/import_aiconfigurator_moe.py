#!/usr/bin/env python3
"""Writes the FP8 rows of TensorRT-LLM's CUTLASS MoE from a checkout of ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_moe.py AIC_CHECKOUT > calibration/reference/trtllm-1.2-cutlass-moe-fp8-aiconfigurator.csv

Needs pyarrow (the tables are Parquet files). Reads
aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/moe/trtllm/1.2.0rc5/moe_perf.parquet
at the checkout's HEAD and keeps the rows with moe_dtype fp8 (per-tensor FP8 weights and
activations), balanced routing, and the gated (SwiGLU) kernel: on the H100 the
`moe_torch_flow_cutlass` rows, on the H200 the `moe_torch_flow` ones (that table names no other
gated source). The collector (collector/trtllm/collect_moe.py of that repository) builds
TensorRT-LLM's MoE module with `create_moe` (routing, expand, the two grouped GEMMs,
activation, finalize; no all-reduce), autotunes it and times `forward` for `num_tokens` tokens
replayed from a CUDA graph; each GPU holds `num_experts / moe_ep_size` experts, each sliced
`moe_tp_size` ways. Latency in milliseconds, as the table has it.
"""
import io
import subprocess
import sys

import pyarrow.parquet as pq

SYSTEMS = {"h100_sxm": ("h100-sxm", "moe_torch_flow_cutlass"), "h200_sxm": ("h200-sxm", "moe_torch_flow")}
COLUMNS = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]


def main():
    repo = sys.argv[1]
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    print(f"# Written by scripts/import_aiconfigurator_moe.py from ai-dynamo/aiconfigurator at commit {commit},")
    print("# aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/moe/trtllm/1.2.0rc5/moe_perf.parquet:")
    print("# TensorRT-LLM 1.2.0rc5's MoE module (create_moe; CUTLASS grouped GEMMs on Hopper) timed from a CUDA")
    print("# graph by collector/trtllm/collect_moe.py; FP8 per-tensor rows, balanced routing, gated kernel.")
    print("# Each GPU holds num_experts / moe_ep_size experts sliced moe_tp_size ways; latency_ms per forward.")
    print("# Fit set: the H100 rows (`moe.cutlass.stream_fraction`); held out: the H200 rows. scripts/moe-cutlass-aic.sh")
    print("gpu," + ",".join(COLUMNS) + ",latency_ms")
    for system, (gpu, source) in SYSTEMS.items():
        path = f"aic-core/src/aiconfigurator_core/systems/data/{system}/moe/trtllm/1.2.0rc5/moe_perf.parquet"
        blob = subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True).stdout
        rows = [
            r
            for r in pq.read_table(io.BytesIO(blob)).to_pylist()
            if r["moe_dtype"] == "fp8" and r["distribution"] == "balanced" and r["kernel_source"] == source
        ]
        rows.sort(key=lambda r: tuple(r[c] for c in COLUMNS[1:] + COLUMNS[:1]))
        for r in rows:
            print(gpu + "," + ",".join(str(int(r[c])) for c in COLUMNS) + f",{r['latency']:.6f}")


if __name__ == "__main__":
    main()
