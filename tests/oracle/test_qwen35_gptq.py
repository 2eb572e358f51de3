"""Oracle: GPTQ and `tq sensitivity` on the qwen3_5 hybrid (seeded random checkpoint of
tests/oracle/qwen35_fixture.py, Hv > Hk, Hugging Face layout).
  - `tq convert --gptq` calibrates every DeltaNet projection (in_proj_qkv/z/b/a on one Hessian,
    out_proj after them) as attention's q/k/v and o; the artifact loads and generates in stock
    mlx-lm, and its mean KL to the source (mlx-lm, held-out token windows) is not above RTN's at
    the same spec;
  - `tq sensitivity` measures the DeltaNet projections, plain and under --rotate-weights, with
    module names as the converted artifact holds them.
"""

import copy
import json
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from mlx_forward_ref import reference  # noqa: E402
from qwen35_fixture import GEOMETRIES, write_geometry  # noqa: E402
from test_ppl_kl import write_tokenizer  # noqa: E402  (a byte-level BPE: tq calibrates on text)
from test_rotation_parity import TQ_BIN, parity  # noqa: E402

NAME = "hf_nested_tied"
GEO = copy.deepcopy(GEOMETRIES[NAME])
GEO["text"]["vocab_size"] = 300  # the BPE tokenizer's ids
VOCAB = 300
WORDS = ("the quick brown fox jumps over lazy dog Robert Boulter of and in a to was The = "
         "\n").split(" ")


def tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)


def words(n, seed):
    """Seeded text over the words the tokenizer was trained on."""
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=n))


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("q35gptq")
    d = write_geometry(root / "src", GEO, seed=41)
    write_tokenizer(d)
    (root / "calib.txt").write_text(words(3000, seed=1))
    return d


def test_gptq_artifact_runs_in_mlx_and_beats_rtn(src, tmp_path):
    calib = src.parent / "calib.txt"
    spec = ["--bits", "3", "--group-size", "32", "--dtype", "bf16"]
    rtn, gptq = tmp_path / "rtn", tmp_path / "gptq"
    r = tq("convert", src, "-o", rtn, *spec)
    assert r.returncode == 0, r.stderr[-3000:]
    r = tq("convert", src, "-o", gptq, *spec, "--gptq", "--calib", calib, "--calib-tokens", "2048",
           "--calib-seq-len", "64", "--no-timings")
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((gptq / "tq_metadata.json").read_text())
    assert meta["quantizer"]["method"] == "gptq"
    info = meta["module_info"]
    for module in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "q_proj",
                   "o_proj", "down_proj"):
        hits = [k for k in info if k.endswith(module) and not k.startswith("mtp.")]
        assert hits, module
        assert all(info[k]["proxy_loss"] <= info[k]["rtn_loss"] for k in hits), module
    # The MTP companion (mtp.safetensors) is rounded to nearest: its input is not calibrated.
    assert info["mtp.fc"]["method"] == "rtn"
    # The same tensors as the RTN artifact (names, dtypes, shapes): only the codes differ.
    a, b = mx.load(str(rtn / "model.safetensors")), mx.load(str(gptq / "model.safetensors"))
    assert sorted(a) == sorted(b)
    assert all(a[k].shape == b[k].shape and a[k].dtype == b[k].dtype for k in a)

    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(src / "tokenizer.json")).encode(words(600, seed=9)).ids
    assert max(ids) < VOCAB and len(ids) >= 256
    windows = [ids[i * 64:(i + 1) * 64] for i in range(4)]
    ref, _ = reference(src, windows, None, 0)
    rtn_logits, _ = reference(rtn, windows, None, 0)
    gptq_logits, gen = reference(gptq, windows, [5, 17, 33, 60], 12)
    assert len(gen) == 12
    kl_rtn, _ = parity(ref, rtn_logits)
    kl_gptq, _ = parity(ref, gptq_logits)
    print(f"qwen3_5 {NAME} 3-bit g32 mean KL to the source (mlx-lm): RTN {kl_rtn:.4f}, "
          f"GPTQ {kl_gptq:.4f}")
    assert kl_gptq <= kl_rtn, (kl_gptq, kl_rtn)


@pytest.mark.parametrize("rotate", [False, True])
def test_sensitivity_measures_deltanet_projections(src, tmp_path, rotate):
    out = tmp_path / "sens.json"
    extra = ["--rotate-weights"] if rotate else []
    r = tq("sensitivity", src, "-o", out, "--calib", src.parent / "calib.txt", "--windows", "2",
           "--seq-len", "32", "--bits", "3,4", "--group-size", "32", *extra)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads(out.read_text())
    names = [m["name"] for m in table["modules"]]
    assert all(not n.startswith("model.language_model") for n in names), names[:3]
    for module in ("linear_attn.in_proj_qkv", "linear_attn.in_proj_b", "linear_attn.out_proj",
                   "self_attn.o_proj", "mlp.down_proj"):
        assert any(n.endswith(module) for n in names), module
    kls = [s["kl"] for m in table["modules"] for s in m["specs"]]
    assert all(np.isfinite(kls)) and max(kls) > 0
