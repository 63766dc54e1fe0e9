"""PyPI as a primary source (adapter): the file list of a project, one member of a wheel read through
HTTP range requests (a 400 MB wheel costs a few hundred kilobytes), and members of an sdist.

Everything read is cached under ~/.cache/envkit/sources (or $ENVKIT_SOURCES_CACHE), keyed by the file's
sha256, so a second extraction run reads nothing from the network.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..adapters.pip import default_index
from ..errors import ExternalError
from ..model.purl import pypi_file


def _simple(name: str) -> str:
    """A project's page on pip's own default index (PEP 691 JSON when asked for it)."""
    return f"{default_index().rstrip('/')}/{name}/"


def _json_api(name: str) -> str:
    """The index's JSON API, beside its simple pages (/simple/NAME/ and /pypi/NAME/json)."""
    return f"{default_index().rstrip('/').rsplit('/', 1)[0]}/pypi/{name}/json"


@dataclass(frozen=True)
class PyPIFile:
    filename: str
    url: str
    sha256: str
    size: int
    upload_time: str
    has_metadata: bool
    yanked: bool

    @property
    def purl(self) -> str:
        """The file's purl, by its name."""
        return pypi_file(self.filename)

    @property
    def citation(self) -> str:
        """The file's purl with its sha256, which fixes its content."""
        return pypi_file(self.filename, self.sha256)


def cache_dir() -> Path:
    base = os.environ.get("ENVKIT_SOURCES_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit" / "sources")
    p = Path(base)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _session():
    import requests

    s = requests.Session()
    s.headers["User-Agent"] = "envkit-matrix-refresh"
    return s


_S = None


def _get(url: str, **kw):
    global _S
    if _S is None:
        _S = _session()
    try:
        r = _S.get(url, timeout=kw.pop("timeout", 120), **kw)
    except Exception as exc:  # requests' ConnectionError, Timeout, ...
        raise ExternalError(f"cannot reach {url}: {type(exc).__name__}", "check the network, or run refresh without --online") from None
    if r.status_code >= 400:
        raise ExternalError(f"{url}: HTTP {r.status_code}", "check the project name and version")
    return r


