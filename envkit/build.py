"""`envkit build`: preflight (pure judgement over collected facts), then a build through the Docker
SDK with the network off (offline) or on the site's mirrors, a streamed log with progress, a
summary, and a diagnosis of known failures. Nothing is tagged unless the whole build succeeded."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .errors import ExternalError, InputError

GB = 1 << 30
GB_PER_NVCC_JOB = 5


# ---------------------------------------------------------------- facts and the pure judge

@dataclass(frozen=True)
class Facts:
    context: str
    bundle_problems: tuple[str, ...]       # from bundle.verify, or missing carried files in mirror mode
    engine_error: Optional[str]            # None when the engine answers
    free_disk: Optional[int]               # bytes free where the engine keeps images; None: unknown (remote engine)
    engine_memory: Optional[int]           # bytes
    need_disk: int                         # estimate
    max_jobs: Optional[int]                # planned nvcc jobs (None: derived at build time)
    nvcc_threads: int
    compiles: bool


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def judge(f: Facts) -> list[Check]:
    checks = [Check("bundle", not f.bundle_problems,
                    "every file present and matching the manifest" if not f.bundle_problems else "; ".join(f.bundle_problems),
                    "" if not f.bundle_problems else "re-run envkit bundle on the connected machine and carry the bundle again")]
    checks.append(Check("engine", f.engine_error is None, f.engine_error or "answers",
                        "" if f.engine_error is None else "start it (./scripts/start-docker.sh) or set DOCKER_HOST"))
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


# ---------------------------------------------------------------- diagnosis of a failed build log

KNOWN_FAILURES = (
    (r"Killed|signal 9|out of memory|Cannot allocate memory|cc1plus: fatal error: Killed",
     "a compiler was killed for memory (OOM)", "lower --max-jobs / --nvcc-threads (about 5 GB per nvcc job) and build again"),
    (r"nvcc: (command )?not found|CUDA_HOME environment variable is not set|nvcc was not found",
     "nvcc is missing in the build stage", "build kernels in a CUDA -devel image (the matrix's devel_image), with CUDA_HOME=/usr/local/cuda"),
    (r"Unsupported gpu architecture '(compute_\d+)'",
     "nvcc rejects an arch in the list", "pin the arch list to the target GPU (envkit's kernel script removes upstream's hard-coded gencodes)"),
    (r"undefined symbol: \S+",
     "a compiled module does not match torch's ABI (undefined symbol)", "rebuild it against the installed torch, or use the wheel whose cxx11abi matches torch"),
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


@dataclass
class BuildResult:
    image_id: Optional[str] = None
    tag: Optional[str] = None
    size: int = 0
    seconds: float = 0.0
    stages: list = field(default_factory=list)  # [(stage, seconds)]
    steps: int = 0
    log: list = field(default_factory=list)


def stream_build(engine, context: Path, network: str, buildargs: dict[str, str], on_line: Callable[[str], None],
                 nocache: bool = False, dockerfile: str = "Dockerfile") -> BuildResult:
    res = BuildResult()
    start = time.monotonic()
    stage_start, stage_name = start, None
    error = None
    for msg in engine.build(context, network=network, buildargs=buildargs, nocache=nocache, dockerfile=dockerfile):
        if "stream" in msg:
            for line in msg["stream"].splitlines():
                if not line.strip():
                    continue
                res.log.append(line)
                # Docker: "Step 3/22 : FROM img AS build"; Podman/Buildah: "[1/2] STEP 1/10: FROM img AS build"
                m = re.match(r"(?:\[\d+/\d+\] )?Step (\d+)/(\d+) ?: FROM \S+(?: AS (\S+))?", line, re.I)
                if m:
                    now = time.monotonic()
                    if stage_name:
                        res.stages.append((stage_name, now - stage_start))
                    stage_start, stage_name = now, m.group(3) or f"stage{len(res.stages)}"
                if re.match(r"(?:\[\d+/\d+\] )?Step \d+/\d+ ?:", line, re.I):
                    res.steps += 1
                on_line(line)
        elif "error" in msg:
            error = msg.get("error", "")
            res.log.append(error)
            on_line(error)
        elif "aux" in msg and isinstance(msg["aux"], dict) and "ID" in msg["aux"]:
            res.image_id = msg["aux"]["ID"]
    end = time.monotonic()
    if stage_name:
        res.stages.append((stage_name, end - stage_start))
    res.seconds = end - start
    if res.image_id is None and error is None:
        m = next((re.match(r"Successfully built ([0-9a-f]+)", l) for l in reversed(res.log) if l.startswith("Successfully built")), None)
        if m:
            res.image_id = m.group(1)
    if error is not None or res.image_id is None:
        text = "\n".join(res.log[-400:])
        d = diagnose(text)
        first = (error or "the build produced no image").strip().splitlines()[0][:240]
        if d:
            cause, fix, evidence = d
            raise ExternalError(f"build failed: {cause}: {evidence}", fix)
        raise ExternalError(f"build failed: {first}", "read the log above; nothing was tagged")
    return res


# ---------------------------------------------------------------- collecting facts (adapter)

def _engine_resources(engine) -> tuple[Optional[int], Optional[int]]:
    """(free disk where the engine keeps images, engine memory), from one `docker info`; None where unknown."""
    try:
        info = engine.info()
    except Exception:
        return None, None
    root = info.get("DockerRootDir") or "/var/lib/docker"
    disk = None
    if os.environ.get("DOCKER_HOST", "unix://").startswith("unix://") and Path(root).exists():
        disk = shutil.disk_usage(root).free  # only a local engine's disk is ours to measure
    return disk, int(info.get("MemTotal") or 0) or None


def collect(context: Path, *, offline: bool) -> tuple[Facts, Optional[object], dict]:
    """The preflight's facts, the engine (None when it does not answer) and the parsed plan."""
    from .bundle import verify
    from .engine import Engine

    if not (context / "Dockerfile").is_file() or not (context / "envkit.plan.json").is_file():
        raise InputError(f"{context} is not an envkit build context (no Dockerfile / envkit.plan.json)",
                         "pass the directory written by envkit bundle (--bundle) or envkit generate (-o)")
    try:
        plan = json.loads((context / "envkit.plan.json").read_text())
        plan["stages"], plan["context"]
    except (ValueError, TypeError, KeyError):
        raise InputError(f"{context}/envkit.plan.json is not an envkit plan", "regenerate the context (envkit generate or envkit bundle)") from None
    if offline:
        if not plan.get("offline"):
            raise InputError(f"{context} was generated for network builds, not offline", "make it with envkit bundle")
        problems = tuple(verify(context))
    else:
        problems = tuple(f"missing: {c['path']} ({c['what']}; from {c['origin']})" for c in plan["context"]
                         if not (context / c["path"]).exists())
    size = sum(p.stat().st_size for p in context.rglob("*") if p.is_file())
    engine, engine_error = None, None
    try:
        engine = Engine.connect()
    except ExternalError as exc:
        engine_error = exc.message
    comp = plan.get("compile", {})
    disk, mem = _engine_resources(engine) if engine is not None else (None, None)
    facts = Facts(str(context), problems, engine_error, disk, mem,
                  need_disk=3 * size + 2 * GB, max_jobs=comp.get("max_jobs"), nvcc_threads=comp.get("nvcc_threads") or 1,
                  compiles=bool(comp.get("kernels")))
    return facts, engine, plan


def load_images(engine, context: Path, say: Callable[[str], None]) -> None:
    mf = context / "manifest.json"
    if not mf.is_file():
        return
    for img in json.loads(mf.read_text()).get("images", []):
        if engine.has_image(img["ref"]) and engine.image_id(img["ref"]) == img.get("id"):
            say(f"base image {img['ref']} already on the engine (same id as the bundle's)")
            continue
        if engine.has_image(img["ref"]):
            say(f"{img['ref']} on this engine is not the bundle's image: loading the bundle's")
        say(f"docker load {img['file']}")
        loaded = engine.load(context / img["file"])
        if not engine.has_image(img["ref"]) or engine.image_id(img["ref"]) != img.get("id"):
            # Podman names unqualified archive tags localhost/...: the archive still holds the image, so name it as planned.
            if len(loaded) != 1:
                tags = ", ".join(t for _, ts in loaded for t in ts) or "no tags"
                raise ExternalError(f"{img['file']} did not provide {img['ref']} (it holds {tags})",
                                    "re-run envkit bundle to save the base image again")
            engine.tag(loaded[0][0], img["ref"])
            say(f"tagged the loaded image {loaded[0][0][:19]} as {img['ref']}")
