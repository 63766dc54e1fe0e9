"""The serving sweep's arithmetic (vLLM's metric definitions) and its failure handling."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from envkit.core.sweep import RequestResult, _percentile, summarize
from envkit.adapters.openai_http import one_request
from servers import EventStream, serve


def test_metrics_follow_vllms_definitions():
    rs = [RequestResult(True, 64, 32, ttft=0.100, latency=0.100 + 31 * 0.010, itl=[0.010] * 31),
          RequestResult(True, 64, 32, ttft=0.300, latency=0.300 + 31 * 0.020, itl=[0.020] * 31),
          RequestResult(False, 64, error="HTTP 500: boom")]
    s = summarize(rs, wall=2.0, concurrency=2)
    assert s["completed"] == 2 and s["failed"] == 1 and s["errors"] == ["HTTP 500: boom"]
    assert s["mean_ttft_ms"] == 200.0
    assert s["mean_tpot_ms"] == 15.0            # mean of (latency - ttft) / (output - 1): 10 ms and 20 ms
    assert s["mean_itl_ms"] == 15.0
    assert s["output_throughput"] == 32.0 and s["input_throughput"] == 64.0 and s["request_throughput"] == 1.0


def test_percentile_interpolates_like_numpy():
    assert _percentile([1, 2, 3, 4], 50) == 2.5
    assert round(_percentile(list(range(1, 101)), 99), 2) == 99.01


class _Fails(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b"out of memory")


def test_a_failing_server_is_a_counted_failure_not_a_crash():
    with serve(_Fails) as srv:
        r = one_request(f"http://127.0.0.1:{srv.server_port}", "m", [1, 2, 3], 4)
    assert not r.ok and r.error.startswith("HTTP 500") and "out of memory" in r.error
    r = one_request("http://127.0.0.1:9", "m", [1], 4, timeout=5)
    assert not r.ok and "Error" in r.error


def test_dataset_lines_follow_vllms_custom_format():
    from envkit.core.sweep import parse_dataset

    text = '{"prompt": "hello there"}\n\n{"prompt": "a b c", "output_tokens": 7}\n'
    assert parse_dataset(text, 3, 16) == [("hello there", 16), ("a b c", 7), ("hello there", 16)]
    for bad, why in (('{"prompt": 3}', 'line 1 has no "prompt" string'), ("not json", "line 1 is not JSON"),
                     ('{"prompt": "x", "output_tokens": 0}', "positive integer"), ("", "no prompts")):
        try:
            parse_dataset(bad, 1, 16)
        except ValueError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def test_out_of_memory_is_a_row_flag():
    s = summarize([RequestResult(False, 64, error="HTTP 500: CUDA out of memory. Tried to allocate")], wall=1.0, concurrency=128)
    assert s["completed"] == 0 and s["failed"] == 1 and s["out_of_memory"] is True and s["mean_ttft_ms"] is None


class _Streams(EventStream):
    """Three tokens 50 ms apart, the usage chunk, then a [DONE] 2 s later."""
    chunks = [(0.05, b'data: {"choices": [{"text": "x"}]}\n\n')] * 3 + [
        (0.0, b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n'), (2.0, b"data: [DONE]\n\n")]


def test_ttft_and_latency_stop_at_tokens_as_vllms_client_does():
    with serve(_Streams) as srv:
        r = one_request(f"http://127.0.0.1:{srv.server_port}", "m", "a text prompt", 3)
    assert r.ok and r.output_tokens == 3 and r.prompt_tokens == 5
    assert 0.05 <= r.ttft < r.latency
    assert r.latency < 1.5                     # the last token, not the [DONE] that came 2 s later
    assert len(r.itl) == 2


class _Garbles(EventStream):
    """A 200 whose stream carries a JSON value that is not an object."""
    chunks = [(0.0, b"data: [1, 2]\n\n")]


def test_a_garbled_stream_is_a_counted_failure_not_a_crash():
    with serve(_Garbles) as srv:
        r = one_request(f"http://127.0.0.1:{srv.server_port}", "m", [1, 2], 4)
    assert not r.ok and r.error.startswith("AttributeError")


def test_lambada_verdict_compares_the_first_generated_word():
    from envkit.inimage.selftest import last_word_correct, read_lambada, split_last_word

    assert split_last_word("he sat on the mat ") == ("he sat on the", "mat")
    assert last_word_correct(" mat. And then", "mat") and last_word_correct("mat", "mat")
    assert not last_word_correct(" matter of", "mat") and not last_word_correct(" the mat", "mat") and not last_word_correct("  ", "mat")
    assert read_lambada('{"text": "a b"}\n\n{"text": "c d e"}\n', 1) == ["a b"]
