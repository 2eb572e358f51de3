# Shared pytest fixtures: where the tq binary, the test binary and the asset cache are.
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tq_bin():
    p = pathlib.Path(os.environ.get("TQ_BIN", ROOT / "build" / "tq"))
    if not p.exists():
        pytest.fail(f"tq binary not found at {p}; run ./scripts/build")
    return str(p)


@pytest.fixture(scope="session")
def tq_tests_bin():
    p = pathlib.Path(os.environ.get("TQ_TESTS_BIN", ROOT / "build" / "tq_tests"))
    if not p.exists():
        pytest.fail(f"tq_tests binary not found at {p}; run ./scripts/build")
    return str(p)


@pytest.fixture(scope="session")
def tq_cache():
    return pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))


@pytest.fixture(scope="session")
def smollm2_gguf(tq_cache):
    p = tq_cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not p.exists():
        pytest.fail(f"{p} missing; run ./scripts/setup")
    return p


@pytest.fixture(scope="session")
def wiki_text():
    return ROOT / "data" / "wikitext-2-raw" / "wiki.test.raw"


@pytest.fixture(scope="session", autouse=True)
def _private_results_db(tmp_path_factory):
    # tq convert/ppl/kl record runs in $XDG_DATA_HOME/turboquant/results.sqlite by default: keep
    # test runs out of the user's database (tests that pass --db or set it themselves still can).
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg"))
    yield
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old
