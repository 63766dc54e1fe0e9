"""Resolver cases drawn from public reports: tests/cases/*.toml (format in tests/cases/README.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envkit.config import matrix_file as matrix
from envkit.errors import InputError
from envkit.core.resolve import parse_query, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CASE_DIR = Path(__file__).parent / "cases"


def _cases() -> list:
    out = []
    for path in sorted(CASE_DIR.glob("*.toml")):
        for case in tomllib.loads(path.read_text(encoding="utf-8"))["case"]:
            out.append(pytest.param(case, id=f"{path.stem}:{case['id']}"))
    return out


CASES = _cases()


def test_there_are_at_least_40_cited_cases() -> None:
    cited = [c.values[0] for c in CASES if c.values[0].get("report", "").startswith("https://")]
    assert len(cited) >= 40
    assert len({c["id"] for c in cited}) == len(cited)


@pytest.mark.parametrize("case", CASES)
def test_case(case: dict) -> None:
    m = matrix.load()
    assert case["expect"] in ("ok", "conflict", "bad-input"), case["expect"]
    assert case.get("note"), "every case says why"
    if case["expect"] == "bad-input":
        with pytest.raises(InputError):
            parse_query(m, **case["args"])
        return
    result = resolve(m, parse_query(m, **case["args"]))
    if case["expect"] == "ok":
        assert result.ok, [c.message for c in result.conflicts]
        flat: dict[str, object] = dict(result.flat())
        doc = result.to_json()["solution"] or {}
        toolkit = doc.get("toolkit") or {}  # what `envkit resolve --json` prints
        flat["toolkit_wheels"] = [w["pin"] for w in toolkit.get("wheels", [])]
        for key, want in case.get("solution", {}).items():
            if want == "__absent__":  # the case says the solution has no such part
                assert key not in flat, f"{key}: got {flat[key]!r}, want none"
                continue
            assert flat.get(key) == want, f"{key}: got {flat.get(key)!r}, want {want!r}"
        for text in case.get("warnings", []):  # words the answer's warnings must carry
            assert any(text in w for w in result.warnings), f"no warning says {text!r}: {list(result.warnings)}"
        for text in case.get("no_warnings", []):
            assert not any(text in w for w in result.warnings), f"a warning says {text!r}: {list(result.warnings)}"
    else:
        assert not result.ok, f"expected a conflict, got {result.flat()}"
        got = {c.rule for c in result.conflicts}
        missing = set(case["rules"]) - got
        assert not missing, f"rules {sorted(missing)} not among {sorted(got)}: {[c.message for c in result.conflicts]}"
        for rule, text in case.get("fixes", {}).items():  # words the fix of that rule's conflict must carry
            fixes = [c.fix for c in result.conflicts if c.rule == rule]
            assert any(text in f for f in fixes), f"no {rule} fix says {text!r}: {fixes}"
