"""The doctor's judge: pure checks from a Host (facts collected once) and the matrix to Findings,
each with what was seen, why it matters, the fix and the source of the rule.

The checks form a registry (CHECKS): each names its group and the catalogued rules it may emit
(envkit/data/rules.toml); judge() runs them in order. JUnit's per-group cases derive from it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.model.host import SEVERITIES, Finding, GpuFact, Host
from envkit.model.matrix import CC, CudaToolkit, Driver, Matrix, sass_runs_on
from envkit.model.rules import CATALOGUE, groups

MVC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"


def _v(text: Optional[str]) -> Optional[Version]:
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        m = re.match(r"\d+(\.\d+)*", text)
        return Version(m.group(0)) if m else None


def _xy(v: Version) -> Version:
    return Version(f"{v.major}.{v.minor}")


def _cc(g: GpuFact) -> Optional[CC]:
    try:
        return CC.parse(g.cc) if g.cc else None
    except ValueError:
        return None


def _driver_checks(m: Matrix, h: Host) -> list[Finding]:
    out = []
    if h.nvml_error and "mismatch" in h.nvml_error.lower():
        versions = "; ".join(x for x in (f"NVML library {h.nvml_library}" if h.nvml_library else "",
                                         f"kernel module {h.kernel_module}" if h.kernel_module else "") if x)
        out.append(Finding("error", "driver.library-mismatch", f"NVML: {h.nvml_error}" + (f" ({versions})" if versions else ""),
                           "the loaded nvidia kernel module and the user-space driver libraries are different versions (usually a driver "
                           "upgrade without a reboot): no CUDA program can start",
                           "reboot, or unload and reload the nvidia kernel modules (rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; "
                           "modprobe nvidia)",
                           "https://github.com/pytorch/pytorch/issues/45109"))
    tc, drv, dc = _v(h.torch_cuda), h.driver, _v(h.cuda_driver)
    d = None
    if drv:
        try:
            d = Driver.parse(drv)
        except ValueError:
            d = None
    row = m.cuda_toolkit(_xy(tc)) if tc is not None else None
    if tc is not None and row is not None and d is not None and d < row.min_driver:
        out.append(Finding("error", "driver.too-old", f"driver {drv} (CUDA {h.cuda_driver or '?'}); torch {h.torch or ''} is built for "
                           f"CUDA {h.torch_cuda}",
                           f"CUDA {row.version} needs driver >= {row.min_driver} even with minor-version compatibility",
                           f"install driver >= {row.toolkit_driver or row.min_driver}, or a torch built for the driver's CUDA (envkit "
                           f"resolve --driver {drv})",
                           MVC))
    elif tc is not None and dc is not None and dc.major < tc.major:
        out.append(Finding("error", "driver.too-old", f"driver {drv or '?'} supports CUDA {h.cuda_driver}; torch {h.torch or ''} is built "
                           f"for CUDA {h.torch_cuda}",
                           "a CUDA major newer than the driver's cannot run (minor-version compatibility stays within one major)",
                           f"upgrade the driver to one for CUDA {tc.major}.x, or install a torch built for CUDA {dc.major}.x"
                           + (f" (envkit resolve --driver {drv})" if drv else ""), MVC))
    return out


def _torch_build_checks(m: Matrix, h: Host) -> list[Finding]:
    nvidia = _nvidia(h)
    if h.torch and nvidia and ("+cpu" in h.torch or (h.torch_cuda in (None, "None", "") and not h.torch_hip and h.torch_archs is not None)):
        return [Finding("error", "torch.cpu-build", f"torch {h.torch} on a host with {nvidia[0].name}",
                        "a CPU-only torch never uses the GPU; everything falls back to the CPU",
                        "install the CUDA build: envkit resolve --gpu \"" + nvidia[0].name + "\" names the wheel and its index",
                        "https://pytorch.org/get-started/locally/")]
    return []


def _nvidia(h: Host) -> list[GpuFact]:
    return [g for g in h.gpus if _cc(g) is not None]


def _torch_arch_list(m: Matrix, h: Host) -> tuple[Optional[tuple[str, ...]], str]:
    """The installed torch's arch list (sm_XY, compute_XY) and where it was read: torch itself, else its matrix row."""
    if h.torch_archs is not None or not h.torch:
        return h.torch_archs, "torch.cuda.get_arch_list()"
    tv = _v(h.torch) if "+" in h.torch else None
    b = next((b for b in m.torch if b.version == Version(tv.public) and b.local == tv.local), None) if tv is not None else None
    if b is None:
        return None, "torch.cuda.get_arch_list()"
    return tuple(f"sm_{a.replace('.', '')}" for a in b.archs) + ((f"compute_{b.ptx.major}{b.ptx.minor}",) if b.ptx else ()), b.source


