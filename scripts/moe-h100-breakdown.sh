#!/usr/bin/env bash
# Reproduces the term-by-term breakdown of the held-out TensorRT-LLM MoE rows' H100 / H200
# asymmetry in docs/validation.md ("Held out: the MoE models of 2026", "Term by term"). Each
# experiment changes one thing in a copy of the `trtllm` profile or of the reference rows
# (under a temporary directory), re-runs `servesim validate --no-cv` on the held-out rows and
# prints median signed errors (predicted / measured - 1) by group. Nothing here is fitted and
# nothing in the repository is modified. About a minute on two cores after the build.
#
#   1. memory: runtime_reserved_bytes (the engine's reservation beside weights, KV and the
#      profiled activations) from 1 to 20 GB, per (model, GPU) of the attention-DP FP8 rows;
#   2. KV precision: the same FP8 rows with a 16-bit KV cache instead of the FP8 one that
#      `auto` gives FP8 weights;
#   3. the reading of the v1.0 page's multi-GPU MoE columns: tensor parallel (tp = n) instead
#      of attention data parallel (dp = n);
#   4. the H200 : H100 throughput ratio, predicted against measured, on the rows both GPUs ran
#      with the same load: the MoE rows, and the dense Llama-3.1-405B TP8 rows as a control;
#   5. TensorRT-LLM's per-sequence host cost at its prior (2 us) instead of the fitted 33.8 us;
#   6. the FP8 attention-DP rows of both GPUs grouped by the simulated mean batch per rank (each
#      row re-run with `servesim run`, whose throughput is checked against `validate`'s);
#   7. the other capacity policy of trtllm-bench (MAX_UTILIZATION: admission on the KV in use,
#      preemption on overflow) instead of its default GUARANTEED_NO_EVICT.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=./target/release/servesim
ref=calibration/reference
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
moe=(trtllm-post1.0-moe-offline trtllm-1.0-moe-offline trtllm-0.20-moe-offline trtllm-blog-moe-deepseek-r1)

# profile KEY VALUE NAME: a copy of the trtllm profile with one [host] value replaced.
profile() {
  sed "s/^$1 = .*/$1 = $2/" calibration/engines/trtllm.toml > "$tmp/$3.toml"
}
# repoint FILE PROFILE OUT: the reference rows of FILE run on PROFILE.
repoint() {
  sed "s#,trtllm,#,$2,#" "$1" > "$3"
}
summary() { # summary CSV...: median signed error by GPU and model over the rows given
  python3 - "$@" <<'EOF'
import csv, glob, statistics as st, sys
refs = {}
for f in glob.glob("calibration/reference/trtllm-*.csv"):
    for r in csv.DictReader(open(f)):
        refs[r["id"]] = r
rows = [r for f in sys.argv[1:] for r in csv.DictReader(open(f))]
groups = {}
for r in rows:
    ref = refs[r["id"]]
    groups.setdefault((ref["gpu"], ref["model"]), []).append(float(r["signed_error"]))
    groups.setdefault((ref["gpu"], "all"), []).append(float(r["signed_error"]))
for (gpu, model), es in sorted(groups.items()):
    print(f"    {gpu:9s} {model:18s} rows {len(es):3d}  median signed {st.median(es) * 100:+6.1f}%"
          f"  median |error| {st.median([abs(e) for e in es]) * 100:5.1f}%")
EOF
}

echo "== 1. runtime_reserved_bytes, attention-DP FP8 rows of H100 and H200"
python3 - "$tmp" <<'EOF'
import csv, sys
tmp = sys.argv[1]
for f in ["trtllm-post1.0-moe-offline", "trtllm-1.0-moe-offline"]:
    rows = list(csv.DictReader(open(f"calibration/reference/{f}.csv")))
    for model in ["llama-4-maverick", "llama-4-scout", "qwen3-235b-a22b"]:
        for gpu in ["h100-sxm", "h200-sxm"]:
            sel = [r for r in rows if r["model"] == model and r["gpu"] == gpu
                   and r["dp"] not in ("", "1") and r["dtype"] == "fp8"]
            if sel:
                with open(f"{tmp}/dp-{model}-{gpu}-{f}.csv", "w", newline="") as out:
                    w = csv.DictWriter(out, fieldnames=rows[0].keys())
                    w.writeheader()
                    w.writerows(sel)
