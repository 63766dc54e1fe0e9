"""envkit.lock.json as a value: the query a context was resolved from, the matrix it was resolved with (its
sha256), how it was generated, and the solution, so that `generate --lock` replays it exactly.

A lock written by `envkit lock` pins more (schema 2): every wheel the image's pip steps install, transitive,
with its sha256 and the pip step that installs it, and every base image by its engine image ID (and registry
digest where the engine knows one). `generate` alone writes schema 1, byte for byte what it always wrote."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.model.flags import ResolveFlags
from envkit.model.redact import redact
from envkit.model.solution import SolutionRecord

LOCK_SCHEMA = 1          # the query and the solution (what generate writes)
PINNED_LOCK_SCHEMA = 2   # ... and every wheel by sha256, every base image by digest (what envkit lock writes)
READABLE_SCHEMAS = (LOCK_SCHEMA, PINNED_LOCK_SCHEMA)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")

# What a locked wheel's values may be: each goes into a requirements file (requirements/STEP.txt) or pip's arguments,
# so each is checked for its own grammar, never only for "no newline" (fuzz report 3, D10: a version holding
# "\r--extra-index-url URL" was a second, option line to pip).
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # a PEP 508 / PEP 503 project name
_VERSION_CHARS = re.compile(r"[A-Za-z0-9.+!_-]+")  # PEP 440's characters, no space (Version() itself allows it around)
WHEEL_FILENAME = re.compile(r"[A-Za-z0-9._+!-]+\.whl")
STEP = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # a plan step's id (build-torch): requirements/STEP.txt's name
_DIGEST = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
_NO_CHARS = ("Cc", "Cs", "Zl", "Zp")  # control characters, undecodable bytes, line and paragraph separators


def bad_character(doc: Any) -> Optional[str]:
    """Where in a JSON document a string (a key or a value) holds a control character (C0, DEL, C1), an undecodable
    byte, or a line or paragraph separator: `wheels[0].version: U+000D`; None when none does. Walked without recursion."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            for ch in value:
                if unicodedata.category(ch) in _NO_CHARS:
                    return f"{where or 'the document'}: U+{ord(ch):04X}"
        elif isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, f"{where}.{k}" if where else "a key"))
                stack.append((v, f"{where}.{k}" if where else str(k)))
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
    return None


def url_problem(url: str) -> Optional[str]:
    """Why a lock's wheel `url` or step `index` may not be written into a context (None: it may): an http(s) URL
    without a login, a query string or a fragment (where tokens ride), spaces or control characters. Never the
    URL itself: it may hold the secret."""
    if not re.fullmatch(r"https?://[^\s\"'<>\\^`{|}]+", url):
        return "is not an http(s):// URL without spaces or quotes"
    try:
        parts = urlsplit(url)
        parts.port
    except ValueError:
        return "is not a valid URL"
    if "@" in parts.netloc:
        return "carries a login (***@...): it would be written into the context"
    if "?" in url:
        return "has a query string (?...): it would be written into the context, and query strings carry tokens"
    if "#" in url:
        return "has a fragment (#...): it would be written into the context, and fragments carry tokens"
    if not parts.hostname:
        return "names no host"
    return None


