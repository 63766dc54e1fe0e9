"""Output for people and CI files: rich tables, progress, JSON on stdout, the sweep's PNG, JUnit XML, reports.
Submodules load on first use (PEP 562), so `from envkit import ui` costs nothing until a command uses one."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time each loads on first use
    from envkit.ui import junit, output, plot, progress, report, report_dir, settings

__all__ = ["junit", "output", "plot", "progress", "report", "report_dir", "settings"]


def __getattr__(name: str) -> ModuleType:
    if name.startswith("_"):
        raise AttributeError(name)
    return importlib.import_module(f"{__name__}.{name}")
