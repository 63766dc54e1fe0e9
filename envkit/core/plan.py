"""The build planner: a pure function from a resolved Solution and a Site to a BuildPlan.

A plan is two stages. `build` starts from a devel image, compiles what must be compiled and
installs everything into /opt/venv. `runtime` starts from the slim runtime image, installs only the
interpreter's shared libraries and copies /opt/venv (and /opt/python) over: no compiler in it.

Every step says why it is there and what it reaches over the network ("none", "site" for the
site's own mirrors, "internet"). With a site file, a step that would reach the internet is
refused; with --offline, every artifact comes from the build context and any step left needing a
network is refused, naming the step.
"""
from __future__ import annotations

import re
from typing import Optional
from urllib.parse import urlsplit

from packaging.version import Version

from envkit.errors import InputError
from envkit.model.matrix import Matrix, OsRelease
from envkit.model.solution import Solution
from envkit.core.resolve import dtk_text
from envkit.model.site import Site
from envkit.model.plan import BuildPlan, Carried, Options, PYTHON_FTP, PYTHON_PREFIX, Stage, Step, VENV, WHEELHOUSE

# Build tools pinned once, for every Python from 3.8 on (each ships a py3 or abi3 wheel).
BUILD_TOOLS = ("setuptools==69.5.1", "wheel==0.43.0", "packaging==24.0", "ninja==1.11.1.1", "psutil==5.9.8")
FLASH_ATTN_DEPS = ("einops==0.7.0",)


def _refuse(step: str, what: str, fix: str) -> InputError:
    return InputError(f"step `{step}` {what}", fix)


class _Fetch:
    """Decides, per URL, whether a step reaches the internet, the site's mirror, or the context."""

    def __init__(self, site: Site, offline: bool) -> None:
        self.site, self.offline = site, offline

    def url(self, step: str, url: str) -> tuple[str, str]:
        """(url to use, network kind). Refuses what the site cannot serve."""
        if self.offline:
            raise _refuse(step, f"needs {url} in offline mode", "carry the artifact in the build context (envkit bundle) instead")
        if not self.site.given:
            return url, "internet"
        mirrored = self.site.rewrite(url)
        if mirrored is None:
            host = urlsplit(url)
            raise _refuse(step, f"needs {url}, which {self.site.path} does not mirror",
                          f"add [rewrite] \"{host.scheme}://{host.netloc}\" = \"<your mirror of it>\" to the site file, or build --offline from a bundle")
        return mirrored, "site"

    def index(self, step: str) -> str:
        if self.offline:
            return "none"
        if self.site.given and not self.site.pip_index:
            raise _refuse(step, f"installs from a Python package index, which {self.site.path} does not name",
                          "add [pip] index_url = \"http://<your mirror>/simple\" to the site file")
        return "site" if self.site.given else "internet"


def base_os(m: Matrix, sol: Solution, site: Site) -> tuple[str, str, OsRelease]:
    """(devel image, runtime image, os) for the solution's platform."""
    if sol.platform == "cuda":
        assert sol.cuda is not None
        osr = m.os_release(sol.cuda.os)
        devel, runtime = sol.cuda.devel_image, sol.cuda.runtime_image
    elif sol.platform == "rocm":
        r = m.rocm_release(sol.toolkit)
        assert r is not None
        if r.devel_image is None or r.os is None:
            raise InputError(f"no public base image for ROCm {sol.toolkit} is known to envkit",
                             f"pin another ROCm with --rocm, or add a [[rocm]] row for {sol.toolkit} with its image and source to matrix.toml")
        devel, runtime, osr = r.devel_image, r.runtime_image or r.devel_image, m.os_release(r.os)
    elif sol.platform == "dtk":
        if not site.dtk_devel or not site.dtk_os:
            raise InputError(f"DTK {dtk_text(sol.toolkit)} images are not on Docker Hub and no site file names one",
                             "add [dtk] devel_image, runtime_image and os (e.g. \"ubuntu20.04\") to the site file given with --mirror")
        osr = m.os_release(site.dtk_os)
        if osr is None:
            raise InputError(f"site file: [dtk] os {site.dtk_os!r} is not a known os",
                             f"use one of: {', '.join(o.name for o in m.os)}")
        devel, runtime = site.dtk_devel, site.dtk_runtime or site.dtk_devel
    else:
        osr = next(o for o in m.os if o.cpu_image)
        devel = runtime = osr.cpu_image or ""
    assert osr is not None
    return devel, runtime, osr


