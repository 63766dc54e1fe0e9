"""JUnit XML for CI systems: one test case per check, failures carry the message and the fix."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from xml.etree import ElementTree as ET

from envkit.core.judge import quiet_groups
from envkit.errors import InputError
from envkit.model.host import Finding
from envkit.model.rules import group_of


@dataclass(frozen=True)
class Case:
    name: str
    classname: str
    ok: bool
    message: str = ""
    detail: str = ""
    seconds: float = 0.0


def to_xml(suite: str, cases: list[Case]) -> bytes:
    root = ET.Element("testsuites")
    s = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(sum(not c.ok for c in cases)),
                      errors="0", skipped="0", time=f"{sum(c.seconds for c in cases):.3f}")
    for c in cases:
        tc = ET.SubElement(s, "testcase", name=c.name, classname=c.classname, time=f"{c.seconds:.3f}")
        if not c.ok:
            f = ET.SubElement(tc, "failure", message=c.message[:500], type="failure")
            f.text = c.detail
        elif c.detail:
            ET.SubElement(tc, "system-out").text = c.detail
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def write(path: str, suite: str, cases: list[Case]) -> None:
    try:
        Path(path).write_bytes(to_xml(suite, cases))
    except OSError as exc:
        raise InputError(f"cannot write JUnit file {path}: {exc.strerror}", "give a writable --junit path") from None


def selftest_cases(doc: dict[str, Any]) -> list[Case]:
    return [Case(c["name"], "envkit.selftest", bool(c["ok"]), "" if c["ok"] else c["detail"], c["detail"]) for c in doc.get("checks", [])]


def sweep_cases(doc: dict[str, Any]) -> list[Case]:
    """Each concurrency level of a serving sweep is a case; any failed request fails it."""
    return [Case(f"concurrency {lv['concurrency']}", "envkit.selftest.serving", lv["failed"] == 0, "; ".join(lv["errors"]), json.dumps(lv))
            for lv in doc["levels"]]


def doctor_cases(findings: Iterable[Finding]) -> list[Case]:
    """Each finding is a case (errors and warnings fail); each check group with no finding passes.
    The groups come from the rule catalogue and the doctor's check registry (core/judge.py)."""
    findings = list(findings)
    cases = [Case(f.rule, f"envkit.doctor.{group_of(f.rule)}", f.severity == "info",
                  f"{f.seen}: {f.why}", f"fix: {f.fix}\nsource: {f.source}") for f in findings]
    hit = {group_of(f.rule) for f in findings}
    cases += [Case(f"{g}: no finding", f"envkit.doctor.{g}", True) for g in quiet_groups() if g not in hit]
    return cases
