"""The Python interpreters of a host that a user would expect doctor to look at, and their stacks: the active virtual
environment and conda environment, `python3` on PATH, conda's environments, and any named with --python. Each is asked
by envkit's probe (`probe.py --section python`, standard library only) in its own process, all at once; the host's
own facts (GPUs, driver, OS) are collected once, apart."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from envkit import data
from envkit.errors import InputError

PROBE_TIMEOUT = 60.0  # seconds one interpreter's probe may take (importlib.metadata over a large site-packages)


@dataclass(frozen=True)
class Interpreter:
    path: str  # as found or given (a venv's bin/python, not the base interpreter it links to)
    why: str  # "--python", "active virtual environment", "active conda environment", "python3 on PATH", "conda environment"


def _env_python(prefix: Optional[str]) -> Optional[str]:
    if not prefix:
        return None
    for name in ("bin/python", "bin/python3"):
        p = Path(prefix) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _conda_envs(environ: dict[str, str]) -> list[str]:
    """conda's own list of environments (~/.conda/environments.txt), and the envs/ beside its base."""
    found: list[str] = []
    listing = Path(environ.get("HOME", "~")).expanduser() / ".conda" / "environments.txt"
    try:
        found += [line.strip() for line in listing.read_text().splitlines() if line.strip()]
    except OSError:
        pass
    exe = environ.get("CONDA_EXE")
    if exe:
        base = Path(exe).resolve().parent.parent
        found.append(str(base))
        envs = base / "envs"
        if envs.is_dir():
            found += sorted(str(p) for p in envs.iterdir() if p.is_dir())
    return found


def discover(given: tuple[str, ...] = (), environ: Optional[dict[str, str]] = None) -> list[Interpreter]:
    """--python PATH (each, in order) if given; else the active environment, python3 on PATH and conda's environments.
    One entry per environment (a venv's python is its own environment even where it links to the base's)."""
    env = dict(os.environ if environ is None else environ)
    if given:
        out = []
        for path in given:
            exe = shutil.which(path) if os.sep not in path else path
            if not exe or not os.path.isfile(exe):
                raise InputError(f"--python {path}: no such interpreter",
                                 "give the path of a python executable, e.g. --python /opt/conda/envs/serve/bin/python")
            out.append(Interpreter(exe, "--python"))
        return out
    found: list[tuple[Optional[str], str]] = [(_env_python(env.get("VIRTUAL_ENV")), "active virtual environment"),
             (_env_python(env.get("CONDA_PREFIX")), "active conda environment"),
             (shutil.which("python3", path=env.get("PATH")), "python3 on PATH")]
    found += [(_env_python(p), "conda environment") for p in _conda_envs(env)]
    out, seen = [], set()
    for exe_path, why in found:
        if exe_path is None:
            continue
        key = os.path.abspath(os.path.dirname(os.path.dirname(exe_path)))  # the environment's prefix
        if key not in seen:
            seen.add(key)
            out.append(Interpreter(exe_path, why))
    return out


def primary(given: tuple[str, ...] = ()) -> Optional[Interpreter]:
    """The Python a user means by "this host's Python": --python's first, else the active environment's, else python3."""
    found = discover(given)
    return found[0] if found else None


def probe_python(interp: Interpreter, deep: bool = False) -> dict[str, Any]:
    """The probe's python section (and --deep's) as that interpreter sees it; a failure is the record's probe_error."""
    cmd = [interp.path, str(data.INIMAGE / "probe.py"), "--section", "python"] + (["--deep"] if deep else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT + (120 if deep else 0), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"probe_error": f"{interp.path} did not answer within {PROBE_TIMEOUT:.0f} s"}
    except OSError as exc:
        return {"probe_error": f"{interp.path} could not start: {exc.strerror}"}
    start = p.stdout.find("{")
    try:
        rec = json.loads(p.stdout[start:]) if start >= 0 else None
    except ValueError:
        rec = None
    if not isinstance(rec, dict):
        last = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"probe_error": f"{interp.path} exited {p.returncode}: {last}"}
    return rec


def probe_all(interps: list[Interpreter], deep: bool = False) -> list[dict[str, Any]]:
    """Every interpreter's record, in order, probed concurrently; envkit's own is asked like any other."""
    if not interps:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(interps))) as pool:
        return list(pool.map(lambda i: probe_python(i, deep), interps))


def is_self(interp: Interpreter) -> bool:
    return os.path.abspath(os.path.dirname(os.path.dirname(interp.path))) == os.path.abspath(sys.prefix)
