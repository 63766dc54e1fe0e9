"""Functions a reader takes in whole: none over 60 lines outside envkit/inimage/, but the interpreters of other
projects' build files that docs/architecture.md lists under "Functions over 60 lines", each with its length."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 60


def _long_functions() -> dict[str, int]:
    out = {}
    for path in sorted((ROOT / "envkit").rglob("*.py")):
        if "inimage" in path.relative_to(ROOT / "envkit").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    out[f"{path.relative_to(ROOT / 'envkit').as_posix()} {node.name}"] = lines
    return out


def _documented() -> dict[str, int]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Functions over 60 lines", 1)[1].split("\n## ", 1)[0]
    return {f"{path} {name}": int(lines) for path, name, lines in re.findall(r"^\| `([^`]+)` `([^`]+)` \| (\d+) \|", section, re.M)}


def test_no_function_over_60_lines_but_the_documented_interpreters():
    long, documented = _long_functions(), _documented()
    assert documented, "docs/architecture.md has no table of the functions over 60 lines"
    undocumented = {k: v for k, v in long.items() if k not in documented}
    assert not undocumented, f"functions over {LIMIT} lines that docs/architecture.md does not explain: {undocumented}"
    stale = {k: v for k, v in documented.items() if long.get(k) != v}
    assert not stale, f"docs/architecture.md lists these with another length, or they are no longer over {LIMIT}: {stale}"


CLI_LIMIT = 450


def test_the_command_line_layer_stays_thin():
    """cli/ parses, calls one use case and finishes: every rule, table and file write lives below it."""
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / "envkit" / "cli").glob("*.py"))
    assert lines < CLI_LIMIT, f"envkit/cli/ holds {lines} lines; move what is not parsing or finishing into app/ or ui/"