def _gpu_arch_checks(m: Matrix, h: Host) -> list[Finding]:
    out = []
    archs, source = _torch_arch_list(m, h) if _nvidia(h) else (None, "")
    for g in _nvidia(h):
        cc = _cc(g)
        if not archs or cc is None:
            continue
        sass = [CC.parse(f"{a[3:-1]}.{a[-1]}") for a in archs if re.fullmatch(r"sm_\d{2,3}", a)]
        ptx = [CC.parse(f"{a[8:-1]}.{a[-1]}") for a in archs if re.fullmatch(r"compute_\d{2,3}", a)]
        if not any(sass_runs_on(s, cc) for s in sass) and not any(p <= cc for p in ptx):
            out.append(Finding("error", "gpu.arch-not-in-torch",
                               f"{g.name} is sm_{cc.major}{cc.minor}; torch {h.torch} has {' '.join(archs)}",
                               "no kernel in this torch build runs on this GPU: \"no kernel image is available for execution on the "
                               "device\"",
                               f"install a torch whose arch list covers sm_{cc.major}{cc.minor} (envkit resolve --gpu \"{g.name}\")",
                               source))
    return out


def _torch_cuda_checks(m: Matrix, h: Host) -> list[Finding]:
    nvidia = _nvidia(h)
    if h.cuda_available is False and nvidia and h.torch_cuda not in (None, "None"):
        return [Finding("error", "torch.cuda-unavailable", f"torch {h.torch} says torch.cuda.is_available() is False with {nvidia[0].name} "
                        "present",
                        "the GPU is invisible to torch: driver too old, a mismatched driver library, or CUDA_VISIBLE_DEVICES",
                        "see the driver findings above; run nvidia-smi; check CUDA_VISIBLE_DEVICES", MVC)]
    return []


def _fa_wheel_tags(wheel: str) -> Optional[tuple[str, str, str]]:
    """(cu tag, torch minor, TRUE|FALSE) from a flash-attn wheel's local version label, e.g. +cu122torch2.3cxx11abiFALSE."""
    try:
        _, version, _, _ = parse_wheel_filename(wheel)
    except InvalidWheelFilename:
        return None
    m = re.fullmatch(r"cu(\d+)torch(\d+\.\d+)cxx11abi(true|false)", version.local or "")
    return (m.group(1), m.group(2), m.group(3).upper()) if m else None


def _flash_attn_gpu_checks(m: Matrix, h: Host) -> list[Finding]:
    fa = _v(h.flash_attn)
    if fa is None or fa.major != 2:
        return []
    for g in h.gpus:
        cc = _cc(g)
        if cc is not None and cc < CC(8, 0):
            row = next((f for f in m.flash_attn if f.version.major == 2), None)
            return [Finding("error", "flash-attn.gpu-arch", f"flash-attn {h.flash_attn} on {g.name} (sm_{cc.major}{cc.minor})",
                            "FlashAttention-2 runs on sm_80 and newer only (Ampere, Ada, Hopper, Blackwell)",
                            "use torch's scaled_dot_product_attention or xformers on this GPU, or serve on sm_80+",
                            row.source if row else "https://github.com/Dao-AILab/flash-attention#installation-and-features")]
    return []


