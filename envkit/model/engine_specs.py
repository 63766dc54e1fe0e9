"""The one registry of `--engine`: every serving engine envkit builds, the road it takes, the matrix tables of its
releases and what proves it installed. The flag's choices and help (model/flags.py), the query's checks
(core/resolve/query.py), the resolver's dispatch (core/resolve/search.py, one rules module per pip engine under
core/resolve/pip_engines/), the self-test's imports (core/planner/blocks.py) and the schemas' names
(tests/test_engine_registry.py) read it. Adding an engine: docs/architecture.md, "A new serving engine"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Road = Literal["stack", "pip", "container"]


@dataclass(frozen=True)
class EngineSpec:
    """One `--engine NAME`. `road`: "stack" is the pip stack itself (torch, vLLM), "pip" an engine installed from its own
    wheels beside torch (resolved by core/resolve/pip_engines/NAME.py, `--engine NAME==VERSION` pins a release),
    "container" an engine that comes as its own image (core/resolve/engines.py, planned by core/planner/engine.py)."""

    name: str
    road: Road
    tables: tuple[str, ...] = ()  # the matrix.toml tables its releases are read from
    modules: tuple[str, ...] = ()  # what the image's self-test imports to prove the engine is installed
    nvidia_only: bool = False  # runs on NVIDIA GPUs only (a Kubernetes manifest asks for nvidia.com/gpu)

    @property
    def pinnable(self) -> bool:
        return self.road == "pip"


ENGINE_SPECS: tuple[EngineSpec, ...] = (
    EngineSpec("torch", "stack"),
    EngineSpec("vllm", "stack", ("vllm",), ("vllm",)),
    EngineSpec("fastllm", "pip", ("ftllm", "ftllm_source"), ("ftllm",)),
    EngineSpec("sglang", "pip", ("sglang",), ("sglang",), nvidia_only=True),
    EngineSpec("paddle", "pip", ("paddle",), ("paddle",)),
    EngineSpec("lmdeploy", "pip", ("lmdeploy",), ("lmdeploy",), nvidia_only=True),
    EngineSpec("trtllm", "container", ("trtllm",), nvidia_only=True),
    EngineSpec("triton-trtllm", "container", ("triton", "trtllm_backend", "trtllm"), nvidia_only=True),
    EngineSpec("triton-vllm", "container", ("triton",), nvidia_only=True),
    EngineSpec("fastertransformer", "container", ("fastertransformer", "triton"), nvidia_only=True),
)
REGISTRY: dict[str, EngineSpec] = {s.name: s for s in ENGINE_SPECS}

ENGINES: tuple[str, ...] = tuple(REGISTRY)
PIP_ENGINES: tuple[str, ...] = tuple(s.name for s in ENGINE_SPECS if s.road == "pip")
CONTAINER_ENGINES: tuple[str, ...] = tuple(s.name for s in ENGINE_SPECS if s.road == "container")
STACK_ENGINES: tuple[str, ...] = tuple(s.name for s in ENGINE_SPECS if s.road == "stack")


def engine_help() -> str:
    """The --engine flag's help: the engines by road."""
    return (f"serving engine: {', '.join(STACK_ENGINES + PIP_ENGINES)} (pip stacks; fastllm==1.9.0 pins one), "
            f"{', '.join(CONTAINER_ENGINES)} (containers)")
