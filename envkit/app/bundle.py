"""`envkit bundle`: on a connected machine, carry everything an offline build needs into one
directory: the generated offline context, every wheel for the TARGET's Python and platform tags,
the sdists and CPython tarball the plan compiles, a flat apt repository per stage (downloaded inside
the base image itself), the base images as `docker save` tarballs, and a manifest with the sha256
and size of every file. A second run over a complete bundle downloads nothing."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional, Union

from packaging.utils import canonicalize_name

from envkit.adapters import pip
from envkit.adapters.bundle_dir import MANIFEST, OldManifest, image_reusable, read_manifest, recheck, remove_doomed, verify, write_manifest
from envkit.adapters.context_dir import write_tree
from envkit.adapters.engine import ContainerEngine, Engine
from envkit.adapters.fetch import download, get_text, sha256_file
from envkit.app.generate import Generated, generate_pip
from envkit.app.lock import check_engine_images, context_lock, ensure_image, fetch_locked_wheels, holds_lock, require_pinned, stage_images
from envkit.app.reporter import Reporter, Silent, Tick
from envkit.app.serving import Prepared, staged
from envkit.core.pylock import pylock_files
from envkit.core.wheels import find_in_simple_index, pip_download_args
from envkit.errors import ExternalError, InputError
from envkit.model.flags import ResolveFlags
from envkit.model.lock import Lock
from envkit.model.matrix import OsRelease
from envkit.model.plan import BuildPlan, Carried, Options, ToolkitSource
from envkit.model.purl import PyPIRef, parse_pypi
from envkit.model.solution import Unsolved

Say = Callable[[str], None]


@dataclass
class BundleReport:
    out: Path
    downloaded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    complete_already: bool = False
    pip_host_sources: list[str] = field(default_factory=list)  # where this host's pip looks beside the plan's indexes


def _image_file(ref: str) -> str:
    return "images/" + re.sub(r"[^A-Za-z0-9_.-]+", "_", ref) + ".tar"


def _index_page(plan: BuildPlan, project: str) -> str:
    """The PEP 503 page of a project on the site's pip index, else on pip's own default index (through the site's rewrite)."""
    page = f"{(plan.site.pip_index or pip.default_index()).rstrip('/')}/{canonicalize_name(project)}/"
    return (plan.site.rewrite(page) or page) if plan.site.given and not plan.site.pip_index else page


def _listed_file(plan: BuildPlan, filename: str, project: str) -> tuple[str, Optional[str]]:
    page = _index_page(plan, project)
    url, sha = find_in_simple_index(get_text(page, "index page"), page, filename)
    return ((plan.site.rewrite(url) or url) if plan.site.given else url), sha


def fetch_sources(plan: BuildPlan, out: Path, report: BundleReport, say: Say,
                  progress_factory: Callable[[str], ContextManager[Tick]]) -> None:
    for item in plan.carried:
        if not item.path.startswith("sources/"):
            continue
        name = item.path.split("/", 1)[1]
        dest = out / item.path
        cited = _pypi_file(item.origin) if name.startswith("flash_attn-") else None
        if cited is not None:
            fetched, sha = _fetch_cited(plan, cited, item.origin, dest, name, progress_factory), cited.sha256
        else:
            if name.startswith("flash_attn-"):  # its release only: the sha256 the index lists is checked
                url, sha = _listed_file(plan, name, "flash-attn")
            else:  # CPython's tarball, fastllm's tag archive: where the plan says it comes from, through the site's rewrite
                url, sha = item.origin, None
                if plan.site.given:
                    url = plan.site.rewrite(url) or url
            with progress_factory(name) as tick:
                fetched = download(url, dest, sha256=sha, progress=tick)
        (report.downloaded if fetched else report.reused).append(item.path)
        say(f"{'fetched' if fetched else 'have'} {item.path}" + (" (sha256 verified)" if sha else ""))


def _pypi_file(origin: str) -> Optional[PyPIRef]:
    """The PyPI file a carried item's origin names by purl with its file name and sha256, or None."""
    ref = parse_pypi(origin) if origin.startswith("pkg:pypi/") else None
    return ref if ref is not None and ref.file_name and ref.sha256 else None


def _fetch_cited(plan: BuildPlan, ref: PyPIRef, origin: str, dest: Path, label: str,
                 progress_factory: Callable[[str], ContextManager[Tick]]) -> bool:
    """A PyPI file its purl names with its sha256 (a _pypi_file): nothing asked when dest holds it already; else looked up
    on the index, refused where the index lists another sha256, downloaded and checked. True when it was fetched."""
    assert ref.file_name is not None and ref.sha256 is not None
    if dest.is_file() and sha256_file(dest) == ref.sha256:
        return False
    url, listed = _listed_file(plan, ref.file_name, ref.name)
    if listed is not None and listed != ref.sha256:
        raise ExternalError(f"the index lists {ref.file_name} with sha256 {listed}, not the {ref.sha256} of {origin}",
                            "check that the site's pip index mirrors PyPI's file, not a rebuilt one")
    with progress_factory(label) as tick:
        return download(url, dest, sha256=ref.sha256, progress=tick)


def fetch_pypi_files(plan: BuildPlan, out: Path, report: BundleReport, say: Say,
                     progress_factory: Callable[[str], ContextManager[Tick]]) -> None:
    """Carried wheels that PyPI serves by file (a package installed without its dependencies), each checked by sha256."""
    for item in plan.carried:
        ref = _wheel_by_file(item)
        if ref is None:
            continue
        fetched = _fetch_cited(plan, ref, item.origin, out / item.path, item.path, progress_factory)
        (report.downloaded if fetched else report.reused).append(item.path)
        say(f"{'fetched' if fetched else 'have'} {item.path} (sha256 verified)")


def fetchable(item: Carried) -> bool:
    """A carried file fetch_carried gets: a source archive (fetch_sources), or a wheel its purl names with its sha256
    (fetch_pypi_files)."""
    return item.path.startswith("sources/") or _wheel_by_file(item) is not None


def _wheel_by_file(item: Carried) -> Optional[PyPIRef]:
    """The PyPI file of a carried wheel fetched by itself (without its dependencies), or None."""
    return _pypi_file(item.origin) if item.path.startswith("wheelhouse/") else None


def fetch_carried(plan: BuildPlan, out: Path, say: Say, progress_factory: Callable[[str], ContextManager[Tick]]) -> list[str]:
    """A mirror build's carried files (the sources it compiles, the wheels PyPI serves by file) fetched into its context
    through the site's index and rewrites, as bundle fetches them, each checked by sha256; the paths fetched."""
    report = BundleReport(out)
    fetch_sources(plan, out, report, say, progress_factory)
    fetch_pypi_files(plan, out, report, say, progress_factory)
    return report.downloaded


def fetch_wheels(plan: BuildPlan, osr: OsRelease, out: Path, find_links: tuple[str, ...], report: BundleReport, say: Say) -> None:
    dest = out / "wheelhouse"
    dest.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dest.glob("*")}
    args = pip_download_args(plan, osr, dest, find_links)
    say(f"pip download for cp{plan.solution.python.major}{plan.solution.python.minor} on {osr.name} (glibc {osr.glibc}): "
        + " ".join(r for r, _ in plan.wheel_sources))
    pip.run(args, say, "check the versions and indexes named; run again (downloaded wheels are kept)")
    for p in sorted(dest.glob("*")):
        (report.reused if p.name in before else report.downloaded).append(f"wheelhouse/{p.name}")


