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

from envkit.errors import InputError
from envkit.config.userfile import parse_toml, read_text
from envkit.model.project import Project, Target

RESOLVE_KEYS = ("gpu", "driver", "platform", "cuda", "rocm", "dtk", "python", "torch", "flash_attn", "vllm", "kernels")
TARGET_KEYS = set(RESOLVE_KEYS) | {"name", "offline", "mirror", "tag"}


def parse(text: str, path: str) -> Project:
    def bad(what: str, fix: str) -> InputError:
        return InputError(f"project file {path}: {what}", fix)

    raw = parse_toml(text, "project file", path)
    for key in raw:
        if key not in ("defaults", "target"):
            raise bad(f"unknown table [{key}]", "use [defaults] and [[target]]")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        raise bad("[defaults] must be a table", "write [defaults] with keys below it")
    if "mirror" in defaults and not isinstance(defaults["mirror"], str):
        raise bad("[defaults] mirror must be a path string", "write mirror = \"SITE.toml\"")
    for key in defaults:
        if key not in ("mirror", "registry"):
            raise bad(f"unknown key `{key}` in [defaults]", "allowed: mirror, registry")
    registry = defaults.get("registry", "envkit")
    if not isinstance(registry, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._:/-]*", registry):
        raise bad(f"[defaults] registry {registry!r} is not an image name prefix", "write registry = \"registry.corp:5000/llm\"")
    rows = raw.get("target", [])
    if not isinstance(rows, list) or not rows:
        raise bad("no [[target]] tables", "add at least one [[target]] with a name and resolve flags")
    targets, seen = [], set()
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise bad(f"target #{i} is not a table", "write each target as a [[target]] table")
        name = row.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", name):
            raise bad(f"target #{i}: name {name!r} must be lower-case letters, digits and dashes", "write name = \"cpu-py311\"")
        if name in seen:
            raise bad(f"target name {name!r} is used twice", "give every target its own name")
        seen.add(name)
        for key, value in row.items():
            if key not in TARGET_KEYS:
                raise bad(f"target {name}: unknown key `{key}`", f"allowed: {', '.join(sorted(TARGET_KEYS))}")
            if key in RESOLVE_KEYS and not isinstance(value, str):
                raise bad(f"target {name}: `{key}` must be a string, got {value!r}", f"write {key} = \"{value}\"")
        offline = row.get("offline", False)
        if not isinstance(offline, bool):
            raise bad(f"target {name}: offline must be true or false", "write offline = true")
        mirror = row.get("mirror", defaults.get("mirror"))
        if mirror is not None and not isinstance(mirror, str):
            raise bad(f"target {name}: mirror must be a path string", "write mirror = \"SITE.toml\"")
        if offline and "mirror" in row:
            raise bad(f"target {name}: offline and mirror exclude each other", "drop one of them")
        if mirror is not None:
            mirror = str((Path(path).parent / mirror)) if not Path(mirror).is_absolute() else mirror
        tag = row.get("tag", "latest")
        if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
            raise bad(f"target {name}: tag {tag!r} is not a valid image tag", "letters, digits, . _ - (at most 128)")
        if not offline and mirror is None:
            raise bad(f"target {name} builds neither offline nor against a site mirror",
                      "add offline = true, or mirror = \"SITE.toml\" (here or in [defaults])")
        flags = tuple((k, row[k]) for k in RESOLVE_KEYS if k in row)
        targets.append(Target(name, flags, offline, None if offline else mirror, f"{registry}/envkit-{name}:{tag}"))
    return Project(path, tuple(targets))


def load(path: str) -> Project:
    return parse(read_text(path, "project file", "give the path of an envkit.toml"), path)
