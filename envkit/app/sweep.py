"""Serving sweep against any OpenAI-compatible endpoint (vLLM's api_server, or any other; --engine openai:URL):
streaming /v1/completions requests at each concurrency (--endpoint chat: /v1/chat/completions, one user message per
request, the random workload's token ids sent as words), or against a Triton Inference Server (--engine triton:URL):
streaming requests to its generate extension (POST /v2/models/MODEL/generate_stream, TensorRT-LLM's ensemble
tensors; docs/triton-sweep.md). Either way with vLLM's metric definitions (benchmarks/serve):

- TTFT: time from sending a request to its first streamed token.
- TPOT: per request, (latency - TTFT) / (output tokens - 1); ITL: gaps between streamed chunks.
- request and token throughput: completed requests and tokens over the wall time of the level.

Before the first level, as `vllm bench serve` does: a readiness wait (GET /v1/models, else /health, until the
server answers or --ready-timeout passes: one line and exit 4 when it never does), the model from /v1/models
when --model is not given, and one warm-up request whose failure stops the sweep with its reason. OpenAI: when the
warm-up is refused as a bad request (HTTP 400 or 422), it is sent once more without vLLM's extra keys (ignore_eos,
stream_options, and for completions min_tokens: openai_http.extra_keys); when that one passes, the whole sweep goes
without them, and says so. Requests are
sent all at once, or at --request-rate per second as a seeded Poisson process; the concurrency caps how many are
in flight. An API key (--api-key, OPENAI_API_KEY) goes in `Authorization: Bearer` and nowhere else.
Triton's readiness wait is GET /v2/health/ready, then GET /v2/models/MODEL/ready (MODEL: --model, default ensemble).

The requests go through adapters/openai_http.py or adapters/triton_http.py (http.client, threads here); a failed
request of a level (HTTP error, an error event inside the stream, connection drop, out of memory on the server) is a
counted failure, never a crash.
"""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from envkit.adapters import openai_http, triton_http
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import MAX_DATASET_BYTES, parse_file
from envkit.core.sweep import RequestResult, arrival_offsets, parse_dataset, random_requests, summarize
from envkit.errors import ExternalError, InputError
from envkit.model.results import LevelResult, SweepResult

Prompt = Union[str, list[int]]
NOT_READY = (502, 503, 504)  # a proxy before a server still loading, or the server itself loading
SAY_EVERY_S = 10.0
PROTOCOLS = ("openai", "triton")  # --engine PROTOCOL:URL
TRITON = "triton"
ENDPOINTS = tuple(openai_http.ENDPOINTS)  # --endpoint, OpenAI only: completions (the default) or chat
TRITON_ENDPOINT = "generate_stream"  # what a Triton sweep's document records as its endpoint
REFUSED_AS_BAD = ("HTTP 400", "HTTP 422")  # a warm-up refused with these is tried once more without the extra keys


def one_request(url: str, model: str, prompt: Prompt, output_len: int, api_key: Optional[str] = None, protocol: str = "openai",
                nest: bool = False, endpoint: str = "completions", extras: bool = True) -> RequestResult:
    """One streamed request in the server's protocol: OpenAI /v1/completions or /v1/chat/completions (`endpoint`, with or
    without vLLM's extra keys), or Triton's generate_stream."""
    if protocol == TRITON:
        return triton_http.one_request(url, model, prompt, output_len, api_key=api_key, nest=nest)
    return openai_http.one_request(url, model, prompt, output_len, api_key=api_key, endpoint=endpoint, extras=extras)


def run_level(url: str, model: str, requests: Sequence[tuple[Prompt, int]], concurrency: int,
              progress: Optional[Callable[[int, int], None]] = None, request_rate: float = math.inf, seed: int = 0,
              api_key: Optional[str] = None, protocol: str = "openai", nest: bool = False, endpoint: str = "completions",
              extras: bool = True, kept: Optional[list[RequestResult]] = None) -> dict:
    """All `requests` at one concurrency: at most `concurrency` in flight, sent at once or at `request_rate` per second.
    With `kept`, each request's own result is appended to it too (envkit compare's single batch)."""
    done = [0]
    lock = threading.Lock()

    def task(req: tuple[Prompt, int]) -> RequestResult:
        r = one_request(url, model, *req, api_key=api_key, protocol=protocol, nest=nest, endpoint=endpoint, extras=extras)
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], len(requests))
        return r

    offsets = arrival_offsets(len(requests), request_rate, seed)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = []
        for req, at in zip(requests, offsets):
            wait = start + at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(task, req))
        results = [f.result() for f in futures]
    wall = time.perf_counter() - start
    if kept is not None:
        kept.extend(results)
    return summarize(results, wall, concurrency)


