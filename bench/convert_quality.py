#!/usr/bin/env python3
"""Bench (not a test): quality of `tq convert` modes on SmolLM2-135M.

Baseline = the dequantized source (`tq import` of the GGUF Q4_1 to f32). Each mode converts the
GGUF (default dtype bf16) and is scored on the first 64 x 512-token windows of WikiText-2 test
(mlx protocol) by `tq kl`: the first run saves the baseline's full logit rows (--save-base), the
others reuse them (--base-logits), so KL is exact. PPL of each candidate is kl's ppl_candidate
(same windows); the baseline's PPL comes from `tq ppl`. Prints one markdown table.
Usage: python bench/convert_quality.py [--windows N]   (env TQ_BIN, TQ_CACHE)
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TQ_BIN = os.environ.get("TQ_BIN", str(ROOT / "build" / "tq"))
TQ_CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data" / "wikitext-2-raw" / "wiki.test.raw"
RECIPE = {"bits": 4, "group_size": 64, "rules": [
    {"match": "model.embed_tokens", "bits": 6},
    {"match": "role:mlp_down", "bits": 6},
    {"match": "role:attn_v", "bits": 6, "group_size": 32},
    {"match": "model.layers.0.*", "float": True}]}
MODES = {
    "affine 4-bit g64": ["--bits", "4", "--group-size", "64"],
    "affine 3-bit g64": ["--bits", "3", "--group-size", "64"],
    "affine 8-bit g32": ["--bits", "8", "--group-size", "32"],
    "mxfp4": ["--mode", "mxfp4"],
    "nvfp4": ["--mode", "nvfp4"],
    "mxfp8": ["--mode", "mxfp8"],
    "mixed_3_6": ["--recipe", "mixed_3_6"],
    "recipe (4-bit, 6-bit embed/down/v g32, layer 0 float)": ["--recipe", "RECIPE"],
}


def tq(*args):
    r = subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tq {' '.join(map(str, args))} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout) if "--json" in args else r.stdout


def main():
    windows = sys.argv[sys.argv.index("--windows") + 1] if "--windows" in sys.argv else "64"
    bench = TQ_CACHE / "bench"
    base = bench / "smollm2-135m-f32"
    if not (base / "model.safetensors").exists():
        bench.mkdir(parents=True, exist_ok=True)
        tq("import", GGUF, "-o", base, "--dtype", "f32", "--force")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tq-convert-quality-", dir=bench))
    recipe = work / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    logits = work / "base.logits"
    scoring = ["--text", WIKI, "--windows", windows, "--json", "--no-db"]
    rows = []
    try:
        b = tq("ppl", base, *scoring)
        bi = tq("inspect", base, "--json")
        rows.append(("baseline (dequantized source, f32)", bi["bpw"], bi["bytes"], 0.0, b["ppl"],
                     b["ppl_se"], None))
        print(f"baseline: ppl {b['ppl']:.4f} ({b['protocol']})", flush=True)
        for name, args in MODES.items():
            args = [str(recipe) if a == "RECIPE" else a for a in args]
            out = work / "model"
            t0 = time.monotonic()
            s = tq("convert", GGUF, "-o", out, "--json", "--force", *args)
            conv_s = time.monotonic() - t0
            if logits.exists():
                k = tq("kl", "--base-logits", logits, out, *scoring)
            else:
                k = tq("kl", base, out, "--save-base", logits, *scoring)
            rows.append((name, s["bpw"], s["bytes"], k["mean_kl"], k["ppl_candidate"],
                         k["ppl_candidate_se"], conv_s))
            print(f"{name}: bpw {s['bpw']:.4f} mean KL {k['mean_kl']:.5f} ppl "
                  f"{k['ppl_candidate']:.4f} (convert {conv_s:.1f} s)", flush=True)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nSmolLM2-135M-Instruct, WikiText-2 test, first {windows} x 512 tokens (mlx protocol); "
          "baseline = dequantized source\n")
    print("| mode | bpw | bytes | mean KL vs baseline | PPL | convert s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, bpw, nbytes, kl, ppl, se, cs in rows:
        print(f"| {name} | {bpw:.4f} | {nbytes} | {kl:.5f} | {ppl:.3f} ± {se:.3f} | "
              f"{'' if cs is None else f'{cs:.1f}'} |")
    (bench / "convert_quality.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
