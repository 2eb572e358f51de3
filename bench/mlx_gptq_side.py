"""Stock mlx_lm.gptq (mlx-cpu) on given calibration rows, for bench/gptq_quality.sh.

Usage: python bench/mlx_gptq_side.py SRC_DIR OUT_DIR BITS GROUP CALIB.i32 SEQ_LEN
CALIB.i32 holds the token rows tq used (`tq convert --gptq --calib-save`), little-endian int32
[rows, SEQ_LEN]. Runs mlx_lm.quant.gptq.gptq_quantize (fallback 6-bit g64 for the embedding, as
its CLI) and saves with mlx_lm.utils.save; prints the wall time of quantization + save.
Run it with the system OpenBLAS preloaded (tests/oracle/mlx_forward_ref.openblas_env) or mlx-cpu
is ~30x slower.
"""
import sys
import time

import numpy as np


def main():
    src, out, bits, group, calib, seq = sys.argv[1:7]
    import mlx.core as mx
    from mlx_lm.quant.gptq import gptq_quantize
    from mlx_lm.utils import load, save

    mx.set_default_device(mx.cpu)
    rows = np.fromfile(calib, dtype="<i4").reshape(-1, int(seq))
    t0 = time.time()
    model, tokenizer, config = load(src, lazy=True, return_config=True)
    data = mx.array(rows)
    model, config["quantization"] = gptq_quantize(model, data, int(bits), int(group), 6, 64)
    save(out, src, model, tokenizer, config)
    print(f"mlx_lm.gptq wall_s {time.time() - t0:.1f}")


if __name__ == "__main__":
    main()
