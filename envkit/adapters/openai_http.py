"""An OpenAI-compatible server over http.client: one streamed /v1/completions or /v1/chat/completions request,
timed for TTFT and TPOT, and the GET probes of the readiness wait (/v1/models, /health). An API key rides in
`Authorization: Bearer` and is cut out of every error text handed back, whatever the server echoes.

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

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from envkit.core.sweep import RequestResult


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return conn_cls(parts.hostname or "", parts.port, timeout=timeout), parts.path.rstrip("/")


def _headers(api_key: Optional[str], **more: str) -> dict[str, str]:
    return {**more, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


def redact(text: str, api_key: Optional[str]) -> str:
    """The text with the API key, wherever it appears, replaced by ***."""
    return text.replace(api_key, "***") if api_key else text


@dataclass(frozen=True)
class Answer:
    """A GET's outcome: the HTTP status and the JSON body (None when not JSON), or no status and why none came."""
    status: Optional[int]
    doc: Any = None
    error: str = ""


def get(url: str, path: str, api_key: Optional[str] = None, timeout: float = 5.0) -> Answer:
    """GET url+path; a connection failure or a timeout is an Answer without status, never an exception."""
    conn = None
    try:
        conn, base = _connection(url, timeout)
        conn.request("GET", base + path, headers=_headers(api_key, Accept="application/json"))
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        return Answer(resp.status, doc, "" if resp.status == 200 else redact(f"HTTP {resp.status}: {body[:200].decode(errors='replace')}",
                                                                                api_key).strip())
    except Exception as exc:  # refused, reset, timed out, a bad host name: the server did not answer
        return Answer(None, None, redact(f"{type(exc).__name__}: {exc}", api_key))
    finally:
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


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _error_text(err: Any) -> str:
    """The message of an OpenAI error object ({"message": ...}) or of a bare string."""
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err) or "the server reported an error without a message"


def parse_chunk(line: bytes, endpoint: str = "completions") -> Chunk:
    """One line of a streamed completion. A JSON value that is not an object raises (AttributeError): the request fails
    with it, as a garbled stream should."""
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
    completion, prompt = _int(usage.get("completion_tokens")), _int(usage.get("prompt_tokens"))
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


def one_request(url: str, model: str, prompt: Any, output_len: int, timeout: float = 600, api_key: Optional[str] = None,
                endpoint: str = "completions", extras: bool = True) -> RequestResult:
    """One streamed request to `endpoint` (completions or chat); prompt is text or a list of token ids."""
    body = request_body(endpoint, model, prompt, output_len, extras)
    start = time.perf_counter()
    res = RequestResult(ok=False, prompt_tokens=len(prompt) if isinstance(prompt, list)
                        else len(prompt.split()) if endpoint == "chat" else 0)
    conn = None
    try:
        conn, base = _connection(url, timeout)
        conn.request("POST", base + ENDPOINTS[endpoint], body=body, headers=_headers(api_key, **{"Content-Type": "application/json"}))
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = redact(f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}", api_key)
            return res
        last = None
        tokens = 0
        while True:
            line = resp.readline()
            now = time.perf_counter()  # the chunk's arrival, before it is parsed (as vLLM's client times it)
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
                res.output_chars += len(chunk.text)
                if last is None:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
        res.latency = (last - start) if last is not None else time.perf_counter() - start  # vLLM: up to the last token
        res.output_tokens = res.output_tokens or tokens
        res.ok = tokens > 0 and not res.error
        if not res.ok and not res.error:
            res.error = "no tokens streamed"
    except Exception as exc:  # whatever the server or the network did, the request is a counted failure
        res.ok = False
        res.error = redact(f"{type(exc).__name__}: {exc}", api_key)
    finally:
        if conn is not None:
            conn.close()
    return res
