"""What resolve answers, as values: the Query it was asked, the Solution it found (or the Conflicts that
forbid one, each with its rule, source and fix), and the resolve flags' spellings."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.model.engines import EnginePackages, EngineSolution
from envkit.model.flags import FLAG
from envkit.model.matrix import CC, CudaToolkit, Driver, Gpu, ToolkitWheel, TorchBuild, Vllm, dtk_text


@dataclass(frozen=True)
class Query:
    gpu: Optional[Gpu] = None
    driver: Optional[Driver] = None
    platform: Optional[str] = None
    machine: Optional[str] = None  # --platform-arch: x86_64 or aarch64; None: x86_64, the only one before it was asked
    cuda: Optional[Version] = None
    rocm: Optional[Version] = None
    dtk: Optional[Version] = None
    python: Optional[Version] = None
    torch: Optional[SpecifierSet] = None
    torch_local: Optional[str] = None
    flash_attn: Optional[SpecifierSet] = None
    flash_attn_profile: str = "full"
    vllm: Optional[SpecifierSet] = None
    kernels: tuple[str, ...] = ()
    kernels_from: Optional[Version] = None  # the kernels' flash-attn sdist when flash-attn itself is not installed
    engine: Optional[str] = None  # --engine; None and "torch" are the pip stack
    engine_version: Optional[str] = None  # --engine fastllm==1.9.0: the pip engine's release
    engine_source: bool = False  # --engine-build source: fastllm compiled from its tag
    trtllm: Optional[SpecifierSet] = None
    triton: Optional[str] = None  # a container release YY.MM
    given: tuple[tuple[str, str], ...] = ()

    def flags(self) -> dict[str, str]:
        return dict(self.given)

    def without(self, key: str) -> "Query":
        """The query less one given flag (its key as model/flags.py names it)."""
        empty: Any = {"kernels": ()}.get(key)
        field_ = {"platform_arch": "machine"}.get(key, key)
        changes: dict[str, Any] = {field_: empty, "given": tuple((k, v) for k, v in self.given if k != key)}
        if key == "torch":
            changes["torch_local"] = None
        return replace(self, **changes)


@dataclass(frozen=True)
class Conflict:
    rule: str
    message: str
    fix: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message, "fix": self.fix, "source": self.source}


@dataclass(frozen=True)
class FlashAttnPlan:
    version: Version
    build: str  # "wheel" | "source"
    wheel: Optional[str]
    url: Optional[str]
    arch_list: tuple[str, ...]
    source_row: str
    reason: str = ""  # why there is no prebuilt wheel (a source build)
    profile: str = "full"  # a source build's kernels: "full", or "serving:64,128,256:bf16,fp16" (inimage/build_flash_attn.py)

    @property
    def install_key(self) -> tuple[Version, str, tuple[str, ...], str]:
        """What is installed, whatever the Python: the same release built the same way (its wheel's file name and URL
        carry the cpXY tag, so a cp310 and a cp312 wheel of one build differ there and nowhere else)."""
        return self.version, self.build, self.arch_list, self.profile


def same_flash_attn(a: Optional[FlashAttnPlan], b: Optional[FlashAttnPlan]) -> bool:
    return (a.install_key if a else None) == (b.install_key if b else None)


@dataclass(frozen=True)
class KernelPlan:
    name: str
    module: str
    flash_attn_sdist: Version
    setup_py: str  # "shipped" | "supplied"
    arch_list: tuple[str, ...]
    patch_gencode: bool


@dataclass(frozen=True)
class Solution:
    platform: str
    gpu: Optional[Gpu]
    torch: TorchBuild
    toolkit: Optional[Version]
    cuda: Optional[CudaToolkit]
    python: Version
    min_driver: Optional[Driver]
    devel_image: Optional[str]
    runtime_image: Optional[str]
    flash_attn: Optional[FlashAttnPlan]
    vllm: Optional[Vllm]
    vllm_wheel: Optional[str]
    vllm_url: Optional[str]
    kernels: tuple[KernelPlan, ...]
    notes: tuple[str, ...]
    sources: tuple[str, ...]
    engine: Optional[EnginePackages] = None  # a pip engine of the registry (model/engine_specs.py): its packages, installed after torch
    machine: str = "x86_64"  # the CPU architecture the wheels and images are for (--platform-arch)

    @property
    def toolkit_text(self) -> str:
        """The toolkit's version as its vendor writes it (DTK 24.04, CUDA 12.4); empty on the CPU."""
        if self.toolkit is None:
            return ""
        return dtk_text(self.toolkit) if self.platform == "dtk" else str(self.toolkit)


    def flat(self) -> dict[str, str]:
        """The few fields people compare: what case files match on."""
        out = {"platform": self.platform, "torch": self.torch.pin, "python": str(self.python)}
        if self.platform == "cuda":
            out["cuda"] = str(self.toolkit)
        elif self.platform == "rocm":
            out["rocm"] = str(self.toolkit)
        elif self.platform == "dtk":
            out["dtk"] = self.toolkit_text
        if self.flash_attn:
            out["flash_attn"] = str(self.flash_attn.version)
            out["flash_attn_build"] = self.flash_attn.build
            if self.flash_attn.wheel:
                out["flash_attn_wheel"] = self.flash_attn.wheel
        if self.vllm:
            out["vllm"] = str(self.vllm.version)
            if self.vllm_wheel:
                out["vllm_wheel"] = self.vllm_wheel
        if self.kernels:
            out["kernels"] = ",".join(k.name for k in self.kernels)
            out["kernels_sdist"] = str(self.kernels[0].flash_attn_sdist)
        if self.min_driver is not None:
            out["min_driver"] = str(self.min_driver)
        if self.machine != "x86_64":
            out["machine"] = self.machine
        if self.engine is not None:
            out["engine"] = self.engine.engine
            out[self.engine.engine] = self.engine.version
            if self.engine.build is not None:
                out["engine_build"] = "source"
                if self.engine.cuda_arch:
                    out["engine_cuda_arch"] = self.engine.cuda_arch
        return out

    @property
    def toolkit_wheels(self) -> tuple[ToolkitWheel, ...]:
        """The CUDA release's toolkit wheels on PyPI, each pinned to the release; () where not known."""
        return self.cuda.wheels if self.platform == "cuda" and self.cuda else ()

    def to_json(self, toolkit_wheels: bool = False) -> dict[str, Any]:
        """The solution document. `toolkit_wheels` adds the toolkit's pinned PyPI wheel set where the
        matrix knows it (the resolve document); an image's label and a lock record the toolkit as built."""
        t = self.torch
        d: dict[str, Any] = {
            "platform": self.platform,
            "gpu": None if self.gpu is None else {"name": self.gpu.name, "arch": self.gpu.arch, "vendor": self.gpu.vendor,
                                                  "memory_gb": self.gpu.memory_gb, "bandwidth_gbs": self.gpu.bandwidth_gbs},
            "python": str(self.python),
            "toolkit": None if self.toolkit is None else {"kind": self.platform, "version": self.toolkit_text,
                                                          "release": self.cuda.release if self.cuda else self.toolkit_text},
            "min_driver": None if self.min_driver is None else str(self.min_driver),
            "images": {"devel": self.devel_image, "runtime": self.runtime_image},
            "torch": {"version": str(t.version), "variant": t.variant, "pin": t.pin, "index_url": t.index_url,
                      "wheel": t.wheel, "cxx11abi": t.cxx11abi, "archs": list(t.archs),
                      "ptx": None if t.ptx is None else str(t.ptx)},
            "flash_attn": None,
            "vllm": None,
            "kernels": [],
            "notes": list(self.notes),
            "sources": list(self.sources),
            **({"machine": self.machine} if self.machine != "x86_64" else {}),  # x86_64 documents stay as they were
        }
        if toolkit_wheels and d["toolkit"] is not None and self.toolkit_wheels:
            d["toolkit"]["wheels"] = [{"name": w.name, "version": str(w.version), "pin": w.pin, "source": w.source}
                                      for w in self.toolkit_wheels]
        if self.flash_attn:
            f = self.flash_attn
            d["flash_attn"] = {"version": str(f.version), "build": f.build, "wheel": f.wheel, "url": f.url,
                               "arch_list": list(f.arch_list), "reason": f.reason or None}
            if f.profile != "full":  # documents of full builds stay as they were
                name, dims, dtypes = f.profile.split(":")
                d["flash_attn"]["profile"] = {"name": name, "head_dims": [int(x) for x in dims.split(",")], "dtypes": dtypes.split(",")}
        if self.vllm:
            d["vllm"] = {"version": str(self.vllm.version), "wheel": self.vllm_wheel, "url": self.vllm_url}
        d["kernels"] = [{"name": k.name, "module": k.module, "flash_attn_sdist": str(k.flash_attn_sdist),
                         "setup_py": k.setup_py, "arch_list": list(k.arch_list), "patch_gencode": k.patch_gencode}
                        for k in self.kernels]
        if self.engine is not None:
            d["engine"] = self.engine.to_json()
        return d


