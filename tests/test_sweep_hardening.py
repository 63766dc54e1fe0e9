"""The serving-sweep clients against servers that misbehave (fuzz report 3: D1, D2, D3, D4, D5, D17, D18; issue 26:
no secret in any output, no hang past a documented timeout). Each reproducer runs envkit as users do (a process, its
stdout, stderr, files and exit code) against a real loopback server (tests/servers.py's `misbehaving`), and checks:
one error line and the documented exit code; no 6-character window of the API key in stdout, stderr, sweep.json, the
JUnit file or compare --json; no control character in what reaches a terminal; and an end before the deadline plus a
margin (a correctness bound: the start of a Python process and a probe's rounding, not a speed benchmark)."""
from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envkit.adapters import openai_http
from envkit.errors import EXIT_SERVER, ServerError
from envkit.model.redact import FRAGMENT, printable, redact, safe_text
from fuzzing import fuzz_settings
from servers import DONE, TOKEN, EventStream, good_stream, misbehaving, models_then, serve

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
SMALL = ["--num-prompts", "1", "--concurrency", "1", "--input-len", "4", "--output-len", "2", "--ready-timeout", "1",
         "--request-timeout", "2"]
MARGIN = 4.0  # seconds beyond a deadline: a Python process's start (about 0.6 s here), a probe's rounding, a loaded CI host
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Ran:
    def __init__(self, p: subprocess.CompletedProcess, seconds: float) -> None:
        self.code, self.out, self.err, self.seconds = p.returncode, p.stdout, p.stderr, seconds

    @property
    def line(self) -> str:
        lines = [x for x in self.err.splitlines() if x.startswith("envkit: error: ")]
        assert len(lines) == 1, self.err
        return lines[0]


def envkit(*args: str, timeout: float = 60) -> Ran:
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env={"PATH": "/usr/bin:/bin", "COLUMNS": "1000", "DOCKER_HOST": "unix:///nonexistent/envkit.sock"})
    return Ran(p, time.monotonic() - start)


def fragments(text: str, key: str = KEY) -> list[str]:
    """Every FRAGMENT-character window of the key that appears in the text (the property: none)."""
    return [key[i:i + FRAGMENT] for i in range(len(key) - FRAGMENT + 1) if key[i:i + FRAGMENT] in text]


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert not fragments(text), (fragments(text), text[-2000:])
        assert not CONTROL.search(text), repr(CONTROL.search(text).group()) + " in " + repr(text[-2000:])


def sweep(url: str, *more: str, protocol: str = "openai", timeout: float = 60) -> Ran:
    return envkit("selftest", "--engine", f"{protocol}:{url}", *SMALL, *more, timeout=timeout)


# ---------------------------------------------------------------- the redaction point, pure

def test_redaction_comes_before_the_cut_wherever_the_text_is_cut():
    """D4's cause: a text cut to 200 bytes, then redacted, kept the key's first 18 characters. Redacting first, no cut
    of the text leaves a window of the key, whole or not, echoed whole or in part by the server."""
    for echoed in (KEY, KEY[:20], KEY[7:30]):
        body = "p" * 170 + " got Bearer " + echoed + " and more"
        for limit in range(1, len(body) + 5):
            shown = safe_text(body, (KEY,), limit)
            assert not fragments(shown), (limit, shown)
            assert len(shown) <= max(limit, 3)
        for cut in range(len(body)):  # a window of the body read first (the client reads at most 64 KiB)
            assert not fragments(safe_text(body[:cut], (KEY,)))


