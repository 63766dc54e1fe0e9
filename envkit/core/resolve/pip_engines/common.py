"""What every pip engine's rules share: the Rules each engine module answers, the query's platform, a pin read from
a Requires-Dist line, the server's model directory and port."""
from __future__ import annotations

from typing import Any, Optional, Protocol, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.model.engines import EnginePackages
from envkit.model.matrix import CC, Matrix, sass_runs_on
from envkit.model.solution import Conflict, Query, Result

MODEL_DIR = "/models/model"  # the server's model directory in the image, mounted (as envkit serve mounts --model-dir)
SERVE_PORT = 8000
Row = Any  # the engine's own matrix row (model/engines.py)
Arch = tuple[Optional[Conflict], Optional[str], Optional[str]]
UNCHECKED = "is not checked"  # how a note ends that says a release's arch list is not in the matrix (no proof it runs)


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
    and PTX (the PTX on any later GPU too), '90a-real' SASS of the arch-specific features (on 9.0 alone), '100f-real' of
    the family-specific ones (on 10.0 and later GPUs of family 10)."""
    def runs(text: str) -> bool:
        real = text.endswith("-real")
        digits = text[:-5] if real else text
        suffix = digits[-1] if digits[-1] in "af" else ""
        digits = digits[:-1] if suffix else digits
        built = CC(int(digits[:-1]), int(digits[-1]))
        if suffix == "a":
            return built == cc
        if suffix == "f":
            return built.major == cc.major and built <= cc
        return sass_runs_on(built, cc) or (not real and built <= cc)
    return any(runs(a) for a in archs)


def linux_x86_64(python: Optional[Version]) -> dict[str, str]:
    """The marker environment of a Linux x86_64 image, with no extra; without a Python, python_version is left out
    (see marker_holds)."""
    env = {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    if python is not None:
        env |= {"python_version": f"{python.major}.{python.minor}", "python_full_version": str(python)}
    return env


def marker_holds(req: Requirement, env: dict[str, str]) -> bool:
    """Whether a Requires-Dist line applies on `env`; a marker on the Python when the query names none is taken to hold."""
    if req.marker is None:
        return True
    if "python_version" in env:
        return req.marker.evaluate(env)
    return any(req.marker.evaluate(env | {"python_version": f"3.{minor}", "python_full_version": f"3.{minor}.0"})
               for minor in range(8, 16))


def triton_wanted(requires: tuple[str, ...], python: Optional[Version]) -> Optional[SpecifierSet]:
    """The triton an engine's Requires-Dist lines (its default install, no extra) ask for on Linux x86_64; None: none."""
    env = linux_x86_64(python)
    found: Optional[SpecifierSet] = None
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == "triton" and marker_holds(req, env):
            found = req.specifier if found is None else found & req.specifier
    return found


def admits_triton(torch_triton: Optional[str], wanted: SpecifierSet, python: Optional[Version]) -> bool:
    """Whether a torch release whose wheel requires `torch_triton` (its METADATA line) can share an image with an
    engine that requires triton `wanted`: some triton satisfies both. The versions both ranges name are the
    candidates tried (a pin names its version; `~=3.8.0` names 3.8.0)."""
    if not torch_triton:
        return True
    req = Requirement(torch_triton)
    if not marker_holds(req, linux_x86_64(python)):
        return True
    names: set[Version] = set()
    for s in (*req.specifier, *wanted):
        try:
            v = Version(s.version.replace(".*", ""))
        except InvalidVersion:  # an === arbitrary string: no version to try
            continue
        names.add(v)
        if s.operator == ">":  # an exclusive floor: the next patch is the first version above it
            names.add(Version(f"{v.major}.{v.minor}.{v.micro + 1}"))
    return any(req.specifier.contains(v, prereleases=True) and wanted.contains(v, prereleases=True) for v in names)


def no_compile(row: Row, q: Query, r: Result) -> Arch:
    """An engine installed from wheels compiles nothing for the GPU."""
    return None, None, None
