"""Serving sweep against any OpenAI-compatible endpoint (vLLM's api_server, or any other): streaming
/v1/completions requests at each concurrency, with vLLM's metric definitions (benchmarks/serve):

- TTFT: time from sending a request to its first streamed token.
- TPOT: per request, (latency - TTFT) / (output tokens - 1); ITL: gaps between streamed chunks.
- request and token throughput: completed requests and tokens over the wall time of the level.

The requests go through adapters/openai_http.py (http.client, threads here); a failed request (HTTP error,
connection drop, out of memory on the server) is a counted failure, never a crash.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from envkit.adapters.openai_http import one_request
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import parse_file
from envkit.core.sweep import parse_dataset, random_requests, summarize
from envkit.errors import InputError
from envkit.model.results import LevelResult, SweepResult


def run_level(url: str, model: str, requests: Sequence[tuple[Union[str, list[int]], int]], concurrency: int,
              progress: Optional[Callable[[int, int], None]] = None) -> dict:
    done = [0]
    lock = threading.Lock()

    def task(req):
        r = one_request(url, model, *req)
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], len(requests))
        return r

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(task, requests))
    wall = time.perf_counter() - start
    return summarize(results, wall, concurrency)


def sweep(url: str, model: str, concurrency: list[int], requests: Sequence[tuple[Union[str, list[int]], int]],
          progress: Optional[Callable[[int, int, int], None]] = None) -> list:
    """One level per concurrency, each sending all `requests` ((prompt, output length) pairs), after one warm-up."""
    one_request(url, model, requests[0][0], 2)  # warm-up, not counted

    def at(level: int) -> Optional[Callable[[int, int], None]]:
        return None if progress is None else (lambda done, total: progress(level, done, total))

    return [run_level(url, model, requests, c, at(c)) for c in concurrency]


@dataclass(frozen=True)
class SweepRequest:
    engine_url: str  # openai:http://HOST:PORT
    model: str = "default"
    concurrency: str = "1,4,8,16"
    num_prompts: int = 64
    input_len: int = 128
    output_len: int = 128
    dataset: Optional[str] = None

    @classmethod
    def asked(cls, engine_url: str, model: Optional[str], concurrency: str, num_prompts: int, input_len: Optional[int],
              output_len: Optional[int], dataset: Optional[str]) -> "SweepRequest":
        """From a command's options, where what was not given is None."""
        return cls(engine_url, model or cls.model, concurrency, num_prompts, input_len or cls.input_len, output_len or cls.output_len,
                   dataset)


def _levels(concurrency: str) -> list[int]:
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--concurrency {concurrency!r} is not a list of integers", "write --concurrency 1,4,8") from None
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency {concurrency!r} needs positive integers", "write --concurrency 1,4,8")
    return levels


def serving_sweep(req: SweepRequest, reporter: Reporter = Silent()) -> SweepResult:
    """One row per concurrency level; ok when no request failed."""
    if not req.engine_url.startswith("openai:") or "://" not in req.engine_url:
        raise InputError(f"--engine {req.engine_url!r}: the serving sweep takes openai:URL", "write --engine openai:http://127.0.0.1:8000")
    levels_asked = _levels(req.concurrency)
    requests: Sequence[tuple[Union[str, list[int]], int]]  # (prompt text or token ids, output length)
    if req.dataset:
        requests = parse_file(req.dataset, "dataset",
                              'give a JSONL file of {"prompt": "...", "output_tokens": N} lines (vLLM\'s custom dataset format)',
                              lambda text: parse_dataset(text, req.num_prompts, req.output_len))
    else:
        requests = random_requests(req.num_prompts, req.input_len, req.output_len)
    url = req.engine_url[len("openai:"):]
    levels = sweep(url, req.model, levels_asked, requests, progress=reporter.requests_done)
    return SweepResult(url, req.model, req.dataset, None if req.dataset else req.input_len, req.output_len,
                       tuple(LevelResult.from_json(lv) for lv in levels))
