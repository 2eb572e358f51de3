"""Flags declared once: every verb that records a result takes --db FILE or --no-db, never both
(a usage error before any work), and ppl/kl/sensitivity show the same window flags."""
import subprocess

import pytest


def run_tq(tq_bin, *args):
    return subprocess.run([tq_bin, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("verb", [
    ["ppl", "model", "--text", "t.txt"],
    ["kl", "base", "cand", "--text", "t.txt"],
    ["bench", "model"],
    ["convert", "src", "-o", "dst"],
], ids=["ppl", "kl", "bench", "convert"])
def test_db_and_no_db_exclude_each_other(tq_bin, tmp_path, verb):
    r = run_tq(tq_bin, *verb, "--db", tmp_path / "r.sqlite", "--no-db")
    assert r.returncode != 0
    assert "--db excludes --no-db" in r.stderr or "--no-db excludes --db" in r.stderr, r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "r.sqlite").exists()


@pytest.mark.parametrize("verb", ["ppl", "kl"])
def test_ppl_and_kl_share_the_window_flags(tq_bin, verb):
    h = run_tq(tq_bin, verb, "--help").stdout
    for flag in ("--text", "--seq-len", "--windows", "--protocol", "--bos", "--db", "--no-db"):
        assert flag in h, (verb, flag)


def test_sensitivity_takes_the_same_window_size_flags(tq_bin):
    h = run_tq(tq_bin, "sensitivity", "--help").stdout
    assert "--seq-len" in h and "--windows" in h
