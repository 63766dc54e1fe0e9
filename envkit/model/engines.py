"""Serving engines that come as containers or their own wheels, as values: Triton's container releases, the
TensorRT-LLM releases, the tensorrtllm_backend tags, and FasterTransformer's frozen legacy profile (read from
matrix.toml by config/matrix_file.py), and what resolve answers for `--engine` (EngineSolution)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.errors import InputError
from envkit.model.matrix import CC, Driver, Gpu
from envkit.model.purl import parse_pypi

NGC = "nvcr.io/nvidia"
CARRIED_ENSEMBLES = (Version("0.8.0"), Version("0.14.0"), Version("0.19.0"))
"""The tensorrtllm_backend tags whose all_models/inflight_batcher_llm envkit fills (the build takes it from GitHub's
archive of the tag's commit; envkit's fill values were checked against each tag's config.pbtxt files): seed 003's
0.8.0, 0.14.0 (the last with Volta) and 0.19.0 (the last tag that holds the ensemble)."""


def release_key(release: str) -> tuple[int, int]:
    """A container release YY.MM as a sortable pair (24.02 < 24.10)."""
    yy, mm = release.split(".")
    return int(yy), int(mm)


@dataclass(frozen=True)
class TritonImage:
    """One Triton container: nvcr.io/nvidia/tritonserver:RELEASE-FLAVOR (flavor py3, trtllm-python-py3, vllm-python-py3).
    `driver` is the driver its documentation requires; `datacenter_drivers` the older branches (each its first
    release) its CUDA forward-compatibility package supports on data center GPUs."""
    release: str
    flavor: str
    cuda: Optional[str]
    driver: Optional[Driver]
    source: str
    server: Optional[Version] = None
    python: Optional[Version] = None
    torch: Optional[str] = None
    tensorrt: Optional[str] = None
    trtllm: Optional[Version] = None
    vllm: Optional[str] = None
    min_cc: Optional[CC] = None
    datacenter_drivers: tuple[Driver, ...] = ()
    not_forward_compatible: Optional[tuple[int, ...]] = None  # branches its notes say to upgrade from; None: not read

    @property
    def key(self) -> tuple[int, int]:
        return release_key(self.release)

    @property
    def image(self) -> str:
        return f"{NGC}/tritonserver:{self.release}-{self.flavor}"

    @property
    def vllm_version(self) -> Optional[Version]:
        return None if self.vllm is None else Version(Version(self.vllm).public)


@dataclass(frozen=True)
class TrtllmBackend:
    """A tensorrtllm_backend tag: its commit (GitHub's archive of it holds the model repository generate fills), the
    Triton -py3 image its Dockerfile.trt_llm_backend builds on, the TensorRT-LLM commit of its submodule, and whether
    the tag carries the inflight_batcher_llm ensemble."""
    version: Version
    commit: str
    base_image: str
    ensemble: bool
    tensorrt_llm_commit: str
    source: str

    @property
    def base_release(self) -> str:
        return self.base_image.rpartition(":")[2].split("-")[0]


@dataclass(frozen=True)
class Trtllm:
    """A TensorRT-LLM release: its wheels' Pythons, its torch and TensorRT pins, the CUDA it is built for, the GPU
    archs its README or support matrix lists, and which workflows it has (trtllm-build engines for Triton's
    ensemble; trtllm-serve, the OpenAI server)."""
    version: Version
    python: tuple[Version, ...]
    archs: tuple[CC, ...]
    trtllm_build: bool
    trtllm_serve: bool
    source: str
    torch: Optional[SpecifierSet] = None
    tensorrt: Optional[SpecifierSet] = None
    cuda: Optional[Version] = None
    archs_note: Optional[str] = None
    archs_removed: tuple[CC, ...] = ()  # its notes: removed "in this and future releases"
    pip_unsupported_archs: tuple[CC, ...] = ()  # its notes: its pip wheel does not install on these
    fp8_archs: tuple[CC, ...] = ()
    ngc_image: Optional[str] = None
    unknown: tuple[str, ...] = ()
    support_min_cc: Optional[CC] = None  # its support matrix's lowest listed arch: below it, community support only
    support_note: Optional[str] = None  # what that support matrix lists, its words on the rest, and its page (the source)


@dataclass(frozen=True)
class FasterTransformer:
    """The frozen legacy profile: NVIDIA archived FasterTransformer and its Triton backend (last commits
    2023-10-19); the backend builds on these Triton -py3 releases, the library for these SM numbers.
    `backend_commit`: fastertransformer_backend's last commit, whose archive holds the bloom model repository."""
    archived: str
    triton_releases: tuple[str, ...]
    sm: tuple[CC, ...]
    default_sm: tuple[CC, ...]
    cuda_min: Version
    successor: str
    backend_commit: str
    source: str


@dataclass(frozen=True)
class BackendArchive:
    """GitHub's archive of a Triton backend at one commit, whose model repository a context fills: the directories
    `models` under `root` of the tree; `left_out` the files of theirs the filled repository does not hold, each with
    why. The build COPYs it from the context's `path` where it is there, else fetches it from `origin` (or the site's
    [rewrite] of it)."""
    repository: str  # https://github.com/OWNER/NAME
    commit: str
    ref: str  # what the commit is: the tag (v0.8.0), or the branch's last commit
    root: str  # the model repositories' directory in the tree (all_models/inflight_batcher_llm)
    models: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...] = ()

    @property
    def project(self) -> str:
        return self.repository.rstrip("/").rpartition("/")[2]

    @property
    def name(self) -> str:
        return f"{self.project}-{self.commit}.tar.gz"

    @property
    def path(self) -> str:
        return f"sources/{self.name}"

    @property
    def origin(self) -> str:
        return f"{self.repository}/archive/{self.commit}.tar.gz"

    @property
    def what(self) -> str:
        return f"{self.project} {self.ref} (commit {self.commit[:12]})"


@dataclass(frozen=True)
class EngineStep:
    """One step of a container engine's Dockerfile that the plan names: what it reaches (none, site, internet), and
    which URLs."""
    id: str
    title: str
    why: str
    network: str = "none"
    reaches: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "why": self.why, "network": self.network, "reaches": list(self.reaches)}


