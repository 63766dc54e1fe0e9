"""Run vLLM's own benchmark client (vllm.benchmarks.serve, from the vLLM install) on a random workload and
print its headline metrics as one VBENCH JSON line. Used by benchmarks/serving_compare.py with the vLLM
environment's Python: python vllm_bench_client.py URL TOKENIZER_DIR INPUT_LEN OUTPUT_LEN NUM_PROMPTS CONCURRENCY
"""
import json
import sys

from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser()
add_cli_args(p)
a = p.parse_args(["--backend", "vllm", "--base-url", sys.argv[1], "--endpoint", "/v1/completions", "--model", "tiny",
                  "--tokenizer", sys.argv[2], "--dataset-name", "random", "--random-input-len", sys.argv[3], "--random-output-len", sys.argv[4],
                  "--num-prompts", sys.argv[5], "--max-concurrency", sys.argv[6], "--ignore-eos", "--disable-tqdm"])
r = main(a)
keep = {k: r[k] for k in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput", "request_throughput", "completed") if k in r}
print("VBENCH " + json.dumps(keep))
