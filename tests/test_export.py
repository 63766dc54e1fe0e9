"""Project targets exported for CI: golden files, validated against the published schemas
(tests/schemas, sources in its README) and bake's documented file format; what the jobs install
([ci] envkit, never the unrelated PyPI project `envkit`), where they run ([ci] runner, gpu_runner),
the refusal of targets without a solution, and YAML that always parses back (PyYAML).
Newcomer review D1 and fuzz report 15 are the defects these tests hold fixed."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest
import tomllib
import yaml

from envkit import __version__
from envkit.app.matrix import Exported, ExportUnsolved, export_project
from envkit.config.project_file import load, parse
from envkit.core.export import FORMATS, yaml_dump
from envkit.errors import InputError
from envkit.model.host import Finding
from envkit.model.project import DISTRIBUTION
from envkit.ui.junit import doctor_cases, selftest_cases, to_xml

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
GOLD = ROOT / "golden" / "export"
PROJECT = "tests/golden/export/envkit.toml"
FILES = {"github": "github-workflow.yml", "gitlab": "gitlab-ci.yml", "bake": "docker-bake.json", "json": "targets.json", "k8s": "k8s-manifests.yaml"}
# bake's HCL/JSON target attributes, from docs.docker.com/build/bake/reference/ (target block)
BAKE_TARGET_ATTRS = {"args", "annotations", "attest", "cache-from", "cache-to", "call", "context", "contexts", "description",
                     "dockerfile-inline", "dockerfile", "entitlements", "extra-hosts", "inherits", "labels", "matrix", "name",
                     "network", "no-cache-filter", "no-cache", "output", "platforms", "pull", "secret", "shm-size", "ssh",
                     "tags", "target", "ulimits"}
GITHUB_SCHEMA = json.loads((ROOT / "schemas" / "github-workflows.json").read_text())
GITLAB_SCHEMA = json.loads((ROOT / "schemas" / "gitlab-ci.json").read_text())
CPU = '[[target]]\nname = "cpu"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\n'
H100 = '[[target]]\nname = "h100"\ngpu = "H100"\noffline = true\n'
VCS = f'{DISTRIBUTION} @ git+https://git.example/envkit.git@v0.1.0'
GOLDEN_VCS = f"{DISTRIBUTION} @ git+https://git.corp.example/platform/envkit.git@v0.1.0"  # tests/golden/export/envkit.toml


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ENVKIT_NO_CACHE", "1")


def _text(project: str, fmt: str, contexts: str = "envkit-contexts") -> str:
    outcome = export_project(project, fmt, contexts, None)
    assert isinstance(outcome, Exported), outcome
    return outcome.text


def _write(tmp_path: Path, text: str, name: str = "envkit.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _ci(**keys: str) -> str:
    return "[ci]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, timeout=300, cwd=cwd,
                          env={**os.environ, "ENVKIT_NO_CACHE": "1"})


def _steps(text: str) -> dict[str, str]:
    doc = yaml.safe_load(text)
    return {s["name"]: s["run"] for s in doc["jobs"]["build"]["steps"] if "run" in s}


# ---------------------------------------------------------------- golden files and the published schemas

@pytest.mark.parametrize("fmt", FORMATS)
def test_exports_match_their_golden_files_and_are_deterministic(fmt):
    text = _text(PROJECT, fmt)
    assert text == _text(PROJECT, fmt)
    path = GOLD / FILES[fmt]
    if os.environ.get("ENVKIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text


def test_github_workflow_is_valid_against_schemastore():
    """The golden project's images name a registry (registry.corp.example:5000/llm): every target builds and pushes on the
    CPU runner, and the test job runs each on its own runner, from the pushed digest (issue 29)."""
    doc = yaml.safe_load((GOLD / FILES["github"]).read_text())
    jsonschema.validate(doc, GITHUB_SCHEMA)
    include = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert [(i["target"], i["runner"], i["push"]) for i in include] == [
        ("cpu-demo", "ubuntu-latest", "yes"), ("a6000-cu118", "ubuntu-latest", "yes"), ("h200-cu128", "ubuntu-latest", "yes")]
    assert doc["jobs"]["build"]["runs-on"] == doc["jobs"]["test"]["runs-on"] == "${{ matrix.runner }}"
    tests = doc["jobs"]["test"]["strategy"]["matrix"]["include"]
    assert [(i["target"], i["runner"]) for i in tests] == [("cpu-demo", "ubuntu-latest"), ("a6000-cu118", "gpu"), ("h200-cu128", "gpu-h200")]
    assert doc["jobs"]["test"]["needs"] == "build"
    push = next(s for s in doc["jobs"]["build"]["steps"] if s.get("name", "").startswith("push"))
    assert push["env"] == {"ENVKIT_REGISTRY_USER": "${{ secrets.ENVKIT_REGISTRY_USER }}",
                           "ENVKIT_REGISTRY_PASSWORD": "${{ secrets.ENVKIT_REGISTRY_PASSWORD }}"}  # never a value in the file
    assert "--lock-tag" in push["run"]


def test_gitlab_ci_is_valid_against_gitlabs_schema():
    doc = yaml.safe_load((GOLD / FILES["gitlab"]).read_text())
    jsonschema.validate(doc, GITLAB_SCHEMA)
    assert doc["stages"] == ["build", "test"]
    jobs = {name: job for name, job in doc.items() if name.startswith("envkit-")}
    assert {name: ([m["TARGET"] for m in job["parallel"]["matrix"]], job.get("tags")) for name, job in jobs.items()} == {
        "envkit-push": (["cpu-demo", "a6000-cu118", "h200-cu128"], None),
        "envkit-test": (["cpu-demo"], None), "envkit-test-gpu": (["a6000-cu118"], ["gpu"]),
        "envkit-test-gpu-h200": (["h200-cu128"], ["gpu-h200"])}
    assert {name: job["extends"] for name, job in jobs.items()} == {
        "envkit-push": ".envkit-push", "envkit-test": ".envkit-test", "envkit-test-gpu": ".envkit-gpu-test",
        "envkit-test-gpu-h200": ".envkit-gpu-test"}
    assert doc[".envkit-push"]["artifacts"]["paths"] == ["envkit-build-$TARGET.json", "envkit-push-$TARGET.json", "envkit-sbom/"]
    assert "ENVKIT_REGISTRY_PASSWORD" not in json.dumps(doc)  # the login is the project's masked variables, named in a comment


def test_gpu_jobs_get_a_gpu_runner_and_fail_on_one_without_gpus(tmp_path):
    """Issue 25 (newcomer review 3, D7): the GitLab GPU jobs ran in docker:dind, where no GPU reaches the self-test, and
    went green. GPU jobs now use the runner's own engine with no dind service, on their runner's tags; GitHub GPU rows
    name their platform; the first command of both fails at once on a runner without the GPUs (run here, on this
    CPU-only machine, the gate exits 1 with its message). In the golden project the GPU jobs are the test jobs."""
    gl = yaml.safe_load((GOLD / FILES["gitlab"]).read_text())
    gpu_job = gl[".envkit-gpu-test"]
    assert "services" not in gpu_job and gpu_job["variables"] == {"DOCKER_HOST": "unix:///var/run/docker.sock"}
    assert gl[".envkit-test"]["services"] == gl[".envkit-push"]["services"] == ["docker:dind"]  # CPU jobs keep dind
    assert gl["envkit-test-gpu-h200"]["parallel"]["matrix"] == [
        {"TARGET": "h200-cu128", "IMAGE": "registry.corp.example:5000/llm/envkit-h200-cu128:latest", "GPU": "NVIDIA", "GPU_NODE": "/dev/nvidiactl"}]
    assert 'gpus = "all"' in (GOLD / FILES["gitlab"]).read_text().split("stages:")[0]  # the runner config it needs, said
    gate = gpu_job["script"][0]
    env = {**os.environ, "TARGET": "h200-cu128", "GPU": "NVIDIA", "GPU_NODE": "/nonexistent/nvidiactl"}
    run = subprocess.run(["bash", "-c", gate], capture_output=True, text=True, env=env)
    assert run.returncode == 1 and "target h200-cu128 needs NVIDIA GPUs, but this runner has no /nonexistent/nvidiactl" in run.stdout
    assert subprocess.run(["bash", "-c", gate], env={**env, "GPU_NODE": "/dev/null"}).returncode == 0
    gh = yaml.safe_load((GOLD / FILES["github"]).read_text())
    steps = gh["jobs"]["test"]["steps"]
    assert steps[0]["name"] == "the runner's GPUs" and steps[0]["if"] == "matrix.gpu != ''"
    assert not any(s.get("name") == "the runner's GPUs" for s in gh["jobs"]["build"]["steps"])  # building needs no GPU
    rows = {i["target"]: i.get("gpu") for i in gh["jobs"]["test"]["strategy"]["matrix"]["include"]}
    assert rows == {"cpu-demo": None, "a6000-cu118": "cuda", "h200-cu128": "cuda"}
    gh_gate = steps[0]["run"].replace("${{ matrix.gpu_node }}", "/nonexistent/kfd").replace("${{ matrix.target }}", "mi300x") \
        .replace("${{ matrix.gpu }}", "rocm")
    run = subprocess.run(["bash", "-c", gh_gate], capture_output=True, text=True, env={**os.environ, "RUNNER_NAME": "ubuntu-1"})
    assert run.returncode == 1 and "::error::target mi300x needs rocm GPUs, but runner ubuntu-1 has no /nonexistent/kfd" in run.stdout


def test_a_project_whose_images_name_no_registry_builds_and_tests_in_one_job_and_pushes_nothing(tmp_path):
    project = _write(tmp_path, "[ci]\n" + f'envkit = "{VCS}"\n' + 'gpu_runner = "gpu"\n' + CPU + H100)
    gh = yaml.safe_load(_text(project, "github"))
    assert list(gh["jobs"]) == ["build"] and "envkit push" not in _text(project, "github")
    assert [s.get("name") for s in gh["jobs"]["build"]["steps"]][-2] == "build, self-test, doctor"
    gl = yaml.safe_load(_text(project, "gitlab"))
    assert gl["stages"] == ["build"] and ".envkit-push" not in gl and "envkit push" not in _text(project, "gitlab")


def test_runner_label_lists_become_runs_on_lists_and_tags(tmp_path):
    project = _write(tmp_path, "[ci]\n" + f'envkit = "{VCS}"\n' + 'gpu_runner = ["self-hosted", "linux", "gpu"]\n' + CPU + H100)
    gh = yaml.safe_load(_text(project, "github"))
    jsonschema.validate(gh, GITHUB_SCHEMA)
    assert {i["target"]: i["runner"] for i in gh["jobs"]["build"]["strategy"]["matrix"]["include"]} == {
        "cpu": "ubuntu-latest", "h100": ["self-hosted", "linux", "gpu"]}
    gl = yaml.safe_load(_text(project, "gitlab"))
    jsonschema.validate(gl, GITLAB_SCHEMA)
    assert gl["envkit-build-self-hosted-linux-gpu"]["tags"] == ["self-hosted", "linux", "gpu"]


def test_an_invalid_workflow_is_caught_by_the_schema():
    doc = yaml.safe_load((GOLD / FILES["github"]).read_text())
    doc["jobs"]["build"]["runs-on"] = 42
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, GITHUB_SCHEMA)


def test_bake_file_follows_bakes_documented_json_format():
    doc = json.loads((GOLD / FILES["bake"]).read_text())
    assert set(doc) == {"group", "target"}
    assert doc["group"]["default"]["targets"] == list(doc["target"])
    for name, t in doc["target"].items():
        assert set(t) <= BAKE_TARGET_ATTRS, set(t) - BAKE_TARGET_ATTRS
        assert isinstance(t["context"], str) and isinstance(t["tags"], list) and t["network"] in ("none", "default")
    assert doc["target"]["cpu-demo"]["network"] == "none"
    assert doc["target"]["a6000-cu118"]["tags"] == ["registry.corp.example:5000/llm/envkit-a6000-cu118:seed"]


def test_commands_are_yaml_block_scalars():
    """Newcomer review: the workflow's `run:` was an escaped one-line string; now a `|` block a person can read."""
    text = (GOLD / FILES["github"]).read_text()
    assert "run: |\n        envkit build --project tests/golden/export/envkit.toml" in text
    assert "\\n" not in text


