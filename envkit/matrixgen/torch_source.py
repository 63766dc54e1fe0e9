"""torch (PyTorch) facts, measured from the wheels PyPI publishes (adapter: PyPI), and the non-PyPI
wheel variants (download.pytorch.org cuXYZ / rocmX.Y) as established from PyTorch's own build
scripts at exact commits (adapter: git clones of pytorch/builder and pytorch/test-infra).

What one extract (data/sources/torch/<version>.json) holds, for every torch release on PyPI from
1.13.0 on:
  * every Linux x86_64 wheel: filename, url, sha256, size, upload time, the tags of its name;
  * the METADATA of one such wheel: Requires-Python and every `nvidia-*` / `cuda-*` (and triton)
    Requires-Dist line verbatim;
  * `torch/version.py` read out of the wheel: __version__, cuda, hip, git_version (the commit the
    release was built from);
  * the MEASURED CUDA arch list of the PyPI build: `torch/lib/libtorch_python.so` carries the
    compile-time CUDA_ARCH_FLAGS string that `torch.cuda.get_arch_list()` returns
    ("sm_50 sm_60 ... compute_90" with compute_XY for +PTX), found with ARCH_FLAGS_RE;
  * the C++ ABI (`torch._C._GLIBCXX_USE_CXX11_ABI`), measured two ways: the
    `-D_GLIBCXX_USE_CXX11_ABI=N` line of torch/share/cmake/Torch/TorchConfig.cmake (written by the
    build; present through 2.7) and the dynamic symbol table of libtorch_python.so (a library built
    with the new ABI names std::string as std::__cxx11::basic_string, so its .dynstr carries
    `__cxx11` names; one built with the old ABI carries none).

The same measurement is made of one Linux aarch64 wheel per build tag (`linux_aarch64_measured`, beside
`linux_aarch64_wheels`): whether PyPI's aarch64 torch is a CUDA build, and of which CUDA, is what its
version.py `cuda` and the CUDA runtime its METADATA requires on aarch64 say. `variants` also reads, from
the same build-matrix file and commit as each release's listing, the wheel variants it lists for
linux-aarch64 (`linux_aarch64`; `aarch64_wheel_matrix`).

Nothing of upstream's files is stored: each fact names the exact wheel it came from
(its purl with the file's sha256) and quotes the few bytes or lines it rests on.

    python -m envkit.matrixgen.torch_source extract [--out data/sources/torch] [--version V ...]
    python -m envkit.matrixgen.torch_source derive  [--src data/sources/torch] [--out FILE]
    python -m envkit.matrixgen.torch_source variants --builder CLONE --test-infra CLONE [--out FILE]
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from ..model import purl
from . import pypi
from .gitrepo import git, git_ok

PYPI_NAME = "torch"
FIRST = Version("1.13.0")
REPO_URL = "https://github.com/pytorch/pytorch"
VERSION_PY = "torch/version.py"
LIBTORCH_PYTHON = "torch/lib/libtorch_python.so"
TORCH_CONFIG = "torch/share/cmake/Torch/TorchConfig.cmake"
PREFERRED_CP = "cp311"  # present in every release 1.13.0 .. 2.15.0; the fallback is the newest non-free-threaded tag

# The CUDA_ARCH_FLAGS string: space-separated sm_XY[a|f] / compute_XY[a|f] tokens, NUL-terminated
# (it is a C string literal in the .so). Two or more tokens, so a lone "sm_80" in a message is not taken.
ARCH_FLAGS_RE = re.compile(rb"(?:(?:sm|compute)_\d+[af]?)(?: (?:sm|compute)_\d+[af]?)+(?=\x00)")
TORCH_CONFIG_ABI_RE = re.compile(r'set\(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=([01])"\)')


class Unrecognised(Exception):
    """A wheel has a shape the extractor does not know: extraction stops rather than guess."""


# ---------------------------------------------------------------- pure parsers

def parse_arch_flags(data: bytes) -> list[str]:
    """Every distinct CUDA_ARCH_FLAGS-shaped string in a binary, in order of first appearance."""
    out: list[str] = []
    for m in ARCH_FLAGS_RE.finditer(data):
        s = m.group(0).decode("ascii")
        if s not in out:
            out.append(s)
    return out


def split_arch_flags(flags: str) -> dict[str, list[str]]:
    """'sm_75 sm_80 compute_80' -> {'sm': ['sm_75', 'sm_80'], 'ptx': ['compute_80']}."""
    toks = flags.split()
    bad = [t for t in toks if not re.fullmatch(r"(sm|compute)_\d+[af]?", t)]
    if bad:
        raise Unrecognised(f"not arch tokens: {bad}")
    return {"sm": [t for t in toks if t.startswith("sm_")], "ptx": [t for t in toks if t.startswith("compute_")]}


def arch_list_form(flags: str) -> str:
    """The TORCH_CUDA_ARCH_LIST spelling of an arch-flag string: 'sm_80 sm_90 compute_90' -> '8.0;9.0+PTX'."""
    parts = split_arch_flags(flags)
    ptx = {t.split("_", 1)[1] for t in parts["ptx"]}

    def dotted(num: str) -> str:
        m = re.fullmatch(r"(\d+)(\d)([af]?)", num)
        if not m:
            raise Unrecognised(f"arch {num}")
        return f"{m.group(1)}.{m.group(2)}{m.group(3)}"

    items = []
    for t in parts["sm"]:
        num = t.split("_", 1)[1]
        items.append(dotted(num) + ("+PTX" if num in ptx else ""))
    for num in sorted(ptx - {t.split("_", 1)[1] for t in parts["sm"]}):
        items.append(dotted(num) + "+PTX")  # PTX without SASS for that arch: kept, marked
    return ";".join(items)


def parse_version_py(text: str) -> dict[str, Any]:
    """torch/version.py -> {name: value} for the simple assignments it holds, with the lines quoted."""
    out: dict[str, Any] = {}
    lines: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^(__version__|debug|cuda|hip|rocm|xpu|git_version)\s*(?::\s*[^=]+)?=\s*(.+?)\s*$", line)
        if not m:
            continue
        raw = m.group(2)
        if raw == "None":
            val: Any = None
        elif raw in ("True", "False"):
            val = raw == "True"
        elif re.fullmatch(r"'[^']*'|\"[^\"]*\"", raw):
            val = raw[1:-1]
        else:
            raise Unrecognised(f"version.py value {raw!r}")
        out[m.group(1)] = val
        lines.append(line)
    for key in ("__version__", "cuda", "git_version"):
        if key not in out:
            raise Unrecognised(f"version.py has no {key}")
    out["evidence"] = lines
    return out


def elf_dynamic_names(data: bytes) -> list[str]:
    """Names in the .dynsym symbol table of a 64-bit little-endian ELF shared object."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise Unrecognised("not a 64-bit little-endian ELF")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = []
    for i in range(shnum):
        base = shoff + i * shentsize
        _name, typ = struct.unpack_from("<II", data, base)
        off, size = struct.unpack_from("<QQ", data, base + 24)
        (link,) = struct.unpack_from("<I", data, base + 40)
        (entsize,) = struct.unpack_from("<Q", data, base + 56)
        secs.append((typ, off, size, link, entsize))
    dynsym = [s for s in secs if s[0] == 11]  # SHT_DYNSYM
    if not dynsym:
        raise Unrecognised("no .dynsym")
    _typ, off, size, link, entsize = dynsym[0]
    stroff, strsize = secs[link][1], secs[link][2]
    strtab = data[stroff: stroff + strsize]
    names = []
    for j in range(size // (entsize or 24)):
        (st_name,) = struct.unpack_from("<I", data, off + j * (entsize or 24))
        if st_name:
            end = strtab.index(b"\x00", st_name)
            names.append(strtab[st_name:end].decode("ascii", "replace"))
    return names


def cxx11abi_from(torch_config: Optional[str], dyn_names: Optional[list[str]]) -> dict[str, Any]:
    """The C++ ABI from the two measurements; null with a reason when they are missing or disagree."""
    out: dict[str, Any] = {"torch_config_line": None, "torch_config_value": None, "dynsym_names": None,
                           "dynsym_cxx11_names": None, "dynsym_value": None}
    if torch_config is not None:
        m = TORCH_CONFIG_ABI_RE.search(torch_config)
        if m:
            out["torch_config_line"] = m.group(0)
            out["torch_config_value"] = int(m.group(1))
    if dyn_names is not None:
        cxx11 = [n for n in dyn_names if "__cxx11" in n]
        out["dynsym_names"] = len(dyn_names)
        out["dynsym_cxx11_names"] = len(cxx11)
        out["dynsym_cxx11_example"] = min(cxx11, key=len) if cxx11 else None
        # Old-ABI std::string appears in mangled names as `Ss` (e.g. `RKSs`, const std::string&).
        old = [n for n in dyn_names if n.startswith("_Z") and re.search(r"(?:RK|P|R)Ss", n)]
        out["dynsym_old_string_names"] = len(old)
        if cxx11 and not old:
            out["dynsym_value"] = 1
        elif old and not cxx11:
            out["dynsym_value"] = 0
    vals = {v for v in (out["torch_config_value"], out["dynsym_value"]) if v is not None}
    if len(vals) == 1:
        out["value"] = vals.pop()
        out["method"] = "+".join(k for k in ("torch_config", "dynsym") if out[f"{k}_value"] is not None)
    else:
        out["value"] = None
        out["reason"] = "measurements disagree" if vals else "neither measurement found"
    return out


def cuda_requirements(requires_dist: Iterable[str]) -> list[str]:
    return [r for r in requires_dist if re.match(r"(nvidia|cuda)-", r)]


def python_spec(abi_tags: Iterable[str]) -> dict[str, Any]:
    """ABI tags of the published wheels (cp37m, cp311, cp313t) -> CPython versions, the free-threaded
    ones, and a specifier over the regular ones."""
    gil: set[tuple[int, int]] = set()
    ft: set[tuple[int, int]] = set()
    for t in abi_tags:
        m = re.fullmatch(r"cp(\d)(\d+)(m|t)?", t)
        if not m:
            continue
        (ft if m.group(3) == "t" else gil).add((int(m.group(1)), int(m.group(2))))
    vs = sorted(gil)
    spec = None
    if vs:
        contiguous = all(b[0] == a[0] and b[1] == a[1] + 1 for a, b in zip(vs, vs[1:]))
        lo, hi = vs[0], vs[-1]
        spec = f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1] + 1}" if contiguous else \
            " || ".join(f"=={a}.{b}.*" for a, b in vs)
    return {"versions": [f"{a}.{b}" for a, b in vs], "free_threaded": [f"{a}.{b}t" for a, b in sorted(ft)],
            "specifier": spec}


