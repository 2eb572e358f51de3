#!/usr/bin/env python3
"""Speculative decoding against plain decoding, same run, arms alternated per prompt.

  bench/speculate.py --target DIR [--draft DIR] [--tokens 128] [--repeat 2] [--threads 2]
  bench/speculate.py --identity 50 --target DIR [--draft DIR] [--tokens 128]

Two prompt sets through the chat template: "code/extraction" (rewrite, extract, edit: the
answer repeats the prompt's text) and "open-ended" (nothing to copy). Per set and arm: decode
tok/s (median over prompts of each prompt's median over repeats), the ratio to plain, the
acceptance rate and tokens per target forward. Every arm's tokens must equal plain's (greedy):
a mismatch fails the run. Without --draft only plain and --lookup run.

--identity N: N prompts (the two sets through the chat template, then raw WikiText-2 paragraph
openings as natural text, raw code) decoded greedily by `tq generate` plain, --lookup and --draft,
and by `tq serve` plain and speculative at concurrency 1 and 4: every arm's tokens must equal
plain generate's. Prints the counts.
"""
import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

REPO = Path(__file__).resolve().parents[1]
TQ = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))

CODE = '''def parse_line(line):
    parts = line.strip().split(",")
    name = parts[0]
    age = int(parts[1])
    city = parts[2]
    return {"name": name, "age": age, "city": city}

def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            rows.append(parse_line(line))
    return rows
'''

LETTER = (
    "Dear Ms. Alvarez, thank you for your order of March 3. We shipped the two oak chairs and "
    "the walnut table on March 7 from our Portland warehouse. The chairs will arrive by March "
    "12; the table, which ships separately, by March 15. Your order number is 48213 and the "
    "tracking numbers are PX-2231 and PX-2232. If anything arrives damaged, call Daniel Okafor "
    "at 555-0142. Kind regards, Priya Natarajan, Customer Service, Fernwood Furniture."
)

SETS = {
    "code/extraction": [
        "Add a docstring to each function of this Python code and return the whole code:\n\n" + CODE,
        "Rename the variable `rows` to `records` in this code and print the full result:\n\n" + CODE,
        "Add type hints to this Python code. Output only the code.\n\n" + CODE,
        "List every date, name and number that appears in this letter, one per line:\n\n" + LETTER,
        "Rewrite this letter, replacing 'chairs' with 'stools' and keeping everything else:\n\n"
        + LETTER,
        "Fix the spelling in this text and return it unchanged otherwise: 'The quick brown fox "
        "jumpd over the lazzy dog. The dog was not amused, and the fox ran of into the forrest, "
        "where it hid under a log untill nightfall.'",
        "Convert this list to a JSON array of objects with keys name and price: apples 1.20, "
        "bread 2.50, milk 0.99, eggs 3.10, coffee 7.45, tea 4.30, rice 1.85, pasta 1.40",
        "Repeat the following sentence three times, numbered: Small models can run fast on a "
        "laptop when their weights are quantized well.",
    ],
    "open-ended": [
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "Explain how vaccines train the immune system, for a twelve-year-old.",
        "What are three good habits for staying focused while studying? Explain each.",
        "Describe the water cycle in a few paragraphs.",
        "Give me ideas for a weekend trip to the mountains on a small budget.",
        "Why do leaves change color in autumn?",
        "Write a poem about the sea at night.",
        "What should I consider when adopting a dog?",
    ],
}


