"""A flat apt repository from a directory of .deb files: the Packages index apt reads with
`deb [trusted=yes] file:/dir ./`. Standard library only (ar archive + control.tar.{xz,gz})."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from envkit.errors import ExternalError


def _ar_members(data: bytes) -> dict[str, bytes]:
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    out, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        out[name] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
    return out


def control_fields(deb: bytes) -> str:
    """The control paragraph of a .deb, as written in its control file."""
    members = _ar_members(deb)
    name = next((n for n in members if n.startswith("control.tar")), None)
    if name is None:
        raise ValueError("no control.tar member")
    if name.endswith(".zst"):
        raise ValueError("control.tar.zst is not readable without zstd")
    with tarfile.open(fileobj=io.BytesIO(members[name])) as tar:
        for m in tar.getmembers():
            if m.name.lstrip("./") == "control":
                f = tar.extractfile(m)
                assert f is not None
                return f.read().decode().strip()
    raise ValueError("control.tar has no control file")


def packages_index(directory: Path) -> str:
    """Ubuntu >= 21.10 compresses control.tar with zstd, which the standard library cannot read: for those
    the bundle step writes NAME.deb.control with `dpkg-deb -f` inside the base image, and it is used here."""
    paragraphs = []
    for deb in sorted(directory.glob("*.deb")):
        data = deb.read_bytes()
        sidecar = deb.with_name(deb.name + ".control")
        try:
            fields = sidecar.read_text().strip() if sidecar.is_file() else control_fields(data)
        except ValueError as exc:
            raise ExternalError(f"{deb.name} is not a readable .deb ({exc})", "delete it and run envkit bundle again") from None
        paragraphs.append(f"{fields}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                          f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    return "\n".join(paragraphs)


def write_index(directory: Path) -> int:
    text = packages_index(directory)
    (directory / "Packages").write_text(text)
    for sidecar in directory.glob("*.deb.control"):
        sidecar.unlink()
    return text.count("\nFilename: ")
