"""The build context of a container engine (pure): a Dockerfile FROM the container the resolver chose (through the
site's registry), the Triton model repository filled from the solution, and the scripts that run where only the
target GPU can do the work (building the TensorRT engines) or where the upstream recipe builds a backend image.

The model repository is tensorrtllm_backend's (or fastertransformer_backend's) own all_models at the release the
image carries, copied unchanged under dockerfiles/triton/ and filled as upstream's tools/fill_template.py fills it:
string.Template substitution of ${name}. Every structural parameter (a number, a bool, a data type) is filled; the
string parameters left as ${name} are what upstream leaves unset too (the backend reads them as "not given").
"""
from __future__ import annotations

import json
import re
import shlex
from string import Template
from typing import Mapping, Optional

from envkit import __version__
from envkit.core.render import label_value, pip_conf, site_env
from envkit.errors import InputError
from envkit.model.engines import CARRIED_ENSEMBLES, NVIDIA_INDEX, EngineOptions, EngineSolution, WheelBase
from envkit.model.site import Site

MODEL_REPO = "/opt/envkit/model_repo"
ENGINE_DIR = "/engines"  # trtllm-build's output, made on the target GPU and mounted
CHECKPOINT_DIR = "/checkpoints"  # TensorRT-LLM checkpoints (convert_checkpoint.py's output), mounted
TOKENIZER_DIR = "/models/tokenizer"  # the Hugging Face tokenizer files, mounted
MODEL_DIR = "/models/model"  # trtllm-serve's and vLLM's model directory, mounted
FT_CHECKPOINT = "/models/c-model"  # FasterTransformer's converted checkpoint (huggingface_bloom_convert.py), mounted
PORTS = (8000, 8001, 8002)  # Triton: HTTP, gRPC, metrics
FT_TEMPLATES = "fastertransformer_backend-c6936c39"
FT_HUB_TOKENIZER = "'bigscience/bloom'"
NOTICES = ("LICENSE", "SOURCE")  # the template folder's licence and provenance: carried beside, not in, the repository


def templates_for(sol: EngineSolution) -> Optional[str]:
    """The folder under dockerfiles/triton/ whose model repository this solution serves; None where the engine
    needs none (trtllm-serve, a vLLM container whose repository the user brings)."""
    if sol.workflow == "fastertransformer":
        return FT_TEMPLATES
    if sol.workflow != "ensemble":
        return None
    v = sol.trtllm.version if sol.trtllm is not None else sol.backend.version if sol.backend is not None else None
    if v is None or v not in CARRIED_ENSEMBLES:
        carried = ", ".join(str(x) for x in CARRIED_ENSEMBLES)
        raise InputError(f"envkit carries the Triton ensemble of TensorRT-LLM {carried}, not {v}",
                         f"add --trtllm with one of {carried} (envkit resolve --engine triton-trtllm --trtllm 0.19.0 shows it), "
                         "or use --engine trtllm (trtllm-serve needs no model repository)")
    return f"tensorrtllm_backend-{v}"


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


_STRUCTURAL = re.compile(r"^(?!\s*#)(?!\s*string_value:).*\$\{(\w+)\}", re.M)


def unfilled_structural(text: str) -> list[str]:
    """${...} parameters outside a string_value: Triton cannot parse the config while one is left."""
    return _STRUCTURAL.findall(text)


def _set_parameter(text: str, key: str, value: str) -> str:
    """A fastertransformer config's `parameters { key: K value: { string_value: "..." } }`, set to value."""
    pattern = re.compile(r'(key:\s*"' + re.escape(key) + r'"\s*value:\s*\{\s*string_value:\s*")[^"]*(")', re.S)
    out, n = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
    if n != 1:
        raise ValueError(f"the template has {n} parameters named {key}")
    return out


