"""Oracle: tq's quantize_mlx equals mx.quantize (mlx CPU) bit for bit.

Inputs are f32, f16 and bf16 matrices with adversarial rows (constant, all-zero, negative-only,
positive-only, huge outliers, denormals of the dtype, exact rounding ties, random bit patterns
of every exponent). For every affine bits x group and every fp mode the fixture holds
mx.quantize's packed words, scales and biases and mx.dequantize of them; the C++ test
MlxQuantizeOracle (tests/formats/mlx_encode_oracle_test.cc) encodes the same inputs, compares
the bytes and decodes its own output against mx.dequantize.

Standalone: python tests/oracle/test_mlx_quantize.py OUT_DIR writes the fixture only.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dequant_fixture import FixtureWriter, run_gtest  # noqa: E402

ROWS, COLS = 40, 256
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
MIDPOINTS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
# Smallest positive subnormal and largest finite value per dtype.
TINY = {"F32": 2.0**-149, "F16": 2.0**-24, "BF16": 2.0**-133}
HUGE = {"F32": 3.4e38, "F16": 65504.0, "BF16": 3.38e38}


def _bits_of(mx, a) -> np.ndarray:
    if a.dtype == mx.float32:
        return np.array(a.view(mx.uint32))
    if a.dtype in (mx.bfloat16, mx.float16):
        return np.array(a.view(mx.uint16))
    return np.array(a)


def _random_float_bits(rng, n, dname) -> np.ndarray:
    """n random finite values of a float type (every exponent, subnormals), as f32."""
    if dname == "F32":
        u = rng.integers(0, 0x7F800000, n, dtype=np.uint32) | (
            rng.integers(0, 2, n, dtype=np.uint32) << 31)
        return u.view(np.float32)
    top = 0x7C00 if dname == "F16" else 0x7F80
    u = rng.integers(0, top, n, dtype=np.uint16) | (rng.integers(0, 2, n, dtype=np.uint16) << 15)
    if dname == "F16":
        return u.view(np.float16).astype(np.float32)
    return (u.astype(np.uint32) << 16).view(np.float32)


def _affine_ties(rng, bits, n):
    """Groups whose codes fall exactly on .5 in f32: w_min = -n_bins*s, w_max = 0, values at
    w_min + (k + 0.5)*s with s a power of two, so (w - bias)/scale = k + 0.5."""
    n_bins = 2**bits - 1
    out = np.empty(n, np.float32)
    for start in range(0, n, 32):
        s = 2.0 ** rng.integers(-12, 2)
        k = rng.integers(0, max(n_bins, 1), 32)
        g = (-n_bins * s + (k + 0.5) * s).astype(np.float32)
        g[0], g[1] = -n_bins * s, 0.0
        out[start:start + 32] = g
    return out


def _matrix(rng, dname, bits):
    """[ROWS, COLS] f32 values, then rounded to the dtype by the caller."""
    w = (rng.standard_normal((ROWS, COLS)) * 0.05).astype(np.float32)
    groups = w.reshape(ROWS, -1, 16)
    groups[0] = 0.0  # all-zero row
    groups[1] = rng.standard_normal((groups.shape[1], 1)) * 0.3  # constant 16-groups
    w[2] = -np.abs(w[2])  # negative only
    w[3] = np.abs(w[3]) + 0.01  # positive only
    w[4, ::17] = 40.0  # outliers of both signs
    w[4, 5::29] = -300.0
    w[5] = rng.standard_normal(COLS) * TINY[dname] * 8  # denormals of the dtype
    w[6] = rng.integers(-3, 4, COLS) * TINY[dname]
    w[7] *= 1e-5  # range below eps * n_bins: the q0 == 0 path
    w[8] = _affine_ties(rng, bits, COLS)
    # fp ties: E2M1 midpoints on a power-of-two scale, with a group max of 6 * 2^k
    k = rng.integers(-8, 8, (COLS // 32, 1))
    ties = rng.choice(np.concatenate([MIDPOINTS, -MIDPOINTS, E2M1, -E2M1]), (COLS // 32, 32))
    ties[:, 0] = 6.0
    w[9] = (ties * 2.0**k).ravel()
    w[10] = (rng.standard_normal(COLS) * np.exp(rng.uniform(-40, 40, COLS))).clip(
        -HUGE[dname] / 2, HUGE[dname] / 2)
    w[11] = rng.uniform(-8, 8, COLS)
    w[12] = HUGE[dname] * np.sign(rng.standard_normal(COLS))  # range overflows in f32
    w[13] = rng.standard_normal(COLS) * HUGE[dname] / 4
    w[14, :] = -0.0
    w[15] = rng.standard_normal(COLS) * 2.0 ** rng.integers(-30, 30)
    w[16] = 2.0 ** rng.integers(-20, 10, COLS) * 1.5  # a row of exact mantissa patterns
    w[17] = np.nextafter(np.float32(6.0) * 2.0 ** rng.integers(-10, 10, COLS),
                         np.float32(np.inf) * rng.choice([-1, 1], COLS)).astype(np.float32)
    for r in range(18, 26):
        w[r] = _random_float_bits(rng, COLS, dname)
    # non-negative groups holding +0 and -0: the 1-bit bias (w_min) keeps the first zero's sign
    w[26] = np.abs(w[26]) * (rng.random(COLS) < 0.5)
    w[26] *= np.where(w[26] == 0, rng.choice([-1.0, 1.0], COLS), 1.0)
    with np.errstate(over="ignore"):
        return w.astype(np.float32)


def build_fixture(out_dir: Path) -> int:
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(20250702)
    fw = FixtureWriter()
    dtypes = (("F32", mx.float32), ("F16", mx.float16), ("BF16", mx.bfloat16))
    fp_modes = (("mxfp4", 32, 4), ("nvfp4", 16, 4), ("mxfp8", 32, 8))
    for dname, dt in dtypes:
        for bits in (1, 2, 3, 4, 5, 6, 8, "fp"):
            w = mx.array(_matrix(rng, dname, 4 if bits == "fp" else bits)).astype(dt)
            wf = np.array(w.astype(mx.float32))
            ok = np.isfinite(wf).all(axis=1)  # f16 overflows some rows to inf: drop them
            w = w[mx.array(np.nonzero(ok)[0])]
            rows = int(ok.sum())
            ref = fw.add(np.array(w.astype(mx.float32)))
            if bits == "fp":
                specs = [(m, gs, b) for m, gs, b in fp_modes]
            else:
                specs = [("affine", gs, bits) for gs in (32, 64, 128)]
            for mode, gs, b in specs:
                out = mx.quantize(w, group_size=gs, bits=b, mode=mode)
                q, s = out[0], out[1]
                biases = out[2] if mode == "affine" else None
                if mode == "affine":
                    deq = mx.dequantize(q, s, biases, group_size=gs, bits=b)
                else:
                    deq = mx.dequantize(q, s, group_size=gs, bits=b, mode=mode)
                fw.cases.append({
                    "name": f"{mode} b{b} g{gs} {dname}", "mode": mode, "bits": b,
                    "group_size": gs, "rows": rows, "cols": COLS, "dtype": dname,
                    "out_dtype": {"bfloat16": "BF16", "float16": "F16",
                                  "float32": "F32"}[str(deq.dtype).split(".")[-1]],
                    "input": ref, "weight": fw.add(np.array(q)), "scales": fw.add(_bits_of(mx, s)),
                    "biases": None if biases is None else fw.add(_bits_of(mx, biases)),
                    "dequantized": fw.add(_bits_of(mx, deq)),
                })
    fw.write(out_dir, mlx_version=mx.__version__)
    return len(fw.cases)


def test_mlx_quantize_matches_mx_quantize(tmp_path):
    n = build_fixture(tmp_path)
    assert n == 3 * (7 * 3 + 3)
    out = run_gtest("MlxQuantizeOracle*", "TQ_MLX_ENCODE_FIXTURE_DIR", tmp_path)
    assert f"compared {n} cases" in out, out[-4000:]


if __name__ == "__main__":
    print(build_fixture(Path(sys.argv[1])), "cases written to", sys.argv[1])