# ---------------------------------------------------------------- what the jobs install (newcomer review D1)

def test_the_distribution_name_is_pyprojects_and_not_the_unrelated_envkit():
    """D1: `envkit` on PyPI is an environment-variable parser; envkit's distribution is DISTRIBUTION."""
    name = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"]
    assert name == DISTRIBUTION == "envkit-gpu"
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.lower().startswith("pyyaml") for d in deps), "the export writes YAML through PyYAML at run time"


@pytest.mark.parametrize("fmt", ["github", "gitlab"])
def test_no_export_installs_the_pypi_project_named_envkit(fmt):
    """D1: every pip install in the golden exports names envkit-gpu (here a VCS URL at a tag)."""
    text = (GOLD / FILES[fmt]).read_text()
    installs = re.findall(r"pip install ([^\n]+)", text)
    assert installs and all(shlex.split(i) == [GOLDEN_VCS] for i in installs), installs
    assert not re.search(r"pip install ['\"]?envkit(?![-_\w])", text)


@pytest.mark.parametrize("fmt", ["github", "gitlab"])
def test_an_export_without_ci_envkit_is_refused_with_what_to_add(fmt, tmp_path):
    """D1: without [ci] envkit the export says what to add, exit 2, one line, nothing written."""
    project = _write(tmp_path, CPU)
    out = tmp_path / "wf.yml"
    p = cli("matrix", "export", "--format", fmt, "--project", project, "-o", str(out))
    err = p.stderr.decode()
    assert p.returncode == 2 and p.stdout == b"" and not out.exists(), err
    assert err.count("\n") == 1 and "has no [ci] envkit" in err and "add [ci] envkit = " in err, err