# ---------------------------------------------------------------- PyPI adapter

def _tags(filename: str) -> dict[str, Any]:
    _n, _v, build, tags = parse_wheel_filename(filename)
    tl = sorted(tags, key=str)
    return {"build_tag": build[0] if build else None,
            "python_tags": sorted({t.interpreter for t in tl}), "abi_tags": sorted({t.abi for t in tl}),
            "platform_tags": sorted({t.platform for t in tl})}


def linux_wheels(fs: Iterable[pypi.PyPIFile], machine: str) -> list[pypi.PyPIFile]:
    """The Linux wheels for one CPU architecture (`x86_64`, `aarch64`): a manylinux*/linux* platform tag ending
    in `_<machine>`."""
    return sorted((f for f in fs if f.filename.endswith(".whl") and
                   any(p.startswith(("manylinux", "linux")) and p.endswith("_" + machine)
                       for p in _tags(f.filename)["platform_tags"])), key=lambda f: f.filename)


def linux_x86_64(fs: Iterable[pypi.PyPIFile]) -> list[pypi.PyPIFile]:
    return linux_wheels(fs, "x86_64")


def linux_aarch64(fs: Iterable[pypi.PyPIFile]) -> list[pypi.PyPIFile]:
    return linux_wheels(fs, "aarch64")


def pick_wheel(wheels: list[pypi.PyPIFile]) -> pypi.PyPIFile:
    """The wheel measured: highest build tag (what pip installs), PREFERRED_CP if present."""
    def key(f: pypi.PyPIFile):
        t = _tags(f.filename)
        py = t["python_tags"][0]
        abi = t["abi_tags"][0]
        m = re.fullmatch(r"cp(\d)(\d+)", py)
        return (t["build_tag"] or 0, py == PREFERRED_CP and abi == py, not abi.endswith("t"),
                (int(m.group(1)), int(m.group(2))) if m else (0, 0))

    if not wheels:
        raise Unrecognised("no Linux wheel to measure")
    return max(wheels, key=key)


def measure_wheel(f: pypi.PyPIFile) -> dict[str, Any]:
    members = set(pypi.wheel_members(f))
    meta = pypi.metadata_fields(pypi.wheel_metadata(f))
    reqs = meta.get("Requires-Dist", [])
    vpy = parse_version_py(pypi.wheel_member(f, VERSION_PY).decode("utf-8"))
    lib = pypi.wheel_member(f, LIBTORCH_PYTHON)
    flags = parse_arch_flags(lib)
    cfg = pypi.wheel_member(f, TORCH_CONFIG).decode("utf-8", "replace") if TORCH_CONFIG in members else None
    abi = cxx11abi_from(cfg, elf_dynamic_names(lib))
    return {
        "wheel": {"filename": f.filename, "url": f.purl, "sha256": f.sha256, "citation": f.citation},
        "metadata": {
            "Requires-Python": meta["Requires-Python"][0] if meta.get("Requires-Python") else None,
            "requires_dist_cuda": cuda_requirements(reqs),
            "requires_dist_triton": [r for r in reqs if re.match(r"(pytorch-)?triton\b", r)],
        },
        "version_py": {"member": VERSION_PY, **vpy},
        "arch_flags": {
            "member": LIBTORCH_PYTHON,
            "member_sha256": hashlib.sha256(lib).hexdigest(),
            "method": "bytes matching ARCH_FLAGS_RE (NUL-terminated string literal) in the member",
            "strings": flags,
        },
        "cxx11abi": {"members": [m for m in (TORCH_CONFIG, LIBTORCH_PYTHON) if m in members], **abi},
    }


def _file_records(wheels: list[pypi.PyPIFile]) -> list[dict[str, Any]]:
    return [{"filename": f.filename, "url": f.purl, "sha256": f.sha256, "size": f.size,
             "upload_time": f.upload_time, "yanked": f.yanked, **_tags(f.filename)} for f in wheels]


