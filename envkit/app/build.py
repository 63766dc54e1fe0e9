"""`envkit build`: preflight (pure judgement over collected facts), then a build through the Docker
SDK with the network off (offline) or on the site's mirrors, a streamed log with progress, a
summary, and a diagnosis of known failures. Nothing is tagged unless the whole build succeeded."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from envkit.errors import ExternalError, InputError
from envkit.adapters.image_build import _engine_resources
from envkit.core.preflight import Facts, GB


# ---------------------------------------------------------------- facts and the pure judge


# ---------------------------------------------------------------- diagnosis of a failed build log


# ---------------------------------------------------------------- collecting facts (adapter)


def collect(context: Path, *, offline: bool) -> tuple[Facts, Optional[object], dict]:
    """The preflight's facts, the engine (None when it does not answer) and the parsed plan."""
    from envkit.adapters.bundle_dir import verify
    from envkit.adapters.engine import Engine

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


