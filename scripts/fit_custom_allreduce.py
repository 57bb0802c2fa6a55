#!/usr/bin/env python3
"""Fits a GPU profile's custom all-reduce curve on an engine's own all-reduce rows.

Usage:
  scripts/fit_custom_allreduce.py ENGINE.toml FIT.csv [HELD_OUT.csv ...]
  e.g. calibration/engines/vllm.toml calibration/reference/h100-allreduce-aiconfigurator-vllm-0.19-fit.csv \
       calibration/reference/h100-allreduce-aiconfigurator-vllm-0.14-held-out.csv

The `custom_allreduce` rows of FIT.csv (servesim's measurement format, written by
scripts/import_aiconfigurator_allreduce.py) are priced as the step model prices them
(src/roofline/kernels.rs, `engine_allreduce_s`): below the engine profile's
`allreduce.one_shot_max_bytes_by_tp` at the row's TP degree the one-shot kernel,
`custom_latency_s + (TP-1) x bytes / custom_bandwidth_bytes_per_s` (each GPU reads every
peer's whole buffer), above it the two-shot kernel (reduce-scatter, then all-gather),
`custom_two_shot_latency_s + 2 (TP-1)/TP x bytes / custom_bandwidth_bytes_per_s`. The three
values minimise the mean squared log error (a grid refined around its best point three
times). Prints them, the fit's rms log error, and each file's median |error| and median
signed error (positive: the model is slow). A table of which kernel the engine picks is the
engine's; the rows do not fit it. Needs Python 3.11 (tomllib), nothing else.
"""
import csv
import math
import statistics
import sys
import tomllib


def by_tp(table, tp):
    """The entry for TP degree `tp` (that of the largest listed degree at or below it, else
    the smallest listed degree's), as src/engine.rs reads such a table; 0 when empty."""
    below = [(t, b) for t, b in table if t <= tp]
    if below:
        return max(below)[1]
    return min(table)[1] if table else 0.0


def rows_of(path):
    lines = [l for l in open(path) if not l.startswith("#")]
    return [
        (int(d["tp"]), float(d["bytes"]), float(d["median_us"]) * 1e-6)
        for d in csv.DictReader(lines)
        if d["kernel"] == "custom_allreduce"
    ]


def predict(p, one_shot, tp, nbytes):
    one, two, bw = p
    if nbytes < by_tp(one_shot, tp):
        return one + (tp - 1) * nbytes / bw
    return two + 2 * (tp - 1) / tp * nbytes / bw


def loss(p, one_shot, rows):
    return sum(math.log(predict(p, one_shot, tp, b) / t) ** 2 for tp, b, t in rows) / len(rows)


def fit(one_shot, rows):
    # Latencies 1-30 us, bandwidth 50 GB/s - 2 TB/s, on a log grid refined around the best.
    lo = [1e-6, 1e-6, 50e9]
    hi = [30e-6, 30e-6, 2000e9]
    best = None
    for _ in range(4):
        axes = [
            [lo[i] * (hi[i] / lo[i]) ** (k / 24) for k in range(25)] for i in range(3)
        ]
        for a in axes[0]:
            for b in axes[1]:
                for c in axes[2]:
                    v = loss((a, b, c), one_shot, rows)
                    if best is None or v < best[0]:
                        best = (v, (a, b, c))
        step = [(hi[i] / lo[i]) ** (2 / 24) for i in range(3)]
        lo = [best[1][i] / step[i] for i in range(3)]
        hi = [best[1][i] * step[i] for i in range(3)]
    return best


def summary(p, one_shot, rows):
    err = [predict(p, one_shot, tp, b) / t - 1 for tp, b, t in rows]
    return (
        f"{len(rows)} rows, median |error| {100 * statistics.median(abs(e) for e in err):.1f}%, "
        f"median signed {100 * statistics.median(err):+.1f}%"
    )


def main():
    engine = tomllib.load(open(sys.argv[1], "rb"))
    one_shot = engine.get("allreduce", {}).get("one_shot_max_bytes_by_tp", [])
    rows = rows_of(sys.argv[2])
    v, p = fit(one_shot, rows)
    print(f"custom_latency_s = {p[0]:.3e}")
    print(f"custom_two_shot_latency_s = {p[1]:.3e}")
    print(f"custom_bandwidth_bytes_per_s = {p[2]:.3e}")
    print(f"fit: {sys.argv[2]}: {summary(p, one_shot, rows)}, rms log error {math.sqrt(v):.3f}")
    for path in sys.argv[3:]:
        print(f"held out: {path}: {summary(p, one_shot, rows_of(path))}")


if __name__ == "__main__":
    main()
