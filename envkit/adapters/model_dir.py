"""A serving image's model directory (adapter): what a server loads of it, hashed once, and carried into a build
context's staging directory (hard links where the file system allows, else copies).

What is carried is an allow-list (envkit/data/serving.toml, [[model_files]]): the weights, the configuration, the
tokenizer, remote code where config.json names an auto_map, and licences. Hidden entries (.git, .env, .cache...),
every other name, links out of the directory and what is not a regular file are left out, each with the reason; a
link out of the directory whose name the list names is refused.

The tree digest is the sha256 of the SHA256SUMS listing of exactly the files carried (`<sha256>  <path>` per file,
sorted by path), so a site can recompute it with sha256sum alone."""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from envkit import data
from envkit.adapters.fetch import sha256_file, sha256sums
from envkit.config.userfile import parse_toml
from envkit.errors import InputError
from envkit.model.redact import printable

LISTING = "SHA256SUMS"
ALLOW_LIST = "envkit/data/serving.toml"


@dataclass(frozen=True)
class FileGroup:
    """One [[model_files]] group of serving.toml: names (fnmatch patterns) a server loads, and why."""
    what: str
    names: tuple[str, ...]
    why: str
    top_level: bool = False  # only at the directory's top level
    needs_auto_map: bool = False  # only when config.json or tokenizer_config.json has an auto_map (remote code)


@dataclass(frozen=True)
class Excluded:
    names: tuple[str, ...]
    why: str


def _load_allow_list() -> tuple[tuple[FileGroup, ...], tuple[Excluded, ...]]:
    path = data.HERE / "serving.toml"
    doc = parse_toml(path.read_text(encoding="utf-8"), "envkit's serving data", str(path))
    groups = tuple(FileGroup(g["what"], tuple(g["names"]), g["why"], bool(g.get("top_level", False)),
                             bool(g.get("needs_auto_map", False))) for g in doc["model_files"])
    excluded = tuple(Excluded(tuple(e["names"]), e["why"]) for e in doc.get("model_exclude", ()))
    return groups, excluded


GROUPS, EXCLUDED = _load_allow_list()

_HIDDEN = {".git": "hidden: a clone's version-control data, whose config can hold a token",
           ".env": "hidden: an environment file, which holds credentials",
           ".cache": "hidden: the hub client's download records",
           ".huggingface": "hidden: the hub client's download records"}
NOT_LISTED = f"not a file a server loads; {ALLOW_LIST} lists those"


def shown(name: str) -> str:
    """A file name as it may be printed: control characters (newline and tab too), and bytes that are not UTF-8, written
    as escapes."""
    return printable(name).replace("\n", "\\x0a").replace("\t", "\\x09")


class FileId(NamedTuple):
    """A file as it was hashed: where it is (a link's target) and what identifies that version of it."""
    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> FileId:
        st = os.stat(path)
        return cls(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def same(self, other: FileId) -> bool:
        return (self.dev, self.ino, self.size, self.mtime_ns) == (other.dev, other.ino, other.size, other.mtime_ns)


@dataclass(frozen=True)
class ModelTree:
    root: Path
    files: tuple[tuple[str, int, str], ...]  # (relative path, size, sha256) of what is carried, sorted by path
    left_out: tuple[tuple[str, str], ...] = ()  # (relative path, shown; a directory ends in /, why), sorted by path
    ids: tuple[tuple[str, FileId], ...] = field(default=(), compare=False)  # each carried file as it was hashed

    @property
    def listing(self) -> str:
        return sha256sums((sha, rel) for rel, _, sha in self.files)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.listing.encode()).hexdigest()

    @property
    def bytes(self) -> int:
        return sum(size for _, size, _ in self.files)


def _has_auto_map(root: Path) -> bool:
    for name in ("config.json", "tokenizer_config.json"):
        p = root / name
        try:
            doc = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("auto_map"), dict):
            return True
    return False


