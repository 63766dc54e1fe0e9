"""The resolver: a pure function from a Query (flags or host facts) to the newest consistent stack,
or to the conflicts that stand in the way, each naming its rule, its source and a fix.

Search: torch builds are walked newest first; for each, the CUDA/ROCm/DTK toolkit, Python, vLLM
and flash-attn are chosen. Every rule is a check that returns violations. A strict pass accepts
the first candidate with none. When there is none, a relaxed pass finds the candidate with the
fewest violations (branch and bound) and reports them: the conflicts of the nearest miss.

No hidden state: what is derived from the matrix once lives on it (Matrix.index, see model/matrix.py),
what one resolve shares between its checks lives in its Ctx. Rule ids: envkit/data/rules.toml.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Optional, TypeVar

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.core.resolve.base_image import image_python
from envkit.core.resolve.checks import (
    Ctx,
    check_flash_attn,
    check_python,
    check_toolkit,
    check_torch,
    check_vllm,
    driver_floor,
    flash_attn_archs,
    flash_attn_unary,
    vllm_pick,
    vllm_unary,
)
from envkit.core.resolve.engines import resolve_engine
from envkit.core.resolve.machine import AARCH64, aarch64_builds, aarch64_refusal, target_machine
from envkit.core.resolve.pip_engines import resolve_pip_engine
from envkit.core.resolve.query import KERNELS, given_version, local_builds, release_starts_with
from envkit.model.engine_specs import CONTAINER_ENGINES, PIP_ENGINES
from envkit.model.flags import FLAG
from envkit.model.matrix import CudaToolkit, Driver, FlashAttn, Matrix, TorchBuild, Vllm, sass_runs_on
from envkit.model.solution import Conflict, FlashAttnPlan, KernelPlan, Query, Result, Solution, same_flash_attn

T = TypeVar("T")


@dataclass(frozen=True)
class _Pick:
    """One candidate stack: a torch build, its CUDA toolkit (None off CUDA), the Python, and the
    vLLM release and flash-attn release (with its plan) where the query asks for them."""
    torch: TorchBuild
    toolkit: Optional[CudaToolkit]
    python: Version
    vllm: Optional[Vllm]
    flash_attn: Optional[tuple[FlashAttn, Optional[FlashAttnPlan]]]


@dataclass(frozen=True)
class _Choices:
    """The vLLM and flash-attn releases a search may pick, and the violations none of them can avoid."""
    vllms: tuple[Vllm, ...]
    flash_attns: tuple[FlashAttn, ...]
    lower: int  # violations no torch, toolkit or Python choice can remove (a lower bound)


def _platforms(m: Matrix, q: Query) -> tuple[str, ...]:
    """The platform the flags ask for (parse_query refused flags that ask for two), else the GPU's, else CUDA."""
    if q.platform:
        return (q.platform,)
    if q.cuda:
        return ("cuda",)
    if q.rocm:
        return ("rocm",)
    if q.dtk:
        return ("dtk",)
    if q.torch_local:
        return (local_builds(m, q.torch_local)[0],)
    if q.gpu:
        return (q.gpu.platform,)
    return ("cuda",)


def _asked_toolkit(q: Query, b: TorchBuild) -> bool:
    """b is built for the CUDA or ROCm the query names (12 names every 12.x, 6.2 names 6.2.4)."""
    return b.toolkit is not None and (
        (q.cuda is not None and b.platform == "cuda" and release_starts_with(b.toolkit, q.cuda))
        or (q.rocm is not None and b.platform == "rocm" and release_starts_with(b.toolkit, q.rocm)))


