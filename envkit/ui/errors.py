"""The one error dialect: `envkit: error: MESSAGE (fix: FIX)` on stderr, and with `--json` one JSON document on stdout
as well, so a CI job that parses stdout gets the error too. cli/main.py's `main` is the one place that calls `guarded`,
the one place that prints an error."""
from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable, Collection, NoReturn, Sequence

from envkit.errors import EXIT_BUG, EXIT_INTERRUPTED, EnvkitError, InputError

EXIT_USAGE = 2
KINDS = {2: "input", 3: "matrix", 4: "external", 5: "preflight", 6: "external"}  # 6: the server under test (a ServerError)
GLOBAL_OPTIONS = {"-v", "--verbose", "-q", "--quiet", "--progress", "--no-color", "--version"}


def command_path(exc: Any, args: Sequence[str], commands: Collection[str], matrix_commands: Collection[str]) -> str:
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "envkit"
    if path != "envkit":
        return path
    words = [a for a in args if not a.startswith("-")][:2]
    if words and words[0] == "matrix" and len(words) > 1 and words[1] in matrix_commands:
        return f"envkit matrix {words[1]}"
    if words and words[0] in set(commands) | {"matrix"}:
        return f"envkit {words[0]}"
    return "envkit"


def usage_error(exc: Any, path: str) -> tuple[str, str]:
    """Click's usage error (of the command at `path`) as envkit's message and fix."""
    help_hint = f"`{path} --help` lists them all"
    option = getattr(exc, "option_name", None)
    if option in GLOBAL_OPTIONS and path != "envkit":
        return str(getattr(exc, "message", exc)), f"{option} is a global option: put it before the command (envkit {option} ...)"
    possibilities = sorted(getattr(exc, "possibilities", None) or ())
    if possibilities:
        return str(getattr(exc, "message", exc)), f"did you mean {' or '.join(possibilities)}? {help_hint}"
    message = exc.format_message().strip().replace("\n", " ")
    if "Did you mean" in message:
        message, _, guess = message.partition(" Did you mean")
        return message.rstrip("."), f"did you mean{guess.rstrip('?')}? {help_hint}"
    return message.rstrip("."), f"see `{path} --help`"


def error_document(kind: str, code: int, message: str, fix: str) -> str:
    return json.dumps({"schema": 1, "ok": False, "error": {"kind": kind, "exit_code": code, "message": message, "fix": fix}},
                      indent=2) + "\n"


def one_line(text: str) -> str:
    """An outside tool's output inside a message (a traceback's last lines) joined into the one error line, its
    control characters escaped (a server's or a tool's words must not drive the terminal: fuzz report 3, D5)."""
    from envkit.model.redact import printable  # only when an error is printed: not on every command's path

    return printable(" | ".join(part.strip() for part in text.splitlines() if part.strip()))


def fail(argv: Sequence[str], code: int, message: str, fix: str, kind: str = "") -> NoReturn:
    """Print the error (and its JSON document with --json) and exit with its code."""
    kind = kind or KINDS.get(code, "error")
    line = f"{one_line(message)} (fix: {one_line(fix)})" if fix else one_line(message)
    sys.stderr.write(f"envkit: error: {line}\n")
    if "--json" in argv:
        sys.stdout.write(error_document(kind, code, message, fix))
    sys.exit(code)


def guarded(args: Sequence[str], run: Callable[[], Any], usage: type[Exception], commands: Collection[str],
            matrix_commands: Collection[str]) -> Any:
    """Run the command line; every error becomes its one line and exit code: envkit's own, the parser's `usage` errors
    (the same dialect and exit code), an interrupt, a closed pipe, and a bug in envkit (exit 70; the traceback with -v)."""
    from envkit.ui import settings

    try:
        nul = next((a for a in args if "\0" in a), None)
        if nul is not None:  # no shell can pass one; a program calling envkit can
            raise InputError(f"argument {nul!r} holds a NUL character", "pass arguments without NUL bytes")
        return run()
    except EnvkitError as exc:
        fail(args, exc.exit_code, exc.message, exc.fix)
    except KeyboardInterrupt:
        sys.stderr.write("envkit: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    except usage as exc:
        _usage(exc, args, commands, matrix_commands)
    except BrokenPipeError:  # `envkit matrix show | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:  # a bug in envkit
        if _is_abort(exc):
            sys.stderr.write("envkit: interrupted\n")
            sys.exit(EXIT_INTERRUPTED)
        if settings.current().verbose:
            traceback.print_exc()
        where = traceback.extract_tb(exc.__traceback__)[-1]
        fail(args, EXIT_BUG, f"internal error: {type(exc).__name__}: {exc} (at {where.name}, line {where.lineno})",
             "this is a bug in envkit: re-run with -v and report the traceback", "internal")


def _is_abort(exc: BaseException) -> bool:
    """click's Abort (typer.Abort: a prompt's Ctrl-C or EOF), a RuntimeError rather than a usage error."""
    return type(exc).__name__ == "Abort" and type(exc).__module__.split(".")[0] in ("click", "typer")


def _usage(exc: Any, args: Sequence[str], commands: Collection[str], matrix_commands: Collection[str]) -> NoReturn:
    if type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()
        sys.exit(0)
    if _is_abort(exc):
        sys.stderr.write("envkit: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    code = getattr(exc, "exit_code", EXIT_USAGE)
    message, fix = usage_error(exc, command_path(exc, args, commands, matrix_commands))
    fail(args, code if isinstance(code, int) else EXIT_USAGE, message, fix, "usage")
