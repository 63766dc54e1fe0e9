"""A container envkit runs (the self-test, doctor's probe, a server) as a value: what it runs, and how the host's GPUs
reach it. core/devices.py plans it from the image's solution and the host's device facts; adapters/engine.py runs it;
`--dry-run` prints it. The docker and podman command lines are written here, so what is shown is what is asked."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

RUNTIMES = ("docker", "podman")
VENDORS = ("nvidia", "amd", "hygon")  # the GPU vendors a container can be given devices of


@dataclass(frozen=True)
class DeviceHost:
    """The host's facts that decide how GPUs are passed, collected once (adapters/gpu_devices.py). Paths are the ones
    found on the host; gids are the numeric owners of the device nodes (an image's /etc/group may lack `render`)."""
    runtime: str = "docker"  # "docker" | "podman": the engine behind DOCKER_HOST
    nvidia_nodes: tuple[str, ...] = ()  # /dev/nvidiactl, /dev/nvidia0 ...
    nvidia_runtime: bool = False  # the engine reports an nvidia runtime (nvidia-container-toolkit)
    cdi_nvidia: bool = False  # a CDI spec names nvidia.com/gpu (nvidia-ctk cdi generate)
    kfd: bool = False  # /dev/kfd (the ROCm and DTK compute interface)
    mkfd: bool = False  # /dev/mkfd (Hygon's)
    dri: tuple[str, ...] = ()  # /dev/dri/card*, /dev/dri/renderD*
    render_gids: tuple[int, ...] = ()  # owners of /dev/kfd and /dev/dri/renderD*
    hyhal: bool = False  # /opt/hyhal: Hygon's driver libraries, which DTK images mount from the host

    @property
    def has_nvidia(self) -> bool:
        return "/dev/nvidiactl" in self.nvidia_nodes

    def vendors(self) -> tuple[str, ...]:
        """The GPU vendors whose devices this host has (AMD and Hygon both through /dev/kfd; Hygon by /opt/hyhal or
        /dev/mkfd)."""
        found = ["nvidia"] if self.has_nvidia else []
        if self.kfd:
            found.append("hygon" if self.hyhal or self.mkfd else "amd")
        return tuple(found)

    def to_json(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "nvidia_nodes": list(self.nvidia_nodes), "nvidia_runtime": self.nvidia_runtime,
                "cdi_nvidia": self.cdi_nvidia, "kfd": self.kfd, "mkfd": self.mkfd, "dri": list(self.dri),
                "render_gids": list(self.render_gids), "hyhal": self.hyhal}


@dataclass(frozen=True)
class GpuAccess:
    """How a container gets the GPUs of one vendor. `wanted`: the image needs them (its solution names a GPU platform,
    or the image is unknown and the host has them); `missing`: why they cannot be passed (no device on this host)."""
    vendor: Optional[str]  # None: no GPU is passed (a CPU image, or a host without the image's GPUs)
    wanted: bool = False
    device_request: bool = False  # NVIDIA through Docker: DeviceRequest(count=-1, capabilities=[["gpu"]]), `--gpus all`
    cdi: tuple[str, ...] = ()  # CDI device names, e.g. nvidia.com/gpu=all (Podman; Docker with CDI)
    devices: tuple[str, ...] = ()  # device nodes passed at the same path
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    binds: tuple[tuple[str, str], ...] = ()  # (host path, container path), read-only
    missing: str = ""
    why: tuple[str, ...] = ()  # one line per flag: what it is for, with its source

    @property
    def passes(self) -> bool:
        return bool(self.device_request or self.cdi or self.devices)

    def cli_args(self) -> list[str]:
        args = ["--gpus", "all"] if self.device_request else []
        for d in (*self.cdi, *self.devices):
            args += ["--device", d]
        for g in self.group_add:
            args += ["--group-add", g]
        for s in self.security_opt:
            args += ["--security-opt", s]
        for host, inside in self.binds:
            args += ["-v", f"{host}:{inside}:ro"]
        return args

    def to_json(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "wanted": self.wanted, "passes": self.passes, "device_request": self.device_request,
                "cdi": list(self.cdi), "devices": list(self.devices), "group_add": list(self.group_add),
                "security_opt": list(self.security_opt), "binds": [{"host": h, "container": c, "mode": "ro"} for h, c in self.binds],
                "missing": self.missing or None, "why": list(self.why)}


@dataclass(frozen=True)
class ContainerSpec:
    """One container to run: image, command, mounts, network and the GPUs' access, for one runtime."""
    image: str
    command: tuple[str, ...]
    gpu: GpuAccess
    runtime: str = "docker"
    network: str = "none"
    volumes: tuple[tuple[str, str, str], ...] = ()  # (host path, container path, "ro"|"rw")
    env: tuple[tuple[str, str], ...] = ()
    shm_size: Optional[str] = None
    name: Optional[str] = None
    platform: Optional[str] = field(default=None, compare=False)  # the image's solution platform, where known
    shown: Optional[tuple[str, ...]] = None  # the command as people read it, where `command` carries a whole script

    def command_line(self) -> str:
        """The same container as a `docker run` (or `podman run`) command line, for --dry-run and for people."""
        args = [self.runtime, "run", "--rm", "--network", self.network]
        if self.name:
            args += ["--name", self.name]
        if self.shm_size:
            args += ["--shm-size", self.shm_size]
        args += self.gpu.cli_args()
        for host, inside, mode in self.volumes:
            args += ["-v", f"{host}:{inside}:{mode}"]
        for key, _ in self.env:
            args += ["-e", key]  # values are not printed: they may be secrets
        return shlex.join([*args, self.image, *(self.command if self.shown is None else self.shown)])

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "command": list(self.command if self.shown is None else self.shown), "runtime": self.runtime,
                "network": self.network,
                "platform": self.platform, "gpu": self.gpu.to_json(),
                "volumes": [{"host": h, "container": c, "mode": m} for h, c, m in self.volumes],
                "env": [k for k, _ in self.env], "shm_size": self.shm_size, "command_line": self.command_line()}
