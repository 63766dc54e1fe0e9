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
request of a level (HTTP error, an error event inside the stream, connection drop, out of memory on the server, a
stream broken or past its deadline) is a counted failure, never a crash.

Deadlines (fuzz report 3): --ready-timeout bounds the whole readiness wait, each probe included; --request-timeout
(default 300 s) bounds each request from connecting to its last line, keep-alive comments and trickled bytes
included; --sweep-timeout (default none) bounds the whole run, readiness wait to last level: a request in flight
when it passes is cut, one not yet sent is not sent, and both are counted failures (exit 1, the levels reached are
reported). A server that answers but not as its protocol says (an HTML page or no model list at /v1/models, a
3xx/4xx/5xx from /health, a wrong base URL such as .../v1, a warm-up whose stream is broken or stalled) stops the
sweep with one line and exit 6 (ServerError) naming what was seen; one that never answers, exit 4. Every text made
from the server's bytes is redacted, its control characters escaped, before it is cut or shown (model/redact.py).
"""
from __future__ import annotations

import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional, Sequence, Union

from envkit import __version__
from envkit.adapters import openai_http, triton_http
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import MAX_DATASET_BYTES, parse_file
from envkit.core.sweep import REQUEST_TIMEOUT_S, RequestResult, arrival_offsets, parse_dataset, random_requests, summarize
from envkit.errors import ExternalError, InputError, ServerError
from envkit.model.redact import safe_text
from envkit.model.results import LevelResult, SweepResult

Prompt = Union[str, list[int]]
NOT_READY = (502, 503, 504)  # a proxy before a server still loading, or the server itself loading
SAY_EVERY_S = 10.0
PROTOCOLS = ("openai", "triton")  # --engine PROTOCOL:URL
TRITON = "triton"
ENDPOINTS = tuple(openai_http.ENDPOINTS)  # --endpoint, OpenAI only: completions (the default) or chat
TRITON_ENDPOINT = "generate_stream"  # what a Triton sweep's document records as its endpoint
REFUSED_AS_BAD = ("HTTP 400", "HTTP 422")  # a warm-up refused with these is tried once more without the extra keys
URL_FIX = "check the URL: the server's base, http://HOST:PORT (drop a trailing /v1)"
TRITON_URL_FIX = "check the URL: the Triton server's HTTP port, http://HOST:PORT (drop a trailing /v2)"
SHOWN_MODELS = 5  # model ids named in a line; the rest counted


def _not_sent() -> RequestResult:
    return RequestResult(ok=False, error="not sent: the sweep's deadline (--sweep-timeout) had passed")


def _passed(deadline: Optional[float]) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def one_request(url: str, model: str, prompt: Prompt, output_len: int, api_key: Optional[str] = None, protocol: str = "openai",
                nest: bool = False, endpoint: str = "completions", extras: bool = True, request_timeout: float = REQUEST_TIMEOUT_S,
                deadline: Optional[float] = None) -> RequestResult:
    """One streamed request in the server's protocol: OpenAI /v1/completions or /v1/chat/completions (`endpoint`, with or
    without vLLM's extra keys), or Triton's generate_stream; at most `request_timeout` seconds, and none past `deadline`
    (time.monotonic())."""
    if _passed(deadline):
        return _not_sent()
    if protocol == TRITON:
        return triton_http.one_request(url, model, prompt, output_len, timeout=request_timeout, api_key=api_key, nest=nest,
                                       deadline=deadline)
    return openai_http.one_request(url, model, prompt, output_len, timeout=request_timeout, api_key=api_key, endpoint=endpoint,
                                   extras=extras, deadline=deadline)


def run_level(url: str, model: str, requests: Sequence[tuple[Prompt, int]], concurrency: int,
              progress: Optional[Callable[[int, int], None]] = None, request_rate: float = math.inf, seed: int = 0,
              api_key: Optional[str] = None, protocol: str = "openai", nest: bool = False, endpoint: str = "completions",
              extras: bool = True, kept: Optional[list[RequestResult]] = None, request_timeout: float = REQUEST_TIMEOUT_S,
              deadline: Optional[float] = None) -> dict:
    """All `requests` at one concurrency: at most `concurrency` in flight, sent at once or at `request_rate` per second.
    With `kept`, each request's own result is appended to it too (envkit compare's single batch). Past `deadline`
    (time.monotonic()), what is in flight is cut and the rest is not sent: counted failures."""
    done = [0]
    lock = threading.Lock()

    def task(req: tuple[Prompt, int]) -> RequestResult:
        r = one_request(url, model, *req, api_key=api_key, protocol=protocol, nest=nest, endpoint=endpoint, extras=extras,
                        request_timeout=request_timeout, deadline=deadline)
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
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(task, req))
        results = [f.result() for f in futures]
    wall = time.perf_counter() - start
    if kept is not None:
        kept.extend(results)
    return summarize(results, wall, concurrency)


def _refused(url: str, ans: openai_http.Answer, api_key: Optional[str]) -> ExternalError:
    return ExternalError(f"the server at {url} refused the request: {_one_line(ans.error)}",
                         "check --api-key (or OPENAI_API_KEY)" if api_key else "give the server's key with --api-key or OPENAI_API_KEY")


def _seen(ans: openai_http.Answer) -> str:
    """What a probe got, for a line: the status and the start of the body (or where a redirect points)."""
    if ans.status is None:
        return _one_line(ans.error)
    if 300 <= ans.status < 400:
        return f"HTTP {ans.status}, a redirect{' to ' + ans.location if ans.location else ''} (not followed)"
    if ans.status == 200:
        what = ("an empty body" if not ans.text else "an answer that is not JSON" if ans.doc is None else
                "an empty model list" if isinstance(ans.doc, dict) and ans.doc.get("data") == [] else "JSON without a model list")
        return f"HTTP 200 with {what}{': ' + _one_line(ans.text, 80) if ans.text and ans.doc is None else ''}"
    return _one_line(ans.error, 160)


def _probe_s(deadline: float) -> float:
    """One probe's own deadline: at most 5 s, and not much past the wait's."""
    return max(0.2, min(5.0, deadline - time.monotonic()))


def wait_ready(url: str, timeout: float, api_key: Optional[str] = None, reporter: Reporter = Silent(),
               model: Optional[str] = None) -> list[str]:
    """Poll GET /v1/models (or /health where a server has no model list) until the server answers, at most `timeout`
    seconds in all (each probe too is bounded); the model ids it lists (empty where it lists none). ExternalError, one
    line, when it never answers or refuses the key. ServerError (exit 6) when it answers, but not as an OpenAI server:
    /v1/models and /health both a 3xx or 4xx (a wrong base URL: every path a 404) at once, a 5xx still at the
    deadline; and, where no `model` is given, a /v1/models of 200 with no model in it (an HTML page, {"data": []}) or a
    3xx/4xx/5xx beside a healthy /health (a 404 there is a server without a model list: choose_model asks for --model)."""
    deadline = time.monotonic() + timeout
    said_at: Optional[float] = None
    while True:
        ans = openai_http.get(url, "/v1/models", api_key, timeout=_probe_s(deadline))
        ids = openai_http.model_ids(ans.doc) if ans.status == 200 else []
        if ids or (ans.status == 200 and model):
            if api_key and any(safe_text(m, (api_key,), None) != safe_text(m, (), None) for m in ids):
                raise ServerError(f"the server at {url} lists a model whose id holds the API key sent to it",
                                  "check the server: it echoes the key into its model list")
            return ids
        if ans.status in (401, 403):
            raise _refused(url, ans, api_key)
        if ans.status is not None and ans.status not in NOT_READY:  # it answers, but has no model list: is it healthy?
            health = openai_http.get(url, "/health", api_key, timeout=_probe_s(deadline))
            if health.status in (401, 403):
                raise _refused(url, health, api_key)
            if health.status is not None and 200 <= health.status < 300:
                if model or ans.status == 404:
                    return []
                raise ServerError(f"the server at {url} lists no model at /v1/models: {_seen(ans)} (GET /health: HTTP {health.status})",
                                  f"{URL_FIX}, and the server's log; or give the served model's name with --model NAME")
            if health.status is not None and health.status < 500:  # 3xx/4xx on both paths: not an OpenAI server's base URL
                raise ServerError(f"the server at {url} answered GET /v1/models with {_seen(ans)} and GET /health with {_seen(health)}",
                                  URL_FIX)
            ans = health  # none yet, loading (502-504), or a 5xx that may pass: waited on (a 5xx still there at the end: exit 6)
        reason = _seen(ans)
        left = deadline - time.monotonic()
        if left <= 0:
            if ans.status is not None and ans.status not in NOT_READY:
                raise ServerError(f"the server at {url} still answered {reason} after {timeout:g} s", f"check the server's log; {URL_FIX}")
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
    """Poll GET /v2/health/ready, then GET /v2/models/MODEL/ready, until both answer 200, at most `timeout` seconds in
    all; says the server's name and version (GET /v2). ExternalError, one line, when it never does: the model's own
    reason (unknown, still loading, failed) where the server gives one. ServerError (exit 6) at once when
    /v2/health/ready answers a 3xx, 404 or 405 (no Triton server at this base URL), and at the deadline for a 5xx
    other than 502-504. (Triton answers "not ready" with a 400: waited on.)"""
    deadline = time.monotonic() + timeout
    said_at: Optional[float] = None
    server_ready = False
    while True:
        if not server_ready:
            ans = triton_http.get(url, "/v2/health/ready", api_key, timeout=_probe_s(deadline))
            server_ready = ans.status == 200
            if server_ready:
                meta = triton_http.get(url, "/v2", api_key, timeout=_probe_s(deadline)).doc
                if isinstance(meta, dict) and meta.get("name"):
                    reporter.say(f"{safe_text(str(meta['name']), (api_key,), 80)} "
                                 f"{safe_text(str(meta.get('version', '')), (api_key,), 40)} "
                                 f"at {url}".strip())
            elif ans.status is not None and (300 <= ans.status < 400 or ans.status in (404, 405)):
                raise ServerError(f"the server at {url} answered GET /v2/health/ready with {_seen(ans)}: no Triton server at this URL",
                                  TRITON_URL_FIX)
        if server_ready:
            ans = triton_http.get(url, triton_http.model_path(model, "ready"), api_key, timeout=_probe_s(deadline))
            if ans.status == 200:
                return
        if ans.status in (401, 403):
            raise _refused(url, ans, api_key)
        reason = _one_line(_triton_reason(ans, api_key))
        left = deadline - time.monotonic()
        if left <= 0:
            if server_ready:
                meta = triton_http.get(url, triton_http.model_path(model, "").rstrip("/"), api_key, timeout=1.0)  # a last second
                if meta.status not in (None, 200):  # "unknown model" says more than "Model version not ready"
                    reason = _one_line(_triton_reason(meta, api_key))
                raise ExternalError(f"model {model} is not ready on the Triton server at {url} within {timeout:g} s: {reason}",
                                    "give a model the server serves with --model NAME (TensorRT-LLM's is ensemble), or check the server's "
                                    "log")
            if ans.status is not None and ans.status >= 500 and ans.status not in NOT_READY:
                raise ServerError(f"the server at {url} still answered GET /v2/health/ready with {reason} after {timeout:g} s",
                                  f"check the server's log; {TRITON_URL_FIX}")
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


def _triton_reason(ans: openai_http.Answer, api_key: Optional[str] = None) -> str:
    """Why a readiness probe did not answer 200: the server's {"error": ...} where it gave one (a safe line)."""
    if ans.status is not None and isinstance(ans.doc, dict) and ans.doc.get("error"):
        return f"HTTP {ans.status}: {safe_text(str(ans.doc['error']), (api_key,), 200)}"
    return ans.error or f"HTTP {ans.status}"


