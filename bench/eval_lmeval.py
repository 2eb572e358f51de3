#!/usr/bin/env python3
"""`tq eval` against the real lm-evaluation-harness (PyPI lm-eval, pinned in
bench/lmeval/requirements.txt) on the same items and the same MLX artifact.

Both sides read the same files: a seeded subset of every task's JSONL under $TQ_CACHE/eval is
written once into WORK/tq (the lines byte for byte; `tq eval --data WORK/tq` scores all of them)
and, with the Hugging Face field names the harness's YAMLs expect, into WORK/hf (line i is item
i on both sides). The harness's tasks are its own YAMLs (`include:` of the installed file) with
only the dataset moved to the local JSON file, so prompts, delimiters, filters and metrics are
the harness's. The model side is mlx_lm.evaluate's MLXLM (mlx-lm 0.32.2) on the same artifact,
on CPU, f32 activations; by default its quantized layers are dequantized at load
(the same weights; mlx-cpu's quantized matmul takes ~20 s per 100-token forward here, its dense
one ~1-2 s on OpenBLAS). GSM8K runs with 256 new tokens at most (HFLM's default max_gen_toks;
MLXLM's would be 8192).

Prints a table (task, items, agree, ties, both accuracies, the largest log-likelihood
difference) and every disagreement by its line in $TQ_CACHE/eval/TASK.jsonl; exits 1 if any item
disagrees outside a near-tie (GSM8K generations have no tie test: a diverging greedy token shows
as a disagreement to look at).

The harness is installed on first use into $TQ_CACHE/lmeval-venv, a venv that also sees the
project venv's packages (mlx, mlx-lm, transformers) through a .pth file. Nothing is fetched from a
model or dataset hub (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1).
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache/turboquant"))
DATA = pathlib.Path(os.environ.get("TQ_EVAL_DATA", CACHE / "eval"))
VENV = CACHE / "lmeval-venv"
REQS = ROOT / "bench" / "lmeval" / "requirements.txt"
MC = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa", "piqa", "winogrande",
      "mmlu", "lambada"]
GSM8K_CHUNK = 8  # GSM8K items per harness run (a timeout keeps the chunks done)
TIE = 2e-3  # a harness top-2 log-likelihood gap below this is a tie (f32 summation order)

# Harness YAML (relative to lm_eval/tasks) and the split it scores, per task.
HARNESS = {
    "arc_easy": ("arc/arc_easy.yaml", "test"),
    "arc_challenge": ("arc/arc_challenge.yaml", "test"),
    "boolq": ("super_glue/boolq/default.yaml", "validation"),
    "hellaswag": ("hellaswag/hellaswag.yaml", "validation"),
    "openbookqa": ("openbookqa/openbookqa.yaml", "test"),
    "piqa": ("piqa/piqa.yaml", "validation"),
    "winogrande": ("winogrande/default.yaml", "validation"),
    "lambada": ("lambada/lambada_openai.yaml", "test"),
    "gsm8k": ("gsm8k/gsm8k-cot.yaml", "test"),
}


def load_lines(path):
    return [l for l in open(path, encoding="utf-8").read().split("\n") if l.strip()]


def to_hf(task, d):
    """Our JSONL row in the field names and types of the dataset the harness's YAML reads."""
    d = dict(d)
    if task in ("arc_easy", "arc_challenge", "openbookqa"):
        labels = [chr(ord("A") + i) for i in range(len(d["choices"]))]
        d["choices"] = {"text": d["choices"], "label": labels}
        d["answerKey"] = labels[d.pop("answer")]
        if task == "openbookqa":
            d["question_stem"] = d.pop("question")
    elif task == "hellaswag":
        d["label"] = str(d["label"])
    elif task == "winogrande":
        d["answer"] = str(d["answer"])
    return d


