#!/usr/bin/env python3
"""bench/prompt-cache: what `tq serve`'s prompt cache does to time to first token.

turns:   a 10-turn chat with a ~1k-token system prompt (greedy, exactly 32-token answers kept
         in the conversation), TTFT per turn against tq serve without the cache, with it, (with
         --llama GGUF) llama.cpp's llama-server, which keeps a slot's KV between turns, and
         (with --mlx DIR) mlx_lm.server with its in-memory LRU prompt cache; the servers run
         side by side and each turn goes to every arm in turn.
restart: a ~2k-token prompt cold, then again after POST /admin/cache/flush, SIGKILL and a
         restart on the same --prompt-cache-dir (the issue's target: at least 5x lower TTFT),
         its output compared token for token.
memory:  --mem-requests distinct ~2k-token prompts under --memory-budget --mem-budget and
         --prompt-cache-disk --mem-disk: peak resident memory and the files' bytes, bounded.
crash:   RUNS cycles, each SIGKILLing the server at a random moment during a flush or while
         blocks are written: every restart must succeed, find every block the last
         acknowledged flush listed, and answer every earlier prompt as it did cold.

Usage: bench/prompt_cache.py MODEL [--llama GGUF] [--mlx MLX_DIR [--mlx-turns N]] [--arms A,B]
                             [--tokenizer-from MLX_DIR] [--threads 2]
                             [--what turns,restart,crash,memory] [--runs 50] [--json FILE]
--tokenizer-from lends a tokenizer to a dir without one (the 1B synthetic: SmolLM2's, as its GGUF).
Run it alone (flock /tmp/tq-bench.lock on a shared machine).
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_load import (CACHE, ROOT, Proc, free_port, metrics, mlx_f32,  # noqa: E402
                        mlx_server, with_tokenizer)

import http.client  # noqa: E402

WORDS = ("river stone lantern copper orchard violet harbor meadow signal winter candle granite "
         "falcon ember thistle quartz market bridge garden tower valley forest island").split()


def text(n, seed):
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(n))


def post(port, path, body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not stream:
        return json.loads(r.read()), time.perf_counter() - t0
    ttft, out, usage = None, [], None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            if line == b"data: [DONE]":
                break
            continue
        ev = json.loads(line[6:])
        usage = ev.get("usage") or usage
        ch = ev.get("choices") or []
        piece = ch and (ch[0].get("text") or (ch[0].get("delta") or {}).get("content"))
        # A token that decodes to no text still counts when its logprobs come (1B synthetic).
        if ttft is None and (piece or (ch and (ch[0].get("logprobs") or {}).get("content"))):
            ttft = time.perf_counter() - t0
        if piece:
            out.append(piece)
    return {"text": "".join(out), "usage": usage}, ttft


def tq_proc(a, name, *extra):
    port = free_port()
    return Proc(name, [a.tq_bin, "serve", a.model, "--port", str(port), "--threads",
                       str(a.threads), "--ctx", "4096", "--max-seqs", "1", *extra],
                port, "/health/ready")


def turns(a):
    system = text(760, 1)  # about 1k tokens
    # With a borrowed tokenizer (the 1B synthetic) most sampled ids lie past the tokenizer's
    # vocabulary and decode to nothing: tq then streams a chunk per token only with logprobs.
    lp = {"logprobs": True} if a.tokenizer_from else {}
    arms = {"tq (no cache)": lambda: (tq_proc(a, "tq_nocache", "--no-prompt-cache"), lp),
            "tq (cache)": lambda: (tq_proc(a, "tq_cache"), lp)}
    if a.llama:
        exe = sorted((CACHE / "llama.cpp-native").glob("*/bin/llama-server"))[-1]

        def llama():
            port = free_port()
            return Proc("llama", [str(exe), "-m", a.llama, "--port", str(port), "-t",
                                  str(a.threads), "-tb", str(a.threads), "-np", "1", "-c", "4096",
                                  "--no-webui"], port, "/health"), {}
        arms["llama-server"] = llama
    if a.mlx:
        arms["mlx_lm.server"] = lambda: mlx_server(mlx_f32(a.mlx))
    if a.arms:  # a subset, e.g. mlx_lm.server alone where it is too slow to run beside the rest
        arms = {k: v for k, v in arms.items() if k in a.arms.split(",")}
    # All servers up at once and the turns alternated across them, so load from other jobs
    # falls on every arm alike; each arm keeps its own conversation (its own answers).
    procs, res = {}, {}
    try:
        for name, make in arms.items():
            procs[name] = make()
        convo = {name: [{"role": "system", "content": system}] for name in arms}
        for t in range(10):
            for name, (p, extra) in procs.items():
                if t >= (a.mlx_turns if name == "mlx_lm.server" else 10):
                    continue
                msgs = convo[name]
                msgs.append({"role": "user", "content": f"Question {t}: " + text(20, 100 + t)})
                # Exactly 32 answer tokens on every arm (the 1B synthetic's random weights
                # would end answers at random): end tokens ignored, or banned for mlx_lm.
                body = {"messages": msgs, "max_tokens": 32, "temperature": 0, "stream": True,
                        "stream_options": {"include_usage": True}, "ignore_eos": True, **extra}
                out, ttft = post(p.port, "/v1/chat/completions", body, stream=True)
                # The 1B synthetic's random answers (text only where ids fall in the borrowed
                # vocabulary, and it differs per arm) are replaced by one fixed answer.
                ans = text(24, 200 + t) if a.tokenizer_from else out["text"]
                msgs.append({"role": "assistant", "content": ans})
                u = out["usage"] or {}
                r = {"turn": t + 1, "ttft_ms": round(1e3 * ttft, 1),
                     "prompt_tokens": u.get("prompt_tokens"),
                     "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
                     "completion_tokens": u.get("completion_tokens"),
                     "load": os.getloadavg()[0]}
                res.setdefault(name, []).append(r)
                print(json.dumps({"arm": name, **r}), flush=True)
    finally:
        for p, _ in procs.values():
            p.stop()
    for t in range(10):
        print(f"{t + 1:>3}" + "".join(
            f"  {name}: {per[t]['ttft_ms']:.0f} ms ({per[t]['cached_tokens']})"
            for name, per in res.items() if t < len(per)))
    return res


def restart(a):
    d = tempfile.mkdtemp(prefix="tq_pcache_")
    try:
        prompt = text(1900, 7)  # about 2k tokens
        body = {"prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        p = tq_proc(a, "tq_restart", "--prompt-cache-dir", d)
        cold, cold_ttft = post(p.port, "/v1/completions", body, stream=True)
        flushed, flush_s = post(p.port, "/admin/cache/flush", {})
        os.killpg(p.p.pid, signal.SIGKILL)
        p.p.wait()
        t0 = time.perf_counter()
        p = tq_proc(a, "tq_restart2", "--prompt-cache-dir", d)
        start_s = time.perf_counter() - t0
        try:
            warm, warm_ttft = post(p.port, "/v1/completions", body, stream=True)
        finally:
            p.stop()
        r = {"prompt_tokens": cold["usage"]["prompt_tokens"],
             "cached_tokens": warm["usage"]["prompt_tokens_details"]["cached_tokens"],
             "cold_ttft_ms": round(1e3 * cold_ttft, 1), "restart_ttft_ms": round(1e3 * warm_ttft, 1),
             "speedup": round(cold_ttft / warm_ttft, 2), "same_output": warm["text"] == cold["text"],
             "flush": flushed["durable"], "flush_ms": round(1e3 * flush_s, 1),
             "restart_ready_s": round(start_s, 2)}
        print(json.dumps({"restart": r}), flush=True)
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


def crash(a):
    d = tempfile.mkdtemp(prefix="tq_pcache_crash_")
    rnd = random.Random(11)
    want, acknowledged, fails, interrupted = {}, 0, [], 0
    try:
        for run in range(a.runs):
            p = tq_proc(a, "tq_crash", "--prompt-cache-dir", d, "--memory-budget", "330MiB")
            try:
                interrupted += "found, 0 interrupted" not in logs_of(p)
                m = metrics(p.port)
                if m["tq_prompt_cache_disk_blocks"] < acknowledged:
                    fails.append(f"run {run}: {m['tq_prompt_cache_disk_blocks']} blocks on disk, "
                                 f"{acknowledged} acknowledged")
                for q in rnd.sample(list(want), min(2, len(want))):  # earlier prompts: as cold
                    out, _ = post(p.port, "/v1/completions", req(q), stream=True)
                    if out["text"] != want[q]:
                        fails.append(f"run {run}: a different answer")
                q = text(rnd.randint(40, 300), 1000 + run)
                out, _ = post(p.port, "/v1/completions", req(q), stream=True)
                want[q] = out["text"]
                r, _ = post(p.port, "/admin/cache/flush", {})
                acknowledged = r["durable"]["blocks"]
                # More dirty blocks, then a kill at a random moment: even runs during a flush
                # of them, odd ones during a request (its prefill, or the writes of blocks the
                # small budget evicts at its admission).
                q2 = q + " " + text(rnd.randint(20, 200), 5000 + run)
                if run % 2 == 0:
                    post(p.port, "/v1/completions", req(q2), stream=True)
                    quietly(post, p.port, "/admin/cache/flush", {})
                    time.sleep(rnd.uniform(0, 0.15))
                else:
                    quietly(post, p.port, "/v1/completions", req(q2))
                    time.sleep(rnd.uniform(0, 0.5))
            finally:
                os.killpg(p.p.pid, signal.SIGKILL)
                p.p.wait()
        r = {"runs": a.runs, "failures": fails, "prompts": len(want),
             "restarts_with_interrupted_writes": interrupted}
        print(json.dumps({"crash": r}), flush=True)
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


def logs_of(p):
    p.log.flush()
    return pathlib.Path(f"/tmp/serve_load_{p.name}.log").read_text()


def memory(a):
    """Distinct ~2k-token prompts through a small budget: peak RSS and disk use stay bounded."""
    d = tempfile.mkdtemp(prefix="tq_pcache_mem_")
    try:
        p = tq_proc(a, "tq_mem", "--prompt-cache-dir", d, "--memory-budget", a.mem_budget,
                    "--prompt-cache-disk", a.mem_disk)
        t0 = time.perf_counter()
        try:
            for i in range(a.mem_requests):
                post(p.port, "/v1/completions", req(text(1900, 20000 + i)), stream=True)
            m = metrics(p.port)
        finally:
            p.stop()
        on_disk = sum(f.stat().st_size for f in pathlib.Path(d).glob("*.blk"))
        r = {"requests": a.mem_requests, "budget_bytes": m["tq_memory_budget_bytes"],
             "peak_resident_bytes": m["tq_peak_resident_bytes"],
             "disk_bound": a.mem_disk, "disk_bytes": on_disk,
             "evictions": m["tq_prompt_cache_evictions_total"],
             "disk_evictions": m["tq_prompt_cache_disk_evictions_total"],
             "wall_s": round(time.perf_counter() - t0, 1)}
        print(json.dumps({"memory": r}), flush=True)
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


def quietly(f, *args):
    """Runs f in a thread; the server may be killed under it."""
    def run():
        try:
            f(*args)
        except (OSError, ValueError, http.client.HTTPException):
            pass
    threading.Thread(target=run, daemon=True).start()


def req(prompt):
    return {"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama", help="GGUF for llama-server (turns)")
    ap.add_argument("--mlx", help="MLX dir for mlx_lm.server (turns; an f32-scale copy)")
    ap.add_argument("--mlx-turns", type=int, default=10, help="mlx_lm.server turns (slow on CPU)")
    ap.add_argument("--arms", help="turns: only these arms (comma-separated names as printed)")
    ap.add_argument("--tokenizer-from", help="MLX dir whose tokenizer a tokenizer-less MODEL uses")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--what", default="turns,restart,crash")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--mem-requests", type=int, default=200)
    ap.add_argument("--mem-budget", default="400MiB")
    ap.add_argument("--mem-disk", default="256MiB")
    ap.add_argument("--json")
    ap.add_argument("--tq-bin", default=str(ROOT / "build" / "tq"))
    a = ap.parse_args()
    a.model = str(with_tokenizer(a.model, a.tokenizer_from))
    if a.mlx:
        a.mlx = str(with_tokenizer(a.mlx, a.tokenizer_from))
    out = {}
    for w in a.what.split(","):
        out[w] = {"turns": turns, "restart": restart, "crash": crash, "memory": memory}[w](a)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