def choose_model(asked: Optional[str], served: list[str], url: str, reporter: Reporter = Silent()) -> str:
    """--model when given; else the server's first (or only) model, saying which when it serves several."""
    if asked:
        return asked
    if not served:
        raise InputError(f"the server at {url} lists no model at /v1/models", "give the served model's name with --model NAME")
    if len(served) > 1:
        reporter.say(f"the server serves {len(served)} models ({_names(served)}); sweeping the first, {_one_line(served[0], 80)} "
                     "(--model chooses another)")
    return served[0]


def _one_line(text: str, limit: int = 300) -> str:
    """A text from the server (or made of one) as one line: redacted, controls escaped, cut (model/redact.py)."""
    return safe_text(text, (), limit)


def warm_up(url: str, model: str, prompt: Prompt, served: list[str], api_key: Optional[str] = None, protocol: str = "openai",
            nest: bool = False, endpoint: str = "completions", say: Callable[[str], None] = lambda _: None,
            request_timeout: float = REQUEST_TIMEOUT_S, deadline: Optional[float] = None) -> bool:
    """One short request, not counted; when it fails the sweep stops here with its reason (every level would fail alike):
    ServerError (exit 6) when the server broke the protocol (a stream malformed, runaway, holding an impossible count,
    or with no end within `request_timeout`), else ExternalError (exit 4: no answer, or the server's own refusal).
    Whether the sweep sends vLLM's extra keys: an OpenAI warm-up refused as a bad request (400, 422) is sent once more
    without them, and when that one passes the sweep goes without them (said); when it fails too, the first reason stands."""
    r = one_request(url, model, prompt, 2, api_key=api_key, protocol=protocol, nest=nest, endpoint=endpoint,
                    request_timeout=request_timeout, deadline=deadline)
    if r.ok:
        return True
    if protocol != TRITON and r.error.startswith(REFUSED_AS_BAD):
        plain = one_request(url, model, prompt, 2, api_key=api_key, protocol=protocol, endpoint=endpoint, extras=False,
                            request_timeout=request_timeout, deadline=deadline)
        if plain.ok:
            say(f"the server refused the warm-up with vLLM's extra keys ({', '.join(openai_http.extra_keys(endpoint))}): "
                f"{_one_line(r.error, 160)}; "
                "it took one without them, so the sweep sends none: a request may stop before --output-len at its end-of-sequence "
                "token, and tokens are counted from the streamed chunks where the server sends no usage")
            return False
    failed = f"the warm-up request to {url} (model {_one_line(model, 80)}) failed: {_one_line(r.error)}"
    if _passed(deadline):
        raise ExternalError(failed, "give the sweep more time with --sweep-timeout")
    if r.broken:
        timed_out = r.error.startswith("timed out")
        raise ServerError(failed, f"raise --request-timeout (now {request_timeout:g} s) if the server is only slow; else check its log"
                          if timed_out else f"check the server's log; {URL_FIX if protocol != TRITON else TRITON_URL_FIX}")
    fix = (f"the server serves {_names(served)}: give one of them with --model" if served and model not in served
           else "check the server's log; every request of the sweep would fail the same way")
    raise ExternalError(failed, fix)


