"""The plan of a container engine (pure): stages of typed steps FROM the container the resolver chose (through the
site's registry), written by the one renderer (core/render.py) like every other plan; the Triton model repository the
build fills, and the scripts that run where only the target GPU can do the work (building the TensorRT engines) or
where the upstream recipe builds a backend image.

The model repository is the backend's own (tensorrtllm_backend's all_models/inflight_batcher_llm, or
fastertransformer_backend's all_models/bloom), taken at build time from GitHub's archive of the commit the matrix's
row names: COPYed from the context's sources/ where it is there (carried), else fetched in the Dockerfile's fill stage
from GitHub or the site's [rewrite] of it (a network step the plan names; refused with --offline). envkit's
inimage/fill_triton_repo.py fills it there from envkit/fill_triton_repo.json, the values computed here: string.Template
substitution of ${name}, as the tag's tools/fill_template.py does. Every structural parameter (a number, a bool, a data
type) is filled; the string parameters left as ${name} are what upstream leaves unset too (the backend reads them as
"not given"). The repository holds none of the backend's files.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from envkit import __version__
from envkit.core.render import Templates, json_bytes, pip_conf, site_env
from envkit.errors import InputError
from envkit.model.engines import CARRIED_ENSEMBLES, NVIDIA_INDEX, BackendArchive, EngineOptions, EngineSolution, EngineStep, WheelBase
from envkit.model.matrix import Matrix
from envkit.model.plan import (
    AptStep,
    Carried,
    CopyFilesStep,
    CopyFromStageStep,
    EnginePlan,
    EngineStage,
    EnvStep,
    FillModelRepoStep,
    ImageLabelsStep,
    Network,
    PipStep,
    ServerStep,
    SiteSettingsStep,
    Step,
)
from envkit.model.site import Site

MODEL_REPO = "/opt/envkit/model_repo"
ENGINE_DIR = "/engines"  # trtllm-build's output, made on the target GPU and mounted
CHECKPOINT_DIR = "/checkpoints"  # TensorRT-LLM checkpoints (convert_checkpoint.py's output), mounted
TOKENIZER_DIR = "/models/tokenizer"  # the Hugging Face tokenizer files, mounted
MODEL_DIR = "/models/model"  # trtllm-serve's and vLLM's model directory, mounted
FT_CHECKPOINT = "/models/c-model"  # FasterTransformer's converted checkpoint (huggingface_bloom_convert.py), mounted
PORTS = (8000, 8001, 8002)  # Triton: HTTP, gRPC, metrics
FT_HUB_TOKENIZER = "'bigscience/bloom'"
GITHUB = "https://github.com"
TRTLLM_BACKEND_REPOSITORY = f"{GITHUB}/triton-inference-server/tensorrtllm_backend"
FT_BACKEND_REPOSITORY = f"{GITHUB}/triton-inference-server/fastertransformer_backend"
ENSEMBLE_ROOT, ENSEMBLE_MODELS = "all_models/inflight_batcher_llm", ("ensemble", "preprocessing", "postprocessing", "tensorrt_llm")
FT_ROOT, FT_MODELS = "all_models/bloom", ("ensemble", "preprocessing", "postprocessing", "fastertransformer")
ENSEMBLE_LEFT_OUT = (("tensorrt_llm/1/model.py", "the tensorrt_llm model's Python implementation (from 0.14): its config.pbtxt "
                      "names the tensorrtllm backend, the C++ one, which does not read it"),)
FT_LEFT_OUT = (("fastertransformer/1/config.ini", "bloom-560m's config: the converted checkpoint (model_checkpoint_path) "
                "carries its own"),)
FILL_SCRIPT = "envkit/fill_triton_repo.py"  # inimage/fill_triton_repo.py, copied into the context
FILL_VALUES = "envkit/fill_triton_repo.json"
FILL_STAGE = "model-repo"


def model_archive(m: Matrix, sol: EngineSolution) -> Optional[BackendArchive]:
    """The backend archive whose model repository this solution serves, at the commit the matrix names; None where
    the engine needs none (trtllm-serve, a vLLM container whose repository the user brings)."""
    if sol.workflow == "fastertransformer":
        ft = m.fastertransformer
        if ft is None:
            raise InputError("matrix.toml has no [[fastertransformer]] row", "use the matrix.toml envkit ships")
        return BackendArchive(FT_BACKEND_REPOSITORY, ft.backend_commit, "main", FT_ROOT, FT_MODELS, FT_LEFT_OUT)
    if sol.workflow != "ensemble":
        return None
    v = sol.trtllm.version if sol.trtllm is not None else sol.backend.version if sol.backend is not None else None
    if v is None or v not in CARRIED_ENSEMBLES:
        carried = ", ".join(str(x) for x in CARRIED_ENSEMBLES)
        raise InputError(f"envkit fills the Triton ensemble of TensorRT-LLM {carried}, not {v}",
                         f"add --trtllm with one of {carried} (envkit resolve --engine triton-trtllm --trtllm 0.19.0 shows it), "
                         "or use --engine trtllm (trtllm-serve needs no model repository)")
    row = next((b for b in m.trtllm_backend if b.version == v), None)
    if row is None:
        raise InputError(f"matrix.toml has no [[trtllm_backend]] row for tensorrtllm_backend {v}, whose commit the model "
                         "repository is taken at", "use the matrix.toml envkit ships (envkit matrix refresh derives the rows)")
    return BackendArchive(TRTLLM_BACKEND_REPOSITORY, row.commit, f"v{v}", ENSEMBLE_ROOT, ENSEMBLE_MODELS, ENSEMBLE_LEFT_OUT)


def _fill_values(sol: EngineSolution, opts: EngineOptions) -> dict[str, str]:
    """The values of the ensemble's ${...} parameters (the seed's fill_template.py calls, corrected: the v0.8.0
    backend accepts batch_scheduler_policy max_utilization or guaranteed_no_evict, never guaranteed_completion)."""
    return {
        "triton_max_batch_size": str(opts.max_batch_size),
        "decoupled_mode": "true" if opts.decoupled else "false",
        "max_queue_delay_microseconds": "0",
        "max_queue_size": "0",
        "preprocessing_instance_count": "1",
        "postprocessing_instance_count": "1",
        "triton_backend": "tensorrtllm",
        "logits_datatype": "TYPE_FP32",
        "encoder_input_features_data_type": "TYPE_FP16",
        "tokenizer_dir": TOKENIZER_DIR,
        "tokenizer_type": "auto",
        "engine_dir": ENGINE_DIR,
        "max_beam_width": "1",
        "batching_strategy": "inflight_fused_batching",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": "0.9",
        "exclude_input_in_output": "True",
        "enable_kv_cache_reuse": "False",
        "add_special_tokens": "True",
        "skip_special_tokens": "True",
    }


def fill_values(sol: EngineSolution, opts: EngineOptions, archive: BackendArchive) -> dict[str, Any]:
    """envkit/fill_triton_repo.json: what inimage/fill_triton_repo.py takes from the archive and how it fills it. For
    FasterTransformer: tensor_para_size = --tp, the checkpoint of that many ranks, and the tokenizer loaded from
    TOKENIZER_DIR instead of the Hugging Face Hub, which an intranet does not reach; its configs have no ${...}."""
    doc: dict[str, Any] = {
        "schema": 1,
        "archive": {"name": archive.name, "commit": archive.commit, "ref": archive.ref, "origin": archive.origin},
        "root": archive.root, "models": list(archive.models), "left_out": dict(archive.left_out),
        "substitute": None, "parameters": {}, "replace": []}
    if sol.workflow == "fastertransformer":
        doc["parameters"] = {"fastertransformer/config.pbtxt": {
            "tensor_para_size": str(opts.tp), "model_checkpoint_path": f"{FT_CHECKPOINT}/{opts.tp}-gpu/"}}
        doc["replace"] = [{"file": f"{side}/1/model.py", "old": FT_HUB_TOKENIZER, "new": repr(TOKENIZER_DIR)}
                          for side in ("preprocessing", "postprocessing")]
    else:
        doc["substitute"] = _fill_values(sol, opts)
    return doc


@dataclass(frozen=True)
class ModelRepo:
    """How the build gets the model repository: the archive, carried in the context's sources/ or fetched from `url`
    (GitHub's, or the site's [rewrite] of it), and the plan's step for it."""
    archive: BackendArchive
    carried: bool
    url: Optional[str]
    step: EngineStep
    cafile: bool = False  # an https mirror and the site's CA certificate: the fetch trusts it


