"""The project file (envkit.toml): named build targets, defined once, exported to CI systems.

    [defaults]
    mirror = "site/SITE.toml"            # optional: build against the site's mirrors
    registry = "registry.corp:5000/llm"  # image names: REGISTRY/envkit-NAME:TAG

    [[target]]
    name = "cpu-py311"
    platform = "cpu"
    torch = "2.13.0"
    offline = true                       # bundle, then build with the network off

    [[target]]
    name = "h200-cu130"
    gpu = "H200"
    cuda = "13.0"
    flash_attn = "2.7.4.post1"
    kernels = "layer_norm,rotary"
    tag = "h200-cu130-fa2.7.4"
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from envkit.config.fields import Field, Problem, Table, boolean, text
from envkit.config.userfile import parse_toml, read_text
from envkit.errors import InputError
from envkit.model.flags import FLAG_ORDER
from envkit.model.project import Project, Target

RESOLVE_KEYS = FLAG_ORDER


_path_string = text(r"(?s).*", "must be a path string", 'write {key} = "SITE.toml"')
_registry = text(r"[a-z0-9][a-z0-9._:/-]*", "{value} is not an image name prefix", 'write registry = "registry.corp:5000/llm"')
_tag = text(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "{value} is not a valid image tag", "letters, digits, . _ - (at most 128)")

_DEFAULTS = Table.of(Field("mirror", _path_string, object, None), Field("registry", _registry, object, "envkit"))
_TARGET = Table.of(
    *(Field(key, default=None) for key in RESOLVE_KEYS),
    Field("offline", boolean, object, False), Field("mirror", _path_string, object, None),
    Field("tag", _tag, object, "latest"), extra=("name",))
TARGET_KEYS = set(_TARGET.keys)


def _raiser(path: str, where: str, allowed_fix: str) -> Callable[[Problem], None]:
    """Raise a table's first problem as one InputError; `where` is how messages name the table."""
    def report(p: Problem) -> None:
        if p.what == "unknown":
            raise InputError(f"project file {path}: {where.format(key=f'unknown key `{p.key}`')}", f"{allowed_fix}{', '.join(p.allowed)}")
        if p.what == "type":
            raise InputError(f"project file {path}: {where.format(key=f'`{p.key}`')} must be a string, got {p.value!r}",
                             f'write {p.key} = "{p.value}"')
        raise InputError(f"project file {path}: {where.format(key=p.key)} {p.why}", p.fix_at(p.key))
    return report


def _bad(path: str, what: str, fix: str) -> InputError:
    return InputError(f"project file {path}: {what}", fix)


def _read_defaults(path: str, raw: dict) -> dict[str, Any]:
    for key in raw:
        if key not in ("defaults", "target"):
            raise _bad(path, f"unknown table [{key}]", "use [defaults] and [[target]]")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        raise _bad(path, "[defaults] must be a table", "write [defaults] with keys below it")
    _DEFAULTS.check_keys(defaults, _raiser(path, "{key} in [defaults]", "allowed: "))
    return _DEFAULTS.convert(defaults, _raiser(path, "[defaults] {key}", "allowed: "))


def _target_name(path: str, i: int, row: Any, seen: set[str]) -> str:
    if not isinstance(row, dict):
        raise _bad(path, f"target #{i} is not a table", "write each target as a [[target]] table")
    name = row.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", name):
        raise _bad(path, f"target #{i}: name {name!r} must be lower-case letters, digits and dashes", 'write name = "cpu-py311"')
    if name in seen:
        raise _bad(path, f"target name {name!r} is used twice", "give every target its own name")
    seen.add(name)
    return name


def _target(path: str, name: str, row: dict, defaults: dict[str, Any]) -> Target:
    report = _raiser(path, f"target {name}: {{key}}", "allowed: ")
    _TARGET.check_keys(row, report)
    t = _TARGET.convert(row, report, {"mirror": defaults["mirror"]})
    offline, mirror = t["offline"], t["mirror"]
    if offline and "mirror" in row:
        raise _bad(path, f"target {name}: offline and mirror exclude each other", "drop one of them")
    if mirror is not None and not Path(mirror).is_absolute():
        mirror = str(Path(path).parent / mirror)
    if not offline and mirror is None:
        raise _bad(path, f"target {name} builds neither offline nor against a site mirror",
                   'add offline = true, or mirror = "SITE.toml" (here or in [defaults])')
    flags = tuple((k, row[k]) for k in RESOLVE_KEYS if k in row)
    return Target(name, flags, offline, None if offline else mirror, f"{defaults['registry']}/envkit-{name}:{t['tag']}")


def parse(text: str, path: str) -> Project:
    raw = parse_toml(text, "project file", path)
    defaults = _read_defaults(path, raw)
    rows = raw.get("target", [])
    if not isinstance(rows, list) or not rows:
        raise _bad(path, "no [[target]] tables", "add at least one [[target]] with a name and resolve flags")
    seen: set[str] = set()
    targets = [_target(path, _target_name(path, i, row, seen), row, defaults) for i, row in enumerate(rows, 1)]
    return Project(path, tuple(targets))


def load(path: str) -> Project:
    return parse(read_text(path, "project file", "give the path of an envkit.toml"), path)
