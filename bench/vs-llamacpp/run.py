#!/usr/bin/env python3
"""tq against llama.cpp (node-llama-cpp, CPU) on the same models, same prompt lengths, same
threads, alternated in one run. Prints prefill and decode tok/s of both and the ratios tq/llama.

Pairs (built into $TQ_CACHE/bench/vs-llamacpp when missing, see make_artifacts.py):
  SmolLM2-135M: our MLX 4-bit g64 vs its GGUF Q4_1; our MLX 8-bit g64 vs GGUF Q8_0.
Usage: run.py [--threads 2] [--prompt-lengths 128,512,2048] [--gen 128] [--repeat 1] [--activations auto]
--repeat N runs the two engines N times each, alternated one run at a time; medians are printed.
"""
import argparse
import json
import statistics
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TQ = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
WORK = CACHE / "bench" / "vs-llamacpp"


def tq_bench(model, a):
    cmd = [TQ, "bench", str(model), "--prompt-lengths", a.prompt_lengths, "--gen", str(a.gen),
           "--repeat", str(a.repeat), "--threads", str(a.threads), "--json", "--no-db"]
    cmd += ["--activations", a.activations]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(r.stdout)
    return {p["prompt_len"]: (p["prefill_tok_s"]["median"], p["decode_tok_s"]["median"])
            for p in j["points"]}, j


def llama_bench(gguf, vocab, a):
    cmd = ["node", str(HERE / "llama_bench.mjs"), str(gguf), str(a.threads), a.prompt_lengths,
           str(a.gen), str(a.repeat), str(vocab)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {p["prompt_len"]: (p["prefill_tok_s"], p["decode_tok_s"]) for p in j["points"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-lengths", default="128,512,2048")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--activations", default="auto", help="tq --activations (auto, int8, f32)")
    ap.add_argument("--pairs", default="smol-q4,smol-q8,1b-q4,1b-q8")
    a = ap.parse_args()
    pairs = {
        "smol-q4": (WORK / "smollm2-q4g64", CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "smol-q8": (WORK / "smollm2-q8g64", WORK / "smollm2-Q8_0.gguf"),
        "1b-q4": (WORK / "llama1b-q4g64", WORK / "llama1b-Q4_0.gguf"),
        "1b-q8": (WORK / "llama1b-q8g64", WORK / "llama1b-Q8_0.gguf"),
    }
    print(f"threads {a.threads}, prompt lengths {a.prompt_lengths}, gen {a.gen}, "
          f"repeat {a.repeat}, tq --activations {a.activations}")
    print(f"{'pair':10} {'len':>5} {'tq pre':>9} {'llama pre':>9} {'ratio':>6} "
          f"{'tq dec':>8} {'llama dec':>9} {'ratio':>6}")
    for name in a.pairs.split(","):
        ours, gguf = pairs[name]
        if not ours.exists() or not gguf.exists():
            print(f"{name}: missing {ours if not ours.exists() else gguf}; run make_artifacts.py")
            continue
        vocab = json.loads((ours / "config.json").read_text())["vocab_size"]
        # Alternate one repeat at a time: llama, tq, llama, tq ... so drift in machine load
        # (this VM's is +-15-30% over minutes) hits both; medians per engine afterwards.
        one = argparse.Namespace(**{**vars(a), "repeat": 1})
        ls, ts = [], []
        for _ in range(a.repeat):
            ls.append(llama_bench(gguf, vocab, one))
            t1, tj = tq_bench(ours, one)
            ts.append(t1)
        for n in sorted(ts[0]):
            tp = statistics.median(t[n][0] for t in ts)
            td = statistics.median(t[n][1] for t in ts)
            lp = statistics.median(l[n][0] for l in ls)
            ld = statistics.median(l[n][1] for l in ls)
            print(f"{name:10} {n:5d} {tp:9.1f} {lp:9.1f} {tp / lp:6.2f} {td:8.1f} {ld:9.1f} "
                  f"{td / ld:6.2f}")
        print(f"{'':10} tq roofline {tj['roofline_decode_tok_s']:.1f} tok/s "
              f"({tj['bytes_per_token'] / 1e6:.1f} MB/token at "
              f"{tj['bandwidth_bytes_s'] / 1e9:.1f} GB/s); {tj['runtime']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