def _flash_attn_import_checks(m: Matrix, h: Host) -> list[Finding]:
    errors = dict(h.import_errors)
    return [Finding("error", "flash-attn.abi", f"import {mod}: {errors[mod][:160]}",
                    "the module was compiled against another torch (version, CUDA major or C++ ABI) than the one installed",
                    "install the wheel whose torchX.Y, cuXY and cxx11abi tags match torch, or build it from source against this torch "
                    "(envkit generate)",
                    "https://github.com/Dao-AILab/flash-attention/issues/1644")
            for mod in ("flash_attn_2_cuda", "flash_attn", "rotary_emb", "dropout_layer_norm") if "undefined symbol" in errors.get(mod, "")]


def _flash_attn_wheel_checks(m: Matrix, h: Host) -> list[Finding]:
    tags = _fa_wheel_tags(h.flash_attn_wheel) if h.flash_attn_wheel and h.torch else None
    tv = _v(h.torch)
    if tags is None or tv is None:
        return []
    out, (cu, tmm, abi), releases = [], tags, "https://github.com/Dao-AILab/flash-attention/releases"
    if tmm != f"{tv.major}.{tv.minor}":
        out.append(Finding("error", "flash-attn.torch-mismatch", f"{h.flash_attn_wheel} on torch {h.torch}",
                           f"the wheel was built for torch {tmm}; its compiled module will not load against torch {tv.major}.{tv.minor}",
                           f"install the flash-attn wheel built for torch{tv.major}.{tv.minor} (envkit resolve --torch {tv.public} "
                           f"--flash-attn {h.flash_attn})",
                           releases))
    tc = _v(h.torch_cuda)
    if tc is not None and int(cu[:2 if len(cu) > 2 else 1]) != tc.major:
        out.append(Finding("error", "flash-attn.torch-mismatch", f"{h.flash_attn_wheel} on torch {h.torch} (CUDA {h.torch_cuda})",
                           f"the wheel was built with CUDA {cu[:-1]}.{cu[-1]}; another CUDA major than torch's does not load",
                           f"install the flash-attn wheel built for CUDA {tc.major} (envkit resolve --torch {tv.public} --flash-attn "
                           f"{h.flash_attn})",
                           releases))
    if h.torch_cxx11abi is not None and (abi == "TRUE") != h.torch_cxx11abi:
        out.append(Finding("error", "flash-attn.abi", f"{h.flash_attn_wheel}: cxx11abi{abi}; torch's _GLIBCXX_USE_CXX11_ABI is "
                           f"{h.torch_cxx11abi}",
                           "a different C++ ABI gives \"undefined symbol\" at import",
                           f"install the cxx11abi{str(h.torch_cxx11abi).upper()} wheel",
                           "https://github.com/Dao-AILab/flash-attention/issues/1644"))
    return out


def _vllm_checks(m: Matrix, h: Host) -> list[Finding]:
    vv, tv = _v(h.vllm), _v(h.torch)
    if vv is None or tv is None:
        return []
    row = next((r for r in m.vllm if r.version == Version(vv.public)), None)
    if row is None or Version(tv.public) in row.torch:
        return []
    return [Finding("error", "vllm.torch-pin", f"vLLM {h.vllm} with torch {h.torch}",
                    f"vLLM {row.version} is compiled against torch {row.torch}; another torch gives \"undefined symbol\" in vllm._C",
                    f"pip install \"torch{row.torch}\" from the index of your CUDA variant, or the vLLM that pins torch {tv.public} "
                    f"(envkit resolve --torch {tv.public} --vllm \"*\")",
                    row.source)]


