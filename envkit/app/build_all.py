"""`envkit build --all`: every target of a project, at most N at once, each a call of build_target in a
worker thread with its own log file; a board (passed in) shows where each one is."""
from __future__ import annotations

import contextlib
import re
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ContextManager, Iterator, Optional, Protocol, Sequence

from envkit.app.build import Built, build_target
from envkit.app.reporter import Tick
from envkit.core.preflight import Check
from envkit.errors import EXIT_BUG, EXIT_EXTERNAL, EXIT_INTERRUPTED, EXIT_NO_SOLUTION, EnvkitError
from envkit.model.project import Project, Target
from envkit.model.solution import Unsolved

LOG_DIR = Path("envkit-build") / "logs"
_STEP = re.compile(r"(?:\[\d+/\d+\] )?Step (\d+/\d+)", re.I)
_NVCC = re.compile(r"compiled (\d+/\d+)")


class Board(Protocol):
    def update(self, target: str, *, state: Optional[str] = None, step: Optional[str] = None,
               seconds: Optional[float] = None) -> None:
        """state: waiting | building | done | failed; step: what it does now (or why it failed)."""


@dataclass(frozen=True)
class TargetOutcome:
    name: str
    ok: bool
    exit: int
    image: str
    seconds: float
    log: str
    size: Optional[int]
    error: Optional[str]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "exit": self.exit, "image": self.image, "seconds": round(self.seconds, 1),
                "log": self.log, "size": self.size, "error": self.error}


class Cancelled(EnvkitError):
    """build --all was interrupted: the targets still running stop at their next line of output."""

    exit_code = EXIT_INTERRUPTED


class _TargetLog:
    """A Reporter for one target: every line into its log file, the current phase onto the board."""

    def __init__(self, name: str, log: IO[str], board: Board, cancel: threading.Event) -> None:
        self.name, self.log, self.board, self.cancel = name, log, board, cancel

    def _write(self, line: str) -> None:
        if self.cancel.is_set():
            raise Cancelled("interrupted")
        self.log.write(line.rstrip("\n") + "\n")
        self.log.flush()

    def phase(self, name: str) -> None:
        self._write(f"== {name}")
        self.board.update(self.name, step="bundling" if name == "bundle" else "building")

    def say(self, message: str) -> None:
        self._write(message)

    @contextlib.contextmanager
    def _transfer(self, name: str) -> Iterator[Tick]:
        self.board.update(self.name, step=f"fetching {name}"[:60])
        yield lambda done, total: None

    def transfer(self, name: str) -> ContextManager[Tick]:
        return self._transfer(name)

    def build_line(self, line: str) -> None:
        self._write(line)
        m = _STEP.search(line) or _NVCC.search(line)
        if m:
            self.board.update(self.name, step=("step " if "tep" in m.group(0) else "nvcc ") + m.group(1))

    def preflight(self, checks: Sequence[Check]) -> None:
        for c in checks:
            self._write(f"preflight {c.name}: {'ok' if c.ok else 'FAIL'} {c.detail}")

    def requests_done(self, concurrency: int, done: int, total: int) -> None:
        pass


def _one(t: Target, *, network: str, no_cache: bool, dry_run: bool, matrix_path: Optional[str], board: Board,
         cancel: threading.Event, sbom_dir: Optional[str]) -> TargetOutcome:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{t.name}.log"
    board.update(t.name, state="building", step="starting")
    start = time.monotonic()
    size: Optional[int] = None
    code, error = 0, None
    with log_path.open("w") as log:
        try:
            outcome = build_target(t, network=network, no_cache=no_cache, dry_run=dry_run, matrix_path=matrix_path,
                                   reporter=_TargetLog(t.name, log, board, cancel), sbom_dir=sbom_dir)
            if isinstance(outcome, Unsolved):
                first = outcome.result.conflicts[0] if outcome.result.conflicts else None
                code, error = EXIT_NO_SOLUTION, f"no solution: {first.message if first else 'see envkit resolve'}"
            elif isinstance(outcome, Built):
                size = outcome.size
        except EnvkitError as exc:
            code, error = exc.exit_code, f"envkit: error: {exc.one_line()}"
        except Exception as exc:  # one target's crash (a bug) must not take the others down: its log keeps the traceback
            log.write(traceback.format_exc())
            code, error = EXIT_BUG, f"envkit: error: internal error: {type(exc).__name__}: {exc} (a bug in envkit: report {log_path})"
        if error:
            log.write(error + "\n")
    seconds = time.monotonic() - start
    board.update(t.name, state="failed" if error else "done", seconds=seconds, step=(error or "")[:120])
    return TargetOutcome(t.name, error is None, code, t.image, seconds, str(log_path), size, error)


@dataclass(frozen=True)
class AllBuilt:
    targets: tuple[TargetOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.targets)

    @property
    def exit_code(self) -> int:
        """Not ok: a target's bug is a bug (70); any other failure is the build's (4)."""
        return EXIT_BUG if any(t.exit == EXIT_BUG for t in self.targets) else EXIT_EXTERNAL

    def summary(self) -> str:
        return f"{sum(t.ok for t in self.targets)}/{len(self.targets)} targets built; logs in {LOG_DIR}/"

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": self.ok, "targets": [t.to_json() for t in self.targets]}


def build_all(project: Project, *, jobs: int, network: str, no_cache: bool, board: Board, dry_run: bool = False,
              matrix_path: Optional[str] = None, sbom_dir: Optional[str] = "envkit-sbom") -> AllBuilt:
    """Every target, at most `jobs` at once. Interrupted, the targets not started are dropped and the running
    ones stop at their next line of output (their engine connection closes, which ends the build)."""
    for t in project.targets:
        board.update(t.name, state="waiting")
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(_one, t, network=network, no_cache=no_cache, dry_run=dry_run, matrix_path=matrix_path, board=board,
                           cancel=cancel, sbom_dir=sbom_dir) for t in project.targets]
    try:
        return AllBuilt(tuple(f.result() for f in futures))
    except KeyboardInterrupt:
        cancel.set()
        raise
    finally:
        pool.shutdown(wait=not cancel.is_set(), cancel_futures=True)
