#!/usr/bin/env python3
"""tq against llama.cpp on the same models, same prompt lengths, same threads, alternated in one
run. Two llama.cpp peers: node-llama-cpp's prebuilt (CPU) and llama.cpp built natively for this
CPU from the llama-cpp-python sdist (build_llamacpp.sh, cached; its llama-bench: prefill `-p L`,
decode `-n GEN -d L` at a KV depth of L). Ratios are tq over the faster peer per number.

Pairs (built into $TQ_CACHE/bench/vs-llamacpp when missing, see make_artifacts.py):
  SmolLM2-135M: our MLX 4-bit g64 vs its GGUF Q4_1; our MLX 8-bit g64 vs GGUF Q8_0.
  Llama-3.2-1B geometry (random weights): 4-bit g64 vs Q4_0; 8-bit g64 vs Q8_0; with
  make_artifacts.py --only 1b-formats also 5-bit g64 vs Q5_0, mxfp4 vs MXFP4, 3-bit g64 vs Q4_0.
Usage: run.py [--threads 2] [--prompt-lengths 128,512,2048] [--gen 128] [--repeat 1]
              [--activations auto] [--pairs smol-q4,...] [--peers node,native]
--repeat N runs the engines N times each, alternated one run at a time; medians are printed.
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


def native_bench(gguf, a, bin_dir):
    """llama-bench (native build): prefill of L tokens, and decode of --gen tokens at depth L."""
    lb = str(Path(bin_dir) / "llama-bench")
    common = ["-m", str(gguf), "-t", str(a.threads), "-r", "1", "-o", "json", "-ngl", "0"]

    def run(args):
        # llama.cpp 0.3.36's AMX weight repacking segfaults on some Xeons (model 167): its best
        # that runs there is without repacking, said on stderr.
        r = subprocess.run([lb, *common, *args], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"run.py: llama-bench exited {r.returncode}; again with --repack 0",
                  file=sys.stderr)
            r = subprocess.run([lb, *common, "--repack", "0", *args], capture_output=True,
                               text=True, check=True)
        return r

    pre = run(["-p", a.prompt_lengths, "-n", "0"])
    dec = run(["-p", "0", "-n", str(a.gen), "-d", a.prompt_lengths])
    out = {}
    for t in json.loads(pre.stdout):
        out.setdefault(t["n_prompt"], [0.0, 0.0])[0] = t["avg_ts"]
    for t in json.loads(dec.stdout):
        out.setdefault(t["n_depth"], [0.0, 0.0])[1] = t["avg_ts"]
    return {n: tuple(v) for n, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-lengths", default="128,512,2048")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--activations", default="auto", help="tq --activations (auto, int8, f32)")
    ap.add_argument("--pairs", default="smol-q4,smol-q8,1b-q4,1b-q8")
    ap.add_argument("--peers", default="node,native", help="llama.cpp peers: node, native")
    a = ap.parse_args()
    peers = a.peers.split(",")
    native_bin = None
    if "native" in peers:
        r = subprocess.run([str(HERE / "build_llamacpp.sh")], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"run.py: native llama.cpp build failed:\n{r.stderr}")
        native_bin = r.stdout.strip().splitlines()[-1]
    pairs = {
        "smol-q4": (WORK / "smollm2-q4g64", CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "smol-q8": (WORK / "smollm2-q8g64", WORK / "smollm2-Q8_0.gguf"),
        "1b-q4": (WORK / "llama1b-q4g64", WORK / "llama1b-Q4_0.gguf"),
        "1b-q8": (WORK / "llama1b-q8g64", WORK / "llama1b-Q8_0.gguf"),
        # make_artifacts.py --only 1b-formats: 5-bit g64 (5.5 bpw) vs Q5_0 (5.5), mxfp4 vs MXFP4
        # (4.25 both), 3-bit g64 (3.5) vs Q4_0 (4.5), the smallest llama.cpp type of its kind.
        "1b-q5": (WORK / "llama1b-q5g64", WORK / "llama1b-Q5_0.gguf"),
        "1b-mxfp4": (WORK / "llama1b-mxfp4", WORK / "llama1b-MXFP4.gguf"),
        "1b-q3": (WORK / "llama1b-q3g64", WORK / "llama1b-Q4_0.gguf"),
    }
    print(f"threads {a.threads}, prompt lengths {a.prompt_lengths}, gen {a.gen}, "
          f"repeat {a.repeat}, tq --activations {a.activations}, peers {a.peers}")
    cols = "".join(f" {p + ' pre':>10}" for p in peers)
    cold = "".join(f" {p + ' dec':>10}" for p in peers)
    print(f"{'pair':10} {'len':>5} {'tq pre':>9}{cols} {'ratio':>6} {'tq dec':>8}{cold} "
          f"{'ratio':>6}")
    for name in a.pairs.split(","):
        ours, gguf = pairs[name]
        if not ours.exists() or not gguf.exists():
            print(f"{name}: missing {ours if not ours.exists() else gguf}; run make_artifacts.py")
            continue
        vocab = json.loads((ours / "config.json").read_text())["vocab_size"]
        # Alternate one repeat at a time: peers, tq, peers, tq ... so drift in machine load
        # (this VM's is +-15-30% over minutes) hits every engine; medians per engine afterwards.
        one = argparse.Namespace(**{**vars(a), "repeat": 1})
        runs = {p: [] for p in peers}
        ts = []
        for _ in range(a.repeat):
            for p in peers:
                runs[p].append(llama_bench(gguf, vocab, one) if p == "node"
                               else native_bench(gguf, one, native_bin))
            t1, tj = tq_bench(ours, one)
            ts.append(t1)
        for n in sorted(ts[0]):
            tp = statistics.median(t[n][0] for t in ts)
            td = statistics.median(t[n][1] for t in ts)
            pp = {p: statistics.median(r[n][0] for r in runs[p]) for p in peers}
            pd = {p: statistics.median(r[n][1] for r in runs[p]) for p in peers}
            pre = "".join(f" {pp[p]:10.1f}" for p in peers)
            dec = "".join(f" {pd[p]:10.1f}" for p in peers)
            print(f"{name:10} {n:5d} {tp:9.1f}{pre} {tp / max(pp.values()):6.2f} {td:8.1f}{dec} "
                  f"{td / max(pd.values()):6.2f}")
        print(f"{'':10} tq roofline {tj['roofline_decode_tok_s']:.1f} tok/s "
              f"({tj['bytes_per_token'] / 1e6:.1f} MB/token at "
              f"{tj['bandwidth_bytes_s'] / 1e9:.1f} GB/s); {tj['runtime']}")
        c = tj["cpu"]
        print(f"{'':10} cpu {c['model']} (family {c['family']} model {c['model_number']}), "
              f"{c['simd']}, int8 {c['int8']}, amx {c['amx']}")
        sys.stdout.flush()

if __name__ == "__main__":
    main()
