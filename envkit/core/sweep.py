"""The serving sweep's pure parts: workloads (random or a dataset), Poisson arrival times, the summary of one
level's requests, and the bounds every client holds a server to (fuzz report 3): a token count is an integer below
MAX_COUNT (2**53, the integers a float holds exactly), a streamed line is at most MAX_LINE_BYTES, a request's answer
ends within its timeout (REQUEST_TIMEOUT_S by default, --request-timeout), and a request streams at most
max_events(output_len) token events. A request past one of them is a failed request with the reason."""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

from envkit.inimage.selftest import jsonl_rows

MAX_COUNT = 2 ** 53  # a token count at or above this is no count (a float, the metrics' arithmetic, would lose it)
MAX_LINE_BYTES = 4 << 20  # a longer streamed line fails its request (an event is a few hundred bytes)
REQUEST_TIMEOUT_S = 300.0  # --request-timeout's default: one request's answer, first byte to last, keep-alives included


def max_events(output_len: int) -> int:
    """The most token events a request for `output_len` tokens may stream: each event carries a token or more, and
    a server may add a few empty ones (a last chunk with the finish reason); far more is a runaway stream."""
    return 4 * max(output_len, 1) + 1024


def count_ok(value: object) -> bool:
    """A token count a server may report: an int (not a bool) in 0..MAX_COUNT-1."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""
    output_chars: int = 0  # characters of the streamed text (envkit compare's characters/s)
    broken: bool = False  # the server broke the protocol: a malformed or runaway stream, an impossible count, no end in time


def percentile(xs: list[float], q: int) -> float:
    """The q-th percentile (1..99) with linear interpolation between the closest ranks (numpy's default, vLLM's):
    statistics.quantiles(method="inclusive"). 0.0 for no values."""
    if not xs:
        return 0.0
    if len(xs) == 1:  # quantiles() wants two points before Python 3.13
        return float(xs[0])
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def arrival_offsets(n: int, rate: float, seed: int = 0) -> list[float]:
    """Seconds from the start of a level at which each of n requests is sent: all at 0 for an infinite rate, else a
    Poisson process of `rate` requests per second (exponential gaps, seeded), as `vllm bench serve --request-rate`."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        offsets.append(t)
    return offsets


def random_requests(n: int, input_len: int, output_len: int, vocab: int = 1000, seed: int = 0) -> list[tuple[list[int], int]]:
    """(prompt token ids, output length) pairs: ids from 10 up, valid for any tokenizer of at least `vocab` entries."""
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab) for _ in range(input_len)], output_len) for _ in range(n)]


def parse_dataset(text: str, n: int, output_len: int) -> list[tuple[str, int]]:
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


def summarize(results: list[RequestResult], wall: float, concurrency: int) -> dict[str, Any]:
    """One level's row. A result whose counts are out of bounds (a client that did not check them) counts as failed,
    so that no arithmetic here can overflow."""
    for r in results:
        if r.ok and not (count_ok(r.output_tokens) and count_ok(r.prompt_tokens)):
            r.ok, r.broken, r.error = False, True, "the server reported a token count out of range"
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
        "mean_ttft_ms": _mean(ttft), "p99_ttft_ms": _pct(ttft, 99),
        "mean_tpot_ms": _mean(tpot), "p99_tpot_ms": _pct(tpot, 99),
        "mean_itl_ms": _mean(itl), "mean_latency_ms": _mean(lat),
        "median_ttft_ms": _pct(ttft, 50), "median_tpot_ms": _pct(tpot, 50), "median_itl_ms": _pct(itl, 50), "p99_itl_ms": _pct(itl, 99),
        "median_latency_ms": _pct(lat, 50), "p99_latency_ms": _pct(lat, 99),
    }


def _mean(xs: list[float]) -> Optional[float]:
    return round(statistics.fmean(xs), 2) if xs else None


def _pct(xs: list[float], q: int) -> Optional[float]:
    return round(percentile(xs, q), 2) if xs else None
