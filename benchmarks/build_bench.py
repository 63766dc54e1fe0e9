"""Image size and rebuild time: envkit's two-stage image vs the same stack built single-stage the
seed's way (one stage from the build base, everything installed in it), from one bundle, in one run.

    python benchmarks/build_bench.py --bundle envkit-bundle

Builds with the network off through the Docker SDK, prints a table of figures and ratios.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.adapters.image_build import stream_build
from envkit.adapters.engine import Engine


def single_stage(dockerfile: str) -> str:
    """Everything up to the runtime stage, then the label/selftest files: the seed's one-stage layout."""
    head = dockerfile.split("\n# ---- stage runtime", 1)[0]
    return head + '\n\nCOPY envkit/solution.json envkit/selftest.py /opt/envkit/\nCMD ["python"]\n'


def timed_build(engine: Engine, ctx: Path, dockerfile: str, nocache: bool, tag: str) -> tuple[float, int]:
    start = time.monotonic()
    res = stream_build(engine, ctx, "none", {}, lambda line: None, nocache=nocache, dockerfile=dockerfile)
    took = time.monotonic() - start
    engine.tag(res.image_id, tag)
    return took, engine.size(tag)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", default="envkit-bundle")
    a = ap.parse_args()
    engine = Engine.connect()
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        ctx = Path(tmp) / "ctx"
        shutil.copytree(a.bundle, ctx, copy_function=lambda s, d: Path(d).hardlink_to(s))
        text = (ctx / "Dockerfile").read_text()
        (ctx / "Dockerfile.single").write_text(single_stage(text))
        print("building two-stage (no cache) ...", flush=True)
        multi_cold, multi_size = timed_build(engine, ctx, "Dockerfile", True, "envkit-bench/cpu:two-stage")
        print("rebuilding two-stage, nothing changed (twice) ...", flush=True)
        multi_re1, _ = timed_build(engine, ctx, "Dockerfile", False, "envkit-bench/cpu:two-stage")
        multi_re, _ = timed_build(engine, ctx, "Dockerfile", False, "envkit-bench/cpu:two-stage")
        print("building single-stage (no cache) ...", flush=True)
        single_cold, single_size = timed_build(engine, ctx, "Dockerfile.single", True, "envkit-bench/cpu:single-stage")
        print("rebuilding single-stage, nothing changed (twice) ...", flush=True)
        single_re1, _ = timed_build(engine, ctx, "Dockerfile.single", False, "envkit-bench/cpu:single-stage")
        single_re, _ = timed_build(engine, ctx, "Dockerfile.single", False, "envkit-bench/cpu:single-stage")
    mib = 1 << 20
    print()
    print(f"{'':28}{'two-stage':>12}{'single-stage':>14}{'ratio 2/1':>11}")
    print(f"{'image size (MiB)':28}{multi_size / mib:>12.0f}{single_size / mib:>14.0f}{multi_size / single_size:>11.2f}")
    print(f"{'cold build, no cache (s)':28}{multi_cold:>12.1f}{single_cold:>14.1f}{multi_cold / single_cold:>11.2f}")
    print(f"{'1st rebuild after no-cache (s)':28}{multi_re1:>12.1f}{single_re1:>14.1f}{multi_re1 / single_re1:>11.2f}")
    print(f"{'rebuild, nothing changed (s)':28}{multi_re:>12.1f}{single_re:>14.1f}{multi_re / single_re:>11.2f}")
    print(f"{'rebuild / cold build':28}{multi_re / multi_cold:>12.3f}{single_re / single_cold:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
