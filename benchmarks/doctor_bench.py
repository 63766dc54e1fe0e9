"""`envkit doctor` vs `python -m torch.utils.collect_env` on the same host: wall time and peak memory, in N paired
rounds of alternating order, printed per round and as medians with ratios (collect_env / doctor).

    python benchmarks/doctor_bench.py --rounds 5 [--python PY] [--envkit "python -m envkit"] [--no-deep]

Each measurement runs in a fresh wrapper process, so its RUSAGE_CHILDREN peak RSS is that one command's. A round runs
every command once, in the order of the round before reversed, so that neither side always runs on a warmer cache;
a round's ratio compares the two runs of that round (paired), and the summary gives the median of those ratios.
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

BASE = "collect_env"


def measure(cmd: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", WRAP, *cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that has torch")
    ap.add_argument("--envkit", default=f"{sys.executable} -m envkit")
    ap.add_argument("--no-deep", action="store_true", help="leave out envkit doctor --deep (it imports torch, as collect_env does)")
    a = ap.parse_args()
    cmds = {"envkit doctor": shlex.split(a.envkit) + ["doctor", "--json"]}
    if not a.no_deep:
        cmds["envkit doctor --deep"] = shlex.split(a.envkit) + ["doctor", "--deep", "--json"]
    cmds[BASE] = [a.python, "-m", "torch.utils.collect_env"]
    runs: dict[str, list[dict]] = {k: [] for k in cmds}
    ratios: dict[str, list[float]] = {k: [] for k in cmds if k != BASE}
    print(f"{'round':<7}{'order':<12}" + "".join(f"{k + ' s':>24}" for k in cmds) + "".join(f"{'ratio ' + k:>30}" for k in ratios))
    for r in range(a.rounds):
        order = list(cmds) if r % 2 == 0 else list(cmds)[::-1]
        got = {name: measure(cmds[name]) for name in order}
        for name, m in got.items():
            runs[name].append(m)
        for name in ratios:
            ratios[name].append(got[BASE]["wall_s"] / got[name]["wall_s"])
        print(f"{r + 1:<7}{'forward' if r % 2 == 0 else 'reversed':<12}" + "".join(f"{got[k]['wall_s']:>24.3f}" for k in cmds)
              + "".join(f"{ratios[k][-1]:>29.1f}x" for k in ratios))
    print()
    base_mem = max(x["peak_mb"] for x in runs[BASE])
    print(f"{'command':24}{'median wall s':>15}{'peak MB':>10}{'exit':>7}{'median paired ratio':>22}{'min..max':>14}{'memory ratio':>14}")
    for k, v in runs.items():
        wall, mem, rcs = statistics.median(x["wall_s"] for x in v), max(x["peak_mb"] for x in v), sorted({x["rc"] for x in v})
        if k == BASE:
            ratio, spread = "1.0", ""
        else:
            ratio, spread = f"{statistics.median(ratios[k]):.1f}x", f"{min(ratios[k]):.1f}..{max(ratios[k]):.1f}"
        print(f"{k:24}{wall:>15.3f}{mem:>10.0f}{','.join(map(str, rcs)):>7}{ratio:>22}{spread:>14}{base_mem / mem:>13.1f}x")
    print(json.dumps({"rounds": a.rounds, "runs": runs, "paired_ratios": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
