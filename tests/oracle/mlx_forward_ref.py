"""Reference logits and greedy tokens from stock mlx-lm in f32, for test_forward_logits.py.

`reference()` runs in-process. `reference_subprocess()` runs the same code in a child python
with the system OpenBLAS preloaded: the mlx-cpu wheel bundles the netlib reference BLAS, which
takes ~30 s for one 128-token SmolLM2 forward on 2 cores; OpenBLAS takes ~1 s. Only the BLAS
under mlx changes, not mlx-lm's model code.

As a script: python mlx_forward_ref.py MODEL_DIR JOB_JSON OUT_DIR (job as for the gtest
ForwardOracle: {"windows": [[ids]], "prompt": [ids], "max_tokens": N}).
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

SYSTEM_OPENBLAS = [
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
]


def reference(model_dir, windows, prompt, max_tokens):
    """(list of [len, vocab] f32 logits per window, greedy token ids) from mlx-lm."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model

    model, _ = load_model(pathlib.Path(model_dir))
    model.set_dtype(mx.float32)  # quantized layers stay quantized; activations are f32
    logits = [np.array(model(mx.array(w)[None])[0].astype(mx.float32)) for w in windows]
    gen = []
    if prompt:
        gen = [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens)]
    return logits, gen


def openblas_coretype():
    """OpenBLAS 0.3.21 misdetects recent Xeons as Prescott; name the kernels by CPU flags."""
    try:
        flags = next(
            line for line in open("/proc/cpuinfo") if line.startswith("flags")
        ).split()
    except (OSError, StopIteration):
        return None
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(flags):
        return "SkylakeX"
    if {"avx2", "fma"} <= set(flags):
        return "Haswell"
    return None


def openblas_env():
    """The environment for a child python whose mlx runs on the system OpenBLAS."""
    env = dict(os.environ)
    blas = next((p for p in SYSTEM_OPENBLAS if os.path.exists(p)), None)
    if blas:
        env["LD_PRELOAD"] = blas
        core = openblas_coretype()
        if core and "OPENBLAS_CORETYPE" not in env:
            env["OPENBLAS_CORETYPE"] = core
    return env


def reference_subprocess(model_dir, windows, prompt, max_tokens, work: pathlib.Path):
    work.mkdir(parents=True, exist_ok=True)
    job = work / "mlx_job.json"
    job.write_text(json.dumps({"windows": windows, "prompt": prompt, "max_tokens": max_tokens}))
    env = openblas_env()
    r = subprocess.run(
        [sys.executable, __file__, str(model_dir), str(job), str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads((work / "mlx_result.json").read_text())
    flat = np.load(work / "mlx_logits.npy")
    return np.split(flat, np.cumsum(res["rows"])[:-1]), res["generated"]


def eval_ppl_subprocess(model_dir, rows, work: pathlib.Path):
    """(ppl, se) of stock mlx_lm.perplexity.eval_ppl (f32) on token rows [n, L], in a child python
    with the system OpenBLAS preloaded."""
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "ppl_rows.npy", np.asarray(rows, dtype=np.int32))
    r = subprocess.run(
        [sys.executable, __file__, "--ppl", str(model_dir), str(work)],
        env=openblas_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads((work / "ppl_result.json").read_text())
    return res["ppl"], res["se"]


def ppl_main(model_dir, out_dir):
    import mlx.core as mx
    from mlx_lm.perplexity import eval_ppl
    from mlx_lm.utils import load

    out = pathlib.Path(out_dir)
    model, _ = load(str(model_dir))
    model.set_dtype(mx.float32)  # f32 compute, as our runtime; quantized weights stay packed
    rows = mx.array(np.load(out / "ppl_rows.npy"))
    ppl, se = eval_ppl(model, rows, batch_size=8)
    (out / "ppl_result.json").write_text(json.dumps({"ppl": float(ppl), "se": float(se)}))


def main(model_dir, job_path, out_dir):
    job = json.loads(pathlib.Path(job_path).read_text())
    logits, gen = reference(model_dir, job["windows"], job.get("prompt"), job["max_tokens"])
    out = pathlib.Path(out_dir)
    np.save(out / "mlx_logits.npy", np.concatenate(logits))
    rows = [len(w) for w in job["windows"]]
    (out / "mlx_result.json").write_text(json.dumps({"rows": rows, "generated": gen}))


if __name__ == "__main__":
    if sys.argv[1] == "--ppl":
        ppl_main(*sys.argv[2:4])
    else:
        main(*sys.argv[1:4])
