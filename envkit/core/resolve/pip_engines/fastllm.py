"""`--engine fastllm[==VERSION]`: fastllm's wheel on PyPI (ftllm, or ftllm-rocm on ROCm), or with `--engine-build source`
its release tag compiled with CMake for the GPU's arch."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

from packaging.version import Version

from envkit.core.resolve.pip_engines.common import MODEL_DIR, SERVE_PORT, UNCHECKED, Arch, runs_on, specifier_python_ok
from envkit.core.resolve.query import release_starts_with
from envkit.model.engines import EnginePackages, Ftllm, FtllmSource
from envkit.model.matrix import Matrix, sass_runs_on
from envkit.model.solution import Conflict, Query, Result

Row = Union[Ftllm, FtllmSource]


def releases(m: Matrix, source: bool) -> list[str]:
    return [str(r.version) for r in m.rows("ftllm_source" if source else "ftllm")]


def candidates(m: Matrix, q: Query, plat: str) -> list[Row]:
    v = q.engine_version
    if q.engine_source:
        return [r for r in m.rows("ftllm_source") if v is None or str(r.version) == v]
    package = "ftllm-rocm" if plat == "rocm" else "ftllm"
    return [r for r in m.rows("ftllm") if r.package == package and (v is None or str(r.version) == v)]


def label(row: Row) -> str:
    if isinstance(row, FtllmSource):
        return f"fastllm {row.version} (source, {row.tag})"
    return f"{row.package} {row.version}"


def conflicts(m: Matrix, q: Query, row: Row, plat: str) -> tuple[list[Conflict], list[str]]:
    if isinstance(row, FtllmSource):
        unmeasured = [] if row.server_pins else [
            f"{label(row)}: what its server imports was not measured; its setup.py's server set is installed, which may miss "
            "modules (0.1.7.1's missed requests and pillow: docs/fastllm-source.md)"]
        return _source_conflicts(row, plat), unmeasured
    out: list[Conflict] = []
    notes: list[str] = []
    if plat == "cpu" and not row.cpu_lib:
        out.append(Conflict("engine.platform", f"{label(row)}'s wheel carries no CPU library", "pick another --engine fastllm==VERSION",
                            row.source))
    if plat == "cuda" and row.cuda_major is None:
        notes.append(f"{label(row)}: its wheel declares no CUDA runtime (its README asks for CUDA 12 installed by hand)")
    g = q.gpu
    if g is not None and g.cc is not None and plat == "cuda":
        if row.archs and not runs_on(row.archs, g.cc):
            out.append(Conflict("engine.gpu-arch", f"{label(row)}'s CUDA library is built for {', '.join(row.archs)}: none runs on "
                                f"{g.name} ({g.arch})", "pick another --engine fastllm==VERSION, or build it "
                                "from source with -DCUDA_ARCH for this GPU", row.source))
        if not row.archs:
            notes.append(f"{label(row)}: its wheel's CUDA arch list is not in the matrix; {g.arch} {UNCHECKED}")
    if plat == "cuda" and row.cuda_major is not None and q.driver is not None:
        floor = min((c.min_driver for c in m.cuda if c.version.major == row.cuda_major), default=None)
        if floor is not None and q.driver < floor:
            out.append(Conflict("engine.driver", f"{label(row)} runs on the CUDA {row.cuda_major} runtime wheels "
                                f"(nvidia-*-cu{row.cuda_major}), which need driver >= {floor}; the driver is {q.driver}",
                                f"upgrade the driver to >= {floor}", next(c.source for c in m.cuda if c.version.major == row.cuda_major)))
    if row.python is None:
        notes.append(f"{label(row)}: its wheel states no Requires-Python")
    return out, notes


def _source_conflicts(row: FtllmSource, plat: str) -> list[Conflict]:
    """A source tag builds for CUDA (USE_CUDA, with an explicit CUDA_ARCH) or the CPU; its own CMakeLists says which."""
    if plat in ("rocm", "dtk"):
        return [Conflict("engine.platform", f"envkit compiles {label(row)} for CUDA and the CPU; the query asks for {plat}",
                         "use the ftllm-rocm wheel (drop --engine-build source)", row.source)]
    if plat == "cuda" and row.option("USE_CUDA") is None:
        return [Conflict("engine.platform", f"{label(row)}'s CMakeLists.txt has no USE_CUDA option",
                         "pick another --engine fastllm==VERSION", row.source)]
    return []


def python_ok(row: Row, py: Version) -> Optional[bool]:
    return None if isinstance(row, FtllmSource) else specifier_python_ok(row.python, py)  # a source build: the image's Python


def python_text(row: Row) -> str:
    if isinstance(row, FtllmSource):
        return "any"
    return str(row.python) if row.python is not None else "not stated"


def constrain(m: Matrix, q: Query, row: Row, base: Query, plat: str) -> Union[Query, Conflict]:
    if isinstance(row, FtllmSource):
        return base
    if plat == "cuda" and row.cuda_major is not None and q.cuda is None:
        base = replace(base, cuda=Version(str(row.cuda_major)))  # torch on the CUDA major of the engine's runtime wheels
    if row.rocm is not None and plat == "rocm":
        rocm = Version(row.rocm)
        if q.rocm is not None and not release_starts_with(rocm, q.rocm):
            return Conflict("engine.platform", f"{label(row)} is built for ROCm {row.rocm}; --rocm {q.flags().get('rocm')} "
                            "asks for another", f"use --rocm {rocm.major}.{rocm.minor}", row.source)
        base = replace(base, rocm=Version(f"{rocm.major}.{rocm.minor}"))
    return base


def source_packages(row: FtllmSource) -> tuple[str, ...]:
    """What the compiled package imports, installed before it (it goes in with --no-deps): the measured server set where
    the tag has one; else its setup.py's install_requires before the extras, less the nvidia-* CUDA runtime wheels (the
    image's CUDA serves the library it links), and the `server` extra."""
    if row.server_pins:
        return row.server_pins
    base = tuple(r for r in row.base_requires if not r.lower().startswith("nvidia-"))
    return tuple(dict.fromkeys(base + row.server_requires))


