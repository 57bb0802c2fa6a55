#!/usr/bin/env python3
"""Prices the vLLM mixed iterations of the V-A campaign term by term on public kernel rows.

Usage:
  scripts/mixed-step-kernel-rows.py AIC_CHECKOUT [SERVESIM]

AIC_CHECKOUT is a git checkout (or bare mirror) of ai-dynamo/aiconfigurator at commit
095f58a51c4c; SERVESIM the servesim binary (default target/release/servesim). Run from the
repository root; needs pyarrow (pandas-free). Issue #26: the held-out CodeLlama-34B TP2 rows and
the Llama-2-70B TP4 rows are predicted too slow under load, and their iterations carry a
300-600-token prompt beside 20-110 decodes. This script asks, with no serving row fitted:

1. GEMMs: the four projections of one layer at each model's TP shapes, summed, from vLLM
   0.14.0's own BF16 GEMM table on an H100 (systems/data/h100_sxm/gemm/vllm/0.14.0/
   gemm_perf.parquet: six RowParallelLinear layers replayed from a CUDA graph, mean per layer;
   the curve of calibration/gpus/h100-sxm.toml is fitted on half of its shapes). Shapes off the
   table's N/K grid (gate+up 14336 and 22016, down K 11008) are interpolated linearly in N and
   K between grid neighbours (22016 is extrapolated from 12288 and 16384). The rows the GEMM
   importer drops as glitches (more than 1.2x the time of the same shape at twice the tokens)
   are dropped here too. Printed against the profile's curve as the step charges it (the
   per-GEMM fixed time less the launch latency queued kernels overlap).
2. All-reduce: vLLM 0.14.0's custom all-reduce on an H100 (comm/vllm/0.14.0/
   custom_allreduce_perf.parquet; `tensor_model_parallel_all_reduce`, i.e. whichever kernel
   vLLM picks at that size, five calls captured in a CUDA graph: the `vllm_graph` rows;
   `message_size` is in BF16 elements) at the iteration's hidden-state bytes, against the
   profile's custom all-reduce (custom_latency_s + 2(t-1)/t x bytes / bus bandwidth).
3. Each pair of V-A rows of one configuration and workload at two arrival rates: the growth of
   the measured mean step ((E2E - TTFT) / (output - 1)) less what the extra decoding requests
   cost at least (their KV reads at the datasheet HBM rate), over the growth in prompts per
   step, is the time the rows allow one prompt to add to an iteration. Printed beside what the
   kernel rows above say a prompt adds (GEMMs at B + P tokens less GEMMs at B tokens, the
   all-reduces likewise) and beside the GEMM increment at the datasheet: the mixed step's GEMM
   FLOPs at 989 TFLOP/s (a floor for its GEMMs) less the decode step's GEMMs, taken as its
   weights streamed at 3.35 TB/s or as the kernel rows' time at the decode batch.
"""
import io
import json
import subprocess
import sys
import tomllib

import pyarrow.parquet as pq

AIC_BASE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm"
ACT_BYTES = 2


def git_parquet(repo, path):
    data = subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{AIC_BASE}/{path}"], check=True, capture_output=True
    ).stdout
    return pq.read_table(io.BytesIO(data)).to_pylist()


def load_gemm(repo):
    rows = [r for r in git_parquet(repo, "gemm/vllm/0.14.0/gemm_perf.parquet") if r["gemm_dtype"] == "bfloat16"]
    t = {(r["m"], r["k"], r["n"]): r["latency"] * 1e-3 for r in rows}
    ms = sorted({m for m, _, _ in t})
    # The importer's glitch rule (scripts/import_aiconfigurator_gemm.py).
    bad = set()
    for (m, k, n), s in t.items():
        nxt = [x for x in ms if x >= 2 * m]
        if nxt and (nxt[0], k, n) in t and s > 1.2 * t[(nxt[0], k, n)]:
            bad.add((m, k, n))
    return {key: v for key, v in t.items() if key not in bad}, ms


def grid_interp(grid, x):
    lo = max([g for g in grid if g <= x], default=grid[0])
    hi = min([g for g in grid if g >= x], default=grid[-1])
    if lo == hi and x > grid[-1]:
        # extrapolate from the last two points of the grid
        lo, hi = grid[-2], grid[-1]
    return lo, hi