def _torch_candidates(c: Ctx) -> list[TorchBuild]:
    m, q = c.m, c.q
    plats = _platforms(m, q)
    builds = [b for b in m.torch if b.platform in plats and (c.torch_ok is None or b.version in c.torch_ok)
              and (q.torch_local is None or b.local == q.torch_local)
              and (q.dtk is None or b.platform != "dtk" or (b.toolkit is not None and release_starts_with(b.toolkit, q.dtk)))]
    if q.machine == AARCH64:
        builds = aarch64_builds(builds)
    if q.cuda is not None or q.rocm is not None:
        # a release with a build for the asked toolkit offers only that build: its other builds
        # would only produce a misleading "no build for CUDA X" in a nearest miss
        has = {b.version for b in builds if _asked_toolkit(q, b)}
        builds = [b for b in builds if b.version not in has or _asked_toolkit(q, b)]
    if q.vllm is not None:
        wanted = [v for v in m.vllm if v.version in c.vllm_ok]
        pinned = [b for b in builds if any(c.admits(v.torch, b.version) for v in wanted)]
        builds = pinned or builds
        # with a vLLM asked for: per torch release, the build with its PyPI wheel's CUDA first, then
        # torch's own PyPI build (the pair pip makes), then the newest toolkit
        wheel_cudas = {v.wheel_cuda for v in wanted if v.wheel_cuda is not None}
        return sorted(builds, key=lambda b: (b.version, b.toolkit in wheel_cudas, b.pypi, b.toolkit or Version("0")), reverse=True)
    return sorted(builds, key=lambda b: (b.version, b.toolkit or Version("0")), reverse=True)


def _toolkits(m: Matrix, q: Query, b: TorchBuild) -> list[Optional[CudaToolkit]]:
    if b.platform != "cuda":
        return [None]
    if q.cuda and len(q.cuda.release) >= 2:
        return [m.cuda_toolkit(q.cuda)]
    same = [m.cuda_toolkit(b.toolkit)] if b.toolkit is not None else []  # no --cuda, or --cuda 12: torch's own
    return [t for t in same if t is not None]


def _pythons(m: Matrix, q: Query) -> list[Version]:
    """The Pythons to try, newest first: the one asked, or every 3.x for `--python 3`."""
    return [p.version for p in m.python if q.python is None or release_starts_with(p.version, q.python)]


def _best(options: Iterable[tuple[list[Conflict], T]], bound: int) -> Optional[tuple[list[Conflict], T]]:
    """The first option with the fewest conflicts, if any has at most `bound`."""
    best: Optional[tuple[list[Conflict], T]] = None
    for conflicts, item in options:
        if len(conflicts) <= bound and (best is None or len(conflicts) < len(best[0])):
            best = (conflicts, item)
            if not conflicts:
                break
    return best


def _choices(c: Ctx, strict: bool) -> Optional[_Choices]:
    """What a search may pick; None when a strict search has nothing free of unavoidable violations."""
    q = c.q
    vllms = [v for v in c.m.vllm if v.version in c.vllm_ok]
    if q.machine == AARCH64:  # the releases with an aarch64 wheel, where any has one: the nearest miss is about them
        vllms = [v for v in vllms if AARCH64 in v.machines] or vllms
    fas = [f for f in c.m.flash_attn if c.need_fa and (c.fa_ok is None or f.version in c.fa_ok)]
    if strict:
        vllms = [v for v in vllms if not vllm_unary(c, v)]
        fas = [f for f in fas if not flash_attn_unary(c, f)]
        if (q.vllm is not None and not vllms) or (c.need_fa and not fas):
            return None
    lower = (min((vllm_unary(c, v) for v in vllms), default=0) if q.vllm is not None else 0) \
        + (min((flash_attn_unary(c, f) for f in fas), default=0) if c.need_fa else 0)
    return _Choices(tuple(vllms), tuple(fas), lower)


def _bases(c: Ctx, lower: int, bound: Callable[[], int]) -> Iterator[tuple[TorchBuild, Optional[CudaToolkit], Version, list[Conflict]]]:
    """(torch build, toolkit, Python, their conflicts), newest first, leaving out those whose conflicts
    plus the unavoidable `lower` exceed the bound in force when they are reached."""
    for b in _torch_candidates(c):
        vt = check_torch(c, b)
        if len(vt) + lower > bound():
            continue
        for tk in _toolkits(c.m, c.q, b):
            vk = vt + check_toolkit(c, b, tk)
            if len(vk) + lower > bound():
                continue
            for py in _pythons(c.m, c.q):
                vp = vk + check_python(c, b, py)
                if len(vp) + lower <= bound():
                    yield b, tk, py, vp