def model_repo(archive: BackendArchive, site: Site, *, carried: bool, offline: bool, where: Optional[str]) -> ModelRepo:
    """The model repository's step: COPY the carried archive (no network), or fetch it through the site's [rewrite] of
    GitHub (none: from GitHub). Refused offline without the archive, and with a site that does not mirror GitHub.
    `where`: the context directory (None: -o - or --dry-run, where nothing is carried)."""
    a = archive
    title = f"the Triton model repository: {a.root}/{{{','.join(a.models)}}} of {a.what}, GitHub's archive"
    place = f"{where}/{a.path}" if where else f"the context's {a.path}"
    if carried:
        why = f"carried at {a.path} (from {a.origin}); envkit/fill_triton_repo.py fills it from {FILL_VALUES}"
        return ModelRepo(a, True, None, EngineStep(FILL_STAGE, title, why))
    if offline:
        missing = f"{place} is not there" if where else "-o - and --dry-run write no context to carry it in"
        raise InputError(f"--offline does not apply without the model repository's archive: step `{FILL_STAGE}` needs "
                         f"GitHub's archive of {a.what}, {a.origin}, and {missing}",
                         f"put that file at {place} (the build then COPYs it and reaches no network), or drop --offline "
                         "(the build fetches it" + (f" through the site's [rewrite] of {GITHUB})" if site.given else ")"))
    url = site.rewrite(a.origin) if site.given else a.origin
    if url is None:
        raise InputError(f"the site file {site.path} has no [rewrite] for {GITHUB}, where the model repository's archive is: "
                         f"{a.origin}", f'add "{GITHUB}" = "http://YOUR-MIRROR/github" under [rewrite], or put that file at '
                         f"{place} (carried: no network step)")
    network = "site" if site.given else "internet"
    source = f"the site's [rewrite] of {GITHUB}" if site.given else GITHUB
    why = (f"fetched from {source} (not carried: put {a.origin} at {a.path} and generate again for a build that reaches "
           f"no network); envkit/fill_triton_repo.py fills it from {FILL_VALUES}")
    cafile = bool(site.ca_cert) and url.startswith("https://")
    return ModelRepo(a, False, url, EngineStep(FILL_STAGE, title, why, network, (url,)), cafile)


