"""Docker builds through the SDK: stream the build log, load a bundle's saved images; the build secrets a
context mounts, checked before anything is built."""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from envkit.adapters.engine import ContainerEngine, SecretFiles, available_tools, secrets_builder
from envkit.config.site_file import known_secret, secret_arg
from envkit.config.userfile import read_json
from envkit.core.preflight import diagnose
from envkit.core.render import secret_ids
from envkit.errors import ExternalError, InputError

STEP_IMAGE = re.compile(r"\s*-{2,3}> (?:Using cache )?([0-9a-f]{6,64})\s*$")  # Docker " ---> 3f2a...", Podman "--> 3f2a..."


@dataclass
class BuildResult:
    image_id: Optional[str] = None
    tag: Optional[str] = None
    size: int = 0
    seconds: float = 0.0
    stages: list = field(default_factory=list)  # [(stage, seconds)]
    stage_images: dict = field(default_factory=dict)  # stage -> the image its last step left (its " ---> id" line)
    steps: int = 0
    log: list = field(default_factory=list)

    def close_stage(self, name: Optional[str], seconds: float, image: Optional[str]) -> None:
        """The stage the stream just left: its time, and the image its last step left where the engine named one."""
        if name:
            self.stages.append((name, seconds))
            if image:
                self.stage_images[name] = image


def stream_build(engine: ContainerEngine, context: Path, network: str, buildargs: dict[str, str], on_line: Callable[[str], None],
                 nocache: bool = False, dockerfile: str = "Dockerfile", secrets: SecretFiles = (),
                 target: Optional[str] = None) -> BuildResult:
    res = BuildResult()
    start = time.monotonic()
    stage_start, stage_name = start, None
    last_id: Optional[str] = None
    error = None
    extra: dict[str, Any] = {"secrets": secrets} if secrets else {}  # an engine without secrets to pass is asked as it always was
    if target is not None:
        extra["target"] = target
    for msg in engine.build(context, network=network, buildargs=buildargs, nocache=nocache, dockerfile=dockerfile, **extra):
        if "stream" in msg:
            for line in msg["stream"].splitlines():
                if not line.strip():
                    continue
                res.log.append(line)
                # Docker: "Step 3/22 : FROM img AS build"; Podman/Buildah: "[1/2] STEP 1/10: FROM img AS build"
                m = re.match(r"(?:\[\d+/\d+\] )?Step (\d+)/(\d+) ?: FROM \S+(?: AS (\S+))?", line, re.I)
                if m:
                    now = time.monotonic()
                    res.close_stage(stage_name, now - stage_start, last_id)
                    last_id = None
                    stage_start, stage_name = now, m.group(3) or f"stage{len(res.stages)}"
                if re.match(r"(?:\[\d+/\d+\] )?Step \d+/\d+ ?:", line, re.I):
                    res.steps += 1
                step_image = STEP_IMAGE.match(line)
                if step_image:
                    last_id = step_image.group(1)
                on_line(line)
        elif "error" in msg:
            error = msg.get("error", "")
            res.log.append(error)
            on_line(error)
        elif "aux" in msg and isinstance(msg["aux"], dict) and "ID" in msg["aux"]:
            res.image_id = msg["aux"]["ID"]
    end = time.monotonic()
    res.close_stage(stage_name, end - stage_start, last_id)
    res.seconds = end - start
    if res.image_id is None and error is None:
        m = next((re.match(r"Successfully built ([0-9a-f]+)", l) for l in reversed(res.log) if l.startswith("Successfully built")), None)
        if m:
            res.image_id = m.group(1)
    if error is not None or res.image_id is None:
        text = "\n".join(res.log[-400:])
        d = diagnose(text)
        first = (error or "the build produced no image").strip().splitlines()[0][:240]
        if d:
            cause, fix, evidence = d
            raise ExternalError(f"build failed: {cause}: {evidence}", fix)
        raise ExternalError(f"build failed: {first}", "read the log above; nothing was tagged")
    return res


