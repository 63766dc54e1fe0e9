"""How output for people looks, set once by the CLI's global options: progress (auto: rich bars and live
tables where the terminal can take them; plain: one line per event, never redrawn; none: no progress at all),
colour, verbosity. Every rich Console envkit makes comes from `console()` here."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a console is made: a --json run never needs it
    from rich.console import Console

PROGRESS_MODES = ("auto", "plain", "none")


@dataclass(frozen=True)
class Settings:
    progress: str = "auto"
    color: bool = True
    verbose: int = 0


_current = Settings()


def configure(progress: str = "auto", color: bool = True, verbose: int = 0) -> Settings:
    global _current
    _current = replace(_current, progress=progress, color=color and "NO_COLOR" not in os.environ, verbose=verbose)
    return _current


def current() -> Settings:
    return _current


PIPE_WIDTH = 160  # into a pipe or a CI log, where rich would assume 80 columns and split URLs and image names


def console(stderr: bool = False) -> "Console":
    from rich.console import Console

    s = _current
    stream = sys.stderr if stderr else sys.stdout
    width = None if "COLUMNS" in os.environ or _is_tty(stream) else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, no_color=not s.color or None, width=width,
                   force_interactive=False if s.progress != "auto" else None)


def _is_tty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False
