"""Kubernetes manifests of a project's targets (pure): `envkit matrix export --format k8s`.

Each target becomes a `batch/v1` Job that runs the image's own self-test (`python /opt/envkit/selftest.py --json`,
the script every envkit image carries) on the target's GPUs, so the Job's log ends with the self-test's JSON document
and the Job succeeds or fails with it. A serving target whose `engine` starts with `triton` becomes a Deployment and
a Service instead, shaped like kubeflow arena's Triton chart (`arena serve triton`): tritonserver on ports 8000 (HTTP),
8001 (gRPC) and 8002 (metrics), the model repository on a PersistentVolumeClaim, ready when /v2/health/ready says so.

The GPUs are a resource limit only (Kubernetes: GPUs are specified in limits; requests default to them):
`nvidia.com/gpu` for CUDA targets, `amd.com/gpu` for ROCm, `hygon.com/dcu` for Hygon DTK, none for CPU targets.
Settings come from the target's [target.k8s], then the file's [k8s], then the defaults below; every name written
is a DNS-1123 label derived from the target's name. What the schema cannot check is refused here, one line each:
a CPU target given GPUs, a Triton target whose GPUs are not its tensor-parallel size, a Triton target without its
model repository."""
from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Optional

from envkit.core import devices
from envkit.errors import InputError
from envkit.model.engine_specs import REGISTRY
from envkit.model.project import K8sSettings, Project, Target, Toleration

SELFTEST_IN_IMAGE = "/opt/envkit/selftest.py"  # where render.py puts envkit/inimage/selftest.py in every image
GPU_RESOURCE = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu", "dtk": "hygon.com/dcu"}
DEFAULT_RUNTIME_CLASS = "nvidia"  # the NVIDIA GPU Operator's RuntimeClass; NVIDIA targets only
DEFAULT_SHM = "16Gi"
JOB_TTL_S = 86400  # a finished Job (and its log) stays a day for `kubectl logs`, then goes
JOB_DEADLINE_S = 3600  # a hung self-test gives its GPUs back after an hour
STARTUP_S = 1800  # how long tritonserver may take to load its model repository before it is restarted
TRITON_PORTS = (("http-serving", 8000), ("grpc-serving", 8001), ("http-metrics", 8002))
TRITON_SUFFIX = "-tritoninferenceserver"
SELFTEST_SUFFIX = "-selftest"
_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS-1035: what a Service name must be, and fits every other name
_POSITIVE = re.compile(r"[1-9][0-9]{0,2}")
MAX_TP = 64  # one pod's GPUs are on one node (the project file's gpus and tp stop there too)


def k8s_name(target: str, suffix: str) -> str:
    """A DNS-1035 label (<= 63 lower-case letters, digits and -, starting with a letter, ending with a letter or
    digit) for `target` + `suffix`: anything else in the name becomes -, a leading digit gets a `t-`, and a name
    too long is cut and keeps 8 hex digits of the whole name's sha256, so two long names never meet."""
    base = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-") or "target"
    if not base[0].isalpha():
        base = "t-" + base
    name = base + suffix
    if len(name) > 63:
        digest = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        name = base[:63 - len(suffix) - 9].rstrip("-") + "-" + digest + suffix
    if not _LABEL.fullmatch(name):  # the rules above make this unreachable; a bad name is never written
        raise InputError(f"target {target}: cannot make a Kubernetes name of it ({name!r})", "rename the target")
    return name


def platform_of(t: Target, gpu_targets: Collection[str]) -> str:
    """cpu, cuda, rocm or dtk. A target not in `gpu_targets` runs on CPUs; `gpu_targets` may map each GPU target to
    its solution's platform, which is then the answer; otherwise the target's flags say it (platform, a toolkit
    flag, an sm_/gfx arch, an NVIDIA-only engine), and a GPU named by product alone is refused: its vendor is not in the flags."""
    if t.name not in gpu_targets:
        return "cpu"
    if isinstance(gpu_targets, Mapping) and gpu_targets[t.name] in GPU_RESOURCE:
        return str(gpu_targets[t.name])
    flags = t.flag_dict()
    if flags.get("platform") in GPU_RESOURCE:
        return flags["platform"]
    for key in ("cuda", "rocm", "dtk"):
        if key in flags:
            return key
    gpu = flags.get("gpu", "").strip().lower()
    if gpu.startswith("sm_") or "+cu" in flags.get("torch", "") or _nvidia_only(flags.get("engine", "")):
        return "cuda"
    if gpu.startswith("gfx") or "+rocm" in flags.get("torch", ""):
        return "rocm"
    raise InputError(f"target {t.name}: the k8s export cannot tell from its flags whose GPU it needs "
                     f"(nvidia.com/gpu, amd.com/gpu or hygon.com/dcu)",
                     'add platform = "cuda" (or "rocm", "dtk") to the target')


