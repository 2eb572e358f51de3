"""Oracle: our reference forward pass (Transformer::forward) against stock mlx-lm, f32 both sides.

For SmolLM2 (imported from the GGUF by `tq import`, and read straight from the GGUF) and for
seeded tiny llama / qwen2 / qwen3 checkpoints (float, and quantized by stock `mlx_lm.convert`):
  - logits of the same token windows agree within 1e-3 max relative error per position,
    rel(row) = max|ours - mlx| / max|mlx|;
  - greedy generation of 64 tokens (mlx_lm.generate.generate_step, argmax sampler) is identical.
mlx-lm runs the model after model.set_dtype(float32): quantized layers stay quantized, their
activations (and dequantized weights) are f32 (tests/oracle/mlx_forward_ref.py).

The C++ side is the gtest ForwardOracle in tq_tests (env TQ_TESTS_BIN, default
<repo>/build/tq_tests).
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from mlx.utils import tree_flatten  # noqa: E402
from mlx_forward_ref import reference, reference_subprocess  # noqa: E402
from mlx_lm.models import llama, qwen2, qwen3  # noqa: E402
from mlx_lm.utils import load_tokenizer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS_BIN = os.environ.get("TQ_TESTS_BIN", str(REPO / "build" / "tq_tests"))
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"

REL_TOL = 1e-3
GEN_TOKENS = 64

BASE = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 320,
    "max_position_embeddings": 512,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
# Each exercises something: llama3 RoPE bands, linear traditional (mlx-only) RoPE + all llama
# biases + head_dim that is not hidden/heads, qwen2's q/k/v biases, qwen3's q/k norms; tied and untied heads; the
# stored float dtypes bf16 / f32 / f16.
TINY = {
    "llama_llama3_untied": {
        **BASE,
        "model_type": "llama",
        "rope_theta": 10000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "llama_linear_tied_bias": {
        **BASE,
        "model_type": "llama",
        "num_key_value_heads": 4,
        "head_dim": 48,
        "rope_theta": 5000.0,
        "rope_scaling": {"type": "linear", "factor": 2.0},
        "rope_traditional": True,
        "attention_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    },
    "qwen2_tied": {
        **BASE,
        "model_type": "qwen2",
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    },
    "qwen3_untied": {
        **BASE,
        "model_type": "qwen3",
        "head_dim": 64,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}
CLASSES = {"llama": llama, "qwen2": qwen2, "qwen3": qwen3}
DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}
# (tiny model, mlx_lm.convert settings)
QUANTIZED = [
    ("llama_llama3_untied", "affine4_g64", dict(q_bits=4, q_group_size=64)),
    ("llama_linear_tied_bias", "affine4_g64", dict(q_bits=4, q_group_size=64)),
    ("qwen2_tied", "affine4_g64", dict(q_bits=4, q_group_size=64)),
    ("qwen3_untied", "affine4_g64", dict(q_bits=4, q_group_size=64)),
    ("llama_llama3_untied", "mxfp4", dict(q_mode="mxfp4")),
    ("qwen3_untied", "nvfp4", dict(q_mode="nvfp4")),
]


def write_tokenizer(d: pathlib.Path, vocab_size: int):
    """A word-level tokenizer over the ids, enough for mlx_lm.load / convert."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({f"w{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}
        )
    )


