"""`--gpu auto` (pure): the resolve flags a host's facts give, and what was read, so the answer can say it. The GPUs
(their matrix row, else their arch), the NVIDIA driver, the CPU architecture and the Python; flags the user gave win.
GPUs of two archs are a question, not a guess: one image's compiled kernels are built for the arch --gpu names."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Optional

from envkit.core.resolve.query import MACHINE_ALIASES, find_gpu
from envkit.errors import EnvkitError, InputError
from envkit.model.flags import ResolveFlags
from envkit.model.host_view import HostView, SeenGpu
from envkit.model.matrix import Matrix

AUTO = "auto"


def wants_auto(flags: ResolveFlags) -> bool:
    return flags.gpu is not None and flags.gpu.strip().lower() == AUTO


def _row_name(m: Matrix, g: SeenGpu) -> Optional[str]:
    """The matrix row of a GPU's NVML or rocm-smi name, where one names it and its arch agrees with the facts."""
    try:
        row = find_gpu(m, g.name)
    except EnvkitError:
        return None
    return row.name if g.arch is None or row.arch == g.arch else None


def _gpu_flag(m: Matrix, view: HostView) -> tuple[str, str]:
    """(--gpu value, what was read): the one product's row name, else the one arch; a question for two archs."""
    if not view.gpus:
        nvml = f" (NVML: {view.nvml_error})" if view.nvml_error else ""
        raise InputError(f"--gpu auto: {view.source} has no GPU envkit can see{nvml}",
                         "run it on the GPU host, or record the host's facts there (envkit doctor --json > facts.json) and pass "
                         "--host-facts facts.json here; or name the GPU: --gpu H100")
    archs = Counter(g.arch for g in view.gpus)
    names = Counter(f"{g.name} ({g.arch or 'arch unknown'})" for g in view.gpus)
    seen = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
    if len(archs) > 1:
        picks = " or ".join(f"--gpu {a}" for a in sorted(a for a in archs if a))
        raise InputError(f"--gpu auto: {view.source} has GPUs of {len(archs)} archs: {seen}; an image's compiled kernels are "
                         "built for one", f"choose the one to build for ({picks}), or build one image for each")
    rows = {_row_name(m, g) for g in view.gpus}
    arch = next(iter(archs))
    if len(rows) == 1 and None not in rows:
        return str(next(iter(rows))), seen
    if arch is None:
        raise InputError(f"--gpu auto: the facts of {view.source} name {seen} but not its arch",
                         "name the GPU: --gpu NAME or --gpu sm_XY / gfxNNN")
    return arch, seen


def host_flags(m: Matrix, flags: ResolveFlags, view: HostView) -> tuple[ResolveFlags, tuple[tuple[str, str], ...]]:
    """The flags with --gpu auto replaced by what the host has, and the driver, CPU architecture and Python filled in
    where not given; (flags, what was read: (fact, value) pairs)."""
    gpu, seen = _gpu_flag(m, view)
    read: list[tuple[str, str]] = [("from", view.source), ("gpus", seen)]
    changes: dict[str, str] = {"gpu": gpu}
    nvidia = all(g.vendor == "nvidia" for g in view.gpus)
    if nvidia and view.driver:
        read.append(("driver", view.driver))
        if flags.driver is None:
            changes["driver"] = view.driver
    if view.machine:
        read.append(("machine", view.machine))
        if flags.platform_arch is None and view.machine.lower() in MACHINE_ALIASES:
            changes["platform_arch"] = MACHINE_ALIASES[view.machine.lower()]
    if view.python:
        read.append(("python", f"{view.python}{f' ({view.python_path})' if view.python_path else ''}"))
        xy = ".".join(view.python.split(".")[:2])
        if flags.python is None and xy.replace(".", "").isdigit():
            changes["python"] = xy
    return replace(flags, **changes), tuple(read)
