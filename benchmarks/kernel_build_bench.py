"""Kernel build time: arch list pinned to the GPU present vs the upstream arch set nvcc 13 accepts.

Runs envkit/inimage/build_flash_attn.py (the script the generated Dockerfile runs) several
times in one run on one machine, alternating the two arch sets, then loads each built rotary_emb
and checks it against a float32 reference on the GPU.

    python benchmarks/kernel_build_bench.py --sdist .sdists/flash_attn-2.7.4.post1.tar.gz \
        --pinned 9.0 --upstream "8.0;9.0" --rounds 2 --out /tmp/kbench

Prints a table and writes results.json into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "envkit", "inimage", "build_flash_attn.py")


def build(sdist: str, target: str, archs: str, out: str, extra: list[str]) -> dict:
    report = os.path.join(out, "report.json")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, SCRIPT, "--sdist", sdist, "--targets", target, "--arch-list", archs,
                           "--out", out, "--report", report, *extra], text=True, capture_output=True)
    wall = time.monotonic() - start
    sys.stdout.write(proc.stdout[-3000:])
    if proc.returncode != 0:
        sys.stdout.write(proc.stderr[-4000:])
        return {"archs": archs, "ok": False, "wall_s": round(wall, 1), "rc": proc.returncode}
    rep = json.load(open(report))
    return {"archs": archs, "ok": True, "wall_s": round(wall, 1), "compile_s": rep["targets"][0]["seconds"],
            "max_jobs": rep["max_jobs"], "nvcc_threads": rep["nvcc_threads"], "wheel": rep["targets"][0]["wheels"][0],
            "changes": rep["targets"][0]["changes"], "out": out}


def check_rotary(wheel_path: str) -> dict:
    """Load rotary_emb from the wheel in a fresh interpreter and compare with a float32 reference."""
    target = wheel_path + ".d"
    with zipfile.ZipFile(wheel_path) as z:
        z.extractall(target)
    code = r'''
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
import rotary_emb
torch.manual_seed(0)
dev = "cuda"
def ref(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:].float()
    c, s = cos.float()[:, None, :], sin.float()[:, None, :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)
def run(x, cos, sin):
    d = x.shape[-1] // 2
    out = torch.empty_like(x)
    rotary_emb.apply_rotary(x[..., :d], x[..., d:], cos[:, None, :], sin[:, None, :], out[..., :d], out[..., d:], False)
    return out
res = {"gpu": torch.cuda.get_device_name(0), "cc": list(torch.cuda.get_device_capability(0)), "torch": torch.__version__}
b, s, h, hd = 8, 4096, 32, 128
pos = torch.arange(s, device=dev, dtype=torch.float32)
inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
ang = torch.outer(pos, inv)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x = torch.randn(b, s, h, hd, device=dev, dtype=dtype)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    got = run(x, cos, sin).float()
    want = ref(x, cos, sin)
    res[f"max_abs_err_{str(dtype).split('.')[-1]}"] = float((got - want).abs().max())
x = torch.randn(b, s, h, hd, device=dev, dtype=torch.bfloat16)
cos, sin = ang.cos().bfloat16(), ang.sin().bfloat16()
for _ in range(3):
    run(x, cos, sin)
torch.cuda.synchronize()
n = 50
t0 = time.perf_counter()
for _ in range(n):
    run(x, cos, sin)
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / n
moved = 2 * x.numel() * x.element_size()
res["apply_rotary_bf16_ms"] = round(dt * 1e3, 3)
res["apply_rotary_bf16_GBps"] = round(moved / dt / 1e9, 1)
print(json.dumps(res))
'''
    proc = subprocess.run([sys.executable, "-c", code, target], text=True, capture_output=True)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr[-2000:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["ok"] = out["max_abs_err_float32"] < 1e-4 and out["max_abs_err_bfloat16"] < 0.1 and out["max_abs_err_float16"] < 0.02
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sdist", required=True)
    p.add_argument("--target", default="rotary")
    p.add_argument("--pinned", default="9.0")
    p.add_argument("--upstream", default="8.0;9.0")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--only-pinned", action="store_true", help="one pinned build (for the slow layer_norm)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    runs = []
    sets = [("pinned", a.pinned)] if a.only_pinned else [("pinned", a.pinned), ("upstream", a.upstream)]
    for r in range(1 if a.only_pinned else a.rounds):
        for label, archs in (sets if r % 2 == 0 else sets[::-1]):
            out = os.path.join(a.out, f"{a.target}-{label}-{r}")
            res = build(a.sdist, a.target, archs, out, [])
            res.update({"set": label, "round": r})
            runs.append(res)
            print(f"== {label} ({archs}) round {r}: {res.get('compile_s')} s compile, {res['wall_s']} s wall", flush=True)
    checks = {}
    if a.target == "rotary":
        for res in runs:
            if res["ok"]:
                checks[res["set"]] = check_rotary(os.path.join(res["out"], res["wheel"]))
    print("\nset        archs        round  MAX_JOBS  NVCC_THREADS  compile_s  wall_s")
    for res in runs:
        print(f"{res['set']:<10} {res['archs']:<12} {res['round']:>5}  {res.get('max_jobs', '-'):>8}  {res.get('nvcc_threads', '-'):>12}  "
              f"{res.get('compile_s', 'FAIL'):>9}  {res['wall_s']:>6}")
    med = {}
    for label, _ in sets:
        xs = sorted(r["compile_s"] for r in runs if r["set"] == label and r["ok"])
        med[label] = xs[len(xs) // 2] if xs else None
    if med.get("pinned") and med.get("upstream"):
        print(f"\nmedian compile: pinned {med['pinned']} s, upstream set {med['upstream']} s, ratio upstream/pinned = {med['upstream'] / med['pinned']:.2f}")
    for label, c in checks.items():
        print(f"check {label}: {json.dumps(c)}")
    json.dump({"runs": runs, "median_compile_s": med, "checks": checks}, open(os.path.join(a.out, "results.json"), "w"), indent=2)
    ok = all(r["ok"] for r in runs) and all(c.get("ok") for c in checks.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
