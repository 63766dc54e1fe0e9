"""doctor sees the host (issue 25, newcomer review 3 D8): the interpreters a user would expect it to look at, each
judged on its own with the host's facts collected once; --python PATH names them; --for resolves for the judged
interpreter's Python and its fix is the command that builds exactly that stack."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.app import doctor, interpreters
from envkit.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "fixtures" / "hosts" / "h200.json"


def _python(prefix: Path) -> str:
    (prefix / "bin").mkdir(parents=True)
    exe = prefix / "bin" / "python"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


def test_discovery_takes_the_active_env_python3_on_path_and_condas_environments_once_each(tmp_path):
    venv, conda, base = (tmp_path / n for n in ("venv", "conda-env", "miniconda"))
    v, c = _python(venv), _python(conda)
    _python(base)
    served = _python(base / "envs" / "serve")
    (base / "bin" / "conda").write_text("")
    home = tmp_path / "home"
    (home / ".conda").mkdir(parents=True)
    (home / ".conda" / "environments.txt").write_text(f"{conda}\n{base / 'envs' / 'serve'}\n")
    (tmp_path / "path").mkdir()
    os.symlink(v, tmp_path / "path" / "python3")  # python3 on PATH is the venv's again: one entry
    env = {"VIRTUAL_ENV": str(venv), "CONDA_PREFIX": str(conda), "PATH": str(tmp_path / "path"), "HOME": str(home),
           "CONDA_EXE": str(base / "bin" / "conda")}
    found = interpreters.discover((), env)
    assert [(i.path, i.why) for i in found] == [
        (v, "active virtual environment"), (c, "active conda environment"), (str(tmp_path / "path" / "python3"), "python3 on PATH"),
        (served, "conda environment"), (str(base / "bin" / "python"), "conda environment")]
    assert interpreters.discover((c,), env) == [interpreters.Interpreter(c, "--python")]  # --python alone, as given


def test_each_python_is_judged_on_its_own_with_the_hosts_facts_collected_once(tmp_path):
    """Two real interpreters: envkit's own (read in this process) and a fresh venv without torch (its own process)."""
    other = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True, timeout=120)
    d = doctor.run(pythons=(sys.executable, str(other / "bin" / "python")), images=False)
    doc = d.to_json()
    interps = doc["facts"]["interpreters"]
    assert [i["path"] for i in interps] == [sys.executable, str(other / "bin" / "python")]
    assert [i["primary"] for i in interps] == [True, False]
    assert doc["facts"]["python"]["executable"] == interps[0]["python"]["executable"]  # the primary is the one judged
    [env] = doc["environments"]
    assert env["kind"] == "python" and env["name"] == str(other / "bin" / "python") and env["why"] == "--python"
    assert env["stack"].startswith("python ") and "torch" not in env["stack"] and env["error"] is None
    assert "nvidia" in doc["facts"] and "os" in doc["facts"]  # the host's sections, once, beside them


def test_an_interpreter_that_cannot_run_the_probe_is_a_failed_environment(tmp_path):
    broken = tmp_path / "py"
    broken.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    broken.chmod(0o755)
    d = doctor.run(pythons=(sys.executable, str(broken)), images=False)
    [env] = d.environments
    assert not env.ok and not d.ok and env.error is not None and "exited 3: nope" in env.error


def test_python_and_facts_do_not_mix():
    with pytest.raises(InputError, match="--python probes interpreters of this host"):
        doctor.run(facts_file=str(H200), pythons=(sys.executable,))


def test_for_resolves_for_the_judged_pythons_version_and_its_fix_builds_exactly_that():
    """On the H200's facts (Python 3.12.3): the answer is for 3.12, not the newest Python, and the fix pins every version."""
    d = doctor.run(facts_file=str(H200), for_="--torch 2.11.0 --flash-attn 2")
    works = next(f for f in d.findings if f.rule == "for.works")
    assert "for /opt/torch/.venv/bin/python3 (Python 3.12.3)" in works.why and "python 3.12" in works.why
    assert works.fix == ("build exactly it: envkit generate --gpu H200 --driver 580.159.04 --cuda 13.0 --python 3.12 "
                         "--torch 2.11.0+cu130 --flash-attn 2.8.3.post2")
    p = subprocess.run([sys.executable, "-m", "envkit", *works.fix.split(": ", 1)[1].split()[1:], "--dry-run", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert "python 3.12, torch 2.11.0+cu130, flash-attn 2.8.3.post2" in plan["stack"]


def test_the_cli_names_a_missing_interpreter_in_one_line():
    p = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--python", "/nonexistent/python"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--python /nonexistent/python: no such interpreter" in p.stderr
