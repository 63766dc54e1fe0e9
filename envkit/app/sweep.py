"""Serving sweep against any OpenAI-compatible endpoint (vLLM's api_server, or any other): streaming
/v1/completions requests at each concurrency, with vLLM's metric definitions (benchmarks/serve):

- TTFT: time from sending a request to its first streamed token.
- TPOT: per request, (latency - TTFT) / (output tokens - 1); ITL: gaps between streamed chunks.
- request and token throughput: completed requests and tokens over the wall time of the level.

Standard library only (http.client and threads), so it runs inside any image too. A failed request
(HTTP error, connection drop, out of memory on the server) is a counted failure, never a crash.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from envkit.adapters.openai_http import one_request
from envkit.core.sweep import summarize


def run_level(url: str, model: str, requests: list, concurrency: int,
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


def sweep(url: str, model: str, concurrency: list, requests: list,
          progress: Optional[Callable[[int, int, int], None]] = None) -> list:
    """One level per concurrency, each sending all `requests` ((prompt, output length) pairs), after one warm-up."""
    one_request(url, model, requests[0][0], 2)  # warm-up, not counted
    return [run_level(url, model, requests, c, (lambda d, n, c=c: progress(c, d, n)) if progress else None) for c in concurrency]