@dataclass(frozen=True)
class Result:
    query: Query
    solution: Optional[Solution]
    conflicts: tuple[Conflict, ...] = ()
    suggestions: tuple[tuple[str, dict[str, str]], ...] = ()
    warnings: tuple[str, ...] = ()
    engine: Optional[EngineSolution] = None  # a container engine's answer (--engine trtllm, triton-*, fastertransformer)
    host_read: tuple[tuple[str, str], ...] = ()  # --gpu auto: what was read of the host (fact, value)
    notes: tuple[str, ...] = ()  # how the answer was chosen (the base image's own Python...): decisions, not warnings
    python_from_image: Optional[Version] = None  # no --python was given: the base image's own Python was taken

    @property
    def ok(self) -> bool:
        return self.solution is not None or self.engine is not None

    def flat(self) -> dict[str, str]:
        """The answer's few fields (a pip stack's or a container engine's); {} without one."""
        if self.solution is not None:
            return self.solution.flat()
        return self.engine.flat() if self.engine is not None else {}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "ok": self.ok,
            "query": self.query.flags(),
            "solution": None if self.solution is None else self.solution.to_json(toolkit_wheels=True),
            "conflicts": [c.to_json() for c in self.conflicts],
            "suggestions": [{"drop": FLAG[k], "would_give": s} for k, s in self.suggestions],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            **({"engine": self.engine.to_json()} if self.engine is not None else {}),
            **({"host": dict(self.host_read)} if self.host_read else {}),
        }


