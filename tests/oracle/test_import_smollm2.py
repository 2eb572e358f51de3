"""`tq import` of the real SmolLM2-135M-Instruct Q4_1 GGUF, checked against independent readers.

(i)   every tensor equals the `gguf` package's dequantization after HF renaming and undoing
      llama.cpp's q/k row permutation in numpy (max |diff| = 0 in f32);
(ii)  stock mlx-lm loads the directory and generates greedily;
(iii) transformers' AutoTokenizer loads the directory.
Plus the command's contract: no partial output, refusal to overwrite, one-line errors.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}")

# GGUF name pieces -> HF names (the documented mapping; the C++ side has its own table).
GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def run_tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True)


def unpermute(w, n_head):
    """Inverse of llama.cpp's w.reshape(n, 2, hd/2, in).swapaxes(1, 2).reshape(out, in)."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imp") / "smollm2"
    r = run_tq("import", GGUF, "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def load_safetensors(d):
    from safetensors.numpy import load_file

    tensors = {}
    for p in sorted(d.glob("model*.safetensors")):
        tensors.update(load_file(p))
    return tensors


def test_tensors_equal_gguf_dequantization(imported):
    import gguf

    reader = gguf.GGUFReader(GGUF)
    n_head = int(reader.fields["llama.attention.head_count"].parts[-1][0])
    n_kv = int(reader.fields["llama.attention.head_count_kv"].parts[-1][0])
    ours = load_safetensors(imported)
    seen = set()
    worst = 0.0
    for t in reader.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if t.name in GLOBAL:
            name = GLOBAL[t.name]
        else:
            blk, layer, kind, suffix = t.name.split(".")
            assert blk == "blk"
            name = f"model.layers.{layer}.{LAYER[kind]}.{suffix}"
            if kind == "attn_q":
                ref = unpermute(ref, n_head)
            elif kind == "attn_k":
                ref = unpermute(ref, n_kv)
        got = ours[name]
        assert got.dtype == np.float32, name
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        worst = max(worst, float(np.abs(got - ref).max()))
        seen.add(name)
    assert worst == 0.0
    assert seen == set(ours), set(ours) ^ seen
    assert "lm_head.weight" not in ours  # tied, as in the source
    assert len(ours) == 272


def test_config_and_files(imported):
    cfg = json.loads((imported / "config.json").read_text())
    assert list(cfg) == sorted(cfg)
    expect = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "intermediate_size": 1536,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    assert {k: cfg.get(k) for k in expect} == expect
    names = {p.name for p in imported.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
            "generation_config.json", "model.safetensors.index.json"} <= names
    assert not [n for n in names if ".tmp" in n or ".partial" in n]
    tc = json.loads((imported / "tokenizer_config.json").read_text())
    assert tc["chat_template"].startswith("{% for message in messages %}")
    assert tc["bos_token"] == "<|im_start|>" and tc["eos_token"] == "<|im_end|>"
    assert tc["add_bos_token"] is False
    gc = json.loads((imported / "generation_config.json").read_text())
    assert gc["eos_token_id"] == 2 and gc["bos_token_id"] == 1


def test_mlx_lm_loads_and_generates(imported):
    from mlx_lm import generate, load

    model, tok = load(str(imported))
    text = generate(model, tok, prompt="The capital of France is", max_tokens=8, verbose=False)
    assert text.strip()
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    answer = generate(model, tok, prompt=prompt, max_tokens=12, verbose=False)
    # Greedy decoding of the dequantized model; a wrong q/k unpermutation gives gibberish.
    assert "Paris" in answer, answer


def test_autotokenizer_loads(imported):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(imported))
    # Ids llama.cpp gives for this text with the GGUF's own vocabulary.
    assert tok("Hello world! 123", add_special_tokens=False)["input_ids"] == [
        19556, 905, 17, 216, 33, 34, 35]
    assert tok.eos_token == "<|im_end|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert chat.startswith("<|im_start|>system\n")


def test_bf16_output_is_rounded_f32(imported, tmp_path):
    out = tmp_path / "bf16"
    r = run_tq("import", GGUF, "-o", out, "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    name = "model.layers.0.self_attn.q_proj.weight"
    f32 = load_safetensors(imported)[name]
    # bf16 bits from the file, compared with round-to-nearest-even of the f32 values.
    dtype, raw = _tensor_bytes(out / "model.safetensors", name)
    assert dtype == "BF16"
    bits = np.frombuffer(raw, dtype=np.uint16)
    u = f32.view(np.uint32).ravel()
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(bits, rne)


def _tensor_bytes(path, name):
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
        begin, end = header[name]["data_offsets"]
        fh.seek(8 + n + begin)
        return header[name]["dtype"], fh.read(end - begin)


def test_refuses_non_empty_dir_and_force_replaces(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    r = run_tq("import", GGUF, "-o", out)
    assert r.returncode != 0
    assert "exists and is not empty" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    r = run_tq("import", GGUF, "-o", out, "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no staging/old leftovers


def test_bad_inputs_fail_cleanly(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(GGUF.read_bytes()[: 20 << 20])  # truncated: tensor data past EOF
    out = tmp_path / "out"
    r = run_tq("import", bad, "-o", out)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "past the end of the file" in lines[0]
    r = run_tq("import", tmp_path / "missing.gguf", "-o", out)
    assert r.returncode != 0 and "missing.gguf: cannot open" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gguf"]  # nothing written
