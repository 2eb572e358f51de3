#!/usr/bin/env python3
"""bench/serve-load: `tq serve` against llama.cpp's llama-server and mlx_lm.server (each optional)
under bounded concurrency on loopback, the same requests to each, arms alternated per level.

Each level runs REQUESTS streamed completions of a seeded mix of prompt lengths (32-512 tokens
of plain English words) and output lengths (16-256 tokens, `ignore_eos` so every request
decodes exactly that many), at most C in flight. Each level draws its own prompts (the same for
every arm): llama-server keeps earlier prompts in a host-memory cache, so replaying one set
would let it skip prefills that tq (no prompt cache yet) has to run. Per arm and level it prints aggregate
completion tok/s (tokens / wall time), p50/p99 time to first token and p50/p99 inter-token
latency (gaps between streamed chunks that carry text), and the ratio to the first arm.

mlx_lm.server (--mlx) serves an f32-scale copy of the MLX dir (mlx_f32: its CPU quantized
matmul is ~10x slower with bf16 scales) and has no `ignore_eos`: its end tokens are banned
through `logit_bias` instead.

With --db FILE every row (arm, level, tok/s, TTFT and ITL p50/p99, load, commit) is also
recorded in that results database through `tq record serve_load MODEL` (one call per arm's
model, so the model fingerprint, tool version and machine come from tq's own code);
`tq report --db FILE --table` lists them.

Usage:
  bench/serve_load.py --tq MODEL [--llama GGUF] [--mlx MLX_DIR] [--conc 1,2,4,8]
                      [--requests 200] [--threads 2] [--ctx 2048] [--seed 0] [--json FILE]
                      [--db FILE] [--tq-args FLAGS] [--tq-arm FLAGS ...]
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
import shutil
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


def with_tokenizer(src, tokenizer_from):
    """`src` itself when it has a tokenizer, else a dir of links to its files plus the tokenizer
    files of `tokenizer_from` (the 1B synthetic has none; its GGUF carries SmolLM2's)."""
    src = pathlib.Path(src)
    if (src / "tokenizer.json").exists() or not tokenizer_from:
        return src
    out = CACHE / "bench" / "with-tokenizer" / src.name
    out.mkdir(parents=True, exist_ok=True)
    for f in [*src.iterdir(), *pathlib.Path(tokenizer_from).glob("tokenizer*"),
              *pathlib.Path(tokenizer_from).glob("chat_template*")]:
        if not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    return out


def mlx_f32(src):
    """A copy of an MLX dir for mlx_lm.server on CPU: the same codes, its bf16 scales, biases
    and norms widened to f32 (exact), since mlx's CPU quantized matmul is ~10x slower in bf16."""
    src = pathlib.Path(src)
    out = CACHE / "bench" / "mlx-f32" / src.name
    if (out / "model.safetensors").exists():
        return out
    import mlx.core as mx
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            w = {k: v.astype(mx.float32) if v.dtype == mx.bfloat16 else v
                 for k, v in mx.load(str(f)).items()}
            mx.save_safetensors(str(out / f.name), w, metadata={"format": "mlx"})
        elif f.name != "model.safetensors.index.json":
            shutil.copy(f, out / f.name)
    return out


def eos_ids(model_dir):
    """The end-token ids mlx_lm stops on (config, generation config, the tokenizer's eos)."""
    d, ids = pathlib.Path(model_dir), set()
    for name in ("config.json", "generation_config.json"):
        if (d / name).exists():
            e = json.loads((d / name).read_text()).get("eos_token_id")
            ids.update(e if isinstance(e, list) else [e] if e is not None else [])
    tc = json.loads((d / "tokenizer_config.json").read_text())
    eos = tc.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    for t in json.loads((d / "tokenizer.json").read_text()).get("added_tokens", []):
        if t["content"] in (eos, "<|endoftext|>", "<|im_end|>"):
            ids.add(t["id"])
    return sorted(ids)


def mlx_server(model_dir, name="mlx"):
    """mlx_lm.server on a free port; returns (Proc, extra request fields): mlx_lm.server has no
    `ignore_eos`, so the end tokens are banned through `logit_bias` for exact lengths."""
    port = free_port()
    py = CACHE / "venv" / "bin" / "python"
    p = Proc(name, [str(py), "-m", "mlx_lm.server", "--model", str(model_dir), "--port",
                    str(port)], port, "/v1/models")
    return p, {"logit_bias": {str(i): -1e9 for i in eos_ids(model_dir)}}


def workload(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        plen = rng.choice([32, 64, 128, 256, 512])
        text = " ".join(rng.choice(WORDS) for _ in range(int(plen * 0.8)))
        out.append({"prompt": text, "max_tokens": rng.choice([16, 32, 64, 128, 256])})
    return out


def one(port, extra, req):
    """One streamed completion: (ttft s, [inter-token gaps s], completion tokens)."""
    body = {"prompt": req["prompt"], "max_tokens": req["max_tokens"], "temperature": 0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True},
            **extra}
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


def level(port, extra, reqs, conc):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda r: one(port, extra, r), reqs))
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in res]
    itl = [g for r in res for g in r[1]]
    toks = sum(r[2] for r in res)
    return {"requests": len(res), "tokens": toks, "wall_s": round(wall, 2),
            "aggregate_tok_s": round(toks / wall, 1),
            "ttft_p50_ms": round(1e3 * pct(ttft, 50), 1), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 1),
            "itl_p50_ms": round(1e3 * pct(itl, 50), 2), "itl_p99_ms": round(1e3 * pct(itl, 99), 2),
            "load": os.getloadavg()[0]}


