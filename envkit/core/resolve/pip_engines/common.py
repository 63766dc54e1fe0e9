"""What every pip engine's rules share: the Rules each engine module answers, the query's platform, a pin read from
a Requires-Dist line, the server's model directory and port."""
from __future__ import annotations

from typing import Any, Optional, Protocol, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envkit.model.engines import EnginePackages
from envkit.model.matrix import CC, Matrix, sass_runs_on
from envkit.model.solution import Conflict, Query, Result

MODEL_DIR = "/models/model"  # the server's model directory in the image, mounted (as envkit serve mounts --model-dir)
SERVE_PORT = 8000
Row = Any  # the engine's own matrix row (model/engines.py)
Arch = tuple[Optional[Conflict], Optional[str], Optional[str]]


class Rules(Protocol):
    """One pip engine's rules: a module core/resolve/pip_engines/NAME.py for the registry's `--engine NAME`."""

    def releases(self, m: Matrix, source: bool) -> list[str]:
        """Every version `--engine NAME==VERSION` may pin (with --engine-build source: the source tags')."""

    def candidates(self, m: Matrix, q: Query, plat: str) -> list[Row]:
        """The rows to try for the query, best first."""

    def label(self, row: Row) -> str: ...

    def conflicts(self, m: Matrix, q: Query, row: Row, plat: str) -> tuple[list[Conflict], list[str]]:
        """What the row's own facts say against the GPU, the driver and the platform: conflicts, and notes."""

    def python_ok(self, row: Row, py: Version) -> Optional[bool]:
        """Whether the row has a build for this Python (None: not stated, or compiled against the image's own)."""

    def python_text(self, row: Row) -> str: ...

    def constrain(self, m: Matrix, q: Query, row: Row, base: Query, plat: str) -> Union[Query, Conflict]:
        """The ordinary query the row's pins make of `base` (its torch, CUDA, ROCm), or the conflict that forbids them."""

    def packages(self, row: Row, plat: str) -> EnginePackages: ...

    def compile_arch(self, row: Row, q: Query, r: Result) -> Arch:
        """A row compiled for one GPU: the conflict, or the arch it is compiled for and a note."""


def platform_of(q: Query) -> str:
    if q.platform:
        return q.platform
    if q.rocm:
        return "rocm"
    if q.dtk:
        return "dtk"
    if q.gpu is not None:
        return q.gpu.platform
    return "cuda"


def pin(line: Optional[str]) -> Optional[str]:
    """'torch==2.6.0; extra == "srt"' -> 'torch==2.6.0' (the marker of the extra envkit installs dropped)."""
    if not line:
        return None
    try:
        r = Requirement(line)
    except InvalidRequirement:
        return line.split(";")[0].strip()
    extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
    return f"{r.name}{extras}{r.specifier}"


def pinned_version(line: Optional[str]) -> Optional[Version]:
    p = pin(line)
    if p is None or "==" not in p:
        return None
    try:
        return Version(p.split("==", 1)[1])
    except InvalidVersion:
        return None


def specifier_python_ok(python: Any, py: Version) -> Optional[bool]:
    """A row's Requires-Python (a SpecifierSet, or None where the wheel states none) against the query's Python."""
    return None if python is None else python.contains(py, prereleases=True)


def runs_on(archs: tuple[str, ...], cc: CC) -> bool:
    """Whether a library built for CMake's arch list runs on `cc`: '80-real' is SASS only (runs on 8.0 to 8.9), '120' SASS
    and PTX (the PTX on any later GPU too), '90a-real' SASS of the arch-specific features (on 9.0 alone)."""
    def runs(text: str) -> bool:
        real = text.endswith("-real")
        digits = text[:-5] if real else text
        specific = digits.endswith("a")
        digits = digits.rstrip("af")
        built = CC(int(digits[:-1]), int(digits[-1]))
        if specific:
            return built == cc
        return sass_runs_on(built, cc) or (not real and built <= cc)
    return any(runs(a) for a in archs)


def no_compile(row: Row, q: Query, r: Result) -> Arch:
    """An engine installed from wheels compiles nothing for the GPU."""
    return None, None, None
