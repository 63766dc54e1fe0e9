"""Pure: vLLM extracts (data/sources/vllm) -> [[vllm]] rows of matrix.toml.

Per release on PyPI with a Linux x86_64 wheel (yanked releases left out): the torch requirement
and Python range from the wheel's METADATA and tags; the CUDA the PyPI wheel was built with (the
release's envs.py/setup.py default, which setup.py leaves without a +cu suffix); the arch list the
release pipeline compiled it for (else the CMakeLists.txt branch its CUDA takes); the ROCm archs
of CMakeLists.txt; and the wheel builds on GitHub releases that the release's own docs or release
pipeline name (variants.json, from the versioned docs). `machines` says which CPU architectures PyPI
has a wheel of the release for: x86_64 (the row's wheels), and aarch64 where the extract's `files`
list a Linux aarch64 wheel that is not yanked (`aarch64_wheels`, cited in `aarch64_source`). The CUDA
and arch list of an aarch64 wheel are not in the extracts and are not derived.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from ..model.purl import pypi_file
from . import vllm_source
from .vllm_deps import applies

_MINORS = range(7, 16)


def _dep_fits(dep: dict[str, Any], minor: int) -> bool:
    return dep["pure"] or minor in dep["cp"] or (dep["abi3_from"] is not None and dep["abi3_from"] <= minor)


def installable_pythons(spec: Optional[str], deps_doc: dict[str, Any], version: str) -> tuple[Optional[str], list[str], list[str]]:
    """(python specifier, pins that narrowed it, pins PyPI does not serve): the wheel's own range
    cut to the Pythons every exactly pinned dependency publishes a wheel for."""
    from packaging.specifiers import SpecifierSet

    rel = deps_doc.get("releases", {}).get(version)
    if spec is None or rel is None:
        return spec, [], []
    own = SpecifierSet(spec)
    ok, narrowed, missing = [], set(), set()
    for m in _MINORS:
        if Version(f"3.{m}") not in own:
            continue
        fits = True
        for pin in rel["pins"]:
            if not applies(pin["line"], f"3.{m}"):
                continue
            dep = deps_doc["deps"].get(f"{pin['name']}=={pin['version']}")
            if dep is None or not dep["on_pypi"]:
                missing.add(f"{pin['name']}=={pin['version']}")
                fits = False
            elif not _dep_fits(dep, m):
                narrowed.add(f"{pin['name']}=={pin['version']}")
                fits = False
        if fits:
            ok.append(m)
    if missing:
        return spec, [], sorted(missing)
    if not ok:
        return None, sorted(narrowed), []
    if ok != list(range(ok[0], ok[-1] + 1)):
        raise ValueError(f"vllm {version}: installable Pythons 3.{ok} are not contiguous")
    new = f">=3.{ok[0]},<3.{ok[-1] + 1}"
    return (new if narrowed else spec), sorted(narrowed), []


def _python(py: Any) -> Optional[str]:
    if py is None:
        return None
    if isinstance(py, str):
        return py
    minors = sorted(int(p.split(".")[1]) for p in py)
    return f">=3.{minors[0]},<3.{minors[-1] + 1}"


def _archs(r: dict[str, Any]) -> tuple[Optional[list[str]], Optional[str], str]:
    """(sm archs, +PTX arch, where from) of the PyPI wheel."""
    built = r.get("build_arch_list")
    if built and built.get("archs"):
        archs, ptx = [], None
        for a in built["archs"]:
            if a.endswith("+PTX"):
                a = a[:-4]
                ptx = a
            archs.append(a)
        return archs, ptx, f"release pipeline: {built['from']}"
    if r.get("cuda_archs_wheel"):
        return list(r["cuda_archs_wheel"]), None, f"{r.get('cuda_archs_from') or 'CMakeLists.txt'} (the branch of the wheel's CUDA)"
    return None, None, ""


def _arch_tokens(text: str) -> tuple[list[str], Optional[str]]:
    archs, ptx = [], None
    for a in text.split():
        if a.endswith("+PTX"):
            a = ptx = a[:-4]
        archs.append(a)
    return archs, ptx


def variant_archs(e: dict[str, Any], cuda: str) -> Optional[tuple[list[str], Optional[str], str]]:
    """The arch list of the release's build for another CUDA: its release-pipeline step (the list
    it passes, else the default of the Dockerfile it builds), else the CMakeLists.txt branch that
    CUDA takes, else setup.py's list (before CMake)."""
    pipe = e.get("release_pipeline") or {}
    for b in pipe.get("wheel_builds") or []:
        if b.get("platform") != "x86_64" or not b.get("cuda_version") or ".".join(b["cuda_version"].split(".")[:2]) != cuda:
            continue
        if b.get("torch_cuda_arch_list_resolved"):
            archs, ptx = _arch_tokens(b["torch_cuda_arch_list_resolved"])
            return archs, ptx, f"release-pipeline.yaml step {b['label']!r}"
        if b.get("torch_cuda_arch_list") is None:
            seen = ((e.get("dockerfiles") or {}).get(b.get("dockerfile")) or {}).get("target_sees", {}).get("torch_cuda_arch_list")
            if seen:
                archs, ptx = _arch_tokens(seen["value"])
                return archs, ptx, f"{b['dockerfile']} line {seen['line']} (the build stage's default; step {b['label']!r} passes none)"
        return None
    cm = e.get("cmake")
    if cm is not None:
        cv = cm["vars"].get("CUDA_SUPPORTED_ARCHS")
        if cv is None:
            return None
        if not cv["conditional"]:
            return list(cv["list"]), None, "CMakeLists.txt"
        br, _why = vllm_source.select_branch(cv["branches"], cuda)
        return (list(br["list"]), None, "CMakeLists.txt (the branch of this CUDA)") if br is not None else None
    sets = {a["name"]: a for a in (e.get("setup_py") or {}).get("supported_archs") or []}
    nv = sets.get("NVIDIA_SUPPORTED_ARCHS") or sets.get("SUPPORTED_ARCHS")
    return (list(nv["list"]), None, f"setup.py {nv['name']}") if nv else None