def fetch_debs(engine: ContainerEngine, plan: BuildPlan, out: Path, report: BundleReport, say: Say) -> None:
    from envkit.adapters.debrepo import write_index
    from envkit.model.plan import AptStep

    for stage in plan.stages:
        apt = next((s.payload for s in stage.steps if isinstance(s.payload, AptStep) and s.payload.from_carried_repository), None)
        if apt is None:
            continue
        packages = apt.packages
        d = out / "debs" / stage.name
        d.mkdir(parents=True, exist_ok=True)
        ensure_image(engine, stage.image, say)
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


def save_images(engine: ContainerEngine, plan: BuildPlan, out: Path, report: BundleReport, say: Say,
                progress_factory: Callable[[str], ContextManager[Tick]], old: OldManifest) -> list[dict[str, str]]:
    images = []
    for ref in stage_images(plan):
        ensure_image(engine, ref, say)
        rel = _image_file(ref)
        dest = out / rel
        image_id = engine.image_id(ref)
        if rel in old.files and image_reusable(old, ref, rel, image_id, dest):  # the file was verified by recheck
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


def _problem_path(problem: str) -> str:
    """The path a verify() problem names ("altered: X (...)" -> X); the whole line for a bundle-wide problem."""
    kind, sep, rest = problem.partition(": ")
    return rest.split(" (", 1)[0] if sep else problem


def _answering(engine: Optional[ContainerEngine]) -> ContainerEngine:
    """The engine, checked to answer before anything is written (no engine: the bundle directory stays as it was)."""
    if engine is None:
        return Engine.connect()
    try:
        engine.info()
    except Exception as exc:  # an engine's client raises many kinds for one cause: nobody answers
        raise ExternalError(f"the container engine does not answer ({type(exc).__name__})",
                            "start Docker or Podman's service and point DOCKER_HOST at its socket, then run again") from None
    return engine


@dataclass(frozen=True)
class Bundled:
    generated: Generated
    report: BundleReport
    out: str

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {"schema": 1, "ok": True, "out": self.out, "complete_already": r.complete_already, "files": r.files,
                "bytes": r.bytes, "downloaded": r.downloaded, "reused": r.reused, "pip_host_sources": r.pip_host_sources}