def _complete(c: Ctx, ch: _Choices, b: TorchBuild, tk: Optional[CudaToolkit], py: Version,
              base: list[Conflict], bound: int) -> Optional[tuple[list[Conflict], _Pick]]:
    """The vLLM and flash-attn with the fewest conflicts for one (torch, toolkit, Python), within the bound."""
    left = bound - len(base)
    v_conf: list[Conflict] = []
    v_pick: Optional[Vllm] = None
    if c.q.vllm is not None:
        found_v = _best(((check_vllm(c, b, tk, py, v), v) for v in ch.vllms), left)
        if found_v is None:
            return None
        v_conf, v_pick = found_v
    left -= len(v_conf)
    f_conf: list[Conflict] = []
    f_pick: Optional[tuple[FlashAttn, Optional[FlashAttnPlan]]] = None
    if c.need_fa:
        found_f = _best((_fa_option(c, b, tk, py, f) for f in ch.flash_attns), left)
        if found_f is None:
            return None
        f_conf, f_pick = found_f
    return base + v_conf + f_conf, _Pick(b, tk, py, v_pick, f_pick)


def _first_fit(c: Ctx) -> Optional[_Pick]:
    """The newest stack with no violation; among the builds of one torch release, one with a prebuilt
    flash-attn wheel before one that builds flash-attn from source."""
    ch = _choices(c, strict=True)
    if ch is None:
        return None
    fallback: Optional[_Pick] = None
    for b, tk, py, base in _bases(c, ch.lower, lambda: 0):
        if fallback is not None and b.version != fallback.torch.version:
            return fallback
        found = _complete(c, ch, b, tk, py, base, 0)
        if found is None:
            continue
        pick = found[1]
        if pick.flash_attn is None or pick.flash_attn[1] is None or pick.flash_attn[1].build == "wheel":
            return pick
        if fallback is None:
            fallback = pick  # a flash-attn source build: prefer a wheel from another build of this torch
    return fallback


def _nearest_miss(c: Ctx) -> list[Conflict]:
    """The conflicts of the stack with the fewest violations (branch and bound); [] when none is found."""
    ch = _choices(c, strict=False)
    assert ch is not None
    bound = 99
    best: list[Conflict] = []
    for b, tk, py, base in _bases(c, ch.lower, lambda: bound):
        found = _complete(c, ch, b, tk, py, base, bound)
        if found is None:
            continue
        total = found[0]
        if len(total) <= bound:  # strictly fewer violations than the best so far
            if not total:
                return []
            best, bound = total, len(total) - 1
    return best


def _fa_option(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version,
               f: FlashAttn) -> tuple[list[Conflict], tuple[FlashAttn, Optional[FlashAttnPlan]]]:
    conflicts, plan = check_flash_attn(c, b, tk, py, f)
    return conflicts, (f, plan)


def _solution(c: Ctx, pick: _Pick) -> Solution:
    b, tk = pick.torch, pick.toolkit
    devel, runtime, min_driver, notes, sources = _platform_part(c.m, c.q, b, tk)
    fa_plan, kernels, fa_notes, fa_sources = _flash_attn_part(c, pick)
    vw, vu, v_notes, v_sources = _vllm_part(c, pick)
    return Solution(
        platform=b.platform, gpu=c.q.gpu, torch=b, toolkit=b.toolkit if tk is None else tk.version, cuda=tk,
        python=pick.python, min_driver=min_driver, devel_image=devel, runtime_image=runtime, flash_attn=fa_plan,
        vllm=pick.vllm, vllm_wheel=vw, vllm_url=vu, kernels=kernels, notes=notes + fa_notes + v_notes,
        sources=tuple(dict.fromkeys(sources + fa_sources + v_sources)), machine=c.q.machine or "x86_64",
    )


