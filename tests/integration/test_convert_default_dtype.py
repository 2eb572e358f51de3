"""The output dtype of `tq convert` (issue 20): a quantized output defaults to bf16 scales, biases
and float tensors (f16 for an f16 source) whatever the source's float dtype; `--dtype` wins; a
float-only output keeps the source's dtype; the automatic sensitivity table follows the output
dtype; --dry-run and tq_metadata.json say which dtype and why."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tinymodels  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))

# Input widths 64 and 128: every module takes the default group of 64; vocab above the
# tokenizer's 300.
CFG = dict(tinymodels.TINY_LLAMA, hidden_size=64, intermediate_size=128, vocab_size=384)


def tq(*args, env=None):
    r = subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r


def write_source(path, dtype):
    cfg = dict(CFG, torch_dtype={"f32": "float32", "f16": "float16"}[dtype])
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors = tinymodels.tiny_llama_tensors(cfg, seed=5)
    if dtype == "f16":
        tensors = {k: v.astype(np.float16) for k, v in tensors.items()}
    blob, _ = tinymodels.safetensors_bytes(tensors, {"format": "pt"})
    (path / "model.safetensors").write_bytes(blob)
    tinymodels.write_tiny_tokenizer(path)
    return path


def header_dtypes(model_dir):
    """Tensor name -> dtype from the safetensors header of every shard."""
    out = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        out.update({k: v["dtype"] for k, v in header.items() if k != "__metadata__"})
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("dtype")
    return {d: write_source(root / d, d) for d in ("f32", "f16")}


@pytest.mark.parametrize("src_dtype,want", [("f32", "BF16"), ("f16", "F16")])
def test_default_flags_write_16_bit_scales(sources, tmp_path, src_dtype, want):
    src, out = sources[src_dtype], tmp_path / "out"
    tq("convert", src, "-o", out, "--no-db")
    dtypes = header_dtypes(out)
    scales = {k: v for k, v in dtypes.items() if k.endswith((".scales", ".biases"))}
    assert scales and set(scales.values()) == {want}, scales
    assert dtypes["model.norm.weight"] == want
    meta = json.loads((out / "tq_metadata.json").read_text())
    assert meta["dtype"] == want and meta["dtype_reason"] == "default for quantized output"
    dry = tq("convert", src, "--dry-run").stdout
    assert f"as {want} (default for quantized output)" in dry, dry
    j = json.loads(tq("convert", src, "--dry-run", "--json").stdout)
    assert j["dtype"] == want and j["dtype_reason"] == "default for quantized output"


def test_explicit_dtype_wins_and_float_output_keeps_the_source_dtype(sources, tmp_path):
    src = sources["f32"]
    tq("convert", src, "-o", tmp_path / "f32", "--dtype", "f32", "--no-db")
    scales = {k: v for k, v in header_dtypes(tmp_path / "f32").items() if k.endswith(".scales")}
    assert scales and set(scales.values()) == {"F32"}, scales
    meta = json.loads((tmp_path / "f32" / "tq_metadata.json").read_text())
    assert meta["dtype"] == "F32" and meta["dtype_reason"] == "given by --dtype"

    tq("convert", src, "-o", tmp_path / "float", "--no-quantize", "--no-db")
    dtypes = header_dtypes(tmp_path / "float")
    assert set(dtypes.values()) == {"F32"} and not any(k.endswith(".scales") for k in dtypes)
    meta = json.loads((tmp_path / "float" / "tq_metadata.json").read_text())
    assert meta["dtype_reason"] == "the source's float dtype"


def test_automatic_sensitivity_table_follows_the_output_dtype(sources, tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "xdg"))
    r = tq("convert", sources["f32"], "--target-bpw", "4.5", "--dry-run", "--json", env=env)
    tables = list((tmp_path / "xdg" / "turboquant" / "sensitivity").glob("*.json"))
    assert len(tables) == 1 and tables[0].name.endswith("-BF16-s4.json"), tables
    assert json.loads(tables[0].read_text())["dtype"] == "BF16"
    plan = json.loads(r.stdout)
    assert plan["dtype"] == "BF16"
    a = plan["allocation"]
    assert a["sensitivity"]["path"] == str(tables[0])
    # The guard: the allocation is never predicted worse than the best uniform plan that fits.
    assert a["uniform"]["predicted_better"] is False
    if a["uniform"]["spec"] is not None:
        assert a["uniform"]["bytes"] <= a["bytes"]
        assert a["uniform"]["predicted_kl"] >= a["predicted_kl"] * (1 - 1e-9)
