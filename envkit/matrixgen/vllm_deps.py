"""The Pythons a vLLM release can really be installed on: its own wheel's tags intersected with the
wheels of every dependency it pins exactly (vllm-flash-attn==2.5.9.post1 had no cp312 wheel, so
vLLM 0.5.3 does not install on 3.12 although its own abi3 wheel would). Adapter: PyPI.

    python -m envkit.matrixgen.vllm_deps [--out data/sources/vllm/deps.json]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from ..model import purl
from . import pypi

LINUX_X86 = {"platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
             "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def applies(line: str, python: str) -> bool:
    """Whether a Requires-Dist line applies on Linux x86_64 CPython `python` (no extras)."""
    try:
        r = Requirement(line)
    except InvalidRequirement:
        return False
    env = {**LINUX_X86, "python_version": python, "python_full_version": f"{python}.0"}
    return r.marker is None or r.marker.evaluate(env)


def exact_pins(requires_dist: list[str], python: str = "") -> list[tuple[str, str, str]]:
    """(name, version, line) of the requirements pinned with == that apply on Linux x86_64 (for
    some Python, or for `python` when given)."""
    out = []
    for line in requires_dist:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            continue
        pys = [python] if python else [f"3.{m}" for m in range(7, 16)]
        if not any(applies(line, p) for p in pys):
            continue
        pins = [s for s in r.specifier if s.operator == "==" and "*" not in s.version]
        if pins and r.name.lower() != "torch":
            out.append((r.name.lower(), pins[0].version, line))
    return out


def python_tags(filenames: list[str]) -> dict[str, Any]:
    """What Pythons a release's Linux x86_64 (or pure) wheels install on: cpXY, abi3 from cpXY, or any."""
    cps: set[int] = set()
    abi3_from, pure = None, False
    for fn in filenames:
        try:
            _, _, _, tags = parse_wheel_filename(fn)
        except InvalidWheelFilename:
            continue
        for t in tags:
            linux_x86 = t.platform.startswith(("manylinux", "linux")) and t.platform.endswith("x86_64")
            if t.platform == "any" or (linux_x86 and t.abi == "none" and re.fullmatch(r"py3\d*", t.interpreter)):
                pure = True
            elif not linux_x86:
                continue
            elif t.abi == "abi3" and re.fullmatch(r"cp3\d+", t.interpreter):
                m = int(t.interpreter[3:])
                abi3_from = m if abi3_from is None else min(abi3_from, m)
            elif re.fullmatch(r"cp3\d+", t.interpreter) and t.abi == t.interpreter:
                cps.add(int(t.interpreter[3:]))
    return {"cp": sorted(cps), "abi3_from": abi3_from, "pure": pure}


def extract(out: Path, say=lambda s: print(s, file=sys.stderr, flush=True)) -> dict[str, Any]:
    releases: dict[str, Any] = {}
    projects: dict[str, dict[str, list[pypi.PyPIFile]]] = {}
    deps: dict[str, Any] = {}
    vfiles = pypi.versions_of("vllm", pypi.files("vllm"))
    for version in sorted(vfiles, key=Version):
        x86 = [f for f in vfiles[version] if f.filename.endswith(".whl") and "x86_64" in f.filename and not f.yanked]
        if not x86:
            continue
        say(f"vllm {version}")
        meta = pypi.metadata_fields(pypi.wheel_metadata(x86[0]))
        pins = exact_pins(meta.get("Requires-Dist", []))
        releases[version] = {"wheel": x86[0].citation, "pins": [{"name": n, "version": v, "line": line} for n, v, line in pins]}
        for name, v, _line in pins:
            key = f"{name}=={v}"
            if key in deps:
                continue
            if name not in projects:
                projects[name] = pypi.versions_of(name, pypi.files(name))
            files = next((fs for ver, fs in projects[name].items() if Version(ver) == Version(v)), [])
            wheels = [f.filename for f in files if f.filename.endswith(".whl")]
            tags = python_tags(wheels)
            if not wheels and files:  # an sdist only: pip builds it for any Python
                tags["pure"] = True
            deps[key] = {"wheels": len(wheels), "on_pypi": bool(files), **tags,
                         "source": f"{purl.pypi(name)} ({v})"}
    doc = {"about": "exact pins of each vLLM wheel (Linux x86_64) and the Pythons the pinned releases publish wheels for",
           "releases": releases, "deps": deps}
    out.write_text(pypi.dump(doc), encoding="utf-8")
    return doc


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m envkit.matrixgen.vllm_deps")
    ap.add_argument("--out", type=Path, default=Path("data/sources/vllm/deps.json"))
    a = ap.parse_args(argv)
    extract(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
