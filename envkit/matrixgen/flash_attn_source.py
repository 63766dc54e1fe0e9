"""flash-attn facts, extracted from a git clone of Dao-AILab/flash-attention at every release tag and
from the release's sdist on PyPI (adapter: git, PyPI).

Nothing of upstream's files is stored: each extract holds the facts as data (the build matrix of the
tag's publish workflow, the wheel-name rule of its setup.py interpreted into a small table, the
gencode archs with their nvcc floors, README requirements, which csrc kernels exist) and names the
exact file it read: URL at the commit, git blob sha, line numbers.

From the sdist (the file pip builds from; its sha256 is checked on download) two more keys, read
statically by `flash_attn_kernels` and not (yet) read by the derivation of matrix.toml:

- `sdist.cuda_extension`: the `flash_attn_2_cuda` CUDAExtension (older setup.py: `flash_attn_cuda`)
  on setup.py's CUDA path (the ROCm branch's extension of the same name is left out): `name`,
  `file`/`line` of the call, `guard` (the if-tests on the way, as written), `computed` (false: a
  literal list), and `sources` in setup.py's order, each `{path, in_sdist, blob}` (blob: the git blob
  sha of the sdist's member). A .cu adds its name's parts, `kind` (fwd, fwd_split, bwd), `hdim`,
  `dtype` (fp16, bf16, fp8 for an e4m3 name), `causal` (true: `_causal`; false: no `_causal` but a
  `_causal` sibling in the list; null: the release does not split causal), `arch` (sm80...; all null
  for a name outside the scheme), and `specialization`, read from the file's text without its
  comments: `form` (specialization `template<> ... {` or instantiation `template ...;`), `returns`,
  `function`, `template_args` and `params` as written (whitespace runs made one space), `namespace`,
  `line`. `name_text_disagreements` lists kernels whose name and text differ. Computed sources
  (names, +, loops, comprehensions, glob against the sdist's member list) add `assumed_env` (the
  os.getenv defaults they rest on) and `globs` (pattern, line, files matched); sources a static
  reading cannot know are `"sources": null` with `unreadable` saying why.
- `sdist.hopper`: `dir`, `setup_py` (the sdist carries hopper/, FlashAttention 3); where it has
  hopper/setup.py: `package` (setup(name=...) with the line that spells it), `extension` (its
  CUDAExtension's name with the line; `sources`: how many it lists in a default build, how many the
  sdist ships, `assumed_env`, `by_arch_suffix`), `gencode` (each `cc_flag.append("arch=...")` with its
  line), `per_file_rules` (the ninja rule a source gets by its name's ending), `nvcc_floor`.

    python -m envkit.matrixgen.flash_attn_source extract --repo CLONE [--out data/sources/flash-attn]
"""
from __future__ import annotations

import ast
import posixpath
import re
import sys
from pathlib import Path
from typing import Any, Optional

from packaging.version import Version

from . import flash_attn_kernels as fk
from . import pypi
from .gitrepo import git, show

REPO_URL = "https://github.com/Dao-AILab/flash-attention"
PYPI_NAME = "flash-attn"
WORKFLOW = ".github/workflows/publish.yml"


class Unrecognised(Exception):
    """The source has a shape the extractor does not know: extraction stops rather than guess."""


def _file_ref(repo: Path, commit: str, tag: str, path: str) -> dict[str, str]:
    blob = git(repo, "rev-parse", f"{tag}:{path}").strip()
    return {"path": path, "blob": blob, "url": f"{REPO_URL}/blob/{commit}/{path}"}


def release_tags(repo: Path) -> list[str]:
    tags = []
    for t in git(repo, "tag").split():
        if re.fullmatch(r"v2\.\d+\.\d+(\.post\d+)?", t):
            tags.append(t)
    return sorted(tags, key=lambda t: Version(t[1:]))


# ---------------------------------------------------------------- publish.yml

def _line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    return 0


