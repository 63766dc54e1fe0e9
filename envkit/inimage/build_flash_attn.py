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
    if not os.path.isfile(sdist):
        raise BuildError(f"sdist not found: {sdist} (fix: pass the flash_attn-X.tar.gz from PyPI or the bundle)", 2)
    try:
        with tarfile.open(sdist) as tar:
            members = tar.getmembers()
            root = members[0].name.split("/")[0]
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(work, **kw)
    except (tarfile.TarError, IndexError) as exc:
        raise BuildError(f"{sdist} is not a readable sdist: {exc}", 2)
    return os.path.join(work, root)


def _run(cmd: list[str], cwd: str, env: dict, log_path: str, label: str) -> None:
    """Run a compile, echoing ninja's [n/N] progress; the full log goes to log_path."""
    with open(log_path, "w") as log, subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                                        bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            m = re.match(r"\s*\[(\d+)/(\d+)\]", line)
            if m:
                print(f"  {label}: compiled {m.group(1)}/{m.group(2)}", flush=True)
        rc = proc.wait()
    if rc != 0:
        raise BuildError(f"{label} failed (exit {rc}); {failure_excerpt(_read(log_path).splitlines(), log_path)}", 4)


def build(args: argparse.Namespace) -> dict:
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in MODULES:
            raise BuildError(f"unknown target {t!r} (expected: {', '.join(MODULES)})", 2)
    archs = [a for a in re.split(r"[;, ]+", args.arch_list) if a]
    if not archs:
        raise BuildError("--arch-list is empty (fix: give the target GPUs' compute capabilities, e.g. 9.0)", 2)
    torch_archs = arch_env(archs)
    jobs, threads = plan_jobs(host_memory_gb(), host_cores(), len(archs), args.jobs, args.nvcc_threads)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)
    work = tempfile.mkdtemp(prefix="envkit-fa-", dir=args.work)
    src = extract(args.sdist, work)
    env = dict(os.environ)
    env.update({"TORCH_CUDA_ARCH_LIST": torch_archs, "FLASH_ATTN_CUDA_ARCHS": fa_archs_env(archs),
                "MAX_JOBS": str(jobs), "NVCC_THREADS": str(threads), "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
                "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if "CUDA_HOME" not in env and os.path.isdir("/usr/local/cuda"):
        env["CUDA_HOME"] = "/usr/local/cuda"
    print(f"envkit: building {','.join(targets)} for {torch_archs} with MAX_JOBS={jobs} NVCC_THREADS={threads} "
          f"(memory {host_memory_gb():.0f} GB, {host_cores()} cores)", flush=True)
    report: dict = {"sdist": os.path.basename(args.sdist), "arch_list": archs, "max_jobs": jobs, "nvcc_threads": threads, "targets": []}
    for t in targets:
        d = src if t == "flash_attn" else os.path.join(src, "csrc", t)
        if not os.path.isdir(d):
            raise BuildError(f"{os.path.basename(args.sdist)} has no csrc/{t} (flash-attn removed csrc/rotary in 2.8.3; "
                             "fix: pin flash-attn 2.7.4.post1 for rotary, or use flash_attn.ops.triton.rotary)", 2)
        changes: list[str] = []
        if t != "flash_attn":
            setup = os.path.join(d, "setup.py")
            if os.path.exists(setup):
                text, changes = patch_setup_py(_read(setup), args.host_march)
                changes.insert(0, "setup.py shipped")
            else:
                text = supplied_setup_py(t, args.host_march)
                changes = ["setup.py supplied by envkit"]
            with open(setup, "w") as f:
                f.write(text)
        for c in changes:
            print(f"  {t}: {c}", flush=True)
        start = time.monotonic()
        cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-index", "--no-build-isolation", "--no-deps", "-w", out, d]
        _run(cmd, d, env, os.path.join(work, f"{t}.log"), t)
        took = time.monotonic() - start
        wheels = sorted(w for w in os.listdir(out) if w.startswith(MODULES[t] + "-") or w.startswith(MODULES[t].replace("_", "-") + "-"))
        print(f"  {t}: built in {took:.1f} s -> {', '.join(wheels)}", flush=True)
        report["targets"].append({"target": t, "module": MODULES[t], "seconds": round(took, 1), "changes": changes, "wheels": wheels})
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
    args = p.parse_args(argv)
    try:
        report = build(args)
    except BuildError as exc:
        sys.stderr.write(f"build_flash_attn: error: {exc}\n")
        return exc.code
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
