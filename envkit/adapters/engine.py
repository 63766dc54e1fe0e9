"""The container engine adapter: the Docker SDK against DOCKER_HOST (Docker Engine, or Podman's
Docker-compatible socket). Thin on purpose: everything else gets plain values from here."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Protocol

from envkit.errors import ExternalError, InputError

Volumes = dict[str, dict[str, str]]


class ContainerEngine(Protocol):
    """What the use cases ask of a container engine; Engine is the Docker SDK's, a test may pass its own."""

    def info(self) -> dict[str, Any]: ...
    def has_image(self, ref: str) -> bool: ...
    def require_image(self, ref: str) -> None: ...
    def image_id(self, ref: str) -> str: ...
    def labels(self, ref: str) -> dict[str, str]: ...
    def pull(self, ref: str) -> None: ...
    def save(self, ref: str, dest: Path, progress: Optional[Callable[[int], None]] = None) -> None: ...
    def load(self, path: Path) -> list[tuple[str, list[str]]]: ...
    def run(self, image: str, command: list[str], volumes: Volumes, network: str = "bridge") -> tuple[int, str]: ...
    def run_with_gpus(self, image: str, command: list[str], volumes: Optional[Volumes] = None) -> tuple[int, str, str, bool]: ...
    def build(self, context: Path, *, network: str, buildargs: dict[str, str], nocache: bool = False,
              dockerfile: str = "Dockerfile") -> Iterator[dict[str, Any]]: ...
    def tag(self, image_id: str, ref: str) -> None: ...
    def size(self, ref: str) -> int: ...


class Engine:
    def __init__(self, client) -> None:
        self.client = client

    @classmethod
    def connect(cls) -> "Engine":
        try:
            import docker
        except ImportError:  # pragma: no cover
            raise ExternalError("the docker Python SDK is not installed", "pip install docker") from None
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except Exception as exc:  # the SDK raises many kinds for one cause: nobody answers
            raise ExternalError(f"no container engine answers at {host} ({type(exc).__name__})",
                                "start one (./scripts/start-docker.sh, or `podman system service`) or set DOCKER_HOST") from None
        return cls(client)

    def info(self) -> dict:
        return self.client.info()

    def has_image(self, ref: str) -> bool:
        import docker.errors

        try:
            self.client.images.get(ref)
            return True
        except docker.errors.ImageNotFound:
            return False

    def require_image(self, ref: str) -> None:
        """For commands that run an image the user named: it must be on this engine already."""
        if not self.has_image(ref):
            raise InputError(f"image {ref} is not on this engine", "build it (envkit build) or pull/load it first")

    def image_id(self, ref: str) -> str:
        return str(self.client.images.get(ref).id)

    def labels(self, ref: str) -> dict[str, str]:
        return dict(self.client.images.get(ref).labels or {})

    def pull(self, ref: str) -> None:
        self.client.images.pull(ref)

    def save(self, ref: str, dest: Path, progress: Optional[Callable[[int], None]] = None) -> None:
        part = dest.with_name(dest.name + ".part")
        done = 0
        with part.open("wb") as f:
            for chunk in self.client.images.get(ref).save(named=True):
                f.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done)
        os.replace(part, dest)

    def load(self, path: Path) -> list[tuple[str, list[str]]]:
        """(image id, tags) of each image in a `docker save` archive."""
        with path.open("rb") as f:
            images = self.client.images.load(f)
        return [(img.id, list(img.tags)) for img in images]

    def run(self, image: str, command: list[str], volumes: dict[str, dict], network: str = "bridge") -> tuple[int, str]:
        c = self.client.containers.run(image, command, volumes=volumes, network_mode=network, detach=True)
        try:
            rc = c.wait()["StatusCode"]
            logs = c.logs().decode(errors="replace")
        finally:
            c.remove(force=True)
        return rc, logs

    def run_with_gpus(self, image: str, command: list[str], volumes: Optional[dict] = None) -> tuple[int, str, str, bool]:
        """Run with the network off and every GPU passed in where the engine has a GPU runtime, else without:
        (exit status, stdout, stderr, whether the GPUs were passed)."""
        import docker.types

        kw = dict(network_mode="none", volumes=volumes or {})
        gpus = True
        try:
            c = self.client.containers.create(image, command, device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])], **kw)
            try:
                c.start()
            except Exception:
                c.remove(force=True)
                raise
        except Exception:  # no GPU runtime on this engine
            gpus = False
            try:
                c = self.client.containers.create(image, command, **kw)
                c.start()
            except Exception as exc:
                raise ExternalError(f"the engine could not start {image}: {str(exc)[:300]}",
                                    "check the image exists and the mounted paths are readable") from None
        try:
            rc = c.wait()["StatusCode"]
            out = c.logs(stderr=False).decode(errors="replace")
            err = c.logs(stdout=False).decode(errors="replace")
        finally:
            c.remove(force=True)
        return rc, out, err, gpus

    def build(self, context: Path, *, network: str, buildargs: dict[str, str], nocache: bool = False,
              dockerfile: str = "Dockerfile") -> Iterator[dict]:
        """The legacy /build endpoint (what the SDK speaks): a stream of JSON messages."""
        return self.client.api.build(path=str(context), dockerfile=dockerfile, network_mode=network, rm=True, forcerm=True,
                                     decode=True, buildargs=buildargs, pull=False, nocache=nocache)

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        self.client.images.get(image_id).tag(repo, tag or "latest")

    def size(self, ref: str) -> int:
        return int(self.client.images.get(ref).attrs.get("Size", 0))
