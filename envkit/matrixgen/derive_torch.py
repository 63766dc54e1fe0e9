"""Pure: torch extracts (data/sources/torch) -> [[torch]] rows of matrix.toml.

Per release: the Pythons from the cp tags of its PyPI wheels; the PyPI build measured (its CUDA
from torch/version.py, its arch list from the CUDA_ARCH_FLAGS string in libtorch_python.so, its
C++ ABI from TorchConfig.cmake and the dynamic symbols); the variants on download.pytorch.org from
the release's build matrix (variants.json), each with the arch list the release's build scripts
(variants.json) or PyTorch's own release statements (release-notes.json) give. A variant whose
arch list no source states is still listed (it exists) without `archs`; the resolver will not put
a GPU on it. The ABI of a non-PyPI variant comes from maintainers' statements (abi.json), else it
is taken as the PyPI build's and the row is marked inferred. `triton` is the triton requirement line of
the PyPI x86_64 wheel's METADATA, verbatim: the triton the release's Linux builds pin.

Each variant also says which CPU architectures it has Linux wheels for (`machines`): x86_64 (every
source above is of the x86_64 builds), and aarch64 where PyPI's own aarch64 wheel of the release is
that build (measured: its torch/version.py `cuda` and local version, cross-checked with the CUDA
runtime its METADATA requires on Linux aarch64; then `aarch64_pypi`, the Pythons of PyPI's aarch64
wheels `aarch64_python`, the measured `aarch64_cxx11abi` and, for a CUDA build, `aarch64_archs`), or where the
release's build matrix lists the variant for linux-aarch64
(variants.json `linux_aarch64`). `aarch64_source` names the wheel or the matrix lines.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

_VERSION_FILE = re.compile(r"\d+\.\d+\.\d+\.json")


class DeriveError(ValueError):
    pass


def _dotted(arch: str) -> Optional[str]:
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if not m:
        return None
    d = m.group(1)
    return f"{d[:-1]}.{d[-1]}"


def cuda_archs(sm: list[str]) -> list[str]:
    """sm_50 sm_90a sm_120 -> 5.0 9.0 12.0 (arch-specific a/f variants fold into their arch)."""
    out: list[str] = []
    for a in sm:
        d = _dotted(a)
        if d is None:
            raise DeriveError(f"not a CUDA arch: {a!r}")
        if d not in out:
            out.append(d)
    return sorted(out, key=lambda x: tuple(int(p) for p in x.split(".")))


def _abi_statement(abi: dict[str, Any], version: str, name: str) -> Optional[tuple[bool, str]]:
    for st in abi.get("statements", []):
        if version in st["releases"]:
            v = st["variants"].get(name, st["variants"].get("*"))
            if v is not None:
                return bool(v), st["evidence"][0]["url"]
    return None


def _notes_variant(notes: dict[str, Any], version: str, name: str) -> Optional[dict[str, Any]]:
    for v in notes.get("releases", {}).get(version, {}).get("variants", []):
        if v.get("name") == name and v.get("status") in ("verified", "derived") and v.get("archs"):
            return v
    return None


def _pypi(ext: dict[str, Any]) -> dict[str, Any]:
    m = ext["measured"][0] if ext.get("measured") else None
    if m is None:
        raise DeriveError(f"torch {ext['version']}: no measured Linux x86_64 wheel")
    flags = m["arch_flags"]["strings"]
    if len(flags) != 1:
        raise DeriveError(f"torch {ext['version']}: {len(flags)} arch-flag strings in libtorch_python.so, expected 1")
    tokens = flags[0].split()
    ptx = [t for t in tokens if t.startswith("compute_")]
    vpy = m["version_py"]
    return {
        "local": vpy["__version__"].split("+", 1)[1] if "+" in vpy["__version__"] else None,
        "cuda": vpy.get("cuda"),
        "archs": cuda_archs([t for t in tokens if t.startswith("sm_")]),
        "ptx": _dotted("sm_" + ptx[-1][len("compute_"):]) if ptx else None,
        "abi": m["cxx11abi"]["value"],
        "citation": m["wheel"]["citation"],
        "triton": _triton(ext),
    }


def _triton(ext: dict[str, Any]) -> Optional[str]:
    """The triton requirement line of the release's PyPI Linux x86_64 wheels' METADATA, verbatim (None: they require none)."""
    lines = {line for m in ext["measured"] for line in m["metadata"].get("requires_dist_triton", [])}
    if len(lines) > 1:
        raise DeriveError(f"torch {ext['version']}: its x86_64 wheels require different tritons: {sorted(lines)}")
    line = next(iter(lines), None)
    if line is not None and Requirement(line).name != "triton":
        raise DeriveError(f"torch {ext['version']}: {line!r} is not a requirement on triton")
    return line


def _linux_aarch64_env(python: str) -> dict[str, str]:
    """The marker environment of CPython `python` on Linux aarch64."""
    return {"platform_machine": "aarch64", "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "python_version": python, "python_full_version": f"{python}.0", "extra": ""}


def _applies(marker: Optional[Marker], env: dict[str, str]) -> bool:
    return marker is None or marker.evaluate(env)


def runtime_cuda(requires_dist: list[str], python: str) -> tuple[Optional[str], list[str]]:
    """(CUDA major.minor, the lines) of the CUDA runtime a wheel's METADATA requires on Linux aarch64: the
    `==` pin of nvidia-cuda-runtime[-cuNN] or of cuda-toolkit[...] (2.11 on), among the lines whose marker
    holds there. (None, []) when none does: a CPU build."""
    env = _linux_aarch64_env(python)
    found: dict[str, list[str]] = {}
    for line in requires_dist:
        req = Requirement(line)
        if not re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?|cuda-toolkit", req.name) or not _applies(req.marker, env):
            continue
        pins = [sp.version for sp in req.specifier if sp.operator == "=="]
        if len(pins) != 1:
            raise DeriveError(f"{line!r}: the CUDA runtime is not pinned with one ==")
        rel = Version(pins[0]).release
        found.setdefault(f"{rel[0]}.{rel[1]}", []).append(line)
    if len(found) > 1:
        raise DeriveError(f"the METADATA requires CUDA runtimes {sorted(found)} on Linux aarch64")
    return next(iter(found.items()), (None, []))


def _aarch64_pypi(ext: dict[str, Any]) -> Optional[dict[str, Any]]:
    """PyPI's Linux aarch64 build of the release, as measured (None when PyPI has no aarch64 wheel)."""
    measured = ext.get("linux_aarch64_measured") or []
    if not measured:
        return None
    builds = []
    for m in measured:
        vpy = m["version_py"]
        if vpy.get("hip") or vpy.get("rocm"):
            raise DeriveError(f"torch {ext['version']}: the aarch64 wheel {m['wheel']['filename']} is a ROCm build")
        tags = parse_wheel_filename(m["wheel"]["filename"])[3]
        cp = {t.interpreter for t in tags}
        if len(cp) != 1 or not (mm := re.fullmatch(r"cp3(\d+)", cp.pop())):
            raise DeriveError(f"torch {ext['version']}: {m['wheel']['filename']} is not one CPython's wheel")
        cuda, lines = runtime_cuda(m["metadata"]["requires_dist_cuda"], f"3.{mm.group(1)}")
        said = vpy.get("cuda")
        if (said is None) != (cuda is None) or (said is not None and Version(said).release[:2] != Version(str(cuda)).release[:2]):
            raise DeriveError(f"torch {ext['version']}: {m['wheel']['filename']}: version.py says cuda {said!r}, its METADATA "
                              f"requires the CUDA {cuda} runtime on Linux aarch64")
        flags = m["arch_flags"]["strings"]
        archs = None
        if said is not None:
            if len(flags) != 1:
                raise DeriveError(f"torch {ext['version']}: {len(flags)} arch-flag strings in the aarch64 wheel, expected 1")
            tokens = flags[0].split()
            if any(t.startswith("compute_") for t in tokens):
                raise DeriveError(f"torch {ext['version']}: the aarch64 wheel carries PTX ({flags[0]}); aarch64 PTX is not modelled")
            archs = cuda_archs(tokens)
        elif flags:
            raise DeriveError(f"torch {ext['version']}: the aarch64 CPU wheel carries CUDA arch flags {flags}")
        builds.append({"cuda": said, "local": vpy["__version__"].split("+", 1)[1] if "+" in vpy["__version__"] else None,
                       "archs": archs, "abi": m["cxx11abi"]["value"], "citation": m["wheel"]["citation"], "requires": lines})
    first = builds[0]
    if any((b["cuda"], b["local"], b["archs"], b["abi"]) != (first["cuda"], first["local"], first["archs"], first["abi"])
           for b in builds[1:]):
        raise DeriveError(f"torch {ext['version']}: its aarch64 wheels of different build tags are different builds")
    return {**first, "python": _python(ext, "linux_aarch64_wheels")}


