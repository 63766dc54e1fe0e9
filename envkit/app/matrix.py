"""The `envkit matrix` use cases: check the matrix (with what rests on inference), refresh its derived tables
from data/sources (or check them), and export a project's targets for CI."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from envkit.config import matrix_file, project_file
from envkit.core.export import FORMATS, export
from envkit.core.inferred import inferred_entries
from envkit.errors import InputError
from envkit.matrixgen import refresh as derived
from envkit.model.matrix import Matrix


def load(path: Optional[str]) -> Matrix:
    return matrix_file.load(path)


@dataclass(frozen=True)
class Checked:
    matrix: Matrix
    rows: dict[str, int]
    inferred: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": True, "path": self.matrix.path, "rows": self.rows, "inferred": self.inferred["total"],
                "inferred_kinds": self.inferred["kinds"], "inferred_that_can_name_an_artifact": self.inferred["can_name_artifact"]}


def check(path: Optional[str]) -> Checked:
    m = matrix_file.load(path)
    rows = {"cuda": len(m.cuda), "gpu": len(m.gpus), "torch": len(m.torch), "rocm": len(m.rocm), "dtk": len(m.dtk),
            "flash_attn": len(m.flash_attn), "vllm": len(m.vllm), "python": len(m.python)}
    return Checked(m, rows, inferred_entries(m))


@dataclass(frozen=True)
class Refreshed:
    path: Path
    sources: Path
    regions: tuple[str, ...]
    differs: tuple[tuple[str, int, str], ...]  # (region, rows, unified diff)
    rewritten: bool  # False: --check, or nothing differed

    @property
    def ok(self) -> bool:
        return self.rewritten or not self.differs

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": 1, "ok": self.ok, "path": str(self.path), "sources": str(self.sources),
                               "regions": list(self.regions)}
        if self.rewritten:
            doc["rewritten"] = [{"region": name, "rows": n} for name, n, _d in self.differs]
        else:
            doc["differs"] = [{"region": name, "rows": n, "diff": d} for name, n, d in self.differs]
        return doc


def refresh(matrix_path: Optional[str], sources: Optional[str], check_only: bool) -> Refreshed:
    """Derive the generated tables of matrix.toml; rewrite them unless check_only (a matrix that does not load is never written)."""
    path = Path(matrix_path) if matrix_path else matrix_file.default_path()
    src = Path(sources) if sources else derived.default_sources(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", "pass --matrix with a readable matrix.toml") from None
    diffs = tuple(derived.check(text, src))
    regions = tuple(r.name for r in derived.REGIONS)
    if check_only or not diffs:
        return Refreshed(path, src, regions, diffs, rewritten=False)
    new = derived.apply(text, src)
    matrix_file.parse(new, str(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return Refreshed(path, src, regions, diffs, rewritten=True)


def export_project(project: str, fmt: str, contexts: str, out: Optional[str]) -> Optional[str]:
    """The export's text, or None once written to `out`."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "pick one of them")
    text = export(project_file.load(project), fmt, contexts)
    if not out:
        return text
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}", "choose a writable -o path") from None
    return None