def _platform_part(m: Matrix, q: Query, b: TorchBuild, tk: Optional[CudaToolkit]
                   ) -> tuple[Optional[str], Optional[str], Optional[Driver], tuple[str, ...], tuple[str, ...]]:
    """The images, the driver floor, the notes and the sources of the torch build's platform."""
    if b.platform == "cuda" and tk is not None:
        notes, sources, min_driver = _cuda_notes(m, q, b, tk)
        return tk.devel_image, tk.runtime_image, min_driver, notes, (b.source, *sources)
    if b.platform == "rocm" and b.toolkit is not None:
        r = m.rocm_release(b.toolkit)
        if r:
            return r.devel_image, r.runtime_image, None, (), (b.source, r.source)
    elif b.platform == "dtk" and b.toolkit is not None:
        d = m.dtk_release(b.toolkit)
        if d:
            example = f" (public example: {d.image_hint})" if d.image_hint else ""
            return None, None, None, (f"DTK images are not on Docker Hub: name yours in the site file{example}; DTK >= 23.10 containers "
                                      "need -v /opt/hyhal",), \
                (b.source, d.source)
    return None, None, None, (), (b.source,)


def _cuda_notes(m: Matrix, q: Query, b: TorchBuild, tk: CudaToolkit) -> tuple[tuple[str, ...], tuple[str, ...], Driver]:
    """A CUDA stack's notes and sources, and its driver floor (the toolkit's, or the GPU's when higher)."""
    notes: list[str] = []
    sources = [tk.source]
    min_driver = tk.min_driver
    g = q.gpu
    floor, what, fsrc = driver_floor(m, g) if g is not None and g.vendor == "nvidia" else (None, "", "")
    if g is not None and floor is not None and floor > tk.min_driver:
        min_driver = floor
        notes.append(f"{g.name} is {what}: it needs driver >= {floor}, above CUDA {tk.version}'s own minor-version minimum "
                     f"{tk.min_driver} (the toolkit ships {tk.toolkit_driver})")
        sources.append(fsrc)
    fam = m.gpu_driver(g.cc) if g is not None and g.cc is not None else None
    if g is not None and fam is not None and fam.last_branch is not None:
        notes.append(f"{g.name} is a {fam.family} GPU: R{fam.last_branch} is the last driver branch that supports it")
    if b.ptx is not None and g and g.cc and not any(sass_runs_on(a, g.cc) for a in b.ccs):
        notes.append(f"torch runs on {g.arch} through PTX JIT of compute_{b.ptx.major}{b.ptx.minor}: the first start compiles kernels; "
                     f"needs the toolkit driver {tk.toolkit_driver}, not just the minor-version minimum")
    if min_driver == tk.min_driver:  # else the GPU's note above names both floors
        notes.append(f"driver >= {tk.min_driver} (CUDA {tk.version.major}.x minor-version compatibility; the toolkit ships "
                     f"{tk.toolkit_driver})")
    return tuple(notes), tuple(sources), min_driver


