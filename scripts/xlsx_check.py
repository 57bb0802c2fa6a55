#!/usr/bin/env python3
"""Helpers for scripts/check-xlsx.sh (standard library only).

  sheets IN.xlsx                      print the sheet names, in order
  sheet-row IN.xlsx SHEET N           print row N (1-based) of SHEET as written (cached
                                      values, shared strings resolved): a line a cell,
                                      REF<TAB>VALUE
  edit IN.xlsx OUT.xlsx SHEET CELL VALUE
                                      set a number cell and poison every formula's cached
                                      result in every sheet (so only a recalculation can show
                                      the right numbers)
  compare IN.xlsx CSVDIR BASENAME     compare every formula cell's cached result (servesim's
                                      own value) with LibreOffice's recalculation, exported as
                                      CSVDIR/BASENAME-<sheet>.csv; numbers to a relative 1e-9
  cell CSV REF                        print one cell of a CSV export (e.g. B3)
  label CSV LABEL                     print column B of the row whose column A is LABEL
  field CSV LABEL COLUMN              print column COLUMN (A, B, C, ...) of that row
  row CSV LABEL                       print the number (1-based) of that row
  batch CSV                           print the Inputs export's batch-tier price and its
                                      floor (the cost at capacity); fail when the tier is
                                      below the floor
"""
import csv
import os
import re
import sys
import zipfile
import xml.etree.ElementTree as ET

POISON = "-999999"
NS = {
    "m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
}
REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def sheet_parts(zf):
    """[(sheet name, part path)] in workbook order."""
    wb = ET.fromstring(zf.read("xl/workbook.xml"))
    rels = ET.fromstring(zf.read("xl/_rels/workbook.xml.rels"))
    target = {r.get("Id"): r.get("Target") for r in rels}
    out = []
    for s in wb.find("m:sheets", NS):
        t = target[s.get(REL)]
        out.append((s.get("name"), "xl/" + t.lstrip("/").removeprefix("xl/")))
    return out


def col_index(ref):
    letters = re.match(r"[A-Z]+", ref).group(0)
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1, int(ref[len(letters):]) - 1


def formula_cells(zf, part):
    """{ref: (formula, cached text or None)} of one sheet."""
    root = ET.fromstring(zf.read(part))
    out = {}
    for c in root.iter("{%s}c" % NS["m"]):
        f = c.find("m:f", NS)
        if f is None:
            continue
        v = c.find("m:v", NS)
        out[c.get("r")] = (f.text or "", None if v is None else (v.text or ""))
    return out


def num(s):
    s = s.strip()
    if s == "":
        return None
    # LibreOffice keeps the % of percent-formatted cells even in raw-value CSV export.
    if s.endswith("%"):
        return float(s[:-1]) / 100
    try:
        return float(s.replace("$", "").replace(",", ""))
    except ValueError:
        return s


def cmd_sheets(path):
    with zipfile.ZipFile(path) as zf:
        for name, _ in sheet_parts(zf):
            print(name)


def shared_strings(zf):
    """The workbook's shared strings, in index order (none without the part)."""
    if "xl/sharedStrings.xml" not in zf.namelist():
        return []
    root = ET.fromstring(zf.read("xl/sharedStrings.xml"))
    return ["".join(t.text or "" for t in si.iter("{%s}t" % NS["m"])) for si in root]


def cmd_sheet_row(path, sheet, n):
    with zipfile.ZipFile(path) as zf:
        parts = dict(sheet_parts(zf))
        if sheet not in parts:
            sys.exit("sheet-row: no sheet %r in %s" % (sheet, path))
        strings = shared_strings(zf)
        root = ET.fromstring(zf.read(parts[sheet]))
        for row in root.iter("{%s}row" % NS["m"]):
            if row.get("r") != n:
                continue
            for c in row.iter("{%s}c" % NS["m"]):
                v = c.find("m:v", NS)
                text = "" if v is None else (v.text or "")
                if c.get("t") == "s" and text:
                    text = strings[int(text)]
                elif c.get("t") == "inlineStr":
                    text = "".join(t.text or "" for t in c.iter("{%s}t" % NS["m"]))
                print("%s\t%s" % (c.get("r"), text))
            return
        sys.exit("sheet-row: no row %s in sheet %r of %s" % (n, sheet, path))


