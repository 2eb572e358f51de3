"""Fixture files shared by the dequantization oracle tests.

A fixture directory holds `cases.json` (metadata; every array is referenced as [offset, nbytes]
into the blob) and `data.bin` (the raw little-endian arrays). The C++ side reads it in
tests/formats/fixture_reader.h and is run as a gtest filtered to one oracle test.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


class FixtureWriter:
    def __init__(self):
        self.blob = bytearray()
        self.cases = []

    def add(self, arr) -> list:
        """Appends an array's raw bytes (16-byte aligned) and returns its [offset, nbytes]."""
        data = np.ascontiguousarray(arr).tobytes()
        self.blob.extend(b"\0" * (-len(self.blob) % 16))
        off = len(self.blob)
        self.blob.extend(data)
        return [off, len(data)]

    def write(self, out_dir: Path, **extra) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "data.bin").write_bytes(bytes(self.blob))
        meta = {"cases": self.cases, **extra}
        (out_dir / "cases.json").write_text(json.dumps(meta, indent=1))


def tests_binary() -> Path:
    return Path(os.environ.get("TQ_TESTS_BIN", REPO / "build" / "tq_tests"))


def run_gtest(gtest_filter: str, env_var: str, fixture_dir: Path) -> str:
    """Runs the C++ oracle test on a fixture; fails unless it ran (not skipped) and passed."""
    binary = tests_binary()
    assert binary.exists(), f"{binary} not found: build it or set TQ_TESTS_BIN"
    env = dict(os.environ, **{env_var: str(fixture_dir)})
    proc = subprocess.run([str(binary), f"--gtest_filter={gtest_filter}"], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    m = re.search(r"\[  PASSED  \] (\d+) tests?", out)
    assert m and int(m.group(1)) >= 1, out[-8000:]
    assert "[  SKIPPED ]" not in out, out[-8000:]
    return out
