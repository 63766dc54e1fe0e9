"""JUnit files (newcomer review D9): the --junit path is made ready before the run, as --report is, for selftest,
doctor and inspect; the file is written whole; cases carry the durations the run measured, the suite its
timestamp and hostname."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from envkit.errors import InputError
from envkit.ui import junit
from servers import EventStream, serve

ROOT = Path(__file__).resolve().parent.parent


def envkit(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **env})


def test_prepare_creates_the_parents_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "new" / "dir" / "x.xml"
    assert junit.prepare(str(path)) == path
    assert path.parent.is_dir() and list(path.parent.iterdir()) == []


@pytest.mark.parametrize("where", ["under a file", "a directory"])
def test_prepare_refuses_a_path_that_cannot_be_written(tmp_path, where):
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "x.xml" if where == "under a file" else tmp_path
    with pytest.raises(InputError) as err:
        junit.prepare(str(path))
    assert err.value.exit_code == 2 and err.value.message.startswith(f"cannot write JUnit file {path}: ")
    assert err.value.fix == "give a writable --junit path"


def test_the_file_carries_times_timestamp_and_hostname(tmp_path):
    path = str(tmp_path / "j" / "x.xml")
    before = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    junit.prepare(path)
    cases = junit.selftest_cases({"checks": [{"name": "torch imports", "ok": True, "detail": "2.13", "seconds": 1.25},
                                             {"name": "old document", "ok": False, "detail": "no seconds"}]})
    cases += junit.sweep_cases({"levels": [{"concurrency": 4, "failed": 0, "errors": [], "duration_s": 2.5}]})
    junit.write(path, "envkit selftest", cases)
    assert sorted(p.name for p in Path(path).parent.iterdir()) == ["x.xml"]          # no .part left
    suite = ET.parse(path).getroot().find("testsuite")
    assert [c.get("time") for c in suite.findall("testcase")] == ["1.250", "0.000", "2.500"]
    assert datetime.fromisoformat(suite.get("timestamp")) >= before and suite.get("hostname")
    assert float(suite.get("time")) >= 0 and suite.get("tests") == "3" and suite.get("failures") == "1"


def test_selftest_with_an_unwritable_junit_fails_before_the_run(tmp_path):
    """D9: the self-test ran to its end, then failed on the --junit path."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = envkit("selftest", "--quick", "--junit", str(blocker / "x.xml"))
    assert p.returncode == 2 and f"cannot write JUnit file {blocker / 'x.xml'}" in p.stderr
    assert "importing torch" not in p.stderr and "Traceback" not in p.stderr           # the run never started


def test_doctor_and_inspect_check_the_junit_path_first(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"schema": 1, "nvidia": {"driver": "550.54", "cuda_driver": "12.4", "gpus": []}}))
    for args in (("doctor", "--facts", str(facts)), ("inspect", "envkit-none:latest")):
        p = envkit(*args, "--junit", str(blocker / "x.xml"), DOCKER_HOST="unix:///nonexistent.sock")
        assert p.returncode == 2 and "cannot write JUnit file" in p.stderr, (args, p.stderr)
    p = envkit("doctor", "--facts", str(facts), "--junit", str(tmp_path / "made" / "d.xml"))
    assert p.returncode in (0, 1) and ET.parse(tmp_path / "made" / "d.xml").getroot().find("testsuite").get("hostname")


class _OpenAI(EventStream):
    chunks = [(0.01, b'data: {"choices": [{"text": "x"}]}\n\n')] * 3 + [(0.0, b"data: [DONE]\n\n")]
    seen: list = []


def test_a_sweeps_junit_cases_are_timed_by_their_levels(tmp_path):
    with serve(_OpenAI) as srv:
        p = envkit("selftest", "--engine", f"openai:http://127.0.0.1:{srv.server_port}", "--concurrency", "1,2", "--num-prompts", "2",
                   "--input-len", "4", "--output-len", "3", "--json", "--junit", str(tmp_path / "new" / "j.xml"))
    assert p.returncode == 0, p.stderr
    levels = {f"concurrency {lv['concurrency']}": lv["duration_s"] for lv in json.loads(p.stdout)["levels"]}
    cases = ET.parse(tmp_path / "new" / "j.xml").getroot().iter("testcase")
    assert {c.get("name"): float(c.get("time")) for c in cases} == pytest.approx(levels, abs=5e-4)
    assert all(t > 0 for t in levels.values())
