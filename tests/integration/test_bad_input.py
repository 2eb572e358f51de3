"""Broken inputs: each gives one clear error line naming the file and the problem, a non-zero
exit, no crash, and (for import) nothing left behind."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from tinymodels import (GGUF_ARRAY, GGUF_STRING, GGUF_U32, TINY_LLAMA, encode_safetensors,
                        gguf_bytes, safetensors_bytes, tiny_llama_gguf_kvs,
                        tiny_llama_gguf_tensors, tiny_llama_tensors, write_tiny_hf_dir)


def run_tq(tq_bin, *args):
    return subprocess.run([tq_bin, *args], capture_output=True, text=True, timeout=60)


def assert_one_line_error(res, *needles):
    assert res.returncode not in (0,) and res.returncode > 0, (res.returncode, res.stderr)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    low = lines[0].lower()
    for n in needles:
        assert n.lower() in low, f"{n!r} not in {lines[0]!r}"


def test_valid_tiny_models_inspect(tq_bin, tmp_path):
    d = write_tiny_hf_dir(tmp_path / "ok")
    res = run_tq(tq_bin, "inspect", str(d))
    assert res.returncode == 0, res.stderr
    g = tmp_path / "ok.gguf"
    g.write_bytes(gguf_bytes(tiny_llama_gguf_kvs(), tiny_llama_gguf_tensors()))
    res = run_tq(tq_bin, "inspect", str(g))
    assert res.returncode == 0, res.stderr


def _with_shard(tmp_path, blob, name="bad"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    (d / "model.safetensors").write_bytes(blob)
    return d


def _good_st():
    return safetensors_bytes(tiny_llama_tensors())


def _edit_header(edit):
    tensors = tiny_llama_tensors()
    blob, header = safetensors_bytes(tensors)
    n = struct.unpack("<Q", blob[:8])[0]
    data = blob[8 + n:]
    header = json.loads(blob[8:8 + n])
    edit(header)
    return encode_safetensors(header, data)


def _shift_offsets(h, name, delta_begin, delta_end):
    h[name]["data_offsets"][0] += delta_begin
    h[name]["data_offsets"][1] += delta_end


SAFETENSORS_CASES = {
    "truncated": (lambda: _good_st()[0][:-100], ["model.safetensors"]),
    "tiny_file": (lambda: b"\x01\x02", ["model.safetensors"]),
    "header_past_eof": (lambda: struct.pack("<Q", 10**6) + b"{}", ["model.safetensors", "header"]),
    "header_zero": (lambda: struct.pack("<Q", 0), ["model.safetensors", "header"]),
    "header_not_json": (lambda: encode_safetensors(None, b"", raw_header=b"{not json"),
                        ["model.safetensors"]),
    "overlap": (lambda: _edit_header(lambda h: _shift_offsets(
        h, "model.layers.0.mlp.down_proj.weight", -4, -4)), ["model.safetensors"]),
    "gap": (lambda: _edit_header(lambda h: _shift_offsets(
        h, "model.norm.weight", 4, 4)), ["model.safetensors"]),
    "shape_mismatch": (lambda: _edit_header(lambda h: h["model.norm.weight"].update(
        shape=[31])), ["model.safetensors", "model.norm.weight"]),
    "unknown_dtype": (lambda: _edit_header(lambda h: h["model.norm.weight"].update(
        dtype="Q9_X")), ["model.safetensors", "Q9_X"]),
    "metadata_not_string": (lambda: _edit_header(lambda h: h.update(
        __metadata__={"format": 1})), ["model.safetensors", "metadata"]),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_CASES))
def test_bad_safetensors(tq_bin, tmp_path, case):
    make, needles = SAFETENSORS_CASES[case]
    d = _with_shard(tmp_path, make())
    assert_one_line_error(run_tq(tq_bin, "inspect", str(d)), *needles)


CONFIG_CASES = {
    "missing_hidden_size": ({k: v for k, v in TINY_LLAMA.items() if k != "hidden_size"},
                            ["config.json", "hidden_size"]),
    "unsupported_model_type": (dict(TINY_LLAMA, model_type="gpt_neox"),
                               ["config.json", "gpt_neox"]),
    "wrong_type": (dict(TINY_LLAMA, num_hidden_layers="one"),
                   ["config.json", "num_hidden_layers"]),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config(tq_bin, tmp_path, case):
    cfg, needles = CONFIG_CASES[case]
    d = write_tiny_hf_dir(tmp_path / "m")
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_tq(tq_bin, "inspect", str(d)), *needles)


def test_config_not_json(tq_bin, tmp_path):
    d = write_tiny_hf_dir(tmp_path / "m")
    (d / "config.json").write_text("{\"model_type\": ")
    assert_one_line_error(run_tq(tq_bin, "inspect", str(d)), "config.json")


def _gguf(**kw):
    return gguf_bytes(tiny_llama_gguf_kvs(), tiny_llama_gguf_tensors(), **kw)


def _gguf_kv_edit(key, vtype, value):
    kvs = [(k, t, value if k == key else v) for k, t, v in tiny_llama_gguf_kvs()]
    return gguf_bytes(kvs, tiny_llama_gguf_tensors())


GGUF_CASES = {
    "bad_magic": (lambda: _gguf(magic=b"GGUX"), ["magic"]),
    "bad_version": (lambda: _gguf(version=99), ["version"]),
    "tensor_count_huge": (lambda: _gguf(n_tensors=1 << 40), []),
    "kv_count_huge": (lambda: _gguf(n_kv=1 << 40), []),
    "truncated": (lambda: _gguf()[:-64], []),
    "bad_alignment": (lambda: _gguf_kv_edit("general.alignment", GGUF_U32, 3), ["alignment"]),
    "unknown_ggml_type": (lambda: gguf_bytes(tiny_llama_gguf_kvs(), tiny_llama_gguf_tensors(),
                                             type_override={"output_norm.weight": 777}),
                          ["777"]),
    "unsupported_arch": (lambda: _gguf_kv_edit("general.architecture", GGUF_STRING, "mamba"),
                         ["mamba"]),
}


@pytest.mark.parametrize("case", sorted(GGUF_CASES))
def test_bad_gguf(tq_bin, tmp_path, case):
    make, needles = GGUF_CASES[case]
    f = tmp_path / f"{case}.gguf"
    f.write_bytes(make())
    assert_one_line_error(run_tq(tq_bin, "inspect", str(f)), f.name, *needles)
    out = tmp_path / "out"
    assert_one_line_error(run_tq(tq_bin, "import", str(f), "-o", str(out)), f.name)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [f.name], "import left files behind"


def test_missing_model_path(tq_bin, tmp_path):
    assert_one_line_error(run_tq(tq_bin, "inspect", str(tmp_path / "nope")), "nope")


def test_unknown_flag(tq_bin, tmp_path):
    res = run_tq(tq_bin, "inspect", "--no-such-flag", str(tmp_path))
    assert res.returncode != 0


@pytest.mark.parametrize("env,value,needle", [("TQ_READ_AHEAD", "1MB", "TQ_READ_AHEAD"),
                                              ("TQ_READ_AHEAD", "-1", "TQ_READ_AHEAD"),
                                              ("TQ_TILES", "yes", "TQ_TILES"),
                                              ("TQ_AMX", "2", "TQ_AMX")])
def test_runtime_knob_garbage_in_environment(tq_bin, tmp_path, env, value, needle):
    d = write_tiny_hf_dir(tmp_path / "ok")
    res = subprocess.run([tq_bin, "bench", str(d), "--no-db"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, env: value})
    assert res.returncode != 0 and needle in res.stderr and value in res.stderr, res.stderr


def test_runtime_knob_flags_run(tq_bin, tmp_path):
    d = write_tiny_hf_dir(tmp_path / "ok")
    res = run_tq(tq_bin, "bench", str(d), "--no-db", "--prompt-lengths", "20", "--gen", "2",
                 "--repeat", "1", "--tiles", "off", "--amx", "off", "--read-ahead", "0")
    assert res.returncode == 0, res.stderr


ROW = {"arm": "tq", "concurrency": 1, "aggregate_tok_s": 50.0, "ttft_p50_ms": 100.0,
       "ttft_p99_ms": 200.0, "itl_p50_ms": 20.0, "itl_p99_ms": 30.0}


@pytest.mark.parametrize("kind,lines,needles", [
    ("frobs", [json.dumps(ROW)], ["unknown kind 'frobs'", "serve_load"]),
    ("serve_load", [json.dumps(ROW), "{not json"], ["rows.jsonl:2", "not a JSON object"]),
    ("serve_load", [json.dumps({k: v for k, v in ROW.items() if k != "itl_p99_ms"})],
     ["rows.jsonl:1", "itl_p99_ms"]),
    ("serve_load", [json.dumps({**ROW, "concurrency": 0})], ["rows.jsonl:1", "concurrency"]),
    ("serve_load", [json.dumps({**ROW, "ttft_p50_ms": "fast"})], ["rows.jsonl:1", "ttft_p50_ms"]),
    ("serve_load", ["", "  "], ["rows.jsonl", "no rows"]),
])
def test_record_bad_rows_write_nothing(tq_bin, tmp_path, kind, lines, needles):
    d = write_tiny_hf_dir(tmp_path / "ok")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(lines) + "\n")
    db = tmp_path / "r.sqlite"
    assert_one_line_error(run_tq(tq_bin, "record", kind, str(d), "--results", str(rows),
                                 "--db", str(db)), *needles)
    assert not db.exists()


def test_record_missing_model_and_serve_bad_header_timeout(tq_bin, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n")
    assert_one_line_error(run_tq(tq_bin, "record", "serve_load", str(tmp_path / "nope"),
                                 "--results", str(rows), "--db", str(tmp_path / "r.sqlite")),
                          "nope")
    assert_one_line_error(run_tq(tq_bin, "serve", str(tmp_path / "nope"), "--header-timeout",
                                 "0"), "--header-timeout must be > 0")
