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


def _commands(project_path: str, target: str, image: str) -> list[str]:
    project_path = shlex.quote(project_path)
    return [f"envkit build --project {project_path} --target {target} --json > envkit-build-{target}.json",
            f"envkit selftest --image {image} --junit selftest-{target}.xml",
            f"envkit inspect {image} --junit doctor-{target}.xml"]


def _runs_on(labels: Optional[Labels]) -> Union[str, list[str]]:
    if not labels:
        return GITHUB_DEFAULT_RUNNER
    return labels[0] if len(labels) == 1 else list(labels)


def github(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """One matrix job; a GPU target's row names its platform, and its first step fails on a runner without the GPUs."""
    include = [{"target": t.name, "image": t.image, "runner": _runs_on(labels.get(t.name)),
                **({"gpu": gpu[t.name], "gpu_node": GPU_NODE[gpu[t.name]]} if t.name in gpu else {})} for t in p.targets]
    steps: list[dict[str, Any]] = []
    if gpu:
        steps.append({"name": "the runner's GPUs", "if": "matrix.gpu != ''",
                      "run": "test -e \"${{ matrix.gpu_node }}\" || { echo \"::error::target ${{ matrix.target }} needs "
                             "${{ matrix.gpu }} GPUs, but runner $RUNNER_NAME has no ${{ matrix.gpu_node }}: run it on a "
                             "self-hosted runner with them ([ci] gpu_runner)\"; exit 1; }\n"})
    steps += [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {"name": f"install envkit ({DISTRIBUTION})", "run": "\n".join(install_commands(install)) + "\n"},
        {"name": "build, self-test, doctor", "run": "\n".join(_commands(p.path, "${{ matrix.target }}", "${{ matrix.image }}")) + "\n"},
        {"name": "test results", "if": "always()", "uses": "actions/upload-artifact@v4",
         "with": {"name": "envkit-${{ matrix.target }}", "path": "*-${{ matrix.target }}.xml\nenvkit-build-${{ matrix.target }}.json"}},
    ]
    return {
        "name": "envkit images",
        "on": {"push": {"branches": ["main"]}, "workflow_dispatch": {}},
        "jobs": {"build": {"name": "build ${{ matrix.target }}", "runs-on": "${{ matrix.runner }}",
                           "strategy": {"fail-fast": False, "matrix": {"include": include}}, "steps": steps}},
    }


def _groups(p: Project, labels: Mapping[str, Optional[Labels]],
            gpu: Mapping[str, str]) -> list[tuple[Optional[Labels], Optional[str], list[Target]]]:
    """The targets by (runner labels, GPU platform), in the order they first appear."""
    groups: dict[tuple[Optional[Labels], Optional[str]], list[Target]] = {}
    for t in p.targets:
        groups.setdefault((labels.get(t.name), gpu.get(t.name)), []).append(t)
    return [(k[0], k[1], v) for k, v in groups.items()]


def gitlab(p: Project, install: Install, labels: Mapping[str, Optional[Labels]], gpu: Mapping[str, str]) -> dict[str, Any]:
    """One hidden job with the steps, and one `parallel:matrix` job per runner label that extends it (`tags:` the
    labels; the targets without one run untagged, on the shared runners). CPU targets build in docker:dind; GPU
    targets on their runner's own engine (GITLAB_GPU_RUNNER), each job's first command the GPU gate."""
    artifacts = {"when": "always", "reports": {"junit": ["selftest-$TARGET.xml", "doctor-$TARGET.xml"]},
                 "paths": ["envkit-build-$TARGET.json"]}
    doc: dict[str, Any] = {"stages": ["build"]}
    if any(t.name not in gpu for t in p.targets):
        doc[".envkit-build"] = {
            "stage": "build",
            "image": "docker.io/library/python:3.11",
            "services": ["docker:dind"],
            "variables": {"DOCKER_HOST": "tcp://docker:2375", "DOCKER_TLS_CERTDIR": ""},
            "script": [*install_commands(install), *_commands(p.path, "$TARGET", "$IMAGE")],
            "artifacts": copy.deepcopy(artifacts),
        }
    if gpu:
        doc[".envkit-gpu"] = {
            "stage": "build",
            "image": "docker.io/library/python:3.11",
            "variables": {"DOCKER_HOST": "unix:///var/run/docker.sock"},
            "script": ['test -e "$GPU_NODE" || { echo "target $TARGET needs $GPU GPUs, but this runner has no $GPU_NODE: '
                       'run it on a GPU runner ([ci] gpu_runner) whose config.toml has gpus = all"; exit 1; }',
                       *install_commands(install), *_commands(p.path, "$TARGET", "$IMAGE")],
            "artifacts": copy.deepcopy(artifacts),
        }
    groups = _groups(p, labels, gpu)
    for label, platform, targets in groups:
        job: dict[str, Any] = {"extends": ".envkit-gpu" if platform else ".envkit-build"}
        if label is not None:
            job["tags"] = list(label)
        job["parallel"] = {"matrix": [{"TARGET": t.name, "IMAGE": t.image,
                                       **({"GPU": VENDOR[platform], "GPU_NODE": GPU_NODE[platform]} if platform else {})}
                                      for t in targets]}
        name = "envkit-build" if label is None else f"envkit-build-{'-'.join(label)}"
        shared = sum(1 for other, _, _ in groups if other == label) > 1  # CPU and GPU targets on the same runner
        doc[f"{name}-{platform or 'cpu'}" if shared else name] = job
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
            }
    return {"group": {"default": {"targets": list(targets)}}, "target": targets}


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