def _qualified(ref: str) -> str:
    """Fully qualified image names: Podman and intranet registries do not guess docker.io."""
    first = ref.split("/")[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def _stack(sol: Solution) -> str:
    parts = [sol.platform if sol.platform == "cpu" else f"{sol.platform} {sol._toolkit_text}",
             f"python {sol.python}", f"torch {sol.torch.pin}"]
    if sol.flash_attn:
        parts.append(f"flash-attn {sol.flash_attn.version} ({sol.flash_attn.build})")
    if sol.kernels:
        parts.append("kernels " + ",".join(k.name for k in sol.kernels))
    if sol.vllm:
        parts.append(f"vllm {sol.vllm.version}")
    if sol.gpu:
        parts.append(f"for {sol.gpu.name} ({sol.gpu.arch})")
    return ", ".join(parts)


def plan(m: Matrix, sol: Solution, site: Site, opts: Options) -> BuildPlan:
    if sol.vllm is not None and sol.platform == "rocm":
        raise InputError(f"vLLM {sol.vllm.version} on ROCm is built by vLLM's own Dockerfile.rocm, which envkit does not generate",
                         "drop --vllm and base a serving image on the site's mirror of rocm/vllm, or serve on CUDA")
    if opts.host_march != "native" and not re.fullmatch(r"[a-z0-9_.-]+", opts.host_march):
        raise InputError(f"--host-march {opts.host_march!r} is not a gcc -march value", "use e.g. x86-64-v2, x86-64-v3 or native")
    if sol.python < Version("3.8"):
        raise InputError(f"Python {sol.python}: envkit generates images for Python 3.8 and newer", "pass --python 3.8 (or newer)")
    fetch = _Fetch(site, opts.offline)
    devel_up, runtime_up, osr = base_os(m, sol, site)
    devel, runtime = site.image(_qualified(devel_up)), site.image(_qualified(runtime_up))
    carried: list[Carried] = []
    reqs: list[str] = []
    fetch_from: list[tuple[str, Optional[str]]] = []  # what `envkit bundle` downloads: (spec or URL, extra index)
    warnings: list[str] = []

    distro_python = osr.python == sol.python
    py = m.python_release(sol.python)
    if not distro_python and py is None:
        raise InputError(f"Python {sol.python} is neither {osr.name}'s own ({osr.python}) nor a known CPython tarball",
                         f"pass --python {osr.python}")
    index_net = fetch.index("build-venv")

    def site_step(stage: str) -> list[Step]:
        if not (site.given or opts.offline):
            return []
        what = []
        if opts.offline:
            what.append("apt uses only the carried repository (debs/), pip only the wheelhouse")
        else:
            if site.apt_mirror:
                what.append("apt points at the site mirror (sources.list and deb822 .sources)")
            if site.pip_index:
                what.append("pip points at the site index")
        if site.remove_vendor_lists or opts.offline:
            what.append("NVIDIA/ROCm vendor apt lists that reach the internet are removed")
        if site.ca_cert:
            what.append("the site CA certificate is trusted")
        return [Step(f"{stage}-site", "site mirrors", "; ".join(what) or "site settings", "site", (("stage", stage),))]

    def apt_step(stage: str, packages: tuple[str, ...], why: str) -> Step:
        pkgs = tuple(sorted(set(packages)))
        if opts.offline:
            carried.append(Carried(f"debs/{stage}/", f"flat apt repository (Packages + .deb) for: {' '.join(pkgs)}",
                                   f"apt-get download in {osr.name} (envkit bundle)"))
            return Step(f"{stage}-apt", "apt packages (carried)", why, "apt-offline",
                        (("stage", stage), ("packages", " \\\n        ".join(pkgs))), "none")
        if site.given and not site.apt_mirror:
            raise _refuse(f"{stage}-apt", f"needs {osr.name}'s package archive, which {site.path} does not mirror",
                          "add [apt] mirror = \"http://<your mirror>/ubuntu\" (or /debian) to the site file")
        return Step(f"{stage}-apt", "apt packages", why, "apt", (("packages", " \\\n        ".join(pkgs)),),
                    "site" if site.apt_mirror else "internet")

    # ------------------------------------------------------------ build stage
    b: list[Step] = site_step("build")
    compiles = bool(sol.kernels) or (sol.flash_attn is not None and sol.flash_attn.build == "source")
    if not distro_python:
        build_pkgs, why = osr.cpython_build, f"compilers and the libraries CPython {sol.python} builds against"
    elif compiles:
        build_pkgs, why = osr.build_packages + osr.python_packages, f"compilers for the kernels and {osr.name}'s Python {osr.python} with its headers"
    else:
        build_pkgs, why = osr.python_runtime, f"{osr.name}'s Python {osr.python}; nothing is compiled, so no compiler"
    if sol.flash_attn is not None and sol.flash_attn.build == "source":
        build_pkgs, why = build_pkgs + ("git",), why + "; git, which flash-attn's setup.py calls for its submodules"
    b.append(apt_step("build", build_pkgs, why))
    if distro_python:
        python_bin = f"/usr/bin/python{osr.python}"
    else:
        assert py is not None
        full = py.tarball[len("Python-"):].rsplit(".", 1)[0]
        carried.append(Carried(f"sources/{py.tarball}", f"CPython {full} source", f"{PYTHON_FTP}/{full}/{py.tarball}"))
        python_bin = f"{PYTHON_PREFIX}/bin/python{sol.python}"
        b.append(Step("build-python", f"CPython {full} from the carried tarball",
                      f"{osr.name} ships Python {osr.python}, the stack needs {sol.python}", "python-tarball",
                      (("tarball", py.tarball), ("prefix", PYTHON_PREFIX))))
    pip_source = f"--no-index --find-links {WHEELHOUSE}" if opts.offline else ""
    if opts.offline:
        carried.append(Carried("wheelhouse/", "every wheel in `requirements` (and their dependencies)", "pip download in the target image (envkit bundle)"))
    b.append(Step("build-venv", f"virtual environment {VENV}", "one self-contained tree to copy into the runtime stage",
                  "venv", (("python", python_bin), ("venv", VENV), ("wheelhouse", "yes" if opts.offline else ""))))
    tools = (BUILD_TOOLS if compiles else ()) + (FLASH_ATTN_DEPS if sol.flash_attn else ())
    if tools:
        reqs.extend(tools)
        fetch_from.extend((t_, None) for t_ in tools)
        b.append(Step("build-tools", "pinned build tools" if compiles else "flash-attn's dependencies",
                      "flash-attn's setup.py imports packaging, psutil and torch; ninja makes the compile parallel; flash_attn imports einops"
                      if compiles else "flash_attn imports einops",
                      "pip", (("pip_source", pip_source), ("packages", " ".join(tools))), index_net))

    t = sol.torch
    torch_args, torch_net, torch_reach = pip_source, index_net, ()
    torch_spec = f"torch=={t.pin}"
    if t.index_url is None:
        assert t.wheel is not None
        carried.append(Carried(f"wheelhouse/{t.wheel}", f"torch {t.pin}", "the vendor's wheel site (see the matrix row's source)"))
        if not opts.offline:
            b.append(Step("build-torch-wheel", "carried torch wheel", f"torch {t.pin} is on no public index", "copy-wheel",
                          (("wheel", t.wheel),)))
        torch_args = f"{pip_source} " if pip_source else ""
        torch_spec = f"{WHEELHOUSE}/{t.wheel}"
        warnings.append(f"{t.wheel} is installed by file name: its version is not PEP 440, which pip >= 24.1 refuses; "
                        "the venv keeps the pip its Python ships (fix if pip was upgraded: pip install 'pip<24.1')")
    elif not opts.offline:
        url, torch_net = fetch.url("build-torch", t.index_url)
        torch_args, torch_reach = f"--extra-index-url {url}", (url,)
    reqs.append(f"torch=={t.pin}")
    if t.index_url:
        fetch_from.append((f"torch=={t.pin}", t.index_url))
    b.append(Step("build-torch", f"torch {t.pin}", f"the {t.variant} build (cxx11abi={t.cxx11abi}) every compiled module must match",
                  "pip", (("pip_source", torch_args.strip()), ("packages", torch_spec)), torch_net, torch_reach))

    modules = ["torch"]
    fa = sol.flash_attn
    sdist = None
    if fa is not None:
        if fa.build == "wheel" and fa.url and fa.wheel:
            reqs.append(f"flash-attn=={fa.version}")
            fetch_from.append((fa.url, None))
            if opts.offline:
                carried.append(Carried(f"wheelhouse/{fa.wheel}", f"flash-attn {fa.version} wheel (not on PyPI)", fa.url))
                b.append(Step("build-flash-attn", f"flash-attn {fa.version} wheel", f"prebuilt {fa.wheel} matches torch's ABI",
                              "pip", (("pip_source", pip_source), ("packages", f"{WHEELHOUSE}/{fa.wheel}")), "none"))
            else:
                url, net = fetch.url("build-flash-attn", fa.url)
                b.append(Step("build-flash-attn", f"flash-attn {fa.version} wheel", f"prebuilt {fa.wheel} matches torch's ABI",
                              "pip", (("pip_source", ""), ("packages", url)), net, (url,)))
        else:
            sdist = f"flash_attn-{fa.version}.tar.gz"
            arch = ";".join(fa.arch_list)
            archs_text = f"for {arch}" if fa.version >= Version("2.7.3") else \
                "for its hard-coded sm_80/sm_90 (FLASH_ATTN_CUDA_ARCHS arrived in 2.7.3)"
            b.append(Step("build-flash-attn", f"flash-attn {fa.version} from the sdist",
                          f"no prebuilt wheel for torch {t.pin}: compiled {archs_text} with FLASH_ATTENTION_FORCE_BUILD=TRUE (no GitHub download)",
                          "kernels", (("sdist", sdist), ("targets", "flash_attn"), ("arch_list", arch), ("host_march", opts.host_march))))
        modules += ["flash_attn", "flash_attn_2_cuda"]
    if sol.kernels:
        k0 = sol.kernels[0]
        sdist = sdist or f"flash_attn-{k0.flash_attn_sdist}.tar.gz"
        names = ",".join(k.name for k in sol.kernels)
        setup = "supplied by envkit" if k0.setup_py == "supplied" else "shipped, hard-coded gencodes neutralised"
        b.append(Step("build-kernels", f"flash-attn csrc kernels: {names}",
                      f"compiled from flash_attn-{k0.flash_attn_sdist} for {';'.join(k0.arch_list)} only (setup.py {setup}); the slow step",
                      "kernels", (("sdist", sdist), ("targets", names), ("arch_list", ";".join(k0.arch_list)), ("host_march", opts.host_march))))
        modules += [k.module for k in sol.kernels]
        if "rotary" in names and opts.host_march == "native":
            warnings.append("rotary is compiled with -march=native: the image needs the builder's CPU family (fix: --host-march x86-64-v2)")
        elif "rotary" in names:
            warnings.append(f"csrc/rotary's setup.py asks for -march=native; envkit compiles it with -march={opts.host_march} so the image runs on other CPUs (--host-march native keeps upstream's flag)")
    if sdist:
        version = sdist[len("flash_attn-"):-len(".tar.gz")]
        carried.append(Carried(f"sources/{sdist}", f"flash-attn {version} sdist", f"https://pypi.org/project/flash-attn/{version}/#files"))

    v = sol.vllm
    if v is not None:
        spec = f"vllm=={v.version}" + (f"+{sol.vllm_wheel.split('+')[1].split('-')[0]}" if sol.vllm_wheel and "+" in sol.vllm_wheel else "")
        reqs.append(spec)
        on_pypi = (sol.vllm_url or "").startswith("https://pypi.org/")
        fetch_from.append((spec if on_pypi else sol.vllm_url or spec, None))
        if on_pypi:
            b.append(Step("build-vllm", f"vLLM {v.version}", f"pins torch {v.torch}, which {t.pin} satisfies",
                          "pip", (("pip_source", pip_source), ("packages", spec)), "none" if opts.offline else index_net))
        elif opts.offline:
            assert sol.vllm_wheel and sol.vllm_url
            carried.append(Carried(f"wheelhouse/{sol.vllm_wheel}", f"vLLM {v.version} {t.variant} wheel (not on PyPI)", sol.vllm_url))
            b.append(Step("build-vllm", f"vLLM {v.version} ({t.variant} wheel)", f"the {t.variant} build from vLLM's release; pins torch {v.torch}",
                          "pip", (("pip_source", pip_source), ("packages", f"{WHEELHOUSE}/{sol.vllm_wheel}")), "none"))
        else:
            url, net = fetch.url("build-vllm", sol.vllm_url or "")
            # its dependencies built for this CUDA variant (xformers +cu118) live on torch's index, not on PyPI
            extra = f"--extra-index-url {fetch.url('build-vllm', t.index_url)[0]}" if t.index_url else ""
            b.append(Step("build-vllm", f"vLLM {v.version} ({t.variant} wheel)",
                          f"the {t.variant} build from vLLM's release; pins torch {v.torch}; CUDA-variant dependencies (xformers) from torch's {t.variant} index",
                          "pip", (("pip_source", extra), ("packages", url)), net, (url,) + ((t.index_url,) if t.index_url else ())))

    # ------------------------------------------------------------ runtime stage
    r: list[Step] = site_step("runtime")
    r.append(apt_step("runtime", osr.python_runtime if distro_python else osr.cpython_runtime,
                      f"{osr.name}'s Python {osr.python} runtime" if distro_python else f"shared libraries of CPython {sol.python}; no compiler"))
    r.append(Step("runtime-copy", "copy the environment from the build stage",
                  f"{VENV}" + ("" if distro_python else f" and {PYTHON_PREFIX}") + " hold every installed wheel; nothing is compiled here",
                  "copy-venv", (("venv", VENV), ("python_prefix", "" if distro_python else PYTHON_PREFIX))))
    r.append(Step("runtime-import-check", "import check", "an ABI mismatch (undefined symbol) fails the build instead of the first request",
                  "import-check", (("modules", ", ".join(modules)),)))
    r.append(Step("runtime-labels", "labels", "OCI labels and the resolved solution, so the image can tell what it is", "labels", ()))

    stages = (Stage("build", devel, devel_up, osr, tuple(b)), Stage("runtime", runtime, runtime_up, osr, tuple(r)))
    names = {"http": "http_proxy", "https": "https_proxy", "no_proxy": "no_proxy"}
    build_args = tuple(pair for k, val in site.proxy for pair in ((names[k], val), (names[k].upper(), val)))
    if sol.platform == "rocm":
        warnings.append("the matrix knows no slim ROCm runtime image: the runtime stage uses the rocm/dev image, hipcc included")
    if sol.platform == "dtk":
        warnings.append("DTK containers need the host's /opt/hyhal: run with -v /opt/hyhal:/opt/hyhal --device /dev/kfd --device /dev/dri")
    if opts.offline:
        warnings.append("offline: load the base images first (docker load -i; envkit bundle carries them), and build with --network none")
    return BuildPlan(sol, site, opts, stages, tuple(dict.fromkeys(carried)), tuple(reqs), tuple(fetch_from), tuple(sorted(build_args)),
                     tuple(warnings), "distro" if distro_python else "tarball", _stack(sol))
