"""The serving sweep's chat endpoint (envkit selftest --engine openai:URL --endpoint chat) without a real server: the
request bodies, the parsing of streamed chat chunks, how tokens are counted with and without a usage chunk, the
warm-up's retry without vLLM's extra keys, and the endpoint in the JSON document. Real loopback servers
(tests/servers.py), no mocks; the sweep against a real vLLM server is tests/integration/test_chat_sweep.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.adapters import openai_http as oh
from envkit.adapters.triton_http import WORDS
from envkit.app.reporter import Silent
from envkit.errors import ExternalError, InputError
from envkit.model.results import SweepResult
from schema_check import validate
from servers import EventStream, serve

ROOT = Path(__file__).resolve().parent.parent


def chunk(doc: dict) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def delta(**d) -> bytes:
    return chunk({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}]})


USAGE = chunk({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


# ---------------------------------------------------------------- request bodies

def test_the_chat_body_is_one_user_message_with_vllms_extra_keys():
    """ignore_eos and stream_options, as vLLM's own chat client sends; not min_tokens, which slowed vLLM's steps."""
    doc = json.loads(oh.request_body("chat", "tiny", "hello there", 8))
    assert doc == {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8, "temperature": 0.0,
                   "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    assert oh.extra_keys("chat") == ("ignore_eos", "stream_options") and oh.extra_keys("completions") == oh.EXTRA_KEYS


def test_without_extras_only_the_portable_openai_keys_are_sent():
    for endpoint, prompt_key in (("chat", "messages"), ("completions", "prompt")):
        doc = json.loads(oh.request_body(endpoint, "m", "p", 4, extras=False))
        assert set(doc) == {"model", prompt_key, "max_tokens", "temperature", "stream"}
        assert not set(doc) & set(oh.EXTRA_KEYS)


def test_the_completions_body_is_unchanged():
    doc = json.loads(oh.request_body("completions", "m", [11, 12], 4))
    assert doc == {"model": "m", "prompt": [11, 12], "max_tokens": 4, "min_tokens": 4, "ignore_eos": True, "temperature": 0.0,
                   "stream": True, "stream_options": {"include_usage": True}}


def test_token_ids_become_one_word_each_in_a_chat_message():
    """Random token ids cannot be a chat message: they are sent as the Triton sweep's words, one word per id."""
    text = oh.chat_text([0, 1, len(WORDS) + 2])
    assert text == f"{WORDS[0]} {WORDS[1]} {WORDS[2]}"
    doc = json.loads(oh.request_body("chat", "m", list(range(16)), 4))
    assert len(doc["messages"][0]["content"].split()) == 16
    assert oh.chat_text("as it is") == "as it is"


# ---------------------------------------------------------------- chunks

def test_chat_chunks_count_as_tokens_only_when_their_delta_carries_text():
    assert oh.parse_chunk(delta(role="assistant", content=""), "chat") == oh.Chunk()  # vLLM's first chunk: the role, no token
    assert oh.parse_chunk(delta(role="assistant"), "chat") == oh.Chunk()
    assert oh.parse_chunk(delta(content=" the"), "chat") == oh.Chunk(True, " the")
    assert oh.parse_chunk(delta(content=""), "chat") == oh.Chunk()                    # an empty closing delta
    assert oh.parse_chunk(delta(content=None, reasoning_content="hmm"), "chat") == oh.Chunk(True, "hmm")  # a reasoning model
    assert oh.parse_chunk(delta(reasoning="so"), "chat") == oh.Chunk(True, "so")
    assert oh.parse_chunk(delta(role="assistant", content="")).token                  # completions' rule would count it


