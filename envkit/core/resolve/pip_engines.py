"""The serving engines installed from their own wheels beside torch: `--engine fastllm | sglang | paddle[==VERSION]`.

Each release is a candidate, newest first. Its own facts are checked against the query first (the GPU, the driver,
the platform, Python); then its pins become constraints of an ordinary resolve (sglang's torch pin and CUDA major,
Paddle's CUDA, the Pythons its wheels are built for), and the stack that resolve finds carries the engine's packages.
The answer is the first candidate whose stack resolves, else the conflicts of the nearest miss.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator, Optional, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.core.resolve.query import release_starts_with
from envkit.model.engines import EnginePackages, Ftllm, FtllmSource, Paddle, Sglang
from envkit.model.matrix import CC, Matrix, sass_runs_on
from envkit.model.solution import Conflict, Query, Result

Row = Union[Ftllm, FtllmSource, Sglang, Paddle]
MODEL_DIR = "/models/model"  # the server's model directory in the image, mounted (as envkit serve mounts --model-dir)
SERVE_PORT = 8000


def _pin(line: Optional[str]) -> Optional[str]:
    """'torch==2.6.0; extra == "srt"' -> 'torch==2.6.0' (the marker of the extra envkit installs dropped)."""
    if not line:
        return None
    try:
        r = Requirement(line)
    except InvalidRequirement:
        return line.split(";")[0].strip()
    extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
    return f"{r.name}{extras}{r.specifier}"


def _pinned_version(line: Optional[str]) -> Optional[Version]:
    pin = _pin(line)
    if pin is None or "==" not in pin:
        return None
    try:
        return Version(pin.split("==", 1)[1])
    except InvalidVersion:
        return None


def _arch(text: str) -> tuple[CC, bool]:
    """'80-real' -> (8.0, SASS only); '120' -> (12.0, SASS and PTX); '52' -> (5.2, SASS and PTX)."""
    real = text.endswith("-real")
    digits = text[:-5] if real else text
    return CC(int(digits[:-1]), int(digits[-1])), not real


def _runs_on(archs: tuple[str, ...], cc: CC) -> bool:
    built = [_arch(a) for a in archs]
    return any(sass_runs_on(a, cc) or (ptx and a <= cc) for a, ptx in built)


def _platform(q: Query) -> str:
    if q.platform:
        return q.platform
    if q.rocm:
        return "rocm"
    if q.dtk:
        return "dtk"
    if q.gpu is not None:
        return q.gpu.platform
    return "cuda"


def _candidates(m: Matrix, q: Query) -> list[Row]:
    v = q.engine_version
    if q.engine == "fastllm" and q.engine_source:
        return [r for r in m.ftllm_source if v is None or str(r.version) == v]
    if q.engine == "fastllm":
        package = "ftllm-rocm" if _platform(q) == "rocm" else "ftllm"
        return [r for r in m.ftllm if r.package == package and (v is None or str(r.version) == v)]
    if q.engine == "sglang":
        return [r for r in m.sglang if v is None or str(r.version) == v]
    rows = [r for r in m.paddle if r.package == "paddlepaddle-gpu" and r.cuda and (v is None or r.version == v)]
    # Paddle's .postNNN is a CUDA variant of the release, not a later one: the release first, then PyPI's own build
    return sorted(rows, key=lambda r: (v is not None or not _paddle_version(r).is_prerelease, _paddle_version(r).release,
                                       r.index == "https://pypi.org/simple", Version(r.cuda or "0")), reverse=True)


def _paddle_version(r: Paddle) -> Version:
    try:
        return Version(r.version)
    except InvalidVersion:
        return Version("0")


def _label(row: Row) -> str:
    if isinstance(row, FtllmSource):
        return f"fastllm {row.version} (source, {row.tag})"
    if isinstance(row, Ftllm):
        return f"{row.package} {row.version}"
    if isinstance(row, Sglang):
        return f"sglang {row.version}"
    return f"{row.package} {row.version} ({row.variant})"


def _row_conflicts(m: Matrix, q: Query, row: Row) -> tuple[list[Conflict], list[str]]:
    """What the engine's own facts say against the GPU, the driver, the platform and Python: conflicts and notes."""
    out: list[Conflict] = []
    notes: list[str] = []
    plat, g = _platform(q), q.gpu
    label = _label(row)
    if isinstance(row, Sglang) and plat != "cuda":
        out.append(Conflict("engine.platform", f"{label} is built for NVIDIA GPUs (CUDA); the query asks for {plat}",
                            "use --engine vllm or --engine torch there", row.source))
    if isinstance(row, Paddle) and plat != "cuda":
        out.append(Conflict("engine.platform", f"{label} is a CUDA build; the query asks for {plat}"
                            + (" (Paddle's Hygon DCU builds come as Paddle's own images)" if plat == "dtk" else ""),
                            "use --engine torch there, or Paddle's DCU image", row.source))
    if isinstance(row, FtllmSource):
        if not row.server_pins:
            notes.append(f"{label}: what its server imports was not measured; its setup.py's server set is installed, which "
                         "may miss modules (0.1.7.1's missed requests and pillow: docs/fastllm-source.md)")
        return _source_conflicts(row, plat, label), notes
    if isinstance(row, Ftllm) and plat == "cpu" and not row.cpu_lib:
        out.append(Conflict("engine.platform", f"{label}'s wheel carries no CPU library", "pick another --engine fastllm==VERSION",
                            row.source))
    if isinstance(row, Ftllm) and plat == "cuda" and row.cuda_major is None:
        notes.append(f"{label}: its wheel declares no CUDA runtime (its README asks for CUDA 12 installed by hand)")
    cc = g.cc if g is not None else None
    if cc is not None and plat == "cuda":
        if isinstance(row, Sglang) and row.min_cc is not None and cc < row.min_cc:
            out.append(Conflict("engine.gpu-arch", f"{label} refuses GPUs below compute capability {row.min_cc} "
                                f"(its own check: 'SGLang only supports sm75 and above'); {g.name if g else ''} is {cc}",
                                "use --engine vllm or --engine torch on this GPU", row.source))
        if isinstance(row, Ftllm) and row.archs and not _runs_on(row.archs, cc):
            out.append(Conflict("engine.gpu-arch", f"{label}'s CUDA library is built for {', '.join(row.archs)}: none runs on "
                                f"{g.name if g else ''} ({g.arch if g else ''})", "pick another --engine fastllm==VERSION, or build it "
                                "from source with -DCUDA_ARCH for this GPU", row.source))
        if isinstance(row, Ftllm) and not row.archs:
            notes.append(f"{label}: its wheel's CUDA arch list is not in the matrix; {g.arch if g else ''} is not checked")
    if isinstance(row, Ftllm) and plat == "cuda" and row.cuda_major is not None and q.driver is not None:
        floor = min((c.min_driver for c in m.cuda if c.version.major == row.cuda_major), default=None)
        if floor is not None and q.driver < floor:
            out.append(Conflict("engine.driver", f"{label} runs on the CUDA {row.cuda_major} runtime wheels (nvidia-*-cu{row.cuda_major}), "
                                f"which need driver >= {floor}; the driver is {q.driver}", f"upgrade the driver to >= {floor}",
                                next(c.source for c in m.cuda if c.version.major == row.cuda_major)))
    if q.python is not None:
        ok = _python_ok(row, q.python)
        if ok is False:
            out.append(Conflict("engine.python", f"{label} has no wheel for Python {q.flags().get('python')} ({_python_text(row)})",
                                f"use a Python it supports ({_python_text(row)})", row.source))
    if isinstance(row, (Ftllm, Sglang)) and row.python is None:
        notes.append(f"{label}: its wheel states no Requires-Python")
    return out, notes


