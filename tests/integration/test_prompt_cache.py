"""`tq serve`'s prompt cache on SmolLM2-135M (GGUF), through the `openai` client on loopback:
the same tokens (and log-probabilities) with the cache on and off for prompts sharing prefixes
of varying length, greedy and seeded; blocks found again after a flush and SIGKILL with
`cached_tokens` reported; corrupt files (flipped byte, truncated, another model's) quarantined
and never served; a few SIGKILLs during flushes that every restart survives; `tq generate
--prompt-cache` on the same store. (The 50-run crash loop is bench/prompt_cache.py.)"""
import hashlib
import json
import random
import re
import signal
import subprocess
import threading
import time

import openai
import pytest

from serve_helpers import Server

CTX = 1024
ARGS = ("--threads", "2", "--ctx", str(CTX), "--max-seqs", "2", "--memory-budget", "1GiB")
WORDS = ("river stone lantern copper orchard violet harbor meadow signal winter candle "
         "granite falcon ember thistle quartz").split()


def text(n_words, seed):
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(n_words))


BASE = text(170, 1)  # the shared prefix, cut at different lengths


CUTS = (20, 95, 96, 170, 12, 24, 25, 37, 49, 50, 61, 73, 74, 85, 110, 122, 123, 135, 147, 160)


def prompts():
    # 20 prompts: shared prefixes of 12..170 words (tokens: roughly 1.3 per word; cuts on both
    # sides of block boundaries), each with its own tail.
    return [" ".join(BASE.split()[:c]) + " " + text(5 + i % 7, 100 + i) for i, c in enumerate(CUTS)]


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def complete(srv, prompt, **kw):
    r = client(srv).completions.create(model=srv.model, prompt=prompt, max_tokens=8,
                                       logprobs=0, **kw)
    c = r.choices[0]
    return (c.text, c.logprobs.token_logprobs), r.usage.prompt_tokens_details.cached_tokens


def start(tq_bin, model, *extra):
    s = Server(tq_bin, model, *ARGS, *extra)
    s.model = json.loads(s.get("/v1/models")[2])["data"][0]["id"]
    return s


def kill(s):
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait()


def test_cache_on_and_off_give_the_same_tokens(tq_bin, smollm2_gguf, tmp_path):
    off = start(tq_bin, smollm2_gguf, "--no-prompt-cache")
    on = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(tmp_path / "pc"))
    try:
        cached = []
        for i, p in enumerate(prompts()):
            for kw in ({"temperature": 0}, {"temperature": 0.8, "seed": 7 + i}):
                want, c0 = complete(off, p, **kw)
                got, c = complete(on, p, **kw)
                assert got == want, (i, kw)
                assert c0 == 0
                cached.append(c)
        # The second of each pair reuses the first's blocks; shared prefixes reuse earlier ones.
        assert all(c > 0 for c in cached[1::2]), cached
        # (12 words are less than a block and a token: nothing to reuse.)
        assert all(c > 0 for c, w in zip(cached[2::2], CUTS[1:]) if w >= 20), cached
        m = on.metrics()
        assert m["tq_prompt_cache_hit_tokens_total"] == sum(cached)
        assert m["tq_prompt_cache_queries_total"] == len(cached)
        assert m["tq_prompt_cache_blocks"] > 0 and m["tq_prompt_cache_bytes"] > 0
        assert "tq_prompt_cache_hits_total" not in off.metrics()
        st, _, body = off.post("/admin/cache/flush", {})
        assert st == 400 and json.loads(body)["error"]["code"] == "no_cache_dir"
    finally:
        assert off.stop() == 0 and on.stop() == 0, "".join(on.log)
    assert "prompt cache flushed" in "".join(on.log)


def chain_files(d):
    """The block files of each chain, in prefix order: {first key: [paths]}."""
    files = {p.read_bytes()[44:76]: p for p in d.glob("*.blk")}
    parents = {p.read_bytes()[76:108]: k for k, p in files.items()}
    chains = []
    for k, p in files.items():
        fp = p.read_bytes()[12:44]
        if p.read_bytes()[76:108] == hashlib.sha256(b"tq prompt cache root" + fp).digest():
            chain, key = [p], k
            while key in parents:
                key = parents[key]
                chain.append(files[key])
            chains.append(chain)
    return chains


M = (1 << 64) - 1
K1, K2, K3 = 0x9e3779b97f4a7c15, 0xd6e8feb86659fd93, 0xa0761d6478bd642f