def write_subsets(work, tasks, items, gsm_items, seed):
    """WORK/tq/TASK.jsonl (our lines) and WORK/hf/... (the harness's schema); returns
    {task: [original line index]} so the report can name items as `tq eval --limit` would."""
    tq, hf = work / "tq", work / "hf"
    tq.mkdir(parents=True, exist_ok=True)
    hf.mkdir(parents=True, exist_ok=True)
    picked = {}
    for task in tasks:
        lines = load_lines(DATA / f"{task}.jsonl")
        k = gsm_items if task == "gsm8k" else items
        idx = sorted(random.Random(seed).sample(range(len(lines)), min(k, len(lines))))
        picked[task] = idx
        (tq / f"{task}.jsonl").write_text("".join(lines[i] + "\n" for i in idx), encoding="utf-8")
        rows = [to_hf(task, json.loads(lines[i])) for i in idx]
        if task == "mmlu":  # one harness task per subject; its test items in subset order
            dev = [json.loads(l) for l in load_lines(DATA / "mmlu_dev.jsonl")]
            for s in sorted({r["subject"] for r in rows}):
                for name, part in (("test", [r for r in rows if r["subject"] == s]),
                                   ("dev", [r for r in dev if r["subject"] == s])):
                    (hf / f"mmlu_{s}.{name}.jsonl").write_text(
                        "".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        elif task == "gsm8k":  # chunks of GSM8K_CHUNK items, each saved when done
            for c in range(0, len(rows), GSM8K_CHUNK):
                (hf / f"gsm8k_{c // GSM8K_CHUNK:03d}.jsonl").write_text(
                    "".join(json.dumps(r) + "\n" for r in rows[c:c + GSM8K_CHUNK]),
                    encoding="utf-8")
        else:
            (hf / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                              encoding="utf-8")
    for extra in ("mmlu_dev.jsonl", "gsm8k_fewshot.jsonl"):
        (tq / extra).write_bytes((DATA / extra).read_bytes())
    return picked


def write_yamls(work, tasks, tasks_dir):
    """Local tasks `tqlocal_*`: the harness's YAML included whole, only the data moved."""
    ydir = work / "yaml"
    ydir.mkdir(exist_ok=True)
    hf = work / "hf"
    names = {}

    def emit(name, base, files):
        cfg = {"include": str(tasks_dir / base), "task": name, "tag": [], "dataset_path": "json",
               "dataset_name": None, "dataset_kwargs": {"data_files": files},
               "training_split": None, "validation_split": None, "test_split": None}
        keys = {"test": "test_split", "validation": "validation_split", "dev": "fewshot_split"}
        for split in files:
            cfg[keys[split]] = split
        (ydir / f"{name}.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n"
                                                   for k, v in cfg.items()))
        return name

    for task in tasks:
        if task == "mmlu":
            subs = sorted(p.name[len("mmlu_"):-len(".test.jsonl")]
                          for p in hf.glob("mmlu_*.test.jsonl"))
            names[task] = [emit(f"tqlocal_mmlu_{s}", f"mmlu/default/mmlu_{s}.yaml",
                                {"test": str(hf / f"mmlu_{s}.test.jsonl"),
                                 "dev": str(hf / f"mmlu_{s}.dev.jsonl")}) for s in subs]
            continue
        base, split = HARNESS[task]
        if task == "gsm8k":
            names[task] = [emit(f"tqlocal_{p.stem}", base, {split: str(p)})
                           for p in sorted(hf.glob("gsm8k_*.jsonl"))]
            continue
        names[task] = [emit(f"tqlocal_{task}", base, {split: str(hf / f"{task}.jsonl")})]
    return ydir, names


