"""`envkit selftest`: the self-test of envkit/inimage/selftest.py run here, or inside a built image
(network none, GPUs passed in, model and LAMBADA files mounted read-only). Either way the result is the
script's own JSON document."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from envkit.adapters.engine import ContainerEngine, Engine
from envkit.app import containers
from envkit.app.containers import PlannedRun
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import MAX_DATASET_BYTES, parse_file, parse_json
from envkit.errors import EnvkitError, ExternalError, InputError
from envkit.inimage import selftest as script
from envkit.model.container import ContainerSpec
from envkit.model.engine_specs import REGISTRY
from envkit.model.results import CheckResult, SelftestResult

SCRIPT_IN_IMAGE = "/opt/envkit/selftest.py"
MODEL_IN_IMAGE = "/envkit-model"
LAMBADA_IN_IMAGE = "/envkit-lambada.jsonl"


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
    allow_cpu: bool = False


def check_engines(req: SelftestRequest) -> None:
    for e in req.engines:
        if e not in script.DECODERS:
            raise InputError(f"--engine {e!r} is not an engine",
                             "write --engine hf, hf-static, vllm, openai:http://HOST:PORT or triton:http://HOST:PORT")


def check_asked(req: SelftestRequest, urls: list[str], image: Optional[str], dataset: Optional[str], request_rate: float,
                triton_parameters: bool, endpoint: Optional[str], dry_run: bool) -> None:
    """Every check of selftest's options that needs nothing run: the decode engines, and the options that go with a
    serving sweep (or only without one)."""
    check_engines(req)
    if triton_parameters and not any(u.startswith("triton:") for u in urls):
        raise InputError("--triton-parameters shapes Triton's generate requests", "use it with --engine triton:URL, or drop it")
    if endpoint is not None and not urls:
        raise InputError("--endpoint chooses the serving sweep's OpenAI path", "use it with --engine openai:URL, or drop it")
    check_sweep_alone(urls, req, image, dataset, request_rate)
    if dry_run and urls:
        raise InputError("--dry-run shows the container of selftest --image; a serving sweep runs no container",
                         "drop --dry-run, or use it with --image")


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
                                   ("--peak-gbs", req.peak_gbs), ("--allow-cpu", req.allow_cpu)) if on]
    if len(urls) > 1 or local:
        raise InputError(f"--engine openai:URL (or triton:URL) sweeps one server; {', '.join(local) or 'a second URL'} belongs to the "
                         "local self-test",
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
    args = ["--json"] + (["--quick"] if req.quick else []) + (["--parity"] if req.parity else []) \
        + (["--allow-cpu"] if req.allow_cpu else [])
    for flag, values in (("--shape", req.shapes), ("--model", (model,) if model else ()), ("--engine", req.engines)):
        for v in values:
            args += [flag, v]
    for flag, value in (("--input-len", req.input_len), ("--output-len", req.output_len), ("--lambada", lambada),
                        ("--peak-gbs", req.peak_gbs)):
        if value:
            args += [flag, str(value)]
    return args


def run(req: SelftestRequest, image: Optional[str] = None, reporter: Reporter = Silent(), dry_run: bool = False
        ) -> Union[SelftestResult, PlannedRun]:
    """Inside `image` when one is named, else here; what the test does now goes to the reporter. With dry_run, the
    container that would run it (image only)."""
    if dry_run:
        if not image:
            raise InputError("--dry-run shows the container of selftest --image", "add --image IMAGE, or drop --dry-run")
        return plan_in_image(image, req)
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
        return SelftestResult.from_json(script.run(req.quick, req.shapes, req.engines or ("hf",), req.peak_gbs or 0.0,
                          (req.model,) if req.model else (), req.parity, req.input_len or 128, req.output_len or 0, req.lambada or "",
                          say=reporter.say, peak_lookup=matrix_peak, allow_cpu=req.allow_cpu))


def _spec(image: str, req: SelftestRequest, engine: ContainerEngine) -> ContainerSpec:
    check(req)
    volumes: list[tuple[str, str, str]] = []
    if req.model:
        volumes.append((str(Path(req.model).resolve()), MODEL_IN_IMAGE, "ro"))
    if req.lambada:
        volumes.append((str(Path(req.lambada).resolve()), LAMBADA_IN_IMAGE, "ro"))
    args = script_args(req, MODEL_IN_IMAGE if req.model else None, LAMBADA_IN_IMAGE if req.lambada else None)
    engine.require_image(image)
    return containers.plan(engine, image, ["python", SCRIPT_IN_IMAGE, *args], volumes=tuple(volumes))


def plan_in_image(image: str, req: SelftestRequest, engine: Optional[ContainerEngine] = None) -> PlannedRun:
    engine = engine or Engine.connect()
    return PlannedRun("envkit selftest --image", _spec(image, req, engine), containers.expects(engine, image))


def run_in_image(image: str, req: SelftestRequest, engine: Optional[ContainerEngine] = None,
                 reporter: Reporter = Silent()) -> SelftestResult:
    """Inside the image, network none, the GPUs its solution names passed in (core/devices.py). It fails when they are
    not there: the in-image script judges what torch sees against the solution; this side adds why the GPUs were not
    passed (none on this host, or the engine refused them), and judges an older image's script from its label."""
    engine = engine or Engine.connect()
    spec = _spec(image, req, engine)
    reporter.say(f"running the self-test in {image} (network none{f', {spec.gpu.vendor} GPUs passed in' if spec.gpu.passes else ''})")
    rc, out, err, passed, refusal = engine.run_container(spec)
    try:
        doc = parse_json(out, "the self-test's output in", image)  # the image is the user's: its output is read as a user file
        doc["gpus_passed"] = passed
        doc["container"] = spec.to_json()
        result = SelftestResult.from_json(doc)
    except (ValueError, TypeError):
        raise ExternalError(f"the self-test in {image} printed no result (exit {rc}): {(err or out).strip()[-300:]}",
                            f"is it an envkit-built image? ({SCRIPT_IN_IMAGE})") from None
    target = containers.expects(engine, image)
    if target is not None and not any(c.name == script.TARGET_CHECK for c in result.checks):
        # an image built before its script judged its own target: what it saw is only cpu or cuda
        seen = {"devices": [] if doc.get("device") != "cuda" else [{"name": "GPU", "arch": target.get("arch") or ""}]}
        verdict = script.target_check(target, seen, req.allow_cpu)
        if verdict is not None and (not verdict["ok"] or not seen["devices"]):
            result = result.with_check(CheckResult(verdict["name"], verdict["ok"], verdict["detail"]))
    passed_check = containers.passed_check(spec, passed, refusal, req.allow_cpu)
    result = result.with_check(passed_check) if passed_check else result
    engine_check = pip_engine_check(engine, image, spec)
    return result.with_check(engine_check) if engine_check else result


