"""Oracle: tq's dequantize_ggml equals gguf-py's gguf.quants.dequantize bit for bit.

Covers all 14 decodable types: blocks made by gguf.quants.quantize where gguf-py has a
quantizer, random raw blocks (random but finite f16 scale fields) for every type, and real
tensors from the SmolLM2 Q4_1 GGUF when it is in the cache. The comparison runs in the C++
test GgmlDequantOracle (tests/formats/ggml_oracle_test.cc), which also checks tq's type table
against gguf's GGML_QUANT_SIZES.

Standalone: python tests/oracle/test_ggml_dequant.py OUT_DIR writes the fixture only.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dequant_fixture import FixtureWriter, run_gtest  # noqa: E402

DECODABLE = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4"]
QUANTIZABLE = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"]
# Byte offsets of the f16 scale fields inside one block, per type.
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def _random_blocks(rng, n_blocks, type_size, f16_fields):
    """Random block bytes whose f16 scale fields are finite: half raw bit patterns (incl.
    subnormals and huge values), half realistic magnitudes."""
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    for off in f16_fields:
        raw = rng.integers(0, 0x7C00, n_blocks, dtype=np.uint16)
        raw |= rng.integers(0, 2, n_blocks, dtype=np.uint16) << 15
        real = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16).view(np.uint16)
        vals = np.where(rng.integers(0, 2, n_blocks).astype(bool), raw, real)
        blocks[:, off:off + 2] = vals.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return blocks


def _test_rows(rng, rows, cols):
    w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    w[0] = 0.0
    w[1] = 0.37
    w[2, ::7] = 25.0
    w[3] *= 1e-6
    return w


def build_fixture(out_dir: Path) -> int:
    import gguf
    from gguf import GGMLQuantizationType as T

    rng = np.random.default_rng(987654)
    fw = FixtureWriter()

    def add(name, qtype, data_u8, n):
        expected = gguf.quants.dequantize(data_u8, qtype).astype(np.float32, copy=False)
        assert expected.size == n
        fw.cases.append({"name": name, "type": int(qtype), "n": n,
                         "data": fw.add(data_u8), "expected": fw.add(expected)})

    for tname in QUANTIZABLE:
        qtype = T[tname]
        w = _test_rows(rng, 8, 512)
        add(f"{tname} quantized", qtype, gguf.quants.quantize(w, qtype).view(np.uint8), w.size)

    for tname in DECODABLE:
        qtype = T[tname]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = 4096 // block if block > 1 else 4096
        blocks = _random_blocks(rng, n_blocks, size, F16_FIELDS.get(tname, []))
        add(f"{tname} random blocks", qtype, blocks, n_blocks * block)

    model = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant")) / \
        "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if model.exists():
        reader = gguf.GGUFReader(model)
        wanted = {"token_embd.weight": 32, "blk.0.ffn_down.weight": 64,
                  "blk.0.attn_q.weight": 64, "blk.0.attn_norm.weight": 1}
        for t in reader.tensors:
            if t.name in wanted:
                data = np.ascontiguousarray(t.data[:wanted[t.name]]).view(np.uint8)
                block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
                add(f"{model.name}:{t.name}", t.tensor_type, data, data.size // size * block)

    table = [{"id": int(q), "name": q.name, "block": b, "size": s}
             for q, (b, s) in gguf.GGML_QUANT_SIZES.items()]
    fw.write(out_dir, ggml_types=table, decodable=DECODABLE)
    return len(fw.cases)


def test_ggml_dequant_matches_gguf(tmp_path):
    n = build_fixture(tmp_path)
    assert n >= 21
    out = run_gtest("GgmlDequantOracle*", "TQ_GGML_FIXTURE_DIR", tmp_path)
    assert f"compared {n} cases" in out, out[-4000:]


if __name__ == "__main__":
    print(build_fixture(Path(sys.argv[1])), "cases written to", sys.argv[1])
