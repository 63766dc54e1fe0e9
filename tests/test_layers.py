"""The house's layers, read from the imports: each package imports only the layers below it, and the
code copied into images (envkit/inimage) imports only the standard library (torch, transformers and
vLLM only inside functions, where the image has them)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "envkit"

# What each layer may import from envkit (besides itself). The order is the house, ground floor first.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "data": set(),
    "inimage": set(),
    "model": {"errors", "data", "inimage"},
    "core": {"errors", "data", "inimage", "model"},
    "config": {"errors", "data", "inimage", "model", "core"},
    "adapters": {"errors", "data", "inimage", "model", "core", "config"},
    "matrixgen": {"errors", "data", "model", "config", "adapters"},
    "app": {"errors", "data", "inimage", "model", "core", "config", "adapters", "matrixgen"},
    "ui": {"errors", "data", "inimage", "model", "core", "app"},
    "cli": {"errors", "data", "inimage", "model", "app", "ui"},
}
# The libraries outside the standard library each layer may import: the CLI is typer's, the tables rich's,
# the engine docker's, the network requests'; the values and the pure core need packaging only (and the
# core's CI export PyYAML, to write YAML that parses back).
THIRD_PARTY: dict[str, set[str]] = {
    "errors": set(), "data": set(), "inimage": set(),
    "model": {"packaging", "tomli"}, "core": {"packaging", "yaml"}, "config": {"packaging", "tomli"},
    "adapters": {"packaging", "docker", "requests"}, "matrixgen": {"packaging", "requests", "yaml", "tomli"},
    "app": {"packaging"}, "ui": {"packaging", "rich", "matplotlib"}, "cli": {"typer"},
}
# The values and the pure core touch no process, file system, network or thread.
NO_IO = {"model", "core"}
IO_MODULES = {"os", "subprocess", "socket", "http", "shutil", "tempfile", "pickle", "threading", "urllib.request", "requests", "docker"}
# pynvml: probe.py reads NVML through nvidia-ml-py where it imports, its ctypes binding where it does not
IN_IMAGE_LAZY = {"torch", "transformers", "vllm", "flash_attn", "rotary_emb", "dropout_layer_norm", "pynvml"}


def _layer(path: Path, root: Path = PKG) -> str:
    rel = path.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path, root: Path = PKG) -> list[tuple[int, str, bool]]:
    """(line, absolute module, imported at module level) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(("envkit",) + path.relative_to(root).parent.parts)
    top = {id(n) for n in tree.body} | {id(b) for n in tree.body if isinstance(n, ast.Try) for b in n.body + [x for h in n.handlers for x in h.body]}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "envkit":  # `from envkit import app`: the subpackage is what is imported (__version__ is the package's)
                out += [(node.lineno, "envkit" if a.name.startswith("__") else f"envkit.{a.name}", id(node) in top) for a in node.names]
                continue
            out.append((node.lineno, mod, id(node) in top))
    return out


SOURCES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_belongs_to_a_layer():
    assert {_layer(p) for p in SOURCES} - {"__init__", "__main__"} <= set(ALLOWED)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_down(path: Path):
    layer = _layer(path)
    if layer in ("__init__", "__main__"):
        return
    wrong = []
    for line, mod, _top in _imports(path):
        if mod == "envkit" or mod.startswith("envkit."):
            parts = mod.split(".")
            target = parts[1] if len(parts) > 1 else "__init__"
            if target == "__init__" or target == layer:
                continue
            if target not in ALLOWED[layer]:
                wrong.append(f"{path.relative_to(PKG)}:{line} ({layer}) imports {mod} ({target})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", sorted((PKG / "inimage").glob("*.py")), ids=lambda p: p.name)
def test_inimage_code_needs_only_the_standard_library(path: Path):
    stdlib = set(sys.stdlib_module_names)
    wrong = []
    for line, mod, top in _imports(path):
        root = mod.split(".")[0]
        if root in stdlib or root == "__future__":
            continue
        if root in IN_IMAGE_LAZY and not top:
            continue
        wrong.append(f"{path.name}:{line} imports {mod}" + (" at module level" if root in IN_IMAGE_LAZY else ""))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_each_layer_uses_only_its_libraries(path: Path):
    layer = _layer(path)
    if layer in ("__init__", "__main__", "inimage"):  # inimage: its own test below (torch and friends lazily)
        return
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    wrong = []
    for line, mod, _top in _imports(path):
        root = mod.split(".")[0]
        if root == "envkit" or root == "tomllib":
            continue
        if root not in stdlib and root not in THIRD_PARTY[layer]:
            wrong.append(f"{path.relative_to(PKG)}:{line} ({layer}) imports {mod}")
        if layer in NO_IO and (root in IO_MODULES or mod in IO_MODULES):
            wrong.append(f"{path.relative_to(PKG)}:{line} ({layer}: no I/O) imports {mod}")
    assert not wrong, "\n".join(wrong)


def test_the_layer_tests_see_a_wrong_import(tmp_path: Path):
    """A model module that reached up into the app layer, or ran a subprocess, would be caught."""
    bad = tmp_path / "envkit" / "model" / "reaches_up.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("import subprocess\nfrom envkit.app import generate\n")
    layer = _layer(bad, tmp_path / "envkit")
    imported = {m for _l, m, _t in _imports(bad, tmp_path / "envkit")}
    assert layer == "model" and imported == {"subprocess", "envkit.app"}
    assert "app" not in ALLOWED[layer] and "subprocess" in IO_MODULES and layer in NO_IO
