"""Oracle: the qwen3_5 multi-token-prediction (MTP) companion through `tq convert`.

The Hugging Face fixture carries `mtp.*` (tests/oracle/qwen35_fixture.py). tq writes them to
`mtp.safetensors` beside the model's shards (mlx-lm loads `model*.safetensors` only):
  - quantized: every MTP Linear has exactly the codes, scales and biases `mx.quantize` gives
    (as mlx-lm would quantize such a layer), the norms float with their zero-centring undone;
    the model's own shards are unchanged and still load in mlx-lm;
  - under --rotate-weights the companion is folded with the trunk's R1: a numpy MTP forward
    (fc over [normed embedding | normed hidden], one gated-attention layer, final norm, the
    trunk's head) gives the same draft logits from the folded artifact (hidden states turned by
    R1) as from the source, when the MTP final norm equals the trunk's; with its own gain the
    fold (gain set to ones, as the seed's map says) is an approximation, measured here.
"""

import json
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
pytest.importorskip("tokenizers")

from qwen35_fixture import GEOMETRIES, write_qwen35  # noqa: E402
from test_rotation_parity import TQ_BIN  # noqa: E402

NAME = "hf_nested_tied"
TEXT = GEOMETRIES[NAME]["text"]
MTP_LINEARS = ["fc", "layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj",
               "layers.0.self_attn.v_proj", "layers.0.self_attn.o_proj",
               "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj", "layers.0.mlp.down_proj"]


def tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)


def np_load(path):
    return {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(path)).items()}


