#!/usr/bin/env python3
"""Decode speed of every format the converter writes, against the bytes each reads per token.

For SmolLM2-135M (converted here from $TQ_CACHE/bench/vs-llamacpp/smollm2-f32 with default flags)
and the Llama-3.2-1B-geometry synthetic (bench/vs-llamacpp/make_artifacts.py --only 1b and
--only 1b-formats), runs `tq bench` with default runtime flags, the formats alternated in each
round, and prints per format: MB read per token, median decode tok/s, the 4-bit g64 model's
tok/s scaled by its bytes (what a memory-bound decode would give: 4-bit tok/s x 4-bit bytes /
these bytes), the ratio to it, and the share of the roofline `tq bench` prints (measured read
bandwidth / bytes per token).

--extra DIR (repeatable) adds any SmolLM2 artifact to the SmolLM2 set, e.g. an allocated one
(scripts/demo leaves allocated-3.5bpw in $TQ_CACHE/demo/artifacts).

Usage: bench/formats/run.py [--models smol,1b] [--rounds 3] [--gen 64] [--threads 0] [--json F]
                            [--extra DIR ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TQ = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
PEERS = CACHE / "bench" / "vs-llamacpp"
WORK = CACHE / "bench" / "formats"

# name, tq convert flags (SmolLM2), 1B synthetic directory
FORMATS = [
    ("affine 4-bit g64", ["--bits", "4"], "llama1b-q4g64"),
    ("affine 2-bit g64", ["--bits", "2"], "llama1b-q2g64"),
    ("affine 3-bit g64", ["--bits", "3"], "llama1b-q3g64"),
    ("affine 5-bit g64", ["--bits", "5"], "llama1b-q5g64"),
    ("affine 6-bit g64", ["--bits", "6"], "llama1b-q6g64"),
    ("affine 8-bit g64", ["--bits", "8"], "llama1b-q8g64"),
    ("mxfp4", ["--mode", "mxfp4"], "llama1b-mxfp4"),
    ("nvfp4", ["--mode", "nvfp4"], "llama1b-nvfp4"),
    ("mxfp8", ["--mode", "mxfp8"], "llama1b-mxfp8"),
    ("mixed_3_6 recipe", ["--recipe", "mixed_3_6"], None),
]


def smol_models():
    src = PEERS / "smollm2-f32"
    if not src.exists():
        sys.exit(f"missing {src}: run bench/vs-llamacpp/make_artifacts.py --only smol")
    WORK.mkdir(parents=True, exist_ok=True)
    out = []
    for name, flags, _ in FORMATS:
        d = WORK / ("smol-" + name.replace(" ", "-"))
        if not d.exists():
            print(f"converting SmolLM2 to {name}", file=sys.stderr)
            subprocess.run([TQ, "convert", str(src), "-o", str(d), "--no-db", *flags], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append((name, d))
    return out


def one_b_models():
    out = []
    for name, _, d in FORMATS:
        if d is None:
            continue
        if not (PEERS / d).exists():
            sys.exit(f"missing {PEERS / d}: run bench/vs-llamacpp/make_artifacts.py "
                     "--only 1b and --only 1b-formats")
        out.append((name, PEERS / d))
    return out


def bench_once(model, gen, threads):
    cmd = [TQ, "bench", str(model), "--prompt-lengths", "16", "--gen", str(gen), "--repeat", "1",
           "--json", "--no-db", "--threads", str(threads)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smol,1b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--extra", action="append", default=[], help="another SmolLM2 artifact")
    a = ap.parse_args()
    sets = {"smol": ("SmolLM2-135M", smol_models), "1b": ("Llama-1B geometry", one_b_models)}
    results = {}
    cpu = None
    for key in a.models.split(","):
        title, make = sets[key]
        models = make()
        if key == "smol":
            models += [(Path(e).name, Path(e)) for e in a.extra]
        runs = {name: [] for name, _ in models}
        for r in range(a.rounds):
            for name, d in models:
                j = bench_once(d, a.gen, a.threads)
                cpu = j.get("cpu", cpu)
                runs[name].append(j)
                print(f"{title} round {r + 1}/{a.rounds} {name}: "
                      f"{j['decode_tok_s']:.1f} tok/s", file=sys.stderr)
        rows = []
        base = runs["affine 4-bit g64"]
        t4 = statistics.median(j["decode_tok_s"] for j in base)
        b4 = base[0]["bytes_per_token"]
        for name, _ in models:
            js = runs[name]
            tok = statistics.median(j["decode_tok_s"] for j in js)
            mb = js[0]["bytes_per_token"]
            roof = statistics.median(j["roofline_decode_tok_s"] for j in js)
            expect = t4 * b4 / mb
            rows.append(dict(format=name, mb_per_token=mb / 1e6, decode_tok_s=tok,
                             expected_tok_s=expect, vs_expected=tok / expect,
                             roofline_tok_s=roof, of_roofline=tok / roof))
        results[title] = rows
        print(f"\n{title}, {models and runs[models[0][0]][0]['runtime']}")
        print("| format | MB/token | decode tok/s | 4-bit scaled by bytes | ratio | roofline | "
              "of roofline |")
        print("|---|---|---|---|---|---|---|")
        for x in rows:
            print(f"| {x['format']} | {x['mb_per_token']:.1f} | {x['decode_tok_s']:.1f} | "
                  f"{x['expected_tok_s']:.1f} | {x['vs_expected']:.2f} | "
                  f"{x['roofline_tok_s']:.1f} | {100 * x['of_roofline']:.0f}% |")
    if cpu:
        print(f"\ncpu: {cpu.get('model')} (family {cpu.get('family')} model "
              f"{cpu.get('model_number')}; {cpu.get('simd')}, int8 {cpu.get('int8')})")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(cpu=cpu, results=results), indent=2))


if __name__ == "__main__":
    main()
