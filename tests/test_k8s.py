"""`envkit matrix export --format k8s`: Kubernetes manifests of a project's targets (envkit/core/k8s.py, docs/k8s.md).

Every manifest written is validated in strict mode (no unknown field anywhere) against the newest Kubernetes JSON
schemas that kubernetes-validate bundles; the golden files in tests/golden/k8s/ hold the exact bytes. Regenerate them
after an intended change with  ENVKIT_UPDATE_GOLDEN=1 pytest tests/test_k8s.py  and review the diff like code.
Bad [k8s] values are one line and exit 2 through the CLI, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import tomllib
import yaml
from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from envkit.app.matrix import Exported, export_project
from envkit.config import project_file
from envkit.core import export as export_core
from envkit.core import k8s
from envkit.errors import InputError
from envkit.model.project import K8sSettings, ModelVolume, Project, Target

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
GOLD = ROOT / "golden" / "k8s"
PROJECT = "tests/golden/k8s/envkit.toml"
SCHEMA = json.loads((REPO / "envkit" / "data" / "schemas" / "project.schema.json").read_text(encoding="utf-8"))
# the newest Kubernetes version whose schemas the installed kubernetes-validate bundles (1.37 for 1.37.0)
K8S_VERSION = max(kv_utils.all_versions(), key=Version)
TRITON_FLAGS = (("gpu", "H100"), ("engine", "triton-trtllm"), ("tp", "2"))
BLOOM_REPO = K8sSettings(model_pvc=ModelVolume("bloom7b1-pvc", "/mnt"), model_repository="/mnt/triton_repo")


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ENVKIT_NO_CACHE", "1")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "ENVKIT_NO_CACHE": "1"})


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _strict(text: str) -> list[dict[str, Any]]:
    docs = _docs(text)
    assert docs
    for doc in docs:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == kv_utils.major_minor(K8S_VERSION), doc["metadata"]["name"]
    return docs


def _golden(name: str, text: str) -> None:
    path = GOLD / name
    if os.environ.get("ENVKIT_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{name} differs from the golden file (ENVKIT_UPDATE_GOLDEN=1 rewrites it)"


def _export(project: str = PROJECT) -> str:
    outcome = export_project(project, "k8s", "envkit-contexts", None)
    assert isinstance(outcome, Exported), outcome
    return outcome.text


def _triton_project(**k8s_keys: Any) -> Project:
    target = Target("bloom-7b1", TRITON_FLAGS, True, None, "registry.corp.example:5000/llm/envkit-bloom-7b1:ft-tp2",
                    k8s=K8sSettings(**k8s_keys))
    return Project("envkit.toml", (target,), k8s=BLOOM_REPO)


def _by_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


# ---------------------------------------------------------------- golden files, validated in strict mode

def test_the_newest_bundled_kubernetes_is_the_one_checked():
    assert Version(K8S_VERSION) >= Version("1.37") and K8S_VERSION == kubernetes_validate.latest_version()


def test_golden_jobs_validate_strictly():
    """A 1-GPU and a 2-GPU CUDA target, a CPU target and a ROCm target, from the project file through the use case."""
    text = _export()
    _golden("manifests.yaml", text)
    docs = _by_name(_strict(text))
    assert list(docs) == ["Job/h100-selftest", "Job/h100-x2-selftest", "Job/cpu-py311-selftest", "Job/mi300x-selftest"]


def test_golden_triton_deployment_and_service_validate_strictly():
    """The seed: arena serve triton --gpus=2 --replicas=1 --data=bloom7b1-pvc:/mnt --model-repository=/mnt/triton_repo
    --allow-metrics, for a two-GPU tensor-parallel bloom-7b1 (built from the values, so it needs no engine flag)."""
    text = export_core.k8s(_triton_project(), {"bloom-7b1": "cuda"})
    _golden("triton-bloom-7b1.yaml", text)
    docs = _by_name(_strict(text))
    assert list(docs) == ["Deployment/bloom-7b1-tritoninferenceserver", "Service/bloom-7b1-tritoninferenceserver"]


def test_the_golden_project_file_is_valid_for_the_shipped_schema():
    jsonschema.Draft202012Validator(SCHEMA).validate(tomllib.loads((REPO / PROJECT).read_text(encoding="utf-8")))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(tomllib.loads('[k8s]\ngpus = "two"\n[[target]]\nname = "a"\noffline = true\n'))


def test_the_cli_writes_what_the_use_case_returns(tmp_path):
    out = tmp_path / "k8s.yaml"
    p = cli("matrix", "export", "--format", "k8s", "--project", PROJECT, "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_text(encoding="utf-8") == (GOLD / "manifests.yaml").read_text(encoding="utf-8")


# ---------------------------------------------------------------- what the Jobs hold

def test_jobs_run_the_images_self_test_on_their_gpus():
    docs = _by_name(_docs(_export()))
    images = {t["name"]: t["image"] for t in json.loads(_export_for("json"))["targets"]}
    for name, gpus in (("h100", 1), ("h100-x2", 2)):
        job = docs[f"Job/{name}-selftest"]
        pod = _pod(job)
        (c,) = pod["containers"]
        assert c["image"] == images[name]  # the tag the other exports name
        assert c["command"] == ["python", "/opt/envkit/selftest.py", "--json"]
        assert c["resources"] == {"limits": {"nvidia.com/gpu": gpus}} and type(c["resources"]["limits"]["nvidia.com/gpu"]) is int
        assert pod["runtimeClassName"] == "nvidia" and pod["restartPolicy"] == "Never"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] > 0
        assert job["metadata"]["namespace"] == "llm-ci"
        assert job["metadata"]["labels"]["app.kubernetes.io/name"] == name
        assert c["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert _pod(docs["Job/h100-selftest"])["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert _pod(docs["Job/h100-x2-selftest"])["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert len(_pod(docs["Job/h100-x2-selftest"])["tolerations"]) == 2  # the target's own list replaces the default


def _export_for(fmt: str) -> str:
    outcome = export_project(PROJECT, fmt, "envkit-contexts", None)
    assert isinstance(outcome, Exported)
    return outcome.text


def test_a_cpu_target_asks_for_no_gpu_and_a_rocm_target_for_amd_gpus():
    docs = _by_name(_docs(_export()))
    cpu = _pod(docs["Job/cpu-py311-selftest"])
    assert "resources" not in cpu["containers"][0] and "runtimeClassName" not in cpu and "tolerations" not in cpu
    rocm = _pod(docs["Job/mi300x-selftest"])
    assert rocm["containers"][0]["resources"] == {"limits": {"amd.com/gpu": 1}}
    assert "runtimeClassName" not in rocm
    assert rocm["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nvidia.com/gpu" not in json.dumps(rocm)


def test_the_yaml_has_no_aliases_and_parses_back():
    text = _export()
    assert "&id" not in text and "*id" not in text
    assert text.startswith("# Generated by envkit matrix export --format k8s")


# ---------------------------------------------------------------- the Triton server

def test_triton_is_served_like_arenas_chart():
    docs = _by_name(_docs(export_core.k8s(_triton_project(), {"bloom-7b1": "cuda"})))
    dep, svc = docs["Deployment/bloom-7b1-tritoninferenceserver"], docs["Service/bloom-7b1-tritoninferenceserver"]
    pod = _pod(dep)
    (c,) = pod["containers"]
    assert c["command"] == ["tritonserver", "--model-repository=/mnt/triton_repo", "--http-port=8000", "--grpc-port=8001",
                            "--metrics-port=8002", "--allow-metrics=true"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 2}}  # tp = 2, gpus not given: the GPUs follow tp
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8000}
    assert {"name": "models", "mountPath": "/mnt"} in c["volumeMounts"] and {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "bloom7b1-pvc"}} in pod["volumes"]
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("http-serving", 8000), ("grpc-serving", 8001), ("http-metrics", 8002)]
    assert dep["spec"]["replicas"] == 1
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items() and svc["spec"]["selector"].items() <= labels.items()


def test_triton_gpus_must_equal_the_tensor_parallel_size():
    with pytest.raises(InputError, match=r"gpus = 1 but its Triton server is tensor-parallel over tp = 2") as e:
        export_core.k8s(_triton_project(gpus=1), {"bloom-7b1": "cuda"})
    assert "\n" not in e.value.one_line()
    assert "nvidia.com/gpu: 2" in export_core.k8s(_triton_project(gpus=2), {"bloom-7b1": "cuda"})


def test_triton_needs_its_model_repository_on_the_claim():
    target = Target("bloom-7b1", TRITON_FLAGS, True, None, "envkit/envkit-bloom-7b1:latest")
    with pytest.raises(InputError, match="needs a model repository, and no model_pvc"):
        export_core.k8s(Project("envkit.toml", (target,)), {"bloom-7b1": "cuda"})
    with pytest.raises(InputError, match="model_repository /models is not under model_pvc's mount path /mnt"):
        export_core.k8s(_triton_project(model_repository="/models"), {"bloom-7b1": "cuda"})


def test_a_triton_target_of_the_project_file_through_the_cli(tmp_path):
    f = tmp_path / "envkit.toml"
    f.write_text('[k8s]\nmodel_pvc = "bloom7b1-pvc:/mnt"\nmodel_repository = "/mnt/triton_repo"\n'
                 '[[target]]\nname = "bloom-7b1"\ngpu = "H100"\nengine = "triton-trtllm"\noffline = true\n'
                 '[target.k8s]\ngpus = 2\n', encoding="utf-8")
    p = cli("matrix", "export", "--format", "k8s", "--project", str(f))
    assert p.returncode == 0, p.stderr
    docs = _by_name(_strict(p.stdout))
    assert set(docs) == {"Deployment/bloom-7b1-tritoninferenceserver", "Service/bloom-7b1-tritoninferenceserver"}


# ---------------------------------------------------------------- names and platforms

def test_names_are_dns_labels_derived_safely():
    assert k8s.k8s_name("h100", "-selftest") == "h100-selftest"
    assert k8s.k8s_name("4090-box", "-tritoninferenceserver") == "t-4090-box-tritoninferenceserver"  # a Service name starts with a letter
    long_a, long_b = "a" * 62 + "b", "a" * 62 + "c"
    na, nb = k8s.k8s_name(long_a, "-tritoninferenceserver"), k8s.k8s_name(long_b, "-tritoninferenceserver")
    assert len(na) <= 63 and len(nb) <= 63 and na != nb and na.endswith("-tritoninferenceserver")
    assert k8s.k8s_name("ends-", "") == "ends"


def test_two_targets_whose_names_meet_are_refused():
    ts = tuple(Target(n, (("platform", "cpu"),), True, None, f"envkit/envkit-{n}:latest") for n in ("a", "a-"))
    with pytest.raises(InputError, match="targets a and a- would both be Job a-selftest"):
        export_core.k8s(Project("envkit.toml", ts), ())


def test_the_vendor_comes_from_the_solution_when_the_caller_has_it_else_from_the_flags():
    t = Target("mi", (("gpu", "MI300X"),), True, None, "envkit/envkit-mi:latest")
    assert "amd.com/gpu: 1" in export_core.k8s(Project("envkit.toml", (t,)), {"mi": "rocm"})
    with pytest.raises(InputError, match='cannot tell from its flags whose GPU it needs') as e:
        export_core.k8s(Project("envkit.toml", (t,)), ["mi"])
    assert 'add platform = "cuda"' in e.value.fix
    dtk = Target("k100", (("gpu", "K100"), ("dtk", "24.04")), True, None, "envkit/envkit-k100:latest")
    assert "hygon.com/dcu: 1" in export_core.k8s(Project("envkit.toml", (dtk,)), ["k100"])


def test_a_dtk_self_test_job_mounts_the_hosts_hyhal_read_only_from_dtk_23_10():
    """newcomer review 3, D4: the k8s Job of a DTK 24.04 target did not mount /opt/hyhal, which its image loads the
    driver's libraries from; DTK 23.04 images need none."""
    def job(dtk: str) -> dict:
        t = Target("k100", (("gpu", "K100"), ("dtk", dtk)), True, None, "envkit/envkit-k100:latest")
        return yaml.safe_load(export_core.k8s(Project("envkit.toml", (t,)), {"k100": "dtk"}).split("\n", 1)[1])

    spec = job("24.04")["spec"]["template"]["spec"]
    assert {"name": "hyhal", "mountPath": "/opt/hyhal", "readOnly": True} in spec["containers"][0]["volumeMounts"]
    assert {"name": "hyhal", "hostPath": {"path": "/opt/hyhal", "type": "Directory"}} in spec["volumes"]
    old = job("23.04")["spec"]["template"]["spec"]
    assert [v["name"] for v in old["volumes"]] == ["dshm"]