def _measure_builds(wheels: list[pypi.PyPIFile]) -> list[dict[str, Any]]:
    """One measured wheel per build tag, the highest build tag first: that is what pip picks."""
    builds = sorted({_tags(f.filename)["build_tag"] or 0 for f in wheels})
    return [measure_wheel(pick_wheel([f for f in wheels if (_tags(f.filename)["build_tag"] or 0) == b]))
            for b in reversed(builds)]


def extract(version: str, fs: Optional[list[pypi.PyPIFile]] = None) -> dict[str, Any]:
    if fs is None:
        fs = pypi.versions_of(PYPI_NAME, pypi.files(PYPI_NAME)).get(version, [])
    wheels = linux_x86_64(fs)
    measured = _measure_builds(wheels)
    arm = linux_aarch64(fs)
    commit = measured[0]["version_py"]["git_version"] if measured else None
    return {
        "package": PYPI_NAME,
        "version": version,
        "index": purl.pypi(PYPI_NAME),
        "linux_x86_64_wheels": _file_records(wheels),
        "measured": measured,
        # The same for Linux aarch64: every wheel, and one measured per build tag (its METADATA's nvidia-*
        # Requires-Dist and torch/version.py's `cuda` say whether PyPI's aarch64 torch is a CUDA build).
        "linux_aarch64_wheels": _file_records(arm),
        "linux_aarch64_measured": _measure_builds(arm),
        "git": {"commit": commit, "url": f"{REPO_URL}/tree/{commit}" if commit else None},
    }


def release_versions(fs: list[pypi.PyPIFile]) -> dict[str, list[pypi.PyPIFile]]:
    out = {}
    for v, vfs in pypi.versions_of(PYPI_NAME, fs).items():
        pv = Version(v)
        if pv >= FIRST and not pv.is_prerelease and not pv.is_devrelease:
            out[v] = vfs
    return dict(sorted(out.items(), key=lambda kv: Version(kv[0])))


def extract_all(out_dir: Path, only: Optional[list[str]] = None, say=lambda s: print(s, file=sys.stderr)) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for v, vfs in release_versions(pypi.files(PYPI_NAME)).items():
        if only and v not in only:
            continue
        say(f"torch {v}")
        doc = extract(v, vfs)
        p = out_dir / f"{v}.json"
        p.write_text(pypi.dump(doc))
        written.append(p)
    return written


# ---------------------------------------------------------------- derivation (pure)

def derive_one(ext: dict[str, Any]) -> dict[str, Any]:
    cp = set()
    for f in ext["linux_x86_64_wheels"]:
        cp.update(f["abi_tags"])
    py = python_spec(t for t in cp if t.startswith("cp"))
    m = ext["measured"][0] if ext["measured"] else None
    out: dict[str, Any] = {"version": ext["version"], "python": py}
    if m is None:
        out.update({"default_cuda": None, "pypi_archs": None, "ptx": None, "cxx11abi": None, "git_commit": None,
                    "reason": "no Linux x86_64 wheel measured", "sources": []})
        return out
    vpy = m["version_py"]
    flags = m["arch_flags"]["strings"]
    archs: Optional[list[str]]
    ptx: Optional[list[str]]
    arch_list: Optional[str]
    arch_reason: Optional[str]
    if len(flags) == 1:
        parts = split_arch_flags(flags[0])
        archs, ptx, arch_list, arch_reason = parts["sm"], parts["ptx"], arch_list_form(flags[0]), None
    else:
        archs = ptx = arch_list = None
        arch_reason = f"{len(flags)} arch-flag strings found in {LIBTORCH_PYTHON}, expected exactly 1"
    local = vpy["__version__"].split("+", 1)[1] if "+" in vpy["__version__"] else None
    out.update({
        "requires_python": m["metadata"]["Requires-Python"],
        "default_cuda": vpy.get("cuda"),
        "default_hip": vpy.get("hip"),
        "local_version": local,
        "cuda_requirements": m["metadata"]["requires_dist_cuda"],
        "pypi_arch_flags": flags[0] if len(flags) == 1 else None,
        "pypi_archs": archs,
        "ptx": ptx or None if archs is not None else None,
        "torch_cuda_arch_list": arch_list,
        "cxx11abi": m["cxx11abi"]["value"],
        "cxx11abi_method": m["cxx11abi"].get("method"),
        "git_commit": vpy["git_version"],
        "sources": [x["wheel"]["citation"] for x in ext["measured"]],
    })
    if arch_reason:
        out["arch_reason"] = arch_reason
    if m["cxx11abi"]["value"] is None:
        out["cxx11abi_reason"] = m["cxx11abi"].get("reason")
    others = ext["measured"][1:]
    diffs = [o["wheel"]["filename"] for o in others
             if o["arch_flags"]["strings"] != m["arch_flags"]["strings"] or o["version_py"]["git_version"] != vpy["git_version"]
             or o["version_py"].get("cuda") != vpy.get("cuda")]
    if others:
        out["other_builds"] = {"measured": [o["wheel"]["filename"] for o in others], "differ": diffs}
    return out


