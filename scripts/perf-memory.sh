#!/usr/bin/env bash
# Peak resident memory of one `servesim run` at 100,000 and 10,000,000 requests (target: the
# 10M run needs no more than twice the 100k run's peak RSS; docs/performance.md).
#
#   scripts/perf-memory.sh [N1 N2]      # default 100000 10000000
#
# Llama-3.1-8B / 1x H100 SXM / vLLM / ShareGPT, two loads: offline (every request arrives at
# t = 0) and Poisson at 50 req/s (about 80% of the offline capacity with max_num_seqs 256). Uses GNU time
# (`/usr/bin/time -v`; `apt-get update && apt-get install -y time` if missing) on the release
# binary (built first). Prints one line per run: load, N, peak RSS, wall time, completed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"
[ -x /usr/bin/time ] || { echo "perf-memory: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
n1="${1:-100000}"
n2="${2:-10000000}"
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp target/release/servesim "$work/servesim"

common=(--set deployment.model=llama-3.1-8b --set deployment.gpu=h100-sxm --set deployment.tp=1
  --set deployment.dtype=bf16 --set deployment.engine=vllm --set workload.dataset=sharegpt
  --format json)
declare -A peak
printf '%-10s %12s %14s %10s %12s\n' load requests peak_rss_MiB wall_s completed
for load in offline poisson-50; do
  case $load in
    offline) arrival=(--set workload.arrival.kind=offline) ;;
    poisson-50) arrival=(--set workload.arrival.kind=poisson --set workload.arrival.rate_per_s=50) ;;
  esac
  for n in "$n1" "$n2"; do
    /usr/bin/time -v -o "$work/time.txt" "$work/servesim" run "${common[@]}" "${arrival[@]}" \
      --set "workload.num_requests=$n" >"$work/out.json"
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
    done_=$(sed -n 's/.*"completed": \([0-9]*\).*/\1/p' "$work/out.json" | head -1)
    peak[$load-$n]=$kb
    printf '%-10s %12s %14.1f %10s %12s\n' "$load" "$n" "$(echo "$kb / 1024" | bc -l)" "$wall" "$done_"
  done
  ratio=$(echo "${peak[$load-$n2]} / ${peak[$load-$n1]}" | bc -l)
  verdict=$(echo "$ratio <= 2" | bc -l)
  printf '%-10s peak RSS ratio %s/%s: %.2fx (target <= 2x): %s\n' "$load" "$n2" "$n1" "$ratio" \
    "$([ "$verdict" = 1 ] && echo met || echo MISSED)"
done
