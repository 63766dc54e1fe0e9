"""Reading a file the user named: one line naming the file and the fix, never a traceback.

Every user file (site, project, lock, doctor facts, a bundle's manifest and plan, self-test datasets) is read
through `read_text` (`read_bytes` for the site's [ca] certificate), every JSON one parsed by `parse_json`, every
TOML one by `parse_toml`; every failure is an `UnreadableFile`, an InputError (exit 2) naming the file. The limits:

- size: at most `MAX_BYTES` (64 MiB) for the site, project, lock and facts files, the CA certificate and a bundle's JSON files,
  `MAX_DATASET_BYTES` (256 MiB) for the sweep's dataset and the LAMBADA file. The read itself is bounded
  (limit + 1 bytes), so a file that never ends (a FIFO fed forever) is refused too; a device such as
  /dev/zero is refused before it is read.
- JSON: standard JSON only (NaN and Infinity are refused), nested at most `MAX_DEPTH` deep, integers of at
  most 4300 digits (Python's limit); TOML nested too deeply or holding such an integer is refused the same way.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any, Callable, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit.errors import InputError

T = TypeVar("T")


class UnreadableFile(InputError, ValueError):
    """A user file that cannot be read or parsed: an InputError (exit 2, one line naming the file), and a ValueError
    too, so that a caller which turns a malformed file into its own verdict (a bundle's preflight) still catches it."""


MAX_BYTES = 64 * 2**20
MAX_DATASET_BYTES = 256 * 2**20
MAX_DEPTH = 64  # envkit's own JSON documents nest fewer than 10 deep


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def read_bytes(path: str, what: str, fix: str, limit: int = MAX_BYTES) -> bytes:
    """The file's bytes, at most `limit` of them, read in a bounded way; a device, a directory, a missing file or a
    larger one is one InputError naming it."""
    too_big = UnreadableFile(f"{what} {path} is larger than {_mib(limit)}, more than any {what} holds", fix)
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                raise UnreadableFile(f"{what} {path} is a device, not a file", fix)
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                raise too_big
            data = fh.read(limit + 1)  # a FIFO fed forever stops here
    except OSError as exc:
        raise UnreadableFile(f"cannot read {what} {path}: {exc.strerror or exc}", fix) from None
    except UnreadableFile:
        raise
    except ValueError:  # a NUL in the path: no file has that name
        raise UnreadableFile(f"cannot read {what} {path!r}: a path cannot hold a NUL character", fix) from None
    except MemoryError:
        raise too_big from None
    if len(data) > limit:
        raise too_big
    return data


def read_text(path: str, what: str, fix: str, limit: int = MAX_BYTES) -> str:
    """The file's UTF-8 text (newlines as Path.read_text gives them), at most `limit` bytes; else one InputError."""
    data = read_bytes(path, what, fix, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"{what} {path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_json(path: str, what: str, fix: str, limit: int = MAX_BYTES) -> Any:
    """A JSON file the user named (or envkit wrote and the user may have edited): read, parsed, one InputError else."""
    return parse_json(read_text(path, what, fix, limit), what, path, fix)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is beyond a float's range")
    return value


def _depth_ok(doc: Any, limit: int) -> bool:
    """Nested at most `limit` deep (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return True


def _number_problem(exc: ValueError) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return "it holds an integer of more than 4300 digits"
    return text.splitlines()[0] if text else type(exc).__name__


def parse_json(text: str, what: str, path: str, fix: str = "") -> Any:
    """The one JSON reader of user files: JSONDecodeError, nesting past MAX_DEPTH (or Python's recursion limit),
    NaN/Infinity and 5000-digit integers all become one InputError naming the file."""
    fix = fix or f"give the {what} envkit wrote, unedited"
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(f"cannot read {what} {path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", fix) from None
    except RecursionError:
        raise UnreadableFile(f"cannot read {what} {path}: nested too deeply (more than {MAX_DEPTH} levels)", fix) from None
    except ValueError as exc:
        raise UnreadableFile(f"cannot read {what} {path}: {_number_problem(exc)}", fix) from None
    if not _depth_ok(doc, MAX_DEPTH):
        raise UnreadableFile(f"cannot read {what} {path}: nested too deeply (more than {MAX_DEPTH} levels)", fix)
    return doc


def parse_file(path: str, what: str, fix: str, parse: Callable[[str], T], limit: int = MAX_BYTES) -> T:
    """Read and parse a file the user named; the parser's ValueError (or RecursionError) becomes one line naming
    the file and the fix."""
    text = read_text(path, what, fix, limit)
    try:
        return parse(text)
    except RecursionError:
        raise UnreadableFile(f"cannot read {what} {path}: nested too deeply", fix) from None
    except ValueError as exc:
        raise UnreadableFile(f"cannot read {what} {path}: {_number_problem(exc)}", fix) from None


def parse_toml(text: str, what: str, path: str) -> dict:
    fix = "fix the TOML syntax at the position named"
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UnreadableFile(f"{what} {path}: not valid TOML: {exc}", fix) from None
    except RecursionError:
        raise UnreadableFile(f"{what} {path}: not valid TOML: nested too deeply", "flatten the nested arrays or tables") from None
    except ValueError as exc:  # tomllib lets int()'s digit limit through
        raise UnreadableFile(f"{what} {path}: not valid TOML: {_number_problem(exc)}", "write the number with fewer digits") from None
