"""Fuzzing the serving-sweep clients (issue 26, fuzz report 3): `selftest --engine openai:URL|triton:URL` (completions
or chat) and `compare`, in this process, against a loopback server whose readiness probes and requests misbehave as
Hypothesis draws them: wrong statuses, HTML, empty or escaped model lists, trickled or silent answers, keep-alives
forever, lines of megabytes, runaway streams, impossible token counts, garbage SSE, broken chunked bodies, terminal
escapes, and the API key echoed whole or cut. Every run holds: a documented exit code (0, 1, 2, 4 or 6, never 70),
one error line, --json's `ok` matching the exit code, no 6-character window of the key in stdout, stderr or any file
written, no control character in what reaches a terminal, and an end within the deadlines given plus a margin.

Bounded for CI (60 cases, about 20 s: each deadline is 0.3 s); ENVKIT_FUZZ_SEED and
ENVKIT_FUZZ_EXAMPLES draw a fresh campaign (tests/fuzzing.py)."""
from __future__ import annotations

import itertools
import json
import re
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from envkit.errors import EXIT_SERVER
from envkit.model.redact import FRAGMENT
from fuzzing import fuzz_settings, run
from servers import DONE, TOKEN, misbehaving

KEY = "sk-fuzz-QWERTYUIOPASDFGHJKLZXCVBNM4567"
AREA = "sweep servers"
DEADLINE = 0.3  # --ready-timeout and --request-timeout of every case
MARGIN = 3.0
CODES = {0, 1, 2, 4, EXIT_SERVER}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ESC = "\u001b]0;owned\u0007\u001b[2J\u009b31m"
_dirs = itertools.count()


# ---------------------------------------------------------------- what the server does

def _ok_get(h, req, escaped: bool = False):
    if req.path.endswith("/v1/models"):
        ids = ["m" + ESC, "n"] if escaped else ["m"]
        return h.send(200, json.dumps({"data": [{"id": i} for i in ids]}).encode())
    if req.path == "/v2":
        return h.send(200, json.dumps({"name": "triton" + (ESC if escaped else ""), "version": "2"}).encode())
    h.send(200 if req.path.endswith(("/health", "/ready")) else 404, b"")


def _echo(h, req, cut: int = 1000):
    h.send(401, (ESC + " key: " + req.auth[:cut]).encode(), "text/plain")


GETS = {
    "ok": _ok_get,
    "ok-escaped": lambda h, req: _ok_get(h, req, escaped=True),
    "html": lambda h, req: h.send(200, b"<!DOCTYPE html><title>" + ESC.encode() + b"</title>", "text/html"),
    "empty-list": lambda h, req: h.send(200, b'{"data": []}'),
    "not-an-object": lambda h, req: h.send(200, b"[1, 2]"),
    "deep": lambda h, req: h.send(200, b"[" * 100000 + b"]" * 100000),
    "302": lambda h, req: h.send(302, b"", extra="Location: http://x:1/?token=" + KEY + "\r\n"),
    "400": lambda h, req: h.send(400, b"bad " + ESC.encode()),
    "echo-401": _echo,
    "echo-401-cut": lambda h, req: _echo(h, req, 20),
    "404": lambda h, req: h.send(404, b"not found"),
    "500": lambda h, req: h.send(500, b"boom"),
    "503": lambda h, req: h.send(503, b"loading"),
    "trickle": lambda h, req: h.forever(b"H", 0.1),
    "silent": lambda h, req: h.forever(b"", 0.1),
    "huge-header": lambda h, req: h.write(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n"),
    "garbage-status": lambda h, req: h.write(b"HTTP/1.1 abc\r\n\r\n"),
    "close": lambda h, req: None,
}


def _ok_stream(h, req):
    h.stream_head()
    if "generate_stream" in req.path:
        h.write(b'data: {"text_output": "t"}\n\n' * 3)
    elif "chat" in req.path:
        h.write(b'data: {"choices": [{"delta": {"content": "t"}}]}\n\n' * 3 + DONE)
    else:
        h.write(TOKEN * 3 + DONE)


def _stream(data: bytes):
    def post(h, req):
        h.stream_head()
        h.write(data)
    return post


def _huge(h, req):
    h.stream_head()
    for _ in range(5):  # 5 MiB, no newline
        h.write(b"a" * (1 << 20))


COUNT = b'{"usage": {"completion_tokens": %s, "prompt_tokens": %s}, "num_output_tokens": %s, "choices": [{"text": "t"}]}'
POSTS = {
    "ok": _ok_stream,
    "huge-count": _stream(b"data: " + COUNT % (b"1" + b"0" * 400, b"3", b"1" + b"0" * 30) + b"\n\n" + DONE),
    "negative-count": _stream(b"data: " + COUNT % (b"-5", b"-1", b"-2") + b"\n\n" + DONE),
    "odd-counts": _stream(b"data: " + COUNT % (b"1e308", b"true", b"[1, 2]") + b"\n\n" + DONE),
    "digits": _stream(b'data: {"usage": {"completion_tokens": ' + b"9" * 5000 + b"}}\n\n"),
    "keepalive": lambda h, req: (h.stream_head(), h.forever(b": ping\n", 0.05)),
    "silent": lambda h, req: h.forever(b"", 0.1),
    "trickled-tokens": lambda h, req: (h.stream_head(), h.forever(TOKEN, 0.1)),
    "huge-line": _huge,
    "runaway": _stream(TOKEN * 3000),
    "error-event": lambda h, req: _stream(b'data: {"error": {"message": "' + json.dumps(ESC + " key " + req.auth)[1:-1].encode()
                                          + b'"}}\n\n')(h, req),
    "echo-401": _echo,
    "echo-401-cut": lambda h, req: _echo(h, req, 25),
    "400": lambda h, req: h.send(400, b'{"error": {"message": "Unrecognized request argument"}}'),
    "oom": lambda h, req: h.send(500, b"CUDA out of memory"),
    "not-json": _stream(b"data: {not json " + ESC.encode() + b"\n\n"),
    "not-an-object": _stream(b"data: [1, 2]\n\n"),
    "deep": _stream(b"data: " + b"[" * 100000 + b"]" * 100000 + b"\n\n"),
    "bad-chunked": lambda h, req: h.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + TOKEN),
    "short-chunked": lambda h, req: h.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (len(TOKEN) * 4) + TOKEN),
    "close-after-head": lambda h, req: h.stream_head(),
    "close": lambda h, req: None,
    "done-only": _stream(DONE),
    "many-headers": lambda h, req: h.write(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 150 + b"\r\n" + TOKEN),
}