def _kernels_wanted(h: Host) -> bool:
    """Kernels are to be built here, or an import says they are missing."""
    errors = dict(h.import_errors)
    return h.wants_kernels or any("No module named" in errors.get(k, "") for k in ("rotary_emb", "dropout_layer_norm"))


def _kernel_checks(m: Matrix, h: Host) -> list[Finding]:
    out = []
    wanted = _kernels_wanted(h)
    if wanted and not h.nvcc:
        out.append(Finding("error", "kernels.no-nvcc",
                           "no nvcc on PATH or in CUDA_HOME" + (f" (CUDA_HOME={h.cuda_home})" if h.cuda_home else ""),
                           "flash-attn and its csrc kernels compile with nvcc; runtime images and python:slim have none",
                           "build in a CUDA -devel image (envkit generate does) or install the toolkit and set CUDA_HOME=/usr/local/cuda",
                           "https://github.com/Dao-AILab/flash-attention/issues/1736"))
    nv = _v(h.nvcc)
    nv_row = m.cuda_toolkit(_xy(nv)) if nv is not None else None
    if nv_row is not None and wanted:
        out.extend(_nvcc_gpu_arch_checks(m, h, nv_row)[:1])
    if h.wants_kernels and nv_row is not None and CC(7, 0) not in nv_row.archs:
        out.append(Finding("warning", "kernels.nvcc-arch", f"nvcc {h.nvcc} cannot compile for compute_70",
                           "flash-attn's csrc/layer_norm and csrc/rotary setup.py hard-code -gencode arch=compute_70: upstream's build "
                           "fails with \"Unsupported gpu architecture 'compute_70'\"",
                           "build them with envkit's kernel script (envkit generate --kernels ...), which removes the hard-coded gencodes "
                           "and pins the arch",
                           "docs/kernel-build-gpu.md"))
    tc = _v(h.torch_cuda)
    if nv is not None and tc is not None and nv.major != tc.major and wanted:
        out.append(Finding("warning", "kernels.nvcc-torch-cuda", f"nvcc {h.nvcc}, torch built with CUDA {h.torch_cuda}",
                           "torch.utils.cpp_extension refuses a CUDA major that differs from torch's",
                           f"use a CUDA {tc.major}.x toolkit (CUDA_HOME) to build extensions for this torch",
                           "https://github.com/pytorch/pytorch/issues/136845"))
    return out


def _nvcc_gpu_arch_checks(m: Matrix, h: Host, nv_row: CudaToolkit) -> list[Finding]:
    """Each GPU of this host the host's nvcc cannot compile for."""
    out = []
    for g in h.gpus:
        cc = _cc(g)
        if cc is not None and cc not in nv_row.archs:
            newer = next((c.version for c in sorted(m.cuda, key=lambda c: c.version) if cc in c.archs), None)
            out.append(Finding("warning", "kernels.nvcc-arch", f"nvcc {h.nvcc} on a host with {g.name} (sm_{cc.major}{cc.minor})",
                               f"nvcc {nv_row.version} cannot compile for sm_{cc.major}{cc.minor}: any extension built here for this GPU "
                               f"fails with \"Unsupported gpu architecture 'compute_{cc.major}{cc.minor}'\"",
                               (f"use CUDA >= {newer} to build for this GPU" if newer else "use a newer CUDA toolkit")
                               + (", or set TORCH_CUDA_ARCH_LIST to an older arch of the same major that nvcc knows"
                                  if any(a.major == cc.major for a in nv_row.archs) else ""),
                               nv_row.source))
    return out


def _ld_dirs(h: Host) -> list[str]:
    return [d.rstrip("/") for d in h.ld_library_path.split(":") if d]


