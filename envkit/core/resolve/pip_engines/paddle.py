"""`--engine paddle[==VERSION]`: a PaddlePaddle GPU build from PyPI or Paddle's own index or find-links page, with its
CUDA and cuDNN and the Pythons it is built for."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

from packaging.version import InvalidVersion, Version

from envkit.core.resolve.pip_engines.common import UNCHECKED, no_compile, runs_on
from envkit.core.resolve.query import release_starts_with
from envkit.model.engines import EnginePackages, Paddle
from envkit.model.matrix import CC, Matrix
from envkit.model.solution import Conflict, Query

compile_arch = no_compile


def releases(m: Matrix, source: bool) -> list[str]:
    return [r.version for r in m.rows("paddle")]


def _version(r: Paddle) -> Version:
    try:
        return Version(r.version)
    except InvalidVersion:
        return Version("0")


def candidates(m: Matrix, q: Query, plat: str) -> list[Paddle]:
    v = q.engine_version
    rows = [r for r in m.rows("paddle") if r.package == "paddlepaddle-gpu" and r.cuda and (v is None or r.version == v)]
    # Paddle's .postNNN is a CUDA variant of the release, not a later one: the release first, then PyPI's own build
    return sorted(rows, key=lambda r: (v is not None or not _version(r).is_prerelease, _version(r).release, r.index is None,
                                       Version(r.cuda or "0")), reverse=True)


def label(row: Paddle) -> str:
    return f"{row.package} {row.version} ({row.variant})"


def conflicts(m: Matrix, q: Query, row: Paddle, plat: str) -> tuple[list[Conflict], list[str]]:
    if plat == "cuda":
        out = _built_cuda_targets(m, q, row)
        g = q.gpu
        if out or g is None or g.cc is None or g.vendor != "nvidia":
            return out, []
        if not row.archs:
            return [], [f"{label(row)}: the archs its libraries carry are not in the matrix; {g.arch} {UNCHECKED}"]
        if not runs_on(row.archs, g.cc):
            return [Conflict("engine.gpu-arch", f"{label(row)}'s libraries carry SASS for {', '.join(row.archs)} and no PTX: none runs "
                             f"on {g.name} ({g.arch})", _arch_fix(m, g.cc, g.name), row.source)], []
        return [], []
    return [Conflict("engine.platform", f"{label(row)} is a CUDA build; the query asks for {plat}"
                     + (" (Paddle's Hygon DCU builds come as Paddle's own images)" if plat == "dtk" else ""),
                     "use --engine torch there, or Paddle's DCU image", row.source)], []


def _built_cuda_targets(m: Matrix, q: Query, row: Paddle) -> list[Conflict]:
    """A Paddle build is compiled by its CUDA's nvcc: a GPU that CUDA cannot target has no kernel in it, and Paddle
    refuses to run on an arch it was not compiled for ("Mismatched GPU Architecture", PaddlePaddle/Paddle#76037)."""
    g = q.gpu
    if g is None or g.cc is None or g.vendor != "nvidia" or not row.cuda:
        return []
    built = Version(row.cuda)
    toolkit = next((t for t in m.cuda if release_starts_with(t.version, built)), None)
    if toolkit is None or toolkit.can_target(g.cc):
        return []
    able = sorted({Version(r.cuda) for r in m.rows("paddle") if r.cuda and any(
        release_starts_with(t.version, Version(r.cuda)) and t.can_target(g.cc) for t in m.cuda)})
    fix = (f"pick a Paddle build for CUDA {able[0]} or later (--engine paddle==VERSION, the builds of its index)" if able
           else "no Paddle build in the matrix is compiled for it: use --engine vllm or --engine torch")
    return [Conflict("engine.gpu-arch", f"{label(row)} is compiled with CUDA {row.cuda}, which cannot target {g.cc.sm} "
                     f"({g.name})", fix, f"{row.source}; {toolkit.source}")]


def _arch_fix(m: Matrix, cc: CC, gpu: str) -> str:
    """The builds whose measured archs run on the GPU, or that none measured does (a pinned query's fix is the build that
    resolves, pip_engines._release_fix)."""
    able = [r for r in m.rows("paddle") if r.archs and runs_on(r.archs, cc)]
    if able:
        return f"use a Paddle build whose libraries run on {cc.sm}: " + ", ".join(r.version for r in able)
    return f"no Paddle build whose archs the matrix holds runs on {gpu} ({cc.sm}): use --engine vllm or --engine torch"


def python_ok(row: Paddle, py: Version) -> Optional[bool]:
    return any(release_starts_with(p, py) or release_starts_with(py, p) for p in row.python) if row.python else None


def python_text(row: Paddle) -> str:
    return ", ".join(str(p) for p in row.python) or "not stated"


def constrain(m: Matrix, q: Query, row: Paddle, base: Query, plat: str) -> Union[Query, Conflict]:
    if not row.cuda:
        return base
    cuda = Version(row.cuda)
    if q.cuda is not None and not release_starts_with(cuda, q.cuda) and not release_starts_with(q.cuda, cuda):
        return Conflict("engine.cuda", f"{label(row)} is built for CUDA {row.cuda}; --cuda {q.flags().get('cuda')} asks for another",
                        f"use --cuda {row.cuda}, or another build", row.source)
    # Paddle 2.x links the system's CUDA and cuDNN: the image's CUDA is the build's; 3.x wheels carry their own CUDA
    # libraries (its install docs), so the image needs the same major only
    bundled = _version(row) >= Version("3.0.0.dev0")
    return replace(base, cuda=Version(str(cuda.major)) if bundled else Version(f"{cuda.major}.{cuda.minor}"))


def packages(row: Paddle, plat: str) -> EnginePackages:
    return EnginePackages("paddle", row.version, (f"{row.package}=={row.version}",), row.source, index_url=row.index or None,
                          find_links=row.find_links)
