"""The planner's building blocks, one per component of the image, in the manner of hpccm's: a block
says what it adds to the build stage (build_steps), what the runtime stage needs of it
(runtime_steps, hpccm's `Stage1 += Stage0.runtime()`), what the build context must carry for it
(carried), the distribution packages it needs (apt), what it installs (requirements,
wheel_sources), the modules the runtime import check imports (modules) and what the user should
know (warnings).

Pure: a block is a frozen value and every method reads the PlanContext and returns tuples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from envkit.core.planner.context import PlanContext
from envkit.errors import InputError
from envkit.model.engine_specs import REGISTRY
from envkit.model.engines import EnginePackages, FtllmSource
from envkit.model.matrix import PythonRelease, ToolkitWheel, TorchBuild, Vllm, VllmCpu
from envkit.model.plan import (
    CUDA_HOME,
    MODEL_DIR,
    PYTHON_FTP,
    PYTHON_PREFIX,
    SERVE_HOME,
    SERVE_UID,
    VENV,
    WHEELHOUSE,
    AptStep,
    Carried,
    CMakeStep,
    CopyModelStep,
    CopyVenvStep,
    CopyWheelStep,
    CudaHomeStep,
    EnvStep,
    ImportCheckStep,
    KernelsStep,
    LabelsStep,
    Network,
    PipStep,
    PythonTarballStep,
    Serve,
    ServeStep,
    SiteSettingsStep,
    StageName,
    Step,
    UninstallStep,
    VenvStep,
)
from envkit.model.purl import parse_pypi, pypi, pypi_refs
from envkit.model.serving import OFFLINE_ENV
from envkit.model.solution import FlashAttnPlan, KernelPlan

# Build tools pinned once, for every Python from 3.8 on (each ships a py3 or abi3 wheel).
BUILD_TOOLS = ("wheel==0.43.0", "packaging==24.0", "ninja==1.11.1.1", "psutil==5.9.8")
# setuptools by Python: the newest release that still supports it (68.0.0 for 3.7, 75.3.0 for 3.8, per their
# Requires-Python on PyPI); 80.9.0 meets torch 2.13's own `setuptools>=77.0.3`, which 69.5.1 did not
SETUPTOOLS = ((Version("3.9"), "setuptools==80.9.0"), (Version("3.8"), "setuptools==75.3.0"), (Version("3.7"), "setuptools==68.0.0"))


def setuptools_for(python: Version) -> str:
    return next((pin for since, pin in SETUPTOOLS if python >= since), SETUPTOOLS[-1][1])
FLASH_ATTN_DEPS = ("einops==0.7.0",)
CMAKE = "cmake==4.4.3"  # PyPI's CMake, as on the GPU machine that built fastllm from source (docs/fastllm-source.md)
FTLLM_TARGET = "fastllm_tools"  # the library tools/ftllm loads; its POST_BUILD lays the package out in BUILD/tools
FLASH_ATTN_CUDA_ARCHS_SINCE = Version("2.7.3")  # older setup.py files hard-code sm_80/sm_90

WheelSource = tuple[str, Optional[str]]  # what `envkit bundle` downloads: (spec or URL, extra index)


@dataclass(frozen=True)
class AptNeed:
    packages: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Block:
    """A component of the image. Every method defaults to adding nothing."""

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        return ()

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return ()

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return ()

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        return ()

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return ()

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return ()

    def modules(self) -> tuple[str, ...]:
        return ()

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        return ()


def sdist_name(version: Version) -> str:
    return f"flash_attn-{version}.tar.gz"


def carried_sdist(version: Version, source: str = "") -> Carried:
    """The sdist, its origin the purl with its sha256 where the flash-attn row's source has it (the bundle checks the file by
    it), else the release's purl (the index's listed sha256 is checked)."""
    name = sdist_name(version)
    cited = next((ref for ref in pypi_refs(source) if ref.file_name == name and ref.sha256), None)
    return Carried(f"sources/{name}", f"flash-attn {version} sdist", str(cited) if cited else pypi("flash-attn", str(version)))


@dataclass(frozen=True)
class SiteSettings(Block):
    """The site's mirrors, CA certificate and vendor-list removal, first in each stage."""

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return self._step(ctx, "build")

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return self._step(ctx, "runtime")

    @staticmethod
    def _step(ctx: PlanContext, stage: StageName) -> tuple[Step, ...]:
        if not (ctx.site.given or ctx.offline):
            return ()
        return (Step(f"{stage}-site", "site mirrors", "; ".join(SiteSettings._what(ctx)) or "site settings", SiteSettingsStep(stage)),)

    @staticmethod
    def _what(ctx: PlanContext) -> tuple[str, ...]:
        site = ctx.site
        if ctx.offline:
            sources: tuple[Optional[str], ...] = ("apt uses only the carried repository (debs/), pip only the wheelhouse",)
        else:
            sources = ("apt points at the site mirror (sources.list and deb822 .sources)" if site.apt_mirror else None,
                       "pip points at the site index" if site.pip_index else None)
        vendor = "NVIDIA/ROCm vendor apt lists that reach the internet are removed" if site.remove_vendor_lists or ctx.offline else None
        ca = "the site CA certificate is trusted" if site.ca_cert else None
        return tuple(text for text in (*sources, vendor, ca) if text)

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        """The mirrors' logins come as build secrets, mounted by the pip and apt steps (core/render.py)."""
        if ctx.offline:
            return ()
        return tuple(f"{s.steps} steps mount the build secret `{s.id}` ({s.key} = true): build with --secret {s.id}=FILE "
                     "(Podman or docker buildx; Docker's legacy builder cannot pass secrets)" for s in ctx.site.secrets())


