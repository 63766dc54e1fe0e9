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
    runner = "gpu-h200"                  # CI: the label of the self-hosted runner for this target

    [[target]]
    name = "qwen-serve-cpu"
    platform = "cpu"
    vllm = "0.32.0"
    offline = true
    serve = "models/qwen-7b-chat"         # a serving image of this model directory (relative to this file)
    served_model_name = "qwen-7b"         # optional, as --served-model-name
    serve_args = ["--dtype=bfloat16"]     # optional, as --serve-arg; model_mount = true as --model-mount

    [ci]                                 # what `envkit matrix export --format github|gitlab` writes
    envkit = "ci/envkit_gpu-0.1.0-py3-none-any.whl"   # or "envkit-gpu @ git+https://HOST/envkit.git@v0.1.0"
    runner = "ubuntu-latest"             # CPU targets (default: the CI system's own)
    gpu_runner = "gpu"                   # GPU targets without a runner of their own
"""
from __future__ import annotations

import posixpath
import re
import unicodedata
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.config.fields import Field, Invalid, Problem, Table, boolean, text
from envkit.config.userfile import parse_toml, read_text
from envkit.errors import InputError
from envkit.model.flags import FLAG_ORDER
from envkit.model.project import DISTRIBUTION, CiSettings, EnvkitRequirement, Project, ServeTarget, Target

RESOLVE_KEYS = FLAG_ORDER


_path_string = text(r"(?s).*", "must be a path string", 'write {key} = "SITE.toml"')
_registry = text(r"[a-z0-9][a-z0-9._:/-]*", "{value} is not an image name prefix", 'write registry = "registry.corp:5000/llm"')
_tag = text(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "{value} is not a valid image tag", "letters, digits, . _ - (at most 128)")

_runner = text(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}", "{value} is not a runner label",
               "letters, digits, . _ : - (at most 100), e.g. {key} = \"gpu-h200\"")
# a full commit id (SHA-1 or SHA-256), or a tag that is a version (v1.2.3, 1.2.3rc1)
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_ENVKIT_FIX = ('write envkit = "ci/envkit_gpu-X.Y.Z-py3-none-any.whl" (a wheel committed beside the project file) '
               f'or envkit = "{DISTRIBUTION} @ git+https://HOST/PATH.git@vX.Y.Z"')


def _control(value: str) -> Optional[str]:
    """The first control character (C0, DEL, C1) or undecodable byte in `value`, as U+XXXX, or None."""
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"U+{ord(ch):04X}"
    return None


def _vcs_ref(url: str) -> str:
    """The tag or commit a pip VCS URL pins: the part after the last @ of its path; refused when absent or a branch."""
    if not url.startswith(("git+https://", "git+ssh://")):
        raise Invalid(f"the URL ({url.split('://')[0]}://...) is not a git+https:// (or git+ssh://) URL", _ENVKIT_FIX)
    parts = urlsplit(url[len("git+"):])
    if parts.password is not None or (parts.username is not None and url.startswith("git+https://")):
        raise Invalid(f"the git URL of host {parts.hostname} carries a login: it would be written into the CI file",
                      "give the URL without it and let the CI job log in (a deploy key for git+ssh://, or the CI's "
                      "credential helper / netrc for git+https://)")
    path = parts.path
    if "@" not in path:
        raise Invalid(f"URL {url!r} names no tag or commit, so CI would install whatever the default branch holds that day",
                      f"pin it: {url}@vX.Y.Z (a tag) or @<the full 40-hex commit>")
    ref = path.rsplit("@", 1)[1]
    if _COMMIT.fullmatch(ref):
        return ref
    try:
        Version(ref)
    except InvalidVersion:
        raise Invalid(f"ref {ref!r} of {url!r} looks like a branch: CI would install whatever it holds that day",
                      "pin a version tag (@v0.1.0) or a full 40-hex commit") from None
    return ref


def _envkit_requirement(value: Any) -> EnvkitRequirement:
    """[ci] envkit: a wheel path relative to the project file, a VCS URL at a tag or commit, or DISTRIBUTION==X."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid("must be a pip requirement string", _ENVKIT_FIX)
    bad = _control(value)
    if bad:
        raise Invalid(f"holds the control character {bad}", _ENVKIT_FIX)
    value = value.strip()
    if value.endswith(".whl") and "://" not in value and "@" not in value:
        if "\\" in value or posixpath.isabs(value):
            raise Invalid(f"wheel path {value!r} must be relative to the project file, with / between folders", _ENVKIT_FIX)
        try:
            name = parse_wheel_filename(posixpath.basename(value))[0]
        except InvalidWheelFilename as exc:
            raise Invalid(f"{value!r} is not a wheel file name ({exc})", _ENVKIT_FIX) from None
        if name != canonicalize_name(DISTRIBUTION):
            raise Invalid(f"wheel {posixpath.basename(value)!r} is not envkit's ({DISTRIBUTION})",
                          "build one from envkit's repository: python -m pip wheel --no-deps . -w dist")
        return EnvkitRequirement("wheel", value)
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        raise Invalid(f"{value!r} is not a pip requirement ({exc})", _ENVKIT_FIX) from None
    if canonicalize_name(req.name) != canonicalize_name(DISTRIBUTION):
        other = " (on PyPI `envkit` is an unrelated project)" if canonicalize_name(req.name) == "envkit" else ""
        raise Invalid(f"{value!r} names {req.name!r}, not envkit's distribution {DISTRIBUTION!r}{other}", _ENVKIT_FIX)
    if req.marker is not None:
        raise Invalid(f"{value!r} has an environment marker: CI must always install envkit", "drop the `; ...` part")
    if req.url:
        _vcs_ref(req.url)
        return EnvkitRequirement("vcs", value)
    pins = list(req.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise Invalid(f"{value!r} is not one exact version", f'write envkit = "{DISTRIBUTION}==X.Y.Z", or a wheel path or VCS URL')
    return EnvkitRequirement("pin", value)


_DEFAULTS = Table.of(Field("mirror", _path_string, object, None), Field("registry", _registry, object, "envkit"))
def _serve_args(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) and a and not _control(a) for a in value):
        raise Invalid("must be a list of arguments", 'write serve_args = ["--dtype=float32", "--max-model-len=4096"]')
    return tuple(value)


