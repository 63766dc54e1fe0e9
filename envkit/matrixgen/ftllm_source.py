"""fastllm's source tags, read from a git clone of ztxz16/fastllm (maintainers' tool; github.com is not needed at run
time). Adapter: git.

    python -m envkit.matrixgen.ftllm_source CLONE [--out data/sources/engines/ftllm-source.json]

At every vW.X.Y.Z tag whose tools/scripts/setup.py names the same release:
- the commit and its date; GitHub's archive of that commit is what a build carries;
- CMakeLists.txt: cmake_minimum_required, every option() with its default, the CUDA_ARCH default when neither
  -DCUDA_ARCH nor CMAKE_CUDA_ARCHITECTURES is given ("native"), whether the CPU code is compiled with -march=native
  and the option that swaps it for the published wheel's flags (MAKE_WHL_X86), the libraries USE_CUDA links, the
  switches whose block links libnuma, the Python package fastllm_tools' POST_BUILD lays out under the build
  directory's tools/;
- tools/scripts/setup.py: install_requires, the literal list the extras are added to, and the `server` extra (list
  literals and their sums, read with ast).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

from .gitrepo import git, show

REPO = "https://github.com/ztxz16/fastllm"
SETUP = "tools/scripts/setup.py"




def _lists(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level NAME = [strings] (+ NAME ...) assignments, evaluated in order."""
    names: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _list_value(node.value, names)
            if value is not None:
                names[node.targets[0].id] = value
    return names


def _list_value(node: ast.expr, names: dict[str, list[str]]) -> Optional[list[str]]:
    if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _list_value(node.left, names), _list_value(node.right, names)
        return None if left is None or right is None else left + right
    return None


def setup_facts(text: str) -> dict[str, Any]:
    """The release setup.py names, its install_requires and its `server` extra."""
    tree = ast.parse(text)
    names = _lists(tree)
    out: dict[str, Any] = {}
    release = re.search(r'"release":\s*\{\s*"name":\s*"ftllm",\s*"version":\s*"([^"]+)"', text)
    plain = re.search(r'\bversion\s*=\s*"([0-9.]+)"', text)
    out["version"] = release.group(1) if release else plain.group(1) if plain else None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for kw in node.keywords:
                if kw.arg == "install_requires":
                    out["requires"] = _list_value(kw.value, names)
                    base = kw.value
                    while isinstance(base, ast.BinOp):
                        base = base.left
                    out["base_requires"] = _list_value(base, names)  # the literal list the extras are added to
                if kw.arg == "extras_require" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "server":
                            out["server_requires"] = _list_value(v, names)
    return out


def cmake_facts(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)", text, re.I)
    out["cmake_minimum"] = m.group(1) if m else None
    out["options"] = {name: default for name, default in re.findall(r'^\s*option\s*\(\s*(\w+)\s+"[^"]*"\s+(ON|OFF)\s*\)', text, re.M)}
    native = re.search(r'set\s*\(\s*CUDA_ARCH\s+"native"\s*\)', text) or re.search(r'CMAKE_CUDA_ARCHITECTURES\s+"native"', text)
    out["cuda_arch_default"] = "native" if native else None
    out["cuda_arch_option"] = "CUDA_ARCH" if re.search(r"\$\{CUDA_ARCH\}", text) else None
    out["cxx_march_native"] = "-march=native" in text
    portable = re.search(r"if\s*\(\s*(MAKE_WHL_\w+)\s*\)\s*\n\s*set\s*\(\s*CMAKE_CXX_FLAGS[^\n]*-mavx2", text)
    out["portable_option"] = portable.group(1) if portable else None
    libs = re.search(r"set\s*\(\s*FASTLLM_LINKED_LIBS\s+\$\{FASTLLM_LINKED_LIBS\}\s+([^)]*\bcublas\b[^)]*)\)", text)
    out["cuda_libs"] = libs.group(1).split() if libs else []
    # the switches whose block links libnuma; it is linked by default when one of them is an option() that is ON
    numa = re.findall(r"if\s*\(\s*(\w+)\s*\)[^\n]*\n(?:[^\n]*\n){0,4}?[^\n]*FASTLLM_LINKED_LIBS[^\n]*\bnuma\b", text)
    out["numa_options"] = sorted(set(numa))
    pkg = re.search(r"copy_directory\s+\$\{CMAKE_CURRENT_SOURCE_DIR\}/tools/fastllm_pytools\s+\$\{CMAKE_BINARY_DIR\}/tools/(\w+)", text)
    out["python_package"] = pkg.group(1) if pkg else None
    return out


def extract(repo: Path) -> dict[str, Any]:
    tags = sorted((t for t in git(repo, "tag", "--list").split() if re.fullmatch(r"v\d+(\.\d+){3}", t)),
                  key=lambda t: tuple(int(p) for p in t[1:].split(".")))
    rows = []
    for tag in tags:
        commit = git(repo, "rev-parse", f"{tag}^{{commit}}").strip()
        date = git(repo, "log", "-1", "--format=%cs", commit).strip()
        cmake, setup = show(repo, commit, "CMakeLists.txt"), show(repo, commit, SETUP)
        if cmake is None or setup is None:
            continue
        s = setup_facts(setup)
        if s.get("version") != tag[1:]:  # a tag whose setup.py names another release is not that release's source
            continue
        rows.append({"tag": tag, "commit": commit, "date": date, **cmake_facts(cmake), **s,
                     "citation": f"{REPO}/blob/{commit}/CMakeLists.txt and {REPO}/blob/{commit}/{SETUP} (tag {tag})"})
    return {"repository": REPO, "head": git(repo, "rev-parse", "HEAD").strip(), "tags": rows}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envkit.matrixgen.ftllm_source", description=__doc__.split("\n\n")[0])
    ap.add_argument("clone", type=Path, help="a git dir of ztxz16/fastllm with its tags")
    ap.add_argument("--out", type=Path, default=Path("data/sources/engines/ftllm-source.json"))
    a = ap.parse_args(argv)
    doc = extract(a.clone)
    a.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{a.out}: {len(doc['tags'])} tags", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
