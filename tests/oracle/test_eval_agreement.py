"""Oracle: `tq eval` against lm-evaluation-harness's per-item computation.

eval_harness_ref.py restates the harness (lm_eval 0.4.13) in Python on stock mlx-lm; both read
the same task JSONL items and the same artifact: SmolLM2-135M imported to f32 from the bundled
GGUF (mlx's CPU 4-bit matmul takes ~3 s per forward here, too slow for CI; bench/eval_agreement.py
also runs the 4-bit artifact). On a few seeded items of every task: per-item choice (acc and
acc_norm) equal unless the harness's top two log-likelihoods are within 2e-3 (a near-tie f32
rounding may flip), the same LAMBADA greedy verdict, and the same accuracy over the items.
bench/eval_agreement.py runs 100 items per task and 50 GSM8K items. Also: bad input gets one
error line. TQ_EVAL_ITEMS=N changes the items per task (default 2).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

sys.path.insert(0, str(Path(__file__).parent))
from eval_harness_ref import reference_subprocess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = TQ_CACHE / "eval"
MC_TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa", "piqa",
            "winogrande", "mmlu"]
TIE = 2e-3


def run_tq(*args):
    return subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def f32(tmp_path_factory):
    if not GGUF.exists() or not (DATA / "mmlu.jsonl").exists():
        pytest.skip(f"asset missing: {GGUF} or {DATA} (run ./scripts/setup)")
    d = tmp_path_factory.mktemp("eval")
    r = run_tq("import", GGUF, "-o", d / "f32", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    return d / "f32"


def compare(ours_tasks, ref):
    """Per-item and accuracy agreement; returns (items compared, near-ties skipped)."""
    compared = ties = 0
    for t in ours_tasks:
        name, items = t["task"], t["items"]
        theirs = {x["doc"]: x for x in ref[name]}
        for x in items:
            y = theirs[x["doc"]]
            if name == "lambada":
                assert x["hit"][0] == y["hit"][0], (name, x, y)
                assert x["ll"][0] == pytest.approx(y["ll"][0], abs=0.05), (name, x, y)
                compared += 1
                continue
            top = np.sort(np.array(y["ll"]))[::-1]
            if len(top) > 1 and top[0] - top[1] < TIE:
                ties += 1
                continue
            assert x["pred"] == y["pred"], (name, x, y)
            np.testing.assert_allclose(x["ll"], y["ll"], atol=0.05, err_msg=name)
            compared += 1
        ours_acc = np.mean([x["hit"][0] for x in items])
        their_acc = np.mean([theirs[x["doc"]]["hit"][0] for x in items])
        if ties == 0:
            assert ours_acc == their_acc, (name, ours_acc, their_acc)
    return compared, ties


def test_multiple_choice_and_lambada_agree_with_harness(f32, tmp_path):
    n = int(os.environ.get("TQ_EVAL_ITEMS", "2"))
    r = run_tq("eval", f32, "--task", ",".join(MC_TASKS + ["lambada"]), "--limit", n,
               "--seed", 1, "--json", "--items", "--no-db")
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)
    job = {"tasks": {t["task"]: [x["doc"] for x in t["items"]] for t in ours["tasks"]}}
    ref = reference_subprocess(f32, DATA, job, tmp_path / "ref")
    compared, ties = compare(ours["tasks"], ref)
    print(f"\n{compared} items equal, {ties} near-ties skipped")
    assert compared >= len(job["tasks"]) * n - 2
    for t in ours["tasks"]:
        assert t["protocol"].startswith(f"tq eval {t['task']}: ")
        assert t["n"] == n


def test_bad_input_is_one_error_line(f32, tmp_path):
    for args, needle in [
        (["--task", "nope"], "unknown task 'nope'"),
        (["--task", "piqa", "--shots", "2"], "zero-shot only"),
        (["--task", "piqa", "--data", tmp_path], "scripts/setup"),
        (["--task", "piqa", "--limit", "-1"], "--limit"),
    ]:
        r = run_tq("eval", f32, *args, "--no-db")
        assert r.returncode != 0
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and needle in lines[0], r.stderr


def test_paired_run_records_and_reports(f32, tmp_path):
    """A model against itself: same items, difference exactly 0, nothing flipped; the row lands in
    the results database and `tq report --table` shows the task column."""
    db = tmp_path / "r.sqlite"
    r = run_tq("eval", "--base", f32, f32, "--task", "arc_easy", "--limit", 4, "--json",
               "--db", db)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for t in res["tasks"]:
        assert t["metrics"] == t["base_metrics"]
        for p in t["paired"].values():
            assert (p["diff"], p["lost"], p["gained"], p["mcnemar_p"]) == (0, 0, 0, 1)
    rep = run_tq("report", "--db", db, "--table", "-o", tmp_path / "r.html")
    assert rep.returncode == 0, rep.stderr
    assert "task acc %" in rep.stdout and "arc_easy " in rep.stdout, rep.stdout


def test_reuse_reads_stored_tasks_back(f32, tmp_path):
    """--reuse: a task scored before on the same model, items, protocol and runtime (either side
    of a paired run) is read back from the results database, not scored; anything else differing
    scores it again."""
    db = tmp_path / "r.sqlite"
    common = ["--limit", 5, "--json", "--db", db]

    def ev(*args, seed=3):
        r = run_tq("eval", *args, *common, "--seed", seed)
        assert r.returncode == 0, r.stderr
        return {t["task"]: t for t in json.loads(r.stdout)["tasks"]}, r.stderr

    first, _ = ev("--base", f32, GGUF, "--task", "arc_easy,lambada")
    again, err = ev("--base", f32, GGUF, "--task", "arc_easy,lambada,piqa", "--reuse")
    for task in ("arc_easy", "lambada"):
        a, b = first[task], again[task]
        assert (b["reused_run"], b["base_reused_run"]) == (1, 1), err
        assert b["seconds"] == 0
        assert (b["metrics"], b["base_metrics"], b["paired"]) == \
            (a["metrics"], a["base_metrics"], a["paired"])
    assert "reused_run" not in again["piqa"] and "base_reused_run" not in again["piqa"]
    assert "the results of run #1" in err
    # The source alone finds its side of the paired rows (the newest: run 2), LAMBADA's
    # perplexity included; the candidate alone its own.
    src, _ = ev(f32, "--task", "lambada", "--reuse")
    assert src["lambada"]["reused_run"] == 2
    assert src["lambada"]["metrics"] == first["lambada"]["base_metrics"]
    cand, _ = ev(GGUF, "--task", "piqa", "--reuse")
    assert cand["piqa"]["metrics"] == again["piqa"]["metrics"] and cand["piqa"]["reused_run"] == 2
    # Other items, another runtime: scored again.
    other, _ = ev(GGUF, "--task", "piqa", "--reuse", seed=4)
    assert "reused_run" not in other["piqa"]
    # Paired with a base scored fresh, the stored candidate is left out of the count from the
    # start, so the base's progress (and its ETA) counts its own 5 items only.
    paired, err = ev("--base", f32, GGUF, "--task", "piqa", "--reuse", seed=4)
    assert paired["piqa"]["reused_run"] > 0 and "base_reused_run" not in paired["piqa"], err
    counts = re.findall(r"^eval: (\d+)/(\d+) items", err, re.M)
    assert counts and {total for _, total in counts} == {"5"}, err
    other, _ = ev(GGUF, "--task", "piqa", "--reuse", "--threads", 1)
    assert "reused_run" not in other["piqa"]
    # The fingerprint follows the bytes: the same file elsewhere is the same model, one bit
    # flipped in its last tensor's data (same layout, as RTN and GPTQ conversions) is not.
    same, flipped = tmp_path / "same.gguf", tmp_path / "flipped.gguf"
    shutil.copyfile(GGUF, same)
    data = bytearray(GGUF.read_bytes())
    data[-101] ^= 1
    flipped.write_bytes(data)
    again_elsewhere, _ = ev(same, "--task", "piqa", "--reuse")
    assert again_elsewhere["piqa"]["metrics"] == cand["piqa"]["metrics"]
    assert "reused_run" in again_elsewhere["piqa"]
    other, _ = ev(flipped, "--task", "piqa", "--reuse")
    assert "reused_run" not in other["piqa"]
    r = run_tq("eval", GGUF, "--task", "piqa", "--reuse", "--no-db")
    assert r.returncode != 0 and "--reuse" in r.stderr.strip().splitlines()[-1], r.stderr


def test_batched_items_score_as_item_by_item():
    """--batch prefills several items' contexts in one forward: on the 4-bit GGUF the scores
    equal item-by-item scoring bit for bit where every context feeds 16+ new tokens (the same
    kernels per token), and within the runtime's rounding elsewhere (ARC's short contexts)."""
    if not GGUF.exists() or not (DATA / "mmlu.jsonl").exists():
        pytest.skip(f"asset missing: {GGUF} or {DATA} (run ./scripts/setup)")
    runs = {}
    for b in (1, 3):
        r = run_tq("eval", GGUF, "--task", "mmlu,boolq,lambada,winogrande,arc_easy", "--limit", 7,
                   "--seed", 4, "--no-db", "--json", "--items", "--batch", b)
        assert r.returncode == 0, r.stderr
        runs[b] = {t["task"]: t["items"] for t in json.loads(r.stdout)["tasks"]}
    for task, items in runs[1].items():
        for x, y in zip(items, runs[3][task]):
            assert x["doc"] == y["doc"]
            if task == "arc_easy":
                assert np.allclose(x["ll"], y["ll"], atol=0.05), (task, x, y)
            else:
                assert x["ll"] == y["ll"], (task, x, y)
    assert run_tq("eval", GGUF, "--task", "mmlu", "--batch", 0).returncode != 0