def parse_workflow(text: str) -> dict[str, Any]:
    """The wheel build matrix of a publish.yml of the single-job shape used through v2.8.3.post1."""
    import yaml

    doc = yaml.safe_load(text)
    jobs = doc.get("jobs") or {}
    build = jobs.get("build_wheels")
    if not isinstance(build, dict) or "strategy" not in build:
        raise Unrecognised("no build_wheels job with a strategy matrix")
    if "uses" in build:
        raise Unrecognised("build_wheels calls a reusable workflow (the post-2.8.3 shape)")
    matrix = build["strategy"]["matrix"]
    axes = {k: [str(x) for x in v] for k, v in matrix.items() if k not in ("exclude", "include")}
    for key in ("python-version", "torch-version", "cuda-version", "cxx11_abi"):
        if key not in axes:
            raise Unrecognised(f"matrix has no {key}")
    exclude = [{k: str(v) for k, v in e.items()} for e in matrix.get("exclude") or []]
    if matrix.get("include"):
        raise Unrecognised("matrix has include entries")

    steps = "\n".join(str(s.get("run", "")) for s in build.get("steps", []) if isinstance(s, dict))
    tmp = re.search(r"tmpname=cu\$\{(\w+)\}torch\$\{MATRIX_TORCH_VERSION\}cxx11abi\$\{\{ ?matrix\.cxx11_abi ?\}\}", steps)
    if not tmp:
        raise Unrecognised("no tmpname=cu${...}torch${MATRIX_TORCH_VERSION}cxx11abi${{ matrix.cxx11_abi }} line")
    var = tmp.group(1)
    awk = {m.group(1): m.group(2) for m in re.finditer(
        r"echo \"(\w+)=\$\(echo \$\{\{ ?matrix\.cuda-version ?\}\} \| awk -F \\\. \{'print ([^']+)'\}\)\"", steps)}
    fields = {"$1 $2": "major_minor", "$1": "major"}
    if var not in awk or awk[var] not in fields:
        raise Unrecognised(f"cannot tell how {var} is computed from matrix.cuda-version")
    if not re.search(r"sed \"s/-/\+\$tmpname-/2\"", steps):
        raise Unrecognised("the wheel is not renamed with sed s/-/+$tmpname-/2")

    idx = re.search(r"minv = (\{[^}]*\})[^m]*maxv = (\{[^}]*\})", steps, re.S)
    if not idx:
        raise Unrecognised("no minv/maxv torch index tables")
    minv, maxv = ast.literal_eval(idx.group(1)), ast.literal_eval(idx.group(2))
    if re.search(r"print\(max\(min\(int\(\w+\[?'?\w*'?\]?(?:\['MATRIX_CUDA_VERSION'\])?\), maxv\), minv\)\)", steps) or \
            "print(max(min(int(" in steps and "maxv), minv))" in steps:
        formula = "clamp"
    elif re.search(r"print\(minv if int\([^)]*MATRIX_CUDA_VERSION[^)]*\) < 120 else maxv\)", steps):
        formula = "below-120-min-else-max"
    else:
        raise Unrecognised("unknown TORCH_CUDA_VERSION formula")
    if "index-url https://download.pytorch.org/whl/cu${TORCH_CUDA_VERSION}" not in steps:
        raise Unrecognised("torch is not installed from download.pytorch.org/whl/cu${TORCH_CUDA_VERSION}")
    return {
        "axes": axes,
        "exclude": exclude,
        "wheel_cuda": fields[awk[var]],
        "torch_index": {"min": {k: str(v) for k, v in minv.items()}, "max": {k: str(v) for k, v in maxv.items()}, "formula": formula},
        "lines": {
            "matrix": _line_of(text, "python-version: ["),
            "tmpname": _line_of(text, "tmpname="),
            "torch_index": _line_of(text, "minv = "),
        },
    }


# ---------------------------------------------------------------- setup.py

def _const_version(node: ast.AST) -> Optional[str]:
    """Version("11.8") / parse("11.8") -> "11.8"."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Version", "parse") \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def _find_wheel_function(tree: ast.Module) -> Optional[ast.FunctionDef]:
    """The function that builds the `+cu...torch...` wheel filename."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            src = ast.dump(node)
            if "wheel_filename" in src and "torch_cuda_version" in src:
                return node
    return None


