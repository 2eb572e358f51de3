#!/usr/bin/env python3
"""Aggregate decode throughput of `tq serve` at a few concurrencies (a first slice of the
bench/serve-load the issue asks for): each of C clients sends R completions of a short prompt
with max_tokens N and the end tokens banned, so every request decodes exactly N tokens.

Usage: bench/serve_concurrency.py MODEL [--conc 1,4] [--requests 4] [--tokens 128] [--threads 2]
       [--serve-args '--tiles off']
Prints one JSON line per concurrency: aggregate tok/s (completion tokens / wall time), mean
per-request decode tok/s and TTFT from the responses' timings. Run it under flock
/tmp/tq-bench.lock on a shared machine.
"""
import argparse
import concurrent.futures as cf
import json
import pathlib
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from serve_helpers import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--conc", default="1,4")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tq", default=str(ROOT / "build" / "tq"))
    ap.add_argument("--serve-args", default="", help="more tq serve flags, e.g. '--tiles off'")
    a = ap.parse_args()
    concs = [int(c) for c in a.conc.split(",")]
    srv = Server(a.tq, a.model, "--threads", str(a.threads), "--max-seqs", str(max(concs)),
                 "--ctx", "1024", *a.serve_args.split())
    try:
        eos = [0, 1, 2]  # SmolLM2's <|endoftext|>, <|im_start|>, <|im_end|>
        body = {"prompt": "Write a long story about a lighthouse keeper.", "max_tokens": a.tokens,
                "temperature": 0, "logit_bias": {str(i): -100 for i in eos}}

        def one(_):
            st, _, raw = srv.post("/v1/completions", body)
            assert st == 200, raw
            return json.loads(raw)

        one(0)  # warm up
        for c in concs:
            t0 = time.time()
            with cf.ThreadPoolExecutor(c) as ex:
                res = list(ex.map(one, range(c * a.requests)))
            wall = time.time() - t0
            toks = sum(r["usage"]["completion_tokens"] for r in res)
            dec = [(r["usage"]["completion_tokens"] - 1) / (r["timings"]["decode_ms"] / 1e3)
                   for r in res]
            print(json.dumps({"concurrency": c, "requests": len(res), "tokens_each": a.tokens,
                              "aggregate_tok_s": round(toks / wall, 1),
                              "per_request_decode_tok_s": round(sum(dec) / len(dec), 1),
                              "mean_ttft_ms": round(sum(r["timings"]["ttft_ms"] for r in res) /
                                                    len(res), 1)}), flush=True)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
