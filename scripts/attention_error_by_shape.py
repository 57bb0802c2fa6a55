#!/usr/bin/env python3
"""Signed error of a GPU profile's attention terms against vLLM's own attention kernels as
ai-dynamo/aiconfigurator timed them, by batch and context, for one head configuration.

Usage:
  scripts/attention_error_by_shape.py PROFILE.toml AIC_CHECKOUT SYSTEM VERSION [Q_HEADS KV_HEADS [BATCH CONTEXT]]
  e.g. calibration/gpus/h100-sxm.toml AIC_CHECKOUT h100_sxm 0.19.0 32 8 8 21000
  (Llama-3.1-8B at TP 1; and its decode at batch 8 x 21,000 tokens)

Reads aic-core/src/aiconfigurator_core/systems/data/SYSTEM/attention/vllm/VERSION/
{generation,context}_attention_perf.parquet (needs pyarrow) and prints, for head_dim 128:
- decode (generation) rows with at least 200 MB of KV (4 x the L2; smaller ones are served from
  L2 across the collector's graph replays or sit on its host-launch floor, see
  scripts/import_aiconfigurator_decode_attention.py), BF16 and FP8 KV, against
  `roofline::kernels::decode_attention_s`: fixed + max(KV bytes x t / bandwidth, 4 q_width
  tokens / rate), with t = attention.fa3_fp8.decode_time_per_byte_vs_bf16 for FP8 KV (vLLM's
  FlashAttention-3 FP8 path) and 1 for BF16;
- context (prefill) rows of at least 1,024 tokens, which are causal (vLLM's decoder attention)
  with no cached prefix, against `roofline::kernels::prefill_attention_at_rate_s` with
  units = batch x isl^2 / 2 and batch x isl query rows, at the BF16 rate times
  attention.fa3_fp8.prefill_rate_vs_bf16 for FP8 KV;
and each table's time-weighted TFLOP/s or TB/s. Positive: the model is slow. With BATCH and
CONTEXT, also the decode rows' time per layer at that batch, linear in the context between the
two rows around it, beside the model's (its fixed time as the profile has it).
"""
import io
import subprocess
import sys
import tomllib

import pyarrow.parquet as pq

HEAD_DIM = 128
MIN_DECODE_BYTES = 200e6


def table(repo, system, version, kind):
    path = (
        f"aic-core/src/aiconfigurator_core/systems/data/{system}/attention/vllm/{version}/"
        f"{kind}_attention_perf.parquet"
    )
    blob = subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True
    ).stdout
    return pq.read_table(io.BytesIO(blob)).to_pylist()


def median_by_shape(rows, key):
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r["latency"] * 1e-3)
    out = {}
    for k, v in groups.items():
        v.sort()
        out[k] = (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
    return out


def print_grid(title, cells):
    batches = sorted({b for b, _ in cells})
    lens = sorted({s for _, s in cells})
    print(title)
    print("  len \\ batch " + "".join(f"{b:>8}" for b in batches))
    for s in lens:
        row = "".join(f"{cells[(b, s)]:>+7.1f}%" if (b, s) in cells else " " * 8 for b in batches)
        print(f"  {s:>11} {row}")


def main():
    prof_path, repo, system, version = sys.argv[1:5]
    qh, kvh = (int(x) for x in sys.argv[5:7]) if len(sys.argv) > 6 else (32, 8)
    prof = tomllib.load(open(prof_path, "rb"))
    att, gemm = prof["attention"], prof["gemm"]
    fa3 = att.get("fa3_fp8", {})
    bw = prof["memory"]["stream_bandwidth_bytes_per_s"] * att["decode_bandwidth_fraction"]
    bf16_rate = gemm["bf16_flops_per_s"] * att["prefill_flops_fraction"]
    q_width = qh * HEAD_DIM

    def mine(r):
        return (
            r["head_dim"] == HEAD_DIM
            and r.get("window_size", 0) == 0
            and r["num_heads"] == qh
            and r["num_key_value_heads"] == kvh
        )

    gen = [r for r in table(repo, system, version, "generation") if mine(r)]
    for kv, elem, per_byte in [("bfloat16", 2, 1.0), ("fp8", 1, fa3.get("decode_time_per_byte_vs_bf16", 1.0))]:
        times = median_by_shape(
            [r for r in gen if r["kv_cache_dtype"] == kv], lambda r: (r["batch_size"], r["step"] + 1)
        )
        cells, moved, took = {}, 0.0, 0.0
        for (b, ctx), t in times.items():
            nbytes = b * ctx * 2 * kvh * HEAD_DIM * elem
            if nbytes < MIN_DECODE_BYTES or b > 256:
                continue
            pred = att["fixed_s"] + max(nbytes * per_byte / bw, 4 * q_width * b * ctx / bf16_rate)
            cells[(b, ctx)] = (pred / t - 1) * 100
            moved, took = moved + nbytes, took + t
        if len(sys.argv) > 8:
            at_b, at_ctx = int(sys.argv[7]), int(sys.argv[8])
            pts = sorted((c, t) for (b, c), t in times.items() if b == at_b)
            lo = max((p for p in pts if p[0] <= at_ctx), default=None)
            hi = min((p for p in pts if p[0] >= at_ctx), default=None)
            if lo and hi:
                t = lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (at_ctx - lo[0]) / (hi[0] - lo[0])
                nbytes = at_b * at_ctx * 2 * kvh * HEAD_DIM * elem
                pred = att["fixed_s"] + max(nbytes * per_byte / bw, 4 * q_width * at_b * at_ctx / bf16_rate)
                print(
                    f"decode, {kv} KV, batch {at_b} x {at_ctx} tokens: rows {t * 1e6:.1f} us per layer "
                    f"(between {lo[0]} and {hi[0]} tokens), model {pred * 1e6:.1f} us"
                )
        print_grid(
            f"decode, {kv} KV, {qh}/{kvh} heads: model vs rows by context (rows) and batch "
            f"(columns); rows read {moved / took / 1e12:.2f} TB/s overall",
            cells,
        )
    ctx_rows = [r for r in table(repo, system, version, "context") if mine(r)]
    for kv, rate in [("bfloat16", bf16_rate), ("fp8", bf16_rate * fa3.get("prefill_rate_vs_bf16", 1.0))]:
        times = median_by_shape(
            [r for r in ctx_rows if r["kv_cache_dtype"] == kv], lambda r: (r["batch_size"], r["isl"])
        )
        cells, flops, took = {}, 0.0, 0.0
        for (b, s), t in times.items():
            if s < 1024:
                continue
            units = b * s * s / 2
            pred = att["fixed_s"] + 4 * q_width * (units + att["prefill_half_rate_tokens"] * b * s) / rate
            cells[(b, s)] = (pred / t - 1) * 100
            flops, took = flops + 4 * q_width * units, took + t
        print_grid(
            f"prefill (causal, no prefix), {kv} KV, {qh}/{kvh} heads: model vs rows by prompt "
            f"length (rows) and batch (columns); rows run {flops / took / 1e12:.0f} TFLOP/s overall",
            cells,
        )


if __name__ == "__main__":
    main()