def _aarch64_index(listing: Optional[dict[str, Any]]) -> tuple[set[str], Optional[str]]:
    """The variant names the release's build matrix lists for linux-aarch64, and the URL of those lines."""
    al = (listing or {}).get("linux_aarch64") or {}
    if al.get("status") != "verified":
        return set(), None
    return {v["name"] for v in al["variants"]}, al["evidence"]["url_at_commit"]


def _machines(row: dict[str, Any], name: str, a64: Optional[dict[str, Any]], index: tuple[set[str], Optional[str]]) -> bool:
    """Add the row's machines (and its aarch64 facts); True when PyPI's aarch64 wheel is this build."""
    sources: list[str] = []
    on_pypi = a64 is not None and (
        (a64["cuda"] is None and name == "cpu" and a64["local"] in (None, "cpu"))
        or (a64["cuda"] is not None and row.get("cuda") is not None and a64["local"] == name
            and Version(row["cuda"]).release[:2] == Version(a64["cuda"]).release[:2]))
    if on_pypi:
        assert a64 is not None
        sources.append(a64["citation"])
    names, url = index
    if name in names and url is not None:
        sources.append(url)
    row["machines"] = ["x86_64", "aarch64"] if sources else ["x86_64"]
    if on_pypi:
        assert a64 is not None
        row["aarch64_pypi"] = True
        row["aarch64_python"] = a64["python"]
        if a64["archs"] is not None:
            row["aarch64_archs"] = a64["archs"]
        if a64["abi"] is not None:
            row["aarch64_cxx11abi"] = bool(a64["abi"])
    if sources:
        row["aarch64_source"] = "; ".join(sources)
    return on_pypi


