"""The rule catalogue as values: every rule id envkit can emit (resolver conflicts and doctor findings),
read once from envkit/data/rules.toml. Stable: CI pipelines, JUnit reports and case files match on them.

Pure apart from reading the shipped catalogue file at import; the values are frozen."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit import data

KINDS = ("resolve", "doctor")
RULE_ID = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*\.[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclass(frozen=True)
class Rule:
    """One rule: its id, who emits it (resolve, doctor or both), its group (the id's prefix) and what it says."""
    id: str
    kinds: tuple[str, ...]
    group: str
    summary: str
    info: bool = False  # the finding reports a state, not a problem: its group gets no passing JUnit case


def _rule(rule_id: str, table: Mapping[str, Any]) -> Rule:
    kind = table.get("kind")
    kinds = (kind,) if isinstance(kind, str) else tuple(kind or ())
    group, summary = table.get("group"), table.get("summary")
    problems = [what for what, bad in (
        ("an id shaped group.name", not RULE_ID.fullmatch(rule_id)),
        (f"kind among {KINDS}", not kinds or any(k not in KINDS for k in kinds)),
        ("group equal to the id's prefix", group != rule_id.split(".")[0]),
        ("a summary", not isinstance(summary, str) or not summary),
    ) if bad]
    if problems:
        raise ValueError(f"{data.RULES}: rule {rule_id!r} needs {', '.join(problems)}")
    return Rule(rule_id, kinds, str(group), str(summary), bool(table.get("info", False)))


def parse(text: str) -> Mapping[str, Rule]:
    """The catalogue in file order (a group's rules stand together; groups in JUnit's order)."""
    tables = tomllib.loads(text).get("rule", {})
    return MappingProxyType({rule_id: _rule(rule_id, table) for rule_id, table in tables.items()})


CATALOGUE: Mapping[str, Rule] = parse(data.RULES.read_text(encoding="utf-8"))

# id -> summary, as before the catalogue became data (kept for readers of the old mapping)
RULES: Mapping[str, str] = MappingProxyType({r.id: r.summary for r in CATALOGUE.values()})


def rule(rule_id: str) -> Optional[Rule]:
    return CATALOGUE.get(rule_id)


def group_of(rule_id: str) -> str:
    """The rule's group; an id outside the catalogue groups by its prefix."""
    known = CATALOGUE.get(rule_id)
    return known.group if known is not None else rule_id.split(".")[0]


def of_kind(kind: str) -> tuple[Rule, ...]:
    return tuple(r for r in CATALOGUE.values() if kind in r.kinds)


def groups(rule_ids: frozenset[str]) -> tuple[str, ...]:
    """The groups of these rules, in catalogue order."""
    return tuple(dict.fromkeys(r.group for r in CATALOGUE.values() if r.id in rule_ids))