def fast_hash64(data, seed=0):
    """base/fast_hash.h's checksum."""
    def step(lane, word):
        x = lane ^ (word * K1 & M)
        return (((x << 29) | (x >> 35)) & M) * K2 & M

    def fin(x):
        x ^= x >> 32
        x = x * K3 & M
        x ^= x >> 29
        x = x * K2 & M
        return x ^ (x >> 32)
    lane = [seed ^ 0x243f6a8885a308d3, seed ^ 0x13198a2e03707344,
            seed ^ 0xa4093822299f31d0, seed ^ 0x082efa98ec4e6c89]
    n = len(data) // 32 * 32
    words = memoryview(data[:n]).cast("Q")
    for i in range(0, len(words), 4):
        for j in range(4):
            lane[j] = step(lane[j], words[i + j])
    tail = bytes(data[n:]) + bytes(32 - (len(data) - n))
    for i in range((len(data) - n + 7) // 8):
        lane[i] = step(lane[i], int.from_bytes(tail[8 * i:8 * i + 8], "little"))
    h = len(data)
    for x in lane:
        h = (h * K3 + fin(x)) & M
    return fin(h)


def other_model(path):
    """The same file as another model would have written it: its fingerprint differs."""
    b = bytearray(path.read_bytes())
    b[12:44] = bytes(32)
    b[-8:] = fast_hash64(bytes(b[:-8])).to_bytes(8, "little")
    path.write_bytes(bytes(b))


def test_restart_after_flush_and_sigkill_and_corrupt_files(tq_bin, smollm2_gguf, tmp_path):
    d = tmp_path / "pc"
    long_prompt = text(400, 5)
    three = [text(120, 10 + i) for i in range(3)]
    a = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(d))
    try:
        t0 = time.time()
        cold, c = complete(a, long_prompt, temperature=0)
        cold_s = time.time() - t0
        assert c == 0
        colds = [complete(a, p, temperature=0)[0] for p in three]
        st, _, body = a.post("/admin/cache/flush", {})
        assert st == 200, body
        durable = json.loads(body)["durable"]
        assert durable["blocks"] >= 50 and durable["tokens"] == 16 * durable["blocks"]
    finally:
        kill(a)  # no goodbye flush: only what the flush acknowledged
    chains = sorted(chain_files(d), key=len)
    assert len(chains) == 4 and sum(map(len, chains)) == durable["blocks"]
    # One bad file in each of the three short chains.
    flip = chains[0][4].read_bytes()
    chains[0][4].write_bytes(flip[:300] + bytes([flip[300] ^ 0x40]) + flip[301:])
    chains[1][6].write_bytes(chains[1][6].read_bytes()[:-1000])
    other_model(chains[2][2])
    (d / ("0" * 64 + ".blk.tmp.1.1")).write_bytes(b"interrupted")
    b = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(d))
    try:
        t0 = time.time()
        warm, c = complete(b, long_prompt, temperature=0)
        warm_s = time.time() - t0
        assert warm == cold and c >= 16 * (len(chains[3]) - 2), c
        print(f"\nrestart: {c} cached tokens; request {cold_s * 1000:.0f} ms cold, "
              f"{warm_s * 1000:.0f} ms after the restart")
        got = []
        for p, want in zip(three, colds):
            out, c = complete(b, p, temperature=0)
            assert out == want
            got.append(c)
        # Each stops at its bad block: 4, 6 or 2 blocks before it (chains ordered by length
        # only, so which prompt has which is not known here).
        assert sorted(got) == sorted([64, 96, 32]), got
        m = b.metrics()
        assert m["tq_prompt_cache_quarantined_total"] == 3
        assert len(list((d / "quarantine").iterdir())) == 3
        assert not list(d.glob("*.tmp.*"))
    finally:
        assert b.stop() == 0


def test_sigkill_during_flush_never_loses_acknowledged_blocks(tq_bin, smollm2_gguf, tmp_path):
    d = tmp_path / "pc"
    rnd = random.Random(3)
    acknowledged = 0
    want = {}
    for run in range(2):
        s = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(d))
        try:
            assert s.metrics()["tq_prompt_cache_disk_blocks"] >= acknowledged
            p = text(120, 50 + run)
            out, _ = complete(s, p, temperature=0)
            want[p] = out
            st, _, body = s.post("/admin/cache/flush", {})
            assert st == 200
            acknowledged = json.loads(body)["durable"]["blocks"]
            # Dirty blocks again, then a flush the kill interrupts at a random moment.
            for q in list(want)[:run + 1]:
                out, c = complete(s, q + " again", temperature=0)
                assert c > 0
            threading.Thread(target=lambda: s.post("/admin/cache/flush", {}, timeout=5),
                             daemon=True).start()
            time.sleep(rnd.uniform(0, 0.05))
        finally:
            kill(s)
    s = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(d))
    try:
        assert s.metrics()["tq_prompt_cache_disk_blocks"] >= acknowledged
        for p, out in want.items():
            got, c = complete(s, p, temperature=0)
            assert got == out and c > 0
        assert s.metrics()["tq_prompt_cache_quarantined_total"] == 0
    finally:
        assert s.stop() == 0


def test_generate_shares_the_store_with_serve(tq_bin, smollm2_gguf, tmp_path):
    d = tmp_path / "pc"
    prompt = text(120, 77)
    runs = []
    for _ in range(2):
        r = subprocess.run([tq_bin, "generate", str(smollm2_gguf), "-p", prompt, "--max-tokens",
                            "8", "--threads", "2", "--prompt-cache", str(d), "--json"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        reused = int(re.search(r"prompt cache: (\d+) tokens reused", r.stderr).group(1))
        runs.append((json.loads(r.stdout)["tokens"], reused))
    assert runs[0][1] == 0 and runs[1][1] >= 96 and runs[1][0] == runs[0][0]
    s = start(tq_bin, smollm2_gguf, "--prompt-cache-dir", str(d))
    try:
        r = client(s).completions.create(model=s.model, prompt=prompt, max_tokens=8,
                                         temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens == runs[1][1]
    finally:
        assert s.stop() == 0
