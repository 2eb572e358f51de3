"""Child process for test_convert.py: for each converted directory, stock mlx-lm loads it
(mlx_lm.utils.load: model and tokenizer), generates a few tokens of text, reports
compute_bits_per_weight (with its byte and parameter counts), and the reference logits / greedy
tokens of mlx_forward_ref.reference(). One process for all directories, with the system
OpenBLAS preloaded under mlx (see mlx_forward_ref.py).

As a script: python mlx_convert_ref.py JOB_JSON OUT_DIR, job = {"cases": [{"dir", "windows",
"prompt", "max_tokens", "prompt_text"}]}.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from mlx_forward_ref import SYSTEM_OPENBLAS, openblas_coretype, reference  # noqa: E402


def run_batch(cases, work: pathlib.Path, timeout=900):
    """[{bpw, bytes, params, text, generated, logits: [window arrays]}] for each case."""
    work.mkdir(parents=True, exist_ok=True)
    job = work / "convert_job.json"
    job.write_text(json.dumps({"cases": cases}))
    env = dict(os.environ)
    blas = next((p for p in SYSTEM_OPENBLAS if os.path.exists(p)), None)
    if blas:
        env["LD_PRELOAD"] = blas
        core = openblas_coretype()
        if core and "OPENBLAS_CORETYPE" not in env:
            env["OPENBLAS_CORETYPE"] = core
    r = subprocess.run([sys.executable, __file__, str(job), str(work)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    results = json.loads((work / "convert_result.json").read_text())
    for i, res in enumerate(results):
        flat = np.load(work / f"logits_{i}.npy")
        res["logits"] = np.split(flat, np.cumsum(res["rows"])[:-1])
    return results


def main(job_path, out_dir):
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_reduce
    from mlx_lm import stream_generate
    from mlx_lm.utils import compute_bits_per_weight, get_total_parameters, load

    out = pathlib.Path(out_dir)
    results = []
    for i, case in enumerate(json.loads(pathlib.Path(job_path).read_text())["cases"]):
        model, tokenizer = load(case["dir"])
        nbytes = tree_reduce(lambda acc, x: acc + x.nbytes if isinstance(x, mx.array) else acc,
                             model, 0)
        param_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
        # compute_bits_per_weight's bytes also count non-parameter arrays held by modules
        # (Llama3RoPE's _freqs): "buffer_bytes", which are in no file.
        res = {"bpw": compute_bits_per_weight(model), "bytes": int(nbytes),
               "buffer_bytes": int(nbytes - param_bytes),
               "params": int(get_total_parameters(model))}
        # Text through mlx-lm's own generation loop (ids in: qwen2's tokenizer class ignores the
        # word-level tokenizer.json of the tiny models).
        prompt = tokenizer.encode(case["prompt_text"]) or case["prompt"]
        pieces = [r for r in stream_generate(model, tokenizer, prompt, max_tokens=8)]
        res["text"] = "".join(r.text for r in pieces)
        res["text_tokens"] = [int(r.token) for r in pieces]
        del model
        logits, gen = reference(case["dir"], case["windows"], case["prompt"], case["max_tokens"])
        np.save(out / f"logits_{i}.npy", np.concatenate(logits))
        res["rows"] = [len(w) for w in case["windows"]]
        res["generated"] = gen
        results.append(res)
    (out / "convert_result.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:3])
