"""Progress for people: the app layer's Reporter drawn with rich (a line per event, a bar per download or
image save, the build log with its steps in bold, a bar per concurrency level of a sweep), and the live
board of `build --all`. Everything goes to stderr when stdout carries JSON."""
from __future__ import annotations

import contextlib
import re
import threading
import time
from types import TracebackType
from typing import Any, ContextManager, Iterator, Optional, Sequence

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from envkit.app.reporter import Tick
from envkit.core.preflight import Check
from envkit.model.redact import printable
from envkit.ui import settings

_STEP = re.compile(r"(?:\[\d+/\d+\] )?Step \d+/\d+ ?:", re.I)


def console(stderr: bool = False) -> Console:
    return settings.console(stderr)


class RichReporter:
    """A Reporter for one command; use it as a context manager so a sweep's bars are closed at the end.
    The bundle phase always talks on stderr, each line marked "bundle:"; the build phase on `out`."""

    def __init__(self, out: Console) -> None:
        self.build_out = self.out = out
        self.prefix = ""
        self._sweep: Optional[Progress] = None
        self._levels: dict[int, Any] = {}

    def phase(self, name: str) -> None:
        bundling = name == "bundle"
        self.out = console(stderr=True) if bundling else self.build_out
        self.prefix = "bundle: " if bundling else ""

    def __enter__(self) -> "RichReporter":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._sweep is not None:
            self._sweep.stop()

    def say(self, message: str) -> None:
        """One line; what it quotes from a server or a tool has its control characters escaped and its markup shown."""
        self.out.print(f"[dim]{escape(printable(self.prefix + message))}[/dim]", soft_wrap=True)

    @contextlib.contextmanager
    def _transfer(self, name: str) -> Iterator[Tick]:
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=self.out, transient=True) as p:
            task = p.add_task(escape(name), total=None)  # the description column reads markup

            def tick(done: int, total: Optional[int]) -> None:
                p.update(task, completed=done, total=total)

            yield tick

    def transfer(self, name: str) -> ContextManager[Tick]:
        return self._transfer(name)

    def build_line(self, line: str) -> None:
        if len(line) > 200:
            line = line[:200] + " ..."
        if _STEP.match(line):
            self.out.print(f"[bold]{escape(line)}[/bold]", soft_wrap=True)
        elif "compiled " in line or line.startswith("envkit:") or " ---> " not in line:
            self.out.print(escape(line), highlight=False, soft_wrap=True)  # a log line is grepped: never split

    def preflight(self, checks: Sequence[Check]) -> None:
        t = Table(title="preflight", title_justify="left", header_style="bold")
        t.add_column("check")
        t.add_column("result")
        t.add_column("detail", overflow="fold")
        for ch in checks:
            t.add_row(escape(ch.name), "[green]ok[/green]" if ch.ok else "[bold red]FAIL[/bold red]",
                      escape(ch.detail + (f"\nfix: {ch.fix}" if ch.fix else "")))
        self.out.print(t)

    def requests_done(self, concurrency: int, done: int, total: int) -> None:
        if self._sweep is None:
            self._sweep = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=self.out,
                                   transient=True)
            self._sweep.start()
        if concurrency not in self._levels:
            self._levels[concurrency] = self._sweep.add_task(f"concurrency {concurrency}", total=total)
        self._sweep.update(self._levels[concurrency], completed=done)


class QuietReporter(RichReporter):
    """`--progress none` (or `-q`): no progress lines, bars or build log; the preflight's verdict still shows."""

    def say(self, message: str) -> None:
        pass

    def transfer(self, name: str) -> ContextManager[Tick]:
        return contextlib.nullcontext(lambda done, total: None)

    def build_line(self, line: str) -> None:
        pass

    def requests_done(self, concurrency: int, done: int, total: int) -> None:
        pass


def reporter(out: Console) -> RichReporter:
    """The Reporter the global --progress option asks for, drawing on `out`."""
    return QuietReporter(out) if settings.current().progress == "none" else RichReporter(out)


class BuildBoard:
    """The live table of `build --all`: a row per target with its state, step and time (a Board of app/build_all)."""

    def __init__(self, targets: Sequence[str], out: Console) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.rows: dict[str, dict[str, Any]] = {t: {"state": "waiting", "step": "", "start": None, "seconds": 0.0} for t in targets}
        self._live: Optional[Live] = None
        self._stop = threading.Event()

    def update(self, target: str, *, state: Optional[str] = None, step: Optional[str] = None,
               seconds: Optional[float] = None) -> None:
        with self.lock:
            row = self.rows[target]
            if state is not None:
                if state == "building" and row["state"] != "building":
                    row["start"] = time.monotonic()
                row["state"] = state
            if step is not None:
                row["step"] = step
            if seconds is not None:
                row["seconds"] = seconds

    def table(self) -> Table:
        t = Table(title="envkit build --all", title_justify="left", header_style="bold")
        for col in ("target", "state", "progress", "time"):
            t.add_column(col, overflow="fold")
        with self.lock:
            for name, r in self.rows.items():
                secs = (time.monotonic() - r["start"]) if r["state"] == "building" and r["start"] else r["seconds"]
                style = {"done": "green", "failed": "bold red", "building": "cyan"}.get(r["state"], "")
                state = f"[{style}]{escape(r['state'])}[/]" if style else escape(r["state"])
                t.add_row(escape(name), state, escape(r["step"]), f"{secs:.0f} s" if secs else "")
        return t

    def __enter__(self) -> "BuildBoard":
        self._live = Live(self.table(), console=self.out, refresh_per_second=2, transient=False)
        self._live.__enter__()
        threading.Thread(target=self._refresh, daemon=True).start()
        return self

    def _refresh(self) -> None:
        while not self._stop.wait(0.5):
            if self._live is not None:
                self._live.update(self.table())

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.update(self.table())
            self._live.__exit__(kind, exc, tb)
