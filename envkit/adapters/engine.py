"""The container engine adapter: the Docker SDK against DOCKER_HOST (Docker Engine, or Podman's
Docker-compatible socket). Thin on purpose: everything else gets plain values from here.

A build that mounts secrets cannot go through the SDK (its legacy /build endpoint has no secrets): it runs
`podman --remote build --secret ...` against the same Podman service, or `docker buildx build --secret ...`
where buildx is installed; on Docker's legacy builder alone it is refused before anything is built."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping, Optional, Protocol

from envkit.errors import ExternalError, InputError, PreflightError
from envkit.model.container import ContainerSpec, GpuAccess

Volumes = dict[str, dict[str, str]]
SecretFiles = tuple[tuple[str, str], ...]  # (id, absolute path of the file): the file's content is never read here
DEFAULT_HOST = "unix:///var/run/docker.sock"
PODMAN_SERVICE = "podman system service --time=0 unix:///run/podman.sock"


def split_ref(ref: str) -> tuple[str, str]:
    """(repository, tag) of an image reference; a registry's port is not a tag, and no tag means "latest"."""
    repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    return repo, tag or "latest"


class ContainerEngine(Protocol):
    """What the use cases ask of a container engine; Engine is the Docker SDK's, a test may pass its own."""

    def info(self) -> dict[str, Any]: ...
    def has_image(self, ref: str) -> bool: ...
    def require_image(self, ref: str) -> None: ...
    def image_id(self, ref: str) -> str: ...
    def repo_digests(self, ref: str) -> list[str]: ...
    def labels(self, ref: str) -> dict[str, str]: ...
    def pull(self, ref: str) -> None: ...
    def save(self, ref: str, dest: Path, progress: Optional[Callable[[int], None]] = None) -> None: ...
    def load(self, path: Path) -> list[tuple[str, list[str]]]: ...
    def run(self, image: str, command: list[str], volumes: Volumes, network: str = "bridge", stderr: bool = True) -> tuple[int, str]: ...
    def relabel(self, image: str, labels: Mapping[str, str]) -> str: ...
    def info_or_none(self) -> Optional[dict[str, Any]]: ...
    def run_container(self, spec: ContainerSpec) -> tuple[int, str, str, bool, str]: ...
    def build(self, context: Path, *, network: str, buildargs: dict[str, str], nocache: bool = False,
              dockerfile: str = "Dockerfile", secrets: SecretFiles = (), target: Optional[str] = None) -> Iterator[dict[str, Any]]: ...
    def copy_out(self, image: str, path: str, dest: Path) -> list[str]: ...
    def tag(self, image_id: str, ref: str) -> None: ...
    def untag(self, ref: str) -> None: ...
    def size(self, ref: str) -> int: ...
    def image_attrs(self, ref: str) -> dict[str, Any]: ...
    def start_internal(self, spec: ContainerSpec) -> tuple[bool, str]: ...
    def container_state(self, name: str) -> tuple[str, Optional[str], Optional[str]]: ...
    def container_logs(self, name: str, tail: int = 30) -> str: ...
    def container_user(self, name: str) -> str: ...
    def stop_internal(self, name: str, network: str) -> None: ...


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
        client = None
        try:
            if host.startswith("unix://") and not os.path.exists(host[len("unix://"):]):
                raise FileNotFoundError(host)  # nobody listens: say so before the SDK opens (and leaks) a socket
            client = docker.from_env(timeout=600)
            client.ping()
        except Exception:  # the SDK raises many kinds for one cause: nobody answers
            if client is not None:
                client.close()
            raise ExternalError(f"no container engine answers at {host}",
                                "start Docker (systemctl start docker) or Podman's service (podman system service --time=0 "
                                "unix:///run/podman.sock) and point DOCKER_HOST at its socket") from None
        return cls(client)

    def info(self) -> dict:
        return self.client.info()

    def has_image(self, ref: str) -> bool:
        import docker.errors

        if not ref.strip():
            return False
        try:
            self.client.images.get(ref)
            return True
        except (docker.errors.ImageNotFound, docker.errors.NullResource):
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 400:  # the engine cannot parse it as a reference
                raise InputError(f"{ref!r} is not an image reference ({str(exc.explanation)[:200]})",
                                 "name the image as REPOSITORY[:TAG] or by its ID") from None
            raise

    def require_image(self, ref: str) -> None:
        """For commands that run an image the user named: it must be on this engine already, or be named by its digest
        (REPO@sha256:..., what envkit push prints), which is pulled: a digest names one image, as `docker run` reads it."""
        if not ref.strip():
            raise InputError("no image named (an empty image reference)", "name the image as REPOSITORY[:TAG] or by its ID")
        if self.has_image(ref):
            return
        if re.search(r"@sha256:[0-9a-f]{64}$", ref):
            try:
                self.client.images.pull(ref)
                return
            except Exception as exc:  # the SDK raises many kinds for one cause: the registry did not give it
                raise InputError(f"image {ref} is not on this engine, and pulling it failed: {str(exc)[:200]}",
                                 "check the registry's address and login (docker login), or load the image first") from None
        raise InputError(f"image {ref} is not on this engine", "build it (envkit build) or pull/load it first")

    def image_id(self, ref: str) -> str:
        return str(self.client.images.get(ref).id)

    def repo_digests(self, ref: str) -> list[str]:
        """The registry digests (name@sha256:...) the engine knows for the image; none for one made locally."""
        return [str(d) for d in self.client.images.get(ref).attrs.get("RepoDigests") or []]

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

    def run(self, image: str, command: list[str], volumes: dict[str, dict], network: str = "bridge",
            stderr: bool = True) -> tuple[int, str]:
        """Run a command in a new container and remove it: its exit status and output (stdout, and stderr unless not). The
        command is run as given, whatever ENTRYPOINT the image sets (a serving image's is its server)."""
        c = self.client.containers.run(image, command[1:], entrypoint=command[:1], volumes=volumes, network_mode=network, detach=True)
        try:
            rc = c.wait()["StatusCode"]
            logs = c.logs(stdout=True, stderr=stderr).decode(errors="replace")
        finally:
            c.remove(force=True)
        return rc, logs

    def info_or_none(self) -> Optional[dict[str, Any]]:
        try:
            return dict(self.client.info())
        except Exception:
            return None

    @staticmethod
    def _gpu_kwargs(gpu: GpuAccess) -> dict[str, Any]:
        """The SDK's create() arguments for a GpuAccess: the device request of `--gpus all`; CDI names as a `cdi` device
        request (what `docker run --device nvidia.com/gpu=all` sends, and the only GPU request Podman's API honours);
        device nodes at the same path; groups; security options. `runtime` is not needed: both engines take the same."""
        import docker.types

        kw: dict[str, Any] = {}
        requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpu.device_request else []
        devices = [f"{d}:{d}:rwm" for d in gpu.devices]
        if gpu.cdi:
            requests.append(docker.types.DeviceRequest(driver="cdi", device_ids=list(gpu.cdi)))
        if requests:
            kw["device_requests"] = requests
        if devices:
            kw["devices"] = devices
        if gpu.group_add:
            kw["group_add"] = list(gpu.group_add)
        if gpu.security_opt:
            kw["security_opt"] = list(gpu.security_opt)
        return kw

    def _create_started(self, spec: ContainerSpec, gpu: bool, **extra: Any) -> Any:
        binds = [*spec.volumes, *((h, c, "ro") for h, c in spec.gpu.binds)] if gpu else list(spec.volumes)
        kw: dict[str, Any] = dict(network_mode=spec.network, volumes={h: {"bind": c, "mode": m} for h, c, m in binds},
                                  environment=dict(spec.env), **extra)
        if spec.shm_size:
            kw["shm_size"] = spec.shm_size
        if spec.name:
            kw["name"] = spec.name
        if gpu:
            kw.update(self._gpu_kwargs(spec.gpu))
        if spec.command:  # the command as given, whatever ENTRYPOINT the image sets (a serving image's is its server)
            kw["entrypoint"] = list(spec.command[:1])
        c = self.client.containers.create(spec.image, list(spec.command[1:]) if spec.command else None, **kw)
        try:
            c.start()
        except Exception:
            c.remove(force=True)
            raise
        return c

    def start(self, spec: ContainerSpec, **extra: Any) -> tuple[Any, str]:
        """Create and start `spec`'s container with its GPU access; where the engine refuses the GPUs (no nvidia runtime,
        no CDI spec, a device it cannot open) the same container without them. (container, the engine's refusal or "")."""
        refusal = ""
        if spec.gpu.passes:
            try:
                return self._create_started(spec, True, **extra), ""
            except Exception as exc:
                refusal = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300] or type(exc).__name__
        try:
            return self._create_started(spec, False, **extra), refusal
        except Exception as exc:
            raise ExternalError(f"the engine could not start {spec.image}: {str(exc)[:300]}",
                                "check the image exists and the mounted paths are readable") from None

    def run_container(self, spec: ContainerSpec) -> tuple[int, str, str, bool, str]:
        """Run `spec` to its end: (exit status, stdout, stderr, whether the GPUs were passed, the engine's refusal of
        them or "")."""
        c, refusal = self.start(spec)
        try:
            rc = c.wait()["StatusCode"]
            out = c.logs(stderr=False).decode(errors="replace")
            err = c.logs(stdout=False).decode(errors="replace")
        finally:
            c.remove(force=True)
        return rc, out, err, spec.gpu.passes and not refusal, refusal

    def build(self, context: Path, *, network: str, buildargs: dict[str, str], nocache: bool = False,
              dockerfile: str = "Dockerfile", secrets: SecretFiles = (), target: Optional[str] = None) -> Iterator[dict]:
        """The legacy /build endpoint (what the SDK speaks): a stream of JSON messages. With secrets, the same
        stream from podman's or buildx's CLI (the endpoint cannot pass them). `target`: build up to that stage only."""
        if secrets:
            tool = secrets_builder(self.info(), available_tools())
            return build_with_secrets(tool, context, network=network, buildargs=buildargs, nocache=nocache, dockerfile=dockerfile,
                                      secrets=secrets, target=target)
        return self.client.api.build(path=str(context), dockerfile=dockerfile, network_mode=network, rm=True, forcerm=True,
                                     decode=True, buildargs=buildargs, pull=False, nocache=nocache, target=target)

    def copy_out(self, image: str, path: str, dest: Path) -> list[str]:
        """The regular files directly in `path` of `image`, copied into the directory `dest` (made if missing); their
        names. Nothing is run: a container is created, read and removed."""
        import io
        import tarfile

        c = self.client.containers.create(image, ["true"], network_disabled=True)
        try:
            try:
                stream, _ = c.get_archive(path.rstrip("/") + "/.")
            except Exception as exc:  # docker.errors.NotFound: the stage made no such folder
                raise ExternalError(f"{image} has no {path}: {str(exc)[:200]}", "check that the build stage compiled wheels") from None
            data = io.BytesIO(b"".join(stream))
        finally:
            c.remove(force=True)
        names = []
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=data) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("./")
                if not member.isfile() or "/" in name or name in ("", ".", ".."):
                    continue  # only the folder's own files; no links, no subfolders, no paths out of dest
                f = tar.extractfile(member)
                assert f is not None
                (dest / name).write_bytes(f.read())
                names.append(name)
        return sorted(names)

    def tag(self, image_id: str, ref: str) -> None:
        self.client.images.get(image_id).tag(*split_ref(ref))

    def relabel(self, image: str, labels: Mapping[str, str]) -> str:
        """The ID of `image` with `labels` added (a build of FROM and the labels only: no layer, no network)."""
        import io

        base = self.image_id(image).split(":", 1)[-1]
        made, _ = self.client.images.build(fileobj=io.BytesIO(f"FROM {base}\n".encode()), labels=dict(labels), network_mode="none",
                                           pull=False, rm=True, forcerm=True)
        return str(made.id)

    def untag(self, ref: str) -> None:
        """Remove the reference only: the image keeps its other names and its layers."""
        self.client.images.remove(ref, noprune=True)

    def push(self, ref: str, auth: Optional[Mapping[str, str]], progress: Callable[[str], None]) -> str:
        """Push `ref` to its registry; the manifest digest the registry answered. `auth` goes to the engine in the request
        header (X-Registry-Auth) and nowhere else: nothing is written to disk."""
        repo, tag = split_ref(ref)
        digest, error = "", ""
        for msg in self.client.images.push(repo, tag, auth_config=dict(auth) if auth else None, stream=True, decode=True):
            if "error" in msg:
                error = str(msg.get("error"))
            elif isinstance(msg.get("aux"), dict) and msg["aux"].get("Digest"):
                digest = str(msg["aux"]["Digest"])
            elif msg.get("status") and msg.get("id") and msg.get("status") in ("Pushed", "Layer already exists", "Mounted from"):
                progress(f"{msg['id']}: {msg['status']}")
        if error or not digest:
            raise ExternalError(f"push of {ref} failed: {(error or 'the registry named no digest')[:300]}",
                                "check the registry's address and credentials (envkit push --username, password on stdin)")
        return digest

    # ------------------------------------------------------------ a server on a network with no route out

    def registry_digest(self, ref: str, auth: Optional[Mapping[str, str]]) -> Optional[str]:
        """The manifest digest the registry answers for `ref`, None where it holds no such tag."""
        import docker.errors

        try:
            return str(self.client.images.get_registry_data(ref, auth_config=dict(auth) if auth else None).id)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            text = str(exc).lower()
            if exc.status_code == 404 or "manifest unknown" in text or "not found" in text:
                return None
            raise ExternalError(f"the registry did not say whether it holds {ref}: {str(exc)[:300]}",
                                "check the registry's address and credentials") from None

    def image_attrs(self, ref: str) -> dict[str, Any]:
        return dict(self.client.images.get(ref).attrs)

    def start_internal(self, spec: ContainerSpec) -> tuple[bool, str]:
        """Create the internal network `spec.network` (no route out, no DNS beyond it) and start `spec` on it, detached,
        with its GPU access where the engine grants it: (whether the GPUs were passed, the engine's refusal or "")."""
        assert spec.name, "a server's container has a name"
        self.client.networks.create(spec.network, driver="bridge", internal=True, labels={"io.envkit.serve": spec.name})
        try:
            _, refusal = self.start(spec, labels={"io.envkit.serve": spec.network})
        except BaseException:
            self.stop_internal(spec.name, spec.network)
            raise
        return spec.gpu.passes and not refusal, refusal

    def container_state(self, name: str) -> tuple[str, Optional[str], Optional[str]]:
        """(state: running/exited/..., health: starting/healthy/unhealthy or None without a HEALTHCHECK, IP address)."""
        c = self.client.containers.get(name)
        c.reload()
        state = c.attrs.get("State", {})
        nets = c.attrs.get("NetworkSettings", {}).get("Networks", {}) or {}
        ip = next((n.get("IPAddress") for n in nets.values() if n.get("IPAddress")), None)
        return str(state.get("Status", "")), (state.get("Health") or {}).get("Status"), ip

    def container_logs(self, name: str, tail: int = 30) -> str:
        return self.client.containers.get(name).logs(tail=tail).decode(errors="replace")

    def container_user(self, name: str) -> str:
        """Who the container's main process runs as: `id -u` inside it."""
        return self.client.containers.get(name).exec_run(["id", "-u"]).output.decode().strip()

    def stop_internal(self, name: str, network: str) -> None:
        """Remove the container and its network; what is already gone is no error."""
        for remove in (lambda: self.client.containers.get(name).remove(force=True), lambda: self.client.networks.get(network).remove()):
            try:
                remove()
            except Exception:
                pass

    def size(self, ref: str) -> int:
        return int(self.client.images.get(ref).attrs.get("Size", 0))


