"""tq sensitivity on SmolLM2 (imported from the bundled GGUF): the table is complete and sane,
and a run killed with SIGKILL resumes without measuring any finished module again."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))


def finished_modules(path: Path):
    try:
        return json.loads(path.read_text())["modules"]
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_kill_and_resume_repeats_no_finished_module(smollm2_gguf, tmp_path):
    # The GGUF is read directly (dequantized); layers 2 and 20-29 keep the test short.
    out = tmp_path / "sens.json"
    args = [TQ_BIN, "sensitivity", str(smollm2_gguf), "--windows", "1", "--seq-len", "16",
            "--bits", "2,8", "--only", "layers.2", "-o", str(out), "--json"]
    n_mods = 11 * 7
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while len(finished_modules(out)) < 4 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, "finished before it could be killed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    before = finished_modules(out)  # the file is whole: written atomically
    assert 4 <= len(before) < n_mods

    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "--resume" in r.stderr  # no silent overwrite
    r = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["modules"] == n_mods
    assert summary["measured"] == n_mods - len(before)
    after = json.loads(out.read_text())
    names = [m["name"] for m in after["modules"]]
    assert len(set(names)) == n_mods and names[0] == "model.layers.2.self_attn.q_proj"
    assert names[-1] == "model.layers.29.mlp.down_proj"  # model order whatever the kill point
    by_name = {m["name"]: m for m in after["modules"]}
    for m in before:  # finished modules kept verbatim
        assert by_name[m["name"]] == m
    for m in after["modules"]:
        kl = {s["bits"]: s["kl"] for s in m["specs"]}
        assert kl[2] > kl[8] >= -1e-6, m["name"]
        assert m["specs"][0]["bytes"] == m["params"] // 4 + m["params"] // 64 * 4
    assert after["params_total"] == 134515008
    assert after["calibration"]["files"][0] == "2021_joseph_r_biden_d.txt"

    # A different spec list does not resume silently.
    r = subprocess.run(args[:7] + ["--bits", "4", "--only", "layers.2", "-o", str(out), "--resume"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "spec list" in r.stderr


def test_threads_agree_and_wide_specs_are_scaled(smollm2_gguf, tmp_path):
    # Two modules at once give the table one thread gives; by default the 8-bit spec is scaled
    # from the 4-bit one (not run), and --scale-above 0 runs it.
    def table(name, *extra):
        out = tmp_path / name
        r = subprocess.run([TQ_BIN, "sensitivity", str(smollm2_gguf), "--windows", "1",
                            "--seq-len", "16", "--bits", "2,4,8", "--only", "layers.29.",
                            "-o", str(out), "--json", *extra],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return json.loads(out.read_text())

    one, two = table("t1.json", "--threads", "1"), table("t2.json", "--threads", "2")
    run_all = table("t0.json", "--threads", "2", "--scale-above", "0")
    assert one["scaled_above_bits"] == 4 and run_all["scaled_above_bits"] == 0
    assert [m["name"] for m in one["modules"]] == [m["name"] for m in two["modules"]]
    for a, b, c in zip(one["modules"], two["modules"], run_all["modules"]):
        for sa, sb, sc in zip(a["specs"], b["specs"], c["specs"]):
            assert sb["kl"] == pytest.approx(sa["kl"], rel=1e-4, abs=1e-9), a["name"]
            assert sa.get("scaled_from_bits") == (4 if sa["bits"] == 8 else None)
            assert "scaled_from_bits" not in sc
            if sa["bits"] < 8:
                assert sc["kl"] == pytest.approx(sa["kl"], rel=1e-4, abs=1e-9)
            else:  # scaled vs run: the same order of magnitude
                assert sc["kl"] / 4 < sa["kl"] < sc["kl"] * 4, a["name"]

    # A table run with --scale-above 0 is not resumed under the default, and the error says how.
    r = subprocess.run([TQ_BIN, "sensitivity", str(smollm2_gguf), "--windows", "1", "--seq-len",
                        "16", "--bits", "2,4,8", "-o", str(tmp_path / "t0.json"), "--resume"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "pass --scale-above 0" in r.stderr

    r = subprocess.run([TQ_BIN, "sensitivity", str(smollm2_gguf), "--scale-above", "9",
                        "-o", str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert r.returncode != 0 and "--scale-above" in r.stderr and len(r.stderr.splitlines()) == 1
