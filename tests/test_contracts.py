"""The values that cross layers read back what they write: a lock, a solution record, the build plan's document,
findings, and the self-test's and the sweep's recorded documents (docs/) go through from_json and come out of to_json
equal."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from envkit.app.generate import generate
from envkit.config import matrix_file
from envkit.core.judge import judge
from envkit.model.flags import ResolveFlags, parse_flag_string
from envkit.model.host import Finding, Host
from envkit.model.lock import Lock
from envkit.model.plan import PlanDocument
from envkit.model.results import SelftestResult, SweepResult
from envkit.model.solution import SolutionRecord, Unsolved

ROOT = Path(__file__).resolve().parent.parent
STACKS = [{"platform": "cpu", "torch": "2.13.0"}, {"gpu": "H200", "cuda": "13.0", "flash_attn": "2"},
          {"gpu": "RTX A6000", "cuda": "11.8", "python": "3.8", "torch": "2.0.1", "flash_attn": "2.2.0", "kernels": "rotary"},
          {"gpu": "H200", "vllm": "0.8"}]


@pytest.mark.parametrize("flags", STACKS, ids=lambda f: "-".join(f.values()))
def test_the_lock_the_solution_record_and_the_plan_read_back_what_generate_wrote(flags):
    g = generate(ResolveFlags.from_mapping(flags))
    assert not isinstance(g, Unsolved)
    plan_doc = json.loads(g.files["envkit.plan.json"])
    plan = PlanDocument.from_json(plan_doc)
    assert plan.to_json() == plan_doc
    assert [s["name"] for s in plan_doc["stages"]] and plan.stack == plan_doc["stack"]
    doc = json.loads(g.files["envkit.lock.json"])
    lock = Lock.from_json(doc)
    assert lock.to_json() == doc
    assert lock.query == ResolveFlags.from_mapping(doc["query"]) and lock.solution.torch_pin == g.result.solution.torch.pin
    record = SolutionRecord.from_json(json.loads(g.files["envkit/solution.json"]))
    assert record.to_json() == g.result.solution.to_json() and record.platform == g.result.solution.platform
    assert record.default_tag() == f"envkit/{record.platform}:torch{record.torch_pin.replace('+', '-')}"


@pytest.mark.parametrize("bad", [None, [], {"schema": 2}, {"schema": 1, "query": {}}, {"schema": 1, "query": {"gpu": "H100"}, "solution": {}},
                                 {"schema": 1, "query": {"nonsense": "1"}, "solution": {"platform": "cpu", "torch": {"pin": "2"}}}])
def test_a_document_that_is_not_a_lock_is_refused(bad):
    with pytest.raises(ValueError):
        Lock.from_json(bad)


def test_findings_read_back():
    cases = tomllib.loads((ROOT / "tests" / "doctor_cases" / "public_reports.toml").read_text())["case"]
    m = matrix_file.load()
    findings = [f for case in cases for f in judge(m, Host.from_case(case["facts"]))]
    assert len({f.rule for f in findings}) >= 10
    assert [Finding.from_json(json.loads(json.dumps(f.to_json()))) for f in findings] == findings


@pytest.mark.parametrize("name", ["quick.json", "decode.json", "bloom.json", "cli-quick-llama.json"])
def test_recorded_selftest_documents_read_back(name):
    doc = json.loads((ROOT / "docs" / "gpu" / "selftest-2026-11-30" / name).read_text())
    result = SelftestResult.from_json(doc)
    assert result.to_json() == doc and result.ok == doc["ok"] and len(result.checks) == len(doc["checks"])


def test_the_recorded_sweep_reads_back():
    doc = json.loads((ROOT / "docs" / "serving-cpu" / "sweep.json").read_text())
    result = SweepResult.from_json(doc)
    assert result.to_json() == doc and result.ok == doc["ok"] and [lv.concurrency for lv in result.levels] == [lv["concurrency"] for lv in doc["levels"]]


def test_resolve_flags_in_one_string_are_the_flags_given_one_by_one():
    assert parse_flag_string("--torch 2.4 --flash-attn=2.6 --kernels rotary") == ResolveFlags(torch="2.4", flash_attn="2.6", kernels="rotary")
    assert ResolveFlags(gpu="H100", vllm="0.6").command_args() == ["--gpu=H100", "--vllm=0.6"]
