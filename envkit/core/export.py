"""CI exports of a project's targets (pure): a GitHub Actions workflow, a GitLab CI file with
`parallel:matrix`, a `docker buildx bake` file, plain JSON and Kubernetes manifests (core/k8s.py). Same targets,
same bytes.

The YAML is written by PyYAML (safe_dump, multi-line commands as `|` blocks). Every string that reaches an
export is first checked to hold no control character and no undecodable byte, so what is written always
parses back to the same values. The CI jobs install envkit as the project file's [ci] envkit says (a wheel
whose sha256 the job checks first, or a VCS URL at a tag or commit), never by the name `envkit`."""
from __future__ import annotations

import json
import posixpath
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


def _literal_str(dumper: Any, value: str) -> Any:
    """Multi-line strings (the commands of a step) as `|` blocks; PyYAML quotes them where a block cannot hold them."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


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


def runners(p: Project, gpu_targets: Collection[str]) -> dict[str, Optional[str]]:
    """Each target's runner label: its own `runner`, else [ci] gpu_runner for a GPU target and [ci] runner
    for a CPU one (None: the CI system's default). A GPU target with no label is refused: on the CI system's
    default runner its self-test would find no GPU."""
    out: dict[str, Optional[str]] = {}
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


def github(p: Project, install: Install, labels: Mapping[str, Optional[str]]) -> dict[str, Any]:
    include = [{"target": t.name, "image": t.image, "runner": labels.get(t.name) or GITHUB_DEFAULT_RUNNER} for t in p.targets]
    return {
        "name": "envkit images",
        "on": {"push": {"branches": ["main"]}, "workflow_dispatch": {}},
        "jobs": {
            "build": {
                "name": "build ${{ matrix.target }}",
                "runs-on": "${{ matrix.runner }}",
                "strategy": {"fail-fast": False, "matrix": {"include": include}},
                "steps": [
                    {"uses": "actions/checkout@v4"},
                    {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
                    {"name": f"install envkit ({DISTRIBUTION})", "run": "\n".join(install_commands(install)) + "\n"},
                    {"name": "build, self-test, doctor",
                     "run": "\n".join(_commands(p.path, "${{ matrix.target }}", "${{ matrix.image }}")) + "\n"},
                    {"name": "test results", "if": "always()", "uses": "actions/upload-artifact@v4",
                     "with": {"name": "envkit-${{ matrix.target }}", "path": "*-${{ matrix.target }}.xml\nenvkit-build-${{ matrix.target }}.json"}},
                ],
            }
        },
    }


def _groups(p: Project, labels: Mapping[str, Optional[str]]) -> list[tuple[Optional[str], list[Target]]]:
    """The targets by runner label, in the order the labels first appear."""
    groups: dict[Optional[str], list[Target]] = {}
    for t in p.targets:
        groups.setdefault(labels.get(t.name), []).append(t)
    return list(groups.items())


def gitlab(p: Project, install: Install, labels: Mapping[str, Optional[str]]) -> dict[str, Any]:
    """One hidden job with the steps, and one `parallel:matrix` job per runner label that extends it (`tags:` the
    label; the targets without one run untagged, on the shared runners)."""
    doc: dict[str, Any] = {
        "stages": ["build"],
        ".envkit-build": {
            "stage": "build",
            "image": "docker.io/library/python:3.11",
            "services": ["docker:dind"],
            "variables": {"DOCKER_HOST": "tcp://docker:2375", "DOCKER_TLS_CERTDIR": ""},
            "script": [*install_commands(install), *_commands(p.path, "$TARGET", "$IMAGE")],
            "artifacts": {"when": "always", "reports": {"junit": ["selftest-$TARGET.xml", "doctor-$TARGET.xml"]},
                          "paths": ["envkit-build-$TARGET.json"]},
        },
    }
    for label, targets in _groups(p, labels):
        job: dict[str, Any] = {"extends": ".envkit-build"}
        if label is not None:
            job["tags"] = [label]
        job["parallel"] = {"matrix": [{"TARGET": t.name, "IMAGE": t.image} for t in targets]}
        doc["envkit-build" if label is None else f"envkit-build-{label}"] = job
    return doc


def bake(p: Project, contexts: str) -> dict[str, Any]:
    """Contexts: each target's directory from `envkit generate -o` (mirror targets) or `envkit bundle -o` (offline ones)."""
    targets = {}
    for t in p.targets:
        targets[t.name] = {
            "context": f"{contexts}/{t.name}",
            "dockerfile": "Dockerfile",
            "tags": [t.image],
            "network": "none" if t.offline else "default",
            "labels": {"io.envkit.target": t.name},
        }
    return {"group": {"default": {"targets": [t.name for t in p.targets]}}, "target": targets}


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
           gpu_targets: Collection[str] = ()) -> str:
    """The export's text. github and gitlab need `install` (from [ci] envkit; a wheel already hashed) and the names
    of the targets that need a GPU (from their solutions); every string written is checked first."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "pick one of them")
    check_text("project path", p.path)
    if fmt == "bake":
        check_text("--contexts", contexts)
        return json.dumps(bake(p, contexts), indent=2) + "\n"
    if fmt == "json":
        return json.dumps(plain(p), indent=2) + "\n"
    if fmt == "k8s":
        return k8s(p, gpu_targets)
    if install is None:
        raise missing_install(p)
    check_text("[ci] envkit", install.path if isinstance(install, WheelInstall) else install.text)
    labels = runners(p, gpu_targets)
    header = f"# Generated by envkit matrix export --format {fmt}; regenerate, do not edit.\n"
    return header + yaml_dump(github(p, install, labels) if fmt == "github" else gitlab(p, install, labels))
