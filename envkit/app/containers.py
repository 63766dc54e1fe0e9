"""The containers envkit runs on a user's image (selftest --image, doctor --image, serve): the image's solution from its
label, the host's device facts read once, and core/devices.py's plan of how the GPUs reach it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from envkit.adapters import gpu_devices
from envkit.adapters.engine import ContainerEngine
from envkit.config.userfile import parse_json
from envkit.core import devices
from envkit.inimage import selftest as script
from envkit.model.container import ContainerSpec
from envkit.model.results import CheckResult
from envkit.model.solution import SolutionRecord

SOLUTION_LABEL = "io.envkit.solution"
PASSED_CHECK = "GPUs passed into the container"


def image_solution(labels: dict[str, str]) -> Optional[SolutionRecord]:
    """The image's solution label read back; None for an image envkit did not build (or whose label does not parse)."""
    if SOLUTION_LABEL not in labels:
        return None
    try:
        return SolutionRecord.from_json(parse_json(labels[SOLUTION_LABEL], "label", SOLUTION_LABEL))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def plan(engine: ContainerEngine, image: str, command: list[str], **kw: Any) -> ContainerSpec:
    """The container for `command` in `image` (network none unless `network` says), with its GPUs where the image's
    solution (else the host) wants them."""
    sol = image_solution(engine.labels(image))
    host = gpu_devices.collect(engine.info_or_none())
    return devices.container(image, command, sol.platform if sol else None, host,
                             dtk=sol.toolkit if sol and sol.platform == "dtk" else None, **kw)


@dataclass(frozen=True)
class PlannedRun:
    """What --dry-run of selftest --image, doctor --image and serve prints: the container, and what the run will judge."""
    command: str
    spec: ContainerSpec
    expects: Optional[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": True, "dry_run": True, "for": self.command, "container": self.spec.to_json(),
                "expects": self.expects}


def expects(engine: ContainerEngine, image: str) -> Optional[dict[str, Any]]:
    """What the image's solution says it was built for (in-image selftest's built_for), None for a CPU image."""
    sol = image_solution(engine.labels(image))
    return script.built_for(sol.to_json()) if sol else None


def passed_check(spec: ContainerSpec, passed: bool, refusal: str, allow_cpu: bool) -> Optional[CheckResult]:
    """The host's half of the verdict: the GPUs the image wants, not passed in (none on this host, or the engine refused
    them) fails with why, unless --allow-cpu. None where nothing is wanted or they were passed."""
    g = spec.gpu
    if not g.wanted or passed:
        return None
    if refusal:
        why = (f"the engine refused the {g.vendor} devices ({refusal}), so the test ran without them; "
               + ("install nvidia-container-toolkit and configure the engine (nvidia-ctk runtime configure, or nvidia-ctk "
                  "cdi generate for Podman)" if g.vendor == "nvidia" else "check that this user may open /dev/kfd and /dev/dri"))
    else:
        why = f"{g.missing or 'no GPU device could be passed'}; run it on a host with the GPUs it was built for"
    return CheckResult(PASSED_CHECK, allow_cpu, why + ("; --allow-cpu: passed without them" if allow_cpu else ", or add --allow-cpu"))
