"""The command line: typer only. Each command parses its options, calls one use case of envkit/app and shows
the outcome with envkit/ui; `main` is the one place that turns an EnvkitError into its line and exit code."""
from __future__ import annotations

import sys
from typing import Callable

import typer

from envkit.cli import checks, matrix, stack
from envkit.errors import EnvkitError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Resolve, generate, build and self-test GPU environments for LLM serving.")
COMMANDS: tuple[Callable[..., None], ...] = (stack.resolve, stack.generate, stack.bundle, stack.build, checks.selftest,
                                             checks.doctor, checks.inspect)
MATRIX_COMMANDS: tuple[Callable[..., None], ...] = (matrix.export, matrix.check, matrix.refresh, matrix.show)
for command in COMMANDS:
    app.command()(command)

matrix_app = typer.Typer(no_args_is_help=True, help="Inspect and validate matrix.toml.")
for command in MATRIX_COMMANDS:
    matrix_app.command(command.__name__)(command)
app.add_typer(matrix_app, name="matrix")


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
