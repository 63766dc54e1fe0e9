"""The Triton serving sweep (envkit selftest --engine triton:URL) against a real Triton Inference Server: tritonserver
2.51.0 (Triton 24.10) from PyPI's nvidia-pytriton 0.7.0 in .triton-venv, installed by ./scripts/start-triton-env.sh
(which ./scripts/test.sh runs), CPU-only, serving tests/fixtures/triton_repo/models/ensemble: a decoupled
python-backend model with TensorRT-LLM ensemble's tensors that streams "tok0 ", "tok1 ", ... with fixed delays.

The timing test holds envkit's own records of each request against the fixture model's fixed delays (a first token
no sooner than its per-character delay, the rest no sooner than their per-token delays): the server cannot answer
faster than it sleeps, so a clock started late or stopped early shows, and no bound depends on this machine's load.
The timed comparison with NVIDIA's tritonclient (a gRPC stream to the same model), round by round, is
tests/fixtures/triton_repo/compare_clients.py; its figures are in docs/triton-sweep.md.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pngread import decode_png
from schema_check import valid_json
from serving_env import running, write_prompts

ROOT = Path(__file__).resolve().parents[2]
TV = ROOT / ".triton-venv"
REPO = ROOT / "tests/fixtures/triton_repo"


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory):
    assert (TV / "bin/tritonserver").exists(), "no Triton environment: run ./scripts/test.sh (it runs ./scripts/start-triton-env.sh)"
    work = tmp_path_factory.mktemp("triton")
    shutil.copytree(REPO / "models", work / "models")  # the python backend writes __pycache__ beside model.py
    prompts = write_prompts(work / "prompts.jsonl")
    http_port, grpc_port = 19000 + os.getpid() % 500, 19500 + os.getpid() % 500
    env = {**os.environ, "PYTHONPATH": str(TV / "stub-site")}  # numpy for the stub's (the host's) Python: model.py reads it
    url = f"http://127.0.0.1:{http_port}"
    with running([str(TV / "bin/tritonserver"), f"--model-repository={work / 'models'}", "--http-address=127.0.0.1",
                  f"--http-port={http_port}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--allow-metrics=false"],
                 work / "server.log", url + "/v2/models/ensemble/ready", "tritonserver", 120, 0.5, env=env):
        yield {"url": url, "grpc": f"127.0.0.1:{grpc_port}", "prompts": prompts, "work": work}


def envkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def model_delay(name: str) -> float:
    """A delay constant of the fixture model (its module imports Triton's stub utilities: read, not imported)."""
    return float(re.search(rf"^{name} = (\S+)", (REPO / "models/ensemble/1/model.py").read_text(), re.M).group(1))


def test_every_requests_times_hold_the_models_own_delays(triton_server):
    from envkit.app.sweep import TRITON, run_level
    from envkit.core.sweep import RequestResult, parse_dataset

    prompts, output_len = 32, 32
    requests = parse_dataset(triton_server["prompts"].read_text(), prompts, output_len)
    kept: list[RequestResult] = []
    level = run_level(triton_server["url"], "ensemble", requests, 4, protocol=TRITON, kept=kept)
    assert (level["completed"], level["failed"]) == (prompts, 0)
    first, token = model_delay("FIRST_S_PER_CHAR"), model_delay("TOKEN_S")
    for (prompt, _), r in zip(requests, kept):
        assert r.ok and r.output_tokens == output_len and len(r.itl) == output_len - 1
        assert r.ttft >= first * len(prompt), f"a first token {r.ttft * 1e3:.2f} ms after sending; the model sleeps {first * len(prompt) * 1e3:.2f} ms"
        assert r.latency - r.ttft >= (output_len - 1) * token and sum(r.itl) == pytest.approx(r.latency - r.ttft)
    assert level["mean_tpot_ms"] >= token * 1e3


def test_the_timed_comparison_with_tritonclient_runs_and_both_count_the_same_tokens(triton_server):
    """compare_clients.py for two rounds: it prints each round; the ratios' size is a measurement, recorded in
    docs/triton-sweep.md, not a test's bound."""
    rounds, prompts = 2, 8
    p = subprocess.run([str(TV / "bin/python"), str(REPO / "compare_clients.py"), triton_server["url"], triton_server["grpc"], "ensemble",
                        str(triton_server["prompts"]), "16", str(prompts), "4", str(rounds)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    print(p.stderr[-800:])
    pairs = json.loads(p.stdout.splitlines()[-1])["rounds"]
    assert len(pairs) == rounds
    for pr in pairs:
        assert pr["envkit"]["completed"] == pr["tritonclient"]["completed"] == prompts
        assert pr["envkit"]["output_tokens"] == pr["tritonclient"]["output_tokens"] == prompts * 16


def test_cli_sweep_writes_json_png_and_junit(triton_server, tmp_path):
    """No --model: TensorRT-LLM's ensemble is the default."""
    p = envkit("selftest", "--engine", f"triton:{triton_server['url']}", "--dataset", str(triton_server["prompts"]),
               "--concurrency", "1,4", "--num-prompts", "16", "--output-len", "16", "--json", "--report", str(tmp_path / "rep"),
               "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 0, p.stderr
    doc = valid_json(p.stdout, "sweep")
    assert doc["model"] == "ensemble" and doc["engine"] == triton_server["url"] and doc["request_rate"] == "inf" and doc["ok"]
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        assert lv["completed"] == 16 and lv["failed"] == 0 and not lv["out_of_memory"]
        assert lv["output_throughput"] > 0 and lv["mean_ttft_ms"] > 0 and lv["mean_tpot_ms"] > 0
        assert lv["input_throughput"] / lv["output_throughput"] == pytest.approx(64 / 16, rel=0.01)  # 64 words in, 16 tokens out
    assert json.loads((tmp_path / "rep" / "sweep.json").read_text()) == doc
    w, h, _ = decode_png((tmp_path / "rep" / "sweep.png").read_bytes())
    assert w == 1120 and h > 400
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()
    assert "triton 2.51.0" in p.stderr                                   # the server's metadata, said before the sweep


def test_the_table_and_the_parameters_form(triton_server):
    p = envkit("selftest", "--engine", f"triton:{triton_server['url']}", "--model", "ensemble", "--triton-parameters",
               "--concurrency", "1,2", "--num-prompts", "4", "--input-len", "32", "--output-len", "8")
    assert p.returncode == 0, p.stderr
    assert f"serving sweep: ensemble at {triton_server['url']} (input 32, output 8 tokens, 4 requests per level)" in " ".join(p.stdout.split())
    rows = [line.split("│") for line in p.stdout.splitlines() if line.startswith("│")]
    assert [(r[1].strip(), r[2].strip(), r[3].strip()) for r in rows] == [("1", "4", "0"), ("2", "4", "0")]


def test_an_out_of_memory_error_inside_the_stream_is_a_failed_request_in_the_oom_row(triton_server, tmp_path):
    """The fixture model answers a prompt with "OOM" in it with two tokens, then {"error": "CUDA out of memory..."}
    inside the 200 stream, as Triton forwards a model's late error."""
    data = tmp_path / "oom.jsonl"
    data.write_text('{"prompt": "a plain prompt"}\n{"prompt": "this one runs OOM"}\n')
    p = envkit("selftest", "--engine", f"triton:{triton_server['url']}", "--dataset", str(data), "--concurrency", "2",
               "--num-prompts", "4", "--output-len", "8", "--json", "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 1, p.stderr
    (lv,) = valid_json(p.stdout, "sweep")["levels"]
    assert (lv["requests"], lv["completed"], lv["failed"], lv["out_of_memory"]) == (4, 2, 2, True)
    assert lv["errors"] == ["CUDA out of memory. Tried to allocate 2.00 GiB"]
    junit = (tmp_path / "j.xml").read_text()
    assert 'failures="1"' in junit and "CUDA out of memory" in junit


def test_a_request_the_model_rejects_is_an_error_row_with_its_reason(triton_server):
    """max_tokens over the model's limit: the warm-up (2 tokens) passes, every request of the level is a HTTP 400."""
    p = envkit("selftest", "--engine", f"triton:{triton_server['url']}", "--concurrency", "1", "--num-prompts", "2",
               "--output-len", "5000")
    assert p.returncode == 1, p.stderr
    table = " ".join(p.stdout.split())
    assert "│ 1 │ 2 │ 2 │" in table
    assert "failed at concurrency 1: HTTP 400: max_tokens 5000 is outside 1..4096" in table


def test_an_unknown_model_is_one_line_and_exit_4(triton_server):
    p = envkit("selftest", "--engine", f"triton:{triton_server['url']}", "--model", "llama", "--ready-timeout", "1")
    assert p.returncode == 4, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith(f"envkit: error: model llama is not ready on the Triton server at {triton_server['url']}")
    assert "unknown model" in line and "Traceback" not in p.stderr
