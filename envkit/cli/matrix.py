"""`envkit matrix ...`: check, refresh, show and export."""
from __future__ import annotations

import sys

import typer

from envkit import app, ui
from envkit.cli.options import Args, declared
from envkit.errors import EXIT_NO_SOLUTION, InputError

EXIT_DIFFERS = 1


@declared("matrix export")
def export(a: Args) -> None:
    """Export the project's targets as a GitHub Actions matrix workflow, a GitLab parallel:matrix job, a bake file, JSON,
    or Kubernetes manifests (k8s: a self-test Job per target, a Triton Deployment and Service; docs/k8s.md).

    Every target is resolved first: one without a solution is refused (exit 1, its conflicts named), and
    nothing is written. GitHub and GitLab jobs install envkit as \\[ci] envkit in the project file says,
    and run GPU targets on \\[ci] gpu_runner (or the target's own runner)."""
    outcome = app.matrix.export_project(a.project, a.fmt, a.contexts, a.out, a.matrix_path)
    if isinstance(outcome, app.matrix.ExportUnsolved):
        ui.report.print_export_unsolved(outcome)
        raise typer.Exit(EXIT_NO_SOLUTION)
    if outcome.out is None:
        sys.stdout.write(outcome.text)


@declared("matrix check")
def check(a: Args) -> None:
    """Validate the matrix: every problem is listed on its own line, with its line number (exit 3)."""
    if a.path and a.matrix_path and a.path != a.matrix_path:
        raise InputError(f"two matrices given: {a.path} and --matrix {a.matrix_path}", "give one of them")
    c = app.matrix.check(a.path or a.matrix_path)
    if a.as_json:
        ui.output.print_json(c.to_json())
    if isinstance(c, app.matrix.Rejected):
        ui.report.print_rejected(c)
        raise typer.Exit(c.exit_code)
    if not a.as_json:
        ui.report.print_matrix_check(c)


@declared("matrix refresh")
def refresh(a: Args) -> None:
    """Derive the generated tables of matrix.toml from the source extracts in data/sources
    (flash-attn workflows and setup.py per tag, PyPI metadata...); --check fails on any hand edit."""
    r = app.matrix.refresh(a.matrix_path, a.sources, a.check)
    if a.as_json:
        ui.output.print_json(r.to_json())
    else:
        ui.report.print_refresh(r)
    if not r.ok:
        raise typer.Exit(EXIT_DIFFERS)


@declared("matrix show")
def show(a: Args) -> None:
    """Print the matrix (or one table) as rich tables."""
    m = app.matrix.load(a.matrix_path)
    if a.as_json:
        ui.output.print_json(ui.report.matrix_document(m, a.table))
    else:
        ui.report.print_matrix(m, a.table)
