"""Stock mlx_lm.awq (mlx-cpu) on given calibration rows, for bench/quality_frontier.sh.

Usage: python bench/mlx_awq_side.py SRC_DIR OUT_DIR BITS GROUP CALIB.i32 SEQ_LEN
CALIB.i32 holds the token rows tq used (`tq convert --gptq --calib-save`), little-endian int32
[rows, SEQ_LEN]. Its CLI downloads calibration text, which this machine cannot reach, so this
calls awq_quantize (scale and clip search, n_grid 20 as its CLI) with the embedding at the same
BITS/GROUP as the layers, then update_config and save. Computed in f32 (mlx-cpu has BLAS for f32
only), the model cast to bf16 before saving, as `mlx_lm.convert --dtype bfloat16` would.
Run it with the system OpenBLAS preloaded or mlx-cpu is ~30x slower.
"""
import json
import sys
import time

import numpy as np


def main():
    src, out, bits, group, calib, seq = sys.argv[1:7]
    import mlx.core as mx
    from mlx_lm.quant.awq import AWQ_MODEL_CONFIGS, awq_quantize, update_config
    from mlx_lm.utils import compute_bits_per_weight, load, save

    mx.set_default_device(mx.cpu)
    mx.random.seed(123)
    rows = np.fromfile(calib, dtype="<i4").reshape(-1, int(seq))
    t0 = time.time()
    model, tokenizer, config = load(src, lazy=True, return_config=True)
    awq_config = AWQ_MODEL_CONFIGS[config["model_type"]]
    awq_quantize(model, mx.array(rows), awq_config, group_size=int(group), bits=int(bits),
                 embed_group_size=int(group), embed_bits=int(bits), n_grid=20)
    config = update_config(model, config)
    model.set_dtype(mx.bfloat16)
    config["torch_dtype"] = "bfloat16"
    bpw = compute_bits_per_weight(model)
    save(out, src, model, tokenizer, config)
    print(json.dumps({"bpw": bpw, "wall_s": time.time() - t0}))


if __name__ == "__main__":
    main()
