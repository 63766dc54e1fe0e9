"""`envkit generate`: resolve (or replay a lock), plan, render, write. The adapters live here: reading
the templates, the site file and the lock, and writing the output directory all at once.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import __version__
from . import matrix as mx
from .errors import InputError
from .matrix import Matrix
from .plan import BuildPlan, Options, base_os, plan
from .render import Templates, render
from .resolve import Result, parse_query, resolve
from .site import Site
from .site import load as load_site
from .userfile import read_text

LOCK_NAME = "envkit.lock.json"
FLAG_ORDER = ("gpu", "driver", "platform", "cuda", "rocm", "dtk", "python", "torch", "flash_attn", "vllm", "kernels")


def templates_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "data" / "dockerfiles", here.parent / "dockerfiles"):
        if (candidate / "fragments").is_dir():
            return candidate
    raise InputError("envkit's Dockerfile templates are missing from this install", "reinstall envkit (pip install envkit)")


def load_templates(root: Optional[Path] = None) -> Templates:
    root = root or templates_dir()
    fragments = {p.stem: p.read_text(encoding="utf-8") for p in sorted((root / "fragments").glob("*.Dockerfile"))}
    scripts = {p.name: p.read_bytes() for p in sorted((root / "scripts").iterdir()) if p.is_file()}
    scripts["selftest.py"] = (Path(__file__).resolve().parent / "selftest.py").read_bytes()  # runs inside images too
    return Templates(fragments, scripts)


def matrix_sha256(m: Matrix) -> str:
    return hashlib.sha256(Path(m.path).read_bytes()).hexdigest()


def command_line(flags: dict[str, str], site: Site, opts: Options, lock: Optional[str]) -> str:
    parts = ["envkit", "generate"]
    if lock:
        parts += ["--lock", lock]
    else:
        parts += [f"--{k.replace('_', '-')}={flags[k]}" for k in FLAG_ORDER if k in flags]
    if site.given:
        parts += ["--mirror", site.path]
    if opts.offline:
        parts.append("--offline")
    if opts.host_march != Options().host_march:
        parts.append(f"--host-march={opts.host_march}")
    return " ".join(shlex.quote(p) for p in parts)


def _resolve(m: Matrix, flags: dict[str, str]) -> Result:
    q = parse_query(m, **{k: flags.get(k) for k in FLAG_ORDER})
    return resolve(m, q)


def solve(m: Matrix, flags: dict[str, str], site: Site) -> tuple[Result, dict[str, str]]:
    """Resolve; with no --python, prefer the base image's own Python when it keeps the same torch."""
    result = _resolve(m, flags)
    sol = result.solution
    if sol is None or "python" in flags:
        return result, flags
    try:
        _, _, osr = base_os(m, sol, site)
    except InputError:
        return result, flags
    if osr.python != sol.python:
        alt_flags = {**flags, "python": str(osr.python)}
        alt = _resolve(m, alt_flags)
        if alt.solution is not None and alt.solution.torch == sol.torch and alt.solution.vllm == sol.vllm \
                and alt.solution.flash_attn == sol.flash_attn:
            return alt, {**flags, "python": str(osr.python)}
    return result, flags


def read_lock(path: str, m: Matrix) -> tuple[dict[str, str], dict]:
    text = read_text(path, "lock file", "give the envkit.lock.json written by envkit generate")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"lock file {path} is not JSON ({exc.msg} at line {exc.lineno})", "regenerate it with envkit generate") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("query"), dict) or "solution" not in doc:
        raise InputError(f"lock file {path} is not an envkit lock (schema 1 with query and solution)", "regenerate it with envkit generate")
    return {str(k): str(v) for k, v in doc["query"].items()}, doc


