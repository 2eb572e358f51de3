"""Oracle: tq's dequantize_mlx equals mx.dequantize (mlx CPU) bit for bit.

Vectors come from mx.quantize on seeded data (every bits x group x scale dtype, constant,
all-zero and outlier groups) plus raw random codes/scales; the expected output is
mx.dequantize with default arguments, stored as raw bits of its dtype. The comparison runs in
the C++ test MlxDequantOracle (tests/formats/mlx_oracle_test.cc).

Standalone: python tests/oracle/test_mlx_dequant.py OUT_DIR writes the fixture only.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dequant_fixture import FixtureWriter, run_gtest  # noqa: E402

DTYPE_NAMES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "uint8": "U8"}


def _bits_of(mx, a) -> np.ndarray:
    """Raw bit patterns of an mlx array (uint16 for 16-bit floats, uint32 for f32)."""
    if a.dtype == mx.float32:
        return np.array(a.view(mx.uint32))
    if a.dtype in (mx.bfloat16, mx.float16):
        return np.array(a.view(mx.uint16))
    return np.array(a)


def _name(mx, dt) -> str:
    return DTYPE_NAMES[str(dt).split(".")[-1]]


def _test_matrix(rng, rows, cols):
    """Rows of different character: zeros, constants, tiny values, outliers, plain normals."""
    w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    w[0] = 0.0
    w[1] = 0.37
    w[2] = -1.25
    w[3] *= 1e-5  # ranges below eps*n_bins: the degenerate q0 == 0 path
    w[4, ::17] = 40.0  # outliers
    w[5, 3::29] = -300.0
    w[6, :32] = 0.0  # one all-zero group in a normal row
    w[7] = rng.uniform(-8, 8, cols)
    return w


def _add_case(fw, mx, name, q, scales, biases, deq, mode, bits, gs, rows, cols):
    case = {
        "name": name, "mode": mode, "bits": bits, "group_size": gs, "rows": rows, "cols": cols,
        "scale_dtype": _name(mx, scales.dtype), "out_dtype": _name(mx, deq.dtype),
        "weight": fw.add(np.array(q)), "scales": fw.add(_bits_of(mx, scales)),
        "biases": None if biases is None else fw.add(_bits_of(mx, biases)),
        "expected": fw.add(_bits_of(mx, deq)),
    }
    fw.cases.append(case)


def _random_float_bits(rng, shape, dt_name):
    """Random finite values of a 16/32-bit float type (all exponents, incl. subnormals)."""
    if dt_name == "F32":
        u = rng.integers(0, 0x7F800000, shape, dtype=np.uint32)
        u |= rng.integers(0, 2, shape, dtype=np.uint32) << 31
        return u.view(np.float32)
    if dt_name == "F16":
        u = rng.integers(0, 0x7C00, shape, dtype=np.uint16)
    else:
        u = rng.integers(0, 0x7F80, shape, dtype=np.uint16)
    return u | (rng.integers(0, 2, shape, dtype=np.uint16) << 15)


def build_fixture(out_dir: Path) -> int:
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(20240601)
    fw = FixtureWriter()
    rows, cols = 8, 256

    # Affine: every bits x group x scale dtype on data quantized by mx.quantize.
    for dt in (mx.bfloat16, mx.float16, mx.float32):
        for bits in (1, 2, 3, 4, 5, 6, 8):
            for gs in (32, 64, 128):
                w = mx.array(_test_matrix(rng, rows, cols)).astype(dt)
                q, s, b = mx.quantize(w, group_size=gs, bits=bits)
                deq = mx.dequantize(q, s, b, group_size=gs, bits=bits)
                _add_case(fw, mx, f"affine b{bits} g{gs} {dt}", q, s, b, deq, "affine", bits, gs,
                          rows, cols)

    # Affine with random codes and random finite scale/bias bit patterns: exercises every
    # rounding path (subnormal products, f16 overflow to inf, cancellation in s*q + b).
    for dt, dname in ((mx.bfloat16, "BF16"), (mx.float16, "F16"), (mx.float32, "F32")):
        for bits, gs in ((3, 32), (4, 64), (6, 32), (8, 128)):
            r, c = 16, 256
            q = rng.integers(0, 2**32, (r, c * bits // 32), dtype=np.uint64).astype(np.uint32)
            shape = (r, c // gs)
            np_dt = {"BF16": np.uint16, "F16": np.uint16, "F32": np.float32}[dname]
            s_raw = _random_float_bits(rng, shape, dname).astype(np_dt)
            b_raw = _random_float_bits(rng, shape, dname).astype(np_dt)
            if dname == "F32":
                s, b = mx.array(s_raw), mx.array(b_raw)
            else:
                s, b = mx.array(s_raw).view(dt), mx.array(b_raw).view(dt)
            # Half the groups get moderate magnitudes so s*q and b interact.
            s2 = mx.array(rng.standard_normal(shape).astype(np.float32) * 1e-2).astype(dt)
            b2 = mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dt)
            mask = mx.array(rng.integers(0, 2, shape).astype(bool))
            s, b = mx.where(mask, s, s2), mx.where(mask, b, b2)
            deq = mx.dequantize(mx.array(q), s, b, group_size=gs, bits=bits)
            _add_case(fw, mx, f"affine raw b{bits} g{gs} {dname}", mx.array(q), s, b, deq,
                      "affine", bits, gs, r, c)

    # Floating-point modes on real data and on raw codes/scales (every scale byte).
    for mode, gs, bits in (("mxfp4", 32, 4), ("nvfp4", 16, 4), ("mxfp8", 32, 8)):
        for dt in (mx.bfloat16, mx.float32):
            w = mx.array(_test_matrix(rng, rows, cols)).astype(dt)
            q, s = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
            deq = mx.dequantize(q, s, group_size=gs, bits=bits, mode=mode)
            _add_case(fw, mx, f"{mode} quantized {dt}", q, s, None, deq, mode, bits, gs, rows,
                      cols)
        r, c = 32, 256
        q = rng.integers(0, 2**32, (r, c * bits // 32), dtype=np.uint64).astype(np.uint32)
        s = (np.arange(r * c // gs) % 256).astype(np.uint8).reshape(r, c // gs)
        deq = mx.dequantize(mx.array(q), mx.array(s), group_size=gs, bits=bits, mode=mode)
        _add_case(fw, mx, f"{mode} raw", mx.array(q), mx.array(s), None, deq, mode, bits, gs, r,
                  c)
        if bits == 8:  # every element code under every scale byte
            codes = np.tile(np.arange(256, dtype=np.uint8), (256, 1))
            s = np.repeat(np.arange(256, dtype=np.uint8), 256 // gs).reshape(256, 256 // gs)
            q = mx.array(codes.view(np.uint32))
            deq = mx.dequantize(q, mx.array(s), group_size=gs, bits=bits, mode=mode)
            _add_case(fw, mx, f"{mode} all codes", q, mx.array(s), None, deq, mode, bits, gs,
                      256, 256)

    fw.write(out_dir, mlx_version=mx.__version__)
    return len(fw.cases)


def test_mlx_dequant_matches_mx_dequantize(tmp_path):
    n = build_fixture(tmp_path)
    assert n > 70
    out = run_gtest("MlxDequantOracle*", "TQ_MLX_FIXTURE_DIR", tmp_path)
    assert f"compared {n} cases" in out, out[-4000:]


if __name__ == "__main__":
    print(build_fixture(Path(sys.argv[1])), "cases written to", sys.argv[1])