def _names(served: Sequence[str]) -> str:
    more = len(served) - SHOWN_MODELS
    return ", ".join(_one_line(m, 80) for m in served[:SHOWN_MODELS]) + (f" and {more} more" if more > 0 else "")


def sweep(url: str, model: str, concurrency: list[int], requests: Sequence[tuple[Prompt, int]],
          progress: Optional[Callable[[int, int, int], None]] = None, request_rate: float = math.inf, seed: int = 0,
          api_key: Optional[str] = None, served: Sequence[str] = (), protocol: str = "openai", nest: bool = False,
          endpoint: str = "completions", say: Callable[[str], None] = lambda _: None, request_timeout: float = REQUEST_TIMEOUT_S,
          deadline: Optional[float] = None) -> list:
    """One level per concurrency, each sending all `requests` ((prompt, output length) pairs), after one warm-up.
    With endpoint chat, prompts of token ids are turned into words once, here, before any clock runs."""
    if protocol != TRITON and endpoint == "chat":
        requests = [(openai_http.chat_text(p), n) for p, n in requests]
    extras = warm_up(url, model, requests[0][0], list(served), api_key, protocol, nest, endpoint, say, request_timeout, deadline)

    def at(level: int) -> Optional[Callable[[int, int], None]]:
        return None if progress is None else (lambda done, total: progress(level, done, total))

    return [run_level(url, model, requests, c, at(c), request_rate, seed, api_key, protocol, nest, endpoint, extras,
                      request_timeout=request_timeout, deadline=deadline) for c in concurrency]


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
    ready_timeout: float = 60.0  # seconds the server may take to answer, the whole readiness wait
    seed: int = 0  # of the random workload and the arrival times
    nest_parameters: bool = False  # Triton: max_tokens, bad_words, stop_words and stream under "parameters"
    endpoint: Optional[str] = None  # OpenAI: completions (None: the default) or chat; Triton: generate_stream only
    request_timeout: float = REQUEST_TIMEOUT_S  # seconds one request may take, connecting to its last line
    sweep_timeout: Optional[float] = None  # seconds the whole run may take, readiness wait to last level; None: no limit

    @classmethod
    def asked(cls, engine_url: str, model: Optional[str], concurrency: str, num_prompts: int, input_len: Optional[int],
              output_len: Optional[int], dataset: Optional[str], api_key: Optional[str] = None, request_rate: Optional[float] = None,
              ready_timeout: Optional[float] = None, nest_parameters: bool = False, endpoint: Optional[str] = None,
              request_timeout: Optional[float] = None, sweep_timeout: Optional[float] = None) -> "SweepRequest":
        """From a command's options, where what was not given is None."""
        return cls(engine_url, model or None, concurrency, num_prompts, input_len or cls.input_len, output_len or cls.output_len,
                   dataset, api_key or None, cls.request_rate if request_rate is None else request_rate,
                   cls.ready_timeout if ready_timeout is None else ready_timeout, nest_parameters=nest_parameters, endpoint=endpoint,
                   request_timeout=cls.request_timeout if request_timeout is None else request_timeout, sweep_timeout=sweep_timeout)

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
    check_url(f"--engine {req.protocol}:URL", req.url)
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
    check_timeouts(req.request_timeout, req.sweep_timeout)
    return _levels(req.concurrency)


