"""The resolver's input: resolve flags checked and parsed against the matrix into a Query (a GPU found by
name or arch, versions and specifiers in packaging's terms), each bad flag one InputError naming the fix."""
from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Iterable, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.errors import InputError
from envkit.model.flags import ResolveFlags
from envkit.model.matrix import CC, PLATFORMS, Driver, Gpu, Matrix, dtk_text, gpu_name_key
from envkit.model.solution import Query

# the flash-attn csrc kernels envkit builds, and the module each one installs
KERNELS = {"layer_norm": "dropout_layer_norm", "rotary": "rotary_emb"}


def find_gpu(m: Matrix, text: str) -> Gpu:
    key = gpu_name_key(text)
    known = m.index.gpu_by_name.get(key)
    if known is not None:
        return known
    for prefix in ("nvidia", "geforce", "tesla", "amd", "instinct", "hygon", "dcu"):
        if key.startswith(prefix) and key != prefix:
            try:
                return find_gpu(m, key[len(prefix):])
            except InputError:
                pass
    arch = text.strip().lower().replace("-", "_")
    if re.fullmatch(r"(sm_?)?\d+(\.\d)?", arch) and not arch.isdigit() or re.fullmatch(r"sm_?\d+", arch):
        cc = CC.parse(arch)
        return Gpu(name=cc.sm, aliases=(), vendor="nvidia", arch=cc.sm, memory_gb=0, bandwidth_gbs=0, min_dtk=None, source="query")
    if re.fullmatch(r"gfx[0-9a-f]+", arch):
        same = [g for g in m.gpus if g.arch == arch]
        known = next((g for g in same if g.vendor == "amd"), same[0] if same else None)
        vendor = known.vendor if known else "amd"
        return Gpu(name=arch, aliases=(), vendor=vendor, arch=arch, memory_gb=0, bandwidth_gbs=0,
                   min_dtk=known.min_dtk if known else None, source="query")
    names = [g.name for g in m.gpus] + [a for g in m.gpus for a in g.aliases]
    close = difflib.get_close_matches(text, names, n=4, cutoff=0.5) or difflib.get_close_matches(
        text.upper(), [n.upper() for n in names], n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "see `envkit matrix show gpu`"
    raise InputError(f"unknown GPU {text!r}", f"{hint} (or give the arch: sm_86, gfx942)")


def _spec(text: str, what: str) -> tuple[SpecifierSet, Optional[str]]:
    """'2' -> ==2.*, '2.6' -> ==2.6.*, '2.1.2+cu118' -> ==2.1.2 and local cu118, '>=2.5' as is."""
    t = text.strip().replace(" ", "")
    local = None
    try:
        if re.match(r"^[<>=!~]", t):
            return SpecifierSet(t), None
        v = Version(t)
        local = v.local
        base = v.public
        if len(v.release) < 3 and v.pre is None and v.post is None and v.dev is None:
            return SpecifierSet(f"=={base}.*"), local
        return SpecifierSet(f"=={base}"), local
    except (InvalidVersion, InvalidSpecifier):
        raise InputError(f"{what} {text!r} is not a PEP 440 version or specifier",
                         "write it like 2.1.2, 2.1, '>=2.5,<2.7' or 2.1.2+cu118") from None


def _release_prefix(text: str, what: str, pattern: str, example: str, known: list[Version], show: Callable[[Version], str]) -> Version:
    """A toolkit version that must be a prefix of a release in the matrix (6.2 matches 6.2.4)."""
    v = _xy(text, f"{what} version", pattern, example)
    if not any(release_starts_with(k, v) for k in known):
        raise InputError(f"{what} {text} is not in the matrix", f"use one of {', '.join(show(k) for k in reversed(known))}")
    return v


def _xy(text: str, what: str, pattern: str, example: str) -> Version:
    t = text.strip().lower().lstrip("v")
    if not re.fullmatch(pattern, t):
        raise InputError(f"{what} {text!r} is malformed", f"write it like {example}")
    return Version(t)


def parse_query(m: Matrix, flags: Optional[ResolveFlags] = None, **given: Optional[str]) -> Query:
    """The resolve flags (a ResolveFlags, or the same as keywords) checked and parsed against the matrix."""
    f = flags if flags is not None else ResolveFlags.from_mapping(given)
    q: dict[str, Any] = {"given": tuple(f.to_dict().items())}
    if f.gpu:
        q["gpu"] = find_gpu(m, f.gpu)
    if f.driver:
        q["driver"] = _parse_driver(f.driver)
    if f.platform:
        q["platform"] = _parse_platform(f.platform)
    if f.cuda:
        q["cuda"] = _parse_cuda(m, f.cuda)
    if f.rocm:
        q["rocm"] = _release_prefix(f.rocm, "ROCm", r"\d+\.\d+(\.\d+)?", "6.2", [r.version for r in m.rocm], str)
    if f.dtk:
        q["dtk"] = _release_prefix(f.dtk, "DTK", r"\d{2}\.\d{2}(\.\d+)?", "24.04", [d.version for d in m.dtk], dtk_text)
    if f.python:
        q["python"] = _parse_python(m, f.python)
    if f.torch:
        q["torch"], q["torch_local"] = _parse_torch(m, f.torch)
    if f.flash_attn:
        q["flash_attn"] = _parse_release(m, "flash_attn", f.flash_attn, "flash-attn", " (FlashAttention 1.x, 3 and 4 are not modelled)")
    if f.vllm:
        q["vllm"] = _parse_release(m, "vllm", f.vllm, "vLLM", "")
    if f.kernels:
        q["kernels"] = _parse_kernels(f.kernels)
    return Query(**q)


def _parse_driver(text: str) -> Driver:
    if not re.fullmatch(r"\d{3}(\.\d+){0,2}", text.strip()):
        raise InputError(f"driver version {text!r} is malformed", "write it like 535.104.05 (nvidia-smi's Driver Version)")
    return Driver.parse(text)


def _parse_platform(text: str) -> str:
    if text not in PLATFORMS:
        raise InputError(f"unknown platform {text!r}", f"use one of {', '.join(PLATFORMS)}")
    return text


def _parse_cuda(m: Matrix, text: str) -> Version:
    v = _xy(text, "CUDA version", r"\d+\.\d+(\.\d+)?", "12.4")
    v = Version(f"{v.major}.{v.minor}")
    if m.cuda_toolkit(v) is None:
        raise InputError(f"CUDA {text} is not in the matrix",
                         f"use one of {', '.join(str(c.version) for c in reversed(m.cuda))}")
    return v


def _parse_python(m: Matrix, text: str) -> Version:
    v = _xy(text, "Python version", r"3\.\d+", "3.10")
    if v not in {p.version for p in m.python}:
        raise InputError(f"Python {text} is not in the matrix",
                         f"use one of {', '.join(str(p.version) for p in reversed(m.python))}")
    return v


def _parse_torch(m: Matrix, text: str) -> tuple[SpecifierSet, Optional[str]]:
    spec, local = _spec(text, "torch")
    if not matches_any(m, "torch", spec):
        raise InputError(f"no torch release in the matrix matches {text!r}",
                         f"known releases: {version_span(sorted({b.version for b in m.torch}))}")
    if local and not any(b.local == local for b in m.torch):
        raise InputError(f"unknown torch variant +{local}",
                         "use a variant like +cu118, +cu124, +rocm6.2, +cpu")
    return spec, local


def _parse_release(m: Matrix, table: str, text: str, what: str, not_modelled: str) -> SpecifierSet:
    """A flash-attn or vLLM specifier that admits at least one release in the matrix."""
    spec, _ = _spec(text, what)
    if not matches_any(m, table, spec):
        known = [f.version for f in m.flash_attn] if table == "flash_attn" else [v.version for v in m.vllm]
        raise InputError(f"no {what} release in the matrix matches {text!r}",
                         f"known releases: {version_span(known)}{not_modelled}")
    return spec


def _parse_kernels(text: str) -> tuple[str, ...]:
    names = tuple(sorted({k.strip() for k in text.split(",") if k.strip()}))
    bad = [k for k in names if k not in KERNELS]
    if bad:
        raise InputError(f"unknown kernel(s): {', '.join(bad)}", f"use {', '.join(KERNELS)}")
    return names


def release_starts_with(full: Version, given: Version) -> bool:
    return full.release[: len(given.release)] == given.release


def version_span(versions: Iterable[Version]) -> str:
    vs = sorted(versions)
    return f"{vs[0]} ... {vs[-1]}" if vs else "none"


def matches_any(m: Matrix, table: str, spec: SpecifierSet) -> bool:
    return any(spec.contains(v, prereleases=True) for v in m.index.versions[table])


def matching_versions(m: Matrix, table: str, spec: SpecifierSet) -> frozenset[Version]:
    """The versions of one table (torch, flash_attn, vllm) that a query's specifier admits."""
    return frozenset(spec.filter(m.index.versions[table], prereleases=True))