def derive(extracts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [derive_one(e) for e in sorted(extracts, key=lambda e: Version(e["version"]))]


def load_extracts(src: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(src.glob("*.json")):
        if re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?\.json", p.name):
            out.append(json.loads(p.read_text()))
    return out


# ---------------------------------------------------------------- non-PyPI variants (git adapter)
#
# Which variants a release published: pytorch/test-infra tools/scripts/generate_binary_build_matrix.py
# (the matrix PyTorch's release validation and getting-started page use), read at the newest commit,
# on release/X.Y or main, dated no later than the release's first PyPI upload whose
# CURRENT_CANDIDATE_VERSION is that release: its "test" channel lists the candidate's CUDA and ROCm
# variants.
# CUDA arch lists 2.0 .. 2.5: pytorch/builder release/X.Y manywheel/build_cuda.sh (the binary builds
# ran builder's manywheel scripts until pytorch/pytorch#138103 moved them into pytorch/pytorch on
# 2024-10-18, after 2.5.0), at the branch tip as of the first PyPI upload.
# ROCm gfx lists 2.0 .. 2.4: pytorch/builder release/X.Y manywheel/build_docker.sh, which bakes
# PYTORCH_ROCM_ARCH into the manylinux ROCm builder image (builder dropped its docker scripts in
# July 2024, so 2.5 on has no builder source).
# Later releases keep these scripts in pytorch/pytorch, which cannot be read here at the release
# commits: those lists are not-found, except the variant PyPI carries, whose list is measured.

BUILDER_URL = "https://github.com/pytorch/builder"
TEST_INFRA_URL = "https://github.com/pytorch/test-infra"
MATRIX_PY = "tools/scripts/generate_binary_build_matrix.py"
BUILD_CUDA = "manywheel/build_cuda.sh"
BUILD_DOCKER = "manywheel/build_docker.sh"
BUILDER_CUDA_UNTIL = Version("2.6.0")   # builder's build_cuda.sh drove releases below this
BUILDER_ROCM_UNTIL = Version("2.5.0")   # builder's build_docker.sh set the ROCm gfx list below this
MOVE_PR = "https://github.com/pytorch/pytorch/pull/138103"




def _tip_at(repo: Path, ref: str, when: str) -> Optional[str]:
    out = git_ok(repo, "rev-list", "-1", "--first-parent", f"--before={when}", ref)
    return out.strip() or None if out is not None else None


def _file_at(repo: Path, url: str, commit: str, path: str) -> Optional[dict[str, Any]]:
    text = git_ok(repo, "show", f"{commit}:{path}")
    if text is None:
        return None
    return {"text": text, "path": path, "commit": commit, "blob": git(repo, "rev-parse", f"{commit}:{path}").strip(),
            "date": git(repo, "show", "-s", "--format=%cI", commit).strip(),
            "url_at_commit": f"{url}/blob/{commit}/{path}"}


def _evidence(f: dict[str, Any], lines: list[tuple]) -> dict[str, Any]:
    """Where a fact was read: the file at its commit, its blob, and the verbatim lines (a third item
    names the enclosing assignment of a line that does not say it itself)."""
    return {"url_at_commit": f["url_at_commit"] + (f"#L{lines[0][0]}" if lines else ""), "blob": f["blob"],
            "commit_date": f["date"],
            "lines": [{"line": ln[0], "text": ln[1].strip(), **({"in": ln[2]} if len(ln) > 2 else {})} for ln in lines]}


def _find_lines(text: str, pred) -> list[tuple[int, str]]:
    return [(i, l) for i, l in enumerate(text.splitlines(), 1) if pred(l)]


def parse_release_matrix(text: str) -> dict[str, Any]:
    """CURRENT_CANDIDATE_VERSION and the channel dicts of generate_binary_build_matrix.py (ast, no exec)."""
    import ast

    tree = ast.parse(text)
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("CURRENT_CANDIDATE_VERSION", "CURRENT_STABLE_VERSION", "CUDA_ARCHES_DICT", "ROCM_ARCHES_DICT"):
                try:
                    out[name] = ast.literal_eval(node.value)
                except ValueError:
                    raise Unrecognised(f"{name} is not a literal")
    return out


# ---------------------------------------------------------------- the linux-aarch64 part of the build matrix
#
# generate_binary_build_matrix.py builds its linux-aarch64 wheel list in code, not in one literal:
# `generate_wheels_matrix(os="linux-aarch64", channel="test", with_cpu=ENABLE, with_cuda=ENABLE, ...)` fills
# `arches` ([CPU_AARCH64] in 2.1 .. 2.3; [CPU_AARCH64, CUDA_AARCH64] in 2.4 .. 2.6, the one CUDA named by
# translate_desired_cuda; CPU_AARCH64 plus CUDA_AARCH64_ARCHES from 2.7, a module list, per channel from
# 2.12.1, which initialize_globals may extend for the test channel), and each arch becomes a wheel variant
# through arch_type() and translate_desired_cuda(). `aarch64_wheel_matrix` reads those four functions with
# a small interpreter over the file's syntax tree (ast; nothing of the file is executed). It evaluates
# literals, module constants, comparisons, `in`, and/or/not, conditional expressions, list `+`, dict
# subscripts, `.append`/`.extend`/`+=` and the `cu{...replace(...)}` f-strings; a statement it cannot
# evaluate that sets a name the result depends on stops it (Unrecognised) rather than guess.

AARCH64_OS = "linux-aarch64"


class _Eval:
    """Statements of a few functions of generate_binary_build_matrix.py, interpreted over module constants."""

    TRACKED = frozenset({"arches", "CUDA_ARCHES", "ROCM_ARCHES", "CUDA_AARCH64_ARCHES"})

    def __init__(self, tree: Any, text: str) -> None:
        import ast

        self.ast = ast
        self.lines = text.splitlines()
        self.env: dict[str, Any] = {}
        self.where: dict[str, list[int]] = {}  # tracked name -> the lines that set it
        self.funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.env[node.targets[0].id] = ast.literal_eval(node.value)
                    self.where[node.targets[0].id] = [node.lineno]
                except ValueError:
                    pass

    # -- expressions
    def value(self, n: Any, local: dict[str, Any]) -> Any:  # noqa: C901 (an interpreter: docs/architecture.md)
        ast = self.ast
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in local:
                return local[n.id]
            if n.id in self.env:
                return self.env[n.id]
            raise Unrecognised(f"line {n.lineno}: unknown name {n.id}")
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "mod":
            return self.value(ast.Name(id=n.attr, lineno=n.lineno), local)  # mod = sys.modules[__name__]
        if isinstance(n, (ast.List, ast.Tuple)):
            return [self.value(e, local) for e in n.elts]
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            a, b = self.value(n.left, local), self.value(n.right, local)
            if isinstance(a, list) and isinstance(b, list):
                return a + b
            raise Unrecognised(f"line {n.lineno}: + of {type(a).__name__} and {type(b).__name__}")
        if isinstance(n, ast.Subscript):
            container, key = self.value(n.value, local), self.value(n.slice, local)
            if isinstance(container, dict) and key in container:
                return container[key]
            raise Unrecognised(f"line {n.lineno}: subscript {key!r} not found")
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = self.value(n.left, local), self.value(n.comparators[0], local)
            op = n.ops[0]
            if isinstance(op, ast.Eq):
                return a == b
            if isinstance(op, ast.NotEq):
                return a != b
            if isinstance(op, ast.In):
                return a in b
            if isinstance(op, ast.NotIn):
                return a not in b
            if isinstance(op, ast.Is) and isinstance(n.comparators[0], ast.Constant) and b is None:
                return a is None
            raise Unrecognised(f"line {n.lineno}: comparison {type(op).__name__}")
        if isinstance(n, ast.BoolOp):
            vals = [bool(self.value(v, local)) for v in n.values]
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return not self.value(n.operand, local)
        if isinstance(n, ast.IfExp):
            return self.value(n.body if self.value(n.test, local) else n.orelse, local)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" \
                and isinstance(n.func.value, ast.Dict) and 1 <= len(n.args) <= 2 and not n.keywords:
            key = self.value(n.args[0], local)  # {...}.get(key, default): only the entry taken is evaluated
            for k, v in zip(n.func.value.keys, n.func.value.values):
                if k is None:
                    raise Unrecognised(f"line {n.lineno}: ** in a dict")
                if self.value(k, local) == key:
                    return self.value(v, local)
            return self.value(n.args[1], local) if len(n.args) == 2 else None
        if isinstance(n, ast.JoinedStr):
            out = ""
            for part in n.values:
                if isinstance(part, ast.Constant):
                    out += str(part.value)
                elif isinstance(part, ast.FormattedValue) and part.format_spec is None and part.conversion == -1:
                    out += self.replaced(part.value, local)
                else:
                    raise Unrecognised(f"line {n.lineno}: f-string part")
            return out
        raise Unrecognised(f"line {getattr(n, 'lineno', '?')}: {type(n).__name__} not interpreted")

    def replaced(self, n: Any, local: dict[str, Any]) -> str:
        """NAME or NAME.replace('a', 'b').replace(...) inside an f-string."""
        ast = self.ast
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace" \
                and len(n.args) == 2 and not n.keywords:
            a, b = (self.value(x, local) for x in n.args)
            return self.replaced(n.func.value, local).replace(a, b)
        v = self.value(n, local)
        if not isinstance(v, str):
            raise Unrecognised(f"line {n.lineno}: formatted value is not a string")
        return v

    # -- statements
    def _target(self, t: Any) -> Optional[str]:
        ast = self.ast
        if isinstance(t, ast.Name):
            return t.id
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "mod":
            return t.attr
        return None

    def _sets(self, nodes: list[Any]) -> set[str]:
        """The tracked names a block of statements may set."""
        ast = self.ast
        out: set[str] = set()
        for node in nodes:
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]):
                        name = self._target(t)
                        if name in self.TRACKED:
                            out.add(name)
                elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                        and sub.func.attr in ("append", "extend", "insert", "remove", "pop", "clear"):
                    name = self._target(sub.func.value)
                    if name in self.TRACKED:
                        out.add(name)
        return out

    def run(self, body: list[Any], local: dict[str, Any]) -> Optional[Any]:  # noqa: C901 (an interpreter: docs/architecture.md)
        """Run a block; the value of a `return` it reaches (None if it reaches none)."""
        ast = self.ast
        for st in body:
            touched = self._sets([st])
            if isinstance(st, ast.Return):
                return self.value(st.value, local) if st.value is not None else None
            if isinstance(st, ast.If):
                if not touched and not any(isinstance(x, ast.Return) for x in ast.walk(st)):
                    continue
                branch = st.body if self.value(st.test, local) else st.orelse
                before = {k: list(v) for k, v in self.where.items()}
                r = self.run(branch, local)
                for changed in self._sets(branch):  # the condition a change rests on is part of its evidence
                    if self.where.get(changed) != before.get(changed):
                        self.where.setdefault(changed, []).append(st.lineno)
                if r is not None:
                    return r
                continue
            if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                names = [self._target(t) for t in targets]
                try:
                    val = self.value(st.value, local)
                except Unrecognised:
                    if touched:
                        raise
                    continue
                for target in names:
                    if target is None:
                        if touched:
                            raise Unrecognised(f"line {st.lineno}: assignment target not interpreted")
                        continue
                    self._store(target, val, local, st.lineno)
                continue
            if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add):
                aug = self._target(st.target)
                if aug is None or aug not in self.TRACKED:
                    continue
                cur, add = self._load(aug, local, st.lineno), self.value(st.value, local)
                if not (isinstance(cur, list) and isinstance(add, list)):
                    raise Unrecognised(f"line {st.lineno}: += on a non-list")
                self._store(aug, cur + add, local, st.lineno, append=True)
                continue
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and touched:
                call = st.value
                name = self._target(call.func.value)
                if name is None:
                    raise Unrecognised(f"line {st.lineno}: call target not interpreted")
                cur = self._load(name, local, st.lineno)
                if call.func.attr == "append" and len(call.args) == 1:
                    cur.append(self.value(call.args[0], local))
                elif call.func.attr == "extend" and len(call.args) == 1:
                    cur.extend(self.value(call.args[0], local))
                else:
                    raise Unrecognised(f"line {st.lineno}: {call.func.attr}() on {name}")
                self.where.setdefault(name, []).append(st.lineno)
                continue
            if touched:
                raise Unrecognised(f"line {st.lineno}: {type(st).__name__} sets {sorted(touched)}, not interpreted")
        return None

    def _load(self, name: Optional[str], local: dict[str, Any], line: int) -> Any:
        if name is None:
            raise Unrecognised(f"line {line}: target not interpreted")
        if name in local:
            return local[name]
        if name in self.env:
            return self.env[name]
        raise Unrecognised(f"line {line}: {name} used before it is set")

    def _store(self, name: str, val: Any, local: dict[str, Any], line: int, append: bool = False) -> None:
        if isinstance(val, list):
            val = list(val)  # a copy: CUDA_ARCHES = CUDA_ARCHES_DICT[channel] must not alias the dict's list
        (local if name in local else self.env)[name] = val
        if name in self.TRACKED:
            self.where[name] = (self.where.get(name, []) if append else []) + [line]

    def call(self, name: str, args: dict[str, Any]) -> Any:
        """Run a module function with keyword arguments (its parameter defaults fill the rest)."""
        ast = self.ast
        fn = self.funcs.get(name)
        if fn is None:
            raise Unrecognised(f"no function {name}")
        params = [a.arg for a in fn.args.args]
        defaults = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
        local: dict[str, Any] = {}
        for p in params:
            if p in args:
                local[p] = args[p]
            elif p in defaults:
                local[p] = self.value(defaults[p], {})
            else:
                raise Unrecognised(f"{name}() needs {p}")
        for g in (n for n in ast.walk(fn) if isinstance(n, ast.Global)):
            for gname in g.names:
                local.pop(gname, None)
        self._frame = local
        return self.run(fn.body, local), local


