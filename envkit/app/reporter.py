"""Progress, passed in (resolvelib's reporter): the use cases say what happens through this protocol and
never import the UI. ui/progress.py draws it with rich; Silent drops it (tests, JSON-only callers)."""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Iterator, Optional, Protocol, Sequence

from envkit.core.preflight import Check

Tick = Callable[[int, Optional[int]], None]  # (bytes done, bytes in all when known)


class Reporter(Protocol):
    def phase(self, name: str) -> None:
        """What the following events belong to: "bundle" (fetching what an offline build carries) or "build"."""

    def say(self, message: str) -> None:
        """One line about what happens now (bundle: fetched..., build: loading image...)."""

    def transfer(self, name: str) -> ContextManager[Tick]:
        """A download or an image save of `name`: yields a callback for its progress."""

    def build_line(self, line: str) -> None:
        """One line of a Docker build's log."""

    def preflight(self, checks: Sequence[Check]) -> None:
        """The build preflight's checks, before the build starts (or is refused)."""

    def requests_done(self, concurrency: int, done: int, total: int) -> None:
        """The serving sweep: `done` of `total` requests answered at this concurrency."""


class Silent:
    """A Reporter that shows nothing."""

    def phase(self, name: str) -> None:
        pass

    def say(self, message: str) -> None:
        pass

    @contextlib.contextmanager
    def _tick(self) -> Iterator[Tick]:
        yield lambda done, total: None

    def transfer(self, name: str) -> ContextManager[Tick]:
        return self._tick()

    def build_line(self, line: str) -> None:
        pass

    def preflight(self, checks: Sequence[Check]) -> None:
        pass

    def requests_done(self, concurrency: int, done: int, total: int) -> None:
        pass
