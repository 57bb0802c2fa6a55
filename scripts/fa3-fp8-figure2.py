#!/usr/bin/env python3
"""Reads the TTFT markers of Figure 2 of the vLLM FP8-KV blog post (Llama-3.1-8B, one H100,
vLLM 0.19.1, concurrency 1) from the figure's pixels: the readings behind
`[attention.fa3_fp8] prefill_rate_vs_bf16` in calibration/gpus/h100-sxm.toml.

The figure is assets/figures/2026-04-22-fp8-kvcache/fig2_llama_8b.png of
github.com/vllm-project/vllm-project.github.io at 5ffe2dd543a3:

    git -C <clone> show 5ffe2dd543a3:assets/figures/2026-04-22-fp8-kvcache/fig2_llama_8b.png > fig2.png
    python3 scripts/fa3-fp8-figure2.py fig2.png

Needs Pillow. Axis calibration (2254 x 2493 px image): the TTFT panel's horizontal gridlines at
y = 2284 (0 ms) ... 1421 (10,000 ms), 172.6 px per 2,000 ms; vertical gridlines x = 325 (0) and
275.2 px per 20k tokens. A marker's centre is the middle of the rows where at least 12 of the 41
pixels around its x have the marker colour (BF16 circles (76,156,201), FP8 squares
(225,142,76)); FP8 squares are drawn over the BF16 circles, so below 81,920 tokens the BF16
marker is mostly hidden and its reading is not used.
"""
import sys

from PIL import Image

BLUE, ORANGE = (76, 156, 201), (225, 142, 76)


def rows(px, colour, xc, tol=14, min_count=12):
    out = []
    for y in range(1300, 2300):
        n = sum(
            1
            for x in range(int(xc) - 20, int(xc) + 21)
            if all(abs(px[x, y][i] - colour[i]) <= tol for i in range(3))
        )
        if n >= min_count:
            out.append(y)
    return out


def ms(y):
    return (2284 - y) / 172.6 * 2000


def main():
    px = Image.open(sys.argv[1]).convert("RGB").load()
    print("prompt_tokens,bf16_ttft_ms,fp8_ttft_ms,fp8_over_bf16")
    for tokens in [65536, 81920, 98304, 114688, 131072]:
        xc = 325 + tokens / 20000 * 275.2
        b, o = rows(px, BLUE, xc), rows(px, ORANGE, xc)
        # A circle's rows of >= 12 pixels span 13 rows when whole: centre = top + 6.
        yb = b[0] + 6 if b else None
        yo = (o[0] + o[-1]) / 2
        bf16 = ms(yb) if yb else float("nan")
        print(f"{tokens},{bf16:.0f},{ms(yo):.0f},{ms(yo) / bf16:.3f}")


if __name__ == "__main__":
    main()
