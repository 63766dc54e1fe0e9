"""Resolver speed: matrix load, one `envkit resolve` process (start-up included) for a pip stack and for each kind of
serving engine, a sweep over every GPU x torch release x flash-attn release query, and one over every engine x GPU.
Prints figures; asserts nothing.

    .venv/bin/python benchmarks/resolve_bench.py [--sample N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.config import matrix_file as matrix
from envkit.core.resolve import parse_query, resolve


def cli_wall(args: list[str], runs: int = 7) -> float:
    exe = str(Path(sys.executable).with_name("envkit"))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=0, help="sweep only every Nth query (0: all)")
    a = ap.parse_args()

    t = time.perf_counter()
    m = matrix.parse((ROOT / "matrix.toml").read_text(), "matrix.toml")
    load_ms = (time.perf_counter() - t) * 1000

    ok_args = ["resolve", "--gpu", "RTX 4090", "--cuda", "11.8", "--torch", "2.1.2", "--vllm", "0.2.7", "--json"]
    bad_args = ["resolve", "--gpu", "V100", "--flash-attn", "2", "--json"]
    ok_wall, bad_wall = cli_wall(ok_args), cli_wall(bad_args)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t

    engine_args = [["resolve", "--engine", "triton-trtllm", "--gpu", "H100", "--json"],
                   ["resolve", "--engine", "trtllm", "--gpu", "T4", "--driver", "535.104.05", "--json"],
                   ["resolve", "--engine", "triton-vllm", "--gpu", "H100", "--json"],
                   ["resolve", "--engine", "fastllm", "--gpu", "A100", "--json"],
                   ["resolve", "--engine", "sglang", "--gpu", "H100", "--json"],
                   ["resolve", "--engine", "fastertransformer", "--gpu", "V100", "--json"]]
    engine_walls = [(args, cli_wall(args)) for args in engine_args]
    engines = ("trtllm", "triton-trtllm", "triton-vllm", "fastertransformer", "fastllm", "sglang", "paddle")
    engine_per = []
    engine_ok = 0
    t0 = time.perf_counter()
    for engine in engines:
        for g in m.gpus:
            t = time.perf_counter()
            r = resolve(m, parse_query(m, gpu=g.name, engine=engine), suggest=False)
            engine_per.append(time.perf_counter() - t)
            engine_ok += r.ok
    engine_sweep = time.perf_counter() - t0
    engine_per.sort()

    torches = sorted({str(b.version) for b in m.torch if b.platform == "cuda"})
    queries = [(g.name, tv, str(f.version)) for g in m.gpus for tv in torches for f in m.flash_attn]
    if a.sample:
        queries = queries[:: a.sample]
    ok = 0
    per = []
    t0 = time.perf_counter()
    for gpu, tv, fv in queries:
        t = time.perf_counter()
        r = resolve(m, parse_query(m, gpu=gpu, torch=tv, flash_attn=fv), suggest=False)
        per.append(time.perf_counter() - t)
        ok += r.ok
    sweep = time.perf_counter() - t0
    per.sort()
    print(f"matrix load (parse + validate):        {load_ms:7.1f} ms")
    print(f"python -c pass (interpreter start):    {bare * 1000:7.1f} ms")
    print(f"envkit resolve, solution (wall, median):{ok_wall * 1000:7.1f} ms   [{' '.join(ok_args[1:])}]")
    print(f"envkit resolve, conflict (wall, median):{bad_wall * 1000:7.1f} ms   [{' '.join(bad_args[1:])}]")
    for args, wall in engine_walls:
        print(f"envkit resolve, engine (wall, median):  {wall * 1000:7.1f} ms   [{' '.join(args[1:])}]")
    print(f"engine sweep: {len(engine_per)} queries (7 engines x {len(m.gpus)} GPUs), {engine_ok} solved: "
          f"{engine_sweep:.2f} s (median {engine_per[len(engine_per) // 2] * 1000:.2f} ms, "
          f"p99 {engine_per[int(len(engine_per) * 0.99)] * 1000:.2f} ms, max {engine_per[-1] * 1000:.1f} ms)")
    print(f"sweep: {len(queries)} queries (GPU x torch x flash-attn), {ok} solved, {len(queries) - ok} conflicts")
    print(f"sweep: {sweep:.2f} s total = {sweep / len(queries) * 1000:.3f} s per 1000 queries "
          f"(median {per[len(per) // 2] * 1000:.2f} ms, p99 {per[int(len(per) * 0.99)] * 1000:.2f} ms, max {per[-1] * 1000:.1f} ms)")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
