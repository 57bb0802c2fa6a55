#!/usr/bin/env python3
"""Writes servesim `custom_allreduce` rows from an engine's all-reduce table in a checkout of
ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_allreduce.py AIC_CHECKOUT SYSTEM FRAMEWORK VERSION [fit|held-out] > FILE.csv
  e.g. AIC_CHECKOUT h100_sxm vllm 0.14.0            (held out, the default role)
       AIC_CHECKOUT h100_sxm vllm 0.19.0 fit        (rows scripts/fit_custom_allreduce.py fits)

Needs pyarrow (the tables are Parquet files). Reads
aic-core/src/aiconfigurator_core/systems/data/SYSTEM/comm/FRAMEWORK/VERSION/custom_allreduce_perf.parquet
(from the checkout's HEAD). The collector (collector/network/collect_all_reduce.py of that
repository, `benchmark_vllm_allreduce`) calls vLLM's `tensor_model_parallel_all_reduce` on a
BF16 tensor of `message_size` elements, i.e. whichever kernel vLLM picks at that size and TP
degree (its custom all-reduce, torch symmetric memory, NCCL), five calls captured in a CUDA
graph and replayed, the mean time per call; the `vllm_graph` rows are kept (the engine runs its
all-reduces inside piecewise CUDA graphs up to its capture size; the `vllm_eager` rows time a
Python call and a tensor clone each). Rows up to the engine's own-kernel limit at that TP
degree (vLLM 0.15 on SM 9.0: 64 MiB at TP 2, 32 MiB at TP 4, 64 MiB at TP 8, as
calibration/engines/vllm.toml's `custom_max_bytes_by_tp`), the range the step model prices
with its custom all-reduce; bytes = 2 x message_size. One figure per size: p10_us and p90_us
repeat it.
"""
import sys

import aiconfigurator

LIMITS = {"vllm": {2: 64 << 20, 4: 32 << 20, 8: 64 << 20}}
HEADER = "kernel,m,n,k,batch,context,q_heads,kv_heads,head_dim,tp,experts,top_k,dtype,gpu,driver,median_us,p10_us,p90_us,bytes,flops,source"


def main():
    repo, system, framework, version = sys.argv[1:5]
    role = sys.argv[5] if len(sys.argv) > 5 else "held-out"
    role_line = {
        "held-out": "Held out: no fit uses them.",
        "fit": "The rows scripts/fit_custom_allreduce.py fits the GPU profile's custom all-reduce on.",
    }[role]
    path = f"aic-core/src/aiconfigurator_core/systems/data/{system}/comm/{framework}/{version}/custom_allreduce_perf.parquet"
    commit = aiconfigurator.head_commit(repo)
    rows = aiconfigurator.table(repo, path)
    rows = [r for r in rows if r.get("backend") == f"{framework}_graph"]
    limits = LIMITS[framework]
    out = [
        f"# Written by scripts/import_aiconfigurator_allreduce.py from ai-dynamo/aiconfigurator at commit",
        f"# {commit}, {path}",
        f"# ({framework} {version}; device '{rows[0]['device']}'; latency in ms converted to us). The `{framework}_graph` rows",
        f"# (tensor_model_parallel_all_reduce, five calls captured in a CUDA graph, mean per call; message_size",
        f"# in BF16 elements, bytes = 2 x message_size) up to the engine's own-kernel limit per TP degree",
        f"# ({', '.join(f'TP {t}: {b >> 20} MiB' for t, b in sorted(limits.items()))}). {role_line}",
        HEADER,
    ]
    kept = 0
    for r in sorted(rows, key=lambda r: (r["num_gpus"], r["message_size"])):
        tp, size = r["num_gpus"], r["message_size"]
        byts = 2 * size
        if byts > limits.get(tp, 0):
            continue
        us = r["latency"] * 1e3
        src = f"ai-dynamo/aiconfigurator {commit[:12]} {path.split('/data/')[1]} ({framework}_graph, TP{tp}, {size} elements)"
        out.append(f"custom_allreduce,,,,,,,,,{tp},,,bf16,{r['device']},,{us:.4f},{us:.4f},{us:.4f},{byts},0,\"{src}\"")
        kept += 1
    sys.stdout.write("\n".join(out) + "\n")
    print(f"{kept} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
