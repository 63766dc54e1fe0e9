"""The git adapter of the maintainers' extractors (*_source.py): read files and refs of a clone, bare or not."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def git_ok(repo: Path, *args: str) -> Optional[str]:
    """git's output, or None where git fails (a ref or path that is not there)."""
    try:
        return git(repo, *args)
    except subprocess.CalledProcessError:
        return None


def show(repo: Path, ref: str, path: str) -> Optional[str]:
    """The file at `ref`, or None where the ref does not hold it."""
    return git_ok(repo, "show", f"{ref}:{path}")