def table_gemm_s(t, m, k, n):
    """One GEMM from the table at grid M, interpolated in N and K (None if a corner is missing)."""
    ns = sorted({nn for (mm, kk, nn) in t if mm == m and nn <= 16384})
    ks = sorted({kk for (mm, kk, nn) in t if mm == m and kk <= 16384})

    def lin(a, b, xa, xb, x):
        return a if xa == xb else a + (b - a) * (x - xa) / (xb - xa)

    nlo, nhi = grid_interp(ns, n)
    klo, khi = grid_interp(ks, k)
    try:
        at_k = [lin(t[(m, kk, nlo)], t[(m, kk, nhi)], nlo, nhi, n) for kk in (klo, khi)]
    except KeyError:
        return None
    return lin(at_k[0], at_k[1], klo, khi, k)


def table_layer_s(t, ms, m, shapes):
    """The layer's GEMMs at m tokens, interpolated linearly between grid M."""
    lo = max(x for x in ms if x <= m)
    hi = min(x for x in ms if x >= m)
    vals = []
    for mm in (lo, hi):
        parts = [table_gemm_s(t, mm, k, n) for k, n in shapes]
        if any(p is None for p in parts):
            return None
        vals.append(sum(parts))
    return vals[0] if lo == hi else vals[0] + (vals[1] - vals[0]) * (m - lo) / (hi - lo)


def model_gemm_s(g, m, k, n, queued=True):
    fixed = g["gemm"]["fixed_s"] - (g["small_ops"]["launch_s"] if queued else 0.0)
    peak = g["gemm"]["bf16_flops_per_s"] * m / (m + g["gemm"]["half_rate_tokens"])
    byts = k * n * 2 + m * (k + n) * ACT_BYTES
    return fixed + max(byts / g["memory"]["stream_bandwidth_bytes_per_s"], 2 * m * k * n / peak)


def load_ar(repo):
    rows = [r for r in git_parquet(repo, "comm/vllm/0.14.0/custom_allreduce_perf.parquet") if r["backend"] == "vllm_graph"]
    out = {}
    for r in rows:
        out.setdefault(r["num_gpus"], []).append((r["message_size"] * 2, r["latency"] * 1e-3))
    return {k: sorted(v) for k, v in out.items()}


def table_ar_s(ar, tp, byts):
    pts = ar[tp]
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if b0 <= byts <= b1:
            return t0 + (t1 - t0) * (byts - b0) / (b1 - b0)
    return None


def model_ar_s(g, tp, byts):
    a = g["allreduce"]
    return a["custom_latency_s"] + 2 * (tp - 1) / tp * byts / a["bus_bandwidth_bytes_per_s"]


CONFIGS = {
    # name: (model toml, tp, per-GPU (K, N) of QKV, O, gate+up, down)
    "llama-2-70b TP4": ("models/llama-2-70b.toml", 4),
    "codellama-34b TP2": ("models/codellama-34b.toml", 2),
    "llama-2-7b TP1": ("models/llama-2-7b.toml", 1),
}


