"""An OpenAI-compatible server over http.client: one streamed /v1/completions or /v1/chat/completions request,
timed for TTFT and TPOT, and the GET probes of the readiness wait (/v1/models, /health). An API key rides in
`Authorization: Bearer` and is cut out of every error text handed back, whatever the server echoes: every text made
from the server's bytes or an exception's words goes through `redact` (model/redact.py's safe_text: the key whole
or in part and any credential cut out, the control characters escaped, then one line, then cut to 300 characters).

Bounds (fuzz report 3): a request, or a GET, has one deadline for the whole exchange (a Watchdog shuts the socket
down when it passes), so neither a server that trickles a byte at a time nor SSE keep-alive comments hold it past
its timeout (`one_request`: --request-timeout, REQUEST_TIMEOUT_S = 300 s by default; and the sweep's deadline where
it comes first). A streamed line is read up to MAX_LINE_BYTES (4 MiB), a body for an error text up to 64 KiB, a
GET's body up to 1 MiB; a longer line, a token count that is no count (negative, 2**53 or more), or more than
max_events(output_len) token events fail the request with the reason. A request that failed because the server
broke the protocol (not a status, a connection refused or reset, or an error the server sent) is marked `broken`.

Both endpoints get the same body but for the prompt: `prompt` (text or token ids) for completions, one user message
for chat (`messages: [{"role": "user", "content": TEXT}]`; token ids become words first, as the Triton sweep's).
The body carries max_tokens, temperature 0 and stream, the portable OpenAI keys, and by default the endpoint's
extra keys too (extra_keys): vLLM's ignore_eos (every request generates exactly max_tokens), and
stream_options.include_usage (the server's own token counts in a last chunk); completions also min_tokens, as it
always had. Chat leaves min_tokens out: it adds nothing to ignore_eos, vLLM's own chat client does not send it, and
on vLLM's CPU engine it made every step 8-12 % slower (docs/benchmarks-serving.md). A server that refuses keys it
does not know is sent extras=False (app/sweep.py decides, at the warm-up).

The stream is read chunk by chunk (`parse_chunk`, pure):
- completions: every chunk with choices is a token event, text or not (vLLM's client's rule).
- chat: a chunk is a token event when choices[0].delta carries text (content, or a reasoning model's
  reasoning_content / reasoning); the role-only first delta and an empty closing delta are not tokens, and time nothing.
TTFT is the first token event, ITL the gaps between them, latency up to the last one. Output tokens are the usage
chunk's completion_tokens when the server sends one, else the token events counted; prompt tokens are the usage's
prompt_tokens, else the token ids sent (completions), the prompt's words (chat) or 0 (completions with text).
An `{"error": ...}` chunk inside a 200 stream fails the request with the server's words.
"""
from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from envkit.core.sweep import MAX_LINE_BYTES, REQUEST_TIMEOUT_S, RequestResult, count_ok, max_events
from envkit.model.redact import safe_text

BODY_WINDOW = 64 << 10  # bytes of an error body read before it is redacted, then cut to ERROR_CHARS characters
ERROR_CHARS = 300


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return conn_cls(parts.hostname or "", parts.port, timeout=timeout), parts.path.rstrip("/")


