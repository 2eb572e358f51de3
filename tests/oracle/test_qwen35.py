"""Oracle: the qwen3_5 hybrid (Gated DeltaNet + gated attention) on our reference runtime
against stock mlx-lm's qwen3_5.py, f32 both sides, on seeded random checkpoints of the real
layout (tests/oracle/qwen35_fixture.py: Hv > Hk, partial rotary, tied and untied, nested and
flat configs, Hugging Face and mlx-lm layouts):
  - a 64-token prefill's logits, and 32 cached decode steps after a 64-token prefill, agree
    within 1e-4 max abs;
  - greedy generation of 32 tokens is identical;
  - the chunked (WY) DeltaNet prefill agrees with the token-by-token one;
  - `tq inspect` names the layer kinds, and what we cannot run is refused in one line.
The C++ side is the gtest ForwardOracle in tq_tests (env TQ_TESTS_BIN).
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from qwen35_fixture import GEOMETRIES, write_qwen35  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS_BIN = os.environ.get("TQ_TESTS_BIN", str(REPO / "build" / "tq_tests"))
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))

ABS_TOL = 1e-4
# Chunked against token-by-token over 230 positions: the same sums in another order, f32.
CHUNK_TOL = 3e-4
PREFILL = 64
DECODE = 32
GEN_TOKENS = 32
SEEDS = {name: 10 + i for i, name in enumerate(sorted(GEOMETRIES))}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen35")
    return {name: write_qwen35(root / name, name, seed=SEEDS[name]) for name in GEOMETRIES}


def tokens(vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    return {
        "prefill": rng.integers(0, vocab, size=PREFILL).tolist(),
        "decode": rng.integers(0, vocab, size=PREFILL + DECODE).tolist(),
        "prompt": rng.integers(0, vocab, size=12).tolist(),
    }


def run_ours(model_dir, job: dict, out: pathlib.Path, env_extra=None):
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job))
    env = dict(os.environ, TQ_FORWARD_MODEL=str(model_dir), TQ_FORWARD_JOB=str(out / "job.json"),
               TQ_FORWARD_OUT=str(out), **(env_extra or {}))
    r = subprocess.run([TESTS_BIN, "--gtest_filter=ForwardOracle.*"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "[       OK ] ForwardOracle.WritesLogitsAndGreedyTokens" in r.stdout, r.stdout
    res = json.loads((out / "result.json").read_text())
    v = res["vocab"]
    res["logits"] = np.fromfile(out / "logits.f32", dtype="<f4").reshape(-1, v)
    res["decode"] = np.fromfile(out / "decode.f32", dtype="<f4").reshape(-1, v)
    return res


def mlx_reference(model_dir, tk: dict):
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    model, _ = load_model(pathlib.Path(model_dir))
    model.set_dtype(mx.float32)
    prefill = np.array(model(mx.array(tk["prefill"])[None])[0])
    cache = make_prompt_cache(model)
    ids = tk["decode"]
    rows = [np.array(model(mx.array(ids[:PREFILL])[None], cache=cache)[0])]
    for t in ids[PREFILL:]:
        rows.append(np.array(model(mx.array([[t]]), cache=cache)[0]))
    decode = np.concatenate(rows)
    gen = [int(t) for t, _ in generate_step(mx.array(tk["prompt"]), model, max_tokens=GEN_TOKENS)]
    return prefill, decode, gen


def job_of(tk: dict) -> dict:
    return {"windows": [tk["prefill"]], "decode_windows": [tk["decode"]], "split": PREFILL,
            "prompt": tk["prompt"], "max_tokens": GEN_TOKENS}


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_logits_decode_and_generation_match_mlx(models, tmp_path, name):
    d = models[name]
    tk = tokens(GEOMETRIES[name]["text"]["vocab_size"], seed=3)
    ref_prefill, ref_decode, ref_gen = mlx_reference(d, tk)
    ours = run_ours(d, job_of(tk), tmp_path / "ours")
    for what, a, b in (("prefill", ours["logits"], ref_prefill),
                       ("decode", ours["decode"], ref_decode)):
        assert a.shape == b.shape, (what, a.shape, b.shape)
        diff = float(np.abs(a.astype(np.float64) - b).max())
        print(f"{name} {what}: max abs diff {diff:.2e} (logits up to {np.abs(b).max():.2f})")
        assert diff <= ABS_TOL, f"{name} {what}: max abs diff {diff:.3e}"
    assert ours["generated"] == ref_gen, (ours["generated"], ref_gen)
    assert len(set(ref_gen)) > 3, ref_gen  # not a degenerate fixed point


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_chunked_prefill_matches_token_by_token(models, tmp_path, name):
    d = models[name]
    rng = np.random.default_rng(5)
    # 200 tokens: three full chunks of 64 and a partial one, then cached decode steps.
    window = rng.integers(0, GEOMETRIES[name]["text"]["vocab_size"], size=230).tolist()
    job = {"windows": [window], "decode_windows": [window], "split": 200}
    chunked = run_ours(d, job, tmp_path / "chunked", {"TQ_DELTA_CHUNK": "64"})
    stepwise = run_ours(d, job, tmp_path / "stepwise", {"TQ_DELTA_CHUNK": "0"})
    for what in ("logits", "decode"):
        diff = float(np.abs(chunked[what].astype(np.float64) - stepwise[what]).max())
        print(f"{name} {what}: chunked vs token by token max abs diff {diff:.2e}")
        assert diff <= CHUNK_TOL, f"{name} {what}: {diff:.3e}"


def test_hf_and_mlx_layouts_agree(models, tmp_path):
    hf = models["hf_nested_tied"]
    mlx_dir = write_qwen35(tmp_path / "mlx", "hf_nested_tied", seed=SEEDS["hf_nested_tied"],
                           layout="mlx")
    tk = tokens(GEOMETRIES["hf_nested_tied"]["text"]["vocab_size"], seed=4)
    a = run_ours(hf, job_of(tk), tmp_path / "a")
    b = run_ours(mlx_dir, job_of(tk), tmp_path / "b")
    assert float(np.abs(a["logits"] - b["logits"]).max()) <= ABS_TOL
    assert a["generated"] == b["generated"]


def tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_inspect_shows_layer_kinds(models, name):
    r = tq("inspect", models[name], "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    text = GEOMETRIES[name]["text"]
    n, every = text["num_hidden_layers"], text["full_attention_interval"]
    want = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    assert j["family"] == "qwen3_5"
    assert j["config"]["layer_types"] == want
    assert j["config"]["layout"] == GEOMETRIES[name]["layout"]
    assert j["config"]["tie_word_embeddings"] == text["tie_word_embeddings"]
    r = tq("inspect", models[name])
    assert r.returncode == 0 and "linear_attention" in r.stdout and "full_attention" in r.stdout


def edited(src: pathlib.Path, dst: pathlib.Path, edit) -> pathlib.Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    (dst / "config.json").unlink()
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg.get("text_config", cfg), cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("field,edit", [
    ("num_experts", lambda t, top: t.update(num_experts=4)),
    ("attention_bias", lambda t, top: t.update(attention_bias=True)),
    ("model_type 'qwen3_next'", lambda t, top: top.update(model_type="qwen3_next")),
    ("model_type 'qwen3_5_moe'", lambda t, top: top.update(model_type="qwen3_5_moe")),
    ("rope_parameters.type", lambda t, top: t.update(rope_parameters={"type": "yarn"})),
])
def test_refused_in_one_line(models, tmp_path, field, edit):
    d = edited(models["hf_nested_tied"], tmp_path / "m", edit)
    r = tq("inspect", d)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field.split()[0] in lines[0], r.stderr


def load_tensors(d: pathlib.Path):
    out = {}
    for f in sorted(d.glob("model*.safetensors")):
        out.update(mx.load(str(f)))
    return out


# (geometry, our flags, mlx_lm.convert settings): the widths of hf_flat_untied (96, value dim
# 72) fit no group of 32 or more, so it is not here.
CONVERTS = [
    ("hf_nested_tied", ["--bits", "4", "--group-size", "64"], dict(q_bits=4, q_group_size=64)),
    ("hf_nested_tied", ["--bits", "3", "--group-size", "32"], dict(q_bits=3, q_group_size=32)),
    ("hf_nested_tied", ["--mode", "mxfp4"], dict(q_mode="mxfp4")),
    ("mlx_untied_default_rope", ["--bits", "4", "--group-size", "32"],
     dict(q_bits=4, q_group_size=32)),
    ("hf_nested_tied", ["--recipe", "mixed_3_6", "--group-size", "32"],
     dict(quant_predicate="mixed_3_6", q_group_size=32)),
]


@pytest.mark.parametrize("name,flags,theirs", CONVERTS,
                         ids=[f"{n}-{'-'.join(f).replace('--', '')}" for n, f, _ in CONVERTS])
def test_convert_equals_mlx_lm_and_runs(models, tmp_path, name, flags, theirs):
    """Our artifact holds mlx-lm's layout and exactly the tensors stock mlx_lm.convert writes
    (A_log f32, conv1d [C, K, 1], shifted norms, in_proj_a/b quantized); mlx-lm runs it, and
    our runtimes match mlx-lm on it."""
    from mlx_lm import convert

    src = models[name]
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    r = tq("convert", src, "-o", ours_dir, "--dtype", "bf16", "--json", *flags)
    assert r.returncode == 0, r.stderr
    convert(hf_path=str(src), mlx_path=str(theirs_dir), quantize=True, dtype="bfloat16",
            **theirs)
    ours, ref = load_tensors(ours_dir), load_tensors(theirs_dir)
    assert sorted(ours) == sorted(ref)
    for k in sorted(ours):
        assert ours[k].dtype == ref[k].dtype and ours[k].shape == ref[k].shape, \
            (k, ours[k].dtype, ref[k].dtype, ours[k].shape, ref[k].shape)
        assert mx.array_equal(ours[k], ref[k]).item(), f"tensor {k} differs"
    assert any(k.endswith("in_proj_a.scales") for k in ours)
    assert all(v.dtype == mx.float32 for k, v in ours.items() if k.endswith("A_log"))
    # `tq inspect`'s bytes are mlx-lm's; its parameters also count A_log and dt_bias, which
    # mlx-lm's get_total_parameters misses (it counts leaf modules only, and GatedDeltaNet holds
    # them itself): 2 Hv per DeltaNet layer.
    from mlx.utils import tree_reduce
    from mlx_lm.utils import get_total_parameters, load_model

    model, _ = load_model(ours_dir)
    j = json.loads(tq("inspect", ours_dir, "--json").stdout)
    text = GEOMETRIES[name]["text"]
    n_linear = sum((i + 1) % text["full_attention_interval"] != 0
                   for i in range(text["num_hidden_layers"]))
    nbytes = tree_reduce(lambda acc, x: acc + x.nbytes if isinstance(x, mx.array) else acc,
                         model, 0)
    assert j["bytes"] == nbytes
    assert j["params"] == get_total_parameters(model) + 2 * text["linear_num_value_heads"] * n_linear
    # mlx-lm and both our runtimes agree on the artifact.
    tk = tokens(GEOMETRIES[name]["text"]["vocab_size"], seed=6)
    ref_prefill, ref_decode, ref_gen = mlx_reference(ours_dir, tk)
    for extra in ({}, {"fast": True, "f32": True}):
        res = run_ours(ours_dir, {**job_of(tk), **extra}, tmp_path / f"run{len(extra)}")
        for what, a, b in (("prefill", res["logits"], ref_prefill),
                           ("decode", res["decode"], ref_decode)):
            diff = float(np.abs(a.astype(np.float64) - b).max())
            print(f"{name} {flags} {extra or 'reference'} {what}: max abs diff {diff:.2e}")
            assert diff <= 1e-3, (what, extra, diff)
        assert res["generated"] == ref_gen, (extra, res["generated"], ref_gen)


# The fast runtime (packed-matrix products over the pool, its own cache layout, the same
# DeltaNet kernels): with f32 activations and cache as exact as the reference; with the
# defaults (two-plane int8 activations, f16 cache) close.
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("mode,tol", [("f32", ABS_TOL), ("default", 2e-2)])
def test_fast_runtime_matches_mlx(models, tmp_path, name, mode, tol):
    d = models[name]
    tk = tokens(GEOMETRIES[name]["text"]["vocab_size"], seed=3)
    ref_prefill, ref_decode, ref_gen = mlx_reference(d, tk)
    ours = run_ours(d, {**job_of(tk), "fast": True, "f32": mode == "f32"}, tmp_path / "ours")
    for what, a, b in (("prefill", ours["logits"], ref_prefill),
                       ("decode", ours["decode"], ref_decode)):
        diff = float(np.abs(a.astype(np.float64) - b).max())
        print(f"{name} fast {mode} {what}: max abs diff {diff:.2e}")
        assert diff <= tol, f"{name} fast {mode} {what}: max abs diff {diff:.3e}"
    if mode == "f32":
        assert ours["generated"] == ref_gen, (ours["generated"], ref_gen)
