#!/usr/bin/env python3
"""Build flash-attn and its csrc kernels (layer_norm, rotary) from the sdist, into wheels, offline.

Runs inside a devel image (the Dockerfile envkit generates calls it) or directly on a GPU host:

    python build_flash_attn.py --sdist flash_attn-2.7.4.post1.tar.gz --targets rotary \
        --arch-list 9.0 --out wheels/

What it fixes, each a known way the upstream build breaks:
- csrc/*/setup.py hard-code `-gencode arch=compute_70,...` (nvcc >= 12.8/13 rejects compute_70)
  plus sm_80/sm_90 whatever TORCH_CUDA_ARCH_LIST says: those lines are neutralised, and the arch
  list is pinned through TORCH_CUDA_ARCH_LIST.
- sdists 2.0.x to 2.6.3 ship csrc kernels without their setup.py: one is supplied.
- csrc/rotary compiles host code with -march=native: replaced by --host-march (default x86-64-v2),
  so the image runs on other CPUs than the builder's.
- the main setup.py downloads a prebuilt wheel from GitHub: FLASH_ATTENTION_FORCE_BUILD=TRUE.
- OOM-killed compiles: MAX_JOBS and NVCC_THREADS come from the builder's memory and cores
  (about 5 GB per nvcc thread), unless given.
- pip never touches the network: --no-index --no-build-isolation --no-deps.

Build profiles of flash-attn's own CUDA extension (--profile): `full` compiles every kernel the sdist lists;
`serving` only the forward and split-KV (paged decode) kernels of the head dims and dtypes asked (default 64, 128,
256 in fp16 and bf16). Every kernel file it leaves out is compiled as a stub of the same specialization that raises
a RuntimeError naming what is missing and the fix, so a call outside the profile fails with a clear error at call
time, never with an undefined symbol at import. The selection reads the kernel files' names
(flash_{fwd,fwd_split,bwd}_hdimD_DTYPE[_causal]_smXY.cu), which change between releases: select_sources() is tested
against every release's list (data/sources/flash-attn).

A rebuild cache (--cache DIR): the extension's build directory (ninja's objects and logs), kept in DIR under a key of
the sdist's sha256, the arch list, the profile, nvcc's and torch's versions; a build with the same key restores it and
compiles nothing that is up to date.

Standard library only, so it runs on the image's own Python (torch must be installed there).
Exit codes: 0 built, 2 bad input, 4 a compile failed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

MODULES = {"flash_attn": "flash_attn", "layer_norm": "dropout_layer_norm", "rotary": "rotary_emb"}
GB_PER_NVCC_THREAD = 5.0
DEFAULT_HOST_MARCH = "x86-64-v2"

_GENCODE_APPEND = re.compile(
    r'^(?P<indent>[ \t]*)cc_flag\.append\(\s*"(?:-gencode|arch=compute_\d+a?,code=(?:sm|compute)_\d+a?)"\s*\)[ \t]*$',
    re.M)
_HARD_GENCODE = re.compile(r"arch=compute_\d+")

# nvcc/cxx flags of the upstream csrc setup.py files (flash-attn 2.7.4.post1), minus the gencodes.
SUPPLIED_FLAGS = {
    "layer_norm": {
        "cxx": ["-O3"],
        "nvcc": ["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                 "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                 "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
                 "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math"],
    },
    "rotary": {
        "cxx": ["-g", "-march=native", "-funroll-loops"],
        "nvcc": ["-O3", "--use_fast_math", "--expt-extended-lambda"],
    },
}

SUPPLIED_SETUP = '''\
# Supplied by envkit: this flash-attn sdist ships csrc/{kernel} without its setup.py.
# Flags follow upstream's csrc/{kernel}/setup.py; archs come from TORCH_CUDA_ARCH_LIST only.
import glob
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

this_dir = os.path.dirname(os.path.abspath(__file__))
generator_flag = []
if os.path.exists(os.path.join(torch.__path__[0], "include", "ATen", "CUDAGeneratorImpl.h")):
    generator_flag = ["-DOLD_GENERATOR_PATH"]
sources = sorted(os.path.basename(p) for p in glob.glob(os.path.join(this_dir, "*.cpp")) + glob.glob(os.path.join(this_dir, "*.cu")))
nvcc = {nvcc!r} + generator_flag + ["--threads", os.environ.get("NVCC_THREADS", "1")]
setup(
    name="{module}",
    version="0.1",
    ext_modules=[CUDAExtension(name="{module}", sources=sources, include_dirs=[this_dir],
                               extra_compile_args={{"cxx": {cxx!r} + generator_flag, "nvcc": nvcc}})],
    cmdclass={{"build_ext": BuildExtension}},
)
'''


PROFILES = ("full", "serving")
SERVING_HEAD_DIMS = (64, 128, 256)
SERVING_DTYPES = ("fp16", "bf16")
_KERNEL_FILE = re.compile(r"flash_(?P<kind>fwd_split|fwd|bwd)_hdim(?P<hdim>\d+)_(?P<dtype>fp16|bf16|e4m3|fp8)(?P<causal>_causal)?"
                          r"_(?P<arch>sm\d+)\.cu$")
_INSTANTIATION = re.compile(r"template\s+(?P<ret>void)\s+(?P<fn>\w+)\s*<(?P<args>[^<>]*(?:<[^<>]*>[^<>]*)*)>\s*\((?P<params>[^)]*)\)\s*;")
_SPECIALIZATION = re.compile(r"template\s*<\s*>\s*void\s+(?P<fn>\w+)\s*<(?P<args>[^<>]*(?:<[^<>]*>[^<>]*)*)>\s*\((?P<params>[^)]*)\)\s*\{")


class BuildError(Exception):
    def __init__(self, message: str, code: int = 4) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- pure parts (unit-tested)

def patch_setup_py(text: str, host_march: str) -> tuple[str, list[str]]:
    """Neutralise hard-coded gencode lines and -march=native. Returns the text and what changed."""
    changes: list[str] = []
    removed = [m.group(0).strip() for m in _GENCODE_APPEND.finditer(text)]
    text = _GENCODE_APPEND.sub(lambda m: f"{m.group('indent')}pass  # envkit: arch list from TORCH_CUDA_ARCH_LIST", text)
    if removed:
        changes.append(f"removed {len(removed)} hard-coded gencode line(s): " + " ".join(r.split('"')[1] for r in removed))
    if host_march != "native" and "-march=native" in text:
        text = text.replace("-march=native", f"-march={host_march}")
        changes.append(f"-march=native -> -march={host_march}")
    left = _HARD_GENCODE.findall(text)
    if left:
        raise BuildError(f"setup.py still hard-codes {', '.join(sorted(set(left)))} after patching; "
                         "this flash-attn version writes its gencode flags differently: supply a setup.py", 4)
    return text, changes


def supplied_setup_py(kernel: str, host_march: str) -> str:
    flags = SUPPLIED_FLAGS[kernel]
    cxx = [f"-march={host_march}" if f == "-march=native" else f for f in flags["cxx"]]
    return SUPPLIED_SETUP.format(kernel=kernel, module=MODULES[kernel], nvcc=flags["nvcc"], cxx=cxx)


def plan_jobs(mem_gb: float, cores: int, n_archs: int, jobs: int | None = None, nvcc_threads: int | None = None) -> tuple[int, int]:
    """MAX_JOBS and NVCC_THREADS: nvcc threads split one file over its archs; each costs about 5 GB."""
    threads = nvcc_threads or max(1, min(n_archs, 4))
    if jobs is None:
        by_mem = int(mem_gb // (GB_PER_NVCC_THREAD * threads))
        jobs = max(1, min(max(1, cores // threads), by_mem))
    return jobs, threads


def arch_env(arch_list: list[str]) -> str:
    for a in arch_list:
        if not re.fullmatch(r"\d+\.\d+a?(\+PTX)?", a):
            raise BuildError(f"bad arch {a!r} in --arch-list (expected compute capabilities like 8.0;9.0)", 2)
    return ";".join(arch_list)


def fa_archs_env(arch_list: list[str]) -> str:
    """FLASH_ATTN_CUDA_ARCHS (flash-attn >= 2.7.3) takes 80;90 rather than 8.0;9.0."""
    return ";".join(a.replace(".", "").replace("+PTX", "") for a in arch_list)


# The compiler's own words for a failure: gcc/clang `file:line:col: error:` and `fatal error:`, nvcc/cicc
# `file(line): error :` (older nvcc: a space before the colon) and `nvcc fatal   :`, ninja's verdict. pip's cleanup
# and its own `error: subprocess-exited-with-error` come after them in the log.
_ERROR_LINE = re.compile(r"\berror ?:|\bfatal error\b|\bnvcc fatal\s*:|ninja: build stopped", re.I)


def failure_excerpt(lines: list[str], log_path: str, context: int = 3, tail: int = 15) -> str:
    """What a failed compile's log says first and last: the first line in the compiler's error pattern with `context`
    lines around it, then the last `tail` lines (where they are not already shown)."""
    first = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), None)
    parts = []
    shown_to = 0
    if first is not None:
        lo, hi = max(0, first - context), min(len(lines), first + context + 1)
        parts.append(f"the first error, line {first + 1} of {log_path}:\n" + "\n".join(lines[lo:hi]))
        shown_to = hi
    last = lines[max(shown_to, len(lines) - tail):]
    if last:
        parts.append(f"last lines of {log_path}:\n" + "\n".join(last))
    return "\n".join(parts) if parts else f"{log_path} is empty"


def kernel_parts(path: str) -> dict | None:
    """A kernel source's parts from its file name: kind, head dim, dtype, causal, arch; None for another source."""
    m = _KERNEL_FILE.search(path.replace("\\", "/").rsplit("/", 1)[-1])
    if not m:
        return None
    return {"kind": m.group("kind"), "hdim": int(m.group("hdim")), "dtype": m.group("dtype"),
            "causal": bool(m.group("causal")), "arch": m.group("arch")}


