#!/usr/bin/env python3
"""Helpers for scripts/check-xlsx.sh (standard library only).

  edit IN.xlsx OUT.xlsx CELL VALUE   set a number cell on the first sheet and poison every
                                     formula's cached result (so only a recalculation can
                                     show the right numbers)
  check COST.csv [--expect-factor F --against BASE.csv]
                                     recompute each plan's costs from its input cells and
                                     compare with the formula cells LibreOffice computed
"""
import csv
import re
import sys
import zipfile

POISON = "-999999"
SHEET = "xl/worksheets/sheet1.xml"


def edit(src, dst, cell, value):
    with zipfile.ZipFile(src) as zin:
        parts = [(i, zin.read(i.filename)) for i in zin.infolist()]
    out = []
    for info, data in parts:
        if info.filename == SHEET:
            xml = data.decode("utf-8")
            pat = re.compile(r'(<c r="%s"[^>]*>)<v>[^<]*</v>(</c>)' % re.escape(cell))
            xml, n = pat.subn(lambda m: m.group(1) + "<v>%s</v>" % value + m.group(2), xml)
            if n != 1:
                sys.exit("edit: number cell %s not found in %s" % (cell, SHEET))
            # Poison cached formula results: numbers become -999999, strings stay empty.
            xml, k = re.subn(r"(</f>)<v>[^<]*</v>", r"\1<v>%s</v>" % POISON, xml)
            xml = xml.replace(' t="str"><f>', "><f>")
            print("edit: %s := %s; poisoned %d cached formula results" % (cell, value, k))
            data = xml.encode("utf-8")
        out.append((info, data))
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info, data in out:
            zout.writestr(info, data)


def num(s):
    s = s.strip()
    if s == "":
        return None
    # LibreOffice keeps the % of percent-formatted cells even in raw-value CSV export.
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def plans(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if len(header) < 13 or "GPUs" not in header[2] or "1M output" not in header[11]:
        sys.exit("check: %s does not look like the Cost sheet: %r" % (path, header))
    got = []
    for r in body:
        if not r or r[0] == "" or len(r) < 13 or r[2].strip() == "":
            break  # the notes rows follow a blank row
        got.append(r)
    return header, got


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def check(path, factor=None, base=None):
    header, rows = plans(path)
    base_rows = plans(base)[1] if base else None
    bad = 0
    for i, r in enumerate(rows):
        gpus, price, out_tps, in_tps, util = (num(r[c]) or 0.0 for c in range(2, 7))
        per_hour = gpus * price
        out_tph = out_tps * 3600 * util
        tot_tph = (out_tps + in_tps) * 3600 * util
        expect = {
            7: per_hour,
            8: per_hour * 730,
            9: out_tph,
            10: tot_tph,
            11: per_hour / out_tph * 1e6 if out_tph else None,
            12: per_hour / tot_tph * 1e6 if tot_tph else None,
        }
        for c, e in expect.items():
            cell = r[c].strip()
            if e is None:
                ok = cell == ""
                shown = "(empty)"
            else:
                try:
                    ok = close(float(cell), e)
                except ValueError:
                    ok = False
                shown = "%.6g" % e
            if not ok:
                bad += 1
                print("MISMATCH row %d '%s' %s: sheet %r, expected %s" % (i + 2, r[0], header[c], cell, shown))
        cost = r[11].strip()
        line = "row %d %-34s $/GPU-h=%-6g $/1M output tokens: sheet=%s independent=%s" % (
            i + 2, r[0], price, cost or "(empty)", "(empty)" if expect[11] is None else "%.6g" % expect[11])
        if base_rows is not None and factor is not None and expect[11] is not None:
            was = float(base_rows[i][11])
            ratio = float(cost) / was if cost else float("nan")
            line += "  ratio to base=%.6g (want %g)" % (ratio, factor)
            if not close(ratio, factor):
                bad += 1
                print("MISMATCH row %d: cost changed by %r, expected x%g" % (i + 2, ratio, factor))
        print(line)
    if not rows:
        bad += 1
        print("MISMATCH: no plan rows found in %s" % path)
    if bad:
        sys.exit("check: %d mismatches in %s" % (bad, path))
    print("check: %s OK (%d plans)" % (path, len(rows)))


def main(argv):
    if len(argv) == 5 and argv[0] == "edit":
        edit(argv[1], argv[2], argv[3], argv[4])
    elif len(argv) == 2 and argv[0] == "check":
        check(argv[1])
    elif len(argv) == 6 and argv[0] == "check" and argv[2] == "--expect-factor" and argv[4] == "--against":
        check(argv[1], float(argv[3]), argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
