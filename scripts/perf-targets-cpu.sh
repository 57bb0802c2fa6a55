#!/usr/bin/env bash
# CPU time (perf stat task-clock: user + sys) and, with --instructions, callgrind's instruction
# count of the criterion targets (g), (j) and (k) of benches/targets.rs run through the CLI:
# the same scenarios written as TOML, `servesim run SCENARIO --format json`. On a machine
# shared with others' builds, CPU time and instructions move far less than wall time
# (docs/performance.md, "Fast-forward of decode-only runs").
#
#   scripts/perf-targets-cpu.sh [BINARY...]          # default target/release/servesim
#   INSTRUCTIONS=1 scripts/perf-targets-cpu.sh A B    # also callgrind on 100,000 requests
#
# Several binaries (say main's and a branch's) are run alternately, three times each, and
# their JSON compared byte for byte. Needs perf (and valgrind for the instruction counts).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  (cd "$root" && cargo build --release --quiet)
  bins=("$root/target/release/servesim")
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

ff() { # requests rate: benches/targets.rs scenario(n, 1, poisson, "")
  printf 'seed = 1\n[deployment]\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\ntp = 1\ndtype = "bf16"\nengine = "vllm"\nreplicas = 1\nrouter = "least-outstanding"\n[workload]\ndataset = "sharegpt"\nnum_requests = %s\n[workload.arrival]\nkind = "poisson"\nrate_per_s = %s\n' "$1" "$2"
}
spec() { # requests rate: (j), EAGLE-3 K = 3, acceptance 0.7
  printf 'seed = 1\n[deployment]\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\n[workload]\ndataset = "sharegpt"\nnum_requests = %s\n[workload.arrival]\nkind = "poisson"\nrate_per_s = %s\n[speculative]\nmethod = "eagle3"\nnum_speculative_tokens = 3\nacceptance_rate = 0.7\n' "$1" "$2"
}
for n in 1000000 100000; do
  ff "$n" 1.00 > "$work/ff-1rps-$n.toml"
  ff "$n" 25.00 > "$work/ff-25rps-$n.toml"
  ff "$n" 58.12 > "$work/ff-80pct-$n.toml" # 0.8 x BENCH_CAPACITY_REQ_S (72.65)
  spec "$n" 1.00 > "$work/spec-1rps-$n.toml"
  spec "$n" 25.00 > "$work/spec-25rps-$n.toml"
done
# (k): 20,000 conversations of 10 turns, as benches/targets.rs multi_turn_trace writes them.
python3 - "$work/trace.jsonl" <<'PY'
import sys
rows = sorted((c * 125 + (k - 1) * 3000, c, k) for c in range(20000) for k in range(1, 11))
with open(sys.argv[1], "w") as f:
    for t, c, k in rows:
        ids = ", ".join(str(10 + c * 16 + j) for j in range(k + 2))
        f.write('{"timestamp": %d, "input_length": %d, "output_length": 64, "hash_ids": [%s]}\n'
                % (t, (2 + k) * 512 + 100, ids))
PY
printf 'seed = 1\n[deployment]\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\ntp = 1\nreplicas = 4\nrouter = "prefix-aware"\n[scheduler]\nenable_prefix_caching = true\n[workload.arrival]\nkind = "trace"\nformat = "mooncake"\npath = "%s"\n' "$work/trace.jsonl" > "$work/multi-turn.toml"

for t in ff-1rps-1000000 ff-25rps-1000000 ff-80pct-1000000 spec-1rps-1000000 spec-25rps-1000000 multi-turn; do
  for pass in 1 2 3; do
    for i in "${!bins[@]}"; do
      ms=$(perf stat -e task-clock -x, "${bins[$i]}" run "$work/$t.toml" --format json 2>&1 >"$work/out-$i.json" | grep task-clock | cut -d, -f1)
      echo "$t pass $pass binary $i: ${ms} ms CPU, load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  for i in "${!bins[@]}"; do
    cmp -s "$work/out-0.json" "$work/out-$i.json" || echo "$t: binary $i's JSON differs from binary 0's"
  done
done
if [ "${INSTRUCTIONS:-0}" = 1 ]; then
  for t in ff-1rps-100000 spec-1rps-100000 ff-80pct-100000 spec-25rps-100000 multi-turn; do
    for i in "${!bins[@]}"; do
      ir=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "${bins[$i]}" run "$work/$t.toml" --format json 2>&1 >/dev/null | grep 'refs:' | awk '{print $NF}')
      echo "$t binary $i: $ir instructions"
    done
  done
fi