def test_companion_survives_convert_quantized(tmp_path):
    src = write_qwen35(tmp_path / "src", NAME, seed=51)
    out = tmp_path / "q4"
    r = tq("convert", src, "-o", out, "--bits", "4", "--group-size", "32", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr[-3000:]
    source = mx.load(str(src / "model.safetensors"))
    comp = mx.load(str(out / "mtp.safetensors"))
    model = mx.load(str(out / "model.safetensors"))
    assert not any(k.startswith("mtp.") for k in model)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert "mtp.safetensors" not in set(index["weight_map"].values())
    mtp_src = sorted(k for k in source if k.startswith("mtp."))
    want = set()
    for k in mtp_src:
        mod = k[: -len(".weight")]
        if mod[len("mtp."):] in MTP_LINEARS:
            want |= {mod + ".weight", mod + ".scales", mod + ".biases"}
            w, s, b = mx.quantize(source[k].astype(mx.bfloat16), group_size=32, bits=4)
            assert mx.array_equal(comp[mod + ".weight"], w).item(), mod
            assert mx.array_equal(comp[mod + ".scales"], s).item(), mod
            assert mx.array_equal(comp[mod + ".biases"], b).item(), mod
        else:  # a norm, stored zero-centred in the source and written as applied
            want.add(k)
            assert comp[k].dtype == mx.bfloat16
            assert mx.array_equal(comp[k], (source[k] + 1.0).astype(mx.bfloat16)).item(), k
    assert set(comp) == want, sorted(set(comp) ^ want)
    # The model mlx-lm loads is untouched by the companion.
    from mlx_lm.utils import load_model

    m, _ = load_model(out)
    assert m(mx.array([[3, 4, 5]])).shape == (1, 3, TEXT["vocab_size"])


# --- the draft forward in numpy --------------------------------------------------------------


def rms(x, w, eps=TEXT["rms_norm_eps"]):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def mtp_logits(w, embed, head, hidden, tokens):
    """Draft logits of the MTP head for hidden states [T, H] and next tokens [T]; RoPE is left
    out (it acts on q/k head space, which no fold touches)."""
    nh, nkv, hd = TEXT["num_attention_heads"], TEXT["num_key_value_heads"], TEXT["head_dim"]
    T = len(tokens)
    e = rms(embed[tokens], w["mtp.pre_fc_norm_embedding.weight"])
    h = rms(hidden, w["mtp.pre_fc_norm_hidden.weight"])
    x = np.concatenate([e, h], -1) @ w["mtp.fc.weight"].T
    p = "mtp.layers.0."
    a = rms(x, w[p + "input_layernorm.weight"])
    qg = (a @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, 2, hd)
    q = rms(qg[:, :, 0], w[p + "self_attn.q_norm.weight"])
    gate = qg[:, :, 1]
    k = rms((a @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd),
            w[p + "self_attn.k_norm.weight"])
    v = (a @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
    rep = nh // nkv
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    att = np.einsum("htu,uhd->thd", s, v) / (1 + np.exp(-gate))
    x = x + att.reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
    m = rms(x, w[p + "post_attention_layernorm.weight"])
    g = m @ w[p + "mlp.gate_proj.weight"].T
    x = x + (g / (1 + np.exp(-g)) * (m @ w[p + "mlp.up_proj.weight"].T)) @ \
        w[p + "mlp.down_proj.weight"].T
    return rms(x, w["mtp.norm.weight"]) @ head.T


def read_f64(path, name):
    """One F64 tensor of a safetensors file (mlx cannot load F64)."""
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    meta = json.loads(raw[8:8 + n])[name]
    a, b = meta["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f8").reshape(meta["shape"])


def kl_mean(a, b):
    la = a - a.max(-1, keepdims=True)
    la -= np.log(np.exp(la).sum(-1, keepdims=True))
    lb = b - b.max(-1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
    return float((np.exp(la) * (la - lb)).sum(-1).mean())


@pytest.mark.parametrize("shared_norm", [True, False])
def test_rotated_companion_gives_the_same_draft_logits(tmp_path, shared_norm):
    src = write_qwen35(tmp_path / "src", NAME, seed=52)
    sw = np_load(src / "model.safetensors")
    if shared_norm:  # the MTP final gain equal to the trunk's: the fold is exact
        sw["mtp.norm.weight"] = sw["model.language_model.norm.weight"].copy()
        mx.save_safetensors(str(src / "model.safetensors"),
                            {k: mx.array(v) for k, v in sorted(sw.items())},
                            metadata={"format": "pt"})
    out = tmp_path / "folded"
    r = tq("convert", src, "-o", out, "--rotate-weights", "--no-quantize", "--dtype", "f32",
           "--save-rotations", "--seed", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    r1 = read_f64(out / "rotations.safetensors", "r1")
    fw, comp = np_load(out / "model.safetensors"), np_load(out / "mtp.safetensors")
    gains = [k for k in comp if comp[k].ndim == 1 and "q_norm" not in k and "k_norm" not in k]
    assert len(gains) == 5 and all(np.all(comp[k] == 1) for k in gains), "gains not ones"

    # Source weights as applied (HF: zero-centred norms + 1; tied head = the embedding).
    src_mtp = {k: v.astype(np.float64) + (1.0 if v.ndim == 1 else 0.0)
               for k, v in sw.items() if k.startswith("mtp.")}
    embed = sw["model.language_model.embed_tokens.weight"].astype(np.float64)
    gamma_f = 1.0 + sw["model.language_model.norm.weight"].astype(np.float64)
    rng = np.random.default_rng(4)
    T = 12
    hidden = rng.standard_normal((T, TEXT["hidden_size"])) * 2.0
    tokens = rng.integers(0, TEXT["vocab_size"], size=T)
    ref = mtp_logits(src_mtp, embed, embed, hidden, tokens)
    if shared_norm:  # the trunk's head with its gain; the MTP gain is the same vector
        assert np.allclose(src_mtp["mtp.norm.weight"], gamma_f)
    got = mtp_logits({k: v.astype(np.float64) for k, v in comp.items()},
                     fw["language_model.model.embed_tokens.weight"].astype(np.float64),
                     fw["language_model.lm_head.weight"].astype(np.float64), hidden @ r1, tokens)
    kl = kl_mean(ref, got)
    diff = float(np.abs(ref - got).max())
    print(f"MTP draft logits, folded vs source (shared final gain {shared_norm}): "
          f"mean KL {kl:.2e}, max abs diff {diff:.2e}")
    if shared_norm:
        assert kl < 1e-9 and diff < 1e-4 * max(1.0, float(np.abs(ref).max())), (kl, diff)
    else:  # gain -> ones swaps the MTP's own gain for the trunk's: not exact
        assert kl > 1e-9