def _headers(api_key: Optional[str], **more: str) -> dict[str, str]:
    return {**more, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


def redact(text: Union[str, bytes], api_key: Optional[str], limit: Optional[int] = ERROR_CHARS) -> str:
    """A text built from the server's bytes (or an exception's words) made fit to show and write: the API key cut
    out whole or in part, and any credential, then the controls escaped, one line, cut to `limit` characters, in
    that order (model/redact.py's safe_text, the one redaction point)."""
    return safe_text(text, (api_key,), limit)


class Watchdog:
    """A whole exchange's deadline, keep-alives and trickled bytes included: when it passes, the connection's socket
    is shut down, so the read blocked on it returns at once (a socket's own timeout bounds each recv only, and a
    server sending a byte a second resets it forever: fuzz report 3, D2 and D3). `fired` says whether it passed.
    One thread watches every deadline (_WATCHER): arming one costs a heap push, not a thread's start."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn: Optional[http.client.HTTPConnection] = conn
        self.seconds = seconds
        self.at = time.monotonic() + max(0.0, seconds)
        self.fired = False
        self.done = False
        _WATCHER.add(self)

    def fire(self) -> None:
        conn = self.conn
        if self.done or conn is None:
            return
        self.fired = True
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def ended(self, exc: BaseException) -> bool:
        """Whether the deadline ended the exchange: the watchdog fired, or the socket's own timeout (as long, and
        armed later) raised first while the watcher thread waited for the CPU on a loaded machine."""
        return self.fired or (isinstance(exc, (TimeoutError, socket.timeout)) and time.monotonic() >= self.at)

    def check(self) -> None:
        if self.fired:
            raise TimeoutError(f"no complete answer within {self.seconds:g} s")

    def cancel(self) -> None:
        self.done = True
        self.conn = None


class _Watcher:
    """The one thread that fires Watchdogs at their deadlines (started with the first, a daemon)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Watchdog]] = []
        self._order = itertools.count()
        self._thread: Optional[threading.Thread] = None

    def add(self, dog: Watchdog) -> None:
        with self._cond:
            if len(self._heap) >= 4096:  # cancelled ones wait for their time at the top: drop them now and then
                self._heap = [e for e in self._heap if not e[2].done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (dog.at, next(self._order), dog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="envkit-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is dog:  # the earliest now: wake the watcher to wait for it
                self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                left = self._heap[0][0] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)[2].fire()


_WATCHER = _Watcher()


def _open(url: str, seconds: float) -> tuple[http.client.HTTPConnection, str, Watchdog]:
    """A connection to url, connected, with a Watchdog over the `seconds` the whole exchange may take."""
    conn, base = _connection(url, max(seconds, 0.001))
    dog = Watchdog(conn, seconds)
    try:
        conn.connect()
        dog.check()
    except BaseException:
        dog.cancel()
        conn.close()
        raise
    return conn, base, dog


def read_line(resp: http.client.HTTPResponse) -> bytes:
    """One line of a stream, at most MAX_LINE_BYTES (a longer one raises: a server that never ends its line)."""
    line = resp.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"the server sent a line longer than {MAX_LINE_BYTES >> 20} MiB")
    return line


def failure(exc: BaseException, dog: Optional[Watchdog], api_key: Optional[str], cut_at_deadline: bool = False) -> str:
    """An exception's one line: a timeout where the watchdog fired (the socket it shut down raises anything)."""
    if dog is not None and dog.ended(exc):
        return ("cut at the sweep's deadline (--sweep-timeout)" if cut_at_deadline
                else f"timed out: no complete answer within {dog.seconds:g} s (--request-timeout)")
    return redact(f"{type(exc).__name__}: {exc}", api_key)


def _window(resp: http.client.HTTPResponse) -> bytes:
    """At most BODY_WINDOW bytes of a body: what an error text is made from (redacted before it is cut)."""
    return resp.read(BODY_WINDOW)


@dataclass(frozen=True)
class Answer:
    """A GET's outcome: the HTTP status and the JSON body (None when not JSON), or no status and why none came.
    `text` is the start of the body as one safe line (redacted, controls escaped), whatever the status; `error`
    the same with the status, for any status but 200."""
    status: Optional[int]
    doc: Any = None
    error: str = ""
    text: str = ""
    location: str = ""  # a redirect's Location (not followed), safe


def get(url: str, path: str, api_key: Optional[str] = None, timeout: float = 5.0) -> Answer:
    """GET url+path within `timeout` seconds for the whole exchange; a connection failure or a timeout is an Answer
    without status, never an exception. The body is read up to 1 MiB."""
    conn = dog = None
    try:
        conn, base, dog = _open(url, timeout)
        conn.request("GET", base + path, headers=_headers(api_key, Accept="application/json"))
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        dog.check()
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            doc = None
        error = "" if resp.status == 200 else redact(f"HTTP {resp.status}: " + body[:BODY_WINDOW].decode(errors="replace"), api_key)
        return Answer(resp.status, doc, error, redact(body[:BODY_WINDOW], api_key, 160),
                      redact(resp.getheader("Location") or "", api_key, 160))
    except Exception as exc:  # refused, reset, timed out, a bad host name: the server did not answer
        return Answer(None, None, failure(exc, dog, api_key).replace(" (--request-timeout)", ""))
    finally:
        if dog is not None:
            dog.cancel()
        if conn is not None:
            conn.close()