def _nameable(v: dict[str, Any], wheel_tag: Optional[str]) -> bool:
    """A build envkit may name: stated by the release (or seen installed), not contradicted, an
    asset of the GitHub release (not only an S3 bucket or another index), with an x86_64 filename
    whose every part is fixed (only the version and the cpXY tag left to fill), and no cpXY-cpXY
    pattern where the release's own wheels are abi3 unless that exact file was seen."""
    fn = v.get("filename") or ""
    if v.get("status") not in ("verified", "documented") or not fn.endswith("_x86_64.whl"):
        return False
    if v.get("location") != "github_release":
        return False
    if re.search(r"<(?!v>|py>)[^>]*>", fn):
        return False
    if wheel_tag == "abi3" and "cp<py>-cp<py>" in fn and v.get("status") != "verified":
        return False
    return True


def _variants(docs_variants: dict[str, Any], version: str, e: Optional[dict[str, Any]],
              wheel_tag: Optional[str] = None) -> list[dict[str, Any]]:
    out = []
    rel = docs_variants.get("releases", {}).get(version, {})
    for v in rel.get("cuda_variants", []):
        if not _nameable(v, wheel_tag):
            continue
        row = {"cuda": v["cuda"], "wheel": v["filename"], "status": v["status"]}
        if v.get("python"):
            row["python"] = list(v["python"])
        va = variant_archs(e, v["cuda"]) if e is not None else None
        if va is not None:
            row["archs"] = va[0]
            if va[1]:
                row["ptx"] = va[1]
        row["source"] = "; ".join(x["url"] for x in v.get("evidence", [])[:2]) + (f"; archs: {va[2]}" if va else "")
        out.append(row)
    return out


