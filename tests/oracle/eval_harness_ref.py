"""Reference for `tq eval`: lm-evaluation-harness's formulas in Python, on mlx-lm (f32).

Why not lm-eval itself: lm_eval 0.4.13 pulls datasets/pyarrow/pandas, evaluate, scikit-learn/
scipy, sacrebleu, rouge-score/nltk and more (~50 packages) into the venv, and its tasks load from
the Hugging Face hub, which this machine cannot reach. So this file restates, from lm_eval 0.4.13's
task YAMLs and api/task.py / api/model.py, exactly what the harness does per item:
  - prompts: doc_to_text / doc_to_choice / target_delimiter " " / fewshot_delimiter "\\n\\n";
  - HFLM._encode_pair: trailing context spaces move to the continuation, the context is tokenized
    alone (no special tokens) and the continuation is whole[len(context):];
  - the model sees (context + continuation)[-(max_len+1):][:-1]; ll = sum of log-softmax at the
    continuation positions, is_greedy = every continuation token is the argmax;
  - acc = argmax(ll) == gold, acc_norm = argmax(ll / len(choice)) == gold (np.argmax: first max);
  - LAMBADA: acc = is_greedy of " " + last word;
  - gsm8k_cot: 8 exemplars "Q: ..\\nA: ..", until ["Q:", "</s>", "<|im_end|>"], greedy,
    strict regex "The answer is (\\-?[0-9\\.\\,]+)." / flexible "(-?[$0-9.,]{2,})|(-?[0-9]+)" (last).
It never looks at tq's prompts or tokens: it reads the same task JSONL files and the same model.

As a script (run in a child python on the system OpenBLAS, see mlx_forward_ref.openblas_env):
  python eval_harness_ref.py MODEL_DIR DATA_DIR JOB_JSON OUT_JSON
with JOB_JSON {"tasks": {"arc_easy": [doc, ...], ...}, "shots": {"mmlu": 0, "gsm8k": 8}}.
"""

import json
import pathlib
import re
import subprocess
import sys

import numpy as np


def load_jsonl(path):
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def mc_requests(task, doc, data_dir, shots):
    """[(context, continuation)], choices, gold as the harness builds them."""
    if task in ("arc_easy", "arc_challenge"):
        ctx = f"Question: {doc['question']}\nAnswer:"
        return [(ctx, " " + c) for c in doc["choices"]], doc["choices"], doc["answer"]
    if task == "openbookqa":
        return [(doc["question"], " " + c) for c in doc["choices"]], doc["choices"], doc["answer"]
    if task == "piqa":
        ch = [doc["sol1"], doc["sol2"]]
        return [(f"Question: {doc['goal']}\nAnswer:", " " + c) for c in ch], ch, doc["label"]
    if task == "boolq":
        ctx = f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:"
        return [(ctx, " no"), (ctx, " yes")], ["no", "yes"], doc["label"]
    if task == "hellaswag":
        ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
        query = hellaswag_preprocess(doc["activity_label"] + ": " + ctx)
        ch = [hellaswag_preprocess(e) for e in doc["endings"]]
        return [(query, " " + c) for c in ch], ch, doc["label"]
    if task == "winogrande":
        idx = doc["sentence"].index("_")
        target = doc["sentence"][idx + 1:].strip()
        ch = [doc["sentence"][:idx] + o for o in (doc["option1"], doc["option2"])]
        return [(c, " " + target) for c in ch], ch, doc["answer"] - 1
    if task == "mmlu":
        def text(d):
            c = d["choices"]
            return (f"{d['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}"
                    "\nAnswer:")
        desc = ("The following are multiple choice questions (with answers) about "
                f"{doc['subject'].replace('_', ' ')}.\n\n")
        dev = [d for d in load_jsonl(pathlib.Path(data_dir) / "mmlu_dev.jsonl")
               if d["subject"] == doc["subject"]][:shots]
        fewshot = "".join(text(d) + " " + "ABCD"[d["answer"]] + "\n\n" for d in dev)
        ctx = desc + fewshot + text(doc)
        return [(ctx, " " + l) for l in "ABCD"], list("ABCD"), doc["answer"]
    if task == "lambada":
        words = doc["text"].split(" ")
        return [(" ".join(words[:-1]), " " + words[-1])], None, 0
    raise ValueError(task)


def encode_pair(tok, context, continuation):
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok.encode(context + continuation, add_special_tokens=False).ids
    ctx = tok.encode(context, add_special_tokens=False).ids
    return ctx, whole[len(ctx):]