def _python(ext: dict[str, Any], wheels: str = "linux_x86_64_wheels") -> str:
    minors = sorted({int(m.group(1)) for f in ext[wheels] for t in f["abi_tags"]
                     if (m := re.fullmatch(r"cp3(\d+)m?", t))})
    if not minors:
        raise DeriveError(f"torch {ext['version']}: no CPython wheel tags")
    for a, b in zip(minors, minors[1:]):
        if b != a + 1:
            raise DeriveError(f"torch {ext['version']}: Python wheels skip 3.{a + 1}")
    return f">=3.{minors[0]},<3.{minors[-1] + 1}"


def _variant_archs(row: dict[str, Any], v: dict[str, Any], pypi: dict[str, Any], notes: dict[str, Any], version: str,
                   is_rocm: bool, inferred: list[str], sources: list[str]) -> None:
    """A published variant's arch list (and PTX): the PyPI wheel's measured flags, the build scripts' list, else the
    release notes' (derived from dated pull requests where they say so)."""
    name = v["name"]
    if v.get("on_pypi"):
        row["pypi"] = True
        row["archs"], ptx = pypi["archs"], pypi["ptx"]
        if ptx:
            row["ptx"] = ptx
        sources.append(pypi["citation"])
    elif v.get("status") == "verified" and v.get("archs"):
        row["archs"] = sorted(set(v["archs"]), key=_sort_key) if is_rocm else cuda_archs(v["archs"])
        if v.get("ptx"):
            row["ptx"] = v["ptx"]
        sources.extend(e["url_at_commit"] for e in v.get("evidence", []) if "url_at_commit" in e)
    else:
        n = _notes_variant(notes, version, name)
        if n is not None:
            row["archs"] = sorted(set(n["archs"]), key=_sort_key) if is_rocm else cuda_archs(
                [a if a.startswith("sm_") else "sm_" + a.replace(".", "") for a in n["archs"]])
            if n.get("ptx"):
                row["ptx"] = n["ptx"]
            sources.extend(e["url"] for e in n.get("evidence", []))
            if n["status"] == "derived":
                inferred.append("arch list derived from dated pull requests")
        else:
            inferred.append("no source states its arch list")
            sources.extend(e["url_at_commit"] for e in v.get("evidence", []) if "url_at_commit" in e)


def _variant_abi(row: dict[str, Any], v: dict[str, Any], pypi: dict[str, Any], abi: dict[str, Any], version: str,
                 inferred: list[str], sources: list[str]) -> None:
    """A variant's C++ ABI: measured in the PyPI build, else a statement about the variant, else the PyPI build's (inferred)."""
    name = v["name"]
    if v.get("on_pypi"):
        if pypi["abi"] is None:
            raise DeriveError(f"torch {version}: the PyPI build's C++ ABI was not measured")
        row["cxx11abi"] = bool(pypi["abi"])
    else:
        st = _abi_statement(abi, version, name)
        if st is not None:
            row["cxx11abi"] = st[0]
            sources.append(st[1])
        else:
            row["cxx11abi"] = bool(pypi["abi"])
            row["cxx11abi_inferred"] = True
            inferred.append("C++ ABI taken from the release's PyPI build")