NVIDIA_INDEX = "https://pypi.nvidia.com"  # where TensorRT-LLM's real wheels are (PyPI holds stubs that fetch from it)


@dataclass(frozen=True)
class WheelBase:
    """What `generate --from-wheel` builds TensorRT-LLM's wheel on: a CUDA runtime image of the release's CUDA, its
    OS's Python (one of the release's wheel Pythons)."""
    image: str
    cuda: str
    python: Version
    source: str


@dataclass(frozen=True)
class EngineSolution:
    """What `--engine trtllm|triton-trtllm|triton-vllm|fastertransformer` resolves to: the image to build FROM (or the
    Triton image a backend is built on), what it carries, and what generate writes for it."""
    engine: str
    gpu: Optional[Gpu]
    image: str  # the container image (as NVIDIA names it; a site's registry mirror rewrites it)
    build: str  # "container" (use the image as it is) | "backend" (build tensorrtllm_backend on it) | "wheel" | "source"
    triton: Optional[TritonImage]
    trtllm: Optional[Trtllm]
    backend: Optional[TrtllmBackend]
    min_driver: Optional[Driver]
    workflow: str  # "ensemble" (trtllm-build engines + Triton ensemble) | "trtllm-serve" | "vllm" | "fastertransformer"
    notes: tuple[str, ...]
    sources: tuple[str, ...]
    legacy: bool = False
    sm: tuple[CC, ...] = ()  # FasterTransformer: the -DSM list to build

    def flat(self) -> dict[str, str]:
        out = {"engine": self.engine, "image": self.image, "build": self.build, "workflow": self.workflow}
        if self.triton is not None:
            out["triton"] = self.triton.release
            if self.triton.server is not None:
                out["server"] = str(self.triton.server)
            if self.triton.cuda:
                out["cuda"] = self.triton.cuda
        if self.trtllm is not None:
            out["trtllm"] = str(self.trtllm.version)
        if self.backend is not None:
            out["backend"] = str(self.backend.version)
        if self.triton is not None and self.triton.vllm:
            out["vllm"] = str(self.triton.vllm_version)
        if self.min_driver is not None:
            out["min_driver"] = str(self.min_driver)
        if self.sm:
            out["sm"] = ",".join(f"{c.major}{c.minor}" for c in self.sm)
        if self.legacy:
            out["legacy"] = "true"
        return out

    def to_json(self) -> dict[str, Any]:
        t, r, b = self.triton, self.trtllm, self.backend
        return {
            "engine": self.engine, "image": self.image, "build": self.build, "workflow": self.workflow, "legacy": self.legacy,
            "gpu": None if self.gpu is None else {"name": self.gpu.name, "arch": self.gpu.arch},
            "min_driver": None if self.min_driver is None else str(self.min_driver),
            "triton": None if t is None else {
                "release": t.release, "flavor": t.flavor, "server": None if t.server is None else str(t.server),
                "cuda": t.cuda, "python": None if t.python is None else str(t.python), "torch": t.torch,
                "tensorrt": t.tensorrt, "trtllm": None if t.trtllm is None else str(t.trtllm), "vllm": t.vllm},
            "trtllm": None if r is None else {
                "version": str(r.version), "python": [str(p) for p in r.python], "torch": None if r.torch is None else str(r.torch),
                "tensorrt": None if r.tensorrt is None else str(r.tensorrt), "cuda": None if r.cuda is None else str(r.cuda),
                "archs": [str(a) for a in r.archs], "trtllm_build": r.trtllm_build, "trtllm_serve": r.trtllm_serve},
            "backend": None if b is None else {"version": str(b.version), "base_image": b.base_image,
                                               "tensorrt_llm_commit": b.tensorrt_llm_commit, "ensemble": b.ensemble},
            "sm": [f"{c.major}{c.minor}" for c in self.sm],
            "notes": list(self.notes),
            "sources": list(self.sources),
        }


