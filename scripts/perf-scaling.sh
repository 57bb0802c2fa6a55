#!/usr/bin/env bash
# Sweep scaling, target (e): a 100-point `servesim sweep` (scenarios/chat-slo.toml,
# workload.arrival.rate_per_s=1..100:100, 2,000 requests a point) with RAYON_NUM_THREADS=1 and
# =2, run as PAIRS (default 5) back-to-back pairs so that both halves of a pair see the same
# background load. Prints each pair's wall times, the CPU share the process obtained (GNU time
# %P: a 2-thread run that gets well under 190% was starved by other processes, and its speed-up
# says nothing about the simulator), and the speed-up; then best and spread.
#
#   scripts/perf-scaling.sh [PAIRS]
# The in-process equivalent (local rayon pools of 1 and 2 threads) is
# `cargo bench --bench targets -- sweep`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"
pairs="${1:-5}"
[ -x /usr/bin/time ] || { echo "perf-scaling: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp target/release/servesim "$work/servesim"
one() { # threads -> "wall cpu%"
  RAYON_NUM_THREADS=$1 /usr/bin/time -f '%e %P' -o "$work/t" "$work/servesim" sweep \
    scenarios/chat-slo.toml --set workload.num_requests=2000 \
    --vary workload.arrival.rate_per_s=1..100:100 --out "$work/sweep" >/dev/null 2>&1
  tr -d '%' <"$work/t"
}
one 2 >/dev/null # warm the page cache
printf '%-5s %-14s %-14s %-8s %s\n' pair "1 thread" "2 threads" speedup "load average"
: >"$work/ratios"
for i in $(seq "$pairs"); do
  read -r w1 c1 < <(one 1)
  read -r w2 c2 < <(one 2)
  r=$(echo "$w1 / $w2" | bc -l)
  echo "$r $c2" >>"$work/ratios"
  printf '%-5s %5.2fs %4s%%   %5.2fs %4s%%   %5.2fx   %s\n' "$i" "$w1" "$c1" "$w2" "$c2" "$r" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
done
sort -n "$work/ratios" | awk '{r[NR]=$1} END {printf "speed-up 1 -> 2 threads: best %.2fx, spread %.2f..%.2fx over %d pairs (target >= 1.8x)\n", r[NR], r[1], r[NR], NR}'
awk '$2 >= 180 {n++; if ($1 > b) b = $1} END {if (n) printf "pairs whose 2-thread run got >= 180%% CPU: %d, best speed-up among them %.2fx\n", n, b; else print "no 2-thread run got >= 180% CPU: the machine was busy; rerun when it is idle"}' "$work/ratios"
