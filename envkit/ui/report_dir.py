"""A report directory (--report), an output like the JUnit file: made and proven writable before any long
run, and written whole: every file goes to a .part first, then all are renamed, so a report is complete or left as it was."""
from __future__ import annotations

import json
import os
from pathlib import Path

from envkit.errors import InputError


def ready(report: str) -> Path:
    out = Path(report)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".envkit-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cannot write the report into {report}: {exc.strerror}", "give a writable --report directory") from None
    return out


def write(report: str, files: dict[str, bytes]) -> None:
    out = ready(report)
    try:
        for name, data in files.items():
            (out / f".{name}.part").write_bytes(data)
        for name in files:
            os.replace(out / f".{name}.part", out / name)
    except OSError as exc:
        raise InputError(f"cannot write the report into {report}: {exc.strerror}", "give a writable --report directory") from None


def write_json(report: str, name: str, doc: dict, more: dict[str, bytes] | None = None) -> None:
    """The run's JSON document as NAME.json in the report directory (and `more` files beside it), written whole."""
    write(report, {f"{name}.json": (json.dumps(doc, indent=2) + "\n").encode(), **(more or {})})
