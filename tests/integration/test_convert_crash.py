"""Crash safety of `tq convert`: SIGKILL at 10 random moments and SIGINT at 5 more during the
conversion of a ~220 MB checkpoint. After each, DST is absent (or the previous complete artifact
when --force was replacing one) or the complete new artifact, which tq reads back; a SIGINT
leaves no staging directory, and the next run clears the staging directory a SIGKILL left."""
import json
import random
import shutil
import signal
import subprocess
import time

import pytest

from tinymodels import TINY_LLAMA, write_tiny_hf_dir

# 16 layers, hidden 512, MLP 1536, 8192-token vocabulary (tied): ~55M f32 parameters.
CFG = dict(TINY_LLAMA, hidden_size=512, num_hidden_layers=16, intermediate_size=1536,
           num_attention_heads=8, num_key_value_heads=4, vocab_size=8192)


def staging_dirs(target):
    return sorted(p.name for p in target.parent.glob(target.name + ".tmp-*"))


def state(tq_bin, target):
    """None if absent, else the bits of the complete artifact (asserting it is complete)."""
    if not target.exists():
        return None
    names = sorted(p.name for p in target.iterdir())
    assert names == ["config.json", "model.safetensors", "model.safetensors.index.json",
                     "tq_metadata.json"], names
    r = subprocess.run([tq_bin, "inspect", str(target), "--json"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    bits = info["quantization"]["global"]["bits"]
    # f32 source, quantized output: norms in bf16, the default for a quantized output
    assert info["storage"] == {f"affine {bits}-bit g64": 16 * 7 + 1, "BF16": 16 * 2 + 1}, info
    return bits


def start(tq_bin, src, target, bits, force):
    cmd = [tq_bin, "convert", str(src), "-o", str(target), "--bits", str(bits)]
    if force:
        cmd.append("--force")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_kill_and_interrupt_leave_old_or_complete_output(tq_bin, tmp_path):
    src = write_tiny_hf_dir(tmp_path / "src", cfg=CFG)
    dst, fresh = tmp_path / "dst", tmp_path / "fresh"
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-v", tq_bin, "convert", str(src), "-o", str(dst),
                        "--bits", "4"], capture_output=True, text=True, timeout=300)
    duration = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert state(tq_bin, dst) == 4
    # Streaming: peak RSS far below the 220 MB of f32 weights converted (one 12.6 MB layer, or
    # the 16.8 MB embedding, in f32 at a time, plus the binary).
    peak_kb = int(next(l for l in r.stderr.splitlines() if "Maximum resident" in l).split()[-1])
    print(f"one conversion: {duration:.2f} s, peak RSS {peak_kb / 1024:.0f} MiB")
    assert peak_kb < 120 * 1024, peak_kb

    rng = random.Random(20250704)
    outcomes = []
    for i in range(15):
        sig = signal.SIGKILL if i < 10 else signal.SIGINT
        replace = i % 2 == 0  # --force onto the previous artifact, else into an absent DST
        target = dst if replace else fresh
        old = state(tq_bin, target)
        assert len(staging_dirs(target)) <= 1  # each run clears what the previous kill left
        new_bits = 8 if old == 4 else 4
        p = start(tq_bin, src, target, new_bits, replace)
        time.sleep(rng.uniform(0.02, 1.2) * duration)
        p.send_signal(sig)
        rc = p.wait(timeout=120)
        now = state(tq_bin, target)
        outcomes.append((sig.name, replace, rc, old, now))
        assert now in (old, new_bits), outcomes[-1]
        if rc == 0:
            assert now == new_bits
        if sig == signal.SIGINT:
            assert staging_dirs(target) == [], (outcomes[-1], staging_dirs(target))
            if rc != 0:
                assert "interrupted" in p.stderr.read()
        if not replace and now is not None:
            shutil.rmtree(fresh)  # keep the non-forced case writing into an absent DST
    print("\n".join(map(str, outcomes)))
    # Some kills must land mid-conversion for the test to mean anything.
    assert sum(1 for o in outcomes if o[2] != 0) >= 8, outcomes
    # A complete run clears whatever staging directory a SIGKILL left.
    for target in (dst, fresh):
        assert start(tq_bin, src, target, 4, True).wait(timeout=300) == 0
        assert staging_dirs(target) == []
        assert state(tq_bin, target) == 4
