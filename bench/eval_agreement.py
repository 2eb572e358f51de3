#!/usr/bin/env python3
"""tq eval against lm-evaluation-harness's per-item computation (tests/oracle/eval_harness_ref.py,
stock mlx-lm f32) on the same artifact: N seeded items of every multiple-choice task and LAMBADA
(default 100), and G GSM8K items raw 8-shot with greedy decoding (default 50).

Usage: bench/eval_agreement.py MODEL_DIR [--items N] [--gsm8k G] [--seed S]
Prints, per task: items, choices equal (near-ties within 2e-3 aside), accuracy of both; for
GSM8K, strict and flexible extractions equal and both accuracies. Exit 1 on a disagreement.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
from eval_harness_ref import reference_subprocess  # noqa: E402

TQ = os.environ.get("TQ_BIN", str(ROOT / "build" / "tq"))
DATA = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache/turboquant")) / "eval"
MC = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa", "piqa", "winogrande",
      "mmlu", "lambada"]


def tq_eval(model, tasks, n, seed, extra=()):
    r = subprocess.run([TQ, "eval", model, "--task", ",".join(tasks), "--limit", str(n), "--seed",
                        str(seed), "--json", "--items", "--no-db", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--gsm8k", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tasks = MC + (["gsm8k"] if a.gsm8k else [])
    ours = tq_eval(a.model, MC, a.items, a.seed)["tasks"]
    if a.gsm8k:
        ours += tq_eval(a.model, ["gsm8k"], a.gsm8k, a.seed)["tasks"]
    job = {"tasks": {t["task"]: [x["doc"] for x in t["items"]] for t in ours}}
    with tempfile.TemporaryDirectory() as tmp:
        ref = reference_subprocess(a.model, DATA, job, pathlib.Path(tmp), timeout=7200)
    bad = 0
    print(f"{'task':<14} {'items':>5} {'equal':>6} {'ties':>5} {'tq acc':>7} {'ref acc':>7}"
          f" {'tq acc_norm':>11} {'ref acc_norm':>12}")
    for t in ours:
        name = t["task"]
        theirs = {x["doc"]: x for x in ref[name]}
        eq = ties = 0
        for x in t["items"]:
            y = theirs[x["doc"]]
            if name == "gsm8k":
                same = x["strict"] == y["strict"] and x["flexible"] == y["flexible"]
            elif name == "lambada":
                same = x["hit"][0] == y["hit"][0]
            else:
                top = np.sort(np.array(y["ll"]))[::-1]
                if top[0] - top[1] < 2e-3:
                    ties += 1
                    continue
                same = x["pred"] == y["pred"] and x["pred_norm"] == y["pred_norm"]
            eq += same
            if not same:
                bad += 1
                print(f"  differs: {name} doc {x['doc']}: tq {x} ref {y}"[:600])
        acc = [np.mean([x["hit"][m] for x in t["items"]]) for m in (0, 1)]
        racc = [np.mean([theirs[x["doc"]]["hit"][m] for x in t["items"]]) for m in (0, 1)]
        print(f"{name:<14} {t['n']:>5} {eq:>6} {ties:>5} {acc[0]:>7.3f} {racc[0]:>7.3f}"
              f" {acc[1]:>11.3f} {racc[1]:>12.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