def model_ids(doc: Any) -> list[str]:
    """The model ids of a /v1/models answer ({"data": [{"id": ...}, ...]}), in the server's order."""
    data = doc.get("data") if isinstance(doc, dict) else None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]] if isinstance(data, list) else []


ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}  # --endpoint NAME: the path
EXTRA_KEYS = ("min_tokens", "ignore_eos", "stream_options")  # sent unless extras=False; chat: not min_tokens


def extra_keys(endpoint: str) -> tuple[str, ...]:
    """The keys beyond the portable OpenAI ones that `endpoint`'s requests carry with extras."""
    return EXTRA_KEYS[1:] if endpoint == "chat" else EXTRA_KEYS


def chat_text(prompt: Union[str, list[int]]) -> str:
    """The text of a chat message: a text prompt as it is, token ids (the random workload) as one common word each (the
    Triton sweep's words, one token each in the GPT-2, Llama and Qwen tokenizers)."""
    from envkit.adapters.triton_http import prompt_text  # imports this module: here, not at the top

    return prompt_text(prompt)


def request_body(endpoint: str, model: str, prompt: Union[str, list[int]], output_len: int, extras: bool = True) -> bytes:
    """The streamed request's JSON for `endpoint` (completions or chat); with extras, EXTRA_KEYS too."""
    doc: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        doc["messages"] = [{"role": "user", "content": chat_text(prompt)}]
    else:
        doc["prompt"] = prompt
    doc.update({"max_tokens": output_len, "temperature": 0.0, "stream": True})
    if extras:
        doc.update({k: v for k, v in (("min_tokens", output_len), ("ignore_eos", True), ("stream_options", {"include_usage": True}))
                    if k in extra_keys(endpoint)})
    return json.dumps(doc).encode()


@dataclass(frozen=True)
class Chunk:
    """One line of the event stream: a token event (`token`) with its text, the usage counts it reports, the end of
    the stream ([DONE]), or an error the server sent inside the stream. A line that is not data is Chunk()."""
    token: bool = False
    text: str = ""
    completion_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    done: bool = False
    error: str = ""


def _int(value: Any, name: str) -> Optional[int]:
    """A usage count: None where the server gave none (or a value that is no integer); ValueError for an integer that
    no count can be (negative, or MAX_COUNT and more: fuzz report 3, D1)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not count_ok(value):
        raise ValueError(f"the server reported {name} {'below 0' if value < 0 else 'of 2**53 or more'}: not a token count")
    return value


def _error_text(err: Any) -> str:
    """The message of an OpenAI error object ({"message": ...}) or of a bare string."""
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err) or "the server reported an error without a message"


def parse_chunk(line: bytes, endpoint: str = "completions") -> Chunk:
    """One line of a streamed completion. A JSON value that is not an object raises (AttributeError), and so does a
    token count out of range (ValueError): the request fails with it, as a garbled stream should."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return Chunk()
    data = line[5:].strip()
    if data == b"[DONE]":
        return Chunk(done=True)
    doc = json.loads(data)
    if doc.get("error") or doc.get("object") == "error":  # vLLM: {"error": {...}}; older servers: {"object": "error", ...}
        return Chunk(error=_error_text(doc.get("error") or doc.get("message") or ""))
    usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    completion, prompt = _int(usage.get("completion_tokens"), "completion_tokens"), _int(usage.get("prompt_tokens"), "prompt_tokens")
    choices = doc.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        return Chunk(completion_tokens=completion, prompt_tokens=prompt)
    if endpoint != "chat":
        text = choices[0].get("text")
        return Chunk(True, text if isinstance(text, str) else "", completion, prompt)
    delta = choices[0].get("delta")
    delta = delta if isinstance(delta, dict) else {}
    text = next((t for t in (delta.get(k) for k in ("content", "reasoning_content", "reasoning")) if isinstance(t, str) and t), "")
    return Chunk(bool(text), text, completion, prompt)


