"""What every building block reads: the solution, the site, the options, the base images and the
Python the image runs, checked once before any block runs.

Pure: plain values in, a PlanContext (or an InputError that names the fix) out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional

from packaging.version import Version

from envkit.core.planner.network import NetworkPolicy
from envkit.core.resolve.base_image import base_os
from envkit.errors import InputError
from envkit.model.matrix import Matrix, OsRelease, PythonRelease
from envkit.model.plan import PYTHON_PREFIX, WHEELHOUSE, Network, Options, PythonSource, ToolkitSource
from envkit.model.site import Site
from envkit.model.solution import Solution

OLDEST_PYTHON = Version("3.8")
_PROXY_ARGS = {"http": "http_proxy", "https": "https_proxy", "no_proxy": "no_proxy"}
_PLATFORM_NOTES = {
    "rocm": "the matrix knows no slim ROCm runtime image: the runtime stage uses the rocm/dev image, hipcc included",
    "dtk": "DTK containers need the host's /opt/hyhal: run with -v /opt/hyhal:/opt/hyhal --device /dev/kfd --device /dev/dri",
}
# The first CUDA release whose nvcc wheel carries nvcc itself: nvidia-cuda-nvcc-cu12 12.8.93 and 12.9.86 on PyPI hold
# bin/ptxas, libnvvm and libdevice only (JAX's needs), no nvcc, cicc or crt; nvidia-cuda-nvcc 13.0.88 holds
# nvidia/cu13/bin/nvcc, cudafe++, fatbinary, nvlink and ptxas (the wheels' file lists, read 2026-12-01).
NVCC_WHEEL_SINCE = Version("13.0")
_OFFLINE_NOTE = "offline: load the base images first (docker load -i; envkit bundle carries them), and build with --network none"


def plain_image(osr: OsRelease) -> str:
    """The OS's own image, without CUDA: its row's cpu_image, else the distribution's official image of that release."""
    if osr.cpu_image:
        return osr.cpu_image
    m = re.fullmatch(r"([a-z]+)(\d+(?:\.\d+)?)", osr.name)
    assert m, f"os {osr.name!r} is not distribution + release"
    return f"docker.io/library/{m.group(1)}:{m.group(2)}"


def toolkit_source(m: Matrix, sol: Solution, site: Site, opts: Options) -> tuple[ToolkitSource, str]:
    """Where the devel stage's CUDA toolkit comes from, and who chose it; refuses what the toolkit wheels cannot serve."""
    if opts.toolkit is not None:
        chosen, by = opts.toolkit, f"--toolkit {opts.toolkit}"
    elif site.cuda_toolkit == "pip" and sol.platform == "cuda":
        chosen, by = "pip", f"{site.path}'s [cuda] toolkit = \"pip\""
    else:
        return "image", ""
    if chosen == "image":
        return "image", by
    if sol.platform != "cuda":
        raise InputError(f"{by}: the toolkit wheels are NVIDIA's CUDA ones, this stack is {sol.platform}",
                         "drop --toolkit pip (or pass --toolkit image)")
    assert sol.cuda is not None
    usable = sorted((c.version for c in m.cuda if c.wheels and c.version >= NVCC_WHEEL_SINCE))
    fix = f"pass {''.join(f'--cuda {v}, ' for v in usable)}or --toolkit image"
    if not sol.toolkit_wheels:
        raise InputError(f"{by}: the matrix pins no toolkit wheels for CUDA {sol.cuda.version}", fix)
    if sol.cuda.version < NVCC_WHEEL_SINCE:
        raise InputError(f"{by}: CUDA {sol.cuda.version}'s nvcc wheel on PyPI ({sol.toolkit_wheels[0].name}) carries ptxas "
                         f"but no nvcc (nvcc is in the wheels from CUDA {NVCC_WHEEL_SINCE})", fix)
    return "pip", by


