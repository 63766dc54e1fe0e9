"""The build plan as values: stages, typed steps, carried files and the options that shaped them.

Pure data. A step's payload says what the step does in typed fields (package lists stay tuples);
only the renderer (envkit.core.render) turns payloads into Dockerfile text. `BuildPlan.to_json()`
is the envkit.plan.json document; `BuildPlan.from_json()` reads that document back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Mapping, Optional, Union

from envkit.errors import InputError
from envkit.inimage.build_flash_attn import DEFAULT_HOST_MARCH
from envkit.model.matrix import OsRelease
from envkit.model.options import SERVE_PORT  # declared with --serve-port
from envkit.model.site import Site
from envkit.model.solution import Solution

VENV = "/opt/venv"
PYTHON_PREFIX = "/opt/python"
WHEELHOUSE = "/opt/envkit/wheelhouse"
COMPILED_WHEELS = "/opt/envkit/wheels"
MODEL_DIR = "/opt/envkit/model"  # where a serving image's weights are (baked in, or mounted by the site)
SERVE_UID = 1000  # the serving image's non-root user
SERVE_HOME = "/home/envkit"
PYTHON_FTP = "https://www.python.org/ftp/python"
PLAN_SCHEMA = 1

PythonSource = Literal["distro", "tarball"]
StageName = Literal["build", "runtime"]
ToolkitSource = Literal["image", "pip"]  # the devel stage's CUDA toolkit: the nvidia/cuda devel image, or NVIDIA's PyPI wheels
TOOLKIT_SOURCES: tuple[ToolkitSource, ...] = ("image", "pip")
CUDA_HOME = "/usr/local/cuda"  # where --toolkit pip lays out the wheels' toolkit, as the nvidia/cuda images have it


class Network(str, Enum):
    """What a step reaches over the network."""

    NONE = "none"
    SITE = "site"  # the site's own mirrors
    INTERNET = "internet"

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------- step payloads


@dataclass(frozen=True)
class SiteSettingsStep:
    """Apply the site's mirrors, CA certificate and vendor-list removal in this stage."""

    stage: StageName


@dataclass(frozen=True)
class AptStep:
    """Install distribution packages; from the carried flat repository debs/<stage>/ when offline."""

    stage: StageName
    packages: tuple[str, ...]
    from_carried_repository: bool = False


@dataclass(frozen=True)
class PythonTarballStep:
    """Build CPython from the carried source tarball into `prefix`."""

    tarball: str
    prefix: str


@dataclass(frozen=True)
class VenvStep:
    """Create the virtual environment; `wheelhouse`: copy the carried wheels in first."""

    python: str
    venv: str
    wheelhouse: bool


@dataclass(frozen=True)
class PipStep:
    """pip install `packages`; `find_links`: only from that directory (no index at all)."""

    packages: tuple[str, ...]
    find_links: Optional[str] = None
    extra_index_url: Optional[str] = None
    extra_find_links: Optional[str] = None  # a find-links page besides the index (Paddle's stable.html)
    no_deps: bool = False  # the packages alone: their declared dependencies are installed by an earlier step or not needed

    @property
    def pip_source(self) -> tuple[str, ...]:
        """pip's arguments that say where packages come from."""
        local = ("--no-index", "--find-links", self.find_links) if self.find_links else ()
        extra = ("--extra-index-url", self.extra_index_url) if self.extra_index_url else ()
        page = ("--find-links", self.extra_find_links) if self.extra_find_links and not self.find_links else ()
        return ("--no-deps",) * self.no_deps + local + extra + page


@dataclass(frozen=True)
class CopyWheelStep:
    """Copy one carried wheel from the build context into the wheelhouse."""

    wheel: str


@dataclass(frozen=True)
class KernelsStep:
    """Compile flash-attn (or its csrc kernels) from the carried sdist with build_flash_attn.py."""

    sdist: str
    targets: tuple[str, ...]
    arch_list: tuple[str, ...]
    host_march: str
    profile: str = "full"  # flash-attn's own kernels: full, or serving:DIMS:DTYPES (build_flash_attn.py --profile)


@dataclass(frozen=True)
class CMakeStep:
    """Unpack a carried source archive, configure it with `cmake_args`, build `target`, and pip install the Python
    package the build lays out in BUILD/`package_dir` (without its declared dependencies: an earlier step installs them)."""

    archive: str  # under sources/ in the context
    name: str  # the source tree's folder under /opt/envkit/src
    cmake_args: tuple[str, ...]
    target: str
    package_dir: str


@dataclass(frozen=True)
class CudaHomeStep:
    """Lay out one CUDA_HOME over the folder the toolkit wheels installed into (`prefix`): `cuda_home` links to
    it, each of `links` (a path under cuda_home, the target it points at) is made, then CUDA_HOME and PATH."""

    cuda_home: str
    prefix: str
    links: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class UninstallStep:
    """pip uninstall `packages` and remove `paths`: what the build needed and the runtime stage must not copy."""

    packages: tuple[str, ...]
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvStep:
    """Set environment variables in the stage."""

    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CopyVenvStep:
    """Copy the venv (and a CPython built from source) from the build stage."""

    venv: str
    python_prefix: Optional[str] = None


