"""Bench (not a test): how much of RTN's proxy loss GPTQ keeps, per role and width, in a GPTQ
artifact's tq_metadata.json (module_info: proxy_loss / rtn_loss); with --table and --out, writes
that sensitivity table with each module's KLs multiplied by its ratio (the GPTQ-corrected table
of bench/README.md, "The composition measured").
Usage: python bench/gptq_recovery.py ARTIFACT [--table SENS.json --out CORRECTED.json]"""
import argparse
import collections
import json
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("artifact")
ap.add_argument("--table")
ap.add_argument("--out")
a = ap.parse_args()
meta = json.loads((Path(a.artifact) / "tq_metadata.json").read_text())
info, mods = meta["module_info"], meta["modules"]
ratio = {n: i["proxy_loss"] / i["rtn_loss"] for n, i in info.items()
         if i.get("method") == "gptq" and i.get("rtn_loss")}
by = collections.defaultdict(list)
for n, r in ratio.items():
    by[(n.split(".")[-1], mods[n]["bits"])].append(r)
print("| role | bits | modules | mean | min | max |")
print("|---|---|---|---|---|---|")
for (role, bits), v in sorted(by.items()):
    print(f"| {role} | {bits} | {len(v)} | {sum(v) / len(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
if a.table and a.out:
    t = json.loads(Path(a.table).read_text())
    for m in t["modules"]:
        for s in m["specs"]:
            s["kl"] *= ratio.get(m["name"], 1.0)
    Path(a.out).write_text(json.dumps(t))
    print(f"wrote {a.out}: {sum(m['name'] in ratio for m in t['modules'])} modules corrected")
