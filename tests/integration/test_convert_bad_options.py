"""Bad `tq convert` options: one clear error line before any work, a non-zero exit, and no
output directory (nor staging directory) left behind."""
import json
import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

from tinymodels import TINY_LLAMA, safetensors_bytes, tiny_llama_tensors, write_tiny_hf_dir

CFG = dict(TINY_LLAMA, hidden_size=128, intermediate_size=256, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=96)


def run_tq(tq_bin, *args):
    t0 = time.monotonic()
    r = subprocess.run([tq_bin, *map(str, args)], capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - t0


def assert_one_line_error(res, *needles):
    assert res.returncode > 0, (res.returncode, res.stderr)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("tq convert: error: "), lines[0]
    for n in needles:
        assert n.lower() in lines[0].lower(), f"{n!r} not in {lines[0]!r}"
    assert res.stdout == ""


@pytest.fixture
def src(tmp_path):
    return write_tiny_hf_dir(tmp_path / "src", cfg=CFG)


@pytest.mark.parametrize("args,needles", [
    (["--bits", "7"], ["--bits 7", "does not support 7 bits"]),
    (["--group-size", "48"], ["--group-size 48", "group size 48", "32, 64, 128"]),
    (["--mode", "nvfp4", "--group-size", "32"], ["--mode nvfp4 --group-size 32",
                                                  "requires group size 16"]),
    (["--mode", "int4"], ["--mode int4", "affine, mxfp4, nvfp4 or mxfp8"]),
    (["--keep-float", "model.layers.9.*"], ["--keep-float 'model.layers.9.*'",
                                            "matches no quantizable module"]),
    (["--recipe", "mixed_3_6", "--bits", "3"], ["mixed_3_6", "drop --bits 3"]),
    (["--max-shard-size", "5XB"], ["--max-shard-size '5XB'"]),
    (["--max-shard-size", "0"], ["--max-shard-size '0'", "positive"]),
    (["--target-size", "1e9"], ["--target-size '1e9'", "expected a size"]),
], ids=["bits7", "group48", "nvfp4-g32", "mode", "keep-float", "preset-bits", "shard-size",
        "shard-size-zero", "target-size"])
def test_bad_flags(tq_bin, src, tmp_path, args, needles):
    out = tmp_path / "out"
    r, _ = run_tq(tq_bin, "convert", src, "-o", out, *args)
    assert_one_line_error(r, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_recipe_rule_matching_nothing(tq_bin, src, tmp_path):
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"rules": [
        {"match": "model.embed_tokens", "bits": 8},
        {"match": "model.layers.*.self_attn.qkv_proj", "bits": 6}]}))
    r, _ = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--recipe", recipe)
    assert_one_line_error(r, f"{recipe} rule 2", "matches no quantizable module",
                          "self_attn.qkv_proj")
    recipe.write_text(json.dumps({"rules": [{"match": "lm_head", "bitz": 8}]}))
    r, _ = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--recipe", recipe)
    assert_one_line_error(r, f"{recipe} rule 1", "unknown key 'bitz'")
    r, _ = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--recipe", tmp_path / "no.json")
    assert_one_line_error(r, "no.json", "cannot open")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "src"]


def test_costly_recipe_regex_is_refused_in_under_a_second(tq_bin, src, tmp_path):
    # Issue 31: this one-line recipe used to backtrack for minutes.
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"rules": [{"match": "re:(.*.*)*X", "bits": 8}]}))
    r, secs = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--recipe", recipe,
                     "--dry-run")
    assert_one_line_error(r, f"{recipe} rule 1: pattern too costly to match: 're:(.*.*)*X'",
                          "PCRE2 match limit exceeded")
    assert secs < 1, secs
    r, secs = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--keep-float",
                     "re:(a+)+b")
    assert_one_line_error(r, "--keep-float 're:(a+)+b': pattern too costly to match")
    assert secs < 1, secs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "src"]


def test_smollm2_group_128_names_the_module_and_how_to_choose(tq_bin, smollm2_gguf, tmp_path):
    for extra in ([], ["--dry-run"]):
        r, secs = run_tq(tq_bin, "convert", smollm2_gguf, "-o", tmp_path / "out",
                         "--group-size", "128", *extra)
        assert_one_line_error(r, "model.embed_tokens: input width 576 is not a multiple of the "
                              "group size 128", "--keep-float 'model.embed_tokens'",
                              '"group_size": 64', "180 more modules")
        assert secs < 10, secs  # no tensor data was read
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(tq_bin, src, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    r, _ = run_tq(tq_bin, "convert", src, "-o", out)
    assert_one_line_error(r, str(out), "--force")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("cfg,args,needles", [
    ({}, ["--no-quantize"], ["--channel-scale", "drop --no-quantize"]),
    ({}, ["--rotate-weights", "--save-rotations"], ["--save-rotations", "--channel-scale"]),
    ({"mlp_bias": True}, [], ["channel scaling", "mlp_bias"]),
], ids=["no-quantize", "save-rotations", "mlp-bias"])
def test_channel_scale_refusals(tq_bin, tmp_path, cfg, args, needles):
    src = write_tiny_hf_dir(tmp_path / "src", cfg=dict(CFG, **cfg))
    if cfg.get("mlp_bias"):  # the bias tensors the config promises
        tensors = tiny_llama_tensors(dict(CFG, **cfg), 0)
        for l in range(CFG["num_hidden_layers"]):
            for n, rows in (("gate", CFG["intermediate_size"]), ("up", CFG["intermediate_size"]),
                            ("down", CFG["hidden_size"])):
                tensors[f"model.layers.{l}.mlp.{n}_proj.bias"] = np.zeros(rows, np.float32)
        (src / "model.safetensors").write_bytes(safetensors_bytes(tensors, {"format": "pt"})[0])
    res, _ = run_tq(tq_bin, "convert", src, "-o", tmp_path / "out", "--channel-scale", "on",
                    *args)
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "out").exists()
