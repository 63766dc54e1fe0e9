"""A bundle directory on disk: its manifest of hashes, the verification of every carried file (the build's
preflight), and the check a re-run of `bundle` makes before it fetches anything: every file already there is
verified against the old manifest (or, without an entry, by its own integrity) and removed when it fails, so a
corrupt file is fetched again, never re-blessed with a new hash."""
from __future__ import annotations

import hashlib
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from envkit.adapters.context_dir import GENERATED_LIST, is_staging
from envkit.adapters.fetch import sha256_file
from envkit.config.userfile import read_json
from envkit.core.render import json_bytes
from envkit.errors import InputError

MANIFEST = "manifest.json"


CARRIED_DIRS = ("wheelhouse", "sources", "debs", "images")
PARTIAL_DIRS = ("sources", "images")  # where fetch.download and the engine's save write NAME.part
TARBALLS = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")


def is_own_partial(rel: str) -> bool:
    """NAME.part exactly where envkit writes an unfinished download (sources/, images/): envkit's own."""
    top, _, name = rel.partition("/")
    return top in PARTIAL_DIRS and "/" not in name and name.endswith(".part") and len(name) > len(".part")


def _bundle_files(root: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every entry that is not a directory, staging directories of write_tree left out."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if is_staging(rel.split("/", 1)[0]) or (p.is_dir() and not p.is_symlink()):
            continue
        out.append((rel, p))
    return out


def manifest_files(root: Path) -> dict[str, dict]:
    out = {}
    for rel, p in _bundle_files(root):
        if p.is_file() and rel != MANIFEST:
            out[rel] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    return out


def verify(root: Path) -> list[str]:
    """Every problem with a bundle, by file name: missing, altered, unexpected, unfinished, or no manifest."""
    mf = root / MANIFEST
    if not mf.is_file():
        return [f"{MANIFEST} is missing: this is not a complete bundle (run envkit bundle)"]
    try:
        doc = read_json(str(mf), "bundle manifest", "run envkit bundle again")  # an UnreadableFile is a ValueError: one problem below
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
        if p.is_file() and rel != MANIFEST and rel not in files:
            if is_own_partial(rel):
                problems.append(f"unfinished download: {rel} (the bundle is not complete: re-run envkit bundle)")
            elif rel.endswith(".part"):
                problems.append(f"unexpected: {rel} (an unfinished download where envkit downloads nothing: re-run envkit bundle)")
            else:
                problems.append(f"unexpected: {rel} (not in the manifest)")
    for ref, file in images:
        if file not in files:
            problems.append(f"missing: {file} (the base image {ref})")
    try:
        plan = read_json(str(root / "envkit.plan.json"), "bundle plan", "run envkit bundle again")
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


def lock_sha(out: Path) -> str:
    return hashlib.sha256((out / "envkit.lock.json").read_bytes()).hexdigest()


def write_manifest(out: Path, images: list[dict]) -> dict:
    from envkit import __version__

    files = manifest_files(out)
    doc = {"schema": 1, "envkit": __version__, "lock_sha256": lock_sha(out), "images": images, "files": files}
    (out / MANIFEST).write_bytes(json_bytes(doc))
    return doc


@dataclass(frozen=True)
class OldManifest:
    """The manifest a previous run wrote: `state` is "absent", "unreadable" (then treated as absent) or "read"."""
    state: str
    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    images: tuple[dict[str, str], ...] = ()

    def matches(self, rel: str, p: Path) -> bool:
        entry = self.files.get(rel)
        return entry is not None and p.is_file() and p.stat().st_size == entry[0] and sha256_file(p) == entry[1]


def read_manifest(root: Path) -> OldManifest:
    mf = root / MANIFEST
    if not mf.exists():
        return OldManifest("absent")
    try:
        doc: Any = read_json(str(mf), "bundle manifest", "run envkit bundle again")
        files = {str(k): (int(v["size"]), str(v["sha256"])) for k, v in doc["files"].items()}
        images = tuple({"ref": str(i["ref"]), "file": str(i["file"]), "id": str(i.get("id", ""))} for i in doc.get("images", []))
    except (ValueError, KeyError, TypeError, AttributeError):  # read_json's refusal is a ValueError too
        return OldManifest("unreadable")
    return OldManifest("read", files, images)


def _checkable(rel: str) -> bool:
    """A file that can be checked without a manifest entry: a wheel, a source tarball."""
    return rel.endswith(".whl") or (rel.startswith("sources/") and rel.endswith(TARBALLS))


def _intact(p: Path) -> bool:
    """A file with no manifest entry: a wheel whose every member reads back (zip CRCs), a source tarball whose
    every member reads back (gzip/xz checks); anything else cannot be checked on its own."""
    try:
        if p.name.endswith(".whl"):
            with zipfile.ZipFile(p) as z:
                return z.testzip() is None
        if p.name.endswith(TARBALLS):
            with tarfile.open(p) as t:
                for member in t:
                    f = t.extractfile(member)
                    if f is not None:
                        while f.read(1 << 20):
                            pass
            return True
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, ValueError, RuntimeError, NotImplementedError):
        return False
    return False


