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

    def run_with_gpus(self, image: str, command: list[str], volumes: Optional[dict[str, Any]] = None) -> tuple[int, str, str, bool]:
        self.ran.append(command)
        return 0, self.out, "", False


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