def _runtime_checks(m: Matrix, h: Host) -> list[Finding]:
    """Two CUDA runtime majors matter where one can be picked for the other: on LD_LIBRARY_PATH, or as two
    pip runtime wheels (nvidia-cuda-runtime-cu11 and -cu12). A system toolkit beside pip's runtime is normal."""
    ld_dirs = _ld_dirs(h)
    groups: dict[str, dict[str, set[str]]] = {"LD_LIBRARY_PATH": {}, "pip's nvidia runtime wheels": {}}
    for path in h.cuda_runtimes:
        mm = re.search(r"libcudart\.so\.(\d+)", path)
        if not mm:
            continue
        where = "LD_LIBRARY_PATH" if any(path.startswith(d + "/") for d in ld_dirs) else \
            "pip's nvidia runtime wheels" if "/nvidia/cuda_runtime/" in path else None
        if where:
            groups[where].setdefault(mm.group(1), set()).add(path)
    for where, versions in groups.items():
        if len(versions) > 1:
            return [Finding("warning", "cuda.runtime-shadowing",
                            f"CUDA runtimes {', '.join('libcudart.so.' + v for v in sorted(versions))} in {where}: "
                            + ", ".join(sorted(p for s in versions.values() for p in s)),
                            "whichever is found first is loaded, and libraries built for the other major fail to load or misbehave",
                            "keep one CUDA runtime major there (pip uninstall the other nvidia-cuda-runtime wheel, or trim "
                            "LD_LIBRARY_PATH)",
                            "https://github.com/pytorch/pytorch/issues/147001")]
    return []


def _ld_library_path_checks(m: Matrix, h: Host) -> list[Finding]:
    ld_dirs, tc = _ld_dirs(h), _v(h.torch_cuda)
    torch_err = dict(h.import_errors).get("torch", "")
    if ld_dirs and "undefined symbol" in torch_err:
        return [Finding("error", "ld-library-path.foreign", f"import torch: {torch_err[:160]}; LD_LIBRARY_PATH={h.ld_library_path}",
                        "a CUDA library on LD_LIBRARY_PATH is loaded instead of the one torch's wheel brings, and it lacks a symbol torch "
                        "needs",
                        "unset LD_LIBRARY_PATH (or drop its CUDA/conda lib directories) for this environment",
                        "https://github.com/pytorch/pytorch/issues/134929")]
    if tc is None:
        return []
    for d in ld_dirs:
        mm = re.search(r"cuda-(\d+)\.(\d+)", d)
        if mm and int(mm.group(1)) != tc.major:
            return [Finding("warning", "ld-library-path.foreign", f"LD_LIBRARY_PATH has {d}; torch {h.torch} uses CUDA {h.torch_cuda}",
                            "a foreign CUDA (or NCCL, cuDNN) first on the library path shadows the libraries torch's wheel brings",
                            f"remove {d} from LD_LIBRARY_PATH for this environment", "https://github.com/pytorch/pytorch/issues/80637")]
    return []


def _gpu_health_checks(m: Matrix, h: Host) -> list[Finding]:
    out = []
    for g in h.gpus:
        if g.remapped_failure or g.remapped_pending:
            out.append(Finding("error" if g.remapped_failure else "warning", "gpu.remapped-rows",
                               f"{g.name}: row remapping {'failed' if g.remapped_failure else 'pending'}",
                               "memory rows were retired; a pending remap takes effect only after a GPU reset, a failure means the GPU "
                               "needs service",
                               "reset the GPU (nvidia-smi -r) when idle; if remapping failed, RMA it",
                               "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"))
        if g.clock_event_reasons & (0x8 | 0x40 | 0x80):
            out.append(Finding("warning", "gpu.clocks-slowdown",
                               f"{g.name}: clock event reasons 0x{g.clock_event_reasons:x} (hardware slowdown)",
                               "the GPU is slowing its clocks for temperature or power: every benchmark on it reads low",
                               "check cooling and power (nvidia-smi -q -d PERFORMANCE)",
                               "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"))
    return out