def cmd_edit(src, dst, sheet, cell, value):
    with zipfile.ZipFile(src) as zin:
        parts = dict(sheet_parts(zin))
        if sheet not in parts:
            sys.exit("edit: no sheet %r" % sheet)
        items = [(i, zin.read(i.filename)) for i in zin.infolist()]
    poisoned = 0
    out = []
    for info, data in items:
        if info.filename in parts.values():
            xml = data.decode("utf-8")
            if info.filename == parts[sheet]:
                pat = re.compile(r'(<c r="%s"[^>]*>)<v>[^<]*</v>(</c>)' % re.escape(cell))
                xml, n = pat.subn(lambda m: m.group(1) + "<v>%s</v>" % value + m.group(2), xml)
                if n != 1:
                    sys.exit("edit: number cell %s not found in %s" % (cell, sheet))
            # Poison cached formula results: numbers become -999999, text results too.
            xml, k = re.subn(r"(</f>)<v>[^<]*</v>", r"\1<v>%s</v>" % POISON, xml)
            xml = re.sub(r' t="str"(>\s*<f>)', r"\1", xml)
            poisoned += k
            data = xml.encode("utf-8")
        out.append((info, data))
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info, data in out:
            zout.writestr(info, data)
    print("edit: %s!%s := %s; poisoned %d cached formula results" % (sheet, cell, value, poisoned))


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def csv_cell(rows, ref):
    c, r = col_index(ref)
    if r >= len(rows) or c >= len(rows[r]):
        return ""
    return rows[r][c]


def cmd_compare(path, csvdir, base):
    checked = 0
    bad = []
    with zipfile.ZipFile(path) as zf:
        for name, part in sheet_parts(zf):
            cells = formula_cells(zf, part)
            if not cells:
                continue
            export = os.path.join(csvdir, "%s-%s.csv" % (base, name))
            if not os.path.exists(export):
                sys.exit("compare: LibreOffice wrote no %s" % export)
            rows = read_csv(export)
            for ref, (formula, cached) in sorted(cells.items()):
                got = num(csv_cell(rows, ref))
                want = None if cached is None else num(cached)
                checked += 1
                if isinstance(want, float) and isinstance(got, float):
                    tol = 1e-9 * max(abs(want), abs(got)) + 1e-12
                    if abs(want - got) > tol:
                        bad.append((name, ref, formula, cached, got))
                elif want != got:
                    bad.append((name, ref, formula, cached, got))
    for name, ref, formula, cached, got in bad[:20]:
        print("MISMATCH %s!%s =%s: servesim %r, LibreOffice %r" % (name, ref, formula, cached, got))
    print("compare: %d formula cells, %d mismatches" % (checked, len(bad)))
    if bad or checked == 0:
        sys.exit(1)


def cmd_cell(path, ref):
    print(csv_cell(read_csv(path), ref))


def cmd_label(path, label):
    for row in read_csv(path):
        if row and row[0] == label:
            print(row[1] if len(row) > 1 else "")
            return
    sys.exit("label: no row %r in %s" % (label, path))


def find_row(path, label):
    for i, row in enumerate(read_csv(path)):
        if row and row[0] == label:
            return i, row
    sys.exit("no row %r in %s" % (label, path))


def cmd_field(path, label, column):
    _, row = find_row(path, label)
    c, _ = col_index(column + "1")
    print(row[c] if c < len(row) else "")


def cmd_row(path, label):
    print(find_row(path, label)[0] + 1)


def cmd_batch(path):
    def starting(prefix):
        for row in read_csv(path):
            if row and row[0].startswith(prefix):
                return row[1] if len(row) > 1 else ""
        sys.exit("batch: no row starting %r in %s" % (prefix, path))

    tier = starting("Batch tier $ per 1M output tokens")
    floor = starting("$ per 1M output tokens at capacity")
    print("batch tier $/M output: %s; at capacity (its floor): %s" % (tier, floor))
    t, f = num(tier), num(floor)
    if t is None or f is None:
        sys.exit("MISMATCH: the batch tier or its floor is not a number")
    # The CSV export rounds to 15 significant digits: compare to 1e-9.
    if t < f * (1 - 1e-9):
        sys.exit("MISMATCH: the batch tier (%s) is below the cost at capacity (%s)" % (t, f))


def main(argv):
    cmds = {
        "batch": (cmd_batch, 1),
        "field": (cmd_field, 3),
        "row": (cmd_row, 2),
        "label": (cmd_label, 2),
        "sheets": (cmd_sheets, 1),
        "sheet-row": (cmd_sheet_row, 3),
        "edit": (cmd_edit, 5),
        "compare": (cmd_compare, 3),
        "cell": (cmd_cell, 2),
    }
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        sys.exit(__doc__)
    f, _ = cmds[argv[1]]
    f(*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