def check_lock(path: str, doc: dict, result: Result) -> None:
    """The lock replays only if today's matrix resolves its query to the very same solution."""
    if result.solution is None:
        first = result.conflicts[0].message if result.conflicts else "no solution"
        raise InputError(f"lock file {path} no longer resolves: {first}", "regenerate the lock, or pass the matrix it was made with (--matrix)")
    now = result.solution.to_dict()
    then = doc["solution"]
    if now != then:
        diffs = [k for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k)]
        raise InputError(f"lock file {path} resolves differently with this matrix (changed: {', '.join(diffs)})",
                         "regenerate the lock with envkit generate, or pass the matrix it was made with (--matrix)")


def lock_doc(m: Matrix, flags: dict[str, str], result: Result, site: Site, opts: Options) -> dict:
    assert result.solution is not None
    return {
        "schema": 1,
        "envkit": __version__,
        "matrix_sha256": matrix_sha256(m),
        "query": {k: flags[k] for k in FLAG_ORDER if k in flags},
        "generate": {"offline": opts.offline, "site": site.path or None, "host_march": opts.host_march},
        "solution": result.solution.to_dict(),
    }


@dataclass(frozen=True)
class Generated:
    plan: BuildPlan
    result: Result
    files: dict[str, bytes]
    command: str


def generate(flags: dict[str, str], *, matrix_path: Optional[str] = None, lock: Optional[str] = None,
             mirror: Optional[str] = None, opts: Options = Options()) -> Generated:
    m = mx.load(matrix_path)
    site = load_site(mirror) if mirror else Site()
    if lock:
        if any(flags.values()):
            raise InputError("--lock replays a resolved query; resolve flags cannot be combined with it",
                             "drop the resolve flags, or drop --lock to resolve anew")
        flags, doc = read_lock(lock, m)
        result = _resolve(m, flags)
        check_lock(lock, doc, result)
    else:
        flags = {k: v for k, v in flags.items() if v}
        result, flags = solve(m, flags, site)
    if result.solution is None:
        return Generated(None, result, {}, "")  # type: ignore[arg-type]
    p = plan(m, result.solution, site, opts)
    command = command_line(flags, site, opts, lock)
    files = render(p, load_templates(), command, lock_doc(m, flags, result, site, opts))
    return Generated(p, result, files, command)


GENERATED_LIST = "envkit/.generated"


def write_tree(out: str, files: dict[str, bytes], force: bool) -> None:
    """Write the generated files into `out` without ever deleting what envkit did not write.

    Everything is rendered before this runs; files are staged in a temp dir inside `out` and
    renamed into place one by one (same filesystem), so a failure leaves the previous set or the
    new one per file, never a truncated file. Files a previous generation wrote and this one does
    not are removed (listed in envkit/.generated); carried artifacts and user files are never touched.
    """
    try:
        target = Path(out).resolve()
        if target.exists() and not target.is_dir():
            raise InputError(f"output {out} exists and is not a directory", "choose another -o DIR")
        if target.exists():
            ours = (target / LOCK_NAME).is_file()
            keep = {"wheelhouse", "sources", "debs", "images", "manifest.json"}
            foreign = sorted(p.name for p in target.iterdir() if p.name not in keep)
            if foreign and not ours and not force:
                raise InputError(f"output {out} holds files envkit did not write ({', '.join(foreign[:3])})",
                                 "choose an empty -o DIR, or pass --force to write beside them")
        target.mkdir(parents=True, exist_ok=True)
        target.chmod(0o755)
        previous = set()
        listing = target / GENERATED_LIST
        if listing.is_file():
            previous = {line for line in listing.read_text().splitlines() if line and ".." not in line}
        files = {**files, GENERATED_LIST: ("\n".join(sorted(files)) + "\n").encode()}
        tmp = Path(tempfile.mkdtemp(prefix=".envkit-staging-", dir=target))
        try:
            for rel, data in files.items():
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
                p.chmod(0o755 if rel.endswith((".sh", ".py")) else 0o644)
            for rel in files:
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for rel in sorted(previous - set(files)):
            stale = target / rel
            if stale.is_file():
                stale.unlink()
    except OSError as exc:
        raise InputError(f"cannot write to {out}: {exc.strerror or exc}", "choose a writable -o DIR") from None
