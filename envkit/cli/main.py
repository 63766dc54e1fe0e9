"""The command line: parse, call the pure core, render, map errors to exit codes. Nothing else."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from envkit.errors import EnvkitError, InputError
from envkit.inimage.selftest import ENGINES as SELFTEST_ENGINES, SHAPES as SELFTEST_SHAPES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Resolve, generate, build and self-test GPU environments for LLM serving.")
matrix_app = typer.Typer(no_args_is_help=True, help="Inspect and validate matrix.toml.")
app.add_typer(matrix_app, name="matrix")

EXIT_NO_SOLUTION = 1


def _print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


GPU = typer.Option(None, "--gpu", help="GPU product name (\"RTX 4090\", H100, Z100L) or arch (sm_86, gfx942)")
DRIVER = typer.Option(None, "--driver", help="NVIDIA driver version, e.g. 535.104.05")
PLATFORM = typer.Option(None, "--platform", help="cuda, rocm, dtk or cpu")
CUDA = typer.Option(None, "--cuda", help="CUDA toolkit X.Y")
ROCM = typer.Option(None, "--rocm", help="ROCm X.Y")
DTK = typer.Option(None, "--dtk", help="Hygon DTK YY.MM")
PYTHON = typer.Option(None, "--python", help="Python X.Y")
TORCH = typer.Option(None, "--torch", help="torch version or specifier; may carry +cu118")
FLASH_ATTN = typer.Option(None, "--flash-attn", help="flash-attn version or specifier (2 means 2.*)")
VLLM = typer.Option(None, "--vllm", help="vLLM version or specifier")
KERNELS = typer.Option(None, "--kernels", help="flash-attn csrc kernels to build: layer_norm,rotary")
MATRIX = typer.Option(None, "--matrix", help="another matrix.toml (default: the built-in one)")


@app.command()
def resolve(
    gpu: Optional[str] = GPU, driver: Optional[str] = DRIVER, platform: Optional[str] = PLATFORM,
    cuda: Optional[str] = CUDA, rocm: Optional[str] = ROCM, dtk: Optional[str] = DTK, python: Optional[str] = PYTHON,
    torch: Optional[str] = TORCH, flash_attn: Optional[str] = FLASH_ATTN, vllm: Optional[str] = VLLM,
    kernels: Optional[str] = KERNELS,
    as_json: bool = typer.Option(False, "--json", help="print one stable JSON document"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """Solve the compatibility matrix: the newest consistent stack, or every conflict with its fix."""
    from envkit.config import matrix_file as mx
    from envkit.core.resolve import parse_query, resolve as solve

    m = mx.load(matrix_path)
    q = parse_query(m, gpu=gpu, driver=driver, platform=platform, cuda=cuda, rocm=rocm, dtk=dtk,
                    python=python, torch=torch, flash_attn=flash_attn, vllm=vllm, kernels=kernels)
    result = solve(m, q)
    if as_json:
        _print_json(result.to_dict())
    else:
        from envkit.ui.report import print_result

        print_result(result)
    if not result.ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@app.command()
def generate(
    gpu: Optional[str] = GPU, driver: Optional[str] = DRIVER, platform: Optional[str] = PLATFORM,
    cuda: Optional[str] = CUDA, rocm: Optional[str] = ROCM, dtk: Optional[str] = DTK, python: Optional[str] = PYTHON,
    torch: Optional[str] = TORCH, flash_attn: Optional[str] = FLASH_ATTN, vllm: Optional[str] = VLLM,
    kernels: Optional[str] = KERNELS,
    lock: Optional[str] = typer.Option(None, "--lock", help="replay an envkit.lock.json instead of resolve flags"),
    mirror: Optional[str] = typer.Option(None, "--mirror", help="site mirror profile (SITE.toml)"),
    offline: bool = typer.Option(False, "--offline", help="every artifact from the build context; refuse any network step"),
    out: str = typer.Option("envkit-build", "-o", "--out", help="output directory (the docker build context)"),
    host_march: str = typer.Option("x86-64-v2", "--host-march", help="replaces csrc/rotary's -march=native ('native' keeps it)"),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", min=1, help="nvcc jobs (default: from the builder's memory, ~5 GB each)"),
    nvcc_threads: Optional[int] = typer.Option(None, "--nvcc-threads", min=1, help="threads per nvcc job (default: one per arch, max 4)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the plan; write nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    force: bool = typer.Option(False, "--force", help="replace an output directory envkit did not write"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """Write a Dockerfile (devel build stage, slim runtime stage) and its scripts for the resolved stack."""
    from envkit.app.generate import generate as gen
    from envkit.adapters.context_dir import write_tree
    from envkit.model.plan import Options

    flags = {"gpu": gpu, "driver": driver, "platform": platform, "cuda": cuda, "rocm": rocm, "dtk": dtk, "python": python,
             "torch": torch, "flash_attn": flash_attn, "vllm": vllm, "kernels": kernels}
    opts = Options(offline=offline, host_march=host_march, max_jobs=max_jobs, nvcc_threads=nvcc_threads)
    g = gen(flags, matrix_path=matrix_path, lock=lock, mirror=mirror, opts=opts)
    if g.plan is None:
        if as_json:
            _print_json(g.result.to_dict())
        else:
            from envkit.ui.report import print_result

            print_result(g.result)
        raise typer.Exit(EXIT_NO_SOLUTION)
    if not dry_run:
        write_tree(out, g.files, force)
    if as_json:
        _print_json({**g.plan.to_dict(), "command": g.command, "out": None if dry_run else out, "files": sorted(g.files)})
        return
    from envkit.ui.report import print_plan

    print_plan(g.plan, None if dry_run else out, sorted(g.files))


def _flags(**kw: Optional[str]) -> dict:
    return kw


@app.command()
def bundle(
    gpu: Optional[str] = GPU, driver: Optional[str] = DRIVER, platform: Optional[str] = PLATFORM,
    cuda: Optional[str] = CUDA, rocm: Optional[str] = ROCM, dtk: Optional[str] = DTK, python: Optional[str] = PYTHON,
    torch: Optional[str] = TORCH, flash_attn: Optional[str] = FLASH_ATTN, vllm: Optional[str] = VLLM,
    kernels: Optional[str] = KERNELS,
    lock: Optional[str] = typer.Option(None, "--lock", help="bundle an envkit.lock.json instead of resolve flags"),
    mirror: Optional[str] = typer.Option(None, "--mirror", help="fetch through the site's mirrors (SITE.toml)"),
    find_links: list[str] = typer.Option([], "--find-links", help="local directory of wheels to use as well (repeatable)"),
    out: str = typer.Option("envkit-bundle", "-o", "--out", help="bundle directory"),
    force: bool = typer.Option(False, "--force", help="replace an output directory envkit did not write"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """On a connected machine: carry everything an offline build needs (wheels, sources, apt packages, base images)."""
    from envkit.app.bundle import make_bundle
    from envkit.ui.report import bundle_progress, print_bundle

    flags = _flags(gpu=gpu, driver=driver, platform=platform, cuda=cuda, rocm=rocm, dtk=dtk, python=python, torch=torch,
                   flash_attn=flash_attn, vllm=vllm, kernels=kernels)
    say, progress = bundle_progress()
    g, report = make_bundle(flags, out=out, matrix_path=matrix_path, lock=lock, mirror=mirror, find_links=tuple(find_links),
                            force=force, say=say, progress_factory=progress)
    if report is None:
        if as_json:
            _print_json(g.result.to_dict())
        else:
            from envkit.ui.report import print_result

            print_result(g.result)
        raise typer.Exit(EXIT_NO_SOLUTION)
    if as_json:
        _print_json({"schema": 1, "ok": True, "out": out, "complete_already": report.complete_already, "files": report.files,
                     "bytes": report.bytes, "downloaded": report.downloaded, "reused": report.reused})
    else:
        print_bundle(report)


@app.command()
def build(
    gpu: Optional[str] = GPU, driver: Optional[str] = DRIVER, platform: Optional[str] = PLATFORM,
    cuda: Optional[str] = CUDA, rocm: Optional[str] = ROCM, dtk: Optional[str] = DTK, python: Optional[str] = PYTHON,
    torch: Optional[str] = TORCH, flash_attn: Optional[str] = FLASH_ATTN, vllm: Optional[str] = VLLM,
    kernels: Optional[str] = KERNELS,
    offline: bool = typer.Option(False, "--offline", help="build a bundle with the network off"),
    bundle_dir: Optional[str] = typer.Option(None, "--bundle", help="the bundle directory (with --offline)"),
    lock: Optional[str] = typer.Option(None, "--lock", help="build an envkit.lock.json (mirror mode)"),
    mirror: Optional[str] = typer.Option(None, "--mirror", help="build against the site's mirrors (SITE.toml)"),
    project: Optional[str] = typer.Option(None, "--project", help="project file with named targets (envkit.toml)"),
    target: Optional[str] = typer.Option(None, "--target", help="build this target of --project"),
    all_targets: bool = typer.Option(False, "--all", help="build every target of --project"),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="targets built at once (with --all)"),
    out: str = typer.Option("envkit-build", "-o", "--out", help="build context directory (mirror mode)"),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="image name:tag (default envkit/<platform>:<torch>)"),
    network: str = typer.Option("bridge", "--network", help="network for mirror-mode RUN steps: bridge or host"),
    no_cache: bool = typer.Option(False, "--no-cache", help="run every step again (no layer cache)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="run the preflight and show the plan; build nothing"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary (the log goes to stderr)"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """Build an image: offline from a bundle (network none), or against the site's mirrors; or a project's targets."""

    from envkit.errors import InputError

    flags = _flags(gpu=gpu, driver=driver, platform=platform, cuda=cuda, rocm=rocm, dtk=dtk, python=python, torch=torch,
                   flash_attn=flash_attn, vllm=vllm, kernels=kernels)
    if network not in ("bridge", "host"):
        raise InputError(f"--network {network!r} is not bridge or host", "use --network bridge (default) or host")
    import re as _re

    if tag is not None and not _re.fullmatch(r"[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?", tag):
        raise InputError(f"--tag {tag!r} is not an image reference", "write name:tag in lower case, e.g. envkit/cpu:demo")
    if project or target or all_targets:
        if not project:
            raise InputError("--target and --all build targets of a project file: --project is missing", "pass --project envkit.toml")
        if any(flags.values()) or lock or mirror or offline or bundle_dir:
            raise InputError("--project targets carry their own flags; resolve flags, --lock, --mirror, --offline and --bundle do not apply",
                             "put them in the target in the project file")
        from envkit.config import project_file as pj

        proj = pj.load(project)
        if all_targets == bool(target):
            raise InputError("give exactly one of --target NAME and --all", f"targets: {', '.join(t.name for t in proj.targets)}")
        if all_targets:
            from envkit.app.build_all import build_all

            results = build_all(proj, jobs=jobs, network=network, no_cache=no_cache, console_json=as_json,
                                dry_run=dry_run, matrix_path=matrix_path)
            if as_json:
                _print_json({"schema": 1, "ok": all(r["ok"] for r in results), "targets": results})
            if not all(r["ok"] for r in results):
                raise typer.Exit(4)
            return
        t = proj.target(target or "")
        if t.offline:
            from envkit.app.bundle import make_bundle
            from envkit.ui.report import bundle_progress

            say, progress = bundle_progress()
            bdir = f"envkit-bundles/{t.name}"
            g, report = make_bundle(t.flag_dict(), out=bdir, matrix_path=matrix_path, say=say, progress_factory=progress)
            if report is None:
                from envkit.ui.report import print_result

                print_result(g.result)
                raise typer.Exit(EXIT_NO_SOLUTION)
            context = Path(bdir)
        else:
            context = _generate_for_build(t.flag_dict(), None, t.mirror, f"envkit-build/{t.name}", matrix_path)
        _build_context(context, offline=t.offline, tag=t.image, network=network, no_cache=no_cache, dry_run=dry_run, as_json=as_json)
        return
    if offline:
        if not bundle_dir:
            raise InputError("--offline builds a bundle: --bundle DIR is missing", "pass --bundle DIR (made by envkit bundle)")
        if any(flags.values()) or lock or mirror:
            raise InputError("--offline --bundle builds what the bundle holds; resolve flags, --lock and --mirror do not apply",
                             "drop them, or make a new bundle")
        context = Path(bundle_dir)
        if not context.is_dir():
            raise InputError(f"bundle directory {bundle_dir} does not exist", "pass the directory written by envkit bundle")
    else:
        if bundle_dir:
            raise InputError("--bundle is for offline builds", "add --offline, or drop --bundle to build against --mirror")
        if not mirror:
            raise InputError("a build needs --offline --bundle DIR or --mirror SITE.toml", "choose one (see envkit build --help)")
        context = _generate_for_build(flags, lock, mirror, out, matrix_path)
    _build_context(context, offline=offline, tag=tag, network=network, no_cache=no_cache, dry_run=dry_run, as_json=as_json)


def _generate_for_build(flags: dict, lock: Optional[str], mirror: Optional[str], out: str, matrix_path: Optional[str]):

    from envkit.app.generate import generate as gen
    from envkit.adapters.context_dir import write_tree
    from envkit.model.plan import Options

    g = gen(flags, matrix_path=matrix_path, lock=lock, mirror=mirror, opts=Options())
    if g.plan is None:
        from envkit.ui.report import print_result

        print_result(g.result)
        raise typer.Exit(EXIT_NO_SOLUTION)
    write_tree(out, g.files, force=False)
    return Path(out)


def _build_context(context, *, offline: bool, tag: Optional[str], network: str, no_cache: bool, dry_run: bool, as_json: bool) -> None:
    from envkit.app.build import collect
    from envkit.core.preflight import judge
    from envkit.adapters.image_build import load_images, stream_build
    from envkit.errors import PreflightError
    from envkit.ui.report import build_console, build_line, print_build, print_preflight

    console = build_console(stderr=as_json)
    facts, engine, plan_doc = collect(context, offline=offline)
    checks = judge(facts)
    print_preflight(checks, console)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise PreflightError(f"preflight refused the build: {'; '.join(c.name + ': ' + c.detail for c in failed)}",
                             failed[0].fix)
    if dry_run:
        console.print("dry run: preflight passed; nothing was built")
        return
    sol = json.loads((context / "envkit.lock.json").read_text())["solution"]
    ref = tag or f"envkit/{sol['platform']}:torch{sol['torch']['pin'].replace('+', '-')}"
    load_images(engine, context, lambda m: console.print(f"[dim]{m}[/dim]"))
    buildargs = {} if offline else dict(plan_doc.get("build_args", {}))
    result = stream_build(engine, context, "none" if offline else network, buildargs, lambda line: build_line(console, line),
                          nocache=no_cache)
    engine.tag(result.image_id, ref)
    result.tag, result.size = ref, engine.size(ref)
    if as_json:
        _print_json({"schema": 1, "ok": True, "image": ref, "id": result.image_id, "size": result.size,
                     "seconds": round(result.seconds, 1), "network": "none" if offline else network,
                     "stages": [{"name": n, "seconds": round(s, 1)} for n, s in result.stages]})
    else:
        print_build(result, offline, console)


def _report_dir(report: str) -> Path:
    """The report directory, made and proven writable before any long run."""
    from envkit.errors import InputError

    out = Path(report)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".envkit-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cannot write the report into {report}: {exc.strerror}", "give a writable --report directory") from None
    return out


def _write_report(report: str, files: dict) -> None:
    """Every file written to a .part first, then all renamed: a report is whole or left as it was."""
    from envkit.errors import InputError

    out = _report_dir(report)
    try:
        for name, data in files.items():
            (out / f".{name}.part").write_bytes(data)
        for name in files:
            os.replace(out / f".{name}.part", out / name)
    except OSError as exc:
        raise InputError(f"cannot write the report into {report}: {exc.strerror}", "give a writable --report directory") from None


def _serving_sweep(engine_url: str, model: str, concurrency: str, num_prompts: int, input_len: int, output_len: int,
                   dataset: Optional[str], as_json: bool) -> dict:
    from envkit.errors import InputError
    from envkit.ui.report import sweep_progress
    from envkit.core.sweep import parse_dataset, random_requests
    from envkit.app.sweep import sweep

    if not engine_url.startswith("openai:") or "://" not in engine_url:
        raise InputError(f"--engine {engine_url!r}: the serving sweep takes openai:URL", "write --engine openai:http://127.0.0.1:8000")
    try:
        levels_asked = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--concurrency {concurrency!r} is not a list of integers", "write --concurrency 1,4,8") from None
    if not levels_asked or min(levels_asked) < 1:
        raise InputError(f"--concurrency {concurrency!r} needs positive integers", "write --concurrency 1,4,8")
    if dataset:
        from envkit.config.userfile import parse_file

        requests = parse_file(dataset, "dataset", 'give a JSONL file of {"prompt": "...", "output_tokens": N} lines (vLLM\'s custom dataset format)',
                              lambda text: parse_dataset(text, num_prompts, output_len))
    else:
        requests = random_requests(num_prompts, input_len, output_len)
    url = engine_url[len("openai:"):]
    with sweep_progress(as_json) as progress:
        levels = sweep(url, model, levels_asked, requests, progress=progress)
    return {"schema": 1, "engine": url, "model": model, "dataset": dataset, "input_len": None if dataset else input_len,
            "output_len": output_len, "levels": levels, "ok": all(lv["failed"] == 0 for lv in levels)}


def _selftest_args(quick: bool, shapes: list, models: list, engines: list, parity: bool, input_len: Optional[int],
                   output_len: Optional[int], lambada: Optional[str], peak_gbs: Optional[float]) -> list:
    """The arguments of envkit/selftest.py (the same script runs here and inside images): only what was asked, so
    images built by an older envkit, whose script knows fewer options, still run a plain self-test."""
    args = ["--json"] + (["--quick"] if quick else []) + (["--parity"] if parity else [])
    for flag, values in (("--shape", shapes), ("--model", models), ("--engine", engines)):
        for v in values:
            args += [flag, v]
    for flag, value in (("--input-len", input_len), ("--output-len", output_len), ("--lambada", lambada), ("--peak-gbs", peak_gbs)):
        if value:
            args += [flag, str(value)]
    return args


def _no_gpus_passed(doc: dict) -> dict:
    """A host with NVIDIA GPUs whose engine could not pass them in: the image was not tested on them, say so."""
    doc["checks"].append({"name": "GPUs passed into the container", "ok": False,
                          "detail": "this host has NVIDIA GPUs but the engine has no GPU runtime, so the test ran on the CPU; "
                                    "install nvidia-container-toolkit and configure the engine"})
    doc["ok"] = False
    return doc


@app.command()
def selftest(
    image: Optional[str] = typer.Option(None, "--image", help="run inside this built image (network none, GPUs passed in) instead of here"),
    quick: bool = typer.Option(False, "--quick", help="the checks and a short decode: a verdict within a minute"),
    engines: list[str] = typer.Option([], "--engine", help=f"{', '.join(SELFTEST_ENGINES)} (decode engines; repeat) or openai:URL (the serving sweep)"),
    shapes: list[str] = typer.Option([], "--shape", help=f"decode a random-weight model of this shape: {', '.join(SELFTEST_SHAPES)} (repeat)"),
    model: Optional[str] = typer.Option(None, "--model", help="a local model DIR to decode; with openai:URL, the served model name"),
    parity: bool = typer.Option(False, "--parity", help="compare each engine's logits with a float32 eager-attention reference"),
    lambada: Optional[str] = typer.Option(None, "--lambada", help="LAMBADA jsonl: last-word accuracy of --model DIR per HF engine"),
    peak_gbs: Optional[float] = typer.Option(None, "--peak-gbs", min=0.0, help="the GPU's HBM peak in GB/s, where no image solution says it"),
    concurrency: str = typer.Option("1,4,8,16", "--concurrency", help="concurrency levels of the serving sweep"),
    num_prompts: int = typer.Option(64, "--num-prompts", min=1, help="requests per concurrency level"),
    input_len: Optional[int] = typer.Option(None, "--input-len", min=1, help="prompt tokens (default 128; decode, and the sweep's random workload)"),
    output_len: Optional[int] = typer.Option(None, "--output-len", min=2, help="tokens generated per request (default 128; --quick 32)"),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="JSONL prompts ({\"prompt\": ..., \"output_tokens\": N}) for the sweep"),
    as_json: bool = typer.Option(False, "--json", help="print the self-test's JSON document"),
    report: Optional[str] = typer.Option(None, "--report", help="write the JSON (and for a sweep a PNG plot) into this directory"),
    junit: Optional[str] = typer.Option(None, "--junit", help="also write the checks as JUnit XML"),
) -> None:
    """Prove an image works: GPU checks, decode speed vs the roofline, logits parity, LAMBADA; or sweep an OpenAI server."""
    from envkit.errors import InputError

    urls = [e for e in engines if e.startswith("openai:")]
    decoders = [e for e in engines if not e.startswith("openai:")]
    for e in decoders:
        if e not in SELFTEST_ENGINES:
            raise InputError(f"--engine {e!r} is not an engine", "write --engine hf, hf-static, vllm or openai:http://HOST:PORT")
    if report:
        _report_dir(report)
    if urls:
        local = [flag for flag, on in (("--engine " + " ".join(decoders), decoders), ("--shape", shapes), ("--image", image), ("--parity", parity),
                                       ("--lambada", lambada), ("--quick", quick), ("--peak-gbs", peak_gbs)) if on]
        if len(urls) > 1 or local:
            raise InputError(f"--engine openai:URL sweeps one server; {', '.join(local) or 'a second URL'} belongs to the local self-test",
                             "run the sweep and the local self-test as two commands")
        doc = _serving_sweep(urls[0], model or "default", concurrency, num_prompts, input_len or 128, output_len or 128, dataset, as_json)
        if report:
            from envkit.ui.plot import sweep_chart

            _write_report(report, {"sweep.json": (json.dumps(doc, indent=2) + "\n").encode(), "sweep.png": sweep_chart(doc)})
        if junit:
            from envkit.ui.junit import sweep_cases, write

            write(junit, f"envkit selftest sweep {doc['engine']}", sweep_cases(doc))
        if as_json:
            _print_json(doc)
        else:
            from envkit.ui.report import print_sweep

            print_sweep(doc)
        if not doc["ok"]:
            raise typer.Exit(EXIT_NO_SOLUTION)
        return
    if dataset:
        raise InputError("--dataset is the serving sweep's workload", "add --engine openai:URL, or drop --dataset")
    for sh in shapes:
        if sh not in SELFTEST_SHAPES:
            raise InputError(f"--shape {sh!r} is not a known shape", f"choose one of {', '.join(sorted(SELFTEST_SHAPES))}")
    for path, what in ((model, "--model"), (lambada, "--lambada")):
        if path and not Path(path).exists():
            raise InputError(f"{what} {path}: no such file or directory", f"give an existing path to {what}")
    if lambada:
        from envkit.inimage.selftest import read_lambada
        from envkit.config.userfile import parse_file

        if not model:
            raise InputError("--lambada needs --model DIR (a real model with its tokenizer)", "add --model /path/to/model")
        parse_file(lambada, "LAMBADA file", 'give a JSONL file of {"text": "... last word"} lines (LAMBADA\'s format)',
                   lambda text: read_lambada(text, 0))
        if decoders and not set(decoders) & {"hf", "hf-static"}:
            raise InputError("--lambada runs on the hf and hf-static engines", "add --engine hf")
    if image:
        from envkit.adapters.engine import Engine
        from envkit.errors import ExternalError

        volumes, inner_model, inner_lambada = {}, model, lambada
        if model:
            inner_model = "/envkit-model"
            volumes[str(Path(model).resolve())] = {"bind": inner_model, "mode": "ro"}
        if lambada:
            inner_lambada = "/envkit-lambada.jsonl"
            volumes[str(Path(lambada).resolve())] = {"bind": inner_lambada, "mode": "ro"}
        args = _selftest_args(quick, shapes, [inner_model] if model else [], decoders, parity, input_len, output_len, inner_lambada, peak_gbs)
        engine = Engine.connect()
        engine.require_image(image)
        rc, out, err, gpus = engine.run_with_gpus(image, ["python", "/opt/envkit/selftest.py", *args], volumes)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError:
            raise ExternalError(f"the self-test in {image} printed no result (exit {rc}): {(err or out).strip()[-300:]}",
                                "is it an envkit-built image? (/opt/envkit/selftest.py)") from None
        doc["gpus_passed"] = gpus
        if not gpus and Path("/dev/nvidiactl").exists():
            doc = _no_gpus_passed(doc)
    else:
        from envkit.inimage.selftest import run as run_selftest, stdout_to_stderr

        with stdout_to_stderr():
            doc = run_selftest(quick, tuple(shapes), tuple(decoders) or ("hf",), peak_gbs or 0.0, (model,) if model else (), parity,
                               input_len or 128, output_len or 0, lambada or "")
    if report:
        _write_report(report, {"selftest.json": (json.dumps(doc, indent=2) + "\n").encode()})
    if junit:
        from envkit.ui.junit import selftest_cases, write

        write(junit, f"envkit selftest{' ' + image if image else ''}", selftest_cases(doc))
    if as_json:
        _print_json(doc)
    else:
        from envkit.ui.report import print_selftest

        print_selftest(doc, image)
    if not doc.get("ok"):
        raise typer.Exit(EXIT_NO_SOLUTION)


@app.command()
def doctor(
    deep: bool = typer.Option(False, "--deep", help="also import torch and the compiled modules (in a subprocess, with a timeout)"),
    image: Optional[str] = typer.Option(None, "--image", help="judge this image's stack on this host's GPUs"),
    for_: Optional[str] = typer.Option(None, "--for", help="would this stack work here? resolve flags as one string"),
    facts_file: Optional[str] = typer.Option(None, "--facts", help="judge a recorded facts JSON instead of this host"),
    as_json: bool = typer.Option(False, "--json", help="print one stable JSON document"),
    junit: Optional[str] = typer.Option(None, "--junit", help="also write the findings as JUnit XML"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """Inspect this GPU host (or an image on it): what is wrong, why, and how to fix it."""
    from envkit.config import matrix_file as mx
    from envkit.inimage import probe
    from envkit.app.doctor import doctor as run_doctor, parse_for, probe_image
    from envkit.errors import InputError
    from envkit.core.judge import healthy

    m = mx.load(matrix_path)
    flags = parse_for(for_) if for_ else None
    if facts_file:
        from envkit.config.userfile import read_text

        try:
            record = json.loads(read_text(facts_file, "facts file", "give a JSON file written by envkit doctor --json"))
        except ValueError as exc:
            raise InputError(f"cannot read facts file {facts_file}: not JSON ({exc})", "give a JSON file written by envkit doctor --json") from None
        if not isinstance(record, dict):
            raise InputError(f"cannot read facts file {facts_file}: not a JSON object", "give a JSON file written by envkit doctor --json")
        record = record.get("facts", record)
    else:
        record = probe.collect(deep_mode=deep and not image)
    image_record = probe_image(image, deep) if image else None
    try:
        host, findings = run_doctor(m, record, image_record, flags, bool(flags and flags.get("kernels")))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        if not facts_file:
            raise
        raise InputError(f"facts file {facts_file} holds a value of an unexpected type ({type(exc).__name__}: {exc})",
                         "give a JSON file written by envkit doctor --json, unedited") from None
    ok = healthy(findings)
    if junit:
        from envkit.ui.junit import doctor_cases, write

        write(junit, f"envkit doctor{' --image ' + image if image else ''}", doctor_cases(findings))
    if as_json:
        _print_json({"schema": 1, "ok": ok, "findings": [f.to_dict() for f in findings], "facts": record,
                     "image_facts": image_record})
    else:
        from envkit.ui.report import print_doctor

        print_doctor(host, findings, image)
    if not ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@app.command()
def inspect(
    image: str = typer.Argument(..., help="an image envkit built (it carries the io.envkit.solution label)"),
    as_json: bool = typer.Option(False, "--json", help="print one stable JSON document"),
    junit: Optional[str] = typer.Option(None, "--junit", help="also write doctor's findings as JUnit XML"),
    matrix_path: Optional[str] = MATRIX,
) -> None:
    """What an image holds (its solution label), and doctor's checks for it on this host."""
    from dataclasses import replace as dc_replace

    from envkit.config import matrix_file as mx
    from envkit.inimage import probe
    from envkit.adapters.engine import Engine
    from envkit.errors import InputError
    from envkit.model.host import Host
    from envkit.core.judge import healthy, judge as judge_host

    engine = Engine.connect()
    engine.require_image(image)
    labels = engine.client.images.get(image).labels or {}
    if "io.envkit.solution" not in labels:
        raise InputError(f"image {image} has no io.envkit.solution label: envkit did not build it", "inspect an image envkit built")
    try:
        sol = json.loads(labels["io.envkit.solution"])
    except ValueError:
        raise InputError(f"image {image}: its io.envkit.solution label is not JSON", "rebuild it with envkit build") from None
    m = mx.load(matrix_path)
    host = Host.from_probe(probe.collect())
    t = sol.get("torch") or {}
    host = dc_replace(host, torch=t.get("pin"), torch_cuda=(sol.get("toolkit") or {}).get("version") if sol.get("platform") == "cuda" else None,
                      torch_cxx11abi=t.get("cxx11abi"), flash_attn=(sol.get("flash_attn") or {}).get("version"),
                      flash_attn_wheel=(sol.get("flash_attn") or {}).get("wheel"), vllm=(sol.get("vllm") or {}).get("version"),
                      import_errors=(), torch_archs=None, cuda_available=None,
                      nvcc=None, cuda_home=None, cuda_runtimes=(), ld_library_path="")  # the host's toolkit is not the image's
    findings = judge_host(m, host)
    ok = healthy(findings)
    if junit:
        from envkit.ui.junit import doctor_cases, write

        write(junit, f"envkit inspect {image}", doctor_cases(findings))
    if as_json:
        _print_json({"schema": 1, "ok": ok, "image": image, "labels": {k: v for k, v in labels.items() if k != "io.envkit.solution"},
                     "solution": sol, "findings": [f.to_dict() for f in findings]})
    else:
        from envkit.ui.report import print_doctor, print_inspect

        print_inspect(image, labels, sol)
        print_doctor(host, findings, image)
    if not ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@matrix_app.command("export")
