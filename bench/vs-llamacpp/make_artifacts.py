#!/usr/bin/env python3
"""Builds the models bench/vs-llamacpp/run.py compares, into $TQ_CACHE/bench/vs-llamacpp:

SmolLM2-135M (from the cache's GGUF Q4_1):
  smollm2-f32/        `tq import` of the GGUF (dequantized source)
  smollm2-q4g64/      stock mlx-lm convert, 4-bit g64, bf16 (4.5 bpw; pair: the GGUF Q4_1 itself)
  smollm2-q8g64/      stock mlx-lm convert, 8-bit g64, bf16 (8.5 bpw; pair: smollm2-Q8_0.gguf)
  smollm2-Q8_0.gguf   the GGUF's metadata, every Q4_1 matrix dequantized and re-quantized to Q8_0
Llama-3.2-1B geometry, seeded random weights (speed does not depend on the values):
  llama1b-q4g64/, llama1b-q8g64/        MLX affine, bf16 scales/biases, tied embedding
  llama1b-Q4_0.gguf, llama1b-Q8_0.gguf  same geometry; SmolLM2's tokenizer padded with unused
                                        tokens to the 128256-entry vocabulary
  llama1b-q{2,3,5,6}g64, llama1b-{mxfp4,nvfp4,mxfp8}  (--only 1b-formats) the other formats
Usage: make_artifacts.py [--only smol|1b|1b-formats]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

import gguf

REPO = Path(__file__).resolve().parents[2]
TQ = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
WORK = CACHE / "bench" / "vs-llamacpp"
SMOL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Q = gguf.GGMLQuantizationType

L1B = dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
           num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256)


def copy_fields(reader, writer, skip=()):
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in skip:
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, f.contents(), t, f.types[-1])
        else:
            writer.add_key_value(name, f.contents(), t)


def smol_q8_gguf(out):
    r = gguf.GGUFReader(str(SMOL))
    w = gguf.GGUFWriter(str(out), "llama")
    copy_fields(r, w, skip=("general.file_type",))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order (rows last dim first)
        if t.tensor_type in (Q.F32, Q.F16):
            w.add_tensor(t.name, np.asarray(t.data))
            continue
        f = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)
        w.add_tensor(t.name, gguf.quants.quantize(f.astype(np.float32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def scale_dtype(d):
    """The dtype of the first quantized matrix's scales in an MLX directory (None if none)."""
    for f in sorted(d.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name.endswith(".scales"):
                return t["dtype"]
    return None


def smol():
    WORK.mkdir(parents=True, exist_ok=True)
    f32 = WORK / "smollm2-f32"
    if not f32.exists():
        subprocess.run([TQ, "import", str(SMOL), "-o", str(f32)], check=True)
    from mlx_lm import convert
    for bits in (4, 8):
        d = WORK / f"smollm2-q{bits}g64"
        # bf16, as SmolLM2 ships: scales and biases in bf16 (4.5 / 8.5 bpw). An f32 convert (the
        # dequantized source's dtype, 5.0 / 9.0 bpw, built before this) is replaced.
        if d.exists() and scale_dtype(d) != "BF16":
            shutil.rmtree(d)
        if not d.exists():
            convert(hf_path=str(f32), mlx_path=str(d), quantize=True, q_bits=bits, q_group_size=64,
                    dtype="bfloat16")
    if not (WORK / "smollm2-Q8_0.gguf").exists():
        smol_q8_gguf(WORK / "smollm2-Q8_0.gguf")


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, numpy array of raw bytes)."""
    header, off = {"__metadata__": {"format": "mlx"}}, 0
    for name, dt, shape, data in sorted(tensors, key=lambda x: x[0]):
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + data.nbytes]}
        off += data.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, dt, shape, data in sorted(tensors, key=lambda x: x[0]):
            f.write(data.tobytes())


def bf16(a):
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def llama1b_linears(c):
    d, i, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    qd, kvd = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens", c["vocab_size"], d)]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}"
        out += [(f"{p}.self_attn.q_proj", qd, d), (f"{p}.self_attn.k_proj", kvd, d),
                (f"{p}.self_attn.v_proj", kvd, d), (f"{p}.self_attn.o_proj", d, qd),
                (f"{p}.mlp.gate_proj", i, d), (f"{p}.mlp.up_proj", i, d),
                (f"{p}.mlp.down_proj", d, i)]
    return out


def llama1b_config(bits=None, mode="affine"):
    c = dict(L1B, architectures=["LlamaForCausalLM"], model_type="llama", rms_norm_eps=1e-5,
             rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
             hidden_act="silu", attention_bias=False, mlp_bias=False, torch_dtype="bfloat16",
             bos_token_id=128000, eos_token_id=128001,
             rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"})
    if bits:
        group = {"affine": 64, "mxfp4": 32, "nvfp4": 16, "mxfp8": 32}[mode]
        c["quantization"] = {"group_size": group, "bits": bits}
        if mode != "affine":
            c["quantization"]["mode"] = mode
        c["quantization_config"] = c["quantization"]
    return c


def llama1b_name(bits, mode="affine"):
    return f"llama1b-q{bits}g64" if mode == "affine" else f"llama1b-{mode}"


def llama1b_mlx(bits, rng, mode="affine"):
    """Random codes of an affine width (g64, bf16 scales and biases) or an fp mode (its group,
    E8M0/E4M3 scale bytes that keep the weights small)."""
    d = WORK / llama1b_name(bits, mode)
    if d.exists():
        return
    c = llama1b_config(bits, mode)
    group = c["quantization"]["group_size"]
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = []
    for name, rows, cols in llama1b_linears(c):
        words = rng.integers(0, 2**32, size=(rows, cols * bits // 32), dtype=np.uint32)
        if mode == "mxfp8":
            words &= np.uint32(0xBFBFBFBF)  # no NaN codes (0x7F/0xFF)
        tensors.append((f"{name}.weight", "U32", [rows, cols * bits // 32], words))
        if mode == "affine":
            s = rng.uniform(0.001, 0.01, size=(rows, cols // group)).astype(np.float32)
            tensors.append((f"{name}.scales", "BF16", [rows, cols // group], bf16(s)))
            tensors.append((f"{name}.biases", "BF16", [rows, cols // group],
                            bf16(-s * (2**bits) / 2)))
        else:
            lo, hi = (0x18, 0x20) if mode == "nvfp4" else (118, 122)
            sc = rng.integers(lo, hi, size=(rows, cols // group), dtype=np.uint8)
            tensors.append((f"{name}.scales", "U8", [rows, cols // group], sc))
    ones = bf16(np.ones(c["hidden_size"]))
    tensors.append(("model.norm.weight", "BF16", [c["hidden_size"]], ones))
    for l in range(c["num_hidden_layers"]):
        for n in ("input_layernorm", "post_attention_layernorm"):
            tensors.append((f"model.layers.{l}.{n}.weight", "BF16", [c["hidden_size"]], ones))
    write_safetensors(tmp / "model.safetensors", tensors)
    (tmp / "config.json").write_text(json.dumps(c, indent=2))
    tmp.rename(d)


def llama1b_gguf(qtype, rng):
    out = WORK / f"llama1b-{qtype.name}.gguf"
    if out.exists():
        return
    c = llama1b_config()
    r = gguf.GGUFReader(str(SMOL))
    w = gguf.GGUFWriter(str(out), "llama")
    keep = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.merges")
    for k in keep:
        f = r.fields[k]
        t = f.types[0]
        w.add_key_value(k, f.contents(), t, f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = list(r.fields["tokenizer.ggml.token_type"].contents())
    pad = c["vocab_size"] - len(toks)
    w.add_token_list(toks + [f"<unused_{i}>" for i in range(pad)])
    w.add_token_types(types + [gguf.TokenType.NORMAL] * pad)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_name("llama-3.2-1b-geometry-random")
    w.add_context_length(8192)
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_vocab_size(c["vocab_size"])
    w.add_file_type({Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
                     Q.Q5_0: gguf.LlamaFileType.MOSTLY_Q5_0,
                     Q.MXFP4: gguf.LlamaFileType.MOSTLY_MXFP4_MOE}[qtype])
    names = {"model.embed_tokens": "token_embd"}
    for l in range(c["num_hidden_layers"]):
        for hf, gg in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                       ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                       ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                       ("mlp.down_proj", "ffn_down")):
            names[f"model.layers.{l}.{hf}"] = f"blk.{l}.{gg}"
    block_bytes = {Q.Q4_0: 18, Q.Q8_0: 34, Q.Q5_0: 22, Q.MXFP4: 17}[qtype]
    for name, rows, cols in llama1b_linears(c):
        nb = cols // 32
        raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        if qtype == Q.MXFP4:
            raw[:, :, 0] = 120  # E8M0 block scale 2^-7
        else:
            raw[:, :, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)  # block scale
        # gguf takes the byte shape of a quantized tensor and derives [rows, cols] itself.
        w.add_tensor(f"{names[name]}.weight", raw.reshape(rows, nb * block_bytes), raw_dtype=qtype)
    ones = np.ones(c["hidden_size"], np.float32)
    w.add_tensor("output_norm.weight", ones)
    for l in range(c["num_hidden_layers"]):
        w.add_tensor(f"blk.{l}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{l}.ffn_norm.weight", ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def one_b():
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)
    for bits in (4, 8):
        if not (WORK / f"llama1b-q{bits}g64" / "model.safetensors").exists():
            llama1b_mlx(bits, rng)
    for qt in (Q.Q4_0, Q.Q8_0):
        llama1b_gguf(qt, rng)


# Every other format the converter writes, for bench/formats/run.py.
FORMATS = [(2, "affine"), (3, "affine"), (5, "affine"), (6, "affine"), (4, "mxfp4"),
           (4, "nvfp4"), (8, "mxfp8")]


def one_b_formats():
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4321)
    for bits, mode in FORMATS:
        llama1b_mlx(bits, rng, mode)
    for qt in (Q.Q5_0, Q.MXFP4):  # llama.cpp's peers of 5-bit g64 and mxfp4 (bench/vs-llamacpp)
        llama1b_gguf(qt, rng)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["smol", "1b", "1b-formats"])
    a = ap.parse_args()
    if a.only == "1b-formats":
        one_b_formats()
    else:
        if a.only != "1b":
            smol()
        if a.only != "smol":
            one_b()
