"""The config layer's one declarative table reader.

A table of a user file (a [[cuda]] row of matrix.toml, [apt] of SITE.toml, a [[target]] of envkit.toml)
declares its keys once, as `Field`s: the key, the converter, the TOML types it accepts and its default.
`Table.read` checks a row against them and hands every problem, as a `Problem`, to the caller's report
function; the caller decides the wording and whether to go on: matrix.toml collects every problem with
its line, SITE.toml and envkit.toml raise the first one as a one-line InputError.
"""
from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a key the row must give."""

Kind = Union[type, tuple[type, ...]]


class Invalid(ValueError):
    """A converter's refusal: what is wrong with the value (a phrase that follows the key's place,
    e.g. "must be true or false") and the fix. The fix may say `{key}` or `{where}`: the file's reader
    fills in the key or its place ("[apt] mirror"). `at` names the element of the value that is wrong (an index
    of a list, a key of a table), for a reader that reports where it is."""

    def __init__(self, why: str, fix: str = "", at: tuple[Union[str, int], ...] = ()) -> None:
        super().__init__(why)
        self.why = why
        self.fix = fix
        self.at = at


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one key of a row. `what`: "unknown" (the key is not declared), "missing"
    (a required key is absent), "type" (the TOML type is not accepted) or "invalid" (the converter refused)."""

    key: str
    what: str
    why: str
    value: Any = None
    fix: str = ""
    allowed: tuple[str, ...] = ()
    at: tuple[Union[str, int], ...] = ()  # the element of the value the problem is in (Invalid.at)

    def fix_at(self, where: str) -> str:
        return self.fix.replace("{where}", where).replace("{key}", self.key)


Report = Callable[[Problem], None]


def identity(value: Any) -> Any:
    return value


def boolean(value: Any) -> bool:
    """A converter for true/false, refusing other TOML types (which `bool()` would take)."""
    if not isinstance(value, bool):
        raise Invalid("must be true or false", "write {key} = true")
    return value


def text(pattern: str, why: str, fix: str) -> Callable[[Any], str]:
    """A converter for a string that matches `pattern` whole; `why` may say {value}: the value's repr."""
    compiled = re.compile(pattern)

    def convert(value: Any) -> str:
        if not isinstance(value, str) or not compiled.fullmatch(value):
            raise Invalid(why.replace("{value}", repr(value)), fix)
        return value
    return convert


_CONVERTER_ERRORS = (InvalidVersion, InvalidSpecifier, ValueError, KeyError, TypeError, OverflowError)
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother = 60, 60


def type_name(value: Any) -> str:
    """A value's Python type name, as the readers' messages say it ("expected str, got list")."""
    return type(value).__name__


def _kind_name(kind: Kind) -> str:
    return " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__


def too_deep(doc: Any, limit: int) -> Optional[tuple[Union[str, int], ...]]:
    """The path (keys and indexes) of an array or table nested deeper than `limit`, or None; walked without
    recursion, so a document nested thousands deep is measured, not a RecursionError."""
    stack: list[tuple[Any, tuple[Union[str, int], ...]]] = [(doc, ())] if isinstance(doc, (dict, list)) else []
    while stack:
        value, path = stack.pop()
        if len(path) >= limit:
            return path
        items = value.items() if isinstance(value, dict) else enumerate(value)
        stack.extend((v, (*path, k)) for k, v in items if isinstance(v, (dict, list)))
    return None


@dataclass(frozen=True)
class Field:
    """One key of a table: `convert` turns the TOML value (first checked to be a `kind`) into the model's
    value; an absent key takes `default`, or is reported as `missing` when it is REQUIRED. `attr` is the
    model attribute it fills when that is not named like the key."""

    key: str
    convert: Callable[[Any], Any] = identity
    kind: Kind = str
    default: Any = REQUIRED
    attr: str = ""
    missing: str = "missing"

    @property
    def name(self) -> str:
        return self.attr or self.key

    def read(self, row: Mapping[str, Any], report: Report, default: Any = REQUIRED) -> Any:
        """The converted value, or the default; None after reporting a problem."""
        if self.key not in row:
            fallback = self.default if default is REQUIRED else default
            if fallback is REQUIRED:
                report(Problem(self.key, "missing", self.missing))
                return None
            return fallback
        value = row[self.key]
        if not isinstance(value, self.kind):
            report(Problem(self.key, "type", f"expected {_kind_name(self.kind)}, got {type_name(value)}", value))
            return None
        try:
            return self.convert(value)
        except Invalid as exc:
            report(Problem(self.key, "invalid", exc.why, value, exc.fix, at=exc.at))
        except _CONVERTER_ERRORS as exc:
            report(Problem(self.key, "invalid", str(exc) or f"invalid value {_SHORT.repr(value)}", value))
        return None


@dataclass(frozen=True)
class Table:
    """The declared keys of one table; `extra` names keys a row may carry that are read by hand
    (or accepted and ignored)."""

    fields: tuple[Field, ...]
    extra: tuple[str, ...] = ()

    @classmethod
    def of(cls, *fields: Field, extra: tuple[str, ...] = ()) -> Table:
        return cls(tuple(fields), extra)

    def __add__(self, other: Table) -> Table:
        return Table(self.fields + other.fields, self.extra + other.extra)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted({f.key for f in self.fields} | set(self.extra)))

    def check_keys(self, row: Mapping[str, Any], report: Report) -> None:
        allowed = self.keys
        for key in row:
            if key not in allowed:
                report(Problem(key, "unknown", f"unknown key (allowed: {', '.join(allowed)})", row[key], allowed=allowed))

    def convert(self, row: Mapping[str, Any], report: Report, defaults: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """Every declared field's value by its model attribute name (None where a problem was reported);
        `defaults` overrides declared defaults (a value inherited from an enclosing row)."""
        given = defaults or {}
        return {f.name: f.read(row, report, given.get(f.key, REQUIRED)) for f in self.fields}

    def read(self, row: Any, report: Report, defaults: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        if not isinstance(row, dict):
            report(Problem("", "type", f"expected a table, got {type_name(row)}", row))
            return {f.name: None for f in self.fields}
        self.check_keys(row, report)
        return self.convert(row, report, defaults)