ENGINE_PROBE = """import importlib, importlib.metadata as md, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
    except BaseException as exc:
        out[name] = {"error": (type(exc).__name__ + ": " + str(exc))[:300]}
        continue
    dists = getattr(md, "packages_distributions", dict)().get(name, [])
    out[name] = {"versions": sorted({md.version(d) for d in dists}), "version": str(getattr(mod, "__version__", "") or "")}
print(json.dumps(out))
"""


def pip_engine_check(engine: ContainerEngine, image: str, spec: ContainerSpec) -> Optional[CheckResult]:
    """The image's pip engine (fastllm, SGLang, Paddle, LMDeploy) imported in the image, in its own container (the same
    devices and network none; its own process, since a native module can take the interpreter down), and its installed
    version read: the release the solution names (newcomer review 3, D16: the self-test of a fastllm image tested
    nothing of fastllm). None for an image without one."""
    sol = containers.image_solution(engine.labels(image))
    eng = sol.doc.get("engine") if sol else None
    if not isinstance(eng, dict) or eng.get("engine") not in REGISTRY or REGISTRY[eng["engine"]].road != "pip":
        return None
    name, want, modules = eng["engine"], str(eng.get("version") or ""), REGISTRY[eng["engine"]].modules
    probe = dataclasses.replace(spec, command=("python", "-c", ENGINE_PROBE, *modules))
    rc, out, err, _passed, _refusal = engine.run_container(probe)
    try:
        seen = parse_json(out.strip().splitlines()[-1] if out.strip() else "", "the engine probe's output in", image)
    except (ValueError, TypeError, IndexError):
        return CheckResult(f"engine {name}", False, f"the import probe printed no result (exit {rc}): {(err or out).strip()[-300:]}")
    problems, found = [], []
    for m in modules:
        got = seen.get(m) if isinstance(seen, dict) else None
        if not isinstance(got, dict) or "error" in got:
            problems.append(f"import {m} failed: {got.get('error') if isinstance(got, dict) else 'no answer'}")
            continue
        versions = [str(v) for v in got.get("versions") or []] or ([str(got["version"])] if got.get("version") else [])
        if want and versions and want not in versions:
            problems.append(f"{m} is {', '.join(versions)}, not the {want} the image's solution names")
        found.append(f"import {m} ok" + (f" ({', '.join(versions)})" if versions else " (no version recorded)"))
    if problems:
        return CheckResult(f"engine {name}", False, "; ".join(problems) + f": rebuild the image (envkit build) for {name} {want}")
    return CheckResult(f"engine {name}", True, f"{name} {want}: " + "; ".join(found))
