"""The renderer: a pure function from a BuildPlan and the templates in dockerfiles/ to the files of a
build context (Dockerfile, the small scripts it runs, the lock and the plan). Same input, same bytes.

Only the renderer writes Dockerfile syntax: each step payload type has one function that fills its
fragment from dockerfiles/fragments/ (joins, line continuations, argument order).
"""
from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from functools import singledispatch
from string import Template
from typing import Any, Mapping, Optional, Sequence, Union
from urllib.parse import urlsplit

from envkit import __version__
from envkit.core.wheels import pinned_requirements
from envkit.errors import InputError
from envkit.model.lock import LockedWheel
from envkit.model.plan import (
    WHEELHOUSE,
    AptStep,
    BuildPlan,
    CMakeStep,
    CopyFilesStep,
    CopyFromStageStep,
    CopyModelStep,
    CopyVenvStep,
    CopyWheelStep,
    CudaHomeStep,
    EnginePlan,
    EnvStep,
    FillModelRepoStep,
    ImageLabelsStep,
    ImportCheckStep,
    KernelsStep,
    LabelsStep,
    PipStep,
    PythonTarballStep,
    ServerStep,
    ServeStep,
    SiteSettingsStep,
    Step,
    StepPayload,
    UninstallStep,
    VenvStep,
)
from envkit.model.site import BuildSecret, Site

STAGE_WHY = {
    "build": "devel image; compiles what must be compiled, installs everything into one venv",
    "runtime": "runtime image; the venv from the build stage, no compiler",
}
REQUIREMENTS_DIR = "envkit/requirements"  # a pinned lock's requirements file per pip step, in the context
REQUIREMENTS_IN_IMAGE = "/opt/envkit/requirements"
APT_PACKAGE_SEPARATOR = " \\\n        "  # one package a line, continued, aligned under apt-get


@dataclass(frozen=True)
class Templates:
    fragments: Mapping[str, str]
    scripts: Mapping[str, bytes]


def _t(templates: Templates, name: str, **values: str) -> str:
    return Template(templates.fragments[name]).substitute(values)


def label_value(text: str) -> str:
    """A LABEL value's text inside double quotes: backslashes, quotes and $ escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _site_env(plan: BuildPlan) -> bytes:
    return site_env(plan.site, plan.options.offline)


def site_env(s: Site, offline: bool) -> bytes:
    """site.env, read by apply-site.sh: the apt mirror and what to remove of the image's own sources."""
    hosts = sorted(h for h in s.hosts() if h)
    lines = [
        "# envkit site settings, read by apply-site.sh",
        f"OFFLINE={1 if offline else 0}",
        f"REMOVE_VENDOR_LISTS={1 if (s.remove_vendor_lists or offline) else 0}",
    ]
    if not offline and s.apt_mirror:
        lines += [f"APT_MIRROR='{s.apt_mirror}'", f"APT_SECURITY='{s.apt_security or s.apt_mirror}'",
                  f"APT_DEBIAN_SECURITY='{s.apt_security or s.apt_mirror + '-security'}'",
                  "SITE_HOSTS_RE='" + "|".join(f"https?://{re.escape(h)}[:/]" for h in hosts) + "'"]
    return ("\n".join(lines) + "\n").encode()


def _pip_conf(plan: BuildPlan) -> bytes | None:
    return pip_conf(plan.site, plan.options.offline)


def pip_conf(s: Site, offline: bool) -> bytes | None:
    """/etc/pip.conf of a site (or of an offline build: the wheelhouse alone)."""
    if offline:
        return f"[global]\nno-index = true\nfind-links = {WHEELHOUSE}\n".encode()
    if not (s.pip_index or s.extra_index_urls or s.ca_cert):
        return None
    lines = ["[global]"]
    if s.pip_index:
        lines.append(f"index-url = {s.pip_index}")
    if s.extra_index_urls:
        lines.append("extra-index-url = " + " ".join(s.extra_index_urls))
    trusted = sorted(set(s.trusted_hosts) | {urlsplit(u).hostname or "" for u in (s.pip_index, *s.extra_index_urls) if u and u.startswith("http://")})
    if trusted:
        lines.append("trusted-host = " + " ".join(h for h in trusted if h))
    if s.ca_cert:
        lines.append("cert = /etc/ssl/certs/ca-certificates.crt")
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class _Rendering:
    """What a step's text may need beyond its payload."""

    plan: Union[BuildPlan, EnginePlan]
    templates: Templates
    lock_sha256: str
    first_kernels_step: Optional[str]  # the step that copies the sdist and the build script in
    pinned: tuple[str, ...] = ()  # the pip steps that install a pinned lock's requirements file (--require-hashes)

    def fragment(self, name: str, **values: str) -> str:
        return _t(self.templates, name, **values)

    def secrets(self, steps: str) -> tuple[BuildSecret, ...]:
        """The build secrets `steps` ("pip", "apt") mount: the site's, unless offline (nothing is reached then)."""
        return () if self.plan.options.offline else tuple(s for s in self.plan.site.secrets() if s.steps == steps)


