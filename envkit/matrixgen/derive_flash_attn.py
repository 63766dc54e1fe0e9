"""Pure: flash-attn extracts (data/sources/flash-attn/*.json) -> [[flash_attn]] rows of matrix.toml.

The wheel set of a release is its tag's publish workflow matrix minus its excludes, each cell named
the way that workflow names it; a cell whose torch index lookup would fail (a KeyError in the job)
built nothing. setup.py (the sdist's: it is what pip runs) gives the name rule pip uses to look a
wheel up, the Python and nvcc floors, the gencode archs and the ROCm archs; the README the torch
and ROCm floors; the sdist's file list which csrc kernels ship with their setup.py.
"""
from __future__ import annotations

import itertools
from typing import Any, Optional

from packaging.version import Version

from ..model.purl import pypi_file

KERNELS = ("layer_norm", "rotary")


class DeriveError(ValueError):
    pass


def _minor(v: str) -> str:
    p = Version(v)
    return f"{p.major}.{p.minor}"


def _cuda_tag(cuda_version: str, fmt: str) -> str:
    v = Version(cuda_version)
    return str(v.major) if fmt == "major" else f"{v.major}{v.minor}"


def _torch_index(wf: dict[str, Any], torch_minor: str, cuda_version: str) -> Optional[str]:
    ti = wf["torch_index"]
    if torch_minor not in ti["min"] or torch_minor not in ti["max"]:
        return None  # the job's dict lookup raises KeyError: nothing is built
    lo, hi = int(ti["min"][torch_minor]), int(ti["max"][torch_minor])
    v = Version(cuda_version)
    matrix_cuda = int(f"{v.major}{v.minor}")
    if ti["formula"] == "clamp":
        pick = max(min(matrix_cuda, hi), lo)
    elif ti["formula"] == "below-120-min-else-max":
        pick = lo if matrix_cuda < 120 else hi
    else:
        raise DeriveError(f"unknown torch index formula {ti['formula']!r}")
    return f"cu{pick}"


def wheel_cells(wf: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (python, torch, cuda, abi, os) combination the workflow builds, with its wheel's name
    parts and the torch it was built against."""
    axes = wf["axes"]
    keys = ["python-version", "torch-version", "cuda-version", "cxx11_abi", "os"]
    values = [axes.get(k, [""]) for k in keys]
    cells = []
    for combo in itertools.product(*values):
        c = dict(zip(keys, combo))
        if any(all(c.get(k) == v for k, v in ex.items()) for ex in wf["exclude"]):
            continue
        minor = _minor(c["torch-version"])
        index = _torch_index(wf, minor, c["cuda-version"])
        if index is None:
            continue
        cells.append({
            "cuda": _cuda_tag(c["cuda-version"], wf["wheel_cuda"]),
            "torch": c["torch-version"],
            "torch_index": index,
            "nvcc": c["cuda-version"],
            "platform": "linux_aarch64" if c["os"].endswith("-arm") else "linux_x86_64",
            "python": c["python-version"],
            "abi": c["cxx11_abi"] == "TRUE",
        })
    return cells


def group_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cells grouped by wheel build (cuda tag, torch, index, nvcc, platform); one entry per group
    when its Pythons x ABIs are a full product, else one per ABI."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["cuda"], c["torch"], c["torch_index"], c["nvcc"], c["platform"]), []).append(c)
    out = []
    for (cuda, torch, index, nvcc, platform), cs in groups.items():
        pys = sorted({c["python"] for c in cs}, key=Version)
        abis = sorted({c["abi"] for c in cs})
        base = {"cuda": cuda, "torch": torch, "torch_index": index, "nvcc": nvcc}
        if platform != "linux_x86_64":
            base["platform"] = platform
        if len(cs) == len(pys) * len(abis):
            out.append({**base, "python": pys, "abi": abis})
        else:
            for abi in abis:
                out.append({**base, "python": sorted({c["python"] for c in cs if c["abi"] == abi}, key=Version), "abi": [abi]})
    return out


def _archs(setup: dict[str, Any]) -> list[dict[str, str]]:
    default = setup.get("cuda_archs_default")
    out = []
    for g in setup["gencode"]:
        if "switch" in g and default is not None and g["switch"] not in default:
            continue
        out.append({"arch": g["arch"], "nvcc": f">={g.get('nvcc') or setup.get('nvcc_floor') or '11.0'}"})
    return out


def _rule(setup: dict[str, Any]) -> Any:
    wn = setup["wheel_name"]
    if not wn.get("downloads"):
        return "none"
    rule: dict[str, Any] = {"format": wn["format"]}
    if wn["remap"]:
        rule["remap"] = wn["remap"]
    return rule


def derive_row(doc: dict[str, Any]) -> dict[str, Any]:
    version = doc["pypi_version"]
    git, sdist = doc.get("git"), doc.get("sdist")
    setup = (sdist or {}).get("setup") or (git or {}).get("setup")
    readme = (sdist or {}).get("readme") or (git or {}).get("readme")
    if setup is None or readme is None:
        raise DeriveError(f"flash-attn {version}: neither the sdist nor the tag gives setup.py and README facts")
    if setup.get("python_requires") is None or setup.get("nvcc_floor") is None or readme.get("torch_min") is None:
        raise DeriveError(f"flash-attn {version}: python_requires, the nvcc floor or the README torch floor is missing")
    rule = _rule(setup)
    wf = (git or {}).get("workflow")
    sources = []
    row: dict[str, Any] = {"version": version}
    if git:
        row["tag"] = git["tag"]
    row.update({
        "python": setup["python_requires"],
        "torch": f">={readme['torch_min']}",
        "nvcc": f">={setup['nvcc_floor']}",
        "wheel_rule": rule,
    })
    if rule == "none":
        row["wheel_set"] = "none"
    elif wf is None or "axes" not in wf:
        row["wheel_set"] = "unknown"
    else:
        row["wheel_set"] = "workflow"
        row["wheels"] = group_cells(wheel_cells(wf))
    row["archs"] = _archs(setup)
    if setup.get("rocm_archs"):
        if readme.get("rocm_min"):
            row["rocm"] = f">={readme['rocm_min']}"
        row["rocm_archs"] = setup["rocm_archs"]
    if sdist:
        row["kernels"] = [k for k in KERNELS if sdist["kernels"][k]["dir"]]
        row["kernel_setup_py"] = all(sdist["kernels"][k]["setup_py"] for k in row["kernels"]) if row["kernels"] else False
    if git:
        f = git["workflow"]["file"] if git.get("workflow") else None
        if f and "axes" in git["workflow"]:
            sources.append(f"{f['url']}#L{git['workflow']['lines']['matrix']}")
        s = git["setup"]["file"]
        line = git["setup"]["wheel_name"].get("line")
        sources.append(f"{s['url']}#L{line}" if line else s["url"])
        r = git["readme"]["file"]
        sources.append(f"{r['url']}#L{git['readme']['torch_line']}" if git["readme"].get("torch_line") else r["url"])
    if sdist:
        sources.append(pypi_file(sdist["filename"], sdist["sha256"]))
    row["source"] = "; ".join(sources)
    return row


def derive(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows newest first, as matrix.toml lists releases."""
    rows = [derive_row(d) for d in docs if Version(d["pypi_version"]) >= Version("2.0.0")]
    return sorted(rows, key=lambda r: Version(r["version"]), reverse=True)
