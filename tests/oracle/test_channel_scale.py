"""`tq convert --channel-scale` on SmolLM2 (imported from the GGUF as f32), through stock
mlx-lm: the scaled float model it prepares computes the source's function (plain and with the
rotation folded first), the quantized artifact loads and is closer to the source than plain RTN
at the same bytes, the metadata names the user's source and the scales, and a rerun reuses
the prepared model."""

import json
import pathlib
import subprocess

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from mlx_forward_ref import reference_subprocess  # noqa: E402
from test_rotation_parity import parity  # noqa: E402

# 8 calibration rows: enough to find the outlier channels, quick on 2 cores.
CALIB = ["--calib-tokens", "4096", "--calib-seq-len", "512", "--no-timings"]


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stderr


@pytest.fixture(scope="module")
def smollm2(tq_bin, smollm2_gguf, wiki_text, tmp_path_factory):
    from mlx_lm.utils import load_tokenizer

    work = tmp_path_factory.mktemp("cs")
    src = work / "smollm2"
    run([tq_bin, "import", smollm2_gguf, "-o", src, "--dtype", "f32"])
    if not wiki_text.exists():
        pytest.fail(f"asset missing: {wiki_text}")
    ids = load_tokenizer(src).encode(wiki_text.read_text(encoding="utf-8")[:60000])
    windows = [ids[s:s + 256] for s in (1000, 4000, 7000, 10000)]
    ref = reference_subprocess(src, windows, [], 0, work / "mlx_src")[0]
    return src, windows, ref, work


def test_channel_scale_rtn(tq_bin, smollm2):
    src, windows, ref, work = smollm2
    plain, scaled = work / "rtn4", work / "cs4"
    run([tq_bin, "convert", src, "-o", plain, "--bits", "4", "--no-timings"])
    err = run([tq_bin, "convert", src, "-o", scaled, "--bits", "4", "--channel-scale", "on",
               *CALIB])
    assert "channel scaling: alpha searched at affine 4-bit g64 on 8 rows x 512 tokens" in err, err
    assert "channel scaling: layer 30/30" in err, err
    meta = json.loads((scaled / "tq_metadata.json").read_text())
    assert meta["source"]["path"] == str(src)
    assert meta["options"]["channel_scale"] == "on"
    cs = [t for t in meta["transforms"] if t.get("transform") == "channel_scale"]
    assert len(cs) == 1 and cs[0]["spec"] == "affine 4-bit g64" and cs[0]["rows"] == 8
    for point in ("attn", "mlp", "down"):
        p = cs[0]["points"][point]
        assert len(p["alpha"]) == 30 and p["mean_alpha"] > 0 and p["mean_error_ratio"] < 1

    # The prepared f32 model is the source's function; the weights did change.
    prepared = pathlib.Path(meta["scaled_source"])
    kl_f32, flips = parity(ref, reference_subprocess(prepared, windows, [], 0, work / "mlx_p")[0])
    print(f"scaled f32 vs source: mean KL {kl_f32:.2e}, flips {flips}")
    assert kl_f32 < 1e-6 and flips == 0

    # Same bytes as plain RTN, closer to the source (plain 4-bit g64 sits near 0.4 here).
    assert sum(f.stat().st_size for f in plain.glob("*.safetensors")) == \
        sum(f.stat().st_size for f in scaled.glob("*.safetensors"))
    # One window: mlx's CPU backend runs quantized matmuls at ~10 tokens/s.
    one = windows[:1]
    kl_plain, _ = parity(ref[:1], reference_subprocess(plain, one, [], 0, work / "mlx_plain")[0])
    kl_cs, _ = parity(ref[:1], reference_subprocess(scaled, one, [], 0, work / "mlx_cs")[0])
    print(f"4-bit g64 mean KL: plain {kl_plain:.4f}, channel-scaled {kl_cs:.4f}")
    assert kl_cs < 0.85 * kl_plain, (kl_cs, kl_plain)

    # A rerun reuses the prepared model and writes the same bytes.
    again = work / "cs4b"
    err = run([tq_bin, "convert", src, "-o", again, "--bits", "4", "--channel-scale", "on",
               *CALIB])
    assert "channel scaling: reusing" in err, err
    for f in scaled.glob("*.safetensors"):
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name


def test_channel_scale_after_rotation_keeps_the_function(tq_bin, smollm2):
    src, windows, ref, work = smollm2
    out = work / "rot_cs"
    run([tq_bin, "convert", src, "-o", out, "--bits", "4", "--rotate-weights", "--r1", "none",
         "--channel-scale", "on", *CALIB])
    assert json.loads((out / "config.json").read_text())["quantization"]["bits"] == 4
    meta = json.loads((out / "tq_metadata.json").read_text())
    kinds = [t.get("transform") for t in meta["transforms"]]
    assert kinds == ["rotation_fold", "channel_scale"], meta["transforms"]
    prepared = pathlib.Path(meta["scaled_source"])
    assert "-rot-none-hadamard-0-" in prepared.name
    kl, flips = parity(ref, reference_subprocess(prepared, windows, [], 0, work / "mlx_rp")[0])
    print(f"rotated + scaled f32 vs source: mean KL {kl:.2e}")
    assert kl < 1e-6 and flips == 0
