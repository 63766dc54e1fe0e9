"""pip, run as a subprocess of this Python: each line of its output handed to a callback (the bundle's
reporter, or a target's log under build --all), and a failure as one ExternalError naming pip's first error;
a wheel refused by --require-hashes is named with the sha256 the lock pins and the one it has."""
from __future__ import annotations

import functools
import re
import subprocess
import sys
from typing import Callable, NamedTuple, Sequence
from urllib.parse import unquote, urlsplit

from envkit.errors import ExternalError
from envkit.model.redact import redact

HASH_MISMATCH = "DO NOT MATCH THE HASHES"
_FROM = re.compile(r"^\s+(\S+) from (\S+?)(?:#\S*)?(?: \(from .*\))?:$")
_EXPECTED = re.compile(r"^\s+Expected sha256 ([0-9a-f]{64})")
_GOT = re.compile(r"^\s+Got\s+([0-9a-f]{64})")


SOURCE_KEYS = ("index-url", "extra-index-url", "find-links", "no-index")
_CONFIG_LINE = re.compile(r"^(?P<scope>:env:|[a-z]+)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def where_from(config_list: str) -> tuple[str, ...]:
    """The settings of `pip config list` that add or replace where pip takes packages from (its index, extra indexes,
    find-links directories), each as `key = value (where it is set)`, credentials in a URL redacted: what a bundle's
    pip download reads on this host beside the indexes the plan names."""
    out = []
    for line in config_list.splitlines():
        m = _CONFIG_LINE.match(line.strip())
        if m is None or m["key"] not in SOURCE_KEYS:
            continue
        where = f"PIP_{m['key'].upper().replace('-', '_')}" if m["scope"] == ":env:" else f"pip.conf [{m['scope']}]"
        out.append(f"{m['key']} = {redact(m['value'])} ({where})")
    return tuple(out)


def host_sources() -> tuple[str, ...]:
    """where_from() of this host's pip (its configuration files and PIP_* variables); () when pip cannot say."""
    try:
        p = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return where_from(p.stdout) if p.returncode == 0 else ()


@functools.lru_cache(maxsize=1)
def default_index() -> str:
    """pip's own default index (its PEP 503 simple URL), asked of this Python's pip: where a PyPI purl is looked up
    when the site file names no pip index, so that envkit never spells the registry's host itself."""
    code = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        p = None
    url = p.stdout.strip() if p is not None and p.returncode == 0 else ""
    if not url.startswith(("https://", "http://")):
        raise ExternalError(f"{sys.executable}'s pip does not say its default index", "name the pip index in a site file ([pip] index_url)")
    return url


class Mismatch(NamedTuple):
    requirement: str
    filename: str
    expected: str
    got: str


def hash_mismatches(lines: Sequence[str]) -> list[Mismatch]:
    """The wheels pip refused in --require-hashes mode: what was asked, the file, the pinned and the actual sha256."""
    found: list[Mismatch] = []
    requirement = filename = expected = ""
    for line in lines:
        if m := _FROM.match(line):
            requirement, filename, expected = m.group(1), unquote(urlsplit(m.group(2)).path.rsplit("/", 1)[-1]), ""
        elif (m := _EXPECTED.match(line)) and requirement:
            expected = m.group(1)
        elif (m := _GOT.match(line)) and requirement and expected:
            found.append(Mismatch(requirement, filename, expected, m.group(1)))
            requirement = ""
    return found


def run(args: list[str], on_line: Callable[[str], None], fix: str) -> None:
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-m", "pip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:  # the with closes pip's pipe, also when a callback raises
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.strip():
                lines.append(line)
                on_line(line)
        code = proc.wait()
    if code != 0:
        mismatches = hash_mismatches(lines) if any(HASH_MISMATCH in ln for ln in lines) else []
        if mismatches:
            named = "; ".join(f"{m.requirement} ({m.filename}) has sha256 {m.got[:16]}..., the lock pins {m.expected[:16]}..."
                              for m in mismatches)
            raise ExternalError(f"pip {args[0]} refused a wheel whose sha256 is not the lock's: {named[:600]}",
                                "the index serves another file under that version: find out why before trusting it; "
                                "make the lock again (envkit lock) only if the new file is trusted")
        first_error = next((ln for ln in lines if ln.startswith("ERROR:")), lines[-1] if lines else "pip failed")
        raise ExternalError(f"pip {args[0]} failed: {first_error[:300]}", fix)