def _source_conflicts(row: FtllmSource, plat: str, label: str) -> list[Conflict]:
    """A source tag builds for CUDA (USE_CUDA, with an explicit CUDA_ARCH) or the CPU; its own CMakeLists says which."""
    if plat in ("rocm", "dtk"):
        return [Conflict("engine.platform", f"envkit compiles {label} for CUDA and the CPU; the query asks for {plat}",
                         "use the ftllm-rocm wheel (drop --engine-build source)", row.source)]
    if plat == "cuda" and row.option("USE_CUDA") is None:
        return [Conflict("engine.platform", f"{label}'s CMakeLists.txt has no USE_CUDA option", "pick another --engine fastllm==VERSION",
                         row.source)]
    return []


def _python_ok(row: Row, py: Version) -> Optional[bool]:
    if isinstance(row, FtllmSource):
        return None  # compiled against the image's own Python
    if isinstance(row, Paddle):
        return any(release_starts_with(p, py) or release_starts_with(py, p) for p in row.python) if row.python else None
    if row.python is None:
        return None
    return row.python.contains(py, prereleases=True)


def _python_text(row: Row) -> str:
    if isinstance(row, FtllmSource):
        return "any"
    if isinstance(row, Paddle):
        return ", ".join(str(p) for p in row.python) or "not stated"
    return str(row.python) if row.python is not None else "not stated"


