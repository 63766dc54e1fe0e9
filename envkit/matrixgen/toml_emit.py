"""A small, deterministic TOML writer for the generated regions of matrix.toml: arrays of tables
whose values are strings, numbers, booleans, lists of those, inline tables, and lists of inline
tables (one per line). Keys keep the order the derivation gives them."""
from __future__ import annotations

import json
import re
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k)


def value(v: Any, top: bool = True) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        # JSON string escapes are TOML's, except that TOML also forbids a raw DEL (U+007F)
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007F")
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {value(x, False)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, (list, tuple)):
        if top and v and all(isinstance(x, dict) for x in v):
            return "[\n" + "".join(f"  {value(x, False)},\n" for x in v) + "]"
        return "[" + ", ".join(value(x, False) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def table_rows(name: str, rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        lines = [f"[[{name}]]"]
        for k, v in r.items():
            if v is None:
                continue
            lines.append(f"{_key(k)} = {value(v)}")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)