def _cond(test: ast.AST) -> dict[str, Any]:
    """A condition of the wheel-name code as data: cuda_major == N, torch minor == X.Y."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        out: dict[str, Any] = {}
        for v in test.values:
            out.update(_cond(v))
        if "torch_major" in out and "torch_minor" in out:
            out["torch"] = f"{out.pop('torch_major')}.{out.pop('torch_minor')}"
        return out
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) \
            and isinstance(test.left, ast.Attribute) and isinstance(test.left.value, ast.Name) \
            and isinstance(test.comparators[0], ast.Constant):
        owner, attr, value = test.left.value.id, test.left.attr, test.comparators[0].value
        if owner == "torch_cuda_version" and attr == "major" and isinstance(value, int):
            return {"cuda_major": int(value)}
        if owner == "torch_version_raw" and attr in ("major", "minor") and isinstance(value, int):
            return {f"torch_{attr}": int(value)}
    raise Unrecognised(f"unknown condition in the wheel-name code: {ast.unparse(test)}")


def _is_rocm_test(test: ast.AST) -> bool:
    return isinstance(test, ast.Name) and test.id in ("IS_ROCM", "IS_HIP_EXTENSION")


def _assigns_name(stmts: list[ast.stmt]) -> bool:
    names = {"torch_cuda_version", "cuda_version"}
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Store)
               for st in stmts for n in ast.walk(st))


def wheel_name_rule(tree: ast.Module) -> dict[str, Any]:  # noqa: C901 (an interpreter: docs/architecture.md)
    """How setup.py names the wheel it downloads: the CUDA part as (format, remap rules). The remap
    is first-match-wins over the value the code leaves in torch_cuda_version (a later assignment
    overrides an earlier one, as Python runs it); no match keeps torch.version.cuda."""
    fn = _find_wheel_function(tree)
    if fn is None:
        return {"downloads": False}
    fmt: Optional[str] = None

    def catch_all(rules: list[dict[str, Any]]) -> bool:
        return any(set(r) == {"to"} for r in rules)

    def block(stmts: list[ast.stmt]) -> list[dict[str, Any]]:
        """Rules for the value after running stmts: each later statement's rules come first."""
        nonlocal fmt
        rules: list[dict[str, Any]] = []
        for st in stmts:
            mine: list[dict[str, Any]] = []
            if isinstance(st, ast.If):
                if _is_rocm_test(st.test) or not _assigns_name(st.body):
                    mine = block(st.orelse)
                else:
                    cond = _cond(st.test)
                    body = [{**r, **cond} for r in block(st.body)]
                    other = block(st.orelse)
                    if other and not catch_all(block(st.body)):
                        raise Unrecognised("an if/else whose if-branch may leave the value unchanged: the else-branch cannot be expressed")
                    mine = body + other
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                name, value = st.targets[0].id, st.value
                if name == "torch_cuda_version":
                    if _const_version(value):
                        mine = [{"to": _const_version(value)}]
                    elif isinstance(value, ast.IfExp) and _const_version(value.body) and _const_version(value.orelse):
                        mine = [{**_cond(value.test), "to": _const_version(value.body)}, {"to": _const_version(value.orelse)}]
                    elif ast.unparse(value) != "parse(torch.version.cuda)":
                        raise Unrecognised(f"unknown torch_cuda_version assignment: {ast.unparse(value)}")
                    else:
                        rules = []  # reset to torch.version.cuda
                        continue
                elif name == "cuda_version" and isinstance(value, ast.JoinedStr):
                    parts = [ast.unparse(v.value) for v in value.values if isinstance(v, ast.FormattedValue)]
                    if parts == ["torch_cuda_version.major", "torch_cuda_version.minor"]:
                        fmt = "major_minor"
                    elif parts == ["torch_cuda_version.major"]:
                        fmt = "major"
                    else:
                        raise Unrecognised(f"unknown cuda_version format: {ast.unparse(value)}")
            elif isinstance(st, ast.Try):
                if any(_assigns_name(h.body) for h in st.handlers) or _assigns_name(st.finalbody):
                    raise Unrecognised("the wheel-name code assigns inside an except or finally block")
                mine = block(st.body + st.orelse)
            elif isinstance(st, ast.With):
                mine = block(st.body)
            if mine:
                if rules and any("cuda_major" in r for r in mine):
                    raise Unrecognised("a test of the CUDA major after an earlier remap: the rules would need composing")
                rules = mine + rules
        return rules

    remap = block(fn.body)
    if fmt is None:
        raise Unrecognised("no cuda_version = f'...' in the wheel-name code")
    cut = next((i for i, r in enumerate(remap) if set(r) == {"to"}), None)  # rules after a catch-all never fire
    if cut is not None:
        remap = remap[: cut + 1]
    return {"downloads": True, "format": fmt, "remap": remap, "line": fn.lineno}


