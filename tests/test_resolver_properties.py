"""Hypothesis properties of the resolver over values drawn from the matrix itself."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envkit.config import matrix_file as matrix
from envkit.model.matrix import CC
from envkit.core.resolve import parse_query, resolve
from envkit.core.resolve.checks import Ctx, vllm_pick

M = matrix.load()
GPUS = [g.name for g in M.gpus]
TORCH = sorted({str(b.version) for b in M.torch if b.platform == "cuda"})
FA = [str(f.version) for f in M.flash_attn]
VLLM = [str(v.version) for v in M.vllm]
CUDA = [str(c.version) for c in M.cuda]
PY = [str(p.version) for p in M.python]
DRIVERS = ["450.80.02", "470.82.01", "525.60.13", "535.104.05", "550.54.15", "570.124.06", "580.65.06"]

queries = st.fixed_dictionaries({}, optional={
    "gpu": st.sampled_from(GPUS),
    "driver": st.sampled_from(DRIVERS),
    "cuda": st.sampled_from(CUDA),
    "python": st.sampled_from(PY),
    "torch": st.sampled_from(TORCH),
    "flash_attn": st.sampled_from(FA),
    "vllm": st.sampled_from(VLLM),
    "kernels": st.sampled_from(["layer_norm", "rotary", "layer_norm,rotary"]),
})

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(queries)
def test_every_solution_satisfies_every_rule(args: dict) -> None:
    q = parse_query(M, **args)
    r = resolve(M, q, suggest=False)
    if not r.ok:
        assert r.conflicts, "a failed resolve always explains itself"
        return
    s = r.solution
    t = s.torch
    assert q.torch is None or t.version in q.torch
    assert q.torch_local is None or t.local == q.torch_local
    assert s.python in t.python
    assert q.python is None or s.python == q.python
    if q.gpu is not None:
        assert s.platform in (q.gpu.platform, "cpu")
        if s.platform == "cuda":
            assert t.runs_on_cc(q.gpu.cc)
            assert s.cuda.can_target(q.gpu.cc)
    if s.platform == "cuda":
        assert q.cuda is None or t.toolkit == q.cuda
        assert s.cuda.version.major == t.toolkit.major and s.cuda.version >= t.toolkit
        assert q.driver is None or q.driver >= s.cuda.min_driver
        assert q.driver is None or s.min_driver is None or q.driver >= s.min_driver
    if q.vllm is not None:
        v = s.vllm
        assert v is not None and v.version in q.vllm
        assert t.version in v.torch and s.python in v.python
        if s.platform == "cuda":
            pick, _ = vllm_pick(Ctx(M, q), t, s.python, v)
            assert pick is not None and (pick.cuda == t.toolkit or (pick.on_pypi and t.pypi))
    if q.flash_attn is not None or q.kernels:
        f = next(x for x in M.flash_attn if x.version == s.flash_attn.version)
        assert q.flash_attn is None or f.version in q.flash_attn
        assert t.version in f.torch and s.python in f.python
        assert set(q.kernels) <= set(f.kernels)
        if q.gpu is not None and q.gpu.cc is not None:
            assert q.gpu.cc >= CC(8, 0)
        if s.flash_attn.build == "wheel":
            w = s.flash_attn.wheel
            assert f"torch{t.version.major}.{t.version.minor}cxx11abi{str(t.cxx11abi).upper()}" in w
            assert f"-cp{s.python.major}{s.python.minor}-" in w
        else:
            assert s.cuda is None or s.cuda.version in f.nvcc


@SETTINGS
@given(queries, st.data())
def test_removing_a_constraint_never_makes_it_worse(args: dict, data: st.DataObject) -> None:
    r = resolve(M, parse_query(M, **args), suggest=False)
    if not r.ok or not args:
        return
    key = data.draw(st.sampled_from(sorted(args)))
    looser = resolve(M, parse_query(M, **{k: v for k, v in args.items() if k != key}), suggest=False)
    assert looser.ok, f"dropping {key} lost the solution"
    assert looser.solution.torch.version >= r.solution.torch.version
