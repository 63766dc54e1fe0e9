"""`envkit generate`: resolve (or replay a lock), plan, render, and write the context whole."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from envkit.adapters.context_dir import load_templates, write_tree
from envkit.app.resolve import solve
from envkit.app.serving import Prepared, model_json, staged
from envkit.config import matrix_file
from envkit.config.lockfile import check_lock, make_lock, read_lock
from envkit.config.site_file import load as load_site
from envkit.core.planner import plan
from envkit.core.planner.engine import model_archive, plan_engine
from envkit.core.render import render, render_engine
from envkit.core.resolve import parse_query, resolve
from envkit.core.resolve.engines import wheel_base
from envkit.errors import InputError
from envkit.model.engines import EngineOptions
from envkit.model.flags import ResolveFlags
from envkit.model.lock import Lock
from envkit.model.matrix import Matrix
from envkit.model.plan import DEFAULT_HOST_MARCH, SERVE_PORT, BuildPlan, EnginePlan, Options, ToolkitSource
from envkit.model.site import Site
from envkit.model.solution import Result, Unsolved


def command_line(flags: ResolveFlags, site: Site, opts: Options, lock: Optional[str]) -> str:
    parts = ["envkit", "generate"]
    if lock:
        parts += ["--lock", lock]
    else:
        parts += flags.command_args()
    if site.given:
        parts += ["--mirror", site.path]
    if opts.offline:
        parts.append("--offline")
    if opts.host_march != Options().host_march:
        parts.append(f"--host-march={opts.host_march}")
    if opts.toolkit is not None:
        parts.append(f"--toolkit={opts.toolkit}")
    if opts.serve is not None:  # the model's directory is the user's own: named by a placeholder
        s = opts.serve
        parts += ["--serve=MODEL_DIR", f"--served-model-name={s.name}"] + (["--model-mount"] if s.mount else []) \
            + ([f"--serve-port={s.port}"] if s.port != SERVE_PORT else []) + [f"--serve-arg={a}" for a in s.args]
    return " ".join(shlex.quote(p) for p in parts)


@dataclass(frozen=True)
class GeneratedEngine:
    """A container engine's context: the Dockerfile FROM the chosen container (its fill stage takes the Triton model
    repository from the backend's archive), the fill values, the plan and scripts."""
    result: Result
    plan: EnginePlan
    files: dict[str, bytes]
    command: str
    out: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        assert self.result.engine is not None
        return {"schema": 1, "engine": self.result.engine.to_json(), "plan": self.plan.to_json(),
                "warnings": list(self.result.warnings), "command": self.command, "out": self.out, "files": sorted(self.files)}


def _engine_command(flags: ResolveFlags, site: Site, eopts: EngineOptions, offline: bool = False) -> str:
    parts = ["envkit", "generate", *flags.command_args()]
    if site.given:
        parts += ["--mirror", site.path]
    if offline:
        parts.append("--offline")
    if eopts.tp != EngineOptions().tp:
        parts.append(f"--tp={eopts.tp}")
    if eopts.max_batch_size != EngineOptions().max_batch_size:
        parts.append(f"--max-batch-size={eopts.max_batch_size}")
    if eopts.from_wheel:
        parts.append("--from-wheel")
    return " ".join(shlex.quote(p) for p in parts)


PIP_STACK_OPTIONS = ("--offline", "--host-march", "--toolkit", "--max-jobs", "--nvcc-threads", "--serve")
"""generate's options that shape a stack envkit builds with pip; a container engine refuses them."""
_CONTAINER_REFUSAL = {
    "--offline": ("an offline build carries every artifact in a bundle, and a container engine's image is pulled from "
                  "NVIDIA's registry (or the site's mirror of it; a backend image's build-backend.sh downloads its sources)",
                  "drop --offline (--mirror SITE.toml pulls through the site's registry), or build a pip stack "
                  "(--engine torch or vllm) for an offline bundle"),
    "--serve": ("--serve bakes a model into a vLLM server envkit builds with pip; the container serves through its own "
                "server", "drop --serve and its options (see envkit/build-engine.sh in the context for the model)"),
}
_COMPILE_REFUSAL = ("--toolkit, --host-march, --max-jobs and --nvcc-threads shape what a pip stack compiles, and a "
                    "container engine compiles nothing here", "")


