"""The commands that check: selftest (here, in an image, or a serving sweep), doctor, inspect."""
from __future__ import annotations

import functools
import json
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

import typer

from envkit import app, ui
from envkit.cli import options as opt
from envkit.cli.options import finish
from envkit.errors import InputError
from envkit.inimage.selftest import ENGINES, SHAPES

if TYPE_CHECKING:
    from envkit.app.sweep import SweepRequest


def _sweep(sweep: SweepRequest, as_json: bool, report: Optional[str], junit_path: Optional[str]) -> None:
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        result = app.sweep.serving_sweep(sweep, reporter)
    doc = result.to_json()
    if report:
        ui.report_dir.write(report, {"sweep.json": (json.dumps(doc, indent=2) + "\n").encode(), "sweep.png": ui.plot.sweep_chart(doc)})
    finish(result, as_json, lambda r: ui.report.print_sweep(doc), junit_path, f"envkit selftest sweep {doc['engine']}",
           lambda: ui.junit.sweep_cases(doc))


def selftest(
    image: Optional[str] = typer.Option(None, "--image", help="run inside this built image (network none, GPUs passed in) instead of here"),
    quick: bool = typer.Option(False, "--quick", help="the checks and a short decode: a verdict within a minute"),
    engines: list[str] = typer.Option([], "--engine", help=f"{', '.join(ENGINES)} (decode engines; repeat), or openai:URL or triton:URL (the serving sweep)"),
    shapes: list[str] = typer.Option([], "--shape", help=f"decode a random-weight model of this shape: {', '.join(SHAPES)} (repeat)"),
    model: Optional[str] = typer.Option(None, "--model", help="a local model DIR to decode; with openai:URL, the served model name (default: the server's first, from /v1/models); with triton:URL, the model (default: ensemble)"),
    parity: bool = typer.Option(False, "--parity", help="compare each engine's logits with a float32 eager-attention reference"),
    lambada: Optional[str] = typer.Option(None, "--lambada", help="LAMBADA jsonl: last-word accuracy of --model DIR per HF engine"),
    peak_gbs: Optional[float] = typer.Option(None, "--peak-gbs", min=0.0, help="the GPU's HBM peak in GB/s, where no image solution says it"),
    concurrency: str = typer.Option("1,4,8,16", "--concurrency", help="concurrency levels of the serving sweep"),
    num_prompts: int = typer.Option(64, "--num-prompts", min=1, help="requests per concurrency level"),
    input_len: Optional[int] = typer.Option(None, "--input-len", min=1, help="prompt tokens (default 128; decode, and the sweep's random workload)"),
    output_len: Optional[int] = typer.Option(None, "--output-len", min=2, help="tokens generated per request (default 128; --quick 32)"),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="JSONL prompts ({\"prompt\": ..., \"output_tokens\": N}) for the sweep"),
    request_rate: float = typer.Option(math.inf, "--request-rate", help="the sweep's requests per second, sent as a Poisson process "
                                       "(seeded); inf sends them all at once. The concurrency still caps those in flight"),
    ready_timeout: float = typer.Option(60.0, "--ready-timeout", min=0.0, help="seconds to wait, in all, for the server to answer "
                                        "GET /v1/models (or /health; triton:URL: /v2/health/ready and the model's ready) before the sweep; then one line and exit 4"),
    request_timeout: float = typer.Option(300.0, "--request-timeout", metavar="S", help="seconds one streamed request may take, "
                                          "connecting to its last line (keep-alives do not extend it); past it the request fails"),
    sweep_timeout: Optional[float] = typer.Option(None, "--sweep-timeout", metavar="S", show_default="none",
                                                  help="seconds the whole sweep may take, readiness wait to last level; requests "
                                                  "it cuts or leaves unsent count as failed"),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", show_default=False,
                                          help="the server's API key, sent as Authorization: Bearer; never printed or written"),
    as_json: bool = opt.as_json("print the self-test's JSON document"),
    report: Optional[str] = typer.Option(None, "--report", help="write the JSON (and for a sweep a PNG plot) into this directory"),
    junit_path: Optional[str] = opt.junit("also write the checks as JUnit XML"),
    triton_parameters: bool = typer.Option(False, "--triton-parameters", help="with triton:URL, send max_tokens, bad_words, stop_words "
                                           "and stream nested under \"parameters\" instead of top-level"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", metavar="completions|chat", show_default=False,
                                           help="with openai:URL, stream /v1/completions (default) or /v1/chat/completions "
                                           "(one user message per request; the random workload's token ids sent as words)"),
    allow_cpu: bool = typer.Option(False, "--allow-cpu", help="pass without a GPU though the image is built for one (only its "
                                   "CPU path is tested); without it a GPU image that sees no GPU fails"),
    dry_run: bool = typer.Option(False, "--dry-run", help="with --image: print the container (GPU devices, groups, mounts) and "
                                 "what it must see, and run nothing"),
) -> None:
    """Prove an image works: GPU checks, decode speed vs the roofline, logits parity, LAMBADA; or sweep an OpenAI or Triton server."""
    urls = [e for e in engines if e.startswith(("openai:", "triton:"))]
    req = app.selftest.SelftestRequest(quick=quick, engines=tuple(e for e in engines if e not in urls),
                                       shapes=tuple(shapes), model=model, parity=parity, lambada=lambada, peak_gbs=peak_gbs,
                                       input_len=input_len, output_len=output_len, allow_cpu=allow_cpu)
    app.selftest.check_engines(req)
    if triton_parameters and not any(u.startswith("triton:") for u in urls):
        raise InputError("--triton-parameters shapes Triton's generate requests", "use it with --engine triton:URL, or drop it")
    if endpoint is not None and not urls:
        raise InputError("--endpoint chooses the serving sweep's OpenAI path", "use it with --engine openai:URL, or drop it")
    if report:
        ui.report_dir.ready(report)
    if junit_path:
        ui.junit.prepare(junit_path)
    app.selftest.check_sweep_alone(urls, req, image, dataset, request_rate)
    if dry_run and urls:
        raise InputError("--dry-run shows the container of selftest --image; a serving sweep runs no container",
                         "drop --dry-run, or use it with --image")
    if urls:
        return _sweep(app.sweep.SweepRequest.asked(urls[0], model, concurrency, num_prompts, input_len, output_len, dataset,
                                                   api_key, request_rate, ready_timeout, triton_parameters, endpoint,
                                                   request_timeout, sweep_timeout),
                      as_json, report, junit_path)
    if dry_run:
        planned = app.selftest.run(req, image, dry_run=True)
        return finish(planned, as_json, lambda p: ui.report.print_planned_run(p.to_json()))
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        result = app.selftest.run(req, image, reporter)
    assert isinstance(result, app.selftest.SelftestResult)
    doc = result.to_json()
    if report:
        ui.report_dir.write(report, {"selftest.json": (json.dumps(doc, indent=2) + "\n").encode()})
    finish(result, as_json, lambda r: ui.report.print_selftest(doc, image), junit_path,
           f"envkit selftest{' ' + image if image else ''}", lambda: ui.junit.selftest_cases(doc))