ENGINE_OPTIONS = ("--tp", "--max-batch-size", "--from-wheel")
"""generate's options that lay out a container engine's server; a pip stack refuses them."""
USED_BY = {"ensemble": ("--tp", "--max-batch-size"), "trtllm-serve": ("--tp", "--max-batch-size", "--from-wheel"),
           "fastertransformer": ("--tp",), "vllm": ()}
"""Which of them each workflow's files use (core/planner/engine.py): the ensemble's mpirun ranks, trtllm-build and config.pbtxt;
trtllm-serve's --tp_size and --max_batch_size (and its wheel); FasterTransformer's tensor_para_size (its config.pbtxt
keeps its own max_batch_size); Triton's vLLM backend none (its CMD is tritonserver on the model repository the user
brings, whose model.json sets tensor_parallel_size and max_num_seqs)."""
_UNUSED_WHY = {
    "vllm": ("its CMD is tritonserver on the model repository you bring, where the vLLM backend reads tensor_parallel_size "
             "and max_num_seqs from the model's model.json", "set them in that model.json, and drop the flags"),
    "fastertransformer": ("FasterTransformer's config.pbtxt keeps its own max_batch_size", "drop the flag"),
}


@dataclass(frozen=True)
class EngineOptions:
    """How the server is laid out: tensor-parallel ranks (GPUs), Triton's max batch size, and whether the
    tensorrt_llm model is decoupled (streams tokens: generate_stream). `given`: the options the command line
    named (so one given at its default value is still refused where it does not apply)."""
    tp: int = 1
    max_batch_size: int = 64
    decoupled: bool = True
    from_wheel: bool = False  # --engine trtllm: TensorRT-LLM's wheel on NVIDIA's CUDA image instead of Triton's container
    given: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def asked(cls, tp: Optional[int] = None, max_batch_size: Optional[int] = None, from_wheel: bool = False) -> EngineOptions:
        """The options as a command line gave them (None: not given)."""
        d = cls()
        given = tuple(n for n, v in (("--tp", tp), ("--max-batch-size", max_batch_size), ("--from-wheel", from_wheel or None))
                      if v is not None)
        return cls(tp=d.tp if tp is None else tp, max_batch_size=d.max_batch_size if max_batch_size is None else max_batch_size,
                   from_wheel=from_wheel, given=given)

    def check(self) -> None:
        if self.tp < 1 or self.tp > 64:
            raise InputError(f"--tp {self.tp} is not a tensor-parallel size", "give the number of GPUs, 1 to 64 (e.g. --tp 2)")
        if self.max_batch_size < 1 or self.max_batch_size > 4096:
            raise InputError(f"--max-batch-size {self.max_batch_size} is out of range", "give 1 to 4096 (e.g. --max-batch-size 64)")

    def named(self) -> tuple[str, ...]:
        """The options given, or set away from their defaults, in ENGINE_OPTIONS' order."""
        d = EngineOptions()
        differ = {"--tp": self.tp != d.tp, "--max-batch-size": self.max_batch_size != d.max_batch_size,
                  "--from-wheel": self.from_wheel}
        return tuple(n for n in ENGINE_OPTIONS if differ[n] or n in self.given)

    def refuse_unused(self, engine: str, workflow: str) -> None:
        """Refused (exit 2): an option this engine's files would not use, so it would be dropped silently."""
        unused = [n for n in self.named() if n not in USED_BY.get(workflow, ENGINE_OPTIONS)]
        if not unused or unused == ["--from-wheel"]:  # --from-wheel: wheel_base names what it needs
            return
        unused = [n for n in unused if n != "--from-wheel"]
        why, fix = _UNUSED_WHY.get(workflow, ("its files do not use it", "drop the flag" if len(unused) == 1 else "drop the flags"))
        raise InputError(f"--engine {engine} does not use {' and '.join(unused)}: {why}", fix)

    def refuse_on_pip_stack(self) -> None:
        """Refused (exit 2) on a stack envkit builds with pip, which has no such server to lay out."""
        named = self.named()
        if named:
            raise InputError(f"{', '.join(named)} lay{'s' if len(named) == 1 else ''} out a container engine's server (--engine "
                             "trtllm, triton-trtllm, fastertransformer), and this is a stack envkit builds with pip",
                             f"drop {'it' if len(named) == 1 else 'them'}, or pick a container engine with --engine; a vLLM server takes "
                             "its own --serve-arg=--tensor-parallel-size=N and --serve-arg=--max-num-seqs=N")


