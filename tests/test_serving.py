"""The serving sweep's arithmetic (vLLM's metric definitions), its failure handling, and what it does before the
first level as `vllm bench serve` does: the readiness wait, the model from /v1/models, the API key, the request
rate (newcomer review D3). Real servers on 127.0.0.1 (tests/servers.py), no mocks."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from envkit.adapters.openai_http import one_request
from envkit.app.reporter import Silent
from envkit.core.sweep import RequestResult, arrival_offsets, percentile, summarize
from envkit.errors import ExternalError, InputError
from servers import EventStream, serve

ROOT = Path(__file__).resolve().parent.parent


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


def _closest_ranks(xs, q):
    """numpy's default percentile (linear between the closest ranks): what the hand-written one computed."""
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def test_percentile_is_statistics_quantiles_and_interpolates_like_numpy():
    """Newcomer review, audit: the hand-written _percentile became statistics.quantiles(method="inclusive"); same values."""
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert round(percentile(list(range(1, 101)), 99), 2) == 99.01
    assert percentile([], 99) == 0.0 and percentile([7.5], 99) == 7.5
    rng = random.Random(14)
    for n in (2, 3, 5, 17, 64, 1000):
        xs = [rng.lognormvariate(3, 1) for _ in range(n)]
        for q in (1, 50, 90, 99):
            assert math.isclose(percentile(xs, q), _closest_ranks(xs, q), rel_tol=1e-12), (n, q)


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


# ---------------------------------------------------------------- before the first level (newcomer review D3)

class Said(Silent):
    """A Reporter that keeps what it was told."""

    def __init__(self):
        self.lines = []

    def say(self, message):
        self.lines.append(message)


def _handler(name="Server", **attrs):
    """A fresh EventStream subclass (its own `seen` list) streaming three tokens, with these attributes."""
    chunks = [(0.0, b'data: {"choices": [{"text": "x"}]}\n\n')] * 3 + [
        (0.0, b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}\n\n'), (0.0, b"data: [DONE]\n\n")]
    return type(name, (EventStream,), {"chunks": chunks, "seen": [], **attrs})


def test_a_dead_server_fails_early_with_one_line_and_exit_4():
    """D3: no table of failed levels; the readiness wait gives up after --ready-timeout with the reason, and says it waits."""
    from envkit.app.sweep import SweepRequest, serving_sweep

    said = Said()
    with pytest.raises(ExternalError) as err:
        serving_sweep(SweepRequest("openai:http://127.0.0.1:9", num_prompts=4, concurrency="1,2", ready_timeout=1), said)
    e = err.value
    assert e.exit_code == 4 and "\n" not in e.one_line()
    assert e.message.startswith("server at http://127.0.0.1:9 did not answer within 1 s: ConnectionRefusedError")
    assert e.fix == "start it / check the URL"
    assert said.lines and "waiting up to 1 s for the server at http://127.0.0.1:9" in said.lines[0]


def test_the_wait_ends_when_a_loading_server_answers():
    """503 while the server loads (vLLM behind a proxy, or loading its weights): the wait goes on, then the models come."""
    from envkit.app.sweep import wait_ready

    class Loading(_handler()):
        def do_GET(self):
            if len([s for s in type(self).seen if s[0] == "GET"]) < 2:
                type(self).seen.append(("GET", self.path, None, None))
                self._send(503, b"loading the weights")
                return
            super().do_GET()

    said = Said()
    with serve(Loading) as srv:
        assert wait_ready(f"http://127.0.0.1:{srv.server_port}", 30, reporter=said) == ["tiny"]
    assert "HTTP 503: loading the weights" in said.lines[0]


def test_a_server_without_a_model_list_is_ready_when_its_health_answers():
    from envkit.app.sweep import choose_model, wait_ready

    class NoList(_handler()):
        def do_GET(self):
            if self.path == "/v1/models":
                type(self).seen.append(("GET", self.path, None, None))
                self._send(404, b"no such route")
                return
            super().do_GET()

    with serve(NoList) as srv:
        url = f"http://127.0.0.1:{srv.server_port}"
        assert wait_ready(url, 5) == []
    assert [s[1] for s in NoList.seen] == ["/v1/models", "/health"]
    assert choose_model("mine", [], url) == "mine"
    with pytest.raises(InputError, match="lists no model at /v1/models") as err:
        choose_model(None, [], url)
    assert "--model" in err.value.fix


def test_the_model_comes_from_v1_models_unless_given():
    """D3: not the literal "default": the server's first model, saying which when it serves several; --model wins."""
    from envkit.app.sweep import SweepRequest, serving_sweep

    handler = _handler(models=["llama-3-8b", "llama-3-8b-lora"])
    said = Said()
    with serve(handler) as srv:
        url = f"openai:http://127.0.0.1:{srv.server_port}"
        result = serving_sweep(SweepRequest(url, concurrency="1", num_prompts=2, input_len=4, output_len=3), said)
        assert result.model == "llama-3-8b" and result.ok
        assert any("serves 2 models" in line and "the first, llama-3-8b" in line for line in said.lines)
        assert {s[3]["model"] for s in handler.seen if s[0] == "POST"} == {"llama-3-8b"}
        given = serving_sweep(SweepRequest(url, model="llama-3-8b-lora", concurrency="1", num_prompts=2, input_len=4, output_len=3))
        assert given.model == "llama-3-8b-lora"


def test_a_failed_warm_up_stops_the_sweep_with_its_reason():
    """D3: the warm-up's failure was thrown away and every level failed alike; now it is the one line, with the fix."""
    from envkit.app.sweep import SweepRequest, serving_sweep

    class Unknown(_handler(models=["served"])):
        def failure(self, request):
            return (404, b'{"message": "The model `typo` does not exist."}') if request["model"] != "served" else None

    with serve(Unknown) as srv:
        with pytest.raises(ExternalError) as err:
            serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}", model="typo", num_prompts=3))
    assert "warm-up request" in err.value.message and "does not exist" in err.value.message
    assert err.value.fix == "the server serves served: give one of them with --model"
    assert len([s for s in Unknown.seen if s[0] == "POST"]) == 1          # no level was run


