"""doctor --for: would this stack work on this host? The resolver asked with the host's facts. Pure: the
resolver's conflicts become findings under their own rule ids (envkit/data/rules.toml)."""
from __future__ import annotations

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


def for_findings(m: Matrix, host: Host, flags: ResolveFlags) -> list[Finding]:
    """Would the asked stack work on this host's GPU and driver? The resolver answers."""
    from envkit.core.resolve import parse_query, resolve
    from envkit.core.resolve.query import platform_claims

    asked = flags.to_dict()
    # a CPU stack asked for (--platform cpu, --torch X+cpu) uses neither the host's GPU nor its driver: adding them
    # would make the query contradict itself (parse_query refuses a CPU stack with a GPU)
    cpu = any(c.platform == "cpu" for c in platform_claims(m, parse_query(m, flags)))
    if "gpu" not in asked and not cpu and host.gpus and host.gpus[0].cc:
        asked["gpu"] = f"sm_{host.gpus[0].cc.replace('.', '')}"
    if "driver" not in asked and not cpu and host.driver:
        asked["driver"] = host.driver
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
        extra.append(Finding("warning", "kernels.nvcc-torch-cuda", f"this host's nvcc {nv}; the stack's torch is built with CUDA {sol.toolkit}",
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
    return extra + [Finding("info", "for.works", f"asked: {shown}", "this stack resolves on this host: " + ", ".join(f"{k} {v}" for k, v in s.items()),
                    "envkit generate " + shown, sources[0] if sources else "doc:matrix.toml")]