def _flash_attn_part(c: Ctx, pick: _Pick) -> tuple[Optional[FlashAttnPlan], tuple[KernelPlan, ...], tuple[str, ...], tuple[str, ...]]:
    """The flash-attn plan, the csrc kernels built from its sdist, their notes and sources."""
    if pick.flash_attn is None:
        return None, (), (), ()
    (f, fa_plan), q, b, tk = pick.flash_attn, c.q, pick.torch, pick.toolkit
    notes: list[str] = []
    if fa_plan is not None and q.flash_attn_profile != "full":
        if fa_plan.build == "source" and b.platform == "cuda":
            fa_plan = replace(fa_plan, profile=q.flash_attn_profile)
            notes.append(f"flash-attn's serving profile ({q.flash_attn_profile.split(':', 1)[1].replace(':', '; ')}): the forward and "
                         "split-KV kernels only; any other call raises a RuntimeError naming what is missing (--flash-attn-profile full "
                         "builds all)")
        else:
            notes.append(f"--flash-attn-profile {q.flash_attn_profile.split(':')[0]} chooses a CUDA source build's kernels; this "
                         "flash-attn "
                         + ("is a prebuilt wheel, which carries every kernel" if fa_plan.build == "wheel"
                            else f"is built for {b.platform} whole"))
    if fa_plan and fa_plan.build == "source":
        notes.append(f"flash-attn {f.version} is built from the sdist with FLASH_ATTENTION_FORCE_BUILD=TRUE for "
                     f"{';'.join(fa_plan.arch_list) or 'its default archs'} (about 5 GB RAM per nvcc job)"
                     + (f": {fa_plan.reason}" if fa_plan.reason else ""))
    if fa_plan and fa_plan.build == "wheel":
        notes.append(f"flash-attn wheel from GitHub releases, in the build matrix of its {f.tag} release workflow; its ABI flag "
                     f"cxx11abi{str(b.cxx11abi).upper()} matches torch {b.pin}")
    arch_list = (str(q.gpu.cc),) if q.gpu and q.gpu.cc else tuple(str(a) for a in flash_attn_archs(c, f, tk.version)) if tk else ()
    kernels = tuple(KernelPlan(k, KERNELS[k], f.version, "shipped" if f.kernel_setup_py else "supplied", arch_list, True)
                    for k in q.kernels)
    if "rotary" in q.kernels:
        notes.append("csrc/rotary's setup.py compiles with -march=native: build on the target CPU family, or replace the flag (e.g. "
                     "-march=x86-64-v3) before building")
    if q.kernels and not f.kernel_setup_py:
        notes.append(f"the flash-attn {f.version} sdist ships csrc kernels without their setup.py: envkit supplies one")
    return fa_plan, kernels, tuple(notes), (f.source,)


def _vllm_part(c: Ctx, pick: _Pick) -> tuple[Optional[str], Optional[str], tuple[str, ...], tuple[str, ...]]:
    """The vLLM wheel and its URL, with notes and sources."""
    v, b = pick.vllm, pick.torch
    if v is None:
        return None, None, (), ()
    vw = vu = None
    notes: list[str] = []
    chosen, _ = vllm_pick(c, b, pick.python, v)
    if chosen is not None:
        vw, vu = chosen.wheel, chosen.url
        if not chosen.on_pypi and vw:
            built_for = f"CUDA {chosen.cuda}" if chosen.cuda else f"ROCm {b.toolkit}"
            notes.append(f"vLLM {v.version} {built_for} wheel from vLLM's GitHub release, named by the release's own docs or pipeline")
    if b.platform == "cpu" and v.cpu is not None:
        notes.append(f"vLLM {v.version} on CPU is PyPI's {v.cpu.package} package (pins torch {v.cpu.torch}); "
                     f"{', '.join(v.cpu.remove)} are removed after it")
        return vw, vu, tuple(notes), (v.cpu.source,)
    return vw, vu, tuple(notes), (v.source,)


def _driver_fix(c: Ctx, conflicts: list[Conflict]) -> list[Conflict]:
    """A driver too old for the nearest miss's toolkit: name the smallest upgrade that gives a stack with the rest
    of the query, besides the toolkit's own minimum (newcomer 1.4: A100 with 410.48 was told 580.65.06, the newest
    toolkit's, where 450.80.02 gives CUDA 11.x)."""
    q = c.q
    if q.driver is None or not any(x.rule == "driver.too-old" for x in conflicts):
        return conflicts
    floors = {tk.min_driver for tk in c.m.cuda}
    if q.gpu is not None and q.gpu.vendor == "nvidia":
        floor = driver_floor(c.m, q.gpu)[0]
        if floor is not None:
            floors.add(floor)
    for d in sorted(f for f in floors if f > q.driver):
        pick = _first_fit(Ctx(c.m, replace(q, driver=d)))
        if pick is not None and pick.toolkit is not None:
            fix = (f"upgrade the driver to >= {d}, the smallest upgrade that gives a stack (torch {pick.torch.pin}, "
                   f"CUDA {pick.toolkit.version}), or to the minimum named here for this CUDA")
            return [replace(x, fix=fix) if x.rule == "driver.too-old" else x for x in conflicts]
    return conflicts