_TARGET = Table.of(
    *(Field(key, default=None) for key in RESOLVE_KEYS),
    Field("offline", boolean, object, False), Field("mirror", _path_string, object, None),
    Field("tag", _tag, object, "latest"), Field("runner", _runner, object, None),
    Field("serve", _path_string, object, None), Field("served_model_name", _path_string, object, None),
    Field("serve_args", _serve_args, object, ()), Field("model_mount", boolean, object, False), extra=("name",))
TARGET_KEYS = set(_TARGET.keys)
_CI = Table.of(Field("envkit", _envkit_requirement, object, None), Field("runner", _runner, object, None),
               Field("gpu_runner", _runner, object, None))


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
        if key not in ("defaults", "target", "ci"):
            raise _bad(path, f"unknown table [{key}]", "use [defaults], [[target]] and [ci]")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        raise _bad(path, "[defaults] must be a table", "write [defaults] with keys below it")
    _DEFAULTS.check_keys(defaults, _raiser(path, "{key} in [defaults]", "allowed: "))
    return _DEFAULTS.convert(defaults, _raiser(path, "[defaults] {key}", "allowed: "))


def _read_ci(path: str, raw: dict) -> CiSettings:
    ci = raw.get("ci", {})
    if not isinstance(ci, dict):
        raise _bad(path, "[ci] must be a table", "write [ci] with keys below it")
    _CI.check_keys(ci, _raiser(path, "{key} in [ci]", "allowed: "))
    return CiSettings(**_CI.convert(ci, _raiser(path, "[ci] {key}", "allowed: ")))


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
    serve = None
    if t["serve"] is not None:
        model = t["serve"] if Path(t["serve"]).is_absolute() else str(Path(path).parent / t["serve"])
        serve = ServeTarget(model, t["served_model_name"], t["serve_args"], t["model_mount"])
    elif t["served_model_name"] is not None or t["serve_args"] or t["model_mount"]:
        raise _bad(path, f"target {name}: served_model_name, serve_args and model_mount go with serve", 'add serve = "MODEL_DIR"')
    return Target(name, flags, offline, None if offline else mirror, f"{defaults['registry']}/envkit-{name}:{t['tag']}", t["runner"],
                  serve)


def parse(text: str, path: str) -> Project:
    raw = parse_toml(text, "project file", path)
    defaults = _read_defaults(path, raw)
    ci = _read_ci(path, raw)
    rows = raw.get("target", [])
    if not isinstance(rows, list) or not rows:
        raise _bad(path, "no [[target]] tables", "add at least one [[target]] with a name and resolve flags")
    seen: set[str] = set()
    targets = [_target(path, _target_name(path, i, row, seen), row, defaults) for i, row in enumerate(rows, 1)]
    return Project(path, tuple(targets), ci)


def load(path: str) -> Project:
    return parse(read_text(path, "project file", "give the path of an envkit.toml"), path)
