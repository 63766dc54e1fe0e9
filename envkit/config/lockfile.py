"""envkit.lock.json: what a generated context was resolved from, written so it can be replayed exactly; and,
for a lock written by `envkit lock`, the wheels and base images it pins."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from envkit import __version__
from envkit.config.userfile import parse_json, read_text
from envkit.errors import InputError
from envkit.model.flags import ResolveFlags
from envkit.model.lock import Lock
from envkit.model.matrix import Matrix
from envkit.model.plan import Options
from envkit.model.site import Site
from envkit.model.solution import Result, SolutionRecord

LOCK_NAME = "envkit.lock.json"
RELOCK = "make it again with envkit lock (or envkit generate for an unpinned one)"


def matrix_sha256(m: Matrix) -> str:
    return hashlib.sha256(Path(m.path).read_bytes()).hexdigest()


def read_lock(path: str) -> Lock:
    text = read_text(path, "lock file", RELOCK)
    doc = parse_json(text, "lock file", path, RELOCK)  # the one JSON reader of user files (userfile.py)
    try:
        return Lock.from_json(doc)
    except (ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InputError(f"lock file {path} is not an envkit lock this envkit reads ({reason})", RELOCK) from None


def check_lock(path: str, lock: Lock, result: Result) -> None:
    """The lock replays only if today's matrix resolves its query to the very same solution."""
    if result.solution is None:
        first = result.conflicts[0].message if result.conflicts else "no solution"
        raise InputError(f"lock file {path} no longer resolves: {first}",
                         "regenerate the lock, or pass the matrix it was made with (--matrix)")
    now = result.solution.to_json()
    then = lock.solution.to_json()
    if now != then:
        diffs = [k for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k)]
        raise InputError(f"lock file {path} resolves differently with this matrix (changed: {', '.join(diffs)})",
                         "make the lock again (envkit lock for a pinned lock, envkit generate otherwise), or pass the matrix it was made "
                         "with (--matrix)")


def make_lock(m: Matrix, flags: ResolveFlags, result: Result, site: Site, opts: Options, pinned: Optional[Lock] = None,
              toolkit: str = "image") -> Lock:
    """The lock a context carries; a replayed lock's pinned wheels and images travel with it."""
    assert result.solution is not None
    return Lock(envkit=__version__, matrix_sha256=matrix_sha256(m), query=flags, offline=opts.offline, site=site.path or None,
                host_march=opts.host_march, solution=SolutionRecord.from_json(result.solution.to_json()), toolkit=toolkit,
                wheels=pinned.wheels if pinned else (), images=pinned.images if pinned else ())