def _release_fixes(c: Ctx, conflicts: list[Conflict]) -> list[Conflict]:
    """The fix of a pinned torch or vLLM that cannot run on the GPU names the newest other release that resolves with
    the rest of the query, or says that none does (issue 27: an RX 7800 XT with --vllm 0.6.0 was told "0.8.3 ...
    0.33.0", where the first ROCm wheel envkit can install is 0.14.0; a GH200 with --torch 2.6.0 was told "torch 2.0.0
    ... 2.15.0", most of it without an aarch64 CUDA wheel)."""
    q, out = c.q, []
    for x in conflicts:
        if x.rule == "vllm.gpu-arch" and q.vllm is not None:
            x = replace(x, fix=_vllm_release_fix(c))
        elif x.rule == "torch.gpu-arch" and q.torch is not None and q.engine_version is None:
            x = replace(x, fix=_torch_release_fix(c))
        out.append(x)
    return out


def _may_run(c: Ctx, b: TorchBuild) -> bool:
    """A build that cannot run on the GPU fails the same check again: not worth resolving."""
    return c.q.gpu is None or b.targets(c.q.gpu, c.gpu_cc)


def _pinned(q: Query, key: str, value: str, **fields: object) -> Query:
    return replace(q, **fields, given=tuple((k, v) for k, v in q.given if k != key) + ((key, value),))  # type: ignore[arg-type]


def _vllm_release_fix(c: Ctx) -> str:
    q = c.q
    assert q.vllm is not None
    amd_arch = q.gpu.arch if q.gpu is not None and q.gpu.platform == "rocm" else None
    for v in sorted((x for x in c.m.vllm if x.version not in q.vllm and (amd_arch is None or amd_arch in x.rocm_archs)),
                    key=lambda x: x.version, reverse=True):
        pick = _first_fit(Ctx(c.m, _pinned(q, "vllm", str(v.version), vllm=SpecifierSet(f"=={v.version}"))))
        if pick is not None:
            return f"use --vllm {v.version}, the newest vLLM release that resolves here with the rest of the query"
    return "no vLLM release in the matrix resolves here with the rest of the query: drop --vllm"


def _torch_release_fix(c: Ctx) -> str:
    q = c.q
    assert q.torch is not None
    builds = sorted({(b.version, b.toolkit if b.platform == "cuda" else None) for b in c.m.torch
                     if b.version not in q.torch and _may_run(c, b)},
                    key=lambda vt: (vt[0], vt[1] or Version("0")), reverse=True)
    for version, toolkit in builds:
        sub = _pinned(q, "torch", str(version), torch=SpecifierSet(f"=={version}"), torch_local=None)
        pick = _first_fit(Ctx(c.m, sub))
        if pick is None and q.cuda is not None and toolkit is not None:
            sub = _pinned(sub, "cuda", str(toolkit), cuda=toolkit)
            pick = _first_fit(Ctx(c.m, sub))
        if pick is not None:
            with_cuda = f" --cuda {pick.toolkit.version}" if q.cuda is not None and pick.toolkit is not None else ""
            return f"use --torch {version}{with_cuda}, the newest torch release that resolves here with the rest of the query"
    return "no torch release in the matrix resolves here with the rest of the query"


def _warnings(sol: Solution, m: Matrix) -> tuple[str, ...]:
    out = []
    if sol.torch.confidence == "inferred":
        out.append(f"torch {sol.torch.pin}: {sol.torch.note or 'this row is inferred, not read from a release artifact'} "
                   f"({sol.torch.source})")
    if sol.vllm is not None and sol.vllm.confidence == "inferred":
        out.append(f"vLLM {sol.vllm.version}: its CUDA builds are inferred ({sol.vllm.source})")
    if sol.flash_attn is not None:
        f = next(x for x in m.flash_attn if x.version == sol.flash_attn.version)
        if f.confidence == "inferred":
            out.append(f"flash-attn {f.version}: wheel matrix inferred from neighbouring tags ({f.source})")
    return tuple(out)


