"""`envkit selftest`: the self-test of envkit/inimage/selftest.py run here, or inside a built image
(network none, GPUs passed in, model and LAMBADA files mounted read-only). Either way the result is the
script's own JSON document."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from envkit.adapters.engine import ContainerEngine, Engine
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import MAX_DATASET_BYTES, parse_file, parse_json
from envkit.errors import EnvkitError, ExternalError, InputError
from envkit.inimage import selftest as script
from envkit.model.results import CheckResult, SelftestResult

SCRIPT_IN_IMAGE = "/opt/envkit/selftest.py"
MODEL_IN_IMAGE = "/envkit-model"
LAMBADA_IN_IMAGE = "/envkit-lambada.jsonl"
NVIDIA_CONTROL_DEVICE = "/dev/nvidiactl"  # present where the NVIDIA driver is loaded


@dataclass(frozen=True)
class SelftestRequest:
    quick: bool = False
    engines: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()
    model: Optional[str] = None
    parity: bool = False
    lambada: Optional[str] = None
    peak_gbs: Optional[float] = None
    input_len: Optional[int] = None
    output_len: Optional[int] = None


def check_engines(req: SelftestRequest) -> None:
    for e in req.engines:
        if e not in script.ENGINES:
            raise InputError(f"--engine {e!r} is not an engine", "write --engine hf, hf-static, vllm, openai:http://HOST:PORT or triton:http://HOST:PORT")


def check_sweep_alone(urls: list[str], req: SelftestRequest, image: Optional[str], dataset: Optional[str],
                      request_rate: float = math.inf) -> None:
    """A serving sweep measures one server; the local self-test's options do not mix with it (nor --dataset or
    --request-rate without it)."""
    if not urls:
        if dataset:
            raise InputError("--dataset is the serving sweep's workload", "add --engine openai:URL, or drop --dataset")
        if request_rate != math.inf:
            raise InputError("--request-rate paces the serving sweep's requests", "add --engine openai:URL, or drop --request-rate")
        return
    local = [flag for flag, on in (("--engine " + " ".join(req.engines), req.engines), ("--shape", req.shapes), ("--image", image),
                                   ("--parity", req.parity), ("--lambada", req.lambada), ("--quick", req.quick),
                                   ("--peak-gbs", req.peak_gbs)) if on]
    if len(urls) > 1 or local:
        raise InputError(f"--engine openai:URL (or triton:URL) sweeps one server; {', '.join(local) or 'a second URL'} belongs to the local self-test",
                         "run the sweep and the local self-test as two commands")


def check(req: SelftestRequest) -> None:
    check_engines(req)
    for sh in req.shapes:
        if sh not in script.SHAPES:
            raise InputError(f"--shape {sh!r} is not a known shape", f"choose one of {', '.join(sorted(script.SHAPES))}")
    for path, what in ((req.model, "--model"), (req.lambada, "--lambada")):
        if path and not Path(path).exists():
            raise InputError(f"{what} {path}: no such file or directory", f"give an existing path to {what}")
    if req.lambada:
        if not req.model:
            raise InputError("--lambada needs --model DIR (a real model with its tokenizer)", "add --model /path/to/model")
        parse_file(req.lambada, "LAMBADA file", 'give a JSONL file of {"text": "... last word"} lines (LAMBADA\'s format)',
                   lambda text: script.read_lambada(text, 0), limit=MAX_DATASET_BYTES)
        if req.engines and not set(req.engines) & {"hf", "hf-static"}:
            raise InputError("--lambada runs on the hf and hf-static engines", "add --engine hf")


def script_args(req: SelftestRequest, model: Optional[str], lambada: Optional[str]) -> list[str]:
    """The arguments of the in-image script: only what was asked, so images built by an older envkit, whose
    script knows fewer options, still run a plain self-test."""
    args = ["--json"] + (["--quick"] if req.quick else []) + (["--parity"] if req.parity else [])
    for flag, values in (("--shape", req.shapes), ("--model", (model,) if model else ()), ("--engine", req.engines)):
        for v in values:
            args += [flag, v]
    for flag, value in (("--input-len", req.input_len), ("--output-len", req.output_len), ("--lambada", lambada),
                        ("--peak-gbs", req.peak_gbs)):
        if value:
            args += [flag, str(value)]
    return args


def run(req: SelftestRequest, image: Optional[str] = None, reporter: Reporter = Silent()) -> SelftestResult:
    """Inside `image` when one is named, else here; what the test does now goes to the reporter."""
    return run_in_image(image, req, reporter=reporter) if image else run_here(req, reporter)


def matrix_peak(gpu_name: str, matrix_path: Optional[str] = None) -> Optional[tuple[float, str]]:
    """(HBM peak GB/s, row name) of the matrix's [[gpu]] row for a GPU's NVML or torch name (its name or an alias, e.g.
    "NVIDIA H200"); None when no row names it or the row's published bandwidth is unknown (0)."""
    from envkit.app.matrix import load
    from envkit.core.resolve.query import find_gpu

    try:
        g = find_gpu(load(matrix_path), gpu_name)
    except EnvkitError:
        return None
    return (float(g.bandwidth_gbs), g.name) if g.bandwidth_gbs else None


def run_here(req: SelftestRequest, reporter: Reporter = Silent()) -> SelftestResult:
    """Here: the HBM peak is --peak-gbs, else /opt/envkit/solution.json's, else the matrix row of the GPU torch names."""
    check(req)
    with script.stdout_to_stderr():
        return SelftestResult.from_json(script.run(req.quick, req.shapes, req.engines or ("hf",), req.peak_gbs or 0.0, (req.model,) if req.model else (),
                          req.parity, req.input_len or 128, req.output_len or 0, req.lambada or "", say=reporter.say,
                          peak_lookup=matrix_peak))


def run_in_image(image: str, req: SelftestRequest, engine: Optional[ContainerEngine] = None, reporter: Reporter = Silent()) -> SelftestResult:
    """Inside the image, network none, every GPU passed in where the engine can; on a host with NVIDIA GPUs an
    engine that could not pass them in fails the test (it ran on the CPU)."""
    check(req)
    volumes: dict[str, dict[str, str]] = {}
    if req.model:
        volumes[str(Path(req.model).resolve())] = {"bind": MODEL_IN_IMAGE, "mode": "ro"}
    if req.lambada:
        volumes[str(Path(req.lambada).resolve())] = {"bind": LAMBADA_IN_IMAGE, "mode": "ro"}
    args = script_args(req, MODEL_IN_IMAGE if req.model else None, LAMBADA_IN_IMAGE if req.lambada else None)
    engine = engine or Engine.connect()
    engine.require_image(image)
    reporter.say(f"running the self-test in {image} (network none)")
    rc, out, err, gpus = engine.run_with_gpus(image, ["python", SCRIPT_IN_IMAGE, *args], volumes)
    try:
        doc = parse_json(out, "the self-test's output in", image)  # the image is the user's: its output is read as a user file
        doc["gpus_passed"] = gpus
        result = SelftestResult.from_json(doc)
    except (ValueError, TypeError):
        raise ExternalError(f"the self-test in {image} printed no result (exit {rc}): {(err or out).strip()[-300:]}",
                            f"is it an envkit-built image? ({SCRIPT_IN_IMAGE})") from None
    if not gpus and Path(NVIDIA_CONTROL_DEVICE).exists():
        result = result.with_check(CheckResult(
            "GPUs passed into the container", False, "this host has NVIDIA GPUs but the engine has no GPU runtime, so the test "
            "ran on the CPU; install nvidia-container-toolkit and configure the engine"))
    return result
