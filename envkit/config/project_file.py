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
    name = "bloom-7b1"
    engine = "triton-trtllm"             # a container engine (trtllm, triton-trtllm, triton-vllm, fastertransformer)
    gpu = "H100"
    tp = 2                               # its server's tensor-parallel size (the k8s export's GPUs); pip stacks have none
    max_batch_size = 64                  # its server's max batch size (1 to 4096)
    offline = true

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

    [k8s]                                # `envkit matrix export --format k8s` (docs/k8s.md); every key optional
    namespace = "llm-ci"
    model_pvc = "bloom7b1-pvc:/mnt"      # Triton targets: the claim that holds the model repository
    runtime_class = "nvidia"             # NVIDIA targets (the default); others only from their [target.k8s]
    node_selector = { "nvidia.com/gpu.product" = "NVIDIA-H200" }
    tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    shm_size = "16Gi"                    # /dev/shm: an emptyDir in memory of this size

    [target.k8s]                         # the last [[target]]'s own keys, over [k8s]
    gpus = 1                             # GPUs of the pod (default 1 on a GPU target; none on a CPU one)
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
from envkit.model.engine_specs import CONTAINER_ENGINES
from envkit.model.flags import FLAG_ORDER
from envkit.model.project import (
    DISTRIBUTION,
    CiSettings,
    EnvkitRequirement,
    K8sSettings,
    ModelVolume,
    Project,
    ServeTarget,
    Target,
    Toleration,
)
from envkit.model.redact import redact

RESOLVE_KEYS = FLAG_ORDER


_path_string = text(r"(?s).*", "must be a path string", 'write {key} = "SITE.toml"')
# An image name prefix, by the distribution/reference grammar (the engine's, docker's and podman's): an optional
# registry host[:port] (domain components, dots between them; or localhost, or an [IPv6] address), then path
# components of lower-case letters and digits joined by one separator (., _, __ or dashes), single slashes between.
# Lower case throughout: the image names are REGISTRY/envkit-NAME:TAG, and a repository name has no capitals.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])"
_REGISTRY_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-f:]+\])(?::[0-9]{{1,5}})?"
REGISTRY_PREFIX = re.compile(rf"(?:{_REGISTRY_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*|{_REGISTRY_HOST}")
MAX_REGISTRY = 150  # REGISTRY/envkit-NAME stays within a reference's 255 characters (a name is at most 63)


def _registry(value: Any) -> str:
    fix = 'write registry = "registry.corp:5000/llm" (a registry host[:port], then lower-case path components, single / between)'
    if not isinstance(value, str) or len(value) > MAX_REGISTRY or not REGISTRY_PREFIX.fullmatch(value):
        too_long = isinstance(value, str) and len(value) > MAX_REGISTRY
        raise Invalid(f"{_shown(value)} is not an image name prefix"
                      + (f" (longer than {MAX_REGISTRY} characters)" if too_long else ""), fix)
    return value


_tag = text(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "{value} is not a valid image tag", "letters, digits, . _ - (at most 128)")

_runner_label = text(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}", "{value} is not a runner label",
                     "letters, digits, . _ : - (at most 100), e.g. {key} = \"gpu-h200\" or {key} = [\"self-hosted\", \"gpu\"]")


