"""Alternate envkit's chat sweep and vLLM's chat client on a vLLM server; for each half-round, the server's own mean
inter-token latency and TTFT (deltas of its Prometheus /metrics) beside what that client measured. Run with the vLLM
environment's Python, the server started as in docs/benchmarks-serving.md:

    taskset -c 1 .vllm-venv/bin/python benchmarks/chat_server_metrics.py URL MODEL_DIR DATASET.jsonl
"""
import os, re, sys, urllib.request
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
URL, MODEL, DATASET = sys.argv[1:4]
sys.argv = [sys.argv[0]]
from envkit.app.sweep import sweep
from envkit.core.sweep import parse_dataset
from vllm.benchmarks.serve import add_cli_args, main as vllm_bench
from vllm.utils.argparse_utils import FlexibleArgumentParser
def metrics():
    t = urllib.request.urlopen(URL + "/metrics").read().decode()
    g = lambda n: float(re.search(rf"^vllm:{n}{{[^}}]*}} (\S+)", t, re.M).group(1))
    return {k: g(k) for k in ("inter_token_latency_seconds_sum", "inter_token_latency_seconds_count",
                              "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count")}
def server(before, after):
    d = {k: after[k] - before[k] for k in after}
    return d["inter_token_latency_seconds_sum"] / d["inter_token_latency_seconds_count"] * 1e3, \
        d["time_to_first_token_seconds_sum"] / d["time_to_first_token_seconds_count"] * 1e3
reqs = parse_dataset(open(DATASET).read(), 64, 32)
parser = FlexibleArgumentParser(); add_cli_args(parser)
ARGS = (["--backend", "openai-chat", "--base-url", URL, "--endpoint", "/v1/chat/completions", "--model", "tiny",
    "--tokenizer", MODEL, "--dataset-name", "custom", "--dataset-path", DATASET, "--custom-output-len", "32",
    "--skip-chat-template", "--disable-shuffle", "--num-prompts", "64", "--max-concurrency", "4", "--ignore-eos",
    "--temperature", "0", "--disable-tqdm"])
for r in range(4):
    for name in (("envkit", "vllm") if r % 2 == 0 else ("vllm", "envkit")):
        b = metrics()
        if name == "envkit":
            lv = sweep(URL, "tiny", [4], reqs, endpoint="chat")[0]; c_itl, c_ttft = lv["mean_itl_ms"], lv["mean_ttft_ms"]; inp = lv["input_throughput"] * lv["duration_s"]
        else:
            with open(os.devnull, "w") as q:
                so, sys.stdout = sys.stdout, q
                try: res = vllm_bench(parser.parse_args(ARGS))
                finally: sys.stdout = so
            c_itl, c_ttft = res["mean_itl_ms"], res["mean_ttft_ms"]; inp = res["total_input_tokens"]
        s_itl, s_ttft = server(b, metrics())
        print(f"round {r} {name:6} client ITL {c_itl:6.2f} ms TTFT {c_ttft:6.2f} | server ITL {s_itl:6.2f} ms TTFT {s_ttft:6.2f} | input tokens {inp:.0f}", flush=True)
