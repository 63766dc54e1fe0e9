"""A serving image's request (--serve DIR and its options) read into the plan's Serve value, and the model carried into
the build context. The model directory is read once, here; the planner sees only its name, digest and size."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from envkit.adapters.model_dir import ModelTree, place_model, read_model
from envkit.errors import InputError
from envkit.model.plan import Serve

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")


@dataclass(frozen=True)
class ServeRequest:
    model: str  # the model's local directory
    name: Optional[str] = None  # --served-model-name; default: the directory's name
    args: tuple[str, ...] = ()  # --serve-arg, in order
    mount: bool = False  # --model-mount: the site mounts the weights; nothing is baked in
    port: int = 8000


@dataclass(frozen=True)
class Prepared:
    serve: Serve
    tree: ModelTree


def prepare(req: ServeRequest, say: Callable[[str], None]) -> Prepared:
    name = req.name or Path(req.model.rstrip("/")).name
    if not _NAME.fullmatch(name):
        raise InputError(f"served model name {name!r} is not a name clients can send",
                         "pass --served-model-name with letters, digits and . _ / - (e.g. qwen-7b)")
    for a in req.args:
        if not a or any(ord(ch) < 32 for ch in a):
            raise InputError(f"--serve-arg {a!r} is empty or holds a control character", "pass one argument per --serve-arg, e.g. --serve-arg=--dtype=float32")
    if not 1 <= req.port <= 65535:
        raise InputError(f"--serve-port {req.port} is not a TCP port", "use a port from 1 to 65535, e.g. 8000")
    tree = read_model(req.model, say)
    return Prepared(Serve(name=name, sha256=tree.sha256, files=len(tree.files), bytes=tree.bytes, mount=req.mount,
                          port=req.port, args=req.args), tree)


def carry(prepared: Optional[Prepared], out: Path, say: Callable[[str], None]) -> None:
    """The model into the context's model/ (unless the site mounts it)."""
    if prepared is not None and not prepared.serve.mount:
        place_model(prepared.tree, out / "model", say)
