"""Authenticated mirrors on real engines (issue 14): a Podman build (scripts/start-podman.sh) against a PEP 503
index and an apt mirror on loopback that both answer 401 without a login, given only with `--secret`; the
stand-in wheel installs, and the passwords are in no layer of the image or of its build stage, in no history
entry, in no label and in no line of the build log. A real Docker Engine (legacy builder, no buildx) refuses
the same build in one line before any step. A missing engine fails these tests."""
from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from schema_check import valid_json
from servers import apt_mirror_handler, image_apt_origin, serve, write_simple_index

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm-slim"
SOCK = "/tmp/podman.sock"
PODMAN = ["podman", "--remote", "--url", f"unix://{SOCK}"]
PIP_PASSWORD = "pip-pw-4c1d9e-NEVER-IN-A-LAYER"
APT_PASSWORD = "apt-pw-7a22f0-NEVER-IN-A-LAYER"
SECRETS = (PIP_PASSWORD.encode(), APT_PASSWORD.encode(), base64.b64encode(f"robot:{PIP_PASSWORD}".encode()),
           base64.b64encode(f"robot:{APT_PASSWORD}".encode()))
STAND_IN = "stand-in torch from the authenticated index"
TAG = "envkit-test/cpu:secrets"


def with_basic_auth(handler, password: str):
    """`handler`, answering 401 to every request without robot's login; `seen` records (path, authorized)."""
    token = "Basic " + base64.b64encode(f"robot:{password}".encode()).decode()

    class Authenticated(handler):  # type: ignore[misc,valid-type]
        seen: list[tuple[str, bool]] = []

        def log_message(self, *a):
            pass

        def do_GET(self):
            ok = self.headers.get("Authorization") == token
            type(self).seen.append((self.path, ok))
            if not ok:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="envkit-test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    return Authenticated