def write_tiny(d: pathlib.Path, cfg: dict, seed: int):
    """Seeded random weights for mlx-lm's own model class, with outlier channels."""
    d.mkdir(parents=True)
    mod = CLASSES[cfg["model_type"]]
    model = mod.Model(mod.ModelArgs.from_dict(cfg))
    rng = np.random.default_rng(seed)
    weights = {}
    for k, v in tree_flatten(model.parameters()):
        a = rng.standard_normal(v.shape).astype(np.float32) * 0.08
        if k.endswith("norm.weight"):
            a = 1.0 + 2.0 * a
            if k.endswith("layernorm.weight"):
                a[9] = 6.0  # a strongly weighted residual channel
        if k.endswith("embed_tokens.weight"):
            a[:, 5] *= 4.0  # a residual outlier channel
        if k.endswith("mlp.up_proj.weight") or k.endswith("self_attn.v_proj.weight"):
            a[:, 7] *= 30.0  # an outlier input channel
        if k.endswith(".bias"):
            a *= 5.0
        weights[k] = mx.array(a).astype(DTYPES[cfg["torch_dtype"]])
    mx.save_safetensors(str(d / "model.safetensors"), weights, metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(d, cfg["vocab_size"])


def run_ours(model_path, windows, prompt, out_dir: pathlib.Path, max_tokens=GEN_TOKENS):
    out_dir.mkdir(parents=True, exist_ok=True)
    job = out_dir / "job.json"
    job.write_text(json.dumps({"windows": windows, "prompt": prompt, "max_tokens": max_tokens}))
    env = dict(
        os.environ,
        TQ_FORWARD_MODEL=str(model_path),
        TQ_FORWARD_JOB=str(job),
        TQ_FORWARD_OUT=str(out_dir),
    )
    r = subprocess.run(
        [TESTS_BIN, "--gtest_filter=ForwardOracle.*"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "[       OK ] ForwardOracle.WritesLogitsAndGreedyTokens" in r.stdout, r.stdout
    res = json.loads((out_dir / "result.json").read_text())
    flat = np.fromfile(out_dir / "logits.f32", dtype="<f4").reshape(-1, res["vocab"])
    logits = np.split(flat, np.cumsum(res["rows"])[:-1])
    return logits, res


def assert_close(ours, ref, what):
    assert len(ours) == len(ref)
    worst = 0.0
    for w, (a, b) in enumerate(zip(ours, ref)):
        assert a.shape == b.shape, (what, w, a.shape, b.shape)
        assert np.isfinite(a).all(), (what, w)
        rel = np.abs(a.astype(np.float64) - b).max(axis=1) / np.abs(b).max(axis=1)
        worst = max(worst, float(rel.max()))
        bad = np.nonzero(rel > REL_TOL)[0]
        assert bad.size == 0, f"{what}: window {w}, positions {bad[:8]} rel {rel[bad[:8]]}"
    print(f"{what}: worst per-position relative error {worst:.2e}")
    return worst


def assert_same_generation(ours, ref, what):
    assert len(ours) == GEN_TOKENS and len(ref) == GEN_TOKENS
    if ours != ref:
        i = next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)
        pytest.fail(f"{what}: greedy tokens differ from index {i}: ours {ours[i:i + 8]}, "
                    f"mlx-lm {ref[i:i + 8]}")


# --- tiny synthetic models -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    dirs = {}
    for i, (name, cfg) in enumerate(sorted(TINY.items())):
        write_tiny(root / name, cfg, seed=100 + i)
        dirs[name] = root / name
    return dirs


def tiny_tokens(vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    windows = [rng.integers(0, vocab, size=n).tolist() for n in (96, 33)]
    prompt = rng.integers(0, vocab, size=12).tolist()
    return windows, prompt


def check_model(model_dir, out_dir, what, seed):
    cfg = json.loads((model_dir / "config.json").read_text())
    windows, prompt = tiny_tokens(cfg["vocab_size"], seed)
    ours, res = run_ours(model_dir, windows, prompt, out_dir)
    ref, ref_gen = reference(model_dir, windows, prompt, GEN_TOKENS)
    assert_close(ours, ref, what)
    assert_same_generation(res["generated"], ref_gen, what)
    # The generation is not degenerate: a fixed point after one step would prove little.
    assert len(set(ref_gen)) > 3, ref_gen


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_float(tiny_dirs, tmp_path, name):
    check_model(tiny_dirs[name], tmp_path / "ours", name, seed=7)


@pytest.mark.parametrize("name,setting,kwargs", QUANTIZED, ids=[f"{n}-{s}" for n, s, _ in QUANTIZED])
def test_tiny_quantized(tiny_dirs, tmp_path, name, setting, kwargs):
    from mlx_lm import convert

    qdir = tmp_path / "mlx"
    convert(hf_path=str(tiny_dirs[name]), mlx_path=str(qdir), quantize=True, **kwargs)
    q = json.loads((qdir / "config.json").read_text())["quantization"]
    assert q.get("mode", "affine") == setting.split("_")[0].replace("affine4", "affine")
    check_model(qdir, tmp_path / "ours", f"{name} {setting}", seed=8)


# --- SmolLM2 ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    if not GGUF.exists():
        pytest.skip(f"asset missing: {GGUF}")
    out = tmp_path_factory.mktemp("smol") / "smollm2"
    r = subprocess.run([TQ_BIN, "import", str(GGUF), "-o", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    if not WIKI.exists():
        pytest.skip(f"asset missing: {WIKI}")
    text = WIKI.read_text(encoding="utf-8")
    tok = load_tokenizer(out)
    ids = tok.encode(text[:20000])
    windows = [ids[1000:1128], ids[3000:3128]]
    prompt = tok.encode("The history of the Roman Empire begins")
    # In a child python with the system OpenBLAS under mlx (see mlx_forward_ref.py).
    ref, ref_gen = reference_subprocess(out, windows, prompt, GEN_TOKENS, out.parent / "mlx")
    return {"dir": out, "windows": windows, "prompt": prompt, "ref": ref, "ref_gen": ref_gen}


@pytest.mark.parametrize("source", ["imported", "gguf"])
def test_smollm2(smollm2, tmp_path, source):
    path = smollm2["dir"] if source == "imported" else GGUF
    ours, res = run_ours(path, smollm2["windows"], smollm2["prompt"], tmp_path / "ours")
    assert_close(ours, smollm2["ref"], f"SmolLM2 {source}")
    assert_same_generation(res["generated"], smollm2["ref_gen"], f"SmolLM2 {source}")
    print(f"SmolLM2 {source}: load {res['load_s']:.2f} s, prefill 128 tokens "
          f"{min(res['prefill_s']):.3f} s, decode {res['decode_s'] * 1e3:.1f} ms/token")
