"""The tokenizer.json that `tq import` rebuilds from GGUF metadata tokenizes exactly like
llama.cpp does with the GGUF's own vocabulary (node-llama-cpp, vocab-only load).

Texts: the whole of wikitext-2 wiki.test.raw as ONE text (whole-file tokenization in node takes
~3 s, so no splitting by lines), and the State of the Union corpus. Each SOTU .txt file is a
single line (one speech), so "the first 2,000 non-empty lines" are all of its 233 lines, taken
in sorted file order, each tokenized whole (10.7 MB, ~2.1 M tokens). Our side: the `tokenizers`
package, encode(add_special_tokens=False); llama.cpp: tokenize(text, specialTokens=false), no BOS.
"""

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
NODE_PKG = TQ_CACHE / "npm" / "node_modules" / "node-llama-cpp"
SOTU = TQ_CACHE / "npm" / "node_modules" / "@stdlib" / "datasets-sotu" / "data"
WIKI = Path(os.environ.get("TQ_WIKITEXT", REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"))
SCRIPT = Path(__file__).with_name("llamacpp_tokenize.mjs")

pytestmark = [
    pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node not installed"),
    pytest.mark.skipif(not NODE_PKG.exists(), reason=f"node-llama-cpp missing: {NODE_PKG}"),
]

# Edge cases: digits next to spaces, CRLF, runs of spaces, contractions, non-Latin scripts,
# emoji, special-token text (plain text here on both sides).
TRICKY = [
    "Hello world! 123",
    "  multiple   spaces  ",
    "I'm sure they'll say \"we've\" 2024-01-02 3.14159 1,000,000",
    "tab\there\r\nCRLF\r\n\r\n = Heading = \r\n",
    "Ünïcödé café naïve — “quotes” … ½ ² ٣ 中文 日本語 한국어 Ελληνικά кириллица",
    "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧",
    "trailing newline\n",
    "\n\n\n",
    " leading space",
    "x" * 300,
    "a1b2c3 12abc ab12 ١٢٣",
    "Visit https://example.com/path?q=1&r=2#frag",
]


def sotu_texts():
    return [Path(p).read_text(encoding="utf-8") for p in sorted(glob.glob(str(SOTU / "*.txt")))]


def wiki_text():
    # newline="" keeps the CRLF line endings as they are in the file.
    with open(WIKI, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.fixture(scope="module")
def corpus():
    if not WIKI.exists():
        pytest.skip(f"wikitext missing: {WIKI}")
    texts = {"wiki": [wiki_text()], "sotu": sotu_texts(), "tricky": TRICKY}
    assert len(texts["sotu"]) == 233
    return texts


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "smollm2"
    r = subprocess.run([TQ_BIN, "import", str(GGUF), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def llamacpp_ids(corpus, tmp_path_factory):
    """One node run over every text: {group: [ids, ...]}."""
    d = tmp_path_factory.mktemp("llamacpp")
    flat = [(g, t) for g, ts in corpus.items() for t in ts]
    (d / "texts.json").write_text(json.dumps([t for _, t in flat]), encoding="utf-8")
    env = dict(os.environ, TQ_CACHE=str(TQ_CACHE))
    r = subprocess.run(["node", str(SCRIPT), str(GGUF), str(d / "texts.json")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)
    out = {g: [] for g in corpus}
    for (g, _), x in zip(flat, ids, strict=True):
        out[g].append(x)
    return out


def encode_ours(model_dir, texts):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def first_difference(tok_file, texts, ours, ref):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_file))
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return (f"text {i} token {j}: ours {a[j:j + 6]} {tok.decode(a[j:j + 6])!r} vs "
                    f"llama.cpp {b[j:j + 6]} {tok.decode(b[j:j + 6])!r}")
    return None


@pytest.mark.parametrize("group", ["tricky", "wiki", "sotu"])
def test_tokenizers_matches_llamacpp(group, corpus, imported, llamacpp_ids):
    ours = encode_ours(imported, corpus[group])
    ref = llamacpp_ids[group]
    diff = first_difference(imported / "tokenizer.json", corpus[group], ours, ref)
    assert diff is None, diff
    if group == "wiki":
        assert len(ours[0]) == 304830  # sanity: the whole file, not a prefix
    if group == "sotu":
        assert sum(map(len, ours)) > 2_000_000


def test_transformers_gguf_conversion_agrees(corpus, imported):
    """Second opinion: transformers' own GGUF tokenizer conversion (called directly, since
    AutoTokenizer's gguf_file path imports torch). It maps "smollm" to plain GPT-2 splitting
    (no digit isolation), which differs from llama.cpp where whitespace precedes a digit
    (e.g. wikitext " \\r\\n 1"), so it is compared on texts without that pattern."""
    gguf = pytest.importorskip("gguf")
    mapping = pytest.importorskip("transformers.integrations.gguf.gguf_tokenizer_mapping")

    reader = gguf.GGUFReader(GGUF)

    def value(field):
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            if field.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(field.parts[i]).decode() for i in field.data]
            return [field.parts[i].tolist()[0] for i in field.data]
        if field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(field.parts[-1]).decode()
        return field.parts[-1].tolist()[0]

    tdict = {name: value(reader.fields["tokenizer." + key])
             for key, name in mapping.GGUF_TOKENIZER_MAPPING["tokenizer"].items()
             if "tokenizer." + key in reader.fields}
    theirs, _ = mapping.convert_gguf_tokenizer("llama", tdict)
    def space_then_number(t):
        return any(a.isspace() and b.isnumeric() for a, b in zip(t, t[1:]))

    sentences = [s for doc in corpus["sotu"][:20] for s in doc.split(". ")]
    texts = [t for t in TRICKY + sentences if not space_then_number(t)]
    assert len(texts) >= 1000
    ours = encode_ours(imported, texts)
    for t, a in zip(texts, ours):
        assert a == theirs.encode(t, add_special_tokens=False).ids, t[:80]


# --- `tq tokenize` -------------------------------------------------------------------------
# Our C++ tokenizer through `tq tokenize`, on the GGUF itself (tokenizer rebuilt in memory) and
# on the directory `tq import` wrote; each text is one JSON line, encoded without specials.
def tq_tokenize(model, texts, tmp_path):
    src = tmp_path / "texts.jsonl"
    src.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    r = subprocess.run([TQ_BIN, "tokenize", str(model), "--text", str(src), "--json-lines",
                        "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(line)["ids"] for line in r.stdout.splitlines()]


@pytest.mark.parametrize("group", ["tricky", "wiki", "sotu"])
@pytest.mark.parametrize("source", ["gguf", "imported"])
def test_tq_tokenize_matches_llamacpp(group, source, corpus, imported, llamacpp_ids, tmp_path):
    model = GGUF if source == "gguf" else imported
    ours = tq_tokenize(model, corpus[group], tmp_path)
    assert len(ours) == len(llamacpp_ids[group])
    diff = first_difference(imported / "tokenizer.json", corpus[group], ours, llamacpp_ids[group])
    assert diff is None, diff