def _runner(value: Any) -> tuple[str, ...]:
    """One runner label, or a list of them (a GitHub job runs on a runner that has every label; a GitLab job's tags)."""
    labels = value if isinstance(value, list) else [value]
    if not labels or len(labels) > 16:
        raise Invalid(f"{_shown(value)} is not one runner label or a list of 1 to 16", 'write {key} = ["self-hosted", "gpu"]')
    out = tuple(_runner_label(label) for label in labels)
    if len(set(out)) != len(out):
        raise Invalid(f"{_shown(value)} names a label twice", "name each label once")
    return out
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
    try:
        parts = urlsplit(url[len("git+"):])
        host = parts.hostname
    except ValueError as exc:
        raise Invalid(f"the git URL is not a valid URL ({exc})", _ENVKIT_FIX) from None
    if parts.password is not None or (parts.username is not None and url.startswith("git+https://")):
        raise Invalid(f"the git URL of host {host} carries a login: it would be written into the CI file",
                      "give the URL without it and let the CI job log in (a deploy key for git+ssh://, or the CI's "
                      "credential helper / netrc for git+https://)")
    if "?" in url or "#" in url:  # what urlsplit reads as the query or fragment, and a `?` or `#` it would not
        what = "a query string (?...)" if "?" in url.split("#", 1)[0] else "a fragment (#...)"
        raise Invalid(f"the git URL of host {host} has {what}: it would be written into the CI file, and query strings "
                      "and fragments carry tokens (the CI file is not a secret)",
                      "give the plain URL at a tag or commit (git+https://HOST/PATH.git@vX.Y.Z) and let the CI job log in "
                      "(a deploy key for git+ssh://, or the CI's credential helper / netrc for git+https://)")
    path = parts.path
    if "@" not in path:
        shown = redact(url)
        raise Invalid(f"URL {shown!r} names no tag or commit, so CI would install whatever the default branch holds that day",
                      f"pin it: {shown}@vX.Y.Z (a tag) or @<the full 40-hex commit>")
    ref = path.rsplit("@", 1)[1]
    if _COMMIT.fullmatch(ref):
        return ref
    try:
        Version(ref)
    except InvalidVersion:
        raise Invalid(f"ref {redact(ref)!r} of {redact(url)!r} looks like a branch: CI would install whatever it holds that day",
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
    shown = redact(value)  # what a refusal may echo: a token in the value cut out
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        raise Invalid(f"{shown!r} is not a pip requirement ({redact(str(exc))})", _ENVKIT_FIX) from None
    if canonicalize_name(req.name) != canonicalize_name(DISTRIBUTION):
        other = " (on PyPI `envkit` is an unrelated project)" if canonicalize_name(req.name) == "envkit" else ""
        raise Invalid(f"{shown!r} names {req.name!r}, not envkit's distribution {DISTRIBUTION!r}{other}", _ENVKIT_FIX)
    if req.marker is not None:
        raise Invalid(f"{shown!r} has an environment marker: CI must always install envkit", "drop the `; ...` part")
    if req.url:
        _vcs_ref(req.url)
        return EnvkitRequirement("vcs", value)
    pins = list(req.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise Invalid(f"{shown!r} is not one exact version", f'write envkit = "{DISTRIBUTION}==X.Y.Z", or a wheel path or VCS URL')
    return EnvkitRequirement("pin", value)


_DEFAULTS = Table.of(Field("mirror", _path_string, object, None), Field("registry", _registry, object, "envkit"))
def _serve_args(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) and a and not _control(a) for a in value):
        raise Invalid("must be a list of arguments", 'write serve_args = ["--dtype=float32", "--max-model-len=4096"]')
    return tuple(value)


def _count(key: str, top: int, example: int) -> Callable[[Any], int]:
    """A whole number from 1 to `top`, written as a TOML integer or its decimal string (like the flags, "2")."""
    def convert(value: Any) -> int:
        if type(value) is int:
            number = value
        elif isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,4}", value):
            number = int(value)
        else:
            raise Invalid(f"must be a whole number from 1 to {top}, got {_shown(value)}", f"write {key} = {example}")
        if not 1 <= number <= top:
            raise Invalid(f"must be from 1 to {top}, got {_shown(value)}", f"write {key} = {example}")
        return number
    return convert


# a container engine's server layout (as --tp and --max-batch-size; model/engines.py EngineOptions holds the same bounds)
MAX_TP, MAX_BATCH = 64, 4096
ENGINE_KEYS = ("tp", "max_batch_size")

_TARGET = Table.of(
    *(Field(key, default=None) for key in RESOLVE_KEYS),
    Field("tp", _count("tp", MAX_TP, 2), object, None), Field("max_batch_size", _count("max_batch_size", MAX_BATCH, 64), object, None),
    Field("offline", boolean, object, False), Field("mirror", _path_string, object, None),
    Field("tag", _tag, object, "latest"), Field("runner", _runner, object, None),
    Field("serve", _path_string, object, None), Field("served_model_name", _path_string, object, None),
    Field("serve_args", _serve_args, object, ()), Field("model_mount", boolean, object, False), extra=("name", "k8s"))
TARGET_KEYS = set(_TARGET.keys)
_CI = Table.of(Field("envkit", _envkit_requirement, object, None), Field("runner", _runner, object, None),
               Field("gpu_runner", _runner, object, None))


