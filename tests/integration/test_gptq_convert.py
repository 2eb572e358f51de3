"""`tq convert --gptq` end to end on a synthetic checkpoint (random llama, Llama-2 tokenizer):
metadata and guards, GPTQ's proxy loss never above RTN's, and a run killed with SIGKILL after
some layers and resumed with --resume gives the same bytes as an uninterrupted run."""
import json
import shutil
import signal
import subprocess
import time

import pytest

from tinymodels import TINY_LLAMA, raw_tensors, tiny_llama_with_sotu

CFG = dict(TINY_LLAMA, hidden_size=128, num_hidden_layers=6, intermediate_size=384,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=32000)


@pytest.fixture()
def model(tmp_path, tq_cache):
    src, sotu = tiny_llama_with_sotu(tmp_path / "src", tq_cache, CFG)
    return src, sotu[:4]


def convert(tq_bin, src, dst, calib, *extra, wait=True):
    cmd = [tq_bin, "convert", str(src), "-o", str(dst), "--bits", "3", "--group-size", "32",
           "--gptq", *[a for c in calib for a in ("--calib", str(c))], "--calib-tokens", "4096",
           "--calib-seq-len", "128", "--no-timings", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not wait:
        return p
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    return err


def files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_gptq_convert_metadata_and_resume(tq_bin, model, tmp_path):
    src, calib = model
    ref = tmp_path / "ref"
    err = convert(tq_bin, src, ref, calib, "--eval-text", str(calib[2]))
    assert "gptq layer 6/6 · model.layers.5.mlp.down_proj" in err, err
    assert "gptq guards: 42 modules" in err, err
    assert "also occur in the calibration rows" in err, err  # calibrating on the eval text
    meta = json.loads((ref / "tq_metadata.json").read_text())
    q = meta["quantizer"]
    assert q["method"] == "gptq"
    assert q["calibration"]["rows"] == 32 and len(q["calibration"]["sha256"]) == 64
    assert q["guards"]["modules"] == 42
    infos = [v for k, v in meta["module_info"].items() if k.startswith("model.layers.")]
    assert len(infos) == 42
    assert all(i["proxy_loss"] <= i["rtn_loss"] for i in infos)
    assert sum(i["method"] == "gptq" for i in infos) >= 30
    assert not (tmp_path / "ref.gptq-checkpoint").exists()

    # SIGKILL once the checkpoint holds some but not all layers, then resume.
    out, ck = tmp_path / "out", tmp_path / "ck"
    killed_at = None
    for attempt in range(5):
        shutil.rmtree(ck, ignore_errors=True)
        p = convert(tq_bin, src, out, calib, "--gptq-checkpoint", str(ck), wait=False)
        while p.poll() is None:
            state = ck / "state.json"
            if state.exists():
                try:
                    n = json.loads(state.read_text())["next_layer"]
                except (json.JSONDecodeError, KeyError):
                    continue
                if 1 <= n < 6:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    killed_at = n
                    break
            time.sleep(0.002)
        if killed_at:
            break
        p.wait()
        shutil.rmtree(out, ignore_errors=True)
    assert killed_at, "the conversion always finished before it could be killed"
    assert not out.exists()
    err = convert(tq_bin, src, out, calib, "--gptq-checkpoint", str(ck), "--resume")
    assert f"gptq layer {killed_at}/6" not in err  # finished layers are not recomputed
    assert files(out) == files(ref)
    assert not ck.exists()

    # A checkpoint of other options is refused under --resume.
    p = convert(tq_bin, src, out, calib, "--gptq-checkpoint", str(ck), wait=False)
    while p.poll() is None and not (ck / "state.json").exists():
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    if (ck / "state.json").exists():
        r = subprocess.run([tq_bin, "convert", str(src), "-o", str(tmp_path / "o2"), "--bits", "4",
                            "--gptq", "--calib", str(calib[0]), "--calib-tokens", "4096",
                            "--calib-seq-len", "128", "--gptq-checkpoint", str(ck), "--resume"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode != 0 and "another source, options or calibration" in r.stderr, r.stderr


def test_searched_grids_and_refit_lower_the_loss_and_load_in_mlx_lm(tq_bin, model, tmp_path):
    """--grid search --grid-refit on: every module's refit keeps or lowers its sweep's loss, most
    refit some rows, and stock mlx-lm loads the artifact with the bpw tq predicts."""
    src, calib = model
    out = tmp_path / "refit"
    convert(tq_bin, src, out, calib, "--grid", "search", "--grid-refit", "on", "--json")
    meta = json.loads((out / "tq_metadata.json").read_text())
    assert meta["quantizer"]["options"]["grid"] == "search"
    assert meta["quantizer"]["options"]["refit"] is True
    infos = [v for k, v in meta["module_info"].items() if k.startswith("model.layers.")]
    assert len(infos) == 42
    assert all(i["proxy_loss"] <= i["sweep_loss"] <= i["rtn_loss"] for i in infos)
    assert sum(i["refit_rows"] > 0 for i in infos) >= 30
    mlx_lm = pytest.importorskip("mlx_lm")
    from mlx_lm.utils import compute_bits_per_weight, load

    loaded, _ = load(str(out))
    assert compute_bits_per_weight(loaded) == pytest.approx(meta["size"]["bpw"], rel=1e-12)
    del mlx_lm


def test_asym_calibration_follows_the_float_model(tq_bin, model, tmp_path):
    """--gptq-asym on: recorded, other codes than plain GPTQ's (already in layer 0: the float
    stream starts from the float embedding), loads in stock mlx-lm; refused without --gptq."""
    src, calib = model
    plain, asym = tmp_path / "plain", tmp_path / "asym"
    convert(tq_bin, src, plain, calib)
    convert(tq_bin, src, asym, calib, "--gptq-asym", "on")
    meta = json.loads((asym / "tq_metadata.json").read_text())
    assert meta["quantizer"]["options"]["asym"] is True
    a, p = raw_tensors(asym / "model.safetensors"), raw_tensors(plain / "model.safetensors")
    assert a["model.layers.0.self_attn.q_proj.weight"] != p["model.layers.0.self_attn.q_proj.weight"]
    assert a["model.layers.3.mlp.down_proj.weight"] != p["model.layers.3.mlp.down_proj.weight"]
    bad = subprocess.run([tq_bin, "convert", str(src), "-o", str(tmp_path / "bad"), "--bits", "4",
                          "--gptq-asym", "on"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--gptq-asym is a GPTQ option" in bad.stderr
    assert not (tmp_path / "bad").exists()
    pytest.importorskip("mlx_lm")
    from mlx_lm.utils import load

    load(str(asym))


def test_preset_best_composes_allocation_rotation_and_gptq(tq_bin, model, tmp_path):
    """--preset best --target-bpw: allocation from a rotated sensitivity table (corrected by
    GPTQ's measured recovery), rotation and GPTQ with searched, refitted grids, then distilled
    scales, in one convert; on a tied source R1 is off; the same bytes as the explicit flags."""
    src, calib = model
    table = tmp_path / "sens.json"  # small (2 widths, 1 window) to keep the test short
    r = subprocess.run([tq_bin, "sensitivity", str(src), "--rotate-weights", "--r1", "none",
                        "--bits", "2,4", "--windows", "1", "--seq-len", "64", "--threads", "1",
                        "-o", str(table)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    outs = {}
    for name, flags in [("preset", ["--preset", "best"]),
                        ("explicit", ["--rotate-weights", "--r1", "none", "--gptq", "--grid",
                                      "search", "--grid-refit", "on", "--gptq-tied-head",
                                      "0.1", "--distill", "160", "--distill-seq-len", "256"])]:
        out = tmp_path / name
        cmd = [tq_bin, "convert", str(src), "-o", str(out), "--target-bpw", "3.6", "--sensitivity",
               str(table), *flags, *[a for c in calib for a in ("--calib", str(c))],
               "--calib-tokens", "2048", "--calib-seq-len", "128", "--no-timings", "--no-db"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert ("ties its head, so R1 (which unties it) is off" in r.stderr) == (name == "preset")
        outs[name] = out
    meta = json.loads((outs["preset"] / "tq_metadata.json").read_text())
    assert meta["options"]["preset"] == "best"
    assert meta["distill"]["steps"] == 160 and meta["distill"]["calib"]["seq_len"] == 256
    assert meta["distill"]["holdout_kl_after"] < meta["distill"]["holdout_kl_before"]
    assert meta["transforms"] and meta["quantizer"]["method"] == "gptq"
    assert meta["quantizer"]["options"]["grid"] == "search"
    alloc = meta["allocation"]
    # (The tied embedding holds most weights here: with 2 or 4 bits it decides the bpw.)
    assert 2.5 < alloc["achieved_bpw"] <= 3.6 and meta["size"]["bpw"] == alloc["achieved_bpw"]
    assert len(alloc["spec_counts"]) > 1  # mixed widths
    # The tied head stays tied (R2 alone), and the allocation was corrected by what GPTQ
    # recovers in every role (test_mpi.py covers an untied head's GPTQ and factor).
    assert meta["transforms"][0]["r1"]["kind"] == "none"
    assert "lm_head" not in meta["modules"]
    assert json.loads((outs["preset"] / "config.json").read_text())["tie_word_embeddings"]
    factors = alloc["gptq_recovery"]["factor"]
    assert {"attn_q", "attn_o", "mlp_down"} <= set(factors) and "lm_head" not in factors
    # The tied embedding is written by the head's GPTQ, its recovery measured as the head's.
    assert meta["module_info"]["model.embed_tokens"]["method"] == "gptq"
    assert "embed" in factors
    assert all(0 < f < 1 for by_spec in factors.values() for f in by_spec.values()), factors
    strip = lambda d: {k: v for k, v in files(d).items() if k != "tq_metadata.json"}  # noqa: E731
    assert strip(outs["preset"]) == strip(outs["explicit"])


def test_tied_head_by_gptq(tq_bin, model, tmp_path):
    """--gptq-tied-head R: a tied embedding is written by GPTQ on the head's input (its Hessian's
    diagonal raised by R·mean) and stays tied; layer 0 still reads the RTN embedding, so every
    other tensor equals the run without it; stock mlx-lm loads it with the predicted bpw."""
    src, calib = model
    plain, tied = tmp_path / "plain", tmp_path / "tied"
    convert(tq_bin, src, plain, calib)
    convert(tq_bin, src, tied, calib, "--gptq-tied-head", "0.1")
    meta = json.loads((tied / "tq_metadata.json").read_text())
    emb = meta["module_info"]["model.embed_tokens"]
    assert emb["method"] == "gptq" and emb["tied_ridge"] == 0.1, emb
    assert emb["proxy_loss"] < emb["rtn_loss"], emb
    assert json.loads((plain / "tq_metadata.json").read_text())["module_info"][
        "model.embed_tokens"]["method"] == "rtn"
    assert json.loads((tied / "config.json").read_text())["tie_word_embeddings"]
    a, b = raw_tensors(plain / "model.safetensors"), raw_tensors(tied / "model.safetensors")
    assert a.keys() == b.keys() and not any(k.startswith("lm_head") for k in b)
    differ = {k for k in a if a[k] != b[k]}
    assert differ and differ <= {f"model.embed_tokens.{t}" for t in ("weight", "scales", "biases")}
    r = subprocess.run([tq_bin, "convert", str(src), "-o", str(tmp_path / "bad"), "--bits", "4",
                        "--gptq", "--gptq-tied-head", "-1"], capture_output=True, text=True)
    assert r.returncode != 0 and "--gptq-tied-head" in r.stderr, r.stderr
    mlx_lm = pytest.importorskip("mlx_lm")
    from mlx_lm.utils import compute_bits_per_weight, load

    loaded, _ = load(str(tied))
    assert compute_bits_per_weight(loaded) == pytest.approx(meta["size"]["bpw"], rel=1e-12)
    del mlx_lm


def test_channel_scale_with_gptq_and_the_preset(tq_bin, model, tmp_path):
    """--preset best leaves channel scaling off (under GPTQ it measured within ±5%, either
    sign, by width); --channel-scale on composes with it: rotation folded, then the scales,
    then GPTQ on the scaled model, the user's source recorded."""
    src, calib = model
    common = ["--preset", "best", "--bits", "3", "--group-size", "32",
              *[a for c in calib for a in ("--calib", str(c))], "--calib-tokens", "4096",
              "--calib-seq-len", "128", "--no-timings"]

    def run(dst, *extra):
        r = subprocess.run([tq_bin, "convert", str(src), "-o", str(dst), *common, *extra],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stderr, json.loads((dst / "tq_metadata.json").read_text())

    err, meta = run(tmp_path / "plain")
    assert "channel scaling" not in err, err
    assert [t.get("transform") for t in meta["transforms"]] == ["rotation_fold"]
    err, meta = run(tmp_path / "scaled", "--channel-scale", "on")
    assert "channel scaling: alpha searched at affine 3-bit g32 on 32 rows x 128 tokens" in err
    assert meta["options"]["channel_scale"] == "on"
    assert meta["source"]["path"] == str(src)
    assert [t.get("transform") for t in meta["transforms"]] == ["rotation_fold", "channel_scale"]
    assert meta["quantizer"]["method"] == "gptq"
    assert meta["quantizer"]["guards"]["modules"] == 43  # 42 in the layers + the tied head