SECRET_MOUNT = "--mount=type=secret,id={id},target={target} "
_SECRET_MOUNTED = re.compile(r"--mount=type=secret,id=([A-Za-z0-9._-]+)")


def _mounted(text: str, secrets: tuple[BuildSecret, ...]) -> str:
    """Every RUN of a step's text with the secrets mounted (BuildKit's and Podman's syntax): the file is there while the
    command runs and in no layer. Without secrets the text is unchanged."""
    mounts = "".join(SECRET_MOUNT.format(id=s.id, target=s.target) for s in secrets)
    return re.sub(r"^RUN ", "RUN " + mounts, text, flags=re.M) if mounts else text


def secret_ids(dockerfile_text: str) -> tuple[str, ...]:
    """The ids of the build secrets a Dockerfile mounts, sorted, each once."""
    return tuple(sorted(set(_SECRET_MOUNTED.findall(dockerfile_text))))


@singledispatch
def _payload_text(payload: StepPayload, step: Step, r: _Rendering) -> str:
    raise TypeError(f"step `{step.id}`: no Dockerfile fragment renders {type(payload).__name__}")


@_payload_text.register
def _site(payload: SiteSettingsStep, step: Step, r: _Rendering) -> str:
    return r.fragment("site", stage=payload.stage)


@_payload_text.register
def _apt(payload: AptStep, step: Step, r: _Rendering) -> str:
    packages = APT_PACKAGE_SEPARATOR.join(payload.packages)
    if payload.from_carried_repository:
        return r.fragment("apt-offline", stage=payload.stage, packages=packages)
    return _mounted(r.fragment("apt", packages=packages), r.secrets("apt"))


@_payload_text.register
def _python_tarball(payload: PythonTarballStep, step: Step, r: _Rendering) -> str:
    return r.fragment("python-tarball", tarball=payload.tarball, prefix=payload.prefix)


@_payload_text.register
def _venv(payload: VenvStep, step: Step, r: _Rendering) -> str:
    copy = f"COPY wheelhouse/ {WHEELHOUSE}/\n" if payload.wheelhouse else ""
    return r.fragment("venv", copy_wheelhouse=copy, python=payload.python, venv=payload.venv)


@_payload_text.register
def _pip(payload: PipStep, step: Step, r: _Rendering) -> str:
    if step.id in r.pinned:  # every wheel by its sha256, from the lock; nothing resolved in the build
        requirements = f"{REQUIREMENTS_IN_IMAGE}/{step.id}.txt"
        args = "".join(f"{arg} " for arg in ("--require-hashes", "--no-deps", *payload.pip_source))
        return (f"COPY {REQUIREMENTS_DIR}/{step.id}.txt {REQUIREMENTS_IN_IMAGE}/\n"
                + _mounted(r.fragment("pip", args=args, packages=f"-r {requirements}"), r.secrets("pip")))
    args = "".join(f"{arg} " for arg in payload.pip_source)
    return _mounted(r.fragment("pip", args=args, packages=" ".join(shlex.quote(p) for p in payload.packages)), r.secrets("pip"))


@_payload_text.register
def _copy_wheel(payload: CopyWheelStep, step: Step, r: _Rendering) -> str:
    return r.fragment("copy-wheel", wheel=payload.wheel)


@_payload_text.register
def _kernels(payload: KernelsStep, step: Step, r: _Rendering) -> str:
    prelude = ""
    if step.id == r.first_kernels_step:
        assert isinstance(r.plan, BuildPlan)
        o = r.plan.options
        prelude = (f"COPY sources/{payload.sdist} /opt/envkit/sources/\n"
                   "COPY envkit/build_flash_attn.py /opt/envkit/\n"
                   f"ARG MAX_JOBS={o.max_jobs or ''}\nARG NVCC_THREADS={o.nvcc_threads or ''}\n")
    return r.fragment("kernels", prelude=prelude, sdist=payload.sdist, targets=",".join(payload.targets),
                      arch_list=";".join(payload.arch_list), host_march=payload.host_march,
                      profile="" if payload.profile == "full" else f" --profile {payload.profile}")


@_payload_text.register
def _cmake(payload: CMakeStep, step: Step, r: _Rendering) -> str:
    return r.fragment("cmake", archive=payload.archive, tree=payload.name, target=payload.target, package_dir=payload.package_dir,
                      cmake_args=" ".join(shlex.quote(a) for a in payload.cmake_args))