def wait_ready(url: str, timeout: float, api_key: Optional[str] = None, reporter: Reporter = Silent()) -> list[str]:
    """Poll GET /v1/models (or /health where a server has no model list) until the server answers, at most `timeout`
    seconds; the model ids it lists (empty where it lists none). ExternalError, one line, when it never answers or
    refuses the key."""
    deadline = time.monotonic() + timeout
    said_at: Optional[float] = None
    while True:
        left = deadline - time.monotonic()
        ans = openai_http.get(url, "/v1/models", api_key, timeout=max(0.5, min(5.0, left)))
        if ans.status == 200:
            return openai_http.model_ids(ans.doc)
        if ans.status in (401, 403):
            raise ExternalError(f"the server at {url} refused the request: {_one_line(ans.error)}",
                                "check --api-key (or OPENAI_API_KEY)" if api_key else "give the server's key with --api-key or OPENAI_API_KEY")
        if ans.status is not None and ans.status not in NOT_READY:  # it answers, but has no model list: is it healthy?
            health = openai_http.get(url, "/health", api_key, timeout=max(0.5, min(5.0, left)))
            if health.status is not None and health.status not in NOT_READY:
                return []
            ans = health
        reason = _one_line(ans.error)
        left = deadline - time.monotonic()
        if left <= 0:
            raise ExternalError(f"server at {url} did not answer within {timeout:g} s: {reason}", "start it / check the URL")
        now = time.monotonic()
        if said_at is None:
            reporter.say(f"waiting up to {timeout:g} s for the server at {url} to answer ({reason})")
            said_at = now
        elif now - said_at >= SAY_EVERY_S:
            reporter.say(f"still waiting for {url}: {reason}; {left:.0f} s left")
            said_at = now
        time.sleep(min(1.0, left))


def wait_ready_triton(url: str, model: str, timeout: float, api_key: Optional[str] = None, reporter: Reporter = Silent()) -> None:
    """Poll GET /v2/health/ready, then GET /v2/models/MODEL/ready, until both answer 200, at most `timeout` seconds; says
    the server's name and version (GET /v2). ExternalError, one line, when it never does: the model's own reason
    (unknown, still loading, failed) where the server gives one."""
    deadline = time.monotonic() + timeout
    said_at: Optional[float] = None
    server_ready = False
    while True:
        left = deadline - time.monotonic()
        wait = max(0.5, min(5.0, left))
        if not server_ready:
            ans = triton_http.get(url, "/v2/health/ready", api_key, timeout=wait)
            server_ready = ans.status == 200
            if server_ready:
                meta = triton_http.get(url, "/v2", api_key, timeout=wait).doc
                if isinstance(meta, dict) and meta.get("name"):
                    reporter.say(f"{meta['name']} {meta.get('version', '')} at {url}".strip())
        if server_ready:
            ans = triton_http.get(url, triton_http.model_path(model, "ready"), api_key, timeout=wait)
            if ans.status == 200:
                return
        if ans.status in (401, 403):
            raise ExternalError(f"the server at {url} refused the request: {_one_line(ans.error)}",
                                "check --api-key (or OPENAI_API_KEY)" if api_key else "give the server's key with --api-key or OPENAI_API_KEY")
        reason = _one_line(_triton_reason(ans))
        left = deadline - time.monotonic()
        if left <= 0:
            if server_ready:
                meta = triton_http.get(url, triton_http.model_path(model, "").rstrip("/"), api_key, timeout=5.0)
                if meta.status not in (None, 200):  # "unknown model" says more than "Model version not ready"
                    reason = _one_line(_triton_reason(meta))
                raise ExternalError(f"model {model} is not ready on the Triton server at {url} within {timeout:g} s: {reason}",
                                    "give a model the server serves with --model NAME (TensorRT-LLM's is ensemble), or check the server's log")
            raise ExternalError(f"server at {url} did not answer GET /v2/health/ready within {timeout:g} s: {reason}",
                                "start it / check the URL")
        now = time.monotonic()
        what = f"model {model} on the server" if server_ready else "the server"
        if said_at is None:
            reporter.say(f"waiting up to {timeout:g} s for {what} at {url} to be ready ({reason})")
            said_at = now
        elif now - said_at >= SAY_EVERY_S:
            reporter.say(f"still waiting for {what} at {url}: {reason}; {left:.0f} s left")
            said_at = now
        time.sleep(min(1.0, left))


