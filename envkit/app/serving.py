"""A serving image's request (--serve DIR and its options) read into the plan's Serve value, and the model carried into
the build context. The model directory is read once, here; the planner sees only its name, digest, size and what was
left out of it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from envkit.adapters.context_dir import Populate
from envkit.adapters.engine import ContainerEngine, split_ref
from envkit.adapters.model_dir import ModelTree, read_model, stage_model
from envkit.app import containers
from envkit.errors import InputError, PreflightError
from envkit.model.container import ContainerSpec
from envkit.model.plan import SERVE_PORT, Serve
from envkit.model.redact import redact

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")


@dataclass(frozen=True)
class ServeRequest:
    model: str  # the model's local directory
    name: Optional[str] = None  # --served-model-name; default: the directory's name
    args: tuple[str, ...] = ()  # --serve-arg, in order
    mount: bool = False  # --model-mount: the site mounts the weights; nothing is baked in
    port: int = SERVE_PORT


@dataclass(frozen=True)
class Prepared:
    serve: Serve
    tree: ModelTree


_SECRET_WORDS = frozenset({"key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "credential", "credentials"})
_SECRET_ENV = {"api-key": "VLLM_API_KEY", "hf-token": "HF_TOKEN"}  # vLLM reads VLLM_API_KEY; huggingface_hub HF_TOKEN


def secret_option(args: tuple[str, ...]) -> Optional[str]:
    """The first option of `args` that carries a secret with a value (vLLM's --api-key, --hf-token, and any option
    whose name has the word key, token, secret or password: --x-api-key=V, or --x-token V), by its name alone."""
    for i, a in enumerate(args):
        if not a.startswith("-"):
            continue
        name, eq, value = a.partition("=")
        words = re.split(r"[-_.]+", name.lstrip("-").lower())
        if not _SECRET_WORDS & set(words):
            continue
        if (eq and value) or (i + 1 < len(args) and args[i + 1] and not args[i + 1].startswith("-")):
            return name
    return None


def check_args(args: tuple[str, ...]) -> None:
    """--serve-arg / serve_args: one argument each, no control characters, and no secret (they are written into the
    Dockerfile and the image's ENTRYPOINT, which anyone who pulls the image reads). No value is ever printed."""
    secret = secret_option(args)
    if secret is not None:
        var = _SECRET_ENV.get(secret.lstrip("-").lower())
        raise InputError(f"--serve-arg {secret} carries a secret, and the server's arguments are written into the Dockerfile "
                         "and the image's ENTRYPOINT, where anyone who pulls the image reads them",
                         f"pass it at run time: envkit serve --env {var}=..." if var else
                         "pass it at run time, in the environment the server reads it from: envkit serve --env NAME=... "
                         "(vLLM reads its API key from VLLM_API_KEY)")
    for i, a in enumerate(args, 1):
        if redact(a) != a:  # a token's shape, a login in a URL, api_key=... inside a value
            raise InputError(f"--serve-arg number {i} holds what looks like a credential (a token, a key, a login in a URL), and "
                             "the server's arguments are written into the Dockerfile and the image's ENTRYPOINT",
                             "pass it at run time, in the environment the server reads it from: envkit serve --env NAME=... "
                             "(vLLM reads its API key from VLLM_API_KEY)")
        if not a or any(ord(ch) < 32 or ord(ch) == 127 for ch in a):
            raise InputError(f"--serve-arg number {i} ({a.partition('=')[0][:40]!r}) is empty or holds a control character",
                             "pass one argument per --serve-arg, e.g. --serve-arg=--dtype=float32")


def asked(serve: Optional[str], name: Optional[str], args: list[str], mount: bool, port: int,
          say: Callable[[str], None]) -> Optional[Prepared]:
    """The serving image the command line asks for (--serve and the options that go with it), or None."""
    if serve is None:
        if name or args or mount or port != SERVE_PORT:
            raise InputError("--served-model-name, --serve-arg, --model-mount and --serve-port go with --serve MODEL_DIR",
                             "add --serve MODEL_DIR, or drop them")
        return None
    return prepare(ServeRequest(serve, name, tuple(args), mount, port), say)


def prepare(req: ServeRequest, say: Callable[[str], None]) -> Prepared:
    name = req.name or Path(req.model.rstrip("/")).name
    if not _NAME.fullmatch(name):
        raise InputError(f"served model name {name!r} is not a name clients can send",
                         "pass --served-model-name with letters, digits and . _ / - (e.g. qwen-7b)")
    check_args(req.args)
    if not 1 <= req.port <= 65535:
        raise InputError(f"--serve-port {req.port} is not a TCP port", "use a port from 1 to 65535, e.g. 8000")
    tree = read_model(req.model, say)
    return Prepared(Serve(name=name, sha256=tree.sha256, files=len(tree.files), bytes=tree.bytes, mount=req.mount,
                          port=req.port, args=req.args, left_out=tree.left_out), tree)


def staged(prepared: Optional[Prepared], say: Callable[[str], None]) -> dict[str, Populate]:
    """The context's model/ as a tree write_tree stages and commits with the generated files (unless the site mounts
    the weights): hard links where the file system allows, else copies, all renamed in at once."""
    if prepared is None or prepared.serve.mount:
        return {}
    tree = prepared.tree
    return {"model": lambda dest, current: stage_model(tree, dest, current, say)}


def model_json(prepared: Optional[Prepared]) -> Optional[dict]:
    """What generate --json says of the model: its digest and size, and what was left out of it and why."""
    if prepared is None:
        return None
    s = prepared.serve
    return {"name": s.name, "sha256": s.sha256, "files": s.files, "bytes": s.bytes, "mount": s.mount,
            "left_out": [{"path": p, "why": w} for p, w in s.left_out]}


# ---------------------------------------------------------------- envkit serve: the image's server on a network with no route out

SERVE_PREFIX = "envkit-serve-"


@dataclass(frozen=True)
class Running:
    """A serving image's server, started on an internal network (no route out) and healthy."""
    image: str
    container: str
    network: str
    url: str
    model: str
    model_sha256: str
    user: str  # the uid the server runs as
    gpus: bool
    seconds: float  # from start to healthy
    sweep: Optional[dict] = None
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.sweep is None or bool(self.sweep.get("ok"))

    def to_json(self) -> dict:
        return {"schema": 1, "ok": self.ok, "image": self.image, "container": self.container, "network": self.network,
                "url": self.url, "engine": f"openai:{self.url}", "model": self.model, "model_sha256": self.model_sha256,
                "user": self.user, "gpus": self.gpus, "healthy_after_s": round(self.seconds, 1), "stopped": self.stopped,
                "sweep": self.sweep}


def _env(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise InputError(f"--env {p!r} is not NAME=VALUE", "write e.g. --env VLLM_CPU_KVCACHE_SPACE=1")
        out[key] = value
    return out


def first_cause(log: list[str]) -> str:
    """The line of a failed server's log that names why: the first exception that is not a re-raise's summary (vLLM's
    'See root cause above'), else a failed import warning, else the last line."""
    errors = [x for x in log if re.search(r"\b\w*(Error|Exception)\b: ", x) and "WARNING" not in x]
    root = [x for x in errors if "root cause" not in x]
    imports = [x for x in log if "Failed to import" in x]
    return (root or imports or errors or log or ["(no output)"])[0]


@dataclass(frozen=True)
class _Launch:
    spec: ContainerSpec
    model: str
    model_sha256: str
    port: str


_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?"
                   r"|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:\.|_{1,2}|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageRef:
    """An image reference as the engine reads it (the distribution project's grammar): [HOST[:PORT]/]PATH[:TAG][@DIGEST].
    The first component is the registry host only when it holds a dot or a colon, is localhost, or has capitals;
    otherwise the engine goes to Docker Hub."""
    host: Optional[str]
    path: tuple[str, ...]
    tag: Optional[str]
    digest: Optional[str]


def parse_ref(ref: str) -> Optional[ImageRef]:
    if not ref or len(ref) > 255 or not ref.isascii() or not ref.isprintable() or " " in ref:
        return None
    name, _, digest = ref.partition("@")
    if (digest and not _DIGEST.fullmatch(digest)) or ref.endswith("@"):
        return None
    tag = None
    if name.rfind(":") > name.rfind("/"):
        name, _, tag = name.rpartition(":")
        if not _TAG.fullmatch(tag):
            return None
    parts = name.split("/")
    host = None
    if len(parts) > 1 and (any(c in parts[0] for c in ".:") or parts[0] == "localhost" or parts[0].lower() != parts[0]):
        host, parts = parts[0], parts[1:]
        if not _HOST.fullmatch(host):
            return None
    if not parts or not all(_COMPONENT.fullmatch(p) for p in parts):
        return None
    return ImageRef(host, tuple(parts), tag, digest or None)


def _shown_ref(ref: str) -> str:
    """A reference that did not parse, as it may be printed: one whose '@' starts no digest may be USER:PASSWORD@HOST."""
    name, at, digest = ref.partition("@")
    return repr(ref) if not at or _DIGEST.fullmatch(digest) else "with an '@' that starts no @sha256:DIGEST (a login? it is not printed)"


def check_asked(image: Optional[str], stop: Optional[str], starting: dict[str, Any], sweep: bool, keep: bool) -> None:
    """serve's options together: --stop alone (`starting`: the options that start a server, by name, with their values),
    else --image, and --keep only with --sweep."""
    if stop:
        starts = [name for name, on in starting.items() if on]
        if starts:
            raise InputError(f"--stop CONTAINER stops a server; {', '.join(starts)} go{'es' if len(starts) == 1 else ''} with "
                             "starting one", "run envkit serve --stop CONTAINER alone, and start a server without --stop")
        return
    if not image:
        raise InputError("envkit serve needs --image IMAGE (or --stop CONTAINER)", "pass the serving image's tag")
    if keep and not sweep:
        raise InputError("--keep leaves the server running after --sweep; without --sweep it keeps running anyway",
                         "add --sweep, or drop --keep")


def check_start(image: str, env: tuple[str, ...] = (), model_dir: Optional[str] = None, shm_size: str = "2g",
                timeout: float = 900.0) -> None:
    """Every check of serve's request that needs no engine: done before the engine is contacted (exit 2 without one)."""
    if parse_ref(image) is None:
        raise InputError(f"--image {_shown_ref(image)} is not an image reference",
                         "pass the serving image's tag (e.g. envkit/serve:tiny) or ID")
    _env(env)
    if not re.fullmatch(r"[1-9][0-9]*[kmg]", shm_size):
        raise InputError(f"--shm-size {shm_size!r} is not a size",
                         "write e.g. --shm-size 2g (vLLM's workers share memory through /dev/shm)")
    if not (math.isfinite(timeout) and timeout > 0):
        raise InputError(f"--timeout {timeout} is not a number of seconds", "give a finite number of seconds above 0, e.g. --timeout 900")
    if model_dir is not None:
        if any(ord(ch) < 32 for ch in model_dir) or not Path(model_dir).is_dir():
            raise InputError(f"--model-dir {model_dir!r}: no such directory", "pass the model's directory (it holds config.json)")
        if not Path(model_dir, "config.json").is_file():
            raise InputError(f"--model-dir {model_dir}: no config.json", "pass the model's directory")


def _launch(image: str, env: tuple[str, ...], model_dir: Optional[str], shm_size: str, engine: ContainerEngine) -> _Launch:
    """Every check of the request and the image, and the container to start: nothing is started here."""
    import secrets

    from envkit.model.plan import MODEL_DIR

    check_start(image, env, model_dir, shm_size)
    variables = _env(env)
    engine.require_image(image)
    labels = engine.labels(image)
    name = labels.get("io.envkit.model.name")
    if not name:
        raise InputError(f"{image} is not a serving image (no io.envkit.model.name label)",
                         "build one with --serve MODEL_DIR (envkit bundle/generate), then serve it")
    mounted = labels.get("io.envkit.model.source", "").startswith("mounted")
    if mounted and not model_dir:
        raise InputError(f"{image} mounts its model at {MODEL_DIR}: --model-dir is missing", "pass --model-dir DIR (the model's directory)")
    if model_dir and not Path(model_dir, "config.json").is_file():
        raise InputError(f"--model-dir {model_dir}: no config.json", "pass the model's directory")
    volumes = ((str(Path(model_dir).resolve()), MODEL_DIR, "ro"),) if model_dir else ()
    ports = [p.split("/")[0] for p in (engine.image_attrs(image).get("Config", {}).get("ExposedPorts") or {})]
    container = SERVE_PREFIX + secrets.token_hex(4)
    spec = containers.plan(engine, image, [], volumes=volumes, network=container, env=tuple(variables.items()),
                           shm_size=shm_size, name=container)
    return _Launch(spec, name, labels.get("io.envkit.model.sha256", ""), ports[0] if ports else str(SERVE_PORT))


def plan_start(image: str, env: tuple[str, ...] = (), model_dir: Optional[str] = None, shm_size: str = "2g",
               engine: Optional[ContainerEngine] = None) -> containers.PlannedRun:
    """serve --dry-run: the server's container, its GPUs and what the image was built for; nothing is started."""
    from envkit.adapters.engine import Engine

    check_start(image, env, model_dir, shm_size)
    engine = engine or Engine.connect()
    return containers.PlannedRun("envkit serve", _launch(image, env, model_dir, shm_size, engine).spec, containers.expects(engine, image))


def start(image: str, env: tuple[str, ...] = (), model_dir: Optional[str] = None, timeout: float = 900.0,
          say: Callable[[str], None] = lambda _: None, engine: Optional[ContainerEngine] = None, shm_size: str = "2g",
          allow_cpu: bool = False) -> Running:
    """Start a serving image on a new internal network, wait until its HEALTHCHECK says healthy; the URL to reach it. An
    image built for GPUs that cannot have them here is refused before it starts (unless allow_cpu)."""
    import time

    from envkit.adapters.engine import Engine
    from envkit.errors import ExternalError

    check_start(image, env, model_dir, shm_size, timeout)
    engine = engine or Engine.connect()
    launch = _launch(image, env, model_dir, shm_size, engine)
    spec = launch.spec
    if spec.gpu.wanted and not spec.gpu.passes and not allow_cpu:
        raise PreflightError(f"{image} is built for {spec.gpu.vendor} GPUs: {spec.gpu.missing}",
                             "serve it on a host with its GPUs, or add --allow-cpu to start it without them")
    container = network = spec.name or ""
    t0 = time.monotonic()
    gpus, refusal = engine.start_internal(spec)
    if spec.gpu.wanted and not gpus and not allow_cpu:
        engine.stop_internal(container, network)
        raise ExternalError(f"the engine refused {image}'s {spec.gpu.vendor} devices: {refusal}",
                            "install the vendor's container toolkit (NVIDIA: nvidia-container-toolkit, then nvidia-ctk runtime "
                            "configure; Podman: nvidia-ctk cdi generate), or add --allow-cpu")
    say(f"serve: {image} as {container} on internal network {network} (no route out){', GPUs passed' if gpus else ''}")
    try:
        while True:
            state, health, ip = engine.container_state(container)
            waited = time.monotonic() - t0
            if state not in ("created", "running"):
                log = engine.container_logs(container, tail=400).strip().splitlines()
                for line in log[-20:]:
                    say(f"server: {line}")
                cause = first_cause(log)
                raise ExternalError(f"the server exited ({state}) after {waited:.0f} s: {cause.strip()[:300]}",
                                    "its last log lines are printed above: fix what they name, then serve it again")
            if health == "healthy" and ip:
                break
            if health is None:
                raise InputError(f"{image} has no HEALTHCHECK", "build it with envkit (--serve adds one)")
            if waited > timeout:
                raise ExternalError(f"the server was not healthy within {timeout:.0f} s (health: {health})",
                                    "give it longer with --timeout, or read docker logs " + container)
            if int(waited) % 15 == 0:
                say(f"serve: waiting for the HEALTHCHECK ({health}, {waited:.0f} s)")
            time.sleep(1)
        user = engine.container_user(container)
    except BaseException:
        engine.stop_internal(container, network)
        raise
    url = f"http://{ip}:{launch.port}"
    say(f"serve: healthy after {time.monotonic() - t0:.0f} s at {url} (model {launch.model}, user {user})")
    return Running(image, container, network, url, launch.model, launch.model_sha256, user, gpus, time.monotonic() - t0)


def start_and_sweep(image: str, env: tuple[str, ...], model_dir: Optional[str], timeout: float, reporter: Any, shm_size: str,
                    allow_cpu: bool, sweep: Optional[dict[str, Any]] = None, keep: bool = False) -> Running:
    """serve: start the image and wait until healthy; with `sweep` (SweepRequest.asked's levels and lengths), sweep it
    and stop it unless `keep`."""
    from dataclasses import replace

    from envkit.app import sweep as sweeps

    running = start(image, env, model_dir, timeout, reporter.say, shm_size=shm_size, allow_cpu=allow_cpu)
    if sweep is None:
        return running
    try:
        req = sweeps.SweepRequest.asked(f"openai:{running.url}", running.model, sweep["concurrency"], sweep["num_prompts"],
                                        sweep["input_len"], sweep["output_len"], None)
        result = sweeps.serving_sweep(req, reporter)
    finally:
        if not keep:
            stop(running.container)
    return replace(running, sweep=result.to_json(), stopped=not keep)


def stop(container: str, engine=None) -> None:
    from envkit.adapters.engine import Engine

    if not container.startswith(SERVE_PREFIX):
        raise InputError(f"--stop {container!r} is not a server envkit serve started",
                         f"pass the container name it printed ({SERVE_PREFIX}...)")
    (engine or Engine.connect()).stop_internal(container, container)


# ---------------------------------------------------------------- envkit push: the image to the site's registry

LOCK_TAG_PREFIX = "lock-"  # REPO:lock-<12 hex of the image's io.envkit.lock.sha256>


@dataclass(frozen=True)
class LockTag:
    """The tag only images of one lock get: pushed when the registry had none, kept when it names an earlier build."""
    ref: str
    digest: str   # what the tag names in the registry now
    pushed: bool  # False: the registry held it already (an earlier build of the same lock, or this image)

    def to_json(self) -> dict:
        return {"ref": self.ref, "digest": self.digest, "pushed": self.pushed}


@dataclass(frozen=True)
class Pushed:
    image: str
    ref: str
    digest: str
    model: Optional[str]
    model_sha256: Optional[str]
    lock_tag: Optional[LockTag] = None

    @property
    def pinned(self) -> str:
        return f"{split_ref(self.ref)[0]}@{self.digest}"

    def to_json(self) -> dict:
        return {"schema": 1, "ok": True, "image": self.image, "ref": self.ref, "digest": self.digest, "pull": self.pinned,
                "model": self.model, "model_sha256": self.model_sha256,
                "lock_tag": None if self.lock_tag is None else self.lock_tag.to_json()}


def lock_tag_ref(ref: str, labels: dict[str, str]) -> str:
    """REPO:lock-<12 hex> for the image whose labels these are; InputError for an image envkit build did not make."""
    sha = labels.get("io.envkit.lock.sha256", "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise InputError("--lock-tag: the image has no io.envkit.lock.sha256 label (envkit build writes it)",
                         "push an image envkit built, or drop --lock-tag")
    return f"{split_ref(ref)[0]}:{LOCK_TAG_PREFIX}{sha[:12]}"


def _push_lock_tag(engine: Any, image_id: str, lock_ref: str, auth: Optional[dict], say: Callable[[str], None]) -> LockTag:
    """Push the lock's tag unless the registry holds it already: a tag that names one build stays (registries that
    refuse to move a tag accept this too); the user's tag always names the new build."""
    held = engine.registry_digest(lock_ref, auth)
    if held is not None:
        say(f"push: {lock_ref} stays {held} (the registry holds that lock's tag already)")
        return LockTag(lock_ref, held, False)
    engine.tag(image_id, lock_ref)
    try:
        digest = engine.push(lock_ref, auth, say)
    finally:
        engine.untag(lock_ref)
    say(f"push: {lock_ref} is {digest}")
    return LockTag(lock_ref, digest, True)


def check_push(ref: str, username: Optional[str], password: Optional[str]) -> None:
    """push --to: a reference whose first component is the site's registry (a push without one goes to Docker Hub), with
    a tag and no digest; and a whole login or none. Checked before the engine is contacted."""
    fix = "write e.g. --to registry.intra:5000/llm/qwen-7b:v1"
    parsed = parse_ref(ref)
    if parsed is None:
        raise InputError(f"--to {_shown_ref(ref)} is not REGISTRY/REPOSITORY[:TAG]",
                         fix + ("; a registry login goes to --username and the password on stdin" if "@" in ref else ""))
    if parsed.host is None:
        raise InputError(f"--to {ref!r} names no registry host, so the engine would push it to Docker Hub (docker.io/"
                         f"{'/'.join(parsed.path) if len(parsed.path) > 1 else 'library/' + parsed.path[0]})",
                         "put the site's registry first (a host with a dot or a port, or localhost): --to registry.intra:5000/"
                         + "/".join(parsed.path) + (f":{parsed.tag}" if parsed.tag else ""))
    if parsed.digest is not None:
        raise InputError(f"--to {ref!r} names a digest; a push names a tag (the registry answers the digest)", fix)
    if bool(username) != bool(password):
        raise InputError("a registry login needs both --username and the password (on stdin, or ENVKIT_REGISTRY_PASSWORD)",
                         "pass --username NAME --password-stdin, or neither for a registry without login")


def _restore_ref(engine: Any, ref: str, before: Optional[str], image_id: str) -> None:
    """After a failed push, `ref` names what it named before (newcomer review D19: the tag was left behind): the image it
    pointed at, or nothing, where the image keeps another name (removing an image's last name would delete the image).
    Best effort: the push's own error is the one reported."""
    try:
        if before is not None and before != image_id:
            engine.tag(before, ref)
        elif before is None and len(engine.image_attrs(image_id).get("RepoTags") or []) > 1:
            engine.untag(ref)
    except Exception:  # noqa: BLE001 - the engine's refusal here must not hide why the push failed
        pass


def push(image: str, ref: str, username: Optional[str], password: Optional[str], say: Callable[[str], None] = lambda _: None,
         engine=None, lock_tag: bool = False) -> Pushed:
    """Tag `image` as `ref` (REGISTRY/REPO[:TAG]) and push it; with `lock_tag`, also REPO:lock-<12 hex> of its lock where the
    registry has none. The credentials live in this call only."""
    from envkit.adapters.engine import Engine

    check_push(ref, username, password)
    engine = engine or Engine.connect()
    engine.require_image(image)
    labels = engine.labels(image)
    lock_ref = lock_tag_ref(ref, labels) if lock_tag else None
    image_id = engine.image_id(image)
    before = engine.image_id(ref) if engine.has_image(ref) else None
    auth = {"username": username, "password": password} if username and password else None
    engine.tag(image_id, ref)
    try:
        digest = engine.push(ref, auth, say)
    except BaseException:
        _restore_ref(engine, ref, before, image_id)
        raise
    say(f"push: {ref} is {digest}")
    locked = _push_lock_tag(engine, image_id, lock_ref, auth, say) if lock_ref else None
    return Pushed(image, ref, digest, labels.get("io.envkit.model.name"), labels.get("io.envkit.model.sha256"), locked)
