"""envkit compare without real engines: the engine specs, the single-batch figures, both tables from plain values, the
out-of-memory row, the Markdown, the PNG, and bad input as one line and exit 2 (an unreachable server: exit 4). Real
loopback servers (tests/servers.py) for the command itself; the real vLLM, fastllm and transformers run is
tests/integration/test_compare_engines.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.core import compare as core
from envkit.core.sweep import RequestResult
from envkit.errors import InputError
from envkit.model.results import LevelResult
from envkit.ui import compare as ui_compare
from envkit.ui.plot import encode_png
from pngread import decode_png
from schema_check import validate
from servers import EventStream, serve

ROOT = Path(__file__).resolve().parent.parent


def envkit(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def level(c: int, **kw) -> LevelResult:
    base = dict(concurrency=c, requests=8, completed=8, failed=0, errors=(), out_of_memory=False, duration_s=2.5,
                request_throughput=3.2, input_throughput=409.6, output_throughput=102.4, mean_ttft_ms=120.0, p99_ttft_ms=250.0,
                mean_tpot_ms=40.0, p99_tpot_ms=55.5, mean_itl_ms=40.0, mean_latency_ms=1360.0)
    return LevelResult(**{**base, **kw})


OOM = level(64, completed=0, failed=8, errors=("HTTP 500: CUDA out of memory",), out_of_memory=True, request_throughput=0.0,
            input_throughput=0.0, output_throughput=0.0, mean_ttft_ms=None, p99_ttft_ms=None, mean_tpot_ms=None, p99_tpot_ms=None,
            mean_itl_ms=None, mean_latency_ms=None)


def comparison(site: str = "A100", model: str = "Qwen-7B-Chat") -> core.Comparison:
    vllm = core.EngineRun("vllm", "openai", "http://127.0.0.1:8000", "float16", model,
                          core.SingleBatch(8, 8, 256, 410, 13.913043), (level(1), level(4), OOM), "completions")
    fast = core.EngineRun("fastllm", "chat", "http://127.0.0.1:8080", "int8", model, core.SingleBatch(8, 8, 256, 512, 8.0),
                          (level(1), level(4)), "chat")
    hf = core.EngineRun("transformers", "hf", "/models/qwen", "float16", "qwen", core.SingleBatch(8, 8, 256, 400, 16.0), device="cuda")
    return core.Comparison(site, model, 32, 8, (1, 4, 64), (hf, vllm, fast), 128)


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize("text, want", [
    ("vllm=openai:http://127.0.0.1:8000", ("vllm", "openai", "http://127.0.0.1:8000")),
    ("fastllm=chat:http://10.0.0.2:8080/", ("fastllm", "chat", "http://10.0.0.2:8080/")),
    ("transformers=hf:/models/Qwen-7B-Chat", ("transformers", "hf", "/models/Qwen-7B-Chat")),
    ("hf=hf:C:/models/x", ("hf", "hf", "C:/models/x")),
])
def test_engine_specs_are_name_kind_target(text, want):
    s = core.parse_engine(text)
    assert (s.name, s.kind, s.target) == want
    assert s.endpoint == {"openai": "completions", "chat": "chat", "hf": None}[s.kind]


@pytest.mark.parametrize("text, needle", [
    ("openai:http://127.0.0.1:8000", "is not NAME=KIND:TARGET"),
    ("vllm=http://127.0.0.1:8000", "unknown kind 'http'"),
    ("vllm=triton:http://127.0.0.1:8000", "unknown kind 'triton'"),
    ("vllm=openai:", "is not NAME=KIND:TARGET"),
    ("=openai:http://x:1", "is not NAME=KIND:TARGET"),
    ("a b=openai:http://x:1", "is not 1-40 letters"),
    ("vllm=openai:127.0.0.1:8000", "takes the server's URL"),
    ("vllm=openai:http://user:key@127.0.0.1:8000", "carries a login"),
])
def test_bad_engine_specs_are_input_errors(text, needle):
    with pytest.raises(InputError) as e:
        core.parse_engine(text)
    assert needle in e.value.message and e.value.fix
    assert "vllm=openai:http://127.0.0.1:8000" in e.value.fix or "--api-key" in e.value.fix


def test_engine_names_are_unique_and_one_is_needed():
    with pytest.raises(InputError, match="at least one"):
        core.parse_engines([])
    with pytest.raises(InputError, match="names a more than once"):
        core.parse_engines(["a=openai:http://x:1", "a=chat:http://x:2"])


def test_dtypes_for_all_and_for_one_engine():
    specs = core.parse_engines(["t=hf:/m", "v=openai:http://x:1", "f=chat:http://x:2"])
    assert core.parse_dtypes([], specs) == {"t": "auto", "v": "auto", "f": "auto"}
    assert core.parse_dtypes(["float16", "f=int8"], specs) == {"t": "float16", "v": "float16", "f": "int8"}
    with pytest.raises(InputError, match="names no --engine"):
        core.parse_dtypes(["x=int8"], specs)
    with pytest.raises(InputError, match="transformers loads"):
        core.parse_dtypes(["int8"], specs)           # hf: cannot load int8; a server's label may say it


def test_level_one_is_always_run_first():
    assert core.levels_with_one([4, 8]) == (1, 4, 8)
    assert core.levels_with_one([1, 4]) == (1, 4)


# ---------------------------------------------------------------- figures and tables

def test_single_batch_is_tokens_and_characters_over_the_summed_latencies():
    results = [RequestResult(True, 10, 16, 0.1, 0.5, output_chars=40), RequestResult(True, 10, 16, 0.1, 1.5, output_chars=24),
               RequestResult(False, error="HTTP 500: boom")]
    s = core.SingleBatch.of(results)
    assert (s.requests, s.completed, s.failed, s.output_tokens, s.output_chars, s.latency_s) == (3, 2, 1, 32, 64, 2.0)
    assert (s.tokens_per_s, s.chars_per_s) == (16.0, 32.0)
    assert s.errors == ("HTTP 500: boom",) and not s.out_of_memory
    assert core.single_cell(s) == "16.0/32.0"
    none = core.SingleBatch.of([RequestResult(False, error="CUDA out of memory")])
    assert none.tokens_per_s is None and core.single_cell(none) == "Out of memory"
    assert core.single_cell(core.SingleBatch.of([RequestResult(False, error="reset")])) == "failed"


def test_single_batch_table_rows_from_plain_values():
    t = core.single_batch_table([comparison()])
    assert t.header == ("环境/site", "dtype", "engine", "Qwen-7B-Chat")
    assert t.rows == (("A100", "float16", "transformers", "16.0/25.0"), ("A100", "float16", "vllm", "18.4/29.5"),
                      ("A100", "int8", "fastllm", "32.0/64.0"))


def test_models_are_columns_and_sites_rows_when_comparisons_are_merged():
    t = core.single_batch_table([comparison("A100", "Qwen-7B-Chat"), comparison("A100", "Llama-2-7B"), comparison("V100", "Qwen-7B-Chat")])
    assert t.header[3:] == ("Qwen-7B-Chat", "Llama-2-7B")
    assert len(t.rows) == 6 and t.rows[3] == ("V100", "float16", "transformers", "16.0/25.0", "-")


def test_sweep_table_rows_and_the_out_of_memory_row():
    c = comparison()
    hf, vllm, _ = c.engines
    t = core.sweep_table(vllm)
    assert t.header == core.SWEEP_HEADER and len(t.header) == 9
    assert t.rows[0] == ("1", "2.50", "3.20", "409.6", "102.4", "120.0", "250.0", "40.0", "55.5")
    assert t.rows[2] == ("64", "Out of memory", "", "", "", "", "", "", "")
    assert core.sweep_table(hf).rows == (("1", "single batch only", "", "", "", "", "", "", ""),)
    partly = core.level_row(level(8, completed=6, failed=2, errors=("reset",)))
    assert partly[0] == "8 (2 of 8 failed)" and partly[1] == "2.50"
    assert core.level_row(level(8, completed=0, failed=8, errors=("HTTP 400: too long",)))[1] == "failed: HTTP 400: too long"


def test_out_of_memory_is_a_finding_other_failures_are_not_ok():
    c = comparison()
    assert c.ok
    _, vllm, fast = c.engines
    bad = core.EngineRun("x", "openai", "http://x:1", "auto", "m", core.SingleBatch(8, 8, 8, 8, 1.0), (level(1, completed=7, failed=1),))
    assert not bad.ok and core.failures(core.Comparison("s", "m", 2, 8, (1,), (bad,)))[0].startswith("x: 1 of 8 requests failed at concurrency 1")


def test_comparison_reads_back_what_it_writes_and_follows_its_schema():
    doc = comparison().to_json()
    validate(doc, "compare")
    assert core.Comparison.from_json(json.loads(json.dumps(doc))) == comparison()
    with pytest.raises(ValueError, match="lacks"):
        core.Comparison.from_json({"schema": 1})


def test_markdown_has_both_tables_and_the_literal_out_of_memory_row():
    md = ui_compare.markdown([comparison()])
    assert "| 环境/site | dtype | engine | Qwen-7B-Chat |\n|---|---|---|---|\n| A100 | float16 | transformers | 16.0/25.0 |" in md
    assert ("| Batch | Latency s | Request throughput/s | Input token throughput/s | Output token throughput/s | Mean TTFT ms | "
            "P99 TTFT ms | Mean TPOT ms | P99 TPOT ms |") in md
    assert "| 64 | Out of memory |  |  |  |  |  |  |  |" in md
    assert "| 1 | single batch only |" in md
    assert md.count("### Concurrency sweep: ") == 3


def test_markdown_escapes_a_pipe_in_a_cell():
    t = core.Table("t", ("a",), (("x|y",),))
    assert ui_compare.markdown_table(t).splitlines()[-1] == "| x\\|y |"


def test_png_both_ways():
    c = comparison()
    for png in (ui_compare.stdlib_chart(c), ui_compare.chart(c)):
        w, h, _ = decode_png(png)
        assert w > 1000 and h > 400
    assert encode_png(1, 1, b"\0\0\0").startswith(b"\x89PNG")


# ---------------------------------------------------------------- the command

@pytest.mark.parametrize("args, needle", [
    (["--engine", "openai:http://127.0.0.1:9"], "is not NAME=KIND:TARGET"),
    (["--engine", "v=vllm:http://127.0.0.1:9"], "unknown kind 'vllm'"),
    ([], "at least one --engine"),
    (["--engine", "t=hf:/nonexistent/model"], "no such model directory"),
    (["--engine", "v=openai:http://127.0.0.1:9", "--concurrency", "1,x"], "--concurrency"),
    (["--engine", "v=openai:http://127.0.0.1:9", "--dtype", "w=int8"], "names no --engine"),
    (["--engine", "v=openai:http://127.0.0.1:9", "--hf-python", "/usr/bin/python3"], "--hf-python runs the hf: engines"),
    (["--engine", "v=openai:http://127.0.0.1:9", "--site", ""], "--site"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    p = envkit("compare", *args)
    assert p.returncode == 2, p.stderr
    line, = p.stderr.splitlines()
    assert line.startswith("envkit: error: ") and needle in line and "(fix: " in line and "Traceback" not in p.stderr


def test_bad_input_with_json_is_the_error_document():
    p = envkit("compare", "--engine", "nope", "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["kind"] == "input"


def test_an_unreachable_server_is_one_line_and_exit_4():
    p = envkit("compare", "--engine", "v=openai:http://127.0.0.1:9", "--ready-timeout", "0")
    assert p.returncode == 4, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("envkit: error: server at http://127.0.0.1:9 did not answer within 0 s")


def test_an_unwritable_markdown_path_fails_before_any_server_is_asked(tmp_path):
    p = envkit("compare", "--engine", "v=openai:http://127.0.0.1:9", "--markdown", str(tmp_path))
    assert p.returncode == 2 and "cannot write --markdown" in p.stderr


def test_a_python_without_torch_is_refused_before_anything_runs(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    p = envkit("compare", "--engine", f"t=hf:{model}", "--hf-python", sys.executable)
    if p.returncode == 0:  # this Python has torch: nothing to refuse here
        pytest.skip("the test Python has torch and transformers")
    assert p.returncode == 2 and "need torch and transformers" in p.stderr and "--hf-python" in p.stderr


def _delta(**d) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": d}]}).encode() + b"\n\n"


class _Completions(EventStream):
    chunks = [(0.0, b'data: {"choices": [{"text": "abc"}]}\n\n')] * 4 + [
        (0.0, b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 4}}\n\n'), (0.0, b"data: [DONE]\n\n")]
    seen: list = []


class _Chat(EventStream):
    """fastllm's stream: the role chunk, content chunks, no usage (no extra keys after a 422 warm-up)."""
    chunks = [(0.0, _delta(role="assistant"))] + [(0.0, _delta(content="héllo"))] * 4 + [(0.0, b"data: [DONE]\n\n")]
    seen: list = []

    def failure(self, request):
        if self.path != "/v1/chat/completions":
            return (404, b"not found")
        return (422, b"ignore_eos unknown") if "ignore_eos" in request else None


