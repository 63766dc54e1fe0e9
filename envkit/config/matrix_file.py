"""Load and validate matrix.toml into typed, frozen tables. Nothing else in envkit reads the TOML.

Every row must name its `source`. The loader checks every row and reports all bad rows at once,
each with its line number, before anything uses the data. Each table's keys are declared once, as
fields.Table specs; only torch variants, DTK torch builds, flash-attn wheels and vLLM builds need code.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit import data
from envkit.config.fields import REQUIRED, Field, Problem, Table, identity
from envkit.errors import MatrixError
from envkit.model.matrix import (
    CC,
    VENDOR_PLATFORM,
    CudaToolkit,
    Driver,
    Dtk,
    FaRemap,
    FaWheelBuild,
    FlashAttn,
    FlashAttnBroken,
    Gpu,
    GpuDriver,
    Matrix,
    OsRelease,
    PythonRelease,
    Rocm,
    TorchAbiBreak,
    TorchBuild,
    Vllm,
    VllmBuild,
    gpu_name_key,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# ---------------------------------------------------------------- rows and their problems

class _Row:
    """One row of a table and where it stands; records every problem instead of stopping at the first."""

    def __init__(self, table: str, index: int, line: int, data: Any, problems: list[str]) -> None:
        self.table, self.index, self.line, self.data, self.problems = table, index, line, data, problems
        self.ok = True

    def bad(self, key: str, why: str) -> None:
        self.ok = False
        self.problems.append(f"line {self.line}: [[{self.table}]] #{self.index + 1} `{key}`: {why}")

    def report(self, problem: Problem) -> None:
        self.bad(problem.key, problem.why)

    def nested(self, table: str, data: Any) -> _Row:
        """A table inside this row (a torch variant): reported at this row's line and number."""
        return _Row(table, self.index, self.line, data, self.problems)

    def read(self, table: Table, defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        return table.read(self.data, self.report, defaults)


def _header_lines(text: str, table: str) -> list[int]:
    pat = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]")
    return [i + 1 for i, line in enumerate(text.splitlines()) if pat.match(line)]


def _rows(raw: dict, text: str, table: str, problems: list[str]) -> list[_Row]:
    data = raw.get(table, [])
    if not isinstance(data, list):
        problems.append(f"`{table}` must be an array of tables ([[{table}]])")
        return []
    lines = _header_lines(text, table)
    return [_Row(table, i, lines[i] if i < len(lines) else 0, d, problems) for i, d in enumerate(data)]


# ---------------------------------------------------------------- converters

def _str_list(x: Any) -> tuple[str, ...]:
    if not isinstance(x, list) or not all(isinstance(i, str) for i in x):
        raise ValueError("expected a list of strings")
    return tuple(x)


def _cc_list(x: Any) -> tuple[CC, ...]:
    return tuple(CC.parse(i) for i in _str_list(x))


def _version_list(x: Any) -> tuple[Version, ...]:
    return tuple(Version(v) for v in _str_list(x))


def _one_of(key: str, *allowed: str) -> Callable[[str], str]:
    def conv(x: str) -> str:
        if x not in allowed:
            raise ValueError(f"{key} must be {', '.join(allowed[:-1])} or {allowed[-1]}" if len(allowed) > 1 else f"{key} must be {allowed[0]}")
        return x
    return conv


def _pattern(regex: str, example: str) -> Callable[[str], str]:
    def conv(x: str) -> str:
        if not re.fullmatch(regex, x):
            raise ValueError(f"must look like {example}")
        return x
    return conv


_NO_SOURCE = "every row needs a source: a URL or 'doc:<document>'"


def _source(x: Any) -> str:
    if not isinstance(x, str) or not re.match(r"(https?://|doc:|file:|wheel:)\S+", x):
        raise ValueError(_NO_SOURCE)
    return x


def _strict_int(x: Any) -> int:
    if isinstance(x, bool):
        raise ValueError("expected an integer, got a boolean")
    return int(x)


def _nonempty_wheels(x: list) -> tuple[str, ...]:
    ws = _str_list(x)
    if not ws or not all(w.endswith(".whl") for w in ws):
        raise ValueError("wheels lists the release's wheel filenames (at least one)")
    return ws