@pytest.mark.parametrize("fmt", ["bake", "json"])
def test_bake_and_json_install_nothing_and_need_no_ci_table(fmt, tmp_path):
    assert _text(_write(tmp_path, CPU), fmt)


def _wheel(folder: Path, name: str = DISTRIBUTION, version: str = "0.1.0") -> Path:
    """A minimal wheel: the dist-info METADATA the export reads (its hash is all the install step checks)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"envkit_gpu-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"envkit_gpu-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr("envkit/__init__.py", f'__version__ = "{version}"\n')
    return path


def test_a_wheel_is_installed_after_its_sha256_is_checked(tmp_path, monkeypatch):
    """D1: a wheel committed beside the project file: the install step checks the sha256 computed at export time
    (run here with bash: it passes on the file, and stops the job once one byte changed), then pip installs that file."""
    monkeypatch.chdir(tmp_path)  # the repository root of a user's project
    whl = _wheel(tmp_path / "ci")
    (tmp_path / "envkit.toml").write_text(_ci(envkit="ci/" + whl.name) + CPU)
    run = _steps(_text("envkit.toml", "github"))[f"install envkit ({DISTRIBUTION})"]
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    check, install = run.strip().split("\n")
    assert shlex.split(check) == ["echo", f"{digest}  ./ci/{whl.name}", "|", "sha256sum", "-c", "-"]
    assert shlex.split(install) == ["python", "-m", "pip", "install", f"./ci/{whl.name}"]
    ok = subprocess.run(["bash", "-ec", check], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    gitlab = yaml.safe_load(_text("envkit.toml", "gitlab"))[".envkit-build"]["script"]
    assert gitlab[:2] == [check, install]
    whl.write_bytes(whl.read_bytes() + b"\0")
    tampered = subprocess.run(["bash", "-ec", check], capture_output=True, text=True)
    assert tampered.returncode != 0 and "FAILED" in tampered.stdout


def test_a_wheel_path_is_taken_relative_to_the_project_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    whl = _wheel(tmp_path / "wheels")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "envkit.toml").write_text(_ci(envkit="../wheels/" + whl.name) + CPU)
    run = _steps(_text("ci/envkit.toml", "github"))[f"install envkit ({DISTRIBUTION})"]
    assert f"python -m pip install ./wheels/{whl.name}\n" in run and "envkit build" not in run


@pytest.mark.parametrize("make,needle", [
    (lambda d: None, "no wheel at"),
    (lambda d: (d / "ci").mkdir() or (d / "ci" / "envkit_gpu-0.1.0-py3-none-any.whl").write_bytes(b"not a zip"), "cannot read the wheel"),
    (lambda d: _wheel(d / "ci", name="envkit"), "is not a wheel of envkit-gpu"),
])
def test_a_wheel_that_is_missing_or_not_envkits_is_refused(make, needle, tmp_path):
    make(tmp_path)
    project = _write(tmp_path, _ci(envkit="ci/envkit_gpu-0.1.0-py3-none-any.whl") + CPU)
    with pytest.raises(InputError) as e:
        export_project(project, "github", "envkit-contexts", None)
    assert needle in e.value.message and e.value.fix


@pytest.mark.parametrize("value,kind", [
    (VCS, "vcs"), (f"{DISTRIBUTION} @ git+https://git.example/envkit.git@{'0a' * 20}", "vcs"),
    ("envkit_GPU @ git+ssh://git@git.example/envkit.git@1.2.3rc1", "vcs"), (f"{DISTRIBUTION}==0.1.0", "pin"),
    ("ci/envkit_gpu-0.1.0-py3-none-any.whl", "wheel"), ("../wheels/envkit_gpu-0.1.0-py3-none-any.whl", "wheel"),
])
def test_ci_envkit_accepts_a_wheel_a_pinned_vcs_url_or_an_exact_version(value, kind):
    assert parse(_ci(envkit=value) + CPU, "envkit.toml").ci.envkit.kind == kind


BAD_CI = [
    ('envkit = "envkit"', "not envkit's distribution 'envkit-gpu' (on PyPI `envkit` is an unrelated project)"),
    ('envkit = "envkit==0.7.1"', "unrelated project"),
    (f'envkit = "{DISTRIBUTION}"', "not one exact version"),
    (f'envkit = "{DISTRIBUTION}>=0.1"', "not one exact version"),
    (f'envkit = "{DISTRIBUTION}==0.*"', "not one exact version"),
    (f'envkit = "{DISTRIBUTION} @ git+https://git.example/envkit.git"', "names no tag or commit"),
    (f'envkit = "{DISTRIBUTION} @ git+https://git.example/envkit.git@main"', "looks like a branch"),
    (f'envkit = "{DISTRIBUTION} @ git+https://git.example/envkit.git@abc1234"', "looks like a branch"),
    (f'envkit = "{DISTRIBUTION} @ https://git.example/envkit.whl"', "not a git+https://"),
    (f'envkit = "{DISTRIBUTION}==0.1.0; python_version < \\"3\\""', "environment marker"),
    ('envkit = "/srv/envkit_gpu-0.1.0-py3-none-any.whl"', "must be relative"),
    ('envkit = "ci\\\\envkit_gpu-0.1.0-py3-none-any.whl"', "must be relative"),
    ('envkit = "ci/envkit-0.1.0-py3-none-any.whl"', "is not envkit's"),
    ('envkit = "ci/notawheel.whl"', "not a wheel file name"),
    ('envkit = "a\\u0085b"', "control character U+0085"),
    ('envkit = 3', "pip requirement string"),
    ('envkit = ""', "pip requirement string"),
    (f'envkit = "{DISTRIBUTION} @ git+https://alice:tok3n@git.example/envkit.git@v0.1.0"', "carries a login"),
    (f'envkit = "{DISTRIBUTION} @ git+https://ghp_tok3n@git.example/envkit.git@v0.1.0"', "carries a login"),
    ('runner = "self hosted"', "not a runner label"),
    ('gpu_runner = ["a", "a"]', "names a label twice"),
    ('gpu_runner = []', "is not one runner label or a list"),
    ('gpu_runner = ["gpu", "-x"]', "not a runner label"),
    ('gpu = "H100"', "unknown key `gpu` in [ci]"),
]


@pytest.mark.parametrize("line,needle", BAD_CI, ids=[n for _, n in BAD_CI])
def test_bad_ci_tables_name_the_problem(line, needle):
    with pytest.raises(InputError) as e:
        parse("[ci]\n" + line + "\n" + CPU, "envkit.toml")
    assert needle in e.value.message and e.value.fix, e.value.one_line()
    assert "tok3n" not in e.value.one_line()


# ---------------------------------------------------------------- where the jobs run (D1: GPU targets on ubuntu-latest)

def test_a_gpu_target_without_a_gpu_runner_is_refused(tmp_path):
    """D1: an H100 target's self-test on ubuntu-latest would find no GPU: refused, naming the target and the fix."""
    project = _write(tmp_path, _ci(envkit=VCS) + CPU + H100)
    p = cli("matrix", "export", "--format", "github", "--project", project)
    err = p.stderr.decode()
    assert p.returncode == 2 and p.stdout == b"" and err.count("\n") == 1, err
    assert "target h100 needs a GPU runner" in err and "add [ci] gpu_runner = '<label of your self-hosted GPU runner>'" in err