@dataclass(frozen=True)
class Ftllm:
    """A fastllm wheel on PyPI (ftllm, or ftllm-rocm): its Python, CUDA major, Requires-Dist, CPU library, CUDA archs
    ("80-real": SASS only; "120": SASS and PTX) and server routes, each as that release's wheel or tag states it."""
    package: str
    version: Version
    wheel: str
    source: str
    python: Optional[SpecifierSet] = None
    wheel_sha256: Optional[str] = None
    platform_tag: Optional[str] = None
    cuda_major: Optional[int] = None
    requires: tuple[str, ...] = ()
    cpu_lib: bool = False
    archs: tuple[str, ...] = ()
    rocm: Optional[str] = None
    server_endpoints: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    cpu_requires: tuple[str, ...] = ()  # measured: what its CPU server imports (installed instead of its declared deps)
    cpu_measured: Optional[str] = None  # the doc of this repository that records that measurement

    @property
    def wheel_url(self) -> Optional[str]:
        """The wheel's PyPI purl with its file name and sha256, as the row's source names it first."""
        first = self.source.split()[0] if self.source else ""
        ref = parse_pypi(first) if first.startswith("pkg:pypi/") else None
        return first if ref is not None and ref.file_name == self.wheel and ref.sha256 else None


@dataclass(frozen=True)
class Sglang:
    """An SGLang release: its Requires-Python, the torch, flashinfer and kernel pins of its METADATA, the CUDA major of
    the cuda-python it requires, and the compute capability its runtime check demands."""
    version: Version
    wheel: str
    source: str
    python: Optional[SpecifierSet] = None
    torch: Optional[str] = None  # a Requires-Dist line, e.g. 'torch==2.6.0; extra == "srt"'
    flashinfer: tuple[str, ...] = ()
    kernel: Optional[str] = None
    kernel_archs: tuple[str, ...] = ()  # CMake's arch list of the kernel wheel PyPI serves for x86_64; (): not in the matrix
    cuda_major: Optional[int] = None
    min_cc: Optional[CC] = None
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Paddle:
    """A PaddlePaddle build: PyPI's, or Paddle's own index (`index`) or find-links page (`find_links`), its CUDA and
    cuDNN (or DTK for a Hygon DCU build) and Pythons."""
    package: str
    version: str  # as Paddle writes it: 2.5.0.post117, nightly
    variant: str
    source: str
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    dtk: Optional[str] = None
    python: tuple[Version, ...] = ()
    index: Optional[str] = None
    find_links: Optional[str] = None
    image: Optional[str] = None
    archs: tuple[str, ...] = ()  # measured: the SASS its main libraries carry (CMake's notation, "61-real"); (): not in the matrix
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lmdeploy:
    """An LMDeploy release: the Pythons its x86_64 wheels are built for, its torch pin and every Requires-Dist line of its
    METADATA, the CUDA major of its PyPI wheel, the archs its TurboMind library is compiled for (CMake's list: "80-real"
    SASS only, "90" SASS and PTX), and the compute capability its docs name as the floor."""
    version: Version
    wheel: str
    source: str
    python: tuple[Version, ...] = ()
    torch: Optional[str] = None  # the Requires-Dist line, e.g. 'torch<=2.5.1,>=2.0.0'
    requires: tuple[str, ...] = ()
    cuda_major: Optional[int] = None
    archs: tuple[str, ...] = ()
    min_cc: Optional[CC] = None
    wheel_sha256: Optional[str] = None
    unknown: tuple[str, ...] = ()


