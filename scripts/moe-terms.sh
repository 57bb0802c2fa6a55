#!/usr/bin/env bash
# The held-out TensorRT-LLM MoE rows term by term (docs/validation.md, "Held out: the MoE
# models of 2026", "Terms of this revision"). Nothing here is fitted and nothing in the
# repository is modified. Prints median |error| and median signed error (predicted /
# measured - 1) by GPU x deployment (TP, attention DP) and by load shape (prefill-heavy:
# input >= output tokens), for:
#   - BASE (optional first argument): a servesim binary built before the terms, e.g. of commit
#     fb06ee7 (`git worktree add /tmp/base fb06ee7 && cargo build --release` there);
#   - this build with the `trtllm` profile's `[moe] expand_rows` off: attention-DP lockstep only;
#   - this build as committed: lockstep and TensorRT-LLM's expand kernel;
# then compares servesim's grouped-GEMM formula (the FP8 curve of h100-sxm x
# moe.grouped_flops_fraction, roofline::kernels::fused_moe_work_s) with DeepGEMM's published
# H800 grouped GEMMs (calibration/reference/deepgemm-h800-grouped.csv).
#
#   $ scripts/moe-terms.sh [BASE_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=./target/release/servesim
ref=calibration/reference
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
moe=(trtllm-post1.0-moe-offline trtllm-1.0-moe-offline trtllm-0.20-moe-offline trtllm-blog-moe-deepseek-r1)

run() { # run BIN OUT [PROFILE]: per-row signed errors of the held-out rows
  local args=()
  for f in "${moe[@]}"; do
    if [ -n "${3:-}" ]; then
      sed "s#,trtllm,#,$3,#" "$ref/$f.csv" > "$tmp/$f.csv"
      args+=(--reference "$tmp/$f.csv")
    else
      args+=(--reference "$ref/$f.csv")
    fi
  done
  "$1" validate --no-cv "${args[@]}" --format csv 2>/dev/null > "$2"
}

cols=()
if [ -n "${1:-}" ]; then
  run "$1" "$tmp/base.csv"
  cols+=("before:$tmp/base.csv")
fi
sed 's/^expand_rows = true/expand_rows = false/' calibration/engines/trtllm.toml > "$tmp/noexpand.toml"
run "$bin" "$tmp/lockstep.csv" "$tmp/noexpand.toml"
cols+=("lockstep:$tmp/lockstep.csv")
run "$bin" "$tmp/now.csv"
cols+=("+expand:$tmp/now.csv")

python3 - "${cols[@]}" <<'PY'
import csv, glob, statistics as st, sys
refs = {}
for f in glob.glob("calibration/reference/trtllm-*moe*.csv"):
    for r in csv.DictReader(l for l in open(f) if not l.startswith("#")):
        refs[r["id"]] = r
cols = [c.split(":", 1) for c in sys.argv[1:]]
data = []
for name, path in cols:
    rows = csv.DictReader(l for l in open(path) if l.strip())
    data.append({r["id"]: float(r["signed_error"]) for r in rows})
groups = {}
for i in data[-1]:
    r = refs[i]
    gpu, dep = r["gpu"], ("DP" if r["dp"] not in ("", "1") else "TP")
    shape = "prefill-heavy" if float(r["input_len"]) >= float(r["output_len"]) else "decode-heavy"
    for k in [(gpu, dep), (gpu, "all"), ("all", dep), (shape, ""), ("all", "")]:
        groups.setdefault(k, []).append(i)
print(f"{'rows':24s} {'n':>4s}  " + "  ".join(f"{n:>18s}" for n, _ in cols))
print(f"{'':24s} {'':>4s}  " + "  ".join(f"{'|err|   signed':>18s}" for _ in cols))
for k in sorted(groups):
    ids = groups[k]
    cells = []
    for d in data:
        e = [d[i] for i in ids]
        cells.append(f"{st.median(abs(x) for x in e) * 100:7.1f}% {st.median(e) * 100:+7.1f}%")
    print(f"{' '.join(k).strip():24s} {len(ids):4d}  " + "  ".join(f"{c:>18s}" for c in cells))
PY

echo
echo "== servesim's grouped GEMM (h100-sxm FP8 curve x moe.grouped_flops_fraction) against DeepGEMM on H800"
python3 - <<'PY'
import csv, re
def value(path, section, key):
    sec = None
    for line in open(path):
        m = re.match(r"\[(.+)\]", line.strip())
        if m:
            sec = m.group(1)
        elif sec == section and line.split("=")[0].strip() == key:
            return float(line.split("=")[1].split("#")[0].strip().replace("_", ""))
    raise SystemExit(f"{path}: no {section}.{key}")
g = "calibration/gpus/h100-sxm.toml"
peak = value(g, "gemm", "fp8_flops_per_s") * value(g, "moe", "grouped_flops_fraction")
half = value(g, "gemm", "fp8_half_rate_tokens")
fixed = value(g, "gemm", "fixed_s")
bw = value(g, "memory", "stream_bandwidth_bytes_per_s")
rows = csv.DictReader(l for l in open("calibration/reference/deepgemm-h800-grouped.csv") if not l.startswith("#"))
print(f"    {'layout':10s} {'groups':>6s} {'m/group':>7s} {'n':>5s} {'k':>5s} {'DeepGEMM':>9s} {'servesim':>9s}  servesim time / DeepGEMM time")
for r in rows:
    G, m, n, k = (int(r[c]) for c in ("groups", "m_per_group", "n", "k"))
    t = fixed
    for _ in range(G):
        rate = peak * m / (m + half)
        t += max((n * k + m * (k + n) * 2) / bw, 2 * m * n * k / rate)
    tf = 2 * m * n * k * G / t / 1e12
    print(f"    {r['layout']:10s} {G:6d} {m:7d} {n:5d} {k:5d} {float(r['tflops']):9.0f} {tf:9.0f}  {float(r['tflops']) / tf:5.2f}")
PY