@_payload_text.register
def _cuda_home(payload: CudaHomeStep, step: Step, r: _Rendering) -> str:
    links = "".join(f" \\\n && ln -s {target} {payload.cuda_home}/{link}" for link, target in payload.links)
    return r.fragment("cuda-home", prefix=payload.prefix, cuda_home=payload.cuda_home, links=links)


@_payload_text.register
def _uninstall(payload: UninstallStep, step: Step, r: _Rendering) -> str:
    remove = f" \\\n && rm -rf {' '.join(payload.paths)}" if payload.paths else ""
    return r.fragment("uninstall", packages=" ".join(payload.packages), remove=remove)


@_payload_text.register
def _env(payload: EnvStep, step: Step, r: _Rendering) -> str:
    return r.fragment("env", env=" ".join(f"{key}={value}" for key, value in payload.env))


@_payload_text.register
def _copy_venv(payload: CopyVenvStep, step: Step, r: _Rendering) -> str:
    prefix = payload.python_prefix
    copy_python = f"COPY --from=build {prefix} {prefix}\n" if prefix else ""
    return r.fragment("copy-venv", copy_python=copy_python, venv=payload.venv)


@_payload_text.register
def _import_check(payload: ImportCheckStep, step: Step, r: _Rendering) -> str:
    return r.fragment("import-check", modules=", ".join(payload.modules))


@_payload_text.register
def _labels(payload: LabelsStep, step: Step, r: _Rendering) -> str:
    plan = r.plan
    assert isinstance(plan, BuildPlan)
    sol_json = json.dumps(plan.solution.to_json(), sort_keys=True, separators=(",", ":"))
    engine = f"{plan.solution.engine.engine} " if plan.solution.engine else ""
    return r.fragment("labels", title=f"envkit {plan.solution.platform} {engine}image", stack=label_value(plan.stack),
                      envkit_version=__version__, lock_sha256=r.lock_sha256, solution_json=label_value(sol_json),
                      base_name=label_value(plan.stages[-1].image),
                      cmd="" if plan.options.serve is not None else 'CMD ["python"]')


@_payload_text.register
def _copy_model(payload: CopyModelStep, step: Step, r: _Rendering) -> str:
    return r.fragment("model", dest=payload.dest)


@_payload_text.register
def _serve(payload: ServeStep, step: Step, r: _Rendering) -> str:
    return r.fragment("serve", uid=str(payload.uid), home=payload.home, port=str(payload.port), health_url=payload.health_url,
                      env=" ".join(f"{key}={value}" for key, value in payload.env),
                      labels=" \\\n      ".join(f'{key}="{label_value(value)}"' for key, value in payload.labels),
                      argv=json.dumps(list(payload.argv)))


@_payload_text.register
def _fill_model_repo(payload: FillModelRepoStep, step: Step, r: _Rendering) -> str:
    if payload.archive is not None:
        source = f"--archive /tmp/envkit/{payload.archive.rpartition('/')[2]}"
    else:
        assert payload.fetch is not None
        source = f"--fetch {shlex.quote(payload.fetch)}" + (" --cafile /tmp/envkit/ca.crt" if payload.cafile else "")
    return r.fragment("model-repo", archive=f"{payload.archive} " if payload.archive else "",
                      cafile="envkit/site/ca.crt " if payload.cafile else "", source=source, out=payload.out)


@_payload_text.register
def _copy_stage(payload: CopyFromStageStep, step: Step, r: _Rendering) -> str:
    return r.fragment("copy-stage", stage=payload.stage, path=payload.path)


@_payload_text.register
def _copy_files(payload: CopyFilesStep, step: Step, r: _Rendering) -> str:
    return r.fragment("copy-files", files=" ".join(payload.files), dest=payload.dest)


@_payload_text.register
def _image_labels(payload: ImageLabelsStep, step: Step, r: _Rendering) -> str:
    return r.fragment("image-labels", labels=" \\\n      ".join(f'{key}="{label_value(value)}"' for key, value in payload.labels))


@_payload_text.register
def _server(payload: ServerStep, step: Step, r: _Rendering) -> str:
    return r.fragment("server", ports=" ".join(str(p) for p in payload.ports), argv=json.dumps(list(payload.argv)))


def _stages_text(stages: Sequence[tuple[str, str, str, tuple[Step, ...]]], rendering: _Rendering) -> str:
    """Every stage (name, FROM image, why, steps): its FROM, then each step under its `# [id] title: why` line."""
    out = []
    for name, image, why, steps in stages:
        out.append(_t(rendering.templates, "from", stage=name, image=image, why=why))
        for step in steps:
            out.append(f"\n# [{step.id}] {step.title}: {step.why}\n")
            out.append(_payload_text(step.payload, step, rendering))
    return "".join(out)