def test_the_api_key_is_sent_as_bearer_and_never_written(tmp_path):
    """--api-key (or OPENAI_API_KEY) rides in Authorization on every request, and in no output: not the JSON, the
    JUnit file, the report, the table, nor an error that echoes it."""
    key = "sk-envkit-test-0123456789"
    handler = _handler(api_key=key)
    with serve(handler) as srv:
        url = f"openai:http://127.0.0.1:{srv.server_port}"
        env = {**os.environ, "OPENAI_API_KEY": key}
        p = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--engine", url, "--concurrency", "1,2", "--num-prompts", "3",
                            "--input-len", "4", "--output-len", "3", "--report", str(tmp_path / "rep"), "--junit", str(tmp_path / "j.xml")],
                           capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        assert {s[2] for s in handler.seen} == {f"Bearer {key}"} and len(handler.seen) == 1 + 1 + 2 * 3   # models, warm-up, levels
        written = p.stdout + p.stderr + "".join(f.read_bytes().decode(errors="replace") for f in tmp_path.rglob("*") if f.is_file())
        assert key not in written and "serving sweep: tiny" in p.stdout
        helped = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--help"], capture_output=True, text=True, env=env, cwd=ROOT)
        assert "--api-key" in helped.stdout and key not in helped.stdout
        wrong = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--engine", url, "--api-key", "sk-wrong-key-42"],
                               capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert wrong.returncode == 4 and "refused the request: HTTP 401" in wrong.stderr
        assert "sk-wrong-key-42" not in wrong.stderr and "Bearer ***" in wrong.stderr     # the server echoed it: cut out
        missing = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--engine", url], capture_output=True, text=True, timeout=300,
                                 cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"})
        assert missing.returncode == 4 and "give the server's key with --api-key or OPENAI_API_KEY" in missing.stderr


def test_poisson_arrivals_are_seeded_and_average_the_rate():
    assert arrival_offsets(4, math.inf) == [0.0] * 4
    offsets = arrival_offsets(20000, 4.0, seed=0)
    assert offsets == arrival_offsets(20000, 4.0, seed=0) and offsets != arrival_offsets(20000, 4.0, seed=1)
    assert offsets[0] == 0.0 and all(b >= a for a, b in zip(offsets, offsets[1:]))
    assert abs(offsets[-1] / (len(offsets) - 1) - 0.25) < 0.01            # exponential gaps of mean 1/rate


