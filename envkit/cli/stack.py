"""The stack commands: resolve, generate, bundle, build. Each parses, calls one use case, shows its outcome."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Optional

import typer

from envkit import app, ui
from envkit.cli import options as opt
from envkit.cli.options import FORCE, finish, resolve_flags
from envkit.errors import EXIT_BUG, EXIT_EXTERNAL, EXIT_NO_SOLUTION, InputError
from envkit.model.engines import EngineOptions
from envkit.model.flags import ResolveFlags
from envkit.model.plan import DEFAULT_HOST_MARCH, SERVE_PORT, Options


class ToolkitChoice(str, Enum):
    image = "image"
    pip = "pip"


TOOLKIT_HELP = ("CUDA toolkit of the devel stage: the nvidia/cuda devel image, or NVIDIA's pinned PyPI wheels on the OS's own image "
                "(default: the site file's \\[cuda] toolkit, else image)")


def _serving(serve: Optional[str], name: Optional[str], args: list[str], mount: bool, port: int, say) -> Optional[app.serving.Prepared]:
    if serve is None:
        if name or args or mount or port != SERVE_PORT:
            raise InputError("--served-model-name, --serve-arg, --model-mount and --serve-port go with --serve MODEL_DIR",
                             "add --serve MODEL_DIR, or drop them")
        return None
    return app.serving.prepare(app.serving.ServeRequest(serve, name, tuple(args), mount, port), say)


class BuildNetwork(str, Enum):
    bridge = "bridge"
    host = "host"


@resolve_flags
def resolve(flags: ResolveFlags, host_facts: Optional[str] = opt.host_facts(), as_json: bool = opt.as_json(),
            matrix_path: Optional[str] = opt.matrix()) -> None:
    """Solve the compatibility matrix: the newest consistent stack, or every conflict with its fix (--gpu auto: for this host)."""
    result = app.resolve.resolve(flags, matrix_path, host_facts)
    ui.output.show_result(result, as_json)
    if not result.ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@resolve_flags
def generate(
    flags: ResolveFlags,
    lock: Optional[str] = opt.lock("replay an envkit.lock.json instead of resolve flags"),
    mirror: Optional[str] = opt.mirror("site mirror profile (SITE.toml)"),
    offline: bool = typer.Option(False, "--offline", help="every artifact from the build context; refuse any network step"),
    out: str = typer.Option("envkit-build", "-o", "--out", help="output directory (the docker build context); - prints the Dockerfile alone"),
    host_march: Optional[str] = typer.Option(None, "--host-march", show_default=False,
                                             help=f"replaces csrc/rotary's -march=native ('native' keeps it; default {DEFAULT_HOST_MARCH})"),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", min=1, help="nvcc jobs (default: from the builder's memory, ~5 GB each)"),
    nvcc_threads: Optional[int] = typer.Option(None, "--nvcc-threads", min=1, help="threads per nvcc job (default: one per arch, max 4)"),
    toolkit: Optional[ToolkitChoice] = typer.Option(None, "--toolkit", help=TOOLKIT_HELP),
    serve: Optional[str] = opt.serve(),
    served_model_name: Optional[str] = opt.served_model_name(),
    serve_arg: list[str] = opt.serve_arg(),
    model_mount: bool = opt.model_mount(),
    serve_port: int = opt.serve_port(),
    tp: Optional[int] = typer.Option(None, "--tp", show_default=False,
                                     help="--engine triton-trtllm/trtllm/fastertransformer: tensor-parallel GPUs (server ranks; default 1)"),
    max_batch_size: Optional[int] = typer.Option(None, "--max-batch-size", show_default=False,
                                                 help="--engine triton-trtllm/trtllm: the server's max batch size (default 64)"),
    from_wheel: bool = typer.Option(False, "--from-wheel", help="--engine trtllm: TensorRT-LLM's wheel (NVIDIA's index, or the site's \\[rewrite] of it) on NVIDIA's CUDA image"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the plan; write nothing"),
    host_facts: Optional[str] = opt.host_facts(),
    as_json: bool = opt.as_json("print the plan as JSON"),
    force: bool = FORCE,
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """Write a Dockerfile (devel build stage, slim runtime stage) and its scripts for the resolved stack."""
    opts = Options(offline=offline, host_march=DEFAULT_HOST_MARCH if host_march is None else host_march, max_jobs=max_jobs,
                   nvcc_threads=nvcc_threads, toolkit=toolkit.value if toolkit else None)
    given = frozenset(name for name, value in (("--offline", offline or None), ("--host-march", host_march), ("--max-jobs", max_jobs),
                                               ("--nvcc-threads", nvcc_threads), ("--toolkit", toolkit), ("--serve", serve))
                      if value is not None)
    to_stdout = out == "-"  # `-o -`: the Dockerfile alone on stdout, nothing written (like `cog debug`)
    err = ui.progress.console(stderr=True)

    def say(message: str) -> None:
        err.print(message, markup=False, highlight=False)

    serving = _serving(serve, served_model_name, serve_arg, model_mount, serve_port, say)
    g = app.generate.generate(flags, matrix_path=matrix_path, lock=lock, mirror=mirror, opts=opts,
                         out=None if dry_run or to_stdout else out, force=force, serving=serving, say=say, host_facts=host_facts,
                         engine_opts=EngineOptions.asked(tp, max_batch_size, from_wheel), given=given)
    if to_stdout and isinstance(g, (app.generate.Generated, app.generate.GeneratedEngine)):
        sys.stdout.write(g.files["Dockerfile"].decode())
        return
    if isinstance(g, app.generate.GeneratedEngine):
        finish(g, as_json, lambda g: ui.report.print_engine_context(g.result, g.plan, g.out, sorted(g.files)))
        return
    finish(g, as_json, lambda g: ui.report.print_plan(g.plan, g.out, sorted(g.files)))


@resolve_flags
def bundle(
    flags: ResolveFlags,
    lock: Optional[str] = opt.lock("bundle an envkit.lock.json instead of resolve flags (a pinned one: its wheels by sha256)"),
    locked: bool = typer.Option(False, "--locked", help="refuse unless --lock pins every wheel and base image (envkit lock)"),
    mirror: Optional[str] = opt.mirror("fetch through the site's mirrors (SITE.toml)"),
    find_links: list[str] = typer.Option([], "--find-links", help="local directory of wheels to use as well (repeatable)"),
    toolkit: Optional[ToolkitChoice] = typer.Option(None, "--toolkit", help=TOOLKIT_HELP),
    serve: Optional[str] = opt.serve(),
    served_model_name: Optional[str] = opt.served_model_name(),
    serve_arg: list[str] = opt.serve_arg(),
    model_mount: bool = opt.model_mount(),
    serve_port: int = opt.serve_port(),
    out: str = typer.Option("envkit-bundle", "-o", "--out", help="bundle directory"),
    host_facts: Optional[str] = opt.host_facts(),
    force: bool = FORCE,
    as_json: bool = opt.as_json("print a JSON summary"),
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """On a connected machine: carry everything an offline build needs (wheels, sources, apt packages, base images)."""
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        serving = _serving(serve, served_model_name, serve_arg, model_mount, serve_port, reporter.say)
        b = app.bundle.make_bundle(flags, out=out, matrix_path=matrix_path, lock=lock, mirror=mirror, find_links=tuple(find_links),
                        force=force, reporter=reporter, locked=locked, toolkit=toolkit.value if toolkit else None,
                        serving=serving, host_facts=host_facts)
    finish(b, as_json, lambda b: ui.report.print_bundle(b.report))


@resolve_flags
def lock(
    flags: ResolveFlags,
    mirror: Optional[str] = opt.mirror("resolve the wheels on the site's mirrors (SITE.toml)"),
    find_links: list[str] = typer.Option([], "--find-links", help="local directory of wheels to use as well (repeatable)"),
    out: str = typer.Option("envkit.lock.json", "-o", "--out", help="the lock file to write (replaced whole)"),
    host_facts: Optional[str] = opt.host_facts(),
    as_json: bool = opt.as_json("print the lock document"),
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """Pin the stack: every wheel the image installs (transitive, by sha256, per pip step) and every base image by digest."""
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        locked = app.lock.make_lock_file(flags, out=out, matrix_path=matrix_path, mirror=mirror, find_links=tuple(find_links),
                                         reporter=reporter, host_facts=host_facts)
    finish(locked, as_json, lambda done: ui.progress.console().print(done.summary(), markup=False, highlight=False))


@resolve_flags
def build(
    flags: ResolveFlags,
    offline: bool = typer.Option(False, "--offline", help="build a bundle with the network off"),
    bundle_dir: Optional[str] = typer.Option(None, "--bundle", help="the bundle directory (with --offline)"),
    lock: Optional[str] = opt.lock("build an envkit.lock.json (mirror mode); with --offline --locked, the lock to hold the bundle to"),
    locked: bool = typer.Option(False, "--locked", help="refuse unless the bundle (its wheels by sha256, base images by ID) or the "
                                                         "engine's base images still match the pinned lock (exit 5 for a bundle)"),
    mirror: Optional[str] = opt.mirror("build against the site's mirrors (SITE.toml)"),
    project: Optional[str] = typer.Option(None, "--project", help="project file with named targets (envkit.toml)"),
    target: Optional[str] = typer.Option(None, "--target", help="build this target of --project"),
    all_targets: bool = typer.Option(False, "--all", help="build every target of --project"),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="targets built at once (with --all)"),
    out: str = typer.Option("envkit-build", "-o", "--out", help="build context directory (mirror mode)"),
    toolkit: Optional[ToolkitChoice] = typer.Option(None, "--toolkit", help=TOOLKIT_HELP + " (mirror mode)"),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="image name:tag (default envkit/<platform>:<torch>)"),
    network: BuildNetwork = typer.Option(BuildNetwork.bridge, "--network", help="network for mirror-mode RUN steps"),
    no_cache: bool = typer.Option(False, "--no-cache", help="run every step again (no layer cache)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="run the preflight and show the plan; build nothing"),
    secret: list[str] = typer.Option([], "--secret", metavar="ID=FILE",
                                     help="a file a mirror's login is in, mounted by the steps that need it and never written into "
                                          "the image: netrc=~/.netrc for \\[pip] netrc = true, apt-netrc=FILE for \\[apt] netrc = true "
                                          "(docker's id=ID,src=FILE works too; needs Podman or docker buildx; repeatable)"),
    export_wheels: Optional[str] = typer.Option(None, "--export-wheels", metavar="DIR",
                                                help="copy the wheels the build stage compiled (flash-attn, csrc kernels) into DIR, a new "
                                                     "or empty directory, with their sha256 in DIR/SHA256SUMS"),
    host_facts: Optional[str] = opt.host_facts(),
    as_json: bool = opt.as_json("print a JSON summary (the log goes to stderr)"),
    matrix_path: Optional[str] = opt.matrix(),
) -> None:
    """Build an image: offline from a bundle (network none), or against the site's mirrors; or a project's targets."""
    req = app.build.BuildRequest(flags=flags, offline=offline, bundle_dir=bundle_dir, lock=lock, mirror=mirror, out=out, tag=tag,
                                 network=network.value, no_cache=no_cache, dry_run=dry_run, matrix_path=matrix_path,
                                 secrets=tuple(secret), locked=locked, toolkit=toolkit.value if toolkit else None,
                                 export_wheels=export_wheels, host_facts=host_facts)
    out_console = ui.progress.console(stderr=as_json)
    if all_targets:
        proj = app.build.load_project(project, target, all_targets, req)
        with ui.progress.BuildBoard([t.name for t in proj.targets], out_console) as board:
            built = app.build_all.build_all(proj, jobs=jobs, network=network.value, no_cache=no_cache, board=board, dry_run=dry_run, matrix_path=matrix_path)
        out_console.print(built.summary())
        if as_json:
            ui.output.print_json(built.to_json())
        if not built.ok:  # a target's bug is a bug (70); any other failure is the build's (4)
            raise typer.Exit(EXIT_BUG if any(t.exit == EXIT_BUG for t in built.targets) else EXIT_EXTERNAL)
        return
    with ui.progress.reporter(out_console) as reporter:
        outcome = app.build.run(req, reporter, project, target)
    finish(outcome, as_json, lambda built: ui.report.print_build(built, out_console))
