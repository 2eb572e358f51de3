"""scripts/include_graph: every include between src/ folders goes down the layer order of
docs/DESIGN.md; the script prints the edges and fails on one that goes up."""
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "include_graph"


def run(src):
    return subprocess.run([str(SCRIPT), str(src)], capture_output=True, text=True)


def test_the_tree_includes_only_lower_layers():
    r = run(ROOT / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recipe -> " in r.stdout
    assert "convert" not in r.stdout.split("recipe -> ")[1].splitlines()[0]


def test_the_order_matches_design_md():
    script = SCRIPT.read_text()
    order = re.search(r"^order=\(([^)]*)\)", script, re.M).group(1).split()
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    block = design.split("## Architecture", 1)[1].split("```")[1]
    layers = [line.split()[0] for line in block.splitlines() if line and not line[0].isspace()]
    assert layers == order


def test_an_upward_include_fails(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.h").write_text('#include "base/result.h"\n')
    assert run(tmp_path).returncode == 0
    (tmp_path / "base" / "b.h").write_text('#include "model/m.h"\n')
    r = run(tmp_path)
    assert r.returncode != 0
    assert "base includes model" in r.stdout
    assert "src/base/b.h" in r.stdout


def test_an_unplaced_folder_fails(tmp_path):
    (tmp_path / "newfolder").mkdir()
    (tmp_path / "newfolder" / "x.h").write_text('#include "base/result.h"\n')
    r = run(tmp_path)
    assert r.returncode != 0
    assert "not in the layer order" in r.stdout
