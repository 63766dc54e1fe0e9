"""The exported GitLab and GitHub pipelines of one CPU target, run for real as far as this machine allows (issue 29): the
jobs' own scripts, read from the exported files, run in order as the CI system would run them — GitLab's stages in turn
(build: envkit-push; test: envkit-test, which reads the build job's artifact), GitHub's jobs in turn (build, then test,
which `needs` it), each matrix row with its variables, GitHub's `if:` conditions evaluated — by bash in one working
directory (where the CI systems carry artifacts between jobs, here the files stay). Against a real registry on loopback
(Debian's docker-registry) and this machine's Docker Engine (GitLab's jobs would reach it through docker:dind). What is not
run: the install step (`python -m pip install ...`: envkit is installed here; tests/integration/test_export_install.py
installs an exported wheel that way) and GitHub's `uses:` actions (checkout, setup-python, upload/download-artifact: the
working directory is already all of that). The test job must pull the pushed digest: its reference is removed from the
engine before the test stage runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sbom_check import check_sbom
from schema_check import valid_json

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)


def envkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def run_script(lines: list[str], env: dict[str, str], cwd: Path, log: list[str]) -> None:
    """One job's script as its runner runs it: bash, stop at the first failing line."""
    script = "set -eo pipefail\n" + "\n".join(lines) + "\n"
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=1800, cwd=cwd,
                       env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **env})
    log.append(f"$ {script}\n{p.stdout[-2000:]}{p.stderr[-3000:]}")
    assert p.returncode == 0, log[-1]


def installs(line: str) -> bool:
    return line.startswith("python -m pip install") or line.startswith("echo ") and "sha256sum -c" in line


def write_project(work: Path, registry: str) -> Path:
    (work / "envkit.toml").write_text(
        f'[defaults]\nregistry = "{registry}/ci"\n\n[ci]\nenvkit = "envkit-gpu==0.1.0"\n\n'
        '[[target]]\nname = "cpu"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\n')
    return work / "envkit.toml"


def exported(work: Path, fmt: str) -> dict:
    p = envkit("matrix", "export", "--project", "envkit.toml", "--format", fmt, cwd=work)
    assert p.returncode == 0, p.stderr[-2000:]
    return yaml.safe_load(p.stdout)


def forget_pushed(work: Path) -> str:
    """The pushed digest's reference, removed from this engine so that the test stage must pull it."""
    pull = json.loads((work / "envkit-push-cpu.json").read_text())["pull"]
    docker("rmi", pull)
    assert docker("image", "inspect", pull).returncode != 0
    return pull