def _launch(opts: EngineOptions) -> list[str]:
    """tensorrtllm_backend's scripts/launch_triton_server.py, written out: one tritonserver per rank under mpirun;
    ranks after the first load only the tensorrt_llm model."""
    cmd = ["mpirun", "--allow-run-as-root"]
    for i in range(opts.tp):
        cmd += ["-n", "1", "/opt/tritonserver/bin/tritonserver", f"--model-repository={MODEL_REPO}"]
        if i:
            cmd += ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]
        cmd += [f"--grpc-port={PORTS[1]}", f"--http-port={PORTS[0]}", f"--metrics-port={PORTS[2]}",
                "--disable-auto-complete-config", f"--backend-config=python,shm-region-prefix-name=prefix{i}_"]
        if i < opts.tp - 1:
            cmd.append(":")
    return cmd


def server_command(sol: EngineSolution, opts: EngineOptions) -> list[str]:
    if sol.workflow == "ensemble":
        return _launch(opts)
    if sol.workflow == "trtllm-serve":
        return ["trtllm-serve", MODEL_DIR, "--host", "0.0.0.0", "--port", str(PORTS[0]), "--tp_size", str(opts.tp),
                "--max_batch_size", str(opts.max_batch_size)]
    return ["tritonserver", f"--model-repository={MODEL_REPO}", f"--http-port={PORTS[0]}", f"--grpc-port={PORTS[1]}",
            f"--metrics-port={PORTS[2]}"]