def asked_options(offline: bool, host_march: Optional[str], max_jobs: Optional[int], nvcc_threads: Optional[int],
                  toolkit: Optional[ToolkitSource], serve: Optional[str]) -> tuple[Options, frozenset[str]]:
    """generate's pip-stack options as the command line gave them (None: not given), and the names of those given."""
    opts = Options(offline=offline, host_march=DEFAULT_HOST_MARCH if host_march is None else host_march, max_jobs=max_jobs,
                   nvcc_threads=nvcc_threads, toolkit=toolkit)
    given = frozenset(name for name, value in (("--offline", offline or None), ("--host-march", host_march), ("--max-jobs", max_jobs),
                                               ("--nvcc-threads", nvcc_threads), ("--toolkit", toolkit), ("--serve", serve))
                      if value is not None)
    return opts, given


def given_options(opts: Options, given: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The pip-stack options a request names: given on the command line, or set away from their defaults."""
    differ = {"--offline": opts.offline, "--host-march": opts.host_march != DEFAULT_HOST_MARCH, "--toolkit": opts.toolkit is not None,
              "--max-jobs": opts.max_jobs is not None, "--nvcc-threads": opts.nvcc_threads is not None, "--serve": opts.serve is not None}
    return tuple(n for n in PIP_STACK_OPTIONS if differ[n] or n in given)


def generate_engine(m: Matrix, result: Result, flags: ResolveFlags, site: Site, opts: Options, eopts: EngineOptions,
                    out: Optional[str], force: bool, given: frozenset[str] = frozenset()) -> GeneratedEngine:
    """The context of a container engine; the pip-stack options (--toolkit, --serve, --host-march...) do not apply,
    nor the engine options its files would not use: each is refused (exit 2), never dropped. --offline applies to an
    engine whose build fills a Triton model repository: the backend's archive must then be carried in the context's
    sources/ (OUT/sources/NAME, put there by the user), which the Dockerfile COPYs instead of fetching it."""
    sol = result.engine
    assert sol is not None
    named = given_options(opts, given)
    fills_repo = sol.workflow in ("ensemble", "fastertransformer") and not eopts.from_wheel
    offline = fills_repo and "--offline" in named
    if offline:
        named = tuple(n for n in named if n != "--offline")
    if named:
        first = next((n for n in named if n in _CONTAINER_REFUSAL), None)
        why, fix = _CONTAINER_REFUSAL[first] if first else _COMPILE_REFUSAL
        fix = fix or f"drop {' and '.join(named)}"
        raise InputError(f"--engine {sol.engine} is a container ({sol.image}): {', '.join(named)} do{'es' if len(named) == 1 else ''} "
                         f"not apply: {why}", fix)
    eopts.refuse_unused(sol.engine, sol.workflow)
    wheel = wheel_base(m, sol) if eopts.from_wheel else None
    archive = None if wheel is not None else model_archive(m, sol)
    carried = archive is not None and out is not None and (Path(out) / archive.path).is_file()
    command = _engine_command(flags, site, eopts, offline)
    templates = load_templates()
    plan = plan_engine(sol, eopts, site, templates, wheel, archive=archive, carried=carried, offline=offline, where=out)
    files = render_engine(plan, templates, command)
    if out is not None:
        write_tree(out, files, force)
    return GeneratedEngine(result, plan, files, command, out)


@dataclass(frozen=True)
class Generated:
    plan: BuildPlan
    result: Result
    files: dict[str, bytes]
    command: str
    out: Optional[str] = None  # where the files were written; None for a dry run
    model: Optional[dict[str, Any]] = None  # a serving image's model: its digest, and what was left out of it and why

    def to_json(self) -> dict[str, Any]:
        doc = {**self.plan.to_json(), "command": self.command, "out": self.out, "files": sorted(self.files)}
        return doc if self.model is None else {**doc, "model": self.model}


def generate(flags: ResolveFlags, *, matrix_path: Optional[str] = None, lock: Optional[str] = None,
             mirror: Optional[str] = None, opts: Options = Options(), out: Optional[str] = None,
             force: bool = False, serving: Optional[Prepared] = None, engine_opts: EngineOptions = EngineOptions(),
             say: Callable[[str], None] = lambda _: None, host_facts: Optional[str] = None,
             given: frozenset[str] = frozenset()) -> Union[Generated, GeneratedEngine, Unsolved]:
    """`given`: the options the command line named (--offline, --host-march, --tp...), so one given at its default
    value is refused where it does not apply, like one set away from it."""
    return _generate(flags, matrix_path, lock, mirror, opts, out, force, serving, engine_opts, say, None, host_facts, given)


def write_context(g: Generated, out: str, force: bool = False) -> Generated:
    """Write a pip stack's context made in memory (generate without `out`), whole, as generate with `out` would."""
    write_tree(out, g.files, force)
    return replace(g, out=out)


def generate_pip(flags: ResolveFlags, *, command: str, matrix_path: Optional[str] = None, lock: Optional[str] = None,
                 mirror: Optional[str] = None, opts: Options = Options(), out: Optional[str] = None, force: bool = False,
                 serving: Optional[Prepared] = None, host_facts: Optional[str] = None) -> Union[Generated, Unsolved]:
    """generate for the commands that build, bundle or lock a pip stack: a container engine is refused before a file is
    written (its image is NVIDIA's, pulled through the site's registry)."""
    g = _generate(flags, matrix_path, lock, mirror, opts, out, force, serving, EngineOptions(), lambda _: None, command, host_facts)
    assert not isinstance(g, GeneratedEngine)
    return g


def _generate(flags: ResolveFlags, matrix_path: Optional[str], lock: Optional[str], mirror: Optional[str], opts: Options,
              out: Optional[str], force: bool, serving: Optional[Prepared], engine_opts: EngineOptions,
              say: Callable[[str], None], pip_only: Optional[str], host_facts: Optional[str] = None,
              given: frozenset[str] = frozenset()) -> Union[Generated, GeneratedEngine, Unsolved]:
    """Resolve (or replay a lock), plan and render; with `out`, write the context there, whole: the generated files and a
    serving image's model/ staged, then committed together."""
    engine_opts.check()  # --max-batch-size 0 is refused whatever the engine
    if serving is not None:
        opts = replace(opts, serve=serving.serve)
    m = matrix_file.load(matrix_path)
    site = load_site(mirror) if mirror else Site()
    locked: Optional[Lock] = None  # a replayed lock: its pinned wheels and images travel into the context's lock
    if lock:
        if flags.any():
            raise InputError("--lock replays a resolved query; resolve flags cannot be combined with it",
                             "drop the resolve flags, or drop --lock to resolve anew")
        locked = read_lock(lock)
        query_flags = locked.query
        try:
            query = parse_query(m, query_flags)
        except InputError as exc:  # the lock's query, edited or from another envkit: name the file
            raise InputError(f"lock file {lock}: {exc.message}", exc.fix) from None
        except ValueError as exc:
            raise InputError(f"lock file {lock}: its query does not parse ({exc})", "regenerate it with envkit generate") from None
        result = resolve(m, query)
        check_lock(lock, locked, result)
        if opts.toolkit is None and locked.toolkit == "pip":  # replayed as it was made, unless --toolkit says otherwise
            opts = replace(opts, toolkit="pip")
    else:
        result, query_flags = solve(m, flags, site, host_facts)
    if result.engine is not None:
        if pip_only is not None:
            raise InputError(f"envkit {pip_only} makes pip stacks; --engine {result.engine.engine} is NVIDIA's container "
                             f"({result.engine.image}), pulled through the site's registry",
                             "use envkit generate with the same flags (its Dockerfile starts FROM that container; a Triton "
                             "model repository's archive is carried by putting it in the context's sources/, where the "
                             "Dockerfile names it), or --engine torch / --engine vllm for a stack envkit builds")
        if locked is not None:
            raise InputError("--lock replays a pip stack; a container engine is named by its resolve flags", "drop --lock")
        return generate_engine(m, result, query_flags, site, opts, engine_opts, out, force, given)
    if result.solution is None:
        return Unsolved(result)
    engine_opts.refuse_on_pip_stack()
    p = plan(m, result.solution, site, opts)
    command = command_line(query_flags, site, opts, lock)
    files = render(p, load_templates(), command, make_lock(m, query_flags, result, site, opts, locked, toolkit=p.toolkit).to_json())
    if out is not None:
        write_tree(out, files, force, staged(serving, say))
    return Generated(p, result, files, command, out, model_json(serving))
