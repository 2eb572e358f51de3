#!/usr/bin/env python3
"""Admission under a low memory budget: many concurrent long prompts with huge max_tokens.

Starts `tq serve` once to read its fixed memory and KV block size, then again with
--memory-budget = fixed + BLOCKS KV blocks, and sends REQUESTS concurrent completions of
PROMPT-token prompts (random common words) with max_tokens 100000. Every response must be 200
(capped ones finishing with `length`, or `stop` at an end token), 400 or 429 -- never a 5xx or a dropped connection -- and
the server's peak resident memory (VmHWM from /proc, and its own tq_peak_resident_bytes) must
stay within the budget. Prints each status's count, finish reasons, the peak and the time taken,
and exits non-zero when a check fails.

Usage:
  bench/serve_admission.py MODEL [--requests 32] [--prompt 2048] [--blocks 150] [--threads 2]
"""
import argparse
import collections
import concurrent.futures as cf
import http.client
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_load import ROOT, Proc, free_port, metrics, words  # noqa: E402


def vm_hwm(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def one(port, prompt):
    body = {"prompt": prompt, "max_tokens": 100000, "temperature": 0}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    try:
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
    except OSError as e:
        return "dropped", str(e), 0
    if r.status != 200:
        try:
            return r.status, json.loads(data)["error"]["code"], 0
        except (ValueError, KeyError):
            return r.status, "unparsed error body", 0
    j = json.loads(data)
    return 200, j["choices"][0]["finish_reason"], j["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="model for tq serve")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=2048, help="prompt tokens (about)")
    ap.add_argument("--blocks", type=int, default=150, help="KV blocks of 16 positions allowed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tq-bin", default=str(ROOT / "build" / "tq"))
    a = ap.parse_args()
    ctx = a.prompt + 4096
    base = [a.tq_bin, "serve", a.model, "--threads", str(a.threads), "--ctx", str(ctx)]
    port = free_port()
    p = Proc("admission_probe", base + ["--port", str(port)], port, "/health/ready")
    m = metrics(port)
    p.stop()
    budget = int(m["tq_memory_fixed_bytes"] + a.blocks * m["tq_kv_block_bytes"])
    port = free_port()
    p = Proc("admission", base + ["--port", str(port), "--memory-budget", str(budget), "--max-seqs",
                                  "8", "--queue", str(a.requests)], port, "/health/ready")
    try:
        blocks = metrics(port)["tq_kv_blocks_total"]
        print(f"budget {budget / 2**20:.1f} MiB ({blocks:.0f} KV blocks = {16 * blocks:.0f} "
              f"positions); {a.requests} concurrent requests of ~{a.prompt} prompt tokens, "
              f"max_tokens 100000", flush=True)
        t0 = time.time()
        prompts = [words(int(a.prompt * 0.8), 100 + i) for i in range(a.requests)]
        with cf.ThreadPoolExecutor(a.requests) as ex:
            res = list(ex.map(lambda q: one(port, q), prompts))
        took = time.time() - t0
        after = metrics(port)
        hwm = vm_hwm(p.p.pid)
    finally:
        p.stop()
    status = collections.Counter(r[0] for r in res)
    reasons = collections.Counter(f"{r[0]} {r[1]}" for r in res)
    print(f"took {took:.0f} s; statuses {dict(status)}; {dict(reasons)}")
    print(f"generated {sum(r[2] for r in res)} tokens; peak resident: VmHWM "
          f"{hwm / 2**20:.1f} MiB, tq_peak_resident_bytes "
          f"{after['tq_peak_resident_bytes'] / 2**20:.1f} MiB, budget {budget / 2**20:.1f} MiB; "
          f"KV blocks in use after: {after['tq_kv_blocks_used']:.0f}")
    bad = [r for r in res if r[0] not in (200, 400, 429)]
    ok = (not bad and hwm <= budget and after["tq_peak_resident_bytes"] <= budget
          and after["tq_kv_blocks_used"] == 0
          and all(r[1] in ("length", "stop") for r in res if r[0] == 200))
    print("PASS" if ok else f"FAIL: {bad[:5]}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
