"""The site's mirror profile as a value: where apt, pip, images and sources come from on an intranet."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit


@dataclass(frozen=True)
class BuildSecret:
    """A file the build mounts for the steps that need it and never writes into a layer: the site file
    says that a mirror asks for a login, `envkit build --secret ID=FILE` gives the file."""

    id: str
    target: str  # where the RUN step sees it
    steps: str  # which steps mount it
    key: str  # the site file's key that asks for it
    what: str  # what the file holds


PIP_NETRC = BuildSecret("netrc", "/root/.netrc", "pip", "[pip] netrc",
                        "a netrc file (machine HOST login USER password PASS) for the index hosts")
APT_NETRC = BuildSecret("apt-netrc", "/etc/apt/auth.conf.d/envkit-site.conf", "apt", "[apt] netrc",
                        "an apt auth.conf (netrc format; `machine http://HOST` for a plain-http mirror)")


@dataclass(frozen=True)
class Site:
    path: str = ""
    apt_mirror: Optional[str] = None
    apt_security: Optional[str] = None
    remove_vendor_lists: bool = True
    pip_index: Optional[str] = None
    trusted_hosts: tuple[str, ...] = ()
    extra_index_urls: tuple[str, ...] = ()
    rewrites: tuple[tuple[str, str], ...] = ()
    proxy: tuple[tuple[str, str], ...] = ()
    ca_cert: Optional[bytes] = None
    registry_prefix: Optional[str] = None
    images: tuple[tuple[str, str], ...] = ()
    dtk_devel: Optional[str] = None
    dtk_runtime: Optional[str] = None
    dtk_os: Optional[str] = None
    cuda_toolkit: Optional[str] = None  # [cuda] toolkit: "image" or "pip", where the CUDA toolkit of the devel stage comes from
    pip_netrc: bool = False  # pip's index asks for a login: the netrc comes at build time (PIP_NETRC)
    apt_netrc: bool = False  # the apt mirror asks for a login: its auth.conf comes at build time (APT_NETRC)

    @property
    def given(self) -> bool:
        return bool(self.path)

    def secrets(self) -> tuple[BuildSecret, ...]:
        """The build secrets the site's mirrors need (none unless the site file asks for them)."""
        return tuple(secret for secret, wanted in ((PIP_NETRC, self.pip_netrc), (APT_NETRC, self.apt_netrc)) if wanted)

    def hosts(self) -> set[str]:
        """Hosts the site serves itself: reaching them is not reaching the internet."""
        urls = [self.apt_mirror, self.apt_security, self.pip_index, *self.extra_index_urls, *(v for _, v in self.rewrites)]
        return {urlsplit(u).hostname or "" for u in urls if u} | set(self.trusted_hosts)

    def rewrite(self, url: str) -> Optional[str]:
        """The site's mirror of an upstream URL, or None when the site has no mirror for it."""
        if urlsplit(url).hostname in self.hosts():
            return url
        for prefix, mirror in sorted(self.rewrites, key=lambda kv: -len(kv[0])):
            if url.startswith(prefix):
                return mirror + url[len(prefix):]
        return None

    def image(self, ref: str) -> str:
        """The name the site pulls a base image by: an explicit mapping, else the registry prefix."""
        mapped = dict(self.images)
        if ref in mapped:
            return mapped[ref]
        if self.registry_prefix and "/" in ref and "." not in ref.split("/")[0] and ":" not in ref.split("/")[0]:
            return f"{self.registry_prefix}/{ref}"
        if self.registry_prefix and ref.startswith("docker.io/"):
            return f"{self.registry_prefix}/{ref[len('docker.io/'):]}"
        if self.registry_prefix and ref.startswith("nvcr.io/"):  # NGC's images, pushed under their own path
            return f"{self.registry_prefix}/{ref[len('nvcr.io/'):]}"
        return ref