def packages(row: Row, plat: str) -> EnginePackages:
    device = "cpu" if plat == "cpu" else "cuda"
    server = ("ftllm", "server", MODEL_DIR, "--device", device, "--host", "0.0.0.0", "--port", str(SERVE_PORT))
    if isinstance(row, FtllmSource):
        return EnginePackages("fastllm", str(row.version), source_packages(row), row.source, server=server, build=row)
    if plat == "cpu" and row.cpu_requires:  # the measured CPU set instead of the CUDA wheels it declares
        return EnginePackages("fastllm", str(row.version), row.cpu_requires, row.source, server=server,
                              no_deps=(f"{row.package}=={row.version}",), wheel_url=row.wheel_url)
    return EnginePackages("fastllm", str(row.version), (f"{row.package}=={row.version}",), row.source, server=server)


def compile_arch(row: Row, q: Query, r: Result) -> Arch:
    """A source build compiles for one GPU, named by the query: the arch given to -DCUDA_ARCH (the GPU's own where the
    stack's nvcc knows it, else the newest it knows whose SASS runs there), and a note when it is not the GPU's own."""
    sol = r.solution
    if not isinstance(row, FtllmSource) or sol is None or sol.platform != "cuda":
        return None, None, None
    if q.gpu is None or q.gpu.cc is None:
        return Conflict("engine.gpu-arch", f"{label(row)} is compiled for one GPU's arch (-DCUDA_ARCH), and no --gpu names it "
                        f"(fastllm's own default, {row.cuda_arch_default or 'native'}, asks the builder's GPU)",
                        "add --gpu NAME (or --gpu sm_XY)", row.source), None, None
    cc, cuda = q.gpu.cc, sol.cuda
    if cuda is None:
        return None, f"{cc.major}{cc.minor}", None
    runs = [a for a in cuda.archs if sass_runs_on(a, cc)]
    if not runs:
        return Conflict("engine.gpu-arch", f"CUDA {cuda.version}'s nvcc compiles for no arch that runs on {q.gpu.name} ({q.gpu.arch})",
                        "pick a CUDA whose nvcc knows this arch with --cuda", cuda.source), None, None
    best = max(runs)
    note = None if best == cc else (f"fastllm from source: CUDA {cuda.version}'s nvcc knows no sm_{cc.major}{cc.minor}, so "
                                    f"-DCUDA_ARCH={best.major}{best.minor}, whose SASS runs on {q.gpu.name} (a CUDA that knows "
                                    f"sm_{cc.major}{cc.minor} compiles for it exactly)")
    return None, f"{best.major}{best.minor}", note