def request_seconds(timeout: float, deadline: Optional[float]) -> tuple[float, bool]:
    """The seconds a request may take: its timeout, or less where the sweep's deadline (a time.monotonic() value)
    comes first; and whether the deadline is what bounds it."""
    if deadline is None:
        return timeout, False
    left = deadline - time.monotonic()
    return (left, True) if left < timeout else (timeout, False)


def _read_stream(resp: Any, dog: Any, endpoint: str, output_len: int, start: float, res: RequestResult,
                 api_key: Optional[str]) -> tuple[int, Optional[float]]:
    """Read the server's event stream into `res` (its tokens' times, counts and any error); (token events, when the
    last arrived)."""
    last = None
    tokens = 0
    limit = max_events(output_len)
    while True:
        line = read_line(resp)
        now = time.perf_counter()  # the chunk's arrival, before it is parsed (as vLLM's client times it)
        dog.check()
        if not line:
            break
        chunk = parse_chunk(line, endpoint)
        if chunk.done:
            break
        if chunk.error:
            res.error = redact(chunk.error, api_key)
            break
        if chunk.completion_tokens is not None:
            res.output_tokens = chunk.completion_tokens
        if chunk.prompt_tokens:
            res.prompt_tokens = chunk.prompt_tokens
        if chunk.token:
            tokens += 1
            if tokens > limit:
                raise ValueError(f"the server streamed more than {limit} token events for max_tokens {output_len}")
            res.output_chars += len(chunk.text)
            if last is None:
                res.ttft = now - start
            else:
                res.itl.append(now - last)
            last = now
    return tokens, last


def one_request(url: str, model: str, prompt: Any, output_len: int, timeout: float = REQUEST_TIMEOUT_S, api_key: Optional[str] = None,
                endpoint: str = "completions", extras: bool = True, deadline: Optional[float] = None) -> RequestResult:
    """One streamed request to `endpoint` (completions or chat); prompt is text or a list of token ids. The whole
    exchange, from connecting to the last line, takes at most `timeout` seconds (and ends at `deadline`, a
    time.monotonic() value, where that comes first); keep-alive comments and trickled bytes do not extend it."""
    body = request_body(endpoint, model, prompt, output_len, extras)
    start = time.perf_counter()
    res = RequestResult(ok=False, prompt_tokens=len(prompt) if isinstance(prompt, list)
                        else len(prompt.split()) if endpoint == "chat" else 0)
    seconds, by_deadline = request_seconds(timeout, deadline)
    conn = dog = None
    try:
        conn, base, dog = _open(url, seconds)
        conn.request("POST", base + ENDPOINTS[endpoint], body=body, headers=_headers(api_key, **{"Content-Type": "application/json"}))
        resp = conn.getresponse()
        dog.check()
        if resp.status != 200:
            res.error = redact(f"HTTP {resp.status}: {_window(resp).decode(errors='replace')}", api_key)
            dog.check()
            return res
        tokens, last = _read_stream(resp, dog, endpoint, output_len, start, res, api_key)
        res.latency = (last - start) if last is not None else time.perf_counter() - start  # vLLM: up to the last token
        res.output_tokens = res.output_tokens or tokens
        res.ok = tokens > 0 and not res.error
        if not res.ok and not res.error:
            res.error = "no tokens streamed"
    except Exception as exc:  # whatever the server or the network did, the request is a counted failure
        res.ok = False
        res.broken = dog is not None and (dog.fired or not isinstance(exc, OSError) or isinstance(exc, TimeoutError))
        res.error = failure(exc, dog, api_key, by_deadline)
    finally:
        if dog is not None:
            dog.cancel()
        if conn is not None:
            conn.close()
    return res