def stack_line(sol: EngineSolution) -> str:
    parts = [sol.engine]
    if sol.trtllm is not None:
        parts.append(f"TensorRT-LLM {sol.trtllm.version}")
    elif sol.backend is not None:
        parts.append(f"tensorrtllm_backend {sol.backend.version}")
    if sol.triton is not None:
        parts.append(f"Triton {sol.triton.release}" + (f" (server {sol.triton.server})" if sol.triton.server else ""))
        if sol.triton.vllm:
            parts.append(f"vLLM {sol.triton.vllm_version}")
    if sol.legacy:
        parts.append("legacy FasterTransformer")
    return ", ".join(parts)


def backend_image(sol: EngineSolution) -> Optional[str]:
    """The name the upstream backend recipe's image gets (build-backend.sh tags it); None for a container used as it is."""
    if sol.build != "backend":
        return None
    if sol.workflow == "fastertransformer":
        return f"envkit/fastertransformer-backend:triton{sol.triton.release if sol.triton else ''}"
    return f"envkit/tensorrtllm-backend:{sol.backend.version if sol.backend else ''}"


def build_backend_script(sol: EngineSolution, site: Site) -> Optional[str]:
    """Upstream's own recipe for a backend image, run in a checkout of the backend's source at the tag, before the
    Dockerfile: tensorrtllm_backend's dockerfile/Dockerfile.trt_llm_backend, or fastertransformer_backend's
    docker/Dockerfile, with the Triton base image through the site's registry."""
    tag = backend_image(sol)
    if tag is None or sol.triton is None:
        return None
    base = site.image(f"nvcr.io/nvidia/tritonserver:{sol.triton.release}-py3")
    if sol.workflow == "fastertransformer":
        recipe = ["docker", "build", "-t", tag, "--build-arg", f"TRITON_VERSION={sol.triton.release}",
                  "--build-arg", f"BASE_IMAGE={base}", "-f", "docker/Dockerfile", "."]
        where = "fastertransformer_backend (https://github.com/triton-inference-server/fastertransformer_backend, the last commit c6936c39)"
    else:
        name, _, base_tag = base.rpartition(":")
        recipe = ["docker", "build", "-t", tag, "--build-arg", f"BASE_IMAGE={name}", "--build-arg", f"BASE_TAG={base_tag}",
                  "-f", "dockerfile/Dockerfile.trt_llm_backend", "."]
        b = sol.backend
        where = (f"tensorrtllm_backend at tag v{b.version} with its tensorrt_llm submodule ({b.tensorrt_llm_commit})" if b
                 else "tensorrtllm_backend")
    return ("#!/bin/sh\n"
            f"# Builds the backend image the Dockerfile starts FROM, by upstream's own recipe. Run it in a checkout of\n"
            f"# {where}:\n"
            "#   sh /path/to/this/envkit/build-backend.sh\n"
            "# The recipe downloads what its Dockerfile names (TensorRT, pip packages): on an intranet, run it where\n"
            "# those mirrors are reachable, then push the image to the site's registry.\n"
            "set -eu\n" + " ".join(shlex.quote(p) for p in recipe) + "\n")


def build_engine_script(sol: EngineSolution, opts: EngineOptions) -> Optional[str]:
    """trtllm-build on the target GPU, inside the image: engines are tied to the GPU arch and the TensorRT version."""
    if sol.workflow != "ensemble":
        return None
    return ("#!/bin/sh\n"
            "# Builds the TensorRT engines on the GPU they will run on (an engine runs only on the arch and TensorRT\n"
            "# version it was built with), inside this image:\n"
            f"#   docker run --rm --gpus all -v CHECKPOINTS:{CHECKPOINT_DIR}:ro -v ENGINES:{ENGINE_DIR} IMAGE sh "
            "/opt/envkit/build-engine.sh\n"
            f"# CHECKPOINTS: TensorRT-LLM checkpoints for {opts.tp} rank(s), from the model's convert_checkpoint.py\n"
            "# (TensorRT-LLM's examples/<model>/ at the same release).\n"
            "set -eu\n"
            f"trtllm-build --checkpoint_dir {CHECKPOINT_DIR} --output_dir {ENGINE_DIR} --max_batch_size {opts.max_batch_size}\n")