def test_the_command_against_a_completions_and_a_chat_server(tmp_path):
    with serve(_Completions) as a, serve(_Chat) as b:
        p = envkit("compare", "--engine", f"vllm=openai:http://127.0.0.1:{a.server_port}", "--engine",
                   f"fastllm=chat:http://127.0.0.1:{b.server_port}", "--model-name", "tiny", "--concurrency", "2",
                   "--num-prompts", "3", "--input-len", "5", "--output-len", "4", "--site", "CPU (loopback)", "--dtype", "fastllm=int8",
                   "--markdown", str(tmp_path / "out" / "r.md"), "--png", str(tmp_path / "out" / "r.png"), "--json")
    assert p.returncode == 0, p.stderr
    doc = validate(json.loads(p.stdout), "compare")
    vllm, fast = doc["engines"]
    assert [lv["concurrency"] for lv in vllm["levels"]] == [1, 2] and vllm["endpoint"] == "completions"
    assert vllm["single_batch"]["output_tokens"] == 12 and vllm["single_batch"]["output_chars"] == 36
    assert fast["endpoint"] == "chat" and fast["dtype"] == "int8" and fast["single_batch"]["output_chars"] == 60   # é is one character
    assert all(r[1] == "/v1/chat/completions" for r in _Chat.seen if r[0] == "POST")
    assert "ignore_eos" not in _Chat.seen[-1][3] and "sends none" in p.stderr     # retried without the extras
    assert [r[3]["messages"][0]["content"].count(" ") for r in _Chat.seen if r[0] == "POST"][-1] == 4          # 5 token ids as 5 words
    md = (tmp_path / "out" / "r.md").read_text()
    assert "| CPU (loopback) | int8 | fastllm |" in md and "### Concurrency sweep: fastllm" in md
    assert decode_png((tmp_path / "out" / "r.png").read_bytes())[0] > 1000
