"""Bench helper (not a test): a sensitivity table without some widths, for `tq convert
--sensitivity` (what the allocator does when it may not choose them).

Usage: bench/table_without.py TABLE BITS[,BITS...] > OUT.json   e.g. BITS = 2
"""
import json
import sys


def main():
    table, drop = sys.argv[1], {int(b) for b in sys.argv[2].split(",")}
    t = json.load(open(table))
    t["specs"] = [s for s in t["specs"] if s.get("bits") not in drop]
    for m in t["modules"]:
        m["specs"] = [s for s in m["specs"] if s.get("bits") not in drop]
        if not m["specs"]:
            sys.exit(f"{m['name']}: no spec left after removing {sorted(drop)}")
    json.dump(t, sys.stdout)


if __name__ == "__main__":
    main()
