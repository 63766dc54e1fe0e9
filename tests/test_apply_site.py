"""apply-site.sh, the script generated images run first, run for real by sh against a directory tree
shaped like each base image's /etc (ENVKIT_ROOT points it there). The images' own sources name stand-in archives
(*.example): the script rewrites the files the distribution ships whatever archive they name, and spells no host."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envkit.adapters.context_dir import load_templates
from envkit.model.plan import Options
from envkit.core.planner import plan
from envkit.core.render import render
from envkit.core.resolve import parse_query, resolve
from envkit.config.site_file import parse
from envkit.config import matrix_file as mx

UBUNTU_LIST = """deb http://ubuntu-archive.example/ubuntu/ jammy main restricted
deb http://ubuntu-archive.example/ubuntu/ jammy-updates main restricted
deb http://ubuntu-security.example/ubuntu/ jammy-security main restricted
"""
UBUNTU_DEB822 = """Types: deb
URIs: http://ubuntu-archive.example/ubuntu/
Suites: noble noble-updates noble-backports
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

Types: deb
URIs: http://ubuntu-security.example/ubuntu/
Suites: noble-security
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg
"""
DEBIAN_DEB822 = """Types: deb
URIs: http://debian-archive.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://debian-security.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
CUDA_LIST = "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /\n"
SITE = ('[apt]\nmirror = "http://10.10.1.10/ubuntu"\n[pip]\nindex_url = "http://10.10.1.10/pypi/simple"\n'
        '[rewrite]\n"https://download.pytorch.org/whl" = "http://10.10.1.10/torch"\n')


def _context(tmp_path: Path, site_text: str, offline: bool = False) -> Path:
    m = mx.load()
    sol = resolve(m, parse_query(m, gpu="H200", cuda="12.8", python="3.10")).solution
    site = parse(site_text, str(tmp_path / "SITE.toml")) if site_text else parse("", "")
    p = plan(m, sol, site, Options(offline=offline))
    files = render(p, load_templates(), "envkit generate", {"schema": 1})
    ctx = tmp_path / "ctx"
    for rel, data in files.items():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        (ctx / rel).write_bytes(data)
    return ctx / "envkit" / "site"


