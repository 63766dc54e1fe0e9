"""The serving sweep's chat endpoint (envkit selftest --engine openai:URL --endpoint chat) against a real fastllm server
on the CPU: ftllm 1.9.0 in .fastllm-venv, installed by ./scripts/start-fastllm-env.sh, serving the trained tiny Llama of
tests/vllm/make_tiny_model.py (made with .vllm-venv's Python) on 127.0.0.1 with its CPU library. fastllm has no
/v1/completions: chat only. docs/fastllm-cpu.md has the figures and the traps.

The comparison test runs envkit's sweep and an independent client, the `openai` package (tests/fastllm/openai_client.py,
in .fastllm-venv), on the same server and prompts, alternating round by round, and asserts that both count the same
completed requests and the same tokens. It prints each metric's median of the per-round ratios: their size is a
measurement on this noisy machine (docs/fastllm-cpu.md), not a test's bound; envkit's clock is held to the server's
own in tests/integration/test_vllm_serving.py. The server is pinned to core 0 with one thread and the clients to core 1
where there are two.
"""
from __future__ import annotations

import http.client
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from schema_check import valid_json

from serving_env import FV, ROOT, WORDS, envkit, pinned  # noqa: F401  (the servers: conftest.py)


def test_the_server_streams_a_chat_completion_and_lists_the_model(fastllm_server):
    print(f"\nftllm server ready in {fastllm_server['start_s']:.1f} s")
    conn = http.client.HTTPConnection("127.0.0.1", fastllm_server["port"], timeout=60)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    assert resp.status == 200
    assert [m["id"] for m in json.loads(resp.read())["data"]] == ["tiny"]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "the of and to in"}], "max_tokens": 8, "min_tokens": 8,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
    events = [line[5:].strip() for line in resp.read().decode().splitlines() if line.startswith("data:")]
    conn.close()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}                # sent before the prompt is processed
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 8                              # min_tokens honoured
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert text.split() and all(w in WORDS for w in text.split()), text                # the trained model speaks its words
    conn = http.client.HTTPConnection("127.0.0.1", fastllm_server["port"], timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "the", "max_tokens": 2}),
                 headers={"Content-Type": "application/json"})
    assert conn.getresponse().status == 404                                           # chat only: why --endpoint chat
    conn.close()


def test_the_chat_sweep_against_fastllm(fastllm_server):
    """No --model, no --dataset: the model from /v1/models, the random workload's token ids sent as words."""
    p = envkit("selftest", "--engine", f"openai:{fastllm_server['url']}", "--endpoint", "chat", "--concurrency", "1,2",
               "--num-prompts", "8", "--output-len", "16", "--json")
    assert p.returncode == 0, p.stderr
    doc = valid_json(p.stdout, "sweep")
    assert doc["model"] == "tiny" and doc["endpoint"] == "chat" and doc["ok"]
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    for lv in doc["levels"]:
        assert lv["completed"] == 8 and lv["failed"] == 0
        assert lv["mean_ttft_ms"] > 0 and lv["mean_tpot_ms"] > 0 and lv["mean_latency_ms"] > lv["mean_ttft_ms"]
        assert lv["output_throughput"] * lv["duration_s"] == pytest.approx(8 * 16, rel=0.01)  # the usage's 16 tokens each
        assert lv["input_throughput"] > 4 * lv["output_throughput"]                          # 128-word prompts


def client_round(url: str, prompts: Path, output_len: int, num_prompts: int, concurrency: int) -> dict:
    p = subprocess.run(pinned(1) + [str(FV / "bin/python"), str(ROOT / "tests/fastllm/openai_client.py"), url, "tiny", str(prompts),
                                    str(output_len), str(num_prompts), str(concurrency)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def envkit_round(url: str, prompts: Path, output_len: int, num_prompts: int, concurrency: int) -> dict:
    p = subprocess.run(pinned(1) + [sys.executable, "-m", "envkit", "selftest", "--engine", f"openai:{url}", "--endpoint", "chat",
                                    "--model", "tiny", "--dataset", str(prompts), "--concurrency", str(concurrency),
                                    "--num-prompts", str(num_prompts), "--output-len", str(output_len), "--json"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)["levels"][0]


KEYS = ("mean_ttft_ms", "mean_latency_ms", "output_throughput")


def test_the_chat_sweep_and_the_openai_client_count_the_same_requests_and_tokens(fastllm_server):
    # concurrency 1: a one-thread CPU server interleaves concurrent requests slowly (TPOT 10x at 2), which made this test
    # last half an hour; single batch is also the seed's own fastllm measurement
    rounds, prompts, output_len, concurrency = 2, 8, 16, 1
    args = (fastllm_server["url"], fastllm_server["prompts"], output_len, prompts, concurrency)
    pairs = []
    for r in range(rounds):
        order = (("envkit", envkit_round), ("openai", client_round))
        pairs.append(dict((name, fn(*args)) for name, fn in (order if r % 2 == 0 else order[::-1])))
    assert all(pr["envkit"]["completed"] == prompts and pr["openai"]["completed"] == prompts for pr in pairs)
    assert all(pr["openai"]["output_tokens"] == prompts * output_len for pr in pairs)
    assert all(round(pr["envkit"]["output_throughput"] * pr["envkit"]["duration_s"]) == prompts * output_len for pr in pairs)
    report = []
    for key in KEYS:
        ratios = [pr["envkit"][key] / pr["openai"][key] for pr in pairs]
        report.append((key, statistics.median(pr["envkit"][key] for pr in pairs), statistics.median(pr["openai"][key] for pr in pairs),
                       statistics.median(ratios)))
    role = statistics.median(pr["openai"]["mean_first_chunk_ms"] for pr in pairs)
    table = "\n".join(f"{k:18} envkit {e:9.2f}  openai {v:9.2f}  median ratio {r:.3f}" for k, e, v, r in report)
    print(f"\n{rounds} rounds of {prompts} requests at concurrency {concurrency}, 64-word prompts, {output_len} output tokens\n{table}\n"
          f"(the role-only first chunk, vLLM's chat client's TTFT: median {role:.2f} ms)")