def parse_profile(text: str) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    """`full`, `serving`, or `serving:64,128` (head dims), optionally `serving:64,128:bf16` (dtypes)."""
    name, _, rest = text.partition(":")
    if name not in PROFILES:
        raise BuildError(f"--profile {text!r} is not a profile (fix: full, serving or serving:64,128[:bf16])", 2)
    if name == "full":
        if rest:
            raise BuildError("--profile full takes no head dims (fix: --profile serving:64,128)", 2)
        return name, (), ()
    dims_text, _, dtypes_text = rest.partition(":")
    try:
        dims = tuple(sorted({int(d) for d in dims_text.split(",") if d})) or SERVING_HEAD_DIMS
    except ValueError:
        raise BuildError(f"--profile {text!r}: head dims are numbers (fix: serving:64,128,256)", 2) from None
    dtypes = tuple(sorted({d for d in dtypes_text.split(",") if d})) or SERVING_DTYPES
    bad = [d for d in dtypes if d not in ("fp16", "bf16")]
    if bad or any(d <= 0 or d > 512 for d in dims):
        raise BuildError(f"--profile {text!r}: dtypes are fp16 and bf16, head dims 1 to 512", 2)
    return name, dims, dtypes


def select_sources(sources: list[str], profile: str, head_dims: tuple[int, ...] = SERVING_HEAD_DIMS,
                   dtypes: tuple[str, ...] = SERVING_DTYPES) -> tuple[list[str], list[str]]:
    """(kept, stubbed): the serving profile keeps every non-kernel source (flash_api.cpp ...) and the fwd and fwd_split
    kernels of the head dims and dtypes asked; every other kernel is stubbed. `full` keeps all."""
    if profile == "full":
        return list(sources), []
    kept, stubbed = [], []
    for src in sources:
        parts = kernel_parts(src)
        keep = parts is None or (parts["kind"] in ("fwd", "fwd_split") and parts["hdim"] in head_dims and parts["dtype"] in dtypes)
        (kept if keep else stubbed).append(src)
    return kept, stubbed


