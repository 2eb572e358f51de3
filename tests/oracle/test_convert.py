"""Oracle: `tq convert` artifacts against stock mlx-lm.

The seeded tiny llama / qwen2 / qwen3 checkpoints of test_forward_logits.py (bf16, f32 and f16
sources, tied and untied, biases, q/k norms) are converted at affine 4-bit g64, 3-bit g64,
8-bit g32, mxfp4, nvfp4, mxfp8, the mixed_3_6 preset and a custom recipe (one module kept float,
per-module modes and groups) and searched grids (--grid search); SmolLM2 (converted straight from its GGUF) at a few of them. For
each artifact:
  - stock mlx-lm loads it (mlx_lm.utils.load, model + tokenizer) and generates text;
  - its logits (mlx-lm, f32 activations) equal our runtime's on the same artifact within 1e-3
    relative per position, and greedy generation agrees;
  - mlx-lm's compute_bits_per_weight (and its byte / parameter counts) equals our --dry-run
    figure, which equals the real conversion's --json summary.
Affine/mxfp4 artifacts and the mixed_3_6 preset are also compared tensor by tensor with
stock `mlx_lm.convert` on the same source: every tensor and every per-module spec is equal.
"""

import json
import os
import pathlib
import subprocess
import time

import pytest

mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from mlx_convert_ref import run_batch  # noqa: E402
from test_forward_logits import TINY, assert_close, run_ours, tiny_tokens, write_tiny  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"

# A custom recipe: a float module, per-module modes and groups (valid for every model here).
RECIPE = {
    "bits": 4,
    "group_size": 64,
    "rules": [
        {"match": "model.layers.0.mlp.down_proj", "float": True},
        {"match": "role:attn_v", "bits": 6, "group_size": 32},
        {"match": "model.embed_tokens", "mode": "mxfp8"},
        {"match": "re:.*\\.mlp\\.(gate|up)_proj", "mode": "nvfp4"},
        {"match": "role:attn_o", "layers": [1], "bits": 3},
    ],
}
SPECS = {
    "affine4_g64": ["--bits", "4", "--group-size", "64"],
    "affine3_g64": ["--bits", "3", "--group-size", "64"],
    "affine8_g32": ["--bits", "8", "--group-size", "32"],
    "mxfp4": ["--mode", "mxfp4"],
    "nvfp4": ["--mode", "nvfp4"],
    "mxfp8": ["--mode", "mxfp8"],
    "mixed_3_6": ["--recipe", "mixed_3_6"],
    "recipe": ["--recipe", "RECIPE"],
    # Searched grids: the same layout with other scales/biases (GPTQ's refit:
    # tests/integration/test_gptq_convert.py).
    "affine3_g64_search": ["--bits", "3", "--group-size", "64", "--grid", "search"],
}
SMOL_SPECS = ["affine4_g64", "recipe"]
# Stock mlx_lm.convert settings that must give the very same tensors as ours.
MLX_LM_SAME = {
    "affine4_g64": dict(q_bits=4, q_group_size=64),
    "affine3_g64": dict(q_bits=3, q_group_size=64),
    "mxfp4": dict(q_mode="mxfp4"),
    "mixed_3_6": dict(q_group_size=64, quant_predicate="mixed_3_6"),
}
SOURCE_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
GEN = 16  # greedy tokens compared (tiny models)
SMOL_GEN = 4
CASES = [(m, s) for m in sorted(TINY) for s in SPECS] + [("smollm2", s) for s in SMOL_SPECS]


