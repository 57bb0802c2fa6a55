#!/usr/bin/env bash
# Where the time goes: `perf record` of a 1,000,000-request run and callgrind of a
# 100,000-request run (Llama-3.1-8B / 1x H100 SXM / vLLM / ShareGPT at 50 req/s = 80% load),
# then perf of `servesim plan` and callgrind of a 10-point sweep (one rayon thread), printing the
# top entries. Needs perf and valgrind (apt-get install linux-perf valgrind); either is skipped
# when missing. The release profile keeps line tables (debug = 1), so symbols resolve.
#
#   scripts/perf-profile.sh [TOP]     # TOP entries per profile, default 15
set -eu  # no pipefail: `| head` closes perf report's pipe early

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"
top="${1:-15}"
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp target/release/servesim "$work/servesim"
bin="$work/servesim"
run=(run --set deployment.model=llama-3.1-8b --set deployment.gpu=h100-sxm --set deployment.tp=1
  --set deployment.engine=vllm --set workload.dataset=sharegpt --format json
  --set workload.arrival.rate_per_s=50)

if command -v perf >/dev/null; then
  echo "== perf: run, 1,000,000 requests at 80% load (self time)"
  perf record -q -F 5000 -o "$work/run.data" "$bin" "${run[@]}" \
    --set workload.num_requests=1000000 >/dev/null 2>&1
  perf report -i "$work/run.data" --stdio --no-children --sort symbol 2>/dev/null |
    grep -E '^ +[0-9]' | head -n "$top" | cut -c1-110
  echo "== perf: servesim plan (embedded chat-slo), RAYON_NUM_THREADS=1 (self time)"
  RAYON_NUM_THREADS=1 perf record -q -F 5000 -o "$work/plan.data" "$bin" plan \
    --out "$work/plan" >/dev/null 2>&1
  perf report -i "$work/plan.data" --stdio --no-children --sort symbol 2>/dev/null |
    grep -E '^ +[0-9]' | head -n "$top" | cut -c1-110
fi
if command -v valgrind >/dev/null; then
  echo "== callgrind: run, 100,000 requests at 80% load (self instructions)"
  valgrind --tool=callgrind --callgrind-out-file="$work/run.cg" "$bin" "${run[@]}" \
    --set workload.num_requests=100000 >/dev/null 2>"$work/cg.err"
  grep 'refs' "$work/cg.err"
  callgrind_annotate "$work/run.cg" 2>/dev/null | sed -n '/file:function/,$p' | sed 1,2d |
    head -n "$top" | cut -c1-160
  echo "== callgrind: sweep, 10 points x 2,000 requests, 1 thread (inclusive instructions)"
  RAYON_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$work/sweep.cg" "$bin" \
    sweep scenarios/chat-slo.toml --set workload.num_requests=2000 \
    --vary workload.arrival.rate_per_s=1..100:10 --out "$work/sweep" >/dev/null 2>"$work/cg.err"
  grep 'refs' "$work/cg.err"
  callgrind_annotate --inclusive=yes "$work/sweep.cg" 2>/dev/null | sed -n '/file:function/,$p' |
    grep -E 'run_with_seed|summarize|value_at_quantile|cluster::simulate \[|LatencyHistogram|spec_from_iter' |
    head -n "$top" | cut -c1-160
fi