@dataclass
class Rechecked:
    """What a re-run found before fetching: files kept (verified), to be removed (with why), kept to resume,
    and files outside the carried directories that nothing vouches for (`foreign`)."""
    kept: list[str] = field(default_factory=list)
    doomed: list[tuple[str, str]] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)


def recheck(root: Path, old: OldManifest, generated: set[str], resumable: set[str], force: bool) -> Rechecked:
    """Before a re-run of `bundle` changes or fetches anything: every file already in the bundle judged, so that
    what the new manifest records was verified here or fetched fresh by this run. Nothing is changed here
    (remove_doomed does that, once the run goes ahead).

    - generated files (now or by the previous run) are rewritten by write_tree: skipped;
    - under the carried directories, a file the old manifest lists is kept only when its size and sha256 match;
      one it does not list is kept only when it checks on its own (a wheel's zip CRCs, a source tarball read
      through); sources/NAME.part of a planned source is kept for fetch to resume (and verify); everything else
      there (a corrupt or truncated file, a stray .part, a link, a FIFO) is doomed, to be fetched again;
    - any other file is the user's: kept when the old manifest vouches for it, else refused (InputError) unless
      --force says to carry it as it is.
    """
    listing = root / GENERATED_LIST
    previous = set(listing.read_text(errors="replace").splitlines()) if listing.is_file() else set()
    skip = generated | previous | {MANIFEST, GENERATED_LIST}
    out = Rechecked()
    for rel, p in _bundle_files(root):
        if rel in skip:
            continue
        regular = stat.S_ISREG(p.lstat().st_mode)
        if rel.split("/", 1)[0] not in CARRIED_DIRS:
            if not (regular and old.matches(rel, p)):
                out.foreign.append(rel)
        elif not regular:
            out.doomed.append((rel, "not a plain file"))
        elif rel in old.files:
            if old.matches(rel, p):
                out.kept.append(rel)
            else:
                out.doomed.append((rel, "its size or sha256 differs from the manifest"))
        elif rel.endswith(".part"):
            if is_own_partial(rel) and rel[: -len(".part")] in resumable:
                out.resumed.append(rel)
            else:
                out.doomed.append((rel, "an unfinished download envkit cannot resume"))
        elif not _checkable(rel):
            out.doomed.append((rel, "nothing vouches for it"))
        elif _intact(p):
            out.kept.append(rel)
        else:
            out.doomed.append((rel, "not a readable archive"))
    if out.foreign and not force:
        n = len(out.foreign)
        raise InputError(f"bundle {root} holds {n} file(s) envkit did not write or cannot verify ({', '.join(out.foreign[:3])})",
                         "remove them (or restore them as the manifest records), or pass --force to carry them as they are")
    return out


def remove_doomed(root: Path, found: Rechecked) -> None:
    for rel, _ in found.doomed:
        (root / rel).unlink(missing_ok=True)


def previous_images(old: OldManifest) -> dict[str, dict[str, str]]:
    return {i["ref"]: i for i in old.images}


def image_reusable(old: OldManifest, ref: str, rel: str, image_id: str, dest: Path) -> bool:
    prev: Optional[dict[str, str]] = previous_images(old).get(ref)
    return prev is not None and prev.get("id") == image_id and prev.get("file") == rel and dest.is_file()
