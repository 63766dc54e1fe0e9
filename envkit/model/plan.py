"""The build plan as values: stages, steps, carried files and the options that shaped them."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Optional
from envkit.model.matrix import OsRelease
from envkit.model.solution import Solution
from envkit.model.site import Site
from envkit.inimage.build_flash_attn import DEFAULT_HOST_MARCH


VENV = "/opt/venv"



PYTHON_PREFIX = "/opt/python"



WHEELHOUSE = "/opt/envkit/wheelhouse"



PYTHON_FTP = "https://www.python.org/ftp/python"



@dataclass(frozen=True)
class Step:
    id: str
    title: str
    why: str
    template: str
    vars: tuple[tuple[str, str], ...] = ()
    network: str = "none"  # none | site | internet
    reaches: tuple[str, ...] = ()

    def var(self, key: str) -> str:
        return dict(self.vars)[key]



@dataclass(frozen=True)
class Stage:
    name: str
    image: str
    upstream_image: str
    os: OsRelease
    steps: tuple[Step, ...]



@dataclass(frozen=True)
class Carried:
    path: str
    what: str
    origin: str



@dataclass(frozen=True)
class Options:
    offline: bool = False
    host_march: str = DEFAULT_HOST_MARCH
    max_jobs: Optional[int] = None
    nvcc_threads: Optional[int] = None



@dataclass(frozen=True)
class BuildPlan:
    solution: Solution
    site: Site
    options: Options
    stages: tuple[Stage, ...]
    carried: tuple[Carried, ...]
    requirements: tuple[str, ...]
    wheel_sources: tuple[tuple[str, Optional[str]], ...]
    build_args: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    python_source: str  # "distro" | "tarball"
    stack: str = field(default="")

    def to_dict(self) -> dict:
        return {
            "schema": 1,
            "offline": self.options.offline,
            "compile": {"kernels": any(st.template == "kernels" for s in self.stages for st in s.steps),
                        "max_jobs": self.options.max_jobs, "nvcc_threads": self.options.nvcc_threads},
            "site": self.site.path or None,
            "stack": self.stack,
            "python_source": self.python_source,
            "stages": [{"name": s.name, "image": s.image, "upstream_image": s.upstream_image, "os": s.os.name,
                        "steps": [{"id": st.id, "title": st.title, "why": st.why, "network": st.network,
                                   "reaches": list(st.reaches)} for st in s.steps]} for s in self.stages],
            "context": [{"path": c.path, "what": c.what, "origin": c.origin} for c in self.carried],
            "requirements": list(self.requirements),
            "wheel_sources": [{"requirement": r, "index": i} for r, i in self.wheel_sources],
            "build_args": dict(self.build_args),
            "warnings": list(self.warnings),
        }


DEFAULT_HOST_MARCH = "x86-64-v2"