def harness_side(argv):
    """In the lm-eval venv: run the harness on the local tasks, dump every sample."""
    model, work = argv[0], pathlib.Path(argv[1])
    dequantize, batch = argv[2] == "1", int(argv[3])
    job = json.loads((work / "job.json").read_text())
    import mlx.core as mx
    import mlx.nn as nn
    import numpy as np
    from mlx.utils import tree_unflatten

    import lm_eval
    from lm_eval.tasks import TaskManager
    from mlx_lm.evaluate import MLXLM

    mx.set_default_device(mx.cpu)
    lm = MLXLM(model, batch_size=batch, use_chat_template=False)
    lm._model.set_dtype(mx.float32)  # quantized layers keep their codes; activations f32
    if dequantize:
        swap = []
        for name, m in lm._model.named_modules():
            if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
                w = mx.dequantize(m.weight, m.scales, m.get("biases"), m.group_size, m.bits,
                                  mode=m.mode).astype(mx.float32)
                if isinstance(m, nn.QuantizedEmbedding):
                    d = nn.Embedding(1, 1)
                else:
                    d = nn.Linear(1, 1, bias="bias" in m)
                    if "bias" in m:
                        d.bias = m.bias.astype(mx.float32)
                d.weight = w
                swap.append((name, d))
        lm._model.update_modules(tree_unflatten(swap))
        print(f"harness: {len(swap)} quantized layers dequantized to f32", file=sys.stderr)
    tm = TaskManager(include_path=str(work / "yaml"))
    out = {}
    for task, names in job["names"].items():
        lm._max_tokens = 256 if task == "gsm8k" else None
        t0 = time.time()
        # GSM8K chunk by chunk, the others whole; the results file is rewritten after each run.
        for run in [[n] for n in names] if task == "gsm8k" else [names]:
            res = lm_eval.simple_evaluate(model=lm, tasks=run, task_manager=tm,
                                          log_samples=True, bootstrap_iters=0)
            got = out.setdefault(task, {"samples": []})
            for name in run:
                for s in res["samples"][name]:
                    got["samples"].append(sample_json(name, s, np))
            got["seconds"] = time.time() - t0
            (work / "harness.json").write_text(json.dumps(out))
        print(f"harness: {task} done in {time.time() - t0:.0f} s", file=sys.stderr)


def sample_json(name, s, np):
    r = {"task": name, "doc_id": s["doc_id"], "filter": s.get("filter"),
         "arguments": [[str(a) for a in arg] for arg in s["arguments"]],
         "resps": json.loads(json.dumps(s["resps"], default=str)),
         "filtered_resps": json.loads(json.dumps(s["filtered_resps"], default=str))}
    for k in ("acc", "acc_norm", "exact_match"):
        if k in s:
            r[k] = float(np.asarray(s[k]).item())
    return r


def ensure_venv():
    py = VENV / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import lm_eval"],
                                      capture_output=True).returncode == 0:
        return py
    proj = pathlib.Path(os.environ.get("TQ_VENV", CACHE / "venv")) / "bin" / "python"
    subprocess.run([str(proj), "-m", "venv", str(VENV)], check=True)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    proj_site = subprocess.run([str(proj), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True)
    pathlib.Path(site.stdout.strip(), "tq_venv.pth").write_text(proj_site.stdout)
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "-r", str(REQS)], check=True)
    return py


