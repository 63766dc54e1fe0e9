"""Fill a Triton model repository from a backend's own release archive (runs in the image, standard library only).

    python3 fill_triton_repo.py VALUES.json (--archive FILE | --fetch URL [--cafile CA.crt]) --out DIR

VALUES.json is what envkit generate wrote (envkit/fill_triton_repo.json): which archive (its commit), which model
directories of its tree (`root`/`models`), the files left out of them and why, and how to fill them:
- `substitute`: the value of each `${name}` in every config.pbtxt (string.Template's safe substitution, as the
  backend's own tools/fill_template.py does); null leaves the configs' text as it is.
- `parameters`: per file, `parameters { key: K value: { string_value: "..." } }` set to the value (exactly one each).
- `replace`: per file, one text replaced by another (exactly one occurrence).
A config.pbtxt that still holds a `${...}` outside a string_value after filling is refused: Triton cannot parse it.

The archive is GitHub's of the commit (its first path component, OWNER-NAME-COMMIT/, is stripped as tar
--strip-components=1 would); where it records its commit (git archive's pax header) that must be the one named.
Python 3.8 and later: the oldest Triton image envkit fills (22.12) has Python 3.8.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from string import Template
from typing import Dict, List, Optional, Set, Tuple

SCHEMA = 1
_STRUCTURAL = re.compile(r"^(?!\s*#)(?!\s*string_value:).*\$\{(\w+)\}", re.M)


class FillError(Exception):
    """One line for the build log; exit code 2 (bad values or archive) or 4 (the fetch failed)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def unfilled_structural(text: str) -> List[str]:
    """${...} parameters outside a string_value: Triton cannot parse the config while one is left."""
    return _STRUCTURAL.findall(text)


def set_parameter(text: str, key: str, value: str) -> str:
    """A config's `parameters { key: K value: { string_value: "..." } }`, set to value (exactly one such key)."""
    pattern = re.compile(r'(key:\s*"' + re.escape(key) + r'"\s*value:\s*\{\s*string_value:\s*")[^"]*(")', re.S)
    out, n = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
    if n != 1:
        raise FillError(f"the config has {n} parameters named {key}, not one")
    return out