def commit():
    """The checkout's short commit, "+dirty" when tracked files differ from it."""
    try:
        c = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"]).returncode
        return c + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(tq_bin, db, models, results, protocol):
    """The rows into the results database, one `tq record` call per arm's model."""
    for arm, model in models.items():
        rows = [r for r in results if r["arm"] == arm]
        if not rows:
            continue
        subprocess.run([tq_bin, "record", "serve_load", str(model), "--results", "-", "--db", db,
                        "--protocol", protocol],
                       input="".join(json.dumps(r) + "\n" for r in rows), text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tq", required=True, help="model for tq serve")
    ap.add_argument("--llama", help="GGUF for llama-server")
    ap.add_argument("--mlx", help="MLX directory for mlx_lm.server (served from an f32-scale copy)")
    ap.add_argument("--conc", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="tokens per sequence")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tq-bin", default=str(ROOT / "build" / "tq"))
    ap.add_argument("--tq-args", default="", help="more tq serve flags, e.g. '--max-itl-factor 0'")
    ap.add_argument("--tq-arm", action="append", default=[],
                    help="another tq serve arm with these extra flags (repeatable), alternated")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--db", help="also record the rows in this results database (tq record)")
    a = ap.parse_args()
    rev = commit()
    concs = [int(c) for c in a.conc.split(",")]
    top = max(concs)
    arms = {}
    try:
        for extra in ["", *a.tq_arm]:  # "tq", then one arm per --tq-arm
            port = free_port()
            arms[f"tq {extra}".strip()] = (
                Proc("tq", [a.tq_bin, "serve", a.tq, "--port", str(port), "--threads",
                            str(a.threads), "--max-seqs", str(top), "--ctx", str(a.ctx), "--queue",
                            str(a.requests), *a.tq_args.split(), *extra.split()], port,
                     "/health/ready"), {})
        if a.llama:
            exe = a.llama_server
            if exe is None:
                found = sorted((CACHE / "llama.cpp-native").glob("*/bin/llama-server"))
                if not found:
                    sys.exit("llama-server not built: run bench/vs-llamacpp/build_llamacpp.sh")
                exe = str(found[-1])
            cmd = [exe, "-m", a.llama, "-t", str(a.threads), "-tb", str(a.threads), "-np",
                   str(top), "-c", str(a.ctx * top), "--no-webui"]
            try:
                port = free_port()
                proc = Proc("llama", cmd + ["--port", str(port)], port, "/health")
            except RuntimeError:
                # llama.cpp 0.3.36's AMX weight repacking segfaults on some Xeons (its first
                # product); its best that runs there is without repacking.
                print("llama-server exited at start; retrying with --no-repack", flush=True)
                port = free_port()
                proc = Proc("llama", cmd + ["--no-repack", "--port", str(port)], port, "/health")
            arms["llama.cpp"] = (proc, {})
        if a.mlx:
            arms["mlx_lm.server"] = mlx_server(mlx_f32(a.mlx))
        results = []
        for conc in concs:
            reqs = workload(a.requests, a.seed * 1000 + conc)
            # Short warm-up requests, one per slot (mlx_lm.server on CPU is slow).
            warm = [{"prompt": words(24, 999 + i), "max_tokens": 8} for i in range(conc)]
            for name, (p, extra) in arms.items():  # alternated within each level
                level(p.port, extra, warm, conc)
                r = {"arm": name, "concurrency": conc, **level(p.port, extra, reqs, conc),
                     "threads": a.threads, "ctx": a.ctx, "seed": a.seed, "commit": rev}
                results.append(r)
                print(json.dumps(r), flush=True)
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
        if a.db:
            models = {"tq": a.tq, "llama.cpp": a.llama, "mlx_lm.server": a.mlx}
            record(a.tq_bin, a.db, models, results, "bench/serve_load.py " + " ".join(
                sys.argv[1:]))
    finally:
        for p, _ in arms.values():
            p.stop()


if __name__ == "__main__":
    main()