def model_repository(sol: EngineSolution, opts: EngineOptions, templates: Mapping[str, str]) -> dict[str, str]:
    """The filled model repository, by path relative to it."""
    if sol.workflow == "fastertransformer":
        out = dict(templates)
        ft = "fastertransformer/config.pbtxt"
        text = _set_parameter(out[ft], "tensor_para_size", str(opts.tp))
        out[ft] = _set_parameter(text, "model_checkpoint_path", f"{FT_CHECKPOINT}/{opts.tp}-gpu/")
        for side in ("preprocessing", "postprocessing"):  # upstream loads 'bigscience/bloom' from the Hub: no Hub offline
            rel = f"{side}/1/model.py"
            if out[rel].count(FT_HUB_TOKENIZER) != 1:
                raise ValueError(f"{rel}: expected one {FT_HUB_TOKENIZER}")
            out[rel] = out[rel].replace(FT_HUB_TOKENIZER, repr(TOKENIZER_DIR))
        return out
    values = _fill_values(sol, opts)
    out = {}
    for rel, text in templates.items():
        filled = Template(text).safe_substitute(values) if rel.endswith(".pbtxt") else text
        left = unfilled_structural(filled) if rel.endswith(".pbtxt") else []
        if left:
            raise ValueError(f"{rel}: no value for {', '.join(sorted(set(left)))}")
        out[rel] = filled
    return out


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


def dockerfile(sol: EngineSolution, opts: EngineOptions, site: Site, command: str) -> str:
    base = backend_image(sol) or site.image(sol.image)
    lines = [f"# Generated by envkit {__version__}. Do not edit: regenerate with",
             f"#   {command}",
             f"# Stack: {stack_line(sol)}"]
    if sol.legacy:
        lines.append("# LEGACY: FasterTransformer is archived (2023-10-19); envkit resolve names its successor.")
    if sol.build == "backend":
        lines.append("# FROM: the image envkit/build-backend.sh builds by the backend's own recipe on " + site.image(sol.image))
    lines += ["", f"FROM {base}"]
    repo = templates_for_or_none(sol)
    if repo is not None:
        lines.append(f"COPY model_repo/ {MODEL_REPO}/")
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


def templates_for_or_none(sol: EngineSolution) -> Optional[str]:
    try:
        return templates_for(sol)
    except InputError:
        return None


def render_engine(sol: EngineSolution, opts: EngineOptions, site: Site, templates: Mapping[str, str], command: str,
                  wheel: Optional[WheelBase] = None, apply_site: bytes = b"") -> dict[str, bytes]:
    """Every file of the context, by relative path. `templates`: the model repository's files (templates_for's folder);
    `wheel`: the CUDA image of --from-wheel, with `apply_site` (inimage/apply-site.sh) for a site's mirrors."""
    opts.check()
    solution_json = json.dumps(sol.to_json(), indent=2, sort_keys=True) + "\n"
    if wheel is not None:
        text, extra = _wheel_dockerfile(sol, opts, site, command, wheel)
        if site.given:
            extra["envkit/site/apply-site.sh"] = apply_site
        return dict(sorted({"Dockerfile": text.encode(), "envkit/solution.json": solution_json.encode(), **extra}.items()))
    files: dict[str, str] = {"Dockerfile": dockerfile(sol, opts, site, command), "envkit/solution.json": solution_json}
    folder = templates_for(sol)
    if folder is not None:
        repo = {rel: text for rel, text in templates.items() if rel not in NOTICES}
        for rel, text in model_repository(sol, opts, repo).items():
            files[f"model_repo/{rel}"] = text
        for rel in NOTICES:
            if rel in templates:
                files[f"envkit/third_party/{folder}/{rel}"] = templates[rel]
    for name, script in (("envkit/build-backend.sh", build_backend_script(sol, site)), ("envkit/build-engine.sh", build_engine_script(sol, opts))):
        if script is not None:
            files[name] = script
    return {k: v.encode() for k, v in sorted(files.items())}
