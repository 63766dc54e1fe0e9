"""Use cases: typed requests in, typed outcomes out; progress through a Reporter passed in.
Submodules load on first use (PEP 562), so `from envkit import app` costs nothing until a command uses one."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time each loads on first use
    from envkit.app import build, build_all, bundle, doctor, generate, inspect, lock, matrix, reporter, resolve, selftest, serving, sweep

__all__ = ["build", "build_all", "bundle", "doctor", "generate", "inspect", "lock", "matrix", "reporter", "resolve", "selftest", "serving",
           "sweep"]


def __getattr__(name: str) -> ModuleType:
    if name.startswith("_"):
        raise AttributeError(name)
    return importlib.import_module(f"{__name__}.{name}")