# ---------------------------------------------------------------- builds with secrets: podman's or buildx's CLI


def is_podman(info: Mapping[str, Any]) -> bool:
    """Podman's Docker-compatible `info` names the Buildah that builds for it; Docker's does not."""
    return "BuildahVersion" in info


def available_tools() -> frozenset[str]:
    """The CLIs on PATH that can build with secrets: "podman", and "buildx" when `docker buildx` answers."""
    tools = {"podman"} if shutil.which("podman") else set()
    if shutil.which("docker"):
        try:
            if subprocess.run(["docker", "buildx", "version"], capture_output=True, timeout=60).returncode == 0:
                tools.add("buildx")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return frozenset(tools)


def secrets_builder(info: Mapping[str, Any], tools: Collection[str]) -> str:
    """How this engine builds with secrets ("podman" or "buildx"), from its `info` and the CLIs on PATH; or the
    one-line refusal, raised before anything is built."""
    version = info.get("ServerVersion") or "?"
    if is_podman(info):
        if "podman" in tools:
            return "podman"
        raise PreflightError(f"this engine (Podman {version}) builds with secrets through the podman CLI, which is not on PATH",
                             "install podman (it talks to the same service through DOCKER_HOST)")
    if "buildx" in tools:
        return "buildx"
    raise PreflightError(f"this engine (Docker {version}, legacy builder) cannot pass build secrets",
                         f"install docker buildx, use podman ({PODMAN_SERVICE}, then DOCKER_HOST=unix:///run/podman.sock), or "
                         "build --offline from a bundle made where the mirror's credentials are (envkit bundle --mirror SITE.toml "
                         "uses your netrc on that machine only)")