def aarch64_wheel_matrix(text: str, channel: str = "test") -> dict[str, Any]:  # noqa: C901 (an interpreter: docs/architecture.md)
    """The Linux aarch64 wheel variants generate_binary_build_matrix.py lists for a channel:
    {"listed": bool, "arches": [...], "variants": [{"arch_version", "gpu_arch_type", "desired_cuda", "cuda"}],
    "lines": [(line, text, what)]}; "listed" is False where the file names no linux-aarch64 build at all."""
    import ast

    if f'"{AARCH64_OS}"' not in text and f"'{AARCH64_OS}'" not in text:
        return {"listed": False, "arches": [], "variants": [], "lines": [],
                "reason": f"the file names no {AARCH64_OS} build"}
    tree = ast.parse(text)
    ev = _Eval(tree, text)
    const = ev.env
    enable = const.get("ENABLE")
    if not isinstance(enable, str):
        raise Unrecognised("no ENABLE constant")
    init_args = {"channel": channel, "os": AARCH64_OS, "build_python_only": False, "getting_started": False}
    init = ev.funcs.get("initialize_globals")
    if init is None:
        raise Unrecognised("no initialize_globals")
    ev.call("initialize_globals", {k: v for k, v in init_args.items() if k in [a.arg for a in init.args.args]})
    gen = ev.funcs.get("generate_wheels_matrix")
    if gen is None:
        raise Unrecognised("no generate_wheels_matrix")
    block = next((st for st in gen.body if isinstance(st, ast.If) and isinstance(st.test, ast.Compare)
                  and isinstance(st.test.left, ast.Name) and st.test.left.id == "arches"
                  and isinstance(st.test.ops[0], ast.Is)), None)
    if block is None:
        raise Unrecognised("generate_wheels_matrix has no `if arches is None:` block")
    local: dict[str, Any] = {"os": AARCH64_OS, "channel": channel, "arches": None, "upload_to_base_bucket": None}
    for p in (a.arg for a in gen.args.args):
        if p.startswith("with_"):
            local[p] = enable
    ev.where.pop("arches", None)
    ev.run(block.body, local)
    arches = local["arches"]
    if not isinstance(arches, list) or not all(isinstance(a, str) for a in arches):
        raise Unrecognised(f"arches is {arches!r}")
    arch_lines = ev.where.get("arches", [])
    variants = []
    for a in arches:
        gpu_type = ev.call("arch_type", {"arch_version": a})[0]
        if not isinstance(gpu_type, str):
            raise Unrecognised(f"arch_type({a!r}) returned nothing")
        cpu_like = [const.get(k) for k in ("CPU", "CPU_AARCH64", "XPU") if k in const] + ["cpu", "cpu-aarch64"]
        gpu_version = "" if a in cpu_like else a
        desired = ev.call("translate_desired_cuda", {"gpu_arch_type": gpu_type, "gpu_arch_version": gpu_version})[0]
        if not isinstance(desired, str):
            raise Unrecognised(f"translate_desired_cuda({gpu_type!r}, {gpu_version!r}) is {desired!r}")
        cuda = None
        if desired != "cpu":
            m = re.fullmatch(r"cu(\d+)(\d)", desired)
            if not m or not gpu_type.startswith("cuda"):
                raise Unrecognised(f"linux-aarch64 arch {a!r} -> {gpu_type!r} / {desired!r}: neither cpu nor a CUDA build")
            cuda = f"{m.group(1)}.{m.group(2)}"
            named = re.fullmatch(r"(\d+\.\d+)-aarch64", a)
            if named and named.group(1) != cuda:
                raise Unrecognised(f"arch {a!r} translates to {desired!r}")
        variants.append({"arch_version": a, "gpu_arch_type": gpu_type, "desired_cuda": desired, "cuda": cuda})
    # the lines the answer rests on: what set `arches` (and the lists it was made of), the translation of CUDA_AARCH64
    lines: list[tuple[int, str, str]] = []
    for n in arch_lines:
        lines.append((n, ev.lines[n - 1], "generate_wheels_matrix: arches"))
    if any(v["cuda"] for v in variants) and "CUDA_AARCH64_ARCHES" in ev.where and any(
            "CUDA_AARCH64_ARCHES" in ev.lines[n - 1] for n in arch_lines):
        for n in ev.where["CUDA_AARCH64_ARCHES"]:
            lines.append((n, ev.lines[n - 1], "CUDA_AARCH64_ARCHES"))
        dict_line = next((i for i, l in enumerate(ev.lines, 1) if l.startswith("CUDA_AARCH64_ARCHES_DICT")), None)
        if dict_line is not None and any("CUDA_AARCH64_ARCHES_DICT" in ev.lines[n - 1] for n in ev.where["CUDA_AARCH64_ARCHES"]):
            for i in range(dict_line, min(dict_line + 8, len(ev.lines))):
                if f'"{channel}"' in ev.lines[i]:
                    lines.append((i + 1, ev.lines[i], "CUDA_AARCH64_ARCHES_DICT"))
                    break
    trans = ev.funcs["translate_desired_cuda"]
    for node in ast.walk(trans):
        if isinstance(node, ast.Dict):
            for k in node.keys:
                if k is not None and any(v["cuda"] for v in variants):
                    try:
                        key = ev.value(k, {})
                    except Unrecognised:
                        continue
                    if key in {v["gpu_arch_type"] for v in variants if v["cuda"]}:
                        lines.append((k.lineno, ev.lines[k.lineno - 1], "translate_desired_cuda"))
    seen: set[int] = set()
    uniq = []
    for entry in sorted(lines):
        if entry[0] not in seen:
            seen.add(entry[0])
            uniq.append(entry)
    return {"listed": True, "arches": arches, "variants": variants, "lines": uniq}


