"""The site mirror profile (SITE.toml): where an intranet site keeps its apt, pip, wheel and image
mirrors. Parsed once into a frozen Site; the planner reads nothing else about the site.

    [apt]
    mirror = "http://10.0.0.5/ubuntu"            # replaces the distro archive in sources.list and .sources
    security = "http://10.0.0.5/ubuntu"          # optional; Ubuntu: defaults to mirror, Debian: mirror + "-security"
    remove_vendor_lists = true                    # cuda*.list, nvidia-ml, rocm, amdgpu lists (default true)

    [pip]
    index_url = "http://10.0.0.5/pypi/simple"
    trusted_hosts = ["10.0.0.5"]
    extra_index_urls = []

    [rewrite]                                     # upstream URL prefix -> the site's mirror of it
    "https://download.pytorch.org/whl" = "http://10.0.0.5/pytorch-whl"
    "https://github.com" = "http://10.0.0.5/github"

    [proxy]                                       # passed as build args at build time, never written into a layer
    http = "http://proxy.corp:3128"
    https = "http://proxy.corp:3128"
    no_proxy = "10.0.0.0/8,.corp"

    [ca]
    cert = "corp-root-ca.crt"                     # relative to this file

    [registry]
    prefix = "registry.corp:5000"                 # docker.io/nvidia/cuda:X -> registry.corp:5000/nvidia/cuda:X

    [images]                                      # any base image -> the site's own name or digest
    "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04" = "registry.corp:5000/cuda@sha256:..."

    [dtk]                                         # DTK images are not on Docker Hub
    devel_image = "registry.corp:5000/dtk:24.04-ubuntu20.04"
    runtime_image = "registry.corp:5000/dtk:24.04-ubuntu20.04"
    os = "ubuntu20.04"
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envkit.errors import InputError
from envkit.config.userfile import parse_toml, read_text
from envkit.model.site import Site

_TABLES = {
    "apt": {"mirror", "security", "remove_vendor_lists"},
    "pip": {"index_url", "trusted_hosts", "extra_index_urls"},
    "rewrite": None,
    "proxy": {"http", "https", "no_proxy"},
    "ca": {"cert"},
    "registry": {"prefix"},
    "images": None,
    "dtk": {"devel_image", "runtime_image", "os"},
}
_SECRET_KEY = re.compile(r"pass(word)?|token|secret|api[_-]?key|auth", re.I)


def _bad(path: str, what: str, fix: str) -> InputError:
    return InputError(f"site file {path}: {what}", fix)


def _url(path: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"(https?|file)://\S+$", value):
        raise _bad(path, f"{where} must be an http(s):// URL, got {value!r}", f"write {where} = \"http://mirror.host/path\"")
    if re.search(r"[#'\"`$\\;&|<>()\s]", value):
        raise _bad(path, f"{where} contains a character a URL here may not hold ({value!r})", "percent-encode it or use a plainer mirror path")
    try:
        parts = urlsplit(value)
        parts.port
    except ValueError as exc:
        raise _bad(path, f"{where} is not a valid URL ({exc})", "write it as http://host[:port]/path") from None
    if parts.username or parts.password:
        raise _bad(path, f"{where} carries credentials ({parts.username}@...): they would be written into an image layer",
                   "use a read-only mirror URL without credentials, or log in on the build host (pip keyring/netrc) outside the image")
    return value.rstrip("/")


_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*(:\d+)?")


def _image(path: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not _IMAGE_REF.fullmatch(value):
        raise _bad(path, f"{where} must be an image reference like registry:5000/name:tag or name@sha256:..., got {value!r}",
                   "write the image name on one line, without spaces")
    return value


def _check_no_secrets(path: str, raw: dict, where: str = "") -> None:
    for key, value in raw.items():
        here = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            _check_no_secrets(path, value, here)
        elif _SECRET_KEY.search(key) and where not in ("rewrite", "images"):
            raise _bad(path, f"`{here}` looks like a credential: envkit never writes credentials into an image",
                       "remove it; give the build host its credentials (docker login, pip keyring) outside the image")


def parse(text: str, path: str, read_file=None) -> Site:
    raw = parse_toml(text, "site file", path)
    _check_no_secrets(path, raw)
    for table, value in raw.items():
        if table not in _TABLES:
            raise _bad(path, f"unknown table [{table}]", f"use only {', '.join('[' + t + ']' for t in _TABLES)}")
        if not isinstance(value, dict):
            raise _bad(path, f"[{table}] must be a table", f"write it as [{table}] with keys below it")
        allowed = _TABLES[table]
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    raise _bad(path, f"unknown key `{key}` in [{table}]", f"allowed keys: {', '.join(sorted(allowed))}")
    apt, pip = raw.get("apt", {}), raw.get("pip", {})
    remove = apt.get("remove_vendor_lists", True)
    if not isinstance(remove, bool):
        raise _bad(path, "[apt] remove_vendor_lists must be true or false", "write remove_vendor_lists = true")
    mirror = _url(path, "[apt] mirror", apt["mirror"]) if "mirror" in apt else None
    security = _url(path, "[apt] security", apt["security"]) if "security" in apt else None

    def str_list(where: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _bad(path, f"{where} must be a list of strings", f"write {where} = [\"...\"]")
        return tuple(value)

    rewrites = []
    for upstream, mirror_url in raw.get("rewrite", {}).items():
        _url(path, f"[rewrite] key {upstream!r}", upstream)
        rewrites.append((upstream.rstrip("/"), _url(path, f"[rewrite] {upstream!r}", mirror_url)))
    proxy = tuple((k, v) for k, v in raw.get("proxy", {}).items())
    for k, v in proxy:
        if k != "no_proxy":
            _url(path, f"[proxy] {k}", v)
        elif not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9.,/*:_-]*", v):
            raise _bad(path, f"[proxy] no_proxy must be a comma-separated string of hosts and networks, got {v!r}",
                       "write no_proxy = \"10.0.0.0/8,.corp.example\"")
    ca = None
    if "cert" in raw.get("ca", {}):
        cert_path = Path(path).parent / str(raw["ca"]["cert"])
        try:
            ca = (read_file or Path.read_bytes)(cert_path)
        except OSError as exc:
            raise _bad(path, f"[ca] cert {cert_path}: {exc.strerror}", "point cert at a PEM file, relative to the site file") from None
        if b"-----BEGIN CERTIFICATE-----" not in ca:
            raise _bad(path, f"[ca] cert {cert_path} is not a PEM certificate", "give the PEM (BEGIN CERTIFICATE) form")
    images = []
    for ref, replacement in raw.get("images", {}).items():
        images.append((_image(path, "[images] key", ref), _image(path, f"[images] {ref!r}", replacement)))
    prefix = raw.get("registry", {}).get("prefix")
    if prefix is not None and (not isinstance(prefix, str) or "://" in prefix or not prefix.strip("/") or not _IMAGE_REF.fullmatch(prefix)):
        raise _bad(path, "[registry] prefix must be a registry host[/path] without a scheme", "write prefix = \"registry.corp:5000\"")
    dtk = raw.get("dtk", {})
    for key in ("devel_image", "runtime_image"):
        if key in dtk:
            _image(path, f"[dtk] {key}", dtk[key])
    if "os" in dtk and (not isinstance(dtk["os"], str) or not re.fullmatch(r"[a-z]+\d+(\.\d+)?", dtk["os"])):
        raise _bad(path, f"[dtk] os must name an os like \"ubuntu20.04\", got {dtk['os']!r}", "see envkit matrix show os")
    trusted = str_list("[pip] trusted_hosts", pip.get("trusted_hosts", []))
    for h in trusted:
        if not _HOST.fullmatch(h):
            raise _bad(path, f"[pip] trusted_hosts entry {h!r} is not a host name", "write host or host:port, e.g. \"10.10.1.10\"")
    return Site(
        path=path,
        apt_mirror=mirror,
        apt_security=security,
        remove_vendor_lists=remove,
        pip_index=_url(path, "[pip] index_url", pip["index_url"]) if "index_url" in pip else None,
        trusted_hosts=trusted,
        extra_index_urls=tuple(_url(path, "[pip] extra_index_urls", u) for u in str_list("[pip] extra_index_urls", pip.get("extra_index_urls", []))),
        rewrites=tuple(rewrites),
        proxy=proxy,
        ca_cert=ca,
        registry_prefix=prefix.strip("/") if prefix else None,
        images=tuple(images),
        dtk_devel=dtk.get("devel_image"),
        dtk_runtime=dtk.get("runtime_image", dtk.get("devel_image")),
        dtk_os=dtk.get("os"),
    )


def load(path: str) -> Site:
    return parse(read_text(path, "site file", "give the path of a SITE.toml"), path)