def _matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise BuildError("a kernel file's specialization has no closing brace: supply the full profile", 4)


def stub_kernel(text: str, what: str) -> str:
    """A kernel file with every template specialization's body replaced by a throw that names `what` is missing, every
    explicit instantiation (`template void f<...>(...);`, the split-KV files) turned into such a specialization, and its
    launch-template include (the heavy part) by flash.h, which declares the templates; namespaces and signatures stay."""
    def body(fn: str, args: str) -> str:
        return f'\n    throw std::runtime_error("{what} ({fn}<{" ".join(args.split())}>)");\n'

    found = list(_SPECIALIZATION.finditer(text))
    out, at = [], 0
    for m in found:
        close = _matching_brace(text, m.end() - 1)
        out.append(text[at:m.end()])
        out.append(body(m.group("fn"), m.group("args")))
        at = close
    out.append(text[at:])
    stub = "".join(out)
    stub, instantiated = _INSTANTIATION.subn(
        lambda m: f"template<>\nvoid {m.group('fn')}<{m.group('args')}>({m.group('params')}) {{{body(m.group('fn'), m.group('args'))}}}",
        stub)
    if not found and not instantiated:
        raise BuildError(f"no template specialization found in a kernel file the profile leaves out ({what}): "
                         "this release writes its kernels differently; build it with --profile full", 4)
    stub = re.sub(r'#include\s+"flash_(?:fwd|bwd)_launch_template\.h"',
                  '#include <cutlass/numeric_types.h>\n#include "flash.h"\n#include <stdexcept>', stub)
    return "// envkit: a stub of the serving profile; the kernel is not compiled\n" + stub