def make_bundle(flags: ResolveFlags, *, out: str, matrix_path: Optional[str] = None, lock: Optional[str] = None,
                mirror: Optional[str] = None, find_links: tuple[str, ...] = (), force: bool = False,
                reporter: Reporter = Silent(), engine: Optional[ContainerEngine] = None,
                locked: bool = False, toolkit: Optional[ToolkitSource] = None,
                serving: Optional[Prepared] = None, host_facts: Optional[str] = None) -> Union[Bundled, Unsolved]:
    reporter.phase("bundle")
    say = reporter.say
    g = generate_pip(flags, command="bundle", matrix_path=matrix_path, lock=lock, mirror=mirror,
                     opts=Options(offline=True, toolkit=toolkit), serving=serving, host_facts=host_facts)
    if isinstance(g, Unsolved):
        return g
    pinned = context_lock(g)  # a pinned lock (envkit lock): exactly its wheels, by sha256, and its base images
    if locked:
        require_pinned(pinned, lock, "bundle")
    files = {**g.files, **pylock_files(pinned)}  # PEP 751 locks of the wheelhouse, for pip's and uv's users
    root = Path(out)
    old = read_manifest(root)
    if old.state == "unreadable":
        say(f"{MANIFEST} is unreadable: treated as absent (each carried file is checked on its own, or fetched again)")
    done = _verified_already(g, files, pinned, root, old, force, say)
    if done is not None:
        return Bundled(g, done, out)
    for item in g.plan.carried:
        if item.path.startswith("wheelhouse/") and item.path != "wheelhouse/" and not find_links and not _pypi_file(item.origin):
            raise InputError(f"{item.path} ({item.what}) is on no public index",
                             "pass --find-links DIR holding it (from the vendor's wheel site)")
    engine = _answering(engine)
    found = recheck(root, old, set(files), {c.path for c in g.plan.carried}, force) if root.is_dir() else None
    write_tree(out, files, force, staged(serving, say))  # the model committed with the files, as generate does
    if found is not None:
        remove_doomed(root, found)
        for rel, why in found.doomed:
            say(f"removed {rel} ({why}): fetching it again")
        if found.foreign:
            say(f"carrying {len(found.foreign)} file(s) envkit did not write as they are (--force): {', '.join(found.foreign[:3])}")
    return Bundled(g, _carry(engine, g, pinned, root, old, find_links, reporter), out)


def _verified_already(g: Generated, files: dict[str, bytes], pinned: Lock, root: Path, old: OldManifest, force: bool,
                      say: Callable[[str], None]) -> Optional[BundleReport]:
    """The same plan with every carried artifact verified: only the generated files may need rewriting (the report of a
    bundle complete already); None where anything must be fetched."""
    if not (old.state == "read" and (root / "envkit.plan.json").is_file()
            and (root / "envkit.plan.json").read_bytes() == g.files["envkit.plan.json"]
            and all(_problem_path(p) in files for p in verify(root)) and holds_lock(root, pinned)):
        return None
    unchanged = all((root / rel).is_file() and (root / rel).read_bytes() == data for rel, data in files.items())
    if not unchanged:
        write_tree(str(root), files, force)
        write_manifest(root, list(old.images))
        say("regenerated the Dockerfile and scripts; every carried artifact verified, nothing downloaded")
    report = BundleReport(root)
    report.complete_already = True
    listed = read_manifest(root).files
    report.files, report.bytes = len(listed), sum(size for size, _ in listed.values())
    return report


def _carry(engine: ContainerEngine, g: Generated, pinned: Lock, root: Path, old: OldManifest, find_links: tuple[str, ...],
           reporter: Reporter) -> BundleReport:
    """Fetch what the plan carries into the written context: sources, wheels (a pinned lock's exactly), debs, base
    images; then the manifest."""
    say, progress_factory = reporter.say, reporter.transfer
    report = BundleReport(root)
    fetch_sources(g.plan, root, report, say, progress_factory)
    fetch_pypi_files(g.plan, root, report, say, progress_factory)
    report.pip_host_sources = list(pip.host_sources())
    for line in report.pip_host_sources:  # newcomer review 3, D14: said, never silently used
        say(f"pip download also reads this host's {line}")
    if pinned.pinned:
        downloaded, reused = fetch_locked_wheels(g.plan, pinned, root, find_links, say)
        report.downloaded += downloaded
        report.reused += reused
        check_engine_images(engine, g.plan, pinned, say)
    else:
        fetch_wheels(g.plan, g.plan.stages[0].os, root, find_links, report, say)
    fetch_debs(engine, g.plan, root, report, say)
    images = save_images(engine, g.plan, root, report, say, progress_factory, old)
    doc = write_manifest(root, images)
    report.files, report.bytes = len(doc["files"]), sum(f["size"] for f in doc["files"].values())
    return report
