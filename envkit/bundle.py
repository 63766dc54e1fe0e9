"""`envkit bundle`: on a connected machine, carry everything an offline build needs into one
directory: the generated offline context, every wheel for the TARGET's Python and platform tags,
the sdists and CPython tarball the plan compiles, a flat apt repository per stage (downloaded inside
the base image itself), the base images as `docker save` tarballs, and a manifest with the sha256
and size of every file. A second run over a complete bundle downloads nothing."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urljoin

from .errors import ExternalError, InputError
from .fetch import download, sha256_file
from .matrix import OsRelease
from .plan import PYTHON_FTP, BuildPlan
from .render import json_bytes

MANIFEST = "manifest.json"
CARRIED_DIRS = ("wheelhouse", "sources", "debs", "images")
Say = Callable[[str], None]


# ---------------------------------------------------------------- pure parts

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
            "--implementation", "cp", "--abi", cp, "--abi", "abi3", "--abi", "none", "--progress-bar", "on",
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

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
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


def manifest_files(root: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != MANIFEST and not rel.endswith(".part"):
            out[rel] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    return out


def verify(root: Path) -> list[str]:
    """Every problem with a bundle, by file name: missing, altered, unexpected, or no manifest."""
    mf = root / MANIFEST
    if not mf.is_file():
        return [f"{MANIFEST} is missing: this is not a complete bundle (run envkit bundle)"]
    try:
        doc = json.loads(mf.read_text())
        files = {str(k): (int(v["size"]), str(v["sha256"])) for k, v in doc["files"].items()}
        images = [(str(i["ref"]), str(i["file"])) for i in doc.get("images", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return [f"{MANIFEST} is not a readable envkit manifest"]
    problems = []
    for rel, (size, sha) in sorted(files.items()):
        p = root / rel
        if not p.is_file():
            problems.append(f"missing: {rel}")
        elif p.stat().st_size != size or sha256_file(p) != sha:
            problems.append(f"altered: {rel} (sha256 differs from the manifest)")
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != MANIFEST and rel not in files and not rel.endswith(".part"):
            problems.append(f"unexpected: {rel} (not in the manifest)")
    for ref, file in images:
        if file not in files:
            problems.append(f"missing: {file} (the base image {ref})")
    try:
        plan = json.loads((root / "envkit.plan.json").read_text())
        needed = [c["path"] for c in plan.get("context", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return problems + ["envkit.plan.json is missing or not an envkit plan"]
    for path in needed:
        if path.endswith("/"):
            if not any(f.startswith(path) for f in files):
                problems.append(f"missing: {path} (the plan needs it; the manifest lists nothing under it)")
        elif path not in files:
            problems.append(f"missing: {path} (the plan needs it)")
    if plan.get("offline") and not images:
        problems.append("missing: images/ (the manifest lists no base image)")
    return problems


@dataclass
class BundleReport:
    out: Path
    downloaded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    complete_already: bool = False


# ---------------------------------------------------------------- the adapter work

def _image_file(ref: str) -> str:
    return "images/" + re.sub(r"[^A-Za-z0-9_.-]+", "_", ref) + ".tar"


def _sdist_url(plan: BuildPlan, filename: str, project: str) -> tuple[str, Optional[str]]:
    import requests

    index = plan.site.pip_index or "https://pypi.org/simple"
    page = f"{index.rstrip('/')}/{project}/"
    try:
        r = requests.get(page, timeout=60, headers={"Accept": "text/html"})
        r.raise_for_status()
    except requests.RequestException as exc:
        raise ExternalError(f"cannot read the index page {page}: {type(exc).__name__}", "check the connection or the site index") from None
    return find_in_simple_index(r.text, page, filename)


def fetch_sources(plan: BuildPlan, out: Path, report: BundleReport, say: Say, progress_factory) -> None:
    for item in plan.carried:
        if not item.path.startswith("sources/"):
            continue
        name = item.path.split("/", 1)[1]
        dest = out / item.path
        if name.startswith("flash_attn-"):
            url, sha = _sdist_url(plan, name, "flash-attn")
        else:
            full = name[len("Python-"):].rsplit(".", 1)[0]
            url, sha = f"{PYTHON_FTP}/{full}/{name}", None
            if plan.site.given:
                url = plan.site.rewrite(url) or url
        with progress_factory(name) as tick:
            fetched = download(url, dest, sha256=sha, progress=tick)
        (report.downloaded if fetched else report.reused).append(item.path)
        say(f"{'fetched' if fetched else 'have'} {item.path}" + (" (sha256 verified)" if sha else ""))


def fetch_wheels(plan: BuildPlan, osr: OsRelease, out: Path, find_links: tuple[str, ...], report: BundleReport, say: Say) -> None:
    dest = out / "wheelhouse"
    dest.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dest.glob("*")}
    args = pip_download_args(plan, osr, dest, find_links)
    say(f"pip download for cp{plan.solution.python.major}{plan.solution.python.minor} on {osr.name} (glibc {osr.glibc}): "
        + " ".join(r for r, _ in plan.wheel_sources))
    proc = subprocess.run([sys.executable, "-m", "pip", *args], stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["pip failed"]
        raise ExternalError(f"pip download failed: {last[0][:300]}", "check the versions and indexes named; run again (downloaded wheels are kept)")
    for p in sorted(dest.glob("*")):
        (report.reused if p.name in before else report.downloaded).append(f"wheelhouse/{p.name}")


def fetch_debs(engine, plan: BuildPlan, out: Path, report: BundleReport, say: Say) -> None:
    from .debrepo import write_index

    for stage in plan.stages:
        step = next((s for s in stage.steps if s.template == "apt-offline"), None)
        if step is None:
            continue
        packages = step.var("packages").replace("\\", " ").split()
        d = out / "debs" / stage.name
        d.mkdir(parents=True, exist_ok=True)
        _ensure_image(engine, stage.image, say)
        say(f"apt: resolving {' '.join(packages)} inside {stage.image} (only what the image lacks is carried)")
        script = ("set -e; apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --download-only "
                  "--no-install-recommends " + " ".join(packages) + "; cp /var/cache/apt/archives/*.deb /out/ 2>/dev/null || true; "
                  "for f in /out/*.deb; do [ -e \"$f\" ] && dpkg-deb -f \"$f\" > \"$f.control\"; done; "
                  f"chown -R {_uid()} /out")
        rc, logs = engine.run(stage.image, ["sh", "-c", script], {str(d.resolve()): {"bind": "/out", "mode": "rw"}})
        if rc != 0:
            raise ExternalError(f"apt download in {stage.image} failed: {logs.strip().splitlines()[-1:] or ['?']}",
                                "check the image's apt sources reach a mirror from this machine")
        n = write_index(d)
        report.downloaded.append(f"debs/{stage.name}/ ({n} packages)")
        say(f"apt: debs/{stage.name}/ holds {n} packages")


def _uid() -> str:
    import os

    return f"{os.getuid()}:{os.getgid()}"


def _ensure_image(engine, ref: str, say: Say) -> None:
    if engine.has_image(ref):
        return
    say(f"pulling {ref}")
    try:
        engine.client.images.pull(ref)
    except Exception as exc:
        raise ExternalError(f"base image {ref} is not on this engine and cannot be pulled ({type(exc).__name__})",
                            f"docker pull or docker load {ref} first, or name the site's copy in the site file [images]") from None


def save_images(engine, plan: BuildPlan, out: Path, report: BundleReport, say: Say, progress_factory) -> list[dict]:
    images = []
    for ref in dict.fromkeys(s.image for s in plan.stages):
        _ensure_image(engine, ref, say)
        rel = _image_file(ref)
        dest = out / rel
        image_id = engine.image_id(ref)
        old = out / MANIFEST
        if dest.is_file() and old.is_file():
            prev = {i["ref"]: i for i in json.loads(old.read_text()).get("images", [])}
            if prev.get(ref, {}).get("id") == image_id and prev[ref].get("file") == rel:
                report.reused.append(rel)
                images.append({"ref": ref, "file": rel, "id": image_id})
                continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        with progress_factory(rel) as tick:
            engine.save(ref, dest, progress=lambda n: tick(n, None))
        report.downloaded.append(rel)
        images.append({"ref": ref, "file": rel, "id": image_id})
        say(f"saved {ref} -> {rel}")
    return images


def lock_sha(out: Path) -> str:
    return hashlib.sha256((out / "envkit.lock.json").read_bytes()).hexdigest()


def write_manifest(out: Path, images: list[dict]) -> dict:
    from . import __version__

    files = manifest_files(out)
    doc = {"schema": 1, "envkit": __version__, "lock_sha256": lock_sha(out), "images": images, "files": files}
    (out / MANIFEST).write_bytes(json_bytes(doc))
    return doc


def make_bundle(flags: dict, *, out: str, matrix_path: Optional[str] = None, lock: Optional[str] = None,
                mirror: Optional[str] = None, find_links: tuple[str, ...] = (), force: bool = False,
                say: Say = print, progress_factory=None):
    """Returns (Generated, BundleReport or None when there is no solution)."""
    from .engine import Engine
    from .generate import generate, write_tree
    from .plan import Options

    g = generate(flags, matrix_path=matrix_path, lock=lock, mirror=mirror, opts=Options(offline=True))
    if g.plan is None:
        return g, None
    root = Path(out)
    report = BundleReport(root)
    if (root / MANIFEST).is_file() and (root / "envkit.plan.json").is_file() \
            and (root / "envkit.plan.json").read_bytes() == g.files["envkit.plan.json"] \
            and not [p for p in verify(root) if p.split(": ", 1)[-1].split("/")[0] in CARRIED_DIRS]:
        # Same plan, every carried artifact verified: only the generated files may need rewriting.
        unchanged = all((root / rel).is_file() and (root / rel).read_bytes() == data for rel, data in g.files.items())
        if not unchanged:
            images = json.loads((root / MANIFEST).read_text()).get("images", [])
            write_tree(out, g.files, force)
            write_manifest(root, images)
            say("regenerated the Dockerfile and scripts; every carried artifact verified, nothing downloaded")
        report.complete_already = True
        doc = json.loads((root / MANIFEST).read_text())
        report.files, report.bytes = len(doc["files"]), sum(f["size"] for f in doc["files"].values())
        return g, report
    for item in g.plan.carried:
        if item.path.startswith("wheelhouse/") and item.path != "wheelhouse/" and not find_links:
            raise InputError(f"{item.path} ({item.what}) is on no public index",
                             "pass --find-links DIR holding it (from the vendor's wheel site)")
    write_tree(out, g.files, force)
    engine = Engine.connect()
    fetch_sources(g.plan, root, report, say, progress_factory)
    fetch_wheels(g.plan, g.plan.stages[0].os, root, find_links, report, say)
    fetch_debs(engine, g.plan, root, report, say)
    images = save_images(engine, g.plan, root, report, say, progress_factory)
    doc = write_manifest(root, images)
    report.files, report.bytes = len(doc["files"]), sum(f["size"] for f in doc["files"].values())
    return g, report