def _input_notes(q: Query, sol: Solution) -> tuple[str, ...]:
    """What the query's text was read as, where it is not what the stack shows: a patch release of CUDA or
    Python (chosen by X.Y; the patch comes from the image or the matrix's CPython tarball)."""
    out = []
    given = q.flags()
    for key, what, got in (("cuda", "CUDA", sol.cuda.release if sol.cuda else None), ("python", "Python", None)):
        v = given_version(key, given[key]) if key in given else None
        if v is not None and len(v.release) > 2:
            held = f" (the image holds {got})" if got else ""
            out.append(f"{FLAG[key]} {given[key].strip()} is read as {what} {v.major}.{v.minor}: envkit picks {what} by X.Y{held}")
    return tuple(out)


def resolve(m: Matrix, q: Query, *, suggest: bool = True, explain: bool = True) -> Result:
    """Newest consistent stack for q, or the conflicts of the nearest miss (`explain=False`: no conflicts, for a caller
    that asks only whether it fits). With no --python, the stack on the base image's own Python where that installs
    the same torch, vLLM and flash-attn as the newest Python would: no Python to build, and the image's own pip."""
    result = _resolve(m, q, suggest=suggest, explain=explain)
    sol = result.solution
    if sol is None or q.python is not None:
        return result
    img = image_python(m, sol.torch, sol.cuda)
    if img is None or img[0] == sol.python:
        return result
    py, os_name = img
    on_image = _resolve(m, replace(q, python=py), suggest=False, explain=False)
    alt = on_image.solution
    if alt is None or alt.torch != sol.torch or alt.vllm != sol.vllm or not same_flash_attn(alt.flash_attn, sol.flash_attn):
        return result
    note = (f"python {py}: the base image's own ({os_name}), which installs the same stack as {sol.python} would "
            f"(--python {sol.python} builds that one instead)")
    return replace(on_image, query=q, notes=(note,) + on_image.notes, python_from_image=py)


def _resolve(m: Matrix, q: Query, *, suggest: bool = True, explain: bool = True) -> Result:
    if q.machine is None and target_machine(q) != "x86_64":
        q = replace(q, machine=target_machine(q))
    if q.machine == AARCH64:
        refusal = aarch64_refusal(m, q, _platforms(m, q))
        if refusal is not None:
            return Result(q, None, (refusal,), _suggestions(m, q) if suggest else ())
    if q.engine in CONTAINER_ENGINES:
        return resolve_engine(m, q)
    if q.engine in PIP_ENGINES:
        return resolve_pip_engine(m, q, lambda sub: _resolve(m, sub, suggest=False),
                                  lambda sub: _resolve(m, sub, suggest=False, explain=False))
    c = Ctx(m, q)
    pick = _first_fit(c)
    if pick is not None:
        sol = _solution(c, pick)
        return Result(q, sol, warnings=_input_notes(q, sol) + _warnings(sol, m))
    if not explain:
        return Result(q, None)
    conflicts = _release_fixes(c, _driver_fix(c, _nearest_miss(c)))
    if not conflicts:
        asked = q.flags().get("torch", "")
        have = sorted({b.pin for b in m.torch if q.torch is None or c.admits(q.torch, b.version)})
        conflicts = [Conflict("torch.no-variant", f"no torch build matches {asked or 'the query'} on platform {'/'.join(_platforms(m, q))}",
                              f"use one of: {', '.join(have[-8:])}", "doc:matrix.toml [[torch]]")]
    unique = tuple(dict.fromkeys(conflicts))
    return Result(q, None, unique, _suggestions(m, q) if suggest else ())


def _suggestions(m: Matrix, q: Query) -> tuple[tuple[str, dict[str, str]], ...]:
    """Each given flag whose removal gives a solution, with that solution's few fields."""
    out = []
    for key, _value in q.given:
        alt = resolve(m, q.without(key), suggest=False, explain=False)  # only its solution is shown: no conflicts, no fixes
        if alt.solution is not None:
            out.append((key, alt.solution.flat()))
    # the GPU is what the user owns: "without --gpu" is offered only where dropping nothing else solves it
    owned = [s for s in out if s[0] != "gpu"]
    return tuple(owned or out)
