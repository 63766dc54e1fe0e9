"""JUnit XML for CI systems: one test case per check, failures carry the message and the fix; each case's time
where the run measured it, the suite's timestamp and hostname. The path is made ready (parents created, proven
writable) by `prepare` before the run, as a --report directory is, and the file is written whole."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional
from xml.etree import ElementTree as ET

from envkit.core.judge import quiet_groups
from envkit.errors import InputError
from envkit.model.host import Finding
from envkit.model.redact import printable
from envkit.model.rules import group_of


@dataclass(frozen=True)
class Case:
    name: str
    classname: str
    ok: bool
    message: str = ""
    detail: str = ""
    seconds: float = 0.0


_STARTED: dict[str, tuple[datetime, float]] = {}  # path -> when prepare() saw it: the suite's timestamp and time


def _problem(path: str, exc: OSError) -> InputError:
    return InputError(f"cannot write JUnit file {path}: {exc.strerror or exc}", "give a writable --junit path")


def prepare(path: str) -> Path:
    """Before a run: create the file's parent directories and prove the file can be written there (an existing
    directory at the path, or a read-only place, fails now, not after the run); notes the run's start."""
    out = Path(path)
    try:
        if out.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.envkit-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise _problem(path, exc) from None
    _STARTED[path] = (datetime.now(timezone.utc), time.monotonic())
    return out


def to_xml(suite: str, cases: list[Case], timestamp: Optional[datetime] = None, seconds: Optional[float] = None,
           hostname: Optional[str] = None) -> bytes:
    """The suite's time is `seconds` (the whole run) when known, else the sum of its cases'."""
    root = ET.Element("testsuites")
    stamp = (timestamp or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(tzinfo=None, microsecond=0)
    total = seconds if seconds is not None else sum(c.seconds for c in cases)
    s = ET.SubElement(root, "testsuite", name=_xml(suite), tests=str(len(cases)), failures=str(sum(not c.ok for c in cases)),
                      errors="0", skipped="0", time=f"{total:.3f}", timestamp=stamp.isoformat(),
                      hostname=hostname or socket.gethostname() or "localhost")
    for c in cases:
        tc = ET.SubElement(s, "testcase", name=_xml(c.name), classname=_xml(c.classname), time=f"{c.seconds:.3f}")
        if not c.ok:
            f = ET.SubElement(tc, "failure", message=_xml(c.message, 500), type="failure")
            f.text = _xml(c.detail)
        elif c.detail:
            ET.SubElement(tc, "system-out").text = _xml(c.detail)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def _xml(text: str, limit: Optional[int] = None) -> str:
    """Text fit for the file: control characters escaped (XML 1.0 cannot hold most of them, and a CI page would show
    them raw), then cut; what comes from a server was redacted before it got here (model/redact.py)."""
    text = printable(text)
    return text if limit is None or len(text) <= limit else text[:limit]


def write(path: str, suite: str, cases: list[Case]) -> None:
    """The file whole (a .part renamed over it); the suite stamped with the start prepare() noted, else now."""
    started = _STARTED.pop(path, None)
    xml = to_xml(suite, cases, started[0] if started else None, time.monotonic() - started[1] if started else None)
    out = Path(path)
    part = out.parent / f".{out.name}.part"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(xml)
        os.replace(part, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
        raise _problem(path, exc) from None


def _seconds(doc: dict[str, Any], key: str) -> float:
    v = doc.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0.0


def selftest_cases(doc: dict[str, Any]) -> list[Case]:
    """Each check is a case, with the seconds it took (documents from before they were measured: 0)."""
    return [Case(c["name"], "envkit.selftest", bool(c["ok"]), "" if c["ok"] else c["detail"], c["detail"], _seconds(c, "seconds"))
            for c in doc.get("checks", [])]


def sweep_cases(doc: dict[str, Any]) -> list[Case]:
    """Each concurrency level of a serving sweep is a case, timed by its duration; any failed request fails it."""
    return [Case(f"concurrency {lv['concurrency']}", "envkit.selftest.serving", lv["failed"] == 0, "; ".join(lv["errors"]), json.dumps(lv),
                 _seconds(lv, "duration_s"))
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