# ---------------------------------------------------------------- bad input: one line, exit 2

CPU = '[[target]]\nname = "cpu"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\n'
H100 = '[[target]]\nname = "h100"\ngpu = "H100"\nplatform = "cuda"\noffline = true\n'
BAD = [
    (H100 + '[target.k8s]\ngpus = "two"\n', "target h100: [target.k8s] gpus must be a whole number of GPUs, got 'two'"),
    (H100 + '[target.k8s]\ngpus = 0\n', "gpus must be from 1 to 64, got 0"),
    (H100 + '[target.k8s]\ngpus = 1.5\n', "gpus must be a whole number of GPUs, got 1.5"),
    (H100 + '[target.k8s]\ngpus = true\n', "gpus must be a whole number of GPUs, got True"),
    (H100 + '[target.k8s]\ngpus = 65\n', "gpus must be from 1 to 64"),
    ('[k8s]\ngpus = -2\n' + H100, "[k8s] gpus must be from 1 to 64, got -2"),
    (H100 + '[target.k8s]\ngpus = ' + "9" * 5000 + '\n', "more than 4300 digits"),
    (H100 + '[target.k8s]\ngpus = 99999999999999999\n', "a 17-digit number"),
    (CPU + '[target.k8s]\ngpus = 2\n', "target cpu: [target.k8s] gpus = 2, but the target runs on CPUs"),
    ('[k8s]\ntolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedul" }]\n' + H100,
     "[k8s] tolerations item 1: effect 'NoSchedul' is not NoSchedule, PreferNoSchedule or NoExecute"),
    ('[k8s]\ntolerations = [{ key = "nvidia.com/gpu", operator = "In" }]\n' + H100, "tolerations item 1: operator 'In' is not Equal or Exists"),
    ('[k8s]\ntolerations = [{ key = "gpu", operator = "Exists", value = "x" }]\n' + H100, 'item 1: a value with operator = "Exists"'),
    ('[k8s]\ntolerations = [{ effect = "NoSchedule" }]\n' + H100, "tolerations item 1: no key"),
    ('[k8s]\ntolerations = [{ key = "nvidia.com/gpu", operatr = "Exists" }]\n' + H100, "item 1: unknown key 'operatr'"),
    ('[k8s]\ntolerations = { key = "nvidia.com/gpu" }\n' + H100, "[k8s] tolerations must be a list of tables"),
    ('[k8s]\nnamespace = "LLM_CI"\n' + H100, "[k8s] namespace 'LLM_CI' is not a DNS-1123 label"),
    ('[k8s]\nruntime_class = "Nvidia"\n' + H100, "[k8s] runtime_class 'Nvidia' is not a Kubernetes object name"),
    ('[k8s]\nnode_selector = { "bad label!" = "x" }\n' + H100, "is not a Kubernetes label key"),
    ('[k8s]\nnode_selector = { "gpu" = 1 }\n' + H100, "label gpu: 1 is not a Kubernetes label value"),
    ('[k8s]\nshm_size = "lots"\n' + H100, "[k8s] shm_size 'lots' is not a Kubernetes quantity of bytes"),
    ('[k8s]\nshm_size = "16GB"\n' + H100, "'16GB' is not a Kubernetes quantity of bytes"),
    ('[k8s]\nshm_size = "0Gi"\n' + H100, "'0Gi' is no memory at all"),
    ('[k8s]\nshm_size = 16\n' + H100, "16 is not a Kubernetes quantity of bytes"),
    ('[k8s]\nmodel_pvc = "bloom7b1-pvc"\n' + H100, "[k8s] model_pvc 'bloom7b1-pvc' is not CLAIM:/MOUNT/PATH"),
    ('[k8s]\nmodel_pvc = "pvc:mnt"\n' + H100, "'mnt' is not an absolute path"),
    ('[k8s]\nmodel_repository = "/mnt/../etc"\n' + H100, "is not an absolute path without .."),
    (H100 + '[target.k8s]\nmodel_pvc = "pvc:/mnt"\n', "model_pvc and model_repository are a Triton server's"),
    ('[k8s]\nreplicas = 2\n' + H100, "unknown key `replicas` in [k8s]"),
    ('k8s = 3\n' + H100, "[k8s] must be a table"),
    (H100 + 'k8s = "gpus=2"\n', "target h100: [target.k8s] must be a table"),
]


