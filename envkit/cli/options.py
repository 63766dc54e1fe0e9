"""Options shared by several commands, each declared once. The eleven resolve flags come from
model/flags.py: `@resolve_flags` adds them to a command and hands it one ResolveFlags value."""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Optional, TypeVar

import typer

from envkit import ui
from envkit.errors import EXIT_NO_SOLUTION
from envkit.model.flags import RESOLVE_FLAGS, ResolveFlags
from envkit.model.solution import Unsolved

F = TypeVar("F", bound=Callable[..., Any])


def as_json(help: str = "print one stable JSON document") -> Any:
    return typer.Option(False, "--json", help=help)


def matrix(help: str = "another matrix.toml (default: the built-in one)") -> Any:
    return typer.Option(None, "--matrix", metavar="MATRIX.toml", help=help)


def lock(help: str) -> Any:
    return typer.Option(None, "--lock", metavar="envkit.lock.json", help=help)


def mirror(help: str) -> Any:
    return typer.Option(None, "--mirror", metavar="SITE.toml", help=help)


def host_facts() -> Any:
    return typer.Option(None, "--host-facts", metavar="FACTS.json",
                        help="with --gpu auto: the GPU host's facts recorded there (envkit doctor --json > FACTS.json) instead of this host's")


def junit(help: str) -> Any:
    return typer.Option(None, "--junit", metavar="FILE.xml", help=help)


SERVE_HELP = "a serving image: vLLM's OpenAI server on this local model directory (config.json, tokenizer, weights)"


def serve() -> Any:
    return typer.Option(None, "--serve", metavar="MODEL_DIR", help=SERVE_HELP)


def served_model_name() -> Any:
    return typer.Option(None, "--served-model-name", metavar="NAME", help="the model name clients ask for (default: the directory's name)")


def serve_arg() -> Any:
    return typer.Option([], "--serve-arg", metavar="ARG",
                        help="one argument for the server, after envkit's (repeatable), e.g. --serve-arg=--dtype=float32")


def model_mount() -> Any:
    return typer.Option(False, "--model-mount", help="do not bake the weights in: the site mounts them at /opt/envkit/model")


def serve_port() -> Any:
    from envkit.model.plan import SERVE_PORT  # the build commands' module imports it; doctor's does not

    return typer.Option(SERVE_PORT, "--serve-port", help="the port the server listens on in the container")


FORCE = typer.Option(False, "--force", help="replace an output directory envkit did not write")


def _completer(choices: tuple[str, ...]) -> Optional[Callable[[str], list[str]]]:
    if not choices:
        return None
    return lambda incomplete: [c for c in choices if c.startswith(incomplete)]


def resolve_flags(command: F) -> F:
    """Give `command(flags: ResolveFlags, ...)` the resolve flags as options of its own, in the declared order."""
    signature = inspect.signature(command)
    hints = typing.get_type_hints(command)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values() if p.name != "flags"]
    added = [inspect.Parameter(f.key, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                               default=typer.Option(None, f.option, help=f.help, metavar=f.metavar,
                                                                     autocompletion=_completer(f.choices)))
             for f in RESOLVE_FLAGS]

    @functools.wraps(command)
    def with_flags(**given: Any) -> Any:
        flags = ResolveFlags.from_mapping({f.key: given.pop(f.key) for f in RESOLVE_FLAGS})
        return command(flags=flags, **given)

    params = added + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    with_flags.__signature__ = signature.replace(parameters=params, return_annotation=hints.get("return", None))  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in params}
    return typing.cast(F, with_flags)


def finish(outcome: Any, as_json: bool, show: Callable[[Any], None], junit: Optional[str] = None, suite: str = "",
           cases: Callable[[], list[Any]] = list) -> None:
    """Show a use case's outcome: its JSON document, or `show` for people; with `junit`, its cases as JUnit XML too.
    Exit 1 when the query had no solution (the conflicts are shown) or the outcome is not ok."""
    if isinstance(outcome, Unsolved):
        ui.output.show_result(outcome.result, as_json)
        raise typer.Exit(EXIT_NO_SOLUTION)
    if junit:
        ui.junit.write(junit, suite, cases())
    if as_json:
        ui.output.print_json(outcome.to_json())
    else:
        show(outcome)
    if getattr(outcome, "ok", True) is False:
        raise typer.Exit(EXIT_NO_SOLUTION)
