"""Oracle: tq's GPTQ equals a straightforward numpy implementation of the paper's algorithm.

The numpy reference below follows FORMATS.md §5.2 step by step (dead columns, optional
act-order with static groups, relative damping, U = chol_upper(H⁻¹), the column sweep with
in-block error feedback and the lazy block update), on the MLX affine grid of §2.2 computed
in float32 with scale and bias rounded to the stored dtype before codes are chosen. The sweep
runs in float64 on the float32 rounding of the updated weights, as tq does; H = (2/n)XᵀX and
the proxy loss is tr((W−Q) H (W−Q)ᵀ).

The fixture holds X, W, H and numpy's codes, Q and losses; the C++ test GptqOracle
(tests/quant/gptq_oracle_test.cc) recomputes H with HessianAccumulator, runs gptq_quantize
on numpy's H and compares: identical codes, Q bit for bit, losses within 1e-4 relative.

Standalone: python tests/oracle/test_gptq.py OUT_DIR writes the fixture only.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dequant_fixture import FixtureWriter, run_gtest  # noqa: E402

F32 = np.float32


def round_dtype(x, dtype):
    """float32 values rounded to bf16/f16 (nearest even) and widened back; f32 unchanged."""
    x = np.asarray(x, F32)
    if dtype == "F16":
        return x.astype(np.float16).astype(F32)
    if dtype == "BF16":
        u = x.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return u.view(F32)
    return x


def mlx_affine_grid(g, bits, dtype):
    """Per-row grid of groups g [rows, gs] (float32): MLX's scale/bias, rounded to dtype."""
    g = np.asarray(g, F32)
    n_bins, eps = F32(2**bits - 1), F32(1e-7)
    hi, lo = g.max(axis=1), g.min(axis=1)
    s = np.maximum((hi - lo) / n_bins, eps)
    lo_edge = np.abs(lo) > np.abs(hi)
    s = np.where(lo_edge, s, -s).astype(F32)
    edge = np.where(lo_edge, lo, hi).astype(F32)
    q0 = np.rint(edge / s).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        refit = (edge / q0).astype(F32)
    s = np.where(q0 != 0, refit, s).astype(F32)
    b = np.where(q0 != 0, edge, F32(0)).astype(F32)
    return round_dtype(s, dtype), round_dtype(b, dtype)


def mlx_affine_code(w, s, b, bits):
    v = ((np.asarray(w, F32) - b) / s).astype(F32)
    return np.clip(np.rint(v), 0, 2**bits - 1).astype(np.uint8)


def mlx_affine_value(code, s, b, dtype):
    return round_dtype(round_dtype(s * code.astype(F32), dtype) + b, dtype)


