"""tq report: a results database fed by real `tq ppl` / `tq kl` runs on tiny artifacts renders
to a self-contained HTML page whose charts hold one point per artifact, and that page renders in
headless Chromium (screenshot taken and checked non-blank)."""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tinymodels  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"

CFG = dict(tinymodels.TINY_LLAMA, hidden_size=128, num_hidden_layers=2, intermediate_size=256,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=384,
           max_position_embeddings=512, tie_word_embeddings=True)


def tq(*args):
    r = subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    mlx_lm = pytest.importorskip("mlx_lm")
    root = tmp_path_factory.mktemp("report")
    base = root / "base-f32"
    tinymodels.write_tiny_hf_dir(base, CFG, seed=5)
    tinymodels.write_tiny_tokenizer(base)
    arms = [base]
    for bits in (8, 4, 3):
        q = root / f"q{bits}"
        mlx_lm.convert(hf_path=str(base), mlx_path=str(q), quantize=True, q_bits=bits,
                       q_group_size=64)
        arms.append(q)
    text = root / "text.txt"
    text.write_bytes(WIKI.read_bytes()[:8000])
    dbf = root / "results.sqlite"
    win = ["--seq-len", "64", "--windows", "4", "--db", dbf]
    for a in arms:
        tq("ppl", a, "--text", text, *win)
    for a in arms[1:]:
        tq("kl", base, a, "--text", text, *win)
    return {"db": dbf, "arms": arms, "root": root}


class SvgPoints(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.svg = None
        self.points = {}  # svg id -> [(artifact, classes)]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svg = a.get("id")
            self.points[self.svg] = []
        elif tag == "circle" and self.svg and "pt" in a.get("class", "").split():
            self.points[self.svg].append((a.get("data-artifact"), a.get("class")))
        elif tag in ("script", "link", "img", "iframe"):
            raise AssertionError(f"report is not self-contained: <{tag}>")

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None


def png_is_not_blank(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
        if kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    # A blank page compresses to a handful of byte values whatever the PNG row filters.
    return width > 0 and len(set(raw)) > 32


def test_report_has_one_point_per_artifact_and_renders(db, tmp_path):
    out = tmp_path / "report.html"
    r = tq("report", "--db", db["db"], "-o", out, "--json")
    summary = json.loads(r.stdout)
    assert summary["sources"] == 1 and summary["artifacts"] == 4 and summary["runs"] == 7
    page = out.read_text()
    p = SvgPoints()
    p.feed(page)
    kl = p.points["kl-0"]
    ppl = p.points["ppl-0"]
    quantized = {str(a) for a in db["arms"][1:]}
    assert sorted(a for a, _ in kl) == sorted(quantized)  # one point per quantized artifact
    assert sorted(a for a, _ in ppl) == sorted(str(a) for a in db["arms"])
    assert any("pareto" in c for _, c in kl)
    # The table shows each artifact's exact bpw (as tq inspect computes it) and recipe.
    for a in db["arms"]:
        bpw = json.loads(tq("inspect", a, "--json").stdout)["bpw"]
        assert f"<td>{bpw:.4f}</td>" in page
    assert "affine 4-bit g64" in page and "affine 3-bit g64" in page
    # Lower bpw, higher KL here: every quantized point is on the Pareto front.
    assert all("pareto" in c for _, c in kl)

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium not installed (scripts/apt-packages.txt; run scripts/setup)")
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--hide-scrollbars", f"--screenshot={shot}",
                    "--window-size=1400,1800", out.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10000
    assert png_is_not_blank(shot)


def test_report_table_has_one_row_per_artifact(db, tmp_path):
    r = tq("report", "--db", db["db"], "-o", tmp_path / "r.html", "--table")
    lines = r.stdout.splitlines()
    assert lines[0] == f"source: {db['arms'][0]}"
    assert lines[1].split()[:3] == ["artifact", "recipe", "bpw"]
    rows = {ln.split()[0]: ln for ln in lines[2:] if not ln.startswith("wrote ")}
    assert set(rows) == {a.name for a in db["arms"]}
    for a in db["arms"][1:]:  # quantized arms: bpw, PPL and KL; all on the front here
        bpw = json.loads(tq("inspect", a, "--json").stdout)["bpw"]
        # The Pareto mark, then the task-accuracy column ("-": no tq eval of the arm).
        assert f"{bpw:.3f}" in rows[a.name] and rows[a.name].split()[-2:] == ["*", "-"]
    assert "*" not in rows["base-f32"].split()  # the source has no KL against itself


def test_report_of_a_missing_db_is_one_clear_line(tmp_path):
    r = subprocess.run([TQ_BIN, "report", "--db", tmp_path / "none.sqlite", "-o",
                        tmp_path / "r.html"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "none.sqlite" in r.stderr and len(r.stderr.strip().splitlines()) == 1