def _python_list(x: Any) -> tuple[Version, ...]:
    if not isinstance(x, list) or not all(isinstance(p, str) and re.fullmatch(r"3\.\d+", p) for p in x):
        raise ValueError('a Python list is like ["3.10", "3.11"]')
    return tuple(Version(p) for p in x)


def _str_field(d: dict, key: str, pattern: str = r".+", example: str = "") -> str:
    v = d.get(key)
    if not isinstance(v, str) or not re.fullmatch(pattern, v):
        raise ValueError(f"{key} must be a string" + (f" like {example}" if example else ""))
    return v


# ---------------------------------------------------------------- field kinds used by many tables

def _req(key: str, convert: Callable[[Any], Any] = identity, kind: Any = str) -> Field:
    return Field(key, convert, kind)


def _opt(key: str, convert: Callable[[Any], Any] = identity, kind: Any = str, default: Any = None) -> Field:
    return Field(key, convert, kind, default)


def _strs(key: str, default: Any = ()) -> Field:
    return Field(key, _str_list, list, default)


def _flag(key: str, default: Any = REQUIRED, attr: str = "") -> Field:
    return Field(key, bool, bool, default, attr=attr)


_VERSION = _req("version", Version)
_SOURCE = Field("source", _source, object, missing=_NO_SOURCE)
_CONFIDENCE = _opt("confidence", _one_of("confidence", "verified", "inferred"), default="verified")


# ---------------------------------------------------------------- plain tables: declarations only

@dataclass(frozen=True)
class _Spec:
    """A table whose rows map key by key onto a model dataclass; `check` names a problem of the whole
    row as (key, why); `adapt` reshapes the read values before the model is built."""

    build: Callable[..., Any]
    table: Table
    check: Optional[Callable[[Any], Optional[tuple[str, str]]]] = None
    adapt: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None

    def read(self, rows: list[_Row]) -> list[Any]:
        out = []
        for r in rows:
            values = r.read(self.table)
            if not r.ok:
                continue
            item = self.build(**(self.adapt(values) if self.adapt else values))
            problem = self.check(item) if self.check else None
            if problem:
                r.bad(*problem)
            else:
                out.append(item)
        return out


_CUDA = _Spec(CudaToolkit, Table.of(
    _VERSION, _req("release"), _req("min_driver", Driver.parse), _opt("toolkit_driver", Driver.parse),
    _req("archs", _cc_list, list), _req("cudnn"), _req("devel_image"), _req("runtime_image"), _req("os"), _SOURCE))

_GPU = _Spec(Gpu, Table.of(
    _req("vendor", _one_of("vendor", *VENDOR_PLATFORM)), _req("arch", _pattern(r"sm_\d+|gfx[0-9a-f]+", "sm_90 or gfx942")),
    _req("name"), _strs("aliases"), _req("memory_gb", float, (int, float)), _req("bandwidth_gbs", float, (int, float)),
    _opt("min_dtk", Version), _SOURCE, _opt("min_driver", Driver.parse)))

_GPU_DRIVER = _Spec(GpuDriver, Table.of(
    _req("family"), _req("archs", _cc_list, list), _opt("min_driver", Driver.parse), _opt("last_branch", int, int),
    _CONFIDENCE, _SOURCE),
    check=lambda x: ("min_driver", "give min_driver, last_branch or both") if x.min_driver is None and x.last_branch is None else None)

_ROCM = _Spec(Rocm, Table.of(
    _VERSION, _strs("archs"), _opt("devel_image"), _opt("runtime_image"), _opt("os"), _SOURCE, extra=("confidence",)),
    check=lambda x: ("devel_image", "give devel_image, runtime_image and os together, or none of them")
    if (x.devel_image is None) != (x.os is None) else None)

_ABI_BREAK = _Spec(TorchAbiBreak, Table.of(_req("torch", Version), _req("symbol"), _req("why"), _SOURCE),
                   check=lambda x: ("torch", "an ABI break is a patch release like 2.3.1")
                   if x.torch.micro == 0 or len(x.torch.release) != 3 else None)

_FA_BROKEN = _Spec(FlashAttnBroken, Table.of(
    _req("flash_attn", SpecifierSet), _req("torch"), _flag("cxx11abi"), _req("why"), _SOURCE))