def test_the_request_rate_is_used_and_recorded():
    from envkit.app.sweep import SweepRequest, serving_sweep
    from envkit.model.results import SweepResult

    with serve(_handler()) as srv:
        url = f"openai:http://127.0.0.1:{srv.server_port}"
        paced = serving_sweep(SweepRequest(url, concurrency="2", num_prompts=4, input_len=4, output_len=3, request_rate=50.0))
        at_once = serving_sweep(SweepRequest(url, concurrency="2", num_prompts=4, input_len=4, output_len=3))
    assert paced.ok and paced.to_json()["request_rate"] == 50.0 and at_once.to_json()["request_rate"] == "inf"
    assert SweepResult.from_json(json.loads(json.dumps(at_once.to_json()))).request_rate == math.inf
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(InputError, match="--request-rate"):
            serving_sweep(SweepRequest("openai:http://127.0.0.1:9", request_rate=bad))


def test_long_errors_are_listed_whole_under_the_table_not_split_five_characters_a_line():
    """D3: at 80 columns the note column was 5 wide and spelled the error vertically."""
    from rich.console import Console

    from envkit.ui.report import print_sweep

    error = "ConnectionRefusedError: [Errno 111] Connection refused while sending a request to http://127.0.0.1:9/v1/completions"
    level = {"concurrency": 1, "requests": 4, "completed": 0, "failed": 4, "errors": [error], "out_of_memory": False, "duration_s": 0.01,
             "request_throughput": 0.0, "input_throughput": 0.0, "output_throughput": 0.0, "mean_ttft_ms": None, "p99_ttft_ms": None,
             "mean_tpot_ms": None, "p99_tpot_ms": None, "mean_itl_ms": None, "mean_latency_ms": None}
    doc = {"model": "tiny", "engine": "http://127.0.0.1:9", "dataset": None, "input_len": 128, "output_len": 128,
           "levels": [level, {**level, "concurrency": 2}]}
    console = Console(record=True, width=80)
    print_sweep(doc, console)
    text = console.export_text()
    lines = text.splitlines()
    assert len(lines) <= 12, text
    assert all(len(line.rstrip()) <= 80 for line in lines), text
    assert f"failed at concurrency 1, 2: {error}" in " ".join(text.split())  # the whole text, once, for both levels
    assert set(error.split()) <= set(text.split())                          # wrapped between words, never inside one


# ---------------------------------------------------------------- the self-test's two speeds (newcomer review D4)

VPY = ROOT / ".vllm-venv" / "bin" / "python"   # torch and transformers (./scripts/start-vllm-env.sh)


