"""The real servers of the integration tests, the tiny model they serve and the Docker Engine the image tests share, made
or started once per session for every module that asks (a vLLM server takes a while to start on two cores); serving_env.py
has how.

Under ./scripts/test.sh the integration tests run in two lanes at once (tests/conftest.py): the debian-based image builds in
one worker, the servers and the CUDA image (an Ubuntu base) in the other. The tiny model is trained once for both workers (a
file lock in the run's shared temporary directory), and the lanes share one Docker Engine: a module that builds images holds a
shared lock on it, and `docker image prune`, which would delete the dangling layers of a build still running in the other
lane, runs only under the exclusive lock, skipped (the layers left to a later prune) while the other lane builds."""
from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

import serving_env


def run_dir(tmp_path_factory) -> Path:
    """This run's temporary directory that every xdist worker of it shares (each worker's basetemp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class SharedEngine:
    """The Docker Engine, held under a shared lock for as long as a module builds on it."""

    def __init__(self, lock: Path):
        self._lock = lock.open("a")
        fcntl.flock(self._lock, fcntl.LOCK_SH)

    def prune(self, *filters: str) -> bool:
        """`docker image prune -f` with these filters (`label=...`), only when no other lane is building; True if it ran."""
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(self._lock, fcntl.LOCK_SH)  # a failed conversion may have dropped the shared lock
            return False
        try:
            args = [a for f in filters for a in ("--filter", f)]
            subprocess.run(["docker", "image", "prune", "-f", *args], capture_output=True, text=True, timeout=600)
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_SH)
        return True

    def close(self) -> None:
        self._lock.close()


@pytest.fixture(scope="module")
def docker_engine(tmp_path_factory):
    p = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "no Docker Engine answers: run ./scripts/test.sh (it starts one) or ./scripts/start-docker.sh"
    engine = SharedEngine(run_dir(tmp_path_factory) / "docker-engine.lock")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny trained Llama of tests/vllm/make_tiny_model.py, trained once for the run: every server and image test reads
    it, none writes it."""
    shared = run_dir(tmp_path_factory)
    work, done = shared / "tiny-model", shared / "tiny-model.done"
    with (shared / "tiny-model.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            work.mkdir(exist_ok=True)
            serving_env.tiny_model(work)
            done.touch()
    return work / "tiny"


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, tiny_model):
    yield from serving_env.vllm_server(tmp_path_factory.mktemp("vllm"), tiny_model)


@pytest.fixture(scope="session")
def fastllm_server(tmp_path_factory, tiny_model):
    yield from serving_env.fastllm_server(tmp_path_factory.mktemp("fastllm"), tiny_model)


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry (the CNCF distribution registry) on a free loopback port."""
    exe = shutil.which("docker-registry")
    assert exe, "docker-registry is missing: ./scripts/test.sh installs it (apt-get install docker-registry)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "config.yml"
    cfg.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'store'}\n"
                   f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([exe, "serve", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