def _queries(m: Matrix, q: Query, row: Row) -> Iterator[Union[Query, Conflict]]:
    """The ordinary resolves the release's pins make of the query (or the conflict that forbids them)."""
    base = replace(q, engine=None, engine_version=None, engine_source=False)
    if isinstance(row, Sglang):
        pin = _pinned_version(row.torch)
        if pin is not None:
            if q.torch is not None and not q.torch.contains(pin, prereleases=True):
                yield Conflict("engine.torch", f"sglang {row.version} pins torch=={pin}; --torch {q.flags().get('torch')} excludes it",
                               f"drop --torch (sglang {row.version} installs torch {pin}), or pick another sglang", row.source)
                return
            base = replace(base, torch=SpecifierSet(f"=={pin}"), torch_local=None)
        if row.cuda_major is not None:
            if q.cuda is not None and q.cuda.major != row.cuda_major:
                yield Conflict("engine.cuda", f"sglang {row.version} requires CUDA {row.cuda_major} (its cuda-python pin); "
                               f"--cuda {q.flags().get('cuda')} asks for another", f"use --cuda {row.cuda_major}, or another sglang",
                               row.source)
                return
            if q.cuda is None:
                base = replace(base, cuda=Version(str(row.cuda_major)))
    if isinstance(row, Ftllm) and _platform(q) == "cuda" and row.cuda_major is not None and q.cuda is None:
        base = replace(base, cuda=Version(str(row.cuda_major)))  # torch on the CUDA major of the engine's runtime wheels
    if isinstance(row, Ftllm) and row.rocm is not None and _platform(q) == "rocm":
        rocm = Version(row.rocm)
        if q.rocm is not None and not release_starts_with(rocm, q.rocm):
            yield Conflict("engine.platform", f"{_label(row)} is built for ROCm {row.rocm}; --rocm {q.flags().get('rocm')} asks for another",
                           f"use --rocm {rocm.major}.{rocm.minor}", row.source)
            return
        base = replace(base, rocm=Version(f"{rocm.major}.{rocm.minor}"))
    if isinstance(row, Paddle) and row.cuda:
        cuda = Version(row.cuda)
        if q.cuda is not None and not release_starts_with(cuda, q.cuda) and not release_starts_with(q.cuda, cuda):
            yield Conflict("engine.cuda", f"{_label(row)} is built for CUDA {row.cuda}; --cuda {q.flags().get('cuda')} asks for another",
                           f"use --cuda {row.cuda}, or another build", row.source)
            return
        # Paddle 2.x links the system's CUDA and cuDNN: the image's CUDA is the build's; 3.x wheels carry their own CUDA
        # libraries (its install docs), so the image needs the same major only
        bundled = _paddle_version(row) >= Version("3.0.0.dev0")
        base = replace(base, cuda=Version(str(cuda.major)) if bundled else Version(f"{cuda.major}.{cuda.minor}"))
    if q.python is not None:
        yield base
        return
    pythons = [p.version for p in m.python if _python_ok(row, p.version) is not False]
    for py in pythons:
        yield replace(base, python=py)


def source_packages(row: FtllmSource, plat: str) -> tuple[str, ...]:
    """What the compiled package imports, installed before it (it goes in with --no-deps): the measured server set where
    the tag has one; else its setup.py's install_requires before the extras, less the nvidia-* CUDA runtime wheels (the
    image's CUDA serves the library it links), and the `server` extra."""
    if row.server_pins:
        return row.server_pins
    base = tuple(r for r in row.base_requires if not r.lower().startswith("nvidia-"))
    return tuple(dict.fromkeys(base + row.server_requires))