@pytest.mark.parametrize("ci,target_runner,expect_github,expect_tags", [
    ({"gpu_runner": "gpu"}, None, {"cpu": "ubuntu-latest", "h100": "gpu"}, {"envkit-build": None, "envkit-build-gpu": ["gpu"]}),
    ({"runner": "linux-small", "gpu_runner": "gpu"}, None, {"cpu": "linux-small", "h100": "gpu"},
     {"envkit-build-linux-small": ["linux-small"], "envkit-build-gpu": ["gpu"]}),
    ({}, "h100-box", {"cpu": "ubuntu-latest", "h100": "h100-box"}, {"envkit-build": None, "envkit-build-h100-box": ["h100-box"]}),
    ({"gpu_runner": "gpu"}, "h100-box", {"cpu": "ubuntu-latest", "h100": "h100-box"},
     {"envkit-build": None, "envkit-build-h100-box": ["h100-box"]}),
])
def test_runner_labels_from_the_project_file(ci, target_runner, expect_github, expect_tags, tmp_path):
    h100 = H100 + (f'runner = "{target_runner}"\n' if target_runner else "")
    project = _write(tmp_path, _ci(envkit=VCS, **ci) + CPU + h100)
    gh = yaml.safe_load(_text(project, "github"))
    jsonschema.validate(gh, GITHUB_SCHEMA)
    assert {i["target"]: i["runner"] for i in gh["jobs"]["build"]["strategy"]["matrix"]["include"]} == expect_github
    gl = yaml.safe_load(_text(project, "gitlab"))
    jsonschema.validate(gl, GITLAB_SCHEMA)
    assert {k: v.get("tags") for k, v in gl.items() if k.startswith("envkit-build")} == expect_tags