def _triton_reason(ans: openai_http.Answer) -> str:
    """Why a readiness probe did not answer 200: the server's {"error": ...} where it gave one."""
    if ans.status is not None and isinstance(ans.doc, dict) and ans.doc.get("error"):
        return f"HTTP {ans.status}: {ans.doc['error']}"
    return ans.error or f"HTTP {ans.status}"


def choose_model(asked: Optional[str], served: list[str], url: str, reporter: Reporter = Silent()) -> str:
    """--model when given; else the server's first (or only) model, saying which when it serves several."""
    if asked:
        return asked
    if not served:
        raise InputError(f"the server at {url} lists no model at /v1/models", "give the served model's name with --model NAME")
    if len(served) > 1:
        reporter.say(f"the server serves {len(served)} models ({', '.join(served)}); sweeping the first, {served[0]} "
                     "(--model chooses another)")
    return served[0]


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def warm_up(url: str, model: str, prompt: Prompt, served: list[str], api_key: Optional[str] = None, protocol: str = "openai",
            nest: bool = False, endpoint: str = "completions", say: Callable[[str], None] = lambda _: None) -> bool:
    """One short request, not counted; when it fails the sweep stops here with its reason (every level would fail alike).
    Whether the sweep sends vLLM's extra keys: an OpenAI warm-up refused as a bad request (400, 422) is sent once more
    without them, and when that one passes the sweep goes without them (said); when it fails too, the first reason stands."""
    r = one_request(url, model, prompt, 2, api_key=api_key, protocol=protocol, nest=nest, endpoint=endpoint)
    if r.ok:
        return True
    if protocol != TRITON and r.error.startswith(REFUSED_AS_BAD):
        plain = one_request(url, model, prompt, 2, api_key=api_key, protocol=protocol, endpoint=endpoint, extras=False)
        if plain.ok:
            say(f"the server refused the warm-up with vLLM's extra keys ({', '.join(openai_http.extra_keys(endpoint))}): {_one_line(r.error, 160)}; "
                "it took one without them, so the sweep sends none: a request may stop before --output-len at its end-of-sequence "
                "token, and tokens are counted from the streamed chunks where the server sends no usage")
            return False
    fix = (f"the server serves {', '.join(served)}: give one of them with --model" if served and model not in served
           else "check the server's log; every request of the sweep would fail the same way")
    raise ExternalError(f"the warm-up request to {url} (model {model}) failed: {_one_line(r.error)}", fix)


def sweep(url: str, model: str, concurrency: list[int], requests: Sequence[tuple[Prompt, int]],
          progress: Optional[Callable[[int, int, int], None]] = None, request_rate: float = math.inf, seed: int = 0,
          api_key: Optional[str] = None, served: Sequence[str] = (), protocol: str = "openai", nest: bool = False,
          endpoint: str = "completions", say: Callable[[str], None] = lambda _: None) -> list:
    """One level per concurrency, each sending all `requests` ((prompt, output length) pairs), after one warm-up.
    With endpoint chat, prompts of token ids are turned into words once, here, before any clock runs."""
    if protocol != TRITON and endpoint == "chat":
        requests = [(openai_http.chat_text(p), n) for p, n in requests]
    extras = warm_up(url, model, requests[0][0], list(served), api_key, protocol, nest, endpoint, say)

    def at(level: int) -> Optional[Callable[[int, int], None]]:
        return None if progress is None else (lambda done, total: progress(level, done, total))

    return [run_level(url, model, requests, c, at(c), request_rate, seed, api_key, protocol, nest, endpoint, extras) for c in concurrency]


@dataclass(frozen=True)
class SweepRequest:
    engine_url: str  # openai:http://HOST:PORT or triton:http://HOST:PORT
    model: Optional[str] = None  # None: the server's first model (GET /v1/models); Triton: ensemble
    concurrency: str = "1,4,8,16"
    num_prompts: int = 64
    input_len: int = 128
    output_len: int = 128
    dataset: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # never shown, never written
    request_rate: float = math.inf  # requests per second; inf: all at once
    ready_timeout: float = 60.0  # seconds the server may take to answer
    seed: int = 0  # of the random workload and the arrival times
    nest_parameters: bool = False  # Triton: max_tokens, bad_words, stop_words and stream under "parameters"
    endpoint: Optional[str] = None  # OpenAI: completions (None: the default) or chat; Triton: generate_stream only

    @classmethod
    def asked(cls, engine_url: str, model: Optional[str], concurrency: str, num_prompts: int, input_len: Optional[int],
              output_len: Optional[int], dataset: Optional[str], api_key: Optional[str] = None, request_rate: Optional[float] = None,
              ready_timeout: Optional[float] = None, nest_parameters: bool = False, endpoint: Optional[str] = None) -> "SweepRequest":
        """From a command's options, where what was not given is None."""
        return cls(engine_url, model or None, concurrency, num_prompts, input_len or cls.input_len, output_len or cls.output_len,
                   dataset, api_key or None, cls.request_rate if request_rate is None else request_rate,
                   cls.ready_timeout if ready_timeout is None else ready_timeout, nest_parameters=nest_parameters, endpoint=endpoint)

    @property
    def openai_endpoint(self) -> str:
        """The OpenAI path's name the requests go to: --endpoint, or completions."""
        return self.endpoint or "completions"

    @property
    def protocol(self) -> str:
        """openai or triton: the part of --engine before the URL."""
        return self.engine_url.split(":", 1)[0]

    @property
    def url(self) -> str:
        return self.engine_url.split(":", 1)[1] if ":" in self.engine_url else ""


