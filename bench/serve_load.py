#!/usr/bin/env python3
"""bench/serve-load: `tq serve` against llama.cpp's llama-server (and, optionally, mlx_lm.server)
under bounded concurrency on loopback, the same requests to each, arms alternated per level.

Each level runs REQUESTS streamed completions of a seeded mix of prompt lengths (32-512 tokens
of plain English words) and output lengths (16-256 tokens, `ignore_eos` so every request
decodes exactly that many), at most C in flight. Each level draws its own prompts (the same for
every arm): llama-server keeps earlier prompts in a host-memory cache, so replaying one set
would let it skip prefills that tq (no prompt cache yet) has to run. Per arm and level it prints aggregate
completion tok/s (tokens / wall time), p50/p99 time to first token and p50/p99 inter-token
latency (gaps between streamed chunks that carry text), and the ratio to the first arm.

Usage:
  bench/serve_load.py --tq MODEL [--llama GGUF] [--mlx MLX_DIR] [--conc 1,2,4,8]
                      [--requests 200] [--threads 2] [--ctx 2048] [--seed 0] [--json FILE]
MODEL is what `tq serve` loads (a GGUF gives both servers the same file and bytes per weight).
Run it alone on the machine (flock /tmp/tq-bench.lock on a shared one). The llama-server binary
is the native build of bench/vs-llamacpp/build_llamacpp.sh (override with --llama-server).
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import pathlib
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))
WORDS = ("the of and to in is was for on that with as by at from his it an were are which this "
         "be has or had first one their its new after who they have her she two been other when "
         "there all during into school time may years more most only over city some world would "
         "where later up such used many can state about national out known university united "
         "then made river water north south house village family people music around game").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server process on a free loopback port, ready when `ready_path` answers 200."""

    def __init__(self, name, argv, port, ready_path, timeout=300):
        self.name, self.port = name, port
        self.log = open(f"/tmp/serve_load_{name}.log", "w")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"{name} exited; see /tmp/serve_load_{name}.log")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", ready_path)
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{name} not ready after {timeout} s")

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)


def words(n, seed):
    """n seeded random common words."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def metrics(port):
    """A server's /metrics as {name: value}."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def workload(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        plen = rng.choice([32, 64, 128, 256, 512])
        text = " ".join(rng.choice(WORDS) for _ in range(int(plen * 0.8)))
        out.append({"prompt": text, "max_tokens": rng.choice([16, 32, 64, 128, 256])})
    return out


def one(port, model, req):
    """One streamed completion: (ttft s, [inter-token gaps s], completion tokens)."""
    body = {"prompt": req["prompt"], "max_tokens": req["max_tokens"], "temperature": 0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, last, gaps, chunks, usage = None, None, [], 0, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        if not ev.get("choices") or not ev["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        chunks += 1
        if ttft is None:
            ttft = now - t0
        else:
            gaps.append(now - last)
        last = now
    toks = usage["completion_tokens"] if usage else chunks
    return ttft or 0.0, gaps, toks


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def level(port, model, reqs, conc):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda r: one(port, model, r), reqs))
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in res]
    itl = [g for r in res for g in r[1]]
    toks = sum(r[2] for r in res)
    return {"requests": len(res), "tokens": toks, "wall_s": round(wall, 2),
            "aggregate_tok_s": round(toks / wall, 1),
            "ttft_p50_ms": round(1e3 * pct(ttft, 50), 1), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 1),
            "itl_p50_ms": round(1e3 * pct(itl, 50), 2), "itl_p99_ms": round(1e3 * pct(itl, 99), 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tq", required=True, help="model for tq serve")
    ap.add_argument("--llama", help="GGUF for llama-server")
    ap.add_argument("--mlx", help="MLX directory for mlx_lm.server (measured at the largest level)")
    ap.add_argument("--conc", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="tokens per sequence")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tq-bin", default=str(ROOT / "build" / "tq"))
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    concs = [int(c) for c in a.conc.split(",")]
    top = max(concs)
    arms = {}
    try:
        port = free_port()
        arms["tq"] = (Proc("tq", [a.tq_bin, "serve", a.tq, "--port", str(port), "--threads",
                                  str(a.threads), "--max-seqs", str(top), "--ctx", str(a.ctx),
                                  "--queue", str(a.requests)], port, "/health/ready"), None)
        if a.llama:
            exe = a.llama_server
            if exe is None:
                found = sorted((CACHE / "llama.cpp-native").glob("*/bin/llama-server"))
                if not found:
                    sys.exit("llama-server not built: run bench/vs-llamacpp/build_llamacpp.sh")
                exe = str(found[-1])
            port = free_port()
            arms["llama.cpp"] = (Proc("llama", [exe, "-m", a.llama, "--port", str(port), "-t",
                                                str(a.threads), "-tb", str(a.threads), "-np",
                                                str(top), "-c", str(a.ctx * top), "--no-webui"],
                                      port, "/health"), None)
        results = []
        for conc in concs:
            reqs = workload(a.requests, a.seed * 1000 + conc)
            warm = workload(max(conc, 4), a.seed * 1000 + 999)
            for name, (p, model) in arms.items():  # alternated within each level
                level(p.port, model, warm, conc)
                r = {"arm": name, "concurrency": conc, **level(p.port, model, reqs, conc)}
                results.append(r)
                print(json.dumps(r), flush=True)
        if a.mlx:
            port = free_port()
            py = CACHE / "venv" / "bin" / "python"
            mlx = Proc("mlx", [str(py), "-m", "mlx_lm.server", "--model", a.mlx, "--port",
                               str(port)], port, "/v1/models")
            try:
                r = {"arm": "mlx_lm.server", "concurrency": top,
                     **level(port, a.mlx, workload(a.requests, a.seed * 1000 + top), top)}
                results.append(r)
                print(json.dumps(r), flush=True)
            finally:
                mlx.stop()
        print(f"\n{'arm':<14}{'conc':>5}{'tok/s':>9}{'vs tq':>7}{'TTFT p50':>10}{'p99':>9}"
              f"{'ITL p50':>9}{'p99':>8}  (ms)")
        base = {r["concurrency"]: r["aggregate_tok_s"] for r in results if r["arm"] == "tq"}
        for r in results:
            b = base.get(r["concurrency"])
            print(f"{r['arm']:<14}{r['concurrency']:>5}{r['aggregate_tok_s']:>9.1f}"
                  f"{(r['aggregate_tok_s'] / b if b else 0):>7.2f}{r['ttft_p50_ms']:>10.1f}"
                  f"{r['ttft_p99_ms']:>9.1f}{r['itl_p50_ms']:>9.2f}{r['itl_p99_ms']:>8.2f}")
        if 1 in base and 4 in base:
            print(f"tq aggregate at concurrency 4 / 1: {base[4] / base[1]:.2f}x")
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(results, indent=1))
    finally:
        for p, _ in arms.values():
            p.stop()


if __name__ == "__main__":
    main()
