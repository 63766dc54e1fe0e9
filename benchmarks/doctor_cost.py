"""Where `envkit doctor`'s time goes, part by part, so that a regression shows in the part that caused it.

    python benchmarks/doctor_cost.py --rounds 5 [--python PY] [--importtime] [--json]

Each round starts fresh processes (nothing is warm but the page cache):
  - the interpreter's start (`python -c pass`) and the start with envkit's command-line imports (`import envkit.cli.main`);
  - one child that imports the probe and runs each of its collectors once, on its own, in a fixed order (each pays
    the imports it triggers: nvidia pays pynvml's; the shared `ldconfig -p` and distribution listing are forgotten
    before each, so toolkit pays ldconfig), then doctor's other steps: the matrix load, Host.from_json and the judge,
    the report's imports and rendering (to a null console), the JSON document;
  - one child that runs the probe's collect() cold: all sections at once, as doctor does;
  - `python probe.py` as a script (what an image runs, compiling the file), and the whole `envkit doctor --json`.
The table gives each part's median, min and max over the rounds, in milliseconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "envkit" / "inimage" / "probe.py"

PARTS = r'''
import io, json, sys, time
t = time.perf_counter()
from envkit.inimage import probe
out = {"probe: import probe.py": time.perf_counter() - t}
facts = {"schema": 1}
for name in probe.SECTIONS:
    probe.ldconfig_cache.forget()
    probe.distributions.forget()
    t = time.perf_counter()
    facts[name] = getattr(probe, probe.COLLECTORS[name])()
    out["probe: " + name] = time.perf_counter() - t
t = time.perf_counter()
probe.ldconfig_cache.forget()
probe.ldconfig_cache()
out["probe:   of which ldconfig -p"] = time.perf_counter() - t
t = time.perf_counter()
probe.distributions.forget()
probe.distributions()
out["probe:   of which the distribution listing"] = time.perf_counter() - t
t = time.perf_counter()
from envkit.config import matrix_file
m = matrix_file.load()
out["doctor: matrix load (imports incl.)"] = time.perf_counter() - t
t = time.perf_counter()
from envkit.core.judge import judge
from envkit.model.host import Host
host = Host.from_json(facts)
findings = judge(m, host)
out["doctor: Host.from_json + judge"] = time.perf_counter() - t
t = time.perf_counter()
from rich.console import Console
from envkit.ui import report
report.print_doctor(host, findings, None, Console(file=io.StringIO(), width=120))
out["doctor: report imports + render"] = time.perf_counter() - t
t = time.perf_counter()
json.dumps({"schema": 1, "findings": [f.to_json() for f in findings], "facts": facts})
out["doctor: JSON document"] = time.perf_counter() - t
print(json.dumps(out))
'''

COLLECT = r'''
import json, time
t = time.perf_counter()
from envkit.inimage import probe
t1 = time.perf_counter()
probe.collect()
print(json.dumps({"probe: collect(), all sections at once (cold)": time.perf_counter() - t1}))
'''


def wall(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env, cwd=ROOT)
    return time.perf_counter() - t


def child(py: str, code: str, env: dict) -> dict:
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"the timing child failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs envkit")
    ap.add_argument("--importtime", action="store_true", help="also print the ten slowest imports of `import envkit.cli.main`")
    ap.add_argument("--json", action="store_true", help="also print every round's numbers as JSON")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    py = a.python
    rounds: list[dict] = []
    for _ in range(a.rounds):
        r: dict = {"python start (-c pass)": wall([py, "-c", "pass"], env),
                   "python start + import envkit.cli.main": wall([py, "-c", "import envkit.cli.main"], env)}
        r.update(child(py, PARTS, env))
        r.update(child(py, COLLECT, env))
        r["python probe.py (a script: compiled each run)"] = wall([py, str(PROBE)], env)
        r["whole: envkit doctor --json"] = wall([py, "-m", "envkit", "doctor", "--json"], env)
        rounds.append(r)
    print(f"{'part':58}{'median ms':>11}{'min':>9}{'max':>9}")
    for part in rounds[0]:
        xs = [r[part] * 1000 for r in rounds]
        print(f"{part:58}{statistics.median(xs):>11.1f}{min(xs):>9.1f}{max(xs):>9.1f}")
    if a.importtime:
        p = subprocess.run([py, "-X", "importtime", "-c", "import envkit.cli.main"], capture_output=True, text=True, env=env, cwd=ROOT)
        rows = [l.split("|") for l in p.stderr.splitlines() if l.startswith("import time:") and "self [us]" not in l]
        rows.sort(key=lambda x: -int(x[1]))
        print("\nslowest imports of envkit.cli.main (cumulative us | module):")
        for row in rows[:10]:
            print(f"  {row[1].strip():>8} | {row[2].rstrip()}")
    if a.json:
        print(json.dumps({"rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
