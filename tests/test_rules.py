"""The rule catalogue (envkit/data/rules.toml) against the code, read from its syntax tree: every rule id the
code can emit is catalogued with the right kind, every catalogued id is emitted somewhere, each doctor check
declares exactly the rules it emits, and the case files name only catalogued ids."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit.core.judge import CHECKS, quiet_groups
from envkit.model.rules import CATALOGUE, KINDS, RULE_ID, RULES, group_of, of_kind

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "envkit"
SOURCES = sorted([*(PKG / "core").rglob("*.py"), *(PKG / "app").rglob("*.py")])
# where the rule id sits in each value's constructor: Conflict(rule, ...), Finding(severity, rule, ...)
RULE_ARG = {"Conflict": ("resolve", 0), "Finding": ("doctor", 1)}
# the one place an id is passed on rather than written: doctor --for turns the resolver's conflicts into findings
FORWARDS = {("judge_for.py", "c.rule")}


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _rule_arg(node: ast.Call) -> ast.expr | None:
    _kind, pos = RULE_ARG[_called(node)]
    if len(node.args) > pos:
        return node.args[pos]
    return next((k.value for k in node.keywords if k.arg == "rule"), None)


def _constructions(tree: ast.AST) -> Iterator[tuple[str, ast.Call, ast.expr | None]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in RULE_ARG:
            yield RULE_ARG[_called(node)][0], node, _rule_arg(node)


def _literals(expr: ast.expr | None) -> list[str]:
    """The string literals in a rule argument (a plain literal, or the branches of a conditional)."""
    if expr is None:
        return []
    return [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _emitted() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Rule id -> the kinds that construct it ("resolve" for a Conflict, "doctor" for a Finding); and the
    (file, expression) of each rule argument that is not a literal."""
    ids: dict[str, set[str]] = {}
    forwards: set[tuple[str, str]] = set()
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for kind, _node, arg in _constructions(ast.parse(text)):
            literals = _literals(arg)
            if not literals:
                forwards.add((path.name, ast.get_source_segment(text, arg) if arg is not None else "<none>"))
            for rule_id in literals:
                ids.setdefault(rule_id, set()).add(kind)
    return ids, forwards


EMITTED, FORWARDED = _emitted()


def test_the_scan_sees_the_code():
    assert len(SOURCES) > 5 and len(EMITTED) >= 30, sorted(EMITTED)


def test_every_emitted_id_is_shaped_like_a_rule_and_catalogued():
    assert all(RULE_ID.fullmatch(r) for r in EMITTED), sorted(r for r in EMITTED if not RULE_ID.fullmatch(r))
    assert not set(EMITTED) - set(CATALOGUE), f"emitted but not in envkit/data/rules.toml: {sorted(set(EMITTED) - set(CATALOGUE))}"


def test_every_catalogued_id_is_emitted_with_its_kinds():
    dead = sorted(set(CATALOGUE) - set(EMITTED))
    assert not dead, f"catalogued but emitted nowhere: {dead}"
    wrong = {r: (sorted(CATALOGUE[r].kinds), sorted(kinds)) for r, kinds in EMITTED.items() if set(CATALOGUE[r].kinds) != kinds}
    assert not wrong, f"kind in the catalogue vs what the code constructs: {wrong}"


def test_only_doctor_for_passes_a_rule_id_on():
    assert FORWARDED == FORWARDS


def test_catalogue_entries_are_well_formed():
    for r in CATALOGUE.values():
        assert r.group == r.id.split(".")[0] == group_of(r.id) and r.summary and set(r.kinds) <= set(KINDS)
    assert {r.id for k in KINDS for r in of_kind(k)} == set(CATALOGUE)
    assert RULES == {r.id: r.summary for r in CATALOGUE.values()}
    # a group's rules stand together, so catalogue order is a group order
    order = [r.group for r in CATALOGUE.values()]
    assert all(order.index(g) == i or order[i - 1] == g for i, g in enumerate(order))


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _reach(name: str, functions: dict[str, ast.FunctionDef]) -> set[str]:
    """The module-level functions `name` calls, transitively (itself included)."""
    seen, todo = set(), [name]
    while todo:
        fn = todo.pop()
        if fn in seen or fn not in functions:
            continue
        seen.add(fn)
        todo += [n.id for n in ast.walk(functions[fn]) if isinstance(n, ast.Name) and n.id in functions]
    return seen


JUDGE = ast.parse((PKG / "core" / "judge.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.run.__name__)
def test_each_check_declares_the_rules_it_emits(check):
    functions = _functions(JUDGE)
    assert check.run.__name__ in functions
    emits = {rule_id for fn in _reach(check.run.__name__, functions)
             for kind, _node, arg in _constructions(functions[fn]) if kind == "doctor" for rule_id in _literals(arg)}
    assert emits == set(check.rules), f"{check.run.__name__} emits {sorted(emits)}, declares {sorted(check.rules)}"
    assert {group_of(r) for r in check.rules} == {check.group}
    assert all("doctor" in CATALOGUE[r].kinds for r in check.rules)


def test_the_registry_covers_every_finding_of_the_judge():
    judged = {rule_id for _kind, _node, arg in _constructions(JUDGE) for rule_id in _literals(arg)}
    assert judged == {r for c in CHECKS for r in c.rules}


def test_junit_groups_come_from_the_registry_in_catalogue_order():
    assert quiet_groups() == ("driver", "gpu", "torch", "flash-attn", "vllm", "kernels", "cuda", "ld-library-path", "dtk")


def _case_ids() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "tests" / "cases").glob("*.toml")):
        for case in tomllib.loads(path.read_text(encoding="utf-8")).get("case", []):
            for rule_id in case.get("rules", []):
                yield f"{path.name}:{case.get('id')}", rule_id
    for path in sorted((ROOT / "tests" / "doctor_cases").glob("*.toml")):
        for case in tomllib.loads(path.read_text(encoding="utf-8")).get("case", []):
            for rule_id in case.get("expect", []):
                yield f"{path.name}:{case.get('name')}", rule_id


def test_case_files_name_only_catalogued_rules():
    named = list(_case_ids())
    assert len(named) > 50
    unknown = [f"{where}: {rule_id}" for where, rule_id in named if rule_id not in CATALOGUE]
    assert not unknown, "\n".join(unknown)
