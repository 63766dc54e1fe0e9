"""envkit.lock.json as a value: the query a context was resolved from, the matrix it was resolved with (its
sha256), how it was generated, and the solution, so that `generate --lock` replays it exactly.

A lock written by `envkit lock` pins more (schema 2): every wheel the image's pip steps install, transitive,
with its sha256 and the pip step that installs it, and every base image by its engine image ID (and registry
digest where the engine knows one). `generate` alone writes schema 1, byte for byte what it always wrote."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from envkit.model.flags import ResolveFlags
from envkit.model.solution import SolutionRecord

LOCK_SCHEMA = 1          # the query and the solution (what generate writes)
PINNED_LOCK_SCHEMA = 2   # ... and every wheel by sha256, every base image by digest (what envkit lock writes)
READABLE_SCHEMAS = (LOCK_SCHEMA, PINNED_LOCK_SCHEMA)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def _text(entry: dict[str, Any], key: str, what: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value or "\n" in value:
        raise ValueError(f"{what} has no {key}")
    return value


def _optional_text(entry: dict[str, Any], key: str, what: str) -> Optional[str]:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\n" in value:
        raise ValueError(f"{what}: {key} is not a string")
    return value


@dataclass(frozen=True)
class LockedWheel:
    """One wheel an image's pip step installs: the file, its sha256, the step and where that step looks."""
    name: str
    version: str
    filename: str
    sha256: str
    step: str                  # the pip step that installs it (build-torch, build-vllm...)
    index: Optional[str]       # the extra index that step reads (torch's, vLLM's variant), None: the default index
    url: Optional[str] = None  # the URL the step names it by (a release wheel off any index); None: by name==version

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "filename": self.filename, "sha256": self.sha256,
                "step": self.step, "index": self.index, "url": self.url}

    @classmethod
    def from_json(cls, doc: Any) -> "LockedWheel":
        if not isinstance(doc, dict):
            raise ValueError("a wheel entry is not an object")
        filename = _text(doc, "filename", "a wheel entry")
        what = f"wheel {filename}"
        sha = _text(doc, "sha256", what)
        if not _SHA256.fullmatch(sha):
            raise ValueError(f"{what}: sha256 is not 64 hex digits")
        if "/" in filename or not filename.endswith(".whl"):
            raise ValueError(f"{what}: not a wheel file name")
        return cls(name=_text(doc, "name", what), version=_text(doc, "version", what), filename=filename, sha256=sha,
                   step=_text(doc, "step", what), index=_optional_text(doc, "index", what), url=_optional_text(doc, "url", what))


@dataclass(frozen=True)
class LockedImage:
    """A base image: its engine image ID (the sha256 of its config, the same wherever it is loaded or pulled)
    and its registry digest (ref@sha256:...) where the engine knows one; a local-only image has none."""
    ref: str
    id: str
    digest: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "id": self.id, "digest": self.digest}

    @classmethod
    def from_json(cls, doc: Any) -> "LockedImage":
        if not isinstance(doc, dict):
            raise ValueError("an image entry is not an object")
        ref = _text(doc, "ref", "an image entry")
        image_id = _text(doc, "id", f"image {ref}")
        if not _IMAGE_ID.fullmatch(image_id):
            raise ValueError(f"image {ref}: id is not sha256:<64 hex digits>")
        return cls(ref=ref, id=image_id, digest=_optional_text(doc, "digest", f"image {ref}"))


def _toolkit(value: Any) -> str:
    if value not in ("image", "pip"):
        raise ValueError(f"generate.toolkit {value!r} is not \"image\" or \"pip\"")
    return str(value)


@dataclass(frozen=True)
class Lock:
    envkit: str
    matrix_sha256: str
    query: ResolveFlags
    offline: bool
    site: Optional[str]
    host_march: str
    solution: SolutionRecord
    toolkit: str = "image"  # the devel stage's CUDA toolkit source; written only when it is not the default "image"
    wheels: tuple[LockedWheel, ...] = ()
    images: tuple[LockedImage, ...] = ()

    @property
    def pinned(self) -> bool:
        """Whether it pins the wheels and base images (written by envkit lock), not only the solution."""
        return bool(self.wheels)

    def steps(self) -> tuple[str, ...]:
        """The pip steps it pins wheels for, in the order they install."""
        return tuple(dict.fromkeys(w.step for w in self.wheels))

    def wheels_of(self, step: str) -> tuple[LockedWheel, ...]:
        return tuple(w for w in self.wheels if w.step == step)

    def image(self, ref: str) -> Optional[LockedImage]:
        return next((i for i in self.images if i.ref == ref), None)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": PINNED_LOCK_SCHEMA if self.pinned else LOCK_SCHEMA,
            "envkit": self.envkit,
            "matrix_sha256": self.matrix_sha256,
            "query": self.query.to_dict(),
            "generate": {"offline": self.offline, "site": self.site, "host_march": self.host_march,
                         **({"toolkit": self.toolkit} if self.toolkit != "image" else {})},
            "solution": self.solution.to_json(),
        }
        if self.pinned:
            doc["wheels"] = [w.to_json() for w in self.wheels]
            doc["images"] = [i.to_json() for i in self.images]
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> "Lock":
        """Raises ValueError naming what is wrong when `doc` is not a lock this envkit reads."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        schema = doc.get("schema")
        if isinstance(schema, bool) or schema not in READABLE_SCHEMAS:
            newer = isinstance(schema, int) and not isinstance(schema, bool) and schema > PINNED_LOCK_SCHEMA
            raise ValueError(f"schema {schema!r} is newer than this envkit reads (1 or 2)" if newer
                             else f"schema {schema!r} is not 1 or 2")
        query, generate = doc.get("query"), doc.get("generate") or {}
        if not isinstance(query, dict) or not isinstance(generate, dict) or "solution" not in doc:
            raise ValueError("no query and solution")
        wheels: tuple[LockedWheel, ...] = ()
        images: tuple[LockedImage, ...] = ()
        if schema == PINNED_LOCK_SCHEMA:
            raw_wheels, raw_images = doc.get("wheels"), doc.get("images")
            if not isinstance(raw_wheels, list) or not raw_wheels or not isinstance(raw_images, list):
                raise ValueError("schema 2 without its wheels and images")
            wheels = tuple(LockedWheel.from_json(w) for w in raw_wheels)
            images = tuple(LockedImage.from_json(i) for i in raw_images)
        site = generate.get("site")
        return cls(envkit=str(doc.get("envkit", "")), matrix_sha256=str(doc.get("matrix_sha256", "")),
                   query=ResolveFlags.from_mapping({str(k): str(v) for k, v in query.items()}),
                   offline=bool(generate.get("offline", False)), site=None if site is None else str(site),
                   host_march=str(generate.get("host_march", "")), solution=SolutionRecord.from_json(doc["solution"]),
                   toolkit=_toolkit(generate.get("toolkit", "image")),
                   wheels=wheels, images=images)
