#!/usr/bin/env python3
"""Writes servesim GEMM rows from the GEMM tables of a checkout of ai-dynamo/aiconfigurator.

Usage:
  scripts/import_aiconfigurator_gemm.py AIC_CHECKOUT SYSTEM FRAMEWORK VERSION [fit|held-out|all] > FILE.csv
  e.g. AIC_CHECKOUT h100_sxm vllm 0.14.0 all

Needs pyarrow (the tables are Parquet files). Rows, in servesim's measurement format
(docs/calibration.md): the BF16 rows of
aic-core/src/aiconfigurator_core/systems/data/SYSTEM/gemm/FRAMEWORK/VERSION/gemm_perf.parquet
at the M of the vLLM 0.14.0 H100 table's grid (1 to 8192; later tables add M + 1 and more
points between, left out to keep the files small) whose N and K are both LLM projection sizes (2048 to 16384 in the table's grid: the projections of 7B-70B models at TP 1-4), at every M
of the grid. The collector (collector/vllm/collect_gemm.py of that repository) builds six
RowParallelLinear layers of the shape with distinct weights (torch.nn.functional.linear,
i.e. cuBLAS, for BF16), replays them from a CUDA graph and divides the mean time by six, so
each row is one GEMM among others of a forward pass (no weight reuse in L2). One figure per
shape: p10_us and p90_us repeat it.

Left out, with the rule printed in the header: a row that took more than 1.2 times as long
as the same shape at the grid's first M of at least twice its M (a GEMM does not get cheaper
with twice the rows; the 20% spares the weight-bound rows at small M, whose times are equal
within noise): a glitch of that run.

The split: `fit` keeps the shapes whose N and K grid positions sum to an even number (a
checkerboard over the shapes), `held-out` the others, `all` both.
"""
import sys

import aiconfigurator

M_GRID = [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 2048, 4096, 8192]
SIZES = [2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384]
ACT_BYTES = 2


def main():
    repo, system, framework, version = sys.argv[1:5]
    part = sys.argv[5] if len(sys.argv) > 5 else "all"
    commit = aiconfigurator.head_commit(repo)
    path = (
        f"aic-core/src/aiconfigurator_core/systems/data/{system}/gemm/{framework}/{version}/"
        "gemm_perf.parquet"
    )
    table = aiconfigurator.table(repo, path)
    rows = [
        r
        for r in table
        if r["gemm_dtype"] == "bfloat16" and r["n"] in SIZES and r["k"] in SIZES and r["m"] in M_GRID
    ]
    by_shape = {}
    for r in rows:
        by_shape.setdefault((r["n"], r["k"]), {})[r["m"]] = r
    kept, dropped = [], 0
    for (n, k), per_m in sorted(by_shape.items()):
        ms = sorted(per_m)
        even = (SIZES.index(n) + SIZES.index(k)) % 2 == 0
        if (part == "fit" and not even) or (part == "held-out" and even):
            continue
        for i, m in enumerate(ms):
            nxt = next((x for x in ms[i + 1 :] if x >= 2 * m), None)
            if nxt is not None and per_m[m]["latency"] > 1.2 * per_m[nxt]["latency"]:
                dropped += 1
                continue
            kept.append(per_m[m])
    device = rows[0]["device"] if rows else ""
    print(f"# Written by scripts/import_aiconfigurator_gemm.py from ai-dynamo/aiconfigurator at commit")
    print(f"# {commit}, {path}")
    versions = ", ".join(sorted({r["version"] for r in rows}))
    print(f"# ({framework} {version}, the table's version column: {versions}; device '{device}'; latency in")
    print("# ms converted to us). BF16 rows with N and K in")
    print(f"# {SIZES}, M in {M_GRID[0]}..{M_GRID[-1]} (the 0.14.0 H100 grid); part: {part} (checkerboard over the")
    print(f"# shapes' N and K grid positions: fit = even sum, held-out = odd). {dropped} rows left out: each")
    print("# took over 1.2x as long as the same shape at the grid's first M of at least twice its M (a glitch).")
    print(
        "kernel,m,n,k,batch,context,q_heads,kv_heads,head_dim,tp,experts,top_k,dtype,gpu,driver,"
        "median_us,p10_us,p90_us,bytes,flops,source"
    )
    for r in sorted(kept, key=lambda r: (r["n"], r["k"], r["m"])):
        m, n, k = r["m"], r["n"], r["k"]
        us = r["latency"] * 1000.0
        nbytes = n * k * 2 + m * (k + n) * ACT_BYTES
        flops = 2 * m * n * k
        src = (
            f"ai-dynamo/aiconfigurator {framework} {version} gemm_perf ({system} {commit[:10]}, "
            f"{r['kernel_source']}, CUDA graph of six layers)"
        )
        print(
            f"gemm,{m},{n},{k},,,,,,,,,bf16,{device},,{us:.3f},{us:.3f},{us:.3f},{nbytes},{flops},\"{src}\""
        )


if __name__ == "__main__":
    main()
