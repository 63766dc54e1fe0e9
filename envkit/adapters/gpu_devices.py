"""The host's device facts that decide how GPUs reach a container, read once: the device nodes under /dev, Hygon's
/opt/hyhal, the engine's runtimes and the CDI specs (nvidia-ctk cdi generate writes /etc/cdi or /var/run/cdi)."""
from __future__ import annotations

import glob
import os
from typing import Any, Mapping, Optional

from envkit.model.container import DeviceHost

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def _gid(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_gid
    except OSError:
        return None


def _cdi_names_nvidia(dirs: tuple[str, ...]) -> bool:
    for d in dirs:
        for spec in glob.glob(os.path.join(d, "*.yaml")) + glob.glob(os.path.join(d, "*.json")):
            try:
                with open(spec, encoding="utf-8", errors="replace") as f:
                    if "nvidia.com/gpu" in f.read(65536):
                        return True
            except OSError:
                continue
    return False


def collect(info: Optional[Mapping[str, Any]] = None, root: str = "/") -> DeviceHost:
    """`info`: the engine's `info` (None: no engine asked, e.g. for a dry run without one)."""
    def at(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    from envkit.adapters.engine import is_podman

    def found(*patterns: str) -> tuple[str, ...]:
        return tuple(sorted("/" + os.path.relpath(p, root) for pat in patterns for p in glob.glob(at(pat))))

    nvidia = found("/dev/nvidiactl", "/dev/nvidia[0-9]*")
    dri = found("/dev/dri/*")
    kfd = os.path.exists(at("/dev/kfd"))
    gids = {g for g in [_gid(at("/dev/kfd")), *(_gid(at(p)) for p in dri if "renderD" in p)] if g is not None and g != 0}
    runtimes = (info or {}).get("Runtimes") or {}
    return DeviceHost(runtime="podman" if info is not None and is_podman(info) else "docker", nvidia_nodes=nvidia,
                      nvidia_runtime="nvidia" in runtimes, cdi_nvidia=_cdi_names_nvidia(tuple(at(d) for d in CDI_DIRS)),
                      kfd=kfd, mkfd=os.path.exists(at("/dev/mkfd")), dri=dri, render_gids=tuple(sorted(gids)),
                      hyhal=os.path.isdir(at("/opt/hyhal")))
