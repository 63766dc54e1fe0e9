"""The build context on disk: the Dockerfile fragments read, and a generated tree written whole
(staged, then renamed; files envkit did not write are never removed)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from envkit import data
from envkit.config.lockfile import LOCK_NAME
from envkit.core.render import Templates
from envkit.errors import InputError

IN_IMAGE_SCRIPTS = ("selftest.py", "build_flash_attn.py", "apply-site.sh")


def templates_dir() -> Path:
    root = data.dockerfiles()
    if not (root / "fragments").is_dir():
        raise InputError("envkit's Dockerfile templates are missing from this install", "reinstall envkit")
    return root


def load_templates(root: Optional[Path] = None) -> Templates:
    root = root or templates_dir()
    fragments = {p.stem: p.read_text(encoding="utf-8") for p in sorted((root / "fragments").glob("*.Dockerfile"))}
    scripts = {name: (data.INIMAGE / name).read_bytes() for name in IN_IMAGE_SCRIPTS}
    return Templates(fragments, scripts)


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
            for rel, content in files.items():
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content)
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
