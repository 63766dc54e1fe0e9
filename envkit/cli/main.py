"""The command line: typer only. Each command parses its options, calls one use case of envkit/app and shows
the outcome with envkit/ui; `main` is the one place that turns an error into its line and exit code: envkit's
own errors and click's usage errors in one dialect (ui/errors.py)."""
from __future__ import annotations

import os
import sys
import traceback
from enum import Enum
from typing import Any, Optional, Sequence

import typer

from envkit import __version__, ui
from envkit.errors import EXIT_BUG, EXIT_INTERRUPTED, EnvkitError, InputError
from envkit.model.options import EXIT_CODES, epilog
from envkit.ui import errors

EXIT_USAGE = 2


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
_VALUED_GLOBALS = {"--progress"}


def _asked(args: Sequence[str]) -> Optional[str]:
    """The command word of the arguments (after the global options), where it names one; None for --help and the rest."""
    it = iter(args)
    for a in it:
        if a in _VALUED_GLOBALS:
            next(it, None)
        elif a.startswith("-"):
            if a in ("--help", "--version") or a.startswith("--install-completion") or a.startswith("--show-completion"):
                return None
        else:
            return a if a in COMMANDS or a == "matrix" else None
    return None


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
    try:
        nul = next((a for a in args if "\0" in a), None)
        if nul is not None:  # no shell can pass one; a program calling envkit can
            raise InputError(f"argument {nul!r} holds a NUL character", "pass arguments without NUL bytes")
        rv = make_app(_asked(args))(args=args, prog_name="envkit", standalone_mode=False)
    except EnvkitError as exc:
        errors.fail(args, exc.exit_code, exc.message, exc.fix)
    except KeyboardInterrupt:
        sys.stderr.write("envkit: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    except typer.TyperException as exc:  # click's usage errors: the same dialect and exit code as envkit's
        code = getattr(exc, "exit_code", EXIT_USAGE)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(0)
        if type(exc).__name__ == "Abort":
            sys.stderr.write("envkit: interrupted\n")
            sys.exit(EXIT_INTERRUPTED)
        message, fix = errors.usage_error(exc, errors.command_path(exc, args, COMMANDS, MATRIX_COMMANDS))
        errors.fail(args, code if isinstance(code, int) else EXIT_USAGE, message, fix, "usage")
    except BrokenPipeError:  # `envkit matrix show | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:  # a bug in envkit: one line and exit 70; the traceback with -v
        if ui.settings.current().verbose:
            traceback.print_exc()
        where = traceback.extract_tb(exc.__traceback__)[-1]
        errors.fail(args, EXIT_BUG, f"internal error: {type(exc).__name__}: {exc} (at {where.name}, line {where.lineno})",
                    "this is a bug in envkit: re-run with -v and report the traceback", "internal")
    sys.exit(rv if isinstance(rv, int) else 0)
