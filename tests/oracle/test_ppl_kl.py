"""Oracle: `tq ppl` and `tq kl` against mlx-lm and numpy.

(a) `tq ppl` on SmolLM2-135M (imported to f32) over WikiText-2 test windows of 512 tokens equals
    mlx_lm.perplexity's eval_ppl on exactly the same token rows (our ids, from `tq tokenize`),
    with mlx-lm's model in f32: PPL within 0.1% relative, ± to 2 significant digits.
    mlx-lm's eval_ppl runs in a child python on the system OpenBLAS
    (mlx_forward_ref.eval_ppl_subprocess), ~30x faster than the wheel's bundled BLAS. By default
    8 windows (4088 tokens) keep CI short; TQ_SLOW_TESTS=1 runs the acceptance's 64 windows
    (32704 tokens, ~8 CPU-minutes for both sides), TQ_PPL_WINDOWS=N any other count.
(b) `tq kl M M` is exactly 0 with top-1 agreement 1.0; `tq kl M Q4` against a 4-bit
    `mlx_lm.convert` of a tiny seeded llama matches numpy's KL / PPL / agreement computed from
    both models' mlx-lm logits; --save-base/--base-logits reproduce the direct numbers (top-k
    rows give a lower bound); every run lands in the results database.
(c) bad input: empty text, text shorter than one window, mismatched vocabularies, a model
    directory without tokenizer.json: one error line, non-zero exit.
"""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")
tokenizers = pytest.importorskip("tokenizers")

from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm.models import llama  # noqa: E402
from mlx_forward_ref import eval_ppl_subprocess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"

TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 384,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 0,
    "eos_token_id": 1,
}
L_TINY, W_TINY = 64, 6


def run_tq(*args, env=None):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True,
                          timeout=1800, env=env)


def tq_json(*args):
    r = run_tq(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_one_line_error(r, *needles):
    assert r.returncode != 0, r.stdout
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), f"{n!r} not in {lines[0]!r}"


def tq_ids(model, text):
    return tq_json("tokenize", model, "--text", text)["ids"]


def load_f32(path):
    model, _ = mlx_lm.utils.load(str(path))
    model.set_dtype(mx.float32)  # f32 compute on both sides; quantized weights stay packed
    return model


def mlx_logits(model, rows):
    """[windows, L-1, vocab] f64 logits for rows[:, :-1], as eval_ppl computes them."""
    out = model(mx.array(np.asarray(rows, dtype=np.int32)[:, :-1])).astype(mx.float32)
    return np.array(out).astype(np.float64)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


# ---------------------------------------------------------------------------------------------
# Tiny seeded llama, float and 4-bit, with a small byte-level BPE tokenizer.


def write_tokenizer(d: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The quick brown fox jumps over the lazy dog."] * 20 +
                            [" = Robert Boulter = \n The the of and in a to was"] * 5, trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}))


