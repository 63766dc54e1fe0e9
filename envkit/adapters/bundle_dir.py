"""A bundle directory on disk: its manifest of hashes, and the verification of every carried file."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from envkit.adapters.fetch import sha256_file
from envkit.core.render import json_bytes

MANIFEST = "manifest.json"


CARRIED_DIRS = ("wheelhouse", "sources", "debs", "images")


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


def lock_sha(out: Path) -> str:
    return hashlib.sha256((out / "envkit.lock.json").read_bytes()).hexdigest()


def write_manifest(out: Path, images: list[dict]) -> dict:
    from envkit import __version__

    files = manifest_files(out)
    doc = {"schema": 1, "envkit": __version__, "lock_sha256": lock_sha(out), "images": images, "files": files}
    (out / MANIFEST).write_bytes(json_bytes(doc))
    return doc
