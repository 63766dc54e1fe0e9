"""One level of envkit's serving sweep against a vLLM server, judged without a clock bound: vLLM's own metric code
(vllm.benchmarks.serve.calculate_metrics, what `vllm bench serve` prints) computed on the very requests envkit timed,
and the server's own Prometheus counters read around the level. Run with the vLLM environment's Python:

    .vllm-venv/bin/python tests/vllm/same_requests.py URL DATASET.jsonl OUTPUT_LEN NUM_PROMPTS CONCURRENCY ENDPOINT

ENDPOINT is completions or chat. Prints one JSON document: envkit's row, vLLM's metrics of the same records, and the
server's deltas (requests finished, prompt and generation tokens, the sums of its TTFT and end-to-end histograms) beside
the same sums from envkit's records. The timed comparison of the two clients, round by round, is
benchmarks/serving_compare.py (docs/benchmarks-serving.md).
"""
import contextlib
import io
import json
import re
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envkit.app.sweep import run_level  # noqa: E402
from envkit.core.sweep import RequestResult, parse_dataset  # noqa: E402
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput  # noqa: E402
from vllm.benchmarks.serve import calculate_metrics  # noqa: E402

SERVER = {"requests": "request_success_total", "prompt_tokens": "prompt_tokens_total",
          "generation_tokens": "generation_tokens_total", "ttft_sum_s": "time_to_first_token_seconds_sum",
          "e2e_sum_s": "e2e_request_latency_seconds_sum"}


def server_counters(url: str) -> dict:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    out = {}
    for key, name in SERVER.items():
        values = re.findall(rf"^vllm:{name}{{[^}}]*}} (\S+)", text, re.M)  # success_total has a row per finish reason
        if not values:
            raise SystemExit(f"the server's /metrics has no vllm:{name}")
        out[key] = sum(float(v) for v in values)
    return out


def as_vllm(r: RequestResult) -> RequestFuncOutput:
    return RequestFuncOutput(success=r.ok, latency=r.latency, output_tokens=r.output_tokens, ttft=r.ttft, itl=list(r.itl),
                             prompt_len=r.prompt_tokens, error=r.error)


def main(url: str, dataset: str, output_len: str, num_prompts: str, concurrency: str, endpoint: str) -> None:
    requests = parse_dataset(Path(dataset).read_text(), int(num_prompts), int(output_len))
    before = server_counters(url)
    kept: list[RequestResult] = []
    level = run_level(url, "tiny", requests, int(concurrency), endpoint=endpoint, kept=kept)
    after = server_counters(url)
    with contextlib.redirect_stdout(io.StringIO()):  # its plotting tip
        metrics, _ = calculate_metrics([], [as_vllm(r) for r in kept], level["duration_s"], None, [99.0], {})
    percentile = {name: dict(getattr(metrics, f"percentiles_{name}_ms"))[99.0] for name in ("ttft", "tpot", "itl", "e2el")}
    vllm = {"completed": metrics.completed, "failed": metrics.failed, "request_throughput": metrics.request_throughput,
            "input_throughput": metrics.total_input / level["duration_s"], "output_throughput": metrics.output_throughput,
            "mean_ttft_ms": metrics.mean_ttft_ms, "p99_ttft_ms": percentile["ttft"], "mean_tpot_ms": metrics.mean_tpot_ms,
            "p99_tpot_ms": percentile["tpot"], "mean_itl_ms": metrics.mean_itl_ms, "mean_latency_ms": metrics.mean_e2el_ms,
            "median_ttft_ms": metrics.median_ttft_ms, "median_tpot_ms": metrics.median_tpot_ms, "median_itl_ms": metrics.median_itl_ms,
            "p99_itl_ms": percentile["itl"], "median_latency_ms": metrics.median_e2el_ms, "p99_latency_ms": percentile["e2el"]}
    ok = [r for r in kept if r.ok]
    records = {"requests": len(ok), "prompt_tokens": sum(r.prompt_tokens for r in ok),
               "generation_tokens": sum(r.output_tokens for r in ok), "ttft_sum_s": sum(r.ttft for r in ok),
               "e2e_sum_s": sum(r.latency for r in ok)}
    print(json.dumps({"envkit": level, "vllm": {k: float(v) for k, v in vllm.items()}, "records": records,
                      "server": {k: after[k] - before[k] for k in SERVER}}))


if __name__ == "__main__":
    main(*sys.argv[1:7])