def doctor(
    deep: bool = typer.Option(False, "--deep", help="also import torch and the compiled modules (in a subprocess, with a timeout)"),
    image: Optional[str] = typer.Option(None, "--image", help="judge this image's stack on this host's GPUs"),
    for_: Optional[str] = typer.Option(None, "--for", help="would this stack work here? resolve flags as one string"),
    facts_file: Optional[str] = typer.Option(None, "--facts", help="judge a recorded facts JSON instead of this host"),
    pythons: list[str] = typer.Option([], "--python", metavar="PATH", help="judge this interpreter's stack (repeatable; the first is "
                                      "the one --for resolves for); default: the active environment, python3 on PATH, conda's environments"),
    images: bool = typer.Option(True, "--images/--no-images", help="also judge the envkit-built images on the engine, from their labels"),
    dry_run: bool = typer.Option(False, "--dry-run", help="with --image: print the probe's container (GPU devices, groups, "
                                 "mounts) and run nothing"),
    as_json: bool = opt.as_json(),
    junit_path: Optional[str] = opt.junit("also write the findings as JUnit XML"),
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """Inspect this GPU host (its Pythons, or an image on it): what is wrong, why, and how to fix it."""
    if dry_run:
        if not image:
            raise InputError("--dry-run shows the container of doctor --image", "add --image IMAGE, or drop --dry-run")
        return finish(app.doctor.plan_image(image, deep), as_json, lambda p: ui.report.print_planned_run(p.to_json()))
    if junit_path:
        ui.junit.prepare(junit_path)
    run = functools.partial(app.doctor.run, matrix_path=matrix_path, deep=deep, image=image, for_=for_, facts_file=facts_file,
                            pythons=tuple(pythons), images=images)
    if as_json and not deep:  # nothing to show while it runs: no progress display to start
        d = run()
    else:
        with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
            d = run(reporter=reporter)
    finish(d, as_json, lambda d: ui.report.print_doctor(d.host, list(d.findings), image, environments=d.environments), junit_path,
           f"envkit doctor{' --image ' + image if image else ''}", lambda: ui.junit.doctor_cases(list(d.findings)))


def inspect(
    image: str = typer.Argument(..., help="an image envkit built (it carries the io.envkit.solution label)"),
    as_json: bool = opt.as_json(),
    junit_path: Optional[str] = opt.junit("also write doctor's findings as JUnit XML"),
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """What an image holds (its solution label), and doctor's checks for it on this host."""
    if junit_path:
        ui.junit.prepare(junit_path)
    i = app.inspect.inspect(image, matrix_path)
    finish(i, as_json, lambda i: ui.report.print_inspected(i), junit_path, f"envkit inspect {image}",
           lambda: ui.junit.doctor_cases(list(i.findings)))


def serve(
    image: Optional[str] = typer.Option(None, "--image", help="a serving image (built with --serve MODEL_DIR)"),
    env: list[str] = typer.Option([], "--env", metavar="NAME=VALUE", help="an environment variable for the server (repeatable)"),
    model_dir: Optional[str] = typer.Option(None, "--model-dir", help="the model directory, for an image built with --model-mount (read-only)"),
    timeout: float = typer.Option(900.0, "--timeout", help="seconds the server may take to turn healthy (finite, above 0)"),
    shm_size: str = typer.Option("2g", "--shm-size", help="the container's /dev/shm (vLLM's processes share memory there; Docker's default 64m is too small)"),
    sweep: bool = typer.Option(False, "--sweep", help="once healthy, run the serving sweep against it, then stop it (unless --keep)"),
    keep: bool = typer.Option(False, "--keep", help="with --sweep: leave the server running afterwards"),
    concurrency: str = typer.Option("1,4", "--concurrency", help="the sweep's concurrency levels"),
    num_prompts: int = typer.Option(16, "--num-prompts", min=1, help="the sweep's requests per level"),
    input_len: Optional[int] = typer.Option(None, "--input-len", min=1, help="the sweep's prompt tokens (default 128)"),
    output_len: Optional[int] = typer.Option(None, "--output-len", min=2, help="the sweep's tokens per request (default 128)"),
    stop: Optional[str] = typer.Option(None, "--stop", metavar="CONTAINER", help="stop a server envkit serve started (and its network)"),
    allow_cpu: bool = typer.Option(False, "--allow-cpu", help="start an image built for GPUs without them (else refused before it starts)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the server's container (GPU devices, groups, mounts) and start nothing"),
    as_json: bool = opt.as_json("print the server (and the sweep) as JSON"),
) -> None:
    """Run a serving image on an internal network with no route out (GPUs passed where the engine has them), wait until
    it is healthy, and print its URL; or sweep it and stop it."""
    if stop:
        starts = [name for name, on in (("--image", image), ("--env", env), ("--model-dir", model_dir), ("--sweep", sweep),
                                        ("--keep", keep), ("--allow-cpu", allow_cpu), ("--dry-run", dry_run)) if on]
        if starts:
            raise InputError(f"--stop CONTAINER stops a server; {', '.join(starts)} go{'es' if len(starts) == 1 else ''} with "
                             "starting one", "run envkit serve --stop CONTAINER alone, and start a server without --stop")
        app.serving.stop(stop)
        ui.progress.console(stderr=as_json).print(f"stopped {stop} and its network", markup=False, highlight=False)
        return
    if not image:
        raise InputError("envkit serve needs --image IMAGE (or --stop CONTAINER)", "pass the serving image's tag")
    if keep and not sweep:
        raise InputError("--keep leaves the server running after --sweep; without --sweep it keeps running anyway",
                         "add --sweep, or drop --keep")
    app.serving.check_start(image, tuple(env), model_dir, shm_size, timeout)  # before the engine is contacted
    app.sweep.check(app.sweep.SweepRequest("openai:http://127.0.0.1", concurrency=concurrency))  # the sweep's own faults, before anything starts
    if dry_run:
        return finish(app.serving.plan_start(image, tuple(env), model_dir, shm_size), as_json,
                      lambda p: ui.report.print_planned_run(p.to_json()))
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        running = app.serving.start(image, tuple(env), model_dir, timeout, reporter.say, shm_size=shm_size, allow_cpu=allow_cpu)
        if sweep:
            try:
                req = app.sweep.SweepRequest.asked(f"openai:{running.url}", running.model, concurrency, num_prompts, input_len, output_len, None)
                result = app.sweep.serving_sweep(req, reporter)
            finally:
                if not keep:
                    app.serving.stop(running.container)
            running = replace(running, sweep=result.to_json(), stopped=not keep)
    out = ui.progress.console(stderr=as_json)
    ui.report.print_serving(running.to_json(), out)
    if running.sweep is not None:
        ui.report.print_sweep(running.sweep, out)
    if as_json:
        ui.output.print_json(running.to_json())
    if not running.ok:
        raise typer.Exit(1)


def push(
    image: str = typer.Argument(..., help="the image to push (a tag or ID on this engine)"),
    to: str = typer.Option(..., "--to", metavar="REGISTRY/REPO[:TAG]", help="where: the site's registry, repository and tag"),
    username: Optional[str] = typer.Option(None, "--username", envvar="ENVKIT_REGISTRY_USER", help="the registry login's user"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password from stdin (else ENVKIT_REGISTRY_PASSWORD)"),
    as_json: bool = opt.as_json("print the pushed reference and digest as JSON"),
) -> None:
    """Push an image to the site's registry through the engine; the login is passed in memory, never written by envkit."""
    import os
    import sys

    app.serving.check_push(to, username, "-" if password_stdin or os.environ.get("ENVKIT_REGISTRY_PASSWORD") else None)
    password = sys.stdin.readline().rstrip("\n") if password_stdin else os.environ.get("ENVKIT_REGISTRY_PASSWORD")
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        pushed = app.serving.push(image, to, username, password or None, reporter.say)
    out = ui.progress.console(stderr=as_json)
    out.print(f"pushed {pushed.ref}\n  digest {pushed.digest}\n  pull   {pushed.pinned}", markup=False, highlight=False)
    if as_json:
        ui.output.print_json(pushed.to_json())
