#!/usr/bin/env python3
"""The CUDA archs a wheel's shared libraries carry, read from their fatbins (no CUDA toolkit needed): for each .so of a
wheel (or one .so), how many fatbins it holds and, per compute capability, how many of them carry SASS (an ELF cubin)
and how many PTX. An arch that (nearly) every fatbin carries is one the library was compiled for (printed as
SASS-in-90%-of-fatbins); one only a few fatbins carry is a bundled component's own list. Standard library only.

    python3 scripts/fatbin-archs.py WHEEL_OR_SO [--min-mb 1]

The fatbin layout read here (magic 0x466243b1 little-endian as bytes 50 ed 55 ba, version 1, a 16-byte header, then
entries of kind 1 = PTX or 2 = ELF with the arch at offset 28) is the one nvcc writes into .nv_fatbin sections.
"""
from __future__ import annotations

import argparse
import collections
import mmap
import os
import re
import struct
import sys
import tempfile
import zipfile

MAGIC = b"\x50\xed\x55\xba"


def scan(path: str) -> tuple[int, collections.Counter, collections.Counter]:
    """(fatbins, SASS arch -> fatbins carrying it, PTX arch -> fatbins carrying it) of one shared library."""
    sass: collections.Counter = collections.Counter()
    ptx: collections.Counter = collections.Counter()
    fatbins = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos = mm.find(MAGIC)
        while pos != -1:
            version, header, size = struct.unpack_from("<HHQ", mm, pos + 4)
            nxt = pos + 4
            if version == 1 and header == 16 and 0 < size < len(mm):
                fatbins += 1
                seen_sass, seen_ptx = set(), set()
                p, end = pos + 16, pos + 16 + size
                while p + 64 <= end:
                    kind, _ev, entry_header = struct.unpack_from("<HHI", mm, p)
                    (payload,) = struct.unpack_from("<Q", mm, p + 8)
                    (arch,) = struct.unpack_from("<I", mm, p + 28)
                    if not 64 <= entry_header <= 4096:
                        break
                    (seen_sass if kind == 2 else seen_ptx if kind == 1 else set()).add(arch)
                    p += entry_header + payload
                sass.update(seen_sass)
                ptx.update(seen_ptx)
                nxt = max(end, pos + 4)
            pos = mm.find(MAGIC, nxt)
    return fatbins, sass, ptx


def libraries(path: str, min_bytes: int):
    """(name, size, a readable path) of each shared library of a wheel, or the one file given."""
    if not zipfile.is_zipfile(path):
        yield os.path.basename(path), os.path.getsize(path), path
        return
    with zipfile.ZipFile(path) as z, tempfile.TemporaryDirectory() as tmp:
        for info in z.infolist():
            if re.search(r"\.so(\.\d+)*$", info.filename) and info.file_size >= min_bytes:
                extracted = z.extract(info, tmp)
                yield info.filename, info.file_size, extracted
                os.remove(extracted)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="a wheel (.whl) or a shared library")
    p.add_argument("--min-mb", type=float, default=1.0, help="skip libraries smaller than this (default 1 MB)")
    a = p.parse_args(argv)
    for name, size, real in libraries(a.path, int(a.min_mb * 2**20)):
        fatbins, sass, ptx = scan(real)
        if not fatbins:
            continue
        compiled = [arch for arch, n in sorted(sass.items()) if n >= 0.9 * fatbins]
        print(f"{name} size={size} fatbins={fatbins} SASS={dict(sorted(sass.items()))} PTX={dict(sorted(ptx.items()))} "
              f"SASS-in-90%-of-fatbins={compiled}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
