"""The command line: typer only. Each command parses its options, calls one use case of envkit/app and shows
the outcome with envkit/ui; `main` is the one place that turns an error into its line and exit code: envkit's
own errors and click's usage errors in one dialect (ui/errors.py `guarded`)."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Optional, Sequence

import typer

from envkit import __version__, ui
from envkit.model.options import EXIT_CODES, command_word, epilog
from envkit.ui import errors


class ProgressMode(str, Enum):
    auto = "auto"
    plain = "plain"
    none = "none"


# each command's module, imported only when the command runs (a doctor run imports no build machinery); --help,
# an unknown word and shell completion register them all
COMMANDS: dict[str, str] = {"resolve": "stack", "generate": "stack", "lock": "stack", "bundle": "stack", "build": "stack",
                            "selftest": "checks", "serve": "checks", "push": "checks", "doctor": "checks", "inspect": "checks",
                            "compare": "compare"}
MATRIX_COMMANDS: tuple[str, ...] = ("export", "check", "refresh", "show")
def make_app(only: Optional[str] = None) -> typer.Typer:
    """The command line with every command, or with `only` (a command, or "matrix") and its module alone."""
    import importlib

    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, epilog=EXIT_CODES,
                      help="Resolve, generate, build and self-test GPU environments for LLM serving.")
    app.callback()(root)
    for name, module in COMMANDS.items():
        if only is None or only == name:
            command = getattr(importlib.import_module(f"envkit.cli.{module}"), name)
            app.command(epilog=epilog(name))(command)
    if only is None or only == "matrix":
        from envkit.cli import matrix

        matrix_app = typer.Typer(no_args_is_help=True, help="Inspect and validate matrix.toml; export a project's targets to CI.")
        for name in MATRIX_COMMANDS:
            matrix_app.command(name, epilog=epilog(name))(getattr(matrix, name))
        app.add_typer(matrix_app, name="matrix")
    return app


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"envkit {__version__}\n")
        raise typer.Exit(0)


def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print envkit's version and exit"),
    verbose: int = typer.Option(0, "-v", "--verbose", count=True, help="more detail: a traceback with an internal error"),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="no progress lines, bars or build log (same as --progress none)"),
    progress: ProgressMode = typer.Option(ProgressMode.auto, "--progress", envvar="ENVKIT_PROGRESS",
                                          help="auto: bars where the terminal can draw them; plain: one line per event; none"),
    no_color: bool = typer.Option(False, "--no-color", help="no colour (NO_COLOR in the environment does the same)"),
) -> None:
    """Resolve, generate, build and self-test GPU environments for LLM serving."""
    ui.settings.configure(progress="none" if quiet else progress.value, color=not no_color, verbose=verbose)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    word = command_word(args, (*COMMANDS, "matrix"))
    rv = errors.guarded(args, lambda: make_app(word)(args=args, prog_name="envkit", standalone_mode=False), typer.TyperException,
                        COMMANDS, MATRIX_COMMANDS)
    sys.exit(rv if isinstance(rv, int) else 0)
