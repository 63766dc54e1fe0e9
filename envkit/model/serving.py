"""What a serving image sets so that nothing in its start-up reaches a network or reports usage, with the line of the
code that reads each variable: read once from envkit/data/serving.toml (data, not logic).

Pure apart from reading the shipped file at import; the values are frozen."""
from __future__ import annotations

import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit import data

SERVING_TOML = data.HERE / "serving.toml"


@dataclass(frozen=True)
class OfflineEnv:
    name: str
    value: str
    why: str
    source: str


def _load() -> tuple[OfflineEnv, ...]:
    doc = tomllib.loads(SERVING_TOML.read_text(encoding="utf-8"))
    out = tuple(OfflineEnv(e["name"], e["value"], e["why"], e["source"]) for e in doc["env"])
    assert all(e.source.startswith(("https://", "pkg:")) for e in out), "every serving.toml variable names its source"
    return out


OFFLINE_ENV: tuple[OfflineEnv, ...] = _load()
