"""How the host's GPUs reach a container (core/devices.py), per vendor and runtime, from the cases in
tests/container_cases/gpu_access.toml; the in-image self-test's verdict on what it sees against what the image was built
for (inimage/selftest.py target_check); and the host's half of it (app/containers.py passed_check)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envkit.app.containers import passed_check
from envkit.core.devices import container, gpu_access
from envkit.inimage import selftest as script
from envkit.model.container import DeviceHost

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CASES = tomllib.loads((Path(__file__).parent / "container_cases" / "gpu_access.toml").read_text())["case"]


def _host(d: dict) -> DeviceHost:
    return DeviceHost(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_gpu_access_case(case: dict) -> None:
    g = gpu_access(case.get("platform"), _host(case["host"]), case.get("dtk"))
    assert g.vendor == case.get("vendor")
    assert g.cli_args() == case["args"]
    assert g.missing == case.get("missing", "")
    assert g.passes == bool(case["args"])
    assert g.wanted == (case.get("vendor") is not None)
    assert len(g.why) >= (1 if g.passes else 0)  # every flag passed says what it is for


def test_the_planned_container_is_shown_as_the_command_line_it_runs():
    host = _host({"runtime": "docker", "kfd": True, "dri": ["/dev/dri/renderD128"], "render_gids": [109]})
    spec = container("img:1", ["python", "/opt/envkit/selftest.py", "--json"], "rocm", host,
                     volumes=(("/models/q", "/envkit-model", "ro"),), env=(("HF_TOKEN", "secret-value"),))
    line = spec.command_line()
    assert line == ("docker run --rm --network none --device /dev/kfd --device /dev/dri --group-add video --group-add 109 "
                    "--security-opt seccomp=unconfined -v /models/q:/envkit-model:ro -e HF_TOKEN img:1 python /opt/envkit/selftest.py --json")
    assert "secret-value" not in line and "secret-value" not in str(spec.to_json())


def _solution(platform: str = "cuda", arch: str = "sm_90", torch_archs=("8.0", "9.0"), fa=None, kernels=()) -> dict:
    return {"platform": platform, "gpu": {"name": "H200", "arch": arch, "vendor": "nvidia"}, "toolkit": {"version": "13.0"},
            "torch": {"pin": "2.11.0+cu130", "archs": list(torch_archs), "ptx": None},
            "flash_attn": {"build": "source", "arch_list": list(fa)} if fa else None,
            "kernels": [{"name": k, "arch_list": ["9.0"]} for k in kernels]}


def _seen(*archs: str, backend: str = "cuda", nodes=()) -> dict:
    return {"backend": backend, "devices": [{"name": f"GPU {a}", "arch": a} for a in archs], "nodes": list(nodes)}


def test_a_gpu_image_that_sees_no_gpu_fails_with_the_fix():
    c = script.target_check(script.built_for(_solution()), _seen())
    assert c is not None and c["ok"] is False and c["name"] == script.TARGET_CHECK
    assert c["detail"].startswith("built for H200 (sm_90), cuda 13.0, but no GPU device is in the container")
    assert "--allow-cpu" in c["detail"] and "--gpus all" in c["detail"]


def test_device_nodes_without_a_gpu_in_torch_are_named():
    c = script.target_check(script.built_for(_solution()), _seen(nodes=("/dev/nvidiactl",)))
    assert c is not None and not c["ok"] and "/dev/nvidiactl is here but torch sees no GPU" in c["detail"]


def test_allow_cpu_is_the_only_way_to_pass_without_a_gpu():
    c = script.target_check(script.built_for(_solution()), _seen(), allow_cpu=True)
    assert c is not None and c["ok"] and c["allowed_cpu"] and "only its CPU path was tested" in c["detail"]


def test_a_device_outside_a_compiled_parts_arch_list_fails():
    target = script.built_for(_solution(fa=["9.0"], kernels=("rotary",)))
    c = script.target_check(target, _seen("sm_80"))
    assert c is not None and not c["ok"]
    assert "flash-attn (9.0) does not run on GPU sm_80 sm_80" in c["detail"] and "csrc rotary (9.0)" in c["detail"]
    assert "envkit generate --gpu sm_80" in c["detail"]


def test_the_gpu_it_was_built_for_passes_and_every_visible_device_is_judged():
    target = script.built_for(_solution(fa=["9.0"]))
    ok = script.target_check(target, _seen("sm_90", "sm_90"))
    assert ok is not None and ok["ok"] and "2 x GPU sm_90 (sm_90)" in ok["detail"]
    mixed = script.target_check(target, _seen("sm_90", "sm_86"))
    assert mixed is not None and not mixed["ok"]  # one device of the two is outside flash-attn's sm_90 build


def test_ptx_and_rocm_archs():
    assert script.part_runs("sm_100", ["9.0+PTX"]) and not script.part_runs("sm_100", ["9.0"])
    assert script.part_runs("gfx942", ["gfx90a", "gfx942"]) and not script.part_runs("gfx1100", ["gfx942"])
    rocm = script.built_for({"platform": "rocm", "gpu": {"name": "MI300X", "arch": "gfx942"}, "torch": {"archs": ["gfx942"]}})
    assert rocm is not None and rocm["vendor"] == "amd"
    wrong = script.target_check(rocm, _seen("gfx942", backend="cuda"))
    assert wrong is not None and not wrong["ok"] and "runs on cuda" in wrong["detail"]


def test_a_cpu_image_or_no_solution_has_no_target_to_judge():
    assert script.built_for({"platform": "cpu", "torch": {"pin": "2.13.0+cpu"}}) is None
    assert script.built_for(None) is None
    assert script.target_check(None, _seen()) is None


def test_the_host_names_why_the_gpus_were_not_passed():
    host = _host({"runtime": "docker"})
    spec = container("img", ["true"], "cuda", host)
    c = passed_check(spec, passed=False, refusal="", allow_cpu=False)
    assert c is not None and not c.ok and "this host has no NVIDIA GPU" in c.detail and "--allow-cpu" in c.detail
    nv = container("img", ["true"], "cuda", _host({"nvidia_nodes": ["/dev/nvidiactl"]}))
    r = passed_check(nv, passed=False, refusal='could not select device driver "" with capabilities: [[gpu]]', allow_cpu=False)
    assert r is not None and not r.ok and "nvidia-container-toolkit" in r.detail
    assert passed_check(nv, passed=True, refusal="", allow_cpu=False) is None
    allowed = passed_check(spec, passed=False, refusal="", allow_cpu=True)
    assert allowed is not None and allowed.ok
    assert passed_check(container("img", ["true"], "cpu", host), passed=False, refusal="", allow_cpu=False) is None