def gitlab_jobs(doc: dict, stage: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """(job, script, variables) of every matrix row of every job of `stage`, in file order."""
    out = []
    for name, job in doc.items():
        if name.startswith(".") or not isinstance(job, dict) or "extends" not in job:
            continue
        hidden = doc[job["extends"]]
        if hidden["stage"] != stage:
            continue
        for row in job["parallel"]["matrix"]:
            out.append((name, hidden["script"], {k: str(v) for k, v in row.items()}))
    return out


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """One working directory for both pipelines, as a CI system's cache keeps envkit-bundles/ between pipelines: the second
    pipeline's bundle step finds the bundle complete (every file checked against its manifest) instead of fetching it."""
    return tmp_path_factory.mktemp("checkout")


def test_the_gitlab_pipeline_builds_pushes_and_tests_the_pushed_digest(docker_engine, registry, checkout):
    work = checkout
    write_project(work, registry)
    doc = exported(work, "gitlab")
    assert doc["stages"] == ["build", "test"]
    log: list[str] = []
    built = gitlab_jobs(doc, "build")
    assert [(name, env["TARGET"]) for name, _, env in built] == [("envkit-push", "cpu")]
    for _, script, env in built:
        run_script([line for line in script if not installs(line)], env, work, log)
    pushed = valid_json((work / "envkit-push-cpu.json").read_text(), "push")
    image = f"{registry}/ci/envkit-cpu:latest"
    assert pushed["ref"] == image and pushed["lock_tag"]["pushed"] is True
    assert pushed["lock_tag"]["ref"].startswith(f"{registry}/ci/envkit-cpu:lock-")
    build = valid_json((work / "envkit-build-cpu.json").read_text(), "build")
    check_sbom(image, work / "envkit-sbom", work / "envkit-bundles" / "cpu")  # the build job's SBOM artifact
    assert Path(build["sbom"]["sbom"]).parent == Path("envkit-sbom")
    pull = forget_pushed(work)
    tested = gitlab_jobs(doc, "test")
    assert [(name, env["TARGET"]) for name, _, env in tested] == [("envkit-test", "cpu")]
    for _, script, env in tested:
        run_script([line for line in script if not installs(line)], env, work, log)
    assert docker("image", "inspect", pull).returncode == 0  # the test job pulled it
    for report in ("selftest-cpu.xml", "doctor-cpu.xml"):
        text = (work / report).read_text()
        assert 'failures="0"' in text and 'errors="0"' in text, text[:2000]


GH_EXPR = re.compile(r"\$\{\{\s*(matrix|secrets)\.([A-Za-z0-9_]+)\s*\}\}")


def gh_if(condition: str, row: dict[str, str]) -> bool:
    """The few conditions envkit's workflow uses: always(), !cancelled(), matrix.X == '' and matrix.X != ''."""
    condition = condition.strip().removeprefix("${{").removesuffix("}}").strip()
    if condition in ("always()", "!cancelled()"):
        return True
    m = re.fullmatch(r"matrix\.(\w+) (==|!=) ''", condition)
    assert m, f"a condition this runner does not read: {condition}"
    empty = not row.get(m.group(1))
    return empty if m.group(2) == "==" else not empty


def run_github_job(job: dict, work: Path, log: list[str]) -> list[str]:
    """Every row of a job's matrix, its steps in order; the names of the steps run."""
    ran = []
    for row in job["strategy"]["matrix"]["include"]:
        for step in job["steps"]:
            if "if" in step and not gh_if(step["if"], row):
                continue
            if "uses" in step or step.get("name", "").startswith("install envkit"):
                continue
            text = GH_EXPR.sub(lambda m: str(row.get(m.group(2), "")) if m.group(1) == "matrix" else "", step["run"])
            run_script(text.splitlines(), {k: GH_EXPR.sub("", v) for k, v in (step.get("env") or {}).items()}, work, log)
            ran.append(step["name"])
    return ran


def test_the_github_workflow_builds_pushes_and_tests_the_pushed_digest(docker_engine, registry, checkout):
    work = checkout  # the bundle cached from the GitLab pipeline's run; this registry is a new one, so everything is pushed again
    for artifact in ("envkit-push-cpu.json", "envkit-build-cpu.json", "selftest-cpu.xml"):
        (work / artifact).unlink(missing_ok=True)
    write_project(work, registry)
    doc = exported(work, "github")
    assert list(doc["jobs"]) == ["build", "test"] and doc["jobs"]["test"]["needs"] == "build"
    log: list[str] = []
    assert run_github_job(doc["jobs"]["build"], work, log) == ["build", "push (the image's name and its lock's tag)"]
    pushed = valid_json((work / "envkit-push-cpu.json").read_text(), "push")
    assert pushed["lock_tag"]["ref"].startswith(f"{registry}/ci/envkit-cpu:lock-")
    pull = forget_pushed(work)
    assert run_github_job(doc["jobs"]["test"], work, log) == ["self-test, doctor (the pushed digest)"]
    assert docker("image", "inspect", pull).returncode == 0
    text = (work / "selftest-cpu.xml").read_text()
    assert 'failures="0"' in text and 'errors="0"' in text, text[:2000]