def files(name: str) -> list[PyPIFile]:
    """Every file PyPI lists for a project (PEP 691 JSON simple index)."""
    r = _get(_simple(name), headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    out = []
    for f in r.json()["files"]:
        out.append(PyPIFile(
            filename=f["filename"], url=f["url"].split("#")[0], sha256=f["hashes"].get("sha256", ""),
            size=int(f.get("size") or 0), upload_time=f.get("upload-time") or "",
            has_metadata=bool(f.get("core-metadata") or f.get("data-dist-info-metadata")),
            yanked=bool(f.get("yanked")),
        ))
    return out


def release_times(name: str) -> dict[str, str]:
    """version -> the first upload time (the JSON API; the simple index has no versions)."""
    data = _get(_json_api(name)).json()
    out = {}
    for v, fs in data["releases"].items():
        times = sorted(f["upload_time_iso_8601"] for f in fs)
        if times:
            out[v] = times[0]
    return out


def _cached(key: str, produce: Callable[[], bytes]) -> bytes:
    path = cache_dir() / key
    if path.is_file():
        return path.read_bytes()
    data = produce()
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def _range(url: str, start: int, end: int) -> bytes:
    return _get(url, headers={"Range": f"bytes={start}-{end}"}).content


def _central_directory(f: PyPIFile) -> list[tuple[str, int, int, int]]:
    """(member name, compression method, compressed size, local header offset) of a remote zip."""
    def produce() -> bytes:
        tail = _range(f.url, max(0, f.size - 65536), f.size - 1)
        eocd = tail.rfind(b"PK\x05\x06")
        if eocd < 0:
            raise ExternalError(f"{f.filename}: no zip end record", "the file is not a wheel")
        cd_size, cd_off = struct.unpack("<II", tail[eocd + 12: eocd + 20])
        if cd_off == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:  # zip64
            loc = tail.rfind(b"PK\x06\x07")
            (z64_off,) = struct.unpack("<Q", tail[loc + 8: loc + 16])
            rec = _range(f.url, z64_off, z64_off + 55)
            cd_size, cd_off = struct.unpack("<QQ", rec[40:56])
        return _range(f.url, cd_off, cd_off + cd_size - 1)

    cd = _cached(f"{f.sha256}.cd", produce)
    out, i = [], 0
    while i + 46 <= len(cd) and cd[i:i + 4] == b"PK\x01\x02":
        comp = struct.unpack("<H", cd[i + 10: i + 12])[0]
        csize = struct.unpack("<I", cd[i + 20: i + 24])[0]
        nlen, elen, clen = struct.unpack("<HHH", cd[i + 28: i + 34])
        off = struct.unpack("<I", cd[i + 42: i + 46])[0]
        name = cd[i + 46: i + 46 + nlen].decode("utf-8", "replace")
        if csize == 0xFFFFFFFF or off == 0xFFFFFFFF:  # zip64 extra field
            extra = cd[i + 46 + nlen: i + 46 + nlen + elen]
            j = 0
            while j + 4 <= len(extra):
                hid, hlen = struct.unpack("<HH", extra[j: j + 4])
                if hid == 1:
                    vals = list(struct.unpack("<" + "Q" * (hlen // 8), extra[j + 4: j + 4 + hlen]))
                    usize = struct.unpack("<I", cd[i + 24: i + 28])[0]
                    if usize == 0xFFFFFFFF:
                        vals.pop(0)
                    if csize == 0xFFFFFFFF:
                        csize = vals.pop(0)
                    if off == 0xFFFFFFFF:
                        off = vals.pop(0)
                j += 4 + hlen
        out.append((name, comp, csize, off))
        i += 46 + nlen + elen + clen
    return out


def wheel_members(f: PyPIFile) -> list[str]:
    return [name for name, *_ in _central_directory(f)]


def wheel_member(f: PyPIFile, member: str) -> bytes:
    """One member of a remote wheel, read by range requests and cached."""
    for name, comp, csize, off in _central_directory(f):
        if name != member:
            continue
        key = f"{f.sha256}.{hashlib.sha256(member.encode()).hexdigest()[:16]}"

        def produce() -> bytes:
            head = _range(f.url, off, off + 30 + 4096 + csize)
            n, e = struct.unpack("<HH", head[26:30])
            data = head[30 + n + e: 30 + n + e + csize]
            if comp == 8:
                return zlib.decompress(data, -15)
            if comp == 0:
                return data
            raise ExternalError(f"{f.filename}:{member}: zip method {comp} unsupported", "read the wheel with unzip")

        return _cached(key, produce)
    raise ExternalError(f"{f.filename} has no member {member}", "check the member name")


def wheel_metadata(f: PyPIFile) -> str:
    """The wheel's METADATA (PEP 658 file when PyPI serves one, else the member itself)."""
    if f.has_metadata:
        return _cached(f"{f.sha256}.metadata", lambda: _get(f.url + ".metadata").content).decode("utf-8", "replace")
    name = next((n for n in wheel_members(f) if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
    if name is None:
        raise ExternalError(f"{f.filename}: no METADATA", "the file is not a wheel")
    return wheel_member(f, name).decode("utf-8", "replace")


def sdist_members(f: PyPIFile, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """Members of an sdist whose path (without the top folder) passes `wanted`; the sdist is
    downloaded once into the cache."""
    def produce() -> bytes:
        return _get(f.url).content

    blob = _cached(f"{f.sha256}.sdist", produce)
    if hashlib.sha256(blob).hexdigest() != f.sha256:
        (cache_dir() / f"{f.sha256}.sdist").unlink(missing_ok=True)
        raise ExternalError(f"{f.filename}: sha256 mismatch", "run the extraction again")
    out: dict[str, bytes] = {}
    if f.filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            for name in z.namelist():
                rel = name.split("/", 1)[1] if "/" in name else name
                if wanted(rel):
                    out[rel] = z.read(name)
        return out
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as t:
        for m in t.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and wanted(rel):
                fh = t.extractfile(m)
                if fh is not None:
                    out[rel] = fh.read()
    return out


def sdist_listing(f: PyPIFile) -> list[str]:
    names: list[str] = []

    def record(rel: str) -> bool:
        names.append(rel)
        return False  # list only: read no member

    sdist_members(f, record)
    return sorted(names)


def metadata_fields(text: str) -> dict[str, list[str]]:
    """METADATA headers (first paragraph) as name -> values."""
    out: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            k, v = line.split(":", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def dump(obj: object) -> str:
    """Extract files are JSON with sorted keys and a trailing newline: stable diffs."""
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def versions_of(name: str, fs: Iterable[PyPIFile]) -> dict[str, list[PyPIFile]]:
    """Files grouped by the version their filename carries."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    out: dict[str, list[PyPIFile]] = {}
    for f in fs:
        try:
            if f.filename.endswith(".whl"):
                v = parse_wheel_filename(f.filename)[1]
            else:
                v = parse_sdist_filename(f.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        out.setdefault(str(v), []).append(f)
    return out
