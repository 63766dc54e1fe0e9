"""How a container gets the host's GPUs (pure): from the image's solution platform and the host's device facts, the
flags of its vendor and runtime. Sources of each flag: docs/research/gpu-containers.md.

- NVIDIA: Docker's device request (`--gpus all`, through the nvidia-container-toolkit's runtime hook) or, on Podman and
  on a Docker with a CDI spec, the CDI name `nvidia.com/gpu=all`.
- AMD ROCm: the device nodes /dev/kfd (compute) and /dev/dri (render nodes), the groups that own them, and
  `seccomp=unconfined` (ROCm's docs: optional, "enables memory mapping"; the DTK images' run lines carry it).
- Hygon DTK: the same, plus /dev/mkfd where the host has it and the host's /opt/hyhal read-only (DTK 23.10 and later
  load the driver's libraries from there)."""
from __future__ import annotations

from typing import Optional

from packaging.version import InvalidVersion, Version

from envkit.model.container import ContainerSpec, DeviceHost, GpuAccess

VENDOR_OF = {"cuda": "nvidia", "rocm": "amd", "dtk": "hygon"}
CDI_ALL = "nvidia.com/gpu=all"
HYHAL = "/opt/hyhal"
HYHAL_FROM = Version("23.10")  # DTK images from 23.10 on load the driver's libraries from the host's /opt/hyhal
ROCM_SECCOMP = "seccomp=unconfined"


def vendor_for(platform: Optional[str], host: DeviceHost) -> Optional[str]:
    """The vendor whose GPUs the container wants: the solution's platform; for an image of unknown solution, the host's
    only vendor (none where the host has none, or two)."""
    if platform is not None:
        return VENDOR_OF.get(platform)
    found = host.vendors()
    return found[0] if len(found) == 1 else None


def dtk_needs_hyhal(dtk: Optional[str]) -> bool:
    try:
        return dtk is None or Version(dtk) >= HYHAL_FROM
    except InvalidVersion:
        return True


def gpu_access(platform: Optional[str], host: DeviceHost, dtk: Optional[str] = None) -> GpuAccess:
    """The GPU access of a container for an image of `platform` (cuda, rocm, dtk, cpu; None: not known) on `host`."""
    vendor = vendor_for(platform, host)
    if vendor is None:
        return GpuAccess(None, why=("a CPU image: no GPU is passed",) if platform == "cpu" else ())
    if vendor == "nvidia":
        return _nvidia(host)
    return _kfd(vendor, host, dtk)


_OWNER = {"nvidia": "NVIDIA's", "amd": "AMD's", "hygon": "Hygon's"}


def _others(host: DeviceHost, vendor: str) -> str:
    """"; its GPUs are AMD's" where the host has another vendor's GPUs."""
    other = [_OWNER[v] for v in host.vendors() if v != vendor and not {v, vendor} <= {"amd", "hygon"}]
    return f"; its GPUs are {' and '.join(other)}" if other else ""


def _nvidia(host: DeviceHost) -> GpuAccess:
    if not host.has_nvidia:
        return GpuAccess("nvidia", wanted=True, missing="this host has no NVIDIA GPU (/dev/nvidiactl is missing)" + _others(host, "nvidia"))
    if host.runtime == "podman":
        return GpuAccess("nvidia", wanted=True, cdi=(CDI_ALL,), security_opt=("label=disable",),
                         why=(f"--device {CDI_ALL}: every NVIDIA GPU by its CDI name (nvidia-ctk cdi generate writes the spec); "
                              "Podman's API takes GPUs only as CDI device requests (v5.4 and later)",
                              "--security-opt label=disable: NVIDIA's Podman line, so SELinux lets the container open the devices"))
    if host.cdi_nvidia and not host.nvidia_runtime:
        return GpuAccess("nvidia", wanted=True, cdi=(CDI_ALL,),
                         why=(f"--device {CDI_ALL}: every NVIDIA GPU by its CDI name: this engine has a CDI spec for them and no "
                              "nvidia runtime (Docker 25 and later with CDI on; the default from 28.3)",))
    return GpuAccess("nvidia", wanted=True, device_request=True,
                     why=("--gpus all: a device request for every GPU, served by the nvidia-container-toolkit",))


def _kfd(vendor: str, host: DeviceHost, dtk: Optional[str]) -> GpuAccess:
    name = "Hygon DCU" if vendor == "hygon" else "AMD GPU"
    if not host.kfd:
        return GpuAccess(vendor, wanted=True, missing=f"this host has no {name} (/dev/kfd is missing)" + _others(host, vendor))
    devices = ["/dev/kfd", *(["/dev/mkfd"] if vendor == "hygon" and host.mkfd else []), *(["/dev/dri"] if host.dri else [])]
    groups = ("video", *(str(g) for g in host.render_gids))
    why = ["--device /dev/kfd: the compute interface every ROCm process opens",
           "--device /dev/dri: the GPUs' render nodes",
           f"--group-add video {' '.join(groups[1:])}".rstrip() + ": the groups that own the device nodes (numeric: the "
           "image's /etc/group may not name them)",
           f"--security-opt {ROCM_SECCOMP}: ROCm's docs: it \"enables memory mapping\" (optional there, recommended for HPC); "
           "the DTK images' own run lines carry it"]
    binds: tuple[tuple[str, str], ...] = ()
    missing = ""
    if vendor == "hygon":
        if "/dev/mkfd" in devices:
            why.insert(1, "--device /dev/mkfd: Hygon's own compute interface")
        if host.hyhal:
            binds = ((HYHAL, HYHAL),)
            why.append(f"-v {HYHAL}:{HYHAL}:ro: the driver's libraries, which DTK images load from the host")
        elif dtk_needs_hyhal(dtk):
            missing = f"this host has no {HYHAL}, which DTK {dtk or ''} images load the driver's libraries from".replace("  ", " ")
    return GpuAccess(vendor, wanted=True, devices=tuple(devices), group_add=groups, security_opt=(ROCM_SECCOMP,),
                     binds=binds, missing=missing, why=tuple(why))


def container(image: str, command: list[str], platform: Optional[str], host: DeviceHost, *, dtk: Optional[str] = None,
              volumes: tuple[tuple[str, str, str], ...] = (), network: str = "none", env: tuple[tuple[str, str], ...] = (),
              shm_size: Optional[str] = None, name: Optional[str] = None, shown: Optional[tuple[str, ...]] = None) -> ContainerSpec:
    return ContainerSpec(image=image, command=tuple(command), gpu=gpu_access(platform, host, dtk), runtime=host.runtime,
                         network=network, volumes=volumes, env=env, shm_size=shm_size, name=name, platform=platform, shown=shown)