@pytest.mark.parametrize("text,needle", BAD, ids=[n[:50] for _, n in BAD])
def test_bad_k8s_values_are_one_line_and_exit_2(text, needle, tmp_path):
    f = tmp_path / "envkit.toml"
    f.write_text(text, encoding="utf-8")
    p = cli("matrix", "export", "--format", "k8s", "--project", str(f))
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "" and p.stderr.count("\n") == 1 and p.stderr.startswith("envkit: error: "), p.stderr
    assert needle in p.stderr and "(fix: " in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_the_parser_reads_every_key():
    p = project_file.parse((REPO / PROJECT).read_text(encoding="utf-8"), "envkit.toml")
    x2 = p.target("h100-x2").k8s
    assert x2.gpus == 2 and x2.shm_size == "32Gi" and x2.tolerations is not None and len(x2.tolerations) == 2
    assert x2.tolerations[1].value == "llm" and x2.node_selector == (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)
    assert p.k8s.namespace == "llm-ci" and p.target("cpu-py311").k8s == K8sSettings()
    q = project_file.parse('[k8s]\nmodel_pvc = "bloom7b1-pvc:/mnt/"\n' + CPU, "envkit.toml")
    assert q.k8s.model_pvc == ModelVolume("bloom7b1-pvc", "/mnt")
