"""plan(): a resolved Solution and a Site in, a BuildPlan out, assembled from building blocks.

Pure. A plan is two stages. `build` starts from a devel image, compiles what must be compiled and
installs everything into /opt/venv. `runtime` starts from the slim runtime image, installs only the
interpreter's shared libraries and copies /opt/venv (and /opt/python) over: no compiler in it.
Each block adds its build steps to the first and its runtime steps to the second, as hpccm's
`Stage1 += Stage0.runtime()` does.
"""
from __future__ import annotations

from itertools import chain
from typing import Iterable, TypeVar

from envkit.core.planner.blocks import blocks_for
from envkit.core.planner.context import PlanContext, stack_text
from envkit.model.matrix import Matrix
from envkit.model.plan import BuildPlan, Options, Stage
from envkit.model.site import Site
from envkit.model.solution import Solution

T = TypeVar("T")


def _joined(parts: Iterable[tuple[T, ...]]) -> tuple[T, ...]:
    return tuple(chain.from_iterable(parts))


def plan(m: Matrix, sol: Solution, site: Site, opts: Options) -> BuildPlan:
    """The BuildPlan for `sol`; refuses (InputError, naming the step) what the site or --offline cannot serve."""
    ctx = PlanContext.create(m, sol, site, opts)
    blocks = blocks_for(ctx)
    build = Stage("build", ctx.devel_image, ctx.devel_upstream, ctx.os, _joined(b.build_steps(ctx) for b in blocks))
    runtime = Stage("runtime", ctx.runtime_image, ctx.runtime_upstream, ctx.os, _joined(b.runtime_steps(ctx) for b in blocks))
    return BuildPlan(
        solution=sol, site=site, options=opts, stages=(build, runtime),
        carried=tuple(dict.fromkeys(_joined(b.carried(ctx) for b in blocks))),
        requirements=_joined(b.requirements(ctx) for b in blocks),
        wheel_sources=_joined(b.wheel_sources(ctx) for b in blocks),
        build_args=ctx.build_args,
        warnings=_joined(b.warnings(ctx) for b in blocks) + ctx.image_warnings,
        python_source=ctx.python_source,
        stack=stack_text(sol),
        toolkit=ctx.toolkit,
    )
