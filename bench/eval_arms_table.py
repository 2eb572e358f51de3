#!/usr/bin/env python3
"""Prints bench/eval_arms.sh's tables from its JSON files: per task and metric, the source's
accuracy, then per arm its accuracy and paired difference [95% CI] (lost / gained, McNemar p).

Usage: bench/eval_arms_table.py OUT ARM [ARM ...]
"""
import json
import pathlib
import sys


def main():
    out, arms = pathlib.Path(sys.argv[1]), sys.argv[2:]
    runs = {}
    for arm in arms:
        for f in sorted(out.glob(f"{arm}.*.json")):
            if f.stat().st_size > 0:
                for t in json.loads(f.read_text())["tasks"]:
                    name = t["task"] + (" chat" if t.get("variant") == "chat" else "")
                    runs[(arm, name)] = t
    order = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa", "piqa", "winogrande",
             "lambada", "mmlu", "gsm8k", "gsm8k chat"]
    tasks = sorted({task for (_, task) in runs},
                   key=lambda t: (order.index(t) if t in order else len(order), t))
    print("| task (metric) | items | source | " + " | ".join(arms) + " |")
    print("|---|---|---|" + "---|" * len(arms))
    for task in tasks:
        first = next(runs[(a, task)] for a in arms if (a, task) in runs)
        for metric, p0 in first["paired"].items():
            cells = []
            for arm in arms:
                t = runs.get((arm, task))
                if t is None:
                    cells.append("")
                    continue
                p = t["paired"][metric]
                lo, hi = p["ci95"]
                cells.append(f"{p['cand']:.3f}: {p['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                             f"{p['lost']}/{p['gained']} p={p['mcnemar_p']:.2g}")
            print(f"| {task} ({metric}) | {p0['n']} | {p0['base']:.3f} | " + " | ".join(cells) +
                  " |")
        if "ppl" in first["metrics"]:  # LAMBADA: the target word's perplexity, not paired
            cells = [f"{runs[(a, task)]['metrics']['ppl']:.1f}" if (a, task) in runs else ""
                     for a in arms]
            print(f"| {task} (ppl of the target) | {first['n']} | "
                  f"{first['base_metrics']['ppl']:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