FASTLLM_REPOSITORY = "https://github.com/ztxz16/fastllm"


@dataclass(frozen=True)
class FtllmSource:
    """A fastllm source tag: the commit a build carries (GitHub's archive of it) and what the build needs to know, as
    that tag's CMakeLists.txt and tools/scripts/setup.py state it."""
    version: Version
    tag: str
    commit: str
    source: str
    date: Optional[str] = None
    cmake_minimum: Optional[str] = None
    options: tuple[str, ...] = ()  # every option() as NAME=DEFAULT
    cuda_arch_default: Optional[str] = None  # CUDA_ARCH when neither it nor CMAKE_CUDA_ARCHITECTURES is given ("native")
    cxx_march_native: bool = False  # the CPU code is compiled with -march=native unless portable_option is ON
    portable_option: Optional[str] = None  # MAKE_WHL_X86: the published wheel's -mavx2 -mfma flags instead
    cuda_libs: tuple[str, ...] = ()  # what USE_CUDA links
    numa: bool = False  # libnuma linked by default (an option that is ON guards it)
    python_package: Optional[str] = None  # the package fastllm_tools' POST_BUILD lays out under BUILD/tools/
    base_requires: tuple[str, ...] = ()  # setup.py's install_requires before its extras are added
    server_requires: tuple[str, ...] = ()  # setup.py's `server` extra: what `ftllm server` imports besides the base
    server_pins: tuple[str, ...] = ()  # measured: what its compiled server imports, pinned (installed instead of the above)
    measured: Optional[str] = None  # the doc of this repository that records that measurement

    @property
    def archive(self) -> str:
        return f"{FASTLLM_REPOSITORY}/archive/{self.commit}.tar.gz"

    @property
    def archive_name(self) -> str:
        return f"fastllm-{self.commit[:12]}.tar.gz"

    def option(self, name: str) -> Optional[str]:
        return next((o.split("=", 1)[1] for o in self.options if o.split("=", 1)[0] == name), None)


@dataclass(frozen=True)
class EnginePackages:
    """What a pip-stack engine adds to a solution: the pins installed after torch (and where pip finds them)."""
    engine: str
    version: str
    packages: tuple[str, ...]
    source: str
    index_url: Optional[str] = None  # an extra index (Paddle's), through the site's rewrite
    find_links: Optional[str] = None  # an extra find-links page (Paddle's stable.html)
    server: tuple[str, ...] = ()  # the server's command line in the image, where the engine has one
    no_deps: tuple[str, ...] = ()  # installed after `packages` without their declared dependencies (a measured set instead)
    wheel_url: Optional[str] = None  # the no-deps package's PyPI file (a purl with file_name and checksum), carried offline
    build: Optional[FtllmSource] = None  # --engine-build source: compiled from this tag instead of installed from a wheel
    cuda_arch: Optional[str] = None  # its -DCUDA_ARCH ("90"): the GPU's, or the newest the stack's nvcc knows that runs there

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "version": self.version, "packages": list(self.packages), "index_url": self.index_url,
               "find_links": self.find_links, "server": list(self.server), "source": self.source,
               "no_deps": list(self.no_deps), "wheel_url": self.wheel_url}
        if self.build is not None:
            out["build"] = {"from": "source", "tag": self.build.tag, "commit": self.build.commit, "archive": self.build.archive,
                            "cuda_arch": self.cuda_arch}
        return out
