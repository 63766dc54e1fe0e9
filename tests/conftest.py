"""The test tiers, owned here: `integration` (tests/integration/: a real Docker Engine, Podman, servers, the large
environments of ./scripts/test.sh) runs after every other test, so a unit failure shows in minutes; `slow` marks
the unit modules that take more than about 4 s on 2 cores (pytest --durations=0: CLI subprocesses, fuzzing,
schema checks of real runs, loopback servers). `pytest -m "not slow and not integration"` is the fast tier:
no engine, no server, no large environment."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

SLOW = frozenset({
    "test_chat_sweep_unit", "test_cli", "test_cli_conventions", "test_compare", "test_context_integrity", "test_export",
    "test_fetch_resume", "test_fuzz_cli", "test_fuzz_exports", "test_fuzz_sweep", "test_generate_cli",
    "test_hardening_serving", "test_k8s", "test_matrix_loader", "test_matrix_mutations", "test_matrix_sweep",
    "test_schemas", "test_serving", "test_sweep_hardening",
})


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        rel = Path(item.path).resolve().relative_to(here)
        if rel.parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        elif Path(item.path).stem in SLOW:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("integration") is not None)  # stable: modules stay together


def pytest_terminal_summary(terminalreporter):
    """How many inputs the fuzz tests tried, per area, and how many ended in a traceback (the property is zero)."""
    fuzzing = sys.modules.get("fuzzing")
    if fuzzing is None or not fuzzing.CASES:
        return
    terminalreporter.section("fuzz cases")
    for area, n in sorted(fuzzing.CASES.items()):
        terminalreporter.write_line(f"{area}: {n} cases, {fuzzing.TRACEBACKS[area]} tracebacks")
    terminalreporter.write_line(f"all: {sum(fuzzing.CASES.values())} cases, {sum(fuzzing.TRACEBACKS.values())} tracebacks"
                                f" (seed {fuzzing.SEED or 'derandomized'})")