@dataclass(frozen=True)
class ImportCheckStep:
    """Import every compiled module, so an ABI mismatch fails the build."""

    modules: tuple[str, ...]


@dataclass(frozen=True)
class LabelsStep:
    """OCI labels and the resolved solution; their text comes from the plan itself."""


@dataclass(frozen=True)
class CopyModelStep:
    """The context's model/ directory into `dest`, as one layer of its own."""

    dest: str


@dataclass(frozen=True)
class ServeStep:
    """The serving set-up of the runtime stage: a non-root user with its home, the offline environment, the port,
    a HEALTHCHECK on the server's health route, labels naming the model, and the server as the entrypoint."""

    uid: int
    home: str
    env: tuple[tuple[str, str], ...]
    port: int
    health_url: str
    labels: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]


@dataclass(frozen=True)
class FillModelRepoStep:
    """A container engine's Triton model repository: the backend's archive (COPYed from the context's `archive`, or
    fetched from `fetch`) unpacked and filled by envkit/fill_triton_repo.py into `out`."""

    out: str
    archive: Optional[str] = None  # the carried archive's path in the context
    fetch: Optional[str] = None  # else the URL the fill stage fetches it from (GitHub's, or the site's rewrite of it)
    cafile: bool = False  # the site's CA certificate, for an https mirror


@dataclass(frozen=True)
class CopyFromStageStep:
    """A directory of an earlier stage, copied as it is."""

    stage: str
    path: str


@dataclass(frozen=True)
class CopyFilesStep:
    """Files of the context, copied into `dest`."""

    files: tuple[str, ...]
    dest: str


@dataclass(frozen=True)
class ImageLabelsStep:
    """A container engine's labels: the OCI ones and envkit's answer (io.envkit.solution), in the order given."""

    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ServerStep:
    """The ports the server listens on and its command."""

    ports: tuple[int, ...]
    argv: tuple[str, ...]


StepPayload = Union[SiteSettingsStep, AptStep, PythonTarballStep, VenvStep, PipStep, CopyWheelStep,
                    KernelsStep, CMakeStep, CudaHomeStep, UninstallStep, EnvStep, CopyVenvStep, ImportCheckStep, LabelsStep,
                    CopyModelStep, ServeStep, FillModelRepoStep, CopyFromStageStep, CopyFilesStep, ImageLabelsStep, ServerStep]


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    why: str
    payload: StepPayload
    network: Network = Network.NONE
    reaches: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    name: StageName
    image: str
    upstream_image: str
    os: OsRelease
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Carried:
    path: str
    what: str
    origin: str


@dataclass(frozen=True)
class Serve:
    """A serving image (--serve DIR): the engine's OpenAI server on the model, read once by an adapter."""

    name: str  # the served model name clients ask for
    sha256: str  # the model directory's tree digest (every file's path and sha256)
    files: int
    bytes: int
    mount: bool = False  # the weights are not baked in: the site mounts them at MODEL_DIR
    port: int = SERVE_PORT
    args: tuple[str, ...] = ()  # the engine's own arguments, after envkit's
    left_out: tuple[tuple[str, str], ...] = ()  # (path, why) of what the model directory holds and the image does not


@dataclass(frozen=True)
class Options:
    offline: bool = False
    host_march: str = DEFAULT_HOST_MARCH
    max_jobs: Optional[int] = None
    nvcc_threads: Optional[int] = None
    toolkit: Optional[ToolkitSource] = None  # --toolkit; None: the site file's [cuda] toolkit, else "image"
    serve: Optional[Serve] = None  # a serving image: the model and the engine's server


# ---------------------------------------------------------------- the envkit.plan.json document


@dataclass(frozen=True)
class StepRecord:
    id: str
    title: str
    why: str
    network: Network
    reaches: tuple[str, ...]


@dataclass(frozen=True)
class StageRecord:
    name: str
    image: str
    upstream_image: str
    os: str
    steps: tuple[StepRecord, ...]


