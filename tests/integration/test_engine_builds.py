"""Real builds on a real Docker Engine (started by ./scripts/test.sh): bundle on the connected
machine, build with the network off, run the self-test inside the image; a tampered bundle; the
intranet-mirror mode against loopback apt and pip mirrors. A missing engine fails these tests."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from sbom_check import check_sbom, prop
from schema_check import valid_json
from servers import apt_mirror_handler, image_apt_origin, serve, write_simple_index

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm-slim"
STACK = ["--platform", "cpu", "--torch", "2.13.0"]


def envkit(*args: str, cwd: Path = ROOT, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def engine(docker_engine):
    p = docker("image", "inspect", BASE)
    assert p.returncode == 0, f"{BASE} is missing: ./scripts/make-base-image.sh makes it"
    yield True
    # each rebuild leaves the previous envkit-built image untagged: drop those (about 1 GB each), keep the rest
    docker_engine.prune("label=io.envkit.solution")


@pytest.fixture(scope="module")
def bundle(engine, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "cpu"
    p = envkit("bundle", *STACK, "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = valid_json(p.stdout, "bundle")
    assert doc["ok"] and doc["files"] > 10
    return out


@pytest.fixture(scope="module")
def offline_build(bundle, tmp_path_factory):
    """The bundle built offline, from nothing cached: (the build's process, its SBOM directory)."""
    docker("rmi", "envkit-test/cpu:offline")
    assert docker("rmi", BASE).returncode == 0  # the build must load the base image from the bundle
    sbom_dir = tmp_path_factory.mktemp("sbom")
    p = envkit("build", "--offline", "--bundle", str(bundle), "--tag", "envkit-test/cpu:offline", "--no-cache", "--json",
               "--sbom-dir", str(sbom_dir))
    assert p.returncode == 0, p.stderr[-4000:]
    left = json.loads(p.stdout)["left_on_engine"]  # the legacy builder kept the build stage's image: said, untagged, there
    assert [e["stage"] for e in left] == ["build"] and left[0]["size"] > 0
    assert docker("image", "inspect", "-f", "{{len .RepoTags}}", left[0]["id"]).stdout.strip() == "0"
    return p, sbom_dir


def test_offline_bundle_builds_with_the_network_off_and_the_image_runs_its_selftest(bundle, offline_build):
    p, _ = offline_build
    doc = valid_json(p.stdout, "build")
    assert doc["network"] == "none" and doc["image"] == "envkit-test/cpu:offline"
    assert [s["name"] for s in doc["stages"]] == ["build", "runtime"]
    assert "docker load images/" in p.stderr
    assert "Using cache" not in p.stderr and "envkit: apt reads only the carried repository" in p.stderr
    assert docker("image", "inspect", BASE).returncode == 0
    label = valid_json(docker("image", "inspect", "-f", '{{index .Config.Labels "io.envkit.solution"}}', "envkit-test/cpu:offline").stdout, "solution")
    assert label == json.loads((bundle / "envkit" / "solution.json").read_text())
    s = envkit("selftest", "--image", "envkit-test/cpu:offline", "--quick", "--json")
    assert s.returncode == 0, s.stderr
    result = valid_json(s.stdout, "selftest")
    assert result["ok"] and result["torch"] == "2.13.0+cpu" and result["decode"]["tokens_per_s"] > 0


def test_the_images_sbom_lists_what_pip_and_dpkg_report_inside_it_with_the_bundles_hashes(bundle, offline_build):
    p, sbom_dir = offline_build
    built = valid_json(p.stdout, "build")
    assert built["sbom"]["sbom"] == str(sbom_dir / "envkit-test_cpu_offline.cdx.json")
    doc = check_sbom("envkit-test/cpu:offline", sbom_dir, bundle)
    assert built["sbom"]["components"] == len(doc["components"]) and built["id"] == docker(
        "image", "inspect", "-f", "{{.Id}}", "envkit-test/cpu:offline").stdout.strip()
    by_name = {c["name"]: c for c in doc["components"]}
    torch = by_name["torch"]
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu" and prop(torch, "envkit:carried").startswith("wheelhouse/torch-2.13.0+cpu-")
    assert prop(by_name["python3.11"], "envkit:carried").startswith("debs/runtime/python3.11_")  # installed from the bundle
    assert prop(by_name["apt"], "envkit:base-image") == BASE and "hashes" not in by_name["apt"]  # the base image's own
    assert "hashes" not in by_name["pip"]  # the venv's pip came with Debian's python3-pip-whl, not as a carried wheel


def test_selftest_in_an_image_without_transformers_names_what_is_missing(bundle, tmp_path):
    """A model directory is mounted read-only into the image; the demo image has torch but not transformers,
    so decoding a model is a failed check that says so (exit 1, the JSON document intact)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    s = envkit("selftest", "--image", "envkit-test/cpu:offline", "--model", str(model), "--engine", "hf", "--output-len", "4", "--json")
    assert s.returncode == 1, s.stderr
    failed = [c for c in valid_json(s.stdout, "selftest")["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["load /envkit-model"]
    assert "No module named 'transformers'" in failed[0]["detail"]


def test_doctor_judges_the_built_images_stack_on_this_host(bundle):
    p = envkit("doctor", "--image", "envkit-test/cpu:offline", "--deep", "--json")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = valid_json(p.stdout, "doctor")
    inner = doc["image_facts"]
    assert inner["python"]["python"].startswith("3.11") and inner["python"]["torch"] == "2.13.0+cpu"
    assert inner["deep"]["torch"] == "2.13.0+cpu" and inner["deep"]["cuda_available"] is False
    assert inner["python"]["executable"].startswith("/opt/venv/")
    assert doc["ok"] is True


def test_a_second_bundle_run_downloads_nothing(bundle):
    p = envkit("bundle", *STACK, "-o", str(bundle), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = valid_json(p.stdout, "bundle")
    assert doc["complete_already"] is True and doc["downloaded"] == []


def test_a_bundle_with_a_removed_and_an_altered_wheel_is_refused_before_any_step(bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(bundle, bad)
    wheels = sorted((bad / "wheelhouse").glob("*.whl"))
    removed, altered = wheels[0], wheels[1]
    removed.unlink()
    with altered.open("r+b") as f:
        f.seek(100)
        f.write(b"tampered")
    docker("rmi", "envkit-test/cpu:tampered")
    p = envkit("build", "--offline", "--bundle", str(bad), "--tag", "envkit-test/cpu:tampered")
    assert p.returncode == 5, p.stdout + p.stderr
    text = " ".join((p.stdout + p.stderr).split())
    assert f"missing: wheelhouse/{removed.name}" in text and f"altered: wheelhouse/{altered.name}" in text
    assert "Step 1/" not in p.stdout + p.stderr
    assert docker("image", "inspect", "envkit-test/cpu:tampered").returncode != 0


def test_mirror_mode_builds_against_loopback_apt_and_pip_mirrors_only(bundle, tmp_path):
    index = tmp_path / "index"
    write_simple_index(bundle / "wheelhouse", index, prefixes=("simple", "torch/cpu"))
    apt = apt_mirror_handler(tmp_path / "apt-cache", image_apt_origin(BASE))
    with serve(apt) as apt_srv, serve(partial(SimpleHTTPRequestHandler, directory=str(index))) as pip_srv:
        site = tmp_path / "SITE.toml"
        site.write_text(f'[apt]\nmirror = "http://127.0.0.1:{apt_srv.server_port}/debian"\n'
                        f'[pip]\nindex_url = "http://127.0.0.1:{pip_srv.server_port}/simple"\ntrusted_hosts = ["127.0.0.1"]\n'
                        f'[rewrite]\n"https://download.pytorch.org/whl" = "http://127.0.0.1:{pip_srv.server_port}/torch"\n')
        docker("rmi", "envkit-test/cpu:mirror")
        p = envkit("build", "--mirror", str(site), *STACK, "-o", str(tmp_path / "ctx"), "--network", "host",
                   "--tag", "envkit-test/cpu:mirror", "--json")
        assert p.returncode == 0, p.stderr[-4000:]
        assert valid_json(p.stdout, "build")["network"] == "host"
    assert any(r.startswith("/debian/dists/bookworm/") for r in apt.requests)
    # python3.11 from the point release or its security update (the base image carries -security: make-base-image.sh),
    # each through the site's mirror, the security suite at the mirror's -security path
    assert any(re.match(r"/debian(-security)?/pool/(updates/)?main/p/python3\.11/", r) for r in apt.requests), apt.requests
    assert any(r.startswith("/debian-security/dists/bookworm-security/") for r in apt.requests), apt.requests
    assert "envkit: removed vendor apt list" not in p.stderr  # the debian base has none
    assert "apt source" in p.stderr and f"127.0.0.1:{apt_srv.server_port}" in p.stderr
    s = envkit("selftest", "--image", "envkit-test/cpu:mirror", "--quick", "--json")
    assert s.returncode == 0 and valid_json(s.stdout, "selftest")["decode"]["tokens_per_s"] > 0


def test_podman_builds_the_same_bundle_through_its_docker_compatible_socket(bundle, tmp_path):
    import os

    sock = "/tmp/podman.sock"
    assert Path(sock).exists(), "Podman's API is not up: ./scripts/test.sh starts it (scripts/start-podman.sh)"
    subprocess.run(["podman", "rmi", "-f", "envkit-test/cpu:podman", BASE], capture_output=True, timeout=300)
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}"}
    p = subprocess.run([sys.executable, "-m", "envkit", "build", "--offline", "--bundle", str(bundle), "--tag", "envkit-test/cpu:podman",
                        "--json", "--sbom-dir", str(tmp_path)], capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-4000:]
    check_sbom("envkit-test/cpu:podman", tmp_path, bundle, cli="podman")  # the label build and the probe through Podman too
    doc = valid_json(p.stdout, "build")
    assert doc["network"] == "none" and [s["name"] for s in doc["stages"]] == ["build", "runtime"]
    assert "docker load images/" in p.stderr
    s = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--image", "envkit-test/cpu:podman", "--quick", "--json"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert s.returncode == 0, s.stderr
    assert valid_json(s.stdout, "selftest")["decode"]["tokens_per_s"] > 0


def test_build_all_builds_two_cpu_targets_and_inspect_shows_each_solution(bundle, tmp_path):
    index = tmp_path / "index"
    write_simple_index(bundle / "wheelhouse", index, prefixes=("simple", "torch/cpu"))
    apt = apt_mirror_handler(tmp_path / "apt-cache", image_apt_origin(BASE))
    with serve(apt) as apt_srv, serve(partial(SimpleHTTPRequestHandler, directory=str(index))) as pip_srv:
        (tmp_path / "SITE.toml").write_text(
            f'[apt]\nmirror = "http://127.0.0.1:{apt_srv.server_port}/debian"\n'
            f'[pip]\nindex_url = "http://127.0.0.1:{pip_srv.server_port}/simple"\ntrusted_hosts = ["127.0.0.1"]\n'
            f'[rewrite]\n"https://download.pytorch.org/whl" = "http://127.0.0.1:{pip_srv.server_port}/torch"\n')
        (tmp_path / "envkit.toml").write_text(
            '[defaults]\nregistry = "envkit-test"\n\n'
            '[[target]]\nname = "cpu-offline"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\ntag = "all"\n\n'
            '[[target]]\nname = "cpu-mirror"\nplatform = "cpu"\ntorch = "2.13.0"\nmirror = "SITE.toml"\ntag = "all"\n')
        for ref in ("envkit-test/envkit-cpu-offline:all", "envkit-test/envkit-cpu-mirror:all"):
            docker("rmi", ref)
        p = envkit("build", "--project", "envkit.toml", "--all", "--jobs", "2", "--network", "host", "--json", cwd=tmp_path)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = valid_json(p.stdout, "build")
    assert doc["ok"] and [t["name"] for t in doc["targets"]] == ["cpu-offline", "cpu-mirror"]
    assert "2/2 targets built" in p.stderr
    for t in doc["targets"]:
        assert t["ok"] and (tmp_path / t["log"]).is_file()
        i = envkit("inspect", t["image"], "--json", "--junit", str(tmp_path / f"{t['name']}.xml"))
        assert i.returncode == 0, i.stderr
        info = valid_json(i.stdout, "inspect")
        assert info["solution"]["torch"]["pin"] == "2.13.0+cpu" and info["solution"]["platform"] == "cpu"
        assert (tmp_path / f"{t['name']}.xml").read_text().startswith("<?xml")