def run_harness(py, model, work, names, dequantize, batch, timeout):
    (work / "job.json").write_text(json.dumps({"names": names}))
    sys.path.insert(0, str(ROOT / "tests" / "oracle"))
    from mlx_forward_ref import openblas_env  # mlx-cpu's bundled BLAS is ~30x slower

    env = openblas_env()
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(CACHE / "lmeval-hf"), TOKENIZERS_PARALLELISM="false")
    try:
        r = subprocess.run([str(py), __file__, "--harness-side", model, str(work),
                            "1" if dequantize else "0", str(batch)], env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        if r.returncode != 0:
            sys.exit(f"the harness side failed ({r.returncode})")
    except subprocess.TimeoutExpired:
        print(f"the harness side ran past --timeout {timeout} s; comparing what it finished",
              file=sys.stderr)
    done = work / "harness.json"
    return json.loads(done.read_text()) if done.exists() else {}


def run_tq(tq, model, work, tasks):
    r = subprocess.run([tq, "eval", model, "--task", ",".join(tasks), "--data", str(work / "tq"),
                        "--json", "--items", "--no-db"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    (work / "tq.json").write_text(r.stdout)
    return {t["task"]: t for t in json.loads(r.stdout)["tasks"]}


def harness_items(task, h, picked, work):
    """The harness's samples as {subset index: result}."""
    out = {}
    if task == "mmlu":
        order = {}  # (subject, doc_id within the subject's file) -> subset index
        rows = [json.loads(l) for l in load_lines(work / "tq" / "mmlu.jsonl")]
        seen = {}
        for i, r in enumerate(rows):
            order[(r["subject"], seen.get(r["subject"], 0))] = i
            seen[r["subject"]] = seen.get(r["subject"], 0) + 1
    for s in h["samples"]:
        i = s["doc_id"]
        if task == "mmlu":
            i = order[(s["task"][len("tqlocal_mmlu_"):], i)]
        if task == "gsm8k":
            i += GSM8K_CHUNK * int(s["task"][len("tqlocal_gsm8k_"):])
        if task == "gsm8k":
            x = out.setdefault(i, {"output": s["resps"][0][0]})
            key = "strict" if s["filter"] == "strict-match" else "flexible"
            x[key] = s["filtered_resps"][0]
            x[key + "_hit"] = bool(s["exact_match"])
            continue
        resp = [r if isinstance(r, list) else json.loads(r.replace("(", "[").replace(")", "]")
                                                          .replace("True", "true")
                                                          .replace("False", "false"))
                for r in s["filtered_resps"]]
        lls = [float(r[0]) for r in resp]
        if task == "lambada":
            out[i] = {"ll": lls[0], "hit": bool(s["acc"])}
            continue
        # The harness's own acc_norm divides by len(choice): the continuation less its " "
        # delimiter, or for WinoGrande (partial scoring) the context.
        args = s["arguments"]
        choices = [a[0] for a in args] if task == "winogrande" else [a[1][1:] for a in args]
        norm = [ll / len(c) for ll, c in zip(lls, choices)]
        out[i] = {"ll": lls, "pred": lls.index(max(lls)), "pred_norm": norm.index(max(norm)),
                  "acc": bool(s["acc"]), "acc_norm": s.get("acc_norm"), "norm": norm}
    return out


def gap(v):
    top = sorted(v, reverse=True)
    return top[0] - top[1] if len(top) > 1 else float("inf")


def compare(tasks, ours, theirs, picked):
    rows, diffs = [], []
    for task in tasks:
        t, h = ours[task], theirs[task]
        items = [x for x in t["items"] if x["doc"] in h]  # the harness may have timed out
        n = len(items)
        if n == 0:
            continue
        agree = ties = 0
        acc_t = acc_h = 0.0
        acc2_t = acc2_h = 0.0
        dll = 0.0  # the largest |ll difference| over every scored continuation
        for x in items:
            y = h[x["doc"]]
            if task != "gsm8k":
                dll = max([dll] + [abs(a - b) for a, b in zip(x["ll"], y["ll"] if isinstance(
                    y["ll"], list) else [y["ll"]])])
            line = picked[task][x["doc"]] + 1
            if task == "gsm8k":
                same = x["strict"] == y["strict"] and x["flexible"] == y["flexible"]
                acc_t += x["hit"][0]
                acc_h += y["strict_hit"]
                acc2_t += x["hit"][1]
                acc2_h += y["flexible_hit"]
                if not same:
                    diffs.append(f"{task} line {line}: tq strict/flexible {x['strict']!r}/"
                                 f"{x['flexible']!r}, harness {y['strict']!r}/{y['flexible']!r};"
                                 f" tq output {x.get('output', '')[:160]!r} harness output "
                                 f"{y['output'][:160]!r}")
            elif task == "lambada":
                same = x["hit"][0] == y["hit"]
                acc_t += x["hit"][0]
                acc_h += y["hit"]
                if not same:
                    diffs.append(f"{task} line {line}: tq greedy {x['hit'][0]} ll {x['ll'][0]:.4f}"
                                 f", harness greedy {y['hit']} ll {y['ll']:.4f}")
            else:
                acc_t += x["hit"][0]
                acc_h += y["acc"]
                acc2_t += x["hit"][1]
                acc2_h += y["acc_norm"] if y["acc_norm"] is not None else float("nan")
                tie = gap(y["ll"]) < TIE or gap(y["norm"]) < TIE / 4
                same = x["pred"] == y["pred"] and x["pred_norm"] == y["pred_norm"]
                if tie and not same:
                    ties += 1
                    diffs.append(f"{task} line {line}: tie (harness gaps {gap(y['ll']):.2e} / "
                                 f"{gap(y['norm']):.2e}): tq pred {x['pred']}/{x['pred_norm']}, "
                                 f"harness {y['pred']}/{y['pred_norm']}")
                    continue
                if not same:
                    diffs.append(f"{task} line {line}: tq pred {x['pred']}/{x['pred_norm']} ll "
                                 f"{[round(v, 4) for v in x['ll']]}, harness {y['pred']}/"
                                 f"{y['pred_norm']} ll {[round(v, 4) for v in y['ll']]}")
            agree += same
        rows.append((task, n, agree, ties, acc_t / n, acc_h / n, acc2_t / n, acc2_h / n, dll))
    return rows, diffs


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--harness-side":
        return harness_side(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--model", default=str(CACHE / "bench/vs-llamacpp/smollm2-q4g64"),
                    help="MLX safetensors directory (default: SmolLM2 4-bit g64 of the "
                         "vs-llamacpp bench)")
    ap.add_argument("--tasks", default=",".join(MC + ["gsm8k"]),
                    help="comma-separated tasks (default: every multiple-choice task, lambada "
                         "and gsm8k)")
    ap.add_argument("--items", type=int, default=100, help="items per task (default 100)")
    ap.add_argument("--gsm8k-items", type=int, default=50, help="GSM8K items (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the item subset")
    ap.add_argument("--keep-quantized", action="store_true",
                    help="run mlx's quantized kernels on the harness side (slow on CPU)")
    ap.add_argument("--batch-size", type=int, default=8,
                    help="MLXLM's batch of GSM8K generations (its default 8; log-likelihoods "
                         "go one context at a time whatever this is)")
    ap.add_argument("--work", help="keep the subsets, YAMLs and raw results here")
    ap.add_argument("--reuse", action="store_true",
                    help="with --work: compare the tq.json and harness.json a run left there")
    ap.add_argument("--timeout", type=int, default=7200, help="harness side limit, seconds")
    a = ap.parse_args()
    tasks = [t for t in a.tasks.split(",") if t]
    for t in tasks:
        if t not in MC + ["gsm8k"]:
            sys.exit(f"unknown task '{t}'")
    if not pathlib.Path(a.model, "config.json").exists():
        sys.exit(f"{a.model}: not an MLX model directory (make it with `tq convert`)")
    tq = os.environ.get("TQ_BIN", str(ROOT / "build" / "tq"))
    py = ensure_venv()
    tmp = None if a.work else tempfile.TemporaryDirectory()
    work = pathlib.Path(a.work or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    picked = write_subsets(work, tasks, a.items, a.gsm8k_items, a.seed)
    tasks_dir = pathlib.Path(subprocess.run(
        [str(py), "-c", "import lm_eval.tasks, os; print(os.path.dirname(lm_eval.tasks.__file__))"],
        capture_output=True, text=True, check=True).stdout.strip())
    _, names = write_yamls(work, tasks, tasks_dir)
    if a.reuse:
        if not a.work:
            sys.exit("--reuse needs --work")
        tasks_json = json.loads((work / "tq.json").read_text())["tasks"]
        ours = {t["task"]: t for t in tasks_json}
        raw = json.loads((work / "harness.json").read_text())
        t_tq = t_h = 0.0
    else:
        t0 = time.time()
        ours = run_tq(tq, a.model, work, tasks)
        t_tq = time.time() - t0
        t0 = time.time()
        raw = run_harness(py, a.model, work, names, not a.keep_quantized, a.batch_size,
                          a.timeout)
        t_h = time.time() - t0
    theirs = {t: harness_items(t, raw[t], picked, work) if t in raw else {} for t in tasks}
    rows, diffs = compare(tasks, ours, theirs, picked)
    print(f"tq eval {t_tq:.0f} s, lm-eval {t_h:.0f} s; items: seed {a.seed} subsets of "
          f"{DATA}, identical files on both sides ({work})")
    print("| task | items | agree | ties | tq acc | harness acc | tq acc_norm | harness acc_norm "
          "| max abs ll diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task, n, agree, ties, at, ah, a2t, a2h, dll in rows:
        second = "| | |" if task == "lambada" else f"| {a2t:.3f} | {a2h:.3f} |".replace("nan", "-")
        if task == "gsm8k":
            task = "gsm8k (strict / flexible)"
        d = "" if task.startswith("gsm8k") else f"{dll:.1e}"
        print(f"| {task} | {n} | {agree} | {ties} | {at:.3f} | {ah:.3f} {second} {d} |")
    for d in diffs:
        print("  " + d)
    return 1 if any(r[2] + r[3] != r[1] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
