#!/usr/bin/env bash
# Checks the cost workbook's formulas with LibreOffice (headless), which recalculates them.
#
#   scripts/check-xlsx.sh [WORKBOOK.xlsx]
#
# Without an argument, builds one with `cargo run --release --example cost_workbook`.
# 1. Converts the "Cost" sheet to CSV (raw values, recalculated on load) and checks every
#    formula cell against the same cost computed here, independently, from the input cells.
# 2. Doubles the $/GPU-hour input of the first plan (D2) in the sheet XML and poisons every
#    cached formula result, converts again, and checks the costs follow: D2's plan costs twice
#    as much per token, the others are unchanged, and no poisoned value survives.
# Exits non-zero on any mismatch.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
command -v soffice >/dev/null || { echo "check-xlsx: soffice (LibreOffice) not found" >&2; exit 2; }
command -v python3 >/dev/null || { echo "check-xlsx: python3 not found" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

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

to_csv() { # $1 = xlsx; writes the first sheet next to it as .csv, raw (unformatted) values
    soffice -env:UserInstallation="file://$profile" --headless --norestore \
        --convert-to 'csv:Text - txt - csv (StarCalc):44,34,76,1,,1033,false,true,false,false,false' \
        --outdir "$work" "$1" >"$work/soffice.log" 2>&1 || { cat "$work/soffice.log" >&2; exit 1; }
    [[ -s "${1%.xlsx}.csv" ]] || { echo "check-xlsx: no CSV from $1" >&2; cat "$work/soffice.log" >&2; exit 1; }
}

echo "== 1. workbook as written (LibreOffice recalculates on load)"
to_csv "$work/base.xlsx"
python3 "$here/xlsx_check.py" check "$work/base.csv"

echo "== 2. \$/GPU-hour of plan 1 doubled in the file, cached results poisoned"
price=$(python3 -c 'import csv,sys; r=list(csv.reader(open(sys.argv[1])))[1]; print(float(r[3]))' "$work/base.csv")
new=$(python3 -c "print($price * 2)")
python3 "$here/xlsx_check.py" edit "$work/base.xlsx" "$work/edited.xlsx" D2 "$new"
to_csv "$work/edited.xlsx"
python3 "$here/xlsx_check.py" check "$work/edited.csv"
python3 - "$work/base.csv" "$work/edited.csv" <<'PY'
import csv, sys
base = list(csv.reader(open(sys.argv[1])))
edit = list(csv.reader(open(sys.argv[2])))
b, e = float(base[1][11]), float(edit[1][11])
print("plan 1 $/1M output tokens: %.6g -> %.6g (x%.6g)" % (b, e, e / b))
if abs(e / b - 2) > 1e-9:
    sys.exit("MISMATCH: doubling $/GPU-hour should double the cost")
for i in range(2, len(base)):
    if base[i][:13] != edit[i][:13] and base[i][0] != "":
        sys.exit("MISMATCH: row %d changed though its inputs did not: %r -> %r" % (i + 1, base[i], edit[i]))
if any("-999999" in c for row in edit for c in row):
    sys.exit("MISMATCH: a poisoned cached result was shown: LibreOffice did not recalculate")
PY
echo "check-xlsx: OK"
