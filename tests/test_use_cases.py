"""Use cases with a container engine of plain data (the ContainerEngine Protocol): what inspect and the
in-image self-test make of what an engine answers, without an engine. The real engine is exercised by
tests/integration."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from envkit.app.generate import generate
from envkit.app.inspect import SOLUTION_LABEL, inspect
from envkit.app.selftest import SCRIPT_IN_IMAGE, SelftestRequest, run_in_image
from envkit.errors import ExternalError, InputError
from envkit.model.container import ContainerSpec, DeviceHost
from envkit.model.flags import ResolveFlags


class FakeEngine:
    def __init__(self, images: dict[str, dict[str, str]], out: str = "") -> None:
        self.images, self.out = images, out
        self.ran: list[list[str]] = []

    def has_image(self, ref: str) -> bool:
        return ref in self.images

    def require_image(self, ref: str) -> None:
        if ref not in self.images:
            raise InputError(f"image {ref} is not on this engine", "build it")

    def labels(self, ref: str) -> dict[str, str]:
        return self.images[ref]

    def info_or_none(self) -> Optional[dict[str, Any]]:
        return None

    def run_container(self, spec: ContainerSpec) -> tuple[int, str, str, bool, str]:
        self.ran.append(list(spec.command))
        return 0, self.out, "", False, ""


def _label() -> str:
    g = generate(ResolveFlags(platform="cpu", torch="2.13.0"))
    return g.files["envkit/solution.json"].decode()


def test_inspect_reads_the_solution_label_and_judges_it_on_this_host():
    engine = FakeEngine({"img": {SOLUTION_LABEL: _label(), "org.opencontainers.image.title": "x"}})
    i = inspect("img", engine=engine)
    assert i.solution.platform == "cpu" and i.solution.torch_pin == "2.13.0+cpu"
    assert i.to_json()["labels"] == {"org.opencontainers.image.title": "x"}
    assert i.host.torch == "2.13.0+cpu" and i.host.nvcc is None  # the image's stack, not the host's toolkit


@pytest.mark.parametrize("label, why", [(None, "has no io.envkit.solution label"), ("{not json", "is not an envkit solution"),
                                        ('{"platform": "cpu"}', "is not an envkit solution")])
def test_inspect_refuses_images_envkit_did_not_build(label, why):
    engine = FakeEngine({"img": {} if label is None else {SOLUTION_LABEL: label}})
    with pytest.raises(InputError, match=why):
        inspect("img", engine=engine)


def test_the_in_image_selftest_runs_the_image_script_and_reads_its_document():
    doc = {"schema": 1, "python": "3.11.2", "checks": [{"name": "torch imports", "ok": True, "detail": "2.13.0+cpu"}], "ok": True,
           "decode": None, "models": [], "lambada": []}
    engine = FakeEngine({"img": {}}, out=json.dumps(doc))
    result = run_in_image("img", SelftestRequest(quick=True), engine=engine)
    assert engine.ran == [["python", SCRIPT_IN_IMAGE, "--json", "--quick"]]
    assert result.ok == (not Path("/dev/nvidiactl").exists())  # a GPU host whose engine passes no GPUs fails the test
    assert result.to_json()["container"]["command"] == ["python", SCRIPT_IN_IMAGE, "--json", "--quick"]
    assert result.to_json()["gpus_passed"] is False


def test_an_image_whose_script_prints_no_result_is_an_external_error():
    engine = FakeEngine({"img": {}}, out="Traceback (most recent call last): ...")
    with pytest.raises(ExternalError, match="printed no result"):
        run_in_image("img", SelftestRequest(), engine=engine)


def test_build_all_reports_a_targets_bug_as_a_bug_and_builds_the_others(monkeypatch, tmp_path):
    """The independent review: a crash inside one target's build printed 'envkit: error: TypeError...' with exit 4, as if
    docker had failed. It is exit 70 (a bug), the traceback in the target's log, and the other targets still run."""
    from envkit.app import build_all as build_all_app
    from envkit.app.build import DryRun
    from envkit.errors import EXIT_BUG
    from envkit.model.project import Project, Target

    def build_target(t, **kwargs):
        if t.name == "broken":
            raise ZeroDivisionError("a planted bug")
        return DryRun.__new__(DryRun)

    class Board:
        def update(self, *args, **kwargs):
            pass

    monkeypatch.setattr(build_all_app, "build_target", build_target)
    monkeypatch.setattr(build_all_app, "LOG_DIR", tmp_path)
    targets = tuple(Target(name, (("platform", "cpu"),), True, None, f"envkit/{name}:x") for name in ("broken", "fine"))
    built = build_all_app.build_all(Project("envkit.toml", targets), jobs=2, network="bridge", no_cache=False, board=Board(), dry_run=True)
    broken, fine = built.targets
    assert (broken.ok, broken.exit) == (False, EXIT_BUG) and "internal error: ZeroDivisionError" in broken.error
    assert "Traceback" in (tmp_path / "broken.log").read_text()
    assert fine.ok and fine.exit == 0