def _rocm_wheels(docs_variants: dict[str, Any], version: str, wheel_tag: Optional[str] = None) -> list[dict[str, Any]]:
    out = []
    rel = docs_variants.get("releases", {}).get(version, {})
    for v in rel.get("rocm_variants", []):
        if not _nameable(v, wheel_tag):
            continue
        out.append({"rocm": v["rocm"], "wheel": v["filename"], "status": v["status"],
                    "source": "; ".join(e["url"] for e in v.get("evidence", [])[:2])})
    return out


def _rocm_gpus(r: dict[str, Any], rocm_doc: dict[str, Any]) -> Optional[tuple[list[str], str]]:
    """The AMD GPUs the release supports: the GPU line of its own ROCm install page; where none
    was found, the archs it compiles (HIP_SUPPORTED_ARCHS) less those reports say cannot run it."""
    compiled = list(r.get("rocm_archs") or []) if isinstance(r.get("rocm_archs"), list) else []
    excluded = {x["gfx"] for x in rocm_doc.get("exclusions", []) if x.get("releases") == "all" or r["version"] in x.get("releases", [])}
    rel = rocm_doc.get("releases", {}).get(r["version"])
    if rel and rel.get("status") == "verified" and rel.get("gfx"):
        ev = rel["evidence"][0]
        where = f"{ev['url']}" + (f" ({ev['member']} line {ev['line']})" if ev.get("member") else "")
        return [g for g in rel["gfx"] if g not in excluded], f"the release's ROCm install page: {where}"
    if compiled:
        kept = [g for g in compiled if g not in excluded]
        gone = sorted(excluded & set(compiled))
        why = "HIP_SUPPORTED_ARCHS (no ROCm install page found for this release)" + (
            f"; without {', '.join(gone)} (reports: cannot run vLLM)" if gone else "")
        return (kept, why) if kept else None
    return None


def linux_wheels(files: list[dict[str, Any]], machine: str) -> list[dict[str, Any]]:
    """The release's PyPI wheels for Linux on one CPU architecture (a manylinux*/linux* platform tag ending in
    `_<machine>`), yanked ones left out; the highest build tag first (pip's pick), then by name."""
    out = []
    for f in files:
        if not f["filename"].endswith(".whl") or f.get("yanked"):
            continue
        try:
            _n, _v, build, tags = parse_wheel_filename(f["filename"])
        except InvalidWheelFilename:
            continue
        if any(t.platform.startswith(("manylinux", "linux")) and t.platform.endswith("_" + machine) for t in tags):
            out.append((-(build[0] if build else 0), f["filename"], f))
    return [f for *_k, f in sorted(out, key=lambda x: (x[0], x[1]))]


