"""The serving engines that come as containers: `--engine triton-trtllm | trtllm | triton-vllm | fastertransformer`.

Each engine has candidates (a Triton container, or tensorrtllm_backend built on a Triton image, or the frozen
FasterTransformer profile), newest first in the order envkit prefers them. `--trtllm`, `--triton` and `--vllm`
choose among them; the GPU, the driver, `--python` and `--cuda` are rules each candidate is checked against. The
answer is the first candidate with no conflict, else the conflicts of the candidate with the fewest (the nearest
miss), each with its rule, its source and the fix that names a release that would fit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

from packaging.version import Version

from envkit.core.resolve.checks import check_gpu_driver, driver_floor
from envkit.core.resolve.query import release_starts_with
from envkit.errors import InputError
from envkit.model.engines import CARRIED_ENSEMBLES, EngineSolution, TritonImage, Trtllm, TrtllmBackend, WheelBase
from envkit.model.matrix import CC, Driver, Gpu, Matrix, sass_runs_on
from envkit.model.solution import Conflict, Query, Result


@dataclass(frozen=True)
class _Candidate:
    image: TritonImage  # the container used as it is, or the -py3 image a backend is built on
    build: str  # container | backend
    workflow: str  # ensemble | trtllm-serve | vllm | fastertransformer
    trtllm_version: Optional[Version] = None
    backend: Optional[TrtllmBackend] = None

    @property
    def label(self) -> str:
        if self.build == "backend" and self.backend is not None:
            return f"tensorrtllm_backend {self.backend.version} on Triton {self.image.release}"
        what = f" (TensorRT-LLM {self.trtllm_version})" if self.trtllm_version \
            else f" (vLLM {self.image.vllm_version})" if self.image.vllm else ""
        return f"Triton {self.image.release}-{self.image.flavor}{what}"


def trtllm_row(m: Matrix, v: Optional[Version]) -> Optional[Trtllm]:
    """The [[trtllm]] row of a release as a container names it (0.17.0.post1 is 0.17.0's row)."""
    if v is None:
        return None
    exact = next((r for r in m.trtllm if r.version == v), None)
    return exact or next((r for r in m.trtllm if r.version.release == v.release[:3] and not v.is_prerelease), None)


def _removed(m: Matrix, v: Version, cc: CC) -> Optional[Trtllm]:
    """The release whose notes removed this arch "in this and future releases", if it is v or older."""
    return next((r for r in sorted(m.trtllm, key=lambda r: r.version) if r.version <= v and cc in r.archs_removed), None)


def _serves(m: Matrix, v: Version) -> tuple[bool, bool]:
    """(trtllm-serve is in release v, the answer rests on an earlier release's notes rather than v's own)."""
    row = trtllm_row(m, v)
    if row is not None and row.trtllm_serve is not None:
        return row.trtllm_serve, False
    first = min((r.version for r in m.trtllm if r.trtllm_serve), default=None)
    return first is not None and v >= first, True


def _py3(m: Matrix, release: str) -> Optional[TritonImage]:
    return next((t for t in m.triton if t.flavor == "py3" and t.release == release), None)


def _gpu_requirement(m: Matrix, t: TritonImage) -> Optional[TritonImage]:
    """The release notes that state a container's minimum compute capability: its own release's, else the newest
    earlier release's that states one (the minimum has only risen: 6.0 to 7.5 in 25.01)."""
    if t.min_cc is not None:
        return t
    stated = [x for x in m.triton if x.flavor == "py3" and x.min_cc is not None and x.key <= t.key]
    return max(stated, key=lambda x: x.key, default=None)


def _candidates(m: Matrix, engine: str) -> list[_Candidate]:
    if engine == "triton-vllm":
        return [_Candidate(t, "container", "vllm") for t in m.triton if t.flavor == "vllm-python-py3"]
    if engine == "trtllm":
        return [_Candidate(t, "container", "trtllm-serve", t.trtllm) for t in m.triton
                if t.flavor == "trtllm-python-py3" and t.trtllm is not None and _serves(m, t.trtllm)[0]]
    if engine == "fastertransformer":
        ft = m.fastertransformer
        rows = [_py3(m, r) for r in (ft.triton_releases if ft is not None else ())]
        return sorted((_Candidate(t, "backend", "fastertransformer") for t in rows if t is not None),
                      key=lambda c: c.image.key, reverse=True)
    out = [_Candidate(t, "container", "ensemble", t.trtllm) for t in m.triton if t.flavor == "trtllm-python-py3" and t.trtllm]
    for b in m.trtllm_backend:
        base = _py3(m, b.base_release)
        if b.ensemble and base is not None and b.base_image.endswith(f":{base.release}-py3"):
            out.append(_Candidate(base, "backend", "ensemble", _carried_trtllm(m, b), b))

    def order(c: _Candidate) -> tuple[bool, Version, bool, tuple[int, int]]:
        return _fills_ensemble(c), c.trtllm_version or Version("0"), c.build == "container", c.image.key
    return sorted(out, key=order, reverse=True)


def _fills_ensemble(c: _Candidate) -> bool:
    """envkit fills this candidate's TensorRT-LLM ensemble (0.19.0.post1 is 0.19.0's)."""
    return Version((c.trtllm_version or Version("0")).base_version) in CARRIED_ENSEMBLES


def _carried_trtllm(m: Matrix, b: TrtllmBackend) -> Version:
    """The TensorRT-LLM a backend tag builds: the tag's version, or an earlier tag's whose submodule commit it shares
    (v0.7.2 carries v0.7.1's TensorRT-LLM)."""
    same = [x.version for x in m.trtllm_backend if x.tensorrt_llm_commit == b.tensorrt_llm_commit]
    return min(same, default=b.version)


def data_center_gpu(g: Optional[Gpu]) -> Optional[bool]:
    """Whether NVIDIA lists the GPU in the Data Center column of its compute capability pages (None: it does not list
    it there at all). CUDA's forward compatibility is for data center GPUs and select NGC Server Ready RTX SKUs, which
    NVIDIA does not name (docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html)."""
    if g is None or g.vendor != "nvidia" or g.segment is None:
        return None
    return g.segment == "data-center"


def _chosen(q: Query, c: _Candidate) -> bool:
    """The candidate is one the query's pins choose (--trtllm, --triton, --vllm)."""
    if q.trtllm is not None and (c.trtllm_version is None or not q.trtllm.contains(c.trtllm_version, prereleases=True)):
        return False
    if q.triton is not None and c.image.release != q.triton:
        return False
    v = c.image.vllm_version
    return not (q.vllm is not None and q.engine == "triton-vllm" and (v is None or not q.vllm.contains(v, prereleases=True)))


def _cuda_row_version(text: Optional[str]) -> Optional[Version]:
    if not text:
        return None
    v = Version(text)
    return Version(f"{v.major}.{v.minor}")


def _gpu_conflicts(m: Matrix, q: Query, c: _Candidate) -> list[Conflict]:
    """Whether the candidate runs on the query's GPU: its vendor, then each part's own arch list (Triton's notes, the
    CUDA it is built on, TensorRT-LLM's release, the vLLM inside, FasterTransformer's -DSM list)."""
    g = q.gpu
    if g is None:
        return []
    if g.vendor != "nvidia":
        return [Conflict("engine.platform", f"--engine {q.engine} runs on NVIDIA GPUs; {g.name} is an {g.vendor.upper()} GPU",
                         "use --engine torch or --engine vllm, which resolve ROCm and DTK stacks", c.image.source)]
    assert g.cc is not None
    checks = (_triton_cc_conflicts, _cuda_arch_conflicts, _trtllm_arch_conflicts, _vllm_arch_conflicts, _legacy_arch_conflicts)
    return [conflict for check in checks for conflict in check(m, q, c, g, g.cc)]


def _triton_cc_conflicts(m: Matrix, q: Query, c: _Candidate, g: Gpu, cc: CC) -> list[Conflict]:
    t = c.image
    notes = _gpu_requirement(m, t)
    if notes is None or notes.min_cc is None or cc >= notes.min_cc:
        return []
    first = min((x for x in m.triton if x.flavor == "py3" and x.min_cc == notes.min_cc), key=lambda x: x.key, default=notes)
    since = "" if notes.release == t.release else f" (the {first.release} notes raised it; no later release lowers it)"
    return [Conflict("engine.gpu-arch", f"Triton {t.release} supports compute capability {notes.min_cc} and later{since}; "
                     f"{g.name} is compute capability {cc}", f"use a Triton release before {first.release}", notes.source)]


def _cuda_arch_conflicts(m: Matrix, q: Query, c: _Candidate, g: Gpu, cc: CC) -> list[Conflict]:
    t = c.image
    row = trtllm_row(m, c.trtllm_version)
    cuda_text = t.cuda or (str(row.cuda) if row is not None and row.cuda is not None else None)
    cuda = _cuda_row_version(cuda_text)
    tk = m.cuda_toolkit(cuda) if cuda is not None else None
    if tk is not None and not tk.can_target(cc):
        newer = cc > max(tk.archs)
        return [Conflict("engine.gpu-arch", f"{c.label} is built on CUDA {cuda_text}, which cannot run code for {g.arch} ({g.name})",
                         "use a newer release (a newer CUDA)" if newer else "use an older release", tk.source)]
    if cuda is None:
        return [Conflict("engine.gpu-arch", f"{c.label}: neither its release notes nor its TensorRT-LLM state its CUDA, so "
                         f"{g.arch} cannot be checked", "pick another release (--triton or --trtllm)", t.source)]
    if tk is None:  # a CUDA newer than the matrix's rows: an arch its major already dropped stays dropped
        below = max((x for x in m.cuda if x.version.major == cuda.major and x.version < cuda), key=lambda x: x.version, default=None)
        if below is not None and below.archs and cc < min(below.archs):
            return [Conflict("engine.gpu-arch", f"{c.label} is built on CUDA {t.cuda}: CUDA {below.version} already builds for "
                             f"sm_{min(below.archs).major}{min(below.archs).minor} and newer only, and {g.name} is {g.arch}",
                             "use an older release", below.source)]
    return []


def _trtllm_arch_conflicts(m: Matrix, q: Query, c: _Candidate, g: Gpu, cc: CC) -> list[Conflict]:
    if c.trtllm_version is None:
        return []
    r = trtllm_row(m, c.trtllm_version)
    gone = _removed(m, c.trtllm_version, cc)
    if gone is not None:
        fix = (f"no trtllm-serve release supports {g.arch} (trtllm-serve came with 0.15.0): use --engine triton-trtllm "
               f"--trtllm '<{gone.version}'" if q.engine == "trtllm" else
               f"use TensorRT-LLM older than {gone.version} (--trtllm '<{gone.version}')")
        return [Conflict("engine.gpu-arch", f"TensorRT-LLM {c.trtllm_version} has no {g.arch} ({g.name}): "
                         f"its {gone.version} release notes removed it in that and every later release", fix, gone.source)]
    if r is not None and r.archs and not any(sass_runs_on(a, cc) for a in r.archs):
        return [Conflict("engine.gpu-arch", f"TensorRT-LLM {r.version} supports "
                         f"{', '.join('sm_%d%d' % (a.major, a.minor) for a in r.archs)}; "
                         f"{g.name} is {g.arch}", "use a TensorRT-LLM release that lists it", r.source)]
    listed = [x for x in m.trtllm if x.archs]
    if (r is None or not r.archs) and listed and cc < min(a for x in listed for a in x.archs):
        # older than every documented list (newer archs are left to the CUDA check and the release notes)
        oldest = min(a for x in listed for a in x.archs)
        return [Conflict("engine.gpu-arch", f"no TensorRT-LLM release lists {g.arch} ({g.name}) or an older arch among its GPUs "
                         f"(the lists of {', '.join(str(x.version) for x in listed)} start at sm_{oldest.major}{oldest.minor})",
                         "use --engine vllm or --engine torch on this GPU", listed[0].source)]
    return []


def _vllm_arch_conflicts(m: Matrix, q: Query, c: _Candidate, g: Gpu, cc: CC) -> list[Conflict]:
    t = c.image
    if c.workflow != "vllm" or t.vllm is None or Version(t.vllm).local is not None:  # PyPI's wheel, as its [[vllm]] row knows it
        return []
    v = next((x for x in m.vllm if x.version == Version(t.vllm)), None)
    if v is not None and v.runs_on_cc(cc) is None:
        return [Conflict("engine.gpu-arch", f"no source envkit holds states which GPU archs vLLM {v.version} (in {c.label}) "
                         f"was built for: {g.arch} cannot be confirmed", "use a newer --triton, or --engine torch", v.source)]
    if v is not None and v.runs_on_cc(cc) is False:
        built = ", ".join(f"sm_{a.major}{a.minor}" for a in v.cuda_archs or ())
        return [Conflict("engine.gpu-arch", f"vLLM {v.version} (in {c.label}) is built for {built}"
                         + (f" (PTX compute_{v.cuda_ptx.major}{v.cuda_ptx.minor})" if v.cuda_ptx else " and no PTX")
                         + f": none runs on {g.name} ({g.arch})", "use another --triton release, or --engine torch", v.source)]
    return []


def _legacy_arch_conflicts(m: Matrix, q: Query, c: _Candidate, g: Gpu, cc: CC) -> list[Conflict]:
    ft = m.fastertransformer
    if c.workflow != "fastertransformer" or ft is None or cc in ft.sm:
        return []
    return [Conflict("engine.legacy", f"FasterTransformer (archived {ft.archived}) builds for "
                     f"{', '.join('sm_%d%d' % (a.major, a.minor) for a in ft.sm)}; {g.name} is {g.arch}",
                     f"use its successor: {ft.successor}", ft.source)]


def _driver_conflicts(m: Matrix, q: Query, c: _Candidate) -> tuple[list[Conflict], Optional[str], bool]:
    """(conflicts, note, through forward compatibility). The driver must drive the GPU (its floor, its last branch) and meet
    the container's requirement; below that requirement, a branch the release's notes list for data center GPUs (and do
    not also list as not forward-compatible) runs through the container's CUDA forward-compatibility package: on a data
    center GPU only, so never for a GeForce card, and only where the notes' list of branches to upgrade from is known."""
    d, t = q.driver, c.image
    if d is None:
        return [], None, False
    out = [replace(x, rule="engine.driver") for x in check_gpu_driver(m, q)] if q.gpu is not None and q.gpu.vendor == "nvidia" else []
    if t.driver is None or d >= t.driver:
        return out, None, False
    branch = next((x for x in t.datacenter_drivers if x.key[0] == d.key[0] and d >= x), None)
    why = ""
    if branch is not None and t.not_forward_compatible is None:
        why = f"; its notes' list of branches that are not forward-compatible is not in the matrix, so R{branch.key[0]} is not assumed"
    elif branch is not None and branch.key[0] in (t.not_forward_compatible or ()):
        why = f"; its notes list R{branch.key[0]} for data center GPUs but also among the branches that are not forward-compatible"
    elif branch is not None and q.gpu is not None and data_center_gpu(q.gpu) is False:
        why = (f"; forward compatibility is for data center GPUs (and NGC Server Ready RTX SKUs NVIDIA does not name), and "
               f"NVIDIA lists the {q.gpu.name} as {q.gpu.segment}")
    elif branch is not None:
        unlisted = f"; NVIDIA's compute capability pages do not list the {q.gpu.name}" \
            if q.gpu is not None and data_center_gpu(q.gpu) is None else ""
        return out, (f"driver {d} is below Triton {t.release}'s {t.driver}: it runs through the container's CUDA "
                     f"forward-compatibility package, on data center GPUs only (R{branch.key[0]} from {branch}){unlisted}"), True
    listed = f" (data center GPUs: {', '.join(str(x) for x in t.datacenter_drivers)} or later in their branch)" \
        if t.datacenter_drivers else ""
    out.append(Conflict("engine.driver", f"{c.label} needs driver >= {t.driver}{listed}; the driver is {d}{why}",
                        _driver_fix(m, q.gpu, t.driver), t.source))
    return out, None, False


def _driver_fix(m: Matrix, g: Optional[Gpu], needed: Driver) -> str:
    """The upgrade a container's driver requirement asks for, where the GPU can take it: no lower than the GPU's own
    floor (a B300 needs more than a 25.05 container), and none past the GPU's last driver branch (Pascal ends at R580)."""
    if g is None or g.vendor != "nvidia":
        return f"upgrade the driver to >= {needed}, or use an older release"
    fam = m.gpu_driver(g.cc) if g.cc is not None else None
    if fam is not None and fam.last_branch is not None and needed.key[0] > fam.last_branch:
        return f"use an older release: no driver for {g.name} meets it (R{fam.last_branch} is its last branch)"
    floor = driver_floor(m, g)[0]
    return f"upgrade the driver to >= {max(needed, floor) if floor is not None else needed}, or use an older release"


def _other_conflicts(q: Query, c: _Candidate) -> list[Conflict]:
    t, out = c.image, []
    if q.python is not None and t.python is None:
        out.append(Conflict("engine.python", f"{c.label}: its Python is not in the matrix, so Python {q.flags().get('python')} "
                            "cannot be confirmed", "drop --python (the container's own Python is used)", t.source))
    elif q.python is not None and t.python is not None and not release_starts_with(t.python, q.python):
        out.append(Conflict("engine.python", f"{c.label} has Python {t.python}, not {q.flags().get('python')}",
                            f"use --python {t.python}, or another release", t.source))
    if q.cuda is not None and (t.cuda is None or not release_starts_with(Version(t.cuda), q.cuda)):
        out.append(Conflict("engine.cuda", f"{c.label} is built on CUDA {t.cuda or 'unknown'}, not {q.flags().get('cuda')}",
                            "drop --cuda (the container brings its own CUDA), or pick a release built on it", t.source))
    return out


def _ensemble_conflicts(c: _Candidate) -> list[Conflict]:
    """generate fills the ensemble's model repository from tensorrtllm_backend's archive of a carried release only:
    any other is an answer generate would refuse."""
    if c.workflow != "ensemble" or _fills_ensemble(c):
        return []
    carried = ", ".join(str(v) for v in sorted(CARRIED_ENSEMBLES))
    return [Conflict("engine.ensemble", f"{c.label}: envkit fills the Triton ensemble model repository of TensorRT-LLM "
                     f"{carried} only, not {c.trtllm_version}", f"use --trtllm with one of {carried}, or --engine trtllm "
                     "(trtllm-serve needs no model repository)", "doc:docs/engines.md (the ensemble model repository)")]


def _support_warnings(m: Matrix, q: Query, c: _Candidate) -> tuple[str, ...]:
    """A GPU below the lowest arch the release's support matrix lists: it may run, but NVIDIA neither develops nor
    tests TensorRT-LLM there (its words: community support only)."""
    r = trtllm_row(m, c.trtllm_version)
    g = q.gpu
    if r is None or r.support_min_cc is None or g is None or g.cc is None or g.cc >= r.support_min_cc:
        return ()
    return (f"TensorRT-LLM {r.version} on {g.name} ({g.arch}): {r.support_note or 'its support matrix does not list it'}; "
            f"{g.arch} is not listed, so it runs there with community support only",)


def _check(m: Matrix, q: Query, c: _Candidate) -> tuple[list[Conflict], tuple[str, ...], bool]:
    driver, note, forward = _driver_conflicts(m, q, c)
    return (_gpu_conflicts(m, q, c) + driver + _other_conflicts(q, c) + _ensemble_conflicts(c), ((note,) if note else ()),
            forward)


def _solution(m: Matrix, q: Query, c: _Candidate, notes: tuple[str, ...]) -> EngineSolution:
    engine = q.engine or ""
    t = c.image
    r = trtllm_row(m, c.trtllm_version)
    out = list(notes)
    sources = [t.source]
    if r is not None:
        sources.append(r.source)
        if r.unknown:
            out.append(f"TensorRT-LLM {r.version}: its release does not state {', '.join(r.unknown)} (not checked)")
        if r.archs_note:
            out.append(f"TensorRT-LLM {r.version}: {r.archs_note}")
        if q.gpu is not None and not r.archs:
            out.append(f"TensorRT-LLM {r.version}: no GPU list of its own release is in the matrix; {q.gpu.arch} is checked "
                       f"against its CUDA and its release notes' removals only")
    elif c.trtllm_version is not None:
        out.append(f"TensorRT-LLM {c.trtllm_version} has no [[trtllm]] row: its GPU support is checked against its CUDA only")
    if c.backend is not None:
        sources.append(c.backend.source)
        out.append(f"the image builds tensorrtllm_backend {c.backend.version} (its dockerfile/Dockerfile.trt_llm_backend) "
                   f"on {c.backend.base_image}: carry the backend's source at tag v{c.backend.version} with its submodule")
    if c.workflow == "ensemble":
        out.append("engines are built on the target GPU (trtllm-build): a TensorRT engine runs only on the GPU arch and "
                   "TensorRT version it was built with; the bundle carries checkpoints, never engines")
    if c.workflow == "vllm" and t.vllm is not None and Version(t.vllm).local is not None:
        out.append(f"vLLM {t.vllm} is NVIDIA's own build: its GPU archs are in no source envkit holds; only Triton {t.release}'s "
                   "minimum compute capability is checked")
    req = _gpu_requirement(m, t)
    if q.gpu is not None and req is not None and req.release != t.release:
        out.append(f"Triton {t.release}: its own notes are not in the matrix; the minimum compute capability {req.min_cc} "
                   f"of the {req.release} notes is carried forward (it has only risen)")
    if t.driver is None:
        out.append(f"Triton {t.release}-{t.flavor}: its driver requirement is not in the matrix (compatibility.md gives none): "
                   "the driver is not checked")
    if c.workflow == "trtllm-serve":
        serves, inferred = _serves(m, c.trtllm_version or Version("0"))
        if inferred:
            out.append(f"TensorRT-LLM {c.trtllm_version}: trtllm-serve is taken from its introduction in an earlier release "
                       "(its own notes do not name it)")
    legacy = c.workflow == "fastertransformer"
    sm: tuple[CC, ...] = ()
    if legacy and m.fastertransformer is not None:
        ft = m.fastertransformer
        sources.append(ft.source)
        sm = (q.gpu.cc,) if q.gpu is not None and q.gpu.cc is not None else ft.default_sm
    image = t.image
    return EngineSolution(engine=engine, gpu=q.gpu, image=image, build=c.build, triton=t, trtllm=r, backend=c.backend,
                          min_driver=t.driver, workflow=c.workflow, notes=tuple(dict.fromkeys(out)),
                          sources=tuple(dict.fromkeys(sources)), legacy=legacy, sm=sm)


def _legacy_warning(m: Matrix, q: Query, successor: Callable[[], str]) -> str:
    ft = m.fastertransformer
    archived = ft.archived if ft is not None else "2023-10-19"
    return (f"FasterTransformer is archived (last commit {archived}; NVIDIA: 'development has transitioned to TensorRT-LLM'): "
            f"a legacy profile with no FP8 and no new GPU support; its successor for this query: {successor()}")


def _successor(m: Matrix, q: Query) -> str:
    alt = resolve_engine(m, replace(q, engine="triton-trtllm", triton=None, cuda=None, python=None, given=()))
    if alt.engine is None:
        ft = m.fastertransformer
        return ft.successor if ft is not None else "TensorRT-LLM"
    e = alt.engine
    return (f"{e.image} with TensorRT-LLM {e.trtllm.version if e.trtllm else (e.backend.version if e.backend else '?')} "
            "(--engine triton-trtllm)")


def resolve_engine(m: Matrix, q: Query) -> Result:
    """The newest candidate of q.engine with no conflict, or the conflicts of the nearest miss."""
    engine = q.engine or ""
    every = _candidates(m, engine)
    chosen = [c for c in every if _chosen(q, c)]
    if not chosen:
        pins = " ".join(f"--{k} {v}" for k, v in q.given if k in ("trtllm", "triton", "vllm"))
        have = list(dict.fromkeys(c.label for c in sorted(every, key=lambda c: (c.image.key, c.trtllm_version or Version("0")),
                                                          reverse=True)))
        ft = m.fastertransformer
        if engine == "fastertransformer" and ft is not None:
            return Result(q, None, (Conflict("engine.legacy", f"FasterTransformer is archived ({ft.archived}): its Triton backend builds "
                                             f"on Triton {', '.join(ft.triton_releases)} only, not {pins}",
                                             f"use its successor: {_successor(m, q)}; or drop --triton", ft.source),),
                          warnings=(_legacy_warning(m, q, lambda: _successor(m, q)),))
        return Result(q, None, (Conflict("engine.no-release", f"no {engine} release matches {pins or 'the query'}",
                                         f"use one of: {'; '.join(have[:6]) or 'none in the matrix'}"
                                         + (" (trtllm-serve came with TensorRT-LLM 0.15.0)" if engine == "trtllm" else ""),
                                         "doc:matrix.toml [[triton]], [[trtllm_backend]], [[trtllm]]"),))
    warnings: tuple[str, ...] = ()
    if engine == "fastertransformer":
        warnings = (_legacy_warning(m, q, lambda: _successor(m, q)),)
    best: Optional[tuple[list[Conflict], _Candidate]] = None
    forward: Optional[tuple[_Candidate, tuple[str, ...]]] = None
    for c in chosen:
        conflicts, notes, through_compat = _check(m, q, c)
        if not conflicts and not through_compat:  # the driver meets the container's requirement natively: preferred
            return Result(q, None, warnings=warnings + _support_warnings(m, q, c), engine=_solution(m, q, c, notes))
        if not conflicts and forward is None:
            forward = (c, notes)
        if conflicts and (best is None or len(conflicts) < len(best[0])):
            best = (conflicts, c)
    if forward is not None:
        return Result(q, None, warnings=warnings + forward[1][:1] + _support_warnings(m, q, forward[0]),
                      engine=_solution(m, q, forward[0], forward[1]))
    assert best is not None
    conflicts = best[0]
    if engine != "fastertransformer":
        fits = _fits_without(m, q, chosen)
        if fits:
            conflicts = [replace(x, fix=f"{x.fix}; {fits}") for x in conflicts]
        else:
            conflicts = [_upgrade_fix(m, q, chosen, x) if x.rule == "engine.driver" else x for x in conflicts]
    else:
        succ = _successor(m, q)
        conflicts = [replace(x, fix=f"use its successor: {succ}" if x.rule == "engine.legacy" else f"{x.fix}; or use its successor: {succ}")
                     for x in conflicts]
    return Result(q, None, tuple(dict.fromkeys(conflicts)), warnings=warnings)


def _upgrade_fix(m: Matrix, q: Query, chosen: list[_Candidate], x: Conflict) -> Conflict:
    """No release fits the driver: the fix is the smallest driver upgrade after which one candidate has no conflict."""
    floors = []
    for c in chosen:
        if c.image.driver is not None and not _check(m, replace(q, driver=c.image.driver), c)[0]:
            floors.append((c.image.driver, c.label))
    if not floors:
        return x
    driver, label = min(floors)
    return replace(x, fix=f"upgrade the driver to >= {driver} ({label} needs it; no release envkit can build fits "
                          f"driver {q.driver})")


def _fits_without(m: Matrix, q: Query, chosen: list[_Candidate]) -> str:
    """The newest candidate that fits the GPU and the driver when the pins (--trtllm, --triton, --vllm) are dropped."""
    free = replace(q, trtllm=None, triton=None, vllm=None if q.engine == "triton-vllm" else q.vllm)
    for c in _candidates(m, q.engine or ""):
        conflicts, _, through_compat = _check(m, free, c)
        if not conflicts and not through_compat:
            return f"{c.label} fits this GPU and driver"
    return ""


def wheel_base(m: Matrix, sol: EngineSolution) -> WheelBase:
    """The CUDA runtime image a trtllm-serve image installs TensorRT-LLM's wheel on (generate --from-wheel): the [[cuda]]
    row of the release's own CUDA, whose OS Python is one its wheels are built for. Refused (exit 2) when the release
    does not state its CUDA or no such row exists."""
    r = sol.trtllm
    if sol.workflow != "trtllm-serve" or r is None:
        raise InputError("--from-wheel installs TensorRT-LLM's wheel for trtllm-serve", "use it with --engine trtllm")
    if r.cuda is None:
        known = [str(x.version) for x in m.trtllm if x.cuda is not None and _serves(m, x.version)[0]]
        raise InputError(f"TensorRT-LLM {r.version}'s release does not state its CUDA, so no CUDA image can be chosen for its wheel",
                         f"pick a release that does with --trtllm ({', '.join(known)}), or drop --from-wheel (Triton's container)")
    tk = m.cuda_toolkit(Version(f"{r.cuda.major}.{r.cuda.minor}"))
    osr = m.os_release(tk.os) if tk is not None else None
    if tk is None or osr is None:
        raise InputError(f"the matrix has no CUDA {r.cuda.major}.{r.cuda.minor} image for TensorRT-LLM {r.version}'s wheel",
                         "drop --from-wheel (Triton's container)")
    g = sol.gpu
    if g is not None and g.cc is not None and any(sass_runs_on(a, g.cc) for a in r.pip_unsupported_archs):
        raise InputError(f"TensorRT-LLM {r.version}'s notes say its pip wheel does not install on {g.arch} ({g.name})",
                         "drop --from-wheel (Triton's container), or pick another --trtllm")
    if r.python and osr.python not in r.python:
        raise InputError(f"TensorRT-LLM {r.version}'s wheels are for Python {', '.join(str(p) for p in r.python)}; "
                         f"{tk.runtime_image} has Python {osr.python}", "drop --from-wheel (Triton's container)")
    return WheelBase(tk.runtime_image, str(tk.version), osr.python, tk.source)