def apply_profile(ext_dir: str, version: str, profile: str, head_dims: tuple[int, ...], dtypes: tuple[str, ...]) -> dict:
    """Stub the kernel files of flash-attn's source tree that the profile leaves out (in place; setup.py's list stays as
    it is, so every release's way of listing its sources works); what was kept and stubbed."""
    src_dir = os.path.join(ext_dir, "csrc", "flash_attn", "src")
    if not os.path.isdir(src_dir):
        raise BuildError("the sdist has no csrc/flash_attn/src: its kernels cannot be chosen (fix: --profile full)", 2)
    names = sorted(n for n in os.listdir(src_dir) if n.endswith(".cu"))
    kept, stubbed = select_sources(names, profile, head_dims, dtypes)
    if profile != "full" and not any(kernel_parts(n) and kernel_parts(n)["kind"] == "fwd" for n in kept):
        raise BuildError(f"the serving profile keeps no forward kernel of {names[:3]}...: head dims {head_dims} are not "
                         "in this release (fix: another --profile serving:DIMS, or full)", 2)
    what = (f"flash-attn {version} was built by envkit with the serving profile (forward only; head dims "
            f"{','.join(map(str, head_dims))}; {','.join(dtypes)}; rebuild with --flash-attn-profile full)")
    for name in stubbed:
        path = os.path.join(src_dir, name)
        parts = kernel_parts(name) or {}
        missing = ("the backward pass (training)" if parts.get("kind") == "bwd" else
                   f"head dim {parts.get('hdim')} in {parts.get('dtype')}{' (causal)' if parts.get('causal') else ''}")
        _rewrite(path, lambda text: stub_kernel(text, f"{what}: {missing} is not in this build"))
    return {"profile": profile, "head_dims": list(head_dims), "dtypes": list(dtypes), "kernels": len(names),
            "compiled": len([n for n in kept if kernel_parts(n)]), "stubbed": len(stubbed)}


def _rewrite(path: str, change) -> None:
    """Rewrite a source file, keeping its time: the same settings give the same text, so a build restored from the cache
    finds it no newer than its object (a fresh time made ninja compile every stub again: measured on the H200)."""
    st = os.stat(path)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(change(text))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def eta(done: int, total: int, elapsed: float) -> str:
    """"~3 min left" from the units done so far, or "" before the first."""
    if done <= 0 or total <= done:
        return ""
    left = elapsed / done * (total - done)
    return f", ~{left / 60:.0f} min left" if left >= 90 else f", ~{left:.0f} s left"


# ---------------------------------------------------------------- host facts

def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def host_memory_gb() -> float:
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = _read(path).strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:
            limit = int(raw) / 2**30
        break
    avail = None
    try:
        for line in _read("/proc/meminfo").splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) / 2**20
    except OSError:
        pass
    known = [x for x in (limit, avail) if x]
    return min(known) if known else 8.0


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ---------------------------------------------------------------- the build

def extract(sdist: str, work: str) -> str:
    try:
        with tarfile.open(sdist) as tar:
            members = tar.getmembers()
            root = members[0].name.split("/")[0]
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(work, **kw)
    except (tarfile.TarError, IndexError, EOFError, OSError) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BuildError(f"{sdist} is not a readable sdist ({why}) (fix: pass flash-attn's .tar.gz from PyPI or the bundle)", 2)
    top = os.path.join(work, root)
    if not os.path.isfile(os.path.join(top, "setup.py")) or not os.path.isdir(os.path.join(top, "csrc")):
        raise BuildError(f"{sdist} is not a flash-attn sdist (no setup.py and csrc/ at its top) "
                         "(fix: pass flash_attn-X.tar.gz from PyPI or the bundle)", 2)
    return top


