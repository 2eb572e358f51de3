"""Fold-parity gate (issue 5, the seed's W0 exit criterion): the rotation-folded float model
computes the source's function, through stock mlx-lm and through our runtime.

For the tiny llama / qwen2 / qwen3 checkpoints of test_forward_logits.py and for SmolLM2
(imported from the GGUF as f32 by `tq import`), the folded model (untie, gamma-fold, R1, R2) is
written as f32 and as bf16, then:
  - f32 folded vs source: mean KL(source || folded) < 1e-6 through mlx-lm and through our
    runtime, and no argmax flip except between exactly tied source logits;
  - bf16 folded vs source (mlx-lm): mean KL < 1e-3;
  - mlx-lm's logits on the folded artifact equal our runtime's (1e-3 max relative error).
`fold()` makes the folded model: `tq convert SRC -o DST --rotate-weights --no-quantize`.
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from mlx_forward_ref import reference, reference_subprocess  # noqa: E402
from test_forward_logits import TINY, assert_close, write_tiny  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS_BIN = os.environ.get("TQ_TESTS_BIN", str(REPO / "build" / "tq_tests"))
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))

KL_F32 = 1e-6
KL_BF16 = 1e-3


def fold(src, dst, dtype="f32", r1="hadamard", r2="hadamard", seed=0):
    """Writes the folded float model of `src` to `dst` (stored as `dtype`)."""
    r = subprocess.run([TQ_BIN, "convert", str(src), "-o", str(dst), "--rotate-weights",
                        "--no-quantize", "--dtype", dtype, "--r1", r1, "--r2", r2,
                        "--seed", str(seed)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert (pathlib.Path(dst) / "config.json").exists()


def ours(model_dir, windows, out_dir: pathlib.Path):
    """Our runtime's logits per window (the ForwardOracle gtest, no generation)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    job = out_dir / "job.json"
    job.write_text(json.dumps({"windows": windows}))
    env = dict(os.environ, TQ_FORWARD_MODEL=str(model_dir), TQ_FORWARD_JOB=str(job),
               TQ_FORWARD_OUT=str(out_dir))
    r = subprocess.run([TESTS_BIN, "--gtest_filter=ForwardOracle.*"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    res = json.loads((out_dir / "result.json").read_text())
    flat = np.fromfile(out_dir / "logits.f32", dtype="<f4").reshape(-1, res["vocab"])
    return np.split(flat, np.cumsum(res["rows"])[:-1])


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def parity(src_logits, folded_logits):
    """(mean KL(src || folded), argmax flips not explained by an exact tie in src)."""
    kls, flips = [], 0
    for a, b in zip(src_logits, folded_logits):
        la, lb = log_softmax(a), log_softmax(b)
        kls.append((np.exp(la) * (la - lb)).sum(axis=1))
        ia, ib = a.argmax(axis=1), b.argmax(axis=1)
        rows = np.nonzero(ia != ib)[0]
        flips += int(sum(a[r, ia[r]] != a[r, ib[r]] for r in rows))
    return float(np.concatenate(kls).mean()), flips


def check_model(src, windows, work: pathlib.Path, what, ref_src, run_ref, **fold_args):
    """Folds `src` as f32 and bf16 and checks every gate; returns the numbers."""
    f32, bf16 = work / "folded_f32", work / "folded_bf16"
    fold(src, f32, "f32", **fold_args)
    fold(src, bf16, "bf16", **fold_args)
    cfg = json.loads((f32 / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is False
    assert json.loads((f32 / "rotation.json").read_text())["steps"][-1] in ("r1", "r2")
    assert "quantization" not in cfg and "quantization_config" not in cfg  # a float model

    mlx_f32 = run_ref(f32, windows, work / "mlx_f32")
    mlx_bf16 = run_ref(bf16, windows, work / "mlx_bf16")
    ours_f32 = ours(f32, windows, work / "ours_f32")
    ours_src = ours(src, windows, work / "ours_src")

    kl_mlx, flips_mlx = parity(ref_src, mlx_f32)
    kl_ours, flips_ours = parity(ours_src, ours_f32)
    kl_bf16, _ = parity(ref_src, mlx_bf16)
    print(f"{what}: mean KL f32 mlx-lm {kl_mlx:.2e} ours {kl_ours:.2e}, bf16 mlx-lm {kl_bf16:.2e}")
    assert kl_mlx < KL_F32, (what, kl_mlx)
    assert kl_ours < KL_F32, (what, kl_ours)
    assert flips_mlx == 0 and flips_ours == 0, (what, flips_mlx, flips_ours)
    assert kl_bf16 < KL_BF16, (what, kl_bf16)
    # The rotated artifact in stock mlx-lm and in our runtime: the same logits.
    assert_close(ours_f32, mlx_f32, f"{what} folded f32, ours vs mlx-lm")
    # Folding must have changed the weights: not an identity transform.
    assert kl_mlx > 0 or not np.array_equal(mlx_f32[0], ref_src[0])
    return kl_mlx, kl_ours, kl_bf16


# --- tiny synthetic models ---------------------------------------------------------------------

# head_dim 48 has no power-of-two Hadamard: that model folds R2 with a random rotation.
FOLD_ARGS = {"llama_linear_tied_bias": {"r2": "random"}}


def mlx_in_process(model_dir, windows, work):
    return reference(model_dir, windows, None, 0)[0]


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_fold_parity(tmp_path, name):
    cfg = TINY[name]
    src = tmp_path / "src"
    write_tiny(src, cfg, seed=200)
    rng = np.random.default_rng(3)
    windows = [rng.integers(0, cfg["vocab_size"], size=n).tolist() for n in (64, 17)]
    ref = mlx_in_process(src, windows, None)
    check_model(src, windows, tmp_path, name, ref, mlx_in_process, seed=11,
                **FOLD_ARGS.get(name, {}))
    # A rotated and quantized artifact (affine 4-bit g64): stock mlx-lm and our runtime agree.
    q = tmp_path / "rotated_q4"
    extra = ["--r2", "random"] if name in FOLD_ARGS else []
    r = subprocess.run([TQ_BIN, "convert", str(src), "-o", str(q), "--rotate-weights",
                        "--seed", "11", *extra], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert json.loads((q / "config.json").read_text())["quantization"]["bits"] == 4
    assert_close(ours(q, windows, tmp_path / "ours_q4"), mlx_in_process(q, windows, None),
                 f"{name} rotated 4-bit, ours vs mlx-lm")


def test_head_dim_not_power_of_two_is_an_error(tmp_path):
    src = tmp_path / "src"
    write_tiny(src, TINY["llama_linear_tied_bias"], seed=200)
    r = subprocess.run([TQ_BIN, "convert", str(src), "-o", str(tmp_path / "out"),
                        "--rotate-weights"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "head_dim 48" in r.stderr and "--r2 random" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


# --- SmolLM2 (hidden 576 = 36·16: Paley II over GF(17) ⊗ Sylvester) ----------------------------


def test_smollm2_fold_parity(tq_bin, smollm2_gguf, wiki_text, tmp_path):
    from mlx_lm.utils import load_tokenizer

    src = tmp_path / "smollm2"
    r = subprocess.run([tq_bin, "import", str(smollm2_gguf), "-o", str(src), "--dtype", "f32"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if not wiki_text.exists():
        pytest.skip(f"asset missing: {wiki_text}")
    ids = load_tokenizer(src).encode(wiki_text.read_text(encoding="utf-8")[:20000])
    windows = [ids[1000:1128], ids[3000:3128]]

    def run_ref(d, w, work):
        return reference_subprocess(d, w, [], 0, work)[0]

    ref = run_ref(src, windows, tmp_path / "mlx_src")
    check_model(src, windows, tmp_path, "SmolLM2-135M", ref, run_ref)
    rot = json.loads((tmp_path / "folded_f32" / "rotation.json").read_text())
    assert rot["r1"]["K"] == 36 and rot["r1"]["construction"] == "paley2(q=17)", rot["r1"]