def classify(rel: str, auto_map: bool) -> tuple[Optional[FileGroup], str]:
    """The group that carries `rel` (or None) and, when none does, why it is left out."""
    name = rel.rsplit("/", 1)[-1]
    for e in EXCLUDED:
        if any(fnmatch.fnmatchcase(name, pat) for pat in e.names):
            return None, e.why
    for g in GROUPS:
        if g.top_level and "/" in rel:
            continue
        if any(fnmatch.fnmatchcase(name, pat) for pat in g.names):
            if g.needs_auto_map and not auto_map:
                return None, f"{g.what}: loaded only for a model whose config.json has an auto_map, and this one has none"
            return g, ""
    return None, NOT_LISTED


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _roots(root: Path) -> tuple[str, ...]:
    """Where the directory's links may point: into itself, and for a Hugging Face cache snapshot
    (models--ORG--NAME/snapshots/REV) into that repository's blobs/, where its files are."""
    out = [str(root)]
    blobs = root.parent.parent / "blobs"
    if root.parent.name == "snapshots" and blobs.is_dir():
        out.append(os.path.realpath(blobs))
    return tuple(out)


def _walk(arg: str, root: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(carried: relative path and the file to read, left out: shown path and why), each sorted by path."""
    roots, auto_map = _roots(root), _has_auto_map(root)
    carried: list[tuple[str, str]] = []
    left: list[tuple[str, str]] = []

    def unreadable(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(root).as_posix() if exc.filename else "?"
        raise _refuse(arg, rel + "/", f"cannot be read: {exc.strerror or exc}", "make it readable, or move it out of the directory")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=unreadable):
        here = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        keep = []
        for d in sorted(dirnames):
            rel = prefix + d
            if d.startswith("."):
                left.append((shown(rel) + "/", _HIDDEN.get(d, "hidden")))
            elif os.path.islink(os.path.join(dirpath, d)):
                left.append((shown(rel) + "/", "a link to a directory: not followed"))
            else:
                keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = prefix + f
            real, why = _judge_file(arg, rel, os.path.join(dirpath, f), auto_map, roots)
            if real is not None:
                carried.append((rel, real))
            else:
                left.append((rel if rel == LISTING else shown(rel), why))
    return sorted(carried), sorted(left)


def _refuse(arg: str, rel: str, what: str, fix: str) -> InputError:
    return InputError(f"--serve {arg}: {shown(rel)} {what}", fix)


def _judge_file(arg: str, rel: str, path: str, auto_map: bool, roots: tuple[str, ...]) -> tuple[Optional[str], str]:
    """One file of the model directory: (the file to read, "") where the image carries it, else (None, why it is left
    out); a file the server loads that cannot be carried safely is refused."""
    name = rel.rpartition("/")[2]
    if name.startswith("."):
        return None, _HIDDEN.get(name, "hidden")
    if rel == LISTING:
        return None, "envkit writes the model's own SHA256SUMS"
    group, why = classify(rel, auto_map)
    real = os.path.realpath(path)
    if os.path.islink(path):
        if not os.path.exists(real):
            return None, "a broken link"
        if not _inside(real, roots):
            if group is not None:
                raise _refuse(arg, rel, "is a link to a file outside the model directory (refused: the image would carry "
                                        "whatever it points to)",
                              "copy the file into the directory (cp --remove-destination \"$(readlink -f FILE)\" FILE), "
                              "or pass the directory that holds it")
            return None, "a link out of the model directory"
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        if group is None:
            return None, f"cannot be read ({exc.strerror or exc})"
        raise _refuse(arg, rel, f"cannot be read: {exc.strerror or exc}", "make it readable, or move it out of the directory") from None
    if not stat.S_ISREG(mode):
        return None, "not a regular file (a FIFO, socket or device)"
    if group is None:
        return None, why
    if not rel.isprintable() or "\\" in rel:
        raise _refuse(arg, rel, "has a control character, a backslash or bytes that are not UTF-8 in its name",
                      "rename it (a server loads it by a plain name)")
    return real, ""


def read_model(path: str, say: Callable[[str], None]) -> ModelTree:
    """What a server loads of the directory at `path` (the allow-list), every file hashed; what is left out, with why.
    Refused in one line when it is not a model directory, or when a file it would carry is a link out of it."""
    given = Path(path)
    if not given.is_dir():
        if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path):  # looks like a hub name (Qwen/Qwen-7B-Chat)
            raise InputError(f"--serve {path}: no such directory; envkit reads a local model directory, it does not download from a hub",
                             f"download it on the connected machine first (huggingface-cli download {path} --local-dir DIR), "
                             "then pass --serve DIR")
        raise InputError(f"--serve {path}: no such directory", "pass the model's local directory (config.json, tokenizer, weights)")
    root = Path(os.path.realpath(given))
    if not (root / "config.json").is_file():
        raise InputError(f"--serve {path}: no config.json, so it is not a model directory vLLM loads",
                         "pass the directory that holds config.json, the tokenizer files and the weights")
    carried, left = _walk(path, root)
    files, ids = [], []
    for i, (rel, real) in enumerate(carried, 1):
        before = FileId.of(real)
        try:
            sha = sha256_file(Path(real))
        except OSError as exc:
            raise InputError(f"--serve {path}: {shown(rel)} cannot be read: {exc.strerror or exc}",
                             "make it readable, or move it out of the directory") from None
        if not FileId.of(real).same(before):
            raise InputError(f"--serve {path}: {shown(rel)} changed while envkit hashed it",
                             "wait until whatever writes the model is done, then run envkit again")
        files.append((rel, before.size, sha))
        ids.append((rel, before))
        if i % 20 == 0 or i == len(carried):
            say(f"model: hashed {i}/{len(carried)} files")
    if left:
        say(f"model: {len(left)} entries left out (hidden, or not a file a server loads): "
            + ", ".join(rel for rel, _ in left[:5]) + (", ..." if len(left) > 5 else ""))
    return ModelTree(root, tuple(files), tuple(left), tuple(ids))


def _same_file(a: Path, b: FileId) -> bool:
    try:
        st = a.stat()
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (b.dev, b.ino)


def stage_model(tree: ModelTree, dest: Path, current: Optional[Path], say: Callable[[str], None]) -> None:
    """The tree into `dest`, a new directory (a build context's staging): each file hard-linked where it may be (a file
    everyone may read, on the same file system: the server runs as non-root and a link shares the file's mode), else
    copied and made readable; a file `current` (the context's model/ as it is) already holds with the same sha256 is
    linked from there. Refused when a file changed since it was hashed, so the digest covers exactly what is carried."""
    ids = dict(tree.ids)
    dest.mkdir(parents=True)
    linked = copied = kept = 0
    for rel, size, sha in tree.files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        was = ids.get(rel) or FileId.of(str(tree.root / rel))
        there = current / rel if current is not None else None
        if there is not None and there.is_file() and not there.is_symlink() and there.stat().st_size == size \
                and (_same_file(there, was) or sha256_file(there) == sha):
            try:
                os.link(there, target)
                kept += 1
                continue
            except OSError:
                pass
        if not FileId.of(was.path).same(was):
            raise InputError(f"--serve {tree.root}: {shown(rel)} changed after envkit hashed it",
                             "wait until whatever writes the model is done, then run envkit again (nothing was changed)")
        try:
            if os.stat(was.path).st_mode & 0o044 != 0o044:
                raise OSError("not readable by all: copied")
            os.link(was.path, target)
            linked += 1
        except OSError:
            shutil.copyfile(was.path, target)
            target.chmod(0o644)
            if not FileId.of(was.path).same(was) or target.stat().st_size != size:
                raise InputError(f"--serve {tree.root}: {shown(rel)} changed while envkit copied it",
                                 "wait until whatever writes the model is done, then run envkit again (nothing was changed)")
            copied += 1
    for d in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        d.chmod(0o755)
    (dest / LISTING).write_text(tree.listing)
    (dest / LISTING).chmod(0o644)
    say(f"model: {len(tree.files)} files staged ({linked} hard-linked, {copied} copied, {kept} kept from the context); "
        f"tree sha256 {tree.sha256}")


def place_model(tree: ModelTree, dest: Path, say: Callable[[str], None]) -> None:
    """The tree as the directory `dest`, whole: staged beside it, then renamed into place (the old one kept aside until
    then); a kill leaves the old directory or the new one, never a part (the next run repairs a half-renamed one)."""
    from envkit.adapters.context_dir import replace_dir

    replace_dir(dest, lambda staged, current: stage_model(tree, staged, current, say))
