"""The serving sweep's arithmetic (vLLM's metric definitions) and its failure handling."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from envkit.serving import RequestResult, _percentile, one_request, summarize
from servers import serve


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
