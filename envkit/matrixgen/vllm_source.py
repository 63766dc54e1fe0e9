"""vLLM facts, extracted from PyPI alone (adapter: PyPI): every release's file list, the Linux x86_64
wheel's METADATA, the sdist's CMakeLists.txt / setup.py / vllm/envs.py / release pipeline / docs, and
the ELF headers of the wheel's smallest CUDA extension.

Each extract (data/sources/vllm/<version>.json) holds facts as data next to the verbatim line they
were read from and the exact file (the purl with the sha256 of the wheel or sdist, member path, line number).
Where a fact is not stated by any artifact the extract says null and why; nothing is guessed.

    python -m envkit.matrixgen.vllm_source extract [--out data/sources/vllm] [VERSION ...]
    python -m envkit.matrixgen.vllm_source derive [--dir data/sources/vllm]

`derive` is pure: it turns the extracts into one table row per release.
"""
from __future__ import annotations

import ast
import functools
import re
import struct
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import pypi

PYPI_NAME = "vllm"
SCHEMA = 1

# Requires-Dist lines recorded verbatim: these names, and any name starting with a prefix below
PINNED = ("torch", "torchvision", "torchaudio", "xformers")
PINNED_PREFIXES = ("flashinfer",)
NVIDIA_PREFIXES = ("nvidia-", "cuda-")
LINUX_X86 = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux", "os_name": "posix",
             "platform_release": "", "implementation_name": "cpython", "platform_python_implementation": "CPython",
             "extra": ""}

CMAKE_VARS = re.compile(r"^(CUDA_SUPPORTED_ARCHS|HIP_SUPPORTED_ARCHS|TORCH_SUPPORTED_VERSION_\w+|PYTHON_SUPPORTED_VERSIONS)$")
SO_BUDGET = 40_000_000  # compressed bytes of wheel extensions read per release, at most


class Unrecognised(Exception):
    """A source has a shape the extractor does not know: extraction stops rather than guess."""


# ---------------------------------------------------------------- small helpers

def _lines(text: str) -> list[str]:
    return text.splitlines()


