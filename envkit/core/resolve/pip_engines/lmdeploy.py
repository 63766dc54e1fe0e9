"""`--engine lmdeploy[==VERSION]`: LMDeploy's wheel (its TurboMind library compiled for a list of CUDA archs), its torch
range, the CUDA major of the PyPI build, and its OpenAI-compatible server (`lmdeploy serve api_server`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.core.resolve.pip_engines.common import MODEL_DIR, SERVE_PORT, no_compile, runs_on
from envkit.core.resolve.query import release_starts_with
from envkit.model.engines import EnginePackages, Lmdeploy
from envkit.model.matrix import Matrix
from envkit.model.solution import Conflict, Query

compile_arch = no_compile


def releases(m: Matrix, source: bool) -> list[str]:
    return [str(r.version) for r in m.rows("lmdeploy")]


def candidates(m: Matrix, q: Query, plat: str) -> list[Lmdeploy]:
    return [r for r in m.rows("lmdeploy") if q.engine_version is None or str(r.version) == q.engine_version]


def label(row: Lmdeploy) -> str:
    return f"lmdeploy {row.version}"


def conflicts(m: Matrix, q: Query, row: Lmdeploy, plat: str) -> tuple[list[Conflict], list[str]]:
    if plat != "cuda":
        return [Conflict("engine.platform", f"{label(row)}'s wheel is a CUDA build (its TurboMind library); the query asks for {plat}",
                         "use --engine vllm or --engine torch there", row.source)], []
    out: list[Conflict] = []
    notes: list[str] = []
    g = q.gpu
    if g is not None and g.cc is not None:
        if row.min_cc is not None and g.cc < row.min_cc:
            out.append(Conflict("engine.gpu-arch", f"{label(row)} supports GPUs from compute capability {row.min_cc}; "
                                f"{g.name} is {g.cc}", "use --engine vllm or --engine torch on this GPU", row.source))
        elif row.archs and not runs_on(row.archs, g.cc):
            out.append(Conflict("engine.gpu-arch", f"{label(row)}'s TurboMind library is built for {', '.join(row.archs)}: none runs "
                                f"on {g.name} ({g.arch})", "pick another --engine lmdeploy==VERSION, or --engine vllm", row.source))
        elif not row.archs:
            notes.append(f"{label(row)}: its TurboMind arch list is not in the matrix; {g.arch} is not checked")
    return out, notes


def python_ok(row: Lmdeploy, py: Version) -> Optional[bool]:
    return any(release_starts_with(p, py) or release_starts_with(py, p) for p in row.python) if row.python else None


def python_text(row: Lmdeploy) -> str:
    return ", ".join(str(p) for p in row.python) or "not stated"


def _torch_range(line: Optional[str]) -> Optional[SpecifierSet]:
    try:
        return Requirement(line).specifier if line else None
    except InvalidRequirement:
        return None


def constrain(m: Matrix, q: Query, row: Lmdeploy, base: Query, plat: str) -> Union[Query, Conflict]:
    torch = _torch_range(row.torch)
    if torch is not None and str(torch):
        both = torch if q.torch is None else torch & q.torch
        if not any(both.contains(b.version, prereleases=True) for b in m.torch):
            return Conflict("engine.torch", f"{label(row)} requires torch {torch}; --torch {q.flags().get('torch')} leaves no torch "
                            "the matrix holds", f"drop --torch, or use one in {torch}", row.source)
        base = replace(base, torch=both)
    if row.cuda_major is not None:
        if q.cuda is not None and q.cuda.major != row.cuda_major:
            return Conflict("engine.cuda", f"{label(row)}'s PyPI wheel is built for CUDA {row.cuda_major}; --cuda {q.flags().get('cuda')} "
                            "asks for another", f"use --cuda {row.cuda_major}, or another lmdeploy", row.source)
        if q.cuda is None:
            base = replace(base, cuda=Version(str(row.cuda_major)))
    return base


def packages(row: Lmdeploy, plat: str) -> EnginePackages:
    return EnginePackages("lmdeploy", str(row.version), (f"lmdeploy=={row.version}",), row.source,
                          server=("lmdeploy", "serve", "api_server", MODEL_DIR, "--server-name", "0.0.0.0", "--server-port", str(SERVE_PORT)))