def _packages(row: Row, plat: str) -> EnginePackages:
    if isinstance(row, FtllmSource):
        device = "cpu" if plat == "cpu" else "cuda"
        server = ("ftllm", "server", MODEL_DIR, "--device", device, "--host", "0.0.0.0", "--port", str(SERVE_PORT))
        return EnginePackages("fastllm", str(row.version), source_packages(row, plat), row.source, server=server, build=row)
    if isinstance(row, Ftllm):
        device = "cpu" if plat == "cpu" else "cuda"
        server = ("ftllm", "server", MODEL_DIR, "--device", device, "--host", "0.0.0.0", "--port", str(SERVE_PORT))
        if plat == "cpu" and row.cpu_requires:  # the measured CPU set instead of the CUDA wheels it declares
            return EnginePackages("fastllm", str(row.version), row.cpu_requires, row.source, server=server,
                                  no_deps=(f"{row.package}=={row.version}",), wheel_url=row.wheel_url)
        return EnginePackages("fastllm", str(row.version), (f"{row.package}=={row.version}",), row.source, server=server)
    if isinstance(row, Sglang):
        pins = [f"sglang=={row.version}", _pin(row.kernel), *(_pin(f) for f in row.flashinfer)]
        return EnginePackages("sglang", str(row.version), tuple(p for p in pins if p), row.source,
                              server=("python3", "-m", "sglang.launch_server", "--model-path", MODEL_DIR, "--host", "0.0.0.0",
                                      "--port", str(SERVE_PORT)))
    index = row.index if row.index and row.index != "https://pypi.org/simple" else None
    return EnginePackages("paddle", row.version, (f"{row.package}=={row.version}",), row.source, index_url=index,
                          find_links=row.find_links)


def _compile_arch(row: Row, q: Query, r: Result) -> tuple[Optional[Conflict], Optional[str], Optional[str]]:
    """A source build compiles for one GPU, named by the query: the arch given to -DCUDA_ARCH (the GPU's own where the
    stack's nvcc knows it, else the newest it knows whose SASS runs there), and a note when it is not the GPU's own."""
    sol = r.solution
    if not isinstance(row, FtllmSource) or sol is None or sol.platform != "cuda":
        return None, None, None
    if q.gpu is None or q.gpu.cc is None:
        return Conflict("engine.gpu-arch", f"{_label(row)} is compiled for one GPU's arch (-DCUDA_ARCH), and no --gpu names it "
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


def resolve_pip_engine(m: Matrix, q: Query, solve: Callable[[Query], Result],
                       fit: Optional[Callable[[Query], Result]] = None) -> Result:
    """The newest release of q.engine whose pins resolve into a stack, or the conflicts of the nearest miss. `fit`
    resolves without explaining a miss (no nearest-miss search): tried first over every release, so the misses before
    the first fit cost no explanation; only when nothing fits are they explained, by `solve`."""
    rows = _candidates(m, q)
    if not rows:
        pin = f"=={q.engine_version}" if q.engine_version else ""
        return Result(q, None, (Conflict("engine.no-release", f"no {q.engine}{pin} release for platform {_platform(q)}",
                                         "pick another --engine VERSION or platform", "doc:matrix.toml"),))
    if fit is not None:
        found, _ = _first_release(m, q, rows, fit)
        if found is not None:
            return found
    found, best = _first_release(m, q, rows, solve)
    return found if found is not None else Result(q, None, tuple(dict.fromkeys(best or [])))


def _first_release(m: Matrix, q: Query, rows: list[Row], solve: Callable[[Query], Result]) -> tuple[Optional[Result], Optional[list[Conflict]]]:
    """The answer of the first release (newest first) whose pins resolve, or None and the fewest conflicts seen."""
    best: Optional[list[Conflict]] = None
    for row in rows:
        conflicts, notes = _row_conflicts(m, q, row)
        if conflicts:
            best = conflicts if best is None or len(conflicts) < len(best) else best
            continue
        for sub in _queries(m, q, row):
            if isinstance(sub, Conflict):
                best = [sub] if best is None or len(best) > 1 else best
                break
            r = solve(sub)
            miss, arch, arch_note = _compile_arch(row, q, r)
            if miss is not None:
                best = [miss] if best is None or len(best) > 1 else best
                continue
            if r.solution is not None:
                pkgs = replace(_packages(row, r.solution.platform), cuda_arch=arch)
                sol = replace(r.solution, engine=pkgs, notes=r.solution.notes + tuple(notes) + ((arch_note,) if arch_note else ()),
                              sources=tuple(dict.fromkeys(r.solution.sources + (row.source,))))
                return Result(q, sol, warnings=r.warnings), best
            if r.conflicts and (best is None or len(r.conflicts) < len(best)):
                best = list(r.conflicts)
    return None, best