def loglikelihood(model, mx, ctx, cont, max_len):
    inp = (ctx + cont)[-(max_len + 1):][:-1]
    logits = model(mx.array(inp)[None])[0].astype(mx.float32)
    logp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    rows = logp[len(inp) - len(cont):]
    ll = float(sum(rows[i, t] for i, t in enumerate(cont)))
    greedy = all(int(np.argmax(rows[i])) == t for i, t in enumerate(cont))
    return ll, greedy


def gsm8k_prompt(doc, data_dir, shots):
    ex = load_jsonl(pathlib.Path(data_dir) / "gsm8k_fewshot.jsonl")[:shots]
    block = "".join(f"Q: {e['question']}\nA: {e['target']}\n\n" for e in ex)
    return block + f"Q: {doc['question']}\nA:"


def regex_filter(resp, pattern, group_select):
    match = re.findall(pattern, resp)
    if not match:
        return "[invalid]"
    match = match[group_select]
    if isinstance(match, tuple):
        match = [m for m in match if m]
        match = match[0] if match else "[invalid]"
    return match.strip()


def gsm8k_norm(s):
    for r in [",", "\\$", "(?s).*#### ", "\\.$"]:
        s = re.sub(r, "", s)
    return s.lower()


def greedy_generate(model, mx, tok, prompt_ids, max_tokens, eos_ids):
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt_ids)[None], cache=cache)[0, -1]
    out = []
    for _ in range(max_tokens):
        t = int(mx.argmax(logits).item())
        if t in eos_ids:
            break
        out.append(t)
        text = tok.decode(out, skip_special_tokens=False)
        if any(s in text for s in ("Q:", "</s>", "<|im_end|>")):
            break
        logits = model(mx.array([t])[None], cache=cache)[0, -1]
    text = tok.decode(out, skip_special_tokens=False)
    for s in ("Q:", "</s>", "<|im_end|>"):
        text = text.split(s)[0]
    return text


def main(model_dir, data_dir, job_path, out_path):
    import mlx.core as mx
    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    job = json.loads(pathlib.Path(job_path).read_text())
    model, config = load_model(pathlib.Path(model_dir))
    model.set_dtype(mx.float32)  # quantized layers stay quantized; activations are f32
    tok = Tokenizer.from_file(str(pathlib.Path(model_dir) / "tokenizer.json"))
    max_len = config.get("max_position_embeddings", 2048)
    eos = config.get("eos_token_id", [])
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    out = {}
    for task, docs in job["tasks"].items():
        rows = load_jsonl(pathlib.Path(data_dir) / f"{task}.jsonl")
        res = []
        for d in docs:
            doc = rows[d]
            if task == "gsm8k":
                shots = job.get("shots", {}).get("gsm8k", 8)
                ids = tok.encode(gsm8k_prompt(doc, data_dir, shots), add_special_tokens=False).ids
                ids = ids[-(max_len - 256):]
                gen = greedy_generate(model, mx, tok, ids, 256, eos_ids)
                ref = doc["answer"].split("####")[-1].strip()
                strict = regex_filter(gen, r"The answer is (\-?[0-9\.\,]+).", 0)
                flex = regex_filter(gen, r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1)
                res.append({"doc": d, "output": gen, "strict": strict, "flexible": flex,
                            "hit": [gsm8k_norm(strict) == gsm8k_norm(ref),
                                    gsm8k_norm(flex) == gsm8k_norm(ref)]})
                continue
            reqs, choices, gold = mc_requests(task, doc, data_dir,
                                              job.get("shots", {}).get(task, 0))
            scored = [loglikelihood(model, mx, *encode_pair(tok, c, x), max_len) for c, x in reqs]
            lls = np.array([s[0] for s in scored])
            if choices is None:
                res.append({"doc": d, "ll": lls.tolist(), "hit": [bool(scored[0][1]), False]})
                continue
            lens = np.array([float(len(c)) for c in choices])
            pred, pred_norm = int(np.argmax(lls)), int(np.argmax(lls / lens))
            res.append({"doc": d, "ll": lls.tolist(), "pred": pred, "pred_norm": pred_norm,
                        "hit": [pred == gold, pred_norm == gold]})
        out[task] = res
    pathlib.Path(out_path).write_text(json.dumps(out))


def reference_subprocess(model_dir, data_dir, job, work: pathlib.Path, timeout=1800):
    """main() in a child python on the system OpenBLAS; returns {task: [item results]}."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from mlx_forward_ref import openblas_env

    work.mkdir(parents=True, exist_ok=True)
    (work / "harness_job.json").write_text(json.dumps(job))
    r = subprocess.run(
        [sys.executable, __file__, str(model_dir), str(data_dir), str(work / "harness_job.json"),
         str(work / "harness_out.json")],
        env=openblas_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads((work / "harness_out.json").read_text())


if __name__ == "__main__":
    main(*sys.argv[1:5])
