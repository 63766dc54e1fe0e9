"""The resolver's input: resolve flags checked and parsed against the matrix into a Query (a GPU found by
name or arch, versions and specifiers in packaging's terms), each bad flag one InputError naming the fix.

One grammar for every version flag (issue 14): ASCII digits only (`re.ASCII`, `[0-9]`: `\\d` admits ١٢ and
１２, which packaging then refuses with a traceback); a version with fewer parts is a prefix, as `--torch 2`
means 2.*: `--cuda 12` is the newest 12.x the rest allows, likewise `--rocm 6`, `--dtk 24`, `--python 3`;
the spellings of wheel tags are read too (`--cuda cu124`, `--rocm rocm6.2`). Flags that contradict each
other (two toolkits, `--platform cpu --cuda 12.4`, a CPU stack with `--gpu`) are refused, never dropped."""
from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Iterable, NamedTuple, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.errors import InputError
from envkit.model.engine_specs import CONTAINER_ENGINES, ENGINES, PIP_ENGINES
from envkit.model.flags import FLAG, ResolveFlags, check_values, shown
from envkit.model.matrix import CC, PLATFORMS, Driver, Gpu, Matrix, dtk_text, gpu_name_key, parse_arch
from envkit.model.solution import Query

# the flash-attn csrc kernels envkit builds, and the module each one installs
KERNELS = {"layer_norm": "dropout_layer_norm", "rotary": "rotary_emb"}

PLATFORM_WORD = {"cuda": "CUDA", "rocm": "ROCm", "dtk": "DTK", "cpu": "CPU"}


