"""The whole GPU x torch x flash-attn and GPU x vLLM sweep: no solution names a flash-attn wheel
outside the derived wheel sets, no solution puts a GPU on a build without its arch, and every vLLM solution is one
the planner builds (resolve and generate agree)."""
from __future__ import annotations

import pytest
from packaging.version import Version

from envkit.config import matrix_file as matrix
from envkit.model.matrix import CC, runs_on, sass_runs_on
from envkit.core.resolve import parse_query, resolve
from envkit.core.planner import plan
from envkit.core.resolve.checks import Ctx, vllm_pick
from envkit.model.plan import Options
from envkit.model.site import Site

M = matrix.load()


def _one_per_resolution_group(gpus):
    """A resolve reads a GPU row only through its vendor, arch, machine, first driver and first DTK:
    rows equal in those resolve alike, so one of each group stands for the others."""
    seen: dict[tuple, object] = {}
    for g in gpus:
        seen.setdefault((g.vendor, g.arch, g.machine, g.min_driver, g.min_dtk), g)
    return list(seen.values())


GPUS = _one_per_resolution_group([g for g in M.gpus if g.vendor in ("nvidia", "amd")])
TORCH = sorted({str(b.version) for b in M.torch if b.platform in ("cuda", "rocm")}, key=Version)


def _fa_wheel_names() -> dict[str, Version]:
    """Every wheel the derived wheel sets hold, with the nvcc that built it (the workflow's names:
    CPython 3.7 wheels carry the cp37m ABI tag)."""
    names = {}
    for f in M.flash_attn:
        for w in f.wheels:
            for py in w.python:
                for abi in w.abi:
                    cp = f"cp{py.major}{py.minor}"
                    abi_tag = cp + ("m" if py < Version("3.8") else "")
                    names[f"flash_attn-{f.version}+cu{w.cuda}torch{w.torch_minor}cxx11abi{str(abi).upper()}-{cp}-{abi_tag}-{w.platform}.whl"] = w.nvcc
    return names


FA_WHEELS = _fa_wheel_names()


def _check_gpu_fit(q, s) -> None:
    g = q.gpu
    t = s.torch
    assert t.archs_known, f"{t.pin}: a GPU was put on a build without a stated arch list"
    if s.platform == "cuda":
        assert t.runs_on_cc(g.cc), f"{t.pin} has no kernels for {g.arch}"
        assert s.cuda.can_target(g.cc)
    elif s.platform == "rocm":
        assert g.arch in t.archs, f"{t.pin} is not built for {g.arch}"
    if s.flash_attn is not None:
        f = next(x for x in M.flash_attn if x.version == s.flash_attn.version)
        if s.flash_attn.build == "wheel":
            assert s.flash_attn.wheel in FA_WHEELS, f"{s.flash_attn.wheel} is in no derived wheel set"
            nvcc = FA_WHEELS[s.flash_attn.wheel]
            assert any(sass_runs_on(a, g.cc) for a in f.archs_for(nvcc)), f"{s.flash_attn.wheel} has no {g.arch} kernels"
        elif s.platform == "cuda":
            assert any(sass_runs_on(CC.parse(a), g.cc) for a in s.flash_attn.arch_list)
        else:
            assert g.arch in f.rocm_archs
    if s.vllm is not None and s.platform == "cuda":
        pick, _ = vllm_pick(Ctx(M, q), t, s.python, s.vllm)
        assert pick is not None and pick.archs is not None, f"vLLM {s.vllm.version}: no stated arch list"
        assert runs_on(pick.archs, pick.ptx, g.cc)
    if s.vllm is not None and s.platform == "rocm":
        assert g.arch in s.vllm.rocm_archs


@pytest.mark.parametrize("gpu", [g.name for g in GPUS])
def test_gpu_torch_flash_attn_sweep(gpu: str) -> None:
    solved = 0
    for tv in TORCH:
        for f in M.flash_attn:
            q = parse_query(M, gpu=gpu, torch=tv, flash_attn=str(f.version))
            r = resolve(M, q, suggest=False)
            if r.ok:
                solved += 1
                _check_gpu_fit(q, r.solution)
                plan(M, r.solution, Site(), Options())  # generate builds what resolve answers
            else:
                assert r.conflicts
    g = next(x for x in GPUS if x.name == gpu)
    if g.cc is not None and g.cc >= CC(8, 0):
        assert solved > 0, f"{gpu}: no torch x flash-attn pair resolves"


@pytest.mark.parametrize("gpu", [g.name for g in GPUS])
def test_gpu_vllm_sweep(gpu: str) -> None:
    for v in M.vllm:
        q = parse_query(M, gpu=gpu, vllm=f"=={v.version}")
        r = resolve(M, q, suggest=False)
        if r.ok:
            _check_gpu_fit(q, r.solution)
            assert r.solution.vllm.version == v.version
            plan(M, r.solution, Site(), Options())  # resolve answers what generate builds: no refusal after a solution
        else:
            assert r.conflicts


def test_every_named_flash_attn_wheel_is_derived_without_a_gpu() -> None:
    for tv in TORCH:
        for f in M.flash_attn:
            r = resolve(M, parse_query(M, torch=tv, flash_attn=str(f.version)), suggest=False)
            if r.ok and r.solution.flash_attn.build == "wheel":
                assert r.solution.flash_attn.wheel in FA_WHEELS
