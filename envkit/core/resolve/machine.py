"""The target's CPU architecture (--platform-arch, a Grace GPU, or --gpu auto on an aarch64 host), pure. The torch
tables describe the x86_64 wheels; an aarch64 target sees each build as its aarch64 wheels are: their own arch list,
Pythons and C++ ABI where a source states them, else not known (the GPU checks then refuse rather than guess). What
has no aarch64 build at all is refused here, naming what is missing."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from envkit.model.engine_specs import CONTAINER_ENGINES, PIP_ENGINES
from envkit.model.matrix import Matrix, TorchBuild
from envkit.model.solution import Conflict, Query

AARCH64 = "aarch64"
SOURCE = "doc:matrix.toml [[torch]] machines (data/sources/torch/README.md)"


def target_machine(q: Query) -> str:
    """The query's CPU architecture: asked, else the GPU's host (GH200, GB200: Grace), else x86_64."""
    if q.machine:
        return q.machine
    if q.gpu is not None and q.gpu.machine:
        return q.gpu.machine
    return "x86_64"


def on_aarch64(b: TorchBuild) -> TorchBuild:
    """The build as its Linux aarch64 wheels are (call only for a build whose machines hold aarch64)."""
    known = b.aarch64_archs is not None or b.platform == "cpu"
    return replace(b, archs=tuple(b.aarch64_archs or ()) if b.platform == "cuda" else b.archs, ccs=(),
                   ptx=None if b.platform == "cuda" else b.ptx,
                   archs_known=known, python=b.aarch64_python or b.python, pypi=b.aarch64_pypi,
                   cxx11abi=b.cxx11abi if b.aarch64_cxx11abi is None else b.aarch64_cxx11abi,
                   abi_known=b.aarch64_cxx11abi is not None, source=b.aarch64_source or b.source,
                   note=b.note or ("" if b.aarch64_python else "the aarch64 wheels' Pythons are not stated: the x86_64 wheels' are taken"))


def aarch64_builds(builds: list[TorchBuild]) -> list[TorchBuild]:
    return [on_aarch64(b) for b in builds if AARCH64 in b.machines]


def aarch64_refusal(m: Matrix, q: Query, platforms: tuple[str, ...]) -> Optional[Conflict]:
    """Why nothing can be built for an aarch64 target, before any search; None when some torch build has aarch64 wheels."""
    fix = "build on an x86_64 host (--platform-arch x86_64), or pick a platform with aarch64 builds (cuda, cpu)"
    if q.engine in CONTAINER_ENGINES or q.engine in PIP_ENGINES:
        return Conflict("platform.machine", f"--engine {q.engine}: envkit's matrix holds no aarch64 build of it (its tables are x86_64)",
                        "use --engine torch or --engine vllm on aarch64, or an x86_64 host", "doc:matrix.toml")
    have = [b for b in m.torch if b.platform in platforms and AARCH64 in b.machines]
    if not have:
        return Conflict("platform.machine", f"no {'/'.join(platforms)} torch build in the matrix has Linux aarch64 wheels", fix, SOURCE)
    return None
