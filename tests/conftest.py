"""The test tiers, owned here: `integration` (tests/integration/: a real Docker Engine, Podman, servers, the large
environments of ./scripts/test.sh) runs after every other test, so a unit failure shows in minutes; `slow` marks
the unit modules that take more than about 4 s on 2 cores (pytest --durations=0: CLI subprocesses, fuzzing,
schema checks of real runs, loopback servers). `pytest -m "not slow and not integration"` is the fast tier:
no engine, no server, no large environment.

Under pytest-xdist (`-n 2 --dist loadscope --no-loadscope-reorder`, as ./scripts/test.sh runs them on two cores or
more) the integration tests are two scopes, two lanes that start at once, one per worker: the image builds on a Debian base
(IMAGE_LANE: they remove and load that base and build on it in turn) and the rest (the servers, whose session fixtures stay
in one process, and the CUDA image on its Ubuntu base). The unit modules, one module per scope, follow on whichever worker is
free first. tests/integration/conftest.py shares the tiny model and the Docker Engine between the two. (xdist's own loadgroup
cannot do this under pytest 9: it renames item._nodeid, which pytest 9 no longer reads.)"""
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

SLOW = frozenset({
    "test_chat_sweep_unit", "test_cli", "test_cli_conventions", "test_compare", "test_context_integrity", "test_export",
    "test_fetch_resume", "test_fuzz_cli", "test_fuzz_exports", "test_fuzz_sweep", "test_generate_cli",
    "test_hardening_serving", "test_k8s", "test_matrix_loader", "test_matrix_mutations", "test_matrix_sweep",
    "test_schemas", "test_serving", "test_sweep_hardening",
})
IMAGE_LANE = frozenset({"test_engine_builds", "test_fastllm_image", "test_lock_roundtrip", "test_pipeline_run", "test_secret_builds",
                        "test_serving_image"})


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        rel = Path(item.path).resolve().relative_to(here)
        if rel.parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        elif Path(item.path).stem in SLOW:
            item.add_marker(pytest.mark.slow)
    # stable: modules stay together. One process: unit tests first, so a unit failure shows in minutes. An xdist
    # worker: the two integration scopes first, so both lanes start on them at once.
    lanes = hasattr(config, "workerinput")
    items.sort(key=lambda item: (item.get_closest_marker("integration") is None) == lanes)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            if not path.startswith("tests/integration/"):
                return path
            return "tests/integration: images" if Path(path).stem in IMAGE_LANE else "tests/integration: servers"

    return Lanes(config, log)


FUZZ_CASES: Counter = Counter()  # the workers' counts, gathered by the controller under pytest-xdist
FUZZ_TRACEBACKS: Counter = Counter()


def pytest_sessionfinish(session):
    fuzzing = sys.modules.get("fuzzing")
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and fuzzing is not None:
        workeroutput["fuzz"] = (dict(fuzzing.CASES), dict(fuzzing.TRACEBACKS))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    cases, tracebacks = getattr(node, "workeroutput", {}).get("fuzz", ({}, {}))
    FUZZ_CASES.update(cases)
    FUZZ_TRACEBACKS.update(tracebacks)


def pytest_terminal_summary(terminalreporter):
    """How many inputs the fuzz tests tried, per area, and how many ended in a traceback (the property is zero)."""
    fuzzing = sys.modules.get("fuzzing")
    cases = FUZZ_CASES + (fuzzing.CASES if fuzzing else Counter())
    tracebacks = FUZZ_TRACEBACKS + (fuzzing.TRACEBACKS if fuzzing else Counter())
    if not cases:
        return
    terminalreporter.section("fuzz cases")
    for area, n in sorted(cases.items()):
        terminalreporter.write_line(f"{area}: {n} cases, {tracebacks[area]} tracebacks")
    seed = os.environ.get("ENVKIT_FUZZ_SEED")
    terminalreporter.write_line(f"all: {sum(cases.values())} cases, {sum(tracebacks.values())} tracebacks (seed {seed or 'derandomized'})")
