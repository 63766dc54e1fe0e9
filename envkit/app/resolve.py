"""`envkit resolve`: the newest consistent stack for the flags given, or every conflict with its fix."""
from __future__ import annotations

from typing import Optional

from envkit.config import matrix_file
from envkit.core.resolve import parse_query
from envkit.core.resolve import resolve as solve
from envkit.model.flags import ResolveFlags
from envkit.model.solution import Result


def resolve(flags: ResolveFlags, matrix_path: Optional[str] = None) -> Result:
    m = matrix_file.load(matrix_path)
    return solve(m, parse_query(m, flags))
