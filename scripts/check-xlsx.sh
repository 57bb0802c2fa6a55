#!/usr/bin/env bash
# Checks the cost workbook as a user would, with LibreOffice (headless) recalculating it.
#
#   scripts/check-xlsx.sh [WORKBOOK.xlsx]
#   scripts/check-xlsx.sh WORKBOOK.xlsx --price GPU VALUE
#
# Without an argument, builds the sample with `cargo run --release --example cost_workbook`.
# 1. Recalculates the workbook as written and compares every formula cell, on every sheet,
#    with the result servesim cached in it (its own value of the same formula): relative 1e-9.
#    Then, when the plan has a batch tier, checks that LibreOffice's batch-tier price is not
#    below its floor, the cost per token at capacity.
# 2. Doubles the target load (Inputs!B3) in the sheet XML and poisons every cached formula
#    result, recalculates, and checks that no poisoned value survives and that the chosen
#    fleet's replicas and $/hour grow by 1.5-2.5x (a plan that scales; prints both, and the
#    candidate LibreOffice chose).
# With --price, step 2 instead sets GPU's $/GPU-hour in the price column in use to VALUE,
#    poisons every cached result, recalculates, and prints the candidate LibreOffice chooses
#    and its status (feasible: sized by simulation; pruned: a capacity bound).
# Exits non-zero on any mismatch.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
command -v soffice >/dev/null || { echo "check-xlsx: soffice (LibreOffice) not found" >&2; exit 2; }
command -v python3 >/dev/null || { echo "check-xlsx: python3 not found" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

price_gpu=""
if [[ $# -eq 4 && "$2" == "--price" ]]; then
    price_gpu="$3"; price_value="$4"
elif [[ $# -gt 1 ]]; then
    echo "usage: scripts/check-xlsx.sh [WORKBOOK.xlsx [--price GPU VALUE]]" >&2; exit 2
fi
if [[ $# -ge 1 ]]; then
    cp "$1" "$work/base.xlsx"
else
    (cd "$root" && cargo run --quiet --release --example cost_workbook -- "$work/base.xlsx" >/dev/null)
fi

# A private LibreOffice profile that always recalculates OOXML formulas on load (the default
# may trust the cached results, which would prove nothing).
profile="$work/lo-profile"
mkdir -p "$profile/user"
cat > "$profile/user/registrymodifications.xcu" <<'XCU'
<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode" oor:op="fuse"><value>0</value></prop></item>
</oor:items>
XCU

to_csv() { # $1 = xlsx; writes every sheet next to it as <name>-<sheet>.csv, raw values
    soffice -env:UserInstallation="file://$profile" --headless --norestore \
        --convert-to 'csv:Text - txt - csv (StarCalc):44,34,76,1,,1033,false,true,false,false,false,-1' \
        --outdir "$work" "$1" >"$work/soffice.log" 2>&1 || { cat "$work/soffice.log" >&2; exit 1; }
    local base; base="$(basename "${1%.xlsx}")"
    [[ -s "$work/$base-Inputs.csv" ]] || { echo "check-xlsx: no CSV from $1" >&2; cat "$work/soffice.log" >&2; ls "$work" >&2; exit 1; }
}

echo "== 1. workbook as written: LibreOffice's recalculation against servesim's cached values"
to_csv "$work/base.xlsx"
python3 "$here/xlsx_check.py" compare "$work/base.xlsx" "$work" base
# The batch tier as written, recalculated: never below the cost of a token at capacity.
if grep -q "^\"\?Batch tier" "$work/base-Inputs.csv" && ! grep -q "^\"\?Batch tier[^,]*,n/a" "$work/base-Inputs.csv"; then
    python3 "$here/xlsx_check.py" batch "$work/base-Inputs.csv"
fi

if [[ -n "$price_gpu" ]]; then
    echo "== 2. $price_gpu at \$$price_value/GPU-hour, cached results poisoned"
    inputs="$work/base-Inputs.csv"
    row=$(python3 "$here/xlsx_check.py" row "$inputs" "$price_gpu")
    col=$(python3 "$here/xlsx_check.py" label "$inputs" "Price column (on_demand, reserved, spot)")
    case "$col" in on_demand) letter=B;; reserved) letter=C;; spot) letter=D;; *) echo "check-xlsx: price column '$col'" >&2; exit 1;; esac
    python3 "$here/xlsx_check.py" edit "$work/base.xlsx" "$work/edited.xlsx" Inputs "$letter$row" "$price_value"
    to_csv "$work/edited.xlsx"
    if grep -l -- "-999999" "$work"/edited-*.csv >/dev/null; then
        echo "MISMATCH: a poisoned cached result was shown: LibreOffice did not recalculate"; exit 1
    fi
    echo "chosen candidate (LibreOffice): $(python3 "$here/xlsx_check.py" label "$work/edited-Inputs.csv" Candidate)"
    echo "chosen status (LibreOffice): $(python3 "$here/xlsx_check.py" field "$work/edited-Inputs.csv" Candidate C)"
    echo "Fleet \$/hour (LibreOffice): $(python3 "$here/xlsx_check.py" label "$work/edited-Inputs.csv" "Fleet \$/hour")"
    echo "check-xlsx: OK"
    exit 0
fi

echo "== 2. target load doubled, cached results poisoned"
target=$(python3 "$here/xlsx_check.py" label "$work/base-Inputs.csv" "Target load (req/s)")
new=$(python3 -c "print(2 * float('$target'))")
python3 "$here/xlsx_check.py" edit "$work/base.xlsx" "$work/edited.xlsx" Inputs B3 "$new"
to_csv "$work/edited.xlsx"
python3 - "$here/xlsx_check.py" "$work" <<'PY'
import subprocess, sys
tool, work = sys.argv[1], sys.argv[2]
def label(base, name):
    out = subprocess.run([sys.executable, tool, "label", "%s/%s-Inputs.csv" % (work, base), name],
                         check=True, capture_output=True, text=True).stdout.strip()
    return float(out.replace("$", "").replace(",", "")) if out else None
import glob
for path in glob.glob("%s/edited-*.csv" % work):
    if "-999999" in open(path, encoding="utf-8").read():
        sys.exit("MISMATCH: a poisoned cached result was shown in %s: LibreOffice did not recalculate" % path)
def text(base, name):
    return subprocess.run([sys.executable, tool, "label", "%s/%s-Inputs.csv" % (work, base), name],
                          check=True, capture_output=True, text=True).stdout.strip()
print("chosen candidate (LibreOffice): %s" % text("base", "Candidate"))
rows = [(n, label("base", n), label("edited", n)) for n in ["Target load (req/s)", "Replicas", "Fleet $/hour"]]
for n, a, b in rows:
    print("%-22s %12s -> %12s" % (n, a, b))
(_, t0, t1), (_, r0, r1), (_, u0, u1) = rows
# The CSV export rounds to 15 significant digits: compare to 1e-9, not exactly.
if not (abs(t1 - 2 * t0) <= 1e-9 * abs(t1)):
    sys.exit("MISMATCH: the target did not double")
if r0 is None or u0 is None:
    print("no plan chosen at the written inputs: nothing to scale")
else:
    for n, a, b in rows[1:]:
        if not (1.5 <= b / a <= 2.5):
            sys.exit("MISMATCH: doubling the target moved %s by x%.3f, not 1.5-2.5x" % (n, b / a))
PY
echo "check-xlsx: OK"
