"""`envkit resolve`: the newest consistent stack for the flags given, or every conflict with its fix. It answers
what `generate` builds: with no --python, the base image's own Python where that installs the same stack."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from envkit.config import matrix_file
from envkit.core.resolve import parse_query
from envkit.core.resolve import resolve as resolve_query
from envkit.model.flags import ResolveFlags
from envkit.model.matrix import Matrix
from envkit.model.site import Site
from envkit.model.solution import Result


def resolve(flags: ResolveFlags, matrix_path: Optional[str] = None, host_facts: Optional[str] = None) -> Result:
    """`host_facts`: with --gpu auto, a facts file recorded on the GPU host instead of this host's facts."""
    m = matrix_file.load(matrix_path)
    return solve(m, flags, Site(), host_facts)[0]


def solve(m: Matrix, flags: ResolveFlags, site: Site, host_facts: Optional[str] = None) -> tuple[Result, ResolveFlags]:
    """Resolve; with no --python, prefer the base image's own Python when it keeps the same torch. --gpu auto is this
    host's (or the facts file's) GPUs, driver, CPU architecture and Python first; the answer says what was read."""
    from envkit.app import host
    from envkit.core.resolve.auto import host_flags, wants_auto

    host.needs_facts_with_auto(host_facts, wants_auto(flags))
    read: tuple[tuple[str, str], ...] = ()
    if wants_auto(flags):
        flags, read = host_flags(m, flags, host.view(host_facts))
    result = resolve_query(m, parse_query(m, flags))
    if result.python_from_image is not None:  # the lock records the Python the image was built with
        flags = replace(flags, python=str(result.python_from_image))
    return (replace(result, host_read=read) if read else result), flags