def engine_resources(engine: ContainerEngine) -> tuple[Optional[int], Optional[int]]:
    """(free disk where the engine keeps images, engine memory), from one `docker info`; None where unknown."""
    try:
        info = engine.info()
    except Exception:
        return None, None
    root = info.get("DockerRootDir") or "/var/lib/docker"
    disk = None
    if os.environ.get("DOCKER_HOST", "unix://").startswith("unix://") and Path(root).exists():
        disk = shutil.disk_usage(root).free  # only a local engine's disk is ours to measure
    return disk, int(info.get("MemTotal") or 0) or None


def load_images(engine: ContainerEngine, context: Path, say: Callable[[str], None]) -> None:
    mf = context / "manifest.json"
    if not mf.is_file():
        return
    for img in read_json(str(mf), "bundle manifest", "run envkit bundle again").get("images", []):  # verified by the preflight
        if engine.has_image(img["ref"]) and engine.image_id(img["ref"]) == img.get("id"):
            say(f"base image {img['ref']} already on the engine (same id as the bundle's)")
            continue
        if engine.has_image(img["ref"]):
            say(f"{img['ref']} on this engine is not the bundle's image: loading the bundle's")
        say(f"docker load {img['file']}")
        loaded = engine.load(context / img["file"])
        if not engine.has_image(img["ref"]) or engine.image_id(img["ref"]) != img.get("id"):
            # Podman names unqualified archive tags localhost/...: the archive still holds the image, so name it as planned.
            if len(loaded) != 1:
                tags = ", ".join(t for _, ts in loaded for t in ts) or "no tags"
                raise ExternalError(f"{img['file']} did not provide {img['ref']} (it holds {tags})",
                                    "re-run envkit bundle to save the base image again")
            engine.tag(loaded[0][0], img["ref"])
            say(f"tagged the loaded image {loaded[0][0][:19]} as {img['ref']}")


def check_build_secrets(engine: ContainerEngine, context: Path, specs: tuple[str, ...],
                        dockerfile: str = "Dockerfile") -> SecretFiles:
    """The secrets the build passes, as (id, file), checked before anything is built: each `--secret` a secret the
    Dockerfile mounts, each one it mounts given, an engine that can pass them (else the one-line refusal naming the
    ways that can), each file readable and outside the build context. No file's content is read."""
    wanted = secret_ids((context / dockerfile).read_text(encoding="utf-8", errors="replace"))
    given: dict[str, str] = {}
    for spec in specs:
        ident, src = secret_arg(spec)
        if ident in given:
            raise InputError(f"--secret {ident} is given twice", "give each secret once")
        given[ident] = src
    if not wanted and not given:
        return ()
    unknown = sorted(set(given) - set(wanted))
    if unknown:
        mounts = f"it mounts {', '.join(wanted)}" if wanted else "it mounts none"
        raise InputError(f"--secret {unknown[0]}: no step of {context / dockerfile} mounts it ({mounts})",
                         "drop it; the site file asks for a secret with [pip] netrc = true or [apt] netrc = true")
    secrets_builder(engine.info(), available_tools())
    missing = [ident for ident in wanted if ident not in given]
    if missing:
        secret = known_secret(missing[0])
        asked = f" ({secret.key} = true in the site file)" if secret else ""
        raise InputError(f"the build mounts the secret `{missing[0]}`{asked} and no --secret gives it",
                         f"pass --secret {missing[0]}=FILE" + (f", {secret.what}" if secret else ""))
    return tuple((ident, _secret_file(ident, given[ident], context)) for ident in wanted)


def _secret_file(ident: str, src: str, context: Path) -> str:
    path = Path(src).expanduser().absolute()
    if not path.is_file() or not os.access(path, os.R_OK):
        raise InputError(f"--secret {ident}: {path} is not a readable file", "give the path of the file that holds the login")
    if path.stat().st_size == 0:
        raise InputError(f"--secret {ident}: {path} is empty", "give the file that holds the login")
    if path.resolve().is_relative_to(context.resolve()):
        raise InputError(f"--secret {ident}: {path} lies inside the build context {context}, which is sent to the engine whole",
                         "keep the file outside the build context (e.g. ~/.netrc)")
    return str(path)
