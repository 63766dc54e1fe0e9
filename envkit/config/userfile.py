"""Reading a file the user named: one line naming the file and the fix, never a traceback."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit.errors import InputError

T = TypeVar("T")


def read_text(path: str, what: str, fix: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}", fix) from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not UTF-8 text", "save it as UTF-8") from None


def parse_file(path: str, what: str, fix: str, parse: Callable[[str], T]) -> T:
    """Read and parse a file the user named; the parser's ValueError becomes one line naming the file and the fix."""
    try:
        return parse(read_text(path, what, fix))
    except ValueError as exc:
        raise InputError(f"cannot read {what} {path}: {exc}", fix) from None


def parse_toml(text: str, what: str, path: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{what} {path}: not valid TOML: {exc}", "fix the TOML syntax at the position named") from None