def tq(*args, check=True):
    r = subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def spec_args(spec, recipe_path):
    return [recipe_path if a == "RECIPE" else a for a in SPECS[spec]]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Converts every case, then runs stock mlx-lm over all artifacts in one child process."""
    root = tmp_path_factory.mktemp("convert")
    recipe = root / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    sources = {}
    for i, (name, cfg) in enumerate(sorted(TINY.items())):
        write_tiny(root / "src" / name, cfg, seed=100 + i)
        sources[name] = root / "src" / name
    smol = GGUF.exists() and WIKI.exists()
    if smol:
        sources["smollm2"] = GGUF
    (root / "out").mkdir()
    t0 = time.monotonic()
    cases, mlx_cases = {}, []
    for model, spec in CASES:
        if model not in sources:
            continue
        args = spec_args(spec, recipe)
        if model in TINY:  # mlx_lm.convert keeps the source's dtype; our default would be bf16
            args += ["--dtype", SOURCE_DTYPE[TINY[model]["torch_dtype"]]]
        dry = json.loads(tq("convert", sources[model], "--dry-run", "--json", *args).stdout)
        out = root / "out" / f"{model}-{spec}"
        summary = json.loads(tq("convert", sources[model], "-o", out, "--json", *args).stdout)
        if model == "smollm2":
            # mlx-cpu's quantized matmul is slow (seconds per 64-token window on 2 cores): keep
            # SmolLM2's windows and generations short.
            from mlx_lm.utils import load_tokenizer

            tok = load_tokenizer(out)
            ids = tok.encode(WIKI.read_text(encoding="utf-8")[:20000])
            windows, prompt = [ids[1000:1024]], tok.encode("The Roman Empire")
            prompt_text, gen, text_tokens = "The history of", SMOL_GEN, SMOL_GEN
        else:
            windows, prompt = tiny_tokens(TINY[model]["vocab_size"], seed=9)
            prompt_text, gen, text_tokens = "w5 w6 w7", GEN, 8
        cases[(model, spec)] = {"dir": out, "dry": dry, "summary": summary, "windows": windows,
                                "prompt": prompt, "index": len(mlx_cases), "gen": gen,
                                "text_tokens": text_tokens}
        mlx_cases.append({"dir": str(out), "windows": windows, "prompt": prompt,
                          "max_tokens": gen, "prompt_text": prompt_text,
                          "text_tokens": text_tokens})
    t1 = time.monotonic()
    results = run_batch(mlx_cases, root / "mlx")
    print(f"\n{len(mlx_cases)} conversions {t1 - t0:.1f} s, mlx-lm {time.monotonic() - t1:.1f} s")
    return {"root": root, "sources": sources, "cases": cases, "mlx": results, "recipe": recipe}


@pytest.mark.parametrize("model,spec", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_convert_loads_in_mlx_lm_and_matches_our_runtime(converted, tmp_path, model, spec):
    if (model, spec) not in converted["cases"]:
        pytest.skip(f"asset missing: {GGUF} or {WIKI}")
    case = converted["cases"][(model, spec)]
    ref = converted["mlx"][case["index"]]
    what = f"{model} {spec}"
    # mlx-lm's bpw is our --dry-run figure, which is what the conversion reports. mlx-lm also
    # counts each layer's Llama3RoPE frequency array (head_dim/2 f32, in no file) as bytes.
    dry, summary = case["dry"], case["summary"]
    cfg = json.loads((case["dir"] / "config.json").read_text())
    llama3 = (cfg.get("rope_scaling") or {}).get("rope_type") == "llama3"
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rope_bytes = cfg["num_hidden_layers"] * head_dim // 2 * 4 if llama3 else 0
    assert ref["buffer_bytes"] == rope_bytes, (what, ref["buffer_bytes"], rope_bytes)
    assert (ref["bytes"] - ref["buffer_bytes"], ref["params"]) == (dry["bytes"], dry["params"])
    if not llama3:
        assert ref["bpw"] == pytest.approx(dry["bpw"], rel=1e-12), what
    assert (summary["bytes"], summary["params"]) == (dry["bytes"], dry["params"])
    assert len(ref["text_tokens"]) == case["text_tokens"] and isinstance(ref["text"], str)
    if model == "smollm2":
        assert ref["text"].strip(), (what, ref["text"])
    # The same artifact in our runtime.
    ours, res = run_ours(case["dir"], case["windows"], case["prompt"], tmp_path / "ours",
                         max_tokens=case["gen"])
    assert_close(ours, ref["logits"], what)
    assert res["generated"] == ref["generated"], (what, res["generated"], ref["generated"])
    if model != "smollm2":
        assert len(set(ref["generated"])) > 2, ref["generated"]
    # config.json holds both quantization blocks, identical, and explicit geometry keys.
    assert cfg["quantization"] == cfg["quantization_config"]
    assert isinstance(cfg["tie_word_embeddings"], bool) and "rope_theta" in cfg
    print(f"{what}: bpw {dry['bpw']:.4f}, {dry['bytes']} bytes")


def load_tensors(d: pathlib.Path):
    out = {}
    for f in sorted(d.glob("model*.safetensors")):
        out.update(mx.load(str(f)))
    return out


def effective_specs(cfg, tensors):
    """module -> (mode, bits, group_size) as mlx-lm's loader resolves them."""
    q = cfg["quantization"]
    glob = (q.get("mode", "affine"), q["bits"], q["group_size"])
    out = {}
    for k in tensors:
        if not k.endswith(".scales"):
            continue
        m = k[: -len(".scales")]
        v = q.get(m, True)
        out[m] = glob if v is True else (v.get("mode", "affine"), v["bits"], v["group_size"])
    return out