_PYTHON = _Spec(PythonRelease, Table.of(_VERSION, _req("tarball"), _SOURCE))

_OS = _Spec(OsRelease, Table.of(
    *(_strs(k, REQUIRED) for k in ("python_packages", "python_runtime", "build_packages", "cpython_build", "cpython_runtime")),
    _req("name", _pattern(r"[a-z]+\d+(\.\d+)?", "ubuntu22.04")), _req("family", _one_of("family", "debian")),
    _req("glibc", Version), _req("python", Version), _opt("cpu_image"), _SOURCE))


# ---------------------------------------------------------------- flash-attn: wheel lists, wheel-name rule, arch table

_FA_WHEEL_KEYS = {"cuda", "torch", "torch_index", "nvcc", "platform", "python", "abi"}


def _fa_wheel(w: Any) -> FaWheelBuild:
    if not isinstance(w, dict):
        raise ValueError("each wheels entry must be an inline table")
    unknown = set(w) - _FA_WHEEL_KEYS
    if unknown:
        raise ValueError(f"unknown wheels key(s): {', '.join(sorted(unknown))}")
    abi = w.get("abi")
    if not isinstance(abi, list) or not all(isinstance(a, bool) for a in abi):
        raise ValueError("wheels.abi must be a list of booleans")
    cuda = w.get("cuda")
    if not isinstance(cuda, str) or not cuda.isdigit():
        raise ValueError('wheels.cuda must be the cu tag\'s digits, like "12" or "118"')
    return FaWheelBuild(cuda=cuda, torch=Version(_str_field(w, "torch")), torch_index=_str_field(w, "torch_index", r"cu\d+", "cu121"),
                        nvcc=Version(_str_field(w, "nvcc")),
                        platform=_str_field({"platform": w.get("platform", "linux_x86_64")}, "platform", r"linux_(x86_64|aarch64)", "linux_x86_64"),
                        python=_python_list(w.get("python")), abi=tuple(abi))


def _fa_wheels(items: list) -> tuple[FaWheelBuild, ...]:
    return tuple(_fa_wheel(w) for w in items)


def _fa_remap(r: Any) -> FaRemap:
    if not isinstance(r, dict) or "to" not in r or set(r) - {"cuda_major", "torch", "to"} \
            or ("cuda_major" in r and (not isinstance(r["cuda_major"], int) or isinstance(r["cuda_major"], bool))) \
            or ("torch" in r and not (isinstance(r["torch"], str) and re.fullmatch(r"\d+\.\d+", r["torch"]))) \
            or not isinstance(r["to"], str):
        raise ValueError('each remap entry is { cuda_major = 12, torch = "2.1", to = "12.2" } (cuda_major and torch optional)')
    return FaRemap(cuda_major=r.get("cuda_major"), torch=r.get("torch"), to=Version(r["to"]))


def _fa_rule(x: Any) -> tuple[Optional[str], tuple[FaRemap, ...]]:
    if x == "none":
        return None, ()
    if not isinstance(x, dict) or x.get("format") not in ("major", "major_minor"):
        raise ValueError('wheel_rule must be "none" or { format = "major" | "major_minor", remap = [...] }')
    return x["format"], tuple(_fa_remap(r) for r in x.get("remap", []))


def _fa_archs(items: list) -> tuple[tuple[CC, SpecifierSet], ...]:
    out = []
    for a in items:
        if not isinstance(a, dict) or set(a) != {"arch", "nvcc"}:
            raise ValueError('each archs entry is { arch = "8.0", nvcc = ">=11.6" }')
        out.append((CC.parse(a["arch"]), SpecifierSet(a["nvcc"])))
    return tuple(out)


def _fa_split_rule(values: dict[str, Any]) -> dict[str, Any]:
    wheel_format, wheel_remap = values.pop("wheel_rule")
    return {**values, "wheel_format": wheel_format, "wheel_remap": wheel_remap}