EOF
for gb in 1 5 10 15 20; do
  profile runtime_reserved_bytes "${gb}.0e9" "res$gb"
  echo "  reserved $gb GB per GPU"
  for model in llama-4-maverick llama-4-scout qwen3-235b-a22b; do
    for gpu in h100-sxm h200-sxm; do
      args=()
      for f in "$tmp"/dp-$model-$gpu-*.csv; do
        repoint "$f" "$tmp/res$gb.toml" "$f.res$gb"
        args+=(--reference "$f.res$gb")
      done
      if $bin validate --no-cv "${args[@]}" --format csv > "$tmp/out-$model-$gpu-$gb.csv" 2>/dev/null; then
        summary "$tmp/out-$model-$gpu-$gb.csv" | grep -v " all "
      else
        echo "    $gpu $model: the weights and the reservation leave no room for the KV cache"
      fi
    done
  done
done

echo "== 2. KV precision: FP8-weight rows of H100 and H200 with a 16-bit KV cache"
args=()
for f in "${moe[@]}"; do
  python3 - "$ref/$f.csv" "$tmp/$f-bf16kv.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=rows[0].keys())
    w.writeheader()
    for r in rows:
        if r["dtype"] == "fp8" and r["gpu"] in ("h100-sxm", "h200-sxm"):
            r["kv_cache_dtype"] = "bf16"
            w.writerow(r)
EOF
  [ "$(wc -l < "$tmp/$f-bf16kv.csv")" -gt 1 ] && args+=(--reference "$tmp/$f-bf16kv.csv")
done
$bin validate --no-cv "${args[@]}" --format csv > "$tmp/bf16kv.csv" 2>/dev/null
summary "$tmp/bf16kv.csv"
echo "  (the same rows with the committed FP8 KV cache)"
args=()
for f in "${moe[@]}"; do args+=(--reference "$ref/$f.csv"); done
$bin validate --no-cv "${args[@]}" --format csv > "$tmp/committed.csv" 2>/dev/null
python3 - "$tmp/committed.csv" "$tmp/committed-fp8.csv" <<'EOF'
import csv, glob, sys
refs = {r["id"]: r for f in glob.glob("calibration/reference/trtllm-*.csv") for r in csv.DictReader(open(f))}
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=rows[0].keys())
    w.writeheader()
    w.writerows(r for r in rows if refs[r["id"]]["dtype"] == "fp8" and refs[r["id"]]["gpu"] in ("h100-sxm", "h200-sxm"))
EOF
summary "$tmp/committed-fp8.csv"

echo "== 3. the v1.0 page's multi-GPU MoE columns read as tensor parallel (tp = n, dp = 1)"
python3 - "$ref/trtllm-1.0-moe-offline.csv" "$tmp/v10-tp.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=rows[0].keys())
    w.writeheader()
    for r in rows:
        if r["dp"] not in ("", "1") and r["gpu"] in ("h100-sxm", "h200-sxm"):
            r["tp"], r["dp"] = r["dp"], "1"
            w.writerow(r)
EOF
$bin validate --no-cv --reference "$tmp/v10-tp.csv" --format csv > "$tmp/v10-tp-out.csv" 2>/dev/null
summary "$tmp/v10-tp-out.csv" | grep " all "

echo "== 4. H200 : H100 throughput ratio, predicted / measured - 1 (same model, deployment, load)"
$bin validate --no-cv --reference $ref/trtllm-1.0-offline-70b-405b.csv --format csv > "$tmp/dense.csv" 2>/dev/null
python3 - "$tmp/committed.csv" "$tmp/dense.csv" <<'EOF'
import csv, glob, statistics as st, sys
refs = {r["id"]: r for f in glob.glob("calibration/reference/trtllm-*.csv") for r in csv.DictReader(open(f))}
for name, path in [("MoE rows", sys.argv[1]), ("dense Llama-3.1-405B TP8 (control)", sys.argv[2])]:
    d = {}
    for r in csv.DictReader(open(path)):
        x = refs[r["id"]]
        key = (x["model"], x["dtype"], x["tp"], x.get("ep"), x.get("dp"), x["input_len"], x["output_len"],
               r["id"].split("-")[0])
        d[(x["gpu"],) + key] = (float(r["measured"]), float(r["predicted"]))
    by = {}
    for k, (m1, p1) in d.items():
        k2 = ("h200-sxm",) + k[1:]
        if k[0] == "h100-sxm" and k2 in d:
            m2, p2 = d[k2]
            by.setdefault(k[1], []).append((p2 / p1) / (m2 / m1) - 1)
    allr = [v for vs in by.values() for v in vs]
    print(f"  {name}: {len(allr)} pairs, median {st.median(allr) * 100:+.1f}%")
    for model, vs in sorted(by.items()):
        print(f"    {model:18s} {len(vs):2d} pairs  median {st.median(vs) * 100:+6.1f}%")
EOF