def test_usage_done_comments_and_errors():
    assert oh.parse_chunk(USAGE, "chat") == oh.Chunk(completion_tokens=3, prompt_tokens=7)
    assert oh.parse_chunk(b"data: [DONE]\n", "chat").done
    assert oh.parse_chunk(b": ping\n", "chat") == oh.Chunk() and oh.parse_chunk(b"\n", "chat") == oh.Chunk()
    oom = oh.parse_chunk(chunk({"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}), "chat")
    assert oom.error == "CUDA out of memory" and not oom.token
    assert oh.parse_chunk(chunk({"object": "error", "message": "boom"}), "chat").error == "boom"
    both = chunk({"choices": [{"delta": {"content": "x"}}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
    assert oh.parse_chunk(both, "chat") == oh.Chunk(True, "x", 1, 2)
    with pytest.raises(AttributeError):                                                # not an object: the request fails
        oh.parse_chunk(b"data: [1, 2]\n", "chat")


def test_completions_chunks_keep_vllms_rule_any_chunk_with_choices():
    assert oh.parse_chunk(chunk({"choices": [{"text": ""}]})).token
    assert oh.parse_chunk(chunk({"choices": [{"text": "a"}]}), "completions") == oh.Chunk(True, "a")


# ---------------------------------------------------------------- one request against a loopback server

class _Chat(EventStream):
    """vLLM's chat stream: the role chunk at once, three content chunks 50 ms apart, the usage chunk, [DONE] 2 s later."""
    chunks = [(0.0, delta(role="assistant", content=""))] + [(0.05, delta(content=f" w{i}")) for i in range(3)] + [
        (0.0, delta(content="")), (0.0, USAGE), (2.0, b"data: [DONE]\n\n")]
    seen: list = []


def test_a_chat_request_is_timed_from_its_first_content_chunk_to_its_last():
    with serve(_Chat) as srv:
        r = oh.one_request(f"http://127.0.0.1:{srv.server_port}", "m", "a b c", 3, endpoint="chat")
    assert r.ok and r.output_tokens == 3 and r.prompt_tokens == 7        # the usage chunk's counts
    assert r.ttft >= 0.05                                               # not the role chunk, sent at once
    assert r.latency < 1.5 and len(r.itl) == 2                          # the last content chunk, not [DONE]
    method, path, _, body = _Chat.seen[-1]
    assert (method, path) == ("POST", "/v1/chat/completions") and body["messages"] == [{"role": "user", "content": "a b c"}]


class _ChatNoUsage(EventStream):
    """A server that sends no usage chunk (no stream_options, or it ignores it): four content chunks, one empty."""
    chunks = [(0.0, delta(role="assistant"))] + [(0.0, delta(content=t)) for t in ("a", "", "b", "c", "d")] + [(0.0, b"data: [DONE]\n\n")]
    seen: list = []


def test_without_usage_the_chunks_with_content_are_the_tokens_and_the_prompt_its_words():
    with serve(_ChatNoUsage) as srv:
        r = oh.one_request(f"http://127.0.0.1:{srv.server_port}", "m", "five words in this prompt", 4, endpoint="chat", extras=False)
    assert r.ok and r.output_tokens == 4 and r.prompt_tokens == 5 and len(r.itl) == 3
    assert "ignore_eos" not in _ChatNoUsage.seen[-1][3]


class _ChatFailsMidway(EventStream):
    chunks = [(0.0, delta(role="assistant", content="")), (0.0, delta(content="x")),
              (0.0, chunk({"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB", "code": 500}}))]
    seen: list = []


class _RoleOnly(EventStream):
    chunks = [(0.0, delta(role="assistant", content="")), (0.0, b"data: [DONE]\n\n")]
    seen: list = []


def test_an_error_inside_the_stream_or_no_content_is_a_counted_failure():
    with serve(_ChatFailsMidway) as srv:
        r = oh.one_request(f"http://127.0.0.1:{srv.server_port}", "m", "p", 4, endpoint="chat")
    assert not r.ok and r.error.startswith("CUDA out of memory")
    with serve(_RoleOnly) as srv:
        r = oh.one_request(f"http://127.0.0.1:{srv.server_port}", "m", "p", 4, endpoint="chat")
    assert not r.ok and r.error == "no tokens streamed"


# ---------------------------------------------------------------- the sweep

class Said(Silent):
    def __init__(self):
        self.lines = []

    def say(self, message):
        self.lines.append(message)


def _chat_server(**attrs):
    chunks = [(0.0, delta(role="assistant", content=""))] + [(0.0, delta(content=" x"))] * 3 + [(0.0, USAGE), (0.0, b"data: [DONE]\n\n")]
    return type("ChatServer", (EventStream,), {"chunks": chunks, "seen": [], **attrs})


def test_a_chat_sweep_records_its_endpoint_and_sends_words():
    from envkit.app.sweep import SweepRequest, serving_sweep

    handler = _chat_server()
    with serve(handler) as srv:
        result = serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}", concurrency="1,2", num_prompts=3, input_len=6,
                                            output_len=3, endpoint="chat"))
    assert result.ok and result.model == "tiny" and result.endpoint == "chat"
    doc = result.to_json()
    validate(doc, "sweep")
    assert doc["endpoint"] == "chat" and SweepResult.from_json(json.loads(json.dumps(doc))) == result
    posts = [s for s in handler.seen if s[0] == "POST"]
    assert len(posts) == 1 + 2 * 3 and {s[1] for s in posts} == {"/v1/chat/completions"}
    assert all(len(s[3]["messages"][0]["content"].split()) == 6 and set(s[3]["messages"][0]["content"].split()) <= set(WORDS)
               for s in posts)
    assert all(lv.output_throughput > 0 and lv.input_throughput > 0 for lv in result.levels)


def test_a_completions_sweep_records_completions_and_old_documents_stay_valid():
    from envkit.app.sweep import SweepRequest, serving_sweep

    handler = type("Completions", (EventStream,), {"chunks": [(0.0, chunk({"choices": [{"text": "x"}]}))] * 2, "seen": []})
    with serve(handler) as srv:
        result = serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}", concurrency="1", num_prompts=2, input_len=4,
                                            output_len=2))
    assert result.endpoint == "completions" and {s[1] for s in handler.seen if s[0] == "POST"} == {"/v1/completions"}
    old = {k: v for k, v in result.to_json().items() if k != "endpoint"}
    validate(old, "sweep")
    assert SweepResult.from_json(old).endpoint is None and "endpoint" not in SweepResult.from_json(old).to_json()
    for bad in ("responses", 3):
        with pytest.raises(ValueError, match="endpoint is one of"):
            SweepResult.from_json({**old, "endpoint": bad})