# ---------------------------------------------------------------- every target resolved first (D1)

def test_a_target_without_a_solution_is_refused_with_its_conflicts_and_nothing_is_written(tmp_path):
    """D1: V100 + flash-attn 2 exported with exit 0; now exit 1, each conflict on a line naming its target."""
    v100 = '[[target]]\nname = "v100-fa2"\ngpu = "V100"\nflash_attn = "2"\noffline = true\n'
    project = _write(tmp_path, _ci(envkit=VCS, gpu_runner="gpu") + CPU + v100)
    for fmt in FORMATS:
        out = tmp_path / f"out-{fmt}"
        p = cli("matrix", "export", "--format", fmt, "--project", project, "-o", str(out))
        err = p.stderr.decode()
        assert p.returncode == 1 and p.stdout == b"" and not out.exists(), (fmt, err)
        lines = err.splitlines()
        assert lines[0].startswith("envkit: target v100-fa2 has no solution: ") and "(fix: " in lines[0], err
        assert lines[-1].startswith("envkit: nothing exported: 1 target(s) without a solution")
        assert all(line.startswith("envkit: target v100-fa2 has no solution: ") for line in lines[:-1])  # not the solvable one
    outcome = export_project(project, "github", "envkit-contexts", None)
    assert isinstance(outcome, ExportUnsolved) and [n for n, _ in outcome.unsolved] == ["v100-fa2"]


