"""The build preflight, pure: facts about the context and the engine in, checks with fixes out;
and the diagnosis of known build failures from a build log."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

GB = 1 << 30


GB_PER_NVCC_JOB = 5


@dataclass(frozen=True)
class Facts:
    context: str
    bundle_problems: tuple[str, ...]       # from bundle.verify; in mirror mode, carried files missing or not the cited sha256
    engine_error: Optional[str]            # None when the engine answers
    free_disk: Optional[int]               # bytes free where the engine keeps images; None: unknown (remote engine)
    engine_memory: Optional[int]           # bytes
    need_disk: int                         # estimate
    max_jobs: Optional[int]                # planned nvcc jobs (None: derived at build time)
    nvcc_threads: int
    compiles: bool
    offline: bool = True                   # a bundle's build; False: against the site's mirrors (a generated context)
    to_fetch: tuple[str, ...] = ()         # mirror mode: carried files the build fetches through the site before it starts


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def judge(f: Facts) -> list[Check]:
    checks = [_carried(f)]
    checks.append(Check("engine", f.engine_error is None, f.engine_error or "answers",
                        "" if f.engine_error is None else "start Docker or Podman's service and point DOCKER_HOST at its socket"))
    if f.free_disk is not None:
        ok = f.free_disk >= f.need_disk
        checks.append(Check("disk", ok, f"{f.free_disk / GB:.1f} GB free, about {f.need_disk / GB:.1f} GB needed",
                            "" if ok else "free space where the engine keeps images (docker system prune) or point it elsewhere"))
    if f.compiles and f.engine_memory is not None:
        jobs = f.max_jobs or 1
        need = jobs * f.nvcc_threads * GB_PER_NVCC_JOB * GB
        ok = f.engine_memory >= need
        checks.append(Check("memory", ok, f"{f.engine_memory / GB:.0f} GB for {jobs} nvcc job(s) x {f.nvcc_threads} thread(s) "
                            f"at ~{GB_PER_NVCC_JOB} GB each (needs {need / GB:.0f} GB)",
                            "" if ok else f"lower --max-jobs to {max(1, int(f.engine_memory // (GB_PER_NVCC_JOB * GB * f.nvcc_threads)))}"))
    return checks


def _carried(f: Facts) -> Check:
    """The files the context carries: a bundle's against its manifest; a mirror build's against the sha256 they cite."""
    if f.offline:
        return Check("bundle", not f.bundle_problems,
                     "every file present and matching the manifest" if not f.bundle_problems else "; ".join(f.bundle_problems),
                     "" if not f.bundle_problems else "re-run envkit bundle on the connected machine and carry the bundle again")
    if f.bundle_problems:
        return Check("context", False, "; ".join(f.bundle_problems),
                     f"put the file the plan names in {f.context}/ (from your mirror, with the sha256 its origin cites), or let "
                     "envkit build fetch it through the site's pip index (without --dry-run)")
    if f.to_fetch:
        return Check("context", True, "the build fetches through the site first (sha256 checked): " + ", ".join(f.to_fetch))
    return Check("context", True, "every carried file present (sha256 checked where its origin cites one)")


KNOWN_FAILURES = (
    (r"Killed|signal 9|out of memory|Cannot allocate memory|cc1plus: fatal error: Killed",
     "a compiler was killed for memory (OOM)", "lower --max-jobs / --nvcc-threads (about 5 GB per nvcc job) and build again"),
    (r"nvcc: (command )?not found|CUDA_HOME environment variable is not set|nvcc was not found",
     "nvcc is missing in the build stage",
     "build kernels in a CUDA -devel image (the matrix's devel_image), with CUDA_HOME=/usr/local/cuda"),
    (r"Unsupported gpu architecture '(compute_\d+)'",
     "nvcc rejects an arch in the list",
     "pin the arch list to the target GPU (envkit's kernel script removes upstream's hard-coded gencodes)"),
    (r"undefined symbol: \S+",
     "a compiled module does not match torch's ABI (undefined symbol)",
     "rebuild it against the installed torch, or use the wheel whose cxx11abi matches torch"),
    (r"Temporary failure in name resolution|Could not resolve host|Network is unreachable|Failed to establish a new connection|"
     r"No matching distribution found|Could not find a version that satisfies|Failed to fetch",
     "a step needed the network or a file the context does not carry", "re-run envkit bundle (offline) or check the site mirror holds it"),
)


def diagnose(log: str) -> Optional[tuple[str, str, str]]:
    """(cause, fix, evidence line) for the first known failure in a build log."""
    for pattern, cause, fix in KNOWN_FAILURES:
        m = re.search(pattern, log)
        if m:
            line = log[log.rfind("\n", 0, m.start()) + 1: log.find("\n", m.end()) if log.find("\n", m.end()) != -1 else None]
            return cause, fix, line.strip()[:200]
    return None
