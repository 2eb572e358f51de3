"""Oracle: `tq convert --rotate-weights` on the qwen3_5 hybrid (seeded random checkpoints of
tests/oracle/qwen35_fixture.py), by the seed's corridor map: untie, gamma-fold and R1 over every
residual reader and writer (DeltaNet in_proj_qkv/z/b/a and out_proj included), R2 off.
  - the folded f32 model computes the source's function: mean KL(source || folded) < 1e-6
    through stock mlx-lm and through our runtime, no argmax flip (geometries with Hv > Hk, tied
    and untied, Hugging Face layout with zero-centred norms, a flat and a nested config);
  - the untouched tensors (q/k norms, conv1d, A_log, dt_bias, the gated norm) are bit-equal;
  - a rotated 4-bit artifact runs in mlx-lm and our runtime gives its logits;
  - an explicit --r2 is refused in one line naming the gate.
"""

import json
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from mlx_forward_ref import reference  # noqa: E402
from qwen35_fixture import GEOMETRIES, write_qwen35  # noqa: E402
from test_rotation_parity import TQ_BIN, ours, parity  # noqa: E402

KL_F32 = 1e-6
# The geometries folded: Hv > Hk in both, one tied with a nested config, one untied and flat
# (hidden 96 = 12·2^3: R1 is Paley I ⊗ Sylvester).
FOLDED = ["hf_nested_tied", "hf_flat_untied"]
UNTOUCHED = ("q_norm.weight", "k_norm.weight", "conv1d.weight", "A_log", "dt_bias",
             "linear_attn.norm.weight")


def tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)


def load(d: pathlib.Path):
    out = {}
    for f in sorted(d.glob("model*.safetensors")):
        out.update(mx.load(str(f)))
    return out


def windows_for(name):
    rng = np.random.default_rng(7)
    return [rng.integers(0, GEOMETRIES[name]["text"]["vocab_size"], size=n).tolist()
            for n in (48, 40)]


@pytest.mark.parametrize("name", FOLDED)
def test_rotated_float_fold_keeps_the_function(tmp_path, name):
    text = GEOMETRIES[name]["text"]
    src = write_qwen35(tmp_path / "src", name, seed=31)
    folded = tmp_path / "folded"
    r = tq("convert", src, "-o", folded, "--rotate-weights", "--no-quantize", "--dtype", "f32",
           "--seed", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = json.loads((folded / "config.json").read_text())
    assert cfg.get("text_config", cfg)["tie_word_embeddings"] is False
    rot = json.loads((folded / "rotation.json").read_text())
    assert rot["steps"][-1] == "r1" and rot["r2"]["kind"] == "none", rot["steps"]
    assert any("gate" in n for n in rot["notes"]), rot["notes"]

    windows = windows_for(name)
    ref_src = reference(src, windows, None, 0)[0]
    mlx_folded = reference(folded, windows, None, 0)[0]
    kl_mlx, flips_mlx = parity(ref_src, mlx_folded)
    kl_ours, flips_ours = parity(ours(src, windows, tmp_path / "ours_src"),
                                 ours(folded, windows, tmp_path / "ours_folded"))
    print(f"{name}: rotated f32 fold mean KL mlx-lm {kl_mlx:.2e}, ours {kl_ours:.2e}")
    assert kl_mlx < KL_F32 and kl_ours < KL_F32, (kl_mlx, kl_ours)
    assert flips_mlx == 0 and flips_ours == 0, (flips_mlx, flips_ours)

    # The fold moved the residual basis and left the corridor's inner tensors alone.
    plain = tmp_path / "plain"
    r = tq("convert", src, "-o", plain, "--no-quantize", "--dtype", "f32")
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = load(plain), load(folded)
    assert sorted(b) == sorted(set(a) | {"language_model.lm_head.weight"})
    for k in sorted(a):
        same = mx.array_equal(a[k], b[k]).item()
        if k.endswith(UNTOUCHED):
            assert same, f"{k} changed"
        elif k.endswith(("layernorm.weight", "model.norm.weight")):
            assert mx.all(b[k] == 1).item(), f"{k}: gain not folded to ones"
        elif k.endswith(".weight") and a[k].ndim == 2:
            assert not same, f"{k} not rotated"
    n_linear = sum((i + 1) % text["full_attention_interval"] != 0
                   for i in range(text["num_hidden_layers"]))
    assert n_linear > 0


def test_rotated_4bit_artifact_runs_in_mlx(tmp_path):
    src = write_qwen35(tmp_path / "src", "hf_nested_tied", seed=32)
    q = tmp_path / "q4"
    r = tq("convert", src, "-o", q, "--rotate-weights", "--bits", "4", "--group-size", "32",
           "--r2", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((q / "config.json").read_text())["quantization"]["bits"] == 4
    windows = windows_for("hf_nested_tied")
    theirs = reference(q, windows, None, 0)[0]
    mine = ours(q, windows, tmp_path / "ours_q4")
    for a, b in zip(mine, theirs):
        diff = float(np.abs(a.astype(np.float64) - b).max())
        assert diff <= 1e-3 * max(1.0, float(np.abs(b).max())), diff


@pytest.mark.parametrize("r2", ["hadamard", "random"])
def test_explicit_r2_is_refused(tmp_path, r2):
    src = write_qwen35(tmp_path / "src", "hf_nested_tied", seed=33)
    r = tq("convert", src, "-o", tmp_path / "out", "--rotate-weights", "--r2", r2)
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert r.returncode == 1 and len(errors) == 1, r.stderr
    assert "--r2" in errors[0] and "gate" in errors[0], errors[0]
    assert not (tmp_path / "out").exists()
