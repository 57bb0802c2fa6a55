#!/usr/bin/env bash
# Runs the performance-target benchmarks (benches/targets.rs) RUNS times (default 3) and prints
# the table of docs/performance.md: best and spread (min..max over the runs) of each figure.
#
#   scripts/perf-bench.sh            # about 3-4 minutes on 2 cores
#   RUNS=1 scripts/perf-bench.sh     # one pass
#
# (a)-(d) run pinned to one core (taskset -c 0) with RAYON_NUM_THREADS=1: the targets are "on
# one core". (e) runs unpinned and builds its own rayon pools of 1 and 2 threads.
# Then times the CLI end to end: `servesim plan` (embedded chat-slo scenario) RUNS times, the
# release binary directly and through `cargo run --release`, writing the report to a temporary
# folder instead of servesim-report/.
# Criterion's own reports stay under target/criterion/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"
runs="${RUNS:-3}"
command -v python3 >/dev/null || { echo "perf-bench: python3 not found" >&2; exit 2; }
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "$(free -g | awk '/^Mem:/ {print $2}') GiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

cargo build --release --quiet
bin="$(cargo bench --bench targets --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "targets" and m.get("executable"):
        print(m["executable"])' | tail -1)"
[ -x "$bin" ] || { echo "perf-bench: no bench executable" >&2; exit 1; }
# A private copy: others may rebuild target/ while this runs.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/targets"
cp target/release/servesim "$work/servesim"

results="$work/results.tsv"
crit="$root/target/criterion"
collect() { # run number
  python3 - "$crit" "$1" >>"$results" <<'EOF'
import json, sys, os
crit, run = sys.argv[1], sys.argv[2]
for d in ["targets/run-1m-80pct", "targets/run-1m-saturated-preempting",
          "targets/run-1m-8-replicas-lor", "targets/plan-chat-slo",
          "targets_sweep-100pt/threads-1", "targets_sweep-100pt/threads-2"]:
    p = os.path.join(crit, d, "new", "estimates.json")
    if os.path.exists(p):
        e = json.load(open(p))
        print(f"{run}\t{d}\t{e['mean']['point_estimate'] / 1e9:.6f}")
EOF
}

for i in $(seq "$runs"); do
  echo "== run $i/$runs: (a)-(d) on one core; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  RAYON_NUM_THREADS=1 "${pin[@]}" "$work/targets" --bench 'targets/(run|plan)' 2>&1 |
    grep -E '^setup|time:|thrpt:|^targets' || true
  echo "== run $i/$runs: (e) sweep, 1 and 2 threads; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  "$work/targets" --bench 'sweep' 2>&1 | grep -E 'time:|thrpt:|^targets' || true
  collect "$i"
done

plan_out="$work/plan-report"
for i in $(seq "$runs"); do
  for how in binary binary-1-core cargo-run; do
    start=$(date +%s.%N)
    case $how in
      binary) "$work/servesim" plan --out "$plan_out" >/dev/null 2>&1 ;;
      binary-1-core) RAYON_NUM_THREADS=1 "${pin[@]}" "$work/servesim" plan --out "$plan_out" >/dev/null 2>&1 ;;
      # Rebuilds first if src/ changed since the build above (then the time is not the plan's).
      cargo-run) cargo run --release --quiet -- plan --out "$plan_out" >/dev/null 2>&1 ;;
    esac
    end=$(date +%s.%N)
    printf '%s\tcli-plan-%s\t%s\n' "$i" "$how" "$(echo "$end - $start" | bc -l)" >>"$results"
  done
done

python3 - "$results" "$runs" <<'EOF'
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    run, name, secs = line.split("\t")
    rows[name].append(float(secs))
N = 1_000_000
def req_s(name, target):
    t = rows[name]
    best, worst = N / min(t), N / max(t)
    return f"{best:,.0f} req/s", f"{worst:,.0f}..{best:,.0f}", f">= {target:,} req/s", best >= target
def secs(name, target):
    t = rows[name]
    return f"{min(t):.3f} s", f"{min(t):.3f}..{max(t):.3f} s", f"< {target} s", min(t) < target
table = []
for label, name, f, target in [
    ("(a) 1M req, 80% load, 1 replica", "targets/run-1m-80pct", req_s, 1_000_000),
    ("(b) 1M req, saturated, preempting", "targets/run-1m-saturated-preempting", req_s, 300_000),
    ("(c) 1M req, 8 replicas, LOR", "targets/run-1m-8-replicas-lor", req_s, 300_000),
    ("(d) plan() chat-slo, 1 core", "targets/plan-chat-slo", secs, 5),
    ("(d) servesim plan CLI, 2 cores", "cli-plan-binary", secs, 5),
    ("(d) servesim plan CLI, 1 core", "cli-plan-binary-1-core", secs, 5),
    ("(d) cargo run --release -- plan", "cli-plan-cargo-run", secs, 5),
    ("(e) sweep 100 pt, 1 thread", "targets_sweep-100pt/threads-1", secs, 1e9),
    ("(e) sweep 100 pt, 2 threads", "targets_sweep-100pt/threads-2", secs, 1e9),
]:
    if rows.get(name):
        table.append((label,) + f(name, target))
ratios = []
t1, t2 = rows.get("targets_sweep-100pt/threads-1", []), rows.get("targets_sweep-100pt/threads-2", [])
for a, b in zip(t1, t2):
    ratios.append(a / b)
print()
print(f"| benchmark | best of {sys.argv[2]} | spread | target | met |")
print("|---|---|---|---|---|")
for label, best, spread, target, met in table:
    if target.startswith("< 1000000000"):
        target, met = "-", None
    print(f"| {label} | {best} | {spread} | {target} | {'-' if met is None else ('yes' if met else 'NO')} |")
if ratios:
    print(f"| (e) sweep speed-up 1 -> 2 threads | {max(ratios):.2f}x | {min(ratios):.2f}..{max(ratios):.2f}x "
          f"| >= 1.8x | {'yes' if max(ratios) >= 1.8 else 'NO'} |")
EOF
