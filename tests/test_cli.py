"""The CLI as users run it: exit codes, one-line errors, the JSON document."""
from __future__ import annotations

import json
import subprocess
import sys

ENVKIT = [sys.executable, "-m", "envkit"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVKIT, *args], capture_output=True, text=True, timeout=60)


def test_issue_example_resolves_to_cu118() -> None:
    p = run("resolve", "--gpu", "RTX 4090", "--cuda", "11.8", "--torch", "2.1.2", "--vllm", "0.2.7", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] is True and doc["conflicts"] == []
    s = doc["solution"]
    assert s["torch"]["pin"] == "2.1.2+cu118"
    assert s["torch"]["index_url"] == "https://download.pytorch.org/whl/cu118"
    assert s["vllm"]["version"] == "0.2.7"
    assert s["vllm"]["wheel"].startswith("vllm-0.2.7+cu118-cp3")
    assert s["images"]["devel"] == "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04"


def test_v100_flash_attn_2_exits_1_with_the_rule() -> None:
    p = run("resolve", "--gpu", "V100", "--flash-attn", "2", "--json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["solution"] is None
    rules = {c["rule"] for c in doc["conflicts"]}
    assert rules == {"flash-attn.gpu-arch"}
    c = doc["conflicts"][0]
    assert "8.0" in c["message"] and "sm_70" in c["message"] and c["fix"] and c["source"].startswith(("https://", "pkg:"))
    # dropping --flash-attn solves it; "drop --gpu" is no fix for the GPU a user owns (newcomer review 3, D11)
    assert {s["drop"] for s in doc["suggestions"]} == {"--flash-attn"}


def test_human_output_names_rule_and_fix() -> None:
    p = run("resolve", "--gpu", "V100", "--flash-attn", "2")
    assert p.returncode == 1
    assert "flash-attn.gpu-arch" in p.stdout and "Traceback" not in p.stdout + p.stderr


def test_unknown_gpu_lists_close_matches_exit_2() -> None:
    p = run("resolve", "--gpu", "RTX 4909")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "unknown GPU 'RTX 4909'" in p.stderr and "RTX 4090" in p.stderr


def test_bad_specifier_and_unknown_version_exit_2() -> None:
    for args in (["--torch", "two"], ["--cuda", "9.9"], ["--python", "3.x"], ["--kernels", "softmax"], ["--platform", "tpu"]):
        p = run("resolve", *args)
        assert p.returncode == 2, args
        assert p.stderr.startswith("envkit: error: ") and "Traceback" not in p.stderr


def test_gpu_names_as_people_write_them() -> None:
    for name, arch in (("rtx4090", "sm_89"), ("A100-80G", "sm_80"), ("GTX 1080 Ti", "sm_61"), ("Z100L", "gfx906"),
                       ("sm_90", "sm_90"), ("gfx942", "gfx942"), ("NVIDIA H200", "sm_90")):
        p = run("resolve", "--gpu", name, "--json")
        assert json.loads(p.stdout)["solution"]["gpu"]["arch"] == arch, name


def test_broken_matrix_exit_3(tmp_path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("schema = 1\n[[cuda]]\nversion = 'x'\n")
    p = run("matrix", "check", str(bad))
    assert p.returncode == 3 and "line 2" in p.stderr


def test_matrix_check_and_show() -> None:
    assert run("matrix", "check").returncode == 0
    p = run("matrix", "show", "vllm")
    assert p.returncode == 0 and "0.2.7" in p.stdout
    assert run("matrix", "show", "nope").returncode == 2


def test_selftest_bad_input_is_one_line_and_exit_2(tmp_path) -> None:
    bad_dataset = tmp_path / "d.jsonl"
    bad_dataset.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    good_lambada = tmp_path / "l.jsonl"
    good_lambada.write_text('{"text": "the cat sat on the mat"}\n')
    cases = [
        (("--engine", "trt"), "--engine 'trt' is not an engine"),
        (("--shape", "gpt-5"), "--shape 'gpt-5' is not a known shape"),
        (("--model", str(tmp_path / "missing")), "no such file or directory"),
        (("--lambada", str(bad_dataset)), "--lambada needs --model DIR"),
        (("--engine", "openai:http://127.0.0.1:9", "--engine", "hf"), "--engine hf belongs to the local self-test"),
        (("--engine", "openai:http://127.0.0.1:9", "--parity"), "--parity belongs to the local self-test"),
        (("--dataset", str(bad_dataset)), "--dataset is the serving sweep's workload"),
        (("--model", str(tmp_path), "--lambada", str(bad_dataset)), 'line 1 has no "text" of at least two words'),
        (("--model", str(tmp_path), "--lambada", str(good_lambada), "--engine", "vllm"), "runs on the hf and hf-static engines"),
        (("--engine", "openai:http://127.0.0.1:9", "--dataset", str(bad_dataset)), 'line 2 has no "prompt" string'),
        (("--engine", "openai:http://127.0.0.1:9", "--concurrency", "1,x"), "is not a list of integers"),
        (("--engine", "openai:127.0.0.1:9"), "the serving sweep takes openai:URL"),
    ]
    for args, message in cases:
        p = run("selftest", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert message in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 2, p.stderr            # the problem and its fix


def test_selftest_report_dir_that_cannot_be_written_exit_2(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = run("selftest", "--quick", "--report", str(blocker / "rep"))
    assert p.returncode == 2 and "cannot write the report" in p.stderr
    assert "torch" not in p.stdout                                       # refused before the run, not after it


def test_selftest_passes_only_what_was_asked_into_an_image() -> None:
    from envkit.app.selftest import SelftestRequest, script_args

    assert script_args(SelftestRequest(quick=True), None, None) == ["--json", "--quick"]   # what any envkit image knows
    asked = SelftestRequest(shapes=("qwen-7b",), engines=("hf", "vllm"), parity=True, input_len=64, output_len=16, peak_gbs=4800.0)
    assert script_args(asked, "/envkit-model", "/l.jsonl") == [
        "--json", "--parity", "--shape", "qwen-7b", "--model", "/envkit-model", "--engine", "hf", "--engine", "vllm",
        "--input-len", "64", "--output-len", "16", "--lambada", "/l.jsonl", "--peak-gbs", "4800.0"]