def _levels(concurrency: str) -> list[int]:
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--concurrency {concurrency!r} is not a list of integers", "write --concurrency 1,4,8") from None
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency {concurrency!r} needs positive integers", "write --concurrency 1,4,8")
    return levels


def check(req: SweepRequest) -> list[int]:
    """The request's own faults, before any network: the URL, the levels, the rate, the timeout. The levels."""
    if req.protocol not in PROTOCOLS or "://" not in req.url:
        raise InputError(f"--engine {req.engine_url!r}: the serving sweep takes openai:URL or triton:URL",
                         "write --engine openai:http://127.0.0.1:8000 (or triton:http://127.0.0.1:8000)")
    if "@" in req.url.split("://", 1)[1].split("/", 1)[0]:  # user:key@host would be printed and written to sweep.json
        raise InputError(f"--engine {req.protocol}:URL carries a login (user@host): it would be printed and written into the report",
                         "give the URL without it and the key with --api-key (or OPENAI_API_KEY)")
    if req.nest_parameters and req.protocol != TRITON:
        raise InputError("--triton-parameters shapes Triton's generate requests", "use it with --engine triton:URL, or drop it")
    if req.endpoint is not None and req.endpoint not in ENDPOINTS:
        raise InputError(f"--endpoint {req.endpoint!r} is not an OpenAI endpoint the sweep speaks",
                         f"write --endpoint {' or --endpoint '.join(ENDPOINTS)}")
    if req.endpoint is not None and req.protocol == TRITON:
        raise InputError("--endpoint chooses the OpenAI path (/v1/completions or /v1/chat/completions)",
                         "use it with --engine openai:URL; a Triton sweep always goes to generate_stream")
    if not req.request_rate > 0:  # NaN too
        raise InputError(f"--request-rate {req.request_rate:g} is not a positive number of requests per second",
                         "write --request-rate 4, or inf to send every request at once")
    if not 0 <= req.ready_timeout < math.inf:
        raise InputError(f"--ready-timeout {req.ready_timeout:g} is not a number of seconds", "write --ready-timeout 60")
    return _levels(req.concurrency)


def serving_sweep(req: SweepRequest, reporter: Reporter = Silent()) -> SweepResult:
    """One row per concurrency level; ok when no request failed."""
    levels_asked = check(req)
    requests: Sequence[tuple[Prompt, int]]  # (prompt text or token ids, output length)
    if req.dataset:
        requests = parse_file(req.dataset, "dataset",
                              'give a JSONL file of {"prompt": "...", "output_tokens": N} lines (vLLM\'s custom dataset format)',
                              lambda text: parse_dataset(text, req.num_prompts, req.output_len), limit=MAX_DATASET_BYTES)
    else:
        requests = random_requests(req.num_prompts, req.input_len, req.output_len, seed=req.seed)
    url = req.url
    if req.protocol == TRITON:
        model = req.model or triton_http.DEFAULT_MODEL
        wait_ready_triton(url, model, req.ready_timeout, req.api_key, reporter)
        served: list[str] = []
    else:
        served = wait_ready(url, req.ready_timeout, req.api_key, reporter)
        model = choose_model(req.model, served, url, reporter)
    endpoint = TRITON_ENDPOINT if req.protocol == TRITON else req.openai_endpoint
    levels = sweep(url, model, levels_asked, requests, progress=reporter.requests_done, request_rate=req.request_rate, seed=req.seed,
                   api_key=req.api_key, served=served, protocol=req.protocol, nest=req.nest_parameters, endpoint=endpoint,
                   say=reporter.say)
    return SweepResult(url, model, req.dataset, None if req.dataset else req.input_len, req.output_len,
                       tuple(LevelResult.from_json(lv) for lv in levels), req.request_rate, endpoint)
