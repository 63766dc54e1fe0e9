"""The build context of a container engine (pure): a Dockerfile FROM the container the resolver chose (through the
site's registry), the Triton model repository the build fills, and the scripts that run where only the target GPU
can do the work (building the TensorRT engines) or where the upstream recipe builds a backend image.

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
from envkit.core.render import json_bytes, label_value, pip_conf, site_env
from envkit.errors import InputError
from envkit.model.engines import CARRIED_ENSEMBLES, NVIDIA_INDEX, BackendArchive, EngineOptions, EngineSolution, EngineStep, WheelBase
from envkit.model.matrix import Matrix
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
ENGINE_PLAN = "envkit/engine.plan.json"
FILL_STAGE = "model-repo"
FILL_DIR = "/tmp/envkit"  # the fill stage's work directory (the final stage takes only the filled repository)


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


def engine_plan(sol: EngineSolution, repo: ModelRepo, offline: bool) -> dict[str, Any]:
    """envkit/engine.plan.json: the steps of the Dockerfile that the plan names (what each reaches) and what the
    context carries."""
    a = repo.archive
    return {"schema": 1, "engine": sol.engine, "workflow": sol.workflow, "offline": offline,
            "steps": [repo.step.to_json()],
            "carried": [{"path": a.path, "what": a.what, "origin": a.origin}] if repo.carried else []}


def _fill_stage(base: str, repo: ModelRepo) -> list[str]:
    """The Dockerfile's first stage: the archive unpacked and filled; the final stage COPYs only the filled tree."""
    a = repo.archive
    lines = [f"# The model repository: {a.what}, {a.root} of GitHub's archive,",
             f"# filled by {FILL_SCRIPT} from {FILL_VALUES}."]
    if not repo.carried:
        lines += ["# Not carried, so fetched here. For a build that reaches no network, put", f"#   {a.origin}",
                  f"# at {a.path} in this context and generate again (--offline then holds)."]
    lines.append(f"FROM {base} AS {FILL_STAGE}")
    run = ["python3", f"{FILL_DIR}/fill_triton_repo.py", f"{FILL_DIR}/fill_triton_repo.json"]
    if repo.carried:
        lines.append(f"COPY {a.path} {FILL_SCRIPT} {FILL_VALUES} {FILL_DIR}/")
        run += ["--archive", f"{FILL_DIR}/{a.name}"]
    else:
        assert repo.url is not None
        copied = [FILL_SCRIPT, FILL_VALUES] + (["envkit/site/ca.crt"] if repo.cafile else [])
        lines.append(f"COPY {' '.join(copied)} {FILL_DIR}/")
        run += ["--fetch", repo.url] + (["--cafile", f"{FILL_DIR}/ca.crt"] if repo.cafile else [])
    run += ["--out", MODEL_REPO]
    lines.append("RUN " + " ".join(shlex.quote(p) for p in run))
    return lines


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


def _labels(sol: EngineSolution, description: str, base: str) -> str:
    """The image's LABEL instruction: OCI labels and the answer (io.envkit.engine)."""
    solution = json.dumps(sol.flat(), sort_keys=True, separators=(",", ":"))
    return "LABEL " + " \\\n      ".join([
        f'org.opencontainers.image.title="envkit {sol.engine} image"',
        f'org.opencontainers.image.description="{label_value(description)}"',
        f'org.opencontainers.image.vendor="envkit {__version__}"',
        f'org.opencontainers.image.base.name="{label_value(base)}"',
        f'io.envkit.engine="{label_value(solution)}"'])


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
        where = (f"tensorrtllm_backend at tag v{b.version} with its tensorrt_llm submodule ({b.tensorrt_llm_commit})" if b else "tensorrtllm_backend")
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
            f"#   docker run --rm --gpus all -v CHECKPOINTS:{CHECKPOINT_DIR}:ro -v ENGINES:{ENGINE_DIR} IMAGE sh /opt/envkit/build-engine.sh\n"
            f"# CHECKPOINTS: TensorRT-LLM checkpoints for {opts.tp} rank(s), from the model's convert_checkpoint.py\n"
            "# (TensorRT-LLM's examples/<model>/ at the same release).\n"
            "set -eu\n"
            f"trtllm-build --checkpoint_dir {CHECKPOINT_DIR} --output_dir {ENGINE_DIR} --max_batch_size {opts.max_batch_size}\n")


def dockerfile(sol: EngineSolution, opts: EngineOptions, site: Site, command: str, repo: Optional[ModelRepo] = None) -> str:
    base = backend_image(sol) or site.image(sol.image)
    lines = [f"# Generated by envkit {__version__}. Do not edit: regenerate with",
             f"#   {command}",
             f"# Stack: {stack_line(sol)}"]
    if sol.legacy:
        lines.append("# LEGACY: FasterTransformer is archived (2023-10-19); envkit resolve names its successor.")
    if sol.build == "backend":
        lines.append("# FROM: the image envkit/build-backend.sh builds by the backend's own recipe on " + site.image(sol.image))
    if repo is not None:
        lines += [""] + _fill_stage(base, repo)
    lines += ["", f"FROM {base}"]
    if repo is not None:
        lines.append(f"COPY --from={FILL_STAGE} {MODEL_REPO}/ {MODEL_REPO}/")
    scripts = ["envkit/solution.json"] + (["envkit/build-engine.sh"] if sol.workflow == "ensemble" else [])
    lines.append(f"COPY {' '.join(scripts)} /opt/envkit/")
    lines.append(_labels(sol, stack_line(sol), site.image(sol.image)))
    if sol.workflow == "fastertransformer":
        lines.append(f"ENV CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(opts.tp))}")
    lines.append("EXPOSE " + " ".join(str(p) for p in (PORTS if sol.workflow != "trtllm-serve" else PORTS[:1])))
    lines.append("CMD " + json.dumps(server_command(sol, opts)))
    return "\n".join(lines) + "\n"


