"""`envkit doctor` vs `python -m torch.utils.collect_env` on the same host: wall time and peak memory,
alternating in one run, printed with ratios.

    python benchmarks/doctor_bench.py --rounds 3 [--python PY] [--envkit "python -m envkit"]

Each measurement runs in a fresh wrapper process, so its RUSAGE_CHILDREN peak RSS is that one command's.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys

WRAP = r'''
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.perf_counter() - t
print(json.dumps({"rc": p.returncode, "wall_s": wall, "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
'''


def measure(cmd: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", WRAP, *cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that has torch")
    ap.add_argument("--envkit", default=f"{sys.executable} -m envkit")
    a = ap.parse_args()
    cmds = {
        "envkit doctor": shlex.split(a.envkit) + ["doctor", "--json"],
        "envkit doctor --deep": shlex.split(a.envkit) + ["doctor", "--deep", "--json"],
        "collect_env": [a.python, "-m", "torch.utils.collect_env"],
    }
    runs: dict[str, list[dict]] = {k: [] for k in cmds}
    for r in range(a.rounds):
        order = list(cmds) if r % 2 == 0 else list(cmds)[::-1]
        for name in order:
            runs[name].append(measure(cmds[name]))
    med = {k: (statistics.median(x["wall_s"] for x in v), max(x["peak_mb"] for x in v), {x["rc"] for x in v}) for k, v in runs.items()}
    base_wall, base_mem = med["collect_env"][0], med["collect_env"][1]
    print(f"{'command':24}{'median wall s':>15}{'peak MB':>10}{'exit':>7}{'collect_env/it (time)':>24}{'(memory)':>10}")
    for k, (wall, mem, rcs) in med.items():
        print(f"{k:24}{wall:>15.3f}{mem:>10.0f}{','.join(map(str, sorted(rcs))):>7}{base_wall / wall:>24.1f}{base_mem / mem:>10.1f}")
    print(json.dumps({"rounds": a.rounds, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
