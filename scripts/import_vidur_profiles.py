#!/usr/bin/env python3
"""Writes calibration/reference/h100-vidur-kernels.csv from a checkout of microsoft/vidur.

Usage: scripts/import_vidur_profiles.py VIDUR_CHECKOUT > calibration/reference/h100-vidur-kernels.csv

Rows, in servesim's measurement format (docs/calibration.md):
- gemm: the qkv / o / gate+up / down projection medians of
  data/profiling/compute/h100/<model>/mlp.csv for five models at TP 1, 2, 4, 8 and a fixed
  grid of token counts, as GEMMs m = tokens by the projection's weight shape split by TP;
- allreduce: the NCCL all-reduce medians of data/profiling/network/h100_dgx/all_reduce.csv at
  TP 2, 4, 8 on a fixed grid of message sizes.
Vidur published medians only: p10_us and p90_us repeat the median. Nothing is edited.
"""
import csv
import subprocess
import sys

MODELS = [
    "meta-llama/Llama-2-7b-hf",
    "internlm/internlm-20b",
    "codellama/CodeLlama-34b-Instruct-hf",
    "meta-llama/Llama-2-70b-hf",
    "Qwen/Qwen-72B",
]
TOKENS = [1, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096]
AR_SIZES_MIB = [0.002, 0.0625, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64]
GPU = "NVIDIA H100 80GB HBM3"


def show(repo, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


def main():
    repo = sys.argv[1]
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    out = csv.writer(sys.stdout, lineterminator="\n")
    print("# Kernel rows transcribed by scripts/import_vidur_profiles.py from microsoft/vidur at")
    print(f"# commit {commit} (H100 80GB HBM3, profiled with sarathi-serve; medians only, so")
    print("# p10_us and p90_us repeat the median; driver unknown). gemm: per-layer projection")
    print("# medians of data/profiling/compute/h100/<model>/mlp.csv as GEMMs (m = tokens, the")
    print("# projection's weight shape split by TP). allreduce: NCCL medians of")
    print("# data/profiling/network/h100_dgx/all_reduce.csv (8xH100 DGX).")
    out.writerow(["kernel", "m", "n", "k", "batch", "context", "q_heads", "kv_heads", "head_dim",
                  "tp", "dtype", "gpu", "driver", "median_us", "p10_us", "p90_us", "bytes",
                  "flops", "source"])
    for model in MODELS:
        path = f"data/profiling/compute/h100/{model}/mlp.csv"
        rows = list(csv.DictReader(show(repo, path).splitlines()))
        seen = set()
        for r in rows:
            tp = int(r["num_tensor_parallel_workers"])
            m = int(r["num_tokens"])
            if m not in TOKENS or (tp, m) in seen:
                continue
            seen.add((tp, m))
            h = int(r["n_embd"])
            nh = int(r["n_head"])
            nkv = int(r["n_kv_head"])
            f = int(r["n_expanded_embd"])
            hd = h // nh
            gated = r["use_gated_mlp"] == "True"
            shapes = {
                "attn_pre_proj": ("qkv", (nh + 2 * nkv) * hd // tp, h),
                "attn_post_proj": ("o", h, nh * hd // tp),
                "mlp_up_proj": ("gate_up", (2 if gated else 1) * f // tp, h),
                "mlp_down_proj": ("down", h, f // tp),
            }
            for col, (name, n, k) in shapes.items():
                ms = float(r[f"time_stats.{col}.median"])
                us = round(ms * 1000.0, 3)
                byts = n * k * 2 + m * (n + k) * 2
                flops = 2 * m * n * k
                out.writerow(["gemm", m, n, k, "", "", "", "", "", "", "bf16", GPU, "", us, us, us,
                              byts, flops,
                              f"microsoft/vidur {path} ({model.split('/')[1]} TP{tp} {name})"])
    path = "data/profiling/network/h100_dgx/all_reduce.csv"
    rows = list(csv.DictReader(show(repo, path).splitlines()))
    for tp in (2, 4, 8):
        cand = [r for r in rows if int(r["num_workers"]) == tp and int(r["devices_per_node"]) == tp]
        for mib in AR_SIZES_MIB:
            target = mib * 1024 * 1024
            r = min(cand, key=lambda r: abs(int(r["size"]) - target))
            us = round(float(r["time_stats.all_reduce.median"]) * 1000.0, 3)
            out.writerow(["allreduce", "", "", "", "", "", "", "", "", tp, "bf16", GPU, "", us, us,
                          us, int(r["size"]), 0, f"microsoft/vidur {path} (TP{tp})"])


if __name__ == "__main__":
    main()