def server(gets: list[str], loading: int, posts: list[str]):
    seen = {"GET": 0, "POST": 0}

    def answer(h, req):
        n = seen[req.method] = seen.get(req.method, 0) + 1
        if req.method == "GET":
            return (GETS["503"] if n <= loading else GETS[gets[(n - loading - 1) % len(gets)]])(h, req)
        POSTS[posts[(n - 1) % len(posts)]](h, req)
    return answer


# ---------------------------------------------------------------- the property

def fragments(text: str) -> list[str]:
    return [KEY[i:i + FRAGMENT] for i in range(len(KEY) - FRAGMENT + 1) if KEY[i:i + FRAGMENT] in text]


def _in_time(argv: list[str], bound: float):
    """run(argv) in a thread, so that a hang fails the case instead of the suite."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(run(argv, AREA)), daemon=True)
    start = time.monotonic()
    t.start()
    t.join(bound + 30)
    assert box, f"envkit {' '.join(argv)} still running after {bound + 30:.0f} s"
    return box[0], time.monotonic() - start


@fuzz_settings(60)
@given(gets=st.lists(st.sampled_from(sorted(GETS)), min_size=1, max_size=2), loading=st.integers(0, 1),
       posts=st.lists(st.sampled_from(sorted(POSTS)), min_size=1, max_size=3),
       how=st.sampled_from(["openai", "chat", "triton", "compare", "compare-chat"]), model=st.booleans(),
       sweep_timeout=st.sampled_from([None, 1.5]))
def test_the_sweep_holds_against_any_misbehaving_server(gets, loading, posts, how, model, sweep_timeout):
    out = Path(tempfile.mkdtemp(prefix=f"fuzz-sweep-{next(_dirs)}-"))
    with misbehaving(server(gets, loading, posts)) as (url, _):
        common = ["--num-prompts", "2", "--concurrency", "2", "--input-len", "3", "--output-len", "2", "--ready-timeout", str(DEADLINE),
                  "--request-timeout", str(DEADLINE), "--api-key", KEY, "--json"]
        if how.startswith("compare"):
            argv = ["compare", "--engine", f"a={'chat' if how == 'compare-chat' else 'openai'}:{url}", *common,
                    *(["--model-name", "m"] if model else [])]
        else:
            argv = ["selftest", "--engine", f"{'triton' if how == 'triton' else 'openai'}:{url}", *common, "--report", str(out / "rep"),
                    "--junit", str(out / "j.xml"), *(["--endpoint", "chat"] if how == "chat" else []), *(["--model", "m"] if model else []),
                    *(["--sweep-timeout", str(sweep_timeout)] if sweep_timeout else [])]
        # the readiness wait, two warm-ups (one without vLLM's extra keys), compare's untimed one, a level of 2 at once
        bound = DEADLINE * (1 + 2 + 1 + 1) if sweep_timeout is None or how.startswith("compare") else min(sweep_timeout, DEADLINE * 5)
        ran, seconds = _in_time(argv, bound)
    where = f"{argv} against GET {gets} (after {loading} x 503), POST {posts}"
    assert ran.code in CODES, f"{where}: exit {ran.code}\n{ran.err[-2000:]}"   # fuzzing.holds' property, exit 6 included
    assert "Traceback (most recent call last)" not in ran.err, f"{where}: traceback\n{ran.err[-2000:]}"
    if ran.code >= 2:
        assert len([x for x in ran.err.splitlines() if x.startswith("envkit: error: ")]) == 1, f"{where}: not one error line\n{ran.err}"
    assert json.loads(ran.out).get("ok") is (ran.code == 0), f"{where}: --json's ok and exit {ran.code} disagree\n{ran.out[-2000:]}"
    assert seconds < bound + MARGIN, f"{where}: {seconds:.1f} s"
    written = "".join(f.read_text(errors="replace") for f in out.rglob("*") if f.is_file() and f.suffix != ".png")
    for name, text in (("stdout", ran.out), ("stderr", ran.err), ("files", written)):
        assert not fragments(text), f"{where}: {name} holds {fragments(text)} of the key:\n{text[-2000:]}"
    for name, text in (("stdout", ran.out), ("stderr", ran.err)):
        assert not CONTROL.search(text), f"{where}: {name} holds a control character:\n{text[-2000:]!r}"
