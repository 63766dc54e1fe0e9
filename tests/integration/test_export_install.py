"""The exported GitHub workflow's install step installs THIS project (newcomer review D1: the exported CI
ran `pip install envkit`, which is an unrelated PyPI project).

What this proves, on this machine and without the network:
- a wheel built from this repository (`pip wheel --no-deps --no-build-isolation`: hatchling comes from the
  test extras) and named by a project file's `[ci] envkit` is exported into a GitHub workflow;
- the install step's `run:` text, read from that YAML with PyYAML as a runner reads it, run by bash in the
  user's repository with a fresh venv (no system site packages) first on PATH, passes its sha256 check and
  installs the distribution `envkit-gpu` at `envkit.__version__`, whose `envkit` package and command are
  the venv's own, not this checkout's; no distribution named `envkit` is installed;
- the same step, once one byte of the wheel has changed, fails at the sha256 check, before pip runs.
What it does not prove: that envkit's dependencies install (the step runs with PIP_NO_DEPS=1 and
PIP_NO_INDEX=1 so that nothing is fetched) or that the installed envkit runs a build.
Nothing here is skipped: a missing tool (bash, sha256sum, hatchling) fails the test."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

import envkit
from envkit.model.project import DISTRIBUTION

REPO = Path(__file__).resolve().parents[2]
PROJECT = '''[ci]
envkit = "ci/{wheel}"

[[target]]
name = "cpu-demo"
platform = "cpu"
torch = "2.13.0"
offline = true
'''


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This repository as a wheel, built once, offline."""
    dist = tmp_path_factory.mktemp("dist")
    p = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", str(REPO), "-w", str(dist)])
    assert p.returncode == 0, f"building the wheel failed (hatchling is in the test extras: pip install -e '.[test]'):\n{p.stderr[-3000:]}"
    (whl,) = dist.glob("*.whl")
    assert whl.name.startswith("envkit_gpu-") and whl.name.endswith("-py3-none-any.whl"), whl.name
    return whl


@pytest.fixture(scope="module")
def user_repo(wheel, tmp_path_factory) -> tuple[Path, str]:
    """A user's repository with the wheel committed under ci/, its envkit.toml, and the exported workflow's install step."""
    repo = tmp_path_factory.mktemp("user-repo")
    (repo / "ci").mkdir()
    shutil.copy2(wheel, repo / "ci" / wheel.name)
    (repo / "envkit.toml").write_text(PROJECT.format(wheel=wheel.name))
    out = repo / ".github" / "workflows" / "envkit.yml"
    p = run([sys.executable, "-m", "envkit", "matrix", "export", "--format", "github", "--project", "envkit.toml", "-o", str(out)],
            cwd=repo, env={**os.environ, "ENVKIT_NO_CACHE": "1"})
    assert p.returncode == 0, p.stderr
    steps = yaml.safe_load(out.read_text(encoding="utf-8"))["jobs"]["build"]["steps"]
    (step,) = [s for s in steps if s.get("name", "").startswith("install envkit")]
    return repo, step["run"]


def _clean_env(venv_dir: Path) -> dict[str, str]:
    """The venv first on PATH, pip offline and without dependencies, nothing of this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PATH": f"{venv_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(venv_dir),
            "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": os.devnull}


def test_the_exported_install_step_installs_this_project_in_a_clean_venv(user_repo, tmp_path):
    repo, step = user_repo
    assert "sha256sum -c" in step and "pip install envkit\n" not in step and "pip install 'envkit'" not in step
    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(venv_dir)
    env = _clean_env(venv_dir)
    assert shutil.which("bash") and shutil.which("sha256sum"), "the install step needs bash and sha256sum"
    p = run(["bash", "-e", "-c", step], cwd=repo, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ": OK" in p.stdout  # sha256sum -c said the wheel is the one exported

    probe = run([str(venv_dir / "bin" / "python"), "-I", "-c",
                 "import importlib.metadata as m, envkit, json; "
                 "print(json.dumps({'version': m.distribution('envkit-gpu').version, 'file': envkit.__file__, "
                 "'dists': sorted(d.metadata['Name'] for d in m.distributions())}))"],
                cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr
    facts = yaml.safe_load(probe.stdout)
    assert facts["version"] == envkit.__version__
    installed = Path(facts["file"]).resolve()
    assert installed.is_relative_to(venv_dir.resolve()) and not installed.is_relative_to(REPO), installed
    assert DISTRIBUTION in facts["dists"] and "envkit" not in facts["dists"], facts["dists"]
    assert (venv_dir / "bin" / "envkit").is_file()  # the command, from the wheel's entry point


def test_the_install_step_refuses_a_changed_wheel_before_pip_runs(user_repo, tmp_path):
    repo, step = user_repo
    (whl,) = (repo / "ci").glob("*.whl")
    original = whl.read_bytes()
    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(venv_dir)
    try:
        whl.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        p = run(["bash", "-e", "-c", step], cwd=repo, env=_clean_env(venv_dir))
    finally:
        whl.write_bytes(original)
    assert p.returncode != 0 and "FAILED" in p.stdout, p.stdout + p.stderr
    probe = run([str(venv_dir / "bin" / "python"), "-I", "-c", "import envkit"], cwd=tmp_path, env=_clean_env(venv_dir))
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # pip never ran
