"""The fast runtime (packed weights in place, SIMD kernels, thread pool) against the reference
runtime (weights dequantized to f32 at load), on SmolLM2-135M:

(a) PPL through the fast runtime equals the reference's within 0.05%, for stock mlx-lm's 4-bit
    g64 and 8-bit g64 artifacts and for the f32 checkpoint itself;
(b) KL of the 4-bit artifact against the f32 base equals the reference's within 0.05%;
(c) the int8-activation path's effect on PPL, measured (target < 0.2%; now ~5%: xfail);
(d) `tq bench` prints the documented JSON fields, the CPU and the kernel paths among them;
(e) every format the converter writes runs generate/ppl/kl/bench with default flags.
Short windows keep it CI-sized (TQ_FAST_WINDOWS / TQ_FAST_SEQ_LEN make it longer).
"""
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

mlx_lm = pytest.importorskip("mlx_lm")

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"
WINDOWS = int(os.environ.get("TQ_FAST_WINDOWS", "2"))
SEQ_LEN = int(os.environ.get("TQ_FAST_SEQ_LEN", "128"))

pytestmark = pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}")


def tq_json(*args):
    r = subprocess.run([TQ_BIN, *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    d = tmp_path_factory.mktemp("fast")
    f32 = d / "f32"
    r = subprocess.run([TQ_BIN, "import", str(GGUF), "-o", str(f32)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = {"f32": f32}
    for bits in (4, 8):
        q = d / f"q{bits}g64"
        mlx_lm.convert(hf_path=str(f32), mlx_path=str(q), quantize=True, q_bits=bits,
                       q_group_size=64)
        out[f"q{bits}"] = q
    return out


def ppl(model, *extra):
    return tq_json("ppl", model, "--text", WIKI, "--seq-len", SEQ_LEN, "--windows", WINDOWS,
                   "--no-db", *extra)


@pytest.mark.parametrize("which", ["q4", "q8", "f32"])
def test_fast_ppl_equals_reference(smollm2, which):
    fast = ppl(smollm2[which])
    ref = ppl(smollm2[which], "--reference")
    assert fast["runtime"].startswith("fast"), fast["runtime"]
    assert ref["runtime"].startswith("reference"), ref["runtime"]
    assert fast["tokens_scored"] == ref["tokens_scored"]
    print(f"\n{which}: fast {fast['ppl']:.6f} ({fast['tok_s']:.0f} tok/s), "
          f"reference {ref['ppl']:.6f} ({ref['tok_s']:.0f} tok/s)")
    assert fast["ppl"] == pytest.approx(ref["ppl"], rel=5e-4)


def test_fast_kl_equals_reference(smollm2):
    args = ["kl", smollm2["f32"], smollm2["q4"], "--text", WIKI, "--seq-len", SEQ_LEN,
            "--windows", WINDOWS, "--no-db"]
    fast = tq_json(*args)
    ref = tq_json(*args, "--reference")
    print(f"\nmean KL fast {fast['mean_kl']:.6g} reference {ref['mean_kl']:.6g}")
    assert fast["mean_kl"] == pytest.approx(ref["mean_kl"], rel=5e-4)
    assert fast["top1_agreement"] == pytest.approx(ref["top1_agreement"], abs=2.0 / fast.get(
        "tokens_scored", WINDOWS * (SEQ_LEN - 1)))


@pytest.mark.parametrize("which", ["q4", "q8"])
def test_int8_activations_move_ppl_less_than_0_2_percent(smollm2, which):
    f = ppl(smollm2[which], "--activations", "f32")
    q = ppl(smollm2[which], "--activations", "int8")
    assert "int8 activations" in q["runtime"], q["runtime"]
    effect = q["ppl"] / f["ppl"] - 1.0
    print(f"\n{which}: int8 activations change PPL by {effect * 100:+.4f}% "
          f"({f['ppl']:.6f} -> {q['ppl']:.6f})")
    assert abs(effect) < 2e-3


def test_bench_json_fields(smollm2):
    j = tq_json("bench", smollm2["q4"], "--prompt-lengths", "16,32", "--gen", 4, "--repeat", 2,
                "--no-db")
    for k in ("prefill_tok_s", "decode_tok_s", "ttft_s", "peak_rss_bytes", "bytes_per_token",
              "roofline_decode_tok_s"):
        assert j[k] > 0, k
    assert [p["prompt_len"] for p in j["points"]] == [16, 32]
    p = j["points"][0]["decode_tok_s"]
    assert p["min"] <= p["median"] <= p["max"]
    # 4-bit g64 with f32 scales: about 5 bits per weight over ~135M parameters, once per token.
    assert 60e6 < j["bytes_per_token"] < 120e6
    # Every number names the CPU and the kernel paths it ran on.
    cpu = j["cpu"]
    assert cpu["model"] and cpu["vendor"] and cpu["family"] > 0
    assert cpu["simd"] in ("AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128", "SCALAR")
    assert cpu["int8"] in ("avx512-vnni", "avx512/avx2 (no 8-bit)", "avx2 (no 8-bit)", "none")
    assert isinstance(cpu["amx"], bool)
    assert cpu["simd"] in j["runtime"]


# Every format the converter writes, run with default flags (the int8 path where the kernels
# have one, the float path elsewhere): generate, ppl, kl and bench work, and KL orders by width.
FORMATS = {"2bit": ["--bits", "2"], "3bit": ["--bits", "3"], "4bit": [], "5bit": ["--bits", "5"],
           "6bit": ["--bits", "6"], "8bit": ["--bits", "8"], "mxfp4": ["--mode", "mxfp4"],
           "nvfp4": ["--mode", "nvfp4"], "mxfp8": ["--mode", "mxfp8"],
           "mixed_3_6": ["--recipe", "mixed_3_6"]}


@pytest.fixture(scope="module")
def formats(smollm2, tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    out = {}
    for name, flags in FORMATS.items():
        out[name] = d / name
        r = subprocess.run([TQ_BIN, "convert", str(smollm2["f32"]), "-o", str(out[name]),
                            "--no-db", *flags], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    return out


def test_every_format_runs_with_default_flags(smollm2, formats):
    kl = {}
    for name, model in formats.items():
        g = tq_json("generate", model, "-p", "The capital of France is", "--max-tokens", 8)
        assert 1 <= len(g["tokens"]) <= 8 and g["cpu"]["simd"] in g["runtime"], (name, g)
        p, ref = ppl(model), ppl(model, "--reference")
        assert math.isfinite(p["ppl"]) and p["ppl"] > 1.0, (name, p["ppl"])
        # Mean NLL within 0.2%: a broken 2-bit model (PPL ~1e7, NLL ~16 nats) amplifies the
        # fast kernels' rounding into a percent of PPL while its NLL moves by under 0.1%.
        assert math.log(p["ppl"]) == pytest.approx(math.log(ref["ppl"]), rel=2e-3), name
        k = tq_json("kl", smollm2["f32"], model, "--text", WIKI, "--seq-len", SEQ_LEN,
                    "--windows", WINDOWS, "--no-db")
        kl[name] = k["mean_kl"]
        b = tq_json("bench", model, "--prompt-lengths", 16, "--gen", 4, "--repeat", 1, "--no-db")
        assert b["decode_tok_s"] > 0 and b["bytes_per_token"] > 0, (name, b)
        print(f"\n{name}: ppl {p['ppl']:.3f} (reference {ref['ppl']:.3f}), mean KL {kl[name]:.4f}, decode "
              f"{b['decode_tok_s']:.1f} tok/s, {b['runtime']}")
    assert kl["8bit"] < kl["6bit"] < kl["5bit"] < kl["4bit"] < kl["3bit"] < kl["2bit"], kl
    assert kl["mxfp8"] < kl["4bit"] and kl["nvfp4"] < kl["3bit"] and kl["mxfp4"] < kl["3bit"], kl


def test_int8_kernels_of_every_width_move_nll_less_than_0_2_percent(formats):
    # The narrow-code and E2M1 kernels (packed_codes_q8-inl.h) over whole windows of real text:
    # int8 activations against f32 ones on the same artifact, mean NLL within 0.2%.
    for name in ("2bit", "3bit", "5bit", "6bit", "mxfp4", "nvfp4", "mixed_3_6"):
        f = ppl(formats[name], "--activations", "f32")
        q = ppl(formats[name], "--activations", "int8")
        assert "int8 activations" in q["runtime"], q["runtime"]
        effect = math.log(q["ppl"]) / math.log(f["ppl"]) - 1.0
        print(f"\n{name}: int8 activations change mean NLL by {effect * 100:+.4f}% "
              f"(PPL {f['ppl']:.4f} -> {q['ppl']:.4f})")
        assert abs(effect) < 2e-3, name
