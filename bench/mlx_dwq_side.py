"""Stock mlx_lm.dwq (mlx-cpu) on given calibration rows, for bench/quality_frontier.sh.

Usage: python bench/mlx_dwq_side.py SRC_DIR OUT_DIR BITS GROUP CALIB.i32 SEQ_LEN ROWS
The student is the RTN quantization at BITS/GROUP (as its CLI without --quantized-model); its
scales and biases are trained to match the f32 teacher's logits (dwq_quantize: KL at
temperature 2, Adam at its CLI's 1e-6, batch 4) on the first ROWS token rows of CALIB.i32 (the
SOTU rows tq used), 4 more rows for validation. Its CLI downloads a chat dataset, which this
machine cannot reach; far fewer samples than its default 2048 fit the time here, which the
table says. Cast to bf16 before saving. Run it with the system OpenBLAS preloaded.
"""
import copy
import json
import sys
import time

import numpy as np


def main():
    src, out, bits, group, calib, seq, nrows = sys.argv[1:8]
    import mlx.core as mx
    import mlx.optimizers as optimizers
    from mlx_lm.quant.dwq import dwq_quantize
    from mlx_lm.utils import compute_bits_per_weight, load, quantize_model, save

    mx.set_default_device(mx.cpu)
    np.random.seed(123)
    mx.random.seed(123)
    rows = np.fromfile(calib, dtype="<i4").reshape(-1, int(seq))
    n = int(nrows)
    train = [(r.tolist(), 0) for r in rows[:n]]
    valid = [(r.tolist(), 0) for r in rows[n:n + 4]]
    t0 = time.time()
    model, tokenizer, config = load(src, return_config=True)
    q_model = copy.deepcopy(model)
    _, config = quantize_model(q_model, config, group_size=int(group), bits=int(bits))
    opt = optimizers.Adam(learning_rate=1e-6, bias_correction=True)
    dwq_quantize(q_model, lambda batch, idx, split: model(batch), opt, train, valid,
                 batch_size=4, max_seq_length=int(seq) + 1, seed=123, dtype=mx.float32)
    q_model.set_dtype(mx.bfloat16)
    config["torch_dtype"] = "bfloat16"
    bpw = compute_bits_per_weight(q_model)
    save(out, src, q_model, tokenizer, config)
    print(json.dumps({"bpw": bpw, "wall_s": time.time() - t0}))


if __name__ == "__main__":
    main()