def test_a_server_that_refuses_vllms_keys_is_swept_without_them_and_says_so():
    """OpenAI's own API answers 400 "Unrecognized request argument supplied: ignore_eos"; such a server still works."""
    from envkit.app.sweep import SweepRequest, serving_sweep

    class Strict(_chat_server()):
        def failure(self, request):
            unknown = sorted(set(request) & set(oh.EXTRA_KEYS))
            return (400, f'{{"error": {{"message": "Unrecognized request argument supplied: {unknown[0]}"}}}}'.encode()) if unknown else None

    said = Said()
    with serve(Strict) as srv:
        result = serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}", concurrency="2", num_prompts=4, input_len=4,
                                            output_len=3, endpoint="chat"), said)
    assert result.ok and result.levels[0].completed == 4
    posts = [s[3] for s in Strict.seen if s[0] == "POST"]
    assert len(posts) == 2 + 4 and "ignore_eos" in posts[0] and all(not set(p) & set(oh.EXTRA_KEYS) for p in posts[1:])
    assert any("refused the warm-up with vLLM's extra keys" in line and "Unrecognized request argument" in line for line in said.lines)


def test_a_bad_request_for_another_reason_stops_at_the_warm_up_with_the_first_reason():
    from envkit.app.sweep import SweepRequest, serving_sweep

    class TooLong(_chat_server()):
        def failure(self, request):
            return (400, b'{"error": {"message": "This model\'s maximum context length is 512 tokens"}}')

    with serve(TooLong) as srv:
        with pytest.raises(ExternalError) as err:
            serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}", model="tiny", num_prompts=2, endpoint="chat"))
    assert err.value.exit_code == 4 and "warm-up request" in err.value.message and "HTTP 400" in err.value.message
    assert "maximum context length is 512" in err.value.message
    posts = [s[3] for s in TooLong.seen if s[0] == "POST"]
    assert len(posts) == 2 and "ignore_eos" in posts[0] and "ignore_eos" not in posts[1]     # tried once without, then stopped


def test_the_endpoint_is_checked_before_any_network():
    from envkit.app.sweep import SweepRequest, check

    assert check(SweepRequest("openai:http://127.0.0.1:9", endpoint="chat")) == [1, 4, 8, 16]
    with pytest.raises(InputError, match="--endpoint 'responses' is not an OpenAI endpoint"):
        check(SweepRequest("openai:http://127.0.0.1:9", endpoint="responses"))
    with pytest.raises(InputError, match="--endpoint chooses the OpenAI path"):
        check(SweepRequest("triton:http://127.0.0.1:9", endpoint="chat"))


@pytest.mark.parametrize("args, message", [
    (("--engine", "openai:http://127.0.0.1:9", "--endpoint", "responses"), "--endpoint 'responses' is not an OpenAI endpoint"),
    (("--engine", "triton:http://127.0.0.1:9", "--endpoint", "chat"), "--endpoint chooses the OpenAI path"),
    (("--endpoint", "chat"), "--endpoint chooses the serving sweep's OpenAI path"),
])
def test_bad_endpoint_options_are_one_line_and_exit_2(args, message):
    p = subprocess.run([sys.executable, "-m", "envkit", "selftest", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 2
