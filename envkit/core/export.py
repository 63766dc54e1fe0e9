"""CI exports of a project's targets (pure): a GitHub Actions workflow, a GitLab CI file with
`parallel:matrix`, a `docker buildx bake` file, plain JSON and Kubernetes manifests (core/k8s.py). Same targets,
same bytes.

The YAML is written by PyYAML (safe_dump, multi-line commands as `|` blocks). Every string that reaches an
export is first checked to hold no control character and no undecodable byte, so what is written always
parses back to the same values. The CI jobs install envkit as the project file's [ci] envkit says (a wheel
whose sha256 the job checks first, or a VCS URL at a tag or commit), never by the name `envkit`."""
from __future__ import annotations

import copy
import json
import posixpath
import re
import shlex
import unicodedata
from typing import Any, Collection, Mapping, Optional, Union

import yaml

from envkit.core import k8s as k8s_core
from envkit.errors import InputError
from envkit.model.project import DISTRIBUTION, EnvkitRequirement, Project, Target, WheelInstall

FORMATS = ("github", "gitlab", "bake", "json", "k8s")
INSTALLING = ("github", "gitlab")  # the formats whose jobs install envkit and run it
GITHUB_DEFAULT_RUNNER = "ubuntu-latest"
Install = Union[WheelInstall, EnvkitRequirement]


def check_text(what: str, value: str) -> None:
    """Refuse a string an export would carry that holds a control character (C0, DEL, C1: YAML readers refuse
    some, turn U+0085 into a space) or bytes that are not UTF-8 (a file name read with surrogateescape)."""
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cs":
            raise InputError(f"{what} {value!r} is not valid UTF-8", "rename it with UTF-8 characters only")
        if category == "Cc":
            raise InputError(f"{what} {value!r} holds the control character U+{ord(ch):04X}",
                             "rename it without control characters")


# The plain scalars a YAML 1.2 core-schema reader (GitHub Actions, GitLab, kubectl's sigs.k8s.io/yaml, ruamel.yaml)
# resolves to null, a boolean, an integer or a float (YAML 1.2.2, 10.3.2), and the YAML 1.1 booleans PyYAML's own
# resolver does not know but other YAML 1.1 readers do (go-yaml v2: y, Y, n, N). A string that reads as one of
# these is written quoted, whichever reader reads it back.
_YAML12_NOT_STR = re.compile(r"""
    null|Null|NULL|~|
    true|True|TRUE|false|False|FALSE|
    [-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|
    [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|
    [-+]?(\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN
    """, re.X)
_YAML11_BOOL = re.compile(r"y|Y|n|N|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF")
_STR = "tag:yaml.org,2002:str"
# YAML 1.1's line breaks that YAML 1.2 reads as ordinary characters: in a block scalar PyYAML breaks the line there
# (YAML 1.1), and a YAML 1.2 reader does not, so a string holding one is written double-quoted, as an escape
_YAML11_BREAKS = re.compile("[\x85\u2028\u2029]")


def reads_as_other(dumper: Any, value: str) -> bool:
    """Whether `value`, written plain, would be read back as something else than this string: by PyYAML's YAML 1.1
    resolver (ints, floats, booleans, null, timestamps, merge and value keys) or by a YAML 1.2 core-schema reader."""
    return (value == "" or bool(_YAML12_NOT_STR.fullmatch(value)) or bool(_YAML11_BOOL.fullmatch(value))
            or dumper.resolve(yaml.ScalarNode, value, (True, False)) != _STR)


def _literal_str(dumper: Any, value: str) -> Any:
    """Multi-line strings (the commands of a step) as `|` blocks; PyYAML quotes them where a block cannot hold them.
    A one-line string that a YAML 1.1 or YAML 1.2 reader would take for another type is single-quoted, and one that
    holds a line break of YAML 1.1 alone (U+0085, U+2028, U+2029) double-quoted."""
    if "\n" in value and not _YAML11_BREAKS.search(value):
        return dumper.represent_scalar(_STR, value, style="|")
    if _YAML11_BREAKS.search(value):  # double-quoted, where they are escapes (\N, \L, \P) both versions read alike
        return dumper.represent_scalar(_STR, value, style='"')
    return dumper.represent_scalar(_STR, value, style="'" if reads_as_other(dumper, value) else None)


