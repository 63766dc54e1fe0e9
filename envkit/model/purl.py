"""Package URLs (purl, https://github.com/package-url/purl-spec) for what envkit cites from the Python Package Index:
`pkg:pypi/NAME@VERSION` for a release, with `?checksum=sha256:HEX&file_name=FILE` for one of its files. A purl names
what a registry holds without naming the registry's host; where a file must be fetched, the site's pip index (or pip's
own default index) lists it by that name, and its sha256 proves it is the one cited."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Optional
from urllib.parse import quote, unquote

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

# a purl inside a source line ends where the line's own punctuation starts: ; , ) or a sentence's full stop
_PYPI = re.compile(r"(?<![\w.-])pkg:pypi/(?P<name>[^@?#\s;,)]+)(?:@(?P<version>[^?#\s;,)]+))?(?:\?(?P<qualifiers>[^#\s;,)]+))?")


@dataclass(frozen=True)
class PyPIRef:
    """A release of a PyPI project, or one file of it (file_name, sha256)."""
    name: str
    version: Optional[str] = None
    file_name: Optional[str] = None
    sha256: Optional[str] = None

    def __str__(self) -> str:
        out = f"pkg:pypi/{purl_name(self.name)}"
        if self.version:
            out += "@" + quote(self.version, safe=".")
        qualifiers = []
        if self.sha256:
            qualifiers.append(f"checksum=sha256:{self.sha256}")
        if self.file_name:
            qualifiers.append("file_name=" + quote(self.file_name, safe=".-_"))
        return out + ("?" + "&".join(qualifiers) if qualifiers else "")


def purl_name(name: str) -> str:
    """The purl spec's pypi name: lowercased, each underscore a dash (a dot stays: zope.interface)."""
    return name.lower().replace("_", "-")


def pypi(name: str, version: Optional[str] = None) -> str:
    """The purl of a PyPI project, or of one release of it."""
    return str(PyPIRef(name, version))


def pypi_file(file_name: str, sha256: Optional[str] = None) -> str:
    """The purl of one file of a release, its project and version read from the file's name (a wheel or an sdist)."""
    try:
        name, version = (parse_wheel_filename(file_name)[:2] if file_name.endswith(".whl") else parse_sdist_filename(file_name))
    except (InvalidWheelFilename, InvalidSdistFilename):
        raise ValueError(f"{file_name!r} is not a wheel's or an sdist's file name") from None
    return str(PyPIRef(name, str(version), file_name, sha256))


def parse_pypi(text: str) -> Optional[PyPIRef]:
    """The first PyPI purl in text (a source line may cite several things), or None."""
    return next(pypi_refs(text), None)


def pypi_refs(text: str) -> Iterator[PyPIRef]:
    """Every PyPI purl in text, in order."""
    for m in _PYPI.finditer(text):
        yield _ref(m)


def _ref(m: re.Match[str]) -> PyPIRef:
    fields = {k.lower(): unquote(v) for k, v in (q.split("=", 1) for q in (m["qualifiers"] or "").rstrip(".").split("&") if "=" in q)}
    checksum = fields.get("checksum", "")
    sha256 = next((c.split(":", 1)[1].lower() for c in checksum.split(",") if c.lower().startswith("sha256:")), None)
    version = unquote(m["version"]).rstrip(".") if m["version"] else None
    return PyPIRef(unquote(m["name"]).rstrip("."), version or None, fields.get("file_name") or None, sha256)
