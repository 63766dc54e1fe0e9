"""The serving engines installed from their own wheels beside torch: `--engine NAME[==VERSION]` for each engine the
registry (model/engine_specs.py) puts on the pip road, whose rules are the module of its name here (fastllm.py,
sglang.py, paddle.py: each answers common.Rules).

Each release is a candidate, newest first. Its own facts are checked against the query first (the GPU, the driver,
the platform, Python); then its pins become constraints of an ordinary resolve (sglang's torch pin and CUDA major,
Paddle's CUDA, the Pythons its wheels are built for), and the stack that resolve finds carries the engine's packages.
The answer is the first candidate whose stack resolves, else the conflicts of the nearest miss.
"""
from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Callable, Iterator, Optional, Union, cast

from envkit.core.resolve.pip_engines.common import UNCHECKED, Row, Rules, platform_of
from envkit.model.engine_specs import PIP_ENGINES
from envkit.model.matrix import Matrix
from envkit.model.solution import Conflict, Query, Result


def rules(engine: str) -> Rules:
    """The rules module of a pip engine of the registry."""
    if engine not in PIP_ENGINES:
        raise KeyError(engine)
    return cast(Rules, importlib.import_module(f"{__name__}.{engine}"))


def releases(m: Matrix, engine: str, source: bool) -> list[str]:
    """Every version `--engine ENGINE==VERSION` may pin."""
    return rules(engine).releases(m, source)


def _row_conflicts(m: Matrix, q: Query, r: Rules, row: Row) -> tuple[list[Conflict], list[str]]:
    """What the engine's own facts say against the GPU, the driver, the platform and Python: conflicts and notes."""
    out, notes = r.conflicts(m, q, row, platform_of(q))
    if q.python is not None and r.python_ok(row, q.python) is False:
        out.append(Conflict("engine.python", f"{r.label(row)} has no wheel for Python {q.flags().get('python')} ({r.python_text(row)})",
                            f"use a Python it supports ({r.python_text(row)})", row.source))
    return out, notes


def _queries(m: Matrix, q: Query, r: Rules, row: Row) -> Iterator[Union[Query, Conflict]]:
    """The ordinary resolves the release's pins make of the query, one per Python it may take (or the conflict that
    forbids one): a pin may hold on one Python only (torch 2.5.1 pins triton below Python 3.13)."""
    base = replace(q, engine=None, engine_version=None, engine_source=False)
    if q.python is not None:
        yield r.constrain(m, q, row, base, platform_of(q))
        return
    for py in (p.version for p in m.python if r.python_ok(row, p.version) is not False):
        yield r.constrain(m, replace(q, python=py), row, replace(base, python=py), platform_of(q))


def resolve_pip_engine(m: Matrix, q: Query, solve: Callable[[Query], Result],
                       fit: Optional[Callable[[Query], Result]] = None) -> Result:
    """The newest release of q.engine whose pins resolve into a stack, or the conflicts of the nearest miss. `fit`
    resolves without explaining a miss (no nearest-miss search): tried first over every release, so the misses before
    the first fit cost no explanation; only when nothing fits are they explained, by `solve`."""
    r = rules(q.engine or "")
    rows = r.candidates(m, q, platform_of(q))
    if not rows:
        pin = f"=={q.engine_version}" if q.engine_version else ""
        return Result(q, None, (Conflict("engine.no-release", f"no {q.engine}{pin} release for platform {platform_of(q)}",
                                         "pick another --engine VERSION or platform", "doc:matrix.toml"),))
    if fit is not None:
        found, _ = _first_release(m, q, r, rows, fit)
        if found is not None:
            return found
    found, best = _first_release(m, q, r, rows, solve)
    if found is not None:
        return found
    conflicts = tuple(dict.fromkeys(best or []))
    if q.engine_version is not None and any(c.rule in _PINNED_BY_THE_ENGINE for c in conflicts):
        conflicts = _release_fix(m, q, r, conflicts, fit or solve)
    return Result(q, None, conflicts)


# the stack's torch build and CUDA, which an engine release pins, and the release's own GPU archs: a fix that moves them
# cannot hold under the pin
_PINNED_BY_THE_ENGINE = frozenset({"torch.gpu-arch", "gpu.toolkit-arch", "torch.no-variant", "engine.gpu-arch"})


def _release_fix(m: Matrix, q: Query, r: Rules, conflicts: tuple[Conflict, ...],
                 fit: Callable[[Query], Result]) -> tuple[Conflict, ...]:
    """A pinned release's stack fails under its own pins (its torch, its CUDA): where another release resolves for the
    same query, the fix of those conflicts names it; else the fixes stand (they may ask to drop a flag of the user's)."""
    unpinned = replace(q, engine_version=None)
    found: Optional[Result] = None
    passed_unchecked = False  # a newer release resolves, but only because its arch list is not in the matrix
    for row in r.candidates(m, unpinned, platform_of(q)):  # newest first; the first whose arch list was checked wins
        res, _ = _first_release(m, unpinned, r, [row], fit)
        if res is None or res.solution is None or res.solution.engine is None:
            continue
        if not any(n.endswith(UNCHECKED) for n in res.solution.notes):
            found = res
            break
        found, passed_unchecked = found or res, True
    if found is None or found.solution is None or found.solution.engine is None:
        return conflicts
    use = f"use --engine {q.engine}=={found.solution.engine.version}, the newest release that resolves here"
    if passed_unchecked and not any(n.endswith(UNCHECKED) for n in found.solution.notes):
        use += " with its arch list checked"
    why = {"engine.gpu-arch": f"{q.engine} {q.engine_version} is not built for this GPU"}
    return tuple(replace(c, fix=f"{use} ({why.get(c.rule, f'{q.engine} {q.engine_version} pins the torch and CUDA of this stack')})")
                 if c.rule in _PINNED_BY_THE_ENGINE else c for c in conflicts)


def _first_release(m: Matrix, q: Query, r: Rules, rows: list[Row],
                   solve: Callable[[Query], Result]) -> tuple[Optional[Result], Optional[list[Conflict]]]:
    """The answer of the first release (newest first) whose pins resolve, or None and the fewest conflicts seen."""
    best: Optional[list[Conflict]] = None
    for row in rows:
        conflicts, notes = _row_conflicts(m, q, r, row)
        if conflicts:
            best = conflicts if best is None or len(conflicts) < len(best) else best
            continue
        for sub in _queries(m, q, r, row):
            if isinstance(sub, Conflict):
                best = [sub] if best is None or len(best) > 1 else best
                continue
            res = solve(sub)
            miss, arch, arch_note = r.compile_arch(row, q, res)
            if miss is not None:
                best = [miss] if best is None or len(best) > 1 else best
                continue
            if res.solution is not None:
                pkgs = replace(r.packages(row, res.solution.platform), cuda_arch=arch)
                sol = replace(res.solution, engine=pkgs, notes=res.solution.notes + tuple(notes) + ((arch_note,) if arch_note else ()),
                              sources=tuple(dict.fromkeys(res.solution.sources + (row.source,))))
                return Result(q, sol, warnings=res.warnings), best
            if res.conflicts and (best is None or len(res.conflicts) < len(best)):
                best = list(res.conflicts)
    return None, best