def stand_in_torch(wheels: Path) -> Path:
    """A tiny pure-Python wheel that satisfies the plan's `torch==2.13.0+cpu` and says where it came from."""
    wheels.mkdir(parents=True, exist_ok=True)
    whl = wheels / "torch-2.13.0+cpu-py3-none-any.whl"
    info = "torch-2.13.0+cpu.dist-info"
    files = {
        "torch/__init__.py": f'__version__ = "2.13.0+cpu"\nSTAND_IN = "{STAND_IN}"\n',
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envkit-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n")
    return whl


def run(*cmd: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def envkit(*args: str, docker_host: str | None, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return run(sys.executable, "-m", "envkit", *args, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def podman():
    assert Path(SOCK).exists() and run(*PODMAN, "version").returncode == 0, \
        "Podman's API is not up: ./scripts/test.sh starts it (scripts/start-podman.sh)"
    assert run(*PODMAN, "image", "exists", BASE).returncode == 0, \
        f"{BASE} is not in Podman's storage: load it (./scripts/make-base-image.sh, then podman load or podman import)"
    yield True
    run(*PODMAN, "rmi", "-f", TAG)


@pytest.fixture()
def mirrors(tmp_path):
    """The authenticated index (the stand-in wheel, under simple/ and torch/cpu/) and apt pass-through mirror, with
    a site file that asks for both logins and the two secret files."""
    index = tmp_path / "index"
    write_simple_index(stand_in_torch(tmp_path / "wheels").parent, index, prefixes=("simple", "torch/cpu"))
    pip_handler = with_basic_auth(SimpleHTTPRequestHandler, PIP_PASSWORD)
    apt_handler = with_basic_auth(apt_mirror_handler(tmp_path / "apt-cache", image_apt_origin(BASE, tuple(PODMAN))), APT_PASSWORD)
    with serve(partial(pip_handler, directory=str(index))) as pip_srv, serve(apt_handler) as apt_srv:
        pip_url, apt_url = f"http://127.0.0.1:{pip_srv.server_port}", f"http://127.0.0.1:{apt_srv.server_port}"
        site = tmp_path / "SITE.toml"
        site.write_text(f'[apt]\nmirror = "{apt_url}/debian"\nnetrc = true\n'
                        f'[pip]\nindex_url = "{pip_url}/simple"\ntrusted_hosts = ["127.0.0.1"]\nnetrc = true\n'
                        f'[rewrite]\n"https://download.pytorch.org/whl" = "{pip_url}/torch"\n')
        secrets = tmp_path / "secrets"  # outside the build context
        secrets.mkdir()
        (secrets / "netrc").write_text(f"machine 127.0.0.1 login robot password {PIP_PASSWORD}\n")
        (secrets / "apt-auth.conf").write_text(f"machine {apt_url} login robot password {APT_PASSWORD}\n")
        yield {"site": site, "netrc": secrets / "netrc", "apt": secrets / "apt-auth.conf", "pip_seen": pip_handler.seen,
               "apt_seen": apt_handler.seen, "pip_url": pip_url}


def _layer_files(archive: Path):
    """(name, bytes) of every file in a saved image: the archive's own (config, manifest) and each layer's."""
    with tarfile.open(archive) as outer:
        for member in outer:
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()  # type: ignore[union-attr]
            yield member.name, data
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            if member.name.endswith((".tar", "layer.tar")) or re.fullmatch(r"[0-9a-f]{64}(\.tar)?", Path(member.name).name):
                try:
                    with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                        for entry in layer:
                            if entry.isfile():
                                yield f"{member.name}:{entry.name}", layer.extractfile(entry).read()  # type: ignore[union-attr]
                except tarfile.ReadError:
                    pass


def test_the_mirrors_refuse_a_request_without_the_login(mirrors):
    """The servers the build meets really ask for a login: without it, 401."""
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{mirrors['pip_url']}/simple/torch/", timeout=10)
    assert e.value.code == 401
    e.value.close()


def test_a_podman_build_logs_in_with_secrets_that_reach_no_layer_history_label_or_log(podman, mirrors, tmp_path):
    run(*PODMAN, "rmi", "-f", TAG)
    p = envkit("build", "--mirror", str(mirrors["site"]), "--platform", "cpu", "--torch", "2.13.0", "-o", str(tmp_path / "ctx"),
               "--network", "host", "--tag", TAG, "--no-cache", "--secret", f"netrc={mirrors['netrc']}",
               "--secret", f"id=apt-netrc,src={mirrors['apt']}", "--json", docker_host=f"unix://{SOCK}")
    assert p.returncode == 0, p.stderr[-4000:]
    doc = valid_json(p.stdout, "build")
    assert doc["image"] == TAG and [s["name"] for s in doc["stages"]] == ["build", "runtime"]
    log = p.stdout + p.stderr
    unwrapped = "".join(log.split())  # the console wraps long lines: a password split across two would still be found
    assert "RUN--mount=type=secret,id=netrc,target=/root/.netrcpipinstall" in unwrapped
    assert "SHELLisnotsupported" not in unwrapped  # docker format, as Podman's compatible API builds: pipefail kept
    assert not any(s.decode() in unwrapped for s in SECRETS)

    # each mirror was reached with its login only (pip and apt read the mounted files), and served the build
    assert any(path.endswith(".whl") and ok for path, ok in mirrors["pip_seen"]), mirrors["pip_seen"]
    assert any(re.search(r"/pool/(updates/)?main/p/python3\.11/", path) and ok for path, ok in mirrors["apt_seen"]), mirrors["apt_seen"]
    assert all(ok for path, ok in mirrors["pip_seen"] if path.endswith(".whl"))

    # the stand-in wheel from the authenticated index is what the image's Python imports
    r = run(*PODMAN, "run", "--rm", "--network", "none", TAG, "python", "-c", "import torch; print(torch.__version__, torch.STAND_IN)")
    assert r.returncode == 0 and r.stdout.strip() == f"2.13.0+cpu {STAND_IN}", r.stderr
    r = run(*PODMAN, "run", "--rm", "--network", "none", TAG, "sh", "-c",
            "test ! -s /root/.netrc && test ! -s /etc/apt/auth.conf.d/envkit-site.conf && echo clean")
    assert r.stdout.strip() == "clean", r.stdout + r.stderr

    # no password in the image's history, config or labels, nor in the build stage's (the last image before the runtime FROM)
    build_stage = re.findall(r"^--> ([0-9a-f]{10,64})\s*$", log.split("[2/2] STEP 1/")[0], re.M)
    assert build_stage, "podman printed no image id for the build stage"
    images = {"runtime": TAG, "build": build_stage[-1]}
    for name, ref in images.items():
        history = run(*PODMAN, "history", "--no-trunc", "--format", "json", ref)
        inspect = run(*PODMAN, "image", "inspect", ref)
        assert history.returncode == 0 and inspect.returncode == 0, history.stderr + inspect.stderr
        assert not any(s.decode() in history.stdout + inspect.stdout for s in SECRETS), name
        created = " ".join(h.get("created_by", "") or h.get("CreatedBy", "") for h in json.loads(history.stdout))
        if name == "build":
            assert "--mount=type=secret,id=netrc" in created  # the history names the mount, never what it held

        # every file of every layer, and the archive's own files, byte for byte
        archive = tmp_path / f"{name}.tar"
        saved = run(*PODMAN, "save", "--format", "docker-archive", "-o", str(archive), ref, timeout=900)
        assert saved.returncode == 0, saved.stderr
        read, leaks = [], []
        for fname, data in _layer_files(archive):
            if STAND_IN.encode() in data:
                read.append(fname)
            leaks += [fname for s in SECRETS if s in data]
            if fname.endswith((":root/.netrc", ":etc/apt/auth.conf.d/envkit-site.conf")):
                assert data == b"", f"{name}: {fname} holds {len(data)} bytes"
        assert not leaks, f"{name} image: a password in {leaks}"
        assert any(n.endswith(":opt/venv/lib/python3.11/site-packages/torch/__init__.py") for n in read), read  # the scan reads files
        archive.unlink()


def test_without_the_secret_the_build_is_refused_before_any_step(podman, mirrors, tmp_path):
    p = envkit("build", "--mirror", str(mirrors["site"]), "--platform", "cpu", "--torch", "2.13.0", "-o", str(tmp_path / "ctx"),
               "--network", "host", "--secret", f"netrc={mirrors['netrc']}", docker_host=f"unix://{SOCK}")
    assert p.returncode == 2, p.stdout + p.stderr
    text = " ".join(p.stderr.split())
    assert "the build mounts the secret `apt-netrc` ([apt] netrc = true in the site file) and no --secret gives it" in text
    assert "STEP 1/" not in p.stdout + p.stderr and not mirrors["pip_seen"]


def test_the_docker_engines_legacy_builder_refuses_in_one_line_before_any_step(mirrors, tmp_path):
    """Docker 20.10 (Debian's docker.io, started by ./scripts/test.sh), whose SDK build is the legacy builder, and no
    docker buildx on PATH here: one line, exit 5, nothing built."""
    no_host = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    assert run("docker", "info", "--format", "{{.ServerVersion}}", env=no_host).returncode == 0, \
        "no Docker Engine answers: run ./scripts/test.sh (it starts one) or ./scripts/start-docker.sh"
    assert run("docker", "buildx", "version").returncode != 0, "docker buildx is installed here: this engine can pass secrets"
    p = envkit("build", "--mirror", str(mirrors["site"]), "--platform", "cpu", "--torch", "2.13.0", "-o", str(tmp_path / "ctx"),
               "--network", "host", "--secret", f"netrc={mirrors['netrc']}", "--secret", f"apt-netrc={mirrors['apt']}",
               docker_host=None)
    assert p.returncode == 5, p.stdout + p.stderr
    line = " ".join(p.stderr.split())
    assert re.search(r"envkit: error: this engine \(Docker [^,]+, legacy builder\) cannot pass build secrets \(fix: install docker "
                     r"buildx, use podman \(.*\), or build --offline from a bundle made where the mirror's credentials are", line), line
    assert "Step 1/" not in p.stdout + p.stderr and not mirrors["pip_seen"] and not mirrors["apt_seen"]