def test_a_target_with_bad_flags_is_bad_input_naming_it(tmp_path):
    """D1: gpu = "H1000" exported with exit 0; now exit 2, one line naming every such target."""
    bad = '[[target]]\nname = "typo"\ngpu = "H1000"\noffline = true\n[[target]]\nname = "old"\ncuda = "9.9"\noffline = true\n'
    project = _write(tmp_path, _ci(envkit=VCS, gpu_runner="gpu") + CPU + bad)
    p = cli("matrix", "export", "--format", "gitlab", "--project", project)
    err = p.stderr.decode()
    assert p.returncode == 2 and p.stdout == b"" and err.count("\n") == 1, err
    assert "target typo: unknown GPU 'H1000'" in err and "target old: " in err


# ---------------------------------------------------------------- YAML that always parses back (fuzz report 15)

ODD_BUT_FINE = ["p q", "p: q", "p #q", "yes", "on", "-p", "*p", "&p", "héllo 😀", "p\u2028q", "p\u2029q", "p'q", 'p"q', "x" * 200]


@pytest.mark.parametrize("name", ODD_BUT_FINE, ids=[ascii(n)[:20] for n in ODD_BUT_FINE])
@pytest.mark.parametrize("fmt", ["github", "gitlab"])
def test_odd_project_paths_round_trip_through_the_yaml(name, fmt, tmp_path):
    """Fuzz report 15: whatever the path, the YAML parses (PyYAML) and the build command names the file exactly."""
    project = _write(tmp_path, _ci(envkit=VCS) + CPU, name=name + ".toml")
    doc = yaml.safe_load(_text(project, fmt))
    commands = doc["jobs"]["build"]["steps"][3]["run"] if fmt == "github" else doc[".envkit-build"]["script"][1:]
    build = (commands.split("\n") if fmt == "github" else commands)[0]
    assert shlex.split(build)[3] == project