_FLASH_ATTN = _Spec(FlashAttn, Table.of(
    _req("wheel_rule", _fa_rule, (str, dict)), _VERSION, _opt("tag", default=""), _req("python", SpecifierSet),
    _req("torch", SpecifierSet), _req("nvcc", SpecifierSet), _req("wheel_set", _one_of("wheel_set", "workflow", "none", "unknown")),
    Field("wheels", _fa_wheels, list, ()), _req("archs", _fa_archs, list), _opt("rocm", SpecifierSet), _strs("rocm_archs"),
    _strs("kernels"), _flag("kernel_setup_py", False), _CONFIDENCE, _SOURCE),
    check=lambda x: ("wheels", f"wheels are listed but wheel_set is {x.wheel_set!r}") if x.wheel_set != "workflow" and x.wheels else None,
    adapt=_fa_split_rule)


# ---------------------------------------------------------------- vLLM: builds off PyPI

_VLLM_BUILD_KEYS = {"wheel", "status", "source", "archs", "ptx", "python"}


def _vllm_build(key: str, b: Any) -> VllmBuild:
    if not isinstance(b, dict) or set(b) - _VLLM_BUILD_KEYS - {key} or key not in b or "wheel" not in b:
        raise ValueError(f'each entry is {{ {key} = "X.Y", wheel = "...", status = "documented", source = "..." }}')
    if b.get("status", "documented") not in ("verified", "documented"):
        raise ValueError("status must be verified or documented")
    wheel = _str_field(b, "wheel", r"vllm-\S+\.whl", "vllm-<v>+cu118-cp<py>-cp<py>-manylinux1_x86_64.whl")
    return VllmBuild(toolkit=Version(_str_field(b, key)), wheel=wheel, status=b.get("status", "documented"),
                     source=str(b.get("source", "")),
                     archs=None if "archs" not in b else _cc_list(b["archs"] if isinstance(b["archs"], list) else None),
                     ptx=None if "ptx" not in b else CC.parse(_str_field(b, "ptx")),
                     python=None if "python" not in b else _python_list(b["python"]))


def _vllm_builds(key: str) -> Callable[[list], tuple[VllmBuild, ...]]:
    return lambda items: tuple(_vllm_build(key, b) for b in items)


_VLLM = _Spec(Vllm, Table.of(
    _VERSION, _req("torch", SpecifierSet), _req("python", SpecifierSet), _req("wheels", _nonempty_wheels, list),
    _opt("wheel_cuda", Version), _opt("wheel_cuda_major", _strict_int, int), _opt("cuda_archs", _cc_list, list),
    _opt("cuda_ptx", CC.parse), _opt("archs_from", default=""), _strs("rocm_archs"),
    Field("variants", _vllm_builds("cuda"), list, ()), Field("rocm_wheels", _vllm_builds("rocm"), list, ()),
    _CONFIDENCE, _SOURCE, _strs("missing_deps"), extra=("python_from", "rocm_archs_from")))


# ---------------------------------------------------------------- torch: one row, many versions x variants

_TORCH = Table.of(_req("versions", _version_list, list), _req("python", SpecifierSet), _SOURCE, _req("variants", kind=list))

_VARIANT_HEAD = Table.of(_req("name"), _opt("only", SpecifierSet))
_VARIANT_BODY = Table.of(
    _opt("cuda", Version), _opt("rocm", Version), _strs("archs"), _CONFIDENCE, _opt("ptx", CC.parse), _flag("cxx11abi"),
    _req("python", SpecifierSet), _req("index_url"), _SOURCE, _opt("note", default=""), _flag("pypi", False),
    _flag("cxx11abi_inferred", False))
_VARIANT = _VARIANT_HEAD + _VARIANT_BODY


def _check_variant(vr: _Row, name: Optional[str], platform: str, archs_known: bool, v: dict[str, Any]) -> None:
    if name and platform == "cpu" and name != "cpu":
        vr.bad("name", "a variant without `cuda` or `rocm` must be named 'cpu'")
    if not archs_known and v["confidence"] != "inferred":
        vr.bad("archs", "a build without its arch list must say confidence = \"inferred\"")
    if platform == "cuda":
        for a in v["archs"] or ():
            try:
                CC.parse(a)
            except ValueError as exc:
                vr.bad("archs", str(exc))


