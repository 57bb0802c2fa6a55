#!/usr/bin/env bash
# Wall time and peak memory of `servesim plan` for a fleet of hundreds of replicas: Llama-3.1-8B
# chat (ShareGPT lengths) on H100 SXM FP8, p99 TTFT 1 s and p99 TPOT 11 ms, at RATE req/s: the
# scenario tests/data/fleet-20k.toml (which tests/plan_then_run.rs plans at its 20,000 req/s),
# its rate set to RATE. Targets (issue #27): under 60 s on two cores, under 500 MB.
#
#   scripts/perf-plan-fleet.sh [RATE [RUNS]]      # default 20000 3
#
# Uses GNU time (`/usr/bin/time -v`) on the release binary (built first), pinned to two cores
# (`taskset -c 0,1`) when taskset exists. Prints one line per run: wall seconds, peak RSS, the
# fleet planned, and the evidence (R holds, R - 1 misses or why it is unresolved).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"
[ -x /usr/bin/time ] || { echo "perf-plan-fleet: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
rate="${1:-20000}"
runs="${2:-3}"
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp target/release/servesim "$work/servesim"
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0,1)
printf '%-8s %8s %12s %9s  %s\n' rate wall_s peak_RSS_MB replicas evidence
for _ in $(seq "$runs"); do
  /usr/bin/time -v -o "$work/time.txt" "${pin[@]}" "$work/servesim" plan tests/data/fleet-20k.toml \
    --set "workload.arrival.rate_per_s=$rate" --out "$work/report" --format json >"$work/plan.json" 2>"$work/err.txt"
  kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
  python3 - "$work/plan.json" "$rate" "$wall" "$kb" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
rate, wall, kb = sys.argv[2], sys.argv[3], int(sys.argv[4])
m, s = (wall.split(":") + ["0"])[:2] if wall.count(":") == 1 else ("0", wall)
secs = float(m) * 60 + float(s)
d = p["detail"]
r = d["fleet"]["replicas"]
one = d["fleet"]["one_fewer"]
if d["unresolved"]:
    ev = "R - 1 unresolved: " + d["unresolved"]
elif one is None:
    ev = "one replica"
else:
    ev = "R holds, R - 1 %s (both %d requests)" % (
        "holds" if one["summary"]["steady_state"]["sustainable"] else "misses", d["run_requests"])
print("%-8s %8.1f %12.1f %9d  %s" % (rate, secs, kb / 1024, r, ev))
PY
done
