"""`--engine lmdeploy[==VERSION]`: LMDeploy's wheel (its TurboMind library compiled for a list of CUDA archs), its torch
range, the CUDA major of the PyPI build, and its OpenAI-compatible server (`lmdeploy serve api_server`)."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.core.resolve.pip_engines.common import MODEL_DIR, SERVE_PORT, UNCHECKED, admits_triton, no_compile, pin, runs_on, triton_wanted
from envkit.core.resolve.query import release_starts_with
from envkit.model.engines import EnginePackages, Lmdeploy
from envkit.model.matrix import CC, Matrix, TorchBuild
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
                                f"{g.name} is {g.cc}", _arch_fix(m, g.cc, g.name), row.source))
        elif row.archs and not runs_on(row.archs, g.cc):
            out.append(Conflict("engine.gpu-arch", f"{label(row)}'s TurboMind library is built for {', '.join(row.archs)}: none runs "
                                f"on {g.name} ({g.arch})", _arch_fix(m, g.cc, g.name), row.source))
        elif not row.archs:
            notes.append(f"{label(row)}: its TurboMind arch list is not in the matrix; {g.arch} {UNCHECKED}")
    return out, notes


def _arch_fix(m: Matrix, cc: CC, gpu: str) -> str:
    """The releases whose TurboMind runs on the GPU, or that none in the matrix does (a pinned query's fix is the release that
    resolves, pip_engines._release_fix)."""
    able = [r for r in m.rows("lmdeploy") if (r.min_cc is None or cc >= r.min_cc) and r.archs and runs_on(r.archs, cc)]
    if able:
        return (f"use an lmdeploy release whose TurboMind library runs on {cc.sm}: "
                f"{min(r.version for r in able)} ... {max(r.version for r in able)}")
    return f"no lmdeploy release in the matrix runs on {gpu} ({cc.sm}): serve it without lmdeploy"


def python_ok(row: Lmdeploy, py: Version) -> Optional[bool]:
    return any(release_starts_with(p, py) or release_starts_with(py, p) for p in row.python) if row.python else None


def python_text(row: Lmdeploy) -> str:
    return ", ".join(str(p) for p in row.python) or "not stated"


def _torch_range(line: Optional[str]) -> Optional[SpecifierSet]:
    try:
        return Requirement(line).specifier if line else None
    except InvalidRequirement:
        return None


def _cuda_of_local(local: Optional[str]) -> Optional[int]:
    """'cu118' -> 11, 'cu130' -> 13: the CUDA major of a torch local version (None for cpu, rocm6.2 and the like)."""
    m = re.fullmatch(r"cu(\d+)(\d)", local or "")
    return int(m.group(1)) if m else None


def _admitted(m: Matrix, q: Query, row: Lmdeploy, torch: SpecifierSet) -> tuple[list[TorchBuild], list[TorchBuild]]:
    """The CUDA torch releases in `torch`, and those of them whose own triton pin (their wheel's METADATA) meets the
    triton the row requires."""
    releases = sorted({b.version: b for b in m.torch if b.platform == "cuda"}.values(), key=lambda b: b.version)
    in_range = [b for b in releases if torch.contains(b.version, prereleases=True)]
    triton = triton_wanted(row.requires, q.python)
    return in_range, [b for b in in_range if triton is None or admits_triton(b.triton, triton, q.python)]


def _runs_here(m: Matrix, q: Query, row: Lmdeploy, release: TorchBuild) -> bool:
    """Whether the torch release has a build on the row's CUDA major that runs on the query's GPU (any, without one)."""
    return any(b.version == release.version and b.platform == "cuda" and b.toolkit is not None
               and (row.cuda_major is None or b.toolkit.major == row.cuda_major)
               and (q.gpu is None or q.gpu.cc is None or b.runs_on_cc(q.gpu.cc)) for b in m.torch)


def _torch_pins(m: Matrix, q: Query, row: Lmdeploy) -> Union[SpecifierSet, Conflict]:
    """The torch the row admits: its Requires-Dist range and --torch, less the releases whose triton pin it cannot meet."""
    torch = _torch_range(row.torch) or SpecifierSet()
    both = torch if q.torch is None else torch & q.torch
    asked = f"--torch {q.flags().get('torch')}"
    in_range, kept = _admitted(m, q, row, both)
    if not in_range:
        return Conflict("engine.torch", f"{label(row)} requires torch {torch or 'of any version'}; {asked} leaves no torch "
                        "the matrix holds", f"drop --torch, or use one in {torch}", row.source)
    if not kept:
        pins = ", ".join(f"torch {b.version} requires {pin(b.triton)}" for b in in_range if b.triton)
        without = [b.version for b in _admitted(m, q, row, torch)[1] if _runs_here(m, q, row, b)] if q.torch is not None else []
        fix = (f"drop --torch: {label(row)} installs with torch {', '.join(map(str, without))}" if without
               else "use another --engine lmdeploy==VERSION")
        return Conflict("engine.torch", f"{label(row)} requires triton {triton_wanted(row.requires, q.python)}; "
                        f"{asked if q.torch is not None else f'its torch range {torch}'} leaves only torch releases that pin "
                        f"another ({pins})", fix, "; ".join([row.source, *dict.fromkeys(b.triton_source for b in in_range)]))
    dropped = [b.version for b in in_range if b not in kept]
    return both & SpecifierSet(",".join(f"!={v}" for v in dropped)) if dropped else both


def constrain(m: Matrix, q: Query, row: Lmdeploy, base: Query, plat: str) -> Union[Query, Conflict]:
    if row.cuda_major is not None:
        local_major = _cuda_of_local(q.torch_local)
        cuda_asked = q.cuda is not None and q.cuda.major != row.cuda_major
        if cuda_asked or local_major not in (None, row.cuda_major):
            others = sorted({r.cuda_major for r in m.rows("lmdeploy") if r.cuda_major not in (None, row.cuda_major)})
            elsewhere = f", or an lmdeploy built for CUDA {', '.join(map(str, others))}" if others else ""
            asked, fix = (f"--cuda {q.flags().get('cuda')}", f"use --cuda {row.cuda_major}") if cuda_asked else (
                f"--torch {q.flags().get('torch')} (a CUDA {local_major} build)",
                f"drop +{q.torch_local} from --torch (envkit picks a CUDA {row.cuda_major} build), or name one")
            return Conflict("engine.cuda", f"{label(row)}'s PyPI wheel is built for CUDA {row.cuda_major}; {asked} asks for another",
                            fix + elsewhere, row.source)
        if q.cuda is None:
            base = replace(base, cuda=Version(str(row.cuda_major)))
    torch = _torch_pins(m, q, row)
    if isinstance(torch, Conflict):
        return torch
    if str(torch):
        base = replace(base, torch=torch)
    return base


def packages(row: Lmdeploy, plat: str) -> EnginePackages:
    return EnginePackages("lmdeploy", str(row.version), (f"lmdeploy=={row.version}",), row.source,
                          server=("lmdeploy", "serve", "api_server", MODEL_DIR, "--server-name", "0.0.0.0",
                                  "--server-port", str(SERVE_PORT)))
