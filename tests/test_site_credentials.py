"""A credential in a site file is refused with the way around it, never written into an image: user:pass@ in
an image reference or a registry prefix, a token in a URL's query string, a private key beside the CA
certificate (fuzz report, security findings 1-3)."""
from __future__ import annotations

from pathlib import Path

import pytest

from envkit.config.site_file import parse
from envkit.errors import InputError

CERT = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
SECRETS = ("S3CR3TTOKEN", "glpat-SECRET", "SECRET2", "hunter2", "MIIE")


IMAGE_LOGIN, PIP_SECRET, APT_SECRET = "docker login or podman login", "--secret netrc=FILE", "--secret apt-netrc=FILE"


@pytest.mark.parametrize("text, names, way", [
    ('[images]\n"docker.io/library/debian:bookworm-slim" = "robot:S3CR3TTOKEN@registry.corp:5000/debian:bookworm-slim"\n',
     "[images]", IMAGE_LOGIN),
    ('[registry]\nprefix = "robot:S3CR3TTOKEN@registry.corp:5000"\n', "[registry] prefix", IMAGE_LOGIN),
    ('[dtk]\ndevel_image = "robot:hunter2@registry.corp:5000/dtk:24.04"\nos = "ubuntu20.04"\n', "[dtk] devel_image", IMAGE_LOGIN),
    ('[pip]\nindex_url = "http://10.10.1.10/simple?private_token=glpat-SECRET"\n', "[pip] index_url", PIP_SECRET),
    ('[pip]\nextra_index_urls = ["http://10.10.1.10/whl?token=SECRET2"]\n', "[pip] extra_index_urls", PIP_SECRET),
    ('[rewrite]\n"https://download.pytorch.org/whl" = "http://10.10.1.10/whl?token=SECRET2"\n', "[rewrite]", PIP_SECRET),
    ('[apt]\nmirror = "http://10.10.1.10/debian?token=SECRET2"\n', "[apt] mirror", APT_SECRET),
])
def test_credentials_in_references_and_urls_are_refused_in_one_line_without_echoing_them(text, names, way):
    """...with the way the login comes instead (issue 14): a build secret for mirrors, the engine's login for images."""
    with pytest.raises(InputError) as e:
        parse(text, "SITE.toml")
    line = e.value.one_line()
    assert names in line and "\n" not in line and e.value.exit_code == 2
    assert not any(s in line for s in SECRETS), line
    assert way in e.value.fix, line


def test_a_private_key_beside_the_ca_certificate_is_refused(tmp_path: Path):
    (tmp_path / "ca.pem").write_bytes(CERT + KEY)
    with pytest.raises(InputError, match="holds a private key"):
        parse('[ca]\ncert = "ca.pem"\n', str(tmp_path / "SITE.toml"))
    (tmp_path / "ca.pem").write_bytes(CERT)
    assert parse('[ca]\ncert = "ca.pem"\n', str(tmp_path / "SITE.toml")).ca_cert == CERT


def test_digests_and_plain_references_still_pass():
    digest = "registry.corp:5000/debian@sha256:" + "0" * 64
    site = parse(f'[images]\n"docker.io/library/debian:bookworm-slim" = "{digest}"\n[registry]\nprefix = "registry.corp:5000"\n',
                 "SITE.toml")
    assert dict(site.images)["docker.io/library/debian:bookworm-slim"] == digest and site.registry_prefix == "registry.corp:5000"


@pytest.mark.parametrize("url", ["https://alice:S3cr3t;x@pypi.corp/simple", "https://ghp_S3cr3t@pypi.corp/simple",
                                 "ftp://alice:S3cr3t@pypi.corp/simple"])
def test_a_refused_url_never_shows_its_login(url, tmp_path):
    """The independent review: a password holding ';' was echoed by the 'character a URL may not hold' refusal, and a
    token written as the user name by the credentials refusal."""
    from envkit.config.site_file import load
    from envkit.errors import InputError

    site = tmp_path / "site.toml"
    site.write_text(f'[pip]\nindex_url = "{url}"\n')
    with pytest.raises(InputError) as e:
        load(str(site))
    assert "S3cr3t" not in e.value.one_line()
