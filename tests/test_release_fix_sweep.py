"""A pinned torch or vLLM that cannot run on the GPU (issue 27: fixes that work). Over one GPU per NVIDIA compute
capability and per AMD arch, every torch release and every vLLM release pinned: where the answer's torch.gpu-arch or
vllm.gpu-arch fix names another release, that release, put in the pin's place, resolves; where the fix says no
release resolves, none of the releases that could run on the GPU does."""
from __future__ import annotations

import functools
import re

import pytest

from envkit.config import matrix_file
from envkit.core.resolve import parse_query, resolve
from envkit.model.solution import Result

pytestmark = pytest.mark.slow

M = matrix_file.load()
NVIDIA = tuple({str(g.cc): g.name for g in M.gpus if g.vendor == "nvidia"}.values())
AMD = tuple({g.arch: g.name for g in M.gpus if g.vendor == "amd"}.values())
TORCH = sorted({str(b.version) for b in M.torch})
VLLM = sorted({str(v.version) for v in M.vllm})
FIX = re.compile(r"use (--(torch|vllm) (\S+))( --cuda (\S+))?, the newest")


def answer(flags: dict[str, str]) -> Result:
    return resolve(M, parse_query(M, **flags), suggest=False)


def gpu_flags(gpu: str) -> dict[str, str]:
    return {"gpu": gpu, "platform": "rocm"} if gpu in AMD else {"gpu": gpu}


@functools.cache
def pinned_answers() -> dict[tuple[str, str, str], Result]:
    out = {}
    for gpu in NVIDIA + AMD:
        for key, versions in (("torch", TORCH), ("vllm", VLLM)):
            for v in versions:
                out[(gpu, key, v)] = answer({**gpu_flags(gpu), key: v})
    return out


def release_fixes() -> list[tuple[tuple[str, str, str], str]]:
    return [(case, c.fix) for case, r in pinned_answers().items() for c in r.conflicts
            if c.rule == f"{case[1]}.gpu-arch" and ("the newest" in c.fix or c.fix.startswith("no "))]


def test_the_sweep_meets_both_kinds_of_fix():
    fixes = [fix for _, fix in release_fixes()]
    assert any(FIX.match(f) for f in fixes)
    assert any(f.startswith("no ") for f in fixes)


def test_a_release_a_fix_names_resolves_in_the_pins_place():
    for (gpu, key, _), fix in release_fixes():
        m = FIX.match(fix)
        if m is None:
            continue
        flags = {**gpu_flags(gpu), key: m.group(3)}
        if m.group(5):
            flags["cuda"] = m.group(5)
        assert answer(flags).solution is not None, (gpu, key, fix)


def test_where_the_fix_says_no_release_resolves_none_does():
    for (gpu, key, pin), fix in release_fixes():
        if not fix.startswith("no "):
            continue
        others = [v for v in (TORCH if key == "torch" else VLLM) if v != pin]
        fits = [v for v in others if pinned_answers()[(gpu, key, v)].solution is not None]
        assert fits == [], (gpu, key, pin, fix, fits[:3])