def write_tiny(d: Path, cfg=TINY, seed=1234):
    d.mkdir(parents=True)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    rng = np.random.default_rng(seed)
    weights = {}
    for k, v in tree_flatten(model.parameters()):
        a = rng.standard_normal(v.shape).astype(np.float32) * 0.08
        if k.endswith("norm.weight"):
            a += 1.0
        weights[k] = mx.array(a)
    mx.save_safetensors(str(d / "model.safetensors"), weights, metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    f32 = write_tiny(root / "f32")
    q4 = root / "q4"
    mlx_lm.convert(hf_path=str(f32), mlx_path=str(q4), quantize=True, q_bits=4,
                   q_group_size=64)
    text = root / "text.txt"
    text.write_bytes(WIKI.read_bytes()[:6000])
    return {"f32": f32, "q4": q4, "text": text, "root": root}


def numpy_kl_report(base_dir, cand_dir, rows):
    lb = log_softmax(mlx_logits(load_f32(base_dir), rows))
    lc = log_softmax(mlx_logits(load_f32(cand_dir), rows))
    tgt = np.asarray(rows)[:, 1:]
    kl = (np.exp(lb) * (lb - lc)).sum(-1).ravel()
    nb = -np.take_along_axis(lb, tgt[..., None], -1).ravel()
    nc = -np.take_along_axis(lc, tgt[..., None], -1).ravel()
    agree = (lb.argmax(-1) == lc.argmax(-1)).ravel()
    return {"mean_kl": kl.mean(), "median_kl": np.median(kl), "p90_kl": np.percentile(kl, 90),
            "p99_kl": np.percentile(kl, 99), "max_kl": kl.max(),
            "top1_agreement": agree.mean(), "ppl_base": np.exp(nb.mean()),
            "ppl_candidate": np.exp(nc.mean()), "tokens": kl.size}


def tiny_rows(tiny):
    ids = tq_ids(tiny["f32"], tiny["text"])
    assert len(ids) >= L_TINY * W_TINY
    return np.asarray(ids[:L_TINY * W_TINY]).reshape(W_TINY, L_TINY)


def kl_args(base, cand, text, *extra):
    return ["kl", *([base] if base else []), cand, "--text", text, "--seq-len", L_TINY,
            "--windows", W_TINY, "--no-db", *extra]


def test_kl_of_a_model_with_itself_is_exactly_zero(tiny):
    r = tq_json(*kl_args(tiny["f32"], tiny["f32"], tiny["text"]))
    assert r["mean_kl"] == 0.0 and r["max_kl"] == 0.0 and r["p99_kl"] == 0.0
    assert r["top1_agreement"] == 1.0 and r["argmax_flips"] == 0
    assert r["ppl_ratio"] == 1.0
    assert r["tokens_scored"] == W_TINY * (L_TINY - 1)


def test_kl_against_mlx_4bit_matches_numpy(tiny):
    ours = tq_json(*kl_args(tiny["f32"], tiny["q4"], tiny["text"]))
    ref = numpy_kl_report(tiny["f32"], tiny["q4"], tiny_rows(tiny))
    assert ours["tokens_scored"] == ref["tokens"]
    assert ours["mean_kl"] > 1e-4, ours
    for k in ("mean_kl", "median_kl", "p90_kl", "p99_kl", "max_kl"):
        assert ours[k] == pytest.approx(ref[k], rel=2e-3), (k, ours[k], ref[k])
    for k in ("ppl_base", "ppl_candidate"):
        assert ours[k] == pytest.approx(ref[k], rel=1e-4), (k, ours[k], ref[k])
    # A near-tie may flip between two f32 implementations; allow one token.
    assert abs(ours["top1_agreement"] - ref["top1_agreement"]) <= 1.0 / ref["tokens"] + 1e-12
    assert ours["protocol"].startswith("protocol=mlx text_sha256=" +
                                       hashlib.sha256(tiny["text"].read_bytes()).hexdigest())


def test_saved_base_rows_reproduce_direct_kl(tiny, tmp_path):
    direct = tq_json(*kl_args(tiny["f32"], tiny["q4"], tiny["text"], "--save-base",
                              tmp_path / "full.tqlogits"))
    again = tq_json(*kl_args(None, tiny["q4"], tiny["text"], "--base-logits",
                             tmp_path / "full.tqlogits"))
    for k in ("mean_kl", "max_kl", "top1_agreement", "ppl_base", "ppl_candidate"):
        assert again[k] == direct[k], k
    tq_json(*kl_args(tiny["f32"], tiny["f32"], tiny["text"], "--save-base",
                     tmp_path / "top8.tqlogits", "--top-k", 8))
    approx = tq_json(*kl_args(None, tiny["q4"], tiny["text"], "--base-logits",
                              tmp_path / "top8.tqlogits"))
    assert 0 < approx["mean_kl"] <= direct["mean_kl"] * (1 + 1e-6)
    assert approx["ppl_base"] == pytest.approx(direct["ppl_base"], rel=1e-12)
    self_ = tq_json(*kl_args(None, tiny["f32"], tiny["text"], "--base-logits",
                             tmp_path / "top8.tqlogits"))
    assert self_["max_kl"] == 0.0
    # The file belongs to one protocol/window set.
    r = run_tq("kl", tiny["q4"], "--text", tiny["text"], "--seq-len", L_TINY, "--windows",
               W_TINY - 1, "--base-logits", tmp_path / "full.tqlogits", "--no-db")
    assert_one_line_error(r, "full.tqlogits", "windows=")


def test_ppl_llamacpp_protocol_matches_numpy(tiny):
    # Tiny tokenizer adds no BOS: chunks of n_ctx, the second half scored.
    n_ctx, chunks = 64, 4
    ours = tq_json("ppl", tiny["f32"], "--text", tiny["text"], "--seq-len", n_ctx, "--windows",
                   chunks, "--protocol", "llamacpp", "--no-db")
    rows = np.asarray(tq_ids(tiny["f32"], tiny["text"])[:n_ctx * chunks]).reshape(chunks, n_ctx)
    lp = log_softmax(mlx_logits(load_f32(tiny["f32"]), rows))
    first = n_ctx // 2
    nll = -np.take_along_axis(lp[:, first:], rows[:, first + 1:, None], -1).ravel()
    assert ours["tokens_scored"] == nll.size == chunks * (n_ctx - 1 - first)
    assert ours["ppl"] == pytest.approx(np.exp(nll.mean()), rel=1e-4)
    assert "protocol=llamacpp" in ours["protocol"] and "bos=no" in ours["protocol"]


def test_runs_are_recorded_in_the_results_db(tiny, tmp_path):
    db = tmp_path / "r.sqlite"
    r = run_tq("ppl", tiny["f32"], "--text", tiny["text"], "--seq-len", L_TINY, "--windows", 2,
               "--db", db)
    assert r.returncode == 0, r.stderr
    r = run_tq(*kl_args(tiny["f32"], tiny["q4"], tiny["text"])[:-1], "--db", db)
    assert r.returncode == 0, r.stderr
    # Default location: $XDG_DATA_HOME/turboquant/results.sqlite.
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "xdg"))
    r = run_tq("ppl", tiny["f32"], "--text", tiny["text"], "--seq-len", L_TINY, "--windows", 1,
               env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "xdg" / "turboquant" / "results.sqlite").exists()

    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    rows = con.execute("SELECT kind, artifact, model_fingerprint, base_artifact, "
                       "base_fingerprint, protocol, result, tool_version, machine, time_utc "
                       "FROM runs ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["ppl", "kl"]
    ppl, kl = rows
    assert ppl[1] == str(tiny["f32"]) and ppl[3] is None
    assert len(ppl[2]) == 64 and ppl[2] == kl[4]  # same model, same fingerprint
    assert kl[2] != kl[4]  # the 4-bit candidate differs
    assert json.loads(ppl[6])["tokens_scored"] == 2 * (L_TINY - 1)
    assert json.loads(kl[6])["mean_kl"] > 0
    assert ppl[5].startswith("protocol=mlx") and ppl[7] and "; " in ppl[8]
    assert ppl[9].endswith("Z")


# ---------------------------------------------------------------------------------------------
# Bad input.


def test_bad_input_is_one_clear_line(tiny, tmp_path):
    f32 = tiny["f32"]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert_one_line_error(run_tq("ppl", f32, "--text", empty, "--no-db"), "empty.txt", "empty")
    short = tmp_path / "short.txt"
    short.write_text("The quick brown fox.")
    assert_one_line_error(run_tq("ppl", f32, "--text", short, "--no-db"), "short.txt",
                          "fewer than one window")
    assert_one_line_error(run_tq("kl", f32, tiny["q4"], "--text", short, "--no-db"),
                          "short.txt", "fewer than one window")
    other = write_tiny(tmp_path / "v512", dict(TINY, vocab_size=512))
    assert_one_line_error(run_tq("kl", f32, other, "--text", tiny["text"], "--no-db"),
                          "vocabulary")
    notok = tmp_path / "notok"
    shutil.copytree(f32, notok)
    (notok / "tokenizer.json").unlink()
    assert_one_line_error(run_tq("ppl", notok, "--text", tiny["text"], "--no-db"), "tokenizer")
    assert_one_line_error(run_tq("ppl", f32, "--text", tmp_path / "missing.txt", "--no-db"),
                          "missing.txt")
    garbage = tmp_path / "garbage.tqlogits"
    garbage.write_bytes(b"not a logits file")
    assert_one_line_error(run_tq("kl", tiny["q4"], "--text", tiny["text"], "--base-logits",
                                 garbage, "--no-db"), "garbage.tqlogits")


# ---------------------------------------------------------------------------------------------
# SmolLM2 vs mlx_lm.perplexity.


def ppl_windows():
    if os.environ.get("TQ_PPL_WINDOWS"):
        return int(os.environ["TQ_PPL_WINDOWS"])
    return 64 if os.environ.get("TQ_SLOW_TESTS") == "1" else 8


@pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}")
def test_ppl_smollm2_matches_mlx_lm_perplexity(tmp_path):
    n, L = ppl_windows(), 512
    model_dir = tmp_path / "smollm2"
    r = run_tq("import", GGUF, "-o", model_dir, "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    ours = tq_json("ppl", model_dir, "--text", WIKI, "--windows", n, "--no-db")
    ids = tq_ids(model_dir, WIKI)
    rows = np.asarray(ids[:n * L], dtype=np.int32).reshape(n, L)
    ppl, se = eval_ppl_subprocess(model_dir, rows, tmp_path / "mlx")
    print(f"\ntq: {ours['ppl']:.6f} ± {ours['ppl_se']:.6f} ({ours['seconds']:.1f} s); "
          f"mlx-lm: {ppl:.6f} ± {se:.6f}; {n} windows")
    sha = hashlib.sha256(WIKI.read_bytes()).hexdigest()
    assert ours["protocol"] == (f"protocol=mlx text_sha256={sha} L=512 windows={n} "
                                f"tokens_scored={n * 511} bos=no")
    assert ours["tokens_scored"] == n * 511
    assert ours["ppl"] == pytest.approx(ppl, rel=1e-3)
    assert f"{ours['ppl_se']:.2g}" == f"{se:.2g}", (ours["ppl_se"], se)


@pytest.mark.skipif(os.environ.get("TQ_SLOW_TESTS") != "1", reason="slow: set TQ_SLOW_TESTS=1")
@pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}")
def test_kl_smollm2_against_mlx_4bit_matches_numpy(tmp_path):
    f32 = tmp_path / "smollm2"
    r = run_tq("import", GGUF, "-o", f32, "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    q4 = tmp_path / "smollm2-q4"
    mlx_lm.convert(hf_path=str(f32), mlx_path=str(q4), quantize=True, q_bits=4, q_group_size=64)
    L, n = 128, 2
    ours = tq_json("kl", f32, q4, "--text", WIKI, "--seq-len", L, "--windows", n, "--no-db")
    rows = np.asarray(tq_ids(f32, WIKI)[:L * n]).reshape(n, L)
    ref = numpy_kl_report(f32, q4, rows)
    print(f"\ntq: {ours}\nnumpy: {ref}")
    assert ours["mean_kl"] > 1e-3
    for k in ("mean_kl", "median_kl", "p90_kl", "max_kl"):
        assert ours[k] == pytest.approx(ref[k], rel=1e-2), (k, ours[k], ref[k])
    for k in ("ppl_base", "ppl_candidate"):
        assert ours[k] == pytest.approx(ref[k], rel=1e-3), (k, ours[k], ref[k])
    assert abs(ours["top1_agreement"] - ref["top1_agreement"]) <= 2.0 / ref["tokens"] + 1e-12