def _run(cmd: list[str], cwd: str, env: dict, log_path: str, label: str) -> None:
    """Run a compile, echoing ninja's [n/N] progress; the full log goes to log_path."""
    start = time.monotonic()
    with open(log_path, "w") as log, subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                                        bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            m = re.match(r"\s*\[(\d+)/(\d+)\]", line)
            if m:
                done, total = int(m.group(1)), int(m.group(2))
                print(f"  {label}: compiled {done}/{total} units in {time.monotonic() - start:.0f} s"
                      f"{eta(done, total, time.monotonic() - start)}", flush=True)
            elif "ninja: no work to do" in line:
                print(f"  {label}: ninja: no work to do (every unit up to date)", flush=True)
        rc = proc.wait()
    if rc != 0:
        raise BuildError(f"{label} failed (exit {rc}); {failure_excerpt(_read(log_path).splitlines(), log_path)}", 4)


def _writable_dir(path: str, what: str, create: bool) -> str:
    """A directory the build may write, made when `create`; one line and exit 2 otherwise."""
    if create:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise BuildError(f"{what} {path}: cannot be made ({exc.strerror}) (fix: give a writable directory)", 2) from None
    if not os.path.isdir(path):
        raise BuildError(f"{what} {path}: no such directory (fix: create it, or leave the option out)", 2)
    if not os.access(path, os.W_OK | os.X_OK):
        raise BuildError(f"{what} {path}: not writable (fix: give a writable directory)", 2)
    return os.path.abspath(path)


def _sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return (out.strip().splitlines() or ["none"])[-1]


def cache_key(sdist_sha256: str, target: str, archs: list[str], profile: str, nvcc: str, torch_version: str) -> str:
    """What a build's objects depend on beyond the sources: the same key, the same objects."""
    import hashlib

    text = json.dumps([sdist_sha256, target, archs, profile, nvcc, torch_version])
    return f"{target}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


_DEPS_HEAD = re.compile(r"^(?P<out>.+?): #deps \d+, deps mtime (?P<mtime>\d+) \((?:VALID|STALE)\)$")