def _torch_variant(r: _Row, version: Version, inherited: dict[str, Any], variant: Any) -> Optional[TorchBuild]:
    vr = r.nested("torch.variants", variant)
    if not isinstance(variant, dict):
        vr.bad("variants", f"expected a table, got {type(variant).__name__}")
        return None
    _VARIANT.check_keys(variant, vr.report)
    head = _VARIANT_HEAD.convert(variant, vr.report)
    if head["only"] is not None and version not in head["only"]:
        return None
    name = head["name"]
    v = _VARIANT_BODY.convert(variant, vr.report, {**inherited, "index_url": f"https://download.pytorch.org/whl/{name}"})
    platform = "cuda" if v["cuda"] else "rocm" if v["rocm"] else "cpu"
    archs_known = "archs" in variant or platform == "cpu"
    _check_variant(vr, name, platform, archs_known, v)
    if not vr.ok:
        return None
    return TorchBuild(
        version=version, variant=name, platform=platform, toolkit=v["cuda"] or v["rocm"], archs=v["archs"], ptx=v["ptx"],
        cxx11abi=v["cxx11abi"], python=v["python"], index_url=v["index_url"], wheel=None, local=name,
        confidence=v["confidence"], source=v["source"], archs_known=archs_known, note=v["note"], pypi=v["pypi"],
        abi_known=not v["cxx11abi_inferred"])


def _read_torch(rows: list[_Row]) -> list[TorchBuild]:
    out = []
    for r in rows:
        row = r.read(_TORCH)
        if not r.ok:
            continue
        inherited = {"python": row["python"], "source": row["source"]}
        for version in row["versions"]:
            for variant in row["variants"]:
                b = _torch_variant(r, version, inherited, variant)
                if b is not None:
                    out.append(b)
    return out


# ---------------------------------------------------------------- DTK: a release and the torch builds for it

_DTK = Table.of(_VERSION, _req("rocm"), _opt("image_hint", default=""), _SOURCE, Field("torch", kind=list, default=[]))
_DTK_TORCH = Table.of(_VERSION, _flag("cxx11abi"), _req("python", SpecifierSet), _req("wheel"), _req("local"), _CONFIDENCE, _SOURCE)


def _dtk_torch(d: Dtk, tr: _Row) -> Optional[TorchBuild]:
    t = tr.read(_DTK_TORCH, {"source": d.source})
    if not tr.ok:
        return None
    return TorchBuild(variant=f"dtk{d.version}", platform="dtk", toolkit=d.version, archs=(), ptx=None, index_url=None, **t)


def _read_dtk(rows: list[_Row]) -> tuple[list[Dtk], list[TorchBuild]]:
    out, builds = [], []
    for r in rows:
        values = r.read(_DTK)
        if not r.ok:
            continue
        torches = values.pop("torch")
        d = Dtk(**values)
        out.append(d)
        for t in torches:
            b = _dtk_torch(d, r.nested("dtk.torch", t))
            if b is not None:
                builds.append(b)
    return out, builds


# ---------------------------------------------------------------- the whole file

_TABLES: dict[str, Callable[[list[_Row]], Any]] = {
    "cuda": _CUDA.read, "gpu": _GPU.read, "gpu_driver": _GPU_DRIVER.read, "torch": _read_torch, "rocm": _ROCM.read,
    "dtk": _read_dtk, "flash_attn": _FLASH_ATTN.read, "flash_attn_broken": _FA_BROKEN.read,
    "torch_abi_break": _ABI_BREAK.read, "vllm": _VLLM.read, "python": _PYTHON.read, "os": _OS.read,
}


def _read_tables(raw: dict, text: str, problems: list[str]) -> dict[str, Any]:
    if raw.get("schema") != 1:
        problems.append("top-level `schema = 1` is missing or unsupported")
    for key in raw:
        if key != "schema" and key not in _TABLES:
            problems.append(f"unknown table `{key}`")
    return {table: read(_rows(raw, text, table, problems)) for table, read in _TABLES.items()}


def _duplicates(items: list, key: Callable[[Any], Any], what: str, problems: list[str]) -> None:
    seen: set = set()
    for it in items:
        k = key(it)
        if k in seen:
            problems.append(f"duplicate {what}: {k}")
        seen.add(k)