def _fnmatch_bash(pattern: str, value: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(value, alt.strip()) for alt in pattern.split("|"))


def cuda_arch_list_from_build_cuda(text: str, cuda: str) -> dict[str, Any]:
    """Interpret the TORCH_CUDA_ARCH_LIST logic of builder's manywheel/build_cuda.sh for one CUDA
    version on x86_64: a base assignment, then `case ${CUDA_VERSION} in` arms that append to or
    replace it, optionally split on GPU_ARCH_TYPE = cuda-aarch64 (the else branch is x86_64)."""
    lines = text.splitlines()
    var = "TORCH_CUDA_ARCH_LIST"
    base_re = re.compile(rf'^\s*{var}="([^"$]*)"\s*$')
    app_re = re.compile(rf'^\s*{var}="\$\{{{var}\}};([^"]*)"\s*$')
    case_i = next((i for i, l in enumerate(lines) if re.match(r"^\s*case \$\{CUDA_VERSION\} in\s*$", l)), None)
    if case_i is None:
        raise Unrecognised("no `case ${CUDA_VERSION} in`")
    value, used = None, []
    for i in range(case_i - 1, -1, -1):
        m = base_re.match(lines[i])
        if m:
            value, used = m.group(1), [(i + 1, lines[i])]
            break
    arm_i, i = None, case_i + 1
    while i < len(lines) and not re.match(r"^\s*esac\s*$", lines[i]):
        m = re.match(r"^\s*([0-9.\[\]|* ]+|\*)\)\s*$", lines[i])
        if m and arm_i is None and _fnmatch_bash(m.group(1), cuda):
            arm_i = i
        i += 1
    if arm_i is None or lines[arm_i].strip() == "*)":
        raise Unrecognised(f"no case arm for CUDA {cuda}")
    used.append((arm_i + 1, lines[arm_i]))
    in_if, branch = False, None
    for j in range(arm_i + 1, len(lines)):
        l = lines[j]
        if l.strip() == ";;":
            break
        if re.match(r'^\s*if \[\[ "\$GPU_ARCH_TYPE" = "cuda-aarch64" \]\]; then\s*$', l):
            in_if, branch = True, "aarch64"
            continue
        if in_if and l.strip() == "else":
            branch = "x86_64"
            continue
        if in_if and l.strip() == "fi":
            in_if, branch = False, None
            continue
        if l.strip().startswith("if "):
            raise Unrecognised(f"unknown condition in the {cuda} arm: {l.strip()}")
        if in_if and branch == "aarch64":
            continue
        m = app_re.match(l)
        if m:
            if value is None:
                raise Unrecognised("append before any base value")
            value = f"{value};{m.group(1)}"
            used.append((j + 1, l))
            continue
        m = base_re.match(l)
        if m:
            value = m.group(1)
            used.append((j + 1, l))
    if value is None:
        raise Unrecognised("no TORCH_CUDA_ARCH_LIST value")
    later = [l for l in lines[i:] if re.match(rf'^\s*{var}=', l) and "OVERRIDE_TORCH_CUDA_ARCH_LIST" not in l]
    if later:
        raise Unrecognised(f"TORCH_CUDA_ARCH_LIST reassigned after the case: {later[0].strip()}")
    return {"arch_list": value, "lines": used}


def arch_list_tokens(arch_list: str) -> dict[str, list[str]]:
    """'5.0;6.0;9.0+PTX' -> {'sm': ['sm_50','sm_60','sm_90'], 'ptx': ['compute_90']} (the order kept)."""
    sm, ptx = [], []
    for item in arch_list.split(";"):
        item = item.strip()
        m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", item)
        if not m:
            raise Unrecognised(f"arch list item {item!r}")
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        sm.append(f"sm_{num}")
        if m.group(4):
            ptx.append(f"compute_{num}")
    return {"sm": sm, "ptx": ptx}


