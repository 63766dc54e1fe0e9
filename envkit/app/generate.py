"""`envkit generate`: resolve (or replay a lock), plan, render, write. The adapters live here: reading
the templates, the site file and the lock, and writing the output directory all at once.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from envkit.config import matrix_file as mx
from envkit.errors import InputError
from envkit.model.matrix import Matrix
from envkit.model.plan import BuildPlan, Options
from envkit.core.plan import base_os, plan
from envkit.core.render import render
from envkit.model.solution import Result
from envkit.core.resolve import parse_query, resolve
from envkit.model.site import Site
from envkit.config.site_file import load as load_site
from envkit.adapters.context_dir import load_templates
from envkit.config.lockfile import check_lock, lock_doc, read_lock
from envkit.model.solution import FLAG_ORDER


def command_line(flags: dict[str, str], site: Site, opts: Options, lock: Optional[str]) -> str:
    parts = ["envkit", "generate"]
    if lock:
        parts += ["--lock", lock]
    else:
        parts += [f"--{k.replace('_', '-')}={flags[k]}" for k in FLAG_ORDER if k in flags]
    if site.given:
        parts += ["--mirror", site.path]
    if opts.offline:
        parts.append("--offline")
    if opts.host_march != Options().host_march:
        parts.append(f"--host-march={opts.host_march}")
    return " ".join(shlex.quote(p) for p in parts)


def _resolve(m: Matrix, flags: dict[str, str]) -> Result:
    q = parse_query(m, **{k: flags.get(k) for k in FLAG_ORDER})
    return resolve(m, q)


def solve(m: Matrix, flags: dict[str, str], site: Site) -> tuple[Result, dict[str, str]]:
    """Resolve; with no --python, prefer the base image's own Python when it keeps the same torch."""
    result = _resolve(m, flags)
    sol = result.solution
    if sol is None or "python" in flags:
        return result, flags
    try:
        _, _, osr = base_os(m, sol, site)
    except InputError:
        return result, flags
    if osr.python != sol.python:
        alt_flags = {**flags, "python": str(osr.python)}
        alt = _resolve(m, alt_flags)
        if alt.solution is not None and alt.solution.torch == sol.torch and alt.solution.vllm == sol.vllm \
                and alt.solution.flash_attn == sol.flash_attn:
            return alt, {**flags, "python": str(osr.python)}
    return result, flags


@dataclass(frozen=True)
class Generated:
    plan: BuildPlan
    result: Result
    files: dict[str, bytes]
    command: str


def generate(flags: dict[str, str], *, matrix_path: Optional[str] = None, lock: Optional[str] = None,
             mirror: Optional[str] = None, opts: Options = Options()) -> Generated:
    m = mx.load(matrix_path)
    site = load_site(mirror) if mirror else Site()
    if lock:
        if any(flags.values()):
            raise InputError("--lock replays a resolved query; resolve flags cannot be combined with it",
                             "drop the resolve flags, or drop --lock to resolve anew")
        flags, doc = read_lock(lock, m)
        result = _resolve(m, flags)
        check_lock(lock, doc, result)
    else:
        flags = {k: v for k, v in flags.items() if v}
        result, flags = solve(m, flags, site)
    if result.solution is None:
        return Generated(None, result, {}, "")  # type: ignore[arg-type]
    p = plan(m, result.solution, site, opts)
    command = command_line(flags, site, opts, lock)
    files = render(p, load_templates(), command, lock_doc(m, flags, result, site, opts))
    return Generated(p, result, files, command)