def _shown(value: str) -> str:
    """A lock's value for a message: redacted, at most 80 characters."""
    text = redact(value)
    return text if len(text) <= 80 else text[:77] + "..."


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

    def problem(self) -> Optional[str]:
        """What is wrong with this entry, as `wheel FILE: why` (None: nothing): every value checked for its grammar
        before any of it goes into a requirements file, pip's arguments or the context's lock."""
        for key, value in self.to_json().items():
            if value is not None and not isinstance(value, str):
                return f"a wheel entry: {key} is not a string"
        if bad := bad_character(self.to_json()):
            where, char = bad.rsplit(": ", 1)
            return f"a wheel entry's {where} holds the control or line-break character {char}"
        what = f"wheel {_shown(self.filename)}"
        if "/" in self.filename or not WHEEL_FILENAME.fullmatch(self.filename):
            return f"{what}: not a wheel file name"
        if not _SHA256.fullmatch(self.sha256):
            return f"{what}: sha256 is not 64 hex digits"
        if not NAME.fullmatch(self.name):
            return f"{what}: name {_shown(self.name)!r} is not a project name (PEP 503: letters, digits, . _ -)"
        try:
            if not _VERSION_CHARS.fullmatch(self.version):
                raise InvalidVersion(self.version)
            version = Version(self.version)
        except InvalidVersion:
            return f"{what}: version {_shown(self.version)!r} is not a PEP 440 version"
        try:
            file_name, file_version, _, _ = parse_wheel_filename(self.filename)
        except InvalidWheelFilename:
            return f"{what}: not a wheel file name (NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl)"
        if file_name != canonicalize_name(self.name) or file_version != version:
            return f"{what}: the file is not {self.name} {self.version}'s"
        if not STEP.fullmatch(self.step):
            return f"{what}: step {_shown(self.step)!r} is not a step of a plan (like build-torch)"
        for key, url in (("index", self.index), ("url", self.url)):
            if url is not None and (why := url_problem(url)):
                return f"{what}: {key} {why}"
        if self.url is not None and unquote(PurePosixPath(urlsplit(self.url).path).name) != self.filename:
            return f"{what}: url names another file"
        return None

    def check(self) -> "LockedWheel":
        """This entry, or ValueError naming what is wrong with it (`problem`)."""
        why = self.problem()
        if why:
            raise ValueError(why)
        return self

    @classmethod
    def from_json(cls, doc: Any) -> "LockedWheel":
        if not isinstance(doc, dict):
            raise ValueError("a wheel entry is not an object")
        filename = _text(doc, "filename", "a wheel entry")
        what = f"wheel {_shown(filename)}"
        return cls(name=_text(doc, "name", what), version=_text(doc, "version", what), filename=filename,
                   sha256=_text(doc, "sha256", what), step=_text(doc, "step", what), index=_optional_text(doc, "index", what),
                   url=_optional_text(doc, "url", what)).check()


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
        if re.search(r"\s|://", ref) or ("@" in ref and not re.match(r"sha(256|384|512):", ref.split("@", 1)[1])):
            raise ValueError("an image entry's ref is not an image reference without a scheme or a login")
        image_id = _text(doc, "id", f"image {ref}")
        if not _IMAGE_ID.fullmatch(image_id):
            raise ValueError(f"image {ref}: id is not sha256:<64 hex digits>")
        digest = _optional_text(doc, "digest", f"image {ref}")
        if digest is not None and not _DIGEST.fullmatch(digest):
            raise ValueError(f"image {ref}: digest is not NAME@sha256:<64 hex digits>")
        return cls(ref=ref, id=image_id, digest=digest)


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
        if bad := bad_character(doc):  # nothing of the lock is shown: the character may hide what follows it
            where, char = bad.rsplit(": ", 1)
            raise ValueError(f"{where} holds the control or line-break character {char}")
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
            if not raw_images:  # every plan builds on a base image, and envkit lock pins each one
                raise ValueError("schema 2 that pins no base image (images: []), while every plan has one")
            wheels = tuple(LockedWheel.from_json(w) for w in raw_wheels)
            images = tuple(LockedImage.from_json(i) for i in raw_images)
        site = generate.get("site")
        return cls(envkit=str(doc.get("envkit", "")), matrix_sha256=str(doc.get("matrix_sha256", "")),
                   query=ResolveFlags.from_mapping({str(k): str(v) for k, v in query.items()}),
                   offline=bool(generate.get("offline", False)), site=None if site is None else str(site),
                   host_march=str(generate.get("host_march", "")), solution=SolutionRecord.from_json(doc["solution"]),
                   toolkit=_toolkit(generate.get("toolkit", "image")),
                   wheels=wheels, images=images)