def dockerfile(plan: BuildPlan, templates: Templates, command: str, lock_sha256: str, pinned: tuple[str, ...] = ()) -> str:
    first_kernels = next((st.id for s in plan.stages for st in s.steps if isinstance(st.payload, KernelsStep)), None)
    rendering = _Rendering(plan, templates, lock_sha256, first_kernels, pinned)
    arm = plan.solution.machine == "aarch64"
    stages = [(s.name, f"--platform=linux/arm64 {s.image}" if arm else s.image, STAGE_WHY[s.name], s.steps) for s in plan.stages]
    text = _t(templates, "header", envkit_version=__version__, command=command, stack=plan.stack) + _stages_text(stages, rendering)
    if plan.options.offline:
        check_offline(text)
    return text


ENGINE_PLAN = "envkit/engine.plan.json"


def render_engine(plan: EnginePlan, templates: Templates, command: str) -> dict[str, bytes]:
    """Every file of a container engine's context, by relative path: the Dockerfile from the plan's stages (the same
    fragments, offline check and step lines as every plan's), the plan, and the files it names."""
    rendering = _Rendering(plan, templates, "", None)
    header = _t(templates, "header", envkit_version=__version__, command=command, stack=plan.stack)
    header += "".join(f"# {note}\n" for note in plan.notes)
    text = header + _stages_text([(s.name, s.image, s.why, s.steps) for s in plan.stages], rendering)
    if plan.offline:
        check_offline(text)
    files = {"Dockerfile": text.encode(), ENGINE_PLAN: json_bytes(plan.to_json()), **dict(plan.files)}
    return dict(sorted(files.items()))


def check_offline(text: str) -> None:
    """No `# syntax=` line (BuildKit would pull the frontend) and no URL in any RUN: or refuse, naming the step. A
    HEALTHCHECK that asks the container's own loopback runs in the container, never during the build."""
    if re.match(r"\s*#\s*syntax\s*=", text):
        raise InputError("offline Dockerfile starts with a `# syntax=` line, which makes BuildKit pull its frontend",
                         "remove the line; the engine's built-in frontend needs no network")
    step = "?"
    for instr in re.split(r"(?<!\\)\n(?=\S)", text):
        m = re.match(r"# \[([a-z0-9-]+)\]", instr)
        if m:
            step = m.group(1)
        runtime_loopback = instr.startswith("HEALTHCHECK") and all(
            re.match(r"https?://(127\.0\.0\.1|localhost)[:/]", u) for u in re.findall(r"[a-z][a-z0-9+.-]*://\S+", instr))
        if not re.match(r"(#|LABEL\b)", instr) and not runtime_loopback and re.search(r"[a-z][a-z0-9+.-]*://", instr):
            url = re.search(r"[a-z][a-z0-9+.-]*://\S+", instr)
            raise InputError(f"step `{step}` reaches {url.group(0) if url else 'a URL'} in offline mode",
                             "carry the artifact in the build context (envkit bundle) instead")


# `**/*.part`: an unfinished download at any depth (a bare `*.part` matches the top level only); the
# preflight refuses a bundle that holds one, this keeps one out of a context the preflight does not judge.
DOCKERIGNORE = (b"# the base image tarballs, the manifest, unfinished downloads and envkit's staging stay out of the build context\n"
                b"images/\nmanifest.json\n**/*.part\n.envkit-staging-*\n")


def render(plan: BuildPlan, templates: Templates, command: str, lock: Mapping[str, Any]) -> dict[str, bytes]:
    """Every file of the generated build context, by relative path."""
    lock_bytes = json_bytes(lock)
    lock_sha = hashlib.sha256(lock_bytes).hexdigest()
    pinned = pinned_requirements(plan, tuple(LockedWheel.from_json(w) for w in lock.get("wheels") or ()))
    files: dict[str, bytes] = {
        "Dockerfile": dockerfile(plan, templates, command, lock_sha, tuple(pinned)).encode(),
        "envkit.lock.json": lock_bytes,
        "envkit.plan.json": json_bytes(plan.to_json()),
        "envkit/solution.json": json_bytes(plan.solution.to_json()),
        ".dockerignore": DOCKERIGNORE,
        "envkit/selftest.py": templates.scripts["selftest.py"],
    }
    for step_id, text in pinned.items():
        files[f"{REQUIREMENTS_DIR}/{step_id}.txt"] = text.encode()
    if plan.compiles_kernels:
        files["envkit/build_flash_attn.py"] = templates.scripts["build_flash_attn.py"]
    if any(isinstance(st.payload, SiteSettingsStep) for s in plan.stages for st in s.steps):
        files["envkit/site/apply-site.sh"] = templates.scripts["apply-site.sh"]
        files["envkit/site/site.env"] = _site_env(plan)
        pip_conf = _pip_conf(plan)
        if pip_conf:
            files["envkit/site/pip.conf"] = pip_conf
        if plan.site.ca_cert:
            files["envkit/site/ca.crt"] = plan.site.ca_cert
    return dict(sorted(files.items()))