def _nvidia_only(engine: str) -> bool:
    """An engine (ENGINE[==VERSION]) that runs on NVIDIA GPUs only (the engine registry says which)."""
    spec = REGISTRY.get(engine.partition("==")[0].strip().lower())
    return spec is not None and spec.nvidia_only


def is_triton(t: Target) -> bool:
    return t.flag_dict().get("engine", "").startswith("triton")


def _gpus(t: Target, platform: str, k: K8sSettings, file: K8sSettings) -> int:
    """The pod's GPUs: the target's gpus, else a Triton target's tensor-parallel size, else [k8s] gpus, else 1.
    None on a CPU target, which may not ask for any."""
    if platform == "cpu":
        if k.gpus is not None:
            raise InputError(f"target {t.name}: [target.k8s] gpus = {k.gpus}, but the target runs on CPUs (platform cpu)",
                             "drop gpus from its [target.k8s], or give the target a GPU")
        return 0
    tp: Optional[int] = None
    if is_triton(t):
        # the project file's [[target]] tp (checked there: 1 to 64); a Target made in code may carry it as a flag
        tp_text = str(t.tp) if t.tp is not None else t.flag_dict().get("tp")
        if tp_text is not None:
            if not _POSITIVE.fullmatch(tp_text.strip()) or int(tp_text) > MAX_TP:
                raise InputError(f"target {t.name}: tp {tp_text!r} is not a tensor-parallel size", "write tp = 2 (1 to 64)")
            tp = int(tp_text)
    gpus = k.gpus if k.gpus is not None else tp if tp is not None else file.gpus if file.gpus is not None else 1
    if tp is not None and gpus != tp:
        raise InputError(f"target {t.name}: gpus = {gpus} but its Triton server is tensor-parallel over tp = {tp} GPUs",
                         f"set gpus = {tp} in its [target.k8s] (or drop gpus: it follows tp)")
    return gpus


def _settings(t: Target, platform: str, file: K8sSettings) -> tuple[K8sSettings, int]:
    """The target's effective settings. runtime_class and tolerations of [k8s] are the GPU targets' (runtime_class:
    the NVIDIA ones'); a CPU target takes them only from its own [target.k8s]."""
    k = t.k8s
    if not is_triton(t) and (k.model_pvc is not None or k.model_repository is not None):
        raise InputError(f"target {t.name}: model_pvc and model_repository are a Triton server's (engine triton-...), "
                         "and this target's Job runs the self-test", "drop them from its [target.k8s]")
    gpus = _gpus(t, platform, k, file)
    if platform == "cpu":
        base = K8sSettings(namespace=file.namespace, node_selector=file.node_selector, shm_size=file.shm_size,
                           model_pvc=file.model_pvc, model_repository=file.model_repository)
    elif platform == "cuda":
        base = file.over(K8sSettings(runtime_class=DEFAULT_RUNTIME_CLASS))
    else:
        base = replace(file, runtime_class=None)
    merged = k.over(base)
    if merged.tolerations is None and platform != "cpu":
        merged = merged.over(K8sSettings(tolerations=(Toleration("Exists", GPU_RESOURCE[platform], None, "NoSchedule"),)))
    return merged, gpus


def _labels(t: Target, name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": k8s_name(t.name, ""), "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component, "app.kubernetes.io/part-of": "envkit",
            "app.kubernetes.io/managed-by": "envkit"}