def _ninja_deps(build_dir: str) -> dict[str, tuple[int | None, list[str]]]:
    """Each object's recorded inputs in a ninja build directory (`ninja -t deps`), with the object mtime (ns) the deps
    log recorded beside them; {} where ninja cannot say."""
    ninja = shutil.which("ninja")
    if ninja is None:
        return {}
    try:
        text = subprocess.run([ninja, "-C", build_dir, "-t", "deps"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    deps: dict[str, tuple[int | None, list[str]]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and ":" in line:
            head = _DEPS_HEAD.match(line)
            current = head.group("out") if head else line.split(":", 1)[0].strip()
            deps[current] = (int(head.group("mtime")) if head else None, [])
        elif line.strip() and current is not None:
            deps[current][1].append(line.strip())
    return deps


def restore_cache(cache_dir: str, key: str, ext_dir: str) -> int:
    """Unpack a kept build directory into the extension's tree, with its objects' own times (ninja checks them against
    the times it recorded). The key holds the sdist, archs, profile, nvcc and torch: the inputs are the ones the objects
    were compiled from, so an input whose time is newer (a reinstalled torch's headers) is given a time before its
    object's, and ninja compiles what really changed only. The files restored."""
    tar_path = os.path.join(cache_dir, key + ".tar")
    if not os.path.isfile(tar_path):
        return 0
    with tarfile.open(tar_path) as tar:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(ext_dir, **kw)
        names = tar.getnames()
    for root, _, files in os.walk(os.path.join(ext_dir, "build")):
        if "build.ninja" in files and ".ninja_log" in files:
            recorded = _ninja_log_mtimes(os.path.join(root, ".ninja_log"))
            for obj, (deps_mtime_ns, inputs) in _ninja_deps(root).items():
                obj_path = obj if os.path.isabs(obj) else os.path.join(root, obj)
                known = [t for t in (recorded.get(obj_path) or recorded.get(obj), deps_mtime_ns) if t is not None]
                if not known or not os.path.exists(obj_path):
                    continue
                # the tar's time is a float: it comes back up to a microsecond off, and an object a nanosecond newer
                # than its deps record makes ninja drop the deps and compile it again. Its own recorded time, exactly:
                mtime_ns = min(known)
                os.utime(obj_path, ns=(mtime_ns, mtime_ns))
                before = mtime_ns - 1_000_000_000
                for dep in inputs:
                    dep_path = dep if os.path.isabs(dep) else os.path.join(root, dep)
                    try:
                        if os.stat(dep_path).st_mtime_ns > before:
                            os.utime(dep_path, ns=(before, before))
                    except OSError:
                        continue
    return len(names)


def _ninja_log_mtimes(path: str) -> dict[str, int]:
    """The mtime ninja recorded for each output (.ninja_log v5+: start, end, mtime, output, command hash), in ns."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 5 and parts[2].isdigit():
                    out[parts[3]] = int(parts[2])
    except OSError:
        pass
    return out


def save_cache(cache_dir: str, key: str, ext_dir: str) -> None:
    build_dir = os.path.join(ext_dir, "build")
    if not os.path.isdir(build_dir):
        return
    part = os.path.join(cache_dir, f".{key}.{os.getpid()}.tar")
    with tarfile.open(part, "w") as tar:
        tar.add(build_dir, arcname="build")
    os.replace(part, os.path.join(cache_dir, key + ".tar"))


def build(args: argparse.Namespace) -> dict:
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in MODULES:
            raise BuildError(f"unknown target {t!r} (expected: {', '.join(MODULES)})", 2)
    archs = [a for a in re.split(r"[;, ]+", args.arch_list) if a]
    if not archs:
        raise BuildError("--arch-list is empty (fix: give the target GPUs' compute capabilities, e.g. 9.0)", 2)
    torch_archs = arch_env(archs)
    profile, head_dims, dtypes = parse_profile(args.profile)
    if not os.path.isfile(args.sdist):
        raise BuildError(f"sdist not found: {args.sdist} (fix: pass the flash_attn-X.tar.gz from PyPI or the bundle)", 2)
    out = _writable_dir(args.out, "--out", create=True)
    scratch = _writable_dir(args.work, "--work", create=False) if args.work else tempfile.gettempdir()
    cache = _writable_dir(args.cache, "--cache", create=True) if args.cache else None
    jobs, threads = plan_jobs(host_memory_gb(), host_cores(), len(archs), args.jobs, args.nvcc_threads)
    sdist_sha = _sha256(args.sdist)
    # a fixed path per sdist and settings: ninja's commands name absolute paths, so a cached build must find them again
    work = os.path.join(scratch, f"envkit-fa-{sdist_sha[:12]}-{profile}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = extract(args.sdist, work)
    version = os.path.basename(src).split("-", 1)[-1]
    env = dict(os.environ)
    env.update({"TORCH_CUDA_ARCH_LIST": torch_archs, "FLASH_ATTN_CUDA_ARCHS": fa_archs_env(archs),
                "MAX_JOBS": str(jobs), "NVCC_THREADS": str(threads), "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
                "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if "CUDA_HOME" not in env and os.path.isdir("/usr/local/cuda"):
        env["CUDA_HOME"] = "/usr/local/cuda"
    nvcc = _tool_version([os.path.join(env["CUDA_HOME"], "bin", "nvcc") if env.get("CUDA_HOME") else "nvcc", "--version"])
    torch_version = _tool_version([sys.executable, "-c", "import importlib.metadata as m; print(m.version('torch'))"])
    print(f"envkit: building {','.join(targets)} for {torch_archs} with MAX_JOBS={jobs} NVCC_THREADS={threads} "
          f"(memory {host_memory_gb():.0f} GB, {host_cores()} cores; profile {args.profile})", flush=True)
    report: dict = {"sdist": os.path.basename(args.sdist), "sdist_sha256": sdist_sha, "arch_list": archs, "max_jobs": jobs,
                    "nvcc_threads": threads, "profile": args.profile, "targets": []}
    for t in targets:
        d = src if t == "flash_attn" else os.path.join(src, "csrc", t)
        if not os.path.isdir(d):
            raise BuildError(f"{os.path.basename(args.sdist)} has no csrc/{t} (flash-attn removed csrc/rotary in 2.8.3; "
                             "fix: pin flash-attn 2.7.4.post1 for rotary, or use flash_attn.ops.triton.rotary)", 2)
        changes: list[str] = []
        selected = None
        if t == "flash_attn" and profile != "full":
            selected = apply_profile(d, version, profile, head_dims, dtypes)
            changes.append(f"serving profile: {selected['compiled']} of {selected['kernels']} kernels compiled, "
                           f"{selected['stubbed']} stubbed (head dims {','.join(map(str, head_dims))}; {','.join(dtypes)})")
        if t != "flash_attn":
            setup = os.path.join(d, "setup.py")
            if os.path.exists(setup):
                _, changes = patch_setup_py(_read(setup), args.host_march)
                _rewrite(setup, lambda text: patch_setup_py(text, args.host_march)[0])
                changes.insert(0, "setup.py shipped")
            else:
                with open(setup, "w") as f:
                    f.write(supplied_setup_py(t, args.host_march))
                os.utime(setup, (0, 0))  # always the same text: no newer than any object built from it
                changes = ["setup.py supplied by envkit"]
        key = cache_key(sdist_sha, t, archs, args.profile, nvcc, torch_version)
        restored = restore_cache(cache, key, d) if cache else 0
        if cache:
            changes.append(f"cache {key}: {'restored ' + str(restored) + ' files' if restored else 'empty: a full compile'}")
        for c in changes:
            print(f"  {t}: {c}", flush=True)
        start = time.monotonic()
        cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-index", "--no-build-isolation", "--no-deps", "-w", out, d]
        _run(cmd, d, env, os.path.join(work, f"{t}.log"), t)
        took = time.monotonic() - start
        if cache:
            save_cache(cache, key, d)
        wheels = sorted(w for w in os.listdir(out) if w.startswith(MODULES[t] + "-") or w.startswith(MODULES[t].replace("_", "-") + "-"))
        print(f"  {t}: built in {took:.1f} s -> {', '.join(wheels)}", flush=True)
        report["targets"].append({"target": t, "module": MODULES[t], "seconds": round(took, 1), "changes": changes, "wheels": wheels,
                                  "profile": selected, "cache": {"key": key, "restored": restored} if cache else None})
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    if args.install:
        mods = [MODULES[t] for t in targets]
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", out, *mods], check=True)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdist", required=True, help="flash_attn-X.tar.gz")
    p.add_argument("--targets", default="layer_norm,rotary", help="comma list of flash_attn, layer_norm, rotary")
    p.add_argument("--arch-list", required=True, help="compute capabilities, e.g. 9.0 or 8.0;9.0")
    p.add_argument("--out", required=True, help="directory for the built wheels")
    p.add_argument("--jobs", type=int, default=int(os.environ["MAX_JOBS"]) if os.environ.get("MAX_JOBS") else None)
    p.add_argument("--nvcc-threads", type=int, default=int(os.environ["NVCC_THREADS"]) if os.environ.get("NVCC_THREADS") else None)
    p.add_argument("--host-march", default=DEFAULT_HOST_MARCH, help="replaces rotary's -march=native ('native' keeps it)")
    p.add_argument("--work", default=None, help="scratch directory (default: the system temp dir)")
    p.add_argument("--keep-work", action="store_true")
    p.add_argument("--install", action="store_true", help="pip install the built wheels (no index)")
    p.add_argument("--report", default=None, help="write a JSON report of what was built and how long it took")
    p.add_argument("--profile", default="full", help="flash_attn's kernels: full, or serving[:HEAD_DIMS[:DTYPES]] (forward and "
                                                      "split-KV only; default head dims 64,128,256 in fp16,bf16)")
    p.add_argument("--cache", default=None, metavar="DIR", help="keep and reuse each target's build directory here (ninja's objects)")
    args = p.parse_args(argv)
    try:
        report = build(args)
    except BuildError as exc:
        sys.stderr.write(f"build_flash_attn: error: {exc}\n")
        return exc.code
    except OSError as exc:  # a directory or file that went away or filled up during the build
        sys.stderr.write(f"build_flash_attn: error: {exc.filename or ''}: {exc.strerror} (fix: check the --out/--work/--cache "
                         "directories)\n")
        return 2
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
