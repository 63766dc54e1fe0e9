"""An independent serving client for the agreement test: the `openai` Python package (the one ftllm's server is built
beside) streaming chat completions from an OpenAI-compatible server, one level of a sweep, metrics as one JSON line.

    .fastllm-venv/bin/python tests/fastllm/openai_client.py URL MODEL DATASET.jsonl OUTPUT_LEN NUM_PROMPTS CONCURRENCY

It shares no code with envkit. The prompts are the JSONL lines' "prompt" (the first NUM_PROMPTS, cycled when there are
fewer), each sent as one user message with max_tokens OUTPUT_LEN, temperature 0, stream_options.include_usage and,
in extra_body, vLLM's min_tokens and ignore_eos (ftllm honours min_tokens). As vLLM's benchmark client
(vllm/benchmarks/lib/endpoint_request_func.py, async_request_openai_chat_completions): one warm-up request first
(2 tokens, not counted), then every request sent at once with at most CONCURRENCY in flight (threads here, one
shared client), output throughput = output tokens of the completed requests over the level's wall time, TPOT per
request = (latency - TTFT) / (output tokens - 1).

One deliberate difference from vLLM's chat client: vLLM takes the first chunk with `choices` as the first token.
ftllm sends its role-only chunk ({"delta": {"role": "assistant"}}) as soon as the response starts, before the prompt
is processed, so that rule times the HTTP response, not a token. Here TTFT is the first chunk whose delta carries
content, latency the last such chunk, and the role chunk's time is reported on its own (mean_first_chunk_ms).
Output tokens are the usage's completion_tokens (ftllm sends usage in its closing chunk, beside `choices`, where
vLLM's client would not read it), else the content chunks counted (ftllm may carry several tokens in one chunk).
"""
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from openai import OpenAI


def prompts(path: str, n: int) -> list:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line)["prompt"] for line in f if line.strip()]
    return [rows[i % len(rows)] for i in range(n)]


def one(client: OpenAI, model: str, prompt: str, output_len: int) -> dict:
    start = time.perf_counter()
    first_chunk = first = last = None
    chunks = usage_tokens = 0
    try:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=output_len, temperature=0.0, stream=True,
            stream_options={"include_usage": True}, extra_body={"min_tokens": output_len, "ignore_eos": True})
        for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None and chunk.usage.completion_tokens:
                usage_tokens = chunk.usage.completion_tokens
            if not chunk.choices:
                continue
            first_chunk = now if first_chunk is None else first_chunk
            if chunk.choices[0].delta.content:
                chunks += 1
                first = now if first is None else first
                last = now
    except Exception as exc:  # a failed request is counted, as in vLLM's client
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if first is None:
        return {"ok": False, "error": "no content streamed"}
    return {"ok": True, "ttft": first - start, "first_chunk": first_chunk - start, "latency": last - start,
            "tokens": usage_tokens or chunks}


def level(url: str, model: str, dataset: str, output_len: int, num_prompts: int, concurrency: int) -> dict:
    client = OpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0, timeout=600)
    todo = prompts(dataset, num_prompts)
    warm = one(client, model, todo[0], 2)
    if not warm["ok"]:
        raise SystemExit(f"the warm-up request failed: {warm['error']}")
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda p: one(client, model, p, output_len), todo))
    wall = time.perf_counter() - start
    ok = [r for r in results if r["ok"]]

    def mean(xs: list) -> "float | None":
        return round(statistics.fmean(xs), 3) if xs else None
    return {"concurrency": concurrency, "requests": len(results), "completed": len(ok), "failed": len(results) - len(ok),
            "errors": sorted({r["error"] for r in results if not r["ok"]})[:3], "duration_s": round(wall, 3),
            "output_throughput": round(sum(r["tokens"] for r in ok) / wall, 2),
            "mean_ttft_ms": mean([r["ttft"] * 1e3 for r in ok]),
            "mean_first_chunk_ms": mean([r["first_chunk"] * 1e3 for r in ok]),
            "mean_tpot_ms": mean([(r["latency"] - r["ttft"]) / (r["tokens"] - 1) * 1e3 for r in ok if r["tokens"] > 1]),
            "mean_latency_ms": mean([r["latency"] * 1e3 for r in ok]),
            "output_tokens": sum(r["tokens"] for r in ok)}


if __name__ == "__main__":
    url, model, dataset, output_len, num_prompts, concurrency = sys.argv[1:7]
    print(json.dumps(level(url, model, dataset, int(output_len), int(num_prompts), int(concurrency))))