def _solution_label(sol: EngineSolution) -> str:
    """resolve's answer (its `engine` document), as a pip stack's label carries its solution."""
    return json.dumps(sol.to_json(), sort_keys=True, separators=(",", ":"))


def _labels_step(sol: EngineSolution, description: str, base: str) -> Step:
    """OCI labels and the answer: io.envkit.solution, the label every envkit image carries (envkit inspect reads it)."""
    labels = (("org.opencontainers.image.title", f"envkit {sol.engine} image"),
              ("org.opencontainers.image.description", description),
              ("org.opencontainers.image.vendor", f"envkit {__version__}"),
              ("org.opencontainers.image.base.name", base),
              ("io.envkit.solution", _solution_label(sol)))
    return Step("labels", "labels", "OCI labels and the resolved answer (envkit inspect reads io.envkit.solution)",
                ImageLabelsStep(labels))


def _server_step(sol: EngineSolution, opts: EngineOptions) -> Step:
    ports = PORTS if sol.workflow != "trtllm-serve" else PORTS[:1]
    return Step("server", "the server", "the ports it listens on and its command", ServerStep(ports, tuple(server_command(sol, opts))))


def _fill_step(repo: ModelRepo) -> Step:
    a, s = repo.archive, repo.step
    if repo.carried:
        payload = FillModelRepoStep(MODEL_REPO, archive=a.path)
    else:
        payload = FillModelRepoStep(MODEL_REPO, fetch=repo.url, cafile=repo.cafile)
    return Step(s.id, s.title, s.why, payload, Network(s.network), s.reaches)