def secrets_build_command(tool: str, context: Path, *, network: str, buildargs: Mapping[str, str], nocache: bool, dockerfile: str,
                          secrets: SecretFiles, iidfile: Path, docker_host: str, target: Optional[str] = None) -> list[str]:
    """The CLI build with secrets, its output plain lines; each secret as id and path, never its content."""
    if tool == "podman":
        cmd = ["podman", "--remote", "--url", docker_host, "build", "--format", "docker"]  # as its compatible API builds: SHELL kept
    else:
        cmd = ["docker", "buildx", "build", "--progress", "plain", "--load"]
    cmd += ["--file", str(context / dockerfile), "--iidfile", str(iidfile)]
    if network in ("host", "none"):  # "bridge" is the default of both (BuildKit calls it "default")
        cmd += ["--network", network] + (["--allow", "network.host"] if tool == "buildx" and network == "host" else [])
    cmd += [f"--build-arg={key}={value}" for key, value in sorted(buildargs.items())]
    cmd += ["--no-cache"] if nocache else []
    cmd += ["--target", target] if target else []
    for ident, path in secrets:
        cmd += ["--secret", f"id={ident},src={path}"]
    return cmd + [str(context)]


def build_with_secrets(tool: str, context: Path, *, network: str, buildargs: Mapping[str, str], nocache: bool, dockerfile: str,
                       secrets: SecretFiles, target: Optional[str] = None) -> Iterator[dict[str, Any]]:
    """Run the CLI build; its output as the SDK's stream of messages ({"stream"}, then {"aux": {"ID"}} or {"error"})."""
    with tempfile.TemporaryDirectory(prefix="envkit-build-") as tmp:
        iidfile = Path(tmp) / "iid"
        cmd = secrets_build_command(tool, context, network=network, buildargs=buildargs, nocache=nocache, dockerfile=dockerfile,
                                    secrets=secrets, iidfile=iidfile, docker_host=os.environ.get("DOCKER_HOST", DEFAULT_HOST),
                                    target=target)
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                    errors="replace", bufsize=1)
        except OSError as exc:
            raise ExternalError(f"{cmd[0]} could not start: {exc.strerror}", f"install {cmd[0]} or put it on PATH") from None
        with proc:
            assert proc.stdout is not None
            last_error = ""
            for line in proc.stdout:
                if line.startswith(("Error:", "ERROR", "error:")):
                    last_error = line.strip()
                yield {"stream": line}
        if proc.returncode != 0 or not iidfile.is_file():
            yield {"error": last_error or f"{' '.join(cmd[:3])} exited with status {proc.returncode}"}
            return
        yield {"aux": {"ID": iidfile.read_text().strip()}}