def _relative(name: str) -> Optional[str]:
    """The member's path below the archive's top directory; None for the top directory itself."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise FillError(f"the archive holds a path outside its tree: {name!r}")
    return "/".join(parts[1:]) or None


def select(members: List[Tuple[str, str, bytes]], values: dict) -> Tuple[Dict[str, bytes], Set[str], List[str]]:
    """The model directories' files and directories, by path relative to the model repository, from the archive's
    (name, kind, data) members (kind: "file", "dir" or anything else, which is refused); and the files left out."""
    root = values["root"].strip("/")
    models = list(values["models"])
    left_out = set(values.get("left_out", {}))
    files: Dict[str, bytes] = {}
    dirs: Set[str] = set()
    dropped: List[str] = []
    for name, kind, data in members:
        rel = _relative(name)
        if rel is None or not rel.startswith(root + "/"):
            continue
        inner = rel[len(root) + 1:]
        if inner.split("/")[0] not in models:
            continue
        if kind == "dir":
            dirs.add(inner)
        elif kind != "file":
            raise FillError(f"{rel} in the archive is a {kind}, not a file: refusing to follow it")
        elif inner in left_out:
            dropped.append(inner)
        else:
            files[inner] = data
    for inner in left_out:  # the directory of a left-out file stays (a Triton version directory may hold nothing)
        if inner.split("/")[0] in models and "/" in inner:
            dirs.add(inner.rsplit("/", 1)[0])
    missing = [m for m in models if m not in dirs and not any(f.startswith(m + "/") for f in files)]
    if missing:
        raise FillError(f"the archive has no {', '.join(f'{root}/{m}' for m in missing)}: is it {values['archive']['name']}?")
    return files, dirs, sorted(dropped)


def fill(files: Dict[str, bytes], values: dict) -> Tuple[Dict[str, bytes], List[str]]:
    """The filled files, and what was done (one line each)."""
    out = dict(files)
    done: List[str] = []

    def text(rel: str) -> str:
        if rel not in out:
            raise FillError(f"{rel} is not in the model repository")
        return out[rel].decode("utf-8")

    for rel, params in sorted(values.get("parameters", {}).items()):
        t = text(rel)
        for key, value in sorted(params.items()):
            try:
                t = set_parameter(t, key, value)
            except FillError as exc:
                raise FillError(f"{rel}: {exc}") from None
        out[rel] = t.encode("utf-8")
        done.append(f"{rel}: set {', '.join(f'{k}={v}' for k, v in sorted(params.items()))}")
    for r in values.get("replace", []):
        t = text(r["file"])
        n = t.count(r["old"])
        if n != 1:
            raise FillError(f"{r['file']}: expected one {r['old']}, found {n}")
        out[r["file"]] = t.replace(r["old"], r["new"]).encode("utf-8")
        done.append(f"{r['file']}: {r['old']} -> {r['new']}")
    substitute = values.get("substitute")
    for rel in sorted(out):
        if not rel.endswith(".pbtxt"):
            continue
        t = text(rel)
        if substitute is not None:
            t = Template(t).safe_substitute(substitute)
            out[rel] = t.encode("utf-8")
        left = unfilled_structural(t)
        if left:
            raise FillError(f"{rel}: no value for {', '.join(sorted(set(left)))}")
    if substitute is not None:
        done.append(f"config.pbtxt: ${{...}} filled from {len(substitute)} values")
    return out, done


def read_archive(path: str, commit: str) -> List[Tuple[str, str, bytes]]:
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise FillError(f"{path} is not a readable tar archive ({exc})") from None
    with tar:
        recorded = tar.pax_headers.get("comment")
        if recorded and re.fullmatch(r"[0-9a-f]{40}", recorded) and recorded != commit:
            raise FillError(f"{path} is the archive of commit {recorded}, not {commit}")
        members = []
        for m in tar:
            kind = "file" if m.isfile() else "dir" if m.isdir() else "link" if (m.issym() or m.islnk()) else "special file"
            data = b""
            if kind == "file":
                f = tar.extractfile(m)
                data = f.read() if f is not None else b""
            members.append((m.name, kind, data))
    return members


def fetch(url: str, dest: str, cafile: Optional[str] = None, attempts: int = 3) -> None:
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    last = ""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=60, context=context) as r, open(dest, "wb") as f:
                shutil.copyfileobj(r, f)
            return
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            last = f"{type(exc).__name__}: {str(exc)[:200]}"
            if (isinstance(exc, urllib.error.HTTPError) and exc.code < 500) or isinstance(exc, ValueError):
                break  # the server's answer, or a URL that is not one: trying again changes nothing
            if attempt + 1 < attempts:
                time.sleep(2 ** attempt)
    raise FillError(f"fetching {url} failed: {last} (put the archive in the build context's sources/ instead)", 4)


def write(out: str, files: Dict[str, bytes], dirs: Set[str]) -> None:
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise FillError(f"{out} exists and is not an empty directory")
    for d in sorted(dirs):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    for rel, data in sorted(files.items()):
        p = os.path.join(out, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def _arg(argv: List[str], name: str) -> Optional[str]:
    if name not in argv:
        return None
    i = argv.index(name)
    if i + 1 >= len(argv):
        raise FillError(f"{name} needs a value")
    return argv[i + 1]


def main(argv: List[str]) -> int:
    try:
        if not argv or argv[0].startswith("-"):
            raise FillError("usage: fill_triton_repo.py VALUES.json (--archive FILE | --fetch URL [--cafile CA]) --out DIR")
        with open(argv[0], encoding="utf-8") as f:
            values = json.load(f)
        if values.get("schema") != SCHEMA:
            raise FillError(f"{argv[0]}: schema {values.get('schema')!r}, this script reads {SCHEMA}")
        archive, url, out = _arg(argv, "--archive"), _arg(argv, "--fetch"), _arg(argv, "--out")
        if out is None or (archive is None) == (url is None):
            raise FillError("give --out DIR and one of --archive FILE or --fetch URL")
        commit = values["archive"]["commit"]
        with tempfile.TemporaryDirectory(prefix="envkit-fill-") as tmp:
            if url is not None:
                archive = os.path.join(tmp, values["archive"]["name"])
                print(f"fill_triton_repo: fetching {url}", flush=True)
                fetch(url, archive, _arg(argv, "--cafile"))
            assert archive is not None
            files, dirs, dropped = select(read_archive(archive, commit), values)
        filled, done = fill(files, values)
        write(out, filled, dirs)
    except FillError as exc:
        print(f"fill_triton_repo: error: {exc}", file=sys.stderr)
        return exc.code
    except (OSError, ValueError, KeyError) as exc:
        print(f"fill_triton_repo: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"fill_triton_repo: {values['archive']['name']}: {len(filled)} files of {', '.join(values['models'])} in {out}")
    for line in done:
        print(f"  {line}")
    for rel in dropped:
        print(f"  left out {rel}: {values['left_out'][rel]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