def _gencodes(tree: ast.Module) -> list[dict[str, str]]:
    """cc_flag.append("arch=compute_X,code=sm_X") calls with their nvcc floor and arch switch."""
    out: list[dict[str, str]] = []

    def floor_of(test: ast.AST, acc: dict[str, str]) -> None:
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            for v in test.values:
                floor_of(v, acc)
        elif isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if isinstance(left, ast.Name) and left.id == "bare_metal_version" and isinstance(op, ast.GtE) \
                    and (floor := _const_version(right)):
                acc["nvcc"] = floor
            elif isinstance(left, ast.Constant) and isinstance(op, ast.In) and isinstance(right, ast.Call) \
                    and isinstance(right.func, ast.Name) and right.func.id == "cuda_archs":
                acc["switch"] = str(left.value)

    def walk(stmts: list[ast.stmt], acc: dict[str, str]) -> None:
        for st in stmts:
            if isinstance(st, ast.If):
                inner = dict(acc)
                floor_of(st.test, inner)
                walk(st.body, inner)
                walk(st.orelse, acc)
            elif isinstance(st, (ast.For, ast.With, ast.Try, ast.FunctionDef)):
                walk(st.body, acc)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                call = st.value
                if isinstance(call.func, ast.Attribute) and call.func.attr == "append" and isinstance(call.func.value, ast.Name) \
                        and call.func.value.id == "cc_flag" and call.args and isinstance(call.args[0], ast.Constant):
                    m = re.fullmatch(r"arch=compute_(\d+)a?,code=sm_(\d+)a?", str(call.args[0].value))
                    if m:
                        d = m.group(2)
                        out.append({"arch": f"{d[:-1]}.{d[-1]}", **acc})

    walk(tree.body, {})
    seen, uniq = set(), []
    for g in out:
        key = (g["arch"], g.get("nvcc"), g.get("switch"))
        if key not in seen:
            seen.add(key)
            uniq.append(g)
    return uniq


def _string_default(tree: ast.Module, env: str) -> Optional[str]:
    """os.getenv("ENV", "default") -> default."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("getenv", "get") \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value == env \
                and isinstance(node.args[1], ast.Constant):
            return str(node.args[1].value)
    return None


def _keyword_str(tree: ast.Module, name: str) -> Optional[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == name and isinstance(node.value, ast.Constant):
            return str(node.value.value)
    return None


def _list_assigned(tree: ast.Module, name: str) -> Optional[list[str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, ast.List):
            return [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
    return None


def _nvcc_floor(tree: ast.Module) -> Optional[str]:
    """`if bare_metal_version < Version("X"): raise ...` -> X."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                and isinstance(node.test.ops[0], ast.Lt) and isinstance(node.test.left, ast.Name) \
                and node.test.left.id == "bare_metal_version" and any(isinstance(s, ast.Raise) for s in node.body):
            return _const_version(node.test.comparators[0])
    return None


