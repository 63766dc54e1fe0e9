"""The stack commands: resolve, generate, bundle, build. Each parses, calls one use case, shows its outcome."""
from __future__ import annotations

import sys
from typing import Any

import typer

from envkit import app, ui
from envkit.cli.options import Args, declared, finish, reporting, request
from envkit.errors import EXIT_NO_SOLUTION
from envkit.model.engines import EngineOptions
from envkit.model.flags import ResolveFlags


def _err(message: str) -> None:
    ui.progress.console(stderr=True).print(message, markup=False, highlight=False)


@declared("resolve", resolve=True)
def resolve(flags: ResolveFlags, a: Args) -> None:
    """Solve the compatibility matrix: the newest consistent stack, or every conflict with its fix (--gpu auto: for this host)."""
    result = app.resolve.resolve(flags, a.matrix_path, a.host_facts)
    ui.output.show_result(result, a.as_json)
    if not result.ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@declared("generate", resolve=True)
def generate(flags: ResolveFlags, a: Args) -> None:
    """Write a Dockerfile (devel build stage, slim runtime stage) and its scripts for the resolved stack."""
    opts, given = app.generate.asked_options(a.offline, a.host_march, a.max_jobs, a.nvcc_threads, a.toolkit, a.serve)
    to_stdout = a.out == "-"  # `-o -`: the Dockerfile alone on stdout, nothing written (like `cog debug`)
    serving = app.serving.asked(a.serve, a.served_model_name, a.serve_arg, a.model_mount, a.serve_port, _err)
    g = app.generate.generate(flags, matrix_path=a.matrix_path, lock=a.lock, mirror=a.mirror, opts=opts,
                              out=None if a.dry_run or to_stdout else a.out, force=a.force, serving=serving, say=_err,
                              host_facts=a.host_facts, engine_opts=EngineOptions.asked(a.tp, a.max_batch_size, a.from_wheel), given=given)
    if to_stdout and isinstance(g, (app.generate.Generated, app.generate.GeneratedEngine)):
        sys.stdout.write(g.files["Dockerfile"].decode())
    elif isinstance(g, app.generate.GeneratedEngine):
        finish(g, a.as_json, lambda g: ui.report.print_engine_context(g.result, g.plan, g.out, sorted(g.files)))
    else:
        finish(g, a.as_json, lambda g: ui.report.print_plan(g.plan, g.out, sorted(g.files)))


@declared("bundle", resolve=True)
def bundle(flags: ResolveFlags, a: Args) -> None:
    """On a connected machine: carry everything an offline build needs (wheels, sources, apt packages, base images)."""
    def run(reporter: Any) -> Any:
        serving = app.serving.asked(a.serve, a.served_model_name, a.serve_arg, a.model_mount, a.serve_port, reporter.say)
        return app.bundle.make_bundle(flags, out=a.out, matrix_path=a.matrix_path, lock=a.lock, mirror=a.mirror,
                                      find_links=tuple(a.find_links), force=a.force, reporter=reporter, locked=a.locked,
                                      toolkit=a.toolkit, serving=serving, host_facts=a.host_facts)
    finish(reporting(run), a.as_json, lambda b: ui.report.print_bundle(b.report))


@declared("lock", resolve=True)
def lock(flags: ResolveFlags, a: Args) -> None:
    """Pin the stack: every wheel the image installs (transitive, by sha256, per pip step) and every base image by digest."""
    locked = reporting(lambda r: app.lock.make_lock_file(flags, out=a.out, matrix_path=a.matrix_path, mirror=a.mirror,
                                                        find_links=tuple(a.find_links), reporter=r, host_facts=a.host_facts))
    finish(locked, a.as_json, lambda done: ui.progress.console().print(done.summary(), markup=False, highlight=False))


@declared("build", resolve=True)
def build(flags: ResolveFlags, a: Args) -> None:
    """Build an image: offline from a bundle (network none), or against the site's mirrors; or a project's targets."""
    req = request(app.build.BuildRequest, a, flags=flags, secrets=tuple(a.secret))
    out_console = ui.progress.console(stderr=a.as_json)
    if not a.all_targets:
        outcome = reporting(lambda r: app.build.run(req, r, a.project, a.target), stderr=a.as_json)
        return finish(outcome, a.as_json, lambda built: ui.report.print_build(built, out_console))
    proj = app.build.load_project(a.project, a.target, a.all_targets, req)
    with ui.progress.BuildBoard([t.name for t in proj.targets], out_console) as board:
        built = app.build_all.build_all(proj, jobs=a.jobs, network=a.network, no_cache=a.no_cache, board=board, dry_run=a.dry_run,
                                        matrix_path=a.matrix_path, sbom_dir=req.sbom_out())
    out_console.print(built.summary())
    finish(built, a.as_json, lambda b: None)
