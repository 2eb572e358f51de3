"""`tq serve --lookup` and `--draft`: the same tokens as a plain server (greedy and seeded, alone
and at concurrency 4, with `n` choices), speculation statistics in the response's timings and in
/metrics. The draft is the served GGUF itself, so its greedy proposals are the target's own."""
import concurrent.futures as cf
import json

import openai
import pytest

from serve_helpers import Server

ARGS = ["--threads", "2", "--ctx", "512", "--max-seqs", "4"]


@pytest.fixture(scope="module")
def servers(tq_bin, smollm2_gguf):
    out = {"plain": Server(tq_bin, smollm2_gguf, *ARGS),
           "lookup": Server(tq_bin, smollm2_gguf, *ARGS, "--lookup", "--spec-k", "6"),
           # The target as its own draft never pays (each proposal costs a step), so the
           # controller would stop checking: --spec-fixed keeps the checks under test.
           "draft": Server(tq_bin, smollm2_gguf, *ARGS, "--draft", str(smollm2_gguf),
                           "--spec-k", "4", "--spec-fixed")}
    yield out
    for s in out.values():
        assert s.stop() == 0, "".join(s.log)


PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Ada, Alan, Grace, Ada, Alan, Grace, Ada, Alan,",
    "The history of the printing press",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,",
]


def _complete(srv, prompts, concurrent, **extra):
    smollm_id = json.loads(srv.get("/v1/models")[2])["data"][0]["id"]
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def one(p):
        r = c.completions.create(model=smollm_id, prompt=p, max_tokens=32, **({"temperature": 0} | extra))
        return [ch.text for ch in r.choices]
    if not concurrent:
        return [one(p) for p in prompts]
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(one, prompts))


@pytest.mark.parametrize("kind", ["lookup", "draft"])
def test_speculating_server_gives_plain_tokens(servers, kind):
    plain, spec = servers["plain"], servers[kind]
    want = _complete(plain, PROMPTS, False)
    assert _complete(spec, PROMPTS, False) == want
    assert _complete(spec, PROMPTS, True) == want
    seeded = _complete(plain, PROMPTS, False, temperature=0.8, seed=5, n=2)
    assert _complete(spec, PROMPTS, True, temperature=0.8, seed=5, n=2) == seeded
    m = spec.metrics()
    assert m["tq_spec_checks_total"] > 0 and m["tq_spec_accepted_total"] > 0


def test_timings_report_speculation(servers):
    status, _, body = servers["draft"].post("/v1/completions", {
        "prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0})
    assert status == 200
    s = json.loads(body)["timings"]["speculation"]
    # The draft is the target: every greedy proposal is taken.
    assert s["proposed"] > 0 and s["accepted"] == s["proposed"]
    assert s["steps"] < 24