def qualified_image(ref: str) -> str:
    """Fully qualified image names: Podman and intranet registries do not guess docker.io."""
    first = ref.split("/")[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def stack_text(sol: Solution) -> str:
    """One line naming the stack, for the Dockerfile header and the image description."""
    parts = [sol.platform if sol.platform == "cpu" else f"{sol.platform} {sol.toolkit_text}",
             f"python {sol.python}", f"torch {sol.torch.pin}"]
    if sol.flash_attn:
        parts.append(f"flash-attn {sol.flash_attn.version} ({sol.flash_attn.build})")
    if sol.kernels:
        parts.append("kernels " + ",".join(k.name for k in sol.kernels))
    if sol.vllm:
        parts.append(f"vllm {sol.vllm.version}")
    if sol.engine:
        parts.append(f"{sol.engine.engine} {sol.engine.version}" + (" (from source)" if sol.engine.build else ""))
    if sol.gpu:
        parts.append(f"for {sol.gpu.name} ({sol.gpu.arch})")
    return ", ".join(parts)


AARCH64_MARCH = "armv8.2-a"  # the csrc kernels' -march on aarch64: Grace (Neoverse V2) and Jetson Orin (Cortex-A78AE) both run it


def _for_machine(sol: Solution, opts: Options) -> Options:
    """An aarch64 stack's options: the kernels' -march default is an Arm one; an x86 -march is refused."""
    if sol.machine != "aarch64":
        return opts
    if opts.host_march == Options().host_march:
        return replace(opts, host_march=AARCH64_MARCH)
    if opts.host_march.startswith(("x86", "skylake", "haswell", "znver", "icelake", "sapphirerapids")):
        raise InputError(f"--host-march {opts.host_march} is an x86 CPU; the stack is for aarch64",
                         f"drop --host-march (aarch64 images compile with -march={AARCH64_MARCH}), or use native")
    return opts


def _check_request(sol: Solution, opts: Options) -> None:
    if sol.vllm is not None and sol.platform == "rocm":
        raise InputError(f"vLLM {sol.vllm.version} on ROCm is built by vLLM's own Dockerfile.rocm, which envkit does not generate",
                         "drop --vllm and base a serving image on the site's mirror of rocm/vllm, or serve on CUDA")
    if opts.host_march != "native" and not re.fullmatch(r"[a-z0-9_.-]+", opts.host_march):
        raise InputError(f"--host-march {opts.host_march!r} is not a gcc -march value", "use e.g. x86-64-v2, x86-64-v3 or native")
    if sol.python < OLDEST_PYTHON:
        raise InputError(f"Python {sol.python}: envkit generates images for Python {OLDEST_PYTHON} and newer",
                         f"pass --python {OLDEST_PYTHON} (or newer)")


@dataclass(frozen=True)
class PlanContext:
    solution: Solution
    site: Site
    options: Options
    os: OsRelease
    devel_upstream: str
    runtime_upstream: str
    cpython: Optional[PythonRelease]  # None: the distribution's own Python is the stack's
    network: NetworkPolicy
    index_network: Network
    toolkit: ToolkitSource = "image"
    toolkit_chosen_by: str = ""  # the flag or the site file that chose `toolkit`; "" for the default

    @classmethod
    def create(cls, m: Matrix, sol: Solution, site: Site, opts: Options) -> PlanContext:
        """Check the request, pick the base images and the Python; refuse what cannot be planned."""
        opts = _for_machine(sol, opts)
        _check_request(sol, opts)
        network = NetworkPolicy(site, opts.offline)
        devel, runtime, osr = base_os(m, sol, site)
        toolkit, chosen_by = toolkit_source(m, sol, site, opts)
        if toolkit == "pip":  # the toolkit comes from the wheels: both stages start from the OS's own image
            devel = runtime = plain_image(osr)
        cpython = None if osr.python == sol.python else m.python_release(sol.python)
        if osr.python != sol.python and cpython is None:
            raise InputError(f"Python {sol.python} is neither {osr.name}'s own ({osr.python}) nor a known CPython tarball",
                             f"pass --python {osr.python}")
        return cls(sol, site, opts, osr, devel, runtime, cpython, network, network.index("build-venv"), toolkit, chosen_by)

    @property
    def offline(self) -> bool:
        return self.options.offline

    @property
    def devel_image(self) -> str:
        return self.site.image(qualified_image(self.devel_upstream))

    @property
    def runtime_image(self) -> str:
        return self.site.image(qualified_image(self.runtime_upstream))

    @property
    def distro_python(self) -> bool:
        return self.cpython is None

    @property
    def python_source(self) -> PythonSource:
        return "distro" if self.cpython is None else "tarball"

    @property
    def python_bin(self) -> str:
        if self.cpython is None:
            return f"/usr/bin/python{self.os.python}"
        return f"{PYTHON_PREFIX}/bin/python{self.solution.python}"

    @property
    def compiles(self) -> bool:
        """Whether the build stage runs a compiler (csrc kernels, flash-attn from its sdist, fastllm from its tag)."""
        fa, engine = self.solution.flash_attn, self.solution.engine
        return bool(self.solution.kernels) or (fa is not None and fa.build == "source") \
            or (engine is not None and engine.build is not None)

    @property
    def find_links(self) -> Optional[str]:
        """Offline, pip installs only from the carried wheelhouse."""
        return WHEELHOUSE if self.offline else None

    @property
    def build_args(self) -> tuple[tuple[str, str], ...]:
        """The site's proxies as the build args docker knows, both spellings."""
        return tuple(sorted(pair for key, value in self.site.proxy
                            for pair in ((_PROXY_ARGS[key], value), (_PROXY_ARGS[key].upper(), value))))

    @property
    def image_warnings(self) -> tuple[str, ...]:
        """What building or running these base images needs that the Dockerfile cannot say."""
        platform_note = _PLATFORM_NOTES.get(self.solution.platform)
        return tuple(note for note in (platform_note, _OFFLINE_NOTE if self.offline else None) if note)