def check_url(what: str, url: str) -> None:
    """A server's URL as given: InputError when it carries what would be printed and written into the report and the
    request never sends (a login, a query string, a fragment), or a control character."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in url):
        raise InputError(f"{what} holds a control character", "give the URL as http://HOST:PORT")
    netloc, _, rest = url.split("://", 1)[1].partition("/") if "://" in url else ("", "", "")
    if "@" in netloc:  # user:key@host would be printed and written to sweep.json
        raise InputError(f"{what} carries a login (user@host): it would be printed and written into the report",
                         "give the URL without it and the key with --api-key (or OPENAI_API_KEY)")
    if "?" in netloc + rest or "#" in netloc + rest:  # ?token=... is never sent (the request paths are envkit's) and would be written
        raise InputError(f"{what} carries a query string or fragment (?...#...): it is not sent, and would be printed and written into the "
                         "report",
                         "give the URL as http://HOST:PORT, and a key with --api-key (or OPENAI_API_KEY)")


def openai_base(url: str, say: Callable[[str], None]) -> str:
    """The server's base URL: the OpenAI SDKs' base_url habit (http://HOST:PORT/v1) taken as the server it names, since
    envkit adds /v1/... itself (newcomer review 3, D17: the doubled /v1 answered 'lists no model')."""
    base = re.sub(r"/v1/?$", "", url)
    if base != url:
        say(f"{url} ends in /v1, which envkit adds to each request itself: sweeping the server at {base}")
    return base


def check_timeouts(request_timeout: float, sweep_timeout: Optional[float]) -> None:
    if not 0 < request_timeout < math.inf:  # NaN too
        raise InputError(f"--request-timeout {request_timeout:g} is not a positive number of seconds",
                         f"write --request-timeout {REQUEST_TIMEOUT_S:g}")
    if sweep_timeout is not None and not 0 < sweep_timeout < math.inf:
        raise InputError(f"--sweep-timeout {sweep_timeout:g} is not a positive number of seconds",
                         "write --sweep-timeout 3600, or leave it out for no limit")


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
    url = req.url if req.protocol == TRITON else openai_base(req.url, reporter.say)
    deadline = None if req.sweep_timeout is None else time.monotonic() + req.sweep_timeout
    ready_timeout = req.ready_timeout if req.sweep_timeout is None else min(req.ready_timeout, req.sweep_timeout)
    if req.protocol == TRITON:
        model = req.model or triton_http.DEFAULT_MODEL
        wait_ready_triton(url, model, ready_timeout, req.api_key, reporter)
        served: list[str] = []
    else:
        served = wait_ready(url, ready_timeout, req.api_key, reporter, model=req.model)
        model = choose_model(req.model, served, url, reporter)
    endpoint = TRITON_ENDPOINT if req.protocol == TRITON else req.openai_endpoint
    levels = sweep(url, model, levels_asked, requests, progress=reporter.requests_done, request_rate=req.request_rate, seed=req.seed,
                   api_key=req.api_key, served=served, protocol=req.protocol, nest=req.nest_parameters, endpoint=endpoint,
                   say=reporter.say, request_timeout=req.request_timeout, deadline=deadline)
    if _passed(deadline):
        reporter.say(f"the sweep's deadline (--sweep-timeout {req.sweep_timeout:g} s) passed: the requests it cut or did not send are "
                     "counted as failed")
    return SweepResult(url, model, req.dataset, None if req.dataset else req.input_len, req.output_len,
                       tuple(LevelResult.from_json(lv) for lv in levels), req.request_rate, endpoint, len(requests), __version__,
                       datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
