"""A Triton Inference Server over http.client, through its HTTP generate extension (Triton 23.10 and later,
docs/protocol/extension_generate.md): one streamed POST /v2/models/MODEL/generate_stream request, timed for TTFT and
TPOT, and the GET probes of the readiness wait (/v2/health/ready, /v2, /v2/models/MODEL/ready).

The request is the one TensorRT-LLM's `ensemble` model takes: text_input, max_tokens, bad_words, stop_words and
stream, top-level (each becomes the input tensor of that name), or with `nest` under "parameters" (Triton fills a
missing input from the parameter of that name). The answer is a server-sent event stream, one `data: {json}` per
model response, each carrying the new piece of text in text_output. Its status is the first response's: a later
failure arrives as `data: {"error": "..."}` inside the 200 stream, so every event is checked and such a request is a
failure with the server's words (an out-of-memory one lands in the sweep's out-of-memory counter like the OpenAI
sweep's).

Output tokens: TensorRT-LLM's ensemble streams one token per response, so a request's output tokens are the events
with a non-empty text_output, unless the events say how many tokens they carry: num_output_tokens (Triton's vLLM
backend, per response) or output_ids (a list of token ids), which are then summed instead. Prompt tokens: a
response's num_input_tokens where given; else the prompt's whitespace-separated words (the generate endpoint does not
report them), exact for the random workload, whose prompts are words that are one token each in common tokenizers.

The pure parts (request body, event parsing, prompt text) take and return plain values; tests/test_triton_client.py
tests them without a server. The bounds, the deadline and the redaction of every error text are the OpenAI client's
(adapters/openai_http.py): a count out of range (negative, 2**53 or more) is an error event.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import quote

from envkit.adapters.openai_http import Answer, _headers, _open, _window, failure, get, read_line, redact, request_seconds
from envkit.core.sweep import REQUEST_TIMEOUT_S, RequestResult, count_ok, max_events

__all__ = ["Answer", "Event", "get", "model_path", "one_request", "parse_event", "prompt_text", "request_body"]

BODY_CHARS = 4096  # of an event that is not JSON: kept for the error text (redacted, then cut to 300 characters)
DEFAULT_MODEL = "ensemble"  # TensorRT-LLM's model repository: preprocessing -> tensorrt_llm -> postprocessing

# Words that are one token each (with their leading space) in the GPT-2, Llama and Qwen tokenizers: the random
# workload's token ids become input_len of these, so a prompt of input_len words is about input_len tokens.
WORDS = ("the of and to in is was for on that with as by at from his an were are which this be or has had not but "
         "it they their one all new more two time first can when who been there so we no may would other after what "
         "also some out up into only its most over years year she if made her such where three used").split()


def prompt_text(prompt: Union[str, list[int]]) -> str:
    """The text sent as text_input: a text prompt as it is, token ids (the random workload) as one word each."""
    if isinstance(prompt, str):
        return prompt
    return " ".join(WORDS[i % len(WORDS)] for i in prompt)


def request_body(prompt: Union[str, list[int]], max_tokens: int, nest: bool = False) -> bytes:
    """The generate_stream body in TensorRT-LLM ensemble's tensors; with nest, the knobs under "parameters"."""
    knobs: dict[str, Any] = {"max_tokens": max_tokens, "bad_words": "", "stop_words": "", "stream": True}
    doc: dict[str, Any] = {"text_input": prompt_text(prompt)}
    if nest:
        doc["parameters"] = knobs
    else:
        doc.update(knobs)
    return json.dumps(doc).encode()


def model_path(model: str, what: str) -> str:
    """/v2/models/MODEL/WHAT, the model's name quoted."""
    return f"/v2/models/{quote(model, safe='')}/{what}"


@dataclass(frozen=True)
class Event:
    """One server-sent event of generate_stream: the tokens it carries (None: not counted, a keep-alive or a line
    that is not data), its text, an error message, and the token counts it reports when it does."""
    tokens: Optional[int] = None
    text: str = ""
    error: str = ""
    input_tokens: Optional[int] = None
    broken: bool = False  # the error is the server's stream breaking the protocol, not a message it sent

    @property
    def counted(self) -> bool:
        return self.tokens is not None


