"""doctor --for: would this stack work on this host? The resolver asked with the host's facts. Pure: the
resolver's conflicts become findings under their own rule ids (envkit/data/rules.toml)."""
from __future__ import annotations

import shlex
from typing import Optional

from packaging.version import InvalidVersion, Version

from envkit.model.flags import FLAG, ResolveFlags
from envkit.model.host import Finding, Host
from envkit.model.matrix import Matrix


def _major(text: str) -> Optional[int]:
    try:
        return Version(text).major
    except InvalidVersion:
        return None


def _gpu_flag(m: Matrix, host: Host) -> str:
    """The host's GPUs as --gpu: the matrix row its NVML name names (and whose arch agrees), else the arch."""
    from envkit.core.resolve.query import find_gpu
    from envkit.errors import EnvkitError

    archs = {f"sm_{g.cc.replace('.', '')}" for g in host.gpus if g.cc}
    arch = f"sm_{host.gpus[0].cc.replace('.', '')}" if host.gpus[0].cc else sorted(archs)[0]
    names = {g.name for g in host.gpus}
    if len(archs) == 1 and len(names) == 1:
        try:
            row = find_gpu(m, next(iter(names)))
            if row.arch == arch:
                return row.name
        except EnvkitError:
            pass
    return arch


def for_findings(m: Matrix, host: Host, flags: ResolveFlags) -> list[Finding]:
    """Would the asked stack work on this host's GPU and driver? The resolver answers."""
    from envkit.core.resolve import parse_query, resolve
    from envkit.core.resolve.query import platform_claims

    asked = flags.to_dict()
    # a CPU stack asked for (--platform cpu, --torch X+cpu) uses neither the host's GPU nor its driver: adding them
    # would make the query contradict itself (parse_query refuses a CPU stack with a GPU)
    cpu = any(c.platform == "cpu" for c in platform_claims(m, parse_query(m, flags)))
    if "gpu" not in asked and not cpu and host.gpus and host.gpus[0].cc:
        asked["gpu"] = _gpu_flag(m, host)
    if "driver" not in asked and not cpu and host.driver:
        asked["driver"] = host.driver
    if "python" not in asked and host.python:  # the judged interpreter's, not whatever the resolver would pick
        asked["python"] = ".".join(host.python.split(".")[:2])
    if "platform_arch" not in asked and host.machine == "aarch64":
        asked["platform_arch"] = host.machine
    result = resolve(m, parse_query(m, ResolveFlags.from_mapping(asked)))
    shown = " ".join(f"{FLAG[k]} {v}" for k, v in asked.items())
    if not result.ok:
        return [Finding("error", c.rule, f"asked: {shown}", c.message, c.fix, c.source) for c in result.conflicts]
    s = result.flat()
    sol = result.solution
    sources = sol.sources if sol is not None else result.engine.sources if result.engine is not None else ()
    extra = []
    nv = host.nvcc
    nv_major = _major(nv) if nv else None
    if sol is not None and flags.kernels and nv_major is not None and sol.platform == "cuda" and sol.toolkit is not None \
            and nv_major != sol.toolkit.major:
        extra.append(Finding("warning", "kernels.nvcc-torch-cuda",
                             f"this host's nvcc {nv}; the stack's torch is built with CUDA {sol.toolkit}",
                             "extensions must be compiled with the CUDA major torch was built with",
                             f"build the kernels in the CUDA {sol.toolkit} devel image (envkit generate {shown})",
                             "https://github.com/pytorch/pytorch/issues/136845"))
    if not cpu and not host.gpus and not host.dcu_name:
        # newcomer review 2: "this stack resolves on this host" was said of a host with no GPU, which proves nothing
        no_gpu = "no GPU was seen on this host" + (f" ({host.nvml_error})" if host.nvml_error else "")
        return extra + [Finding("warning", "for.no-gpu", f"asked: {shown}; {no_gpu}",
                                "the stack was checked against the flags alone, not against a GPU or driver here: it resolves to "
                                + ", ".join(f"{k} {v}" for k, v in s.items()),
                                f"run envkit doctor --for on the GPU host; to plan for another host, envkit resolve {shown}",
                                "doc:envkit doctor")]
    where = f" for {host.python_path} (Python {host.python})" if host.python and host.python_path else ""
    return extra + [Finding("info", "for.works", f"asked: {shown}",
                            f"this stack resolves on this host{where}: " + ", ".join(f"{k} {v}" for k, v in s.items()),
                    "build exactly it: envkit generate " + exact_flags(asked, s), sources[0] if sources else "doc:matrix.toml")]


def exact_flags(asked: dict[str, str], flat: dict[str, str]) -> str:
    """The resolve flags that pin the answer: what was asked, with every version the answer chose written exactly."""
    pinned = dict(asked)
    for key, flag_key in (("torch", "torch"), ("cuda", "cuda"), ("rocm", "rocm"), ("dtk", "dtk"), ("python", "python")):
        if key in flat:
            pinned[flag_key] = flat[key]
    for key in ("flash_attn", "vllm"):
        if key in flat:
            pinned[key] = flat[key]  # a full X.Y.Z version is exact
    return " ".join(f"{FLAG[k]} {shlex.quote(v)}" for k, v in ResolveFlags.from_mapping(pinned).to_dict().items())
