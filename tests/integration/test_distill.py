"""`tq distill` end to end on a synthetic checkpoint (random llama, Llama-2 tokenizer, SOTU
calibration): the held-out KL falls, only scales and biases change, the copy loads in stock
mlx-lm and is closer to the source on a text it never saw; bad input gets one line and leaves
nothing behind."""
import json
import re
import shutil
import subprocess

import pytest

from tinymodels import TINY_LLAMA, raw_tensors, tiny_llama_with_sotu, write_tiny_hf_dir

CFG = dict(TINY_LLAMA, hidden_size=128, num_hidden_layers=3, intermediate_size=256,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=32000)


@pytest.fixture()
def model(tmp_path, tq_cache, tq_bin):
    src, sotu = tiny_llama_with_sotu(tmp_path / "src", tq_cache, CFG)
    q = tmp_path / "q2"
    r = subprocess.run([tq_bin, "convert", str(src), "-o", str(q), "--bits", "2",
                        "--group-size", "32", "--no-timings"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return src, q, sotu


def distill(tq_bin, src, q, out, calib, *extra):
    cmd = [tq_bin, "distill", str(src), str(q), "-o", str(out), "--calib", str(calib),
           "--calib-tokens", "3072", "--calib-seq-len", "128", "--steps", "12",
           "--rows-per-step", "2", "--holdout", "4", "--lr", "0.01", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def mean_kl(tq_bin, base, cand, text):
    r = subprocess.run([tq_bin, "kl", str(base), str(cand), "--text", str(text), "--windows", "4",
                        "--seq-len", "128", "--json", "--no-db"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["mean_kl"]


def test_distill_lowers_the_kl_and_changes_only_scales_and_biases(tq_bin, model, tmp_path):
    src, q, sotu = model
    out = tmp_path / "d"
    r = distill(tq_bin, src, q, out, sotu[0])
    assert r.returncode == 0, r.stderr
    assert "step 12/12" in r.stderr
    m = re.search(r"held-out KL\(source\|\|quantized\): ([\d.]+) -> ([\d.]+)", r.stdout)
    assert m, r.stdout
    before, after = float(m.group(1)), float(m.group(2))
    assert after < 0.95 * before, r.stdout
    # Same files, same tensors, dtypes and shapes; codes and floats byte-identical.
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in q.iterdir())
    assert (out / "config.json").read_bytes() == (q / "config.json").read_bytes()
    a, b = raw_tensors(out / "model.safetensors"), raw_tensors(q / "model.safetensors")
    assert a.keys() == b.keys()
    changed = set()
    for k in a:
        assert a[k][:2] == b[k][:2], k
        if a[k][2] != b[k][2]:
            changed.add(k)
    assert changed and all(k.endswith((".scales", ".biases")) for k in changed), changed
    scales = {k for k in b if k.endswith(".scales")}
    assert len(scales) >= 3 * 7 and {k for k in changed if k.endswith(".scales")} == scales
    meta = json.loads((out / "tq_metadata.json").read_text())
    rec = meta["distill"]
    assert rec["steps"] == 12 and rec["holdout_kl_after"] < rec["holdout_kl_before"]
    assert rec["calib"]["sha256"]
    # Closer to the source on a text neither calibration nor hold-out drew from.
    assert mean_kl(tq_bin, src, out, sotu[-1]) < mean_kl(tq_bin, src, q, sotu[-1])
    pytest.importorskip("mlx_lm")
    from mlx_lm.utils import compute_bits_per_weight, load

    loaded, _ = load(str(out))
    assert compute_bits_per_weight(loaded) == pytest.approx(meta["size"]["bpw"], rel=1e-12)


def test_distill_train_norms_moves_the_norm_weights_too(tq_bin, model, tmp_path):
    """--train-norms on: every RMSNorm weight (stored bf16) is trained beside the scales and
    biases; nothing else changes, and the held-out KL falls."""
    src, q, sotu = model
    out = tmp_path / "dn"
    r = distill(tq_bin, src, q, out, sotu[0], "--train-norms", "on")
    assert r.returncode == 0, r.stderr
    assert "and 7 norm weights" in r.stdout, r.stdout  # 2 per layer and the final one
    rec = json.loads((out / "tq_metadata.json").read_text())["distill"]
    assert rec["train_norms"] is True and rec["norms"] == 7
    assert rec["holdout_kl_after"] < 0.95 * rec["holdout_kl_before"]
    a, b = raw_tensors(out / "model.safetensors"), raw_tensors(q / "model.safetensors")
    changed = {k for k in a if a[k][2] != b[k][2]}
    norms = {k for k in b if k.endswith("norm.weight")}
    assert len(norms) == 7 and changed & norms, changed
    assert all(k.endswith((".scales", ".biases")) or k in norms for k in changed), changed
    assert all(a[k][:2] == b[k][:2] for k in a)


def test_distill_bad_input(tq_bin, model, tmp_path):
    src, q, sotu = model
    out = tmp_path / "out"

    def fails(args, needle):
        r = subprocess.run([tq_bin, "distill", *map(str, args)], capture_output=True, text=True)
        assert r.returncode != 0, r.stdout
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert any(needle in x for x in lines), r.stderr
        assert not out.exists()
        return r

    calib = ["--calib", sotu[0], "--calib-tokens", "1024", "--calib-seq-len", "128"]
    # The student is not an MLX quantized directory (the float source itself).
    fails([src, src, "-o", out, *calib], "MLX quantized directory")
    # A student of another geometry.
    other = write_tiny_hf_dir(tmp_path / "other", cfg=dict(CFG, num_hidden_layers=2))
    shutil.copy(src / "tokenizer.json", other / "tokenizer.json")
    fails([other, q, "-o", out, *calib], "geometry differs")
    # Not enough calibration rows for the hold-out and one step.
    fails([src, q, "-o", out, *calib, "--holdout", "8"], "calibration set has")
    fails([src, q, "-o", out, *calib, "--lr", "0"], "learning rate")
    fails([src, q, "-o", out, *calib, "--temperature", "-1"], "temperature")
    fails([src, q, "-o", out, *calib, "--train-norms", "yes"], "--train-norms")
    # The quantized model itself as the output, and an existing output without --force.
    r = subprocess.run([tq_bin, "distill", str(src), str(q), "-o", str(q), "--force", *map(str, calib)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "must be a new directory" in r.stderr, r.stderr
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = subprocess.run([tq_bin, "distill", str(src), str(q), "-o", str(out), *map(str, calib)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--force" in r.stderr, r.stderr
    assert (out / "keep.txt").read_text() == "mine"


def test_convert_distill_publishes_the_distilled_artifact_only(tq_bin, model, tmp_path):
    """tq convert --distill N: the conversion, then distillation into DST; the intermediate
    directory is gone, DST's scales differ from the plain conversion's, its codes do not."""
    src, q, sotu = model
    out = tmp_path / "cd"
    calib = ["--calib", str(sotu[0]), "--calib-tokens", "2048", "--calib-seq-len", "128"]
    r = subprocess.run([tq_bin, "convert", str(src), "-o", str(out), "--bits", "2", "--group-size",
                        "32", "--no-timings", "--distill", "12", "--distill-seq-len", "128",
                        *calib], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "distill step 12/12" in r.stderr and "held-out KL" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cd", "q2", "src"]
    meta = json.loads((out / "tq_metadata.json").read_text())
    assert meta["distill"]["steps"] == 12 and "seconds" not in meta["distill"]
    assert meta["options"]["distill"] == 12 and meta["options"]["distill_seq_len"] == 128
    assert meta["distill"]["calib"]["seq_len"] == 128
    a, b = raw_tensors(out / "model.safetensors"), raw_tensors(q / "model.safetensors")
    assert a.keys() == b.keys()
    # Scales move by fractions of a percent: most tensors have some group across a bf16 step.
    scales = [k for k in a if k.endswith(".scales")]
    assert sum(a[k][2] != b[k][2] for k in scales) >= 0.8 * len(scales)
    assert all(a[k][2] == b[k][2] for k in a if not k.endswith((".scales", ".biases")))
    bad = subprocess.run([tq_bin, "convert", str(src), "-o", str(tmp_path / "bad"),
                          "--no-quantize", "--distill", "2"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--distill trains quantized" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad").exists()
    bad = subprocess.run([tq_bin, "convert", str(src), "-o", str(tmp_path / "bad"), "--bits", "2",
                          "--distill", "2", "--distill-seq-len", "1"], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "--distill-seq-len 1" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad").exists()
