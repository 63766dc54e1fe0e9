"""`envkit resolve`: the newest consistent stack for the flags given, or every conflict with its fix. It answers
what `generate` builds: with no --python, the base image's own Python where that installs the same stack."""
from __future__ import annotations

from typing import Optional

from envkit.app.generate import solve
from envkit.config import matrix_file
from envkit.model.flags import ResolveFlags
from envkit.model.site import Site
from envkit.model.solution import Result


def resolve(flags: ResolveFlags, matrix_path: Optional[str] = None, host_facts: Optional[str] = None) -> Result:
    """`host_facts`: with --gpu auto, a facts file recorded on the GPU host instead of this host's facts."""
    m = matrix_file.load(matrix_path)
    return solve(m, flags, Site(), host_facts)[0]