_Dumper: Any = type("_Dumper", (yaml.SafeDumper,), {})
_Dumper.add_representer(str, _literal_str)


def yaml_dump(obj: Any) -> str:
    """Block-style YAML through PyYAML: keys in their order, unicode as it is, no line folding."""
    return str(yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 20, default_flow_style=False))


def wheel_path(project_path: str, wheel: str) -> str:
    """A [ci] envkit wheel's path from where the export runs (the repository root): the project file's folder
    joined with the path written in it, `./`-prefixed so pip reads it as a file."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(project_path.replace("\\", "/")), wheel))
    return joined if joined.startswith(("/", "./", "../")) else "./" + joined


def install_commands(install: Install) -> list[str]:
    """The install step's commands: for a wheel, the sha256 check that stops the job when the file is not
    the one exported, then pip on that file; otherwise pip on the requirement (a VCS URL at a tag or commit,
    or an exact version of envkit's distribution)."""
    if isinstance(install, WheelInstall):
        return [f"echo {shlex.quote(f'{install.sha256}  {install.path}')} | sha256sum -c -",
                f"python -m pip install {shlex.quote(install.path)}"]
    return [f"python -m pip install {shlex.quote(install.text)}"]


Labels = tuple[str, ...]
GPU_NODE = {"cuda": "/dev/nvidiactl", "rocm": "/dev/kfd", "dtk": "/dev/kfd"}  # present where the vendor's driver is loaded
VENDOR = {"cuda": "NVIDIA", "rocm": "AMD", "dtk": "Hygon"}
GITLAB_GPU_RUNNER = ('GitLab GPU jobs run on a docker-executor runner with the GPUs and the host\'s engine: in its config.toml '
                     '[runners.docker] gpus = "all" and volumes = ["/var/run/docker.sock:/var/run/docker.sock"] (a shell '
                     'executor on the GPU host works too); the jobs use no docker:dind, which cannot pass GPUs on.')


def runners(p: Project, gpu_targets: Collection[str]) -> dict[str, Optional[Labels]]:
    """Each target's runner labels: its own `runner`, else [ci] gpu_runner for a GPU target and [ci] runner
    for a CPU one (None: the CI system's default). A GPU target with no label is refused: on the CI system's
    default runner its self-test would find no GPU."""
    out: dict[str, Optional[Labels]] = {}
    missing = []
    for t in p.targets:
        gpu = t.name in gpu_targets
        label = t.runner or (p.ci.gpu_runner if gpu else p.ci.runner)
        if gpu and label is None:
            missing.append(t.name)
        out[t.name] = label
    if missing:
        names = ", ".join(missing)
        raise InputError(f"target{'s' if len(missing) > 1 else ''} {names} need{'' if len(missing) > 1 else 's'} a GPU runner",
                         "add [ci] gpu_runner = '<label of your self-hosted GPU runner>' to the project file "
                         "(or runner = '<label>' to the target)")
    return out


def missing_install(p: Project) -> InputError:
    """The refusal of a GitHub or GitLab export from a project file without [ci] envkit."""
    return InputError(f"{p.path} has no [ci] envkit, so the exported jobs would not know how to install envkit",
                      "add [ci] envkit = \"<path of a wheel of envkit committed in your repository, relative to the project file>\" "
                      f"or envkit = \"{DISTRIBUTION} @ git+https://HOST/PATH.git@vX.Y.Z\"")


def _build_command(project_path: str, target: str) -> str:
    return f"envkit build --project {shlex.quote(project_path)} --target {target} --json > envkit-build-{target}.json"


def _test_commands(target: str, image: str) -> list[str]:
    return [f"envkit selftest --image {image} --junit selftest-{target}.xml", f"envkit inspect {image} --junit doctor-{target}.xml"]


def _commands(project_path: str, target: str, image: str) -> list[str]:
    return [_build_command(project_path, target), *_test_commands(target, image)]


def pushes(t: Target) -> bool:
    """A target whose image names a registry host ([defaults] registry = "HOST[:PORT]/PATH") is pushed there by its build job
    and tested by a job that pulls it by digest; one without a host ("envkit/...") is built and tested in one job."""
    first = t.image.split("/", 1)[0]
    return "/" in t.image and ("." in first or ":" in first or first == "localhost")


def _push_command(target: str, image: str) -> str:
    """Push under the target's own name and the lock's tag; the login is the CI system's secret, read from the environment
    (ENVKIT_REGISTRY_USER, ENVKIT_REGISTRY_PASSWORD), never written into the file."""
    return f"envkit push {image} --to {image} --lock-tag --json > envkit-push-{target}.json"


def _pull_ref(target: str) -> str:
    """The shell line that sets PULL to the pushed digest (REPO@sha256:...) from the build job's push document."""
    return f"""PULL=$(python -c "import json; print(json.load(open('envkit-push-{target}.json'))['pull'])")"""


REGISTRY_SECRETS = ("ENVKIT_REGISTRY_USER", "ENVKIT_REGISTRY_PASSWORD")
REGISTRY_LOGIN = {
    "github": "The targets whose image names a registry host are pushed by their build job and tested by the test job, which "
              "pulls the pushed digest; the push logs in with the repository's secrets ENVKIT_REGISTRY_USER and "
              "ENVKIT_REGISTRY_PASSWORD (leave them unset for a registry without login).",
    "gitlab": "The targets whose image names a registry host are pushed by the envkit-push jobs and tested by the envkit-test "
              "jobs, which pull the pushed digest; the push logs in with the project's masked CI/CD variables "
              "ENVKIT_REGISTRY_USER and ENVKIT_REGISTRY_PASSWORD (leave them unset for a registry without login).",
}
SBOM_DIR = "envkit-sbom/"


def _runs_on(labels: Optional[Labels]) -> Union[str, list[str]]:
    if not labels:
        return GITHUB_DEFAULT_RUNNER
    return labels[0] if len(labels) == 1 else list(labels)


def _gate(matrix_if: str) -> dict[str, Any]:
    return {"name": "the runner's GPUs", "if": matrix_if,
            "run": "test -e \"${{ matrix.gpu_node }}\" || { echo \"::error::target ${{ matrix.target }} needs "
                   "${{ matrix.gpu }} GPUs, but runner $RUNNER_NAME has no ${{ matrix.gpu_node }}: run it on a "
                   "self-hosted runner with them ([ci] gpu_runner)\"; exit 1; }\n"}


def _setup(install: Install) -> list[dict[str, Any]]:
    return [{"uses": "actions/checkout@v4"}, {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
            {"name": f"install envkit ({DISTRIBUTION})", "run": "\n".join(install_commands(install)) + "\n"}]


def _row(t: Target, runner: Optional[Labels], gpu: Mapping[str, str], **extra: str) -> dict[str, Any]:
    return {"target": t.name, "image": t.image, "runner": _runs_on(runner), **extra,
            **({"gpu": gpu[t.name], "gpu_node": GPU_NODE[gpu[t.name]]} if t.name in gpu else {})}


def _github_build(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """The build job: a target that is pushed builds on the CPU runner and pushes; one that is not builds and tests where
    its GPUs are (the first step fails on a runner without them)."""
    pushed = [t.name for t in p.targets if pushes(t)]
    include = [_row(t, p.ci.runner, {}, push="yes") if t.name in pushed else _row(t, labels.get(t.name), gpu) for t in p.targets]
    tested_here = len(pushed) < len(p.targets)
    steps: list[dict[str, Any]] = [_gate("matrix.gpu != ''")] if any(t.name in gpu and t.name not in pushed for t in p.targets) else []
    steps += _setup(install)
    if not pushed:
        steps.append({"name": "build, self-test, doctor",
                      "run": "\n".join(_commands(p.path, "${{ matrix.target }}", "${{ matrix.image }}")) + "\n"})
    else:
        steps.append({"name": "build", "run": _build_command(p.path, "${{ matrix.target }}") + "\n"})
        if tested_here:
            steps.append({"name": "self-test, doctor", "if": "matrix.push == ''",
                          "run": "\n".join(_test_commands("${{ matrix.target }}", "${{ matrix.image }}")) + "\n"})
        steps.append({"name": "push (the image's name and its lock's tag)", "if": "matrix.push != ''",
                      "env": {k: f"${{{{ secrets.{k} }}}}" for k in REGISTRY_SECRETS},
                      "run": _push_command("${{ matrix.target }}", "${{ matrix.image }}") + "\n"})
    paths = ["*-${{ matrix.target }}.xml", "envkit-build-${{ matrix.target }}.json"]
    if pushed:
        paths += ["envkit-push-${{ matrix.target }}.json", SBOM_DIR]
    steps.append({"name": "test results" if not pushed else "build results", "if": "always()", "uses": "actions/upload-artifact@v4",
                  "with": {"name": "envkit-${{ matrix.target }}", "path": "\n".join(paths)}})
    return {"name": "build ${{ matrix.target }}", "runs-on": "${{ matrix.runner }}",
            "strategy": {"fail-fast": False, "matrix": {"include": include}}, "steps": steps}


def _github_test(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """The test job of the pushed targets: on each target's own runner (its GPUs), the image pulled by the digest its build
    job pushed, never built again."""
    targets = [t for t in p.targets if pushes(t)]
    steps: list[dict[str, Any]] = [_gate("matrix.gpu != ''")] if any(t.name in gpu for t in targets) else []
    steps += _setup(install)
    steps += [{"uses": "actions/download-artifact@v4", "with": {"name": "envkit-${{ matrix.target }}"}},
              {"name": "self-test, doctor (the pushed digest)",
               "run": "\n".join([_pull_ref("${{ matrix.target }}"), *_test_commands("${{ matrix.target }}", '"$PULL"')]) + "\n"},
              {"name": "test results", "if": "always()", "uses": "actions/upload-artifact@v4",
               "with": {"name": "envkit-test-${{ matrix.target }}", "path": "*-${{ matrix.target }}.xml"}}]
    return {"name": "test ${{ matrix.target }}", "needs": "build", "if": "${{ !cancelled() }}", "runs-on": "${{ matrix.runner }}",
            "strategy": {"fail-fast": False, "matrix": {"include": [_row(t, labels.get(t.name), gpu) for t in targets]}},
            "steps": steps}


def github(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """One matrix job that builds (and tests the targets it does not push); a second that tests the pushed ones by digest."""
    jobs = {"build": _github_build(p, install, labels, gpu)}
    if any(pushes(t) for t in p.targets):
        jobs["test"] = _github_test(p, install, labels, gpu)
    return {"name": "envkit images", "on": {"push": {"branches": ["main"]}, "workflow_dispatch": {}}, "jobs": jobs}


def _groups(targets: list[Target], labels: Mapping[str, Optional[Labels]],
            gpu: Mapping[str, str]) -> list[tuple[Optional[Labels], Optional[str], list[Target]]]:
    """The targets by (runner labels, GPU platform), in the order they first appear."""
    groups: dict[tuple[Optional[Labels], Optional[str]], list[Target]] = {}
    for t in targets:
        groups.setdefault((labels.get(t.name), gpu.get(t.name)), []).append(t)
    return [(k[0], k[1], v) for k, v in groups.items()]


_GPU_GATE = ('test -e "$GPU_NODE" || { echo "target $TARGET needs $GPU GPUs, but this runner has no $GPU_NODE: '
             'run it on a GPU runner ([ci] gpu_runner) whose config.toml has gpus = all"; exit 1; }')


def _gitlab_hidden(stage: str, on_gpu_runner: bool, script: list[str], artifacts: dict[str, Any]) -> dict[str, Any]:
    """A hidden job: CPU jobs build in docker:dind, GPU jobs on their runner's own engine (GITLAB_GPU_RUNNER)."""
    job: dict[str, Any] = {"stage": stage, "image": "docker.io/library/python:3.11"}
    if on_gpu_runner:
        job["variables"] = {"DOCKER_HOST": "unix:///var/run/docker.sock"}
    else:
        job["services"] = ["docker:dind"]
        job["variables"] = {"DOCKER_HOST": "tcp://docker:2375", "DOCKER_TLS_CERTDIR": ""}
    job["script"] = script
    job["artifacts"] = artifacts
    return job


def _gitlab_jobs(doc: dict[str, Any], prefix: str, groups: list[tuple[Optional[Labels], Optional[str], list[Target]]],
                 hidden: Mapping[bool, str]) -> None:
    """One `parallel:matrix` job per (runner labels, platform) group, extending the group's hidden job."""
    for label, platform, targets in groups:
        job: dict[str, Any] = {"extends": hidden[bool(platform)]}
        if label is not None:
            job["tags"] = list(label)
        job["parallel"] = {"matrix": [{"TARGET": t.name, "IMAGE": t.image,
                                       **({"GPU": VENDOR[platform], "GPU_NODE": GPU_NODE[platform]} if platform else {})}
                                      for t in targets]}
        name = prefix if label is None else f"{prefix}-{'-'.join(label)}"
        shared = sum(1 for other, _, _ in groups if other == label) > 1  # CPU and GPU targets on the same runner
        doc[f"{name}-{platform or 'cpu'}" if shared else name] = job


def gitlab(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """Hidden jobs with the steps, and one `parallel:matrix` job per runner label that extends one (`tags:` the labels; the
    targets without one run untagged, on the shared runners). A target that is not pushed builds and tests in one job; a
    pushed one builds and pushes on the CPU runners (stage build), then a job on its own runner pulls the pushed digest,
    from the build job's envkit-push-TARGET.json artifact, and tests it (stage test). GPU jobs start with the GPU gate."""
    junit = {"junit": ["selftest-$TARGET.xml", "doctor-$TARGET.xml"]}
    artifacts = {"when": "always", "reports": junit, "paths": ["envkit-build-$TARGET.json"]}
    here = [t for t in p.targets if not pushes(t)]
    pushed = [t for t in p.targets if pushes(t)]
    doc: dict[str, Any] = {"stages": ["build", "test"] if pushed else ["build"]}
    setup = install_commands(install)
    test_here = _commands(p.path, "$TARGET", "$IMAGE")
    if any(t.name not in gpu for t in here):
        doc[".envkit-build"] = _gitlab_hidden("build", False, [*setup, *test_here], copy.deepcopy(artifacts))
    if any(t.name in gpu for t in here):
        doc[".envkit-gpu"] = _gitlab_hidden("build", True, [_GPU_GATE, *setup, *test_here], copy.deepcopy(artifacts))
    if pushed:
        build_push = [*setup, _build_command(p.path, "$TARGET"), _push_command("$TARGET", "$IMAGE")]
        doc[".envkit-push"] = _gitlab_hidden("build", False, build_push,
                                             {"paths": ["envkit-build-$TARGET.json", "envkit-push-$TARGET.json", SBOM_DIR]})
        test_pulled = [*setup, _pull_ref("$TARGET"), *_test_commands("$TARGET", '"$PULL"')]
        reports = {"when": "always", "reports": junit}
        if any(t.name not in gpu for t in pushed):
            doc[".envkit-test"] = _gitlab_hidden("test", False, test_pulled, copy.deepcopy(reports))
        if any(t.name in gpu for t in pushed):
            doc[".envkit-gpu-test"] = _gitlab_hidden("test", True, [_GPU_GATE, *test_pulled], copy.deepcopy(reports))
    _gitlab_jobs(doc, "envkit-build", _groups(here, labels, gpu), {False: ".envkit-build", True: ".envkit-gpu"})
    if pushed:
        _gitlab_jobs(doc, "envkit-push", _groups(pushed, {t.name: p.ci.runner for t in pushed}, {}), {False: ".envkit-push", True: ""})
        _gitlab_jobs(doc, "envkit-test", _groups(pushed, labels, gpu), {False: ".envkit-test", True: ".envkit-gpu-test"})
    return doc


PLATFORM_OF = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


def _image_for(image: str, machine: str) -> str:
    """An aarch64 build's tag beside the x86_64 one: REPO:TAG-arm64 (each platform's stack is its own context)."""
    if machine == "x86_64":
        return image
    repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "latest")
    return f"{repo}:{tag}-arm64"


def bake(p: Project, contexts: str, machines: Optional[Mapping[str, tuple[str, ...]]] = None) -> dict[str, Any]:
    """Contexts: each target's directory from `envkit generate -o` (mirror targets) or `envkit bundle -o` (offline ones).
    A target whose stack resolves for both CPU architectures gets a linux/arm64 target beside its linux/amd64 one
    (its context generated with --platform-arch aarch64 into CONTEXTS/NAME-arm64)."""
    targets = {}
    for t in p.targets:
        for machine in (machines or {}).get(t.name, ("x86_64",)):
            name = t.name if machine == "x86_64" or "x86_64" not in (machines or {}).get(t.name, ()) else f"{t.name}-arm64"
            targets[name] = {
                "context": f"{contexts}/{name}",
                "dockerfile": "Dockerfile",
                "tags": [_image_for(t.image, machine) if name != t.name else t.image],
                "platforms": [PLATFORM_OF[machine]],
                "network": "none" if t.offline else "default",
                "labels": {"io.envkit.target": t.name},
                **(_registry_cache(t.image) if pushes(t) else {}),
            }
    return {"group": {"default": {"targets": list(targets)}}, "target": targets}


def _registry_cache(image: str) -> dict[str, list[str]]:
    """buildx's registry cache beside a pushed image: REPO:buildcache, every stage's layers (mode=max)."""
    repo = image.rpartition(":")[0] if ":" in image.split("/")[-1] else image
    return {"cache-from": [f"type=registry,ref={repo}:buildcache"], "cache-to": [f"type=registry,ref={repo}:buildcache,mode=max"]}


def plain(p: Project) -> dict[str, Any]:
    return {"schema": 1, "project": p.path,
            "targets": [{"name": t.name, "image": t.image, "offline": t.offline, "mirror": t.mirror, "flags": t.flag_dict()}
                        for t in p.targets]}


def _check_strings(what: str, value: Any) -> None:
    if isinstance(value, str):
        check_text(what, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(what, k)
            _check_strings(what, v)
    elif isinstance(value, list):
        for v in value:
            _check_strings(what, v)


def k8s(p: Project, gpu_targets: Collection[str]) -> str:
    """One YAML document per Job, Deployment and Service (core/k8s.py), for `kubectl apply -f`."""
    docs = k8s_core.manifests(p, gpu_targets)
    for doc in docs:
        _check_strings(f"{doc['kind']} {doc['metadata']['name']}:", doc)
    header = "# Generated by envkit matrix export --format k8s; regenerate, do not edit.\n"
    return header + "---\n".join(yaml_dump(doc) for doc in docs)


def export(p: Project, fmt: str, contexts: str = "envkit-contexts", install: Optional[Install] = None,
           gpu_targets: Collection[str] = (), machines: Optional[Mapping[str, tuple[str, ...]]] = None) -> str:
    """The export's text. github and gitlab need `install` (from [ci] envkit; a wheel already hashed) and the names
    of the targets that need a GPU (from their solutions); every string written is checked first."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "pick one of them")
    check_text("project path", p.path)
    if fmt == "bake":
        check_text("--contexts", contexts)
        return json.dumps(bake(p, contexts, machines), indent=2) + "\n"
    if fmt == "json":
        return json.dumps(plain(p), indent=2) + "\n"
    if fmt == "k8s":
        return k8s(p, gpu_targets)
    if install is None:
        raise missing_install(p)
    check_text("[ci] envkit", install.path if isinstance(install, WheelInstall) else install.text)
    labels = runners(p, gpu_targets)
    gpu = dict(gpu_targets) if isinstance(gpu_targets, Mapping) else {name: "cuda" for name in gpu_targets}
    header = f"# Generated by envkit matrix export --format {fmt}; regenerate, do not edit.\n"
    if fmt == "gitlab" and gpu:
        header += "".join(f"# {line}\n" for line in _wrap(GITLAB_GPU_RUNNER))
    if any(pushes(t) for t in p.targets):
        header += "".join(f"# {line}\n" for line in _wrap(REGISTRY_LOGIN[fmt]))
    return header + yaml_dump(github(p, install, labels, gpu) if fmt == "github" else gitlab(p, install, labels, gpu))


def _wrap(text: str, width: int = 110) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])
