"""Oracle: our safetensors reader/dequantizer and writer against mlx / mlx-lm.

A tiny seeded llama is saved as a float HF directory, converted by stock `mlx_lm.convert` in
several quantization settings, and every tensor our DirTensorSource yields as f32 is compared
bit for bit with `mx.dequantize` (quantized modules) or `mx.load` (float tensors). Directories
written by our ShardedWriter must load in stock mlx-lm and give the same logits.

The C++ side runs through the gtest DirSourceOracle in tq_tests (env TQ_TESTS_BIN, default
<repo>/build/tq_tests).
"""

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")
st_numpy = pytest.importorskip("safetensors.numpy")
tokenizers = pytest.importorskip("tokenizers")

from mlx.utils import tree_flatten  # noqa: E402
from safetensors import safe_open  # noqa: E402
from mlx_lm.models import llama  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS_BIN = os.environ.get("TQ_TESTS_BIN", str(REPO / "build" / "tq_tests"))

CONFIG = {
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
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]
# mlx-lm defaults for a mode when a per-module dict omits bits/group_size (FORMATS.md §4.1).
MODE_DEFAULTS = {"affine": (4, 64), "mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}


def write_tokenizer(d: pathlib.Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    text = ["The quick brown fox jumps over the lazy dog."] * 20 + ["hello world, tq here"]
    tok.train_from_iterator(text, trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
            }
        )
    )


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A float (bf16) HF-style llama directory with seeded random weights."""
    d = tmp_path_factory.mktemp("hf")
    model = llama.Model(llama.ModelArgs.from_dict(CONFIG))
    rng = np.random.default_rng(1234)
    weights = {}
    for k, v in tree_flatten(model.parameters()):
        a = rng.standard_normal(v.shape).astype(np.float32) * 0.05
        if k.endswith("norm.weight"):
            a += 1.0
        if k.endswith("mlp.up_proj.weight"):
            a[:, 7] *= 40.0  # an outlier input channel
        weights[k] = mx.array(a).astype(mx.bfloat16)
    mx.save_safetensors(str(d / "model.safetensors"), weights, metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(CONFIG, indent=2))
    write_tokenizer(d)
    return d


def run_oracle_gtest(env_extra):
    env = dict(os.environ, **env_extra)
    r = subprocess.run(
        [TESTS_BIN, "--gtest_filter=DirSourceOracle.*"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout


def export_ours(model_dir: pathlib.Path, out_dir: pathlib.Path):
    out = run_oracle_gtest({"TQ_ORACLE_DIR": str(model_dir), "TQ_ORACLE_OUT": str(out_dir)})
    assert "[       OK ] DirSourceOracle.ExportsEveryTensorAsF32" in out, out
    # Loaded by the Rust safetensors reader, whose header validation is strict.
    return st_numpy.load_file(str(out_dir / "model.safetensors"))


def module_spec(q: dict, path: str):
    """(mode, bits, group_size) that mlx-lm applies to module `path` (FORMATS.md §4.1-4.2)."""
    entry = q.get(path, True)
    if entry is True:
        mode = q.get("mode", "affine")
        return mode, q["bits"], q["group_size"]
    assert isinstance(entry, dict), f"{path}: {entry}"
    mode = entry.get("mode", "affine")
    bits, gs = MODE_DEFAULTS[mode]
    # A null (None) value is the mode's default too, as to_quantized(**entry) reads it.
    b, g = entry.get("bits"), entry.get("group_size")
    return mode, bits if b is None else b, gs if g is None else g


def reference_f32(model_dir: pathlib.Path):
    """Every logical tensor of an MLX/HF directory as f32, computed by mlx itself."""
    cfg = json.loads((model_dir / "config.json").read_text())
    q = cfg.get("quantization")
    weights = {}
    for f in sorted(model_dir.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
    ref, specs = {}, {}
    for name, w in weights.items():
        if name.endswith((".scales", ".biases")):
            continue
        p = name[: -len(".weight")] if name.endswith(".weight") else None
        if p is not None and p + ".scales" in weights:
            mode, bits, gs = module_spec(q, p)
            deq = mx.dequantize(
                w,
                weights[p + ".scales"],
                weights.get(p + ".biases"),
                group_size=gs,
                bits=bits,
                mode=mode,
            )
            specs[name] = (mode, bits, gs)
            ref[name] = np.array(deq.astype(mx.float32))
        else:
            ref[name] = np.array(w.astype(mx.float32))
    return ref, specs


def assert_bit_identical(ours: dict, ref: dict):
    assert sorted(ours) == sorted(ref)
    for name in sorted(ref):
        a, b = ours[name], ref[name]
        assert a.dtype == np.float32 and a.shape == b.shape, (name, a.shape, b.shape)
        same = np.array_equal(a.view(np.uint32), b.view(np.uint32))
        if not same:
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            bad = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
            pytest.fail(f"{name}: {bad} of {a.size} values differ, max |diff| {np.nanmax(diff)}")


SETTINGS = {
    "affine4_g64_bf16": dict(q_bits=4, q_group_size=64, dtype="bfloat16"),
    "affine3_g32_f16": dict(q_bits=3, q_group_size=32, dtype="float16"),
    "affine6_g128_f32": dict(q_bits=6, q_group_size=128, dtype="float32"),
    "affine2_g32_bf16": dict(q_bits=2, q_group_size=32),
    "affine5_g64_bf16": dict(q_bits=5, q_group_size=64),
    "affine8_g128_f16": dict(q_bits=8, q_group_size=128, dtype="float16"),
    "mxfp4": dict(q_mode="mxfp4"),
    "nvfp4": dict(q_mode="nvfp4"),
    "mxfp8": dict(q_mode="mxfp8"),
    "mixed_3_6": dict(quant_predicate="mixed_3_6", q_group_size=64),
    # Without --q-group-size the presets write "group_size": null per module.
    "mixed_4_6_null_group": dict(quant_predicate="mixed_4_6"),
}


def test_float_dir_matches_mx_load(hf_dir, tmp_path):
    ours = export_ours(hf_dir, tmp_path / "ours")
    ref, specs = reference_f32(hf_dir)
    assert not specs
    assert len(ref) == 2 + 2 * 9 + 1
    assert_bit_identical(ours, ref)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_quantized_dir_matches_mx_dequantize(hf_dir, tmp_path, setting):
    from mlx_lm import convert

    qdir = tmp_path / "mlx"
    convert(hf_path=str(hf_dir), mlx_path=str(qdir), quantize=True, **SETTINGS[setting])
    ours = export_ours(qdir, tmp_path / "ours")
    ref, specs = reference_f32(qdir)
    assert len(specs) >= 2 * 7 + 2, specs  # every Linear, the embedding and lm_head
    if setting == "mixed_3_6":
        assert {s[1] for s in specs.values()} == {3, 6}
    assert_bit_identical(ours, ref)


def logits_of(model, tokens):
    return np.array(model(mx.array([tokens]))[0].astype(mx.float32))


def copy_side_files(src: pathlib.Path, dst: pathlib.Path):
    for name in ["config.json"] + TOKENIZER_FILES:
        shutil.copy(src / name, dst / name)


def test_mlx_lm_loads_our_float_dir(hf_dir, tmp_path):
    """Our f32 export of the float model is itself a checkpoint stock mlx-lm loads."""
    out = tmp_path / "ours"
    export_ours(hf_dir, out)
    copy_side_files(hf_dir, out)
    model, tok = mlx_lm.load(str(out))
    ref_model, _ = mlx_lm.load(str(hf_dir))
    ref_model.set_dtype(mx.float32)
    tokens = tok.encode("The quick brown fox")
    np.testing.assert_array_equal(logits_of(model, tokens), logits_of(ref_model, tokens))
    text = mlx_lm.generate(model, tok, prompt="hello world", max_tokens=5, verbose=False)
    assert isinstance(text, str)


@pytest.mark.parametrize("setting", ["affine4_g64_bf16", "mixed_3_6", "mxfp4"])
def test_mlx_lm_loads_our_sharded_copy(hf_dir, tmp_path, setting):
    """Stored tensors copied through ShardedWriter into many shards load and run identically."""
    from mlx_lm import convert

    qdir = tmp_path / "mlx"
    convert(hf_path=str(hf_dir), mlx_path=str(qdir), quantize=True, **SETTINGS[setting])
    out = tmp_path / "copy"
    stdout = run_oracle_gtest(
        {
            "TQ_ORACLE_DIR": str(qdir),
            "TQ_ORACLE_OUT": str(tmp_path / "f32"),
            "TQ_ORACLE_COPY_OUT": str(out),
            "TQ_ORACLE_SHARD_BYTES": str(32 << 10),
        }
    )
    assert "[       OK ] DirSourceOracle.CopiesStoredTensorsVerbatim" in stdout, stdout
    shards = sorted(p.name for p in out.glob("model*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    for s in shards:  # the strict Rust reader validates the header on open
        with safe_open(str(out / s), framework="np") as f:
            assert f.metadata() == {"format": "mlx"}
            assert len(list(f.keys())) > 0
    copy_side_files(qdir, out)
    model, tok = mlx_lm.load(str(out))
    ref_model, _ = mlx_lm.load(str(qdir))
    tokens = tok.encode("hello world, tq here")
    np.testing.assert_array_equal(logits_of(model, tokens), logits_of(ref_model, tokens))
    mlx_lm.generate(model, tok, prompt="The quick", max_tokens=4, verbose=False)
