"""Read release facts (Requires-Python, torch pin, wheel tags) straight from PyPI wheel metadata.

Used to write and re-check the vllm and torch rows of matrix.toml; every row it prints names the
wheel file it read as its source. Reads only the METADATA member of each wheel through HTTP range
requests (or PEP 658 metadata files), so a 400 MB wheel costs a few kilobytes.

    python scripts/pypi_facts.py vllm 0.2.7 0.4.2 ...
"""
from __future__ import annotations

import json
import struct
import sys
import zlib

import requests

SIMPLE = "https://pypi.org/simple/{name}/"


def _files(name: str) -> list[dict]:
    r = requests.get(SIMPLE.format(name=name), headers={"Accept": "application/vnd.pypi.simple.v1+json"}, timeout=60)
    r.raise_for_status()
    return r.json()["files"]


def _range(url: str, start: int, end: int) -> bytes:
    r = requests.get(url, headers={"Range": f"bytes={start}-{end}"}, timeout=60)
    r.raise_for_status()
    return r.content


def wheel_metadata(f: dict) -> str:
    if f.get("core-metadata") or f.get("data-dist-info-metadata"):
        r = requests.get(f["url"] + ".metadata", timeout=60)
        if r.ok:
            return r.text
    size = f["size"]
    tail = _range(f["url"], max(0, size - 65536), size - 1)
    eocd = tail.rfind(b"PK\x05\x06")
    cd_size, cd_off = struct.unpack("<II", tail[eocd + 12 : eocd + 20])
    cd = _range(f["url"], cd_off, cd_off + cd_size - 1)
    i = 0
    while i < len(cd):
        comp = struct.unpack("<H", cd[i + 10 : i + 12])[0]
        csize = struct.unpack("<I", cd[i + 20 : i + 24])[0]
        nlen, elen, clen = struct.unpack("<HHH", cd[i + 28 : i + 34])
        off = struct.unpack("<I", cd[i + 42 : i + 46])[0]
        fname = cd[i + 46 : i + 46 + nlen].decode()
        if fname.endswith(".dist-info/METADATA"):
            head = _range(f["url"], off, off + 30 + 1024 + csize)
            n, e = struct.unpack("<HH", head[26:30])
            data = head[30 + n + e : 30 + n + e + csize]
            return (zlib.decompress(data, -15) if comp == 8 else data).decode()
        i += 46 + nlen + elen + clen
    raise RuntimeError(f"no METADATA in {f['filename']}")


def facts(name: str, versions: list[str]) -> list[dict]:
    files = _files(name)
    out = []
    for v in versions:
        whls = [f for f in files if f["filename"].startswith(f"{name.replace('-', '_')}-{v}-") and f["filename"].endswith(".whl")]
        if not whls:
            out.append({"version": v, "error": "no wheel on PyPI"})
            continue
        x86 = [f for f in whls if "x86_64" in f["filename"]] or whls
        meta = wheel_metadata(x86[0])
        reqs = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
        rp = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Python:")]
        out.append({
            "version": v,
            "requires_python": rp[0] if rp else None,
            "torch": [r for r in reqs if r.split(";")[0].replace(" ", "").startswith(("torch=", "torch>", "torch<", "torch~", "torch!", "torch ", "torch(")) or r.split()[0] == "torch"],
            "nvidia": sorted({r.split(";")[0] for r in reqs if r.startswith(("nvidia-cuda-runtime", "cuda-toolkit", "nvidia-cudnn"))}),
            "wheels": sorted(f["filename"] for f in whls),
            "source": x86[0]["url"].split("#")[0],
        })
    return out


if __name__ == "__main__":
    print(json.dumps(facts(sys.argv[1], sys.argv[2:]), indent=1))