def _root(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "root"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    return root


def _apply(site_dir: Path, root: Path) -> subprocess.CompletedProcess:
    sh = shutil.which("sh")
    assert sh
    return subprocess.run([sh, str(site_dir / "apply-site.sh")], env={"ENVKIT_ROOT": str(root), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("layout", ["sources.list", "deb822"])
def test_ubuntu_sources_point_at_the_mirror_and_the_cuda_list_is_gone(tmp_path, layout):
    files = {"etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list": CUDA_LIST}
    if layout == "sources.list":
        files["etc/apt/sources.list"] = UBUNTU_LIST
    else:
        files["etc/apt/sources.list.d/ubuntu.sources"] = UBUNTU_DEB822
    root = _root(tmp_path, files)
    p = _apply(_context(tmp_path, SITE), root)
    assert p.returncode == 0, p.stderr
    assert not (root / "etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list").exists()
    text = (root / ("etc/apt/sources.list" if layout == "sources.list" else "etc/apt/sources.list.d/ubuntu.sources")).read_text()
    assert ".example/" not in text
    assert text.count("http://10.10.1.10/ubuntu/") == (3 if layout == "sources.list" else 2)
    assert (root / "etc/pip.conf").read_text().startswith("[global]\nindex-url = http://10.10.1.10/pypi/simple")


def test_debian_security_suite_goes_to_the_security_mirror(tmp_path):
    root = _root(tmp_path, {"etc/apt/sources.list.d/debian.sources": DEBIAN_DEB822})
    p = _apply(_context(tmp_path, SITE.replace("/ubuntu", "/debian")), root)
    assert p.returncode == 0, p.stderr
    text = (root / "etc/apt/sources.list.d/debian.sources").read_text()
    assert "URIs: http://10.10.1.10/debian/\n" in text and "URIs: http://10.10.1.10/debian-security/\n" in text


def test_a_source_the_site_does_not_mirror_fails_the_step_loudly(tmp_path):
    root = _root(tmp_path, {"etc/apt/sources.list": UBUNTU_LIST,
                            "etc/apt/sources.list.d/vendor.list": "deb http://ppa.example.org/x jammy main\n"})
    p = _apply(_context(tmp_path, SITE), root)
    assert p.returncode == 1
    assert "http://ppa.example.org/x" in p.stderr and "fix:" in p.stderr


def test_offline_leaves_only_the_carried_repository(tmp_path):
    root = _root(tmp_path, {"etc/apt/sources.list": UBUNTU_LIST, "etc/apt/sources.list.d/cuda.list": CUDA_LIST,
                            "etc/apt/sources.list.d/ubuntu.sources": UBUNTU_DEB822})
    p = _apply(_context(tmp_path, "", offline=True), root)
    assert p.returncode == 0, p.stderr
    lists = sorted(x.name for x in (root / "etc/apt/sources.list.d").iterdir())
    assert lists == ["envkit-offline.list"] and not (root / "etc/apt/sources.list").exists()
    assert (root / "etc/apt/sources.list.d/envkit-offline.list").read_text() == "deb [trusted=yes] file:/opt/envkit/debs ./\n"
    assert "no-index = true" in (root / "etc/pip.conf").read_text()


def test_site_ca_is_trusted(tmp_path):
    root = _root(tmp_path, {"etc/apt/sources.list": UBUNTU_LIST})
    cert = Path(__file__).parent / "golden" / "sites" / "corp-root-ca.crt"
    (tmp_path / "corp-root-ca.crt").write_bytes(cert.read_bytes())
    p = _apply(_context(tmp_path, SITE.replace("[rewrite]", '[ca]\ncert = "corp-root-ca.crt"\n[rewrite]')), root)
    assert p.returncode == 0, p.stderr
    assert (root / "usr/local/share/ca-certificates/envkit-site-ca.crt").read_bytes() == cert.read_bytes()
    assert "cert = /etc/ssl/certs/ca-certificates.crt" in (root / "etc/pip.conf").read_text()


def test_one_line_sources_with_options_go_to_the_mirror_and_debians_security_archive_to_its_own(tmp_path):
    lines = ("deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://debian-archive.example/debian bookworm main\n"
             "deb http://debian-security.example/debian-security bookworm-security main\n"
             "# deb http://debian-archive.example/debian bookworm-backports main\n")
    root = _root(tmp_path, {"etc/apt/sources.list": lines})
    p = _apply(_context(tmp_path, SITE.replace("/ubuntu", "/debian")), root)
    assert p.returncode == 0, p.stderr
    assert (root / "etc/apt/sources.list").read_text().splitlines() == [
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://10.10.1.10/debian/ bookworm main",
        "deb http://10.10.1.10/debian-security/ bookworm-security main",
        "# deb http://debian-archive.example/debian bookworm-backports main"]


def test_ports_security_a_file_source_lowercase_fields_and_debian_10s_security_suite(tmp_path):
    """Ubuntu's arm64 ports keep their security suites on the ports mirror; a file: source stays; deb822 field names are
    case-insensitive; Debian 10's security suite (buster/updates) is a security one. Run with mawk, the awk of Debian's and
    Ubuntu's images (the program is POSIX awk)."""
    lines = ("deb http://ports-archive.example/ubuntu-ports noble-security main\n"
             "deb [trusted=yes] file:/opt/local ./\n"
             "deb http://debian-security.example/debian-security buster/updates main\n")
    deb822 = "types: deb\nuris: http://ubuntu-archive.example/ubuntu/\nsuites: noble noble-updates\ncomponents: main\n"
    root = _root(tmp_path, {"etc/apt/sources.list": lines, "etc/apt/sources.list.d/ubuntu.sources": deb822})
    p = _apply(_context(tmp_path, SITE), root)
    assert p.returncode == 0, p.stderr
    assert (root / "etc/apt/sources.list").read_text().splitlines() == [
        "deb http://10.10.1.10/ubuntu/ noble-security main", "deb [trusted=yes] file:/opt/local ./",
        "deb http://10.10.1.10/ubuntu-security/ buster/updates main"]
    assert "URIs: http://10.10.1.10/ubuntu/\nsuites: noble noble-updates" in (root / "etc/apt/sources.list.d/ubuntu.sources").read_text()
