"""envkit's serving sweep and vLLM's own benchmark client (vllm/benchmarks/serve.py of the vLLM install)
on the same server and the same JSONL prompts, alternating round by round in one process, so both see
the server in the same state. Prints each round and a table of medians (stderr), then one JSON document
with every round's metrics from both clients (stdout).

    taskset -c 1 .vllm-venv/bin/python benchmarks/serving_compare.py URL MODEL_DIR DATASET.jsonl \
        OUTPUT_LEN NUM_PROMPTS CONCURRENCY ROUNDS

Run it with the vLLM environment's Python (vLLM's client needs vllm); envkit.serving is stdlib only.
tests/integration/test_vllm_serving.py runs it against a real vLLM CPU server.
"""
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.core.sweep import parse_dataset
from envkit.app.sweep import sweep
from vllm.benchmarks.serve import add_cli_args, main as vllm_bench  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

KEYS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput", "completed")
url, model_dir, dataset, output_len, num_prompts, concurrency, rounds = sys.argv[1:8]
requests = parse_dataset(Path(dataset).read_text(), int(num_prompts), int(output_len))
parser = FlexibleArgumentParser()
add_cli_args(parser)
vllm_args = ["--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions", "--model", "tiny",
             "--tokenizer", model_dir, "--dataset-name", "custom", "--dataset-path", dataset, "--custom-output-len", output_len,
             "--skip-chat-template", "--disable-shuffle", "--num-prompts", num_prompts, "--max-concurrency", concurrency,
             "--ignore-eos", "--temperature", "0", "--disable-tqdm"]  # greedy, as envkit asks


def envkit_round() -> dict:
    level = sweep(url, "tiny", [int(concurrency)], requests)[0]
    return {k: level[k] for k in KEYS}


def vllm_round() -> dict:
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet  # its report table; the dict it returns is what we keep
        try:
            result = vllm_bench(parser.parse_args(vllm_args))
        finally:
            sys.stdout = stdout
    return {k: result[k] for k in KEYS}


out = []
for r in range(int(rounds)):
    order = (("envkit", envkit_round), ("vllm", vllm_round))
    pair = dict((name, fn()) for name, fn in (order if r % 2 == 0 else order[::-1]))
    out.append(pair)
    print(json.dumps(pair), file=sys.stderr, flush=True)
print(f"\n{'metric':20}{'envkit median':>15}{'vLLM median':>15}{'median of ratios':>18}", file=sys.stderr)
for k in KEYS[:3]:
    e, v = (statistics.median(p[w][k] for p in out) for w in ("envkit", "vllm"))
    ratio = statistics.median(p["envkit"][k] / p["vllm"][k] for p in out)
    print(f"{k:20}{e:>15.2f}{v:>15.2f}{ratio:>18.3f}", file=sys.stderr)
print(json.dumps({"rounds": out}))