def test_credentials_envkit_does_not_hold_are_cut_out_too():
    text = ("GET https://ci:hunter2@git.example.com/x.git?private_token=glp-123&ref=main&sig=abc#frag "
            "Authorization: Basic dXNlcjpwYXNz, Bearer eyJhbGciOi.x.y, 'api_key': 'k-42', X-Amz-Signature=deadbeef "
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- ghp_" + "a" * 36 + " hf_" + "b" * 34)
    out = redact(text)
    for secret in ("hunter2", "ci:", "glp-123", "sig=abc", "dXNlcjpwYXNz", "eyJhbGciOi", "k-42", "deadbeef", "MIIEow", "a" * 36, "b" * 34):
        assert secret not in out, (secret, out)
    assert "https://***@git.example.com/x.git?private_token=***&ref=main&sig=***#frag" in out
    assert redact(out) == out and safe_text(safe_text(text)) == safe_text(text)        # idempotent
    assert redact("tokens=12, a token count of 3, the key of the matter") == "tokens=12, a token count of 3, the key of the matter"
    assert redact(f"echo {KEY}", [None, "", KEY]) == "echo ***"
    assert redact(json.dumps({"k": "a/b\"c" + "x" * 10}), ['a/b"c' + "x" * 10]) == '{"k": "***"}'  # the JSON-escaped spelling


def test_printable_escapes_every_control_character_and_keeps_lines():
    assert printable("\x1b]0;owned\x07\x1b[2J boom\x9b\u202e\ud800\r") == "\\x1b]0;owned\\x07\\x1b[2J boom\\x9b\\u202e\\ud800\\x0d"
    assert printable("a\tb\nc") == "a\tb\nc"
    assert safe_text("a\n\x1b[31mb\u2028c") == "a \\x1b[31mb c"


OTHER = st.text(alphabet="pqxyz \n\t\x1b\x07\x9b<>/:=?&_.456789", max_size=60)  # no character of the key's


@fuzz_settings(300)
@given(OTHER, OTHER, st.integers(0, len(KEY)), st.integers(0, len(KEY)), st.integers(1, 400))
def test_no_window_of_the_key_survives_any_text_or_cut(before, after, a, b, limit):
    shown = safe_text(before + KEY[min(a, b):max(a, b)] + after, (KEY,), limit)
    assert not fragments(shown) and not CONTROL.search(shown) and len(shown) <= max(limit, 3)


# ---------------------------------------------------------------- D1: token counts no float can hold

def _bigusage(field: str):
    def post(h, req):
        h.stream_head()
        h.write(TOKEN * 3 + b'data: {"choices": [], "usage": {"%s": 1' % field.encode() + b"0" * 400 + b"}}\n\n" + DONE)
    return models_then(post)


@pytest.mark.parametrize("field", ["completion_tokens", "prompt_tokens"])
def test_d1_a_huge_token_count_fails_the_warm_up_not_envkit(field):
    with misbehaving(_bigusage(field)) as (url, _):
        r = sweep(url)
    assert r.code == EXIT_SERVER and "internal error" not in r.err, r.err
    assert f"reported {field} of 2**53 or more: not a token count" in r.line
    assert_clean(r.out, r.err)


def test_d1_a_huge_count_in_a_level_is_a_counted_failure_and_exit_1(tmp_path):
    def post(h, req):
        if len(h.posts) == 1:  # the warm-up
            return good_stream(h, req)
        _bigusage("completion_tokens")(h, req)

    with misbehaving(models_then(post)) as (url, _):
        r = sweep(url, "--report", str(tmp_path / "rep"), "--num-prompts", "2")
    assert r.code == 1, r.err
    level = json.loads((tmp_path / "rep" / "sweep.json").read_text())["levels"][0]
    assert level["failed"] == 2 and "not a token count" in level["errors"][0]


def test_d1_triton_and_chat_and_compare_too():
    def triton(h, req):
        if req.method == "GET":
            return h.send(200, b'{"name": "triton", "version": "2.41"}' if req.path == "/v2" else b"")
        h.stream_head()
        h.write(b'data: {"text_output": "t", "num_output_tokens": 1' + b"0" * 400 + b"}\n\n")

    with misbehaving(triton) as (url, _):
        r = sweep(url, protocol="triton")
    assert r.code == EXIT_SERVER and "token count of 2**53 or more" in r.line, r.err
    with misbehaving(_bigusage("completion_tokens")) as (url, _):
        chat = sweep(url, "--endpoint", "chat")
        compare = envkit("compare", "--engine", f"a=chat:{url}", "--num-prompts", "1", "--output-len", "2", "--input-len", "4",
                         "--concurrency", "1", "--ready-timeout", "1", "--request-timeout", "2", "--json")
    assert chat.code == EXIT_SERVER and "not a token count" in chat.line, chat.err
    assert compare.code == EXIT_SERVER and "not a token count" in compare.line, compare.err
    doc = json.loads(compare.out)
    assert doc["ok"] is False and doc["error"]["exit_code"] == EXIT_SERVER


# ---------------------------------------------------------------- D2: --ready-timeout bounds the whole wait

def _trickle(h, req):
    h.forever(b"H", 0.3)  # a status line one byte at a time, forever


def _trickled_body(h, req):
    h.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    h.forever(b" ", 0.3)


@pytest.mark.parametrize("answer", [_trickle, _trickled_body], ids=["status-line", "body"])
@pytest.mark.parametrize("how", ["openai", "triton", "compare"])
def test_d2_a_trickling_server_is_given_up_after_the_ready_timeout(answer, how):
    with misbehaving(answer) as (url, _):
        if how == "compare":
            r = envkit("compare", "--engine", f"a=openai:{url}", "--ready-timeout", "1", "--num-prompts", "1", timeout=30)
        else:
            r = sweep(url, protocol=how, timeout=30)
    assert r.code == 4 and "did not answer" in r.line and "within 1 s" in r.line, r.err
    assert r.seconds < 1 + MARGIN, r.seconds
    assert_clean(r.out, r.err)


# ---------------------------------------------------------------- D3: a request's deadline, keep-alives included

def _keepalive(h, req):
    h.stream_head()
    h.forever(b": ping\n", 0.2)


def _silent(h, req):
    while not h.stopping():
        time.sleep(0.1)


def _trickled_tokens(h, req):
    h.stream_head()
    h.forever(TOKEN, 0.3)  # a token every 0.3 s, never [DONE]: a line at a time, each one resetting a socket's timeout


@pytest.mark.parametrize("post", [_keepalive, _silent, _trickled_tokens], ids=["keepalive", "silent", "trickled-tokens"])
def test_d3_a_stalled_warm_up_ends_at_the_request_timeout_with_exit_6(post):
    with misbehaving(models_then(post)) as (url, _):
        r = sweep(url, timeout=30)
    assert r.code == EXIT_SERVER and "timed out: no complete answer within 2 s" in r.line and "--request-timeout" in r.line, r.err
    assert r.seconds < 2 + MARGIN, r.seconds
    assert_clean(r.out, r.err)


@pytest.mark.parametrize("exc", [socket.timeout("timed out"), TimeoutError("timed out")], ids=["socket.timeout", "TimeoutError"])
def test_a_socket_timeout_past_the_deadline_is_the_request_timeout_even_before_the_watchdog_fires(exc):
    """On a loaded machine the socket's own timeout (as long as the deadline) can raise before the watchdog thread
    gets the CPU to fire (a full unit run beside image builds: 'TimeoutError: timed out' instead of the deadline's
    line). Past the deadline it is the deadline; before it, the socket's error as it is."""
    conn = http.client.HTTPConnection("127.0.0.1", 9)
    past, ahead = openai_http.Watchdog(conn, 60.0), openai_http.Watchdog(conn, 60.0)
    past.at = time.monotonic() - 0.001  # its deadline passed; the watcher, which fires it at 60 s, has not run
    try:
        assert not past.fired
        assert openai_http.failure(exc, past, None) == "timed out: no complete answer within 60 s (--request-timeout)"
        assert openai_http.failure(exc, ahead, None) == "TimeoutError: timed out"
        assert openai_http.failure(ConnectionResetError("reset"), past, None) == "ConnectionResetError: reset"
    finally:
        past.cancel()
        ahead.cancel()


def test_d3_stalled_requests_in_a_level_are_counted_failures(tmp_path):
    def post(h, req):
        if len(h.posts) == 1:
            return good_stream(h, req)
        _keepalive(h, req)

    with misbehaving(models_then(post)) as (url, _):
        r = sweep(url, "--num-prompts", "3", "--concurrency", "3", "--junit", str(tmp_path / "j.xml"), timeout=30)
    assert r.code == 1 and r.seconds < 2 + MARGIN, (r.seconds, r.err)
    assert "timed out: no complete answer within 2 s" in r.out and 'failures="1"' in (tmp_path / "j.xml").read_text()


def test_the_sweep_timeout_bounds_the_whole_run():
    def slow(h, req):
        time.sleep(0.4)
        good_stream(h, req)

    with misbehaving(models_then(slow)) as (url, posts):
        r = envkit("selftest", "--engine", f"openai:{url}", "--num-prompts", "30", "--concurrency", "1,2", "--input-len", "4",
                   "--output-len", "2", "--ready-timeout", "1", "--sweep-timeout", "2.5", "--json", timeout=30)
    assert r.code == 1 and r.seconds < 2.5 + MARGIN, (r.seconds, r.err)
    doc = json.loads(r.out)
    assert [lv["requests"] for lv in doc["levels"]] == [30, 30] and doc["levels"][1]["completed"] == 0
    assert any("not sent: the sweep's deadline (--sweep-timeout) had passed" in e for lv in doc["levels"] for e in lv["errors"])
    assert len(posts) < 12 and "deadline (--sweep-timeout 2.5 s) passed" in r.err


@pytest.mark.parametrize("args", [["--request-timeout", "0"], ["--request-timeout", "nan"], ["--request-timeout", "inf"],
                                  ["--sweep-timeout", "0"], ["--sweep-timeout", "-1"], ["--sweep-timeout", "nan"]])
def test_timeouts_that_are_not_seconds_are_bad_input(args):
    r = envkit("selftest", "--engine", "openai:http://127.0.0.1:9", *args)
    assert r.code == 2 and args[0] in r.line, r.err


# ---------------------------------------------------------------- D4: no part of the key in any output

def _echo(h, req):
    body = ("p" * 170 + " got " + req.auth).encode()
    h.send(401, body, "text/plain")


def _echo_after_warm_up(cut: int):
    def post(h, req):
        if len(h.posts) <= 2:  # the warm-up (and compare's second, untimed one)
            return good_stream(h, req)
        if len(h.posts) % 2:
            return h.send(401, ("p" * 170 + " got " + req.auth[:cut]).encode(), "text/plain")
        h.stream_head()
        h.write(b'data: {"error": {"message": "Received API Key = %s"}}\n\n' % req.auth[7:].encode())
    return models_then(post)


def test_d4_a_server_that_echoes_the_key_at_readiness():
    with misbehaving(_echo) as (url, _):
        r = sweep(url, "--api-key", KEY)
    assert r.code == 4 and "refused the request: HTTP 401" in r.line and "got Bearer ***" in r.line, r.err
    assert_clean(r.out, r.err)


@pytest.mark.parametrize("cut", [1000, 25], ids=["whole", "cut-by-the-server"])
def test_d4_no_window_of_the_key_in_stdout_stderr_sweep_json_junit_or_compare_json(tmp_path, cut):
    with misbehaving(_echo_after_warm_up(cut)) as (url, _):
        r = sweep(url, "--api-key", KEY, "--num-prompts", "4", "--concurrency", "2", "--report", str(tmp_path / "rep"),
                  "--junit", str(tmp_path / "j.xml"), "--json")
    assert r.code == 1, r.err
    written = [(tmp_path / "rep" / "sweep.json").read_text(), (tmp_path / "j.xml").read_text()]
    assert_clean(r.out, r.err, *written)
    assert "got Bearer ***" in written[0] and "Received API Key = ***" in written[0]
    with misbehaving(_echo_after_warm_up(cut)) as (url, _):
        c = envkit("compare", "--engine", f"a=openai:{url}", "--api-key", KEY, "--num-prompts", "4", "--output-len", "2",
                   "--input-len", "4", "--concurrency", "1,2", "--ready-timeout", "1", "--request-timeout", "2", "--json")
    assert c.code == 1, c.err
    assert_clean(c.out, c.err)
    assert "got Bearer ***" in c.out


def test_d4_the_url_may_not_carry_a_token():
    for args in (["selftest", "--engine", "openai:http://127.0.0.1:9/?private_token=s3cr3t-t0ken"],
                 ["compare", "--engine", "a=openai:http://127.0.0.1:9?token=s3cr3t-t0ken"]):
        r = envkit(*args)
        assert r.code == 2 and "query string" in r.line and "s3cr3t" not in r.err + r.out, r.err


# ---------------------------------------------------------------- D5: control sequences from a server

ESC = "\u001b]0;owned\u0007\u001b[2J\u001b]52;c;aGk=\u0007\u009b31m"


def test_d5_an_error_event_with_terminal_escapes():
    def post(h, req):
        h.stream_head()
        h.write(b'data: {"error": {"message": "' + json.dumps(ESC)[1:-1].encode() + b' boom"}}\n\n')

    with misbehaving(models_then(post)) as (url, _):
        r = sweep(url)
    assert r.code == 4 and "boom" in r.line and "\\x1b]0;owned\\x07" in r.line, r.err
    assert_clean(r.out, r.err)


def test_d5_model_ids_triton_names_and_readiness_bodies(tmp_path):
    waited = []

    def answer(h, req):
        if req.method == "GET" and req.path == "/v1/models" and not waited:
            waited.append(1)
            return h.send(503, ("loading " + ESC).encode(), "text/plain")
        models_then(good_stream, models=("m" + ESC, "n" + ESC, *[f"x{i}" for i in range(10)]))(h, req)

    with misbehaving(answer) as (url, _):
        r = sweep(url, "--junit", str(tmp_path / "j.xml"), "--ready-timeout", "5")
    assert r.code == 0, r.err
    assert "serves 12 models" in r.err and "and 7 more" in r.err and "loading \\x1b]0;owned" in r.err
    assert_clean(r.out, r.err, (tmp_path / "j.xml").read_text())

    def triton(h, req):
        if req.method == "GET":
            return h.send(200, json.dumps({"name": "triton" + ESC, "version": ESC}).encode() if req.path == "/v2" else b"")
        h.stream_head()
        h.write(b'data: {"text_output": "t"}\n\n' * 3)

    with misbehaving(triton) as (url, _):
        t = sweep(url, protocol="triton")
    assert t.code == 0 and "triton\\x1b]0;owned" in t.err, t.err
    assert_clean(t.out, t.err)


# ---------------------------------------------------------------- D17: server faults are exit 6, with what was seen

def _everywhere(status: int, body: bytes = b"oops", kind: str = "text/plain", extra: str = ""):
    return lambda h, req: h.send(status, body, kind, extra=extra)


@pytest.mark.parametrize("answer,seen", [
    (lambda h, req: h.send(200, b"<!DOCTYPE html><html>hi</html>", "text/html"), "HTTP 200 with an answer that is not JSON: <!DOCTYPE html>"),
    (models_then(good_stream, models=()), "HTTP 200 with an empty model list"),
    (_everywhere(302, extra="Location: http://127.0.0.1:1/login\r\n"), "HTTP 302, a redirect to http://127.0.0.1:1/login (not followed)"),
    (_everywhere(400, b"bad request"), "HTTP 400: bad request"),
    (_everywhere(404, b"not found"), "HTTP 404: not found"),
], ids=["html", "empty-list", "302", "400", "404"])
def test_d17_a_server_that_answers_wrong_is_exit_6_with_the_status_and_check_the_url(answer, seen):
    with misbehaving(answer) as (url, posts):
        r = sweep(url)
    assert r.code == EXIT_SERVER, r.err
    assert seen in r.line and "check the URL" in r.line and "drop a trailing /v1" in r.line, r.line
    assert r.seconds < 1 + MARGIN and not posts
    assert_clean(r.out, r.err)


def test_d17_a_5xx_is_waited_on_then_exit_6():
    with misbehaving(_everywhere(500, b"Internal Server Error")) as (url, _):
        r = sweep(url)
    assert r.code == EXIT_SERVER and "still answered HTTP 500: Internal Server Error after 1 s" in r.line, r.err
    assert r.seconds < 1 + MARGIN


def test_d17_a_trailing_v1_sweeps_the_server_it_names_and_a_health_of_4xx_is_not_ready():
    """A URL ending in /v1 (the OpenAI SDKs' base_url) was exit 6 with 'drop a trailing /v1'; since newcomer review 3's
    D17 it sweeps the server it names and says so. A Triton URL whose health answers 404 is still not ready."""
    with serve(type("Good", (EventStream,), {"chunks": [(0.0, TOKEN)] * 3 + [(0.0, DONE)], "seen": []})) as srv:
        r = sweep(f"http://127.0.0.1:{srv.server_port}/v1")
        t = sweep(f"http://127.0.0.1:{srv.server_port}", protocol="triton")
    assert r.code == 0, r.err
    assert f"http://127.0.0.1:{srv.server_port}/v1 ends in /v1, which envkit adds to each request itself" in r.err
    assert t.code == EXIT_SERVER and "GET /v2/health/ready with HTTP 404" in t.line and "drop a trailing /v2" in t.line, t.err

    from envkit.app.sweep import wait_ready
    with misbehaving(lambda h, req: h.send(404 if req.path == "/v1/models" else 410, b"gone")) as (url, posts):
        with pytest.raises(ServerError) as err:
            wait_ready(url, 1)
    assert "GET /health with HTTP 410: gone" in err.value.message and err.value.exit_code == EXIT_SERVER


def test_d17_compare_says_the_same():
    with misbehaving(lambda h, req: h.send(200, b"<html>", "text/html")) as (url, _):
        r = envkit("compare", "--engine", f"a=openai:{url}", "--ready-timeout", "1", "--json")
    assert r.code == EXIT_SERVER and "lists no model at /v1/models" in r.line and "check the URL" in r.line, r.err
    assert json.loads(r.out)["error"]["exit_code"] == EXIT_SERVER


# ---------------------------------------------------------------- D18: a streamed line is bounded

def _huge_line(h, req):
    h.stream_head()
    h.write(b"data: ")
    chunk = b"a" * (1 << 20)
    for _ in range(400):  # 400 MiB, no newline, or until the client leaves
        if h.stopping():
            return
        h.write(chunk)


PEAK = """import resource, subprocess, sys
p = subprocess.run([sys.executable, "-m", "envkit", *sys.argv[1:]], capture_output=True, text=True)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.stderr.write(p.stderr)
"""


def test_d18_a_400_mb_line_fails_the_request_in_bounded_memory():
    with misbehaving(models_then(_huge_line)) as (url, _):
        start = time.monotonic()
        p = subprocess.run([sys.executable, "-c", PEAK, "selftest", "--engine", f"openai:{url}", *SMALL], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        seconds = time.monotonic() - start
    code, peak_mb = map(int, p.stdout.split())
    assert code == EXIT_SERVER and "a line longer than 4 MiB" in p.stderr, p.stderr
    assert peak_mb < 150, peak_mb            # 1232 MB before; envkit itself is about 60 MB
    assert seconds < 2 + MARGIN