@pytest.mark.parametrize("spec", sorted(MLX_LM_SAME))
@pytest.mark.parametrize("model", sorted(TINY))
def test_convert_equals_mlx_lm_convert(converted, tmp_path, model, spec):
    from mlx_lm import convert

    theirs_dir = tmp_path / "mlx_lm"
    convert(hf_path=str(converted["sources"][model]), mlx_path=str(theirs_dir), quantize=True,
            **MLX_LM_SAME[spec])
    ours_dir = converted["cases"][(model, spec)]["dir"]
    ours, theirs = load_tensors(ours_dir), load_tensors(theirs_dir)
    assert sorted(ours) == sorted(theirs)
    for k in sorted(ours):
        assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape, k
        assert mx.array_equal(ours[k], theirs[k]).item(), f"{model} {spec}: tensor {k} differs"
    cfg_o = json.loads((ours_dir / "config.json").read_text())
    cfg_t = json.loads((theirs_dir / "config.json").read_text())
    assert effective_specs(cfg_o, ours) == effective_specs(cfg_t, theirs)
    assert cfg_o["tie_word_embeddings"] == cfg_t.get("tie_word_embeddings", True)


@pytest.mark.parametrize("preset", ["mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6"])
def test_presets_equal_mlx_lm_predicate_on_smollm2(preset):
    """Our preset plan for SmolLM2's 30 layers equals mlx-lm's mixed_quant_predicate_builder."""
    if not GGUF.exists():
        pytest.skip(f"asset missing: {GGUF}")
    from mlx_lm.convert import mixed_quant_predicate_builder
    from mlx_lm.models import llama

    dry = json.loads(tq("convert", GGUF, "--dry-run", "--json", "--recipe", preset,
                        "--group-size", "32").stdout)
    cfg = json.loads(tq("inspect", GGUF, "--json").stdout)["config"]
    args = llama.ModelArgs.from_dict({**cfg, "model_type": "llama"})
    model = llama.Model(args)
    pred = mixed_quant_predicate_builder(preset, model, 32)
    theirs = {}
    for path, m in model.named_modules():
        if hasattr(m, "to_quantized") and path:
            p = pred(path, m)
            theirs[path] = (p["mode"], p["bits"], p["group_size"])
    ours = {k: (v["mode"], v["bits"], v["group_size"]) for k, v in dry["modules"].items()}
    assert ours == theirs
    assert sum(1 for v in ours.values() if v[1] == (4 if preset == "mixed_3_4" else 6)) == 28
