"""One request to an OpenAI-compatible server (streamed), timed for TTFT and TPOT."""
from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

from envkit.core.sweep import RequestResult


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
        conn = conn_cls(parts.hostname or "", parts.port, timeout=timeout)
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