# [k8s] and [target.k8s]: the Kubernetes manifests of `envkit matrix export --format k8s` (docs/k8s.md)
MAX_GPUS = 64  # one pod's GPUs are on one node
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# a quantity of bytes: a positive decimal number with an optional binary (Ki..Ei) or decimal (k..E) suffix
_BYTES = re.compile(r"(?P<n>[0-9]+(\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
OPERATORS = ("Equal", "Exists")
_TOLERATION_FIX = 'write {key} = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]'


def _shown(value: Any) -> str:
    """A value for a message: short, and an integer of thousands of digits named by its size (repr would fail)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 12:
        return f"a {len(str(abs(value))) if abs(value) < 10 ** 4000 else 'thousands-of'}-digit number"
    text_ = repr(value)
    return text_ if len(text_) <= 60 else text_[:57] + "..."


def _gpus(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_GPUS:
        why = "must be a whole number of GPUs" if type(value) is not int else f"must be from 1 to {MAX_GPUS}"
        raise Invalid(f"{why}, got {_shown(value)}", f"write {{key}} = 2 (an integer from 1 to {MAX_GPUS}, no quotes)")
    return value


def _dns_label(value: Any) -> str:
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        raise Invalid(f"{_shown(value)} is not a DNS-1123 label (at most 63 lower-case letters, digits and -, "
                      "starting and ending with a letter or digit)", 'write {key} = "llm-ci"')
    return value


def _dns_subdomain(value: Any) -> str:
    if not isinstance(value, str) or not _DNS_SUBDOMAIN.fullmatch(value):
        raise Invalid(f"{_shown(value)} is not a Kubernetes object name (lower-case letters, digits, - and ., "
                      "at most 253)", 'write {key} = "nvidia"')
    return value


def _label_key(value: str) -> bool:
    """A qualified name: an optional DNS subdomain prefix and /, then a name of at most 63 characters."""
    prefix, _, name = value.rpartition("/")
    return bool(_LABEL_NAME.fullmatch(name)) and (not prefix and "/" not in value or bool(_DNS_SUBDOMAIN.fullmatch(prefix)))


def _node_selector(value: Any) -> tuple[tuple[str, str], ...]:
    fix = 'write {key} = { "nvidia.com/gpu.product" = "NVIDIA-H200" }'
    if not isinstance(value, dict):
        raise Invalid(f"must be a table of label = value strings, got {_shown(value)}", fix)
    for k, v in value.items():
        if not _label_key(k):
            raise Invalid(f"label {_shown(k)} is not a Kubernetes label key (PREFIX/NAME, NAME at most 63 letters, "
                          "digits, - _ .)", fix, at=(k,))
        if not isinstance(v, str) or not _LABEL_VALUE.fullmatch(v):
            raise Invalid(f"label {k}: {_shown(v)} is not a Kubernetes label value (a string of at most 63 letters, "
                          "digits, - _ .)", fix, at=(k,))
    return tuple(value.items())


def _toleration(i: int, row: Any) -> Toleration:
    where = f"item {i + 1}:"
    if not isinstance(row, dict):
        raise Invalid(f"{where} must be a table, got {_shown(row)}", _TOLERATION_FIX, at=(i,))
    unknown = sorted(set(row) - {"key", "operator", "value", "effect"})
    if unknown:
        raise Invalid(f"{where} unknown key {_shown(unknown[0])} (allowed: effect, key, operator, value)",
                      _TOLERATION_FIX, at=(i,))
    operator, effect, key, value = row.get("operator", "Equal"), row.get("effect"), row.get("key"), row.get("value")
    if operator not in OPERATORS:
        raise Invalid(f"{where} operator {_shown(operator)} is not Equal or Exists", _TOLERATION_FIX, at=(i,))
    if effect is not None and effect not in EFFECTS:
        raise Invalid(f"{where} effect {_shown(effect)} is not {', '.join(EFFECTS[:-1])} or {EFFECTS[-1]}",
                      "write effect = \"NoSchedule\" (or leave effect out to tolerate every effect)", at=(i,))
    if key is not None and (not isinstance(key, str) or not _label_key(key)):
        raise Invalid(f"{where} key {_shown(key)} is not a taint key (PREFIX/NAME, like nvidia.com/gpu)", _TOLERATION_FIX, at=(i,))
    if key is None and operator != "Exists":
        raise Invalid(f"{where} no key, and only operator = \"Exists\" may leave it out (it tolerates every taint)",
                      _TOLERATION_FIX, at=(i,))
    if value is not None and (not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value)):
        raise Invalid(f"{where} value {_shown(value)} is not a taint value (at most 63 letters, digits, - _ .)",
                      _TOLERATION_FIX, at=(i,))
    if value is not None and operator == "Exists":
        raise Invalid(f"{where} a value with operator = \"Exists\", which matches any value", "drop value, or use operator = \"Equal\"",
                      at=(i,))
    return Toleration(operator, key, value, effect)


def _tolerations(value: Any) -> tuple[Toleration, ...]:
    if not isinstance(value, list):
        raise Invalid(f"must be a list of tables, got {_shown(value)}", _TOLERATION_FIX)
    return tuple(_toleration(i, row) for i, row in enumerate(value))


def _bytes(value: Any) -> str:
    fix = 'write {key} = "16Gi" (a number with Ki, Mi, Gi, Ti, or k, M, G, T)'
    m = _BYTES.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise Invalid(f"{_shown(value)} is not a Kubernetes quantity of bytes", fix)
    if not float(m["n"]) > 0:
        raise Invalid(f"{_shown(value)} is no memory at all", fix)
    return str(value)


def _abs_path(value: Any, fix: str) -> str:
    if (not isinstance(value, str) or not value.startswith("/") or _control(value) or ":" in value
            or posixpath.normpath(value) != value.rstrip("/") or ".." in value.split("/")):
        raise Invalid(f"{_shown(value)} is not an absolute path without .., : or control characters", fix)
    return value.rstrip("/") or "/"


def _model_pvc(value: Any) -> ModelVolume:
    fix = 'write {key} = "bloom7b1-pvc:/mnt" (the claim\'s name, then where the pod mounts it, as arena\'s --data)'
    if not isinstance(value, str) or ":" not in value:
        raise Invalid(f"{_shown(value)} is not CLAIM:/MOUNT/PATH", fix)
    claim, mount = value.split(":", 1)
    if not _DNS_SUBDOMAIN.fullmatch(claim):
        raise Invalid(f"claim {_shown(claim)} is not a Kubernetes object name (lower-case letters, digits, - and .)", fix)
    return ModelVolume(claim, _abs_path(mount, fix))


def _model_repository(value: Any) -> str:
    return _abs_path(value, 'write {key} = "/mnt/triton_repo" (a directory under model_pvc\'s mount path)')


_K8S = Table.of(Field("gpus", _gpus, object, None), Field("namespace", _dns_label, object, None),
                Field("runtime_class", _dns_subdomain, object, None), Field("tolerations", _tolerations, object, None),
                Field("node_selector", _node_selector, object, None), Field("shm_size", _bytes, object, None),
                Field("model_pvc", _model_pvc, object, None), Field("model_repository", _model_repository, object, None))
K8S_KEYS = set(_K8S.keys)


def _k8s(path: str, raw: Any, where: str) -> K8sSettings:
    """[k8s] or [target.k8s] (`where` names it: "[k8s]", "target NAME: [target.k8s]")."""
    if not isinstance(raw, dict):
        raise _bad(path, f"{where} must be a table", f"write {where.rsplit(' ', 1)[-1]} with keys below it")
    _K8S.check_keys(raw, _raiser(path, f"{{key}} in {where}", "allowed: "))
    return K8sSettings(**_K8S.convert(raw, _raiser(path, f"{where} {{key}}", "allowed: ")))


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
        if key not in ("defaults", "target", "ci", "k8s"):
            raise _bad(path, f"unknown table [{key}]", "use [defaults], [[target]], [ci] and [k8s]")
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
    given = " and ".join(k for k in ENGINE_KEYS if t[k] is not None)
    engine = row.get("engine")
    if given and (engine is None or engine.strip().lower() not in CONTAINER_ENGINES):
        stack = f"engine {engine.strip()!r}" if engine is not None and not _control(engine) and len(engine) <= 40 else "no engine"
        raise _bad(path, f"target {name}: {given} lay{'s' if ' ' not in given else ''} out a container engine's server "
                   f"({', '.join(CONTAINER_ENGINES)}); this target is a pip stack ({stack}), whose image runs no such server",
                   f'drop {given}, or give the target a container engine (engine = "triton-trtllm")')
    serve = None
    if t["serve"] is not None:
        model = t["serve"] if Path(t["serve"]).is_absolute() else str(Path(path).parent / t["serve"])
        serve = ServeTarget(model, t["served_model_name"], t["serve_args"], t["model_mount"])
    elif t["served_model_name"] is not None or t["serve_args"] or t["model_mount"]:
        raise _bad(path, f"target {name}: served_model_name, serve_args and model_mount go with serve", 'add serve = "MODEL_DIR"')
    k8s = _k8s(path, row["k8s"], f"target {name}: [target.k8s]") if "k8s" in row else K8sSettings()
    return Target(name, flags, offline, None if offline else mirror, f"{defaults['registry']}/envkit-{name}:{t['tag']}", t["runner"],
                  serve, k8s, tp=t["tp"], max_batch_size=t["max_batch_size"])


def parse(text: str, path: str) -> Project:
    raw = parse_toml(text, "project file", path)
    defaults = _read_defaults(path, raw)
    ci = _read_ci(path, raw)
    rows = raw.get("target", [])
    if not isinstance(rows, list) or not rows:
        raise _bad(path, "no [[target]] tables", "add at least one [[target]] with a name and resolve flags")
    seen: set[str] = set()
    targets = [_target(path, _target_name(path, i, row, seen), row, defaults) for i, row in enumerate(rows, 1)]
    k8s = _k8s(path, raw["k8s"], "[k8s]") if "k8s" in raw else K8sSettings()
    return Project(path, tuple(targets), ci, k8s)


def load(path: str) -> Project:
    return parse(read_text(path, "project file", "give the path of an envkit.toml"), path)
