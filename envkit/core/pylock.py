"""PEP 751 lock files (`pylock.STEP.toml`) from a pinned envkit lock: for each pip step of the image, the set of wheels
the image holds after that step (an earlier step's wheel replaced where a later step installs another version of the
same project), each by its path in the bundle's wheelhouse and its sha256. pip's and uv's users install the same set
without envkit: `uv pip install --offline -r pylock.STEP.toml` in the bundle. Built and validated with
packaging.pylock; written by the small TOML writer below (the standard library reads TOML, it does not write it)."""
from __future__ import annotations

import json
from typing import Any, Mapping

from packaging.pylock import Package, PackageWheel, Pylock
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from envkit import __version__
from envkit.model.lock import Lock, LockedWheel

WHEELHOUSE = "wheelhouse"


def pylock_name(step: str) -> str:
    return f"pylock.{step}.toml"


def _package(w: LockedWheel) -> Package:
    return Package(name=canonicalize_name(w.name), version=Version(w.version),
                   wheels=[PackageWheel(name=w.filename, path=f"{WHEELHOUSE}/{w.filename}", hashes={"sha256": w.sha256})])


def pylocks(lock: Lock) -> dict[str, Pylock]:
    """pylock.STEP.toml -> its document, for each step the lock pins, in install order."""
    python = Version(lock.solution.python) if lock.solution.python else None
    requires = SpecifierSet(f"=={python.major}.{python.minor}.*") if python is not None else None
    held: dict[str, LockedWheel] = {}
    out = {}
    for step in lock.steps():
        for w in lock.wheels_of(step):
            held[str(canonicalize_name(w.name))] = w
        doc = Pylock(lock_version=Version("1.0"), created_by="envkit", requires_python=requires,
                     packages=[_package(held[name]) for name in sorted(held)],
                     tool={"envkit": {"version": __version__, "step": step, "platform": lock.solution.platform,
                                           "torch": lock.solution.torch_pin}})
        doc.validate()
        out[pylock_name(step)] = doc
    return out


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string is JSON's string, control characters escaped
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML value for {type(v).__name__}")


def _key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() and k.isascii() else json.dumps(k)


def _table(doc: Mapping[str, Any], path: str, lines: list[str]) -> None:
    """Plain values first, then sub-tables, then arrays of tables ([[packages]]), as TOML requires."""
    plain = {k: v for k, v in doc.items() if not isinstance(v, dict) and not _array_of_tables(v)}
    for k, v in plain.items():
        lines.append(f"{_key(k)} = {_value(v)}")
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{path}{_key(k)}]"]
            _table(v, f"{path}{_key(k)}.", lines)
    for k, v in doc.items():
        if _array_of_tables(v):
            for item in v:
                lines += ["", f"[[{path}{_key(k)}]]"]
                _table(item, f"{path}{_key(k)}.", lines)


def _array_of_tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def to_toml(doc: Pylock) -> str:
    lines: list[str] = []
    _table(doc.to_dict(), "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def pylock_files(lock: Lock) -> dict[str, bytes]:
    """The bundle's pylock.STEP.toml files (none for a lock that pins no wheels)."""
    return {name: to_toml(doc).encode() for name, doc in pylocks(lock).items()}
