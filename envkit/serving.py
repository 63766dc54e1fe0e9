"""Serving sweep against any OpenAI-compatible endpoint (vLLM's api_server, or any other): streaming
/v1/completions requests at each concurrency, with vLLM's metric definitions (benchmarks/serve):

- TTFT: time from sending a request to its first streamed token.
- TPOT: per request, (latency - TTFT) / (output tokens - 1); ITL: gaps between streamed chunks.
- request and token throughput: completed requests and tokens over the wall time of the level.

Standard library only (http.client and threads), so it runs inside any image too. A failed request
(HTTP error, connection drop, out of memory on the server) is a counted failure, never a crash.
"""
from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional
from urllib.parse import urlsplit

from .selftest import jsonl_rows


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list = field(default_factory=list)
    error: str = ""


def _percentile(xs: list, q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(url: str, model: str, prompt, output_len: int, timeout: float = 600) -> RequestResult:
    """One streamed /v1/completions request; prompt is text or a list of token ids."""
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": output_len, "min_tokens": output_len, "ignore_eos": True,
                       "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    res = RequestResult(ok=False, prompt_tokens=len(prompt) if isinstance(prompt, list) else 0)
    conn = None
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=timeout)
        conn.request("POST", (parts.path.rstrip("/") or "") + "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return res
        last = None
        chunks = 0
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            doc = json.loads(data)
            now = time.perf_counter()
            if doc.get("usage"):
                res.output_tokens = int(doc["usage"].get("completion_tokens") or 0)
                res.prompt_tokens = int(doc["usage"].get("prompt_tokens") or res.prompt_tokens)
            if doc.get("choices"):  # vLLM's bench: the first chunk with choices is the first token, text or not
                chunks += 1
                if last is None:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
        res.latency = (last - start) if last is not None else time.perf_counter() - start  # vLLM: up to the last token
        res.output_tokens = res.output_tokens or chunks
        res.ok = chunks > 0
        if not res.ok:
            res.error = "no tokens streamed"
    except Exception as exc:  # whatever the server or the network did, the request is a counted failure
        res.ok = False
        res.error = f"{type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.close()
    return res


def random_requests(n: int, input_len: int, output_len: int, vocab: int = 1000, seed: int = 0) -> list:
    """(prompt token ids, output length) pairs: ids from 10 up, valid for any tokenizer of at least `vocab` entries."""
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab) for _ in range(input_len)], output_len) for _ in range(n)]


def parse_dataset(text: str, n: int, output_len: int) -> list:
    """(prompt, output length) pairs from JSONL lines {"prompt": str, "output_tokens": int?}, as vLLM's custom dataset.

    output_tokens, where a line has it, wins over output_len. Fewer lines than n are cycled. ValueError names the line.
    """
    reqs = []
    for no, row in jsonl_rows(text):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"]:
            raise ValueError(f'line {no} has no "prompt" string')
        out = row.get("output_tokens", output_len)
        if not isinstance(out, int) or isinstance(out, bool) or out < 1:
            raise ValueError(f'line {no}: "output_tokens" must be a positive integer')
        reqs.append((row["prompt"], out))
    if not reqs:
        raise ValueError("it holds no prompts")
    return [reqs[i % len(reqs)] for i in range(n)]


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


def summarize(results: list, wall: float, concurrency: int) -> dict:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft * 1e3 for r in ok]
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) * 1e3 for r in ok if r.output_tokens > 1]
    itl = [x * 1e3 for r in ok for x in r.itl]
    lat = [r.latency * 1e3 for r in ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    return {
        "concurrency": concurrency, "requests": len(results), "completed": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:3],
        "out_of_memory": any("out of memory" in r.error.lower() for r in results if not r.ok), "duration_s": round(wall, 3),
        "request_throughput": round(len(ok) / wall, 3) if wall else 0.0,
        "input_throughput": round(in_tokens / wall, 2) if wall else 0.0,
        "output_throughput": round(out_tokens / wall, 2) if wall else 0.0,
        "mean_ttft_ms": round(statistics.fmean(ttft), 2) if ttft else None,
        "p99_ttft_ms": round(_percentile(ttft, 99), 2) if ttft else None,
        "mean_tpot_ms": round(statistics.fmean(tpot), 2) if tpot else None,
        "p99_tpot_ms": round(_percentile(tpot, 99), 2) if tpot else None,
        "mean_itl_ms": round(statistics.fmean(itl), 2) if itl else None,
        "mean_latency_ms": round(statistics.fmean(lat), 2) if lat else None,
    }


def sweep(url: str, model: str, concurrency: list, requests: list,
          progress: Optional[Callable[[int, int, int], None]] = None) -> list:
    """One level per concurrency, each sending all `requests` ((prompt, output length) pairs), after one warm-up."""
    one_request(url, model, requests[0][0], 2)  # warm-up, not counted
    return [run_level(url, model, requests, c, (lambda d, n, c=c: progress(c, d, n)) if progress else None) for c in concurrency]