def find_gpu(m: Matrix, text: str) -> Gpu:
    key = gpu_name_key(text)
    known = m.index.gpu_by_name.get(key)
    if known is not None:
        return known
    for prefix in ("nvidia", "geforce", "tesla", "amd", "instinct", "hygon", "dcu"):
        if key.startswith(prefix) and key != prefix:
            try:
                return find_gpu(m, key[len(prefix):])
            except InputError:
                pass
    try:
        arch = parse_arch(text)
    except ValueError as exc:  # sm_5, sm_0, sm_, gfx (fuzz report 11)
        raise InputError(f"--gpu {exc}", "write the arch like sm_86, sm_120, 8.6 or gfx942, "
                         "or give the product name (envkit matrix show gpu)") from None
    if arch is not None:
        return _gpu_of_arch(m, text, arch)
    names = [g.name for g in m.gpus] + [a for g in m.gpus for a in g.aliases]
    close = difflib.get_close_matches(text, names, n=4, cutoff=0.5) or difflib.get_close_matches(
        text.upper(), [n.upper() for n in names], n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "see `envkit matrix show gpu`"
    raise InputError(f"unknown GPU {shown(text)}", f"{hint} (or give the arch: sm_86, gfx942)")


def known_archs(m: Matrix) -> tuple[set[str], set[str]]:
    """The NVIDIA (sm_NN) and AMD/Hygon (gfxNNN) archs some row of the matrix names: a GPU's, a CUDA toolkit's or
    a driver family's, or one a torch, ROCm, flash-attn or vLLM build is compiled for."""
    sm = {g.arch for g in m.gpus if g.vendor == "nvidia"}
    gfx = {g.arch for g in m.gpus if g.vendor != "nvidia"}
    ccs: list[CC] = [a for c in m.cuda for a in c.archs] + [a for d in m.gpu_drivers for a in d.archs]
    ccs += [a for b in m.torch for a in b.ccs] + [a for f in m.flash_attn for a, _ in f.archs]
    for v in m.vllm:
        ccs += list(v.cuda_archs or ()) + [a for x in (*v.variants, *v.rocm_wheels) for a in x.archs or ()]
    sm |= {c.sm for c in ccs}
    gfx |= {a for b in m.torch if b.platform != "cuda" for a in b.archs}
    gfx |= {a for r in m.rocm for a in r.archs} | {a for f in m.flash_attn for a in f.rocm_archs} \
        | {a for v in m.vllm for a in v.rocm_archs}
    return sm, gfx


def _arch_order(arch: str) -> tuple[int, str]:
    digits = re.sub(r"[^0-9]", "", arch)
    return (int(digits) if digits else 0, arch)


def _gpu_of_arch(m: Matrix, text: str, arch: str) -> Gpu:
    """The GPU of an arch the matrix knows; an arch no row names is refused (sm_99 solved a full stack, gfx9999
    gave a conflict: fuzz report 11, newcomer D7)."""
    sm, gfx = known_archs(m)
    family = sm if arch.startswith("sm_") else gfx
    if arch not in family:
        ordered = sorted(family, key=_arch_order)
        close = difflib.get_close_matches(arch, ordered, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise InputError(f"unknown arch {arch} (--gpu {shown(text.strip())}): no GPU or build in the matrix has it",
                         f"{hint}the matrix knows {', '.join(ordered)}")
    if arch.startswith("sm_"):
        return Gpu(name=arch, aliases=(), vendor="nvidia", arch=arch, memory_gb=0, bandwidth_gbs=0, min_dtk=None, source="query")
    same = [g for g in m.gpus if g.arch == arch]
    known = next((g for g in same if g.vendor == "amd"), same[0] if same else None)
    vendor = known.vendor if known else "amd"
    return Gpu(name=arch, aliases=(), vendor=vendor, arch=arch, memory_gb=0, bandwidth_gbs=0,
               min_dtk=known.min_dtk if known else None, source="query")


_SPEC_EXAMPLES = {"torch": "2.4.1, 2.4, 2, '>=2.3,<2.5' or 2.4.1+cu124",
                  "flash-attn": "2.6.3, 2.6, 2 or '>=2.5,<2.7'",
                  "vLLM": "0.6.3, 0.6 or '>=0.6,<0.8' ('>=0' for the newest)",
                  "TensorRT-LLM": "0.8.0, 0.19 or '>=0.15,<1'"}
_PACKAGE = {"torch": r"torch", "flash-attn": r"flash[-_]attn", "vLLM": r"vllm", "TensorRT-LLM": r"tensorrt[-_]llm"}


_LONG_NUMBER = re.compile(r"[0-9]{9,}", re.ASCII)  # no version part is that long; int() refuses 4300+ digits


def _spec(text: str, what: str, option: str) -> tuple[SpecifierSet, Optional[str]]:
    """'2' -> ==2.*, '2.6' -> ==2.6.*, '2.1.2+cu118' -> ==2.1.2 and local cu118, '>=2.5' as is; 'torch==2.4.0'
    (pip's spelling) as '==2.4.0'."""
    t = text.strip().replace(" ", "")
    t = re.sub(rf"^{_PACKAGE[what]}(?=[<>=!~])", "", t, flags=re.IGNORECASE)
    local = None
    try:
        if re.match(r"^[<>=!~]", t):
            if _LONG_NUMBER.search(t):
                raise InvalidSpecifier(t)
            return SpecifierSet(t), None
        if not re.fullmatch(r"[0-9a-z.+!_-]+", t, re.ASCII | re.IGNORECASE) or _LONG_NUMBER.search(t):
            raise InvalidVersion(t)
        v = Version(t)
        local = v.local
        base = v.public
        if len(v.release) < 3 and v.pre is None and v.post is None and v.dev is None:
            return SpecifierSet(f"=={base}.*"), local
        return SpecifierSet(f"=={base}"), local
    except (InvalidVersion, InvalidSpecifier):
        raise InputError(f"{option} {shown(text)} is not a version or specifier", f"write it like {_SPEC_EXAMPLES[what]}") from None


class _Tk(NamedTuple):
    """How one toolkit (or Python) flag is written: what it names, its tag prefixes (cu124, rocm6.2, cp311), and
    the examples its errors give."""
    what: str
    prefixes: tuple[str, ...]
    example: str


_TOOLKIT = {"cuda": _Tk("CUDA", ("cuda", "cu"), "12.4, 12 (the newest 12.x) or cu124"),
            "rocm": _Tk("ROCm", ("rocm",), "6.2, 6 (the newest 6.x) or rocm6.2"),
            "dtk": _Tk("DTK", ("dtk",), "24.04, 24 (the newest 24.x)"),
            "python": _Tk("Python", ("python", "cp", "py"), "3.11, 3 (the newest 3.x)")}


def given_version(key: str, text: str) -> Optional[Version]:
    """A toolkit or Python flag's version as written (all its parts), or None when it is not one.
    ASCII digits only: packaging refuses others (fuzz report 10). cu124 is 12.4 and cp311 3.11 (the last
    digit is the minor), rocm6.2 is 6.2."""
    t = text.strip().lower()
    tk = _TOOLKIT[key]
    tag = next((p for p in tk.prefixes if t.startswith(p) and t != p), None)
    t = t[len(tag):].lstrip("-_") if tag else t.lstrip("v")
    if tag in ("cu", "cp") or (tag and key in ("cuda", "python") and re.fullmatch(r"[0-9]{2,3}", t, re.ASCII)):
        if not re.fullmatch(r"[1-9][0-9]{1,2}", t, re.ASCII):
            return None
        t = f"{t[0]}.{t[1:]}" if key == "python" else f"{t[:-1]}.{t[-1]}"  # cp311 is 3.11, cu124 is 12.4
    if not re.fullmatch(r"[0-9]{1,8}(\.[0-9]{1,8}){0,2}", t, re.ASCII):
        return None
    return Version(t)


def _toolkit_prefix(m: Matrix, key: str, text: str, known: list[Version], show: Callable[[Version], str]) -> Version:
    """A toolkit or Python version: a prefix of a release in the matrix (6.2 matches 6.2.4; 12 is any 12.x).
    CUDA and Python are chosen by X.Y: a patch given (12.4.1, 3.11.4) is read as X.Y (the Result says so)."""
    tk = _TOOLKIT[key]
    v = given_version(key, text)
    if v is None:
        raise InputError(f"{FLAG[key]} {shown(text)} is not a {tk.what} version", f"write it like {tk.example}")
    if key in ("cuda", "python") and len(v.release) > 2:
        v = Version(f"{v.major}.{v.minor}")
    if not any(release_starts_with(k, v) for k in known):
        raise InputError(f"{tk.what} {text.strip()} is not in the matrix ({FLAG[key]})",
                         f"use one of {', '.join(show(k) for k in sorted(set(known), reverse=True))}")
    return v


def parse_query(m: Matrix, flags: Optional[ResolveFlags] = None, **given: Optional[str]) -> Query:
    """The resolve flags (a ResolveFlags, or the same as keywords) checked and parsed against the matrix; flags that
    contradict each other are refused (fuzz report 9)."""
    f = flags if flags is not None else ResolveFlags.from_mapping(given)
    check_values(f)
    q: dict[str, Any] = {"given": tuple(f.to_dict().items())}
    if f.gpu is not None:
        if f.gpu.strip().lower() == "auto":
            raise InputError("--gpu auto reads the GPU host's facts, which this command does not",
                             "use it with envkit resolve, generate, bundle, build or lock (there --host-facts FILE reads a recorded "
                             "host), or name the GPU: --gpu H100")
        q["gpu"] = find_gpu(m, f.gpu)
    if f.driver is not None:
        q["driver"] = _parse_driver(f.driver)
    if f.platform is not None:
        q["platform"] = _parse_platform(f.platform)
    if f.platform_arch is not None:
        q["machine"] = parse_machine(f.platform_arch)
    if f.cuda is not None:
        q["cuda"] = _toolkit_prefix(m, "cuda", f.cuda, [c.version for c in m.cuda], str)
    if f.rocm is not None:
        q["rocm"] = _toolkit_prefix(m, "rocm", f.rocm, [r.version for r in m.rocm], str)
    if f.dtk is not None:
        q["dtk"] = _toolkit_prefix(m, "dtk", f.dtk, [d.version for d in m.dtk], dtk_text)
    if f.python is not None:
        q["python"] = _toolkit_prefix(m, "python", f.python, [p.version for p in m.python], str)
    if f.torch is not None:
        q["torch"], q["torch_local"] = _parse_torch(m, f.torch)
    if f.flash_attn is not None:
        q["flash_attn"] = _parse_release(m, "flash_attn", f.flash_attn, "flash-attn", " (FlashAttention 1.x, 3 and 4 are not modelled)")
    if f.vllm is not None:
        q["vllm"] = _parse_release(m, "vllm", f.vllm, "vLLM", "")
    if f.flash_attn_profile is not None:
        q["flash_attn_profile"] = parse_fa_profile(f)
    if f.kernels is not None:
        q["kernels"] = _parse_kernels(f.kernels)
    if f.kernels_from is not None:
        q["kernels_from"] = _parse_kernels_from(m, f)
    q.update(_parse_engine(m, f))
    query = Query(**q)
    _refuse_contradictions(m, query)
    return query


def _parse_driver(text: str) -> Driver:
    if not re.fullmatch(r"[0-9]{3}(\.[0-9]{1,8}){0,2}", text.strip(), re.ASCII):
        raise InputError(f"--driver {shown(text)} is not a driver version", "write it like 535.104.05 (nvidia-smi's Driver Version)")
    return Driver.parse(text)


MACHINE_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def parse_machine(text: str) -> str:
    """--platform-arch: x86_64 or aarch64, also as Docker (amd64, arm64) and GitHub (x64) spell them."""
    m = MACHINE_ALIASES.get(text.strip().lower())
    if m is None:
        raise InputError(f"--platform-arch {shown(text)} is not a CPU architecture envkit builds for",
                         "use x86_64 (amd64) or aarch64 (arm64: GH200, GB200, Jetson)")
    return m


def parse_fa_profile(f: ResolveFlags) -> str:
    """--flash-attn-profile as its normal form: "full", or "serving:64,128,256:bf16,fp16" (build_flash_attn's spelling)."""
    from envkit.inimage.build_flash_attn import BuildError, parse_profile

    text = (f.flash_attn_profile or "").strip().lower()
    try:
        name, dims, dtypes = parse_profile(text)
    except BuildError as exc:
        raise InputError(str(exc).replace("--profile", "--flash-attn-profile").split(" (fix: ")[0],
                         "write --flash-attn-profile full, serving, or serving:64,128[:bf16]") from None
    if f.flash_attn is None:
        raise InputError("--flash-attn-profile chooses the kernels of a flash-attn source build; no --flash-attn is asked",
                         "add --flash-attn VERSION, or drop --flash-attn-profile")
    return name if name == "full" else f"{name}:{','.join(map(str, dims))}:{','.join(dtypes)}"


def _parse_platform(text: str) -> str:
    t = text.strip().lower()
    if t not in PLATFORMS:
        raise InputError(f"unknown platform {shown(text)} (--platform)", f"use one of {', '.join(PLATFORMS)}")
    return t


def _parse_torch(m: Matrix, text: str) -> tuple[SpecifierSet, Optional[str]]:
    spec, local = _spec(text, "torch", "--torch")
    if not matches_any(m, "torch", spec):
        raise InputError(f"no torch release in the matrix matches {shown(text)}",
                         f"known releases: {version_span(sorted({b.version for b in m.torch}))}")
    if local and not any(b.local == local for b in m.torch):
        raise InputError(f"unknown torch variant +{local}",
                         "use a variant like +cu118, +cu124, +rocm6.2, +cpu")
    return spec, local


def _parse_release(m: Matrix, table: str, text: str, what: str, not_modelled: str) -> SpecifierSet:
    """A flash-attn or vLLM specifier that admits at least one release in the matrix."""
    spec, local = _spec(text, what, FLAG[table])
    if local is not None:  # vllm 0.2.7+cu118 names its CUDA: say where that goes instead of dropping it
        tag = re.fullmatch(r"cu([1-9][0-9])([0-9])", local, re.ASCII)
        cuda = f" --cuda {tag.group(1)}.{tag.group(2)}" if tag else ""
        raise InputError(f"{FLAG[table]} {shown(text)}: the +{local} of a {what} build is chosen by the resolver, not given",
                         f"write {FLAG[table]} {text.strip().split('+')[0]}{cuda}")
    if not matches_any(m, table, spec):
        known = [f.version for f in m.flash_attn] if table == "flash_attn" else [v.version for v in m.vllm]
        raise InputError(f"no {what} release in the matrix matches {shown(text)}",
                         f"known releases: {version_span(known)}{not_modelled}")
    return spec


def _parse_kernels(text: str) -> tuple[str, ...]:
    names = tuple(sorted({k.strip() for k in text.split(",") if k.strip()}))
    bad = [k for k in names if k not in KERNELS]
    if bad:
        raise InputError(f"unknown kernel(s): {', '.join(bad)}", f"use {', '.join(KERNELS)}")
    if not names:
        raise InputError(f"--kernels {shown(text)} names no kernel", f"use {', '.join(KERNELS)}")
    return names


def _parse_kernels_from(m: Matrix, f: ResolveFlags) -> Version:
    """--kernels-from: one flash-attn release whose sdist the --kernels are compiled from; flash-attn is not installed."""
    assert f.kernels_from is not None
    if f.flash_attn is not None:
        raise InputError("--kernels-from builds the kernels without flash-attn, --flash-attn installs it: a stack takes one of them",
                         f"drop --flash-attn (kernels only), or drop --kernels-from (flash-attn {f.flash_attn} and its kernels)")
    if f.kernels is None:
        raise InputError("--kernels-from names the sdist of the --kernels, and no --kernels is given",
                         "add --kernels rotary (or layer_norm,rotary), or drop --kernels-from")
    text = f.kernels_from.strip()
    v = Version(text) if re.fullmatch(r"[0-9]{1,8}(\.[0-9]{1,8}){1,3}(\.?post[0-9]{1,4})?", text, re.ASCII) else None
    known = sorted({x.version for x in m.flash_attn})
    if v is None or v not in known:
        raise InputError(f"--kernels-from {shown(f.kernels_from)} is not a flash-attn release in the matrix",
                         f"use one release, e.g. --kernels-from 2.7.4.post1 (known: {version_span(known)})")
    return v


def _engine_build(f: ResolveFlags, engine: Optional[str]) -> bool:
    """--engine-build: True for `source` (fastllm only), False for `wheel` or none."""
    if f.engine_build is None:
        return False
    build = f.engine_build.strip().lower()
    if build not in ("wheel", "source"):
        raise InputError(f"--engine-build {shown(f.engine_build)} is neither wheel nor source",
                         "use --engine-build source (compile fastllm from its tag) or --engine-build wheel (the default)")
    name = None if engine is None else engine.partition("==")[0].strip()
    if name != "fastllm":
        raise InputError(f"--engine-build {build} chooses how fastllm is installed; --engine is "
                         f"{shown(f.engine) if f.engine else 'not given'}",
                         "add --engine fastllm, or drop --engine-build")
    return build == "source"


_PIP_ONLY = ("torch", "flash_attn", "kernels", "kernels_from", "rocm", "dtk")  # what a container engine brings itself


def _pinned_release(m: Matrix, f: ResolveFlags, engine: str, version: str, source: bool) -> str:
    """`--engine NAME==VERSION`: a pip engine's release (or source tag) that the matrix holds."""
    if engine not in PIP_ENGINES:
        pinnable = f"{', '.join(PIP_ENGINES[:-1])} and {PIP_ENGINES[-1]}" if len(PIP_ENGINES) > 1 else PIP_ENGINES[0]
        raise InputError(f"--engine {shown(f.engine or '')}: only {pinnable} take ==VERSION",
                         "pin a container engine's release with --trtllm or --triton")
    from envkit.core.resolve import pip_engines  # its rules modules read this module's helpers

    known = pip_engines.releases(m, engine, source)
    if version not in known:
        what = "source tag" if source else "release"
        raise InputError(f"--engine {shown(f.engine or '')}: no {engine} {what} {version!r} in the matrix",
                         f"use one of: {', '.join(known[:12])}")
    return version


def _parse_engine(m: Matrix, f: ResolveFlags) -> dict[str, Any]:
    """--engine, --trtllm and --triton: which engine, and the pins that go with it; flags a container brings
    itself (torch, flash-attn, the csrc kernels) or that name another engine are refused."""
    out: dict[str, Any] = {}
    engine = None if f.engine is None else f.engine.strip().lower()
    source = _engine_build(f, engine)
    if source:
        out["engine_source"] = True
    if engine is not None and "==" in engine:  # --engine fastllm==1.9.0
        engine, _, version = (part.strip() for part in engine.partition("=="))
        out["engine_version"] = _pinned_release(m, f, engine, version, source)
    if engine is not None:
        if engine not in ENGINES:
            close = difflib.get_close_matches(engine, ENGINES, n=1, cutoff=0.5)
            raise InputError(f"unknown engine {shown(f.engine or '')} (--engine)",
                             (f"did you mean {close[0]}? " if close else "") + f"use one of {', '.join(ENGINES)}")
        out["engine"] = engine
    container = engine in CONTAINER_ENGINES
    if container:
        given = [k for k in _PIP_ONLY if getattr(f, k) is not None]
        if f.vllm is not None and engine != "triton-vllm":
            given.append("vllm")
        if f.platform is not None and f.platform.strip().lower() != "cuda":
            given.append("platform")
        if given:
            flags = " and ".join(FLAG[k] for k in given)
            raise InputError(f"--engine {engine} is a container that brings its own stack: {flags} cannot choose part of it",
                             f"drop {flags}, or use --engine torch (the pip stack) to choose them")
    if engine == "vllm" and f.vllm is None:
        out["vllm"] = SpecifierSet()
    if f.trtllm is not None:
        if engine not in ("trtllm", "triton-trtllm"):
            raise InputError("--trtllm picks a TensorRT-LLM release, which only --engine trtllm or triton-trtllm serves",
                             "add --engine triton-trtllm (Triton's container) or --engine trtllm (trtllm-serve)")
        spec, _ = _spec(f.trtllm, "TensorRT-LLM", "--trtllm")
        releases: set[Version] = {r.version for r in m.trtllm} | {t.trtllm for t in m.triton if t.trtllm is not None} \
            | {b.version for b in m.trtllm_backend}  # its rows, the containers' and the backend tags'
        if not any(spec.contains(v, prereleases=True) for v in releases):
            raise InputError(f"no TensorRT-LLM release in the matrix matches {shown(f.trtllm)}",
                             f"known releases: {version_span(releases)}")
        out["trtllm"] = spec
    if f.triton is not None:
        if engine not in ("triton-trtllm", "triton-vllm", "fastertransformer"):
            raise InputError("--triton picks a Triton container release, which only --engine triton-trtllm, triton-vllm "
                             "or fastertransformer uses", "add --engine triton-trtllm, or drop --triton")
        text = f.triton.strip()
        if not re.fullmatch(r"[0-9]{2}\.[0-9]{2}", text, re.ASCII):
            raise InputError(f"--triton {shown(f.triton)} is not a Triton release", "write it as YY.MM, e.g. --triton 24.05")
        out["triton"] = text
    return out


def local_builds(m: Matrix, local: str) -> tuple[str, frozenset[Version]]:
    """The platform of a torch variant (+cu124: cuda) and the toolkits its builds are made with."""
    builds = [b for b in m.torch if b.local == local]
    return builds[0].platform, frozenset(b.toolkit for b in builds if b.toolkit is not None)


class _Claim(NamedTuple):
    """A flag that picks the platform: which platform, the flag as given, and how to say "drop it"."""
    platform: str
    shown: str
    drop: str


def platform_claims(m: Matrix, q: Query) -> list[_Claim]:
    """The flags that pick a platform, in the order a message names them: the toolkit flags, --platform,
    and a torch variant (+cu124 is a CUDA build)."""
    given = q.flags()

    def text(key: str) -> str:
        return given.get(key, str(getattr(q, key)))

    out = [_Claim(k, f"{FLAG[k]} {text(k)}", FLAG[k]) for k in ("cuda", "rocm", "dtk") if getattr(q, k) is not None]
    if q.platform is not None:
        out.append(_Claim(q.platform, f"--platform {text('platform')}", "--platform"))
    if q.torch_local is not None:
        out.append(_Claim(local_builds(m, q.torch_local)[0], f"--torch {given.get('torch', '+' + q.torch_local)}",
                          f"the +{q.torch_local} of --torch"))
    return out


def _refuse_contradictions(m: Matrix, q: Query) -> None:
    """Flags that cannot hold together are bad input, named with the one to drop (fuzz report 9, newcomer D7):
    two platforms (two toolkits, --platform cpu with --cuda, +cu124 with --rocm), a torch variant built for another
    toolkit than the one asked, and a CPU stack with a GPU. A GPU of another vendor than the platform asked is a
    conflict (platform.gpu), worded after the flag that asked it (checks.py)."""
    claims = platform_claims(m, q)
    for a in claims:
        b = next((x for x in claims if x.platform != a.platform), None)
        if b is not None:
            kind = "toolkit" if {a.drop, b.drop} <= {"--cuda", "--rocm", "--dtk"} else "platform"
            raise InputError(f"{a.shown} asks for a {PLATFORM_WORD[a.platform]} stack and {b.shown} for a {PLATFORM_WORD[b.platform]} one: "
                             f"a stack has one {kind}",
                             f"drop {b.drop} for a {PLATFORM_WORD[a.platform]} stack, or {a.drop} for a {PLATFORM_WORD[b.platform]} one")
    if q.torch_local is not None:
        plat, toolkits = local_builds(m, q.torch_local)
        asked = {"cuda": q.cuda, "rocm": q.rocm, "dtk": q.dtk}.get(plat)
        if asked is not None and toolkits and not any(release_starts_with(t, asked) for t in toolkits):
            show = dtk_text if plat == "dtk" else str
            built = ", ".join(show(t) for t in sorted(toolkits))
            raise InputError(f"--torch {q.flags()['torch']} is built for {PLATFORM_WORD[plat]} {built}, "
                             f"{FLAG[plat]} {q.flags()[plat]} asks for another",
                             f"drop the +{q.torch_local} of --torch, or use {FLAG[plat]} {show(max(toolkits))}")
    if q.gpu is not None and q.gpu.machine and q.machine and q.machine != q.gpu.machine:
        raise InputError(f"--gpu {q.flags()['gpu']} is an {q.gpu.machine} system ({q.gpu.name}'s host CPU is Grace, an Arm CPU) and "
                         f"--platform-arch {q.flags()['platform_arch']} asks for {q.machine}",
                         f"drop --platform-arch (or write --platform-arch {q.gpu.machine})")
    if q.gpu is not None and claims and claims[0].platform == "cpu":
        cpu = claims[0]
        raise InputError(f"{cpu.shown} asks for a CPU stack, which drives no GPU, and --gpu {q.flags()['gpu']} names one",
                         f"drop --gpu for a CPU stack, or {cpu.drop} for a {PLATFORM_WORD[q.gpu.platform]} one")


def asked_text(v: Version) -> str:
    """A toolkit version as asked: 12.4, or 12.x for `--cuda 12`."""
    return f"{v}.x" if len(v.release) == 1 else str(v)


def release_starts_with(full: Version, given: Version) -> bool:
    return full.release[: len(given.release)] == given.release


def version_span(versions: Iterable[Version]) -> str:
    vs = sorted(versions)
    return f"{vs[0]} ... {vs[-1]}" if vs else "none"


def matches_any(m: Matrix, table: str, spec: SpecifierSet) -> bool:
    return any(spec.contains(v, prereleases=True) for v in m.index.versions[table])


def matching_versions(m: Matrix, table: str, spec: SpecifierSet) -> frozenset[Version]:
    """The versions of one table (torch, flash_attn, vllm) that a query's specifier admits."""
    return frozenset(spec.filter(m.index.versions[table], prereleases=True))
