"""Each command's options come from model/options.py (and the resolve flags from model/flags.py), declared once:
`@declared(COMMAND)` gives the function them as typer options, in the declared order, and hands it one `Args`
value (the resolve flags as one ResolveFlags value)."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from enum import Enum
from types import SimpleNamespace
from typing import Any, Callable, Optional, TypeVar

import typer

from envkit import ui
from envkit.errors import EXIT_NO_SOLUTION
from envkit.model.flags import RESOLVE_FLAGS, ResolveFlags
from envkit.model.options import COMMAND_OPTIONS, Opt
from envkit.model.solution import Unsolved

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Args = SimpleNamespace
_ANNOTATION: dict[str, Any] = {"text": Optional[str], "flag": bool, "int": Optional[int], "float": Optional[float], "list": list[str],
                               "argument": Optional[str]}


def _completer(choices: tuple[str, ...]) -> Optional[Callable[[str], list[str]]]:
    if not choices:
        return None
    return lambda incomplete: [c for c in choices if c.startswith(incomplete)]


def _parameter(o: Opt) -> inspect.Parameter:
    """The typer parameter of one declared option (a choice as an Enum, as typer spells a closed set)."""
    annotation = _ANNOTATION.get(o.kind)
    default = ... if o.required else ([] if o.kind == "list" else False if o.kind == "flag" and o.default is None else o.default)
    if o.kind == "choice":
        choice: Any = Enum(o.key, {c: c for c in o.choices}, type=str)  # type: ignore[misc]
        default = ... if o.required else (None if o.default is None else choice(o.default))
        annotation = choice if o.required or o.default is not None else Optional[choice]
    settings = (("metavar", o.metavar), ("min", o.minimum), ("envvar", o.envvar), ("show_default", o.show_default))
    extra: dict[str, Any] = {k: v for k, v in settings if v is not None}
    if o.kind == "argument":
        info = typer.Argument(default, help=o.help, **extra)
    else:
        info = typer.Option(default, *o.names, help=o.help, **extra)
    return inspect.Parameter(o.key, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=info)


def _resolve_parameters() -> list[inspect.Parameter]:
    return [inspect.Parameter(f.key, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                              default=typer.Option(None, f.option, help=f.help, metavar=f.metavar, autocompletion=_completer(f.choices)))
            for f in RESOLVE_FLAGS]


def declared(command: str, resolve: bool = False) -> Callable[[F], F]:
    """Give `fn(args)` (or `fn(flags, args)` with `resolve`) the command's declared options; a choice arrives as its text."""
    specs = COMMAND_OPTIONS[command]

    def decorate(fn: F) -> F:
        params = (_resolve_parameters() if resolve else []) + [_parameter(o) for o in specs]

        @functools.wraps(fn)
        def with_options(**given: Any) -> Any:
            flags = ResolveFlags.from_mapping({f.key: given.pop(f.key) for f in RESOLVE_FLAGS}) if resolve else None
            values = {k: v.value if isinstance(v, Enum) else v for k, v in given.items()}
            return fn(flags, Args(**values)) if resolve else fn(Args(**values))

        with_options.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        with_options.__annotations__ = {p.name: p.annotation for p in params}
        return typing.cast(F, with_options)
    return decorate


def request(cls: Callable[..., T], a: Args, **given: Any) -> T:
    """A use case's request from the options named as its fields (a list as a tuple); `given` sets the others."""
    names = {f.name for f in dataclasses.fields(cls)} - set(given)  # type: ignore[arg-type]
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in vars(a).items() if k in names}, **given)


def reporting(run: Callable[[Any], T], stderr: bool = True) -> T:
    """Run a use case with the progress reporter drawn on stderr (or stdout)."""
    with ui.progress.reporter(ui.progress.console(stderr=stderr)) as reporter:
        return run(reporter)


def finish(outcome: Any, as_json: bool, show: Callable[[Any], None], junit: Optional[str] = None, suite: str = "",
           cases: Callable[[], list[Any]] = list) -> None:
    """Show a use case's outcome: its JSON document, or `show` for people; with `junit`, its cases as JUnit XML too.
    Exit 1 when the query had no solution (the conflicts are shown) or the outcome is not ok (its `exit_code` where it
    has one)."""
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
        raise typer.Exit(getattr(outcome, "exit_code", EXIT_NO_SOLUTION))
