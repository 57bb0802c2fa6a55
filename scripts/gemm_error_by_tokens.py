#!/usr/bin/env python3
"""Median signed error of a GPU profile's BF16 GEMM curve against measurement CSVs, by tokens.

Usage: scripts/gemm_error_by_tokens.py PROFILE.toml FILE.csv [FILE.csv ...]

A replica of `roofline::kernels::gemm_math_s` for BF16 rows (fixed + max(weight and activation
bytes / stream bandwidth, FLOPs / (peak x M / (M + half_rate_tokens)))), so that
docs/calibration.md can split `servesim validate-kernels`' GEMM figures by token count; its
overall median |error| per file equals validate-kernels' GEMM line for that file.
Positive: the model is slow.
"""
import csv
import statistics
import sys
import tomllib

BANDS = [(1, 64), (65, 149), (150, 300), (301, 600), (601, 1500), (1501, 10**9)]


def main():
    prof = tomllib.load(open(sys.argv[1], "rb"))
    g, bw = prof["gemm"], prof["memory"]["stream_bandwidth_bytes_per_s"]

    def pred(m, n, k):
        nbytes = n * k * 2 + m * (k + n) * 2
        rate = g["bf16_flops_per_s"] * m / (m + g["half_rate_tokens"])
        return g["fixed_s"] + max(nbytes / bw, 2 * m * n * k / rate)

    for path in sys.argv[2:]:
        lines = [l for l in open(path) if not l.startswith("#")]
        rows = [
            (int(d["m"]), int(d["n"]), int(d["k"]), float(d["median_us"]) * 1e-6)
            for d in csv.DictReader(lines)
            if d["kernel"] == "gemm" and d["dtype"] == "bf16"
        ]
        err = [(m, pred(m, n, k) / t - 1) for m, n, k, t in rows]
        cells = []
        for lo, hi in BANDS:
            e = [x for m, x in err if lo <= m <= hi]
            cells.append(f"{100 * statistics.median(e):+.1f}%" if e else "-")
        total = statistics.median(abs(x) for _, x in err) if err else float("nan")
        print(f"{path}: {len(rows)} rows | " + " | ".join(cells) + f" | {100 * total:.1f}%")


if __name__ == "__main__":
    main()
