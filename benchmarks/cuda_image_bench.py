"""The CUDA 13.0 image of issue 15, measured in one run on a CPU-only machine: the bundle's size (and what fills it),
the devel (build) stage against the runtime image, and the cold, first and no-change rebuild times.

    python benchmarks/cuda_image_bench.py [--work DIR]

The stack is the CI image's (tests/integration/test_cuda_image.py): H200, CUDA 13.0 with the toolkit from NVIDIA's
PyPI wheels, torch 2.11.0 from PyPI, csrc/rotary from flash-attn 2.7.4.post1 for sm_90. Needs a Docker Engine and
the locally made base image (./scripts/make-base-image.sh docker.io/library/ubuntu:24.04). Builds run with the network
off through the Docker SDK; the script removes its images at the end. Prints a table of figures and ratios.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envkit.adapters.engine import Engine  # noqa: E402
from envkit.adapters.image_build import stream_build  # noqa: E402

STACK = ["--gpu", "H200", "--cuda", "13.0", "--torch", "2.11.0", "--kernels", "rotary", "--kernels-from", "2.7.4.post1",
         "--toolkit", "pip"]
TAG = "envkit-bench/cuda13"


def bundle(out: Path) -> tuple[float, dict]:
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "envkit", "bundle", *STACK, "-o", str(out), "--json"], capture_output=True, text=True,
                       cwd=ROOT)
    took = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"bundle failed ({p.returncode}): {p.stderr[-2000:]}")
    return took, json.loads(p.stdout)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed_build(engine: Engine, ctx: Path, *, nocache: bool, tag: str, target: str | None = None) -> tuple[float, int, int]:
    """(seconds, image size, steps that ran rather than came from the cache)."""
    lines: list[str] = []
    start = time.monotonic()
    res = stream_build(engine, ctx, "none", {}, lines.append, nocache=nocache, target=target)
    took = time.monotonic() - start
    engine.tag(res.image_id, tag)
    ran = sum(1 for line in lines if line.strip().startswith("---> Running in"))
    return took, engine.size(tag), ran


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="", help="working directory for the bundle (default: a temporary one)")
    a = ap.parse_args()
    engine = Engine.connect()
    work = Path(a.work or tempfile.mkdtemp(prefix="envkit-cuda-bench-"))
    ctx = work / "bundle"
    shutil.rmtree(ctx, ignore_errors=True)
    try:
        print("bundle (fresh directory) ...", flush=True)
        bundle_cold, doc = bundle(ctx)
        print("bundle again (nothing to fetch) ...", flush=True)
        bundle_again, again = bundle(ctx)
        assert again["complete_already"] and not again["downloaded"], again
        parts = {name: folder_bytes(ctx / name) for name in ("wheelhouse", "images", "debs", "sources")}
        total = folder_bytes(ctx)
        print("build, no cache (cold) ...", flush=True)
        cold, runtime_size, cold_ran = timed_build(engine, ctx, nocache=True, tag=f"{TAG}:runtime")
        print("rebuild, nothing changed (twice) ...", flush=True)
        re1, _, re1_ran = timed_build(engine, ctx, nocache=False, tag=f"{TAG}:runtime")
        re2, _, re2_ran = timed_build(engine, ctx, nocache=False, tag=f"{TAG}:runtime")
        print("the build (devel) stage alone, from the cache ...", flush=True)
        _, devel_size, _ = timed_build(engine, ctx, nocache=False, tag=f"{TAG}:devel", target="build")
    finally:
        for t in ("runtime", "devel"):
            subprocess.run(["docker", "rmi", "-f", f"{TAG}:{t}"], capture_output=True)
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True)
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    gib, mib = 1 << 30, 1 << 20
    print()
    print("bundle")
    print(f"  {'total':34}{total / gib:>9.2f} GiB  ({doc['files']} files)")
    for name, size in parts.items():
        print(f"  {name + '/':34}{size / gib:>9.2f} GiB  {size / total:>6.1%}")
    print(f"  {'bundle, fresh directory':34}{bundle_cold:>9.1f} s")
    print(f"  {'bundle again, nothing to fetch':34}{bundle_again:>9.1f} s   ratio {bundle_again / bundle_cold:.2f}")
    print("images")
    print(f"  {'devel (build stage) image':34}{devel_size / gib:>9.2f} GiB")
    print(f"  {'runtime image':34}{runtime_size / gib:>9.2f} GiB   runtime/devel {runtime_size / devel_size:.2f}")
    print(f"  {'bundle / runtime image':34}{total / runtime_size:>9.2f}")
    print("builds (network none)")
    print(f"  {'cold, --no-cache':34}{cold:>9.1f} s   {cold_ran} steps ran")
    print(f"  {'first rebuild, nothing changed':34}{re1:>9.1f} s   {re1_ran} steps ran   ratio to cold {re1 / cold:.3f}")
    print(f"  {'second rebuild, nothing changed':34}{re2:>9.1f} s   {re2_ran} steps ran   ratio to cold {re2 / cold:.3f}")
    print(f"  (runtime image {runtime_size / mib:.0f} MiB, devel {devel_size / mib:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