CONTROL = ["p\x7fq", "p\x85q", "p\x9bq", "p\tq", "p\nq", "p\x1bq"]


@pytest.mark.parametrize("name", CONTROL, ids=[ascii(n) for n in CONTROL])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_project_path_with_control_characters_is_refused_before_anything_is_written(name, fmt, tmp_path):
    """Fuzz report 15: DEL and C1 made YAML PyYAML rejects, U+0085 came back as a space: now refused, exit 2."""
    project = _write(tmp_path, _ci(envkit=VCS) + CPU, name=name + ".toml")
    out = tmp_path / "out.yml"
    p = cli("matrix", "export", "--format", fmt, "--project", project, "-o", str(out))
    err = p.stderr.decode()
    assert p.returncode == 2 and not out.exists() and err.count("\n") == 1, err
    assert "holds the control character U+" in err


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_project_path_that_is_not_utf8_is_refused_and_o_does_not_crash(fmt, tmp_path):
    """Fuzz report 15 (E1-E3): a non-UTF-8 file name made stdout non-UTF-8 and `-o FILE` crash with UnicodeEncodeError."""
    raw = os.fsencode(tmp_path) + b"/p\xffq.toml"
    with open(raw, "w", encoding="utf-8") as f:
        f.write(_ci(envkit=VCS) + CPU)
    out = tmp_path / "out.yml"
    for args in ([], ["-o", str(out)]):
        p = subprocess.run([os.fsencode(sys.executable), b"-m", b"envkit", b"matrix", b"export", b"--format", fmt.encode(),
                            b"--project", raw, *[os.fsencode(a) for a in args]], capture_output=True, timeout=300, cwd=REPO,
                           env={**os.environ, "ENVKIT_NO_CACHE": "1"})
        err = p.stderr.decode("utf-8")  # the message itself is UTF-8
        assert p.returncode == 2 and p.stdout == b"" and not out.exists(), err
        assert "is not valid UTF-8" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", ["yes", "on", "1.10", ".5", ".inf", ":", "#x", "-x", "*a", "0x1f", "~", "héllo 😀", "a: b", "", "null",
                                   "a\nb", "a\nb\n", " lead", "trail ", "p\u2028q", "line\n  indented\n"])