def rocm_arch_from_build_docker(text: str, rocm: str) -> dict[str, Any]:
    """Interpret PYTORCH_ROCM_ARCH in the `rocm)` arm of builder's manywheel/build_docker.sh: a base
    assignment plus `if [[ $ROCM_VERSION_INT -ge N ]]; then` appends (ROCM_VERSION_INT =
    major*10000 + minor*100 + patch)."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", rocm)
    if not m:
        raise Unrecognised(f"ROCm version {rocm}")
    vint = int(m.group(1)) * 10000 + int(m.group(2)) * 100 + int(m.group(3) or 0)
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"^\s*rocm\)\s*$", l)), None)
    if start is None:
        raise Unrecognised("no rocm) arm")
    value: Optional[str] = None
    used: list[tuple[int, str]] = []
    cond: Optional[tuple[int, tuple[int, str]]] = None  # the open `if ... -ge N; then`: N and its line
    for j in range(start, len(lines)):
        l = lines[j]
        if l.strip() == ";;":
            break
        mc = re.match(r"^\s*if \[\[ \$ROCM_VERSION_INT -ge (\d+) \]\]; then\s*$", l)
        if mc:
            cond = int(mc.group(1)), (j + 1, l)
            continue
        if cond is not None and l.strip() == "fi":
            cond = None
            continue
        mb = re.match(r'^\s*PYTORCH_ROCM_ARCH="([^"$]*)"\s*$', l)
        ma = re.match(r'^\s*PYTORCH_ROCM_ARCH(?:="\$\{PYTORCH_ROCM_ARCH\}|\+=")(;[^"]*)"\s*$', l)
        if mb and cond is None:
            value = mb.group(1)
            used.append((j + 1, l))
        elif ma:
            if cond is None or vint >= cond[0]:
                value = (value or "") + ma.group(1)
                used += ([cond[1]] if cond is not None else []) + [(j + 1, l)]
        elif "PYTORCH_ROCM_ARCH=" in l and "build-arg" not in l:
            raise Unrecognised(f"unknown PYTORCH_ROCM_ARCH assignment: {l.strip()}")
    if value is None:
        raise Unrecognised("no PYTORCH_ROCM_ARCH in the rocm) arm")
    return {"gfx": [g for g in value.split(";") if g], "lines": used}


def _matrix_at_release(ti: Path, version: str, when: str) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
    mm = ".".join(version.split(".")[:2])
    cands = []
    for ref in (f"release/{mm}", "main"):
        out = git_ok(ti, "log", "--format=%H %cI", f"--before={when}", ref, "--", MATRIX_PY)
        for line in (out or "").splitlines():
            sha, date = line.split()
            cands.append((date, sha))
    for date, sha in sorted(set(cands), reverse=True):
        f = _file_at(ti, TEST_INFRA_URL, sha, MATRIX_PY)
        if f is None:
            continue
        try:
            m = parse_release_matrix(f["text"])
        except (SyntaxError, Unrecognised):
            continue
        if m.get("CURRENT_CANDIDATE_VERSION") == version and "test" in (m.get("CUDA_ARCHES_DICT") or {}):
            return f, m
    return None


def _first_upload(ext: dict[str, Any]) -> str:
    return min(f["upload_time"] for f in ext["linux_x86_64_wheels"])


def variants_for(builder: Path, ti: Path, ext: dict[str, Any]) -> dict[str, Any]:
    version = ext["version"]
    v = Version(version)
    when = _first_upload(ext)
    measured = ext["measured"][0] if ext["measured"] else None
    pypi_cuda = measured["version_py"].get("cuda") if measured else None
    pypi_local = (measured["version_py"]["__version__"].split("+", 1)[1]
                  if measured and "+" in measured["version_py"]["__version__"] else None)
    out: dict[str, Any] = {"first_pypi_upload": when, "git_commit": ext["git"]["commit"], "variants": []}

    found = _matrix_at_release(ti, version, when)
    listing_ev = None
    cudas: list[str] = []
    rocms: list[str] = []
    if found:
        f, m = found
        cudas, rocms = list(m["CUDA_ARCHES_DICT"]["test"]), list((m.get("ROCM_ARCHES_DICT") or {}).get("test") or [])
        lines: list[tuple[int, str] | tuple[int, str, str]] = [
            *_find_lines(f["text"], lambda l: l.startswith("CURRENT_CANDIDATE_VERSION"))]
        blocks = f["text"].splitlines()
        for name in ("CUDA_ARCHES_DICT", "ROCM_ARCHES_DICT"):
            start = next((i for i, l in enumerate(blocks) if l.startswith(f"{name} =")), None)
            if start is None:
                continue
            for k in range(start, min(start + 8, len(blocks))):
                if '"test"' in blocks[k]:
                    lines.append((k + 1, blocks[k], name))
                    break
        listing_ev = _evidence(f, sorted(lines))
        out["listing"] = {"status": "verified", "evidence": listing_ev}
    else:
        out["listing"] = {"status": "not-found",
                          "reason": f"no commit of {MATRIX_PY} in pytorch/test-infra (release/{v.major}.{v.minor} or main) "
                                    f"dated before {when} names {version} as CURRENT_CANDIDATE_VERSION"}
    if pypi_cuda and pypi_cuda not in cudas:
        cudas.append(pypi_cuda)  # the PyPI build is itself a published variant (its wheel says +cuXYZ)
    out["linux_aarch64"] = aarch64_listing(found[0] if found else None, version, when)

    build_cuda = None
    if v < BUILDER_CUDA_UNTIL:
        tip = _tip_at(builder, f"release/{v.major}.{v.minor}", when)
        build_cuda = _file_at(builder, BUILDER_URL, tip, BUILD_CUDA) if tip else None
    build_docker = None
    if v < BUILDER_ROCM_UNTIL:
        tip = _tip_at(builder, f"release/{v.major}.{v.minor}", when)
        build_docker = _file_at(builder, BUILDER_URL, tip, BUILD_DOCKER) if tip else None

    out["variants"] += [_cuda_variant(cuda, version, v, ext, found, listing_ev, build_cuda, measured, pypi_local) for cuda in cudas]
    out["variants"] += [_rocm_variant(rocm, version, ext, listing_ev, build_docker) for rocm in rocms]
    return out


def _cuda_variant(cuda: str, version: str, v: Version, ext: dict[str, Any], found: Any, listing_ev: Optional[dict[str, Any]],
                  build_cuda: Optional[dict[str, Any]], measured: Optional[dict[str, Any]], pypi_local: Optional[str]) -> dict[str, Any]:
    """One CUDA variant of a release: listed in the build matrix, its arch list from builder's build_cuda.sh, and for the
    PyPI build the arch flags measured in its wheel (the measurement wins where the two disagree)."""
    name = "cu" + cuda.replace(".", "")
    ent: dict[str, Any] = {"name": name, "cuda": cuda, "archs": None, "ptx": None, "torch_cuda_arch_list": None,
                           "evidence": [], "on_pypi": name == pypi_local}
    if listing_ev and cuda in (found[1]["CUDA_ARCHES_DICT"]["test"] if found else []):
        ent["evidence"].append({"what": "published: listed in the release candidate's build matrix", **listing_ev})
    script = None
    if build_cuda:
        try:
            script = cuda_arch_list_from_build_cuda(build_cuda["text"], cuda)
        except Unrecognised as exc:
            ent["script_reason"] = str(exc)
    if script and build_cuda:  # a script is only read from build_cuda
        toks = arch_list_tokens(script["arch_list"])
        ent.update({"archs": toks["sm"], "ptx": toks["ptx"] or None, "torch_cuda_arch_list": script["arch_list"]})
        ent["evidence"].append({"what": f"TORCH_CUDA_ARCH_LIST for CUDA {cuda} (x86_64); builder's manywheel scripts built "
                                        f"the release binaries until {MOVE_PR} (2024-10-18)",
                                **_evidence(build_cuda, script["lines"])})
    if name == pypi_local and measured and len(measured["arch_flags"]["strings"]) == 1:
        flags = measured["arch_flags"]["strings"][0]
        parts = split_arch_flags(flags)
        ent["evidence"].append({"what": "measured: CUDA_ARCH_FLAGS in the PyPI wheel of the same build",
                                "url_at_commit": measured["wheel"]["citation"],
                                "lines": [{"member": LIBTORCH_PYTHON, "text": flags},
                                          {"member": VERSION_PY, "text": next(l for l in measured["version_py"]["evidence"]
                                                                              if l.startswith("__version__"))}]})
        if script:
            same = toks["sm"] == parts["sm"] and toks["ptx"] == parts["ptx"]
            ent["script_matches_measurement"] = same
            if not same:
                ent["reason"] = "the build script and the measured wheel disagree; the measurement is kept"
        ent.update({"archs": parts["sm"], "ptx": parts["ptx"] or None, "torch_cuda_arch_list": arch_list_form(flags)})
    published = any(e["what"].startswith(("published", "measured")) for e in ent["evidence"])
    ent["status"] = "verified" if published and ent["archs"] is not None else "not-found"
    if ent["status"] == "not-found" and "reason" not in ent:
        ent["reason"] = ("arch list: " + (f"no builder script for {version} (pytorch/pytorch .ci/manywheel/build_cuda.sh "
                                           f"at {ext['git']['commit']} could not be read here)" if v >= BUILDER_CUDA_UNTIL
                                           else ent.get("script_reason", "builder script not found"))) if published \
            else "not listed in a build matrix found for this release"
    ent["published"] = "verified" if published else "not-found"
    return ent



def _rocm_variant(rocm: str, version: str, ext: dict[str, Any], listing_ev: Optional[dict[str, Any]],
                  build_docker: Optional[dict[str, Any]]) -> dict[str, Any]:
    """One ROCm variant of a release: listed in the build matrix, its gfx list from the builder's docker script."""
    if listing_ev is None:  # rocms come from the build matrix, which sets listing_ev
        raise Unrecognised(f"ROCm {rocm} listed without the build matrix that lists it")
    ent: dict[str, Any] = {"name": f"rocm{rocm}", "rocm": rocm, "archs": None, "ptx": None, "evidence": [], "on_pypi": False,
           "published": "verified"}
    ent["evidence"].append({"what": "published: listed in the release candidate's build matrix", **listing_ev})
    if build_docker:
        try:
            r = rocm_arch_from_build_docker(build_docker["text"], rocm)
            ent["archs"] = r["gfx"]
            ent["evidence"].append({"what": f"PYTORCH_ROCM_ARCH baked into the manylinux ROCm {rocm} builder image",
                                    **_evidence(build_docker, r["lines"])})
        except Unrecognised as exc:
            ent["reason"] = f"gfx list: {exc}"
    ent["status"] = "verified" if ent["archs"] is not None else "not-found"
    if ent["archs"] is None and "reason" not in ent:
        ent["reason"] = (f"gfx list: builder has no ROCm docker script for {version}; pytorch/pytorch "
                         f".ci/docker/manywheel/build.sh at {ext['git']['commit']} could not be read here")
    return ent