def _platform(tree: ast.Module) -> Optional[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "get_platform":
            src = ast.unparse(node)
            if "platform.uname().machine" in src:
                return "linux_{machine}"
            if "'linux_x86_64'" in src or '"linux_x86_64"' in src:
                return "linux_x86_64"
    return None


def parse_setup(text: str) -> dict[str, Any]:
    tree = ast.parse(text)
    archs_default = _string_default(tree, "FLASH_ATTN_CUDA_ARCHS")
    rocm = _list_assigned(tree, "allowed_archs")
    return {
        "python_requires": _keyword_str(tree, "python_requires"),
        "nvcc_floor": _nvcc_floor(tree),
        "gencode": _gencodes(tree),
        "cuda_archs_default": archs_default.split(";") if archs_default else None,
        "wheel_name": wheel_name_rule(tree),
        "platform": _platform(tree),
        "rocm_archs": None if rocm is None else [a for a in rocm if a != "native"],
    }


def parse_readme(text: str) -> dict[str, Optional[str | int]]:
    torch = re.search(r"^- PyTorch (\d+\.\d+(?:\.\d+)?)(?: and above|\+)", text, re.M)
    rocm = re.search(r"^- ROCm (\d+\.\d+)(?: and above|\+)", text, re.M)
    return {
        "torch_min": torch.group(1) if torch else None,
        "torch_line": _line_of(text, torch.group(0)) if torch else None,
        "rocm_min": rocm.group(1) if rocm else None,
        "rocm_line": _line_of(text, rocm.group(0)) if rocm else None,
    }


def package_version(init_py: str) -> str:
    m = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", init_py, re.M)
    if not m:
        raise Unrecognised("no __version__ in flash_attn/__init__.py")
    return m.group(1)


KERNEL_DIRS = ("layer_norm", "rotary")


def extract_tag(repo: Path, tag: str) -> dict[str, Any]:
    commit = git(repo, "rev-list", "-n", "1", tag).strip()
    out: dict[str, Any] = {"project": "flash-attn", "tag": tag, "commit": commit,
                           "version": package_version(show(repo, tag, "flash_attn/__init__.py") or "")}
    setup = show(repo, tag, "setup.py")
    out["setup"] = {"file": _file_ref(repo, commit, tag, "setup.py"), **parse_setup(setup or "")}
    wf = show(repo, tag, WORKFLOW)
    if wf is None:
        out["workflow"] = None
    else:
        try:
            facts = parse_workflow(wf)
        except Unrecognised as exc:
            if out["setup"]["wheel_name"]["downloads"]:
                raise
            facts = {"unrecognised": str(exc)}  # setup.py never downloads a wheel: its names do not matter
        out["workflow"] = {"file": _file_ref(repo, commit, tag, WORKFLOW), **facts}
    readme = show(repo, tag, "README.md") or ""
    out["readme"] = {"file": _file_ref(repo, commit, tag, "README.md"), **parse_readme(readme)}
    tree = set(git(repo, "ls-tree", "-r", "--name-only", tag, "csrc/").split())
    out["tree"] = {k: {"dir": any(p.startswith(f"csrc/{k}/") for p in tree), "setup_py": f"csrc/{k}/setup.py" in tree}
                   for k in KERNEL_DIRS}
    return out


def extract_sdist(version: str, fs: list[pypi.PyPIFile]) -> Optional[dict[str, Any]]:
    """The release's sdist on PyPI: which csrc kernels (and their setup.py) it ships, and its own
    setup.py and README read the same way as the tag's (the sdist is what pip builds)."""
    sd = [f for f in fs if f.filename.endswith((".tar.gz", ".zip"))]
    if not sd:
        return None
    f = sd[0]
    names = pypi.sdist_listing(f)
    members = pypi.sdist_members(f, lambda rel: rel in ("setup.py", "README.md", "hopper/setup.py"))
    setup = members.get("setup.py")
    readme = members.get("README.md")
    setup_text = None if setup is None else setup.decode("utf-8", "replace")
    ext = None if setup_text is None else fk.extension_sources(setup_text, names)
    wanted = {posixpath.normpath(s) for s in (ext.sources or [])} if ext else set()
    files = pypi.sdist_members(f, lambda rel: rel in wanted) if wanted else {}
    hopper_setup = members.get("hopper/setup.py")
    hopper: dict[str, Any] = {"dir": any(n.startswith("hopper/") for n in names), "setup_py": hopper_setup is not None}
    if hopper_setup is not None:
        under = [n[len("hopper/"):] for n in names if n.startswith("hopper/")]
        hopper.update(fk.hopper_facts(hopper_setup.decode("utf-8", "replace"), under))
    return {
        "filename": f.filename, "sha256": f.sha256, "url": f.purl, "upload_time": f.upload_time,
        "kernels": {k: {"dir": any(n.startswith(f"csrc/{k}/") for n in names), "setup_py": f"csrc/{k}/setup.py" in names}
                    for k in KERNEL_DIRS},
        "setup": None if setup_text is None else parse_setup(setup_text),
        "readme": None if readme is None else parse_readme(readme.decode("utf-8", "replace")),
        "cuda_extension": fk.cuda_extension(ext, files),
        "hopper": hopper,
    }


def extract_all(repo: Path, out_dir: Path, say=lambda s: print(s, file=sys.stderr)) -> list[Path]:
    """One JSON file per PyPI release: the tag's facts (when the clone has the tag) and the sdist's."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_version = pypi.versions_of(PYPI_NAME, pypi.files(PYPI_NAME))
    tags: dict[str, str] = {}
    for t in release_tags(repo):  # PyPI version -> the tag whose flash_attn.__version__ it is (v2.0.0 says 2.0.0.post1)
        declared = package_version(show(repo, t, "flash_attn/__init__.py") or "")
        if t[1:] == declared or declared not in tags:
            tags[declared] = t
    written = []
    for version in sorted(by_version, key=Version):
        if Version(version) < Version("2.0.0"):
            continue
        say(f"flash-attn {version}")
        doc: dict[str, Any] = {"pypi_version": version, "pypi_files": [
            {"filename": f.filename, "sha256": f.sha256, "url": f.purl, "yanked": f.yanked} for f in by_version[version]]}
        tag = tags.get(version)
        if tag is None:
            doc["git"] = None
            doc["git_missing"] = f"the clone has no tag v{version}"
        else:
            doc["git"] = extract_tag(repo, tag)
        doc["sdist"] = extract_sdist(version, by_version[version])
        path = out_dir / f"{version}.json"
        path.write_text(pypi.dump(doc), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m envkit.matrixgen.flash_attn_source")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("--repo", required=True, type=Path, help="a git clone of Dao-AILab/flash-attention with its tags")
    ex.add_argument("--out", type=Path, default=Path("data/sources/flash-attn"))
    one = sub.add_parser("tag")
    one.add_argument("--repo", required=True, type=Path)
    one.add_argument("tag")
    a = ap.parse_args(argv)
    if a.cmd == "tag":
        print(pypi.dump(extract_tag(a.repo, a.tag)), end="")
        return 0
    paths = extract_all(a.repo, a.out)
    print(f"{len(paths)} files in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
