"""Regenerate the derived regions of matrix.toml from the extracts in data/sources, or check that
matrix.toml still says what they say (`envkit matrix refresh [--check]`).

A region is the text between

    # >>> derived: NAME (envkit matrix refresh; from data/sources/DIR; do not edit by hand)
    # <<< derived: NAME

Everything outside the regions is written by hand, each row with its source and, where it states a
fact no primary file states, its reason.
"""
from __future__ import annotations

import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config.matrix_file import ENGINE_TABLES
from ..errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from . import toml_emit


@dataclass(frozen=True)
class Region:
    name: str  # the TOML table the rows belong to
    directory: str  # under data/sources
    derive: Callable[[dict[str, Any]], list[dict[str, Any]]]  # file name -> parsed extract
    pattern: str = "*.json"


def _flash_attn(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_flash_attn import derive

    return derive(list(docs.values()))


def _torch(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_torch import derive

    return derive(docs)


def _vllm(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_vllm import derive

    return derive(docs)


def _triton(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_triton import derive_triton

    return derive_triton(docs)


def _trtllm_backend(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_triton import derive_backend

    return derive_backend(docs)


def _trtllm(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_triton import derive_trtllm

    return derive_trtllm(docs)


def _pip_engine(table: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    def derive(docs: dict[str, Any]) -> list[dict[str, Any]]:
        from .derive_triton import derive_pip_engine

        return derive_pip_engine(table, docs)
    return derive


def _ftllm_source(docs: dict[str, Any]) -> list[dict[str, Any]]:
    from .derive_triton import derive_ftllm_source

    return derive_ftllm_source(docs)


_OWN_DERIVERS: dict[str, tuple[Callable[[dict[str, Any]], list[dict[str, Any]]], str]] = {
    "ftllm_source": (_ftllm_source, "ftllm-source*"),  # fastllm's tags, read from its git history (matrixgen/ftllm_source.py)
}

REGIONS: tuple[Region, ...] = (
    Region("flash_attn", "flash-attn", _flash_attn),
    Region("torch", "torch", _torch),
    Region("vllm", "vllm", _vllm),
    Region("triton", "triton", _triton),
    Region("trtllm_backend", "triton", _trtllm_backend),
    Region("trtllm", "trtllm", _trtllm, "*.toml"),
    # the pip engines' tables, as the matrix loader names them: each from its hand-collected TABLE.toml, or its own deriver
    *(Region(name, "engines", *_OWN_DERIVERS.get(name, (_pip_engine(name), f"{name}.toml"))) for name in ENGINE_TABLES),
)

_BEGIN = "# >>> derived: {name} (envkit matrix refresh; from data/sources/{directory}; do not edit by hand)"
_END = "# <<< derived: {name}"


def default_sources(matrix_path: Path) -> Path:
    return matrix_path.resolve().parent / "data" / "sources"


def load_docs(sources: Path, region: Region) -> dict[str, Any]:
    d = sources / region.directory
    if not d.is_dir():
        raise InputError(f"no extracts for {region.name}: {d} is not a directory",
                         "run from a checkout of envkit (data/sources is not installed with the package) or pass --sources")
    docs = {}
    for p in sorted(d.glob(region.pattern)):
        try:
            text = p.read_text(encoding="utf-8")
            docs[p.name] = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            raise InputError(f"{p}: not a readable extract ({exc})", "re-run the extraction for this project") from None
    return docs


def render(sources: Path, region: Region) -> str:
    docs = load_docs(sources, region)
    try:
        rows = region.derive(docs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # DeriveError is a ValueError
        raise InputError(f"data/sources/{region.directory}: the extracts do not derive {region.name} rows ({type(exc).__name__}: {exc})",
                          "re-run the extraction for this project (scripts/refresh-sources.sh) or correct the extract by hand") from None
    return toml_emit.table_rows(region.name, rows)


def _span(text: str, region: Region) -> tuple[int, int]:
    begin = _BEGIN.format(name=region.name, directory=region.directory)
    end = _END.format(name=region.name)
    b = text.find(begin + "\n")
    e = text.find(end + "\n")
    if b < 0 or e < 0 or e < b:
        raise InputError(f"matrix.toml has no derived region for {region.name}",
                         f"put the two marker lines `{begin}` and `{end}` where the rows belong")
    return b + len(begin) + 1, e


def apply(text: str, sources: Path, regions: tuple[Region, ...] = REGIONS) -> str:
    for region in regions:
        start, stop = _span(text, region)
        text = text[:start] + render(sources, region) + text[stop:]
    return text


def _blocks(text: str) -> list[str]:
    return [b for b in re.split(r"(?m)^(?=\[\[)", text) if b.strip()]


def check(text: str, sources: Path, regions: tuple[Region, ...] = REGIONS) -> list[tuple[str, int, str]]:
    """(region, rows that differ, unified diff) for every region whose text differs from what the
    sources derive."""
    out = []
    for region in regions:
        start, stop = _span(text, region)
        want = render(sources, region)
        have = text[start:stop]
        if have != want:
            w, h = set(_blocks(want)), set(_blocks(have))
            rows = max(len(w - h), len(h - w))
            diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                                f"matrix.toml ({region.name})", f"derived from data/sources/{region.directory}", n=1))
            out.append((region.name, rows, diff))
    return out


_TABLE_HEADER = re.compile(r"""^\s*\[\[\s*["']?([A-Za-z0-9_-]+)["']?\s*\]\]""")  # [[torch]], [[ torch ]], [["torch"]]
_REGION_BEGIN = re.compile(r"^\s*# >>> derived: (\S+)")
_REGION_END = re.compile(r"^\s*# <<< derived: (\S+)")


@dataclass(frozen=True)
class Layout:
    """Which tables of a matrix file are derived (their rows between a region's markers) and which are kept by hand, and
    what breaks the two parts' order: a derived table's row outside its region, or a hand-kept table below the first
    region (matrix.toml keeps the hand-kept tables first, then the derived ones: docs/matrix-provenance.md)."""

    derived: tuple[str, ...]
    hand_kept: tuple[str, ...]
    problems: tuple[tuple[int, str], ...]  # (line, what is wrong there)
    begins: tuple[tuple[str, int], ...] = ()  # (region, the line of its begin marker)


def _markers(number: int, line: str, open_: tuple[str, int] | None, problems: list[tuple[int, str]]) -> tuple[str, int] | None:
    """The region open after `line` (its name and first line), given the one open before; a marker out of turn is a problem."""
    if (m := _REGION_BEGIN.match(line)) is not None:
        if open_ is not None:
            problems.append((number, f"region {m.group(1)} begins inside region {open_[0]} (line {open_[1]}): close it first "
                                     f"with `{_END.format(name=open_[0])}`"))
        return m.group(1), number
    if (m := _REGION_END.match(line)) is not None:
        if open_ is None:
            problems.append((number, f"`{line.strip()}` closes no region: no `# >>> derived: {m.group(1)}` line opens one above"))
        elif m.group(1) != open_[0]:
            problems.append((number, f"`{line.strip()}` closes region {open_[0]} (line {open_[1]}): "
                                     f"write `{_END.format(name=open_[0])}`"))
        return None
    return open_


def layout(text: str) -> Layout:
    """The layout of a matrix file's text; a file without regions is all hand-kept, with no problem."""
    open_: tuple[str, int] | None = None
    first_region = 0
    rows: dict[str, list[tuple[int, str | None]]] = {}
    problems: list[tuple[int, str]] = []
    begins: list[tuple[str, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        before = open_
        open_ = _markers(number, line, open_, problems)
        if open_ is not None and open_ != before:
            first_region = first_region or number
            begins.append(open_)
        elif before is None and open_ is None and (m := _TABLE_HEADER.match(line)) is not None:
            rows.setdefault(m.group(1), []).append((number, None))
        elif open_ is not None and (m := _TABLE_HEADER.match(line)) is not None:
            rows.setdefault(m.group(1), []).append((number, open_[0]))
            if m.group(1) != open_[0]:
                problems.append((number, f"a [[{m.group(1)}]] row inside the derived region of {open_[0]} (line {open_[1]}): "
                                         f"`envkit matrix refresh` would overwrite it; move it out"))
    if open_ is not None:
        problems.append((open_[1], f"region {open_[0]} is never closed: add `{_END.format(name=open_[0])}` after its rows"))
    derived = tuple(t for t, at in rows.items() if any(r == t for _, r in at))
    for table, at in rows.items():
        for number, inside in at:
            if table in derived and inside is None:
                problems.append((number, f"a [[{table}]] row kept by hand, but [[{table}]] is derived: `envkit matrix refresh` "
                                         f"writes its rows between its region's markers; put the fact in its extract under data/sources"))
            elif table not in derived and inside is None and first_region and number > first_region:
                problems.append((number, f"[[{table}]] is kept by hand and sits among the derived tables (below line {first_region}, "
                                         "the first derived region): move it above, with the other hand-kept tables"))
                break  # the table's first misplaced row names it
    return Layout(derived, tuple(t for t in rows if t not in derived), tuple(sorted(problems)), tuple(begins))
