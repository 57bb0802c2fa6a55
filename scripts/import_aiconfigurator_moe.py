#!/usr/bin/env python3
"""Writes the FP8 rows of TensorRT-LLM's CUTLASS MoE from a checkout of ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_moe.py AIC_CHECKOUT > calibration/reference/trtllm-1.2-cutlass-moe-fp8-aiconfigurator.csv
  scripts/import_aiconfigurator_moe.py AIC_CHECKOUT w4a16_mxfp4 > calibration/reference/trtllm-1.2-mxfp4-w4a16-moe-aiconfigurator.csv

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

With `w4a16_mxfp4` it writes the MXFP4-weight, BF16-activation rows instead (gpt-oss's expert
shape: hidden 2880, inter 2880, top-4 of 32 or 128 experts; kernel_source `moe_torch_flow` on
both GPUs). For those the collector (at the commits that wrote the 1.2.0rc5 tables, e.g.
d9533cb07 "add w4a16_mxfp4 moe data", and still at 095f58a51c4c) sets
`model_config.moe_backend = "triton"` on Hopper: TensorRT-LLM's TritonFusedMoE, which runs
OpenAI's triton_kernels `matmul_ogs` (routing kernels, a gather+SwiGLU grouped GEMM and a
scatter grouped GEMM, MXFP4 weights dequantized to BF16 in the main loop; no autotuning, the
collector skips it for this format), the backend TensorRT-LLM serves gpt-oss with on Hopper.
"""
import sys

import aiconfigurator

SYSTEMS = {"h100_sxm": ("h100-sxm", "moe_torch_flow_cutlass"), "h200_sxm": ("h200-sxm", "moe_torch_flow")}
COLUMNS = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]


def write_rows(repo, keep):
    """Prints the header and, per GPU, the balanced-routing rows of its 1.2.0rc5 MoE table that
    `keep(row, gated_kernel_source)` accepts, sorted by shape then tokens."""
    print("gpu," + ",".join(COLUMNS) + ",latency_ms")
    for system, (gpu, source) in SYSTEMS.items():
        path = f"aic-core/src/aiconfigurator_core/systems/data/{system}/moe/trtllm/1.2.0rc5/moe_perf.parquet"
        blob = aiconfigurator.table(repo, path)
        rows = [r for r in blob if r["distribution"] == "balanced" and keep(r, source)]
        rows.sort(key=lambda r: tuple(r[c] for c in COLUMNS[1:] + COLUMNS[:1]))
        for r in rows:
            print(gpu + "," + ",".join(str(int(r[c])) for c in COLUMNS) + f",{r['latency']:.6f}")


def main_mxfp4(repo, commit):
    print(f"# Written by scripts/import_aiconfigurator_moe.py (w4a16_mxfp4) from ai-dynamo/aiconfigurator at commit {commit},")
    print("# aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/moe/trtllm/1.2.0rc5/moe_perf.parquet:")
    print("# TensorRT-LLM 1.2.0rc5's MoE module with MXFP4 weights and BF16 activations (moe_dtype w4a16_mxfp4), run by")
    print("# the collector (collector/trtllm/collect_moe.py) on the Triton backend on Hopper (TritonFusedMoE: OpenAI")
    print("# triton_kernels matmul_ogs, weights dequantized in the main loop), timed from a CUDA graph; balanced routing.")
    print("# Each GPU holds num_experts / moe_ep_size experts sliced moe_tp_size ways; latency_ms per forward.")
    print("# Fit set: the H100 rows (`moe.mxfp4_w4a16`); held out: the H200 rows. examples/mxfp4_moe_rows.rs")
    write_rows(repo, lambda r, _: r["moe_dtype"] == "w4a16_mxfp4")


def main():
    repo = sys.argv[1]
    commit = aiconfigurator.head_commit(repo)
    if len(sys.argv) > 2 and sys.argv[2] == "w4a16_mxfp4":
        main_mxfp4(repo, commit)
        return
    print(f"# Written by scripts/import_aiconfigurator_moe.py from ai-dynamo/aiconfigurator at commit {commit},")
    print("# aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/moe/trtllm/1.2.0rc5/moe_perf.parquet:")
    print("# TensorRT-LLM 1.2.0rc5's MoE module (create_moe; CUTLASS grouped GEMMs on Hopper) timed from a CUDA")
    print("# graph by collector/trtllm/collect_moe.py; FP8 per-tensor rows, balanced routing, gated kernel.")
    print("# Each GPU holds num_experts / moe_ep_size experts sliced moe_tp_size ways; latency_ms per forward.")
    print("# Fit set: the H100 rows (`moe.cutlass.stream_fraction`); held out: the H200 rows. scripts/moe-cutlass-aic.sh")
    write_rows(repo, lambda r, source: r["moe_dtype"] == "fp8" and r["kernel_source"] == source)


if __name__ == "__main__":
    main()