def _container_stages(sol: EngineSolution, opts: EngineOptions, site: Site, repo: Optional[ModelRepo]) -> tuple[EngineStage, ...]:
    base = backend_image(sol) or site.image(sol.image)
    stages = []
    if repo is not None:
        why = "the backend's model repository, unpacked and filled; the runtime stage takes only the filled tree"
        stages.append(EngineStage(FILL_STAGE, base, why, (_fill_step(repo),)))
    steps = []
    if repo is not None:
        steps.append(Step("copy-model-repo", "the filled model repository", f"from stage {FILL_STAGE}",
                          CopyFromStageStep(FILL_STAGE, MODEL_REPO)))
    scripts = ("envkit/solution.json",) + (("envkit/build-engine.sh",) if sol.workflow == "ensemble" else ())
    steps.append(Step("envkit-files", "envkit's files", "the answer" + (" and the engine build script" if len(scripts) > 1 else ""),
                      CopyFilesStep(scripts, "/opt/envkit/")))
    steps.append(_labels_step(sol, stack_line(sol), site.image(sol.image)))
    if sol.workflow == "fastertransformer":
        steps.append(Step("gpus", "the GPUs", f"the {opts.tp} rank(s) of tensor_para_size",
                          EnvStep((("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(opts.tp))),))))
    steps.append(_server_step(sol, opts))
    why = "NVIDIA's container as it is" if sol.build != "backend" else "the backend image build-backend.sh makes"
    stages.append(EngineStage("runtime", base, why + ", with envkit's files, labels and the server's command", tuple(steps)))
    return tuple(stages)


def _wheel_stages(sol: EngineSolution, opts: EngineOptions, site: Site, base: WheelBase) -> tuple[EngineStage, ...]:
    """trtllm-serve from TensorRT-LLM's wheel on NVIDIA's CUDA runtime image: apt (libopenmpi-dev, as the install guide
    says) and pip through the site's mirrors, the wheel from NVIDIA's index or the site's rewrite of it."""
    r = sol.trtllm
    assert r is not None
    index = site.rewrite(NVIDIA_INDEX) if site.given else NVIDIA_INDEX
    if index is None:
        raise InputError(f"the site file {site.path} has no [rewrite] for {NVIDIA_INDEX}, where TensorRT-LLM's wheels are",
                         f'add "{NVIDIA_INDEX}" = "http://YOUR-MIRROR/pypi-nvidia" under [rewrite], or drop --from-wheel')
    network = Network.SITE if site.given else Network.INTERNET
    steps = []
    if site.given:
        steps.append(Step("site", "site settings", "the site's mirrors and CA certificate", SiteSettingsStep("runtime")))
    steps.append(Step("apt", "Python's pip and MPI", "libopenmpi-dev, as TensorRT-LLM's install guide says",
                      AptStep("runtime", ("python3-pip", "libopenmpi-dev")), network))
    steps.append(Step("trtllm", f"TensorRT-LLM {r.version}",
                      "its wheel, from NVIDIA's index" + (" (the site's rewrite of it)" if site.given else ""),
                      PipStep((f"tensorrt_llm=={r.version}",), extra_index_url=index), network, (index,)))
    steps.append(Step("envkit-files", "envkit's files", "the answer", CopyFilesStep(("envkit/solution.json",), "/opt/envkit/")))
    steps.append(_labels_step(sol, f"TensorRT-LLM {r.version} (wheel), CUDA {base.cuda}", site.image(base.image)))
    steps.append(_server_step(sol, opts))
    why = f"NVIDIA's CUDA {base.cuda} runtime image, its Python {base.python} with TensorRT-LLM's wheel"
    return (EngineStage("runtime", site.image(base.image), why, tuple(steps)),)


def _notes(sol: EngineSolution, site: Site) -> tuple[str, ...]:
    notes = []
    if sol.legacy:
        notes.append("LEGACY: FasterTransformer is archived (2023-10-19); envkit resolve names its successor.")
    if sol.build == "backend":
        notes.append("FROM: the image envkit/build-backend.sh builds by the backend's own recipe on " + site.image(sol.image))
    return tuple(notes)


def plan_engine(sol: EngineSolution, opts: EngineOptions, site: Site, templates: Templates, wheel: Optional[WheelBase] = None, *,
                archive: Optional[BackendArchive] = None, carried: bool = False, offline: bool = False,
                where: Optional[str] = None) -> EnginePlan:
    """The plan of a container engine's context. `wheel`: the CUDA image of --from-wheel. `archive` (model_archive's):
    the backend archive whose model repository the build fills; `carried`: the context directory `where` holds it in
    sources/; `offline`: refuse a build that would fetch it. `templates`: the scripts the context carries
    (apply-site.sh, fill_triton_repo.py)."""
    opts.check()
    files: dict[str, bytes] = {"envkit/solution.json": (json.dumps(sol.to_json(), indent=2, sort_keys=True) + "\n").encode()}
    repo = None
    if wheel is not None:
        stages = _wheel_stages(sol, opts, site, wheel)
        stack = f"{sol.engine}, TensorRT-LLM {sol.trtllm.version if sol.trtllm else ''} wheel on CUDA {wheel.cuda} (Python {wheel.python})"
        if site.given:
            files["envkit/site/apply-site.sh"] = templates.scripts["apply-site.sh"]
            files["envkit/site/site.env"] = site_env(site, False)
            conf = pip_conf(site, False)
            if conf:
                files["envkit/site/pip.conf"] = conf
            if site.ca_cert:
                files["envkit/site/ca.crt"] = site.ca_cert
    else:
        repo = None if archive is None else model_repo(archive, site, carried=carried, offline=offline, where=where)
        stages = _container_stages(sol, opts, site, repo)
        stack = stack_line(sol)
        if repo is not None:
            files[FILL_SCRIPT] = templates.scripts["fill_triton_repo.py"]
            files[FILL_VALUES] = json_bytes(fill_values(sol, opts, repo.archive))
            if repo.cafile and site.ca_cert:
                files["envkit/site/ca.crt"] = site.ca_cert
    for name, script in (("envkit/build-backend.sh", build_backend_script(sol, site)),
                         ("envkit/build-engine.sh", build_engine_script(sol, opts))):
        if script is not None:
            files[name] = script.encode()
    a = None if repo is None else repo.archive
    carried_files = (Carried(a.path, a.what, a.origin),) if repo is not None and repo.carried and a is not None else ()
    return EnginePlan(sol.engine, sol.workflow, stack, offline, site, _notes(sol, site), stages, carried_files,
                      tuple(sorted(files.items())))