def numpy_gptq(W, H, bits, gs, dtype, block=128, damp=0.01, act_order=False):
    """Returns codes [r, c] (uint8), Q [r, c] (float32). W float32, H float64."""
    r, c = W.shape
    W = W.astype(np.float64).copy()
    H = H.astype(np.float64).copy()
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    ng = c // gs
    scale = np.zeros((r, ng), F32)
    bias = np.zeros((r, ng), F32)
    if act_order:  # static groups from the (dead-zeroed) original contiguous columns
        for j in range(ng):
            scale[:, j], bias[:, j] = mlx_affine_grid(W[:, j * gs:(j + 1) * gs].astype(F32), bits,
                                                      dtype)
        perm = np.argsort(-np.diag(H), kind="stable")
    else:
        perm = np.arange(c)
    W = W[:, perm]
    H = H[perm][:, perm]
    H[np.diag_indices(c)] += damp * np.mean(np.diag(H))
    Hinv = np.linalg.inv(np.linalg.cholesky(H))
    Hinv = Hinv.T @ Hinv  # H⁻¹ from its Cholesky factor
    U = np.linalg.cholesky(Hinv).T  # upper, UᵀU = H⁻¹
    codes = np.zeros((r, c), np.uint8)
    Q = np.zeros((r, c), F32)
    B = max(gs, block // gs * gs)
    for i1 in range(0, c, B):
        i2 = min(i1 + B, c)
        W1 = W[:, i1:i2].copy()
        E1 = np.zeros_like(W1)
        for t in range(i2 - i1):
            col = perm[i1 + t]
            grp = col // gs
            if not act_order and col % gs == 0:
                scale[:, grp], bias[:, grp] = mlx_affine_grid(W1[:, t:t + gs].astype(F32), bits,
                                                              dtype)
            w = W1[:, t]
            code = mlx_affine_code(w.astype(F32), scale[:, grp], bias[:, grp], bits)
            q = mlx_affine_value(code, scale[:, grp], bias[:, grp], dtype)
            codes[:, col], Q[:, col] = code, q
            e = (w - q.astype(np.float64)) / U[i1 + t, i1 + t]
            W1[:, t + 1:] -= np.outer(e, U[i1 + t, i1 + t + 1:i2])
            E1[:, t] = e
        W[:, i2:] -= E1 @ U[i1:i2, i2:]
    return codes, Q


def rtn(W, bits, gs, dtype):
    r, c = W.shape
    Q = np.zeros((r, c), F32)
    for j in range(c // gs):
        g = W[:, j * gs:(j + 1) * gs].astype(F32)
        # RTN as mx.quantize: codes against the f32 grid, stored grid rounded to dtype
        s, b = mlx_affine_grid(g, bits, "F32")
        code = mlx_affine_code(g, s[:, None], b[:, None], bits)
        Q[:, j * gs:(j + 1) * gs] = mlx_affine_value(code, round_dtype(s, dtype)[:, None],
                                                     round_dtype(b, dtype)[:, None], dtype)
    return Q


def proxy_loss(W, Q, H):
    D = W.astype(np.float64) - Q.astype(np.float64)
    return float(np.sum((D @ H) * D))


def activations(rng, n, c, dead_every=0):
    mix = rng.standard_normal((8, c))
    col_scale = 0.2 + 2.0 * np.abs(rng.standard_normal(c))
    X = (rng.standard_normal((n, 8)) @ mix + 0.5 * rng.standard_normal((n, c))) * col_scale
    if dead_every:
        X[:, 3::dead_every] = 0.0
    return X.astype(F32)


CASES = [  # name, rows, cols, n, bits, group, dtype, block, act_order, dead_every
    ("4-bit g64 bf16", 96, 256, 1024, 4, 64, "BF16", 128, False, 0),
    ("3-bit g32 f32 block 64", 64, 256, 700, 3, 32, "F32", 64, False, 0),
    ("5-bit g128 f16", 48, 384, 900, 5, 128, "F16", 128, False, 0),
    ("6-bit g64 bf16 act-order", 64, 256, 800, 6, 64, "BF16", 128, True, 0),
    ("2-bit g32 bf16 act-order", 40, 256, 800, 2, 32, "BF16", 128, True, 0),
    ("4-bit g64 dead columns", 64, 256, 600, 4, 64, "BF16", 128, False, 16),
]


def build_fixture(out_dir: Path) -> int:
    rng = np.random.default_rng(20260706)
    fw = FixtureWriter()
    for name, r, c, n, bits, gs, dtype, block, act, dead_every in CASES:
        X = activations(rng, n, c, dead_every)
        W = round_dtype((rng.standard_normal((r, c)) * 0.05).astype(F32), dtype)
        Xd = X.astype(np.float64)
        H = 2.0 / n * (Xd.T @ Xd)
        codes, Q = numpy_gptq(W, H, bits, gs, dtype, block=block, act_order=act)
        loss = proxy_loss(W, Q, H)
        rtn_loss = proxy_loss(W, rtn(W, bits, gs, dtype), H)
        assert loss < rtn_loss, (name, loss, rtn_loss)
        fw.cases.append({
            "name": name, "rows": r, "cols": c, "n": n, "bits": bits, "group_size": gs,
            "dtype": dtype, "block": block, "act_order": act, "x": fw.add(X), "w": fw.add(W),
            "h": fw.add(H), "codes": fw.add(codes), "q": fw.add(Q), "loss": loss,
            "rtn_loss": rtn_loss,
        })
    fw.write(out_dir)
    return len(fw.cases)


def test_gptq_matches_numpy_reference(tmp_path):
    n = build_fixture(tmp_path)
    out = run_gtest("GptqOracle*", "TQ_GPTQ_FIXTURE_DIR", tmp_path)
    assert f"GptqOracle: compared {n} cases" in out, out[-4000:]


if __name__ == "__main__":
    print(build_fixture(Path(sys.argv[1])), "cases written to", sys.argv[1])