def matrix_export(
    fmt: str = typer.Option(..., "--format", help="github, gitlab, bake or json"),
    project: str = typer.Option("envkit.toml", "--project", help="the project file with the targets"),
    out: Optional[str] = typer.Option(None, "-o", "--out", help="write here instead of stdout"),
    contexts: str = typer.Option("envkit-contexts", "--contexts", help="bake: where the targets' build contexts are"),
) -> None:
    """Export the project's targets as a GitHub Actions matrix workflow, a GitLab parallel:matrix job, a bake file or JSON."""

    from envkit.config import project_file as pj
    from envkit.errors import InputError
    from envkit.core.export import FORMATS, export

    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "pick one of them")
    text = export(pj.load(project), fmt, contexts)
    if out:
        try:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(text)
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror}", "choose a writable -o path") from None
    else:
        sys.stdout.write(text)


@matrix_app.command("check")
def matrix_check(
    path: Optional[str] = typer.Argument(None, help="matrix.toml to check (default: the built-in one)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Validate the matrix: every bad row is reported with its line."""
    from envkit.config import matrix_file as mx

    m = mx.load(path)
    counts = {"cuda": len(m.cuda), "gpu": len(m.gpus), "torch": len(m.torch), "rocm": len(m.rocm), "dtk": len(m.dtk),
              "flash_attn": len(m.flash_attn), "vllm": len(m.vllm), "python": len(m.python)}
    from envkit.core.inferred import inferred_entries

    inferred = inferred_entries(m)
    if as_json:
        _print_json({"schema": 1, "ok": True, "path": m.path, "rows": counts, "inferred": inferred["total"],
                     "inferred_kinds": inferred["kinds"], "inferred_that_can_name_an_artifact": inferred["can_name_artifact"]})
        return
    sys.stdout.write(f"{m.path}: valid; " + ", ".join(f"{v} {k}" for k, v in counts.items())
                     + f"; {inferred['total']} facts inferred, {len(inferred['can_name_artifact'])} of them could name an artifact\n")
    for kind, n in sorted(inferred["kinds"].items()):
        sys.stdout.write(f"  inferred: {n} x {kind}\n")
    for name in inferred["can_name_artifact"]:
        sys.stdout.write(f"  could name an artifact on an inferred fact: {name}\n")


@matrix_app.command("refresh")
def matrix_refresh(
    check: bool = typer.Option(False, "--check", help="change nothing; exit 1 if matrix.toml differs from what the sources derive"),
    sources: Optional[str] = typer.Option(None, "--sources", help="the extracts (default: data/sources beside matrix.toml)"),
    matrix_path: Optional[str] = typer.Option(None, "--matrix", help="the matrix.toml to refresh (default: the built-in one)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Derive the generated tables of matrix.toml from the source extracts in data/sources
    (flash-attn workflows and setup.py per tag, PyPI metadata...); --check fails on any hand edit."""
    from pathlib import Path

    from envkit.config import matrix_file as mx
    from .matrixgen import refresh

    path = Path(matrix_path) if matrix_path else mx.default_path()
    src = Path(sources) if sources else refresh.default_sources(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", "pass --matrix with a readable matrix.toml") from None
    diffs = refresh.check(text, src)
    regions = [r.name for r in refresh.REGIONS]
    if check or not diffs:
        if as_json:
            _print_json({"schema": 1, "ok": not diffs, "path": str(path), "sources": str(src), "regions": regions,
                         "differs": [{"region": name, "rows": n, "diff": d} for name, n, d in diffs]})
        else:
            for _name, _n, d in diffs:
                sys.stdout.write(d)
            sys.stdout.write(f"{path}: " + ("derived regions match data/sources (" + ", ".join(regions) + ")\n" if not diffs else
                             "; ".join(f"{name}: {n} row(s) differ from the sources" for name, n, _d in diffs)
                             + " (run `envkit matrix refresh` to rewrite them, or correct the extract)\n"))
        if diffs:
            raise typer.Exit(1)
        return
    new = refresh.apply(text, src)
    mx.parse(new, str(path))  # never write a matrix that does not load
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    if as_json:
        _print_json({"schema": 1, "ok": True, "path": str(path), "sources": str(src), "regions": regions,
                     "rewritten": [{"region": name, "rows": n} for name, n, _d in diffs]})
    else:
        sys.stdout.write("; ".join(f"{name}: {n} row(s) rewritten" for name, n, _d in diffs) + f" in {path}\n")


@matrix_app.command("show")
def matrix_show(
    table: Optional[str] = typer.Argument(None, help="cuda, gpu, torch, rocm, dtk, flash_attn, vllm, python, os"),
    matrix_path: Optional[str] = typer.Option(None, "--matrix"),
) -> None:
    """Print the matrix (or one table) as rich tables."""
    from envkit.config import matrix_file as mx
    from envkit.ui.report import print_matrix

    print_matrix(mx.load(matrix_path), table)


def main() -> None:
    try:
        rv = app(standalone_mode=False)
    except EnvkitError as exc:
        sys.stderr.write(f"envkit: error: {exc.one_line()}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("envkit: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # click's usage errors carry their own exit code and message
        show = getattr(exc, "show", None)
        code = getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
    sys.exit(rv if isinstance(rv, int) else 0)
