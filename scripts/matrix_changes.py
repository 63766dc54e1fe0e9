"""What a new matrix.toml says differently from an older one, counted by category: the figures of
docs/matrix-provenance.md. Loads the older matrix with the loader of its own revision.

    .venv/bin/python scripts/matrix_changes.py [--old-rev 0fba8f2] [--json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.config import matrix_file as new_matrix
from envkit.core.resolve.checks import driver_floor

PYTHONS = [Version(f"3.{m}") for m in range(7, 16)]


def load_old(rev: str):
    tmp = Path(tempfile.mkdtemp(prefix="envkit-old-"))
    pkg = tmp / "envkit_old"
    pkg.mkdir()
    for name in ("matrix.py", "errors.py"):
        (pkg / name).write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:envkit/{name}"], check=True,
                                               capture_output=True, text=True).stdout)
    (pkg / "__init__.py").write_text("__version__ = 'old'\n")
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:matrix.toml"], check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_file_location("envkit_old", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["envkit_old"] = mod
    spec.loader.exec_module(mod)
    from envkit_old import matrix as old_matrix  # type: ignore

    return old_matrix.parse(text, f"matrix.toml@{rev}")


def _pys(spec: SpecifierSet) -> list[str]:
    return [str(p) for p in PYTHONS if spec.contains(p, prereleases=True)]


def _fa_row(f, names: set[str]) -> dict[str, Any]:
    return {"python": _pys(f.python), "torch": str(f.torch), "nvcc": str(f.nvcc), "wheels": sorted(names),
            "kernels": list(f.kernels), "kernel_setup_py": f.kernel_setup_py, "rocm": bool(f.rocm_archs), "confidence": f.confidence}


def _cuda_facts(m) -> dict[str, Any]:
    return {str(c.version): {"release": c.release, "min_driver": str(c.min_driver), "toolkit_driver": str(c.toolkit_driver),
                             "archs": [str(a) for a in c.archs]} for c in m.cuda}


def old_facts(m) -> dict[str, Any]:
    fa = {}
    for f in m.flash_attn:
        names = set()
        if f.wheel_rule != "none":
            for t, tags in f.wheel_torch:
                tv = Version(t)
                for tag in tags:
                    for py in _pys(f.wheel_python & f.python):
                        for abi in ("TRUE", "FALSE"):
                            cp = "cp" + py.replace(".", "")
                            names.add(f"+cu{tag}torch{tv.major}.{tv.minor}cxx11abi{abi}-{cp}")
        fa[str(f.version)] = _fa_row(f, names)
    torch = {}
    for b in m.torch:
        if b.platform in ("cuda", "rocm", "cpu"):
            torch[b.pin] = {"python": _pys(b.python), "archs": sorted(b.archs), "ptx": None if b.ptx is None else str(b.ptx),
                            "cxx11abi": b.cxx11abi, "confidence": b.confidence}
    vllm = {}
    for v in m.vllm:
        vllm[str(v.version)] = {"torch": str(v.torch), "python": _pys(v.python), "cudas": sorted(str(c) for c in v.cuda),
                                "min_cc": str(v.min_cc), "rocm_gpus": sorted(v.rocm_archs), "confidence": v.confidence}
    gpus = {g.name: {"arch": g.arch, "min_driver": None} for g in m.gpus}
    return {"flash_attn": fa, "torch": torch, "vllm": vllm, "gpu": gpus, "cuda": _cuda_facts(m)}


def new_facts(m) -> dict[str, Any]:
    fa = {}
    for f in m.flash_attn:
        names = set()
        for w in f.wheels:
            for py in w.python:
                for abi in w.abi:
                    names.add(f"+cu{w.cuda}torch{w.torch_minor}cxx11abi{str(abi).upper()}-cp{py.major}{py.minor}")
        fa[str(f.version)] = _fa_row(f, names)
    torch = {}
    for b in m.torch:
        if b.platform in ("cuda", "rocm", "cpu"):
            torch[b.pin] = {"python": _pys(b.python), "archs": sorted(b.archs) if b.archs_known else None,
                            "ptx": None if b.ptx is None else str(b.ptx), "cxx11abi": b.cxx11abi, "confidence": b.confidence}
    vllm = {}
    for v in m.vllm:
        cudas = ({str(v.wheel_cuda)} if v.wheel_cuda else set()) | {str(x.toolkit) for x in v.variants}
        vllm[str(v.version)] = {"torch": str(v.torch), "python": _pys(v.python), "cudas": sorted(cudas),
                                "min_cc": str(v.min_cc) if v.min_cc else None, "rocm_gpus": sorted(v.rocm_archs), "confidence": v.confidence}
    gpus = {}
    for g in m.gpus:
        floor = driver_floor(m, g)[0]
        gpus[g.name] = {"arch": g.arch, "min_driver": None if floor is None else str(floor)}
    return {"flash_attn": fa, "torch": torch, "vllm": vllm, "gpu": gpus, "cuda": _cuda_facts(m)}


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in ("flash_attn", "torch", "vllm", "gpu", "cuda"):
        o, n = old[table], new[table]
        added = sorted(set(n) - set(o), key=str)
        removed = sorted(set(o) - set(n), key=str)
        fields: dict[str, int] = {}
        rows_changed = 0
        detail: dict[str, Any] = {}
        for key in set(o) & set(n):
            changed = False
            for f in n[key]:
                if f == "confidence" or f not in o[key]:
                    continue
                if o[key][f] != n[key][f]:
                    fields[f] = fields.get(f, 0) + 1
                    changed = True
            rows_changed += changed
        if table == "flash_attn":
            phantom = missing = 0
            for key in set(o) & set(n):
                phantom += len(set(o[key]["wheels"]) - set(n[key]["wheels"]))
                missing += len(set(n[key]["wheels"]) - set(o[key]["wheels"]))
            detail = {"wheel names the old matrix handed out that were never built": phantom,
                      "built wheels the old matrix missed": missing}
        out[table] = {"rows_before": len(o), "rows_after": len(n), "added": len(added), "removed": len(removed),
                      "rows_corrected": rows_changed, "fields_corrected": dict(sorted(fields.items())),
                      "inferred_before": sum(1 for r in o.values() if r.get("confidence") == "inferred"),
                      "inferred_after": sum(1 for r in n.values() if r.get("confidence") == "inferred"), **detail,
                      "added_examples": [str(x) for x in added[:8]], "removed_examples": [str(x) for x in removed[:8]]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-rev", default="0fba8f2")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = compare(old_facts(load_old(a.old_rev)), new_facts(new_matrix.parse((ROOT / "matrix.toml").read_text(), "matrix.toml")))
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    for table, r in res.items():
        print(f"{table}: {r['rows_before']} -> {r['rows_after']} rows (+{r['added']} -{r['removed']}); "
              f"{r['rows_corrected']} kept rows corrected; inferred {r['inferred_before']} -> {r['inferred_after']}")
        for f, n in r["fields_corrected"].items():
            print(f"    {f}: {n}")
        for k in ("wheel names the old matrix handed out that were never built", "built wheels the old matrix missed"):
            if k in r:
                print(f"    {k}: {r[k]}")
        if r["added_examples"]:
            print(f"    added e.g. {', '.join(r['added_examples'])}")
        if r["removed_examples"]:
            print(f"    removed e.g. {', '.join(r['removed_examples'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
