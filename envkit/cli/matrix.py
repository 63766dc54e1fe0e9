"""`envkit matrix ...`: check, refresh, show and export."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Optional

import typer

from envkit import app, ui
from envkit.cli import options as opt
from envkit.errors import InputError

EXIT_DIFFERS = 1


class ExportFormat(str, Enum):
    github = "github"
    gitlab = "gitlab"
    bake = "bake"
    json = "json"
    k8s = "k8s"


EXIT_NO_SOLUTION = 1


def export(
    fmt: ExportFormat = typer.Option(..., "--format", help="what to write"),
    project: str = typer.Option("envkit.toml", "--project", help="the project file with the targets"),
    out: Optional[str] = typer.Option(None, "-o", "--out", help="write here instead of stdout"),
    contexts: str = typer.Option("envkit-contexts", "--contexts", help="bake: where the targets' build contexts are"),
    matrix_path: Optional[str] = opt.matrix("the matrix.toml the targets are resolved with (default: the built-in one)"),
) -> None:
    """Export the project's targets as a GitHub Actions matrix workflow, a GitLab parallel:matrix job, a bake file, JSON,
    or Kubernetes manifests (k8s: a self-test Job per target, a Triton Deployment and Service; docs/k8s.md).

    Every target is resolved first: one without a solution is refused (exit 1, its conflicts named), and
    nothing is written. GitHub and GitLab jobs install envkit as \\[ci] envkit in the project file says,
    and run GPU targets on \\[ci] gpu_runner (or the target's own runner)."""
    outcome = app.matrix.export_project(project, fmt.value, contexts, out, matrix_path)
    if isinstance(outcome, app.matrix.ExportUnsolved):
        for line in outcome.lines():
            sys.stderr.write(f"envkit: {line}\n")
        sys.stderr.write(f"envkit: nothing exported: {len(outcome.unsolved)} target(s) without a solution "
                         f"(envkit resolve with a target's flags shows why)\n")
        raise typer.Exit(EXIT_NO_SOLUTION)
    if outcome.out is None:
        sys.stdout.write(outcome.text)


def check(
    path: Optional[str] = typer.Argument(None, help="matrix.toml to check (default: the built-in one)"),
    as_json: bool = opt.as_json("print the verdict (or every problem with its line) as one JSON document"),
    matrix_path: Optional[str] = opt.matrix("the same as PATH, spelled as every other command spells it"),
) -> None:
    """Validate the matrix: every problem is listed on its own line, with its line number (exit 3)."""
    if path and matrix_path and path != matrix_path:
        raise InputError(f"two matrices given: {path} and --matrix {matrix_path}", "give one of them")
    c = app.matrix.check(path or matrix_path)
    if as_json:
        ui.output.print_json(c.to_json())
    if isinstance(c, app.matrix.Rejected):
        sys.stderr.write(f"envkit: error: {c.headline}\n" + "".join(f"  {line}\n" for line in c.lines))
        raise typer.Exit(c.exit_code)
    if not as_json:
        ui.report.print_matrix_check(c)


def refresh(
    check: bool = typer.Option(False, "--check", help="change nothing; exit 1 if matrix.toml differs from what the sources derive"),
    sources: Optional[str] = typer.Option(None, "--sources", help="the extracts (default: data/sources beside matrix.toml)"),
    matrix_path: Optional[str] = opt.matrix("the matrix.toml to refresh (default: the built-in one)"),
    as_json: bool = opt.as_json(),
) -> None:
    """Derive the generated tables of matrix.toml from the source extracts in data/sources
    (flash-attn workflows and setup.py per tag, PyPI metadata...); --check fails on any hand edit."""
    r = app.matrix.refresh(matrix_path, sources, check)
    if as_json:
        ui.output.print_json(r.to_json())
    else:
        ui.report.print_refresh(r)
    if not r.ok:
        raise typer.Exit(EXIT_DIFFERS)


def show(
    table: Optional[str] = typer.Argument(None, help="cuda, gpu, torch, rocm, dtk, flash_attn, vllm, python, os"),
    matrix_path: Optional[str] = opt.matrix(),
    as_json: bool = opt.as_json("print the tables as one JSON document (columns and rows of text)"),
) -> None:
    """Print the matrix (or one table) as rich tables."""
    m = app.matrix.load(matrix_path)
    if as_json:
        tables = ui.report.matrix_tables(m, table)
        ui.output.print_json({"schema": 1, "matrix": m.path, "tables": {
            name: {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]} for name, (title, columns, rows) in tables.items()}})
    else:
        ui.report.print_matrix(m, table)
