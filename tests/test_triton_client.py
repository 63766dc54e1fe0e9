"""The Triton client's pure parts (request body, server-sent event parsing, prompt text, error bodies) on plain data,
and one_request against a small event-stream server (tests/servers.py) for what a stream can do: tokens, an error
event after tokens, an error status, a dropped connection. The real server: tests/integration/test_triton_sweep.py."""
from __future__ import annotations

import json

import pytest

from envkit.adapters import triton_http as th
from envkit.app.sweep import SweepRequest, check
from envkit.core.sweep import summarize
from envkit.errors import InputError
from servers import EventStream, serve


def test_request_body_is_the_ensembles_tensors_top_level_or_under_parameters():
    flat = json.loads(th.request_body("hello there", 16))
    assert flat == {"text_input": "hello there", "max_tokens": 16, "bad_words": "", "stop_words": "", "stream": True}
    nested = json.loads(th.request_body("hello there", 16, nest=True))
    assert nested == {"text_input": "hello there", "parameters": {"max_tokens": 16, "bad_words": "", "stop_words": "", "stream": True}}


def test_token_id_prompts_become_one_word_each():
    text = th.prompt_text([0, 1, 2, len(th.WORDS)])
    assert text.split() == [th.WORDS[0], th.WORDS[1], th.WORDS[2], th.WORDS[0]]
    assert th.prompt_text("as it is") == "as it is"
    assert len(set(th.WORDS)) == len(th.WORDS)


def test_a_text_event_counts_one_token_and_an_empty_one_none():
    ev = th.parse_event(b'data: {"model_name":"ensemble","model_version":"1","text_output":"tok0 "}\n')
    assert (ev.tokens, ev.text, ev.error, ev.counted) == (1, "tok0 ", "", True)
    assert th.parse_event(b'data: {"text_output": ""}').tokens == 0
    assert th.parse_event(b'data: {"text_output": ["a", "b"]}').text == "ab"


def test_reported_counts_win_over_counting_events():
    assert th.parse_event(b'data: {"text_output": "two words", "num_output_tokens": 2}').tokens == 2
    assert th.parse_event(b'data: {"text_output": "x", "num_output_tokens": [3]}').tokens == 3
    assert th.parse_event(b'data: {"text_output": "x", "output_ids": [5, 6, 7]}').tokens == 3
    assert th.parse_event(b'data: {"text_output": "x", "output_ids": [[5, 6], [8, 9]]}').tokens == 2   # the first beam
    assert th.parse_event(b'data: {"text_output": "x", "num_input_tokens": 64}').input_tokens == 64
    assert th.parse_event(b'data: {"text_output": "x", "num_output_tokens": true}').tokens == 1      # not a count


def test_error_events_and_lines_that_are_not_data():
    assert th.parse_event(b'data: {"error": "CUDA out of memory"}').error == "CUDA out of memory"
    assert th.parse_event(b'data: {"error": ""}').error
    assert "not JSON" in th.parse_event(b"data: {oops").error
    assert "not a JSON object" in th.parse_event(b"data: [1]").error
    for line in (b"", b"\n", b": keep-alive", b"event: message", b"id: 3"):
        ev = th.parse_event(line)
        assert not ev.counted and not ev.error


def test_error_bodies_json_or_sse():
    assert th.error_message(400, b'{"error": "missing max_tokens"}') == "HTTP 400: missing max_tokens"
    assert th.error_message(400, b'data: {"error":"max_tokens 5000 is outside 1..4096"}\n\n') == \
        "HTTP 400: max_tokens 5000 is outside 1..4096"
    assert th.error_message(502, b"<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"


def test_model_paths_quote_the_name():
    assert th.model_path("ensemble", "generate_stream") == "/v2/models/ensemble/generate_stream"
    assert th.model_path("a/b c", "ready") == "/v2/models/a%2Fb%20c/ready"


def test_the_sweep_takes_triton_urls_and_nesting_only_with_them():
    assert check(SweepRequest("triton:http://127.0.0.1:8000", concurrency="1,2")) == [1, 2]
    assert SweepRequest("triton:http://h:1").protocol == "triton" and SweepRequest("triton:http://h:1").url == "http://h:1"
    for bad in ("triton:", "triton:127.0.0.1:8000", "grpc:http://h:1", "triton:http://user:key@h:1"):
        with pytest.raises(InputError):
            check(SweepRequest(bad))
    with pytest.raises(InputError, match="--triton-parameters"):
        check(SweepRequest("openai:http://h:1", nest_parameters=True))


def _stream(*events: bytes, delay: float = 0.0) -> list:
    return [(delay, b"data: " + e + b"\n\n") for e in events]


def _server(chunks: list, failure=None):
    attrs = {"chunks": chunks, "seen": []}
    if failure:
        attrs["failure"] = lambda self, request: failure
    return type("Triton", (EventStream,), attrs)


def test_one_request_counts_text_events_and_sends_the_ensembles_request():
    handler = _server(_stream(*(json.dumps({"model_name": "ensemble", "text_output": f"tok{i} "}).encode() for i in range(4))))
    with serve(handler) as srv:
        url = f"http://127.0.0.1:{srv.server_port}"
        r = th.one_request(url, "ensemble", [11, 12, 13], 4)
        nested = th.one_request(url, "my model", "hello big world", 4, nest=True)
    assert r.ok and r.output_tokens == 4 and r.prompt_tokens == 3 and len(r.itl) == 3 and r.latency >= r.ttft > 0
    assert nested.ok and nested.prompt_tokens == 3
    (m1, path1, _, body1), (_, path2, _, body2) = handler.seen
    assert (m1, path1) == ("POST", "/v2/models/ensemble/generate_stream") and path2 == "/v2/models/my%20model/generate_stream"
    assert body1["max_tokens"] == 4 and body1["text_input"] == th.prompt_text([11, 12, 13]) and body1["stream"] is True
    assert body2["parameters"]["max_tokens"] == 4 and "max_tokens" not in body2


def test_an_error_event_inside_a_200_stream_fails_the_request_and_counts_as_out_of_memory():
    chunks = _stream(b'{"text_output": "tok0 "}', b'{"text_output": "tok1 "}', b'{"error": "CUDA out of memory. Tried to allocate 2 GiB"}',
                     b'{"text_output": "never read"}')
    with serve(_server(chunks)) as srv:
        r = th.one_request(f"http://127.0.0.1:{srv.server_port}", "ensemble", "p", 8)
    assert not r.ok and r.error == "CUDA out of memory. Tried to allocate 2 GiB" and r.output_tokens == 2
    level = summarize([r], 1.0, 1)
    assert level["failed"] == 1 and level["out_of_memory"] and level["errors"] == [r.error]


def test_an_error_status_and_an_empty_stream_are_failures_with_the_servers_words():
    with serve(_server([], failure=(400, b'{"error":"expected number of inputs between 2 and 5"}'))) as srv:
        r = th.one_request(f"http://127.0.0.1:{srv.server_port}", "ensemble", "p", 8)
    assert not r.ok and r.error == "HTTP 400: expected number of inputs between 2 and 5"
    with serve(_server([])) as srv:
        r = th.one_request(f"http://127.0.0.1:{srv.server_port}", "ensemble", "p", 8)
    assert not r.ok and r.error == "no tokens streamed"
    r = th.one_request("http://127.0.0.1:1", "ensemble", "p", 8, timeout=2)
    assert not r.ok and "ConnectionRefused" in r.error