def derive_release(ext: dict[str, Any], listing: Optional[dict[str, Any]], notes: dict[str, Any], abi: dict[str, Any]) -> dict[str, Any]:
    version = ext["version"]
    pypi = _pypi(ext)
    a64 = _aarch64_pypi(ext)
    index = _aarch64_index(listing)
    a64_matched = False
    variants: list[dict[str, Any]] = []
    seen: set[str] = set()
    published = listing["variants"] if listing else []
    if not any(v.get("on_pypi") for v in published):
        published = [{"name": pypi["local"], "cuda": pypi["cuda"], "on_pypi": True, "published": "verified", "status": "verified"},
                     *published]
    for v in published:
        name = v["name"]
        if name in seen or v.get("published") != "verified":
            continue
        seen.add(name)
        row: dict[str, Any] = {"name": name}
        is_rocm = name.startswith("rocm")
        if is_rocm:
            row["rocm"] = v.get("rocm") or name[4:]
        else:
            row["cuda"] = v.get("cuda")
        inferred: list[str] = []
        sources: list[str] = []
        _variant_archs(row, v, pypi, notes, version, is_rocm, inferred, sources)
        _variant_abi(row, v, pypi, abi, version, inferred, sources)
        a64_matched |= _machines(row, name, a64, index)
        if inferred:
            row["confidence"] = "inferred"
            row["note"] = "; ".join(inferred)
        row["source"] = "; ".join(dict.fromkeys(u for u in sources if not _moving(u)))
        variants.append(row)
    def order(r: dict[str, Any]) -> tuple[int, list[int]]:
        platform = r.get("cuda") or r.get("rocm")
        if platform is None:
            raise DeriveError(f"torch {version}: variant {r['name']} names neither a CUDA nor a ROCm version")
        return (0 if "cuda" in r else 1, [-x for x in Version(platform).release])

    variants.sort(key=order)
    cpu = _cpu(version, pypi, abi)
    a64_matched |= _machines(cpu, "cpu", a64, index)
    cpu = {k: cpu[k] for k in ("name", "cxx11abi", "cxx11abi_inferred", "machines", "aarch64_pypi", "aarch64_python",
                               "aarch64_cxx11abi", "aarch64_source", "confidence", "note", "source") if k in cpu}
    if a64 is not None and not a64_matched:
        raise DeriveError(f"torch {version}: PyPI's aarch64 wheel ({a64['citation']}) is the "
                          f"{'+' + a64['local'] if a64['local'] else 'CPU'} build, which no variant of the release is")
    return {
        "versions": [version],
        "python": _python(ext),
        **({"triton": pypi["triton"]} if pypi["triton"] else {}),
        "source": pypi["citation"] + (f"; {listing['listing']['evidence']['url_at_commit']}"
                                      if listing and listing.get("listing", {}).get("evidence") else ""),
        "variants": variants + [cpu],
    }


def _cpu(version: str, pypi: dict[str, Any], abi: dict[str, Any]) -> dict[str, Any]:
    st = _abi_statement(abi, version, "cpu")
    if st is not None:
        return {"name": "cpu", "cxx11abi": st[0], "source": st[1]}
    return {"name": "cpu", "cxx11abi": bool(pypi["abi"]), "cxx11abi_inferred": True, "confidence": "inferred",
            "note": "C++ ABI taken from the release's PyPI build", "source": pypi["citation"]}


def _moving(url: str) -> bool:
    """A URL of a branch head (blob/main, blob/master): not a source at a commit."""
    return re.search(r"/(blob|tree)/(main|master)/", url) is not None


def _sort_key(a: str) -> tuple:
    m = re.fullmatch(r"gfx(\d+)([0-9a-f]*)", a)
    return (int(m.group(1)[:2] if len(m.group(1)) > 3 else m.group(1)[:1]), a) if m else (0, a)


def derive(docs: dict[str, Any]) -> list[dict[str, Any]]:
    exts = [d for name, d in docs.items() if _VERSION_FILE.fullmatch(name)]
    listings = {r["version"]: r for r in docs.get("variants.json", {}).get("releases", [])}
    notes = docs.get("release-notes.json", {})
    abi = docs.get("abi.json", {})
    rows = [derive_release(e, listings.get(e["version"]), notes, abi) for e in exts]
    return sorted(rows, key=lambda r: Version(r["versions"][0]), reverse=True)