def aarch64_wheels(e: Optional[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(filenames, purls with their sha256) of the release's Linux aarch64 wheels on PyPI."""
    ws = linux_wheels((e or {}).get("files") or [], "aarch64")
    return [f["filename"] for f in ws], [pypi_file(f["filename"], f["sha256"]) for f in ws]


def derive_row(r: dict[str, Any], docs_variants: dict[str, Any], e: Optional[dict[str, Any]] = None,
               deps_doc: Optional[dict[str, Any]] = None, rocm_doc: Optional[dict[str, Any]] = None,
               cpu_doc: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    deps_doc = deps_doc or {}
    rocm_doc = rocm_doc or {}
    cpu_doc = cpu_doc or {}
    if not r.get("wheels") or r.get("yanked"):
        return None
    archs, ptx, archs_from = _archs(r)
    src = r.get("source") or {}
    sources = []
    if src.get("wheel"):
        sources.append(f"{src['wheel']['citation']} ({', '.join(src['wheel'].get('members', []))})")
    if src.get("sdist"):
        sources.append(f"{src['sdist']['citation']} ({', '.join(src['sdist'].get('members', []))})")
    python, narrowed, missing = installable_pythons(_python(r.get("python")), deps_doc, r["version"])
    if python is None:
        return None
    row: dict[str, Any] = {
        "version": r["version"],
        "torch": r["torch"],
        "python": python,
        "wheels": sorted(r["wheels"], key=lambda w: ("-1-" not in w and "-2-" not in w, w)),
        "wheel_cuda": r.get("wheel_cuda"),
        "wheel_cuda_major": int(r["wheel_cuda_major"]) if r.get("wheel_cuda_major") else None,
    }
    if archs is not None:
        row["cuda_archs"] = archs
        if ptx:
            row["cuda_ptx"] = ptx
        row["archs_from"] = archs_from
    rocm = _rocm_gpus(r, rocm_doc)
    if rocm is not None:
        row["rocm_archs"], row["rocm_archs_from"] = rocm
    variants = _variants(docs_variants, r["version"], e, r.get("wheel_tag"))
    if variants:
        row["variants"] = variants
    rocm_wheels = _rocm_wheels(docs_variants, r["version"], r.get("wheel_tag"))
    if rocm_wheels:
        row["rocm_wheels"] = rocm_wheels
    if narrowed:
        row["python_from"] = "the wheels of its exact pins: " + ", ".join(narrowed)
    if missing:
        row["missing_deps"] = missing
    if deps_doc.get("releases", {}).get(r["version"]):
        sources.append("pins: data/sources/vllm/deps.json")
    cpu = _cpu(cpu_doc, r["version"])
    if cpu is not None:
        row["cpu"] = cpu
    arm, arm_sources = aarch64_wheels(e)
    row["machines"] = ["x86_64", "aarch64"] if arm else ["x86_64"]
    if arm:
        row["aarch64_wheels"] = arm
        row["aarch64_source"] = "; ".join(arm_sources)
    row["source"] = "; ".join(sources)
    return {k: v for k, v in row.items() if v is not None}


def _cpu(cpu_doc: dict[str, Any], version: str) -> Optional[dict[str, Any]]:
    """The release's CPU package (data/sources/vllm/cpu.json): its torch pin and Python from the wheel's own METADATA on
    Linux x86_64, and the dependencies measured to be unusable beside torch +cpu."""
    rel = next((x for x in cpu_doc.get("releases", []) if x["version"] == version), None)
    if rel is None:
        return None
    torch = [Requirement(line) for line in rel["requires_dist"] if Requirement(line).name == "torch" and applies(line, "3.11")]
    if len(torch) != 1:
        return None
    return {"package": cpu_doc["package"], "torch": str(torch[0].specifier), "python": str(SpecifierSet(rel["requires_python"])),
            "wheel": rel["wheel"], "remove": rel["remove"], "apt": rel["apt"], "jit_apt": rel["jit_apt"],
            "source": f"{rel['citation']} (METADATA: Requires-Python {rel['requires_python']}; Requires-Dist "
                      f"{', '.join(line.split(';')[0].strip() for line in rel['requires_dist'])}); remove: {rel['measured']} (measured)"}


def derive(docs: dict[str, Any]) -> list[dict[str, Any]]:
    extracts = [d for name, d in docs.items()
                if name not in ("variants.json", "deps.json", "rocm-gpus.json", "cpu.json") and "version" in d]
    rows = vllm_source.derive(extracts)
    by_version = {e["version"]: e for e in extracts}
    docs_variants = docs.get("variants.json", {})
    deps_doc = docs.get("deps.json", {})
    rocm_doc = docs.get("rocm-gpus.json", {})
    cpu_doc = docs.get("cpu.json", {})
    out = [x for x in (derive_row(r, docs_variants, by_version.get(r["version"]), deps_doc, rocm_doc, cpu_doc) for r in rows)
           if x is not None]
    return sorted(out, key=lambda x: Version(x["version"]), reverse=True)