def _metadata(name: str, k: K8sSettings, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if k.namespace is not None:
        meta["namespace"] = k.namespace
    meta["labels"] = dict(labels)  # a copy each time: PyYAML would write a shared dict as an &anchor and *alias
    return meta


def _toleration(tol: Toleration) -> dict[str, str]:
    out = {"key": tol.key, "operator": tol.operator, "value": tol.value, "effect": tol.effect}
    return {key: v for key, v in out.items() if v is not None}


def _pod_spec(k: K8sSettings, container: dict[str, Any], volumes: list[dict[str, Any]], restart: Optional[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if restart is not None:
        spec["restartPolicy"] = restart
    if k.runtime_class is not None:
        spec["runtimeClassName"] = k.runtime_class
    if k.node_selector:
        spec["nodeSelector"] = dict(k.node_selector)
    if k.tolerations:
        spec["tolerations"] = [_toleration(tol) for tol in k.tolerations]
    spec["containers"] = [container]
    spec["volumes"] = volumes
    return spec


def _shm(k: K8sSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """/dev/shm as an emptyDir in memory (a container's own is 64 MiB: too little for NCCL and data loaders)."""
    return ({"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k.shm_size or DEFAULT_SHM}})


def _resources(platform: str, gpus: int) -> dict[str, Any]:
    return {"limits": {GPU_RESOURCE[platform]: gpus}} if platform != "cpu" else {}


def _hyhal(t: Target, platform: str) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
    """Hygon's driver libraries, which DTK images from 23.10 on load from the host's /opt/hyhal (core/devices.py)."""
    if platform != "dtk" or not devices.dtk_needs_hyhal(t.flag_dict().get("dtk")):
        return None
    return ({"name": "hyhal", "mountPath": devices.HYHAL, "readOnly": True},
            {"name": "hyhal", "hostPath": {"path": devices.HYHAL, "type": "Directory"}})


def selftest_job(t: Target, platform: str, k: K8sSettings, gpus: int) -> dict[str, Any]:
    """The image's self-test as a Job: it fails (exit 1) where the pod has not the GPUs the image's solution names."""
    name = k8s_name(t.name, SELFTEST_SUFFIX)
    labels = _labels(t, name, "selftest")
    mount, volume = _shm(k)
    container: dict[str, Any] = {"name": "selftest", "image": t.image,
                                 "command": ["python", SELFTEST_IN_IMAGE, "--json"]}
    resources = _resources(platform, gpus)
    if resources:
        container["resources"] = resources
    container["volumeMounts"] = [mount]
    hyhal = _hyhal(t, platform)
    volumes = [volume]
    if hyhal is not None:
        container["volumeMounts"].append(hyhal[0])
        volumes.append(hyhal[1])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(name, k, labels),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": JOB_DEADLINE_S,
            "ttlSecondsAfterFinished": JOB_TTL_S,
            "template": {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(k, container, volumes, "Never")},
        },
    }


def _repository(t: Target, k: K8sSettings) -> tuple[str, str, str]:
    """The claim, its mount path and the model repository (under the mount; default: the mount itself)."""
    if k.model_pvc is None:
        raise InputError(f"target {t.name}: its Triton server needs a model repository, and no model_pvc says where",
                         'add model_pvc = "CLAIM:/mnt" and model_repository = "/mnt/triton_repo" to its [target.k8s] or [k8s]')
    mount = k.model_pvc.mount
    repo = k.model_repository or mount
    if not (repo == mount or repo.startswith(mount.rstrip("/") + "/")):
        raise InputError(f"target {t.name}: model_repository {repo} is not under model_pvc's mount path {mount}",
                         f"write model_repository = \"{posixpath.join(mount, 'triton_repo')}\" (or mount the claim above {repo})")
    return k.model_pvc.claim, mount, repo


def triton(t: Target, platform: str, k: K8sSettings, gpus: int) -> list[dict[str, Any]]:
    """A Deployment and its Service, as `arena serve triton --gpus=N --replicas=1 --data=CLAIM:MOUNT
    --model-repository=REPO --allow-metrics` makes them."""
    claim, mount, repo = _repository(t, k)
    name = k8s_name(t.name, TRITON_SUFFIX)
    labels = _labels(t, name, "server")
    selector = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "server"}
    shm_mount, shm_volume = _shm(k)
    http = TRITON_PORTS[0][1]
    container: dict[str, Any] = {
        "name": "tritoninferenceserver",
        "image": t.image,
        "command": ["tritonserver", f"--model-repository={repo}", f"--http-port={http}", f"--grpc-port={TRITON_PORTS[1][1]}",
                    f"--metrics-port={TRITON_PORTS[2][1]}", "--allow-metrics=true"],
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"} for port_name, port in TRITON_PORTS],
        # the server answers once its models are loaded: a large one may take minutes, which the startup probe allows
        "startupProbe": {"httpGet": {"path": "/v2/health/live", "port": http}, "periodSeconds": 10,
                         "failureThreshold": STARTUP_S // 10},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": http}, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": http}, "periodSeconds": 10, "failureThreshold": 3},
    }
    resources = _resources(platform, gpus)
    if resources:
        container["resources"] = resources
    container["volumeMounts"] = [shm_mount, {"name": "models", "mountPath": mount}]
    volumes = [shm_volume, {"name": "models", "persistentVolumeClaim": {"claimName": claim}}]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, k, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(selector)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(k, container, volumes, None)},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, k, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"} for port_name, port in TRITON_PORTS],
        },
    }
    return [deployment, service]


def manifests(p: Project, gpu_targets: Collection[str]) -> list[dict[str, Any]]:
    """Every target's documents, in the project file's order; two targets whose names would meet are refused."""
    docs: list[dict[str, Any]] = []
    seen: dict[tuple[Optional[str], str, str], str] = {}
    for t in p.targets:
        platform = platform_of(t, gpu_targets)
        k, gpus = _settings(t, platform, p.k8s)
        made = triton(t, platform, k, gpus) if is_triton(t) else [selftest_job(t, platform, k, gpus)]
        for doc in made:
            key = (doc["metadata"].get("namespace"), doc["kind"], doc["metadata"]["name"])
            if key in seen and seen[key] != t.name:
                raise InputError(f"targets {seen[key]} and {t.name} would both be {doc['kind']} {key[2]}", "rename one of them")
            seen[key] = t.name
        docs.extend(made)
    return docs
