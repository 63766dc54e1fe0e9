import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


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
