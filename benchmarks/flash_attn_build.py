"""flash-attn's build profiles on a GPU host (issue 28): the full build, the serving profile, and a no-change rebuild
from the cache, each timed; each built wheel loaded and checked against torch's scaled_dot_product_attention in
float32 (forward; the full build's backward too), its speed beside SDPA's, and a call outside the serving profile
checked to raise a clear RuntimeError. Prints one table with the goals (full <= 15 min, serving <= 5 min, cached
rebuild <= 1 min on 16 cores for one arch) and writes results.json.

    python benchmarks/flash_attn_build.py --sdist flash_attn-2.8.3.post2.tar.gz --arch-list 9.0 --out /tmp/fab \\
        [--only serving,cached] [--jobs 16]

A full build can outlast one 10-minute device command: start it with setsid and poll DIR/done (written last).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "envkit", "inimage", "build_flash_attn.py")
GOALS_S = {"full": 15 * 60, "serving": 5 * 60, "cached": 60}

CHECK = r'''
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
import flash_attn
from flash_attn import flash_attn_func
import torch.nn.functional as F
out = {"flash_attn": flash_attn.__version__}
torch.manual_seed(0)
def ref(q, k, v, causal):
    return F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(),
                                          is_causal=causal).transpose(1, 2)
for hdim in [int(h) for h in sys.argv[3].split(",")]:
    q, k, v = (torch.randn(2, 1024, 16, hdim, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = flash_attn_func(q, k, v, causal=True)
    r = ref(q, k, v, True)
    out[f"fwd_max_abs_err_hdim{hdim}"] = float((o.float() - r).abs().max())
    if sys.argv[2] == "full":
        g = torch.randn_like(o)
        dq, = torch.autograd.grad(o, q, g)
        q2 = q.detach().float().requires_grad_()
        rr = F.scaled_dot_product_attention(q2.transpose(1, 2), k.detach().float().transpose(1, 2), v.detach().float().transpose(1, 2),
                                            is_causal=True).transpose(1, 2)
        rq, = torch.autograd.grad(rr, q2, g.float())
        out[f"bwd_dq_max_abs_err_hdim{hdim}"] = float((dq.float() - rq).abs().max())
q, k, v = (torch.randn(8, 4096, 32, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
def timed(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n
fa = timed(lambda: flash_attn_func(q, k, v, causal=True))
sd = timed(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True))
flops = 4 * 8 * 32 * 4096 * 4096 * 128 / 2
out.update({"fa_tflops": round(flops / fa / 1e12, 1), "sdpa_tflops": round(flops / sd / 1e12, 1), "fa_over_sdpa": round(sd / fa, 2)})
if sys.argv[2] == "serving":
    q96 = torch.randn(1, 128, 8, 96, device="cuda", dtype=torch.bfloat16)  # head dim 96: in no serving profile
    try:
        flash_attn_func(q96, q96, q96)
        out["outside_profile"] = "no error"
    except RuntimeError as exc:
        out["outside_profile"] = str(exc)[:300]
print(json.dumps(out))
'''


def build(name: str, sdist: str, archs: str, out: str, cache: str, profile: str, jobs: int | None) -> dict:
    wheels = os.path.join(out, f"wheels-{name}")
    report = os.path.join(out, f"report-{name}.json")
    cmd = [sys.executable, SCRIPT, "--sdist", sdist, "--targets", "flash_attn", "--arch-list", archs, "--out", wheels,
           "--report", report, "--profile", profile, "--cache", cache] + (["--jobs", str(jobs)] if jobs else [])
    start = time.monotonic()
    with open(os.path.join(out, f"build-{name}.log"), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    row = {"build": name, "profile": profile, "rc": rc, "wall_s": round(wall, 1), "goal_s": GOALS_S[name]}
    if rc == 0:
        rep = json.load(open(report))
        target = rep["targets"][0]
        row.update({"max_jobs": rep["max_jobs"], "wheel": target["wheels"][0], "selected": target.get("profile"),
                    "cache": target.get("cache")})
        site = os.path.join(out, f"site-{name}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site,
                        os.path.join(wheels, target["wheels"][0])], check=True)
        dims = profile.split(":")[1] if profile.count(":") else "64,128"
        chk = subprocess.run([sys.executable, "-c", CHECK, site, profile.split(":")[0], dims], capture_output=True, text=True)
        row["check"] = json.loads(chk.stdout.strip().splitlines()[-1]) if chk.returncode == 0 else {"error": chk.stderr[-800:]}
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist", required=True)
    ap.add_argument("--arch-list", default="9.0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="full,serving,cached", help="which of full, serving, cached (in this order)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--serving", default="serving", help="the serving build's profile, e.g. serving:128")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cache = os.path.join(a.out, "cache")
    rows = []
    for name in [n for n in ("full", "serving", "cached") if n in a.only.split(",")]:
        profile = "full" if name == "full" else a.serving
        rows.append(build(name, a.sdist, a.arch_list, a.out, cache, profile, a.jobs))  # cached: the serving build again
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(rows, f, indent=2)
    print(f"{'build':<9} {'wall':>9} {'goal':>7} {'met':>4}  check")
    for r in rows:
        met = "yes" if r["rc"] == 0 and r["wall_s"] <= r["goal_s"] else "no"
        print(f"{r['build']:<9} {r['wall_s']:>8.1f}s {r['goal_s']:>6}s {met:>4}  {json.dumps(r.get('check', {'rc': r['rc']}))[:300]}")
    with open(os.path.join(a.out, "done"), "w") as f:
        f.write("done\n")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