echo "== 5. TensorRT-LLM per-sequence host cost at its prior (2 us) instead of 33.8 us"
profile per_sequence_s 2.0e-6 ps2
repoint $ref/serving-measurements.csv "$tmp/ps2.toml" "$tmp/fit-ps2.csv"
$bin validate --no-cv --reference "$tmp/fit-ps2.csv" --format csv 2>/dev/null \
  | awk -F, '$1 ~ /^T-/ { printf "    %-22s measured %7s predicted %9.0f  %+6.1f%%\n", $1, $5, $6, $7 * 100 }'
args=()
for f in "${moe[@]}"; do repoint "$ref/$f.csv" "$tmp/ps2.toml" "$tmp/$f-ps2.csv"; args+=(--reference "$tmp/$f-ps2.csv"); done
$bin validate --no-cv "${args[@]}" --format csv > "$tmp/moe-ps2.csv" 2>/dev/null
summary "$tmp/moe-ps2.csv" | grep " all "

echo "== 6. the same per-rank batch on both GPUs: FP8 attention-DP rows, simulated mean decode batch per rank"
# Each row is re-run as a scenario (`servesim run`, the deployment and load `validate` builds)
# to read the simulated mean batch per attention-DP rank; its throughput must equal the
# prediction `validate` printed (a second path to the same figure, checked here).
python3 - "$bin" "$tmp/committed.csv" "$tmp" <<'EOF'
import csv, glob, json, statistics as st, subprocess, sys
bin_, committed, tmp = sys.argv[1:]
refs = {r["id"]: r for f in glob.glob("calibration/reference/trtllm-*.csv") for r in csv.DictReader(open(f))}
pred = {r["id"]: r for r in csv.DictReader(open(committed))}
bands = {}
for id_, c in sorted(pred.items()):
    r = refs[id_]
    if r["gpu"] not in ("h100-sxm", "h200-sxm") or r["dtype"] != "fp8" or r["dp"] in ("", "1"):
        continue
    if r["model"] == "deepseek-r1":
        continue
    path = f"{tmp}/row-{id_}.toml"
    with open(path, "w") as out:
        out.write(f'name = "{id_}"\n[deployment]\nmodel = "{r["model"]}"\ngpu = "{r["gpu"]}"\n'
                  f'tp = {r["tp"]}\ndp = {r["dp"]}\nep = {r["ep"] or 1}\ndtype = "fp8"\n'
                  f'kv_cache_dtype = "{r["kv_cache_dtype"] or "auto"}"\nengine = "trtllm"\n'
                  f'[workload]\nnum_requests = {r["num_requests"]}\n[workload.arrival]\nkind = "offline"\n'
                  f'[workload.input]\nkind = "fixed"\ntokens = {r["input_len"]}\n'
                  f'[workload.output]\nkind = "fixed"\ntokens = {r["output_len"]}\n')
    s = json.loads(subprocess.run([bin_, "run", path, "--format", "json"], check=True,
                                  capture_output=True, text=True).stdout)
    if abs(s["output_throughput"] / float(c["predicted"]) - 1) > 1e-6:
        sys.exit(f"{id_}: run gives {s['output_throughput']:.0f} tokens/s, validate {float(c['predicted']):.0f}")
    per_rank = s["mean_batch_size"] / int(r["dp"])
    print(f"    {id_:34s} {r['gpu']:9s} batch per rank {per_rank:7.1f}  signed {float(c['signed_error']) * 100:+6.1f}%")
    band = "under 100" if per_rank < 100 else "100-250" if per_rank < 250 else "250 and more"
    bands.setdefault((band, r["gpu"]), []).append(float(c["signed_error"]))
for (band, gpu), es in sorted(bands.items()):
    print(f"    batch per rank {band:12s} {gpu:9s} rows {len(es):2d}  median signed {st.median(es) * 100:+6.1f}%")
EOF

echo "== 7. the capacity policy: admission on the KV in use, preemption on overflow (MAX_UTILIZATION)"
# trtllm-bench's default is GUARANTEED_NO_EVICT (`--scheduler_policy`, throughput.py); the
# other policy, as the simulator's reserve_output_kv = false runs it.
sed "s/^reserve_output_kv = .*/reserve_output_kv = false/" calibration/engines/trtllm.toml > "$tmp/maxutil.toml"
args=()
for f in "${moe[@]}"; do repoint "$ref/$f.csv" "$tmp/maxutil.toml" "$tmp/$f-maxutil.csv"; args+=(--reference "$tmp/$f-maxutil.csv"); done
$bin validate --no-cv "${args[@]}" --format csv > "$tmp/moe-maxutil.csv" 2>/dev/null
summary "$tmp/moe-maxutil.csv" | grep " all "
echo "  (the committed GUARANTEED_NO_EVICT)"
summary "$tmp/committed.csv" | grep " all "
