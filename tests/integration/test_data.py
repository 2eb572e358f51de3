"""The evaluation text in data/ is the one data/README.md documents: every PPL/KL number in the
docs was measured on these bytes (CRLF line endings included)."""
import hashlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_evaluation_text_is_the_documented_one():
    p = ROOT / "data" / "wikitext-2-raw" / "wiki.test.raw"
    want = "4f3e427e4aff23acff917a8a51aeae21bf12832256e26914c8fc250dcef4103c"
    assert hashlib.sha256(p.read_bytes()).hexdigest() == want
    assert want in (ROOT / "data" / "README.md").read_text()