def test_one_selftest_labels_its_two_decoders_and_measures_both_as_1_over_tpot(tmp_path):
    """D4: "tiny" had 93.78 tokens/s (a hand-built decoder, new tokens / total) and 767.5 (the tiny shape, 1/TPOT) in one
    run. Now the built-in decoder is named as what it is, both figures are 1/TPOT, and stderr has no raw JSON line."""
    from schema_check import valid_json

    assert VPY.exists(), "no torch environment: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
    p = subprocess.run([str(VPY), str(ROOT / "envkit/inimage/selftest.py"), "--quick", "--shape", "tiny", "--input-len", "24", "--json"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    doc = valid_json(p.stdout, "selftest")
    builtin, (tiny,) = doc["decode"], doc["models"]
    assert tiny["shape"] == "tiny" and "tiny" not in builtin["model"] and "no KV cache" in builtin["model"]
    assert builtin["metric"] == tiny["metric"] == "1/TPOT"
    assert math.isclose(builtin["tokens_per_s"], 1000 / builtin["tpot_ms"], rel_tol=0.02)
    assert builtin["prompt_len"] == 24                                      # --input-len, no longer a fixed 16
    check = next(c for c in doc["checks"] if c["name"] == "decode (built-in decoder)")
    assert "1/TPOT" in check["detail"] and "--shape models against their roofline" in check["detail"]
    assert builtin["runs"] == 3 and builtin["tokens_per_s_min"] <= builtin["tokens_per_s"] <= builtin["tokens_per_s_max"]
    assert builtin["threads"] >= 1 and f"median of 3: {builtin['tokens_per_s_min']}-{builtin['tokens_per_s_max']}" in check["detail"]
    assert "a smoke figure" in check["detail"] and "TPOT can exceed TTFT" in check["detail"]  # newcomer review 3, D16
    assert all(c["seconds"] >= 0 for c in doc["checks"])                    # JUnit's time (newcomer review D9)
    assert "selftest: {" not in p.stderr and "selftest: tiny hf:" in p.stderr


def test_the_checks_table_names_the_built_in_decoder_and_the_definition():
    from rich.console import Console

    from envkit.ui.report import print_selftest

    doc = {"checks": [], "device": "cpu", "models": [], "lambada": [],
           "decode": {"model": "built-in torch decoder, no KV cache (4 layers, hidden 256, vocab 1024)", "prompt_len": 128,
                      "new_tokens": 32, "metric": "1/TPOT", "tokens_per_s": 90.0, "ttft_ms": 20.0, "tpot_ms": 11.1}}
    console = Console(record=True, width=200)
    print_selftest(doc, None, console)
    text = console.export_text()
    assert "built-in decoder tokens/s" in text and "1/TPOT; built-in torch decoder, no KV cache" in text


def test_engine_vllm_without_vllm_is_a_failed_check_before_any_model_is_built(tmp_path):
    """Newcomer review: --engine vllm without vLLM built the model first, then printed ModuleNotFoundError."""
    assert VPY.exists(), "no torch environment: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
    code = ("import runpy, sys; sys.modules['vllm'] = None; "
            f"sys.argv = ['selftest.py', '--quick', '--shape', 'tiny', '--engine', 'vllm', '--json']; "
            f"runpy.run_path({str(ROOT / 'envkit/inimage/selftest.py')!r}, run_name='__main__')")
    p = subprocess.run([str(VPY), "-c", code], capture_output=True, text=True, timeout=900, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    doc = json.loads(p.stdout)
    check = next(c for c in doc["checks"] if c["name"] == "decode tiny vllm")
    assert check["ok"] is False and "vllm is not installed" in check["detail"] and "drop --engine vllm" in check["detail"]
    assert doc["models"] == [] and "building the tiny shape" not in p.stderr
    assert p.returncode == 1


def test_a_sweep_url_with_a_login_is_refused_without_showing_it():
    """The independent review: openai:http://u:KEY@host was printed and written into sweep.json as the engine."""
    p = subprocess.run([sys.executable, "-m", "envkit", "selftest", "--engine", "openai:http://u:S3CRET@127.0.0.1:9"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "carries a login" in p.stderr and "--api-key" in p.stderr
    assert "S3CRET" not in p.stderr + p.stdout


def test_the_sweep_reports_what_vllm_bench_serve_users_expect():
    """Newcomer review 3, D17: the first column is the concurrency; medians beside means and P99s; the document says which
    envkit ran it, when, how many requests per level and what each figure means; the OpenAI SDKs' base_url habit
    (…/v1) sweeps the server it names instead of failing on a doubled /v1; P99 of few requests is said to be near the max."""
    from rich.console import Console

    from envkit.app.sweep import SweepRequest, serving_sweep
    from envkit.ui.plot import sweep_title
    from envkit.ui.report import print_sweep
    from schema_check import valid_json

    rs = [RequestResult(True, 8, 3, ttft=t, latency=t + 0.02, itl=[0.01, 0.01]) for t in (0.01, 0.02, 0.03, 0.09)]
    s = summarize(rs, wall=1.0, concurrency=4)
    assert (s["median_ttft_ms"], s["p99_ttft_ms"], s["median_tpot_ms"], s["median_latency_ms"]) == (25.0, 88.2, 10.0, 45.0)
    assert s["median_itl_ms"] == s["p99_itl_ms"] == 10.0
    said = Said()
    with serve(_handler()) as srv:
        result = serving_sweep(SweepRequest(f"openai:http://127.0.0.1:{srv.server_port}/v1", concurrency="1,2", num_prompts=3,
                                            input_len=4, output_len=3), said)
    assert result.ok and result.engine == f"http://127.0.0.1:{srv.server_port}"
    assert any("ends in /v1, which envkit adds to each request itself" in line for line in said.lines)
    doc = valid_json(json.dumps(result.to_json()), "sweep")
    assert doc["num_prompts"] == 3 and doc["envkit_version"] and doc["created"].endswith("Z")
    assert {"ttft_ms", "tpot_ms", "itl_ms", "mean / median / p99"} <= set(doc["definitions"])
    assert all(lv["median_ttft_ms"] is not None and lv["p99_latency_ms"] is not None for lv in doc["levels"])
    assert "3 requests per level" in sweep_title(doc) and "input 4, output 3 tokens" in sweep_title(doc)
    console = Console(record=True, width=160)
    print_sweep(doc, console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "reqs" in line)
    assert header.replace("┃", " ").split()[0] == "concurrency" and "median TTFT" in header
    assert "P99 of 3 completed requests lies between the two slowest" in " ".join(text.split())