def test_yaml_strings_round_trip(value):
    doc = {"k": value, "l": [value, [], {}], "n": {"x": [value]}}
    assert yaml.safe_load(yaml_dump(doc)) == doc


# ---------------------------------------------------------------- the project file and JUnit

@pytest.mark.parametrize("text,needle", [
    ("[[target]]\nname = \"A b\"\nplatform = \"cpu\"\noffline = true\n", "lower-case"),
    ("[[target]]\nname = \"a\"\nplatform = \"cpu\"\n", "neither offline nor against a site mirror"),
    ("[[target]]\nname = \"a\"\nplatform = \"cpu\"\noffline = true\n[[target]]\nname = \"a\"\nplatform = \"cpu\"\noffline = true\n", "used twice"),
    ("[[target]]\nname = \"a\"\nfrobnicate = \"x\"\noffline = true\n", "unknown key"),
    ("[[target]]\nname = \"a\"\ntorch = 2.4\noffline = true\n", "must be a string"),
    ("[[target]]\nname = \"a\"\noffline = true\nrunner = \"a b\"\n", "not a runner label"),
    ("[defaults]\nregistry = \"UPPER\"\n[[target]]\nname = \"a\"\noffline = true\n", "image name prefix"),
    ("ci = 3\n[[target]]\nname = \"a\"\noffline = true\n", "[ci] must be a table"),
    ("", "no [[target]]"),
])
def test_bad_project_files_name_the_problem(text, needle):
    with pytest.raises(InputError) as e:
        parse(text, "envkit.toml")
    assert needle in e.value.message and e.value.fix


def test_the_golden_project_file_loads():
    p = load(PROJECT)
    assert p.ci.envkit.text == GOLDEN_VCS and p.ci.gpu_runner == ("gpu",) and p.target("h200-cu128").runner == ("gpu-h200",)
    assert __version__  # the version the wheel test of tests/integration compares against


def test_junit_from_selftest_and_doctor():
    xml = to_xml("s", selftest_cases({"checks": [{"name": "torch imports", "ok": True, "detail": "2.13.0+cpu"},
                                                  {"name": "decode", "ok": False, "detail": "RuntimeError: boom"}]}))
    suite = ET.fromstring(xml).find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert suite.findall("testcase")[1].find("failure").get("message") == "RuntimeError: boom"
    f = Finding("error", "driver.too-old", "driver 470", "too old", "upgrade", "https://x")
    cases = doctor_cases([f])
    assert cases[0].name == "driver.too-old" and not cases[0].ok
    assert {c.classname for c in cases if c.ok} >= {"envkit.doctor.torch", "envkit.doctor.flash-attn"}
    ET.fromstring(to_xml("d", cases))


def test_bake_builds_both_platforms_where_the_stack_resolves_for_both(tmp_path):
    """Issue 25: a target whose stack has Linux aarch64 wheels (PyPI's torch 2.13.0 CPU build is published for both) gets
    a linux/arm64 target beside its linux/amd64 one; a CUDA 12.8 stack, whose aarch64 torch builds state no arch list,
    stays amd64; a Grace target (GB200) is arm64 alone, under its own name."""
    doc = json.loads((GOLD / FILES["bake"]).read_text())
    t = doc["target"]
    assert t["cpu-demo"]["platforms"] == ["linux/amd64"] and t["cpu-demo-arm64"]["platforms"] == ["linux/arm64"]
    assert t["cpu-demo-arm64"]["context"] == "envkit-contexts/cpu-demo-arm64"
    assert t["cpu-demo-arm64"]["tags"] == ["registry.corp.example:5000/llm/envkit-cpu-demo:latest-arm64"]
    assert t["h200-cu128"]["platforms"] == ["linux/amd64"] and "h200-cu128-arm64" not in t
    project = _write(tmp_path, '[[target]]\nname = "gb200"\ngpu = "GB200"\ntorch = "2.14.1"\noffline = true\n')
    gb = json.loads(_text(project, "bake"))["target"]
    assert list(gb) == ["gb200"] and gb["gb200"]["platforms"] == ["linux/arm64"]