@dataclass(frozen=True)
class PlanDocument:
    """What envkit.plan.json records of a plan: every step and why, what the context carries and what
    is installed. It holds neither the solution nor the step payloads (envkit.lock.json and the
    Dockerfile do)."""

    offline: bool
    compiles_kernels: bool
    max_jobs: Optional[int]
    nvcc_threads: Optional[int]
    site: Optional[str]
    stack: str
    python_source: PythonSource
    stages: tuple[StageRecord, ...]
    context: tuple[Carried, ...]
    requirements: tuple[str, ...]
    wheel_sources: tuple[tuple[str, Optional[str]], ...]
    build_args: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "offline": self.offline,
            "compile": {"kernels": self.compiles_kernels, "max_jobs": self.max_jobs, "nvcc_threads": self.nvcc_threads},
            "site": self.site,
            "stack": self.stack,
            "python_source": self.python_source,
            "stages": [{"name": s.name, "image": s.image, "upstream_image": s.upstream_image, "os": s.os,
                        "steps": [{"id": st.id, "title": st.title, "why": st.why, "network": st.network.value,
                                   "reaches": list(st.reaches)} for st in s.steps]} for s in self.stages],
            "context": [{"path": c.path, "what": c.what, "origin": c.origin} for c in self.context],
            "requirements": list(self.requirements),
            "wheel_sources": [{"requirement": r, "index": i} for r, i in self.wheel_sources],
            "build_args": dict(self.build_args),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanDocument:
        if doc.get("schema") != PLAN_SCHEMA:
            raise InputError(f"envkit.plan.json has schema {doc.get('schema')!r}, this envkit reads schema {PLAN_SCHEMA}",
                             "regenerate the context with this envkit (envkit generate or envkit bundle)")
        python_source = doc["python_source"]
        if python_source not in ("distro", "tarball"):
            raise InputError(f"envkit.plan.json: python_source {python_source!r} is neither 'distro' nor 'tarball'",
                             "regenerate the context with this envkit (envkit generate or envkit bundle)")
        return cls(
            offline=bool(doc["offline"]),
            compiles_kernels=bool(doc["compile"]["kernels"]),
            max_jobs=doc["compile"]["max_jobs"],
            nvcc_threads=doc["compile"]["nvcc_threads"],
            site=doc["site"],
            stack=doc["stack"],
            python_source=python_source,
            stages=tuple(StageRecord(s["name"], s["image"], s["upstream_image"], s["os"],
                                     tuple(StepRecord(st["id"], st["title"], st["why"], Network(st["network"]),
                                                      tuple(st["reaches"])) for st in s["steps"]))
                         for s in doc["stages"]),
            context=tuple(Carried(c["path"], c["what"], c["origin"]) for c in doc["context"]),
            requirements=tuple(doc["requirements"]),
            wheel_sources=tuple((w["requirement"], w["index"]) for w in doc["wheel_sources"]),
            build_args=tuple(doc["build_args"].items()),
            warnings=tuple(doc["warnings"]),
        )


@dataclass(frozen=True)
class BuildPlan:
    solution: Solution
    site: Site
    options: Options
    stages: tuple[Stage, ...]
    carried: tuple[Carried, ...]
    requirements: tuple[str, ...]
    wheel_sources: tuple[tuple[str, Optional[str]], ...]
    build_args: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    python_source: PythonSource
    stack: str = field(default="")
    toolkit: ToolkitSource = "image"  # where the devel stage's CUDA toolkit came from (--toolkit, or the site file)

    @property
    def compiles_kernels(self) -> bool:
        return any(isinstance(st.payload, KernelsStep) for s in self.stages for st in s.steps)

    def document(self) -> PlanDocument:
        return PlanDocument(
            offline=self.options.offline, compiles_kernels=self.compiles_kernels,
            max_jobs=self.options.max_jobs, nvcc_threads=self.options.nvcc_threads,
            site=self.site.path or None, stack=self.stack, python_source=self.python_source,
            stages=tuple(StageRecord(s.name, s.image, s.upstream_image, s.os.name,
                                     tuple(StepRecord(st.id, st.title, st.why, st.network, st.reaches) for st in s.steps))
                         for s in self.stages),
            context=self.carried, requirements=self.requirements, wheel_sources=self.wheel_sources,
            build_args=self.build_args, warnings=self.warnings)

    def to_json(self) -> dict[str, Any]:
        """The envkit.plan.json document."""
        return self.document().to_json()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanDocument:
        """Read an envkit.plan.json document back. The document does not hold the solution or the step
        payloads, so what comes back is its typed record, whose to_json() gives the document again."""
        return PlanDocument.from_json(doc)


ENGINE_PLAN_SCHEMA = 1


@dataclass(frozen=True)
class EngineStage:
    """A stage of a container engine's Dockerfile: NVIDIA's image (or the backend image built on it), and why."""

    name: str
    image: str
    why: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class EnginePlan:
    """A container engine's build plan: the stages the renderer writes like any other plan's, what the context carries,
    and the files beside the Dockerfile (scripts, fill values) as their text. `to_json()` is envkit/engine.plan.json."""

    engine: str
    workflow: str
    stack: str
    offline: bool
    site: Site
    notes: tuple[str, ...]  # header lines after the stack's (the legacy profile, the backend image's recipe)
    stages: tuple[EngineStage, ...]
    carried: tuple[Carried, ...]
    files: tuple[tuple[str, bytes], ...]

    @property
    def options(self) -> Options:
        return Options(offline=self.offline)

    def to_json(self) -> dict[str, Any]:
        return {"schema": ENGINE_PLAN_SCHEMA, "engine": self.engine, "workflow": self.workflow, "offline": self.offline,
                "stack": self.stack,
                "stages": [{"name": s.name, "image": s.image, "why": s.why,
                            "steps": [{"id": st.id, "title": st.title, "why": st.why, "network": st.network.value,
                                       "reaches": list(st.reaches)} for st in s.steps]} for s in self.stages],
                "carried": [{"path": c.path, "what": c.what, "origin": c.origin} for c in self.carried]}
