"""An OpenAI-compatible server over http.client: one streamed /v1/completions request, timed for TTFT and TPOT,
and the GET probes of the readiness wait (/v1/models, /health). An API key rides in `Authorization: Bearer` and is
cut out of every error text handed back, whatever the server echoes."""
from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any, Optional
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


def one_request(url: str, model: str, prompt: Any, output_len: int, timeout: float = 600, api_key: Optional[str] = None) -> RequestResult:
    """One streamed /v1/completions request; prompt is text or a list of token ids."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": output_len, "min_tokens": output_len, "ignore_eos": True,
                       "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    res = RequestResult(ok=False, prompt_tokens=len(prompt) if isinstance(prompt, list) else 0)
    conn = None
    try:
        conn, base = _connection(url, timeout)
        conn.request("POST", base + "/v1/completions", body=body, headers=_headers(api_key, **{"Content-Type": "application/json"}))
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = redact(f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}", api_key)
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
        res.error = redact(f"{type(exc).__name__}: {exc}", api_key)
    finally:
        if conn is not None:
            conn.close()
    return res
