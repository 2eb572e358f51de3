"""scripts/check_docs: every verb and flag of the built `tq` is documented in README.md or
docs/*.md, README.md stays under 350 lines, and nothing points outside the repository. The last
two tests feed it a fake `tq` and a long README to show it fails when it should."""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_docs"


def check_docs(*args):
    return subprocess.run([sys.executable, str(CHECK), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_every_verb_and_flag_is_documented(tq_bin):
    r = check_docs("--tq", tq_bin)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all documented" in r.stdout


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) < 350


FAKE_HELP = """\
Usage: tq [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  inspect                     Show a model
  frobnicate                  A verb nobody documented
"""

FAKE_VERB_HELP = """\
Usage: tq inspect [OPTIONS] model

Options:
  -h,--help                   Print this help message and exit
  --json                      Print one JSON object
  --undocumented-knob INT     A flag nobody documented
"""


def fake_tq(tmp_path):
    (tmp_path / "top.txt").write_text(FAKE_HELP)
    (tmp_path / "verb.txt").write_text(FAKE_VERB_HELP)
    tq = tmp_path / "tq"
    tq.write_text(f"""#!/bin/sh
if [ "$1" = "--help" ]; then cat '{tmp_path}/top.txt'; else cat '{tmp_path}/verb.txt'; fi
""")
    tq.chmod(0o755)
    return tq


def test_fails_on_an_undocumented_verb_or_flag(tmp_path):
    r = check_docs("--tq", fake_tq(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "tq frobnicate: verb not documented" in r.stdout
    assert "--undocumented-knob: not mentioned" in r.stdout
    assert "--json" not in r.stdout


def test_fails_on_a_long_readme(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    readme = (ROOT / "README.md").read_text()
    (root / "README.md").write_text(readme + "\n" * 350)
    fake = fake_tq(tmp_path)
    r = check_docs("--tq", fake, "--root", root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "README.md:" in r.stdout and "must stay under 350" in r.stdout
