"""Load and validate matrix.toml into typed, frozen tables. Nothing else in envkit reads the TOML.

Every row must name its `source`. The loader checks every row and reports all bad rows at once,
each with its line number, before anything uses the data.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit import data
from envkit.errors import MatrixError
from envkit.model.matrix import CC, CudaToolkit, Driver, Dtk, FaRemap, FaWheelBuild, FlashAttn, FlashAttnBroken, Gpu, GpuDriver, Matrix, OsRelease, PythonRelease, Rocm, TorchAbiBreak, TorchBuild, VENDOR_PLATFORM, Vllm, VllmBuild
from envkit.model.matrix import gpu_name_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# ---------------------------------------------------------------- validation helpers

class _Row:
    """Reads one row, recording every problem instead of stopping at the first."""

    def __init__(self, table: str, index: int, line: int, data: dict, problems: list[str]) -> None:
        self.table, self.index, self.line, self.data, self.problems = table, index, line, data, problems
        self.ok = True

    def _bad(self, key: str, why: str) -> None:
        self.ok = False
        self.problems.append(f"line {self.line}: [[{self.table}]] #{self.index + 1} `{key}`: {why}")

    def get(self, key: str, conv: Callable[[Any], Any], default: Any = ..., kind: type | tuple = str) -> Any:
        if key not in self.data:
            if default is ...:
                self._bad(key, "missing")
                return None
            return default
        value = self.data[key]
        if not isinstance(value, kind):
            self._bad(key, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
            return None
        try:
            return conv(value)
        except (InvalidVersion, InvalidSpecifier, ValueError, KeyError, TypeError) as exc:
            self._bad(key, str(exc) or f"invalid value {value!r}")
            return None

    def source(self, inherited: str = "") -> str:
        src = self.data.get("source", inherited)
        if not isinstance(src, str) or not re.match(r"(https?://|doc:|file:|wheel:)\S+", src):
            self._bad("source", "every row needs a source: a URL or 'doc:<document>'")
            return ""
        return src

    def unknown_keys(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                self._bad(key, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _ident(x: Any) -> Any:
    return x


def _str_list(x: Any) -> tuple[str, ...]:
    if not isinstance(x, list) or not all(isinstance(i, str) for i in x):
        raise ValueError("expected a list of strings")
    return tuple(x)


def _cc_list(x: Any) -> tuple[CC, ...]:
    return tuple(CC.parse(i) for i in _str_list(x))


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


_confidence = _one_of("confidence", "verified", "inferred")


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


# ---------------------------------------------------------------- table parsers

def _parse_cuda(rows: list[_Row]) -> list[CudaToolkit]:
    out = []
    for r in rows:
        r.unknown_keys({"version", "release", "min_driver", "toolkit_driver", "archs", "cudnn", "devel_image", "runtime_image", "os", "source"})
        t = CudaToolkit(
            version=r.get("version", Version),
            release=r.get("release", _ident),
            min_driver=r.get("min_driver", Driver.parse),
            toolkit_driver=r.get("toolkit_driver", Driver.parse, None),
            archs=r.get("archs", _cc_list, kind=list),
            cudnn=r.get("cudnn", _ident),
            devel_image=r.get("devel_image", _ident),
            runtime_image=r.get("runtime_image", _ident),
            os=r.get("os", _ident),
            source=r.source(),
        )
        if r.ok:
            out.append(t)
    return out


def _parse_gpus(rows: list[_Row]) -> list[Gpu]:
    out = []
    for r in rows:
        r.unknown_keys({"name", "aliases", "vendor", "arch", "memory_gb", "bandwidth_gbs", "min_dtk", "min_driver", "source"})
        vendor = r.get("vendor", _one_of("vendor", *VENDOR_PLATFORM))
        arch = r.get("arch", _pattern(r"sm_\d+|gfx[0-9a-f]+", "sm_90 or gfx942"))
        g = Gpu(
            name=r.get("name", _ident),
            aliases=r.get("aliases", _str_list, (), kind=list),
            vendor=vendor,
            arch=arch,
            memory_gb=r.get("memory_gb", float, kind=(int, float)),
            bandwidth_gbs=r.get("bandwidth_gbs", float, kind=(int, float)),
            min_dtk=r.get("min_dtk", Version, None),
            source=r.source(),
            min_driver=r.get("min_driver", Driver.parse, None),
        )
        if r.ok:
            out.append(g)
    return out


def _parse_gpu_drivers(rows: list[_Row]) -> list[GpuDriver]:
    out = []
    for r in rows:
        r.unknown_keys({"family", "archs", "min_driver", "last_branch", "confidence", "source"})
        x = GpuDriver(
            family=r.get("family", _ident),
            archs=r.get("archs", _cc_list, kind=list),
            min_driver=r.get("min_driver", Driver.parse, None),
            last_branch=r.get("last_branch", int, None, kind=int),
            confidence=r.get("confidence", _confidence, "verified"),
            source=r.source(),
        )
        if r.ok and x.min_driver is None and x.last_branch is None:
            r._bad("min_driver", "give min_driver, last_branch or both")
        if r.ok:
            out.append(x)
    return out


def _torch_variant(r: _Row, version: Version, python: SpecifierSet, source: str, v: dict, problems: list[str]) -> Optional[TorchBuild]:
    vr = _Row("torch.variants", r.index, r.line, v, problems)
    vr.unknown_keys({"name", "cuda", "rocm", "archs", "ptx", "cxx11abi", "only", "index_url", "python", "confidence", "note", "pypi", "cxx11abi_inferred", "source"})
    name = vr.get("name", _ident)
    only = vr.get("only", SpecifierSet, None)
    if only is not None and version not in only:
        return None
    cuda = vr.get("cuda", Version, None)
    rocm = vr.get("rocm", Version, None)
    platform = "cuda" if cuda else "rocm" if rocm else "cpu"
    if name and platform == "cpu" and name != "cpu":
        vr._bad("name", "a variant without `cuda` or `rocm` must be named 'cpu'")
    archs_known = "archs" in v or platform == "cpu"
    archs = vr.get("archs", _str_list, (), kind=list)
    confidence = vr.get("confidence", _confidence, "verified")
    if not archs_known and confidence != "inferred":
        vr._bad("archs", "a build without its arch list must say confidence = \"inferred\"")
    if platform == "cuda":
        for a in archs or ():
            try:
                CC.parse(a)
            except ValueError as exc:
                vr._bad("archs", str(exc))
    b = TorchBuild(
        version=version,
        variant=name,
        platform=platform,
        toolkit=cuda or rocm,
        archs=archs,
        ptx=vr.get("ptx", CC.parse, None),
        cxx11abi=vr.get("cxx11abi", bool, kind=bool),
        python=vr.get("python", SpecifierSet, python),
        index_url=vr.get("index_url", _ident, f"https://download.pytorch.org/whl/{name}"),
        wheel=None,
        local=name,
        confidence=confidence,
        source=vr.source(source),
        archs_known=archs_known,
        note=vr.get("note", _ident, ""),
        pypi=vr.get("pypi", bool, False, kind=bool),
        abi_known=not vr.get("cxx11abi_inferred", bool, False, kind=bool),
    )
    return b if vr.ok else None


def _parse_torch(rows: list[_Row], problems: list[str]) -> list[TorchBuild]:
    out = []
    for r in rows:
        r.unknown_keys({"versions", "python", "variants", "source"})
        versions = r.get("versions", lambda x: tuple(Version(v) for v in _str_list(x)), kind=list)
        python = r.get("python", SpecifierSet)
        source = r.source()
        variants = r.get("variants", _ident, kind=list)
        if not r.ok:
            continue
        for v in versions:
            for var in variants:
                b = _torch_variant(r, v, python, source, var, problems)
                if b is not None:
                    out.append(b)
    return out


def _parse_rocm(rows: list[_Row]) -> list[Rocm]:
    out = []
    for r in rows:
        r.unknown_keys({"version", "archs", "devel_image", "runtime_image", "os", "confidence", "source"})
        x = Rocm(
            version=r.get("version", Version),
            archs=r.get("archs", _str_list, (), kind=list),
            devel_image=r.get("devel_image", _ident, None),
            runtime_image=r.get("runtime_image", _ident, None),
            os=r.get("os", _ident, None),
            source=r.source(),
        )
        if r.ok and (x.devel_image is None) != (x.os is None):
            r._bad("devel_image", "give devel_image, runtime_image and os together, or none of them")
        if r.ok:
            out.append(x)
    return out


def _parse_dtk(rows: list[_Row], problems: list[str]) -> tuple[list[Dtk], list[TorchBuild]]:
    out, builds = [], []
    for r in rows:
        r.unknown_keys({"version", "rocm", "image_hint", "torch", "source"})
        d = Dtk(
            version=r.get("version", Version),
            rocm=r.get("rocm", _ident),
            image_hint=r.get("image_hint", _ident, ""),
            source=r.source(),
        )
        torches = r.get("torch", _ident, [], kind=list)
        if not r.ok:
            continue
        out.append(d)
        for t in torches:
            tr = _Row("dtk.torch", r.index, r.line, t, problems)
            tr.unknown_keys({"version", "local", "python", "cxx11abi", "wheel", "confidence", "source"})
            b = TorchBuild(
                version=tr.get("version", Version),
                variant=f"dtk{d.version}",
                platform="dtk",
                toolkit=d.version,
                archs=(),
                ptx=None,
                cxx11abi=tr.get("cxx11abi", bool, kind=bool),
                python=tr.get("python", SpecifierSet),
                index_url=None,
                wheel=tr.get("wheel", _ident),
                local=tr.get("local", _ident),
                confidence=tr.get("confidence", _confidence, "verified"),
                source=tr.source(d.source),
            )
            if tr.ok:
                builds.append(b)
    return out, builds


def _python_list(x: Any) -> tuple[Version, ...]:
    if not isinstance(x, list) or not all(isinstance(p, str) and re.fullmatch(r"3\.\d+", p) for p in x):
        raise ValueError('a Python list is like ["3.10", "3.11"]')
    return tuple(Version(p) for p in x)


def _str_field(d: dict, key: str, pattern: str = r".+", example: str = "") -> str:
    v = d.get(key)
    if not isinstance(v, str) or not re.fullmatch(pattern, v):
        raise ValueError(f"{key} must be a string" + (f" like {example}" if example else ""))
    return v


def _fa_wheels(items: list) -> tuple[FaWheelBuild, ...]:
    out = []
    for w in items:
        if not isinstance(w, dict):
            raise ValueError("each wheels entry must be an inline table")
        unknown = set(w) - {"cuda", "torch", "torch_index", "nvcc", "platform", "python", "abi"}
        if unknown:
            raise ValueError(f"unknown wheels key(s): {', '.join(sorted(unknown))}")
        abi = w.get("abi")
        if not isinstance(abi, list) or not all(isinstance(a, bool) for a in abi):
            raise ValueError("wheels.abi must be a list of booleans")
        cuda = w.get("cuda")
        if not isinstance(cuda, str) or not cuda.isdigit():
            raise ValueError('wheels.cuda must be the cu tag\'s digits, like "12" or "118"')
        out.append(FaWheelBuild(cuda=cuda, torch=Version(_str_field(w, "torch")), torch_index=_str_field(w, "torch_index", r"cu\d+", "cu121"),
                                nvcc=Version(_str_field(w, "nvcc")),
                                platform=_str_field({"platform": w.get("platform", "linux_x86_64")}, "platform", r"linux_(x86_64|aarch64)", "linux_x86_64"),
                                python=_python_list(w.get("python")), abi=tuple(abi)))
    return tuple(out)


def _fa_rule(x: Any) -> tuple[Optional[str], tuple[FaRemap, ...]]:
    if x == "none":
        return None, ()
    if not isinstance(x, dict) or x.get("format") not in ("major", "major_minor"):
        raise ValueError('wheel_rule must be "none" or { format = "major" | "major_minor", remap = [...] }')
    remap = []
    for r in x.get("remap", []):
        if not isinstance(r, dict) or "to" not in r or set(r) - {"cuda_major", "torch", "to"} \
                or ("cuda_major" in r and (not isinstance(r["cuda_major"], int) or isinstance(r["cuda_major"], bool))) \
                or ("torch" in r and not (isinstance(r["torch"], str) and re.fullmatch(r"\d+\.\d+", r["torch"]))) \
                or not isinstance(r["to"], str):
            raise ValueError('each remap entry is { cuda_major = 12, torch = "2.1", to = "12.2" } (cuda_major and torch optional)')
        remap.append(FaRemap(cuda_major=r.get("cuda_major"), torch=r.get("torch"), to=Version(r["to"])))
    return x["format"], tuple(remap)


def _fa_archs(items: list) -> tuple[tuple[CC, SpecifierSet], ...]:
    out = []
    for a in items:
        if not isinstance(a, dict) or set(a) != {"arch", "nvcc"}:
            raise ValueError('each archs entry is { arch = "8.0", nvcc = ">=11.6" }')
        out.append((CC.parse(a["arch"]), SpecifierSet(a["nvcc"])))
    return tuple(out)


def _parse_flash_attn(rows: list[_Row]) -> list[FlashAttn]:
    out = []
    for r in rows:
        r.unknown_keys({"version", "tag", "python", "torch", "nvcc", "wheel_rule", "wheel_set", "wheels", "archs",
                        "rocm", "rocm_archs", "kernels", "kernel_setup_py", "confidence", "source"})
        rule = r.get("wheel_rule", _fa_rule, kind=(str, dict))
        x = FlashAttn(
            version=r.get("version", Version),
            tag=r.get("tag", _ident, ""),
            python=r.get("python", SpecifierSet),
            torch=r.get("torch", SpecifierSet),
            nvcc=r.get("nvcc", SpecifierSet),
            wheel_format=rule[0] if rule else None,
            wheel_remap=rule[1] if rule else (),
            wheel_set=r.get("wheel_set", _one_of("wheel_set", "workflow", "none", "unknown")),
            wheels=r.get("wheels", _fa_wheels, (), kind=list),
            archs=r.get("archs", _fa_archs, kind=list),
            rocm=r.get("rocm", SpecifierSet, None),
            rocm_archs=r.get("rocm_archs", _str_list, (), kind=list),
            kernels=r.get("kernels", _str_list, (), kind=list),
            kernel_setup_py=r.get("kernel_setup_py", bool, False, kind=bool),
            confidence=r.get("confidence", _confidence, "verified"),
            source=r.source(),
        )
        if r.ok and x.wheel_set != "workflow" and x.wheels:
            r._bad("wheels", f"wheels are listed but wheel_set is {x.wheel_set!r}")
        if r.ok:
            out.append(x)
    return out


def _parse_abi_breaks(rows: list[_Row]) -> list[TorchAbiBreak]:
    out = []
    for r in rows:
        r.unknown_keys({"torch", "symbol", "why", "source"})
        x = TorchAbiBreak(torch=r.get("torch", Version), symbol=r.get("symbol", _ident), why=r.get("why", _ident), source=r.source())
        if r.ok and (x.torch.micro == 0 or len(x.torch.release) != 3):
            r._bad("torch", "an ABI break is a patch release like 2.3.1")
        if r.ok:
            out.append(x)
    return out


def _parse_fa_broken(rows: list[_Row]) -> list[FlashAttnBroken]:
    out = []
    for r in rows:
        r.unknown_keys({"flash_attn", "torch", "cxx11abi", "why", "source"})
        x = FlashAttnBroken(flash_attn=r.get("flash_attn", SpecifierSet), torch=r.get("torch", _ident),
                            cxx11abi=r.get("cxx11abi", bool, kind=bool), why=r.get("why", _ident), source=r.source())
        if r.ok:
            out.append(x)
    return out


def _strict_int(x: Any) -> int:
    if isinstance(x, bool):
        raise ValueError("expected an integer, got a boolean")
    return int(x)


def _nonempty_wheels(x: list) -> tuple[str, ...]:
    ws = _str_list(x)
    if not ws or not all(w.endswith(".whl") for w in ws):
        raise ValueError("wheels lists the release's wheel filenames (at least one)")
    return ws


def _vllm_builds(key: str) -> Callable[[list], tuple[VllmBuild, ...]]:
    def conv(items: list) -> tuple[VllmBuild, ...]:
        out = []
        for b in items:
            if not isinstance(b, dict) or set(b) - {key, "wheel", "status", "source", "archs", "ptx", "python"} or key not in b or "wheel" not in b:
                raise ValueError(f'each entry is {{ {key} = "X.Y", wheel = "...", status = "documented", source = "..." }}')
            if b.get("status", "documented") not in ("verified", "documented"):
                raise ValueError("status must be verified or documented")
            wheel = _str_field(b, "wheel", r"vllm-\S+\.whl", "vllm-<v>+cu118-cp<py>-cp<py>-manylinux1_x86_64.whl")
            out.append(VllmBuild(toolkit=Version(_str_field(b, key)), wheel=wheel, status=b.get("status", "documented"),
                                 source=str(b.get("source", "")),
                                 archs=None if "archs" not in b else _cc_list(b["archs"] if isinstance(b["archs"], list) else None),
                                 ptx=None if "ptx" not in b else CC.parse(_str_field(b, "ptx")),
                                 python=None if "python" not in b else _python_list(b["python"])))
        return tuple(out)
    return conv


def _parse_vllm(rows: list[_Row]) -> list[Vllm]:
    out = []
    for r in rows:
        r.unknown_keys({"version", "torch", "python", "python_from", "wheels", "wheel_cuda", "wheel_cuda_major", "cuda_archs", "cuda_ptx",
                        "archs_from", "rocm_archs", "rocm_archs_from", "variants", "rocm_wheels", "missing_deps", "confidence", "source"})
        x = Vllm(
            version=r.get("version", Version),
            torch=r.get("torch", SpecifierSet),
            python=r.get("python", SpecifierSet),
            wheels=r.get("wheels", _nonempty_wheels, kind=list),
            wheel_cuda=r.get("wheel_cuda", Version, None),
            wheel_cuda_major=r.get("wheel_cuda_major", _strict_int, None, kind=int),
            cuda_archs=r.get("cuda_archs", _cc_list, None, kind=list),
            cuda_ptx=r.get("cuda_ptx", CC.parse, None),
            archs_from=r.get("archs_from", _ident, ""),
            rocm_archs=r.get("rocm_archs", _str_list, (), kind=list),
            variants=r.get("variants", _vllm_builds("cuda"), (), kind=list),
            rocm_wheels=r.get("rocm_wheels", _vllm_builds("rocm"), (), kind=list),
            confidence=r.get("confidence", _confidence, "verified"),
            source=r.source(),
            missing_deps=r.get("missing_deps", _str_list, (), kind=list),
        )
        if r.ok:
            out.append(x)
    return out


def _parse_python(rows: list[_Row]) -> list[PythonRelease]:
    out = []
    for r in rows:
        r.unknown_keys({"version", "tarball", "source"})
        x = PythonRelease(version=r.get("version", Version), tarball=r.get("tarball", _ident), source=r.source())
        if r.ok:
            out.append(x)
    return out


_OS_LISTS = ("python_packages", "python_runtime", "build_packages", "cpython_build", "cpython_runtime")


def _parse_os(rows: list[_Row]) -> list[OsRelease]:
    out = []
    for r in rows:
        r.unknown_keys({"name", "family", "glibc", "python", "cpu_image", "source", *_OS_LISTS})
        lists = {k: r.get(k, _str_list, kind=list) for k in _OS_LISTS}
        x = OsRelease(name=r.get("name", _pattern(r"[a-z]+\d+(\.\d+)?", "ubuntu22.04")),
                      family=r.get("family", _one_of("family", "debian")), glibc=r.get("glibc", Version),
                      python=r.get("python", Version), cpu_image=r.get("cpu_image", _ident, None),
                      source=r.source(), **lists)
        if r.ok:
            out.append(x)
    return out


def _duplicates(items: list, key: Callable[[Any], Any], what: str, problems: list[str]) -> None:
    seen: set = set()
    for it in items:
        k = key(it)
        if k in seen:
            problems.append(f"duplicate {what}: {k}")
        seen.add(k)


def parse(text: str, path: str = "matrix.toml") -> Matrix:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError([f"not valid TOML: {exc}"], path) from None
    problems: list[str] = []
    if raw.get("schema") != 1:
        problems.append("top-level `schema = 1` is missing or unsupported")
    known = {"schema", "cuda", "gpu", "gpu_driver", "torch", "rocm", "dtk", "flash_attn", "flash_attn_broken", "torch_abi_break", "vllm", "python", "os"}
    for key in raw:
        if key not in known:
            problems.append(f"unknown table `{key}`")
    cuda = _parse_cuda(_rows(raw, text, "cuda", problems))
    gpus = _parse_gpus(_rows(raw, text, "gpu", problems))
    gpu_drivers = _parse_gpu_drivers(_rows(raw, text, "gpu_driver", problems))
    torch = _parse_torch(_rows(raw, text, "torch", problems), problems)
    rocm = _parse_rocm(_rows(raw, text, "rocm", problems))
    dtk, dtk_torch = _parse_dtk(_rows(raw, text, "dtk", problems), problems)
    fa = _parse_flash_attn(_rows(raw, text, "flash_attn", problems))
    fa_broken = _parse_fa_broken(_rows(raw, text, "flash_attn_broken", problems))
    abi_breaks = _parse_abi_breaks(_rows(raw, text, "torch_abi_break", problems))
    vllm = _parse_vllm(_rows(raw, text, "vllm", problems))
    python = _parse_python(_rows(raw, text, "python", problems))
    oses = _parse_os(_rows(raw, text, "os", problems))

    _duplicates(cuda, lambda c: c.version, "cuda version", problems)
    _duplicates(torch + dtk_torch, lambda b: b.pin, "torch build", problems)
    _duplicates([b for b in torch if b.pypi], lambda b: str(b.version), "PyPI build (pypi = true) of torch", problems)
    _duplicates(fa, lambda f: f.version, "flash_attn version", problems)
    _duplicates(vllm, lambda v: v.version, "vllm version", problems)
    names: list[str] = []
    for g in gpus:
        names.extend(gpu_name_key(n) for n in (g.name, *g.aliases))
    _duplicates(names, lambda n: n, "gpu name or alias", problems)
    _duplicates(oses, lambda o: o.name, "os name", problems)
    _duplicates([a for d in gpu_drivers for a in d.archs], lambda a: a.sm, "gpu_driver arch", problems)
    os_names = {o.name for o in oses}
    for row in [*cuda, *rocm]:
        if row.os is not None and row.os not in os_names:
            problems.append(f"{type(row).__name__.lower()} {row.version}: os {row.os!r} has no [[os]] row")
    if sum(1 for o in oses if o.cpu_image) != 1:
        problems.append("exactly one [[os]] row must name the cpu_image")
    cuda_versions = {c.version for c in cuda}
    rocm_versions = {r.version for r in rocm}
    for b in torch:
        if b.platform == "cuda" and b.toolkit not in cuda_versions:
            problems.append(f"torch {b.pin}: cuda {b.toolkit} has no [[cuda]] row")
        if b.platform == "rocm" and b.toolkit not in rocm_versions:
            problems.append(f"torch {b.pin}: rocm {b.toolkit} has no [[rocm]] row")
    torch_versions = {b.version for b in torch} | {b.version for b in dtk_torch}
    for v in vllm:
        if not any(t in v.torch for t in torch_versions):
            problems.append(f"vllm {v.version}: torch {v.torch} matches no [[torch]] row")
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)), path)

    def by_version(items: list) -> tuple:
        return tuple(sorted(items, key=lambda x: x.version, reverse=True))

    return Matrix(
        path=path,
        cuda=by_version(cuda),
        gpus=tuple(gpus),
        gpu_drivers=tuple(gpu_drivers),
        torch=tuple(torch + dtk_torch),
        rocm=by_version(rocm),
        dtk=by_version(dtk),
        flash_attn=by_version(fa),
        flash_attn_broken=tuple(fa_broken),
        torch_abi_breaks=tuple(abi_breaks),
        vllm=by_version(vllm),
        python=by_version(python),
        os=tuple(oses),
        raw=raw,
    )


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
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                pickle.dump(m, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cache)
        except OSError:
            pass
    return m