def _wheel_dockerfile(sol: EngineSolution, opts: EngineOptions, site: Site, command: str, base: WheelBase) -> tuple[str, dict[str, bytes]]:
    """trtllm-serve from TensorRT-LLM's wheel on NVIDIA's CUDA runtime image: apt (libopenmpi-dev, as the install guide
    says) and pip through the site's mirrors, the wheel from NVIDIA's index or the site's rewrite of it."""
    r = sol.trtllm
    assert r is not None
    index = site.rewrite(NVIDIA_INDEX) if site.given else NVIDIA_INDEX
    if index is None:
        raise InputError(f"the site file {site.path} has no [rewrite] for {NVIDIA_INDEX}, where TensorRT-LLM's wheels are",
                         f'add "{NVIDIA_INDEX}" = "http://YOUR-MIRROR/pypi-nvidia" under [rewrite], or drop --from-wheel')
    files: dict[str, bytes] = {}
    lines = [f"# Generated by envkit {__version__}. Do not edit: regenerate with", f"#   {command}",
             f"# Stack: {sol.engine}, TensorRT-LLM {r.version} wheel on CUDA {base.cuda} (Python {base.python})", "",
             f"FROM {site.image(base.image)}", 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]']
    if site.given:
        files["envkit/site/site.env"] = site_env(site, False)
        conf = pip_conf(site, False)
        if conf:
            files["envkit/site/pip.conf"] = conf
        if site.ca_cert:
            files["envkit/site/ca.crt"] = site.ca_cert
        lines += ["COPY envkit/site/ /opt/envkit/site/", "RUN sh /opt/envkit/site/apply-site.sh"]
    lines += ["RUN apt-get update \\\n    && apt-get install -y --no-install-recommends python3-pip libopenmpi-dev \\\n"
              "    && rm -rf /var/lib/apt/lists/*",
              f"RUN python3 -m pip install --no-cache-dir \"tensorrt_llm=={r.version}\" --extra-index-url {index}",
              "COPY envkit/solution.json /opt/envkit/"]
    lines.append(_labels(sol, f"TensorRT-LLM {r.version} (wheel), CUDA {base.cuda}", site.image(base.image)))
    lines += [f"EXPOSE {PORTS[0]}", "CMD " + json.dumps(server_command(sol, opts))]
    return "\n".join(lines) + "\n", files


def render_engine(sol: EngineSolution, opts: EngineOptions, site: Site, command: str, wheel: Optional[WheelBase] = None,
                  apply_site: bytes = b"", *, archive: Optional[BackendArchive] = None, carried: bool = False,
                  offline: bool = False, where: Optional[str] = None, fill_script: bytes = b"") -> dict[str, bytes]:
    """Every file of the context, by relative path. `wheel`: the CUDA image of --from-wheel, with `apply_site`
    (inimage/apply-site.sh) for a site's mirrors. `archive` (model_archive's): the backend archive whose model
    repository the build fills with `fill_script` (inimage/fill_triton_repo.py); `carried`: the context directory
    `where` holds it in sources/; `offline`: refuse a build that would fetch it."""
    opts.check()
    solution_json = json.dumps(sol.to_json(), indent=2, sort_keys=True) + "\n"
    if wheel is not None:
        text, extra = _wheel_dockerfile(sol, opts, site, command, wheel)
        if site.given:
            extra["envkit/site/apply-site.sh"] = apply_site
        return dict(sorted({"Dockerfile": text.encode(), "envkit/solution.json": solution_json.encode(), **extra}.items()))
    repo = None if archive is None else model_repo(archive, site, carried=carried, offline=offline, where=where)
    files: dict[str, bytes] = {"Dockerfile": dockerfile(sol, opts, site, command, repo).encode(),
                               "envkit/solution.json": solution_json.encode()}
    if repo is not None:
        files[FILL_SCRIPT] = fill_script
        files[FILL_VALUES] = json_bytes(fill_values(sol, opts, repo.archive))
        files[ENGINE_PLAN] = json_bytes(engine_plan(sol, repo, offline))
        if repo.cafile and site.ca_cert:
            files["envkit/site/ca.crt"] = site.ca_cert
    for name, script in (("envkit/build-backend.sh", build_backend_script(sol, site)), ("envkit/build-engine.sh", build_engine_script(sol, opts))):
        if script is not None:
            files[name] = script.encode()
    return dict(sorted(files.items()))
