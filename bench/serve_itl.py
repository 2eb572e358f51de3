#!/usr/bin/env python3
"""How much a long prompt arriving during decode slows the streams already running in `tq serve`.

STREAMS streamed completions decode (greedy, `ignore_eos`, DECODE tokens each); once every stream
has produced its first tokens and BASELINE seconds have passed, one completion with a
PROMPT-token prompt (random common words) arrives. For each stream the gaps between streamed
text chunks are split into those before the long prompt arrived and those while it was
prefilled (until its first token). A control run of the same streams with no arrival (same
prompts, greedy: the same chunks) gives the gaps of the same tokens without it: a stream's gaps
grow with its own context, so "during" is compared with those, and with "before" too. The table
gives p50/p99 of the three, the p99 ratios, and the long prompt's time to first token. Arms: `tq serve` with
each --max-itl-factor given (0: off, whole prefill chunks), times each --arm (extra tq serve flags,
e.g. --arm '' --arm '--unpack-once on'), alternated round by round.

Usage:
  bench/serve_itl.py MODEL [--factors 2,0] [--streams 2] [--prompt 4096] [--decode 3000]
                     [--rounds 3] [--threads 2] [--baseline 3] [--arm 'FLAGS' ...]
Run it alone on the machine (flock /tmp/tq-bench.lock on a shared one).
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import pathlib
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_load import ROOT, Proc, free_port, pct, words  # noqa: E402


def stream(port, prompt, max_tokens, times, started):
    """A streamed completion; appends each text chunk's arrival time to `times`."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line[6:] == b"[DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("choices") and ev["choices"][0].get("text"):
            times.append(time.perf_counter())
            if len(times) == 8 and started is not None:
                started.release()


def streams(a, port, seed, arrive):
    """a.streams streamed completions; with `arrive`, the long prompt once they all decode.
    Returns each stream's chunk times, the arrival time and the long prompt's first token."""
    started = threading.Semaphore(0)
    times = [[] for _ in range(a.streams)]
    t_arrive = t_first = None
    with cf.ThreadPoolExecutor(a.streams + 1) as ex:
        futs = [ex.submit(stream, port, words(48, seed * 10 + i), a.decode, times[i], started)
                for i in range(a.streams)]
        for _ in range(a.streams):
            started.acquire()
        if arrive:
            time.sleep(a.baseline)  # baseline gaps with every stream decoding
            long_times = []
            t_arrive = time.perf_counter()
            ex.submit(stream, port, words(int(a.prompt * 0.8), seed * 10 + 9), 2, long_times,
                      None).result()
            t_first = long_times[0] if long_times else time.perf_counter()
        for f in futs:
            f.result()
    return times, t_arrive, t_first


def one_round(a, factor, seed, extra=""):
    port = free_port()
    argv = [a.tq_bin, "serve", a.model, "--port", str(port), "--threads", str(a.threads),
            "--ctx", str(a.prompt + a.decode + 256), "--max-seqs", str(a.streams + 1),
            "--max-itl-factor", str(factor), *extra.split()]
    p = Proc(f"itl_{factor}", argv, port, "/health/ready")
    try:
        # Warm-up: a short prompt and a long one, so the prefill estimates exist.
        stream(port, words(64, 1), 4, [], None)
        stream(port, words(a.prompt // 4, 2), 1, [], None)
        # Control: the same streams (same prompts, greedy: the same chunks) with no arrival, so
        # the gaps the long prompt met can be compared with those of the same tokens without it
        # (a stream's gaps grow with its own context either way).
        control, _, _ = streams(a, port, seed, arrive=False)
        times, t_arrive, t_first = streams(a, port, seed, arrive=True)
        before, during, without = [], [], []
        for ts, cs in zip(times, control):
            for k, (t0, t1) in enumerate(zip(ts, ts[1:])):
                if t1 < t_arrive:
                    before.append(t1 - t0)
                elif t0 >= t_arrive and t1 <= t_first:
                    during.append(t1 - t0)
                    if k + 1 < len(cs):
                        without.append(cs[k + 1] - cs[k])
        return {"factor": factor, "before_p50": pct(before, 50), "before_p99": pct(before, 99),
                "during_p50": pct(during, 50), "during_p99": pct(during, 99),
                "without_p50": pct(without, 50), "without_p99": pct(without, 99),
                "gaps_during": len(during), "ttft": t_first - t_arrive}
    finally:
        p.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="model for tq serve")
    ap.add_argument("--factors", default="2,0", help="--max-itl-factor values, alternated")
    ap.add_argument("--streams", type=int, default=2, help="streams decoding when it arrives")
    ap.add_argument("--prompt", type=int, default=4096, help="tokens of the arriving prompt")
    ap.add_argument("--decode", type=int, default=3000, help="tokens each stream decodes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=float, default=3.0,
                    help="seconds of decoding before the long prompt arrives (the p99 before it "
                         "is taken over about this many seconds of gaps)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tq-bin", default=str(ROOT / "build" / "tq"))
    ap.add_argument("--arm", action="append", help="extra tq serve flags of one arm (repeatable)")
    a = ap.parse_args()
    arms = [(float(f), e) for e in (a.arm or [""]) for f in a.factors.split(",")]
    res = {arm: [] for arm in arms}
    for r in range(a.rounds):
        for arm in arms:
            f, extra = arm
            x = one_round(a, f, r, extra)
            res[arm].append(x)
            print(f"round {r + 1} factor {f:g} {extra}: ITL p50/p99 before {1e3 * x['before_p50']:.1f}/"
                  f"{1e3 * x['before_p99']:.1f} ms, during {1e3 * x['during_p50']:.1f}/"
                  f"{1e3 * x['during_p99']:.1f} ms ({x['gaps_during']} gaps), the same tokens "
                  f"without it {1e3 * x['without_p50']:.1f}/{1e3 * x['without_p99']:.1f} ms, "
                  f"long prompt TTFT {x['ttft']:.2f} s", flush=True)
    print(f"\n{a.streams} streams decoding, a {a.prompt}-token prompt arrives; medians of "
          f"{a.rounds} rounds")
    print("| --max-itl-factor | flags | ITL p50 / p99 before (ms) | during its prefill (ms) | "
          "same tokens without it (ms) | p99 ratio to without / to before | its TTFT (s) |")
    print("|---|---|---|---|---|---|---|")
    for arm in arms:
        f, extra = arm
        m = {k: statistics.median(x[k] for x in res[arm])
             for k in ("before_p50", "before_p99", "during_p50", "during_p99", "without_p50",
                       "without_p99", "ttft")}
        print(f"| {f:g} | {extra or '-'} | {1e3 * m['before_p50']:.1f} / {1e3 * m['before_p99']:.1f} | "
              f"{1e3 * m['during_p50']:.1f} / {1e3 * m['during_p99']:.1f} | "
              f"{1e3 * m['without_p50']:.1f} / {1e3 * m['without_p99']:.1f} | "
              f"{m['during_p99'] / max(m['without_p99'], 1e-9):.2f} / "
              f"{m['during_p99'] / max(m['before_p99'], 1e-9):.2f} | {m['ttft']:.2f} |")


if __name__ == "__main__":
    main()