def _dtk_checks(m: Matrix, h: Host) -> list[Finding]:
    if not (h.dcu_name and h.dtk):
        return []
    want = re.sub(r"[^a-z0-9]", "", h.dcu_name.lower())
    hygon = [g for g in m.gpus if g.vendor == "hygon"]
    gpu = next((g for g in hygon if re.sub(r"[^a-z0-9]", "", g.name.lower()) == want), None) or \
        max((g for g in hygon if re.sub(r"[^a-z0-9]", "", g.name.lower()) in want), key=lambda g: len(g.name), default=None)
    dv = _v(h.dtk)
    if gpu is not None and gpu.min_dtk is not None and dv is not None and dv < gpu.min_dtk:
        return [Finding("error", "dtk.card-version", f"{h.dcu_name} with DTK {h.dtk}",
                        f"{gpu.name} needs DTK >= {gpu.min_dtk}", f"install DTK {gpu.min_dtk} or newer and its DAS torch build",
                        gpu.source)]
    return []


def _host_checks(m: Matrix, h: Host) -> list[Finding]:
    if not h.gpus and not h.dcu_name and not (h.nvml_error and "mismatch" in h.nvml_error.lower()):
        return [Finding("info", "host.no-gpu", "no GPU found" + (f" ({h.nvml_error})" if h.nvml_error else ""),
                        "GPU checks were skipped",
                        "run envkit doctor on the GPU host (envkit resolve --gpu NAME plans a stack for one)", "doc:envkit doctor")]
    return []


@dataclass(frozen=True)
class Check:
    """One doctor check: its group (the prefix of its rule ids), the catalogued rules it may emit, and the
    pure function from the matrix and the host's facts to its findings."""
    group: str
    rules: tuple[str, ...]
    run: Callable[[Matrix, Host], list[Finding]]


# The doctor's checks, in the order their findings are listed (within one severity).
CHECKS: tuple[Check, ...] = (
    Check("driver", ("driver.library-mismatch", "driver.too-old"), _driver_checks),
    Check("torch", ("torch.cpu-build",), _torch_build_checks),
    Check("gpu", ("gpu.arch-not-in-torch",), _gpu_arch_checks),
    Check("torch", ("torch.cuda-unavailable",), _torch_cuda_checks),
    Check("flash-attn", ("flash-attn.gpu-arch",), _flash_attn_gpu_checks),
    Check("flash-attn", ("flash-attn.abi",), _flash_attn_import_checks),
    Check("flash-attn", ("flash-attn.torch-mismatch", "flash-attn.abi"), _flash_attn_wheel_checks),
    Check("vllm", ("vllm.torch-pin",), _vllm_checks),
    Check("kernels", ("kernels.no-nvcc", "kernels.nvcc-arch", "kernels.nvcc-torch-cuda"), _kernel_checks),
    Check("cuda", ("cuda.runtime-shadowing",), _runtime_checks),
    Check("ld-library-path", ("ld-library-path.foreign",), _ld_library_path_checks),
    Check("gpu", ("gpu.remapped-rows", "gpu.clocks-slowdown"), _gpu_health_checks),
    Check("dtk", ("dtk.card-version",), _dtk_checks),
    Check("host", ("host.no-gpu",), _host_checks),
)


def quiet_groups() -> tuple[str, ...]:
    """The groups that pass as one JUnit case when none of their checks finds anything, in catalogue
    order: every group of the registry that can report a problem (not only a state, like host.no-gpu)."""
    problems = frozenset(r for check in CHECKS for r in check.rules if not CATALOGUE[r].info)
    return groups(problems)


def judge(m: Matrix, h: Host) -> list[Finding]:
    """Every check of the registry, in order; each finding once, errors first."""
    findings = []
    for check in CHECKS:
        findings.extend(check.run(m, h))
    return sorted(dict.fromkeys(findings), key=lambda f: SEVERITIES.index(f.severity))


def healthy(findings: list[Finding]) -> bool:
    return not any(f.severity in ("error", "warning") for f in findings)
