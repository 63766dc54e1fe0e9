"""A serving image's model directory (adapter): its files hashed once, and the tree carried into a build context.

The tree digest is the sha256 of the directory's SHA256SUMS listing (`<sha256>  <path>` per file, sorted by path),
so a site can recompute it with sha256sum alone."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from envkit.adapters.fetch import sha256_file, sha256sums
from envkit.errors import InputError

LISTING = "SHA256SUMS"


@dataclass(frozen=True)
class ModelTree:
    root: Path
    files: tuple[tuple[str, int, str], ...]  # (relative path, size, sha256), sorted by path

    @property
    def listing(self) -> str:
        return sha256sums((sha, rel) for rel, _, sha in self.files)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.listing.encode()).hexdigest()

    @property
    def bytes(self) -> int:
        return sum(size for _, size, _ in self.files)


def read_model(path: str, say: Callable[[str], None]) -> ModelTree:
    """Every file under `path` (symlinks followed, as a Hugging Face cache snapshot needs), hashed; refused in one line when
    it is not a model directory."""
    root = Path(path)
    if not root.is_dir():
        if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path):  # looks like a hub name (Qwen/Qwen-7B-Chat)
            raise InputError(f"--serve {path}: no such directory; envkit reads a local model directory, it does not download from a hub",
                             f"download it on the connected machine first (huggingface-cli download {path} --local-dir DIR), "
                             "then pass --serve DIR")
        raise InputError(f"--serve {path}: no such directory", "pass the model's local directory (config.json, tokenizer, weights)")
    if not (root / "config.json").is_file():
        raise InputError(f"--serve {path}: no config.json, so it is not a model directory vLLM loads",
                         "pass the directory that holds config.json, the tokenizer files and the weights")
    rels = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and LISTING != p.name)
    files = []
    for i, rel in enumerate(rels, 1):
        p = root / rel
        files.append((rel, p.stat().st_size, sha256_file(p)))
        if i % 20 == 0 or i == len(rels):
            say(f"model: hashed {i}/{len(rels)} files")
    return ModelTree(root, tuple(files))


def place_model(tree: ModelTree, dest: Path, say: Callable[[str], None]) -> None:
    """The tree into `dest` (hard links where the file system allows, else copies); files `dest` held that the tree
    does not are removed, files already there with the same size and sha256 are kept."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {rel for rel, _, _ in tree.files}
    for p in sorted(dest.rglob("*"), reverse=True):
        rel = str(p.relative_to(dest))
        if p.is_file() and rel not in wanted and rel != LISTING:
            p.unlink()
    copied = 0
    for rel, size, sha in tree.files:
        target = dest / rel
        if target.is_file() and target.stat().st_size == size and sha256_file(target) == sha:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        src = (tree.root / rel).resolve()
        readable = src.stat().st_mode & 0o044 == 0o044
        try:  # a hard link shares the file's mode: only for files everyone may read (the server runs as non-root)
            if not readable:
                raise OSError("not readable by all: copied")
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
            target.chmod(0o644)
        copied += 1
    for d in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        d.chmod(0o755)
    (dest / LISTING).write_text(tree.listing)
    say(f"model: {len(tree.files)} files in {dest} ({copied} placed, {len(tree.files) - copied} already there); tree sha256 {tree.sha256}")