def shapes(m, tp):
    h, f = m["hidden_size"], m["intermediate_size"]
    d = m.get("head_dim", h // m["num_attention_heads"])
    q, kv = m["num_attention_heads"] * d, m["num_kv_heads"] * d
    return [(h, (q + 2 * kv) // tp), (q // tp, h), (h, 2 * f // tp), (f // tp, h)]


def main():
    repo = sys.argv[1]
    g = tomllib.load(open("calibration/gpus/h100-sxm.toml", "rb"))
    t, ms = load_gemm(repo)
    ar = load_ar(repo)
    print("1. GEMMs of one layer, us: vLLM 0.14.0 H100 table | servesim curve as the step queues it (error)")
    for name, (path, tp) in CONFIGS.items():
        m = tomllib.load(open(path, "rb"))
        sh = shapes(m, tp)
        cells = []
        for tok in [64, 128, 192, 256, 384, 512, 768, 1024]:
            tab = table_layer_s(t, ms, tok, sh)
            mod = sum(model_gemm_s(g, tok, k, n) for k, n in sh)
            cells.append(f"{tok}: {tab*1e6:.0f} | {mod*1e6:.0f} ({(mod/tab-1)*100:+.0f}%)" if tab else f"{tok}: n/a")
        print(f"  {name} {sh}:\n    " + "\n    ".join(cells))
    print("2. One all-reduce of the hidden states, us: vLLM 0.14.0 custom all-reduce (graph) | servesim")
    for name, (path, tp) in CONFIGS.items():
        if tp == 1:
            continue
        h = tomllib.load(open(path, "rb"))["hidden_size"]
        cells = []
        for tok in [32, 64, 128, 256, 512, 768, 1024]:
            b = tok * h * ACT_BYTES
            tab, mod = table_ar_s(ar, tp, b), model_ar_s(g, tp, b)
            cells.append(f"{tok} tok ({b/2**20:.1f} MiB): {tab*1e6:.1f} | {mod*1e6:.1f} ({(mod/tab-1)*100:+.0f}%)")
        print(f"  {name}:\n    " + "\n    ".join(cells))
    print("3. What one prompt adds to an iteration, ms (pairs of V-A rows of one workload)")
    refs = {}
    for f in ["calibration/reference/serving-measurements.csv",
              "calibration/reference/inference-sim-vllm-0.15.1-codellama-34b-tp2-h100.csv"]:
        lines = [l for l in open(f) if not l.startswith("#")]
        head = lines[0].strip().split(",")
        for l in lines[1:]:
            r = dict(zip(head, l.split(",")))
            refs[r["id"]] = r
    pairs = [("V-A7", "V-A8"), ("V-A5", "V-A6"), ("I-CL34-C5", "I-CL34-C10"), ("I-CL34-G8", "I-CL34-G20"),
             ("V-A1", "V-A2"), ("V-A9", "V-A10")]
    ds_bw, ds_flops = g["datasheet"]["hbm_bandwidth_bytes_per_s"], g["datasheet"]["bf16_flops_per_s"]
    for lo, hi in pairs:
        a, b = refs[lo], refs[hi]
        model = tomllib.load(open(f"models/{a['model']}.toml", "rb"))
        tp = int(a["tp"])
        sh = shapes(model, tp)
        h, layers = model["hidden_size"], model["num_layers"]
        d = model.get("head_dim", h // model["num_attention_heads"])
        kv_gpu = 2 * layers * model["num_kv_heads"] * d * 2 / tp
        weights = sum(k * n for k, n in sh) * layers * 2
        flops_tok = 2 * sum(k * n for k, n in sh) * layers

        def stats(r):
            step = float(r["itl_derived_ms"]) * 1e-3
            rate = float(r["rate_rps"])
            running = rate * float(r["e2e_mean_ms"]) * 1e-3
            return step, running, rate * step

        (s0, b0, q0), (s1, b1, q1) = stats(a), stats(b)
        prompt = int(a["input_len"]) - int(a["prefix_len"])
        ctx = int(a["input_len"]) + int(a["output_len"]) / 2
        decode_growth = (b1 - b0) * ctx * kv_gpu / ds_bw
        allowed = (s1 - s0 - decode_growth) / (q1 - q0)
        bm = round(b1)
        gemm_rows = layers * (table_layer_s(t, ms, bm + prompt, sh) - table_layer_s(t, ms, bm, sh))
        ar_rows = 0.0
        if tp > 1:
            ar_rows = 2 * layers * (table_ar_s(ar, tp, (bm + prompt) * h * 2) - table_ar_s(ar, tp, bm * h * 2))
        mixed_floor = (bm + prompt) * flops_tok / ds_flops
        floor = mixed_floor - weights / ds_bw
        floor_rows = mixed_floor - layers * table_layer_s(t, ms, bm, sh)
        print(f"  {a['model']} TP{tp} {lo}->{hi}: step {s0*1e3:.2f}->{s1*1e3:.2f} ms, running {b0:.0f}->{b1:.0f}, "
              f"prompts/step {q0:.3f}->{q1:.3f}; a {prompt}-token prompt may add at most {allowed*1e3:.1f} ms "
              f"(decode growth {decode_growth*1e3:.2f} ms at the datasheet rate); kernel rows: GEMMs "
              f"{gemm_rows*1e3:.1f} + all-reduce {ar_rows*1e3:.1f} ms beside {bm} decodes; the mixed step's GEMMs "
              f"at 989 TFLOP/s ({mixed_floor*1e3:.1f} ms) less the decode step's: {max(floor, 0)*1e3:.1f} ms "
              f"(its weights at 3.35 TB/s), {max(floor_rows, 0)*1e3:.1f} ms (its GEMMs at the kernel rows)")


if __name__ == "__main__":
    main()
