# Shared pytest fixtures: where the tq binary, the test binary and the asset cache are.
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def assets_required():
    """./scripts/test installs every asset first and CI runs it, so there a missing one is a bug."""
    flag = lambda name: os.environ.get(name, "").lower() in ("1", "true", "yes")
    return flag("CI") or flag("TQ_REQUIRE_ASSETS")


# Skip reasons that mean an asset, tool or oracle package is not installed (not a deliberate
# opt-in such as TQ_SLOW_TESTS): failures where assets_required().
MISSING_ASSET = re.compile(r"asset missing|missing:|not installed|could not import")


def fail_missing_asset(report):
    if not report.skipped or not assets_required() or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if MISSING_ASSET.search(reason):
        report.outcome = "failed"
        report.longrepr = f"{reason} (assets are required here: run ./scripts/setup)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    fail_missing_asset(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # a module-level importorskip
    outcome = yield
    fail_missing_asset(outcome.get_result())


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