def _line_of_offset(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _ws(s: str) -> str:
    return " ".join(s.split())


def _vkey(v: str):
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def _arch_key(a: str):
    m = re.match(r"(\d+)\.(\d+)", a)
    return (int(m.group(1)), int(m.group(2))) if m else (999, 0)


# ---------------------------------------------------------------- CMakeLists.txt

def _skip_bracket(text: str, i: int) -> Optional[int]:
    """At text[i] == '[': the end index after a [[...]] / [=[...]=] bracket, or None."""
    m = re.match(r"\[(=*)\[", text[i:i + 16])
    if not m:
        return None
    close = "]" + m.group(1) + "]"
    j = text.find(close, i + len(m.group(0)))
    return len(text) if j < 0 else j + len(close)


def cmake_commands(text: str) -> list[dict[str, Any]]:
    """The command invocations of a CMake file: name (lower case), the arguments with comments removed,
    the 1-based line where the command starts and its verbatim source."""
    out: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "#":
            end = _skip_bracket(text, i + 1) if text.startswith("#[", i) else None
            if end is None:
                j = text.find("\n", i)
                i = n if j < 0 else j + 1
            else:
                i = end
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*\(").match(text, i)
        if not m:  # not a command: skip the line
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        start, k, depth, inq = i, m.end(), 1, False
        args: list[str] = []
        while k < n:
            c = text[k]
            if inq:
                if c == "\\" and k + 1 < n:
                    args.append(text[k:k + 2])
                    k += 2
                    continue
                if c == '"':
                    inq = False
                args.append(c)
            elif c == '"':
                inq = True
                args.append(c)
            elif c == "#":
                end = _skip_bracket(text, k + 1) if text.startswith("#[", k) else None
                if end is None:
                    j = text.find("\n", k)
                    k = n if j < 0 else j
                else:
                    k = end
                continue
            elif c == "[" and (close := _skip_bracket(text, k)) is not None:
                args.append(text[k:close])
                k = close
                continue
            elif c == "(":
                depth += 1
                args.append(c)
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
                args.append(c)
            else:
                args.append(c)
            k += 1
        name = m.group(0)[:-1].strip().lower()
        out.append({"name": name, "args": "".join(args), "line": _line_of_offset(text, start), "text": text[start:k + 1]})
        i = k + 1
    return out


def cmake_arguments(args: str) -> list[str]:
    """CMake arguments: quoted ones unquoted (escapes kept), unquoted ones split on whitespace."""
    out = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"|(\S+)', args):
        out.append(m.group(1) if m.group(1) is not None else m.group(2))
    return out


def parse_cmake(text: str) -> dict[str, Any]:
    """Every set() of CUDA_SUPPORTED_ARCHS, HIP_SUPPORTED_ARCHS, TORCH_SUPPORTED_VERSION_*,
    PYTHON_SUPPORTED_VERSIONS (and list() edits of them), each with the if/elseif/else branch it sits in."""
    frames: list[dict[str, Any]] = []  # open if-blocks: {"kind", "condition", "preceding"}
    scopes: list[str] = []             # open function()/macro() definitions
    sets: list[dict[str, Any]] = []
    edits: list[dict[str, Any]] = []
    for cmd in cmake_commands(text):
        name, args = cmd["name"], cmd["args"]
        if name == "if":
            frames.append({"kind": "if", "condition": _ws(args), "preceding": []})
        elif name == "elseif":
            if not frames:
                raise Unrecognised(f"elseif without if at line {cmd['line']}")
            f = frames[-1]
            frames[-1] = {"kind": "elseif", "condition": _ws(args), "preceding": f["preceding"] + [f["condition"]]}
        elif name == "else":
            if not frames:
                raise Unrecognised(f"else without if at line {cmd['line']}")
            f = frames[-1]
            frames[-1] = {"kind": "else", "condition": None, "preceding": f["preceding"] + [f["condition"]]}
        elif name == "endif":
            if frames:
                frames.pop()
        elif name in ("function", "macro"):
            a = cmake_arguments(args)
            scopes.append(a[0] if a else "?")
        elif name in ("endfunction", "endmacro"):
            if scopes:
                scopes.pop()
        elif name == "set":
            a = cmake_arguments(args)
            if a and CMAKE_VARS.match(a[0]):
                values = []
                for v in a[1:]:
                    if v in ("CACHE", "PARENT_SCOPE"):
                        break
                    values.append(v)
                items = [x for v in values for x in v.split(";") if x]
                sets.append({"var": a[0], "line": cmd["line"], "text": cmd["text"], "value": values, "list": items,
                             "branch": [dict(f) for f in frames], "in_function": scopes[-1] if scopes else None})
        elif name == "list":
            a = cmake_arguments(args)
            if len(a) >= 2 and CMAKE_VARS.match(a[1]):
                edits.append({"var": a[1], "op": a[0], "line": cmd["line"], "text": cmd["text"],
                              "branch": [dict(f) for f in frames]})
    return {"sets": sets, "edits": edits, "vars": summarise_sets(sets)}


def _branch_key(branch: list[dict[str, Any]]) -> Optional[str]:
    if not branch:
        return None
    parts = []
    for f in branch:
        parts.append(f["condition"] if f["kind"] != "else" else "else")
    return " / ".join(parts)


def summarise_sets(sets: list[dict[str, Any]]) -> dict[str, Any]:
    """var -> {"conditional": False, "list": [...], "line"} or {"conditional": True, "branches": [...]}."""
    by: dict[str, list[dict[str, Any]]] = {}
    for s in sets:
        if s["in_function"] is None:
            by.setdefault(s["var"], []).append(s)
    out: dict[str, Any] = {}
    for var, ss in by.items():
        if len(ss) == 1 and not ss[0]["branch"]:
            out[var] = {"conditional": False, "list": ss[0]["list"], "line": ss[0]["line"]}
        else:
            out[var] = {"conditional": True, "branches": [
                {"when": _branch_key(s["branch"]), "branch": s["branch"], "list": s["list"], "line": s["line"]} for s in ss]}
    return out


# ---------------------------------------------------------------- CMake condition evaluation

def eval_cuda_condition(cond: str, cuda: str) -> Optional[bool]:  # noqa: C901 (an interpreter: docs/architecture.md)
    """Evaluate an if() condition over CMAKE_CUDA_COMPILER_VERSION for an nvcc of release `cuda`
    (major.minor; the patch level unknown, so `VERSION_GREATER 12.8` is undecided for 12.8).
    None when the condition uses anything else or cannot be decided."""
    toks = re.findall(r"\(|\)|[^\s()]+", cond)
    pos = 0
    try:
        have = tuple(int(x) for x in cuda.split(".")[:2])
    except ValueError:
        return None

    def peek() -> Optional[str]:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def is_var(t: str) -> bool:
        return t in ("CMAKE_CUDA_COMPILER_VERSION", "${CMAKE_CUDA_COMPILER_VERSION}")

    def compare(op: str, const: str) -> Optional[bool]:
        try:
            c = tuple(int(x) for x in const.strip('"').split("."))
        except ValueError:
            raise Unrecognised(const)
        c2 = (c + (0, 0))[:2]
        exact_minor = len(c) <= 2 or all(x == 0 for x in c[2:])
        if have != c2 or not exact_minor:
            lt = have < c2 if have != c2 else False
            if have == c2:  # constant has a patch level: undecided
                return None
            return {"VERSION_GREATER_EQUAL": not lt, "VERSION_GREATER": not lt, "VERSION_LESS": lt,
                    "VERSION_LESS_EQUAL": lt, "VERSION_EQUAL": False}[op]
        # equal major.minor; actual is X.Y.p with p >= 0
        return {"VERSION_GREATER_EQUAL": True, "VERSION_LESS": False, "VERSION_GREATER": None,
                "VERSION_LESS_EQUAL": None, "VERSION_EQUAL": None}[op]

    def factor() -> Optional[bool]:
        t = peek()
        if t is None:
            raise Unrecognised("empty")
        if t == "NOT":
            take()
            v = factor()
            return None if v is None else not v
        if t == "(":
            take()
            v = expr()
            if take() != ")":
                raise Unrecognised(")")
            return v
        if t == "DEFINED":
            take()
            if not is_var(take()):
                raise Unrecognised("DEFINED of another variable")
            return True
        if is_var(t):
            take()
            op = take()
            if op not in ("VERSION_GREATER_EQUAL", "VERSION_GREATER", "VERSION_LESS", "VERSION_LESS_EQUAL", "VERSION_EQUAL"):
                raise Unrecognised(op)
            return compare(op, take())
        raise Unrecognised(t)

    def term() -> Optional[bool]:
        v = factor()
        while peek() == "AND":
            take()
            w = factor()
            v = False if (v is False or w is False) else (None if (v is None or w is None) else True)
        return v

    def expr() -> Optional[bool]:
        v = term()
        while peek() == "OR":
            take()
            w = term()
            v = True if (v is True or w is True) else (None if (v is None or w is None) else False)
        return v

    try:
        v = expr()
        if pos != len(toks):
            return None
        return v
    except (Unrecognised, IndexError, KeyError):
        return None


def select_branch(branches: list[dict[str, Any]], cuda: str) -> tuple[Optional[dict[str, Any]], str]:
    """The branch of a conditional set() that an nvcc of `cuda` takes (first match wins)."""
    for b in branches:
        ok = True
        for f in b["branch"]:
            for prev in f["preceding"]:
                r = eval_cuda_condition(prev, cuda)
                if r is None:
                    return None, f"cannot evaluate `{prev}` for CUDA {cuda}"
                if r:
                    ok = False
            if f["kind"] != "else" and ok:
                r = eval_cuda_condition(f["condition"], cuda)
                if r is None:
                    return None, f"cannot evaluate `{f['condition']}` for CUDA {cuda}"
                ok = ok and r
        if ok:
            return b, ""
    return None, f"no branch applies to CUDA {cuda}"


# ---------------------------------------------------------------- setup.py / vllm/envs.py

def _src_line(text: str, lineno: int) -> str:
    ls = _lines(text)
    return ls[lineno - 1].strip() if 0 < lineno <= len(ls) else ""


def parse_setup_py(text: str) -> dict[str, Any]:
    """MAIN_CUDA_VERSION, *SUPPORTED_ARCHS sets, python_requires, and the lines that add a +cuXXX
    local version when nvcc differs from the main CUDA version."""
    out: dict[str, Any] = {"main_cuda_version": None, "supported_archs": [], "python_requires": None, "suffix_rule": []}
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        out["parse_error"] = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, val = node.targets[0].id, node.value
            if name == "MAIN_CUDA_VERSION" and isinstance(val, ast.Constant) and isinstance(val.value, str):
                out["main_cuda_version"] = {"value": val.value, "line": node.lineno, "text": _src_line(text, node.lineno)}
            elif name.endswith("SUPPORTED_ARCHS") and isinstance(val, (ast.Set, ast.List, ast.Tuple)):
                items = [e.value for e in val.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                seg = ast.get_source_segment(text, node) or _src_line(text, node.lineno)
                out["supported_archs"].append({"name": name, "line": node.lineno, "text": seg, "list": items})
        elif isinstance(node, ast.keyword) and node.arg == "python_requires" and isinstance(node.value, ast.Constant):
            out["python_requires"] = str(node.value.value)
    for i, line in enumerate(_lines(text), 1):
        if re.search(r"!=\s*(envs\.VLLM_)?MAIN_CUDA_VERSION", line) and "cuda" in line.lower() and "rocm" not in line.lower() \
                and "hip" not in line.lower() and "neuron" not in line.lower():
            out["suffix_rule"].append({"line": i, "text": line.strip()})
    return out


def parse_envs_py(text: str) -> dict[str, Any]:
    """The default of VLLM_MAIN_CUDA_VERSION: the runtime getter (`os.getenv(...) or "X"`) and the
    TYPE_CHECKING annotation (`VLLM_MAIN_CUDA_VERSION: str = "X"`)."""
    out: dict[str, Any] = {"getter": None, "annotation": None}
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        out["parse_error"] = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "VLLM_MAIN_CUDA_VERSION" \
                and isinstance(node.value, ast.Constant) and out["annotation"] is None:
            out["annotation"] = {"value": str(node.value.value), "line": node.lineno, "text": _src_line(text, node.lineno)}
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "VLLM_MAIN_CUDA_VERSION" and isinstance(v, ast.Lambda):
                    default = None
                    for sub in ast.walk(v.body):
                        if isinstance(sub, ast.BoolOp) and isinstance(sub.op, ast.Or) and isinstance(sub.values[-1], ast.Constant):
                            default = str(sub.values[-1].value)
                        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "getenv" \
                                and len(sub.args) == 2 and isinstance(sub.args[1], ast.Constant) and sub.args[1].value:
                            default = default or str(sub.args[1].value)
                    seg = ast.get_source_segment(text, k) or ""
                    body = ast.get_source_segment(text, v) or ""
                    out["getter"] = {"value": default, "line": k.lineno, "text": _ws(f"{seg}: {body}")}
    return out


# ---------------------------------------------------------------- release pipeline, Dockerfile, docs, scripts

def _steps(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        if "label" in node and ("commands" in node or "command" in node):
            yield node
        for v in node.values():
            yield from _steps(v)
    elif isinstance(node, list):
        for v in node:
            yield from _steps(v)


def _build_arg(cmd: str, name: str) -> Optional[str]:
    m = re.search(r"--build-arg\s+" + re.escape(name) + r"""=(?:'([^']*)'|\\?"((?:[^"\\]|\\.)*?)\\?"|(\S+))""", cmd)
    if not m:
        return None
    return next(g for g in m.groups() if g is not None)


def parse_release_pipeline(text: str) -> dict[str, Any]:
    """The wheel builds of .buildkite/release-pipeline.yaml: each step that runs `docker build ...
    --target build`, with its label, CUDA_VERSION and torch_cuda_arch_list build args (a ${VAR} resolved
    from the pipeline's or the step's env)."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return {"parse_error": f"YAML: {type(exc).__name__}", "wheel_builds": [], "env": {}}
    top_env = {str(k): str(v) for k, v in ((doc or {}).get("env") or {}).items()} if isinstance(doc, dict) else {}
    lines = _lines(text)
    builds = []
    for step in _steps(doc):
        cmds = step.get("commands") or step.get("command")
        cmds = [cmds] if isinstance(cmds, str) else [str(c) for c in (cmds or [])]
        env = {**top_env, **{str(k): str(v) for k, v in (step.get("env") or {}).items()}}
        for c in cmds:
            if "docker build" not in c or not re.search(r"--target\s+build\b", c):
                continue
            label = str(step["label"])
            line = next((i for i, l in enumerate(lines, 1) if label in l and "label" in l), None)
            arch = _build_arg(c, "torch_cuda_arch_list")
            resolved = arch
            if arch:
                m = re.fullmatch(r"\$\{?(\w+)\}?", arch)
                if m:
                    resolved = env.get(m.group(1))
            dockerfile = re.search(r"\s-f\s+(\S+)", c)
            builds.append({
                "label": label, "line": line, "cuda_version": _build_arg(c, "CUDA_VERSION"),
                "torch_cuda_arch_list": arch, "torch_cuda_arch_list_resolved": resolved,
                "vllm_main_cuda_version": _build_arg(c, "VLLM_MAIN_CUDA_VERSION"),
                "dockerfile": dockerfile.group(1) if dockerfile else "Dockerfile",
                "platform": "aarch64" if re.search(r"arm64|aarch64", label, re.I) else "x86_64",
            })
    env_lines = [{"line": i, "text": l.strip()} for i, l in enumerate(lines, 1) if re.match(r"\s+CUDA_ARCH\w*\s*:", l)]
    return {"wheel_builds": builds, "env": {k: v for k, v in top_env.items() if k.startswith("CUDA_ARCH")}, "env_lines": env_lines}


def parse_dockerfile(text: str, target: str = "build") -> dict[str, Any]:
    """`ARG torch_cuda_arch_list=` / `ARG CUDA_VERSION=` defaults, and which of them the `target` stage
    sees (the stage itself, then the stages it is built FROM)."""
    stages: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    current: Optional[str] = None
    args: list[dict[str, Any]] = []
    for i, raw in enumerate(_lines(text), 1):
        line = raw.strip()
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            current = (m.group(2) or f"#{len(order)}")
            stages[current] = {"from": m.group(1), "line": i, "args": {}}
            order.append(current)
            continue
        m = re.match(r"ARG\s+(torch_cuda_arch_list|CUDA_VERSION)=(.*)$", line)
        if m:
            val = m.group(2).strip()
            if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
                val = val[1:-1]
            rec = {"name": m.group(1), "value": val, "line": i, "text": line, "stage": current}
            args.append(rec)
            if current is not None:
                stages[current]["args"][m.group(1)] = rec
    seen: dict[str, Any] = {}
    chain = []
    s = target if target in stages else None
    while s is not None and s not in chain:
        chain.append(s)
        for k, rec in stages[s]["args"].items():
            seen.setdefault(k, rec)
        parent = stages[s]["from"]
        s = parent if parent in stages else None
    return {"args": args, "target": target if target in stages else None, "stage_chain": chain,
            "target_sees": seen}


DOC_PATTERN = re.compile(r"compiled with CUDA|CUDA \(\d+\.\d+\) binaries|\+cu\d{3}")
SCRIPT_PATTERN = re.compile(r"\+cu\d{3}|-not -name \"\*\+\*\"")


def doc_statements(path: str, text: str) -> list[dict[str, Any]]:
    return [{"file": path, "line": i, "text": l.strip()} for i, l in enumerate(_lines(text), 1) if DOC_PATTERN.search(l)]


def script_statements(path: str, text: str) -> list[dict[str, Any]]:
    return [{"file": path, "line": i, "text": l.strip()} for i, l in enumerate(_lines(text), 1) if SCRIPT_PATTERN.search(l)]


def docs_cuda(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """From the docs lines: the CUDA the binaries are 'compiled with ... by default' and the others
    'We also provide vLLM binaries compiled with CUDA 12.6, 11.8, and ...'."""
    default, others = None, []
    for d in lines:
        m = re.search(r"compiled with CUDA (\d+\.\d+)[^.]*by default", d["text"])
        if m and default is None:
            default = m.group(1)
        m = re.search(r"also provide vLLM binaries compiled with CUDA ([\d., and]+)", d["text"])
        if m:
            for v in re.findall(r"\d+\.\d+", m.group(1)):
                if v not in others:
                    others.append(v)
    return {"default": default, "others": others}


# ---------------------------------------------------------------- ELF

def elf_dynamic(data: bytes) -> Optional[dict[str, list[str]]]:
    """DT_NEEDED and DT_RPATH/DT_RUNPATH entries of a 64-bit ELF shared object (None when not one)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    e = "<" if data[5] == 1 else ">"
    (shoff,) = struct.unpack(e + "Q", data[0x28:0x30])
    shentsize, shnum = struct.unpack(e + "HH", data[0x3A:0x3E])
    secs = []
    for k in range(shnum):
        o = shoff + k * shentsize
        if o + 64 > len(data):
            return None
        _name, typ, _flags, _addr, off, size, link = struct.unpack(e + "IIQQQQI", data[o:o + 44])
        secs.append((typ, off, size, link))
    out: dict[str, list[str]] = {"needed": [], "runpath": []}
    for typ, off, size, link in secs:
        if typ != 6 or link >= len(secs):  # SHT_DYNAMIC
            continue
        _t, stroff, strsize, _l = secs[link]
        strtab = data[stroff:stroff + strsize]
        for j in range(off, off + size, 16):
            tag, val = struct.unpack(e + "qQ", data[j:j + 16])
            if tag == 0:
                break
            if tag in (1, 15, 29):  # DT_NEEDED, DT_RPATH, DT_RUNPATH
                end = strtab.find(b"\0", val)
                s = strtab[val:end].decode("utf-8", "replace")
                out["needed" if tag == 1 else "runpath"].append(s)
    return out


def elf_needed(data: bytes) -> Optional[list[str]]:
    d = elf_dynamic(data)
    return None if d is None else d["needed"]


TOOLKIT_PATH = re.compile(rb"[ -~]{0,40}/cuda-(\d+\.\d+)/(?:include|bin|lib64|lib|targets|nvvm)[ -~]{0,40}")


# ---------------------------------------------------------------- PyPI files

def _file_entry(f: pypi.PyPIFile) -> dict[str, Any]:
    return {"filename": f.filename, "sha256": f.sha256, "url": f.purl, "yanked": f.yanked, "size": f.size,
            "upload_time": f.upload_time}


def _is_linux_x86_wheel(f: pypi.PyPIFile) -> bool:
    if not f.filename.endswith(".whl"):
        return False
    _n, _v, _b, tags = parse_wheel_filename(f.filename)
    return any("linux" in t.platform and t.platform.endswith("x86_64") for t in tags)


def _wheel_pref(f: pypi.PyPIFile):
    """pip's preference among wheels of one version for the same platform: the highest build tag
    first; then the newest interpreter (for cp3X-cp3X sets, any one has the same METADATA)."""
    _n, _v, build, tags = parse_wheel_filename(f.filename)
    interp = max((int(t.interpreter[2:]) if t.interpreter[2:].isdigit() else 0) for t in tags)
    return (build or (0, ""), interp, f.filename)


def _requirement_lines(md: dict[str, list[str]]) -> dict[str, Any]:
    pinned: dict[str, list[str]] = {}
    nvidia: list[str] = []
    for line in md.get("Requires-Dist", []):
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if not m:
            continue
        name = canonicalize_name(m.group(1))
        if name in PINNED or name.startswith(PINNED_PREFIXES):
            pinned.setdefault(name, []).append(line)
        elif name.startswith(NVIDIA_PREFIXES):
            nvidia.append(line)
    return {"pinned": pinned, "nvidia": nvidia}


@functools.lru_cache(maxsize=None)
def _torch_by_version() -> dict[str, list[pypi.PyPIFile]]:
    return pypi.versions_of("torch", pypi.files("torch"))


TORCH_CUDA_LINE = re.compile(r"^(nvidia-cuda-runtime(?:-cu\d+)?|cuda-toolkit)\b[^=]*==\s*\(?\s*(\d+)\.(\d+)")


def torch_pypi_cuda(torch_version: str) -> dict[str, Any]:
    """The CUDA runtime that torch's own PyPI Linux x86_64 wheel requires (its METADATA)."""
    fs = [f for f in _torch_by_version().get(torch_version, []) if _is_linux_x86_wheel(f)]
    if not fs:
        return {"value": None, "reason": f"PyPI has no Linux x86_64 wheel of torch {torch_version}"}
    w = sorted(fs, key=_wheel_pref)[-1]
    md = pypi.metadata_fields(pypi.wheel_metadata(w))
    for line in md.get("Requires-Dist", []):
        m = TORCH_CUDA_LINE.match(line.strip())
        if m:
            return {"value": f"{m.group(2)}.{m.group(3)}", "wheel": w.filename, "citation": w.citation, "text": line}
    return {"value": None, "wheel": w.filename, "citation": w.citation,
            "reason": "the torch wheel's METADATA requires no nvidia-cuda-runtime / cuda-toolkit"}


def applicable(lines: list[str], env: dict[str, str] = LINUX_X86) -> list[str]:
    """The Requires-Dist lines that apply to a plain install on Linux x86_64 (no extras)."""
    out = []
    for line in lines:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            continue
        if r.marker is None or r.marker.evaluate(env):
            out.append(line)
    return out


def _exact_pin(line: str) -> Optional[str]:
    try:
        spec = list(Requirement(line).specifier)
    except InvalidRequirement:
        return None
    if len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version:
        return spec[0].version
    return None


# ---------------------------------------------------------------- extraction (adapter)

SDIST_WANTED_EXACT = {
    "CMakeLists.txt", "setup.py", "vllm/envs.py", "requirements.txt", "requirements-cuda.txt", "requirements/cuda.txt",
    ".buildkite/release-pipeline.yaml", ".buildkite/scripts/annotate-release.sh", ".buildkite/scripts/upload-wheels.sh",
    ".buildkite/upload-wheels.sh", ".buildkite/scripts/upload-release-wheels-pypi.sh", "Dockerfile", "docker/Dockerfile",
}


def _sdist_wanted(rel: str) -> bool:
    if rel in SDIST_WANTED_EXACT:
        return True
    return rel.startswith("docs/") and "install" in rel.lower() and rel.endswith((".md", ".rst"))


def _text(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else b.decode("utf-8", "replace")


def _scan_wheel_extensions(w: pypi.PyPIFile) -> dict[str, Any]:
    """Read the wheel's .so members smallest first until one links libcudart (within SO_BUDGET
    compressed bytes): their DT_NEEDED and any CUDA toolkit paths (`/cuda-X.Y/include`) in them."""
    entries = sorted((c, n) for n, _comp, c, _off in pypi._central_directory(w) if re.search(r"\.so(\.\d+)*$", n))
    read: list[dict[str, Any]] = []
    budget = 0
    paths: dict[str, str] = {}
    cudart = None
    for csize, name in entries:
        if read and budget + csize > SO_BUDGET:
            break
        budget += csize
        data = pypi.wheel_member(w, name)
        dyn = elf_dynamic(data)
        needed = None if dyn is None else dyn["needed"]
        read.append({"member": name, "compressed_size": csize, "needed": needed,
                     "runpath": None if dyn is None else dyn["runpath"]})
        for rp in (dyn or {}).get("runpath", []):
            for m in re.finditer(r"/cuda-(\d+\.\d+)/", rp):
                paths.setdefault(m.group(1), f"{name}: RUNPATH {rp}")
        for tm in TOOLKIT_PATH.finditer(data):
            paths.setdefault(tm.group(1).decode(), f"{name}: {tm.group(0).decode('ascii', 'replace').strip()}")
        for lib in needed or []:
            if re.fullmatch(r"libcudart\.so\.\d+(\.\d+)*", lib):
                cudart = {"member": name, "needed": lib, "major": lib.split(".so.")[1].split(".")[0]}
        if cudart:
            break
    return {"read": read, "libcudart": cudart,
            "toolkit_paths": [{"cuda": k, "text": v} for k, v in sorted(paths.items(), key=lambda kv: _vkey(kv[0]))]}


def _extract_metadata(x86: list[pypi.PyPIFile], say: Callable[[str], None], missing: dict[str, str]) -> Optional[dict[str, Any]]:
    """The newest Linux x86_64 wheel's METADATA (PEP 658's, else the wheel member), and whether the other x86_64 wheels
    pin the same; None without such a wheel."""
    wheel = x86[-1] if x86 else None
    if wheel is None:
        missing["metadata"] = "PyPI has no Linux x86_64 wheel for this release"
        return None
    say(f"  METADATA of {wheel.filename}")
    md = pypi.metadata_fields(pypi.wheel_metadata(wheel))
    req = _requirement_lines(md)
    rp = md.get("Requires-Python")
    others = {}
    for f in x86[:-1]:
        omd = pypi.metadata_fields(pypi.wheel_metadata(f))
        oreq = _requirement_lines(omd)
        others[f.filename] = {"same_pins": oreq == req and omd.get("Requires-Python") == rp}
    metadata = {
        "wheel": wheel.filename, "citation": wheel.citation,
        "source": "PEP 658 .metadata" if wheel.has_metadata else "wheel member METADATA",
        "requires_python": rp[0] if rp else None, "requires_dist": req["pinned"], "requires_dist_nvidia": req["nvidia"],
        "wheel_tags": sorted(str(t) for t in parse_wheel_filename(wheel.filename)[3]),
        "other_x86_64_wheels": others,
    }
    if not rp:
        missing["metadata.requires_python"] = "the wheel's METADATA has no Requires-Python"
    return metadata


def _extract_pipeline_and_variants(doc: dict[str, Any], members: dict[str, str], sdist: Optional[pypi.PyPIFile], version: str,
                                   missing: dict[str, str]) -> None:
    """The sdist's release pipeline, Dockerfiles, docs and release scripts: what the wheel was built with, and the other
    CUDA variants they state."""
    pipe = members.get(".buildkite/release-pipeline.yaml")
    if pipe is None:
        doc["release_pipeline"] = None
    else:
        if sdist is None:
            raise Unrecognised(f".buildkite/release-pipeline.yaml: read as an sdist member, but {version} has no sdist")
        doc["release_pipeline"] = {
            "source": {"artifact": sdist.filename, "citation": sdist.citation, "member": ".buildkite/release-pipeline.yaml"},
            **parse_release_pipeline(pipe)}
    dockerfiles = {}
    for name in ("Dockerfile", "docker/Dockerfile"):
        if name in members:
            dockerfiles[name] = parse_dockerfile(members[name])
    doc["dockerfiles"] = dockerfiles or None
    doc_lines: list[dict[str, Any]] = []
    for name in sorted(members):
        if name.startswith("docs/"):
            doc_lines += doc_statements(name, members[name])
    script_lines: list[dict[str, Any]] = []
    for name in (".buildkite/scripts/annotate-release.sh", ".buildkite/scripts/upload-wheels.sh", ".buildkite/upload-wheels.sh",
                 ".buildkite/scripts/upload-release-wheels-pypi.sh"):
        if name in members:
            script_lines += script_statements(name, members[name])
    if sdist is None:
        doc["variants"] = None
        missing["variants"] = "no sdist on PyPI"
    elif not doc_lines and not script_lines and not (doc["release_pipeline"] or {}).get("wheel_builds"):
        doc["variants"] = None
        missing["variants"] = "the sdist states no other CUDA variant (no docs, release pipeline or release script lines)"
    else:
        doc["variants"] = {"docs": doc_lines, "docs_cuda": docs_cuda(doc_lines), "release_scripts": script_lines}



def _sdist_torch_lines(members: dict[str, str]) -> list[dict[str, Any]]:
    """The torch lines of the sdist's requirements files (a release without a wheel pins torch there)."""
    lines = []
    for name in ("requirements.txt", "requirements-cuda.txt", "requirements/cuda.txt"):
        for i, l in enumerate(_lines(members.get(name, "")), 1):
            if re.match(r"\s*torch\b(?![-\w])", l):
                lines.append({"file": name, "line": i, "text": l.strip()})
    return lines


def _torch_pin_cuda(metadata: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """The CUDA of torch's own PyPI wheel where the release pins one exact torch."""
    tl = applicable(metadata["requires_dist"].get("torch", []))
    pin = _exact_pin(tl[0]) if len(tl) == 1 else None
    if pin:
        say(f"  torch {pin} METADATA")
        return {"pin": tl[0], **torch_pypi_cuda(pin)}
    return {"pin": tl[0] if tl else None, "value": None,
            "reason": "no torch requirement" if not tl else "the torch requirement is not one exact version"}


def _extract_build_files(doc: dict[str, Any], version: str, members: dict[str, str], sdist: Optional[pypi.PyPIFile],
                         wheel: Optional[pypi.PyPIFile], wheel_members: list[str], missing: dict[str, str]) -> None:
    """CMakeLists.txt, setup.py and vllm/envs.py: the sdist's, else the wheel's copy, each parsed with where it was read."""

    def from_sdist_or_wheel(member: str) -> tuple[Optional[str], Optional[dict[str, str]]]:
        if member in members:
            if sdist is None:
                raise Unrecognised(f"{member}: read as an sdist member, but {version} has no sdist")
            return members[member], {"artifact": sdist.filename, "citation": sdist.citation, "member": member}
        if wheel is not None and member in wheel_members:
            return _text(pypi.wheel_member(wheel, member)), {"artifact": wheel.filename, "citation": wheel.citation, "member": member}
        return None, None

    # ---- CMakeLists.txt
    cm_text, cm_src = from_sdist_or_wheel("CMakeLists.txt")
    if cm_text is None:
        doc["cmake"] = None
        missing["cmake"] = ("no sdist on PyPI, and the wheel carries no CMakeLists.txt" if sdist is None
                            else "the sdist has no CMakeLists.txt (setup.py-only build)")
    else:
        doc["cmake"] = {"source": cm_src, **parse_cmake(cm_text)}

    # ---- setup.py
    sp_text, sp_src = from_sdist_or_wheel("setup.py")
    doc["setup_py"] = None if sp_text is None else {"source": sp_src, **parse_setup_py(sp_text)}
    if sp_text is None:
        missing["setup_py"] = "no sdist on PyPI" if sdist is None else "the sdist has no setup.py"

    # ---- vllm/envs.py (the sdist's, else the wheel's copy)
    ev_text, ev_src = from_sdist_or_wheel("vllm/envs.py")
    doc["envs_py"] = None if ev_text is None else {"source": ev_src, **parse_envs_py(ev_text)}


def extract(version: str, files: Optional[list[pypi.PyPIFile]] = None, say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Everything PyPI's artifacts of one vLLM release state (see the module docstring)."""
    if files is None:
        files = pypi.versions_of(PYPI_NAME, pypi.files(PYPI_NAME)).get(version, [])
    files = sorted(files, key=lambda f: f.filename)
    doc: dict[str, Any] = {"project": PYPI_NAME, "version": version, "schema": SCHEMA,
                           "files": [_file_entry(f) for f in files]}
    sdists = [f for f in files if f.filename.endswith((".tar.gz", ".zip"))]
    x86 = sorted([f for f in files if _is_linux_x86_wheel(f)], key=_wheel_pref)
    other = [f.filename for f in files if f.filename.endswith(".whl") and f not in x86]
    doc["has"] = {"sdist": [f.filename for f in sdists], "linux_x86_64_wheels": [f.filename for f in x86],
                  "other_wheels": other, "all_yanked": bool(files) and all(f.yanked for f in files)}
    missing: dict[str, str] = {}

    # ---- wheel METADATA
    wheel = x86[-1] if x86 else None
    doc["metadata"] = _extract_metadata(x86, say, missing)

    # ---- sdist members
    members: dict[str, str] = {}
    sdist = sdists[0] if sdists else None
    if sdist is not None:
        say(f"  sdist {sdist.filename}")
        members = {k: _text(v) or "" for k, v in pypi.sdist_members(sdist, _sdist_wanted).items()}
    wheel_members = pypi.wheel_members(wheel) if wheel is not None else []
    doc["sdist"] = None if sdist is None else {"filename": sdist.filename, "citation": sdist.citation,
                                               "members_read": sorted(members)}

    _extract_build_files(doc, version, members, sdist, wheel, wheel_members, missing)

    # ---- torch pin fallback for releases without a wheel: the sdist's requirements files
    if doc["metadata"] is None and members:
        doc["sdist_torch_lines"] = _sdist_torch_lines(members)

    # ---- the wheel's extensions
    if wheel is not None:
        say(f"  extensions of {wheel.filename}")
        doc["wheel_extensions"] = {"wheel": wheel.filename, "citation": wheel.citation, **_scan_wheel_extensions(wheel)}
    else:
        doc["wheel_extensions"] = None

    # ---- torch's own PyPI CUDA for an exact pin
    doc["torch_pypi_cuda"] = None if doc["metadata"] is None else _torch_pin_cuda(doc["metadata"], say)

    # ---- release pipeline, Dockerfile, docs, release scripts
    _extract_pipeline_and_variants(doc, members, sdist, version, missing)

    doc["main_cuda"] = main_cuda(doc)
    if doc["main_cuda"]["value"] is None:
        missing["main_cuda"] = doc["main_cuda"]["reason"]
    doc["missing"] = missing
    return doc


def main_cuda(doc: dict[str, Any]) -> dict[str, Any]:
    """The CUDA major.minor the PyPI wheel was built with, from the first evidence that states it:
    (1) the VLLM_MAIN_CUDA_VERSION default in vllm/envs.py, (2) MAIN_CUDA_VERSION in setup.py, both
    read with setup.py's rule that a build whose nvcc differs gets a +cuXXX local version (the PyPI
    wheel has none), (3) a CUDA toolkit path compiled into the wheel's extension. The libcudart
    soname, the docs and torch's PyPI CUDA are recorded as checks."""
    evidence: list[dict[str, Any]] = []
    env = doc.get("envs_py") or {}
    sp = doc.get("setup_py") or {}
    ext = doc.get("wheel_extensions") or {}
    if (env.get("getter") or {}).get("value"):
        g = env["getter"]
        evidence.append({"basis": "vllm/envs.py VLLM_MAIN_CUDA_VERSION default", "value": g["value"], "source": env["source"],
                         "line": g["line"], "text": g["text"]})
    if sp.get("main_cuda_version"):
        m = sp["main_cuda_version"]
        evidence.append({"basis": "setup.py MAIN_CUDA_VERSION", "value": m["value"], "source": sp["source"], "line": m["line"],
                         "text": m["text"]})
    for tp in ext.get("toolkit_paths") or []:
        evidence.append({"basis": "CUDA toolkit path compiled into the wheel's extension", "value": tp["cuda"],
                         "source": {"artifact": ext["wheel"], "citation": ext["citation"]}, "text": tp["text"]})
    wheel_name = (doc.get("metadata") or {}).get("wheel")
    local = None
    if wheel_name:
        local = parse_wheel_filename(wheel_name)[1].local
    checks: dict[str, Any] = {
        "wheel_local_version": local,
        "suffix_rule": sp.get("suffix_rule") or [],
        "pypi_upload_rule": [s for s in ((doc.get("variants") or {}).get("release_scripts") or []) if '-not -name "*+*"' in s["text"]],
        "envs_annotation": (env.get("annotation") or {}).get("value"),
        "libcudart": ext.get("libcudart"),
        "docs_default": ((doc.get("variants") or {}).get("docs_cuda") or {}).get("default"),
        "torch_pypi_cuda": (doc.get("torch_pypi_cuda") or {}).get("value"),
    }
    if wheel_name is None:
        return {"value": None, "reason": "PyPI has no Linux x86_64 wheel for this release", "evidence": evidence, "checks": checks}
    if local:
        return {"value": None, "reason": f"the PyPI wheel has the local version +{local}", "evidence": evidence, "checks": checks}
    if not evidence:
        reason = "no artifact states the build CUDA (no VLLM_MAIN_CUDA_VERSION / MAIN_CUDA_VERSION"
        reason += ", no toolkit path in the extensions read)" if ext else ")"
        if (ext.get("libcudart") or {}).get("major"):
            reason += f"; the extension links {ext['libcudart']['needed']} (major only)"
        return {"value": None, "reason": reason, "evidence": evidence, "checks": checks}
    value = evidence[0]["value"]
    disagree = sorted({e["value"] for e in evidence if e["value"] != value})
    lib_major = (ext.get("libcudart") or {}).get("major")
    checks["agree"] = {
        "other_evidence": not disagree,
        "libcudart_major": None if lib_major is None else lib_major == value.split(".")[0],
        "docs_default": None if checks["docs_default"] is None else checks["docs_default"] == value,
        "torch_pypi_cuda": None if checks["torch_pypi_cuda"] is None else checks["torch_pypi_cuda"] == value,
    }
    return {"value": value, "basis": evidence[0]["basis"], "evidence": evidence, "disagreeing_evidence": disagree, "checks": checks}


def extract_all(out_dir: Path, versions: Optional[list[str]] = None,
                say: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> list[Path]:
    """One JSON file per vLLM release on PyPI (or per listed version)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_version = pypi.versions_of(PYPI_NAME, pypi.files(PYPI_NAME))
    wanted = sorted(by_version, key=_vkey) if not versions else versions
    written = []
    for n, v in enumerate(wanted, 1):
        if v not in by_version:
            raise SystemExit(f"vllm {v}: no such release on PyPI")
        say(f"[{n}/{len(wanted)}] vllm {v}")
        doc = extract(v, by_version[v], say=say)
        path = out_dir / f"{v}.json"
        path.write_text(pypi.dump(doc), encoding="utf-8")
        written.append(path)
    return written


# ---------------------------------------------------------------- derivation (pure)

def wheel_python(requires_python: Optional[str], wheel_filenames: list[str]) -> tuple[Any, Optional[str], Optional[str]]:
    """(python, wheel_tag, note): for abi3 wheels a specifier (Requires-Python and the abi3 floor
    intersected), for cp3X-cp3X wheels the exact list of versions Requires-Python admits."""
    exact: set[str] = set()
    floors: list[Version] = []
    for fn in wheel_filenames:
        for t in parse_wheel_filename(fn)[3]:
            m = re.fullmatch(r"cp(\d)(\d+)", t.interpreter)
            if not m:
                continue
            ver = f"{m.group(1)}.{m.group(2)}"
            if t.abi == "abi3":
                floors.append(Version(ver))
            elif t.abi.startswith("cp"):
                exact.add(ver)
    try:
        rp = SpecifierSet(requires_python) if requires_python else SpecifierSet()
    except InvalidSpecifier:
        return None, None, f"Requires-Python {requires_python!r} is not a specifier"
    if floors and not exact:
        floor = min(floors)
        specs = [s for s in rp]
        lower = [s for s in specs if s.operator == ">="]
        rest = [s for s in specs if s.operator != ">="]
        lo = max([Version(s.version) for s in lower] + [floor])
        parts = [f">={lo}"] + sorted(str(s) for s in rest)
        return ",".join(parts), "abi3", None
    if exact and not floors:
        ok = sorted((v for v in exact if rp.contains(Version(v), prereleases=True)), key=Version)
        return ok, "cp", None
    if not floors and not exact:
        return None, None, "no CPython wheel tag"
    return None, "mixed", "both abi3 and cp3X-cp3X wheels"


def _min_cc(archs: Optional[list[str]]) -> Optional[str]:
    if not archs:
        return None
    return min((m.group(0) for a in archs if (m := re.match(r"\d+\.\d+", a))), key=_arch_key, default=None)


def _ordered_unique(xs: Iterable[str]) -> list[str]:
    out: list[str] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def derive_row(e: dict[str, Any]) -> dict[str, Any]:
    """One release's row from its extract; `nulls` says why each field without a value has none."""
    row: dict[str, Any] = {"version": e["version"]}
    nulls: dict[str, str] = {}
    for part in (_row_torch, _row_python, _row_wheel_cuda, _row_archs, _row_build_arch_list, _row_other_cuda_variants, _row_source):
        part(e, row, nulls)
    row["nulls"] = {k: nulls[k] for k in sorted(nulls)}
    return row


def _row_torch(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """Torch: the wheel's METADATA requirement, else the sdist's requirements files."""
    md = e.get("metadata")
    if md is not None:
        tl = applicable(md["requires_dist"].get("torch", []))
        if len(tl) == 1:
            row["torch"] = str(Requirement(tl[0]).specifier) or None
            row["torch_from"] = "wheel METADATA"
            if row["torch"] is None:
                nulls["torch"] = f"the wheel requires torch without a version: {tl[0]}"
        elif not tl:
            row["torch"] = None
            nulls["torch"] = "the wheel's METADATA has no torch requirement for Linux x86_64"
        else:
            row["torch"] = None
            nulls["torch"] = f"several torch requirements apply: {tl}"
    else:
        lines = e.get("sdist_torch_lines") or []
        specs = _ordered_unique(str(Requirement(d["text"]).specifier) for d in lines if d["text"])
        if len(specs) == 1 and specs[0]:
            row["torch"], row["torch_from"] = specs[0], f"sdist {lines[0]['file']} (no wheel)"
        else:
            row["torch"] = None
            nulls["torch"] = ("no wheel, and the sdist's requirements files pin no single torch" if not specs
                              else f"several torch lines: {specs}")


def _row_python(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """Python and the wheel: Requires-Python against the Linux x86_64 wheels' tags."""
    md = e.get("metadata")
    has = e.get("has") or {}
    x86 = has.get("linux_x86_64_wheels") or []
    if md is not None:
        py, tag, note = wheel_python(md.get("requires_python"), x86)
        row["python"], row["wheel_tag"] = py, tag
        if py is None:
            nulls["python"] = note or "cannot intersect"
        row["wheel"] = md["wheel"]
        row["wheels"] = x86
    else:
        row["python"], row["wheel_tag"], row["wheel"], row["wheels"] = None, None, None, []
        nulls["python"] = nulls["wheel"] = nulls["wheel_tag"] = "PyPI has no Linux x86_64 wheel for this release"


def _row_wheel_cuda(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """The wheel's CUDA: the extract's main_cuda and the libcudart its extensions link."""
    md = e.get("metadata")
    mc = e.get("main_cuda") or {}
    row["wheel_cuda"] = mc.get("value")
    row["wheel_cuda_basis"] = mc.get("basis")
    if row["wheel_cuda"] is None:
        nulls["wheel_cuda"] = mc.get("reason") or "no main_cuda in the extract"
    lib = ((e.get("wheel_extensions") or {}).get("libcudart") or {})
    row["wheel_cuda_major"] = lib.get("major")
    if row["wheel_cuda_major"] is None:
        nulls["wheel_cuda_major"] = "no wheel" if md is None else "no extension read links libcudart"
    row["torch_pypi_cuda"] = (e.get("torch_pypi_cuda") or {}).get("value")


def _row_archs(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """The CUDA and ROCm arch lists: CMakeLists.txt's (the branch the wheel's CUDA selects), else setup.py's."""
    cm = e.get("cmake")
    sp = e.get("setup_py") or {}
    row["cuda_archs"] = row["rocm_archs"] = row["min_cc"] = None
    row["cuda_archs_from"] = row["rocm_archs_from"] = None
    row["cuda_archs_wheel"] = None
    if cm is not None:
        cv = cm["vars"].get("CUDA_SUPPORTED_ARCHS")
        hv = cm["vars"].get("HIP_SUPPORTED_ARCHS")
        if cv is None:
            nulls["cuda_archs"] = "CMakeLists.txt sets no CUDA_SUPPORTED_ARCHS"
        elif not cv["conditional"]:
            row["cuda_archs"], row["cuda_archs_from"] = cv["list"], "CMakeLists.txt"
            row["cuda_archs_wheel"] = cv["list"]
        else:
            row["cuda_archs"] = [{"when": b["when"], "archs": b["list"]} for b in cv["branches"]]
            row["cuda_archs_from"] = "CMakeLists.txt (conditional; first match wins)"
            if row["wheel_cuda"]:
                b, why = select_branch(cv["branches"], row["wheel_cuda"])
                if b is not None:
                    row["cuda_archs_wheel"] = b["list"]
                else:
                    nulls["cuda_archs_wheel"] = why
            else:
                nulls["cuda_archs_wheel"] = "conditional list and the wheel's CUDA is unknown"
        if hv is None:
            nulls["rocm_archs"] = "CMakeLists.txt sets no HIP_SUPPORTED_ARCHS"
        elif not hv["conditional"]:
            row["rocm_archs"], row["rocm_archs_from"] = hv["list"], "CMakeLists.txt"
        else:
            row["rocm_archs"] = [{"when": b["when"], "archs": b["list"]} for b in hv["branches"]]
            row["rocm_archs_from"] = "CMakeLists.txt (conditional; first match wins)"
    else:
        arch_sets = {a["name"]: a for a in sp.get("supported_archs") or []}
        nv = arch_sets.get("NVIDIA_SUPPORTED_ARCHS") or arch_sets.get("SUPPORTED_ARCHS")
        rc = arch_sets.get("ROCM_SUPPORTED_ARCHS")
        if nv is not None:
            row["cuda_archs"] = nv["list"]
            row["cuda_archs_from"] = f"setup.py {nv['name']} (no CMakeLists.txt)"
            row["cuda_archs_wheel"] = row["cuda_archs"]
        else:
            nulls["cuda_archs"] = (e.get("missing") or {}).get("cmake", "no CMakeLists.txt") + \
                ("; setup.py has no *SUPPORTED_ARCHS" if e.get("setup_py") else "")
        if rc is not None:
            row["rocm_archs"] = rc["list"]
            row["rocm_archs_from"] = f"setup.py {rc['name']} (no CMakeLists.txt)"
        else:
            nulls["rocm_archs"] = (e.get("missing") or {}).get("cmake", "no CMakeLists.txt") + \
                ("; setup.py has no ROCM_SUPPORTED_ARCHS" if e.get("setup_py") else "")
    if row["cuda_archs_wheel"] is None and "cuda_archs_wheel" not in nulls:
        nulls["cuda_archs_wheel"] = nulls.get("cuda_archs", "no arch list")
    row["min_cc"] = _min_cc(row["cuda_archs_wheel"])
    if row["min_cc"] is None:
        nulls["min_cc"] = nulls.get("cuda_archs_wheel", "no arch list")
    if row["rocm_archs"] is None and "rocm_archs" not in nulls:
        nulls["rocm_archs"] = "no ROCm arch list"
    tsv = {k: s["list"] for k, s in (cm or {}).get("vars", {}).items() if k.startswith("TORCH_SUPPORTED_VERSION") and not s["conditional"]}
    row["cmake_torch"] = tsv or None


def _row_build_arch_list(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """What the release pipeline compiled the wheel for (the x86_64 build whose CUDA is the wheel's)."""
    pipe = e.get("release_pipeline") or {}
    builds = [b for b in pipe.get("wheel_builds") or [] if b["platform"] == "x86_64" and b.get("cuda_version")]
    row["build_arch_list"] = None
    if not pipe:
        nulls["build_arch_list"] = "no .buildkite/release-pipeline.yaml in the sdist"
    elif row["wheel_cuda"] is None:
        nulls["build_arch_list"] = "the wheel's CUDA is unknown"
    else:
        match = [b for b in builds if ".".join(b["cuda_version"].split(".")[:2]) == row["wheel_cuda"]]
        if len(match) != 1:
            nulls["build_arch_list"] = f"{len(match)} x86_64 wheel builds with CUDA {row['wheel_cuda']} in the release pipeline"
        else:
            b = match[0]
            if b["torch_cuda_arch_list"] is not None:
                if b["torch_cuda_arch_list_resolved"]:
                    row["build_arch_list"] = {"archs": b["torch_cuda_arch_list_resolved"].split(),
                                              "from": f"release-pipeline.yaml step {b['label']!r}"}
                else:
                    nulls["build_arch_list"] = (f"step {b['label']!r} passes {b['torch_cuda_arch_list']} "
                                                "which the pipeline env does not define")
            else:
                dfs = e.get("dockerfiles") or {}
                d = dfs.get(b["dockerfile"])
                seen = (d or {}).get("target_sees", {}).get("torch_cuda_arch_list")
                if seen:
                    row["build_arch_list"] = {"archs": seen["value"].split(),
                                              "from": f"{b['dockerfile']} line {seen['line']} (default of the build stage; "
                                                      f"step {b['label']!r} passes none)"}
                else:
                    nulls["build_arch_list"] = (f"step {b['label']!r} passes no torch_cuda_arch_list and {b['dockerfile']} "
                                                "gives the build stage no default")


def _row_other_cuda_variants(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """The other CUDA variants the docs, the release pipeline and the release scripts state."""
    pipe = e.get("release_pipeline") or {}
    builds = [b for b in pipe.get("wheel_builds") or [] if b["platform"] == "x86_64" and b.get("cuda_version")]
    var = e.get("variants")
    if var is None:
        row["other_cuda_variants"] = None
        nulls["other_cuda_variants"] = (e.get("missing") or {}).get("variants", "none stated")
    else:
        pipeline_cudas = _ordered_unique(".".join(b["cuda_version"].split(".")[:2]) for b in builds)
        scripts = _ordered_unique(m for s in var.get("release_scripts") or [] for m in re.findall(r"\+(cu\d{3})", s["text"]))
        row["other_cuda_variants"] = {
            "docs": (var.get("docs_cuda") or {}).get("others") or [],
            "docs_default": (var.get("docs_cuda") or {}).get("default"),
            "release_pipeline_x86_64": [c for c in pipeline_cudas if c != row["wheel_cuda"]],
            "release_scripts": scripts,
        }


def _row_source(e: dict[str, Any], row: dict[str, Any], nulls: dict[str, str]) -> None:
    """The citations: the wheel's and the sdist's members read; yanked."""
    md = e.get("metadata")
    has = e.get("has") or {}
    src: dict[str, Any] = {}
    if md is not None:
        ext = e.get("wheel_extensions") or {}
        mem = ["METADATA"] + [r["member"] for r in ext.get("read") or []]
        src["wheel"] = {"citation": md["citation"], "members": mem}
    if e.get("sdist"):
        used = [m for m in ("CMakeLists.txt", "setup.py", "vllm/envs.py", ".buildkite/release-pipeline.yaml")
                if m in e["sdist"]["members_read"]]
        src["sdist"] = {"citation": e["sdist"]["citation"], "members": used}
    row["source"] = src
    row["yanked"] = bool(has.get("all_yanked"))


def derive(extracts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per release, oldest first (pure: no I/O)."""
    return [derive_row(e) for e in sorted(extracts, key=lambda e: _vkey(e["version"]))]


def load_extracts(directory: Path) -> list[dict[str, Any]]:
    import json

    docs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(directory.glob("*.json"))]
    return [d for d in docs if "version" in d]  # deps.json, rocm-gpus.json, variants.json are other extracts


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m envkit.matrixgen.vllm_source")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="read PyPI, write one JSON file per release")
    ex.add_argument("--out", type=Path, default=Path("data/sources/vllm"))
    ex.add_argument("versions", nargs="*", help="only these releases (default: every release on PyPI)")
    de = sub.add_parser("derive", help="print the derived rows (JSON) from the extracts")
    de.add_argument("--dir", type=Path, default=Path("data/sources/vllm"))
    a = ap.parse_args(argv)
    if a.cmd == "extract":
        paths = extract_all(a.out, a.versions or None)
        print(f"{len(paths)} files in {a.out}", file=sys.stderr)
        return 0
    print(pypi.dump(derive(load_extracts(a.dir))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