@dataclass(frozen=True)
class VllmPick:
    """The vLLM wheel a solution installs: PyPI's, or a build from the GitHub release that the
    release's docs or pipeline name."""
    wheel: Optional[str]
    url: Optional[str]
    on_pypi: bool
    archs: Optional[tuple[CC, ...]]
    ptx: Optional[CC]
    cuda: Optional[Version]


@dataclass(frozen=True)
class Unsolved:
    """What a use case returns when the query has no solution: the Result, with its conflicts."""
    result: Result


@dataclass(frozen=True)
class SolutionRecord:
    """A solution as written down: the `solution` of a lock, a context's envkit/solution.json and an image's
    io.envkit.solution label (Solution.to_json's document). Read back through from_json only."""
    platform: str
    python: str
    torch_pin: str
    torch_cxx11abi: Optional[bool]
    toolkit: Optional[str]
    flash_attn: Optional[str]
    flash_attn_wheel: Optional[str]
    vllm: Optional[str]
    doc: dict[str, Any]

    @classmethod
    def from_json(cls, doc: Any) -> "SolutionRecord":
        """Raises ValueError naming what is missing when `doc` is not a solution document."""
        if not isinstance(doc, dict):
            raise ValueError("a solution is a JSON object")
        torch = doc.get("torch")
        if not isinstance(doc.get("platform"), str) or not isinstance(torch, dict) or not isinstance(torch.get("pin"), str):
            raise ValueError("a solution names its platform and torch pin")
        part: dict[str, dict[str, Any]] = {k: v if isinstance(v := doc.get(k), dict) else {} for k in ("toolkit", "flash_attn", "vllm")}
        abi = torch.get("cxx11abi")
        return cls(platform=doc["platform"], python=str(doc.get("python") or ""), torch_pin=torch["pin"],
                   torch_cxx11abi=abi if isinstance(abi, bool) else None,
                   toolkit=_text(part["toolkit"].get("version")), flash_attn=_text(part["flash_attn"].get("version")),
                   flash_attn_wheel=_text(part["flash_attn"].get("wheel")), vllm=_text(part["vllm"].get("version")), doc=doc)

    def to_json(self) -> dict[str, Any]:
        return self.doc

    def default_tag(self) -> str:
        return f"envkit/{self.platform}:torch{self.torch_pin.replace('+', '-')}"


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)