def _count(value: Any) -> Optional[int]:
    """An integer count from a JSON scalar or a one-element list (a [1] tensor); None when it is not one. ValueError
    for an integer that no count can be (negative, or 2**53 and more: fuzz report 3, D1)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not count_ok(value):
        raise ValueError(f"the server reported a token count {'below 0' if value < 0 else 'of 2**53 or more'}")
    return value


def _flat_len(value: Any) -> Optional[int]:
    """The number of ids in output_ids, a list (of lists, for beams: the first beam's)."""
    if not isinstance(value, list):
        return None
    while value and isinstance(value[0], list):
        value = value[0]
    return len(value)


def parse_event(line: bytes) -> Event:
    """One line of the stream. `data: {json}` is a response (or an error); anything else (blank lines, comments, other
    fields) is an uncounted Event. A data line that is not a JSON object is an error."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return Event()
    data = line[5:].strip()
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return Event(error=f"the server sent an event that is not JSON: {data[:BODY_CHARS].decode(errors='replace')}", broken=True)
    if not isinstance(doc, dict):
        return Event(error=f"the server sent an event that is not a JSON object: {data[:BODY_CHARS].decode(errors='replace')}", broken=True)
    if "error" in doc:
        return Event(error=str(doc["error"]) or "the server reported an error without a message")
    text = doc.get("text_output", "")
    if isinstance(text, list):  # a [1] STRING tensor written as a list
        text = "".join(str(t) for t in text)
    text = text if isinstance(text, str) else str(text)
    try:
        tokens = _count(doc.get("num_output_tokens"))
        input_tokens = _count(doc.get("num_input_tokens"))
    except ValueError as exc:
        return Event(error=str(exc), broken=True)
    if tokens is None:
        tokens = _flat_len(doc.get("output_ids"))
    if tokens is None:
        tokens = 1 if text else 0
    return Event(tokens=tokens, text=text, input_tokens=input_tokens)


def error_message(status: int, body: bytes) -> str:
    """An HTTP error's one text: the {"error": ...} of its JSON or SSE body, else the body's start (not yet redacted
    nor cut: the caller redacts, then cuts)."""
    text = body.decode(errors="replace").strip()
    for candidate in (text, text[5:].strip() if text.startswith("data:") else ""):
        try:
            doc = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and doc.get("error"):
            return f"HTTP {status}: {doc['error']}"
    return f"HTTP {status}: {text}"


def _read_stream(resp: Any, dog: Any, output_len: int, start: float, res: RequestResult,
                 api_key: Optional[str]) -> tuple[int, Optional[float]]:
    """Read generate_stream's events into `res` (the token events' times, the prompt's tokens, any error); (tokens,
    when the last token event arrived)."""
    last = None
    tokens = events = 0
    limit = max_events(output_len)
    while True:
        line = read_line(resp)
        dog.check()
        if not line:
            break
        ev = parse_event(line)
        if ev.error:
            res.error, res.broken = redact(ev.error, api_key), ev.broken
            break
        if ev.input_tokens is not None:
            res.prompt_tokens = ev.input_tokens
        if not ev.tokens:
            continue
        now = time.perf_counter()
        tokens += ev.tokens
        events += 1
        if events > limit or not count_ok(tokens):
            raise ValueError(f"the server streamed more than {limit} token events or 2**53 tokens for max_tokens {output_len}")
        if last is None:
            res.ttft = now - start
        else:
            res.itl.append(now - last)
        last = now
    return tokens, last


def one_request(url: str, model: str, prompt: Union[str, list[int]], output_len: int, timeout: float = REQUEST_TIMEOUT_S,
                api_key: Optional[str] = None, nest: bool = False, deadline: Optional[float] = None) -> RequestResult:
    """One streamed generate_stream request. TTFT is the first event with tokens, ITL the gaps between such events,
    latency up to the last one (vLLM's definitions); an error event anywhere fails the request. The whole exchange
    takes at most `timeout` seconds, and ends at `deadline` (time.monotonic()) where that comes first."""
    body = request_body(prompt, output_len, nest)
    start = time.perf_counter()
    res = RequestResult(ok=False, prompt_tokens=len(prompt) if isinstance(prompt, list) else len(prompt.split()))
    seconds, by_deadline = request_seconds(timeout, deadline)
    conn = dog = None
    try:
        conn, base, dog = _open(url, seconds)
        conn.request("POST", base + model_path(model, "generate_stream"), body=body,
                     headers=_headers(api_key, **{"Content-Type": "application/json", "Accept": "text/event-stream"}))
        resp = conn.getresponse()
        dog.check()
        if resp.status != 200:
            res.error = redact(error_message(resp.status, _window(resp)), api_key)
            dog.check()
            return res
        tokens, last = _read_stream(resp, dog, output_len, start, res, api_key)
        res.latency = (last - start) if last is not None else time.perf_counter() - start
        res.output_tokens = tokens
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
