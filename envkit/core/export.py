"""CI exports of a project's targets (pure): a GitHub Actions workflow, a GitLab CI file with
`parallel:matrix`, a `docker buildx bake` file and plain JSON. Same targets, same bytes."""
from __future__ import annotations

import json
import re
import shlex
from typing import Any

from envkit.model.project import Project

FORMATS = ("github", "gitlab", "bake", "json")
PIP_SPEC = "envkit"


def yaml_dump(obj: Any, indent: int = 0) -> str:
    """Block-style YAML for dicts, lists and scalars; strings are JSON-quoted unless plainly safe."""
    pad = "  " * indent

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, (int, float)):
            return json.dumps(v)
        s = str(v)
        if re.fullmatch(r"[A-Za-z_/][A-Za-z0-9_./-]*", s) and s.lower() not in ("true", "false", "null", "yes", "no", "on", "off"):
            return s
        return json.dumps(s, ensure_ascii=False)

    lines = []
    if isinstance(obj, dict):
        if not obj:
            return pad + "{}\n"
        for k, v in obj.items():
            key = scalar(k)
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{key}:\n{yaml_dump(v, indent + 1)}")
            else:
                lines.append(f"{pad}{key}: {scalar(v) if not isinstance(v, (dict, list)) else ('{}' if isinstance(v, dict) else '[]')}\n")
    elif isinstance(obj, list):
        if not obj:
            return pad + "[]\n"
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                inner = yaml_dump(v, indent + 1)
                lines.append(f"{pad}- {inner.lstrip()}")
            elif isinstance(v, (dict, list)):
                lines.append(f"{pad}- {'{}' if isinstance(v, dict) else '[]'}\n")
            else:
                lines.append(f"{pad}- {scalar(v)}\n")
    else:
        lines.append(pad + scalar(obj) + "\n")
    return "".join(lines)


def _commands(project_path: str, target: str, image: str) -> list[str]:
    project_path = shlex.quote(project_path)
    return [f"envkit build --project {project_path} --target {target} --json > envkit-build-{target}.json",
            f"envkit selftest --image {image} --junit selftest-{target}.xml",
            f"envkit inspect {image} --junit doctor-{target}.xml"]


def github(p: Project) -> dict[str, Any]:
    return {
        "name": "envkit images",
        "on": {"push": {"branches": ["main"]}, "workflow_dispatch": {}},
        "jobs": {
            "build": {
                "name": "build ${{ matrix.target }}",
                "runs-on": "ubuntu-latest",
                "strategy": {"fail-fast": False, "matrix": {"include": [{"target": t.name, "image": t.image} for t in p.targets]}},
                "steps": [
                    {"uses": "actions/checkout@v4"},
                    {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
                    {"name": "install envkit", "run": f"pip install {PIP_SPEC}"},
                    {"name": "build, self-test, doctor", "run": "\n".join(_commands(p.path, "${{ matrix.target }}", "${{ matrix.image }}"))},
                    {"name": "test results", "if": "always()", "uses": "actions/upload-artifact@v4",
                     "with": {"name": "envkit-${{ matrix.target }}", "path": "*-${{ matrix.target }}.xml\nenvkit-build-${{ matrix.target }}.json"}},
                ],
            }
        },
    }


def gitlab(p: Project) -> dict[str, Any]:
    return {
        "stages": ["build"],
        "envkit-build": {
            "stage": "build",
            "image": "docker.io/library/python:3.11",
            "services": ["docker:dind"],
            "variables": {"DOCKER_HOST": "tcp://docker:2375", "DOCKER_TLS_CERTDIR": ""},
            "parallel": {"matrix": [{"TARGET": t.name, "IMAGE": t.image} for t in p.targets]},
            "script": [f"pip install {PIP_SPEC}", *_commands(p.path, "$TARGET", "$IMAGE")],
            "artifacts": {"when": "always", "reports": {"junit": ["selftest-$TARGET.xml", "doctor-$TARGET.xml"]},
                          "paths": ["envkit-build-$TARGET.json"]},
        },
    }


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


def export(p: Project, fmt: str, contexts: str = "envkit-contexts") -> str:
    if fmt == "github":
        return "# Generated by envkit matrix export --format github; regenerate, do not edit.\n" + yaml_dump(github(p))
    if fmt == "gitlab":
        return "# Generated by envkit matrix export --format gitlab; regenerate, do not edit.\n" + yaml_dump(gitlab(p))
    if fmt == "bake":
        return json.dumps(bake(p, contexts), indent=2) + "\n"
    return json.dumps(plain(p), indent=2) + "\n"
