"""A lock round trip on the real engine and pip (issue 14): `envkit lock` a CPU stack, `envkit bundle --lock`
with pip's --require-hashes, `envkit build --offline --locked` (a real build with the network off), then one
byte of a bundled wheel changed AND its manifest entry rewritten to match, so that only the lock can catch it:
`build --locked` refuses it before any step (exit 5, naming the wheel), and without --locked pip's
--require-hashes refuses it inside the build. A missing engine fails these tests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schema_check import valid_json

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm-slim"
STACK = ["--platform", "cpu", "--torch", "2.13.0"]
TAG = "envkit-test/cpu:locked"


def envkit(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def locked_bundle(tmp_path_factory, docker_engine):
    """(lock file, bundle directory): made once for the module."""
    assert docker("image", "inspect", BASE).returncode == 0, f"{BASE} is missing: ./scripts/make-base-image.sh makes it"
    d = tmp_path_factory.mktemp("locked")
    lock = d / "envkit.lock.json"
    p = envkit("lock", *STACK, "-o", str(lock), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = valid_json(p.stdout, "lock")
    assert doc == json.loads(lock.read_text()) and doc["schema"] == 2
    bundle = d / "bundle"
    b = envkit("bundle", "--lock", str(lock), "--locked", "-o", str(bundle), "--json")
    assert b.returncode == 0, b.stderr[-3000:]
    assert valid_json(b.stdout, "bundle")["ok"]
    yield lock, bundle
    docker("rmi", TAG)
    docker_engine.prune("label=io.envkit.solution")


def test_the_lock_pins_every_wheel_torch_needs_and_the_base_image_by_its_id(locked_bundle):
    lock, _ = locked_bundle
    doc = json.loads(lock.read_text())
    names = {w["name"].lower() for w in doc["wheels"]}
    assert {"torch", "filelock", "sympy", "mpmath", "jinja2", "markupsafe", "networkx", "fsspec", "typing_extensions"} <= names
    assert {w["step"] for w in doc["wheels"]} == {"build-torch"}
    image_id = docker("image", "inspect", "-f", "{{.Id}}", BASE).stdout.strip()
    assert doc["images"] == [{"ref": BASE, "id": image_id, "digest": None}]  # made locally: no registry digest


def test_the_bundle_holds_exactly_the_locked_wheels_and_installs_them_by_hash(locked_bundle):
    lock, bundle = locked_bundle
    doc = json.loads(lock.read_text())
    import hashlib

    for w in doc["wheels"]:
        assert hashlib.sha256((bundle / "wheelhouse" / w["filename"]).read_bytes()).hexdigest() == w["sha256"]
    text = (bundle / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --require-hashes --no-deps --no-index --find-links /opt/envkit/wheelhouse " \
           "-r /opt/envkit/requirements/build-torch.txt" in text
    requirements = (bundle / "envkit" / "requirements" / "build-torch.txt").read_text().splitlines()[1:]
    assert sorted(requirements) == sorted(f"/opt/envkit/wheelhouse/{w['filename']} --hash=sha256:{w['sha256']}" for w in doc["wheels"])


def test_build_locked_builds_the_bundle_with_the_network_off(locked_bundle):
    lock, bundle = locked_bundle
    docker("rmi", TAG)
    p = envkit("build", "--offline", "--bundle", str(bundle), "--locked", "--lock", str(lock), "--tag", TAG, "--json")
    assert p.returncode == 0, p.stderr[-4000:]
    doc = valid_json(p.stdout, "build")
    assert doc["network"] == "none" and doc["image"] == TAG
    assert "RUN pip install --no-cache-dir --require-hashes --no-deps" in " ".join(p.stderr.split())
    r = docker("run", "--rm", "--network", "none", TAG, "python", "-c", "import torch, mpmath; print(torch.__version__, mpmath.__version__)")
    assert r.returncode == 0 and r.stdout.split() == ["2.13.0+cpu", "1.3.0"], r.stderr


def _tampered_copy(bundle: Path, dest: Path, wheel: str) -> None:
    """The bundle with one byte of `wheel` changed and its manifest entry rewritten to match (hard links for the rest)."""
    import hashlib

    shutil.copytree(bundle, dest, copy_function=os.link)
    target = dest / "wheelhouse" / wheel
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.unlink()  # a hard link: write a file of its own, the original bundle stays as it is
    target.write_bytes(bytes(data))
    manifest = dest / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["files"][f"wheelhouse/{wheel}"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest.unlink()
    manifest.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def test_a_changed_wheel_with_a_matching_manifest_is_refused_by_the_lock(locked_bundle, tmp_path):
    lock, bundle = locked_bundle
    wheel = next(p.name for p in (bundle / "wheelhouse").glob("mpmath-*.whl"))
    bad = tmp_path / "bad"
    _tampered_copy(bundle, bad, wheel)
    assert envkit("build", "--offline", "--bundle", str(bad), "--dry-run").returncode == 0  # the manifest alone sees nothing
    for given in ((), ("--lock", str(lock))):
        p = envkit("build", "--offline", "--bundle", str(bad), "--locked", *given, "--tag", "envkit-test/cpu:tampered")
        assert p.returncode == 5, p.stdout + p.stderr
        line = " ".join(p.stderr.split())
        assert line.startswith("envkit: error: build --locked: the bundle") and f"wheelhouse/{wheel} has sha256" in line
        assert "Step 1/" not in p.stdout + p.stderr and "Traceback" not in p.stderr
    assert docker("image", "inspect", "envkit-test/cpu:tampered").returncode != 0
    # without --locked, the Dockerfile's pip --require-hashes refuses it inside the build
    p = envkit("build", "--offline", "--bundle", str(bad), "--tag", "envkit-test/cpu:tampered")
    assert p.returncode != 0 and "DO NOT MATCH THE HASHES" in p.stdout + p.stderr and wheel in p.stdout + p.stderr
    assert docker("image", "inspect", "envkit-test/cpu:tampered").returncode != 0


def test_uv_installs_the_bundles_pylock_offline_into_a_fresh_venv_giving_exactly_the_locked_set(locked_bundle, tmp_path):
    """PEP 751 (issue 29): the bundle's pylock.build-torch.toml, installed by uv with no network namespace to reach
    anything (unshare -rn) and --offline, gives the lock's wheels, each by name and version, and nothing else."""
    lock, bundle = locked_bundle
    doc = json.loads(lock.read_text())
    assert doc["solution"]["python"] == f"{sys.version_info.major}.{sys.version_info.minor}", "the CPU stack's wheels are for this Python"
    uv, venv = str(Path(sys.executable).parent / "uv"), tmp_path / "venv"
    made = subprocess.run([uv, "venv", "-q", "--offline", "--python", sys.executable, str(venv)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    p = subprocess.run(["unshare", "-rn", uv, "pip", "install", "--offline", "--no-cache", "--python", python, "-r",
                        str(bundle / "pylock.build-torch.toml")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    listed = subprocess.run([uv, "pip", "list", "--format", "json", "--python", python], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    from packaging.utils import canonicalize_name
    installed = {(canonicalize_name(x["name"]), x["version"]) for x in json.loads(listed.stdout)}
    assert installed == {(canonicalize_name(w["name"]), w["version"]) for w in doc["wheels"]}
    assert "pylock.build-torch.toml" in json.loads((bundle / "manifest.json").read_text())["files"]
