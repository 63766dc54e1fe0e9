"""fastllm's CPU image, built for real like the default one (issue 17): `envkit bundle --platform cpu --torch 2.13.0
--engine fastllm` on this connected machine (ftllm's wheel by its PyPI file and sha256, the measured CPU set of its
server beside torch), `envkit build --offline` with the network off, then fastllm's server inside the image, still with
no network, serving the tiny Llama of tests/vllm/make_tiny_model.py to a streamed chat request, and the self-test."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schema_check import valid_json

ROOT = Path(__file__).resolve().parents[2]
STACK = ["--platform", "cpu", "--torch", "2.13.0", "--engine", "fastllm"]
TAG = "envkit-test/fastllm-cpu:offline"

# inside the image, no network: start the server on loopback, wait for /v1/models, stream one chat completion
CHAT = r"""
import json, subprocess, sys, time, urllib.request
srv = subprocess.Popen(["ftllm", "server", "/models/model", "--device", "cpu", "--threads", "1", "--model_name", "tiny",
                        "--host", "127.0.0.1", "--port", "8000"], stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
deadline = time.time() + 300
while True:
    assert srv.poll() is None and time.time() < deadline, "ftllm server did not start"
    try:
        models = json.load(urllib.request.urlopen("http://127.0.0.1:8000/v1/models", timeout=5))
        break
    except OSError:
        time.sleep(0.5)
body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "the of and to in"}], "max_tokens": 8,
                   "stream": True}).encode()
req = urllib.request.Request("http://127.0.0.1:8000/v1/chat/completions", body, {"Content-Type": "application/json"})
pieces = []
for line in urllib.request.urlopen(req, timeout=120):
    line = line.decode().strip()
    if line.startswith("data:") and line != "data: [DONE]":
        delta = json.loads(line[5:])["choices"][0].get("delta", {})
        pieces.append(delta.get("content") or "")
srv.terminate()
print(json.dumps({"models": [m["id"] for m in models["data"]], "chunks": len([p for p in pieces if p]), "text": "".join(pieces)}))
"""


def envkit(*args: str, timeout: int = 2400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def docker(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory, docker_engine):
    out = tmp_path_factory.mktemp("fastllm-bundle") / "ctx"
    p = envkit("bundle", *STACK, "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = valid_json(p.stdout, "bundle")
    assert doc["ok"]
    wheels = {w.name for w in (out / "wheelhouse").iterdir()}
    assert "ftllm-1.9.0-py3-none-manylinux_2_31_x86_64.whl" in wheels
    assert not any(w.startswith(("nvidia_", "triton-", "modelscope")) for w in wheels), sorted(wheels)  # its CUDA deps stay out
    docker("rmi", TAG)
    b = envkit("build", "--offline", "--bundle", str(out), "--tag", TAG, "--json")
    assert b.returncode == 0, b.stderr[-4000:]
    assert valid_json(b.stdout, "build")["network"] == "none"
    yield out
    docker("rmi", TAG)


def test_the_offline_fastllm_image_serves_a_streamed_chat_with_no_network(built, tiny_model):
    p = docker("run", "--rm", "--network", "none", "-v", f"{tiny_model}:/models/model:ro", TAG, "python", "-c", CHAT)
    assert p.returncode == 0, p.stderr[-3000:]
    answer = json.loads(p.stdout.strip().splitlines()[-1])
    assert answer["models"] == ["tiny"] and answer["chunks"] >= 1, answer
    label = json.loads(docker("image", "inspect", "-f", '{{index .Config.Labels "io.envkit.solution"}}', TAG).stdout)
    assert label["engine"]["engine"] == "fastllm" and label["engine"]["no_deps"] == ["ftllm==1.9.0"]


def test_the_fastllm_image_runs_its_selftest(built):
    s = envkit("selftest", "--image", TAG, "--quick", "--json")
    assert s.returncode == 0, s.stderr[-3000:]
    result = valid_json(s.stdout, "selftest")
    assert result["ok"] and result["torch"] == "2.13.0+cpu"
    (engine,) = [c for c in result["checks"] if c["name"] == "engine fastllm"]  # the engine itself, not only torch (D16)
    assert engine["ok"] and engine["detail"] == "fastllm 1.9.0: import ftllm ok (1.9.0)", engine


def test_the_fastllm_image_says_it_is_one_in_its_title_and_description(built):
    """Newcomer review D20: the image's OCI title and description read "envkit cpu image" and "cpu, python 3.11, torch ..."."""
    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", TAG).stdout)
    assert labels["org.opencontainers.image.title"] == "envkit cpu fastllm image"
    assert labels["org.opencontainers.image.description"] == "cpu, python 3.11, torch 2.13.0+cpu, fastllm 1.9.0"


def test_an_image_whose_engine_is_not_the_release_its_solution_names_fails_the_engine_check(built):
    """The same image labelled as if it were built for fastllm 1.8.0: the self-test reads ftllm 1.9.0 and fails."""
    from envkit.adapters.engine import Engine
    from envkit.app.selftest import SelftestRequest, run_in_image

    engine = Engine.connect()
    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", TAG).stdout)
    solution = json.loads(labels["io.envkit.solution"])
    solution["engine"]["version"] = "1.8.0"
    image = engine.relabel(TAG, {"io.envkit.solution": json.dumps(solution)})
    try:
        result = run_in_image(image, SelftestRequest(quick=True), engine)
    finally:
        docker("rmi", image)
    (check,) = [c for c in result.checks if c.name == "engine fastllm"]
    assert not check.ok and not result.ok
    assert check.detail == "ftllm is 1.9.0, not the 1.8.0 the image's solution names: rebuild the image (envkit build) for fastllm 1.8.0"