@dataclass(frozen=True)
class AptPackages(Block):
    """One apt install per stage, of what the other blocks need there (sorted, each once)."""

    stage: StageName
    needs: tuple[AptNeed, ...]

    @classmethod
    def gather(cls, stage: StageName, blocks: tuple[Block, ...], ctx: PlanContext) -> AptPackages:
        return cls(stage, tuple(need for block in blocks for need in block.apt(ctx, stage)))

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(sorted({package for need in self.needs for package in need.packages}))

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return self._step(ctx) if self.stage == "build" else ()

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return self._step(ctx) if self.stage == "runtime" else ()

    def _step(self, ctx: PlanContext) -> tuple[Step, ...]:
        step_id, why = f"{self.stage}-apt", "; ".join(need.why for need in self.needs)
        if ctx.offline:
            return (Step(step_id, "apt packages (carried)", why, AptStep(self.stage, self.packages, from_carried_repository=True)),)
        return (Step(step_id, "apt packages", why, AptStep(self.stage, self.packages), ctx.network.apt(step_id, ctx.os.name)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        if not ctx.offline:
            return ()
        return (Carried(f"debs/{self.stage}/", f"flat apt repository (Packages + .deb) for: {' '.join(self.packages)}",
                        f"apt-get download in {ctx.os.name} (envkit bundle)"),)


@dataclass(frozen=True)
class DistroPython(Block):
    """The base image's distribution ships the stack's Python: install it, nothing to build."""

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        osr = ctx.os
        if stage == "runtime":
            return (AptNeed(osr.python_runtime, f"{osr.name}'s Python {osr.python} runtime"),)
        if ctx.compiles:
            return (AptNeed(osr.build_packages + osr.python_packages,
                            f"compilers for the kernels and {osr.name}'s Python {osr.python} with its headers"),)
        return (AptNeed(osr.python_runtime, f"{osr.name}'s Python {osr.python}; nothing is compiled, so no compiler"),)


@dataclass(frozen=True)
class CPythonTarball(Block):
    """CPython compiled from the carried source tarball into /opt/python; its shared libraries at runtime."""

    release: PythonRelease

    @property
    def full_version(self) -> str:
        stem = self.release.tarball.removeprefix("Python-")
        return stem[:stem.rindex(".")]

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        python = ctx.solution.python
        if stage == "runtime":
            return (AptNeed(ctx.os.cpython_runtime, f"shared libraries of CPython {python}; no compiler"),)
        return (AptNeed(ctx.os.cpython_build, f"compilers and the libraries CPython {python} builds against"),)

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return (Step("build-python", f"CPython {self.full_version} from the carried tarball",
                     f"{ctx.os.name} ships Python {ctx.os.python}, the stack needs {ctx.solution.python}",
                     PythonTarballStep(self.release.tarball, PYTHON_PREFIX)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        tarball, full = self.release.tarball, self.full_version
        return (Carried(f"sources/{tarball}", f"CPython {full} source", f"{PYTHON_FTP}/{full}/{tarball}"),)


@dataclass(frozen=True)
class Venv(Block):
    """The virtual environment every wheel goes into; offline, the carried wheelhouse beside it."""

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return (Step("build-venv", f"virtual environment {VENV}", "one self-contained tree to copy into the runtime stage",
                     VenvStep(ctx.python_bin, VENV, wheelhouse=ctx.offline)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        if not ctx.offline:
            return ()
        return (Carried("wheelhouse/", "every wheel in `requirements` (and their dependencies)",
                        "pip download in the target image (envkit bundle)"),)


@dataclass(frozen=True)
class BuildTools(Block):
    """Pinned build tools for compiling, and flash-attn's pure-Python dependencies."""

    tools: tuple[str, ...]
    for_compiling: bool

    @classmethod
    def needed(cls, ctx: PlanContext) -> tuple[BuildTools, ...]:
        engine = ctx.solution.engine
        source = (CMAKE,) if engine is not None and engine.build is not None else ()
        compiling = (setuptools_for(ctx.solution.python),) + BUILD_TOOLS + source if ctx.compiles else ()
        tools = compiling + (FLASH_ATTN_DEPS if ctx.solution.flash_attn else ())
        return (cls(tools, ctx.compiles),) if tools else ()

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        if self.for_compiling and (ctx.solution.flash_attn or ctx.solution.kernels):
            title = "pinned build tools"
            why = "flash-attn's setup.py imports packaging, psutil and torch; ninja makes the compile parallel; flash_attn imports einops"
        elif self.for_compiling:
            title, why = "pinned build tools", ("CMake configures fastllm (removed after its build); setuptools and wheel install "
                                                "the compiled package without build isolation (no index needed)")
        else:
            title, why = "flash-attn's dependencies", "flash_attn imports einops"
        return (Step("build-tools", title, why, PipStep(self.tools, find_links=ctx.find_links), ctx.index_network),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return self.tools

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return tuple((tool, None) for tool in self.tools)


@dataclass(frozen=True)
class Torch(Block):
    """torch from its index, or a vendor's wheel carried in the context when no index serves it. With the toolkit
    from NVIDIA's PyPI wheels, a build that is PyPI's own torch for Linux x86_64 (the matrix's `pypi = true`) comes
    from PyPI too, so a site that mirrors PyPI alone needs no PyTorch index."""

    build: TorchBuild

    def from_pypi(self, ctx: PlanContext) -> bool:
        """PyPI's own wheel (no PyTorch index) where it is this build: with the toolkit from PyPI too, and always on
        aarch64, where PyPI's wheels carry no +local label."""
        return (ctx.toolkit == "pip" or ctx.solution.machine == "aarch64") and self.build.pypi and self.build.index_url is not None

    def spec(self, ctx: PlanContext) -> str:
        return f"torch=={self.build.version if self.from_pypi(ctx) else self.build.pin}"

    @property
    def vendor_wheel(self) -> Optional[str]:
        """The carried wheel's file name when torch is on no public index."""
        if self.build.index_url is not None:
            return None
        assert self.build.wheel is not None, f"torch {self.build.pin} has neither an index nor a wheel"
        return self.build.wheel

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        t, wheel, spec = self.build, self.vendor_wheel, self.spec(ctx)
        title, why = f"torch {t.pin}", f"the {t.variant} build (cxx11abi={t.cxx11abi}) every compiled module must match"
        if wheel is not None:
            copy = () if ctx.offline else (Step("build-torch-wheel", "carried torch wheel", f"torch {t.pin} is on no public index",
                                                 CopyWheelStep(wheel)),)
            return copy + (Step("build-torch", title, why, PipStep((f"{WHEELHOUSE}/{wheel}",), find_links=ctx.find_links),
                                ctx.index_network),)
        if self.from_pypi(ctx):
            why += (f"; {spec} from PyPI, whose torch {t.version} for Linux {ctx.solution.machine} is this {t.variant} build"
                    + (" (--toolkit pip: no PyTorch index)" if ctx.toolkit == "pip" else ""))
        if ctx.offline or t.index_url is None or self.from_pypi(ctx):  # offline: from the carried wheelhouse
            return (Step("build-torch", title, why, PipStep((spec,), find_links=ctx.find_links), ctx.index_network),)
        url, network = ctx.network.url("build-torch", t.index_url)
        return (Step("build-torch", title, why, PipStep((spec,), extra_index_url=url), network, (url,)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        wheel = self.vendor_wheel
        if wheel is None:
            return ()
        return (Carried(f"wheelhouse/{wheel}", f"torch {self.build.pin}", "the vendor's wheel site (see the matrix row's source)"),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return (self.spec(ctx),)

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        if self.from_pypi(ctx):
            return ((self.spec(ctx), None),)
        return ((self.spec(ctx), self.build.index_url),) if self.build.index_url else ()

    def modules(self) -> tuple[str, ...]:
        return ("torch",)

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        wheel = self.vendor_wheel
        if wheel is None:
            return ()
        return (f"{wheel} is installed by file name: its version is not PEP 440, which pip >= 24.1 refuses; "
                "the venv keeps the pip its Python ships (fix if pip was upgraded: pip install 'pip<24.1')",)


# What the nvidia/cuda runtime image sets and a plain OS image lacks: the NVIDIA container toolkit mounts the driver
# (libcuda, nvidia-smi) into a container that asks for compute and utility.
NVIDIA_RUNTIME_ENV = (("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"))


@dataclass(frozen=True)
class CudaToolkitWheels(Block):
    """--toolkit pip: the devel stage's CUDA toolkit from NVIDIA's wheels pinned to the release, installed into the
    venv after torch and laid out as one CUDA_HOME (/usr/local/cuda) for torch.utils.cpp_extension and flash-attn's
    setup.py. The runtime wheel keeps the build torch already brings when it is of the same release."""

    wheels: tuple[ToolkitWheel, ...]
    cuda: Version
    release: str

    @staticmethod
    def is_runtime(wheel: ToolkitWheel) -> bool:
        return wheel.name.startswith("nvidia-cuda-runtime")

    @property
    def specs(self) -> tuple[str, ...]:
        """Each wheel pinned; the runtime (torch's dependency too) at least the pin, within the release."""
        return tuple(f"{w.name}~={w.version}" if self.is_runtime(w) else w.pin for w in self.wheels)

    @property
    def build_only(self) -> tuple[str, ...]:
        """The wheels torch does not require: removed again before the runtime stage copies the venv."""
        return tuple(w.name for w in self.wheels if not self.is_runtime(w))

    def prefix(self, ctx: PlanContext) -> str:
        """Where the wheels install: one folder per CUDA major from 13 on (nvidia/cu13)."""
        py = ctx.solution.python
        return f"{VENV}/lib/python{py.major}.{py.minor}/site-packages/nvidia/cu{self.cuda.major}"

    def links(self) -> tuple[tuple[str, str], ...]:
        """The wheels keep libraries in lib/ and only the versioned libcudart: setup.py files look in lib64/ and link -lcudart."""
        return (("lib64", "lib"), ("lib/libcudart.so", f"libcudart.so.{self.cuda.major}"))

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        names = ", ".join(w.pin for w in self.wheels)
        return (
            Step("build-cuda-toolkit", f"CUDA {self.release} toolkit wheels",
                 f"{ctx.toolkit_chosen_by}: nvcc, headers and libraries from NVIDIA's wheels of CUDA {self.release} ({names}) "
                 "instead of the nvidia/cuda devel image; the runtime wheel stays at torch's own where that is CUDA "
                 f"{self.cuda.major}.{self.cuda.minor} too",
                 PipStep(self.specs, find_links=ctx.find_links), ctx.index_network),
            Step("build-cuda-home", f"CUDA_HOME {CUDA_HOME} over the wheels",
                 "torch.utils.cpp_extension and flash-attn's setup.py find nvcc, include/ and lib64/ under CUDA_HOME; "
                 "nvcc --version checks the layout",
                 CudaHomeStep(CUDA_HOME, self.prefix(ctx), self.links())),
        )

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        return (Step("runtime-nvidia-env", "NVIDIA container settings",
                     f"the runtime stage starts from {ctx.os.name}'s own image, without the nvidia/cuda image's settings: "
                     "the container toolkit mounts the driver for these; torch's nvidia-* wheels in the venv carry the CUDA libraries",
                     EnvStep(NVIDIA_RUNTIME_ENV)),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return self.specs

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return tuple((spec, None) for spec in self.specs)


@dataclass(frozen=True)
class CudaToolkitRemoved(Block):
    """The toolkit wheels' build-only part (nvcc, nvvm, headers) uninstalled after the last compile: the runtime
    stage copies the venv and must not carry nvcc."""

    toolkit: CudaToolkitWheels

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        prefix = self.toolkit.prefix(ctx)
        return (Step("build-cuda-toolkit-removed", "toolkit wheels removed",
                     f"nothing is compiled after this; the runtime stage copies {VENV}, which keeps only what torch requires",
                     UninstallStep(self.toolkit.build_only, (CUDA_HOME, *(f"{prefix}/{link}" for link, _ in self.toolkit.links())))),)


@dataclass(frozen=True)
class FlashAttnWheel(Block):
    """A prebuilt flash-attn wheel (not on PyPI) that matches torch's ABI."""

    version: Version
    wheel: str
    url: str

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        title, why = f"flash-attn {self.version} wheel", f"prebuilt {self.wheel} matches torch's ABI"
        if ctx.offline:
            return (Step("build-flash-attn", title, why, PipStep((f"{WHEELHOUSE}/{self.wheel}",), find_links=WHEELHOUSE)),)
        url, network = ctx.network.url("build-flash-attn", self.url)
        return (Step("build-flash-attn", title, why, PipStep((url,)), network, (url,)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        if not ctx.offline:
            return ()
        return (Carried(f"wheelhouse/{self.wheel}", f"flash-attn {self.version} wheel (not on PyPI)", self.url),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return (f"flash-attn=={self.version}",)

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return ((self.url, None),)

    def modules(self) -> tuple[str, ...]:
        return ("flash_attn", "flash_attn_2_cuda")


@dataclass(frozen=True)
class FlashAttnSource(Block):
    """flash-attn compiled from the carried sdist, for the solution's archs, without GitHub."""

    flash_attn: FlashAttnPlan

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        if stage == "build" and self.flash_attn.build == "source":
            return (AptNeed(("git",), "git, which flash-attn's setup.py calls for its submodules"),)
        return ()

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        fa = self.flash_attn
        archs = (f"for {';'.join(fa.arch_list)}" if fa.version >= FLASH_ATTN_CUDA_ARCHS_SINCE
                 else f"for its hard-coded sm_80/sm_90 (FLASH_ATTN_CUDA_ARCHS arrived in {FLASH_ATTN_CUDA_ARCHS_SINCE})")
        profile = "" if fa.profile == "full" else (f"; the serving profile ({fa.profile.split(':', 1)[1].replace(':', '; ')}): "
                                                   "forward and split-KV kernels only, every other one a stub that raises")
        return (Step("build-flash-attn", f"flash-attn {fa.version} from the sdist",
                     f"no prebuilt wheel for torch {ctx.solution.torch.pin}: compiled {archs} with FLASH_ATTENTION_FORCE_BUILD=TRUE (no "
                     "GitHub download)"
                     + profile,
                     KernelsStep(sdist_name(fa.version), ("flash_attn",), fa.arch_list, ctx.options.host_march, fa.profile)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        return (carried_sdist(self.flash_attn.version, self.flash_attn.source_row),)

    def modules(self) -> tuple[str, ...]:
        return ("flash_attn", "flash_attn_2_cuda")


@dataclass(frozen=True)
class Kernels(Block):
    """flash-attn's csrc kernels (layer_norm, rotary) compiled from a flash-attn sdist."""

    kernels: tuple[KernelPlan, ...]
    sdist_version: Version  # flash-attn's own when it is compiled too, else the kernels' row
    sdist_source: str = ""  # the flash-attn row's source where flash-attn is compiled from the same sdist (its sha256)

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        first, names = self.kernels[0], tuple(k.name for k in self.kernels)
        setup = "supplied by envkit" if first.setup_py == "supplied" else "shipped, hard-coded gencodes neutralised"
        return (Step("build-kernels", f"flash-attn csrc kernels: {','.join(names)}",
                     f"compiled from flash_attn-{first.flash_attn_sdist} for {';'.join(first.arch_list)} only (setup.py {setup}); the slow "
                     "step",
                     KernelsStep(sdist_name(self.sdist_version), names, first.arch_list, ctx.options.host_march)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        return (carried_sdist(self.sdist_version, self.sdist_source),)

    def modules(self) -> tuple[str, ...]:
        return tuple(k.module for k in self.kernels)

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        march = ctx.options.host_march
        if not any(k.name == "rotary" for k in self.kernels):
            return ()
        if march == "native":
            return ("rotary is compiled with -march=native: the image needs the builder's CPU family (fix: --host-march x86-64-v2)",)
        return (f"csrc/rotary's setup.py asks for -march=native; envkit compiles it with -march={march} so the image runs on other CPUs "
                "(--host-march native keeps upstream's flag)",)


@dataclass(frozen=True)
class VllmWheel(Block):
    """vLLM from PyPI, or its CUDA-variant wheel from the vLLM release (carried when offline)."""

    release: Vllm
    wheel: Optional[str]
    url: Optional[str]
    torch: TorchBuild

    @property
    def spec(self) -> str:
        name, version = (parse_wheel_filename(self.wheel)[:2] if self.wheel else ("vllm", self.release.version))
        local = version.local if self.wheel else None
        return f"{name}=={self.release.version}" + (f"+{local}" if local else "")

    @property
    def on_pypi(self) -> bool:
        return (self.url or "").startswith("pkg:pypi/")

    @property
    def cpu(self) -> Optional[VllmCpu]:
        return self.release.cpu if self.torch.platform == "cpu" else None

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        v, t, cpu = self.release, self.torch, self.cpu
        if cpu is not None:
            return (Step("build-vllm", f"{cpu.package} {v.version}",
                         f"vLLM's CPU package on PyPI; pins torch {cpu.torch}, which {t.pin} is",
                         PipStep((self.spec,), find_links=ctx.find_links), ctx.index_network),
                    Step("build-vllm-trim", f"{', '.join(cpu.remove)} removed",
                         f"{cpu.package} names them but PyPI's builds of them do not import beside torch {t.pin} and break "
                         f"`import transformers` (the serving server runs without them; see the matrix row's source)",
                         UninstallStep(cpu.remove)))
        if self.on_pypi:
            return (Step("build-vllm", f"vLLM {v.version}", f"pins torch {v.torch}, which {t.pin} satisfies",
                         PipStep((self.spec,), find_links=ctx.find_links), ctx.index_network),)
        title, why = f"vLLM {v.version} ({t.variant} wheel)", f"the {t.variant} build from vLLM's release; pins torch {v.torch}"
        if ctx.offline:
            return (Step("build-vllm", title, why, PipStep((f"{WHEELHOUSE}/{self._carried_wheel}",), find_links=WHEELHOUSE)),)
        url, network = ctx.network.url("build-vllm", self.url or "")
        # its dependencies built for this CUDA variant (xformers +cu118) live on torch's index, not on PyPI
        extra = ctx.network.url("build-vllm", t.index_url)[0] if t.index_url else None
        return (Step("build-vllm", title, why + f"; CUDA-variant dependencies (xformers) from torch's {t.variant} index",
                     PipStep((url,), extra_index_url=extra), network, (url,) + ((t.index_url,) if t.index_url else ())),)

    @property
    def _carried_wheel(self) -> str:
        assert self.wheel is not None and self.url is not None, f"vLLM {self.release.version}: a release wheel without a name or URL"
        return self.wheel

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        if not ctx.offline or self.on_pypi:
            return ()
        return (Carried(f"wheelhouse/{self._carried_wheel}", f"vLLM {self.release.version} {self.torch.variant} wheel (not on PyPI)",
                        self.url or ""),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return (self.spec,)

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return ((self.spec if self.on_pypi else self.url or self.spec, None),)

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        cpu = self.cpu
        if cpu is None or stage != "runtime":
            return ()
        needs = (AptNeed(cpu.apt, f"the shared libraries {cpu.package}'s compiled ops load (vllm/_C needs them; the wheel does not carry "
                         "them)"),)
        serve = ctx.options.serve
        if serve is not None and "--enforce-eager" in serve.args:
            return needs
        headers = tuple(p for p in ctx.os.python_packages if p.endswith("-dev")) if ctx.distro_python else ()
        return needs + (AptNeed(cpu.jit_apt + headers, f"{cpu.package} compiles its kernels at start (torch inductor: a C++ compiler "
                                                        "and the Python headers; none with --enforce-eager)"),)

    def modules(self) -> tuple[str, ...]:
        return ("vllm._C",) if self.cpu is not None else ()  # vLLM imports its ops lazily: a missing library shows only here


@dataclass(frozen=True)
class RuntimeCopy(Block):
    """The runtime stage's own part: the venv (and /opt/python) copied over, an import check, the labels."""

    modules_to_check: tuple[str, ...]

    @classmethod
    def gather(cls, blocks: tuple[Block, ...]) -> RuntimeCopy:
        return cls(tuple(module for block in blocks for module in block.modules()))

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        python_prefix = None if ctx.distro_python else PYTHON_PREFIX
        held = VENV + (f" and {python_prefix}" if python_prefix else "")
        return (
            Step("runtime-copy", "copy the environment from the build stage",
                 f"{held} hold every installed wheel; nothing is compiled here", CopyVenvStep(VENV, python_prefix)),
            Step("runtime-import-check", "import check", "an ABI mismatch (undefined symbol) fails the build instead of the first request",
                 ImportCheckStep(self.modules_to_check)),
            Step("runtime-labels", "labels", "OCI labels and the resolved solution, so the image can tell what it is", LabelsStep()),
        )


def _flash_attn(fa: Optional[FlashAttnPlan]) -> Optional[Block]:
    if fa is None:
        return None
    if fa.build == "wheel" and fa.url and fa.wheel:
        return FlashAttnWheel(fa.version, fa.wheel, fa.url)
    return FlashAttnSource(fa)


@dataclass(frozen=True)
class EngineWheels(Block):
    """A pip-stack serving engine (the registry's pip road: fastllm, sglang, paddle, lmdeploy): its pinned packages after
    torch, from the index, the engine's own index or find-links page through the site's rewrite, or the wheelhouse offline."""

    packages: EnginePackages

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        p = self.packages
        title, why = f"{p.engine} {p.version}", f"--engine {p.engine}: {', '.join(p.packages)}"
        alone: tuple[Step, ...] = ()
        if p.no_deps:
            alone = (Step("build-engine-nodeps", f"{', '.join(p.no_deps)} without its declared dependencies",
                          "the packages before it are what it imports here (measured; see the matrix row's cpu_measured)",
                          PipStep(p.no_deps, find_links=WHEELHOUSE if ctx.offline else ctx.find_links, no_deps=True),
                          Network.NONE if ctx.offline else ctx.index_network),)
        if ctx.offline:
            return (Step("build-engine", title, why, PipStep(p.packages, find_links=ctx.find_links or WHEELHOUSE)),) + alone
        index = page = None
        urls: tuple[str, ...] = ()
        network = ctx.index_network
        if p.index_url:
            index, network = ctx.network.url("build-engine", p.index_url)
            urls = (p.index_url,)
        if p.find_links:
            page, network = ctx.network.url("build-engine", p.find_links)
            urls += (p.find_links,)
        return (Step("build-engine", title, why + ("; from " + " and ".join(urls) if urls else ""),
                     PipStep(p.packages, find_links=ctx.find_links, extra_index_url=index, extra_find_links=page), network, urls),) + alone

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        p = self.packages
        if not ctx.offline or not p.no_deps or not p.wheel_url:
            return ()
        ref = parse_pypi(p.wheel_url)
        if ref is None or not ref.file_name:
            return ()
        return (Carried(f"wheelhouse/{ref.file_name}", f"{p.no_deps[0]} (installed without its declared dependencies)", p.wheel_url),)

    def requirements(self, ctx: PlanContext) -> tuple[str, ...]:
        return self.packages.packages

    def wheel_sources(self, ctx: PlanContext) -> tuple[WheelSource, ...]:
        return tuple((spec, self.packages.index_url) for spec in self.packages.packages)

    def modules(self) -> tuple[str, ...]:
        spec = REGISTRY.get(self.packages.engine)
        return spec.modules if spec is not None else ()


@dataclass(frozen=True)
class EngineSource(Block):
    """fastllm compiled from its carried source tag (--engine-build source): CMake with an explicit CUDA arch, the
    published wheel's portable CPU flags, only the Python library's target; then its Python package, without the
    dependencies EngineWheels installed before it."""

    row: FtllmSource
    cuda_arch: Optional[str]

    def apt(self, ctx: PlanContext, stage: StageName) -> tuple[AptNeed, ...]:
        if not self.row.numa:
            return ()
        if stage == "build":
            return (AptNeed(("libnuma-dev",), f"fastllm {self.row.version} links libnuma by default"),)
        return (AptNeed(("libnuma1",), f"fastllm {self.row.version}'s library loads libnuma.so.1"),)

    def cmake_args(self, ctx: PlanContext) -> tuple[str, ...]:
        r, sol = self.row, ctx.solution
        args = ["-DCMAKE_BUILD_TYPE=Release"]
        if sol.platform == "cuda":
            assert self.cuda_arch is not None, "the resolver refuses a source build without a --gpu of known arch"
            args += ["-DUSE_CUDA=ON", f"-DCUDA_ARCH={self.cuda_arch}",
                     f"-DCMAKE_CUDA_COMPILER={CUDA_HOME}/bin/nvcc"]
        else:
            args.append("-DUSE_CUDA=OFF")
        if r.cxx_march_native and r.portable_option and ctx.options.host_march != "native":
            args.append(f"-D{r.portable_option}=ON")
        return tuple(args)

    def build_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        r, sol = self.row, ctx.solution
        if sol.platform == "cuda" and ctx.toolkit == "pip":
            raise InputError(f"fastllm {r.version} from source links {', '.join(r.cuda_libs)} from the CUDA toolkit; "
                             f"the toolkit wheels ({ctx.toolkit_chosen_by}) carry no NCCL", "use --toolkit image (the devel image)")
        args = self.cmake_args(ctx)
        why = [f"--engine-build source: {r.tag} ({r.commit[:12]}) with CMake"]
        if sol.platform == "cuda":
            why.append(f"-DCUDA_ARCH={self.cuda_arch} for the {sol.gpu.name if sol.gpu else ''}: fastllm's default is "
                       f"{r.cuda_arch_default or 'its own'}, and nvcc on a builder without a GPU quietly compiles for its own "
                       "default arch instead (docs/fastllm-source.md)")
        if any(a.startswith(f"-D{r.portable_option}=") for a in args):
            why.append(f"-D{r.portable_option}=ON: the published wheel's CPU flags (AVX2, FMA, F16C) instead of -march=native, "
                       "so the image runs on other CPUs than the builder's")
        why.append(f"only the {FTLLM_TARGET} target the Python package loads")
        return (Step("build-engine-source", f"fastllm {r.version} from source", "; ".join(why),
                     CMakeStep(r.archive_name, "fastllm", args, FTLLM_TARGET, "tools")),
                Step("build-engine-source-tools", "CMake removed", "it configured the build; the runtime stage needs no CMake",
                     UninstallStep(("cmake",))))

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        return (Carried(f"sources/{self.row.archive_name}", f"fastllm {self.row.version} source ({self.row.tag})", self.row.archive),)

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        r = self.row
        if r.cxx_march_native and ctx.options.host_march == "native":
            return (f"fastllm {r.version} is compiled with -march=native: the image needs the builder's CPU family "
                    f"(fix: drop --host-march native, and envkit passes -D{r.portable_option}=ON)",)
        return ()


def components(ctx: PlanContext) -> tuple[Block, ...]:
    """The blocks the solution needs between the apt installs, in build order."""
    sol = ctx.solution
    python: Block = DistroPython() if ctx.cpython is None else CPythonTarball(ctx.cpython)
    flash = _flash_attn(sol.flash_attn)
    kernels: tuple[Block, ...] = ()
    if sol.kernels:
        # the kernels reuse the sdist flash-attn itself is compiled from
        if isinstance(flash, FlashAttnSource):
            kernels = (Kernels(sol.kernels, flash.flash_attn.version, flash.flash_attn.source_row),)
        else:
            kernels = (Kernels(sol.kernels, sol.kernels[0].flash_attn_sdist),)
    vllm = (VllmWheel(sol.vllm, sol.vllm_wheel, sol.vllm_url, sol.torch),) if sol.vllm is not None else ()
    toolkit: tuple[Block, ...] = ()
    removed: tuple[Block, ...] = ()
    if ctx.toolkit == "pip":
        assert sol.cuda is not None
        wheels = CudaToolkitWheels(sol.toolkit_wheels, sol.cuda.version, sol.cuda.release)
        toolkit, removed = (wheels,), (CudaToolkitRemoved(wheels),)
    engine: tuple[Block, ...] = (EngineWheels(sol.engine),) if sol.engine is not None else ()
    if sol.engine is not None and sol.engine.build is not None:
        engine += (EngineSource(sol.engine.build, sol.engine.cuda_arch),)
    return (python, Venv(), *BuildTools.needed(ctx), Torch(sol.torch), *toolkit, *((flash,) if flash else ()), *kernels, *vllm,
            *engine, *removed)


LEFT_OUT_SHOWN = 12


@dataclass(frozen=True)
class ModelWeights(Block):
    """A serving image's weights, in one layer right after the base image: the layers a code or stack change rebuilds
    all come after it, so the weights layer (and its digest) stays. Mounted instead, nothing is copied."""

    serve: Serve

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        s = self.serve
        if s.mount:
            return ()
        return (Step("runtime-model", f"model {s.name}: {s.files} files, {s.bytes / 1e9:.2f} GB (tree sha256 {s.sha256[:12]})",
                     "its own layer, right after the base image: a change to the code or the stack rebuilds only the layers "
                     "after it, so the weights are neither rebuilt nor pushed again", CopyModelStep(MODEL_DIR)),)

    def carried(self, ctx: PlanContext) -> tuple[Carried, ...]:
        if self.serve.mount:
            return ()
        return (Carried("model/", f"model {self.serve.name} (tree sha256 {self.serve.sha256})", "the --serve directory"),)

    def warnings(self, ctx: PlanContext) -> tuple[str, ...]:
        """What the model directory holds and the image does not, and why (generate --json lists every entry)."""
        left = self.serve.left_out
        if self.serve.mount or not left:
            return ()
        shown = "; ".join(f"{path} ({why})" for path, why in left[:LEFT_OUT_SHOWN])
        more = f"; and {len(left) - LEFT_OUT_SHOWN} more (generate --json lists them)" if len(left) > LEFT_OUT_SHOWN else ""
        return (f"model {self.serve.name}: {len(left)} entries of the --serve directory are left out of the image: {shown}{more}",)


_ENVKIT_SERVER_ARGS = ("--model", "--served-model-name", "--host", "--port")


@dataclass(frozen=True)
class Serving(Block):
    """vLLM's OpenAI server as the image's entrypoint, as a non-root user, with nothing that reaches a network."""

    serve: Serve

    def runtime_steps(self, ctx: PlanContext) -> tuple[Step, ...]:
        s = self.serve
        argv = ("python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL_DIR, "--served-model-name", s.name,
                "--host", "0.0.0.0", "--port", str(s.port), *s.args)
        env = tuple((e.name, e.value) for e in OFFLINE_ENV) + (("HOME", SERVE_HOME),)
        labels = (("io.envkit.model.name", s.name), ("io.envkit.model.sha256", s.sha256),
                  ("io.envkit.model.source", "mounted at " + MODEL_DIR if s.mount else "baked in at " + MODEL_DIR))
        where = f"the site mounts the weights at {MODEL_DIR}" if s.mount else f"the weights at {MODEL_DIR}"
        return (Step("runtime-serve", f"vLLM's OpenAI server for {s.name} on port {s.port}",
                     f"user {SERVE_UID} (not root); {', '.join(e.name for e in OFFLINE_ENV)} (no hub, no usage reports: "
                     f"envkit/data/serving.toml names the code that reads each); HEALTHCHECK on /health; {where}",
                     ServeStep(SERVE_UID, SERVE_HOME, env, s.port, f"http://127.0.0.1:{s.port}/health", labels, argv)),)

    def modules(self) -> tuple[str, ...]:
        return ("vllm.entrypoints.openai.api_server",)


def check_serve(ctx: PlanContext) -> None:
    """A serving image needs vLLM in the stack, and leaves envkit's own server arguments to envkit."""
    s = ctx.options.serve
    if s is None:
        return
    if ctx.solution.vllm is None:
        raise InputError("--serve starts vLLM's OpenAI server, and this stack has no vLLM",
                         "add --vllm (on CPU: --platform cpu --vllm 0.32.0)")
    taken = [a for a in s.args if a.split("=")[0] in _ENVKIT_SERVER_ARGS]
    if taken:
        raise InputError(f"--serve-arg {taken[0]}: envkit sets {', '.join(_ENVKIT_SERVER_ARGS)} itself",
                         "use --served-model-name for the name; the model, host and port are the image's")


def blocks_for(ctx: PlanContext) -> tuple[Block, ...]:
    """Every block of the plan in order: a serving image's weights first in the runtime stage, site settings and apt
    first in each stage, the runtime copy, then the server."""
    check_serve(ctx)
    parts = components(ctx)
    serve = ctx.options.serve
    weights, server = ((ModelWeights(serve),), (Serving(serve),)) if serve is not None else ((), ())
    return (*weights, SiteSettings(), AptPackages.gather("build", parts, ctx), *parts,
            AptPackages.gather("runtime", parts, ctx), RuntimeCopy.gather(parts + server), *server)
