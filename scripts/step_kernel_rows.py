#!/usr/bin/env python3
"""One decode step's kernels summed from vLLM's own kernel tables, against the step model's terms.

Usage:
  scripts/step_kernel_rows.py AIC_CHECKOUT VERSION [BATCH ...]
  e.g. AIC_CHECKOUT 0.14.0 22 48 110   (needs pyarrow and a release build of servesim)

For Llama-2-7B TP 1, CodeLlama-34B TP 2 and Llama-2-70B TP 4 on an H100 SXM (the vLLM
configurations of calibration/reference/serving-measurements.csv and the inference-sim files),
at each batch of decoding sequences of 715 tokens (the V-A campaign's mean context), sums over
the layers the times ai-dynamo/aiconfigurator's vLLM tables (h100_sxm, VERSION) give for the
step's kernels: the four BF16 weight GEMMs (gemm_perf.parquet; linear in m between the tabled
token counts, and in n, or k, between the tabled shapes around an untabled one), the decode
attention (generation_attention_perf.parquet; linear in batch and context; a head count the
table lacks is read as 8/8 heads at the batch that gives the same KV bytes) and the two
all-reduces per layer (custom_allreduce_perf.parquet, vllm_graph; linear in bytes). Prints them
beside `servesim estimate`'s gemm_s, attention_s and allreduce_s for the same step, and the
model's total less the rows' (positive: the model is slow). The small ops, the LM head and the
host are not in the sum.
"""
import bisect
import json
import os
import subprocess
import sys

import aiconfigurator

SERVESIM = os.path.join(os.path.dirname(__file__), "..", "target", "release", "servesim")
DATA = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm"
CONTEXT = 715
# name: (tp, hidden, layers, q heads, kv heads, intermediate)
CONFIGS = {
    "llama-2-7b": (1, 4096, 32, 32, 32, 11008),
    "codellama-34b": (2, 8192, 48, 64, 8, 22016),
    "llama-2-70b": (4, 8192, 80, 64, 8, 28672),
}


def lin(xs, x, f):
    """f at x, linear between the two tabled xs around it (the nearest end outside)."""
    xs = sorted(xs)
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return f(x)
    lo, hi = xs[max(i - 1, 0)], xs[min(i, len(xs) - 1)]
    if lo == hi:
        return f(lo)
    return f(lo) + (f(hi) - f(lo)) * (x - lo) / (hi - lo)


def tables(repo, version):
    gemm = {}
    for r in aiconfigurator.table(repo, f"{DATA}/gemm/vllm/{version}/gemm_perf.parquet"):
        if r["gemm_dtype"] == "bfloat16":
            gemm[(r["m"], r["n"], r["k"])] = r["latency"] * 1e-3
    attn = {}
    path = f"{DATA}/attention/vllm/{version}/generation_attention_perf.parquet"
    for r in aiconfigurator.table(repo, path):
        if r["head_dim"] == 128 and r.get("window_size", 0) == 0 and r["kv_cache_dtype"] == "bfloat16":
            key = (r["num_heads"], r["num_key_value_heads"], r["batch_size"], r["step"] + 1)
            attn.setdefault(key, []).append(r["latency"] * 1e-3)
    ar = {}
    for r in aiconfigurator.table(repo, f"{DATA}/comm/vllm/{version}/custom_allreduce_perf.parquet"):
        if r.get("backend") == "vllm_graph":
            ar[(r["num_gpus"], r["message_size"] * 2)] = r["latency"] * 1e-3
    return gemm, attn, ar


def step_rows(t, name, batch):
    gemm, attn, ar = t
    tp, h, layers, qh, kvh, inter = CONFIGS[name]
    ms = sorted({m for m, _, _ in gemm})

    def g(m, n, k):
        ns = sorted({b for _, b, c in gemm if c == k})
        if not ns:
            return lin(sorted({c for _, _, c in gemm}), k, lambda kk: g(m, n, kk))
        return lin(ns, n, lambda nn: lin(ms, m, lambda mm: gemm[(mm, nn, k)]))

    def a(q, kv, b, ctx):
        if not any(x[0] == q and x[1] == kv for x in attn):
            return a(8, 8, b * kv // 8, ctx)
        keys = [x for x in attn if x[0] == q and x[1] == kv]
        med = lambda v: sorted(v)[len(v) // 2]
        return lin(
            sorted({x[2] for x in keys}),
            b,
            lambda bb: lin(
                sorted(x[3] for x in keys if x[2] == bb), ctx, lambda cc: med(attn[(q, kv, bb, cc)])
            ),
        )

    def r(nbytes):
        if tp == 1:
            return 0.0
        return lin(sorted(x[1] for x in ar if x[0] == tp), nbytes, lambda z: ar[(tp, z)])

    hd = 128
    gemms = g(batch, (qh + 2 * kvh) * hd // tp, h) + g(batch, h, qh * hd // tp)
    gemms += g(batch, 2 * inter // tp, h) + g(batch, h, inter // tp)
    return layers * gemms, layers * a(qh // tp, kvh // tp, batch, CONTEXT), 2 * layers * r(batch * h * 2)


def model(name, batch):
    tp = CONFIGS[name][0]
    out = subprocess.run(
        [SERVESIM, "estimate", "--model", name, "--tensor-parallel-size", str(tp), "--dtype", "fp16",
         "--engine", "vllm", "--decode-batch", str(batch), "--context", str(CONTEXT), "--format", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    s = json.loads(out)["step"]
    return s["gemm_s"], s["attention_s"], s["allreduce_s"]


def main():
    repo, version = sys.argv[1], sys.argv[2]
    batches = [int(b) for b in sys.argv[3:]] or [22, 110]
    t = tables(repo, version)
    print(f"vLLM {version} kernel rows (ms) against servesim estimate, {CONTEXT}-token contexts")
    print("config            batch   GEMM rows/model    attention rows/model  all-reduce rows/model  model - rows")
    for name in CONFIGS:
        for b in batches:
            rows, m = step_rows(t, name, b), model(name, b)
            diff = sum(m) - sum(rows)
            cells = "  ".join(f"{1e3 * x:7.3f}/{1e3 * y:7.3f}" for x, y in zip(rows, m))
            print(f"{name:14s} TP{CONFIGS[name][0]} {b:5d}   {cells}   {1e3 * diff:+7.3f}")


if __name__ == "__main__":
    main()
