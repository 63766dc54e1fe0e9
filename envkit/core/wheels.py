"""Pure wheel and index logic for bundles: platform tags, pip download arguments, simple-index lookups."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional
from urllib.parse import urljoin

from envkit.errors import ExternalError, InputError
from envkit.model.matrix import OsRelease
from envkit.model.plan import BuildPlan


def platform_tags(glibc: tuple[int, int], arch: str = "x86_64") -> list[str]:
    """Wheel platform tags a target with this glibc accepts, newest first (PEP 600 + legacy aliases)."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{legacy[m]}_{arch}" for m in (17, 12, 5) if m <= minor]
    return tags + [f"linux_{arch}"]


def pip_download_args(plan: BuildPlan, osr: OsRelease, dest: Path, find_links: tuple[str, ...]) -> list[str]:
    py = plan.solution.python
    cp = f"cp{py.major}{py.minor}"
    args = ["download", "--dest", str(dest), "--only-binary=:all:", "--python-version", f"{py.major}.{py.minor}",
            "--implementation", "cp", "--abi", cp, "--abi", "abi3", "--abi", "none", "--progress-bar", "off",
            "--retries", "2", "--timeout", "60"]
    for tag in platform_tags((osr.glibc.major, osr.glibc.minor)):
        args += ["--platform", tag]
    site = plan.site
    if site.pip_index:
        args += ["--index-url", site.pip_index]
    for host in site.trusted_hosts:
        args += ["--trusted-host", host]
    for index in dict.fromkeys(i for _, i in plan.wheel_sources if i):
        args += ["--extra-index-url", (site.rewrite(index) if site.given else None) or index]
    for fl in find_links:
        args += ["--find-links", fl]
    reqs = []
    for req, _ in plan.wheel_sources:
        if "://" in req and site.given:
            mirrored = site.rewrite(req)
            if mirrored is None:
                raise InputError(f"bundle: {req} is not mirrored by {site.path}", "add a [rewrite] for its host to the site file")
            req = mirrored
        reqs.append(req)
    return args + reqs


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def find_in_simple_index(html: str, base: str, filename: str) -> tuple[str, Optional[str]]:
    """(url, sha256) of a file in a PEP 503 project page."""
    p = _Links()
    p.feed(html)
    for name, href in p.links:
        if name == filename:
            url, _, frag = urljoin(base, href).partition("#")
            m = re.match(r"sha256=([0-9a-f]{64})", frag)
            return url, m.group(1) if m else None
    raise ExternalError(f"{filename} is not on the index page {base}", "check the version, or mirror the file on the site index")