def _gpu_label() -> str:
    g = generate(ResolveFlags(gpu="H200", cuda="13.0", torch="2.11.0"))
    return g.files["envkit/solution.json"].decode()


def _cpu_doc(**extra: Any) -> str:
    return json.dumps({"schema": 1, "python": "3.12.3", "checks": [{"name": "torch imports", "ok": True, "detail": "2.11.0+cu130"}],
                       "ok": True, "device": "cpu", "decode": None, "models": [], "lambada": [], **extra})


def test_an_older_images_script_that_ran_on_the_cpu_fails_from_the_images_label(monkeypatch):
    """newcomer review 3, D7: a GPU image's self-test passed with no GPU visible. An image whose script predates its own
    target check is judged here from its solution label; only --allow-cpu lets it pass."""
    from envkit.adapters import gpu_devices

    monkeypatch.setattr(gpu_devices, "collect", lambda info=None, root="/": DeviceHost())  # a host with no GPU
    engine = FakeEngine({"img": {SOLUTION_LABEL: _gpu_label()}}, out=_cpu_doc())
    result = run_in_image("img", SelftestRequest(quick=True), engine=engine)
    failed = {c.name: c.detail for c in result.checks if not c.ok}
    assert not result.ok and set(failed) == {"GPU the image was built for", "GPUs passed into the container"}
    assert failed["GPU the image was built for"].startswith("built for H200 (sm_90), cuda 13.0, but no GPU device is in the container")
    assert "this host has no NVIDIA GPU" in failed["GPUs passed into the container"]
    allowed = run_in_image("img", SelftestRequest(quick=True, allow_cpu=True), engine=engine)
    assert allowed.ok and engine.ran[-1][-1] == "--allow-cpu"


def test_the_dry_run_plans_the_container_and_what_it_must_see(monkeypatch):
    from schema_check import validate

    from envkit.adapters import gpu_devices
    from envkit.app.selftest import plan_in_image

    host = DeviceHost(nvidia_nodes=("/dev/nvidia0", "/dev/nvidiactl"), nvidia_runtime=True)
    monkeypatch.setattr(gpu_devices, "collect", lambda info=None, root="/": host)
    engine = FakeEngine({"img": {SOLUTION_LABEL: _gpu_label()}})
    doc = plan_in_image("img", SelftestRequest(quick=True), engine=engine).to_json()
    validate(doc, "run-plan")
    assert engine.ran == []  # nothing ran
    assert doc["container"]["command_line"] == "docker run --rm --network none --gpus all img python /opt/envkit/selftest.py --json --quick"
    assert doc["expects"]["gpu"] == "H200" and doc["expects"]["parts"]["torch"][-1] == "12.0"


def test_doctor_image_without_its_gpus_is_an_error_finding():
    from envkit.core.judge_image import image_gpu_findings

    record = {"gpus_passed": False, "gpu_access": {"vendor": "nvidia", "wanted": True, "passes": False, "refusal": None,
                                                   "missing": "this host has no NVIDIA GPU (/dev/nvidiactl is missing)",
                                                   "expects": {"gpu": "H200", "platform": "cuda"}}}
    f = image_gpu_findings("img", record)
    assert [(x.severity, x.rule) for x in f] == [("error", "image.no-gpu")] and "H200 (cuda)" in f[0].seen
    assert image_gpu_findings("img", {**record, "gpus_passed": True}) == []
    assert image_gpu_findings("img", {"gpu_access": {"wanted": False}}) == []