def aarch64_listing(f: Optional[dict[str, Any]], version: str, when: str) -> dict[str, Any]:
    """The release's Linux aarch64 wheel variants, read from the same build matrix file (at the same commit)
    as its `listing`: `verified` with the variants and the lines they rest on, `not-listed` where the file
    has no linux-aarch64 builds at all, `not-found` where no such file was found or it could not be read."""
    if f is None:
        return {"status": "not-found",
                "reason": f"no build matrix found for {version} (see listing): no commit of {MATRIX_PY} dated before {when} "
                          f"names it as CURRENT_CANDIDATE_VERSION"}
    try:
        a = aarch64_wheel_matrix(f["text"], "test")
    except (SyntaxError, Unrecognised) as exc:
        return {"status": "not-found", "reason": f"{MATRIX_PY} at {f['commit']}: the linux-aarch64 wheel list was not "
                                                 f"interpreted ({exc})", "evidence": _evidence(f, [])}
    if not a["listed"]:
        return {"status": "not-listed", "reason": f"{MATRIX_PY} at {f['commit']}: {a['reason']}", "evidence": _evidence(f, [])}
    return {"status": "verified", "channel": "test", "arches": a["arches"],
            "variants": [{"name": v["desired_cuda"], "cuda": v["cuda"], "arch_version": v["arch_version"]}
                         for v in a["variants"]],
            "evidence": _evidence(f, [(ln, text, what) for ln, text, what in a["lines"]])}


def build_variants(builder: Path, test_infra: Path, extracts: list[dict[str, Any]]) -> dict[str, Any]:
    releases = []
    for ext in sorted(extracts, key=lambda e: Version(e["version"])):
        if Version(ext["version"]) < Version("2.0.0"):
            continue
        releases.append({"version": ext["version"], **variants_for(builder, test_infra, ext)})
    heads = {name: {"head": git(repo, "rev-parse", "HEAD").strip(),
                    "head_date": git(repo, "show", "-s", "--format=%cI", "HEAD").strip()}
             for name, repo in (("pytorch/builder", builder), ("pytorch/test-infra", test_infra))}
    return {"generated_by": "python -m envkit.matrixgen.torch_source variants", "clones": heads,
            "method": {
                "listing": f"{TEST_INFRA_URL} {MATRIX_PY}: CUDA_ARCHES_DICT/ROCM_ARCHES_DICT['test'] at the newest commit "
                           "(release/X.Y or main) dated before the first PyPI upload whose CURRENT_CANDIDATE_VERSION is the release",
                "cuda_archs": f"{BUILDER_URL} release/X.Y {BUILD_CUDA} at the branch tip as of the first PyPI upload "
                              f"(releases < {BUILDER_CUDA_UNTIL}); the PyPI build's list is measured from its wheel",
                "rocm_archs": f"{BUILDER_URL} release/X.Y {BUILD_DOCKER} (releases < {BUILDER_ROCM_UNTIL})",
                "linux_aarch64": f"{TEST_INFRA_URL} {MATRIX_PY} at the listing's commit: the wheel variants "
                                 "generate_wheels_matrix(os='linux-aarch64', channel='test') lists (arches, arch_type, "
                                 "translate_desired_cuda and initialize_globals interpreted over the file's syntax tree, not run)",
            },
            "releases": releases}


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m envkit.matrixgen.torch_source")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="measure every torch release on PyPI from 1.13.0 on")
    e.add_argument("--out", default="data/sources/torch")
    e.add_argument("--version", action="append", help="only these versions (repeatable)")
    d = sub.add_parser("derive", help="per-release facts from the extracts")
    d.add_argument("--src", default="data/sources/torch")
    d.add_argument("--out", default=None, help="write here (default: stdout)")
    v = sub.add_parser("variants", help="the non-PyPI wheel variants from pytorch/builder and pytorch/test-infra clones")
    v.add_argument("--builder", required=True, help="a git clone (bare is fine) of pytorch/builder")
    v.add_argument("--test-infra", required=True, help="a git clone (bare is fine) of pytorch/test-infra")
    v.add_argument("--src", default="data/sources/torch", help="the extracts (release commits and dates)")
    v.add_argument("--out", default="data/sources/torch/variants.json")
    a = ap.parse_args(argv)
    if a.cmd == "extract":
        for p in extract_all(Path(a.out), a.version):
            print(p)
        return 0
    if a.cmd == "derive":
        text = pypi.dump(derive(load_extracts(Path(a.src))))
        if a.out:
            Path(a.out).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    doc = build_variants(Path(a.builder), Path(a.test_infra), load_extracts(Path(a.src)))
    Path(a.out).write_text(pypi.dump(doc))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