def generate(model, prompt, tokens, threads, extra):
    cmd = [TQ, "generate", model, "-p", prompt, "--chat", "--max-tokens", str(tokens), "--json",
           "--threads", str(threads), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def identity_prompts(n):
    out = [(p, True) for ps in SETS.values() for p in ps]
    out.append((CODE, False))
    wiki = (REPO / "data" / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    paras = [p.strip() for p in wiki.split("\n") if len(p.strip()) > 300 and not p.startswith(" =")]
    for p in paras:
        if len(out) >= n:
            break
        out.append((p[:400], False))
    return out[:n]


def serve_tokens(srv, prompts, tokens, conc):
    def one(pc):
        p, chat = pc
        body = ({"messages": [{"role": "user", "content": p}]} if chat else {"prompt": p})
        body |= {"max_tokens": tokens, "temperature": 0, "logprobs": True} if chat else \
            {"max_tokens": tokens, "temperature": 0, "logprobs": 0}
        path = "/v1/chat/completions" if chat else "/v1/completions"
        r = srv.post(path, body)
        assert r[0] == 200, r[2]
        j = json.loads(r[2])["choices"][0]
        if chat:
            return [t["token"] for t in j["logprobs"]["content"]]
        return j["logprobs"]["tokens"]
    with cf.ThreadPoolExecutor(conc) as ex:
        return list(ex.map(one, prompts))


def identity(a):
    from serve_helpers import Server
    prompts = identity_prompts(a.identity)
    arms = {"lookup": ["--lookup"]}
    if a.draft:
        arms["draft"] = ["--draft", a.draft]
    base, mism = [], 0
    for p, chat in prompts:
        flags = ["--chat"] if chat else []
        b = generate(a.target, p, a.tokens, a.threads, flags)["tokens"]
        base.append(b)
        for arm, extra in arms.items():
            if generate(a.target, p, a.tokens, a.threads, flags + extra)["tokens"] != b:
                mism += 1
                print(f"generate {arm}: tokens differ on {p[:50]!r}")
    print(f"generate: {len(prompts)} prompts x {a.tokens} tokens, plain vs "
          f"{'/'.join(arms)}: {mism} mismatches")
    srv_args = ["--threads", str(a.threads), "--max-seqs", "4"]
    plain = Server(TQ, a.target, *srv_args)
    try:
        want = serve_tokens(plain, prompts, a.tokens, 1)
    finally:
        plain.stop()
    for arm, extra in arms.items():
        srv = Server(TQ, a.target, *srv_args, *extra)
        try:
            for conc in (1, 4):
                got = serve_tokens(srv, prompts, a.tokens, conc)
                bad = sum(g != w for g, w in zip(got, want))
                print(f"serve {arm} at concurrency {conc}: {bad} of {len(prompts)} differ "
                      "from a plain server")
                mism += bad
        finally:
            srv.stop()
    sys.exit(1 if mism else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec-k", type=int, default=8)
    ap.add_argument("--identity", type=int, default=0)
    a = ap.parse_args()
    if a.identity:
        return identity(a)
    arms = {"plain": [], "lookup": ["--lookup", "--spec-k", str(a.spec_k)]}
    if a.draft:
        arms["draft"] = ["--draft", a.draft, "--spec-k", str(a.spec_k)]
    cpu = None
    print(f"target {a.target}" + (f", draft {a.draft}" if a.draft else "") +
          f", {a.tokens} tokens, {a.threads} threads, repeat {a.repeat}")
    print("| set | arm | decode tok/s | ratio | acceptance | tokens/forward |")
    print("|---|---|---|---|---|---|")
    for name, prompts in SETS.items():
        speed = {arm: [] for arm in arms}
        acc = {arm: [0, 0, 0, 0] for arm in arms}  # accepted, proposed, tokens, steps
        for p in prompts:
            runs = {arm: [] for arm in arms}
            for _ in range(a.repeat):
                for arm, flags in arms.items():  # alternated
                    j = generate(a.target, p, a.tokens, a.threads, flags)
                    cpu = cpu or j["cpu"]
                    runs[arm].append(j)
            base = runs["plain"][0]["tokens"]
            for arm in arms:
                for j in runs[arm]:
                    if j["tokens"] != base:
                        sys.exit(f"{arm}: tokens differ from plain decoding on: {p[:60]!r}")
                    s = j.get("speculation")
                    if s:
                        acc[arm][0] += s["accepted"]
                        acc[arm][1] += s["proposed"]
                        acc[arm][2] += len(j["tokens"]) - 1
                        acc[arm][3] += s["steps"]
                speed[arm].append(statistics.median(j["decode_tok_s"] for j in runs[arm]))
        plain = statistics.median(speed["plain"])
        for arm in arms:
            v = statistics.median(speed[arm])
            ac, pr, tk, st = acc[arm]
            rate = f"{ac / pr:.2f}" if pr else "-"
            tpf = f"{tk / st:.2f}" if st else "1.00"
            print(f"| {name} | {arm} | {v:.1f} | {v / plain:.2f} | {rate} | {tpf} |")
    if cpu:
        print(f"CPU: {cpu.get('vendor')} family {cpu.get('family')} model {cpu.get('model_number')}"
              f" ({cpu.get('simd')}); every arm's tokens equal plain decoding's")


if __name__ == "__main__":
    main()
