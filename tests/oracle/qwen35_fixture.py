"""Seeded random qwen3_5 (Qwen3.5 dense hybrid) checkpoints of the real layout, for the oracle tests.

No real Qwen3.5 weights can be fetched here, so every check runs on checkpoints whose parameter
names and shapes come from stock mlx-lm's own model class (mlx_lm.models.qwen3_5), written in
either layout:
  - "hf":  Hugging Face's (model.language_model.*, lm_head.weight, conv1d [C, 1, K], the
           input/post-attention/final/q/k norms stored zero-centred, i.e. applied as 1 + w,
           plus mtp.* tensors of a multi-token-prediction head that mlx-lm drops at load);
  - "mlx": mlx-lm's sanitized one (language_model.model.*, conv1d [C, K, 1], norms as applied).
Both hold the same model for the same seed: an "hf" and an "mlx" directory of one geometry give
the same logits.

As a script: python qwen35_fixture.py OUT_DIR NAME  (NAME from GEOMETRIES).
"""

import copy
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_forward_logits import write_tokenizer  # noqa: E402  (the tiny models' tokenizer)

# Each exercises something: Hv > Hk (GQA in the delta rule), partial rotary (0.25 and 0.5,
# and rope_parameters absent: mlx-lm's defaults), tied and untied heads, nested text_config
# and a flat config, full_attention_interval 2 / 4 / 3, conv kernel 4 and 3, both layouts.
GEOMETRIES = {
    "hf_nested_tied": dict(
        layout="hf",
        nested=True,
        text=dict(
            hidden_size=64, num_hidden_layers=4, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, vocab_size=256, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, full_attention_interval=2, tie_word_embeddings=True,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                             "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
        ),
    ),
    "hf_flat_untied": dict(
        layout="hf",
        nested=False,
        text=dict(
            hidden_size=96, num_hidden_layers=4, intermediate_size=160, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, vocab_size=300, linear_num_key_heads=1,
            linear_num_value_heads=3, linear_key_head_dim=32, linear_value_head_dim=24,
            linear_conv_kernel_dim=3, full_attention_interval=4, tie_word_embeddings=False,
            rms_norm_eps=1e-5,
            rope_parameters={"type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5},
        ),
    ),
    "mlx_untied_default_rope": dict(
        layout="mlx",
        nested=True,
        text=dict(
            hidden_size=64, num_hidden_layers=5, intermediate_size=96, num_attention_heads=2,
            num_key_value_heads=2, head_dim=32, vocab_size=200, linear_num_key_heads=2,
            linear_num_value_heads=2, linear_key_head_dim=32, linear_value_head_dim=32,
            linear_conv_kernel_dim=4, full_attention_interval=3, tie_word_embeddings=False,
            rms_norm_eps=1e-6,
        ),
    ),
}

# Norms mlx-lm's sanitize shifts by +1 when it sees the HF conv layout (linear_attn.norm never).
SHIFTED = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
           ".q_norm.weight", ".k_norm.weight")


def config_json(geo: dict) -> dict:
    text = copy.deepcopy(geo["text"])
    if not geo["nested"]:
        return {"model_type": "qwen3_5", **text, "torch_dtype": "float32"}
    text["model_type"] = "qwen3_5_text"
    # The top-level tie flag is not what mlx-lm reads when text_config exists: make it differ.
    return {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "tie_word_embeddings": not text["tie_word_embeddings"],
        "text_config": text,
        "torch_dtype": "float32",
    }


def random_weights(cfg: dict, seed: int) -> dict:
    """MLX-layout name -> f32 numpy array, the values as mlx-lm applies them."""
    import mlx.core as mx  # noqa: F401 (mlx must be importable for the model class)
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3_5

    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(copy.deepcopy(cfg)))
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in tree_flatten(model.parameters()):
        shape = tuple(v.shape)
        if k.endswith("A_log"):
            a = np.log(rng.uniform(0.2, 6.0, size=shape))
        elif k.endswith("dt_bias"):
            a = rng.standard_normal(shape) * 0.5
        elif k.endswith("conv1d.weight"):
            a = rng.standard_normal(shape) * 0.4
        elif k.endswith("norm.weight"):
            a = 1.0 + 0.25 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) * 0.08
            if k.endswith("embed_tokens.weight"):
                a[:, 5] *= 4.0  # a residual outlier channel
        out[k] = a.astype(np.float32)
    return out


def mtp_weights(text: dict, seed: int) -> dict:
    """The multi-token-prediction head a real Qwen3.5 checkpoint carries (HF names only)."""
    rng = np.random.default_rng(seed + 1000)
    h, hd = text["hidden_size"], text["head_dim"]
    nh, nkv, inter = text["num_attention_heads"], text["num_key_value_heads"], text["intermediate_size"]
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
        "mtp.layers.0.input_layernorm.weight": (h,),
        "mtp.layers.0.post_attention_layernorm.weight": (h,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * nh * hd, h),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.o_proj.weight": (h, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (inter, h),
        "mtp.layers.0.mlp.up_proj.weight": (inter, h),
        "mtp.layers.0.mlp.down_proj.weight": (h, inter),
    }
    return {k: (rng.standard_normal(s) * 0.08).astype(np.float32) for k, s in shapes.items()}


def to_hf(weights: dict) -> dict:
    """mlx-lm's sanitize run backwards: HF names, conv1d [C, 1, K], zero-centred norms."""
    out = {}
    for k, v in weights.items():
        if k == "language_model.lm_head.weight":
            name = "lm_head.weight"
        else:
            assert k.startswith("language_model.model."), k
            name = "model.language_model." + k[len("language_model.model."):]
        if k.endswith("conv1d.weight"):
            v = np.ascontiguousarray(np.moveaxis(v, 2, 1))  # [C, K, 1] -> [C, 1, K]
        if any(k.endswith(s) for s in SHIFTED):
            v = v - 1.0
        out[name] = v
    return out




def write_geometry(d: pathlib.Path, geo: dict, seed: int = 0, layout: str | None = None,
                   dtype: str = "float32"):
    """Writes a checkpoint of geometry `geo` (as in GEOMETRIES) into directory d: config.json,
    model.safetensors (weights in `dtype`: float32 or bfloat16), a word-level tokenizer."""
    import mlx.core as mx

    layout = layout or geo["layout"]
    cfg = config_json(geo)
    cfg["torch_dtype"] = dtype
    weights = random_weights(cfg, seed)
    if layout == "hf":
        weights = to_hf(weights)
        weights.update(mtp_weights(geo["text"], seed))
    d.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(d / "model.safetensors"),
                        {k: mx.array(v).astype(getattr(mx, dtype)) for k, v in
                         sorted(weights.items())},
                        metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(d, geo["text"]["vocab_size"])
    return d


def write_qwen35(d: pathlib.Path, name: str, seed: int = 0, layout: str | None = None):
    """Writes geometry `name` of GEOMETRIES into directory d, f32."""
    return write_geometry(d, GEOMETRIES[name], seed, layout)


if __name__ == "__main__":
    write_qwen35(pathlib.Path(sys.argv[1]), sys.argv[2])
