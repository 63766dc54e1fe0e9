"""The commands that check: selftest (here, in an image, or a serving sweep), doctor, inspect; and serve and push."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import typer

from envkit import app, ui
from envkit.cli.options import Args, declared, finish, reporting, request

if TYPE_CHECKING:
    from envkit.app.sweep import SweepRequest


def _sweep(sweep: SweepRequest, as_json: bool, report: Optional[str], junit_path: Optional[str]) -> None:
    result = reporting(lambda r: app.sweep.serving_sweep(sweep, r))
    doc = result.to_json()
    if report:
        ui.report_dir.write_json(report, "sweep", doc, {"sweep.png": ui.plot.sweep_chart(doc)})
    finish(result, as_json, lambda r: ui.report.print_sweep(doc), junit_path, f"envkit selftest sweep {doc['engine']}",
           lambda: ui.junit.sweep_cases(doc))


@declared("selftest")
def selftest(a: Args) -> None:
    """Prove an image works: GPU checks, decode speed vs the roofline, logits parity, LAMBADA; or sweep an OpenAI or Triton server."""
    urls = [e for e in a.engines if e.startswith(("openai:", "triton:"))]
    req = request(app.selftest.SelftestRequest, a, engines=tuple(e for e in a.engines if e not in urls))
    app.selftest.check_asked(req, urls, a.image, a.dataset, a.request_rate, a.triton_parameters, a.endpoint, a.dry_run)
    ui.output.outputs_ready(a.junit_path, a.report)
    if urls:
        return _sweep(app.sweep.SweepRequest.asked(urls[0], a.model, a.concurrency, a.num_prompts, a.input_len, a.output_len, a.dataset,
                                                   a.api_key, a.request_rate, a.ready_timeout, a.triton_parameters, a.endpoint,
                                                   a.request_timeout, a.sweep_timeout), a.as_json, a.report, a.junit_path)
    if a.dry_run:
        planned = app.selftest.run(req, a.image, dry_run=True)
        return finish(planned, a.as_json, lambda p: ui.report.print_planned_run(p.to_json()))
    result = reporting(lambda r: app.selftest.run(req, a.image, r))
    assert isinstance(result, app.selftest.SelftestResult)
    doc = result.to_json()
    if a.report:
        ui.report_dir.write_json(a.report, "selftest", doc)
    finish(result, a.as_json, lambda r: ui.report.print_selftest(doc, a.image), a.junit_path,
           f"envkit selftest{' ' + a.image if a.image else ''}", lambda: ui.junit.selftest_cases(doc))


@declared("doctor")
def doctor(a: Args) -> None:
    """Inspect this GPU host (its Pythons, or an image on it): what is wrong, why, and how to fix it."""
    if a.dry_run:
        return finish(app.doctor.plan_image(a.image, a.deep), a.as_json, lambda p: ui.report.print_planned_run(p.to_json()))
    ui.output.outputs_ready(a.junit_path)
    run = functools.partial(app.doctor.run, matrix_path=a.matrix_path, deep=a.deep, image=a.image, for_=a.for_, facts_file=a.facts_file,
                            pythons=tuple(a.pythons), images=a.images)
    d = run() if a.as_json and not a.deep else reporting(lambda r: run(reporter=r))  # --json alone: nothing to draw
    finish(d, a.as_json, lambda d: ui.report.print_doctor(d.host, list(d.findings), a.image, environments=d.environments), a.junit_path,
           f"envkit doctor{' --image ' + a.image if a.image else ''}", lambda: ui.junit.doctor_cases(list(d.findings)))


@declared("inspect")
def inspect(a: Args) -> None:
    """What an image holds (its solution label), and doctor's checks for it on this host."""
    ui.output.outputs_ready(a.junit_path)
    i = app.inspect.inspect(a.image, a.matrix_path)
    finish(i, a.as_json, lambda i: ui.report.print_inspected(i), a.junit_path, f"envkit inspect {a.image}",
           lambda: ui.junit.doctor_cases(list(i.findings)))


@declared("serve")
def serve(a: Args) -> None:
    """Run a serving image on an internal network with no route out (GPUs passed where the engine has them), wait until
    it is healthy, and print its URL; or sweep it and stop it."""
    starting = {"--image": a.image, "--env": a.env, "--model-dir": a.model_dir, "--sweep": a.sweep, "--keep": a.keep,
                "--allow-cpu": a.allow_cpu, "--dry-run": a.dry_run}
    app.serving.check_asked(a.image, a.stop, starting, a.sweep, a.keep)
    if a.stop:
        app.serving.stop(a.stop)
        return ui.progress.console(stderr=a.as_json).print(f"stopped {a.stop} and its network", markup=False, highlight=False)
    app.serving.check_start(a.image, tuple(a.env), a.model_dir, a.shm_size, a.timeout)  # before the engine is contacted
    app.sweep.check(app.sweep.SweepRequest("openai:http://127.0.0.1", concurrency=a.concurrency))  # the sweep's own faults, first
    if a.dry_run:
        return finish(app.serving.plan_start(a.image, tuple(a.env), a.model_dir, a.shm_size), a.as_json,
                      lambda p: ui.report.print_planned_run(p.to_json()))
    levels = {"concurrency": a.concurrency, "num_prompts": a.num_prompts, "input_len": a.input_len, "output_len": a.output_len}
    running = reporting(lambda r: app.serving.start_and_sweep(a.image, tuple(a.env), a.model_dir, a.timeout, r, a.shm_size, a.allow_cpu,
                                                             levels if a.sweep else None, a.keep))
    ui.report.print_running(running, a.as_json)
    if not running.ok:
        raise typer.Exit(1)


@declared("push")
def push(a: Args) -> None:
    """Push an image to the site's registry through the engine; the login is passed in memory, never written by envkit."""
    import os
    import sys

    app.serving.check_push(a.to, a.username, "-" if a.password_stdin or os.environ.get("ENVKIT_REGISTRY_PASSWORD") else None)
    password = sys.stdin.readline().rstrip("\n") if a.password_stdin else os.environ.get("ENVKIT_REGISTRY_PASSWORD")
    pushed = reporting(lambda r: app.serving.push(a.image, a.to, a.username, password or None, r.say, lock_tag=a.lock_tag))
    out = ui.progress.console(stderr=a.as_json)
    out.print(f"pushed {pushed.ref}\n  digest {pushed.digest}\n  pull   {pushed.pinned}", markup=False, highlight=False)
    if a.as_json:
        ui.output.print_json(pushed.to_json())
