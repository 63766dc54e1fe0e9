"""`envkit inspect IMAGE`: what an image envkit built holds (its io.envkit.solution label), and doctor's
checks for that stack on this host's GPUs and driver."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Union

from envkit.adapters.engine import ContainerEngine, Engine
from envkit.config import matrix_file
from envkit.config.userfile import parse_json
from envkit.core.judge import healthy, judge
from envkit.core.judge_image import engine_image_findings
from envkit.errors import InputError
from envkit.inimage import probe
from envkit.model.engine_specs import CONTAINER_ENGINES
from envkit.model.host import Finding, Host
from envkit.model.solution import SolutionRecord

SOLUTION_LABEL = "io.envkit.solution"


@dataclass(frozen=True)
class EngineLabel:
    """A container engine's answer as its image's io.envkit.solution label carries it (resolve's `engine` document)."""
    doc: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.doc


@dataclass(frozen=True)
class Inspected:
    image: str
    labels: dict[str, str]
    solution: Union[SolutionRecord, EngineLabel]
    host: Host
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return healthy(list(self.findings))

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": self.ok, "image": self.image,
                "labels": {k: v for k, v in self.labels.items() if k != SOLUTION_LABEL},
                "solution": self.solution.to_json(), "findings": [f.to_json() for f in self.findings]}


def image_on_host(host: Host, sol: SolutionRecord) -> Host:
    """This host's GPUs and driver with the image's stack; the host's own toolkit and imports are not the image's."""
    return replace(host, torch=sol.torch_pin, torch_cuda=sol.toolkit if sol.platform == "cuda" else None,
                   torch_cxx11abi=sol.torch_cxx11abi, flash_attn=sol.flash_attn, flash_attn_wheel=sol.flash_attn_wheel,
                   vllm=sol.vllm, import_errors=(), torch_archs=None, cuda_available=None,
                   nvcc=None, cuda_home=None, cuda_runtimes=(), ld_library_path="")


def inspect(image: str, matrix_path: Optional[str] = None, engine: Optional[ContainerEngine] = None) -> Inspected:
    engine = engine or Engine.connect()
    engine.require_image(image)
    labels = engine.labels(image)
    if SOLUTION_LABEL not in labels:
        raise InputError(f"image {image} has no {SOLUTION_LABEL} label: envkit did not build it", "inspect an image envkit built")
    try:
        doc = parse_json(labels[SOLUTION_LABEL], "label", SOLUTION_LABEL)
        if isinstance(doc, dict) and doc.get("engine") in CONTAINER_ENGINES and isinstance(doc.get("workflow"), str):
            host = Host.from_json(probe.collect())
            return Inspected(image, labels, EngineLabel(doc), host, tuple(engine_image_findings(doc, host)))
        sol = SolutionRecord.from_json(doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InputError(f"image {image}: its {SOLUTION_LABEL} label is not an envkit solution", "rebuild it with envkit build") from None
    m = matrix_file.load(matrix_path)
    host = image_on_host(Host.from_json(probe.collect()), sol)
    return Inspected(image, labels, sol, host, tuple(judge(m, host)))