def _check_unique(t: dict[str, Any], problems: list[str]) -> None:
    torch, (_, dtk_torch) = t["torch"], t["dtk"]
    _duplicates(t["cuda"], lambda c: c.version, "cuda version", problems)
    _duplicates(torch + dtk_torch, lambda b: b.pin, "torch build", problems)
    _duplicates([b for b in torch if b.pypi], lambda b: str(b.version), "PyPI build (pypi = true) of torch", problems)
    _duplicates(t["flash_attn"], lambda f: f.version, "flash_attn version", problems)
    _duplicates(t["vllm"], lambda v: v.version, "vllm version", problems)
    names = [gpu_name_key(n) for g in t["gpu"] for n in (g.name, *g.aliases)]
    _duplicates(names, lambda n: n, "gpu name or alias", problems)
    _duplicates(t["os"], lambda o: o.name, "os name", problems)
    _duplicates([a for d in t["gpu_driver"] for a in d.archs], lambda a: a.sm, "gpu_driver arch", problems)


def _check_references(t: dict[str, Any], problems: list[str]) -> None:
    torch, oses = t["torch"], t["os"]
    os_names = {o.name for o in oses}
    for row in [*t["cuda"], *t["rocm"]]:
        if row.os is not None and row.os not in os_names:
            problems.append(f"{type(row).__name__.lower()} {row.version}: os {row.os!r} has no [[os]] row")
    if sum(1 for o in oses if o.cpu_image) != 1:
        problems.append("exactly one [[os]] row must name the cpu_image")
    toolkits = {"cuda": {c.version for c in t["cuda"]}, "rocm": {r.version for r in t["rocm"]}}
    for b in torch:
        if b.platform in toolkits and b.toolkit not in toolkits[b.platform]:
            problems.append(f"torch {b.pin}: {b.platform} {b.toolkit} has no [[{b.platform}]] row")
    torch_versions = {b.version for b in torch} | {b.version for b in t["dtk"][1]}
    for v in t["vllm"]:
        if not any(tv in v.torch for tv in torch_versions):
            problems.append(f"vllm {v.version}: torch {v.torch} matches no [[torch]] row")


def _by_version(items: list) -> tuple:
    return tuple(sorted(items, key=lambda x: x.version, reverse=True))


def _assemble(t: dict[str, Any], path: str, raw: dict) -> Matrix:
    dtk, dtk_torch = t["dtk"]
    return Matrix(
        path=path, cuda=_by_version(t["cuda"]), gpus=tuple(t["gpu"]), gpu_drivers=tuple(t["gpu_driver"]),
        torch=tuple(t["torch"] + dtk_torch), rocm=_by_version(t["rocm"]), dtk=_by_version(dtk),
        flash_attn=_by_version(t["flash_attn"]), flash_attn_broken=tuple(t["flash_attn_broken"]),
        torch_abi_breaks=tuple(t["torch_abi_break"]), vllm=_by_version(t["vllm"]), python=_by_version(t["python"]),
        os=tuple(t["os"]), raw=raw)


def parse(text: str, path: str = "matrix.toml") -> Matrix:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError([f"not valid TOML: {exc}"], path) from None
    problems: list[str] = []
    tables = _read_tables(raw, text, problems)
    _check_unique(tables, problems)
    _check_references(tables, problems)
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)), path)
    return _assemble(tables, path, raw)


def default_path() -> Path:
    env = os.environ.get("ENVKIT_MATRIX")
    if env:
        return Path(env)
    return data.matrix_toml()


def _cache_file(text: str) -> Optional[Path]:
    if os.environ.get("ENVKIT_NO_CACHE"):
        return None
    from envkit import __version__

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return base / f"matrix-{digest}-{__version__}-py{sys.version_info[0]}{sys.version_info[1]}.pickle"


@functools.lru_cache(maxsize=4)
def load(path: Optional[str] = None) -> Matrix:
    """Parse and validate once; a valid matrix is cached by the hash of its text, so later
    processes skip the parse (the cache is only a copy: delete it any time)."""
    p = Path(path) if path else default_path()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError([f"cannot read: {exc.strerror}"], str(p)) from None
    cache = _cache_file(text)
    if cache is not None:
        try:
            with cache.open("rb") as fh:
                m = pickle.load(fh)
            if isinstance(m, Matrix):
                return replace(m, path=str(p))
        except Exception:  # a missing, stale or unreadable cache is rebuilt
            pass
    m = parse(text, str(p))
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # build --all loads in threads
            with tmp.open("wb") as fh:
                pickle.dump(m, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cache)
        except OSError:
            pass
    return m
